//! `POST /v1/flutter/action` (protocols §4.5, §7): the managed envelope
//! against the Dart engine's epoch (`status.flutter.layout.operable.runtimeEpoch`),
//! the shared admission slot, permission, then the engine runs the payload.
//! The body is the flat Android shape (`{action, …payload, actionId, execution}`)
//! or `{payload:{action, …}, actionId, execution}`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::device::Device;
use crate::execution::{self, reject};
use crate::sdk::Binding;

/// The Flutter view's logical size (points) for an orientation: below the navigation bar, above the home indicator.
pub fn view_size(dev: &Device, orientation: &str) -> (f64, f64) {
    let (w, h) = dev.screen_points(orientation);
    let (top, bottom) = if orientation.starts_with("landscape") { (0.0, 21.0) } else { (47.0, 34.0) };
    (w, h - top - 44.0 - bottom)
}

/// The payload map of a request (flat or nested), or a rejection.
fn payload_of(req: &Map<String, Value>) -> Result<Map<String, Value>, Value> {
    if let Some(p) = req.get("payload") {
        if req.len() != 3 || !req.contains_key("actionId") || !req.contains_key("execution") {
            return Err(reject("invalid_flutter_execution"));
        }
        return p.as_object().cloned().ok_or_else(|| reject("invalid_flutter_payload"));
    }
    Ok(req.iter().filter(|(k, _)| k.as_str() != "actionId" && k.as_str() != "execution").map(|(k, v)| (k.clone(), v.clone())).collect())
}

pub async fn action(dev: &Arc<Device>, b: &Binding, body: &[u8]) -> Option<(u16, Value)> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some(crate::sdk::bad_request("the body is not a JSON object")) };
    let (action_id, epoch, timeout_ms) = match execution::check_envelope("flutter", &req) {
        Ok(e) => e,
        Err(r) => return Some((200, r)),
    };
    let payload = match payload_of(&req) {
        Ok(p) => p,
        Err(r) => return Some((200, r)),
    };
    let (dart_epoch, slot) = {
        let st = dev.st.lock().unwrap();
        let p = st.process(&b.bundle)?;
        (p.flutter.as_ref().map(|e| e.epoch.clone()), p.exec.clone())
    };
    let Some(dart_epoch) = dart_epoch else { return Some((200, reject("flutter_action_handler_absent"))) };
    if epoch != dart_epoch || payload.get("targetRef").and_then(|t| t.get("runtimeEpoch")).is_some_and(|e| e != dart_epoch.as_str()) {
        return Some((200, reject("flutter_runtime_changed")));
    }
    let name = payload.get("action").and_then(Value::as_str).unwrap_or("");
    let Some((_, keys)) = crate::flutter::PAYLOADS.iter().find(|(n, _)| *n == name) else {
        let mut r = reject("unknown_action");
        r["field"] = json!("action");
        return Some((200, r));
    };
    if let Some(k) = payload.keys().find(|k| k.as_str() != "action" && !keys.contains(&k.as_str())) {
        let mut r = reject("unsupported_argument");
        r["field"] = json!(k);
        return Some((200, r));
    }
    let store = execution::store_path(&dev.container(&b.bundle));
    let active = match slot.admit("flutter", &action_id, &dart_epoch, &store, timeout_ms) {
        Ok(a) => a,
        Err(r) => return Some((200, r)),
    };
    let task = {
        let (dev, b, active) = (dev.clone(), b.clone(), active.clone());
        async move { run(&dev, &b, &active, &payload, &dart_epoch, &action_id).await }
    };
    execution::run_admitted(dev, &b.bundle, &slot, &active, timeout_ms, task).await
}

async fn run(dev: &Arc<Device>, b: &Binding, active: &execution::Active, payload: &Map<String, Value>, dart_epoch: &str, action_id: &str) -> Value {
    let queue = dev.faults.lock().unwrap().action_queue_ms;
    if queue > 0 {
        active.queue(Duration::from_millis(queue)).await;
    }
    if let Err(reason) = active.permit() {
        return json!({ "ok": false, "error": reason, "message": format!("Flutter action stopped before permission: {reason}"), "dispatched": false, "ambiguous": false });
    }
    let delay = dev.faults.lock().unwrap().action_delay_ms;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut st = dev.st.lock().unwrap();
    let orientation = st.orientation.clone();
    let fg = st.is_foreground(&b.bundle);
    let Some(app) = st.apps.get_mut(&b.bundle) else { return crate::flutter::fail("flutter_action_handler_absent", false) };
    let spec = app.spec.clone();
    let Some(p) = app.process.as_mut().filter(|p| p.epoch == b.epoch) else { return crate::flutter::fail("flutter_action_handler_absent", false) };
    let attached = fg && spec.screen(&p.ui.screen).is_some_and(|s| s.flutter.is_some());
    let Some(fspec) = spec.screens.iter().find_map(|s| s.flutter.clone()) else { return crate::flutter::fail("flutter_action_handler_absent", false) };
    let Some(engine) = p.flutter.as_mut().filter(|e| e.epoch == dart_epoch) else { return crate::flutter::fail("flutter_runtime_changed", false) };
    if !attached {
        return crate::flutter::fail("flutter_target_not_operable", false);
    }
    let (receipt, effect) = engine.run(&fspec, view_size(dev, &orientation), payload);
    drop(st);
    if let Some(mut e) = effect {
        e["bundleId"] = json!(b.bundle);
        e["actionId"] = json!(action_id);
        e["runtimeEpoch"] = json!(dart_epoch);
        dev.record("flutter", e);
    }
    receipt
}
