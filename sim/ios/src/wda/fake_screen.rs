//! A small in-memory [`NativeScreen`] for the Runner's own tests (unit tests
//! here, and `tests/it/wda.rs` includes this file): one foreground App with a
//! flat list of elements, an effect log of what the screen actually received
//! (the ground truth the tests assert), and the facts the Runner recorded.
//! Its parent module must bring `EventError`, `Foreground` and `NativeScreen` into scope.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{EventError, Foreground, NativeScreen};

#[derive(Clone, Debug)]
pub struct FakeElement {
    pub id: String,
    pub kind: String,
    pub identifier: Option<String>,
    pub label: Option<String>,
    pub value: Option<String>,
    pub editor: bool,
    pub visible: bool,
    pub enabled: bool,
    pub rect: (f64, f64, f64, f64),
}

impl FakeElement {
    pub fn button(id: &str, identifier: &str, label: &str, rect: (f64, f64, f64, f64)) -> FakeElement {
        FakeElement { id: id.into(), kind: "XCUIElementTypeButton".into(), identifier: Some(identifier.into()), label: Some(label.into()), value: None, editor: false, visible: true, enabled: true, rect }
    }

    pub fn field(id: &str, identifier: &str, value: &str, rect: (f64, f64, f64, f64)) -> FakeElement {
        FakeElement { id: id.into(), kind: "XCUIElementTypeTextField".into(), identifier: Some(identifier.into()), label: None, value: Some(value.into()), editor: true, visible: true, enabled: true, rect }
    }

    fn contains(&self, x: f64, y: f64) -> bool {
        let (rx, ry, w, h) = self.rect;
        self.visible && x >= rx && x < rx + w && y >= ry && y < ry + h
    }

    fn to_json(&self) -> Value {
        let flag = |b: bool| if b { "1" } else { "0" };
        json!({
            "type": self.kind, "rawIdentifier": self.identifier, "name": self.identifier, "label": self.label,
            "value": self.value, "elementId": self.id, "isVisible": flag(self.visible), "isEnabled": flag(self.enabled),
            "rect": { "x": self.rect.0, "y": self.rect.1, "width": self.rect.2, "height": self.rect.3 }, "children": [],
        })
    }
}

pub struct FakeState {
    pub foreground: Option<Foreground>,
    pub elements: Vec<FakeElement>,
    pub focused: Option<String>,
    pub orientation: String,
    /// The App supports only portrait.
    pub portrait_only: bool,
    /// What a clear leaves in the editor (`None`: it empties it).
    pub clear_leaves: Option<String>,
    /// How long every event takes inside "XCTest".
    pub event_delay: Duration,
    pub effects: Vec<Value>,
}

pub struct FakeScreen {
    pub state: Mutex<FakeState>,
    pub facts: Mutex<Vec<Value>>,
}

pub const APP: &str = "com.example.app";
pub const APP_PID: u32 = 4242;

impl FakeScreen {
    /// `com.example.app` (pid 4242) in the foreground with an OK button, a
    /// name field holding "old" and a disabled "Off" button.
    pub fn new() -> Arc<FakeScreen> {
        Arc::new(FakeScreen {
            state: Mutex::new(FakeState {
                foreground: Some(Foreground { bundle_id: APP.into(), process_id: APP_PID }),
                elements: vec![
                    FakeElement::button("E-ok", "okButton", "OK", (10.0, 10.0, 100.0, 40.0)),
                    FakeElement::field("E-name", "nameField", "old", (10.0, 100.0, 200.0, 40.0)),
                    FakeElement { enabled: false, ..FakeElement::button("E-off", "offButton", "Off", (10.0, 200.0, 100.0, 40.0)) },
                ],
                focused: None,
                orientation: "portrait".into(),
                portrait_only: false,
                clear_leaves: None,
                event_delay: Duration::ZERO,
                effects: Vec::new(),
            }),
            facts: Mutex::new(Vec::new()),
        })
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// What the screen received, of one kind (`tap`, `swipe`, `focus`, `clear`, `type`, `orientation`).
    pub fn effects(&self, kind: &str) -> Vec<Value> {
        self.with(|s| s.effects.iter().filter(|e| e["kind"] == kind).cloned().collect())
    }

    pub fn all_effects(&self) -> Vec<Value> {
        self.with(|s| s.effects.clone())
    }

    /// Facts the Runner recorded, of one event name.
    pub fn facts(&self, event: &str) -> Vec<Value> {
        self.facts.lock().unwrap().iter().filter(|f| f["event"] == event).cloned().collect()
    }

    pub fn value_of(&self, id: &str) -> Option<String> {
        self.with(|s| s.elements.iter().find(|e| e.id == id).and_then(|e| e.value.clone()))
    }

    /// Runs one event: the App must still be `expected`, then "XCTest" takes its time.
    fn event<T>(&self, expected: &Foreground, f: impl FnOnce(&mut FakeState) -> Result<T, EventError>) -> Result<T, EventError> {
        let delay = self.with(|s| s.event_delay);
        if self.with(|s| s.foreground.as_ref() != Some(expected)) {
            return Err(EventError::TargetChanged);
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        self.with(f)
    }
}

impl NativeScreen for FakeScreen {
    fn foreground(&self) -> Option<Foreground> {
        self.with(|s| s.foreground.clone())
    }

    fn source(&self, expected: &Foreground) -> Option<Value> {
        self.with(|s| {
            (s.foreground.as_ref() == Some(expected)).then(|| {
                json!({ "type": "XCUIElementTypeApplication", "rawIdentifier": null, "name": expected.bundle_id, "label": null, "value": null,
                        "elementId": "E-app", "isVisible": "1", "isEnabled": "1", "rect": { "x": 0, "y": 0, "width": 400, "height": 800 },
                        "children": s.elements.iter().map(FakeElement::to_json).collect::<Vec<_>>() })
            })
        })
    }

    fn tap(&self, expected: &Foreground, x: f64, y: f64) -> Result<Option<String>, EventError> {
        self.event(expected, |s| {
            let hit = s.elements.iter().find(|e| e.contains(x, y)).map(|e| e.id.clone());
            s.effects.push(json!({ "kind": "tap", "x": x, "y": y, "hit": hit }));
            Ok(hit)
        })
    }

    fn swipe(&self, expected: &Foreground, start: (f64, f64), end: (f64, f64), duration_ms: u64) -> Result<(), EventError> {
        self.event(expected, |s| {
            s.effects.push(json!({ "kind": "swipe", "start": [start.0, start.1], "end": [end.0, end.1], "durationMs": duration_ms }));
            Ok(())
        })
    }

    fn focus(&self, expected: &Foreground, element_id: &str) -> Result<(), EventError> {
        self.event(expected, |s| {
            let Some(e) = s.elements.iter().find(|e| e.id == element_id) else { return Err(EventError::ElementGone) };
            if !e.editor {
                return Err(EventError::NotOperable("not an editor".into()));
            }
            s.focused = Some(element_id.to_string());
            s.effects.push(json!({ "kind": "focus", "elementId": element_id }));
            Ok(())
        })
    }

    fn focused(&self, expected: &Foreground) -> Option<String> {
        self.with(|s| if s.foreground.as_ref() == Some(expected) { s.focused.clone() } else { None })
    }

    fn value(&self, expected: &Foreground, element_id: &str) -> Option<String> {
        self.with(|s| if s.foreground.as_ref() == Some(expected) { s.elements.iter().find(|e| e.id == element_id).and_then(|e| e.value.clone()) } else { None })
    }

    fn clear_focused(&self, expected: &Foreground) -> Result<(), EventError> {
        self.event(expected, |s| {
            let Some(id) = s.focused.clone() else { return Err(EventError::NotOperable("nothing focused".into())) };
            let leaves = s.clear_leaves.clone();
            if let Some(e) = s.elements.iter_mut().find(|e| e.id == id) {
                e.value = leaves;
            }
            s.effects.push(json!({ "kind": "clear", "elementId": id }));
            Ok(())
        })
    }

    fn type_text(&self, expected: &Foreground, text: &str) -> Result<(), EventError> {
        self.event(expected, |s| {
            let Some(id) = s.focused.clone() else { return Err(EventError::NotOperable("nothing focused".into())) };
            if let Some(e) = s.elements.iter_mut().find(|e| e.id == id) {
                e.value = Some(format!("{}{text}", e.value.clone().unwrap_or_default()));
            }
            s.effects.push(json!({ "kind": "type", "elementId": id, "text": text }));
            Ok(())
        })
    }

    fn set_orientation(&self, expected: &Foreground, orientation: &str) -> Result<String, EventError> {
        self.event(expected, |s| {
            if !s.portrait_only || orientation == "portrait" {
                s.orientation = orientation.to_string();
            }
            s.effects.push(json!({ "kind": "orientation", "requested": orientation, "observed": s.orientation }));
            Ok(s.orientation.clone())
        })
    }

    fn orientation(&self) -> String {
        self.with(|s| s.orientation.clone())
    }

    fn record(&self, fact: Value) {
        self.facts.lock().unwrap().push(fact);
    }
}
