//! A small Flutter engine (protocols §7) for an app's FlutterView: the Dart
//! runtime epoch (`<microseconds>-<random>`), the route stack, live element
//! ids (`e<n>`, new ones when a route is pushed again), guards (`g<n>`) that
//! change with the widget's text/value/actions/focus, counters, typed values,
//! scroll offsets, focus and keyboard. It renders `layout.operable` for
//! `/v1/status` and runs the actions of `/v1/flutter/action` (the managed
//! envelope around them is `execution`'s).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use crate::native::{El, Kind};
use crate::scenario::{FlutterSpec, WidgetSpec};
use crate::util::{now_ms, random_hex};

pub const TARGET_SCHEMA: &str = "aab.flutter-target/v1";
pub const EXECUTION_SCHEMA: &str = "aab.flutter-execution/v1";
const MAX_NODES: usize = 600;
/// The keyboard's height in logical pixels (viewInsets.bottom while it shows).
const KEYBOARD_H: f64 = 336.0;

pub struct Engine {
    pub epoch: String,
    pub stack: Vec<(String, u64)>,
    next_instance: u64,
    ids: HashMap<String, u64>,
    next_id: u64,
    pub counters: BTreeMap<String, i64>,
    pub values: BTreeMap<String, String>,
    pub scroll: BTreeMap<String, f64>,
    pub focused: Option<String>,
    pub keyboard: bool,
}

/// One resolved widget of the current route.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: String,
    pub key: String,
    pub widget_type: String,
    pub text: Option<String>,
    pub value: Option<String>,
    pub label: Option<String>,
    pub hint: Option<String>,
    pub role: Option<&'static str>,
    pub actions: Vec<String>,
    /// [l, t, r, b] logical pixels in the view, after scrolling.
    pub bounds: [f64; 4],
    pub visible: bool,
    pub depth: usize,
    pub guard: String,
    pub scroll: Option<(f64, f64)>,
    pub scroll_parent: Option<String>,
    pub on_tap: Option<Value>,
    pub focused: bool,
}

impl Node {
    pub fn has(&self, a: &str) -> bool {
        self.actions.iter().any(|x| x == a)
    }
    pub fn center(&self) -> (f64, f64) {
        ((self.bounds[0] + self.bounds[2]) / 2.0, (self.bounds[1] + self.bounds[3]) / 2.0)
    }
    pub fn contains(&self, x: f64, y: f64) -> bool {
        x >= self.bounds[0] && x < self.bounds[2] && y >= self.bounds[1] && y < self.bounds[3]
    }
    pub fn target_ref(&self, epoch: &str) -> Value {
        json!({ "schemaVersion": TARGET_SCHEMA, "runtimeEpoch": epoch, "elementId": self.id, "guard": self.guard })
    }
    fn shown(&self) -> Option<&str> {
        self.text.as_deref().or(self.label.as_deref())
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn dart_epoch() -> String {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    format!("{micros}-{}", random_hex(8))
}

/// A target failure of the Dart side.
pub fn fail(code: &str, dispatched: bool) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Flutter target validation failed: {code}"), "dispatched": dispatched, "ambiguous": false })
}

impl Engine {
    pub fn new(spec: &FlutterSpec) -> Engine {
        Engine { epoch: dart_epoch(), stack: vec![(spec.initial_route.clone(), 1)], next_instance: 2, ids: HashMap::new(), next_id: 1, counters: BTreeMap::new(), values: BTreeMap::new(), scroll: BTreeMap::new(), focused: None, keyboard: false }
    }

    pub fn route(&self) -> &str {
        self.stack.last().map(|r| r.0.as_str()).unwrap_or("")
    }

    fn element_id(&mut self, path: &str) -> String {
        let next = &mut self.next_id;
        let id = *self.ids.entry(path.to_string()).or_insert_with(|| {
            *next += 1;
            *next - 1
        });
        format!("e{id}")
    }

    fn template(&self, t: &str) -> String {
        let mut out = t.to_string();
        for (k, v) in &self.counters {
            out = out.replace(&format!("{{{k}}}"), &v.to_string());
        }
        // Counters never incremented read as 0.
        while let (Some(a), Some(b)) = (out.find('{'), out.find('}')) {
            if b <= a {
                break;
            }
            out.replace_range(a..=b, "0");
        }
        out
    }

    /// The current route's widgets, resolved against `view` (logical size).
    pub fn resolve(&mut self, spec: &FlutterSpec, view: (f64, f64)) -> Vec<Node> {
        let (route, instance) = self.stack.last().cloned().unwrap_or_default();
        let Some(r) = spec.routes.iter().find(|r| r.name == route) else { return vec![] };
        let mut out = vec![];
        for w in &r.widgets {
            self.node(w, &format!("{instance}/{}", w.key), 0, [0.0, 0.0, view.0, view.1], 0.0, None, &mut out);
            if w.repeat > 0 {
                let pixels = self.scroll.get(&w.key).copied().unwrap_or(0.0);
                let row_h = w.repeat_height.unwrap_or(56.0);
                let list_id = out.last().map(|n: &Node| n.id.clone());
                let clip = [w.bounds[0], w.bounds[1].max(0.0), w.bounds[2].min(view.0), w.bounds[3].min(view.1)];
                for i in 0..w.repeat {
                    let top = w.bounds[1] + i as f64 * row_h;
                    let row = WidgetSpec {
                        key: format!("{}.row{i}", w.key),
                        widget_type: "ListTile".into(),
                        text: Some(w.repeat_text.clone().unwrap_or_else(|| "Item {i}".into()).replace("{i}", &i.to_string())),
                        label: None,
                        hint: None,
                        actions: vec!["tap".into()],
                        bounds: [w.bounds[0], top, w.bounds[2], top + row_h],
                        on_tap: None,
                        repeat: 0,
                        repeat_text: None,
                        repeat_height: None,
                    };
                    self.node(&row, &format!("{instance}/{}/{i}", w.key), 1, clip, pixels, list_id.clone(), &mut out);
                }
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn node(&mut self, w: &WidgetSpec, path: &str, depth: usize, clip: [f64; 4], shift: f64, parent: Option<String>, out: &mut Vec<Node>) {
        let b = [w.bounds[0], w.bounds[1] - shift, w.bounds[2], w.bounds[3] - shift];
        let visible = b[0] < clip[2] && b[2] > clip[0] && b[1] < clip[3] && b[3] > clip[1];
        let input = w.actions.iter().any(|a| a == "input");
        let value = input.then(|| self.values.get(&w.key).cloned().unwrap_or_default());
        let focused = input && self.focused.as_deref() == Some(w.key.as_str());
        let mut actions = w.actions.clone();
        actions.sort();
        let scroll = actions.iter().any(|a| a == "scroll").then(|| {
            let extent = (w.repeat as f64 * w.repeat_height.unwrap_or(56.0) - (w.bounds[3] - w.bounds[1])).max(0.0);
            (self.scroll.get(&w.key).copied().unwrap_or(0.0).clamp(0.0, extent), extent)
        });
        let role = if input {
            Some("input")
        } else if scroll.is_some() {
            Some("scrollable")
        } else if actions.iter().any(|a| a == "tap") {
            Some("control")
        } else {
            None
        };
        let text = w.text.as_ref().map(|t| self.template(t));
        let id = self.element_id(path);
        let guard_src = json!([w.widget_type, text, value, actions, parent, focused, w.label, w.hint, path]);
        out.push(Node {
            id,
            key: w.key.clone(),
            widget_type: w.widget_type.clone(),
            text,
            value,
            label: w.label.clone(),
            hint: w.hint.clone(),
            role,
            actions,
            bounds: b,
            visible,
            depth,
            guard: format!("g{}", fnv(&guard_src.to_string()) % 1_000_000_000_000),
            scroll,
            scroll_parent: parent,
            on_tap: w.on_tap.clone(),
            focused,
        });
    }

    /// `layout.operable` (§7).
    pub fn operable(&mut self, spec: &FlutterSpec, view: (f64, f64), attached: bool) -> Value {
        let nodes = if attached { self.resolve(spec, view) } else { vec![] };
        let kept: Vec<&Node> = nodes.iter().filter(|n| !n.actions.is_empty() || n.text.is_some() || n.label.is_some()).take(MAX_NODES).collect();
        let mut types: Vec<&str> = vec![];
        for n in &nodes {
            if !types.contains(&n.widget_type.as_str()) {
                types.push(&n.widget_type);
            }
        }
        json!({
            "ok": true, "runtimeEpoch": self.epoch, "executionSchema": EXECUTION_SCHEMA,
            "nodes": kept.iter().map(|n| node_json(n, &self.epoch)).collect::<Vec<_>>(),
            "count": kept.len(), "visitedCount": nodes.len(),
            "textCount": kept.iter().filter(|n| n.text.is_some()).count(),
            "actionCount": kept.iter().filter(|n| !n.actions.is_empty()).count(),
            "sampleWidgetTypes": types, "truncated": false,
            "viewport": { "logicalWidth": view.0, "logicalHeight": view.1, "viewInsets": { "left": 0, "top": 0, "right": 0, "bottom": if self.keyboard { KEYBOARD_H } else { 0.0 } } },
            "updatedAtMs": now_ms(),
        })
    }

    /// The `flutter` member of `/v1/status` (the full snapshot, with `layout`).
    pub fn snapshot(&mut self, spec: &FlutterSpec, view: (f64, f64), attached: bool) -> Value {
        json!({
            "ok": true, "runtimeEpoch": self.epoch, "route": self.route(), "routeStack": self.stack.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            "attached": attached, "keyboardVisible": self.keyboard, "updatedAtMs": now_ms(),
            "layout": { "operable": self.operable(spec, view, attached) },
        })
    }

    /// The widget key of live element `id` on the current route.
    pub fn key_of(&mut self, spec: &FlutterSpec, view: (f64, f64), id: &str) -> Option<String> {
        self.resolve(spec, view).into_iter().find(|n| n.id == id).map(|n| n.key)
    }

    pub fn state(&self) -> Value {
        json!({ "runtimeEpoch": self.epoch, "route": self.route(), "routeStack": self.stack.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), "counters": self.counters, "values": self.values, "scroll": self.scroll, "focused": self.focused, "keyboard": self.keyboard })
    }

    /// The visible semantics nodes as accessibility elements (WDA's view of the FlutterView).
    pub fn a11y(&self, spec: &FlutterSpec, origin: (f64, f64), view: (f64, f64)) -> Vec<El> {
        // Resolution assigns ids lazily; a scratch copy keeps this read-only.
        let mut scratch = Engine { epoch: self.epoch.clone(), stack: self.stack.clone(), next_instance: self.next_instance, ids: self.ids.clone(), next_id: self.next_id, counters: self.counters.clone(), values: self.values.clone(), scroll: self.scroll.clone(), focused: self.focused.clone(), keyboard: self.keyboard };
        scratch
            .resolve(spec, view)
            .into_iter()
            .filter(|n| n.visible && (n.text.is_some() || n.label.is_some() || !n.actions.is_empty()))
            .map(|n| El {
                key: format!("flutter:{}", n.id),
                ident: None,
                kind: Kind::Flutter(n.role.unwrap_or("text")),
                label: n.shown().map(str::to_string),
                text: n.value.clone(),
                placeholder: n.hint.clone(),
                frame: [origin.0 + n.bounds[0], origin.1 + n.bounds[1], n.bounds[2] - n.bounds[0], n.bounds[3] - n.bounds[1]],
                enabled: true,
                tap: None,
                flutter_id: Some(n.id.clone()),
                children: vec![],
            })
            .collect()
    }

    /// A tap at a logical point (a native/WDA touch on the FlutterView): the effect, if a control was hit.
    pub fn tap_logical(&mut self, spec: &FlutterSpec, x: f64, y: f64) -> Option<Value> {
        let nodes = self.resolve(spec, (f64::MAX, f64::MAX));
        let n = nodes.iter().rev().find(|n| n.visible && n.has("tap") && n.contains(x, y))?.clone();
        Some(self.tap_node(&n))
    }

    fn tap_node(&mut self, n: &Node) -> Value {
        let mut effect = json!({ "action": "tap", "elementId": n.id, "key": n.key, "text": n.text });
        if let Some(t) = &n.on_tap {
            if let Some(c) = t.get("increment").and_then(Value::as_str) {
                *self.counters.entry(c.to_string()).or_default() += 1;
                effect["counter"] = json!({ c: self.counters[c] });
            }
            if let Some(r) = t.get("push").and_then(Value::as_str) {
                self.stack.push((r.to_string(), self.next_instance));
                self.next_instance += 1;
                self.focused = None;
                self.keyboard = false;
                effect["route"] = json!(r);
            }
            if t.get("pop").and_then(Value::as_bool) == Some(true) && self.stack.len() > 1 {
                self.stack.pop();
                effect["route"] = json!(self.route());
            }
        }
        effect
    }

    /// Runs one action payload (the Dart side after permission). Returns the
    /// receipt (without the execution envelope) and the effect for the truth log.
    pub fn run(&mut self, spec: &FlutterSpec, view: (f64, f64), req: &Map<String, Value>) -> (Value, Option<Value>) {
        let action = req.get("action").and_then(Value::as_str).unwrap_or("");
        let nodes = self.resolve(spec, view);
        let ok = |extra: Value| {
            let mut r = json!({ "ok": true, "dispatched": true, "ambiguous": false });
            if let Value::Object(m) = extra {
                for (k, v) in m {
                    r[k] = v;
                }
            }
            r
        };
        match action {
            "tapAt" => {
                let (Some(x), Some(y)) = (num(req, "x"), num(req, "y")) else { return (fail("unsupported_argument", false), None) };
                match nodes.iter().rev().find(|n| n.visible && n.has("tap") && n.contains(x, y)).cloned() {
                    Some(n) => {
                        let e = self.tap_node(&n);
                        (ok(json!({ "targetValidation": "coordinates", "x": x, "y": y })), Some(e))
                    }
                    None => (ok(json!({ "targetValidation": "coordinates", "x": x, "y": y, "hit": null })), Some(json!({ "action": "tap", "x": x, "y": y, "elementId": null }))),
                }
            }
            "tapText" | "tapTarget" => {
                let target = if action == "tapText" {
                    let Some(t) = req.get("text").and_then(Value::as_str) else { return (fail("unsupported_argument", false), None) };
                    select(&nodes, &json!({ "text": t }), "tap")
                } else {
                    target(&nodes, req, &self.epoch, "tap", true)
                };
                let n = match target {
                    Ok(n) => n,
                    Err(f) => return (f, None),
                };
                let (x, y) = n.center();
                let e = self.tap_node(&n);
                (ok(json!({ "targetValidation": TARGET_SCHEMA, "targetRef": n.target_ref(&self.epoch), "x": x, "y": y })), Some(e))
            }
            "inputText" => {
                let Some(text) = req.get("text").and_then(Value::as_str) else { return (fail("unsupported_argument", false), None) };
                let n = if req.contains_key("selector") || req.contains_key("targetRef") {
                    match target(&nodes, req, &self.epoch, "input", false) {
                        Ok(n) => n,
                        Err(f) => return (f, None),
                    }
                } else if let (Some(x), Some(y)) = (num(req, "x"), num(req, "y")) {
                    match nodes.iter().find(|n| n.visible && n.has("input") && n.contains(x, y)) {
                        Some(n) => n.clone(),
                        None => return (fail("flutter_selector_not_found", false), None),
                    }
                } else {
                    match nodes.iter().find(|n| n.focused) {
                        Some(n) => n.clone(),
                        None => return (fail("flutter_input_not_editable", false), None),
                    }
                };
                self.values.insert(n.key.clone(), text.to_string());
                self.focused = Some(n.key.clone());
                self.keyboard = true;
                let (x, y) = n.center();
                let receipt = ok(json!({ "targetValidation": TARGET_SCHEMA, "targetRef": n.target_ref(&self.epoch), "x": x, "y": y, "textLength": text.chars().count() }));
                (receipt, Some(json!({ "action": "inputText", "elementId": n.id, "key": n.key, "text": text })))
            }
            "scrollBy" | "swipe" => {
                let (n, delta) = if action == "swipe" {
                    let (Some(sx), Some(sy), Some(ex), Some(ey)) = (num(req, "startX"), num(req, "startY"), num(req, "endX"), num(req, "endY")) else { return (fail("unsupported_argument", false), None) };
                    let _ = ex;
                    match nodes.iter().find(|n| n.visible && n.has("scroll") && n.contains(sx, sy)) {
                        Some(n) => (n.clone(), sy - ey),
                        None => return (ok(json!({ "targetValidation": "coordinates", "scrolled": false })), Some(json!({ "action": "swipe", "scrolled": false }))),
                    }
                } else {
                    let Some(delta) = num(req, "delta").filter(|d| *d != 0.0) else { return (fail("unsupported_argument", false), None) };
                    let n = if req.contains_key("selector") || req.contains_key("targetRef") {
                        match target(&nodes, req, &self.epoch, "scroll", false) {
                            Ok(n) => n,
                            Err(f) => return (f, None),
                        }
                    } else {
                        match nodes.iter().find(|n| n.visible && n.has("scroll")) {
                            Some(n) => n.clone(),
                            None => return (fail("flutter_selector_not_found", false), None),
                        }
                    };
                    (n, delta)
                };
                let (pixels, max) = n.scroll.unwrap_or((0.0, 0.0));
                let next = (pixels + delta).clamp(0.0, max);
                if next == pixels {
                    return (fail("flutter_scroll_boundary", false), None);
                }
                self.scroll.insert(n.key.clone(), next);
                let receipt = ok(json!({ "targetValidation": if action == "swipe" { "coordinates".into() } else { json!(TARGET_SCHEMA) }, "targetRef": n.target_ref(&self.epoch), "pixels": next, "delta": next - pixels }));
                (receipt, Some(json!({ "action": action, "elementId": n.id, "key": n.key, "from": pixels, "to": next })))
            }
            "hideKeyboard" => {
                let was = self.keyboard;
                self.keyboard = false;
                self.focused = None;
                (ok(json!({ "keyboardWasVisible": was })), Some(json!({ "action": "hideKeyboard" })))
            }
            "back" => {
                let popped = self.stack.len() > 1;
                if popped {
                    self.stack.pop();
                    self.focused = None;
                    self.keyboard = false;
                }
                (ok(json!({ "popped": popped, "route": self.route() })), Some(json!({ "action": "back", "popped": popped, "route": self.route() })))
            }
            _ => (fail("unknown_action", false), None),
        }
    }
}

fn num(req: &Map<String, Value>, k: &str) -> Option<f64> {
    req.get(k).and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// The payload keys each action accepts (besides `action`, `actionId`, `execution`).
pub const PAYLOADS: [(&str, &[&str]); 8] = [
    ("tapAt", &["x", "y"]),
    ("tapText", &["text"]),
    ("tapTarget", &["selector", "targetRef"]),
    ("inputText", &["text", "selector", "targetRef", "x", "y"]),
    ("swipe", &["startX", "startY", "endX", "endY"]),
    ("scrollBy", &["delta", "selector", "targetRef"]),
    ("hideKeyboard", &[]),
    ("back", &[]),
];

/// Exactly one visible node with the action matching `{text}` or `{nodeId}`.
fn select(nodes: &[Node], selector: &Value, action: &str) -> Result<Node, Value> {
    let Some(sel) = selector.as_object().filter(|s| s.len() == 1) else { return Err(fail("unsupported_argument", false)) };
    let matches: Vec<&Node> = if let Some(t) = sel.get("text").and_then(Value::as_str) {
        nodes.iter().filter(|n| n.visible && n.has(action) && (n.text.as_deref() == Some(t) || n.label.as_deref() == Some(t))).collect()
    } else if let Some(id) = sel.get("nodeId").and_then(Value::as_str) {
        nodes.iter().filter(|n| n.visible && n.id == id).collect()
    } else {
        return Err(fail("unsupported_argument", false));
    };
    match matches.as_slice() {
        [] => Err(fail("flutter_selector_not_found", false)),
        [n] if !n.has(action) => Err(fail("flutter_target_not_operable", false)),
        [n] => Ok((*n).clone()),
        _ => Err(fail("flutter_selector_not_unique", false)),
    }
}

/// Resolves the selector and checks the bound `targetRef` (§7 guards).
fn target(nodes: &[Node], req: &Map<String, Value>, epoch: &str, action: &str, require_ref: bool) -> Result<Node, Value> {
    let tref = req.get("targetRef");
    if require_ref && tref.is_none() {
        return Err(fail("invalid_flutter_target_ref", false));
    }
    let n = match req.get("selector") {
        Some(s) => select(nodes, s, action)?,
        None => {
            let id = tref.and_then(|t| t.get("elementId")).and_then(Value::as_str).unwrap_or("");
            select(nodes, &json!({ "nodeId": id }), action)?
        }
    };
    if let Some(t) = tref {
        let Some(t) = t.as_object().filter(|t| t.len() == 4 && ["schemaVersion", "runtimeEpoch", "elementId", "guard"].iter().all(|k| t.get(*k).is_some_and(Value::is_string))) else {
            return Err(fail("invalid_flutter_target_ref", false));
        };
        if t["schemaVersion"] != TARGET_SCHEMA {
            return Err(fail("flutter_target_schema_mismatch", false));
        }
        if t["runtimeEpoch"] != epoch {
            return Err(fail("flutter_runtime_changed", false));
        }
        if t["elementId"] != n.id.as_str() {
            return Err(fail("flutter_target_replaced", false));
        }
        if t["guard"] != n.guard.as_str() {
            return Err(fail("flutter_target_changed", false));
        }
    }
    Ok(n)
}

fn bounds_json(b: [f64; 4]) -> Value {
    json!({ "left": b[0], "top": b[1], "right": b[2], "bottom": b[3], "width": b[2] - b[0], "height": b[3] - b[1] })
}

fn node_json(n: &Node, epoch: &str) -> Value {
    let mut o = json!({
        "id": n.id, "widgetType": n.widget_type, "text": n.text, "value": n.value, "label": n.label, "hint": n.hint, "errorText": null,
        "role": n.role, "actions": n.actions, "enabled": true, "visible": n.visible, "offstage": false, "depth": n.depth,
        "bounds": bounds_json(n.bounds), "targetRef": n.target_ref(epoch),
    });
    if n.has("tap") {
        o["tap"] = json!({ "bounds": bounds_json(n.bounds) });
    }
    if n.has("input") {
        o["input"] = json!({ "bounds": bounds_json(n.bounds), "focused": n.focused, "readOnly": false });
    }
    if let Some((px, max)) = n.scroll {
        o["scroll"] = json!({ "bounds": bounds_json(n.bounds), "nodeId": n.id, "axis": "vertical", "pixels": px, "minScrollExtent": 0.0, "maxScrollExtent": max });
    } else if let Some(p) = &n.scroll_parent {
        o["scrollParent"] = json!(p);
    }
    o
}
