//! The Flutter commands (aab-host §1.4 `flutter` rows) over [`crate::flutter`]:
//! `flutter-tree` (the whole layout: operable tree, widget inspector, widget
//! dump, semantics), `flutter-nodes` (the operable nodes), `flutter-action`
//! (expert: one typed payload as is), `tap-flutter` (selector XOR tapX+tapY),
//! `tap-flutter-text`, `input-flutter-text` (selector | tapX+tapY | the focused
//! input; `hideKeyboard` as a second Flutter action) and `scroll-flutter`
//! (`delta` → scrollBy, `targetText` → scrollUntilText; optional selector of the
//! scrollable). Every selector is bound to a targetRef from a fresh,
//! untruncated tree by the host; coordinates are Flutter logical pixels.
//! Argument rules live in the schemas.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::flutter::{TARGET_SCHEMA, act, check_snapshot, open, run};
use crate::manifest::{MUTATION_REQUIRED, coordinate, device_mutation, object, package_name, port, props};
use crate::native_exec::App;
use crate::sdk::http;

fn port_prop() -> Value {
    port("Host port of an existing or wanted adb forward to the SDK socket")
}

/// `{text}` | `{nodeId}`: exactly one.
pub(crate) fn selector_schema() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One Flutter node of a fresh operable tree: exactly one of its text (or label) or its element id (e<n>)",
        "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 4096}, "nodeId": {"type": "string", "pattern": "^e[0-9]+$", "maxLength": 32}},
        "oneOf": [{"required": ["text"]}, {"required": ["nodeId"]}]
    })
}

fn target_ref_schema() -> Value {
    let s = json!({"type": "string", "minLength": 1, "maxLength": 256});
    json!({
        "type": "object", "additionalProperties": false, "required": ["schemaVersion", "runtimeEpoch", "elementId", "guard"],
        "properties": {"schemaVersion": {"const": TARGET_SCHEMA}, "runtimeEpoch": s, "elementId": {"type": "string", "pattern": "^e[0-9]+$"}, "guard": {"type": "string", "pattern": "^g[0-9]+$"}}
    })
}

fn logical(what: &str) -> Value {
    coordinate(&format!("{what} in Flutter logical pixels"))
}

fn delta() -> Value {
    json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "not": {"const": 0}, "description": "Logical pixels to scroll (positive: further into the content)"})
}

fn max_swipes() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 1000, "description": "Scroll steps before giving up (default 10)"})
}

fn text_prop(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": what})
}

fn map(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

// ------------------------------------------------------------------ reads

fn read_spec(command: &str, summary: &str) -> CommandSpec {
    CommandSpec::query(command)
        .platform("android")
        .domain("flutter")
        .target_kind("android-app")
        .summary(summary)
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(object(
            props(json!({
                "packageName": package_name(), "port": port_prop(),
                "maxNodes": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Return at most this many operable nodes (default 100); the rest are counted in dropped"},
                "visibleOnly": {"type": "boolean", "description": "Keep only visible operable nodes (default false)"},
                "textFilter": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Keep operable nodes whose text, label or value contains this (case-insensitive)"}
            })),
            &["packageName"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub max_nodes: Option<usize>,
    #[serde(default)]
    pub visible_only: bool,
    pub text_filter: Option<String>,
}

/// A node without its null fields and without a `tap` object that repeats its bounds.
fn compact(n: &Value) -> Value {
    let mut o: Map<String, Value> = n.as_object().cloned().unwrap_or_default();
    o.retain(|_, v| !v.is_null());
    if o.get("tap").and_then(|t| t.get("bounds")) == o.get("bounds") {
        o.remove("tap");
    }
    Value::Object(o)
}

/// The operable nodes after the filters and `maxNodes` (default 100), and how many each dropped.
fn shape(op: &Value, args: &ReadArgs) -> (Vec<Value>, Value) {
    let all = op["nodes"].as_array().cloned().unwrap_or_default();
    let needle = args.text_filter.as_ref().map(|t| t.to_lowercase());
    let filtered: Vec<&Value> = all
        .iter()
        .filter(|n| !args.visible_only || n["visible"] == true)
        .filter(|n| needle.as_ref().is_none_or(|t| ["text", "label", "value"].iter().any(|k| n[*k].as_str().is_some_and(|v| v.to_lowercase().contains(t)))))
        .collect();
    let max = args.max_nodes.unwrap_or(100);
    let kept: Vec<Value> = filtered.iter().take(max).map(|n| compact(n)).collect();
    let dropped = json!({"filters": all.len() - filtered.len(), "maxNodes": filtered.len().saturating_sub(max)});
    (kept, dropped)
}

/// The widget inspector tree cut to `budget` entries (pre-order).
fn prune(node: &Value, budget: &mut usize) -> Value {
    if *budget == 0 {
        return Value::Null;
    }
    *budget -= 1;
    let mut o = node.clone();
    let kids: Vec<Value> = node["children"].as_array().cloned().unwrap_or_default().iter().map(|k| prune(k, budget)).filter(|k| !k.is_null()).collect();
    o["children"] = json!(kids);
    o
}

/// A fresh snapshot through the SDK (a read: failures are not dispatched).
async fn snapshot(ctx: &Context<'_>, args: &ReadArgs) -> Result<(String, Value), ProviderError> {
    let budget = Budget::new(ctx, args.adb_timeout_ms);
    let app = AppArgs { package_name: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
    let (serial, route) = sdk_route(&app, &budget).await?;
    let status = http::request(route.forward.port, "GET", "/v1/flutter/snapshot", None, budget.adb()).await.map_err(|e| e.not_dispatched())?.body;
    Ok((serial, check_snapshot(&args.package_name, &status)?))
}

pub struct FlutterTree;
impl Command for FlutterTree {
    type Provider = AndroidProvider;
    type Args = ReadArgs;
    fn spec() -> CommandSpec {
        read_spec("flutter-tree", "The Flutter view's layout from the Dart runtime (GET /v1/flutter/snapshot): the operable tree (nodes with targetRef aab.flutter-target/v1, ≤600 nodes, truncated flag), widget inspector, widget dump and semantics layers, with the runtime epoch, route and device-pixel ratio.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: ReadArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (serial, mut flutter) = snapshot(ctx, &args).await?;
            // The reply stays within the host's delivery budget: nodes shaped as for
            // flutter-nodes, the other layers cut to the same size (counted in dropped).
            let max = args.max_nodes.unwrap_or(100);
            let layout = &mut flutter["layout"];
            let (nodes, dropped) = shape(&layout["operable"], &args);
            layout["operable"]["nodes"] = json!(nodes);
            let mut budget = max;
            let inspector_total = layout["widgetInspector"]["count"].as_u64().unwrap_or(0);
            layout["widgetInspector"]["root"] = prune(&layout["widgetInspector"]["root"], &mut budget);
            let sem: Vec<Value> = layout["semantics"]["nodes"].as_array().cloned().unwrap_or_default();
            layout["semantics"]["nodes"] = json!(sem.iter().take(max).cloned().collect::<Vec<_>>());
            let dump = layout["widgetDump"].as_str().unwrap_or("").to_string();
            let lines: Vec<&str> = dump.lines().collect();
            layout["widgetDump"] = json!(lines.iter().take(max).cloned().collect::<Vec<_>>().join("\n"));
            let dropped = json!({"operable": dropped, "widgetInspector": inspector_total.saturating_sub((max - budget) as u64), "semantics": sem.len().saturating_sub(max), "widgetDumpLines": lines.len().saturating_sub(max)});
            Ok(Reply::Json(json!({"ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": flutter["runtimeEpoch"], "flutter": flutter, "dropped": dropped})))
        })
        .await
    }
}

pub struct FlutterNodes;
impl Command for FlutterNodes {
    type Provider = AndroidProvider;
    type Args = ReadArgs;
    fn spec() -> CommandSpec {
        read_spec("flutter-nodes", "The Flutter view's operable nodes (id, widgetType, text, value, label, hint, role, actions, bounds in logical px, enabled/visible/offstage, targetRef) with counts, truncated flag and viewport.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: ReadArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (serial, flutter) = snapshot(ctx, &args).await?;
            let op = &flutter["layout"]["operable"];
            let (nodes, dropped) = shape(op, &args);
            Ok(Reply::Json(json!({
                "ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": op["runtimeEpoch"], "executionSchema": op["executionSchema"],
                "route": flutter["route"], "devicePixelRatio": flutter["devicePixelRatio"], "count": op["count"], "visitedCount": op["visitedCount"],
                "textCount": op["textCount"], "actionCount": op["actionCount"], "truncated": op["truncated"], "viewport": op["viewport"], "returned": nodes.len(), "dropped": dropped, "nodes": nodes,
            })))
        })
        .await
    }
}

// ------------------------------------------------------------------ flutter-action (expert)

fn payload_schema() -> Value {
    let variant = |name: &str, props: Value, required: &[&str]| {
        let mut p = json!({"action": {"const": name}});
        p.as_object_mut().unwrap().extend(props.as_object().unwrap().clone());
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": p, "required": req})
    };
    let sel = || json!({"selector": selector_schema(), "targetRef": target_ref_schema()});
    let with_sel = |extra: Value| {
        let mut s = sel();
        s.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s
    };
    let mut input = variant("inputText", with_sel(json!({"text": {"type": "string", "maxLength": 16384}, "x": logical("x"), "y": logical("y")})), &["text"]);
    input["dependentRequired"] = json!({"x": ["y"], "y": ["x"], "targetRef": ["selector"]});
    input["not"] = json!({"anyOf": [{"required": ["selector", "x"]}]});
    let mut scroll = variant("scrollBy", with_sel(json!({"delta": delta()})), &["delta"]);
    scroll["dependentRequired"] = json!({"targetRef": ["selector"]});
    let mut until = variant("scrollUntilText", with_sel(json!({"text": text_prop("Text to bring into view"), "maxSwipes": {"type": "integer", "minimum": 0, "maximum": 1000}})), &["text"]);
    until["dependentRequired"] = json!({"targetRef": ["selector"]});
    json!({
        "description": "One Flutter action payload (aab-protocols §7), sent as is with the host's actionId and execution",
        "oneOf": [
            variant("tapAt", json!({"x": logical("x"), "y": logical("y")}), &["x", "y"]),
            variant("tapText", json!({"text": text_prop("Exact text of the node to tap")}), &["text"]),
            variant("tapTarget", sel(), &["selector", "targetRef"]),
            input,
            variant("swipe", json!({"startX": logical("start x"), "startY": logical("start y"), "endX": logical("end x"), "endY": logical("end y")}), &["startX", "startY", "endX", "endY"]),
            scroll,
            until,
            variant("hideKeyboard", json!({}), &[]),
            variant("back", json!({}), &[])
        ]
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FlutterActionArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub payload: Value,
}

pub struct FlutterAction;
impl Command for FlutterAction {
    type Provider = AndroidProvider;
    type Args = FlutterActionArgs;
    fn spec() -> CommandSpec {
        let mut required = MUTATION_REQUIRED.to_vec();
        required.push("payload");
        device_mutation("flutter-action", "flutter", "android-app", "Expert: run one typed Flutter action payload (tapAt, tapText, tapTarget, inputText, swipe, scrollBy, scrollUntilText, hideKeyboard, back) as a managed aab.flutter-execution/v1 action; the Dart runtime checks any targetRef it carries.")
            .role("expert")
            .input_schema(object(props(json!({"packageName": package_name(), "port": port_prop(), "payload": payload_schema()})), &required))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterActionArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let (session, _) = open(ctx, &app).await?;
            let mut out = act(ctx, inv, "flutter-action", &session, map(args.payload)).await?;
            out["provider"] = json!("flutter");
            Ok(Reply::Json(out))
        })
        .await
    }
}

// ------------------------------------------------------------------ taps

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TapFlutterArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub selector: Option<Value>,
    pub tap_x: Option<f64>,
    pub tap_y: Option<f64>,
}

pub struct TapFlutter;
impl Command for TapFlutter {
    type Provider = AndroidProvider;
    type Args = TapFlutterArgs;
    fn spec() -> CommandSpec {
        let mut schema = object(props(json!({"packageName": package_name(), "port": port_prop(), "selector": selector_schema(), "tapX": logical("x"), "tapY": logical("y")})), &MUTATION_REQUIRED);
        schema["oneOf"] = json!([{"required": ["selector"], "not": {"anyOf": [{"required": ["tapX"]}, {"required": ["tapY"]}]}}, {"required": ["tapX", "tapY"], "not": {"required": ["selector"]}}]);
        device_mutation("tap-flutter", "flutter", "android-app", "Tap one Flutter node: a selector ({text} | {nodeId}) bound to its targetRef in a fresh untruncated tree (tapTarget, revalidated by the Dart runtime), or tapX+tapY in logical pixels (tapAt); receipt and settlement proof.")
            .permission("app.interact")
            .input_schema(schema)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: TapFlutterArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let out = match (&args.selector, args.tap_x, args.tap_y) {
                (Some(sel), _, _) => run(ctx, inv, "tap-flutter", &app, Some(sel), map(json!({"action": "tapTarget"}))).await?,
                (None, Some(x), Some(y)) => run(ctx, inv, "tap-flutter", &app, None, map(json!({"action": "tapAt", "x": x, "y": y}))).await?,
                _ => return Err(ProviderError::new("missing_argument", "selector or tapX+tapY").with_field("selector").not_dispatched()),
            };
            Ok(Reply::Json(out))
        })
        .await
    }
}

/// Tap the one Flutter node whose text is exactly `text` (shared with `tap-text`).
pub(crate) async fn tap_flutter_text(ctx: &Context<'_>, inv: &Invocation, command: &str, app: &App, text: &str) -> Result<Value, ProviderError> {
    run(ctx, inv, command, app, Some(&json!({"text": text})), map(json!({"action": "tapTarget"}))).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TapFlutterTextArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub target_text: String,
}

pub struct TapFlutterText;
impl Command for TapFlutterText {
    type Provider = AndroidProvider;
    type Args = TapFlutterTextArgs;
    fn spec() -> CommandSpec {
        let mut required = MUTATION_REQUIRED.to_vec();
        required.push("targetText");
        device_mutation("tap-flutter-text", "flutter", "android-app", "Tap the one visible Flutter node whose text (or label) is exactly targetText, bound to its targetRef in a fresh untruncated tree; receipt and settlement proof.")
            .permission("app.interact")
            .input_schema(object(props(json!({"packageName": package_name(), "port": port_prop(), "targetText": text_prop("Exact text of the Flutter node to tap")})), &required))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: TapFlutterTextArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async { tap_flutter_text(ctx, inv, "tap-flutter-text", &app, &args.target_text).await.map(Reply::Json) }).await
    }
}

// ------------------------------------------------------------------ input

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InputFlutterTextArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub text: String,
    pub selector: Option<Value>,
    pub tap_x: Option<f64>,
    pub tap_y: Option<f64>,
    #[serde(default)]
    pub hide_keyboard: bool,
}

pub struct InputFlutterText;
impl Command for InputFlutterText {
    type Provider = AndroidProvider;
    type Args = InputFlutterTextArgs;
    fn spec() -> CommandSpec {
        let mut required = MUTATION_REQUIRED.to_vec();
        required.push("text");
        let mut schema = object(
            props(json!({
                "packageName": package_name(), "port": port_prop(),
                "text": {"type": "string", "maxLength": 16384, "description": "The input's new whole text"},
                "selector": selector_schema(), "tapX": logical("x of the input (with tapY; not with selector)"), "tapY": logical("y of the input (with tapX; not with selector)"),
                "hideKeyboard": {"type": "boolean", "description": "Hide the keyboard afterwards (a second Flutter action, id <actionId>:1)"}
            })),
            &required,
        );
        schema["dependentRequired"] = json!({"tapX": ["tapY"], "tapY": ["tapX"]});
        schema["not"] = json!({"anyOf": [{"required": ["selector", "tapX"]}, {"required": ["selector", "tapY"]}]});
        device_mutation("input-flutter-text", "flutter", "android-app", "Replace the text of one Flutter input: the one a selector names (bound to its targetRef in a fresh untruncated tree), the one at tapX/tapY (logical px), or the focused one; receipt and settlement proof.")
            .permission("app.interact")
            .input_schema(schema)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: InputFlutterTextArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let mut payload = map(json!({"action": "inputText", "text": args.text}));
            if let (Some(x), Some(y)) = (args.tap_x, args.tap_y) {
                payload.insert("x".into(), json!(x));
                payload.insert("y".into(), json!(y));
            }
            let mut out = run(ctx, inv, "input-flutter-text", &app, args.selector.as_ref(), payload).await?;
            if args.hide_keyboard {
                // A second managed action with its own id and record; a refusal before
                // dispatch is reported beside the input's success.
                let mut second = inv.clone();
                second.action_id = format!("{}:1", inv.action_id);
                let hidden = async {
                    let (session, _) = open(ctx, &app).await?;
                    act(ctx, &second, "input-flutter-text", &session, map(json!({"action": "hideKeyboard"}))).await
                };
                out["hideKeyboard"] = match hidden.await {
                    Ok(r) => json!({"ok": true, "actionId": second.action_id, "device": r["device"]}),
                    Err(e) if e.dispatched == Some(false) => json!({"ok": false, "error": e.error, "message": e.message}),
                    Err(e) => return Err(e),
                };
            }
            Ok(Reply::Json(out))
        })
        .await
    }
}

// ------------------------------------------------------------------ scroll

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScrollFlutterArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub selector: Option<Value>,
    pub target_text: Option<String>,
    pub delta: Option<f64>,
    pub max_swipes: Option<u64>,
}

pub struct ScrollFlutter;
impl Command for ScrollFlutter {
    type Provider = AndroidProvider;
    type Args = ScrollFlutterArgs;
    fn spec() -> CommandSpec {
        let mut schema = object(
            props(json!({
                "packageName": package_name(), "port": port_prop(),
                "selector": selector_schema(), "targetText": text_prop("Scroll until a node with exactly this text is in view (scrollUntilText)"),
                "delta": delta(), "maxSwipes": max_swipes()
            })),
            &MUTATION_REQUIRED,
        );
        schema["oneOf"] = json!([{"required": ["delta"], "not": {"required": ["targetText"]}}, {"required": ["targetText"], "not": {"required": ["delta"]}}]);
        schema["dependentRequired"] = json!({"maxSwipes": ["targetText"]});
        device_mutation("scroll-flutter", "flutter", "android-app", "Scroll a Flutter scrollable (the one a selector names or contains, bound in a fresh untruncated tree; default the first visible one) by delta logical pixels, or until a node with targetText is in view (maxSwipes steps); receipt and settlement proof.")
            .permission("app.interact")
            .input_schema(schema)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: ScrollFlutterArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let payload = match (&args.target_text, args.delta) {
                (Some(t), _) => {
                    let mut p = map(json!({"action": "scrollUntilText", "text": t}));
                    if let Some(m) = args.max_swipes {
                        p.insert("maxSwipes".into(), json!(m));
                    }
                    p
                }
                (None, Some(d)) => map(json!({"action": "scrollBy", "delta": d})),
                _ => return Err(ProviderError::new("missing_argument", "delta or targetText").with_field("delta").not_dispatched()),
            };
            run(ctx, inv, "scroll-flutter", &app, args.selector.as_ref(), payload).await.map(Reply::Json)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(schema: &Value, v: &Value) -> bool {
        aab_plugin_api::validate::compile(schema).unwrap().is_valid(v)
    }

    #[test]
    fn argument_rules_are_in_the_schemas() {
        let base = json!({"packageName": "a.b", "serial": "s"});
        let with = |extra: Value| {
            let mut a = base.clone();
            a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            a
        };
        let tap = TapFlutter::spec().input_schema;
        assert!(validate(&tap, &with(json!({"selector": {"text": "Add"}}))));
        assert!(validate(&tap, &with(json!({"tapX": 1, "tapY": 2}))));
        assert!(!validate(&tap, &with(json!({"tapX": 1}))));
        assert!(!validate(&tap, &with(json!({"selector": {"text": "Add"}, "tapX": 1, "tapY": 2}))));
        assert!(!validate(&tap, &with(json!({"selector": {"text": "Add", "nodeId": "e1"}}))));
        assert!(!validate(&tap, &base));
        let scroll = ScrollFlutter::spec().input_schema;
        assert!(validate(&scroll, &with(json!({"delta": 100}))));
        assert!(validate(&scroll, &with(json!({"targetText": "Product 9", "maxSwipes": 5}))));
        assert!(!validate(&scroll, &with(json!({"delta": 100, "maxSwipes": 5}))));
        assert!(!validate(&scroll, &with(json!({"delta": 0}))));
        let input = InputFlutterText::spec().input_schema;
        assert!(!validate(&input, &with(json!({"text": "x", "tapX": 1}))));
        assert!(!validate(&input, &with(json!({"text": "x", "tapX": 1, "tapY": 1, "selector": {"text": "Search"}}))));
        let action = FlutterAction::spec().input_schema;
        assert!(validate(&action, &with(json!({"payload": {"action": "back"}}))));
        assert!(validate(&action, &with(json!({"payload": {"action": "scrollBy", "delta": 5}}))));
        assert!(!validate(&action, &with(json!({"payload": {"action": "tapAt", "x": 1}}))));
        assert!(!validate(&action, &with(json!({"payload": {"action": "h5Eval"}}))));
    }
}
