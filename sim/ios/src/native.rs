//! The native UIKit screen of an app process: its UI state (current screen,
//! field values, label texts, focus, keyboard), the element tree laid out for
//! the device's orientation (a window, a navigation bar, stacked controls, a
//! WKWebView or FlutterView filling the rest, a toolbar over the bottom),
//! hit testing, and what a tap / typing does. Both views of it are rendered
//! here: the SDK's `/v1/view/tree` nodes and WDA's JSON source.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::device::{DevState, Device};
use crate::scenario::{AppSpec, ElementSpec, ScreenSpec, TapSpec};
use crate::util::{now_ms, uuid_from};

/// Native UI state of one process (fresh on every launch).
#[derive(Clone, Debug, Default)]
pub struct Ui {
    pub screen: String,
    pub values: BTreeMap<String, String>,
    pub texts: BTreeMap<String, String>,
    pub focused: Option<String>,
    pub last_tapped: Option<String>,
    pub keyboard: bool,
}

impl Ui {
    pub fn new(spec: &AppSpec) -> Ui {
        Ui { screen: spec.initial_screen.clone(), ..Ui::default() }
    }

    pub fn to_json(&self) -> Value {
        json!({ "screen": self.screen, "values": self.values, "texts": self.texts, "focused": self.focused, "lastTapped": self.last_tapped, "keyboard": self.keyboard })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Window,
    View,
    NavigationBar,
    StaticText,
    TextField,
    SecureTextField,
    Button,
    WebView,
    FlutterView,
    Toolbar,
    /// A Flutter semantics node (WDA only): role control/input/scrollable/text.
    Flutter(&'static str),
}

impl Kind {
    pub fn class_name(self) -> &'static str {
        match self {
            Kind::Window => "UIWindow",
            Kind::View => "UIView",
            Kind::NavigationBar => "UINavigationBar",
            Kind::StaticText => "UILabel",
            Kind::TextField | Kind::SecureTextField => "UITextField",
            Kind::Button => "UIButton",
            Kind::WebView => "WKWebView",
            Kind::FlutterView => "FlutterView",
            Kind::Toolbar => "UIToolbar",
            Kind::Flutter(_) => "FlutterSemanticsObject",
        }
    }

    pub fn xcui_type(self) -> &'static str {
        match self {
            Kind::Window => "XCUIElementTypeWindow",
            Kind::View | Kind::FlutterView => "XCUIElementTypeOther",
            Kind::NavigationBar => "XCUIElementTypeNavigationBar",
            Kind::StaticText | Kind::Flutter("text") => "XCUIElementTypeStaticText",
            Kind::TextField | Kind::Flutter("input") => "XCUIElementTypeTextField",
            Kind::SecureTextField => "XCUIElementTypeSecureTextField",
            Kind::Button | Kind::Flutter("control") => "XCUIElementTypeButton",
            Kind::Flutter("scrollable") => "XCUIElementTypeScrollView",
            Kind::Flutter(_) => "XCUIElementTypeOther",
            Kind::WebView => "XCUIElementTypeWebView",
            Kind::Toolbar => "XCUIElementTypeToolbar",
        }
    }

    pub fn editable(self) -> bool {
        matches!(self, Kind::TextField | Kind::SecureTextField | Kind::Flutter("input"))
    }
}

/// One laid-out element.
#[derive(Clone, Debug)]
pub struct El {
    /// Unique within the screen (accessibility id, or a structural name).
    pub key: String,
    pub ident: Option<String>,
    pub kind: Kind,
    pub label: Option<String>,
    /// A label's text or an editor's raw value.
    pub text: Option<String>,
    pub placeholder: Option<String>,
    /// x, y, width, height in points.
    pub frame: [f64; 4],
    pub enabled: bool,
    pub tap: Option<TapSpec>,
    /// The Flutter element id of a semantics node.
    pub flutter_id: Option<String>,
    pub children: Vec<El>,
}

impl El {
    fn new(key: &str, kind: Kind, frame: [f64; 4]) -> El {
        El { key: key.into(), ident: None, kind, label: None, text: None, placeholder: None, frame, enabled: true, tap: None, flutter_id: None, children: vec![] }
    }

    pub fn contains(&self, x: f64, y: f64) -> bool {
        x >= self.frame[0] && y >= self.frame[1] && x < self.frame[0] + self.frame[2] && y < self.frame[1] + self.frame[3]
    }

    /// The deepest element at the point (later siblings are drawn on top).
    pub fn hit(&self, x: f64, y: f64) -> Option<&El> {
        if !self.contains(x, y) {
            return None;
        }
        for c in self.children.iter().rev() {
            if let Some(h) = c.hit(x, y) {
                return Some(h);
            }
        }
        Some(self)
    }

    pub fn find(&self, key: &str) -> Option<&El> {
        if self.key == key {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(key))
    }

    pub fn walk<'a>(&'a self, out: &mut Vec<&'a El>) {
        out.push(self);
        for c in &self.children {
            c.walk(out);
        }
    }
}

/// Safe-area insets (top, bottom) for an orientation.
fn insets(orientation: &str) -> (f64, f64) {
    if orientation.starts_with("landscape") { (0.0, 21.0) } else { (47.0, 34.0) }
}

const NAV_H: f64 = 44.0;
const TOOLBAR_H: f64 = 49.0;
const MARGIN: f64 = 20.0;
const SPACING: f64 = 12.0;

fn element(spec: &ElementSpec, ui: &Ui, frame: [f64; 4]) -> El {
    let kind = match spec.kind.as_str() {
        "textField" => Kind::TextField,
        "secureField" => Kind::SecureTextField,
        "button" => Kind::Button,
        _ => Kind::StaticText,
    };
    let mut e = El::new(&spec.id, kind, frame);
    e.ident = Some(spec.id.clone());
    e.enabled = spec.enabled;
    e.tap = spec.on_tap.clone();
    e.placeholder = spec.placeholder.clone();
    match kind {
        Kind::StaticText => {
            e.text = Some(ui.texts.get(&spec.id).cloned().or(spec.text.clone()).unwrap_or_default());
            e.label = e.text.clone();
        }
        Kind::Button => e.label = spec.label.clone(),
        _ => {
            e.text = Some(ui.values.get(&spec.id).cloned().unwrap_or_default());
            e.label = spec.label.clone();
        }
    }
    e
}

/// Lays out the app's current screen for `size` (points) and `orientation`.
/// `flutter_nodes` are the Flutter semantics nodes to expose under the
/// FlutterView (WDA sees them; the SDK's UIKit walk does not).
pub fn layout(spec: &ScreenSpec, ui: &Ui, size: (f64, f64), orientation: &str, flutter_nodes: Vec<El>) -> El {
    let (w, h) = size;
    let (top, bottom) = insets(orientation);
    let mut window = El::new("window", Kind::Window, [0.0, 0.0, w, h]);
    let mut root = El::new("root", Kind::View, [0.0, 0.0, w, h]);
    let mut y = top;
    if let Some(nav) = &spec.nav_bar {
        let mut bar = El::new("navigationBar", Kind::NavigationBar, [0.0, top, w, NAV_H]);
        bar.ident = Some("navigationBar".into());
        let mut back = El::new("back", Kind::Button, [8.0, top + 6.0, 72.0, 32.0]);
        back.ident = Some("back".into());
        back.label = Some("Back".into());
        back.tap = Some(TapSpec { goto: Some(nav.back.clone()), ..TapSpec::default() });
        let mut title = El::new("navigationTitle", Kind::StaticText, [w / 2.0 - 80.0, top + 11.0, 160.0, 22.0]);
        title.text = Some(nav.title.clone());
        title.label = Some(nav.title.clone());
        bar.children = vec![back, title];
        root.children.push(bar);
        y += NAV_H;
    }
    y += 16.0;
    for e in &spec.elements {
        let eh = if e.kind == "label" { 24.0 } else { 44.0 };
        root.children.push(element(e, ui, [MARGIN, y, w - 2.0 * MARGIN, eh]));
        y += eh + SPACING;
    }
    let content_top = if spec.nav_bar.is_some() { top + NAV_H } else { top };
    if let Some(wv) = &spec.web_view {
        // The web content runs under the toolbar (a translucent bar over it).
        let mut v = El::new(&wv.id, Kind::WebView, [0.0, content_top, w, h - content_top]);
        v.ident = Some(wv.id.clone());
        root.children.push(v);
    }
    if spec.flutter.is_some() {
        let mut v = El::new("flutterView", Kind::FlutterView, [0.0, content_top, w, h - content_top - bottom]);
        v.ident = Some("flutterView".into());
        v.children = flutter_nodes;
        root.children.push(v);
    }
    if !spec.toolbar.is_empty() {
        let ty = h - bottom - TOOLBAR_H;
        let mut bar = El::new("toolbar", Kind::Toolbar, [0.0, ty, w, TOOLBAR_H + bottom]);
        bar.ident = Some("toolbar".into());
        let mut x = w - 16.0;
        for e in spec.toolbar.iter().rev() {
            x -= 80.0;
            bar.children.insert(0, element(e, ui, [x, ty + 8.0, 80.0, 33.0]));
            x -= 8.0;
        }
        root.children.push(bar);
    }
    window.children.push(root);
    window
}

/// The laid-out current screen of `bundle_id`'s process (with Flutter nodes when `a11y`).
pub fn current(dev: &Device, st: &DevState, bundle_id: &str, a11y: bool) -> Option<(El, String)> {
    let app = st.apps.get(bundle_id)?;
    let p = app.process.as_ref()?;
    let screen = app.spec.screen(&p.ui.screen)?;
    let size = dev.screen_points(&st.orientation);
    let (top, bottom) = insets(&st.orientation);
    let flutter_nodes = match (&p.flutter, &screen.flutter, a11y) {
        (Some(engine), Some(fspec), true) => {
            let origin_y = top + if screen.nav_bar.is_some() { NAV_H } else { 0.0 };
            engine.a11y(fspec, (0.0, origin_y), (size.0, size.1 - origin_y - bottom))
        }
        _ => vec![],
    };
    Some((layout(screen, &p.ui, size, &st.orientation, flutter_nodes), p.epoch.clone()))
}

/// The element UID WDA reports: stable for the element's life in this process.
pub fn uid(epoch: &str, screen: &str, key: &str) -> String {
    uuid_from(&format!("{epoch}/{screen}/{key}"))
}

// ------------------------------------------------------------------ renderings

fn rect(f: [f64; 4]) -> Value {
    json!({ "x": f[0], "y": f[1], "width": f[2], "height": f[3] })
}

/// A `/v1/view/tree` node (protocols §4.4); secure editors never show their text.
pub fn sdk_node(e: &El, epoch: &str, screen: &str, depth: usize, count: &mut usize) -> Value {
    *count += 1;
    let mut o = json!({
        "id": uid(epoch, screen, &e.key),
        "depth": depth,
        "className": e.kind.class_name(),
        "simpleClassName": e.kind.class_name(),
        "visible": true,
        "enabled": e.enabled,
        "alpha": 1.0,
        "bounds": rect(e.frame),
        "accessibilityIdentifier": e.ident,
        "contentDescription": e.label,
        "text": Value::Null,
        "clickable": matches!(e.kind, Kind::Button) || e.kind.editable(),
    });
    match e.kind {
        Kind::SecureTextField => {
            let len = e.text.as_deref().map(|t| t.chars().count()).unwrap_or(0);
            o["input"] = json!({ "secure": true, "textLength": len, "rawTextCaptured": false });
        }
        Kind::TextField => {
            let t = e.text.clone().unwrap_or_default();
            o["input"] = json!({ "secure": false, "textLength": t.chars().count(), "rawTextCaptured": true });
            o["text"] = json!(t);
            if let Some(p) = &e.placeholder {
                o["placeholder"] = json!(p);
            }
        }
        Kind::StaticText | Kind::Button => o["text"] = json!(e.text.clone().or(e.label.clone())),
        _ => {}
    }
    let kids: Vec<Value> = e.children.iter().filter(|c| !matches!(c.kind, Kind::Flutter(_))).take(250).map(|c| sdk_node(c, epoch, screen, depth + 1, count)).collect();
    if !kids.is_empty() {
        o["children"] = json!(kids);
    }
    o
}

/// A node of WDA's JSON source (`/session/:id/source?format=json`).
pub fn wda_node(e: &El, epoch: &str, screen: &str) -> Value {
    let value = match e.kind {
        // XCTest reports a secure field's value as bullets.
        Kind::SecureTextField => e.text.as_ref().filter(|t| !t.is_empty()).map(|t| "•".repeat(t.chars().count())).or(e.placeholder.clone()),
        k if k.editable() => e.text.clone().filter(|t| !t.is_empty()).or(e.placeholder.clone()),
        Kind::StaticText => e.text.clone(),
        _ => None,
    };
    let label = e.label.clone().or(if e.kind == Kind::StaticText { e.text.clone() } else { None });
    json!({
        "type": e.kind.xcui_type(),
        "rawIdentifier": e.ident,
        "name": e.ident.clone().or(label.clone()),
        "label": label,
        "value": value,
        "elementId": uid(epoch, screen, &e.key),
        "isVisible": "1",
        "isEnabled": if e.enabled { "1" } else { "0" },
        "rect": rect(e.frame),
        "children": e.children.iter().map(|c| wda_node(c, epoch, screen)).collect::<Vec<_>>(),
    })
}

// ------------------------------------------------------------------ effects

/// What a tap did, for the caller's follow-up (page loads, truth).
pub struct TapOutcome {
    pub hit: Option<String>,
    pub hit_kind: Option<Kind>,
    pub screen_changed: bool,
    pub flutter: Option<Value>,
    /// The point inside a WKWebView's content (CSS px), for a DOM click.
    pub web_point: Option<(String, f64, f64)>,
}

/// A tap at screen points on `bundle_id`'s current screen. `by` names who tapped.
pub fn tap(dev: &Device, st: &mut DevState, bundle_id: &str, x: f64, y: f64, by: &str) -> Option<TapOutcome> {
    let (tree, epoch) = current(dev, st, bundle_id, true)?;
    let screen_name = st.process(bundle_id)?.ui.screen.clone();
    let hit = tree.hit(x, y).cloned();
    let mut out = TapOutcome { hit: None, hit_kind: None, screen_changed: false, flutter: None, web_point: None };
    let Some(el) = hit else {
        dev.record("native-tap", json!({ "by": by, "bundleId": bundle_id, "x": x, "y": y, "element": null }));
        return Some(out);
    };
    out.hit = Some(uid(&epoch, &screen_name, &el.key));
    out.hit_kind = Some(el.kind);
    let app = st.apps.get_mut(bundle_id)?;
    let spec = app.spec.clone();
    let p = app.process.as_mut()?;
    p.ui.last_tapped = Some(el.key.clone());
    let mut effect = json!({ "by": by, "bundleId": bundle_id, "pid": p.pid, "x": x, "y": y, "element": el.ident, "type": el.kind.xcui_type(), "screen": screen_name });
    match el.kind {
        k if k.editable() && !matches!(k, Kind::Flutter(_)) => {
            p.ui.focused = Some(el.key.clone());
            p.ui.keyboard = true;
        }
        Kind::Button if el.enabled => {
            if let Some(t) = &el.tap {
                out.screen_changed = apply_tap(dev, p, &spec, bundle_id, t, &mut app.capture);
            }
        }
        Kind::Flutter(_) | Kind::FlutterView => {
            let fv = tree.find("flutterView").map(|v| v.frame).unwrap_or([0.0; 4]);
            let fspec = spec.screen(&screen_name).and_then(|s| s.flutter.clone());
            if let (Some(engine), Some(fspec)) = (p.flutter.as_mut(), fspec) {
                out.flutter = engine.tap_logical(&fspec, x - fv[0], y - fv[1]);
                effect["flutter"] = out.flutter.clone().unwrap_or(Value::Null);
            }
        }
        Kind::WebView => {
            out.web_point = Some((el.key.clone(), x - el.frame[0], y - el.frame[1]));
        }
        _ => {}
    }
    if !el.kind.editable() && el.kind != Kind::WebView {
        p.ui.focused = None;
        p.ui.keyboard = false;
    }
    dev.record("native-tap", effect);
    Some(out)
}

fn apply_tap(dev: &Device, p: &mut crate::device::Process, spec: &AppSpec, bundle_id: &str, t: &TapSpec, capture: &mut crate::capture::CaptureStore) -> bool {
    let mut changed = false;
    if let Some(s) = &t.set_text {
        p.ui.texts.insert(s.target.clone(), s.text.clone());
    }
    if let Some(s) = &t.sign_in {
        let user = p.ui.values.get(&s.user).cloned().unwrap_or_default();
        let secret = p.ui.values.get(&s.secret).cloned().unwrap_or_default();
        let ok = !user.is_empty() && !secret.is_empty();
        let status = if ok { format!("Signed in as {user}") } else { "Enter username and password".to_string() };
        p.ui.texts.insert(s.status.clone(), status.clone());
        let epoch = p.epoch.clone();
        capture.append("logs", &epoch, json!({ "level": if ok { "info" } else { "warning" }, "tag": "Auth", "message": format!("sign in {}", if ok { "succeeded" } else { "refused" }), "source": "sdk" }));
        capture.append("network", &epoch, json!({
            "method": "POST", "url": "https://api.example.com/v1/login?client=ios&token=[redacted]", "statusCode": if ok { 200 } else { 401 }, "durationMs": 42,
            "requestBody": json!({ "username": user, "password": "[redacted]" }).to_string(), "responseBody": json!({ "ok": ok }).to_string(), "redacted": true, "source": "http",
        }));
        capture.append("state", &epoch, json!({ "namespace": "session", "key": "user", "value": if ok { json!(user) } else { Value::Null }, "source": "sdk" }));
        capture.append("events", &epoch, json!({ "category": "auth", "name": if ok { "signIn.succeeded" } else { "signIn.refused" }, "data": { "user": user }, "source": "sdk" }));
        dev.record("sign-in", json!({ "bundleId": bundle_id, "user": user, "ok": ok }));
    }
    if let Some(g) = &t.goto
        && spec.screen(g).is_some()
        && p.ui.screen != *g
    {
        p.ui.screen = g.clone();
        p.ui.focused = None;
        p.ui.keyboard = false;
        changed = true;
        if let Some(f) = spec.screen(g).and_then(|s| s.flutter.as_ref())
            && p.flutter.is_none()
        {
            p.flutter = Some(crate::flutter::Engine::new(f));
        }
        dev.record("screen", json!({ "bundleId": bundle_id, "screen": g }));
    }
    changed
}

/// The editor element of the focused key on the current screen.
pub fn focused_editor(dev: &Device, st: &DevState, bundle_id: &str) -> Option<El> {
    let key = st.process(bundle_id)?.ui.focused.clone()?;
    let (tree, _) = current(dev, st, bundle_id, false)?;
    tree.find(&key).filter(|e| e.kind.editable()).cloned()
}

/// Sets an editor's raw value (typing appends; a clear empties).
pub fn set_value(st: &mut DevState, bundle_id: &str, key: &str, value: String) {
    if let Some(p) = st.process_mut(bundle_id) {
        p.ui.values.insert(key.to_string(), value);
    }
}

/// `native` control op: the app's native screen.
pub fn describe(dev: &Device, st: &DevState, bundle_id: &str) -> Value {
    let Some(p) = st.process(bundle_id) else { return json!({ "ok": false, "error": "not_running", "message": format!("{bundle_id} is not running") }) };
    let elements: Vec<Value> = current(dev, st, bundle_id, false)
        .map(|(t, _)| {
            let mut all = vec![];
            t.walk(&mut all);
            all.into_iter().filter(|e| e.ident.is_some()).map(|e| json!({ "id": e.ident, "type": e.kind.xcui_type(), "text": e.text, "label": e.label, "frame": e.frame, "enabled": e.enabled })).collect()
        })
        .unwrap_or_default();
    json!({ "ok": true, "bundleId": bundle_id, "pid": p.pid, "runtimeEpoch": p.epoch, "foreground": st.is_foreground(bundle_id), "orientation": st.orientation, "ui": p.ui.to_json(), "elements": elements, "atMs": now_ms() })
}
