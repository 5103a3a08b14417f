//! The `ios` plugin manifest and the schema pieces every command spec shares
//! (each command's own spec lives beside its code in [`crate::commands`]).
//!
//! iOS commands share one option bundle (aab-host §1.1): `deviceId` (the CoreDevice
//! identifier or UDID), `bundleId`, the transport overrides `runtimeUrl` /
//! `iosHost` / `iosPort` (they move the connection, never the identity), the
//! `devicectl` program, and `wdaUrl` / `wdaSessionId` / `xcodebuild`, which belong
//! to the WDA provider and are accepted but unused by the SDK commands, so one
//! target's options fit every iOS command.

use aab_ios_transport::schema;
use aab_plugin_api::Manifest;
use aab_plugin_api::protocol::{ExecutionTarget, IntentAction, IntentCall, IntentProvider, IntentStream, IntentSummarize};
use serde_json::{Value, json};

pub const PLATFORM: &str = "ios";
/// SDK commands (and `ios-execution`): 30 s by default (aab-host §10).
pub const SDK_TIMEOUTS: (u64, u64) = (30_000, 120_000);
/// `ios-install-app`: 120 s by default.
pub const INSTALL_TIMEOUTS: (u64, u64) = (120_000, 600_000);

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("ios", env!("CARGO_PKG_VERSION"));
    m.platforms = vec![PLATFORM.to_string()];
    // Which devicectl the transport runs: a client with another value must not
    // share a runtime started with this one.
    m.environment = vec![aab_ios_transport::devicectl::DEVICECTL_ENV.to_string()];
    m.targets = vec![execution_target()];
    // One journal per physical phone (`ios:<UDID>`, whichever alias names it), and
    // `ios-execution --operation reconcile` is the host's device-ownership reconcile.
    m.features = vec!["device-ownership.device-key".into(), "device-ownership.reconcile-operation".into(), "device-ownership.status-operation".into()];
    let commands = crate::commands::list().specs().map(|c| c.command.clone()).collect::<Vec<_>>();
    if commands.iter().any(|c| c == "ios-h5-dom") {
        m.intent_providers.push(h5_intent_provider(&commands));
    }
    if commands.iter().any(|c| c == "ios-flutter-nodes") {
        m.intent_providers.push(flutter_intent_provider(&commands));
    }
    m
}

// ---- option bundle -------------------------------------------------------------------

pub fn device_id() -> Value {
    schema::device_id()
}

pub fn bundle_id() -> Value {
    schema::bundle_id("Bundle id of the app that embeds the aab iOS SDK")
}

fn url(what: &str) -> Value {
    schema::http_url(what)
}

fn program(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": what})
}

/// The iOS common option bundle; `extra` adds (or replaces) command options.
pub fn props(extra: Value) -> Value {
    let p = json!({
        "deviceId": device_id(),
        "bundleId": bundle_id(),
        "runtimeUrl": url("http://host:port of the SDK listener, replacing the device's tunnel address and the descriptor's port (the runtime's identity is still verified)"),
        "iosHost": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[A-Za-z0-9.:%\\[\\]-]+$", "description": "Host of the SDK listener instead of the device's tunnel address (identity still verified)"},
        "iosPort": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "Port of the SDK listener instead of the descriptor's (e.g. a forward; identity still verified)"},
        "devicectl": program("devicectl program (default: $AI_APP_BRIDGE_DEVICECTL, then xcrun; a program named xcrun gets the devicectl subcommand)"),
        "wdaUrl": url("WebDriverAgent Runner URL (WDA commands; unused here)"),
        "wdaSessionId": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[A-Za-z0-9._-]+$", "description": "WebDriverAgent session (WDA commands; unused here)"},
        "xcodebuild": program("xcodebuild program (ios-setup; unused here)")
    });
    schema::merge(p, extra)
}

pub use aab_ios_transport::schema::object;

/// iOS SDK commands require the device and the app (aab-host §1.1, computed requirements).
pub const APP_REQUIRED: [&str; 2] = ["deviceId", "bundleId"];

pub fn required(extra: &[&'static str]) -> Vec<&'static str> {
    let mut r = APP_REQUIRED.to_vec();
    r.extend_from_slice(extra);
    r
}

/// A read of one app's SDK: queued per device and app in the observation lane,
/// so it never waits behind a mutation of the same phone.
pub fn app_query(command: &str, summary: &str, permission: Option<&str>) -> aab_plugin_api::CommandSpec {
    let mut s = aab_plugin_api::CommandSpec::query(command)
        .platform(PLATFORM)
        .domain("ios")
        .target_kind("ios-app")
        .summary(summary)
        .target_key("deviceId")
        .target_key("bundleId")
        .lane("observation")
        .timeouts(SDK_TIMEOUTS.0, SDK_TIMEOUTS.1);
    if let Some(p) = permission {
        s = s.permission(p);
    }
    s
}

/// A mutation of an iOS device: admitted and journaled per `deviceId` (one lane
/// and one ownership journal per phone, whichever app or provider acts).
pub fn device_mutation(command: &str, target_kind: &str, summary: &str) -> aab_plugin_api::CommandSpec {
    aab_plugin_api::CommandSpec::mutation(command)
        .platform(PLATFORM)
        .domain("ios")
        .target_kind(target_kind)
        .summary(summary)
        .target_key("deviceId")
        .device_key("deviceId")
        .timeouts(SDK_TIMEOUTS.0, SDK_TIMEOUTS.1)
}

// ---- execution target ---------------------------------------------------------------------

/// `script.target` of an app on an iOS device: `deviceId`/`bundleId` default every
/// ctx.call; the connection fields are the rest of the Intent target schema.
fn execution_target() -> ExecutionTarget {
    let mut t = ExecutionTarget::new(PLATFORM, ["deviceId", "bundleId"]);
    for (field, schema) in connection_fields() {
        t = t.connection(field, schema);
    }
    t
}

fn connection_fields() -> Vec<(&'static str, Value)> {
    let p = props(json!({"wdaRunnerBundleId": schema::bundle_id("The prepared WebDriverAgent Runner app (test bundle id + .xctrunner) whose container holds the WDA descriptor")}));
    ["runtimeUrl", "iosHost", "iosPort", "wdaUrl", "wdaRunnerBundleId", "wdaSessionId", "devicectl", "xcodebuild"].into_iter().map(|k| (k, p[k].clone())).collect()
}

/// The Intent target of an app on an iOS device (shared by the h5 and flutter providers).
pub fn intent_target_schema() -> Value {
    let mut properties = json!({"platform": {"const": PLATFORM}, "deviceId": device_id(), "bundleId": bundle_id()});
    for (k, v) in connection_fields() {
        properties[k] = v;
    }
    json!({"type": "object", "additionalProperties": false, "required": ["platform", "deviceId", "bundleId"], "properties": properties})
}

// ---- Intent providers -----------------------------------------------------------------------

/// The target's fields every call of an Intent carries.
fn app_args() -> Value {
    json!({"deviceId": "${target.deviceId}", "bundleId": "${target.bundleId}", "runtimeUrl": "${target.runtimeUrl}", "iosHost": "${target.iosHost}", "iosPort": "${target.iosPort}", "devicectl": "${target.devicectl}"})
}

/// The SDK's capture streams, read per observation (`require.streams`): each read
/// continues after the previous one's `watermarkCursor` (the store's cursor of
/// that stream), so a record is reported once.
fn with_streams(mut provider: IntentProvider, commands: &[String]) -> IntentProvider {
    for s in ["logs", "network", "state", "events"] {
        let command = format!("ios-{s}");
        if !commands.contains(&command) {
            continue;
        }
        provider = provider.stream(
            IntentStream::new(s, command, schema::merge(app_args(), json!({"factCursor": "${watermark}", "sinceMs": "${require.sinceMs}"})))
                .watermark("/watermarkCursor")
                .coverage("/coverage/status")
                .records("/items"),
        );
    }
    provider
}

fn action_schema(name: &str, extra: Value, required: &[&str]) -> Value {
    let mut req = vec!["action"];
    req.extend_from_slice(required);
    json!({"type": "object", "additionalProperties": false, "properties": schema::merge(json!({"action": {"const": name}}), extra), "required": req})
}

/// The `h5` provider of an app's WKWebView (aab-host §8, seed "iOS WKWebView
/// targets"): observe with `ios-h5-dom` (an `observationTarget {webViewId}`
/// selects one of several WebViews), act with `ios-h5-click` / `-input` /
/// `-scroll`. Every action carries the element's id AND `expectedTarget` (the
/// committed observation's `pageRef` and element identity), so a page, document
/// or element that changed since is refused before dispatch.
fn h5_intent_provider(commands: &[String]) -> IntentProvider {
    let bound = |extra: Value| {
        schema::merge(
            schema::merge(app_args(), json!({"webViewId": "${observation.pageRef.webViewId}"})),
            schema::merge(json!({"selector": {"elementId": "${element.elementId}"}, "expectedTarget": {"pageRef": "${observation.pageRef}", "element": "${element.identity}"}}), extra),
        )
    };
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One control of the committed observation: its elementId, or its exact text or aria-label, optionally narrowed by tag",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[0-9]{1,15}$"},
            "text": {"type": "string", "minLength": 1, "maxLength": 500},
            "ariaLabel": {"type": "string", "minLength": 1, "maxLength": 1024},
            "tag": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,63}$"}
        },
        "oneOf": [{"required": ["elementId"]}, {"required": ["text"]}, {"required": ["ariaLabel"]}]
    });
    let with_selector = |extra: Value| schema::merge(json!({"selector": selector.clone()}), extra);
    let actions = [
        IntentAction::new("tap", "ios-h5-click", bound(json!({})), action_schema("tap", with_selector(json!({})), &["selector"])),
        IntentAction::new(
            "inputText",
            "ios-h5-input",
            bound(json!({"text": "${action.value}"})),
            action_schema("inputText", with_selector(json!({"value": {"type": "string", "maxLength": 16384}})), &["selector", "value"]),
        ),
        IntentAction::new("scroll", "ios-h5-scroll", bound(json!({})), action_schema("scroll", with_selector(json!({})), &["selector"])),
    ];
    let summarize = IntentSummarize::new("/dom/controls", "elementId")
        .identity_fields(crate::h5::ELEMENT_KEYS)
        .node_fields(["elementId", "tag", "type", "id", "name", "text", "ariaLabel", "href", "value", "disabled", "visible", "editable", "interaction", "bounds"])
        .selector_fields([("elementId", "elementId"), ("text", "text"), ("ariaLabel", "ariaLabel"), ("tag", "tag")])
        .page([("pageRef", "/pageRef"), ("title", "/dom/title"), ("url", "/dom/url"), ("readyState", "/dom/readyState"), ("viewport", "/dom/viewport"), ("webView", "/webView")])
        .body_text("/dom/bodyText")
        .source_truncated("/dom/truncated");
    let observe = IntentCall::new("ios-h5-dom", schema::merge(app_args(), json!({"webViewId": "${observationTarget.webViewId}"})));
    let mut provider = IntentProvider::new(PLATFORM, "h5", intent_target_schema(), observe, summarize).observation_target(json!({
        "type": "object", "additionalProperties": false,
        "description": "Which WKWebView of the app to observe (default: the single visible one)",
        "properties": {"webViewId": crate::h5::web_view_id_schema()}
    }));
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    with_streams(provider, commands)
}

/// The `flutter` provider of an app's Flutter view: observe with
/// `ios-flutter-nodes` (the engine's operable nodes; `truncated` is its own
/// 600-node limit), act with `ios-tap-flutter` / `-input-flutter-text` /
/// `-scroll-flutter` / `ios-flutter-back`. An action's selector is resolved by
/// the host against the committed observation and sent as the node's live element
/// id (`{nodeId}`), which the plugin binds again to a `targetRef` of a fresh,
/// untruncated tree: a replaced widget has a new id and is refused.
fn flutter_intent_provider(commands: &[String]) -> IntentProvider {
    let bound = |extra: Value| schema::merge(app_args(), schema::merge(json!({"selector": {"nodeId": "${element.id}"}}), extra));
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One node of the committed observation: its id (e<n>) or its exact text",
        "properties": {"nodeId": {"type": "string", "pattern": "^e[0-9]+$", "maxLength": 32}, "text": {"type": "string", "minLength": 1, "maxLength": 4096}},
        "oneOf": [{"required": ["nodeId"]}, {"required": ["text"]}]
    });
    let with_selector = |extra: Value| schema::merge(json!({"selector": selector.clone()}), extra);
    let actions = [
        IntentAction::new("tap", "ios-tap-flutter", bound(json!({})), action_schema("tap", with_selector(json!({})), &["selector"])),
        IntentAction::new(
            "inputText",
            "ios-input-flutter-text",
            bound(json!({"text": "${action.value}"})),
            action_schema("inputText", with_selector(json!({"value": {"type": "string", "maxLength": 16384}})), &["selector", "value"]),
        ),
        IntentAction::new(
            "scroll",
            "ios-scroll-flutter",
            bound(json!({"delta": "${action.delta}"})),
            action_schema(
                "scroll",
                with_selector(json!({"delta": {"type": "number", "minimum": -100000, "maximum": 100000, "not": {"const": 0}, "description": "Logical pixels to scroll the scrollable (positive: towards the end)"}})),
                &["selector", "delta"],
            ),
        ),
        IntentAction::new("back", "ios-flutter-back", app_args(), action_schema("back", json!({}), &[])),
    ];
    let summarize = IntentSummarize::new("/nodes", "id")
        .identity_fields(["id", "widgetType", "text", "label", "role"])
        .node_fields(["id", "widgetType", "text", "value", "label", "hint", "errorText", "role", "actions", "enabled", "visible", "tap", "input", "scroll"])
        .selector_fields([("nodeId", "id"), ("text", "text")])
        .page([("bundleId", "/bundleId"), ("runtimeEpoch", "/runtimeEpoch"), ("viewport", "/viewport")])
        .source_truncated("/truncated");
    let observe = IntentCall::new("ios-flutter-nodes", app_args());
    let mut provider = IntentProvider::new(PLATFORM, "flutter", intent_target_schema(), observe, summarize);
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    with_streams(provider, commands)
}
