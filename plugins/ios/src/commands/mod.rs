//! The iOS SDK commands: one module per command family holding its specs, typed
//! arguments and implementation over [`crate::runtime`] (devicectl, descriptor,
//! verified HTTP) and [`crate::managed`] (managed writes). Every command runs
//! against the host's deadline and races the host's cancellation; dropping the
//! work kills devicectl children and closes sockets.

use std::future::Future;

use aab_ios_transport::Deadline;
use aab_ios_transport::sdk::Connection;
use aab_plugin_api::{Commands, Context, ProviderError};

use crate::IosProvider;
use crate::runtime::Target;

mod app;
mod capture;
mod devices;
mod execution;
mod flutter;
mod h5;
mod reads;
mod screenshot;
mod ui_observation;

/// Every iOS SDK command, in catalog order.
pub fn list() -> Commands<IosProvider> {
    Commands::new()
        .add::<devices::Doctor>()
        .add::<devices::Devices>()
        .add::<app::InstallApp>()
        .add::<app::LaunchApp>()
        .add::<reads::Status>()
        .add::<reads::Tree>()
        .add::<screenshot::Screenshot>()
        .add::<capture::Logs>()
        .add::<capture::Network>()
        .add::<capture::State>()
        .add::<capture::Events>()
        .add::<h5::Dom>()
        .add::<h5::Click>()
        .add::<h5::Input>()
        .add::<h5::Scroll>()
        .add::<h5::Eval>()
        .add::<flutter::Tree>()
        .add::<flutter::Nodes>()
        .add::<flutter::Action>()
        .add::<flutter::Tap>()
        .add::<flutter::InputText>()
        .add::<flutter::Scroll>()
        .add::<flutter::Back>()
        .add::<flutter::HideKeyboard>()
        .add::<ui_observation::UiObservation>()
        .add::<execution::Execution>()
}

/// The common option bundle, as typed fields of a command's arguments:
/// serde's `flatten` cannot be combined with `deny_unknown_fields`, so every
/// argument type spells the bundle out through this one macro. The caller picks
/// whether `deviceId`/`bundleId` are required (`String`) or optional
/// (`Option<String>`); its schema says the same.
macro_rules! ios_args {
    ($(#[$meta:meta])* $name:ident (device_id: $device:ty, bundle_id: $bundle:ty) { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        // Every command accepts the whole bundle; each reads only what it uses.
        #[allow(dead_code)]
        pub struct $name {
            pub device_id: $device,
            pub bundle_id: $bundle,
            pub runtime_url: Option<String>,
            pub ios_host: Option<String>,
            pub ios_port: Option<u16>,
            pub devicectl: Option<String>,
            pub wda_url: Option<String>,
            pub wda_session_id: Option<String>,
            pub xcodebuild: Option<String>,
            $($(#[$fmeta])* pub $field: $ty),*
        }
    };
}
pub(crate) use ios_args;

/// The arguments of an app command (`deviceId` and `bundleId` required), with
/// the [`Target`] they name.
macro_rules! app_args {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $crate::commands::ios_args!($(#[$meta])* $name (device_id: String, bundle_id: String) { $($(#[$fmeta])* $field: $ty),* });
        #[allow(dead_code)]
        impl $name {
            pub fn target(&self) -> $crate::runtime::Target {
                $crate::runtime::Target {
                    device_id: self.device_id.clone(),
                    bundle_id: self.bundle_id.clone(),
                    overrides: aab_ios_transport::sdk::Overrides { runtime_url: self.runtime_url.clone(), ios_host: self.ios_host.clone(), ios_port: self.ios_port },
                    devicectl: self.devicectl.clone(),
                }
            }
        }
    };
}
pub(crate) use app_args;

app_args!(
    /// Commands with only the common bundle.
    AppArgs {}
);

pub use aab_ios_transport::command::{cancellable, deadline};

/// Connect, then run a read on the connection (bad overrides fail before any
/// device access).
pub async fn read_with<F, Fut>(ctx: &Context<'_>, target: Target, read: F) -> Result<serde_json::Value, ProviderError>
where
    F: FnOnce(Connection, Deadline) -> Fut,
    Fut: Future<Output = Result<serde_json::Value, ProviderError>>,
{
    let deadline = deadline(ctx);
    target.check()?;
    cancellable(ctx, async move {
        let conn = target.connect(deadline).await?;
        read(conn, deadline).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use aab_plugin_api::CommandSpec;

    #[test]
    fn the_manifest_passes_the_sdk_checks() {
        let specs: Vec<CommandSpec> = list().specs().cloned().collect();
        let names: Vec<&str> = specs.iter().map(|c| c.command.as_str()).collect();
        assert_eq!(
            names,
            [
                "ios-doctor", "ios-devices", "ios-install-app", "ios-launch-app", "ios-status", "ios-tree", "ios-screenshot", "ios-logs", "ios-network", "ios-state", "ios-events",
                "ios-h5-dom", "ios-h5-click", "ios-h5-input", "ios-h5-scroll", "ios-h5-eval", "ios-flutter-tree", "ios-flutter-nodes", "ios-flutter-action", "ios-tap-flutter",
                "ios-input-flutter-text", "ios-scroll-flutter", "ios-flutter-back", "ios-flutter-hide-keyboard", "ios-ui-observation", "ios-execution"
            ]
        );
        crate::manifest::manifest().commands(specs).check().unwrap();
    }

    /// aab-host §1.3 (Script permissions; `denyDefault` ios-install-app and the
    /// `denyPermanent` expert ios-h5-eval carry none), §1.4 (mutations), §10
    /// (deadlines), and one device journal per mutation.
    #[test]
    fn permissions_mutations_and_deadlines_follow_the_catalog() {
        use aab_plugin_api::protocol::Mutation;
        let specs: Vec<CommandSpec> = list().specs().cloned().collect();
        let perm = |c: &str| specs.iter().find(|s| s.command == c).unwrap().script_permission.clone();
        for c in ["ios-status", "ios-tree", "ios-screenshot", "ios-flutter-tree", "ios-flutter-nodes", "ios-h5-dom"] {
            assert_eq!(perm(c).as_deref(), Some("app.read"), "{c}");
        }
        for c in ["ios-ui-observation", "ios-logs", "ios-network", "ios-state", "ios-events"] {
            assert_eq!(perm(c).as_deref(), Some("capture.read"), "{c}");
        }
        for c in ["ios-h5-click", "ios-h5-input", "ios-h5-scroll", "ios-launch-app", "ios-tap-flutter", "ios-input-flutter-text", "ios-scroll-flutter", "ios-flutter-back", "ios-flutter-hide-keyboard"] {
            assert_eq!(perm(c).as_deref(), Some("app.interact"), "{c}");
        }
        for c in ["ios-doctor", "ios-devices", "ios-install-app", "ios-h5-eval", "ios-flutter-action", "ios-execution"] {
            assert_eq!(perm(c), None, "{c} is not callable from a Script");
        }
        let mutations: Vec<&str> = specs.iter().filter(|s| s.mutation != Mutation::None).map(|s| s.command.as_str()).collect();
        assert_eq!(mutations, ["ios-install-app", "ios-launch-app", "ios-h5-click", "ios-h5-input", "ios-h5-scroll", "ios-h5-eval", "ios-flutter-action", "ios-tap-flutter", "ios-input-flutter-text", "ios-scroll-flutter", "ios-flutter-back", "ios-flutter-hide-keyboard"]);
        for s in &specs {
            let mutation = s.mutation != Mutation::None;
            let reconciles = s.command == "ios-execution";
            assert_eq!(s.device_key == ["deviceId".to_string()], mutation || reconciles, "{}: device journal iff mutation", s.command);
            if mutation {
                assert!(s.input_schema["required"].as_array().unwrap().contains(&serde_json::json!("deviceId")), "{}", s.command);
            }
            let expert = ["ios-h5-eval", "ios-flutter-action"].contains(&s.command.as_str());
            assert_eq!(s.role == "expert", expert, "{}", s.command);
            let default = if s.command == "ios-install-app" { 120_000 } else { 30_000 };
            assert_eq!(s.default_timeout_ms, default, "{}", s.command);
            assert_eq!((s.platform.as_str(), s.domain.as_str()), ("ios", "ios"));
        }
    }
}
