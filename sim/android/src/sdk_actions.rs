//! The SDK's native action routes (`/v1/action/tap`, `tap-target`,
//! `input-text`, `input-target`, `gesture-target`, `cancel`) and
//! `/v1/app/clear-data`, with the managed-execution envelope of §1.6 the way
//! the real SDK runs it: ONE action slot per process (a second action while
//! one runs → `native_action_busy`), actions that take time (faults
//! `sdkActionQueueMs` before the UI task starts, `sdkActionDelayMs` while it
//! runs, plus a gesture's `durationMs`), `timeoutMs` honoured (queued → ends
//! `dispatched:false`; running → after the 1500 ms grace the pending reply is
//! ambiguous and the slot stays busy until the real completion), cancel,
//! exactly one retained terminal receipt, `native.action.settled` events.
//! A process that dies mid-action never completes it (its connections close).
//! The effects land in the device truth; control `actions` lists them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};

use crate::device::{Device, now_ms};

const SCHEMA: &str = "aab.native-execution/v1";
const H5_SCHEMA: &str = "aab.h5-execution/v1";
const GRACE: Duration = Duration::from_millis(1500);
const ACTION_ROUTES: [&str; 5] = ["tap", "tap-target", "input-text", "input-target", "gesture-target"];

/// Where an admitted action is: still running, settled with its receipt, or
/// lost with its process.
#[derive(Clone)]
enum Outcome {
    Pending,
    Settled(Value),
    Gone,
}

struct Active {
    action_id: String,
    kind: String,
    /// The action family holding the slot: "native" or "h5" (codes, schema, events).
    family: &'static str,
    /// `(started, stopReason)` under one lock so a stop and the start cannot cross.
    state: Mutex<(bool, Option<String>)>,
    stopped: Notify,
    outcome: watch::Sender<Outcome>,
}

#[derive(Default)]
struct Slot {
    active: Option<Arc<Active>>,
    /// The one retained terminal receipt.
    last: Option<Value>,
}

/// Per runtime epoch (one SDK per process).
static SLOTS: Mutex<Option<HashMap<String, Slot>>> = Mutex::new(None);

fn with_slot<T>(epoch: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
    let mut g = SLOTS.lock().unwrap();
    f(g.get_or_insert_with(HashMap::new).entry(epoch.to_string()).or_default())
}

fn reject(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Native execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

fn reject_field(code: &str, field: &str) -> Value {
    let mut v = reject(code);
    v["field"] = json!(field);
    v
}

fn target_failure(code: &str, dispatched: bool) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Native target validation failed: {code}"), "dispatched": dispatched, "ambiguous": false })
}

/// `debugBridge.nativeAction` of `GET /v1/status`: the active operation or null.
pub fn active_identity(epoch: &str) -> Value {
    active_identity_of(epoch, "native")
}

/// The active operation of one family (`nativeAction` / `h5Action`) or null.
pub fn active_identity_of(epoch: &str, family: &str) -> Value {
    with_slot(epoch, |s| match &s.active {
        Some(a) if a.family == family => json!({ "schemaVersion": schema_of(family), "actionId": a.action_id, "runtimeEpoch": epoch, "kind": a.kind, "settled": false, "stopReason": a.state.lock().unwrap().1 }),
        _ => Value::Null,
    })
}

fn schema_of(family: &str) -> &'static str {
    if family == "h5" { H5_SCHEMA } else { SCHEMA }
}

/// The process of `epoch` died: its running action never completes.
pub fn process_gone(epoch: &str) {
    let slot = SLOTS.lock().unwrap().as_mut().and_then(|m| m.remove(epoch));
    if let Some(a) = slot.and_then(|s| s.active) {
        a.outcome.send_replace(Outcome::Gone);
        a.stopped.notify_one();
    }
}

fn stop(a: &Active, reason: &str) {
    let mut st = a.state.lock().unwrap();
    if st.1.is_none() {
        st.1 = Some(reason.to_string());
    }
    drop(st);
    a.stopped.notify_one();
}

/// Waits up to `limit` for the outcome (None: still pending).
async fn wait(a: &Active, limit: Duration) -> Outcome {
    let mut rx = a.outcome.subscribe();
    match tokio::time::timeout(limit, rx.wait_for(|o| !matches!(o, Outcome::Pending))).await {
        Ok(Ok(o)) => o.clone(),
        _ => Outcome::Pending,
    }
}

/// Whether this request path is an action route, cancel included (its reply can be
/// dropped by `sdkDropActionReplies`).
pub fn is_action(path: &str) -> bool {
    path.starts_with("/v1/action/")
}

/// One request on an action route; `None` = the process died, close without a reply.
pub async fn handle(dev: &Arc<Device>, package: &str, epoch: &str, path: &str, body: &[u8]) -> Option<(u16, Value)> {
    if path == "/v1/app/clear-data" {
        return Some((200, clear_data(dev, package, epoch)));
    }
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some((200, json!({ "ok": false, "error": "invalid_json" }))) };
    let kind = path.trim_start_matches("/v1/action/");
    if kind == "cancel" {
        return cancel(&req, epoch, "native").await;
    }
    if !ACTION_ROUTES.contains(&kind) {
        return Some((404, json!({ "ok": false, "error": "not_found" })));
    }
    // Admission: the execution envelope.
    let action_id = req.get("actionId").and_then(Value::as_str).unwrap_or("").to_string();
    let exec = req.get("execution").and_then(Value::as_object);
    let valid = exec.is_some_and(|e| {
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        keys.len() == 4
            && e.get("schemaVersion").and_then(Value::as_str) == Some(SCHEMA)
            && e.get("actionId").and_then(Value::as_str) == Some(action_id.as_str())
            && e.get("runtimeEpoch").is_some_and(Value::is_string)
            && e.get("timeoutMs").and_then(Value::as_u64).is_some_and(|t| (1..=2147483647).contains(&t))
    }) && !action_id.is_empty();
    if !valid {
        return Some((200, reject("invalid_native_execution")));
    }
    let exec = exec.unwrap();
    let timeout_ms = exec["timeoutMs"].as_u64().unwrap();
    if exec["runtimeEpoch"] != epoch || req.get("targetRef").and_then(|t| t.get("runtimeEpoch")).is_some_and(|e| e != epoch) {
        return Some((200, reject("native_runtime_changed")));
    }
    if kind == "gesture-target"
        && let Err(r) = gesture_constructor(&req, timeout_ms)
    {
        return Some((200, r));
    }
    // Mutual exclusion across action families: a running Flutter action excludes native ones.
    if crate::flutter_exec::active_identity(epoch) != Value::Null {
        return Some((200, reject("flutter_action_busy")));
    }
    let active = with_slot(epoch, |s| {
        if let Some(a) = &s.active {
            return Err(reject(&format!("{}_action_busy", a.family)));
        }
        if s.last.as_ref().is_some_and(|l| l["actionId"] == action_id.as_str()) {
            return Err(reject("native_action_id_reused"));
        }
        let a = Arc::new(Active { action_id: action_id.clone(), kind: kind.to_string(), family: "native", state: Mutex::new((false, None)), stopped: Notify::new(), outcome: watch::Sender::new(Outcome::Pending) });
        s.active = Some(a.clone());
        Ok(a)
    });
    let active = match active {
        Ok(a) => a,
        Err(r) => return Some((200, r)),
    };
    {
        let a = active.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
            stop(&a, "native_action_timeout");
        });
    }
    tokio::spawn(run(dev.clone(), package.to_string(), epoch.to_string(), kind.to_string(), req, active.clone()));
    match wait(&active, Duration::from_millis(timeout_ms) + GRACE).await {
        Outcome::Settled(v) => Some((200, v)),
        Outcome::Gone => None,
        Outcome::Pending => {
            let reason = active.state.lock().unwrap().1.clone().unwrap_or_else(|| "native_action_timeout".into());
            Some((200, json!({ "schemaVersion": SCHEMA, "actionId": action_id, "runtimeEpoch": epoch, "ok": false, "error": reason, "dispatched": null, "ambiguous": true, "settled": false })))
        }
    }
}

/// The task: queued, then running on the "UI thread" (not interruptible), then settled.
async fn run(dev: Arc<Device>, package: String, epoch: String, kind: String, req: Map<String, Value>, a: Arc<Active>) {
    let (queue, delay) = {
        let f = dev.faults.lock().unwrap();
        (f.sdk_action_queue_ms, f.sdk_action_delay_ms)
    };
    if queue > 0 {
        let _ = tokio::time::timeout(Duration::from_millis(queue), a.stopped.notified()).await;
    }
    {
        let mut st = a.state.lock().unwrap();
        if let Some(reason) = st.1.clone() {
            drop(st);
            // Stopped before the UI task started: nothing reached the app.
            let r = json!({ "ok": false, "error": reason, "message": format!("Native action stopped before it started: {reason}"), "dispatched": false, "ambiguous": false });
            settle(&dev, &package, &epoch, &a, r, (0, 0));
            return;
        }
        st.0 = true;
    }
    let gesture_ms = if kind == "gesture-target" { req.get("durationMs").and_then(Value::as_u64).unwrap_or(0) } else { 0 };
    if delay + gesture_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay + gesture_ms)).await;
    }
    if crate::faults::Faults::take(&mut dev.faults.lock().unwrap().sdk_crash_mid_action) {
        // The process dies while the UI task runs (before its effect).
        let _ = crate::lifecycle::crash(&dev, &package, false);
    }
    // A process that died while the task ran never completes it.
    let alive = with_slot(&epoch, |s| s.active.as_ref().is_some_and(|x| Arc::ptr_eq(x, &a)));
    if !alive || !matches!(*a.outcome.borrow(), Outcome::Pending) {
        return;
    }
    let before = dev.truth_len();
    let mut result = match kind.as_str() {
        "tap" => tap_xy(&dev, &package, &req),
        "tap-target" => with_target(&dev, &package, &epoch, &req, false),
        "input-text" => input_text(&dev, &package, &req),
        "input-target" => with_target(&dev, &package, &epoch, &req, true),
        _ => gesture(&dev, &package, &epoch, &req),
    };
    let after = dev.truth_len();
    if let Some(reason) = a.state.lock().unwrap().1.clone() {
        // A stop forces `ok:false, error:<stopReason>` on the eventual result.
        result["ok"] = json!(false);
        result["error"] = json!(reason);
    }
    settle(&dev, &package, &epoch, &a, result, (before, after));
}

fn settle(dev: &Arc<Device>, package: &str, epoch: &str, a: &Arc<Active>, mut result: Value, effects: (u64, u64)) {
    let action_id = a.action_id.clone();
    let obj = result.as_object_mut().unwrap();
    obj.insert("actionId".into(), json!(action_id));
    obj.insert("runtimeEpoch".into(), json!(epoch));
    obj.insert("settled".into(), json!(true));
    obj.insert("execution".into(), json!({ "schemaVersion": schema_of(a.family), "actionId": action_id, "runtimeEpoch": epoch, "settled": true }));
    obj.insert("updatedAtMs".into(), json!(now_ms()));
    let still = with_slot(epoch, |s| {
        if !s.active.as_ref().is_some_and(|x| Arc::ptr_eq(x, a)) {
            return false;
        }
        s.active = None;
        s.last = Some(result.clone());
        true
    });
    if !still {
        return;
    }
    let settled = json!({ "category": "interaction", "name": format!("{}.action.settled", a.family), "data": { "execution": result["execution"], "ok": result["ok"], "dispatched": result["dispatched"], "ambiguous": result["ambiguous"], "error": result.get("error") } });
    {
        let mut ph = dev.phone.lock().unwrap();
        if let Some(i) = ph.app_index(package) {
            ph.apps[i].capture_record("event", settled, Some(action_id.clone()));
        }
    }
    dev.record("sdk-action", json!({ "package": package, "kind": a.kind, "actionId": action_id, "ok": result["ok"], "dispatched": result["dispatched"], "effects": { "after": effects.0, "through": effects.1 } }));
    a.outcome.send_replace(Outcome::Settled(result));
}

/// `POST /v1/action/cancel` (family "native") or `/v1/h5/cancel` ("h5"): the
/// retained receipt of either family when it matches, else a stop of the
/// active action whatever its family (the slot is shared).
pub(crate) async fn cancel(req: &Map<String, Value>, epoch: &str, family: &str) -> Option<(u16, Value)> {
    let ok_shape = req.len() == 2 && req.get("actionId").is_some_and(Value::is_string) && req.get("runtimeEpoch").is_some_and(Value::is_string);
    if !ok_shape {
        return Some((200, reject(&format!("invalid_{family}_execution_identity"))));
    }
    let (id, ep) = (req["actionId"].as_str().unwrap(), req["runtimeEpoch"].as_str().unwrap());
    let noun = if family == "h5" { "H5" } else { "Native" };
    let not_active = json!({ "ok": false, "error": format!("{family}_action_not_active"), "message": format!("{noun} action is not active"), "actionId": id, "runtimeEpoch": ep, "dispatched": false, "ambiguous": false });
    if ep != epoch {
        return Some((200, not_active));
    }
    let (last, active) = with_slot(epoch, |s| (s.last.clone(), s.active.clone()));
    if let Some(l) = last.filter(|l| l["actionId"] == id) {
        return Some((200, json!({ "ok": true, "actionId": id, "runtimeEpoch": ep, "executionResult": l })));
    }
    let Some(a) = active.filter(|a| a.action_id == id) else { return Some((200, not_active)) };
    stop(&a, &format!("{}_action_cancelled", a.family));
    match wait(&a, GRACE).await {
        Outcome::Settled(v) => Some((200, json!({ "ok": true, "actionId": id, "runtimeEpoch": ep, "executionResult": v }))),
        Outcome::Gone => None,
        Outcome::Pending => Some((200, json!({ "ok": false, "error": format!("{}_action_cancel_pending", a.family), "message": "The action is still running", "actionId": id, "runtimeEpoch": ep, "dispatched": null, "ambiguous": true, "settled": false }))),
    }
}

/// `POST /v1/app/clear-data`: refused while an action holds the slot.
fn clear_data(dev: &Arc<Device>, package: &str, epoch: &str) -> Value {
    if let Some(family) = with_slot(epoch, |s| s.active.as_ref().map(|a| a.family)) {
        return reject(&format!("{family}_action_busy"));
    }
    if crate::flutter_exec::active_identity(epoch) != Value::Null {
        return reject("flutter_action_busy");
    }
    let version = {
        let mut ph = dev.phone.lock().unwrap();
        let Some(i) = ph.app_index(package) else { return reject("no_current_activity") };
        ph.apps[i].reset_runtime();
        ph.apps[i].spec.sdk_version.clone().unwrap_or_else(|| "0.4.5".into())
    };
    let _ = crate::rootfs::write_atomic(&crate::sdk::descriptor_path(dev, package), serde_json::to_vec_pretty(&crate::sdk::descriptor(package, epoch, &version)).unwrap().as_slice());
    let _ = std::fs::remove_dir_all(dev.root.join("data/user/0").join(package).join("shared_prefs"));
    dev.record("clear-data", json!({ "package": package, "via": "sdk", "method": "runtime" }));
    json!({ "ok": true, "action": "clear-app-data", "app": { "packageName": package }, "cleared": ["sharedPreferences", "databases", "files", "cache", "capture"], "failures": [], "updatedAtMs": now_ms() })
}

/// Ground truth for control `actions`: every effect on the phone in order,
/// with the SDK action id when an SDK action caused it.
pub fn actions(dev: &Device) -> Value {
    let truth = dev.truth_since(0);
    let mut owner: Vec<(u64, u64, Value)> = vec![];
    for r in &truth {
        if r["kind"] == "sdk-action" || r["kind"] == "executor-action" {
            let e = &r["data"]["effects"];
            owner.push((e["after"].as_u64().unwrap_or(0), e["through"].as_u64().unwrap_or(0), r["data"]["actionId"].clone()));
        }
    }
    let list: Vec<Value> = truth
        .iter()
        .filter(|r| ["tap", "text", "swipe", "keyevent", "gesture", "clear-data", "h5"].contains(&r["kind"].as_str().unwrap_or("")))
        .map(|r| {
            let seq = r["seq"].as_u64().unwrap_or(0);
            let id = owner.iter().find(|(a, t, _)| seq > *a && seq <= *t).map(|o| o.2.clone()).unwrap_or(Value::Null);
            json!({ "seq": seq, "atMs": r["atMs"], "kind": r["kind"], "actionId": id, "data": r["data"] })
        })
        .collect();
    json!({ "ok": true, "count": list.len(), "actions": list })
}

/// The gesture task constructor's checks (rejections before admission).
fn gesture_constructor(req: &Map<String, Value>, timeout_ms: u64) -> Result<(), Value> {
    const KEYS: [&str; 9] = ["action", "selector", "targetRef", "actionId", "execution", "durationMs", "deltaX", "deltaY", "direction"];
    if let Some(k) = req.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(reject_field("unsupported_argument", k));
    }
    let action = req.get("action").and_then(Value::as_str).unwrap_or("");
    if !["longPress", "swipe", "scroll"].contains(&action) {
        return Err(reject_field("unsupported_gesture", "action"));
    }
    let min = if action == "longPress" { 500 } else { 1 };
    let Some(d) = req.get("durationMs").and_then(Value::as_u64).filter(|d| (min..=10000).contains(d)) else { return Err(reject_field("invalid_argument", "durationMs")) };
    if timeout_ms < d {
        return Err(reject_field("insufficient_gesture_budget", "durationMs"));
    }
    match action {
        "swipe" => {
            let (Some(dx), Some(dy)) = (req.get("deltaX").and_then(Value::as_f64), req.get("deltaY").and_then(Value::as_f64)) else { return Err(reject_field("missing_argument", "deltaX")) };
            if dx == 0.0 && dy == 0.0 {
                return Err(reject_field("swipe_delta_zero", "deltaX"));
            }
        }
        "scroll" if !matches!(req.get("direction").and_then(Value::as_str), Some("up" | "down")) => return Err(reject_field("invalid_argument", "direction")),
        _ => {}
    }
    Ok(())
}

fn is_foreground(dev: &Device, package: &str) -> bool {
    dev.phone.lock().unwrap().foreground_app().is_some_and(|a| a.package == package)
}

fn summary(n: &Value) -> Value {
    json!({ "className": n["className"], "simpleClassName": n["simpleClassName"], "resourceName": n["resourceName"], "bounds": n["bounds"], "enabled": n["enabled"], "clickable": n["clickable"], "longClickable": n["longClickable"], "focusable": n["focusable"] })
}

fn tap_receipt(dev: &Arc<Device>, x: i32, y: i32, validation: &str, target_ref: Value, target: Value) -> Value {
    let (w, h) = {
        let ph = dev.phone.lock().unwrap();
        (ph.width as i32, ph.height as i32)
    };
    crate::tools::android_tap(dev, x, y);
    json!({
        "ok": true, "dispatched": true, "ambiguous": false, "targetValidation": validation, "targetRef": target_ref,
        "x": x, "y": y, "localX": x, "localY": y, "windowType": "activity", "windowFocused": true, "warnings": [],
        "rootClassName": "com.android.internal.policy.DecorView", "rootBounds": { "left": 0, "top": 0, "right": w, "bottom": h, "width": w, "height": h },
        "target": target, "handledDown": true, "handledUp": true,
    })
}

fn tap_xy(dev: &Arc<Device>, package: &str, req: &Map<String, Value>) -> Value {
    let (Some(x), Some(y)) = (req.get("x").and_then(Value::as_f64), req.get("y").and_then(Value::as_f64)) else { return target_failure("missing_argument", false) };
    if !is_foreground(dev, package) {
        return target_failure("no_current_activity", false);
    }
    let (x, y) = (x.round() as i32, y.round() as i32);
    let (w, h) = {
        let ph = dev.phone.lock().unwrap();
        (ph.width as i32, ph.height as i32)
    };
    if x < 0 || y < 0 || x >= w || y >= h {
        return target_failure("native_point_outside_foreground_window", false);
    }
    tap_receipt(dev, x, y, "coordinates", Value::Null, Value::Null)
}

fn flatten<'a>(n: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(n);
    if let Some(kids) = n.get("children").and_then(Value::as_array) {
        for k in kids {
            flatten(k, out);
        }
    }
}

/// Resolves a `*-target` selector (and its optional `targetRef`) to one view node (§1.7).
fn resolve(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>) -> Result<Value, Value> {
    let Some(sel) = req.get("selector").and_then(Value::as_object) else { return Err(target_failure("missing_argument", false)) };
    let keys: Vec<&String> = sel.keys().filter(|k| ["text", "resourceName", "contentDescription"].contains(&k.as_str())).collect();
    if keys.len() != 1 {
        return Err(target_failure("invalid_argument", false));
    }
    let (key, want) = (keys[0].as_str(), &sel[keys[0].as_str()]);
    let tree = {
        let ph = dev.phone.lock().unwrap();
        let Some(idx) = ph.app_index(package) else { return Err(target_failure("no_current_activity", false)) };
        crate::sdk::view_tree(&ph, idx, ph.foreground == Some(idx), epoch)
    };
    if tree["ok"] != true {
        return Err(target_failure("no_current_activity", false));
    }
    let mut all = vec![];
    flatten(&tree["root"], &mut all);
    let hits: Vec<&&Value> = all.iter().filter(|n| n["visible"] == true && n["enabled"] == true && &n[key] == want).collect();
    let node = match hits.len() {
        0 => return Err(target_failure("native_selector_not_found", false)),
        1 => *hits[0],
        _ => return Err(target_failure("native_selector_ambiguous", false)),
    };
    if let Some(tr) = req.get("targetRef") {
        let mine = &node["targetRef"];
        for (field, code) in [("windowId", "native_window_changed"), ("viewId", "native_target_replaced"), ("guard", "native_target_changed")] {
            if tr.get(field) != mine.get(field) {
                return Err(target_failure(code, false));
            }
        }
    }
    Ok(node.clone())
}

fn center(node: &Value) -> (i64, i64) {
    let b = &node["bounds"];
    ((b["left"].as_i64().unwrap() + b["right"].as_i64().unwrap()) / 2, (b["top"].as_i64().unwrap() + b["bottom"].as_i64().unwrap()) / 2)
}

/// `gesture-target` on the UI thread: longPress, swipe (relative to the node
/// centre, endpoint inside the window) or scroll (76% → 22% of the node height).
fn gesture(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>) -> Value {
    let node = match resolve(dev, package, epoch, req) {
        Ok(n) => n,
        Err(f) => return f,
    };
    let action = req["action"].as_str().unwrap_or("");
    let duration = req["durationMs"].as_u64().unwrap_or(0);
    let (cx, cy) = center(&node);
    let (w, h) = {
        let ph = dev.phone.lock().unwrap();
        (ph.width as i64, ph.height as i64)
    };
    let (sx, sy, ex, ey) = match action {
        "swipe" => {
            let (dx, dy) = (req["deltaX"].as_f64().unwrap_or(0.0).round() as i64, req["deltaY"].as_f64().unwrap_or(0.0).round() as i64);
            (cx, cy, cx + dx, cy + dy)
        }
        "scroll" => {
            let b = &node["bounds"];
            let (top, height) = (b["top"].as_i64().unwrap_or(0), b["height"].as_i64().unwrap_or(0));
            let (lo, hi) = (top + height * 22 / 100, top + height * 76 / 100);
            if req["direction"] == "down" { (cx, hi, cx, lo) } else { (cx, lo, cx, hi) }
        }
        _ => (cx, cy, cx, cy),
    };
    if ex < 0 || ey < 0 || ex >= w || ey >= h {
        return target_failure("swipe_endpoint_out_of_bounds", false);
    }
    let moves = if action == "longPress" { 0 } else { duration.div_ceil(16) };
    dev.record("gesture", json!({ "action": action, "startX": sx, "startY": sy, "endX": ex, "endY": ey, "durationMs": duration, "target": node["resourceName"] }));
    json!({
        "ok": true, "action": action, "type": "native-gesture", "completion": "completed", "dispatched": true, "ambiguous": false,
        "targetValidation": "aab.native-target/v1", "targetRef": node["targetRef"], "windowType": "activity",
        "durationMs": duration, "elapsedMs": duration, "eventsSent": moves + 2, "handledDown": true, "handledUp": true,
        "startX": sx, "startY": sy, "endX": ex, "endY": ey,
    })
}

fn with_target(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>, input: bool) -> Value {
    let node = match resolve(dev, package, epoch, req) {
        Ok(n) => n,
        Err(f) => return f,
    };
    let node = &node;
    let (cx, cy) = center(node);
    if !input {
        return tap_receipt(dev, cx as i32, cy as i32, "aab.native-target/v1", node["targetRef"].clone(), summary(node));
    }
    if node["editable"] != true {
        return target_failure("native_target_not_editable", false);
    }
    let text = req.get("text").and_then(Value::as_str).unwrap_or("");
    let id = node["resourceName"].as_str().and_then(|r| r.rsplit('/').next()).map(str::to_string);
    replace_text(dev, package, id, text, "aab.native-target/v1", node["targetRef"].clone(), summary(node))
}

fn input_text(dev: &Arc<Device>, package: &str, req: &Map<String, Value>) -> Value {
    let text = req.get("text").and_then(Value::as_str).unwrap_or("").to_string();
    if !is_foreground(dev, package) {
        return target_failure("no_current_activity", false);
    }
    match (req.get("x").and_then(Value::as_f64), req.get("y").and_then(Value::as_f64)) {
        (Some(x), Some(y)) => crate::tools::android_tap(dev, x.round() as i32, y.round() as i32),
        (None, None) => {}
        _ => return target_failure("invalid_argument", false),
    }
    let focused = {
        let ph = dev.phone.lock().unwrap();
        ph.foreground_app().and_then(|a| a.focused.clone())
    };
    match focused {
        Some(id) => replace_text(dev, package, Some(id), &text, "coordinates-or-focus", Value::Null, Value::Null),
        None => target_failure("input_target_not_found", false),
    }
}

fn replace_text(dev: &Arc<Device>, package: &str, id: Option<String>, text: &str, validation: &str, target_ref: Value, target: Value) -> Value {
    let Some(id) = id else { return target_failure("input_target_not_operable", false) };
    {
        let mut ph = dev.phone.lock().unwrap();
        let Some(i) = ph.app_index(package) else { return target_failure("no_current_activity", false) };
        ph.apps[i].values.insert(id.clone(), text.to_string());
        ph.apps[i].focused = Some(id.clone());
        ph.keyboard = true;
    }
    dev.record("text", json!({ "text": text, "via": "sdk", "target": { "package": package, "id": id, "value": text } }));
    json!({
        "ok": true, "dispatched": true, "ambiguous": false, "targetValidation": validation, "targetRef": target_ref,
        "transport": "bridge", "source": "native-view", "text": text, "textLength": text.chars().count(),
        "requestedFocus": true, "focused": true, "windowType": "activity", "target": target,
    })
}

/// Another action family (H5) in the same one slot: `admit` takes the slot (or
/// names the busy family / a reused id); the caller runs its task, calls
/// `start` right before the effect (a stop that came first wins), and `settle`s
/// exactly once; `reply` is what the request connection answers.
pub(crate) struct Lease {
    a: Arc<Active>,
    epoch: String,
}

pub(crate) fn admit(epoch: &str, family: &'static str, kind: &str, action_id: &str, timeout_ms: u64) -> Result<Lease, String> {
    let a = with_slot(epoch, |s| {
        if let Some(a) = &s.active {
            return Err(format!("{}_action_busy", a.family));
        }
        if s.last.as_ref().is_some_and(|l| l["actionId"] == action_id) {
            return Err(format!("{family}_action_id_reused"));
        }
        let a = Arc::new(Active { action_id: action_id.to_string(), kind: kind.to_string(), family, state: Mutex::new((false, None)), stopped: Notify::new(), outcome: watch::Sender::new(Outcome::Pending) });
        s.active = Some(a.clone());
        Ok(a)
    })?;
    let timer = a.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
        stop(&timer, &format!("{family}_action_timeout"));
    });
    Ok(Lease { a, epoch: epoch.to_string() })
}

impl Lease {
    /// The effect is about to run: from now on a stop no longer prevents it.
    /// `Err(stopReason)` when a timeout or cancel came first.
    pub(crate) fn start(&self) -> Result<(), String> {
        let mut st = self.a.state.lock().unwrap();
        if let Some(reason) = st.1.clone() {
            return Err(reason);
        }
        st.0 = true;
        Ok(())
    }

    /// Waits up to `limit` while holding the slot; a stop ends the wait early.
    pub(crate) async fn pause(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.a.stopped.notified()).await;
    }

    /// Whether this action still holds the slot (false once its process died).
    pub(crate) fn alive(&self) -> bool {
        with_slot(&self.epoch, |s| s.active.as_ref().is_some_and(|x| Arc::ptr_eq(x, &self.a)))
    }

    /// Settles the action (a stop forces `ok:false, error:<stopReason>`), retains
    /// the receipt and records it; `effects` = the device-truth range it caused.
    pub(crate) fn settle(&self, dev: &Arc<Device>, package: &str, mut result: Value, effects: (u64, u64)) {
        if let Some(reason) = self.a.state.lock().unwrap().1.clone() {
            result["ok"] = json!(false);
            result["error"] = json!(reason);
        }
        settle(dev, package, &self.epoch, &self.a, result, effects);
    }

    /// What the request answers: the receipt, or after timeout + grace the
    /// pending ambiguous reply; None when the process died.
    pub(crate) async fn reply(&self, timeout_ms: u64) -> Option<Value> {
        match wait(&self.a, Duration::from_millis(timeout_ms) + GRACE).await {
            Outcome::Settled(v) => Some(v),
            Outcome::Gone => None,
            Outcome::Pending => {
                let reason = self.a.state.lock().unwrap().1.clone().unwrap_or_else(|| format!("{}_action_timeout", self.a.family));
                Some(json!({ "schemaVersion": schema_of(self.a.family), "actionId": self.a.action_id, "runtimeEpoch": self.epoch, "ok": false, "error": reason, "dispatched": null, "ambiguous": true, "settled": false }))
            }
        }
    }
}
