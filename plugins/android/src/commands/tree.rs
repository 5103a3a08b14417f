//! `tree`: the app SDK's native view tree (`GET /v1/view/tree`, §1.5) as a flat,
//! filtered node list. The SDK route takes no parameters, so filters, `visibleOnly`,
//! `maxDepth` and `maxNodes` are applied here; the reply says how many matching
//! nodes each limit dropped. Also the tree read and walk `wait-text` polls with.
//! With `controls:true` it is the `native` Intent provider's observation instead:
//! a flat, bounded list of the actionable nodes (see [`controls`]).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, port, props};

fn spec() -> CommandSpec {
    CommandSpec::query("tree")
        .platform("android")
        .domain("core")
        .target_kind("android-app")
        .summary("The app's native view tree from the SDK as a flat node list (pre-order, with depth and parent): compact nodes (id, text, desc, bounds, clickable/enabled/focused…) or full SDK nodes with targetRef; filters by text, resource id and class, visibleOnly, maxDepth and maxNodes, with the count each limit dropped.")
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(with_controls_rules(object(
            props(json!({
                "packageName": package_name(),
                "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
                "compact": {"type": "boolean", "description": "Small nodes: nodeId, depth, parent, class (simple name), id (resource entry name), text, desc, bounds [l,t,r,b] and only the notable flags (default false: the SDK's full node objects without children)"},
                "textFilter": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Keep nodes whose text or content description contains this (case-insensitive)"},
                "resourceIdFilter": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Keep nodes whose resource name (pkg:id/name) contains this (case-insensitive)"},
                "classFilter": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Keep nodes whose class name contains this (case-insensitive)"},
                "visibleOnly": {"type": "boolean", "description": "Keep only effectively visible nodes (default false)"},
                "maxNodes": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Return at most this many matching nodes (pre-order); the rest are counted in dropped.maxNodes"},
                "maxDepth": {"type": "integer", "minimum": 0, "maximum": 200, "description": "Skip nodes deeper than this (root = 0); matching ones are counted in dropped.maxDepth"},
                "controls": {"type": "boolean", "description": "Reply with the actionable controls instead of nodes (the native Intent observation): controlId c1.. per reply, text, resourceName, contentDescription, className, role, bounds, flags, plus activity and foreground window; bounded by maxControls and 48 KiB"},
                "maxControls": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "With controls: at most this many controls (default 300); the rest are counted in controlsDropped"}
            })),
            &["packageName"],
        )))
}

/// `maxControls` needs `controls`; a controls reply has no node shaping.
fn with_controls_rules(mut schema: Value) -> Value {
    schema["dependentRequired"] = json!({"maxControls": ["controls"]});
    schema["if"] = json!({"required": ["controls"], "properties": {"controls": {"const": true}}});
    schema["then"] = json!({"properties": {"compact": false, "maxNodes": false, "maxDepth": false}});
    schema
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TreeArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    #[serde(default)]
    pub compact: bool,
    pub text_filter: Option<String>,
    pub resource_id_filter: Option<String>,
    pub class_filter: Option<String>,
    #[serde(default)]
    pub visible_only: bool,
    pub max_nodes: Option<usize>,
    pub max_depth: Option<usize>,
    #[serde(default)]
    pub controls: bool,
    pub max_controls: Option<usize>,
}

pub struct Tree;
impl Command for Tree {
    type Provider = AndroidProvider;
    type Args = TreeArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: TreeArgs) -> Result<Reply, ProviderError> {
        let app = AppArgs { package_name: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        let selection = Selection {
            compact: args.compact,
            text: args.text_filter.as_deref().map(str::to_lowercase),
            resource_id: args.resource_id_filter.as_deref().map(str::to_lowercase),
            class: args.class_filter.as_deref().map(str::to_lowercase),
            visible_only: args.visible_only,
            max_nodes: args.max_nodes,
            max_depth: args.max_depth,
        };
        cancellable(ctx, async {
            let read = read(&app, &budget).await?;
            let mut reply = if args.controls { controls(&read.body, &selection, args.max_controls.unwrap_or(DEFAULT_MAX_CONTROLS)) } else { select(&read.body, &selection) };
            reply["serial"] = json!(read.serial);
            reply["packageName"] = json!(args.package_name);
            reply["runtimeEpoch"] = json!(read.runtime_epoch);
            reply["filters"] = json!({"textFilter": args.text_filter, "resourceIdFilter": args.resource_id_filter, "classFilter": args.class_filter, "visibleOnly": args.visible_only, "maxNodes": args.max_nodes, "maxDepth": args.max_depth});
            if args.controls {
                let activity = reply["activity"].as_str().map(str::to_string);
                reply["foreground"] = json!({"packageName": args.package_name, "activity": activity, "windowId": read.body.get("foregroundWindowId"), "warning": read.body.get("foregroundWarning")});
            }
            Ok(reply)
        })
        .await
        .map(Reply::Json)
    }
}

/// One tree read: the SDK body (checked `ok:true`), the serial and the SDK process.
pub(crate) struct TreeRead {
    pub serial: String,
    pub runtime_epoch: String,
    pub body: Value,
}

/// Device selection, the verified forward (§2.1), then `GET /v1/view/tree`. An
/// `ok:false` answer keeps the SDK's code (`no_current_activity`, …), not dispatched.
pub(crate) async fn read(args: &AppArgs, budget: &Budget) -> Result<TreeRead, ProviderError> {
    let (serial, route) = sdk_route(args, budget).await?;
    let response = crate::sdk::http::request(route.forward.port, "GET", "/v1/view/tree", None, budget.deadline).await?;
    let body = response.body;
    if body.get("ok") != Some(&Value::Bool(true)) {
        let code = body.get("error").and_then(Value::as_str).unwrap_or(crate::sdk::http::BRIDGE_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("the SDK of {} did not return its view tree", args.package_name)).with_details(json!({"body": body})).not_dispatched());
    }
    Ok(TreeRead { serial, runtime_epoch: route.descriptor.runtime_epoch, body })
}

/// What to keep of a tree (filters are lowercased).
#[derive(Default)]
pub(crate) struct Selection {
    pub compact: bool,
    pub text: Option<String>,
    pub resource_id: Option<String>,
    pub class: Option<String>,
    pub visible_only: bool,
    pub max_nodes: Option<usize>,
    pub max_depth: Option<usize>,
}

impl Selection {
    fn matches(&self, n: &Value) -> bool {
        let has = |field: &str, needle: &str| n.get(field).and_then(Value::as_str).is_some_and(|s| s.to_lowercase().contains(needle));
        (!self.visible_only || n.get("visible") == Some(&Value::Bool(true)))
            && self.text.as_deref().is_none_or(|t| has("text", t) || has("contentDescription", t))
            && self.resource_id.as_deref().is_none_or(|r| has("resourceName", r))
            && self.class.as_deref().is_none_or(|c| has("className", c))
    }
}

/// A window of the tree body: its summary (without `root`) and its root node.
/// Bodies without `windows` (older SDKs) have the activity `root` only.
pub(crate) fn windows(body: &Value) -> Vec<(Value, &Value)> {
    match body.get("windows").and_then(Value::as_array).filter(|w| !w.is_empty()) {
        Some(ws) => ws
            .iter()
            .filter_map(|w| {
                let root = w.get("root").filter(|r| r.is_object())?;
                let mut summary = w.as_object().cloned().unwrap_or_default();
                summary.remove("root");
                Some((Value::Object(summary), root))
            })
            .collect(),
        None => body.get("root").filter(|r| r.is_object()).map(|r| vec![(json!({"index": 0, "type": "activity"}), r)]).unwrap_or_default(),
    }
}

/// Visit every node in pre-order with (window index, depth, parent nodeId).
pub(crate) fn walk<'a>(body: &'a Value, mut visit: impl FnMut(usize, usize, Option<&'a Value>, &'a Value)) {
    fn rec<'a>(w: usize, depth: usize, parent: Option<&'a Value>, n: &'a Value, visit: &mut impl FnMut(usize, usize, Option<&'a Value>, &'a Value)) {
        visit(w, depth, parent, n);
        for c in n.get("children").and_then(Value::as_array).into_iter().flatten() {
            rec(w, depth + 1, n.get("nodeId"), c, visit);
        }
    }
    for (i, (_, root)) in windows(body).into_iter().enumerate() {
        rec(i, 0, None, root, &mut visit);
    }
}

/// The resource entry name of `pkg:id/name`.
fn entry_name(resource: &str) -> &str {
    resource.rsplit_once(":id/").map_or(resource, |(_, n)| n)
}

fn compact_node(n: &Value, depth: usize, parent: Option<&Value>) -> Value {
    let mut o = Map::new();
    o.insert("nodeId".into(), n.get("nodeId").cloned().unwrap_or(Value::Null));
    o.insert("depth".into(), json!(depth));
    o.insert("parent".into(), parent.cloned().unwrap_or(Value::Null));
    let class = n.get("simpleClassName").or_else(|| n.get("className")).cloned().unwrap_or(Value::Null);
    o.insert("class".into(), class);
    if let Some(r) = n.get("resourceName").and_then(Value::as_str) {
        o.insert("id".into(), json!(entry_name(r)));
    }
    for (from, to) in [("text", "text"), ("contentDescription", "desc")] {
        if let Some(s) = n.get(from).and_then(Value::as_str).filter(|s| !s.is_empty()) {
            o.insert(to.into(), json!(s));
        }
    }
    if let Some(b) = n.get("bounds") {
        let side = |k: &str| b.get(k).and_then(Value::as_i64).unwrap_or(0);
        o.insert("bounds".into(), json!([side("left"), side("top"), side("right"), side("bottom")]));
    }
    // Only flags that differ from a plain view's: small and still complete.
    for flag in ["clickable", "longClickable", "editable", "focused", "selected", "scrollable"] {
        if n.get(flag) == Some(&Value::Bool(true)) {
            o.insert(flag.into(), json!(true));
        }
    }
    for flag in ["enabled", "visible"] {
        if n.get(flag) == Some(&Value::Bool(false)) {
            o.insert(flag.into(), json!(false));
        }
    }
    if let Some(c) = n.get("checked").filter(|c| c.is_boolean()) {
        o.insert("checked".into(), c.clone());
    }
    Value::Object(o)
}

fn full_node(n: &Value, depth: usize, parent: Option<&Value>) -> Value {
    let mut o = n.as_object().cloned().unwrap_or_default();
    o.remove("children");
    o.insert("depth".into(), json!(depth));
    o.insert("parentNodeId".into(), parent.cloned().unwrap_or(Value::Null));
    Value::Object(o)
}

/// The reply body of `tree` for an SDK tree body.
pub(crate) fn select(body: &Value, s: &Selection) -> Value {
    let summaries: Vec<Value> = windows(body).into_iter().map(|(w, _)| w).collect();
    let several = summaries.len() > 1;
    let (mut nodes, mut seen, mut matched, mut by_depth, mut by_count) = (vec![], 0usize, 0usize, 0usize, 0usize);
    walk(body, |w, depth, parent, n| {
        seen += 1;
        if !s.matches(n) {
            return;
        }
        if s.max_depth.is_some_and(|m| depth > m) {
            by_depth += 1;
            return;
        }
        matched += 1;
        if s.max_nodes.is_some_and(|m| nodes.len() >= m) {
            by_count += 1;
            return;
        }
        let mut node = if s.compact { compact_node(n, depth, parent) } else { full_node(n, depth, parent) };
        if several {
            node["window"] = json!(w);
        }
        nodes.push(node);
    });
    reply(body, summaries, seen, json!({
        "compact": s.compact,
        "matched": matched + by_depth,
        "returned": nodes.len(),
        "truncated": by_depth + by_count > 0,
        "dropped": {"maxNodes": by_count, "maxDepth": by_depth},
        "nodes": nodes,
    }))
}

/// The reply both tree forms share (activity, windows, node count) around the
/// form's own fields, `updatedAtMs` last.
fn reply(body: &Value, summaries: Vec<Value>, seen: usize, own: Value) -> Value {
    let mut out = json!({
        "ok": true,
        "activity": body.get("activity"),
        "foregroundWindowId": body.get("foregroundWindowId"),
        "foregroundWarning": body.get("foregroundWarning"),
        "windowCount": summaries.len(),
        "windows": summaries,
        "nodeCount": body.get("nodeCount").and_then(Value::as_u64).unwrap_or(seen as u64),
    });
    if let (Some(out), Value::Object(own)) = (out.as_object_mut(), own) {
        out.extend(own);
        out.insert("updatedAtMs".into(), body.get("updatedAtMs").cloned().unwrap_or(Value::Null));
    }
    out
}

/// Default and byte budget of the controls list (the host's summary budget is
/// 64 KiB of JSON; the list leaves room for the summary's own fields).
const DEFAULT_MAX_CONTROLS: usize = 300;
const CONTROLS_MAX_BYTES: usize = 48 * 1024;
/// Texts longer than this are cut (the SDK already cuts `text` at 300).
const CONTROL_TEXT_MAX: usize = 300;

/// What kind of control a node is (aab-host §8.3 roles).
fn role(n: &Value) -> &'static str {
    let flag = |f: &str| n.get(f) == Some(&Value::Bool(true));
    let class = n.get("className").and_then(Value::as_str).unwrap_or("");
    if n.get("checked").is_some_and(Value::is_boolean) {
        if class.ends_with("Switch") { "switch" } else if class.ends_with("RadioButton") { "radio" } else { "checkbox" }
    } else if flag("editable") {
        "input"
    } else if class.ends_with("Button") && !class.ends_with("ImageButton") {
        "button"
    } else if class.ends_with("ImageView") || class.ends_with("ImageButton") {
        "image"
    } else if flag("clickable") || flag("longClickable") {
        "clickable"
    } else {
        "text"
    }
}

fn cut(s: &str) -> String {
    s.chars().take(CONTROL_TEXT_MAX).collect()
}

/// One control: the node's identity fields and state, nothing else.
fn control(n: &Value, id: usize) -> Value {
    let text = |f: &str| n.get(f).and_then(Value::as_str).filter(|s| !s.is_empty()).map(cut);
    let flag = |f: &str| n.get(f).and_then(Value::as_bool).unwrap_or(false);
    let b = n.get("bounds");
    let side = |k: &str| b.and_then(|b| b.get(k)).and_then(Value::as_i64).unwrap_or(0);
    json!({
        "controlId": format!("c{id}"), "nodeId": n.get("nodeId"), "role": role(n),
        "text": text("text"), "resourceName": text("resourceName"), "contentDescription": text("contentDescription"),
        "className": n.get("className"),
        "bounds": {"left": side("left"), "top": side("top"), "right": side("right"), "bottom": side("bottom")},
        "enabled": flag("enabled"), "clickable": flag("clickable"), "longClickable": flag("longClickable"), "editable": flag("editable"),
        "checked": n.get("checked").filter(|c| c.is_boolean()), "selected": flag("selected"), "focused": flag("focused"), "visible": flag("visible"),
        "scrollable": flag("scrollable"),
    })
}

/// Whether a node is worth an agent's attention (§8.3): it carries text or a
/// description, or it can be acted on.
fn actionable(n: &Value) -> bool {
    let has = |f: &str| n.get(f).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    let flag = |f: &str| n.get(f) == Some(&Value::Bool(true));
    has("text") || has("contentDescription") || flag("clickable") || flag("longClickable") || flag("editable") || flag("selected") || flag("scrollable") || n.get("checked").is_some_and(Value::is_boolean)
}

/// The `controls:true` reply: actionable nodes in pre-order (filters of
/// `selection` apply), ids `c1..` in this reply only, at most `max` controls and
/// [`CONTROLS_MAX_BYTES`] of JSON; what was cut is counted.
pub(crate) fn controls(body: &Value, selection: &Selection, max: usize) -> Value {
    let summaries: Vec<Value> = windows(body).into_iter().map(|(w, _)| w).collect();
    let several = summaries.len() > 1;
    let (mut list, mut seen, mut matched, mut bytes, mut by_count, mut by_bytes) = (Vec::new(), 0usize, 0usize, 0usize, 0usize, 0usize);
    walk(body, |w, _, _, n| {
        seen += 1;
        if !actionable(n) || !selection.matches(n) {
            return;
        }
        matched += 1;
        if list.len() >= max {
            by_count += 1;
            return;
        }
        let mut c = control(n, list.len() + 1);
        if several {
            c["window"] = json!(w);
        }
        let size = serde_json::to_vec(&c).map(|v| v.len() + 1).unwrap_or(usize::MAX);
        if by_bytes > 0 || bytes + size > CONTROLS_MAX_BYTES {
            by_bytes += 1;
            return;
        }
        bytes += size;
        list.push(c);
    });
    reply(body, summaries, seen, json!({
        "visited": seen,
        "matched": matched,
        "controlCount": list.len(),
        "controlsTruncated": by_count + by_bytes > 0,
        "controlsDropped": {"maxControls": by_count, "maxBytes": by_bytes},
        "controls": list,
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn node(id: u64, class: &str, rid: Option<&str>, text: Option<&str>, visible: bool, children: Vec<Value>) -> Value {
        let mut n = json!({"nodeId": id, "className": class, "simpleClassName": class.rsplit('.').next().unwrap(), "resourceName": rid.map(|r| format!("com.x.app:id/{r}")),
            "contentDescription": null, "visible": visible, "enabled": true, "clickable": class.ends_with("Button"), "focused": false, "checked": null,
            "bounds": {"left": 0, "top": id * 10, "right": 100, "bottom": id * 10 + 10, "width": 100, "height": 10}, "targetRef": {"guard": "g"}});
        if let Some(t) = text {
            n["text"] = json!(t);
        }
        if !children.is_empty() {
            n["children"] = json!(children);
        }
        n
    }

    /// root(1) ─ title(2) "Sign in", list(3) ─ row(4) "Row 0", row(5) "Row 1" (hidden), button(6) "Save"
    pub(crate) fn body() -> Value {
        let list = node(3, "android.widget.LinearLayout", Some("list"), None, true, vec![
            node(4, "android.widget.TextView", Some("row_0"), Some("Row 0"), true, vec![]),
            node(5, "android.widget.TextView", Some("row_1"), Some("Row 1"), false, vec![]),
        ]);
        let root = node(1, "android.widget.FrameLayout", Some("content"), None, true, vec![
            node(2, "android.widget.TextView", Some("title"), Some("Sign in"), true, vec![]),
            list,
            node(6, "android.widget.Button", Some("save"), Some("Save"), true, vec![]),
        ]);
        json!({"ok": true, "activity": "com.x.app.MainActivity", "foregroundWindowId": "w", "root": root.clone(), "nodeCount": 6,
               "windows": [{"index": 0, "type": "activity", "windowId": "w", "focused": true, "root": root}], "windowCount": 1})
    }

    fn ids(reply: &Value) -> Vec<u64> {
        reply["nodes"].as_array().unwrap().iter().map(|n| n["nodeId"].as_u64().unwrap()).collect()
    }

    #[test]
    fn no_filter_lists_every_node_in_pre_order_with_depth_and_parent() {
        let r = select(&body(), &Selection::default());
        assert_eq!(ids(&r), [1, 2, 3, 4, 5, 6]);
        assert_eq!((r["matched"].clone(), r["returned"].clone(), r["truncated"].clone(), r["nodeCount"].clone()), (json!(6), json!(6), json!(false), json!(6)));
        let row = &r["nodes"][3];
        assert_eq!((row["depth"].clone(), row["parentNodeId"].clone()), (json!(2), json!(3)));
        assert!(row.get("children").is_none() && row["targetRef"]["guard"] == json!("g"), "full nodes keep SDK fields, not children: {row}");
        assert!(r["windows"][0].get("root").is_none(), "window summaries without their trees");
    }

    #[test]
    fn filters_combine_and_are_case_insensitive() {
        let sel = |f: fn(&mut Selection)| {
            let mut s = Selection::default();
            f(&mut s);
            ids(&select(&body(), &s))
        };
        assert_eq!(sel(|s| s.text = Some("row".into())), [4, 5]);
        assert_eq!(sel(|s| s.class = Some("textview".into())), [2, 4, 5]);
        assert_eq!(sel(|s| s.resource_id = Some("row_".into())), [4, 5]);
        assert_eq!(sel(|s| s.visible_only = true), [1, 2, 3, 4, 6]);
        assert_eq!(sel(|s| {
            s.class = Some("TextView".to_lowercase());
            s.visible_only = true;
        }), [2, 4]);
    }

    #[test]
    fn limits_report_what_they_dropped() {
        let r = select(&body(), &Selection { max_depth: Some(1), ..Default::default() });
        assert_eq!(ids(&r), [1, 2, 3, 6]);
        assert_eq!((r["dropped"].clone(), r["truncated"].clone(), r["matched"].clone()), (json!({"maxNodes": 0, "maxDepth": 2}), json!(true), json!(6)));
        // Only matching nodes count against the limits.
        let r = select(&body(), &Selection { max_nodes: Some(1), text: Some("row".into()), ..Default::default() });
        assert_eq!(ids(&r), [4]);
        assert_eq!((r["dropped"].clone(), r["matched"].clone()), (json!({"maxNodes": 1, "maxDepth": 0}), json!(2)));
        let r = select(&body(), &Selection { max_nodes: Some(2), max_depth: Some(1), ..Default::default() });
        assert_eq!(ids(&r), [1, 2]);
        assert_eq!(r["dropped"], json!({"maxNodes": 2, "maxDepth": 2}));
        let r = select(&body(), &Selection { max_depth: Some(0), ..Default::default() });
        assert_eq!(ids(&r), [1]);
    }

    #[test]
    fn compact_nodes_keep_what_an_agent_needs() {
        let r = select(&body(), &Selection { compact: true, ..Default::default() });
        assert_eq!(r["nodes"][5], json!({"nodeId": 6, "depth": 1, "parent": 1, "class": "Button", "id": "save", "text": "Save", "bounds": [0, 60, 100, 70], "clickable": true}));
        assert_eq!(r["nodes"][4]["visible"], json!(false), "hidden nodes say so");
        assert!(r["nodes"][0].get("text").is_none() && r["nodes"][0].get("targetRef").is_none());
        let full = serde_json::to_string(&select(&body(), &Selection::default())).unwrap().len();
        let small = serde_json::to_string(&r).unwrap().len();
        assert!(small * 2 < full, "compact is much smaller: {small} vs {full}");
    }

    #[test]
    fn several_windows_tag_their_nodes() {
        let mut b = body();
        let dialog = node(7, "android.widget.Button", Some("ok"), Some("OK"), true, vec![]);
        b["windows"].as_array_mut().unwrap().push(json!({"index": 1, "type": "dialog", "windowId": "d", "root": dialog}));
        let r = select(&b, &Selection { compact: true, text: Some("ok".into()), ..Default::default() });
        assert_eq!(r["nodes"], json!([{"nodeId": 7, "depth": 0, "parent": null, "class": "Button", "id": "ok", "text": "OK", "bounds": [0, 70, 100, 80], "clickable": true, "window": 1}]));
        assert_eq!(r["windowCount"], json!(2));
        // A body without `windows` still has its root.
        b.as_object_mut().unwrap().remove("windows");
        assert_eq!(select(&b, &Selection::default())["returned"], json!(6));
    }

    #[test]
    fn controls_are_the_actionable_nodes_with_identity_and_per_reply_ids() {
        let r = controls(&body(), &Selection::default(), 300);
        let list = r["controls"].as_array().unwrap();
        // Layouts without text are not controls; hidden text still is (visible:false says so).
        let texts: Vec<&str> = list.iter().map(|c| c["text"].as_str().unwrap()).collect();
        assert_eq!(texts, ["Sign in", "Row 0", "Row 1", "Save"]);
        let ids: Vec<&str> = list.iter().map(|c| c["controlId"].as_str().unwrap()).collect();
        assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
        assert_eq!(list[3], json!({"controlId": "c4", "nodeId": 6, "role": "button", "text": "Save", "resourceName": "com.x.app:id/save", "contentDescription": null,
            "className": "android.widget.Button", "bounds": {"left": 0, "top": 60, "right": 100, "bottom": 70}, "enabled": true, "clickable": true, "longClickable": false,
            "editable": false, "checked": null, "selected": false, "focused": false, "visible": true, "scrollable": false}));
        assert_eq!((r["visited"].clone(), r["matched"].clone(), r["controlsTruncated"].clone(), r["activity"].clone()), (json!(6), json!(4), json!(false), json!("com.x.app.MainActivity")));
        let visible = controls(&body(), &Selection { visible_only: true, ..Default::default() }, 300);
        assert_eq!(visible["controlCount"], json!(3));
    }

    #[test]
    fn controls_are_bounded_by_count_and_bytes() {
        let r = controls(&body(), &Selection::default(), 2);
        assert_eq!((r["controlCount"].clone(), r["controlsTruncated"].clone(), r["controlsDropped"].clone()), (json!(2), json!(true), json!({"maxControls": 2, "maxBytes": 0})));
        // 2000 long-text rows: the byte budget cuts the list, and says so.
        let rows: Vec<Value> = (0..2000).map(|i| json!({"nodeId": i + 2, "className": "android.widget.TextView", "text": "x".repeat(400), "visible": true})).collect();
        let big = json!({"ok": true, "root": {"nodeId": 1, "className": "android.widget.FrameLayout", "children": rows}});
        let r = controls(&big, &Selection::default(), 1000);
        let n = r["controlCount"].as_u64().unwrap();
        assert!(n < 1000 && r["controlsDropped"]["maxBytes"].as_u64().unwrap() == 2000 - n, "{}", r["controlsDropped"]);
        assert!(serde_json::to_vec(&r["controls"]).unwrap().len() <= CONTROLS_MAX_BYTES);
        assert_eq!(r["controls"][0]["text"].as_str().unwrap().chars().count(), CONTROL_TEXT_MAX);
    }
}
