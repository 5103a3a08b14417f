//! The Android commands: one module per command (or close family) holding its spec,
//! typed arguments and implementation over the transport ([`crate::adb`],
//! [`crate::sdk`]). Every command runs against the host's deadline and races the
//! host's cancellation; dropping the work closes its adb sockets.

use std::future::Future;
use std::time::Duration;

use aab_plugin_api::{Commands, Context, ProviderError};
use serde::Deserialize;

use crate::AndroidProvider;
use crate::adb::device::Device;
use crate::adb::server::AdbServer;
use crate::adb::{Deadline, select};
use crate::manifest::DEFAULT_ADB_TIMEOUT_MS;
use crate::sdk::SdkTarget;

mod capture;
mod forward;
mod input_text;
mod keyboard_state;
mod logcat;
mod native_gesture;
mod permission_state;
mod screenshot;
mod status;
mod tap;
mod tap_native;
mod tap_text;
mod tree;
mod ui_observation;
mod wait_text;
mod swipe;
mod keyevent;
mod hide_keyboard;
mod launch;
mod clear_app_data;
mod freeze;
mod permission_change;
mod appops_set;
mod h5;
mod flutter;
mod flutter_h5;
mod uia;
pub(crate) mod install_apk;
mod permission_dialog;
mod webview;
pub(crate) mod executor;

/// How long before the host's deadline a polling wait gives up, so that its own
/// timeout (`h5_wait_timeout`, `wait_text_timeout`, …) carries the last look instead
/// of the host's `deadline_exceeded`. The margin covers a read still unwinding at the
/// wait's end on a loaded machine (a tenth — 80 ms of an 800 ms wait — lost that
/// race in CI).
pub(crate) fn wait_margin(remaining: Duration) -> Duration {
    (remaining / 4).clamp(Duration::from_millis(20), Duration::from_millis(500))
}

/// Every Android command, in catalog order. One line per command: adding a command
/// is a module with its spec, typed arguments and code, plus its line here.
pub fn list() -> Commands<AndroidProvider> {
    Commands::new()
        .add::<status::Status>()
        .add::<tree::Tree>()
        .add::<screenshot::Screenshot>()
        .add::<capture::Logs>()
        .add::<capture::State>()
        .add::<capture::Network>()
        .add::<capture::Events>()
        .add::<logcat::Logcat>()
        .add::<keyboard_state::KeyboardState>()
        .add::<permission_state::PermissionState>()
        .add::<wait_text::WaitText>()
        .add::<ui_observation::UiObservation>()
        .add::<forward::Forward>()
        .add::<forward::RemoveForward>()
        .add::<tap::Tap>()
        .add::<tap_native::TapNative>()
        .add::<tap_text::TapText>()
        .add::<input_text::InputText>()
        .add::<native_gesture::NativeGesture>()
        .add::<swipe::Swipe>()
        .add::<keyevent::Keyevent>()
        .add::<hide_keyboard::HideKeyboard>()
        .add::<launch::LaunchApp>()
        .add::<launch::LaunchActivity>()
        .add::<clear_app_data::ClearAppData>()
        .add::<freeze::FreezeApp>()
        .add::<freeze::ThawApp>()
        .add::<permission_change::PermissionGrant>()
        .add::<permission_change::PermissionRevoke>()
        .add::<appops_set::AppopsSet>()
        .add::<h5::H5Dom>()
        .add::<h5::H5Click>()
        .add::<h5::H5Input>()
        .add::<h5::H5Wait>()
        .add::<h5::H5Scroll>()
        .add::<h5::H5Eval>()
        .add::<flutter::FlutterTree>()
        .add::<flutter::FlutterNodes>()
        .add::<flutter::FlutterAction>()
        .add::<flutter::TapFlutter>()
        .add::<flutter::TapFlutterText>()
        .add::<flutter::InputFlutterText>()
        .add::<flutter::ScrollFlutter>()
        .add::<flutter_h5::FlutterH5Dom>()
        .add::<flutter_h5::FlutterH5Click>()
        .add::<flutter_h5::FlutterH5Input>()
        .add::<flutter_h5::FlutterH5Wait>()
        .add::<flutter_h5::FlutterH5Scroll>()
        .add::<flutter_h5::FlutterH5Eval>()
        .add::<install_apk::InstallApk>()
        .add::<install_apk::InstallApkStatus>()
        .add::<permission_dialog::PermissionDialog>()
        .add::<permission_dialog::PermissionDialogStatus>()
        .add::<uia::UiaRuntime>()
        .add::<uia::UiaTree>()
        .add::<uia::TapUia>()
        .add::<uia::TapUiaText>()
        .add::<webview::WebviewPages>()
        .add::<webview::WebviewNetwork>()
        .add::<webview::WebviewConsole>()
        .add::<executor::AndroidExecutor>()
        .add::<executor::FlutterExecutor>()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveForwardArgs {
    pub serial: String,
    pub port: u16,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// The command's deadline and the per-adb-step cap inside it.
pub(crate) struct Budget {
    pub deadline: Deadline,
    pub adb_step: Duration,
}

impl Budget {
    pub fn new(ctx: &Context<'_>, adb_timeout_ms: Option<u64>) -> Self {
        Budget { deadline: Deadline::after(ctx.remaining()), adb_step: Duration::from_millis(adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS)) }
    }
    pub fn adb(&self) -> Deadline {
        self.deadline.capped(self.adb_step)
    }
}

/// `v` with every field of `base` it lacks (the identity facts every answer of a
/// settle call repeats).
pub(crate) fn with_defaults(mut v: serde_json::Value, base: &serde_json::Value) -> serde_json::Value {
    if let (serde_json::Value::Object(m), serde_json::Value::Object(b)) = (&mut v, base) {
        for (k, x) in b {
            m.entry(k.clone()).or_insert_with(|| x.clone());
        }
    }
    v
}

/// Run `work` unless the host cancels first (then the work is dropped).
pub(crate) async fn cancellable<T>(ctx: &Context<'_>, work: impl Future<Output = Result<T, ProviderError>>) -> Result<T, ProviderError> {
    tokio::select! {
        r = work => r,
        _ = ctx.cancelled() => Err(ProviderError::new(aab_plugin_api::codes::CANCELLED, "the command was cancelled or its deadline passed")),
    }
}

/// The adb server of this call and the selected device.
pub(crate) async fn device(adb: Option<&str>, serial: Option<&str>, budget: &Budget) -> Result<Device, ProviderError> {
    let server = AdbServer::from_process_env(adb.map(str::to_string))?;
    let selected = select::select(&server, serial, budget.adb()).await?;
    Ok(Device::new(server, selected.serial))
}

/// The step every app command starts with: select the device, then find (or make)
/// the verified forward to the app's SDK (§2.1). Returns the selected serial too.
pub(crate) async fn sdk_route(args: &AppArgs, budget: &Budget) -> Result<(String, crate::sdk::Route), ProviderError> {
    let device = device(args.adb.as_deref(), args.serial.as_deref(), budget).await?;
    let serial = device.serial.clone();
    let target = SdkTarget { device, package: args.package_name.clone(), port: args.port };
    Ok((serial, target.route(budget.adb()).await?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aab_plugin_api::CommandSpec;

    #[test]
    fn the_manifest_passes_the_sdk_checks() {
        let specs: Vec<CommandSpec> = list().specs().cloned().collect();
        let names: Vec<&str> = specs.iter().map(|c| c.command.as_str()).collect();
        assert_eq!(names, ["status", "tree", "screenshot", "logs", "state", "network", "events", "logcat", "keyboard-state", "permission-state", "wait-text", "ui-observation", "forward", "remove-forward", "tap", "tap-native", "tap-text", "input-text", "native-gesture", "swipe", "keyevent", "hide-keyboard", "launch-app", "launch-activity", "clear-app-data", "freeze-app", "thaw-app", "permission-grant", "permission-revoke", "appops-set", "h5-dom", "h5-click", "h5-input", "h5-wait", "h5-scroll", "h5-eval", "flutter-tree", "flutter-nodes", "flutter-action", "tap-flutter", "tap-flutter-text", "input-flutter-text", "scroll-flutter", "flutter-h5-dom", "flutter-h5-click", "flutter-h5-input", "flutter-h5-wait", "flutter-h5-scroll", "flutter-h5-eval", "install-apk", "install-apk-status", "permission-dialog", "permission-dialog-status", "uia-runtime", "uia-tree", "tap-uia", "tap-uia-text", "webview-pages", "webview-network", "webview-console", "android-executor", "flutter-executor"]);
        crate::manifest::manifest().commands(specs).check().unwrap();
    }
}
