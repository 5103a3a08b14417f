//! The device's side of the `NativeScreen` seam: what XCTest (the WDA Runner)
//! sees of the foreground app and the events it synthesizes, on the same
//! native model the SDK's view tree renders. Every event re-checks that the
//! expected app/process is still foreground and lands in the truth log as
//! done `by: "wda"`.

use std::sync::{Arc, Weak};

use serde_json::{Value, json};

use crate::device::{DevState, Device};
use crate::native::{self, El, Kind};
use crate::screen::{EventError, Foreground, NativeScreen};

pub struct DeviceScreen {
    pub dev: Weak<Device>,
}

impl DeviceScreen {
    fn dev(&self) -> Option<Arc<Device>> {
        self.dev.upgrade()
    }
}

fn fg_of(st: &DevState) -> Option<Foreground> {
    let b = st.foreground.clone()?;
    let pid = st.process(&b)?.pid;
    Some(Foreground { bundle_id: b, process_id: pid })
}

fn check(st: &DevState, expected: &Foreground) -> Result<(), EventError> {
    if fg_of(st).as_ref() == Some(expected) { Ok(()) } else { Err(EventError::TargetChanged) }
}

/// The element with WDA UID `id` on the expected app's current screen.
fn element(dev: &Device, st: &DevState, expected: &Foreground, id: &str) -> Option<(El, String)> {
    let (tree, epoch) = native::current(dev, st, &expected.bundle_id, true)?;
    let screen = st.process(&expected.bundle_id)?.ui.screen.clone();
    let mut all = vec![];
    tree.walk(&mut all);
    all.into_iter().find(|e| native::uid(&epoch, &screen, &e.key) == id).map(|e| (e.clone(), screen))
}

/// The Flutter widget key behind a semantics element key (`flutter:<id>`).
fn flutter_key(dev: &Device, st: &mut DevState, bundle: &str, el_key: &str) -> Option<String> {
    let id = el_key.strip_prefix("flutter:")?;
    let orientation = st.orientation.clone();
    let app = st.apps.get_mut(bundle)?;
    let fspec = app.spec.screens.iter().find_map(|s| s.flutter.clone())?;
    let engine = app.process.as_mut()?.flutter.as_mut()?;
    engine.key_of(&fspec, crate::sdk_flutter::view_size(dev, &orientation), id)
}

impl NativeScreen for DeviceScreen {
    fn foreground(&self) -> Option<Foreground> {
        let dev = self.dev()?;
        let st = dev.st.lock().unwrap();
        fg_of(&st)
    }

    fn source(&self, expected: &Foreground) -> Option<Value> {
        let dev = self.dev()?;
        let st = dev.st.lock().unwrap();
        check(&st, expected).ok()?;
        let (tree, epoch) = native::current(&dev, &st, &expected.bundle_id, true)?;
        let app = st.apps.get(&expected.bundle_id)?;
        let screen = app.process.as_ref()?.ui.screen.clone();
        let window = native::wda_node(&tree, &epoch, &screen);
        Some(json!({
            "type": "XCUIElementTypeApplication", "rawIdentifier": null, "name": app.spec.name, "label": app.spec.name, "value": null,
            "elementId": native::uid(&epoch, "application", &expected.bundle_id), "isVisible": "1", "isEnabled": "1",
            "rect": window["rect"].clone(), "children": [window],
        }))
    }

    fn tap(&self, expected: &Foreground, x: f64, y: f64) -> Result<Option<String>, EventError> {
        let dev = self.dev().ok_or(EventError::Failed("device gone".into()))?;
        let outcome = {
            let mut st = dev.st.lock().unwrap();
            check(&st, expected)?;
            native::tap(&dev, &mut st, &expected.bundle_id, x, y, "wda").ok_or(EventError::TargetChanged)?
        };
        crate::web::sync(&dev);
        if let Some((wv, cx, cy)) = outcome.web_point {
            // A touch on WKWebView content reaches the page as a click at that CSS point.
            let views = crate::web::find(&dev, &expected.bundle_id, expected.process_id, Some(&wv));
            if let (Some(v), Some(host)) = (views.into_iter().next(), dev.web()) {
                let d = dev.clone();
                tokio::spawn(async move {
                    let r = crate::web::click_at(&host, &v, cx, cy).await;
                    d.record("h5", json!({ "bundleId": v.key.1, "webViewId": v.key.3, "action": "native-click", "x": cx, "y": cy, "by": "wda", "ok": r.is_ok() }));
                });
            }
        }
        Ok(outcome.hit)
    }

    fn swipe(&self, expected: &Foreground, start: (f64, f64), end: (f64, f64), duration_ms: u64) -> Result<(), EventError> {
        let dev = self.dev().ok_or(EventError::Failed("device gone".into()))?;
        let mut st = dev.st.lock().unwrap();
        check(&st, expected)?;
        let (tree, _) = native::current(&dev, &st, &expected.bundle_id, true).ok_or(EventError::TargetChanged)?;
        let hit = tree.hit(start.0, start.1).map(|e| (e.kind, e.key.clone()));
        let flutter_frame = tree.find("flutterView").map(|e| e.frame);
        let mut scrolled = Value::Null;
        if let (Some((Kind::Flutter(_) | Kind::FlutterView, _)), Some(fv)) = (&hit, flutter_frame) {
            let orientation = st.orientation.clone();
            if let Some(app) = st.apps.get_mut(&expected.bundle_id)
                && let Some(fspec) = app.spec.screens.iter().find_map(|s| s.flutter.clone())
                && let Some(engine) = app.process.as_mut().and_then(|p| p.flutter.as_mut())
            {
                let req = json!({ "action": "swipe", "startX": start.0 - fv[0], "startY": start.1 - fv[1], "endX": end.0 - fv[0], "endY": end.1 - fv[1] });
                let (r, _) = engine.run(&fspec, crate::sdk_flutter::view_size(&dev, &orientation), req.as_object().unwrap());
                scrolled = r;
            }
        }
        drop(st);
        if let Some((Kind::WebView, wv)) = &hit {
            let views = crate::web::find(&dev, &expected.bundle_id, expected.process_id, Some(wv));
            if let (Some(v), Some(host)) = (views.into_iter().next(), dev.web()) {
                let dy = start.1 - end.1;
                let dx = start.0 - end.0;
                tokio::spawn(async move {
                    let _ = crate::web::evaluate(&host, &v, &format!("window.scrollBy({dx}, {dy}), true")).await;
                });
            }
        }
        dev.record("native-swipe", json!({ "by": "wda", "bundleId": expected.bundle_id, "start": [start.0, start.1], "end": [end.0, end.1], "durationMs": duration_ms, "element": hit.map(|h| h.1), "flutter": scrolled }));
        Ok(())
    }

    fn focus(&self, expected: &Foreground, element_id: &str) -> Result<(), EventError> {
        let dev = self.dev().ok_or(EventError::Failed("device gone".into()))?;
        let mut st = dev.st.lock().unwrap();
        check(&st, expected)?;
        let (el, _) = element(&dev, &st, expected, element_id).ok_or(EventError::ElementGone)?;
        if !el.kind.editable() {
            return Err(EventError::NotOperable(format!("{} is not an editor", el.kind.xcui_type())));
        }
        if !el.enabled {
            return Err(EventError::NotOperable("the editor is disabled".into()));
        }
        if let Some(key) = flutter_key(&dev, &mut st, &expected.bundle_id, &el.key)
            && let Some(engine) = st.process_mut(&expected.bundle_id).and_then(|p| p.flutter.as_mut())
        {
            engine.focused = Some(key);
            engine.keyboard = true;
        }
        let p = st.process_mut(&expected.bundle_id).ok_or(EventError::TargetChanged)?;
        p.ui.focused = Some(el.key.clone());
        p.ui.keyboard = true;
        p.ui.last_tapped = Some(el.key.clone());
        drop(st);
        dev.record("native-focus", json!({ "by": "wda", "bundleId": expected.bundle_id, "element": el.ident.clone().unwrap_or(el.key) }));
        Ok(())
    }

    fn focused(&self, expected: &Foreground) -> Option<String> {
        let dev = self.dev()?;
        let st = dev.st.lock().unwrap();
        check(&st, expected).ok()?;
        let p = st.process(&expected.bundle_id)?;
        let key = p.ui.focused.clone()?;
        Some(native::uid(&p.epoch, &p.ui.screen, &key))
    }

    fn value(&self, expected: &Foreground, element_id: &str) -> Option<String> {
        let dev = self.dev()?;
        let st = dev.st.lock().unwrap();
        check(&st, expected).ok()?;
        let (el, _) = element(&dev, &st, expected, element_id)?;
        match el.kind {
            Kind::SecureTextField => el.text.map(|t| "•".repeat(t.chars().count())),
            _ => el.text.or(el.label),
        }
    }

    fn clear_focused(&self, expected: &Foreground) -> Result<(), EventError> {
        self.edit(expected, None)
    }

    fn type_text(&self, expected: &Foreground, text: &str) -> Result<(), EventError> {
        self.edit(expected, Some(text))
    }

    fn set_orientation(&self, expected: &Foreground, orientation: &str) -> Result<String, EventError> {
        let dev = self.dev().ok_or(EventError::Failed("device gone".into()))?;
        let observed = {
            let mut st = dev.st.lock().unwrap();
            check(&st, expected)?;
            let supported = st.apps.get(&expected.bundle_id).is_some_and(|a| a.spec.supported_orientations.iter().any(|o| o == orientation));
            let ignored = dev.faults.lock().unwrap().wda_orientation_ignored;
            let before = st.orientation.clone();
            if supported && !ignored {
                st.orientation = orientation.to_string();
            }
            dev.record("orientation", json!({ "by": "wda", "bundleId": expected.bundle_id, "requested": orientation, "from": before, "observed": st.orientation, "supported": supported, "ignored": ignored }));
            st.orientation.clone()
        };
        crate::web::sync(&dev);
        Ok(observed)
    }

    fn orientation(&self) -> String {
        self.dev().map(|d| d.st.lock().unwrap().orientation.clone()).unwrap_or_else(|| "portrait".into())
    }

    fn record(&self, fact: Value) {
        if let Some(d) = self.dev() {
            d.record("wda", fact);
        }
    }
}

impl DeviceScreen {
    /// Typing (Some) or one keyboard-clear event (None) on the focused editor.
    fn edit(&self, expected: &Foreground, text: Option<&str>) -> Result<(), EventError> {
        let dev = self.dev().ok_or(EventError::Failed("device gone".into()))?;
        let mut st = dev.st.lock().unwrap();
        check(&st, expected)?;
        let el = native::focused_editor(&dev, &st, &expected.bundle_id);
        let p = st.process(&expected.bundle_id).ok_or(EventError::TargetChanged)?;
        let key = p.ui.focused.clone().ok_or_else(|| EventError::NotOperable("no focused editor".into()))?;
        let secure = el.as_ref().is_some_and(|e| e.kind == Kind::SecureTextField);
        if let Some(fkey) = flutter_key(&dev, &mut st, &expected.bundle_id, &key) {
            let engine = st.process_mut(&expected.bundle_id).and_then(|p| p.flutter.as_mut()).ok_or(EventError::TargetChanged)?;
            let v = engine.values.entry(fkey.clone()).or_default();
            match text {
                Some(t) => v.push_str(t),
                None => v.clear(),
            }
        } else {
            let el = el.ok_or_else(|| EventError::NotOperable("the focused element is not an editor".into()))?;
            let cur = st.process(&expected.bundle_id).and_then(|p| p.ui.values.get(&el.key).cloned()).unwrap_or_default();
            let next = match text {
                Some(t) => cur + t,
                None => String::new(),
            };
            native::set_value(&mut st, &expected.bundle_id, &el.key, next);
        }
        drop(st);
        let mut fact = json!({ "by": "wda", "bundleId": expected.bundle_id, "element": key });
        match text {
            Some(t) => {
                fact["textLength"] = json!(t.chars().count());
                if !secure {
                    fact["text"] = json!(t);
                }
                dev.record("native-type", fact);
            }
            None => {
                dev.record("native-clear", fact);
            }
        }
        Ok(())
    }
}
