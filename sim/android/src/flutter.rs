//! The simulated Flutter engine of an app screen (aab-protocols §7): the
//! scenario field `flutter` of a screen (a FlutterView with its routes and
//! widgets, in logical pixels, and the device-pixel ratio that maps them onto
//! the screen), one engine per (process, screen) with its Dart runtime epoch
//! (`<microseconds>-<random>`), route stack, typed values, scroll offsets,
//! focus and live element ids; the snapshot `GET /v1/flutter/snapshot` returns
//! (`layout.operable` limited to 600 nodes / depth 512, `widgetInspector`
//! ≤64 levels / 4000 entries, `semantics` ≤600 nodes / depth 24) and the
//! control ops `flutter`, `flutter-restart`, `flutter-rebuild`,
//! `flutter-h5-reregister`. Actions live in `flutter_exec`, Flutter-hosted
//! WebViews in `flutter_h5`.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::device::{Device, now_ms, random_hex};
use crate::phone::Phone;

pub const TARGET_SCHEMA: &str = "aab.flutter-target/v1";
pub const EXECUTION_SCHEMA: &str = "aab.flutter-execution/v1";
pub const MAX_NODES: usize = 600;
pub const MAX_DEPTH: usize = 512;
const INSPECTOR_DEPTH: usize = 64;
const INSPECTOR_ENTRIES: usize = 4000;
const SEMANTICS_NODES: usize = 600;
const SEMANTICS_DEPTH: usize = 24;

// ------------------------------------------------------------------ scenario

/// A screen's Flutter view (scenario field `flutter` of a screen).
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FlutterSpec {
    /// The FlutterView in screen pixels [l, t, r, b]; default the whole screen.
    pub bounds: Option<[i32; 4]>,
    /// Screen pixels per logical pixel; default density / 160.
    pub device_pixel_ratio: Option<f64>,
    /// Route shown when the engine starts; default the first route.
    pub initial_route: Option<String>,
    pub routes: Vec<RouteSpec>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RouteSpec {
    pub name: String,
    pub root: WidgetSpec,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WidgetSpec {
    pub widget_type: String,
    /// Key of typed values / scroll offsets; default the widget's path.
    pub key: Option<String>,
    pub text: Option<String>,
    pub value: Option<String>,
    pub label: Option<String>,
    pub hint: Option<String>,
    pub error_text: Option<String>,
    /// control | input | scrollable (default from `actions`).
    pub role: Option<String>,
    /// Subset of tap, input, scroll.
    pub actions: Vec<String>,
    /// [l, t, r, b] in logical pixels of the view (content position at scroll 0); default the parent's.
    pub bounds: Option<[f64; 4]>,
    pub enabled: bool,
    pub visible: bool,
    pub offstage: bool,
    pub read_only: bool,
    pub obscure: bool,
    /// A scrollable's axis (vertical | horizontal) and extent (default from its children).
    pub axis: Option<String>,
    pub max_scroll_extent: Option<f64>,
    /// Generate this many tappable rows (`repeatText` with `{i}`, `repeatHeight` logical px).
    pub repeat: u32,
    pub repeat_text: Option<String>,
    pub repeat_height: Option<f64>,
    pub children: Vec<WidgetSpec>,
    pub on_tap: Option<FlutterTapSpec>,
}

impl Default for WidgetSpec {
    fn default() -> Self {
        WidgetSpec {
            widget_type: "Container".into(),
            key: None,
            text: None,
            value: None,
            label: None,
            hint: None,
            error_text: None,
            role: None,
            actions: vec![],
            bounds: None,
            enabled: true,
            visible: true,
            offstage: false,
            read_only: false,
            obscure: false,
            axis: None,
            max_scroll_extent: None,
            repeat: 0,
            repeat_text: None,
            repeat_height: None,
            children: vec![],
            on_tap: None,
        }
    }
}

/// What a tap on a Flutter widget does.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FlutterTapSpec {
    /// Push another Flutter route.
    pub push: Option<String>,
    /// Pop the current route.
    pub pop: bool,
    /// Show another native screen of the app.
    pub native_goto: Option<String>,
    /// SDK capture records (state / event).
    pub state: Option<Value>,
    pub event: Option<Value>,
}

// ------------------------------------------------------------------ engine

pub struct Engine {
    pub epoch: String,
    /// (route name, instance number).
    pub stack: Vec<(String, u64)>,
    next_instance: u64,
    ids: HashMap<String, u64>,
    next_id: u64,
    /// Bumped by `flutter-rebuild`: every element is replaced by an identical one.
    generation: u64,
    pub values: HashMap<String, String>,
    pub scroll: HashMap<String, f64>,
    pub focused: Option<String>,
    pub keyboard: bool,
    pub snapshots: u64,
    /// Flutter H5 adapter registrations (adapterId → generation; absent = 1):
    /// `flutter-h5-reregister` replaces a registration, voiding its page refs.
    pub h5_generations: HashMap<String, u64>,
}

/// Engines by (process runtime epoch, screen name).
static ENGINES: Mutex<Option<HashMap<(String, String), Engine>>> = Mutex::new(None);

fn dart_epoch() -> String {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    format!("{micros}-{}", random_hex(12))
}

impl Engine {
    fn new(spec: &FlutterSpec) -> Engine {
        let first = spec.initial_route.clone().or_else(|| spec.routes.first().map(|r| r.name.clone())).unwrap_or_default();
        Engine { epoch: dart_epoch(), stack: vec![(first, 1)], next_instance: 2, ids: HashMap::new(), next_id: 1, generation: 0, values: HashMap::new(), scroll: HashMap::new(), focused: None, keyboard: false, snapshots: 0, h5_generations: HashMap::new() }
    }

    pub fn route(&self) -> &str {
        self.stack.last().map(|r| r.0.as_str()).unwrap_or("")
    }

    pub fn push(&mut self, route: &str) {
        self.stack.push((route.to_string(), self.next_instance));
        self.next_instance += 1;
        self.focused = None;
        self.keyboard = false;
    }

    /// Pops the top route; false at the first route.
    pub fn pop(&mut self) -> bool {
        if self.stack.len() < 2 {
            return false;
        }
        self.stack.pop();
        self.focused = None;
        self.keyboard = false;
        true
    }

    fn element_id(&mut self, path: &str) -> String {
        let key = format!("{}#{path}", self.generation);
        let id = *self.ids.entry(key).or_insert_with(|| {
            self.next_id += 1;
            self.next_id - 1
        });
        format!("e{id}")
    }
}

/// The Flutter view of the app's current screen, if it has one.
pub fn view_spec(ph: &Phone, idx: usize) -> Option<(String, FlutterSpec)> {
    let app = &ph.apps[idx];
    let s = app.spec.screens.get(app.screen)?;
    s.flutter.clone().map(|f| (s.name.clone(), f))
}

/// Runs `f` on the engine of the app's current Flutter screen (created on first use).
/// Callers hold the phone lock (lock order: phone, then engines).
pub fn with_engine<T>(ph: &Phone, idx: usize, f: impl FnOnce(&mut Engine, &FlutterSpec, &View) -> T) -> Option<T> {
    let (screen, spec) = view_spec(ph, idx)?;
    let process = ph.apps[idx].process.as_ref()?.epoch.clone();
    let view = View::of(ph, &spec);
    let mut g = ENGINES.lock().unwrap();
    let e = g.get_or_insert_with(HashMap::new).entry((process, screen)).or_insert_with(|| Engine::new(&spec));
    Some(f(e, &spec, &view))
}

/// The view's geometry: screen bounds and the logical → screen mapping.
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub bounds: [i32; 4],
    pub dpr: f64,
}

impl View {
    fn of(ph: &Phone, spec: &FlutterSpec) -> View {
        View { bounds: spec.bounds.unwrap_or([0, 0, ph.width as i32, ph.height as i32]), dpr: spec.device_pixel_ratio.unwrap_or(ph.density as f64 / 160.0) }
    }
    pub fn logical_size(&self) -> (f64, f64) {
        ((self.bounds[2] - self.bounds[0]) as f64 / self.dpr, (self.bounds[3] - self.bounds[1]) as f64 / self.dpr)
    }
    pub fn to_screen(self, x: f64, y: f64) -> (i64, i64) {
        ((self.bounds[0] as f64 + x * self.dpr).round() as i64, (self.bounds[1] as f64 + y * self.dpr).round() as i64)
    }
}

// ------------------------------------------------------------------ resolved tree

/// One widget of the current route, resolved (values typed, scroll applied).
#[derive(Clone, Debug)]
pub struct RNode {
    pub id: String,
    pub widget_type: String,
    pub text: Option<String>,
    pub value: Option<String>,
    pub label: Option<String>,
    pub hint: Option<String>,
    pub error_text: Option<String>,
    pub role: Option<String>,
    pub actions: Vec<String>,
    /// Logical bounds in the view, after the scroll of every scrollable ancestor.
    pub bounds: [f64; 4],
    pub enabled: bool,
    /// Painted and inside the view and every scrollable ancestor's viewport.
    pub visible: bool,
    pub offstage: bool,
    pub depth: usize,
    pub read_only: bool,
    pub obscure: bool,
    pub focused: bool,
    pub value_key: String,
    /// (axis, pixels, max extent) of a scrollable.
    pub scroll: Option<(String, f64, f64)>,
    pub tap_ancestor: Option<String>,
    pub scroll_ancestor: Option<usize>,
    pub on_tap: Option<FlutterTapSpec>,
    pub guard: String,
}

impl RNode {
    pub fn center(&self) -> (f64, f64) {
        ((self.bounds[0] + self.bounds[2]) / 2.0, (self.bounds[1] + self.bounds[3]) / 2.0)
    }
    pub fn contains(&self, x: f64, y: f64) -> bool {
        x >= self.bounds[0] && x < self.bounds[2] && y >= self.bounds[1] && y < self.bounds[3]
    }
    pub fn has(&self, action: &str) -> bool {
        self.actions.iter().any(|a| a == action)
    }
    pub fn operable(&self) -> bool {
        self.visible && self.enabled && !self.offstage
    }
    pub fn target_ref(&self, epoch: &str) -> Value {
        json!({ "schemaVersion": TARGET_SCHEMA, "runtimeEpoch": epoch, "elementId": self.id, "guard": self.guard })
    }
    /// Shown text (the typed value of an input).
    pub fn shown(&self) -> Option<&str> {
        self.text.as_deref().or(self.value.as_deref())
    }
}

/// The widgets of the current route in paint order, plus whether the depth limit cut the walk.
pub struct Resolved {
    pub nodes: Vec<RNode>,
    pub visited: usize,
    pub depth_cut: bool,
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

pub fn resolve(e: &mut Engine, spec: &FlutterSpec, view: &View) -> Resolved {
    let (route, instance) = e.stack.last().cloned().unwrap_or_default();
    let mut out = Resolved { nodes: vec![], visited: 0, depth_cut: false };
    let Some(r) = spec.routes.iter().find(|r| r.name == route) else { return out };
    let (w, h) = view.logical_size();
    let clip = [0.0, 0.0, w, h];
    let mut ctx = Walk { e, out: &mut out, view_id: format!("{}/{route}#{instance}", view.bounds.iter().map(i32::to_string).collect::<Vec<_>>().join(",")) };
    ctx.walk(&r.root, &format!("{instance}"), 0, clip, [0.0, 0.0], true, None, None, clip);
    out
}

struct Walk<'a> {
    e: &'a mut Engine,
    out: &'a mut Resolved,
    view_id: String,
}

impl Walk<'_> {
    #[allow(clippy::too_many_arguments)]
    fn walk(&mut self, s: &WidgetSpec, path: &str, depth: usize, parent: [f64; 4], shift: [f64; 2], shown: bool, tap_anc: Option<String>, scroll_anc: Option<usize>, clip: [f64; 4]) {
        if depth > MAX_DEPTH {
            self.out.depth_cut = true;
            return;
        }
        self.out.visited += 1;
        let content = s.bounds.unwrap_or(parent);
        let b = [content[0] - shift[0], content[1] - shift[1], content[2] - shift[0], content[3] - shift[1]];
        let key = s.key.clone().unwrap_or_else(|| path.to_string());
        let inside = b[0] < clip[2] && b[2] > clip[0] && b[1] < clip[3] && b[3] > clip[1] && b[2] > b[0] && b[3] > b[1];
        let visible = shown && s.visible && !s.offstage && inside;
        let is_input = s.actions.iter().any(|a| a == "input");
        let typed = self.e.values.get(&key).cloned();
        let value = if is_input { Some(typed.clone().or_else(|| s.value.clone()).unwrap_or_default()) } else { s.value.clone() };
        let value = value.map(|v| if s.obscure { "•".repeat(v.chars().count()) } else { v });
        let focused = is_input && self.e.focused.as_deref() == Some(key.as_str());
        let id = self.e.element_id(path);
        let mut actions = s.actions.clone();
        actions.sort();
        let scroll = actions.iter().any(|a| a == "scroll").then(|| {
            let bottom = s.children.iter().filter_map(|c| c.bounds.map(|x| x[3])).fold(content[1], f64::max);
            let rows = s.repeat as f64 * s.repeat_height.unwrap_or(56.0);
            let extent = s.max_scroll_extent.unwrap_or_else(|| ((bottom.max(content[1] + rows)) - content[3]).max(0.0));
            let pixels = self.e.scroll.get(&key).copied().unwrap_or(0.0).clamp(0.0, extent);
            (s.axis.clone().unwrap_or_else(|| "vertical".into()), pixels, extent)
        });
        let role = s.role.clone().or_else(|| {
            if is_input {
                Some("input".into())
            } else if scroll.is_some() {
                Some("scrollable".into())
            } else if actions.iter().any(|a| a == "tap") {
                Some("control".into())
            } else {
                None
            }
        });
        let guard_src = json!([s.widget_type, s.text, if s.obscure { json!(null) } else { json!(value) }, actions, tap_anc, scroll_anc.map(|i| self.out.nodes[i].id.clone()), is_input.then(|| json!([key, focused, s.read_only, s.obscure, s.label, s.hint])), self.view_id]);
        let guard = format!("g{}", fnv(&guard_src.to_string()) % 1_000_000_000_000);
        let me = self.out.nodes.len();
        self.out.nodes.push(RNode {
            id: id.clone(),
            widget_type: s.widget_type.clone(),
            text: s.text.clone(),
            value,
            label: s.label.clone(),
            hint: s.hint.clone(),
            error_text: s.error_text.clone(),
            role,
            actions: actions.clone(),
            bounds: b,
            enabled: s.enabled,
            visible,
            offstage: s.offstage,
            depth,
            read_only: s.read_only,
            obscure: s.obscure,
            focused,
            value_key: key,
            scroll: scroll.clone(),
            tap_ancestor: tap_anc.clone(),
            scroll_ancestor: scroll_anc,
            on_tap: s.on_tap.clone(),
            guard,
        });
        let kid_tap = if actions.iter().any(|a| a == "tap") { Some(id.clone()) } else { tap_anc };
        let (kid_shift, kid_clip, kid_scroll) = match &scroll {
            Some((axis, px, _)) => {
                let sh = if axis == "horizontal" { [shift[0] + px, shift[1]] } else { [shift[0], shift[1] + px] };
                let c = [clip[0].max(b[0]), clip[1].max(b[1]), clip[2].min(b[2]), clip[3].min(b[3])];
                (sh, c, Some(me))
            }
            None => (shift, clip, scroll_anc),
        };
        let kid_shown = shown && s.visible && !s.offstage;
        for (i, c) in s.children.iter().enumerate() {
            self.walk(c, &format!("{path}.{i}"), depth + 1, content, kid_shift, kid_shown, kid_tap.clone(), kid_scroll, kid_clip);
        }
        let row_h = s.repeat_height.unwrap_or(56.0);
        let base = s.children.iter().filter_map(|c| c.bounds.map(|x| x[3])).fold(content[1], f64::max);
        for i in 0..s.repeat {
            let top = base + i as f64 * row_h;
            let row = WidgetSpec {
                widget_type: "ListTile".into(),
                text: Some(s.repeat_text.clone().unwrap_or_else(|| "Item {i}".into()).replace("{i}", &i.to_string())),
                actions: vec!["tap".into()],
                bounds: Some([content[0], top, content[2], top + row_h]),
                ..WidgetSpec::default()
            };
            self.walk(&row, &format!("{path}.r{i}"), depth + 1, content, kid_shift, kid_shown, kid_tap.clone(), kid_scroll, kid_clip);
        }
    }
}

fn bounds_json(b: [f64; 4]) -> Value {
    let r = |v: f64| (v * 100.0).round() / 100.0;
    json!({ "left": r(b[0]), "top": r(b[1]), "right": r(b[2]), "bottom": r(b[3]), "width": r(b[2] - b[0]), "height": r(b[3] - b[1]) })
}

pub fn node_json(n: &RNode, nodes: &[RNode], epoch: &str) -> Value {
    let mut o = json!({
        "id": n.id, "widgetType": n.widget_type, "text": n.text, "value": n.value, "label": n.label, "hint": n.hint, "errorText": n.error_text,
        "role": n.role, "actions": n.actions, "enabled": n.enabled, "visible": n.visible, "offstage": n.offstage, "depth": n.depth,
        "bounds": bounds_json(n.bounds), "targetRef": n.target_ref(epoch),
    });
    if n.has("tap") {
        o["tap"] = json!({ "bounds": bounds_json(n.bounds) });
    }
    if n.has("input") {
        o["input"] = json!({ "bounds": bounds_json(n.bounds), "focused": n.focused, "readOnly": n.read_only, "obscureText": n.obscure });
    }
    if let Some((axis, px, max)) = &n.scroll {
        o["scroll"] = json!({ "bounds": bounds_json(n.bounds), "nodeId": n.id, "axis": axis, "pixels": px, "minScrollExtent": 0.0, "maxScrollExtent": max });
    } else if let Some(i) = n.scroll_ancestor {
        o["scrollParent"] = json!(nodes[i].id);
    }
    o
}

/// `layout.operable`: nodes with text or actions, in paint order, ≤600.
pub fn operable(r: &Resolved, epoch: &str, view: &View) -> Value {
    let candidates: Vec<&RNode> = r.nodes.iter().filter(|n| !n.actions.is_empty() || n.text.is_some() || n.label.is_some()).collect();
    let truncated = candidates.len() > MAX_NODES || r.depth_cut;
    let kept: Vec<&RNode> = candidates.into_iter().take(MAX_NODES).collect();
    let types: Vec<&str> = {
        let mut t: Vec<&str> = vec![];
        for n in &r.nodes {
            if !t.contains(&n.widget_type.as_str()) && t.len() < 12 {
                t.push(&n.widget_type);
            }
        }
        t
    };
    let (w, h) = view.logical_size();
    json!({
        "ok": true, "runtimeEpoch": epoch, "executionSchema": EXECUTION_SCHEMA,
        "nodes": kept.iter().map(|n| node_json(n, &r.nodes, epoch)).collect::<Vec<_>>(),
        "count": kept.len(), "visitedCount": r.visited,
        "textCount": kept.iter().filter(|n| n.text.is_some()).count(),
        "actionCount": kept.iter().filter(|n| !n.actions.is_empty()).count(),
        "sampleWidgetTypes": types, "truncated": truncated,
        "viewport": { "logicalWidth": (w * 100.0).round() / 100.0, "logicalHeight": (h * 100.0).round() / 100.0, "devicePixelRatio": view.dpr, "viewInsets": { "left": 0, "top": 0, "right": 0, "bottom": 0 } },
        "limits": { "maxNodes": MAX_NODES, "maxDepth": MAX_DEPTH },
        "updatedAtMs": now_ms(),
    })
}

fn inspector(r: &Resolved) -> Value {
    let mut entries = 0usize;
    let mut truncated = false;
    // Paint order is pre-order: rebuild the nesting from depths.
    fn build(nodes: &[RNode], i: &mut usize, depth: usize, entries: &mut usize, truncated: &mut bool) -> Value {
        let n = &nodes[*i];
        *i += 1;
        *entries += 1;
        let mut kids = vec![];
        while *i < nodes.len() && nodes[*i].depth > depth {
            if nodes[*i].depth >= INSPECTOR_DEPTH || *entries >= INSPECTOR_ENTRIES {
                *truncated = true;
                *i += 1;
                continue;
            }
            kids.push(build(nodes, i, depth + 1, entries, truncated));
        }
        json!({ "id": n.id, "widgetType": n.widget_type, "description": n.text.clone().or(n.label.clone()), "children": kids })
    }
    let root = if r.nodes.is_empty() { Value::Null } else { build(&r.nodes, &mut 0, 0, &mut entries, &mut truncated) };
    json!({ "ok": true, "maxDepth": INSPECTOR_DEPTH, "maxEntries": INSPECTOR_ENTRIES, "count": entries, "truncated": truncated, "root": root })
}

fn semantics(r: &Resolved) -> Value {
    let all: Vec<&RNode> = r.nodes.iter().filter(|n| n.visible && (n.text.is_some() || n.label.is_some() || !n.actions.is_empty())).collect();
    let deep = all.iter().any(|n| n.depth > SEMANTICS_DEPTH);
    let shown: Vec<&&RNode> = all.iter().filter(|n| n.depth <= SEMANTICS_DEPTH).collect();
    let truncated = deep || shown.len() > SEMANTICS_NODES;
    let nodes: Vec<Value> = shown.iter().take(SEMANTICS_NODES).enumerate().map(|(i, n)| {
        json!({ "id": i + 1, "label": n.label.clone().or(n.text.clone()).unwrap_or_default(), "value": n.value, "hint": n.hint, "actions": n.actions, "rect": bounds_json(n.bounds), "depth": n.depth, "enabled": n.enabled })
    }).collect();
    json!({ "ok": true, "maxNodes": SEMANTICS_NODES, "maxDepth": SEMANTICS_DEPTH, "count": nodes.len(), "truncated": truncated, "nodes": nodes })
}

/// The Flutter member of `GET /v1/flutter/snapshot` (with `layout`) or of
/// `/v1/status` (without): null when the current screen shows no Flutter view.
pub fn snapshot(ph: &Phone, idx: usize, with_layout: bool) -> Value {
    let fg = ph.foreground == Some(idx);
    with_engine(ph, idx, |e, spec, view| {
        if with_layout {
            e.snapshots += 1;
        }
        let (w, h) = view.logical_size();
        let mut s = json!({
            "ok": true, "runtimeEpoch": e.epoch, "route": e.route(), "routeStack": e.stack.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            "attached": fg, "devicePixelRatio": view.dpr, "viewBounds": { "left": view.bounds[0], "top": view.bounds[1], "right": view.bounds[2], "bottom": view.bounds[3] },
            "logicalSize": { "width": w, "height": h }, "keyboardVisible": e.keyboard, "snapshotCount": e.snapshots, "updatedAtMs": now_ms(),
        });
        if with_layout {
            let r = resolve(e, spec, view);
            let dump: Vec<String> = r.nodes.iter().take(2000).map(|n| format!("{}{}{}", "  ".repeat(n.depth.min(64)), n.widget_type, n.shown().map(|t| format!(" \"{t}\"")).unwrap_or_default())).collect();
            s["layout"] = json!({ "operable": operable(&r, &e.epoch, view), "widgetInspector": inspector(&r), "widgetDump": dump.join("\n"), "semantics": semantics(&r) });
        }
        s
    })
    .unwrap_or(Value::Null)
}

/// `GET /v1/flutter/snapshot`: the status with the fresh snapshot (fault
/// `flutterRestartAfterSnapshot`: the engine restarts right after this read).
pub fn snapshot_reply(dev: &Device, ph: &Phone, idx: usize, mut status: Value) -> Value {
    status["flutter"] = snapshot(ph, idx, true);
    if !status["flutter"].is_null() && crate::faults::Faults::take(&mut dev.faults.lock().unwrap().flutter_restart_after_snapshot) {
        let epoch = with_engine(ph, idx, |e, spec, _| {
            *e = Engine::new(spec);
            e.epoch.clone()
        });
        if let Some(p) = ph.apps[idx].process.as_ref() {
            // The phone lock is held here (the SDK request handler).
            crate::flutter_exec::engine_restarted_later(&p.epoch);
        }
        dev.record("flutter-restart", json!({ "package": ph.apps[idx].package, "runtimeEpoch": epoch, "via": "fault" }));
    }
    status
}

// ------------------------------------------------------------------ control ops

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

/// `flutter` (state of the current Flutter view + the Flutter effects so far),
/// `flutter-restart` (a new engine: new runtime epoch, fresh state),
/// `flutter-rebuild` (every element replaced by an identical one: new element ids).
pub fn control(dev: &Device, req: &Value) -> Value {
    let op = req.get("op").and_then(Value::as_str).unwrap_or("");
    let Some(package) = req.get("package").and_then(Value::as_str) else { return err("missing_argument", "package") };
    let ph = dev.phone.lock().unwrap();
    let Some(idx) = ph.app_index(package) else { return err("unknown_package", package) };
    let Some(process) = ph.apps[idx].process.as_ref().map(|p| p.epoch.clone()) else { return err("not_running", package) };
    let screen = view_spec(&ph, idx).map(|v| v.0);
    match op {
        "flutter-restart" | "flutter-rebuild" => {
            let Some(r) = with_engine(&ph, idx, |e, spec, _| {
                if op == "flutter-restart" {
                    *e = Engine::new(spec);
                } else {
                    e.generation += 1;
                }
                e.epoch.clone()
            }) else {
                return err("no_flutter_view", "the app's current screen shows no Flutter view");
            };
            drop(ph);
            if op == "flutter-restart" {
                crate::flutter_exec::engine_restarted(&process);
            }
            dev.record(op, json!({ "package": package, "runtimeEpoch": r }));
            json!({ "ok": true, "runtimeEpoch": r })
        }
        "flutter-h5-reregister" => {
            // The Dart side unregisters an adapter and registers it again: a new generation.
            let Some(id) = req.get("adapterId").and_then(Value::as_str) else { return err("missing_argument", "adapterId") };
            let Some(generation) = with_engine(&ph, idx, |e, _, _| {
                let g = e.h5_generations.entry(id.to_string()).or_insert(1);
                *g += 1;
                *g
            }) else {
                return err("no_flutter_view", "the app's current screen shows no Flutter view");
            };
            drop(ph);
            dev.record(op, json!({ "package": package, "adapterId": id, "adapterGeneration": generation }));
            json!({ "ok": true, "adapterId": id, "adapterGeneration": generation })
        }
        _ => {
            let state = with_engine(&ph, idx, |e, spec, view| {
                let r = resolve(e, spec, view);
                json!({ "runtimeEpoch": e.epoch, "route": e.route(), "routeStack": e.stack.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), "values": e.values, "scroll": e.scroll, "focused": e.focused, "keyboard": e.keyboard, "devicePixelRatio": view.dpr, "operableCount": r.nodes.len() })
            });
            drop(ph);
            let effects: Vec<Value> = dev.truth_since(0).into_iter().filter(|r| r["kind"].as_str().is_some_and(|k| k.starts_with("flutter-") && k != "flutter-restart" && k != "flutter-rebuild")).collect();
            json!({ "ok": true, "package": package, "screen": screen, "engine": state, "slot": crate::flutter_exec::active_identity(&process), "effects": effects })
        }
    }
}
