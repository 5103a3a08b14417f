//! The `android` plugin manifest and the schema pieces every command spec shares
//! (each command's own spec lives beside its code in [`crate::commands`]). Android arguments share one option bundle: `serial`, `adb`
//! (the executable that starts a server when none listens) and `adbTimeoutMs`
//! (cap of each adb step inside the command's deadline).

use aab_plugin_api::Manifest;
use serde_json::{Value, json};

/// Default cap of one adb step (the Node host's `AI_APP_BRIDGE_ADB_TIMEOUT_MS`).
pub const DEFAULT_ADB_TIMEOUT_MS: u64 = 15_000;

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("android", env!("CARGO_PKG_VERSION"));
    m.platforms = vec!["android".to_string()];
    // Which adb server the transport talks to and which `adb` starts it: a client
    // with other values must not share a runtime started with these.
    m.environment = vec!["ADB_SERVER_SOCKET".into(), "ANDROID_ADB_SERVER_PORT".into(), "ADB".into(), "ANDROID_SDK_ROOT".into(), "ANDROID_HOME".into()];
    // `device-ownership cancel-install` reaches this plugin's `cancel-install` hook.
    m.features = vec!["device-ownership.cancel-install".into()];
    // `script.target` of an app on a device: its identity defaults `serial`/`packageName`
    // of every ctx.call; `adb` and `port` are optional connection fields.
    m.targets = vec![
        aab_plugin_api::protocol::ExecutionTarget::new("android", ["serial", "packageName"])
            .connection("adb", serde_json::json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": "connection option of this platform"}))
            .connection("port", serde_json::json!({"type": "integer", "minimum": 1, "maximum": 65535})),
    ];
    let commands = crate::commands::list().specs().map(|c| c.command.clone()).collect::<Vec<_>>();
    m.intent_providers = vec![native_intent_provider(&commands)];
    if commands.iter().any(|c| c == "h5-dom") {
        m.intent_providers.push(h5_intent_provider(&commands));
    }
    if commands.iter().any(|c| c == "flutter-nodes") {
        m.intent_providers.push(flutter_intent_provider(&commands));
    }
    if commands.iter().any(|c| c == "uia-tree") {
        m.intent_providers.push(uia_intent_provider(&commands));
        m.intent_workflows = managed_workflows(&commands);
    }
    m
}

/// The `uia` Intent provider (aab-host §8): observe the focused window through the
/// UIA runtime (`uia-tree`: system dialogs, installers and apps without the SDK),
/// act with `tap-uia` bound to the committed observation's node (its
/// `aab.uia.target/v1` ref: the runtime re-validates it, so a changed window stops
/// dispatch) and Back through the shell worker.
fn uia_intent_provider(commands: &[String]) -> aab_plugin_api::protocol::IntentProvider {
    use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentSummarize};
    let text_value = |max: u64| json!({"type": "string", "minLength": 1, "maxLength": max});
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One node of the committed observation: exactly one of its text, resourceName, contentDescription or nodeRef, matched exactly",
        "properties": {"text": text_value(1024), "resourceName": text_value(1024), "contentDescription": text_value(1024), "nodeRef": text_value(64)},
        "oneOf": [{"required": ["text"]}, {"required": ["resourceName"]}, {"required": ["contentDescription"]}, {"required": ["nodeRef"]}]
    });
    let device = json!({"serial": "${target.serial}", "adb": "${target.adb}", "root": "${target.root}"});
    let with = |extra: Value| {
        let mut a = device.clone();
        if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
            a.extend(extra);
        }
        a
    };
    let actions = [
        IntentAction::new(
            "tap",
            "tap-uia",
            with(json!({"packageName": "${element.packageName}", "targetRef": "${element.targetRef}", "clickPolicy": "${action.clickPolicy|=\"nearest_clickable_ancestor\"}"})),
            json!({"type": "object", "additionalProperties": false, "required": ["action", "selector"],
                   "properties": {"action": {"const": "tap"}, "selector": selector,
                                  "clickPolicy": {"enum": ["exact_node", "nearest_clickable_ancestor"], "description": "Click the node itself, or its nearest clickable ancestor (default)"}}}),
        ),
        IntentAction::new(
            "back",
            "keyevent",
            json!({"serial": "${target.serial}", "adb": "${target.adb}", "keyCode": 4}),
            json!({"type": "object", "additionalProperties": false, "required": ["action"], "properties": {"action": {"const": "back"}}}),
        ),
    ];
    let summarize = IntentSummarize::new("/nodes", "nodeRef")
        .identity_fields(["nodeRef", "packageName", "className", "resourceName", "text", "contentDescription", "bounds"])
        .node_fields(["nodeRef", "packageName", "className", "text", "resourceName", "contentDescription", "bounds", "enabled", "clickable", "checkable", "checked", "scrollable", "depth"])
        .selector_fields([("text", "text"), ("resourceName", "resourceName"), ("contentDescription", "contentDescription"), ("nodeRef", "nodeRef")])
        .page([("window", "/window"), ("snapshotId", "/snapshotId"), ("runtimeEpoch", "/runtimeEpoch")])
        .source_truncated("/truncated");
    let target_schema = json!({
        "type": "object", "additionalProperties": false,
        "required": ["platform", "serial"],
        "properties": {
            "platform": {"const": "android"},
            "serial": {"type": "string", "pattern": SERIAL_PATTERN, "description": "adb serial of the device"},
            "packageName": package_name(),
            "adb": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "adb executable used only to start a server when none listens"},
            "root": crate::uia::root_schema()
        }
    });
    let observe = IntentCall::new("uia-tree", json!({"serial": "${target.serial}", "adb": "${target.adb}", "root": "${target.root}", "maxNodes": 300}));
    let mut provider = IntentProvider::new("android", "uia", target_schema, observe, summarize);
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    provider
}

/// `install-apk` and `permission-dialog`: managed Intents on the `uia` provider
/// (aab-host §8.1). The begin call is the command itself; the settle call is its
/// read-only verification, so only the device's own evidence ends them.
fn managed_workflows(commands: &[String]) -> Vec<aab_plugin_api::protocol::IntentWorkflow> {
    use aab_plugin_api::protocol::{IntentCall, IntentWorkflow};
    let target = |extra: Value| {
        let mut t = json!({"platform": "android", "serial": "${workflow.args.serial}", "adb": "${workflow.args.adb}"});
        if let (Value::Object(t), Value::Object(extra)) = (&mut t, extra) {
            t.extend(extra);
        }
        t
    };
    let mut out = vec![];
    if commands.iter().any(|c| c == "install-apk") {
        out.push(IntentWorkflow::new(
            "install-apk",
            "uia",
            "installation",
            "Install ${workflow.args.apkPath} on ${workflow.args.serial}",
            target(json!({})),
            IntentCall::new("install-apk-status", json!({"serial": "${workflow.args.serial}", "adb": "${workflow.args.adb}", "adbTimeoutMs": "${workflow.args.adbTimeoutMs}", "actionId": "${workflow.begin.installation.actionId}"})),
        ));
    }
    if commands.iter().any(|c| c == "permission-dialog") {
        out.push(IntentWorkflow::new(
            "permission-dialog",
            "uia",
            "permissionDialog",
            "Answer the ${workflow.args.permission} request of ${workflow.args.packageName} with ${workflow.args.outcome}",
            target(json!({"packageName": "${workflow.args.packageName}"})),
            IntentCall::new(
                "permission-dialog-status",
                json!({"serial": "${workflow.args.serial}", "adb": "${workflow.args.adb}", "adbTimeoutMs": "${workflow.args.adbTimeoutMs}",
                       "packageName": "${workflow.args.packageName}", "permission": "${workflow.args.permission}", "outcome": "${workflow.args.outcome}",
                       "userId": "${workflow.begin.permissionDialog.userId}", "requester": "${workflow.begin.permissionDialog.requester}",
                       "initial": "${workflow.begin.permissionDialog.initial}", "actions": "${workflow.actions}", "lastAction": "${workflow.lastAction}"}),
            ),
        ));
    }
    out
}

/// Android package name: dot-separated Java identifiers, at least two segments.
const PACKAGE_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)+$";
/// adb serials: USB ids, `emulator-N`, `host:port`, mDNS service names.
const SERIAL_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

pub(crate) fn props(extra: Value) -> Value {
    let mut p = json!({
        "serial": {"type": "string", "pattern": SERIAL_PATTERN, "description": "adb serial of the device (required when several devices are connected)"},
        "adb": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "adb executable used only to start a server when none listens (default: $ADB, then adb on PATH)"},
        "adbTimeoutMs": {"type": "integer", "minimum": 1, "maximum": 2147483647, "description": "Cap of each adb step, within the command's deadline (default 15000)"}
    });
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    p
}

pub(crate) fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
}

pub(crate) fn package_name() -> Value {
    json!({"type": "string", "pattern": PACKAGE_PATTERN, "maxLength": 255, "description": "Package of the app that embeds the SDK"})
}

pub(crate) fn port(what: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535, "description": what})
}

/// A screen coordinate (`tapX`, `tapY`): number 0..2147483647.
pub(crate) fn coordinate(what: &str) -> Value {
    json!({"type": "number", "minimum": 0, "maximum": 2147483647, "description": what})
}

/// `serial` is required by Android mutations (the device-ownership journal is per serial).
pub(crate) const MUTATION_REQUIRED: [&str; 2] = ["serial", "packageName"];
/// Shell-action commands (`input` takes whole pixels): a screen coordinate.
pub(crate) fn pixel(what: &str) -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": 100000, "description": what})
}

/// The mutating Android commands' common spec (SDK and shell actions alike):
/// device-scoped through `serial`, which is required and keys both the admission
/// lane and the device journal.
pub(crate) fn device_mutation(command: &str, domain: &str, target_kind: &str, summary: &str) -> aab_plugin_api::CommandSpec {
    aab_plugin_api::CommandSpec::mutation(command).platform("android").domain(domain).target_kind(target_kind).summary(summary).target_key("serial").device_key("serial").timeouts(30_000, 120_000)
}

/// The `native` Intent provider of an app on a device (aab-host §8): observe with
/// `tree {controls:true}`, act with the managed SDK actions and key events, read
/// the SDK capture streams. An action's `selector` (exactly one of text,
/// resourceName, contentDescription) is resolved by the host against the committed
/// observation first, so a target the agent never saw is refused before dispatch.
/// Only actions whose command this build offers are declared (`commands`).
fn native_intent_provider(commands: &[String]) -> aab_plugin_api::protocol::IntentProvider {
    use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentStream, IntentSummarize};
    let with = |base: Value, extra: Value| {
        let mut a = base;
        if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
            a.extend(extra);
        }
        a
    };
    let device = || json!({"serial": "${target.serial}", "adb": "${target.adb}"});
    let app = |extra: Value| with(with(device(), json!({"packageName": "${target.packageName}", "port": "${target.port}"})), extra);
    let text_value = |max: u64| json!({"type": "string", "minLength": 1, "maxLength": max});
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One control of the committed observation: exactly one of its text, resourceName (pkg:id/name) or contentDescription, matched exactly",
        "properties": {"text": text_value(300), "resourceName": text_value(1024), "contentDescription": text_value(1024)},
        "oneOf": [{"required": ["text"]}, {"required": ["resourceName"]}, {"required": ["contentDescription"]}]
    });
    let schema = |name: &str, extra: Value, required: &[&str]| {
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": with(json!({"action": {"const": name}}), extra), "required": req})
    };
    let with_selector = |extra: Value| with(json!({"selector": selector.clone()}), extra);
    let duration = |min: u64| json!({"type": "integer", "minimum": min, "maximum": 10000, "description": "Gesture length in ms"});
    let delta = |axis: &str| json!({"type": "number", "minimum": -100000, "maximum": 100000, "description": format!("Pixels along {axis} from the control's centre")});
    let gesture = |payload: Value| app(json!({"payload": with(json!({"selector": "${action.selector}"}), payload)}));
    let actions = [
        IntentAction::new("tap", "tap-native", app(json!({"selector": "${action.selector}"})), schema("tap", with_selector(json!({})), &["selector"])),
        IntentAction::new("back", "keyevent", with(device(), json!({"keyCode": 4})), schema("back", json!({}), &[])),
        IntentAction::new(
            "keyevent",
            "keyevent",
            with(device(), json!({"keyCode": "${action.keyCode}"})),
            schema("keyevent", json!({"keyCode": {"type": "integer", "minimum": 0, "maximum": 400, "description": "Android KeyEvent code (4 back, 66 enter, …)"}}), &["keyCode"]),
        ),
        IntentAction::new(
            "inputText",
            "input-text",
            app(json!({"selector": "${action.selector}", "text": "${action.value}"})),
            schema("inputText", with_selector(json!({"value": {"type": "string", "maxLength": 16384}})), &["selector", "value"]),
        ),
        IntentAction::new(
            "longPress",
            "native-gesture",
            gesture(json!({"action": "longPress", "durationMs": "${action.durationMs|=500}"})),
            schema("longPress", with_selector(json!({"durationMs": duration(500)})), &["selector"]),
        ),
        IntentAction::new(
            "swipe",
            "native-gesture",
            gesture(json!({"action": "swipe", "deltaX": "${action.deltaX}", "deltaY": "${action.deltaY}", "durationMs": "${action.durationMs|=400}"})),
            schema("swipe", with_selector(json!({"deltaX": delta("x"), "deltaY": delta("y"), "durationMs": duration(1)})), &["selector", "deltaX", "deltaY"]),
        ),
        IntentAction::new(
            "scroll",
            "native-gesture",
            gesture(json!({"action": "scroll", "direction": "${action.direction}", "durationMs": "${action.durationMs|=400}"})),
            schema("scroll", with_selector(json!({"direction": {"type": "string", "enum": ["up", "down"]}, "durationMs": duration(1)})), &["selector", "direction"]),
        ),
    ];
    let summarize = IntentSummarize::new("/controls", "controlId")
        .identity_fields(["controlId", "className", "resourceName", "text", "contentDescription", "bounds"])
        .node_fields(["controlId", "role", "className", "text", "resourceName", "contentDescription", "bounds", "enabled", "clickable", "longClickable", "editable", "checked", "selected", "focused", "visible", "scrollable"])
        .selector_fields([("text", "text"), ("resourceName", "resourceName"), ("contentDescription", "contentDescription")])
        .page([("packageName", "/packageName"), ("activity", "/activity"), ("foreground", "/foreground"), ("runtimeEpoch", "/runtimeEpoch")])
        .source_truncated("/controlsTruncated");
    let target_schema = json!({
        "type": "object", "additionalProperties": false,
        "required": ["platform", "serial", "packageName"],
        "properties": {
            "platform": {"const": "android"},
            "serial": {"type": "string", "pattern": SERIAL_PATTERN, "description": "adb serial of the device"},
            "packageName": package_name(),
            "adb": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "adb executable used only to start a server when none listens"},
            "port": port("Host port of an existing or wanted adb forward to the SDK socket")
        }
    });
    let observe = IntentCall::new("tree", app(json!({"controls": true, "maxControls": 300})));
    let mut provider = IntentProvider::new("android", "native", target_schema, observe, summarize).default_for_platform();
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    for s in ["logs", "network", "state", "events"] {
        provider = provider.stream(
            IntentStream::new(s, s, app(json!({"sinceId": "${watermark}", "sinceMs": "${require.sinceMs}", "limit": "${require.limit}"})))
                .watermark("/nextSinceId")
                .coverage("/coverage/status")
                .records("/items"),
        );
    }
    provider
}

/// A permission name (`permission-state`, `permission-grant`, `permission-revoke`).
pub(crate) fn permission_name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[A-Za-z0-9_.]+$", "description": "Full permission name, e.g. android.permission.CAMERA"})
}

/// An Android user id; absent = the current user (`am get-current-user`).
pub(crate) fn user_id() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": 2147483647, "description": "Android user (default: the current user, from am get-current-user)"})
}

/// The `h5` Intent provider of an app's WebView (aab-host §8): observe with
/// `h5-dom` (the `observationTarget` may name the WebView by `webViewId`; without
/// it the single visible WebView of the foreground window), act with the managed
/// H5 actions. Every action is bound to the committed observation: the host
/// resolves the selector against it, and the dispatched command carries the
/// element's id plus `expectedTarget` (the observed `pageRef` and element
/// identity), so a page or element that changed since is refused before dispatch.
/// The capture streams are the app SDK's, as for the native provider.
fn h5_intent_provider(commands: &[String]) -> aab_plugin_api::protocol::IntentProvider {
    use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentSummarize};
    let native = native_intent_provider(commands);
    let merge = |base: Value, extra: Value| {
        let mut a = base;
        if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
            a.extend(extra);
        }
        a
    };
    let app = || json!({"serial": "${target.serial}", "adb": "${target.adb}", "packageName": "${target.packageName}", "port": "${target.port}"});
    let observed_web_view = || json!({"webViewId": "${observation.pageRef.webViewId}"});
    let bound = |extra: Value| {
        merge(
            merge(app(), observed_web_view()),
            merge(json!({"selector": {"elementId": "${element.elementId}"}, "expectedTarget": {"pageRef": "${observation.pageRef}", "element": "${element.identity}"}}), extra),
        )
    };
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One control of the committed observation: its elementId, or its exact text or aria-label, optionally narrowed by tag",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$"},
            "text": {"type": "string", "minLength": 1, "maxLength": 500},
            "ariaLabel": {"type": "string", "minLength": 1, "maxLength": 1024},
            "tag": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,63}$"}
        },
        "oneOf": [{"required": ["elementId"]}, {"required": ["text"]}, {"required": ["ariaLabel"]}]
    });
    let schema = |name: &str, extra: Value, required: &[&str]| {
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": merge(json!({"action": {"const": name}}), extra), "required": req})
    };
    let with_selector = |extra: Value| merge(json!({"selector": selector.clone()}), extra);
    let delta = |axis: &str| json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": format!("CSS pixels along {axis}")});
    let actions = [
        IntentAction::new("tap", "h5-click", bound(json!({})), schema("tap", with_selector(json!({})), &["selector"])),
        IntentAction::new(
            "inputText",
            "h5-input",
            bound(json!({"text": "${action.value}"})),
            schema("inputText", with_selector(json!({"value": {"type": "string", "maxLength": 16384}})), &["selector", "value"]),
        ),
        IntentAction::new("scroll", "h5-scroll", bound(json!({})), schema("scroll", with_selector(json!({})), &["selector"])),
        IntentAction::new(
            "scrollBy",
            "h5-scroll",
            merge(merge(app(), observed_web_view()), json!({"deltaX": "${action.deltaX}", "deltaY": "${action.deltaY}", "expectedPage": "${observation.pageRef}"})),
            schema("scrollBy", json!({"deltaX": delta("x"), "deltaY": delta("y")}), &["deltaX", "deltaY"]),
        ),
    ];
    let summarize = IntentSummarize::new("/dom/controls", "elementId")
        .identity_fields(["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"])
        .node_fields(["elementId", "tag", "type", "id", "name", "text", "ariaLabel", "href", "value", "disabled", "visible", "editable", "interaction", "bounds"])
        .selector_fields([("elementId", "elementId"), ("text", "text"), ("ariaLabel", "ariaLabel"), ("tag", "tag")])
        .page([("pageRef", "/pageRef"), ("title", "/dom/title"), ("url", "/dom/url"), ("readyState", "/dom/readyState"), ("viewport", "/dom/viewport"), ("webView", "/webView"), ("activity", "/activity")])
        .body_text("/dom/bodyText")
        .source_truncated("/dom/truncated");
    let observe = IntentCall::new("h5-dom", merge(app(), json!({"webViewId": "${observationTarget.webViewId}"})));
    let mut provider = IntentProvider::new("android", "h5", native.target_schema.clone(), observe, summarize).observation_target(json!({
        "type": "object", "additionalProperties": false,
        "description": "Which WebView of the app to observe (default: the single visible WebView of the foreground window)",
        "properties": {"webViewId": crate::h5::web_view_id_schema()}
    }));
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    for s in native.streams {
        provider = provider.stream(s);
    }
    provider
}

/// The `flutter` Intent provider of an app's Flutter view (aab-host §8): observe
/// with `flutter-nodes` (every operable node, so the summary's `truncated` is the
/// engine's own 600-node limit), act with the managed Flutter actions. An action's
/// selector is resolved by the host against the committed observation and sent
/// as the node's live element id (`{nodeId}`), which the plugin binds again to a
/// fresh, untruncated tree: a replaced widget has a new id and is refused. Back is
/// the Android back key, as for the native provider.
fn flutter_intent_provider(commands: &[String]) -> aab_plugin_api::protocol::IntentProvider {
    use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentSummarize};
    let native = native_intent_provider(commands);
    let merge = |base: Value, extra: Value| {
        let mut a = base;
        if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
            a.extend(extra);
        }
        a
    };
    let device = || json!({"serial": "${target.serial}", "adb": "${target.adb}"});
    let app = |extra: Value| merge(merge(device(), json!({"packageName": "${target.packageName}", "port": "${target.port}"})), extra);
    let bound = |extra: Value| app(merge(json!({"selector": {"nodeId": "${element.id}"}}), extra));
    let selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One node of the committed observation: its id (e<n>) or its exact text",
        "properties": {"nodeId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$"}, "text": {"type": "string", "minLength": 1, "maxLength": 1024}},
        "oneOf": [{"required": ["nodeId"]}, {"required": ["text"]}]
    });
    let schema = |name: &str, extra: Value, required: &[&str]| {
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": merge(json!({"action": {"const": name}}), extra), "required": req})
    };
    let with_selector = |extra: Value| merge(json!({"selector": selector.clone()}), extra);
    let actions = [
        IntentAction::new("tap", "tap-flutter", bound(json!({})), schema("tap", with_selector(json!({})), &["selector"])),
        IntentAction::new(
            "inputText",
            "input-flutter-text",
            bound(json!({"text": "${action.value}"})),
            schema("inputText", with_selector(json!({"value": {"type": "string", "maxLength": 16384}})), &["selector", "value"]),
        ),
        IntentAction::new(
            "scroll",
            "scroll-flutter",
            bound(json!({"delta": "${action.delta}"})),
            schema(
                "scroll",
                with_selector(json!({"delta": {"type": "number", "minimum": -100000, "maximum": 100000, "not": {"const": 0}, "description": "Logical pixels to scroll the scrollable (positive: towards the end)"}})),
                &["selector", "delta"],
            ),
        ),
        IntentAction::new("back", "keyevent", merge(device(), json!({"keyCode": 4})), schema("back", json!({}), &[])),
    ];
    let summarize = IntentSummarize::new("/nodes", "id")
        .identity_fields(["id", "widgetType", "text", "label", "role"])
        .node_fields(["id", "widgetType", "text", "value", "label", "hint", "errorText", "role", "actions", "enabled", "visible", "tap", "input", "scroll"])
        .selector_fields([("nodeId", "id"), ("text", "text")])
        .page([("packageName", "/packageName"), ("runtimeEpoch", "/runtimeEpoch"), ("route", "/route"), ("viewport", "/viewport"), ("devicePixelRatio", "/devicePixelRatio")])
        .source_truncated("/truncated");
    let observe = IntentCall::new("flutter-nodes", app(json!({"maxNodes": 600})));
    let mut provider = IntentProvider::new("android", "flutter", native.target_schema.clone(), observe, summarize);
    for a in actions.into_iter().filter(|a| commands.contains(&a.command)) {
        provider = provider.action(a);
    }
    for s in native.streams {
        provider = provider.stream(s);
    }
    provider
}
