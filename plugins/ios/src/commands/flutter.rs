//! The iOS Flutter commands over [`crate::flutter`]: `ios-flutter-tree` (the
//! Dart runtime's whole snapshot from the status), `ios-flutter-nodes` (its
//! operable nodes), the expert `ios-flutter-action` (one typed payload as is),
//! and the typed mutations `ios-tap-flutter` (tapTarget), `ios-input-flutter-text`
//! (inputText), `ios-scroll-flutter` (scrollBy) — each selector bound to a
//! `targetRef` of the fresh, untruncated tree the preflight just read —
//! `ios-flutter-back` and `ios-flutter-hide-keyboard`. All mutations are managed
//! `aab.flutter-execution/v1` actions under the Dart engine's epoch.

use aab_ios_transport::sdk::{self, Kind};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Map, Value, json};

use super::{app_args, cancellable, deadline, read_with};
use crate::IosProvider;
use crate::flutter::{TARGET_SCHEMA, bind, epoch, operable, summary};
use crate::manifest::{APP_REQUIRED, app_query, device_mutation, object, props, required};
use crate::runtime::with_facts;

app_args!(
    FlutterArgs {
        selector: Option<Value>,
        text: Option<String>,
        delta: Option<f64>,
        payload: Option<Value>,
    }
);

fn selector_schema() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One Flutter node of a fresh operable tree: exactly one of its text (or label) or its element id (e<n>)",
        "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 4096}, "nodeId": {"type": "string", "pattern": "^e[0-9]+$", "maxLength": 32}},
        "oneOf": [{"required": ["text"]}, {"required": ["nodeId"]}]
    })
}

fn target_ref_schema() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["schemaVersion", "runtimeEpoch", "elementId", "guard"],
        "properties": {"schemaVersion": {"const": TARGET_SCHEMA}, "runtimeEpoch": {"type": "string", "minLength": 1, "maxLength": 256}, "elementId": {"type": "string", "pattern": "^e[0-9]+$"}, "guard": {"type": "string", "pattern": "^g[0-9]+$"}}
    })
}

fn logical(what: &str) -> Value {
    json!({"type": "number", "minimum": 0, "maximum": 2147483647, "description": format!("{what} in Flutter logical pixels")})
}

fn delta() -> Value {
    json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "not": {"const": 0}, "description": "Logical pixels to scroll (positive: further into the content)"})
}

/// The typed payloads the iOS Flutter runtime runs (aab-protocols §7).
fn payload_schema() -> Value {
    let variant = |name: &str, p: Value, req: &[&str]| {
        let mut props = json!({"action": {"const": name}});
        if let (Value::Object(a), Value::Object(b)) = (&mut props, p) {
            a.extend(b);
        }
        let mut r = vec!["action"];
        r.extend_from_slice(req);
        json!({"type": "object", "additionalProperties": false, "properties": props, "required": r})
    };
    let text = |d: &str| json!({"type": "string", "maxLength": 16384, "description": d});
    let mut input = variant("inputText", json!({"text": text("The input's new whole text"), "selector": selector_schema(), "targetRef": target_ref_schema(), "x": logical("x"), "y": logical("y")}), &["text"]);
    input["dependentRequired"] = json!({"targetRef": ["selector"], "x": ["y"], "y": ["x"]});
    let mut scroll = variant("scrollBy", json!({"delta": delta(), "selector": selector_schema(), "targetRef": target_ref_schema()}), &["delta"]);
    scroll["dependentRequired"] = json!({"targetRef": ["selector"]});
    json!({
        "description": "One Flutter action payload, sent as is with the host's actionId and execution; the Dart runtime checks any targetRef it carries",
        "oneOf": [
            variant("tapAt", json!({"x": logical("x"), "y": logical("y")}), &["x", "y"]),
            variant("tapText", json!({"text": {"type": "string", "minLength": 1, "maxLength": 4096}}), &["text"]),
            variant("tapTarget", json!({"selector": selector_schema(), "targetRef": target_ref_schema()}), &["selector", "targetRef"]),
            input,
            variant("swipe", json!({"startX": logical("start x"), "startY": logical("start y"), "endX": logical("end x"), "endY": logical("end y")}), &["startX", "startY", "endX", "endY"]),
            scroll,
            variant("hideKeyboard", json!({}), &[]),
            variant("back", json!({}), &[])
        ]
    })
}

fn map(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Preflight (the status is the fresh tree), optionally bind `selector` for
/// `action`, run `payload` under the Dart epoch.
async fn run(ctx: &Context<'_>, inv: &Invocation, command: &str, args: &FlutterArgs, bound_for: Option<&str>, mut payload: Map<String, Value>) -> Result<Value, ProviderError> {
    let deadline = deadline(ctx);
    let target = args.target();
    target.check()?;
    cancellable(ctx, async {
        let session = crate::managed::open(&target, Kind::Flutter, deadline).await?;
        let op = operable(&session.status)?;
        let dart_epoch = epoch(op);
        let node = match (bound_for, &args.selector) {
            (Some(action), Some(sel)) => {
                let n = bind(op, sel, action)?;
                payload.insert("selector".into(), sel.clone());
                payload.insert("targetRef".into(), n["targetRef"].clone());
                Some(n)
            }
            _ => None,
        };
        let mut out = session.execute(ctx, inv, command, &dart_epoch, payload).await?;
        if let Some(n) = node {
            out["bound"] = summary(&n);
        }
        out["provider"] = json!("flutter");
        Ok(out)
    })
    .await
}

// ------------------------------------------------------------------ reads

pub struct Tree;
impl Command for Tree {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        app_query("ios-flutter-tree", "The Dart runtime's snapshot from the SDK status: route, keyboard, and the layout (operable tree with targetRefs, under the Dart engine's runtimeEpoch).", Some("app.read")).input_schema(object(props(json!({})), &APP_REQUIRED))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        read_with(ctx, args.target(), |conn, deadline| async move {
            let status = sdk::read(&conn.endpoint, "/v1/status", deadline).await?;
            sdk::check_status(&status, &conn.endpoint.identity, None)?;
            let op = operable(&status)?;
            let dart = epoch(op);
            let mut out = with_facts(json!({"ok": true, "flutter": status["flutter"]}), &conn);
            out["flutterRuntimeEpoch"] = json!(dart);
            Ok(out)
        })
        .await
        .map(Reply::Json)
    }
}

pub struct Nodes;
impl Command for Nodes {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        app_query("ios-flutter-nodes", "The Dart runtime's operable Flutter nodes (id, widgetType, text, label, role, actions, bounds, targetRef), its runtimeEpoch, viewport and whether the tree was truncated (600-node engine limit).", Some("app.read"))
            .input_schema(object(props(json!({})), &APP_REQUIRED))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        read_with(ctx, args.target(), |conn, deadline| async move {
            let status = sdk::read(&conn.endpoint, "/v1/status", deadline).await?;
            sdk::check_status(&status, &conn.endpoint.identity, None)?;
            let op = operable(&status)?;
            let mut out = with_facts(json!({"ok": true}), &conn);
            out["sdkRuntimeEpoch"] = out["runtimeEpoch"].take();
            for k in ["runtimeEpoch", "nodes", "count", "visitedCount", "truncated", "viewport", "executionSchema", "updatedAtMs"] {
                out[k] = op.get(k).cloned().unwrap_or(Value::Null);
            }
            out["route"] = status.pointer("/flutter/route").cloned().unwrap_or(Value::Null);
            Ok(out)
        })
        .await
        .map(Reply::Json)
    }
}

// ------------------------------------------------------------------ mutations

pub struct Action;
impl Command for Action {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        device_mutation("ios-flutter-action", "ios-app", "Expert: run one typed Flutter action payload (tapAt, tapText, tapTarget, inputText, swipe, scrollBy, hideKeyboard, back) as a managed aab.flutter-execution/v1 action under the Dart engine's epoch. Not callable from a Script.")
            .role("expert")
            .input_schema(object(props(json!({"payload": payload_schema()})), &required(&["payload"])))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        let payload = map(args.payload.clone().unwrap_or(Value::Null));
        run(ctx, inv, "ios-flutter-action", &args, None, payload).await.map(Reply::Json)
    }
}

fn typed(command: &str, summary: &str, extra: Value, req: &[&'static str]) -> CommandSpec {
    device_mutation(command, "ios-app", summary).permission("app.interact").input_schema(object(props(extra), &required(req)))
}

pub struct Tap;
impl Command for Tap {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        typed("ios-tap-flutter", "Tap the one Flutter node an exact selector ({text} | {nodeId}) names, bound to its targetRef in a fresh untruncated tree (tapTarget, revalidated by the Dart runtime); receipt and settlement proof.", json!({"selector": selector_schema()}), &["selector"])
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        run(ctx, inv, "ios-tap-flutter", &args, Some("tap"), map(json!({"action": "tapTarget"}))).await.map(Reply::Json)
    }
}

pub struct InputText;
impl Command for InputText {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        typed(
            "ios-input-flutter-text",
            "Replace the text of the one Flutter input an exact selector names, bound to its targetRef in a fresh untruncated tree (inputText); receipt and settlement proof.",
            json!({"selector": selector_schema(), "text": {"type": "string", "maxLength": 16384, "description": "The input's new whole text"}}),
            &["selector", "text"],
        )
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        let payload = map(json!({"action": "inputText", "text": args.text.clone().unwrap_or_default()}));
        run(ctx, inv, "ios-input-flutter-text", &args, Some("input"), payload).await.map(Reply::Json)
    }
}

pub struct Scroll;
impl Command for Scroll {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        typed("ios-scroll-flutter", "Scroll the one Flutter scrollable an exact selector names by delta logical pixels, bound to its targetRef in a fresh untruncated tree (scrollBy); receipt and settlement proof.", json!({"selector": selector_schema(), "delta": delta()}), &["selector", "delta"])
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        let payload = map(json!({"action": "scrollBy", "delta": args.delta.unwrap_or_default()}));
        run(ctx, inv, "ios-scroll-flutter", &args, Some("scroll"), payload).await.map(Reply::Json)
    }
}

pub struct Back;
impl Command for Back {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        typed("ios-flutter-back", "Request one Flutter navigation back action (back) as a managed action; receipt and settlement proof.", json!({}), &[])
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        run(ctx, inv, "ios-flutter-back", &args, None, map(json!({"action": "back"}))).await.map(Reply::Json)
    }
}

pub struct HideKeyboard;
impl Command for HideKeyboard {
    type Provider = IosProvider;
    type Args = FlutterArgs;
    fn spec() -> CommandSpec {
        typed("ios-flutter-hide-keyboard", "Request explicit Flutter focus and keyboard dismissal (hideKeyboard) as a managed action; observe viewport.viewInsets.bottom == 0 before acting on newly exposed controls.", json!({}), &[])
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterArgs) -> Result<Reply, ProviderError> {
        run(ctx, inv, "ios-flutter-hide-keyboard", &args, None, map(json!({"action": "hideKeyboard"}))).await.map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(spec: &CommandSpec, extra: Value) -> bool {
        let mut a = json!({"deviceId": "00008110-000A1C2E3F4B5D6E", "bundleId": "com.example.shop"});
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        aab_plugin_api::validate::compile(&spec.input_schema).unwrap().is_valid(&a)
    }

    #[test]
    fn typed_commands_need_an_exact_selector() {
        let tap = Tap::spec();
        assert!(validate(&tap, json!({"selector": {"text": "Add"}})));
        assert!(validate(&tap, json!({"selector": {"nodeId": "e4"}})));
        assert!(!validate(&tap, json!({})), "a selector is required on iOS");
        assert!(!validate(&tap, json!({"selector": {"text": "Add", "nodeId": "e1"}})));
        assert!(!validate(&tap, json!({"tapX": 1, "tapY": 2})), "no coordinates on iOS");
        let input = InputText::spec();
        assert!(validate(&input, json!({"selector": {"text": "Search"}, "text": ""})));
        assert!(!validate(&input, json!({"selector": {"text": "Search"}})));
        let scroll = Scroll::spec();
        assert!(validate(&scroll, json!({"selector": {"nodeId": "e9"}, "delta": -120.5})));
        assert!(!validate(&scroll, json!({"selector": {"nodeId": "e9"}, "delta": 0})));
        assert!(!validate(&scroll, json!({"selector": {"nodeId": "e9"}})));
        assert!(validate(&Back::spec(), json!({})));
        assert!(!validate(&Back::spec(), json!({"selector": {"text": "x"}})));
        let action = Action::spec();
        assert!(validate(&action, json!({"payload": {"action": "back"}})));
        assert!(validate(&action, json!({"payload": {"action": "scrollBy", "delta": 5}})));
        assert!(!validate(&action, json!({"payload": {"action": "tapAt", "x": 1}})));
        assert!(!validate(&action, json!({"payload": {"action": "h5Eval", "script": "1"}})));
        assert_eq!((action.role.as_str(), action.script_permission.as_deref()), ("expert", None));
        for s in [Tap::spec(), InputText::spec(), Scroll::spec(), Back::spec(), HideKeyboard::spec()] {
            assert_eq!((s.script_permission.as_deref(), s.device_key.as_slice()), (Some("app.interact"), &["deviceId".to_string()][..]), "{}", s.command);
        }
    }
}
