//! The WDA commands: one module per command (or close family) holding its spec,
//! typed arguments and implementation over [`crate::runner`]. Every command runs
//! against the host's deadline and races the host's cancellation; dropping the
//! work closes its HTTP requests and devicectl children.

use aab_plugin_api::Commands;

use crate::WdaProvider;

mod input;
mod native;
mod orientation;
mod session;
pub(crate) mod setup;
mod status;
mod tap;
mod tree;

/// Every WDA command, in catalog order.
pub fn list() -> Commands<WdaProvider> {
    Commands::new()
        .add::<status::WdaStatus>()
        .add::<session::WdaSession>()
        .add::<tree::UiaTree>()
        .add::<tap::Tap>()
        .add::<native::TapNative>()
        .add::<native::InputNativeText>()
        .add::<input::Input>()
        .add::<tap::Swipe>()
        .add::<orientation::SetOrientation>()
        .add::<setup::Setup>()
}

pub(crate) use aab_ios_transport::command::cancellable;

/// The arguments struct of an App-scoped command: the four ids of
/// [`crate::manifest::APP_REQUIRED`] and the connection options every such
/// command takes, then the command's own fields (unknown fields are refused).
macro_rules! app_args {
    ($name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub struct $name {
            pub device_id: String,
            pub wda_runner_bundle_id: String,
            pub bundle_id: String,
            pub wda_session_id: String,
            pub wda_url: Option<String>,
            pub devicectl: Option<String>,
            $(pub $field: $ty,)*
        }
    };
}
pub(crate) use app_args;

/// The [`crate::runner::Reach`] of an arguments struct with the connection fields.
macro_rules! reach {
    ($a:expr) => {
        crate::runner::Reach { device_id: &$a.device_id, runner_bundle_id: &$a.wda_runner_bundle_id, wda_url: $a.wda_url.as_deref(), devicectl: $a.devicectl.as_deref() }
    };
}
pub(crate) use reach;

#[cfg(test)]
mod tests {
    use super::*;
    use aab_plugin_api::CommandSpec;
    use serde_json::{Value, json};

    fn specs() -> Vec<CommandSpec> {
        list().specs().cloned().collect()
    }

    fn spec(name: &str) -> CommandSpec {
        specs().into_iter().find(|s| s.command == name).unwrap()
    }

    /// The host's own validator over the schema the host uses.
    fn valid(name: &str, args: Value) -> bool {
        aab_plugin_api::validate::compile(&spec(name).input_schema).unwrap().is_valid(&args)
    }

    fn app(extra: Value) -> Value {
        let mut a = json!({"deviceId": "00008110-000A1C2E3F", "wdaRunnerBundleId": "io.github.mobileaidev.aiappbridge.wda.xctrunner", "bundleId": "com.example.demo", "wdaSessionId": "5F0C2A1B-3D4E-4F60-8A9B-0C1D2E3F4A5B"});
        if let (Value::Object(a), Value::Object(e)) = (&mut a, extra) {
            a.extend(e);
        }
        a
    }

    #[test]
    fn the_manifest_passes_the_sdk_checks() {
        let names: Vec<String> = specs().iter().map(|c| c.command.clone()).collect();
        assert_eq!(names, ["ios-wda-status", "ios-wda-session", "ios-uia-tree", "ios-tap", "ios-tap-native", "ios-input-native-text", "ios-input", "ios-swipe", "ios-set-orientation", "ios-setup"]);
        crate::manifest::manifest().commands(specs()).check().unwrap();
        for s in specs() {
            assert_eq!((s.platform.as_str(), s.domain.as_str()), ("ios", "ios"), "{}", s.command);
            let timeout = if s.command == "ios-setup" { 300_000 } else { 30_000 };
            assert_eq!(s.default_timeout_ms, timeout, "{}", s.command);
        }
    }

    #[test]
    fn permissions_mutations_and_device_keys_follow_the_catalog() {
        use aab_plugin_api::protocol::Mutation;
        for (name, perm, mutation) in [
            ("ios-wda-status", Some("app.read"), Mutation::None),
            ("ios-uia-tree", Some("app.read"), Mutation::None),
            ("ios-wda-session", Some("app.interact"), Mutation::Conditional),
            ("ios-tap", Some("app.interact"), Mutation::Always),
            ("ios-tap-native", Some("app.interact"), Mutation::Always),
            ("ios-input-native-text", Some("app.interact"), Mutation::Always),
            ("ios-input", Some("app.interact"), Mutation::Always),
            ("ios-swipe", Some("app.interact"), Mutation::Always),
            ("ios-set-orientation", Some("app.interact"), Mutation::Always),
            ("ios-setup", None, Mutation::Always),
        ] {
            let s = spec(name);
            assert_eq!((s.script_permission.as_deref(), &s.mutation), (perm, &mutation), "{name}");
            if mutation != Mutation::None {
                assert_eq!(s.device_key, ["deviceId"], "{name}: ownership is per device, shared with the ios plugin");
            }
        }
        assert_eq!(spec("ios-wda-session").mutating_operations, ["create", "close"]);
        assert_eq!(spec("ios-setup").role, "expert");
    }

    #[test]
    fn the_four_ids_are_required_exactly_where_the_catalog_says() {
        let runner = json!({"deviceId": "d", "wdaRunnerBundleId": "r.xctrunner"});
        assert!(valid("ios-wda-status", runner.clone()));
        assert!(!valid("ios-wda-status", json!({"deviceId": "d"})));
        assert!(!valid("ios-wda-status", app(json!({}))), "status takes no App or session");
        assert!(valid("ios-uia-tree", app(json!({}))));
        for missing in ["deviceId", "wdaRunnerBundleId", "bundleId", "wdaSessionId"] {
            let mut a = app(json!({"tapX": 1, "tapY": 2}));
            a.as_object_mut().unwrap().remove(missing);
            assert!(!valid("ios-tap", a), "ios-tap without {missing}");
        }
        assert!(valid("ios-tap", app(json!({"tapX": 10.5, "tapY": 20}))));
        assert!(!valid("ios-tap", app(json!({"tapX": 100001, "tapY": 20}))), "the Runner takes 0..100000");
        assert!(!valid("ios-tap", app(json!({"tapX": 1}))));
        assert!(!valid("ios-uia-tree", app(json!({"iosHost": "127.0.0.1"}))), "SDK-only options are not WDA options");
        assert!(valid("ios-uia-tree", app(json!({"wdaUrl": "http://127.0.0.1:8100", "devicectl": "/usr/bin/xcrun", "maxNodes": 50}))));
        assert!(!valid("ios-uia-tree", app(json!({"wdaUrl": "https://127.0.0.1:8100"}))), "no TLS in this build");
        assert!(!valid("ios-uia-tree", app(json!({"bundleId": "bad id"}))));
    }

    #[test]
    fn session_operations_take_exactly_their_ids() {
        let base = |op: &str, extra: Value| {
            let mut a = json!({"operation": op, "deviceId": "d", "wdaRunnerBundleId": "r.xctrunner"});
            if let (Value::Object(a), Value::Object(e)) = (&mut a, extra) {
                a.extend(e);
            }
            a
        };
        assert!(valid("ios-wda-session", base("status", json!({}))));
        assert!(!valid("ios-wda-session", base("status", json!({"bundleId": "com.example"}))));
        assert!(!valid("ios-wda-session", base("status", json!({"wdaSessionId": "S"}))));
        assert!(valid("ios-wda-session", base("create", json!({"bundleId": "com.example"}))));
        assert!(!valid("ios-wda-session", base("create", json!({}))));
        assert!(!valid("ios-wda-session", base("create", json!({"bundleId": "com.example", "wdaSessionId": "S"}))), "create never names (or replaces) a session");
        assert!(valid("ios-wda-session", base("close", json!({"bundleId": "com.example", "wdaSessionId": "S"}))));
        assert!(!valid("ios-wda-session", base("close", json!({"bundleId": "com.example"}))));
        assert!(!valid("ios-wda-session", base("open", json!({}))));
    }

    #[test]
    fn selectors_inputs_and_orientations_are_exact() {
        let sel = |s: Value| app(json!({"selector": s}));
        assert!(valid("ios-tap-native", sel(json!({"accessibilityId": "save"}))));
        assert!(valid("ios-tap-native", sel(json!({"label": "Save", "type": "XCUIElementTypeButton"}))));
        assert!(!valid("ios-tap-native", sel(json!({"label": "Save", "elementId": "U1"}))), "exactly one key");
        assert!(!valid("ios-tap-native", sel(json!({"type": "XCUIElementTypeButton"}))));
        assert!(!valid("ios-tap-native", sel(json!({"text": "Save"}))));
        assert!(!valid("ios-tap-native", app(json!({}))));
        let mut with_text = sel(json!({"accessibilityId": "name"}));
        with_text["text"] = json!("x".repeat(16384));
        assert!(valid("ios-input-native-text", with_text.clone()));
        with_text["text"] = json!("x".repeat(16385));
        assert!(!valid("ios-input-native-text", with_text));
        assert!(!valid("ios-input-native-text", sel(json!({"accessibilityId": "name"}))), "text is required");
        assert!(valid("ios-input", app(json!({"elementId": "U5", "text": "", "clearFirst": true}))));
        assert!(valid("ios-input", app(json!({"accessibilityId": "name", "text": "hi"}))));
        assert!(!valid("ios-input", app(json!({"accessibilityId": "name", "elementId": "U5", "text": "hi"}))));
        assert!(!valid("ios-input", app(json!({"text": "hi"}))));
        assert!(valid("ios-swipe", app(json!({"startX": 1, "startY": 2, "endX": 3, "endY": 4, "durationMs": 120000}))));
        assert!(!valid("ios-swipe", app(json!({"startX": 1, "startY": 2, "endX": 3, "endY": 4, "durationMs": 0}))));
        assert!(!valid("ios-swipe", app(json!({"startX": 1, "startY": 2, "endX": 3}))));
        assert!(valid("ios-set-orientation", app(json!({"orientation": "landscapeLeft"}))));
        assert!(!valid("ios-set-orientation", app(json!({"orientation": "landscape"}))));
        let session = json!({"schemaVersion": "aab.ios-native-session/v1", "runnerEpoch": "E", "bundleId": "com.example.demo", "processId": 4, "sessionId": "S"});
        assert!(valid("ios-set-orientation", app(json!({"orientation": "portrait", "expectedSession": session}))));
        let mut wrong = session.clone();
        wrong["schemaVersion"] = json!("aab.ios-native-target/v1");
        assert!(!valid("ios-set-orientation", app(json!({"orientation": "portrait", "expectedSession": wrong}))));
    }

    #[test]
    fn setup_arguments_are_checked_by_the_schema() {
        assert!(valid("ios-setup", json!({"deviceId": "d", "teamId": "ABCDE12345"})));
        assert!(valid("ios-setup", json!({"deviceId": "d", "teamId": "ABCDE12345", "wdaTestBundleId": "com.acme.wda", "startWda": false, "xcodebuild": "/x/xcodebuild"})));
        assert!(!valid("ios-setup", json!({"deviceId": "d", "teamId": "ABCDE12345", "wdaProjectPath": "/x"})), "removed options stay removed");
        assert!(!valid("ios-setup", json!({"deviceId": "d", "teamId": "bad team"})));
    }

    #[test]
    fn the_native_intent_provider_is_the_ios_default() {
        let m = crate::manifest::manifest();
        let p = m.intent_providers.iter().find(|p| p.platform == "ios").unwrap();
        assert!(p.default);
        assert_eq!((p.provider.as_str(), p.observe.command.as_str()), ("native", "ios-uia-tree"));
        let actions: Vec<(&str, &str)> = p.actions.iter().map(|a| (a.action.as_str(), a.command.as_str())).collect();
        assert_eq!(actions, [("tap", "ios-tap-native"), ("inputText", "ios-input-native-text"), ("setOrientation", "ios-set-orientation")]);
        assert_eq!(p.actions[0].arguments_template["expectedTarget"], "${element.expectedTarget}");
        assert_eq!(p.actions[2].arguments_template["expectedSession"], "${observation.session}");
        assert!(m.environment.contains(&crate::manifest::XCODEBUILD_ENV.to_string()));
    }
}
