//! The `wda` plugin manifest, the schema pieces every WDA command spec shares (the
//! iOS option bundle as WDA uses it: `deviceId`, `wdaRunnerBundleId`, `bundleId`,
//! `wdaSessionId`, `wdaUrl`, `devicectl`), and the `native` Intent provider of the
//! `ios` platform. Each command's own spec lives beside its code in
//! [`crate::commands`].

use aab_ios_transport::schema::merge;
use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentSummarize};
use aab_plugin_api::{CommandSpec, Manifest};
use serde_json::{Value, json};

/// The environment variable naming the `xcodebuild` program (`ios-setup`).
pub const XCODEBUILD_ENV: &str = "AI_APP_BRIDGE_XCODEBUILD";

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("wda", env!("CARGO_PKG_VERSION")).platforms(["ios"]);
    // Which devicectl finds the devices and which xcodebuild builds the Runner: a
    // client with other values must not share a runtime started with these.
    m.environment = vec![aab_ios_transport::devicectl::DEVICECTL_ENV.into(), XCODEBUILD_ENV.into()];
    // Journals and lanes by physical device (`ios:<UDID>`, shared with the ios plugin).
    m.features = vec!["device-ownership.device-key".into()];
    let commands = crate::commands::list().specs().map(|c| c.command.clone()).collect::<Vec<_>>();
    if commands.iter().any(|c| c == "ios-uia-tree") {
        m.intent_providers = vec![native_intent_provider(&commands)];
    }
    m
}

/// Device ids: a CoreDevice identifier, UDID, serial number or device name.
pub(crate) fn device_id() -> Value {
    aab_ios_transport::schema::device_id()
}

pub(crate) use aab_ios_transport::schema::bundle_id;

pub(crate) fn session_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,256}$", "description": "The WDA session (from ios-wda-session create)"})
}

/// Schema of an orientation (App interface direction).
pub(crate) fn orientation() -> Value {
    json!({"type": "string", "enum": ["portrait", "landscapeLeft", "landscapeRight", "portraitUpsideDown"], "description": "App interface orientation"})
}

/// The connection options of every WDA command, plus `extra`.
pub(crate) fn props(extra: Value) -> Value {
    let p = json!({
        "deviceId": device_id(),
        "wdaRunnerBundleId": bundle_id("The prepared Runner app (the test bundle id + .xctrunner) whose container holds the WDA descriptor"),
        "wdaUrl": {"type": "string", "minLength": 8, "maxLength": 2048, "pattern": "^http://[^\\s?#]+$", "description": "An explicitly forwarded http:// endpoint of the Runner (default: the developer tunnel address and the descriptor's port); its identity is still verified"},
        "devicectl": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "devicectl program (default: $AI_APP_BRIDGE_DEVICECTL, then xcrun devicectl)"}
    });
    merge(p, extra)
}

/// [`props`] with the App and its session (every command but status/session).
pub(crate) fn app_props(extra: Value) -> Value {
    let p = props(json!({"bundleId": bundle_id("The App under test (must be the session's App, in the foreground)"), "wdaSessionId": session_id()}));
    merge(p, extra)
}

/// The four ids an App-scoped WDA command requires.
pub(crate) const APP_REQUIRED: [&str; 4] = ["deviceId", "wdaRunnerBundleId", "bundleId", "wdaSessionId"];

pub(crate) use aab_ios_transport::schema::object;

/// A screen coordinate in points (the Runner takes 0..100000).
pub(crate) fn coordinate(what: &str) -> Value {
    json!({"type": "number", "minimum": 0, "maximum": 100000, "description": what})
}

/// The common spec of a WDA command: ios domain and platform, one call at a time
/// per device (mutations and reads on separate lanes), contract deadline 30 s.
fn base(spec: CommandSpec, summary: &str) -> CommandSpec {
    spec.platform("ios").domain("ios").target_kind("ios-app").summary(summary).target_key("deviceId").timeouts(30_000, 120_000)
}

/// A WDA read (`app.read`): never journaled, never dispatched.
pub(crate) fn wda_query(command: &str, summary: &str) -> CommandSpec {
    base(CommandSpec::query(command), summary).lane("observation").permission("app.read")
}

/// A managed WDA action: the device's ownership journal (keyed by `deviceId`,
/// shared with the `ios` plugin) records it before the call.
pub(crate) fn wda_mutation(command: &str, summary: &str) -> CommandSpec {
    with_action(base(CommandSpec::mutation(command), summary))
}

pub(crate) fn with_action(spec: CommandSpec) -> CommandSpec {
    spec.device_key("deviceId").permission("app.interact").execution_schema(aab_ios_transport::wda::EXECUTION_SCHEMA)
}

/// `selector`: exactly one of accessibilityId / label / elementId, optional type.
pub(crate) fn native_selector() -> Value {
    let s = |d: &str| json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": d});
    json!({
        "type": "object", "additionalProperties": false,
        "description": "Native selector over a fresh WDA tree: exactly one of accessibilityId (the raw identifier), label or elementId, optionally narrowed by type; only visible elements, exactly one match, enabled",
        "properties": {
            "accessibilityId": s("Exact accessibility identifier (rawIdentifier)"),
            "label": s("Exact accessibility label"),
            "elementId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "WDA element UID from the current tree"},
            "type": {"type": "string", "pattern": "^XCUIElementType[A-Za-z]{1,64}$", "description": "Element type, e.g. XCUIElementTypeButton"}
        },
        "oneOf": [{"required": ["accessibilityId"]}, {"required": ["label"]}, {"required": ["elementId"]}]
    })
}

fn nullable_string(max: u64) -> Value {
    json!({"type": ["string", "null"], "maxLength": max})
}

/// `expectedTarget` (`aab.ios-native-target/v1`) from a preceding `ios-uia-tree`.
pub(crate) fn expected_target() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "description": "The observed element (a node's expectedTarget from ios-uia-tree): a changed Runner, App process, session or element is refused before dispatch",
        "properties": {
            "schemaVersion": {"const": aab_ios_transport::wda::NATIVE_TARGET_SCHEMA},
            "runnerEpoch": {"type": "string", "minLength": 1, "maxLength": 128},
            "bundleId": bundle_id("The observed App"),
            "processId": {"type": "integer", "minimum": 1, "maximum": 4294967295u64},
            "sessionId": session_id(),
            "element": {
                "type": "object", "additionalProperties": false,
                "properties": {"elementId": {"type": "string", "minLength": 1, "maxLength": 256}, "type": {"type": "string", "maxLength": 256}, "identifier": nullable_string(4096), "label": nullable_string(4096)},
                "required": ["elementId", "type", "identifier", "label"]
            }
        },
        "required": ["schemaVersion", "runnerEpoch", "bundleId", "processId", "sessionId", "element"]
    })
}

/// `expectedSession` (`aab.ios-native-session/v1`) from a preceding `ios-uia-tree`.
pub(crate) fn expected_session() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "description": "The observed session (ios-uia-tree's session): a changed Runner, App process or session is refused before dispatch (reobserve_required)",
        "properties": {
            "schemaVersion": {"const": aab_ios_transport::wda::SESSION_SCHEMA},
            "runnerEpoch": {"type": "string", "minLength": 1, "maxLength": 128},
            "bundleId": bundle_id("The observed App"),
            "processId": {"type": "integer", "minimum": 1, "maximum": 4294967295u64},
            "sessionId": session_id()
        },
        "required": ["schemaVersion", "runnerEpoch", "bundleId", "processId", "sessionId"]
    })
}

/// Text typed into an editor (0..16384 characters).
pub(crate) fn text() -> Value {
    json!({"type": "string", "maxLength": 16384, "description": "Text to type (replaces the editor's value)"})
}


/// The `native` Intent provider of an App on an iOS device, through the prepared
/// Runner: observe with `ios-uia-tree` (its nodes carry `expectedTarget`, the tree
/// the session ref), act with the native commands bound to the committed
/// observation (the host resolves the selector first; the element's own
/// `expectedTarget` travels with the action, so a changed element, App process,
/// session or Runner is refused before dispatch). No session is created or
/// replaced implicitly: the target names an existing one.
fn native_intent_provider(commands: &[String]) -> IntentProvider {
    let app = || {
        json!({"deviceId": "${target.deviceId}", "bundleId": "${target.bundleId}", "wdaRunnerBundleId": "${target.wdaRunnerBundleId}",
               "wdaSessionId": "${target.wdaSessionId}", "wdaUrl": "${target.wdaUrl}", "devicectl": "${target.devicectl}"})
    };
    let bound = |extra: Value| merge(merge(app(), json!({"selector": {"elementId": "${element.elementId}"}, "expectedTarget": "${element.expectedTarget}"})), extra);
    let text_value = |max: u64| json!({"type": "string", "minLength": 1, "maxLength": max});
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One element of the committed observation: its elementId, accessibilityId (rawIdentifier) or label, optionally narrowed by type",
        "properties": {"elementId": text_value(256), "accessibilityId": text_value(4096), "label": text_value(4096), "type": text_value(256)},
        "oneOf": [{"required": ["elementId"]}, {"required": ["accessibilityId"]}, {"required": ["label"]}]
    });
    let schema = |name: &str, extra: Value, required: &[&str]| {
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": merge(json!({"action": {"const": name}}), extra), "required": req})
    };
    let actions = [
        IntentAction::new("tap", "ios-tap-native", bound(json!({})), schema("tap", json!({"selector": selector.clone()}), &["selector"])),
        IntentAction::new(
            "inputText",
            "ios-input-native-text",
            bound(json!({"text": "${action.value}"})),
            schema("inputText", json!({"selector": selector.clone(), "value": {"type": "string", "maxLength": 16384}}), &["selector", "value"]),
        ),
        IntentAction::new(
            "setOrientation",
            "ios-set-orientation",
            merge(app(), json!({"orientation": "${action.orientation}", "expectedSession": "${observation.session}"})),
            schema("setOrientation", json!({"orientation": orientation()}), &["orientation"]),
        ),
    ];
    let summarize = IntentSummarize::new("/nodes", "elementId")
        .identity_fields(["elementId", "type", "rawIdentifier", "label"])
        .node_fields(["elementId", "type", "rawIdentifier", "label", "name", "value", "visible", "enabled", "rect", "depth", "sourceIndex"])
        .selector_fields([("elementId", "elementId"), ("accessibilityId", "rawIdentifier"), ("label", "label"), ("type", "type")])
        .page([("session", "/session"), ("orientation", "/orientation"), ("bundleId", "/bundleId")])
        .source_truncated("/truncated");
    let target_schema = json!({
        "type": "object", "additionalProperties": false,
        "required": ["platform", "deviceId", "bundleId", "wdaRunnerBundleId", "wdaSessionId"],
        "properties": merge(app_props(json!({})), json!({"platform": {"const": "ios"}}))
    });
    let observe = IntentCall::new("ios-uia-tree", merge(app(), json!({"maxNodes": 1000})));
    let mut provider = IntentProvider::new("ios", "native", target_schema, observe, summarize).default_for_platform();
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    provider
}
