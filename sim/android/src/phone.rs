//! The phone model: installed apps and their runtime state (process, current
//! screen, typed values, focus, permissions, app-ops, SDK capture records),
//! the foreground app and the keyboard. Pure state plus the resolved view tree
//! of the current screen; text renderings live in `dumpsys`/`uiautomator`,
//! process start/stop with side effects in `lifecycle`.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use crate::scenario::{ActionSpec, AppSpec, NodeSpec, Scenario};

pub struct Phone {
    pub width: u32,
    pub height: u32,
    pub density: u32,
    pub sdk_int: u32,
    pub manufacturer: String,
    pub model: String,
    pub apps: Vec<App>,
    pub foreground: Option<usize>,
    pub keyboard: bool,
    pub next_pid: u32,
    pub next_task: u32,
    pub logcat: Vec<LogLine>,
    /// Lines ever written to `logcat` (follow readers find the new ones after eviction or `-c`).
    pub logcat_total: u64,
    /// Installed APKs without a scenario entry: sha256 → package.
    pub extra_installs: Vec<(String, String)>,
    /// Package installer sessions since boot (src/installer.rs), by id.
    pub install_sessions: BTreeMap<u32, crate::installer::Session>,
    pub next_session: u32,
    /// A system dialog shown over the foreground app (the focused window while it shows).
    pub system_dialog: Option<crate::system_dialog::SystemDialog>,
}

pub struct App {
    pub spec: AppSpec,
    pub package: String,
    pub app_id: u32,
    pub installed: bool,
    pub process: Option<Proc>,
    pub screen: usize,
    pub values: HashMap<String, String>,
    pub checked: HashMap<String, bool>,
    pub focused: Option<String>,
    pub permissions: BTreeMap<String, bool>,
    pub appops: BTreeMap<String, String>,
    pub capture: Capture,
    pub task_id: u32,
    pub frozen: bool,
    /// Signing certificate digest(s) of the installed APK (src/installer.rs); none for a scenario app never reinstalled.
    pub cert: Option<String>,
    /// `/data/app/~~…==/<pkg>-…==/base.apk` of an APK installed through the package installer.
    pub code_path: Option<String>,
    pub apk_sha256: Option<String>,
    /// Runtime permission flags set by the permission dialog (src/permission_dialog.rs).
    pub perm_flags: BTreeMap<String, PermFlags>,
    /// `<instrumentation>` elements of the installed APK (`pm list instrumentation`, `am instrument`).
    pub instrumentations: Vec<crate::executor::Instrumentation>,
}

#[derive(Clone, Debug, Default)]
pub struct PermFlags {
    /// The user answered a dialog (`USER_SET`).
    pub user_set: bool,
    /// "Don't ask again" (`USER_FIXED`): requests show no dialog.
    pub user_fixed: bool,
    /// Denials answered in a dialog.
    pub denials: u32,
    /// "Only this time" (`ONE_TIME`): granted for this visit only.
    pub one_time: bool,
}

#[derive(Clone, Debug)]
pub struct Proc {
    pub pid: u32,
    pub start_ticks: u64,
    pub epoch: String,
    pub window_token: String,
    pub activity_token: String,
    pub session_token: String,
}

#[derive(Default)]
pub struct Capture {
    pub next_id: u64,
    pub logs: Vec<Value>,
    pub network: Vec<Value>,
    pub state: Vec<Value>,
    pub events: Vec<Value>,
}

pub struct LogLine {
    pub at_ms: u64,
    pub pid: u32,
    pub tid: u32,
    pub level: char,
    pub tag: String,
    pub message: String,
}

/// A node of the current screen with everything resolved (values typed, placeholders filled).
#[derive(Clone, Debug)]
pub struct Node {
    pub class: String,
    pub id: Option<String>,
    pub resource_name: Option<String>,
    pub text: Option<String>,
    pub desc: Option<String>,
    pub bounds: [i32; 4],
    pub clickable: bool,
    pub long_clickable: bool,
    pub enabled: bool,
    pub focusable: bool,
    pub focused: bool,
    pub editable: bool,
    pub password: bool,
    pub checkable: bool,
    pub checked: bool,
    pub selected: bool,
    pub scrollable: bool,
    pub visible: bool,
    pub color: Option<String>,
    pub children: Vec<Node>,
    pub on_tap: Option<ActionSpec>,
}

pub fn fill(template: &str, values: &HashMap<String, String>) -> String {
    let mut out = template.to_string();
    for (k, v) in values {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

fn fill_value(v: &Value, values: &HashMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(fill(s, values)),
        Value::Array(a) => Value::Array(a.iter().map(|x| fill_value(x, values)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), fill_value(x, values))).collect()),
        other => other.clone(),
    }
}

impl App {
    /// A freshly installed app (no process, start screen).
    pub fn new(spec: AppSpec, app_id: u32) -> App {
        let mut app = App {
            package: spec.package.clone(),
            app_id,
            installed: true,
            process: None,
            screen: 0,
            values: HashMap::new(),
            checked: HashMap::new(),
            focused: None,
            permissions: spec.permissions.clone(),
            appops: spec.appops.clone(),
            capture: Capture::default(),
            task_id: 0,
            frozen: false,
            cert: None,
            code_path: None,
            apk_sha256: None,
            perm_flags: BTreeMap::new(),
            instrumentations: vec![],
            spec,
        };
        app.reset_runtime();
        app
    }

    pub fn activity_class(&self, name: &str) -> String {
        if let Some(rest) = name.strip_prefix('.') { format!("{}.{rest}", self.package) } else { name.to_string() }
    }

    pub fn short_activity(&self, name: &str) -> String {
        let full = self.activity_class(name);
        match full.strip_prefix(&format!("{}.", self.package)) {
            Some(rest) => format!(".{rest}"),
            None => full,
        }
    }

    pub fn launcher(&self) -> Option<String> {
        self.spec.launcher.clone().or_else(|| self.spec.activities.first().cloned())
    }

    /// Activity of the current screen (full class name).
    pub fn current_activity(&self) -> Option<String> {
        let screen = self.spec.screens.get(self.screen);
        let act = screen.and_then(|s| s.activity.clone()).or_else(|| self.launcher())?;
        Some(self.activity_class(&act))
    }

    pub fn uid(&self) -> u32 {
        self.app_id
    }

    pub fn debuggable(&self) -> bool {
        self.spec.debuggable.unwrap_or(true)
    }

    pub fn start_screen(&self) -> usize {
        self.spec.start_screen.as_ref().and_then(|n| self.spec.screens.iter().position(|s| &s.name == n)).unwrap_or(0)
    }

    pub fn reset_runtime(&mut self) {
        self.screen = self.start_screen();
        self.values.clear();
        self.checked.clear();
        self.focused = None;
        self.capture = Capture::default();
        for l in self.spec.logs.clone() {
            self.capture_record("log", l, None);
        }
        for s in self.spec.state.clone() {
            self.capture_record("state", s, None);
        }
    }

    /// Stores a capture record the way the SDK does (id, type, source, timestampMs + defaults).
    pub fn capture_record(&mut self, kind: &str, body: Value, action_id: Option<String>) -> Value {
        self.capture.next_id += 1;
        let mut item = serde_json::Map::new();
        item.insert("id".into(), json!(self.capture.next_id));
        item.insert("type".into(), json!(kind));
        item.insert("source".into(), json!("sdk"));
        item.insert("timestampMs".into(), json!(crate::device::now_ms()));
        match kind {
            "log" => {
                item.insert("level".into(), json!("info"));
                item.insert("tag".into(), json!("app"));
                item.insert("message".into(), json!(""));
            }
            "state" => {
                item.insert("namespace".into(), json!("app"));
                item.insert("key".into(), json!("value"));
            }
            "event" => {
                item.insert("category".into(), json!("app"));
                item.insert("name".into(), json!("event"));
            }
            "network" => {
                item.insert("redacted".into(), json!(true));
            }
            _ => {}
        }
        if let Value::Object(o) = body {
            for (k, v) in o {
                if k != "id" && k != "type" {
                    item.insert(k, v);
                }
            }
        }
        if let Some(a) = action_id {
            item.insert("actionId".into(), json!(a));
        }
        if kind == "network" {
            crate::redact::network(&mut item);
        }
        let item = Value::Object(item);
        let (list, cap) = match kind {
            "log" => (&mut self.capture.logs, 300),
            "network" => (&mut self.capture.network, 200),
            "state" => (&mut self.capture.state, 200),
            _ => (&mut self.capture.events, 300),
        };
        list.push(item.clone());
        if list.len() > cap {
            list.remove(0);
        }
        item
    }

    /// The current screen's resolved view tree.
    pub fn tree(&self, width: u32, height: u32) -> Option<Node> {
        let screen = self.spec.screens.get(self.screen)?;
        let full = [0, 0, width as i32, height as i32];
        Some(self.resolve(&screen.root, full))
    }

    fn resolve(&self, spec: &NodeSpec, parent: [i32; 4]) -> Node {
        let bounds = spec.bounds.unwrap_or(parent);
        let id = spec.id.clone();
        let typed = id.as_ref().and_then(|i| self.values.get(i)).cloned();
        let text = match (&typed, &spec.text) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(t)) => Some(fill(t, &self.values)),
            (None, None) => None,
        };
        let mut children: Vec<Node> = spec.children.iter().map(|c| self.resolve(c, bounds)).collect();
        for i in 0..spec.repeat {
            let top = bounds[1] + (i as i32 % 40) * 50;
            children.push(Node {
                id: Some(format!("row_{i}")),
                resource_name: Some(format!("{}:id/row_{i}", self.package)),
                text: Some(format!("Row {i}")),
                ..Node::plain("android.widget.TextView", [bounds[0], top, bounds[2], top + 50])
            });
        }
        let focused = id.is_some() && self.focused == id;
        Node {
            class: spec.class.clone(),
            resource_name: id.as_ref().map(|i| format!("{}:id/{i}", self.package)),
            id: id.clone(),
            text,
            desc: spec.desc.clone(),
            bounds,
            clickable: spec.clickable,
            long_clickable: spec.long_clickable,
            enabled: spec.enabled,
            focusable: spec.focusable || spec.editable,
            focused: focused || (self.focused.is_none() && spec.focused),
            editable: spec.editable,
            password: spec.password,
            checkable: spec.checkable,
            checked: id.as_ref().and_then(|i| self.checked.get(i).copied()).unwrap_or(spec.checked),
            selected: spec.selected,
            scrollable: spec.scrollable,
            visible: spec.visible,
            color: spec.color.clone(),
            children,
            on_tap: spec.on_tap.clone(),
        }
    }

    /// Applies a tap's action; returns what happened (for ground truth).
    pub fn apply_action(&mut self, node: &Node) -> Value {
        let mut effects = vec![];
        if node.editable {
            self.focused = node.id.clone();
            effects.push(json!({ "focus": node.id }));
        }
        let Some(action) = node.on_tap.clone() else { return json!(effects) };
        let action = self.validated(action, &mut effects);
        if action.toggle
            && let Some(id) = &node.id {
                self.checked.insert(id.clone(), !node.checked);
                effects.push(json!({ "checked": !node.checked }));
            }
        for (kind, v) in [("network", &action.network), ("log", &action.log), ("state", &action.state), ("event", &action.event)] {
            // One record, or several (`[…]`: a tap that makes more than one request).
            let records = match v {
                Some(Value::Array(many)) => many.clone(),
                Some(one) => vec![one.clone()],
                None => vec![],
            };
            for v in &records {
                let rec = fill_value(v, &self.values);
                let item = self.capture_record(kind, rec, None);
                effects.push(json!({ kind: item }));
            }
        }
        if let Some(goto) = &action.goto
            && let Some(i) = self.spec.screens.iter().position(|s| &s.name == goto) {
                self.screen = i;
                self.focused = None;
                effects.push(json!({ "screen": goto }));
            }
        json!(effects)
    }
}

impl Node {
    /// A visible, enabled node of `class` with nothing else set (rows, dialog parts).
    pub fn plain(class: &str, bounds: [i32; 4]) -> Node {
        Node {
            class: class.into(),
            id: None,
            resource_name: None,
            text: None,
            desc: None,
            bounds,
            clickable: false,
            long_clickable: false,
            enabled: true,
            focusable: false,
            focused: false,
            editable: false,
            password: false,
            checkable: false,
            checked: false,
            selected: false,
            scrollable: false,
            visible: true,
            color: None,
            children: vec![],
            on_tap: None,
        }
    }

    pub fn contains(&self, x: i32, y: i32) -> bool {
        x >= self.bounds[0] && x < self.bounds[2] && y >= self.bounds[1] && y < self.bounds[3]
    }

    /// Deepest visible, enabled, clickable (or editable) node under the point.
    pub fn hit(&self, x: i32, y: i32) -> Option<&Node> {
        if !self.visible || !self.contains(x, y) {
            return None;
        }
        for c in self.children.iter().rev() {
            if let Some(h) = c.hit(x, y) {
                return Some(h);
            }
        }
        if self.enabled && (self.clickable || self.editable) { Some(self) } else { None }
    }

    pub fn count(&self) -> usize {
        1 + self.children.iter().map(Node::count).sum::<usize>()
    }

    pub fn simple_class(&self) -> &str {
        self.class.rsplit('.').next().unwrap_or(&self.class)
    }

    pub fn shown_text(&self) -> String {
        match &self.text {
            Some(t) if self.password => "•".repeat(t.chars().count()),
            Some(t) => t.clone(),
            None => String::new(),
        }
    }
}

impl Phone {
    pub fn from_scenario(s: &Scenario) -> Phone {
        let apps = s
            .apps
            .iter()
            .enumerate()
            .map(|(i, spec)| App::new(spec.clone(), spec.app_id.unwrap_or(10100 + i as u32)))
            .collect();
        Phone {
            width: s.device.width,
            height: s.device.height,
            density: s.device.density,
            sdk_int: s.device.sdk_int,
            manufacturer: s.device.manufacturer.clone(),
            model: s.device.model.clone(),
            apps,
            foreground: None,
            keyboard: false,
            next_pid: 4000,
            next_task: 10,
            logcat: vec![],
            logcat_total: 0,
            extra_installs: vec![],
            install_sessions: BTreeMap::new(),
            next_session: 1_000_000,
            system_dialog: None,
        }
    }

    pub fn app_index(&self, package: &str) -> Option<usize> {
        self.apps.iter().position(|a| a.package == package && a.installed)
    }

    pub fn foreground_app(&self) -> Option<&App> {
        self.foreground.map(|i| &self.apps[i])
    }

    pub fn foreground_tree(&self) -> Option<Node> {
        self.foreground_app().and_then(|a| a.tree(self.width, self.height))
    }

    pub fn log(&mut self, pid: u32, level: char, tag: &str, message: &str) {
        self.logcat.push(LogLine { at_ms: crate::device::now_ms(), pid, tid: pid, level, tag: tag.into(), message: message.into() });
        self.logcat_total += 1;
        if self.logcat.len() > 5000 {
            self.logcat.remove(0);
        }
    }

    pub fn pid_of(&self, package: &str) -> Option<u32> {
        self.apps.iter().find(|a| a.package == package).and_then(|a| a.process.as_ref()).map(|p| p.pid)
    }
}
