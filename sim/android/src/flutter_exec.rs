//! The Flutter action routes of the SDK (`POST /v1/flutter/action`,
//! `POST /v1/flutter/cancel`, aab-protocols §7) the way the Android
//! `FlutterActionExecutor` and the Dart side run them: admission of the
//! `aab.flutter-execution/v1` envelope against the engine's runtime epoch, ONE
//! Flutter action slot per process (busy, id reuse, the native slot excludes
//! it), the Dart task asking `checkFlutterAction` for permission before its
//! first mutation (a stop before that settles at once with `dispatched:false`;
//! after it the task runs to completion and the stop only forces
//! `ok:false, error:<stopReason>`), timeout with the 1500 ms grace and the
//! ambiguous pending reply, cancel, one retained terminal receipt, and the
//! payloads tapAt, tapText, tapTarget, inputText, swipe, scrollBy,
//! scrollUntilText, hideKeyboard, back with their target checks, and the
//! Flutter H5 payloads of `flutter_h5` (reads answered beside the slot). Effects land
//! in the engine (typed text, scroll offsets, routes) and the truth journal
//! (`flutter-tap`, `flutter-text`, `flutter-scroll`, `flutter-route`,
//! `flutter-key`). Faults: `flutterActionQueueMs` (the Dart side is busy before
//! it asks permission), `flutterActionDelayMs` (slow after permission),
//! `flutterDropReplies` (replies of the action/cancel routes lost after effect).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, watch};

use crate::device::{Device, now_ms};
use crate::flutter::{EXECUTION_SCHEMA, Engine, FlutterSpec, FlutterTapSpec, RNode, TARGET_SCHEMA, View, resolve, with_engine};

const GRACE: Duration = Duration::from_millis(1500);

/// Payload keys per action (besides `action`, `actionId`, `execution`).
const PAYLOADS: [(&str, &[&str]); 9] = [
    ("tapAt", &["x", "y"]),
    ("tapText", &["text"]),
    ("tapTarget", &["selector", "targetRef"]),
    ("inputText", &["text", "selector", "targetRef", "x", "y"]),
    ("swipe", &["startX", "startY", "endX", "endY"]),
    ("scrollBy", &["delta", "selector", "targetRef"]),
    ("scrollUntilText", &["text", "maxSwipes", "selector", "targetRef"]),
    ("hideKeyboard", &[]),
    ("back", &[]),
];

#[derive(Clone)]
enum Outcome {
    Pending,
    Settled(Value),
}

struct St {
    /// `checkFlutterAction` granted the mutation.
    permitted: bool,
    stop: Option<String>,
}

struct Active {
    action_id: String,
    action: String,
    epoch: String,
    dev: Arc<Device>,
    package: String,
    process: String,
    state: Mutex<St>,
    stopped: Notify,
    outcome: watch::Sender<Outcome>,
}

#[derive(Default)]
struct Slot {
    active: Option<Arc<Active>>,
    last: Option<Value>,
}

/// Per process runtime epoch (the Android side of the SDK).
static SLOTS: Mutex<Option<HashMap<String, Slot>>> = Mutex::new(None);

fn with_slot<T>(process: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
    let mut g = SLOTS.lock().unwrap();
    f(g.get_or_insert_with(HashMap::new).entry(process.to_string()).or_default())
}

fn reject(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Flutter execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

fn reject_field(code: &str, field: &str) -> Value {
    let mut v = reject(code);
    v["field"] = json!(field);
    v
}

fn fail(code: &str, dispatched: bool) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Flutter target validation failed: {code}"), "dispatched": dispatched, "ambiguous": false })
}

/// `debugBridge.flutterAction` of `/v1/status`: the active operation or null.
pub fn active_identity(process: &str) -> Value {
    with_slot(process, |s| match &s.active {
        Some(a) => {
            let st = a.state.lock().unwrap();
            json!({ "schemaVersion": EXECUTION_SCHEMA, "actionId": a.action_id, "runtimeEpoch": a.epoch, "kind": a.action, "settled": false, "stopReason": st.stop, "permissionIssued": st.permitted })
        }
        None => Value::Null,
    })
}

/// The engine restarted: the running action's Dart side is gone. Settling an
/// action takes the phone lock: callers must not hold it (see [`engine_restarted_later`]).
pub fn engine_restarted(process: &str) {
    if let Some(a) = with_slot(process, |s| s.active.clone()) {
        stop(&a, "flutter_runtime_changed");
    }
}

/// [`engine_restarted`] for callers that hold the phone lock (a snapshot read
/// that restarts the engine): the stop runs on its own task, after the lock is
/// released, instead of deadlocking on it.
pub fn engine_restarted_later(process: &str) {
    if let Some(a) = with_slot(process, |s| s.active.clone()) {
        tokio::spawn(async move { stop(&a, "flutter_runtime_changed") });
    }
}

/// Stops the action; without a permission it settles at once, not dispatched.
fn stop(a: &Arc<Active>, reason: &str) {
    let mut st = a.state.lock().unwrap();
    if st.stop.is_none() {
        st.stop = Some(reason.to_string());
    }
    let settle_now = !st.permitted;
    drop(st);
    a.stopped.notify_one();
    if settle_now {
        let r = json!({ "ok": false, "error": reason, "message": format!("Flutter action stopped before permission: {reason}"), "dispatched": false, "ambiguous": false });
        settle(a, r);
    }
}

async fn wait(a: &Active, limit: Duration) -> Outcome {
    let mut rx = a.outcome.subscribe();
    match tokio::time::timeout(limit, rx.wait_for(|o| !matches!(o, Outcome::Pending))).await {
        Ok(Ok(o)) => o.clone(),
        _ => Outcome::Pending,
    }
}

fn dart_epoch(dev: &Device, package: &str) -> Option<String> {
    let ph = dev.phone.lock().unwrap();
    let idx = ph.app_index(package)?;
    with_engine(&ph, idx, |e, _, _| e.epoch.clone())
}

/// A reply that the `flutterDropReplies` fault may lose (None = close without a reply).
fn reply(dev: &Device, path: &str, v: Value) -> Option<(u16, Value)> {
    if crate::faults::Faults::take(&mut dev.faults.lock().unwrap().flutter_drop_replies) {
        dev.record("fault", json!({ "kind": "flutter-reply-lost", "path": path }));
        return None;
    }
    Some((200, v))
}

/// One request on `/v1/flutter/action` or `/v1/flutter/cancel`; `None` = close without a reply.
pub async fn handle(dev: &Arc<Device>, package: &str, process: &str, path: &str, body: &[u8]) -> Option<(u16, Value)> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some((200, json!({ "ok": false, "error": "invalid_json" }))) };
    if path == "/v1/flutter/cancel" {
        let r = cancel(&req, process).await;
        return reply(dev, path, r);
    }
    let action_id = req.get("actionId").and_then(Value::as_str).unwrap_or("").to_string();
    let exec = req.get("execution").and_then(Value::as_object);
    let valid = !action_id.is_empty()
        && exec.is_some_and(|e| {
            e.len() == 4
                && e.get("schemaVersion").and_then(Value::as_str) == Some(EXECUTION_SCHEMA)
                && e.get("actionId").and_then(Value::as_str) == Some(action_id.as_str())
                && e.get("runtimeEpoch").is_some_and(Value::is_string)
                && e.get("timeoutMs").and_then(Value::as_u64).is_some_and(|t| (1..=2147483647).contains(&t))
        });
    if !valid {
        return Some((200, reject("invalid_flutter_execution")));
    }
    let exec = exec.unwrap();
    let timeout_ms = exec["timeoutMs"].as_u64().unwrap();
    let Some(epoch) = dart_epoch(dev, package) else { return Some((200, reject("flutter_action_handler_absent"))) };
    if exec["runtimeEpoch"] != epoch.as_str() || req.get("targetRef").and_then(|t| t.get("runtimeEpoch")).is_some_and(|e| e != epoch.as_str()) {
        return Some((200, reject("flutter_runtime_changed")));
    }
    let action = req.get("action").and_then(Value::as_str).unwrap_or("").to_string();
    let Some((_, keys)) = PAYLOADS.iter().chain(crate::flutter_h5::PAYLOADS.iter()).find(|(n, _)| *n == action) else {
        return Some((200, reject_field("unknown_action", "action")));
    };
    if let Some(k) = req.keys().find(|k| !["action", "actionId", "execution"].contains(&k.as_str()) && !keys.contains(&k.as_str())) {
        return Some((200, reject_field("unsupported_argument", k)));
    }
    // Flutter H5 reads run beside any action: they take no slot, ask no permission
    // and have no effect whose reply the lost-reply fault could stand for.
    if crate::flutter_h5::is_read(&action) {
        return Some((200, crate::flutter_h5::read(dev, package, &epoch, &action_id, &req).await));
    }
    if crate::sdk_actions::active_identity(process) != Value::Null {
        return Some((200, reject("native_action_busy")));
    }
    let active = with_slot(process, |s| {
        if s.active.is_some() {
            return Err(reject("flutter_action_busy"));
        }
        if s.last.as_ref().is_some_and(|l| l["actionId"] == action_id.as_str()) {
            return Err(reject("flutter_action_id_reused"));
        }
        let a = Arc::new(Active {
            action_id: action_id.clone(),
            action: action.clone(),
            epoch: epoch.clone(),
            dev: dev.clone(),
            package: package.to_string(),
            process: process.to_string(),
            state: Mutex::new(St { permitted: false, stop: None }),
            stopped: Notify::new(),
            outcome: watch::Sender::new(Outcome::Pending),
        });
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
            stop(&a, "flutter_action_timeout");
        });
    }
    tokio::spawn(run(req, active.clone()));
    match wait(&active, Duration::from_millis(timeout_ms) + GRACE).await {
        Outcome::Settled(v) => reply(dev, path, v),
        Outcome::Pending => {
            let reason = active.state.lock().unwrap().stop.clone().unwrap_or_else(|| "flutter_action_timeout".into());
            Some((200, json!({ "schemaVersion": EXECUTION_SCHEMA, "actionId": action_id, "runtimeEpoch": epoch, "ok": false, "error": reason, "dispatched": null, "ambiguous": true, "settled": false })))
        }
    }
}

/// The Dart task: (busy) → validate the target → checkFlutterAction → (slow) → effect.
async fn run(req: Map<String, Value>, a: Arc<Active>) {
    let dev = a.dev.clone();
    let (queue, delay) = {
        let f = dev.faults.lock().unwrap();
        (f.flutter_action_queue_ms, f.flutter_action_delay_ms)
    };
    if queue > 0 {
        let _ = tokio::time::timeout(Duration::from_millis(queue), a.stopped.notified()).await;
    }
    if !matches!(*a.outcome.borrow(), Outcome::Pending) {
        return;
    }
    // Flutter H5 mutations: checked and prepared in the real page before the permission.
    let h5 = if a.action.starts_with("h5") {
        match crate::flutter_h5::prepare(&dev, &a.package, &a.epoch, &req).await {
            Ok(p) => Some(p),
            Err(f) => {
                settle(&a, f);
                return;
            }
        }
    } else {
        if let Err(f) = act(&dev, &a.package, &a.action_id, &a.epoch, &req, false) {
            settle(&a, f);
            return;
        }
        None
    };
    // checkFlutterAction: the permission for the first mutation.
    {
        let mut st = a.state.lock().unwrap();
        if st.stop.is_some() {
            return;
        }
        st.permitted = true;
    }
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut result = match h5 {
        Some(p) => crate::flutter_h5::perform(&dev, &a.package, &a.action_id, p).await,
        None => match act(&dev, &a.package, &a.action_id, &a.epoch, &req, true) {
            Ok(v) | Err(v) => v,
        },
    };
    if let Some(reason) = a.state.lock().unwrap().stop.clone() {
        result["ok"] = json!(false);
        result["error"] = json!(reason);
    }
    settle(&a, result);
}

fn settle(a: &Arc<Active>, mut result: Value) {
    let obj = result.as_object_mut().unwrap();
    obj.insert("actionId".into(), json!(a.action_id));
    obj.insert("runtimeEpoch".into(), json!(a.epoch));
    obj.insert("settled".into(), json!(true));
    obj.insert("execution".into(), json!({ "schemaVersion": EXECUTION_SCHEMA, "actionId": a.action_id, "runtimeEpoch": a.epoch, "settled": true }));
    obj.insert("updatedAtMs".into(), json!(now_ms()));
    let mine = with_slot(&a.process, |s| {
        if !s.active.as_ref().is_some_and(|x| Arc::ptr_eq(x, a)) {
            return false;
        }
        s.active = None;
        s.last = Some(result.clone());
        true
    });
    if !mine {
        return;
    }
    let event = json!({ "category": "interaction", "name": "flutter.action.settled", "data": { "execution": result["execution"], "ok": result["ok"], "dispatched": result["dispatched"], "ambiguous": result["ambiguous"], "error": result.get("error") } });
    {
        let mut ph = a.dev.phone.lock().unwrap();
        if let Some(i) = ph.app_index(&a.package) {
            ph.apps[i].capture_record("event", event, Some(a.action_id.clone()));
        }
    }
    a.dev.record("flutter-action", json!({ "package": a.package, "action": a.action, "actionId": a.action_id, "ok": result["ok"], "dispatched": result["dispatched"], "error": result.get("error") }));
    a.outcome.send_replace(Outcome::Settled(result));
}

async fn cancel(req: &Map<String, Value>, process: &str) -> Value {
    let shape = req.len() == 2 && req.get("actionId").is_some_and(Value::is_string) && req.get("runtimeEpoch").is_some_and(Value::is_string);
    if !shape {
        return reject("invalid_flutter_execution_identity");
    }
    let (id, ep) = (req["actionId"].as_str().unwrap(), req["runtimeEpoch"].as_str().unwrap());
    let not_active = json!({ "ok": false, "error": "flutter_action_not_active", "message": "Flutter action is not active", "actionId": id, "runtimeEpoch": ep, "dispatched": false, "ambiguous": false });
    let (last, active) = with_slot(process, |s| (s.last.clone(), s.active.clone()));
    if let Some(l) = last.filter(|l| l["actionId"] == id && l["runtimeEpoch"] == ep) {
        return json!({ "ok": true, "actionId": id, "runtimeEpoch": ep, "executionResult": l });
    }
    let Some(a) = active.filter(|a| a.action_id == id && a.epoch == ep) else { return not_active };
    stop(&a, "flutter_action_cancelled");
    match wait(&a, GRACE).await {
        Outcome::Settled(v) => json!({ "ok": true, "actionId": id, "runtimeEpoch": ep, "executionResult": v }),
        Outcome::Pending => json!({ "ok": false, "error": "flutter_action_cancel_pending", "message": "Flutter action is still running", "actionId": id, "runtimeEpoch": ep, "dispatched": null, "ambiguous": true, "settled": false }),
    }
}

// ------------------------------------------------------------------ the Dart side

type Truth = Vec<(&'static str, Value)>;

/// Validates (`apply` false) or performs (`apply` true) one payload on the
/// foreground Flutter view; the receipt or a target failure.
pub(crate) fn act(dev: &Arc<Device>, package: &str, action_id: &str, epoch: &str, p: &Map<String, Value>, apply: bool) -> Result<Value, Value> {
    let mut ph = dev.phone.lock().unwrap();
    let Some(idx) = ph.app_index(package) else { return Err(fail("no_current_activity", false)) };
    if ph.foreground != Some(idx) {
        return Err(fail("no_current_activity", false));
    }
    let mut side: Vec<FlutterTapSpec> = vec![];
    let mut native_back = false;
    let out = with_engine(&ph, idx, |e, spec, view| {
        if e.epoch != epoch {
            return Err(fail("flutter_runtime_changed", false));
        }
        perform(e, spec, view, p, apply, &mut side, &mut native_back)
    })
    .unwrap_or_else(|| Err(fail("flutter_action_handler_absent", false)));
    for t in side {
        for (kind, v) in [("state", &t.state), ("event", &t.event)] {
            if let Some(v) = v {
                ph.apps[idx].capture_record(kind, v.clone(), Some(action_id.to_string()));
            }
        }
        if let Some(goto) = &t.native_goto
            && let Some(s) = ph.apps[idx].spec.screens.iter().position(|s| &s.name == goto)
        {
            ph.apps[idx].screen = s;
            ph.apps[idx].focused = None;
        }
    }
    drop(ph);
    let (receipt, truth) = out?;
    for (kind, mut data) in truth {
        data["actionId"] = json!(action_id);
        data["package"] = json!(package);
        dev.record(kind, data);
    }
    if native_back {
        crate::tools::android_key(dev, 4);
    }
    Ok(receipt)
}

fn num(p: &Map<String, Value>, k: &str) -> Result<f64, Value> {
    p.get(k).and_then(Value::as_f64).ok_or_else(|| {
        let mut f = fail(if p.contains_key(k) { "invalid_argument" } else { "missing_argument" }, false);
        f["field"] = json!(k);
        f
    })
}

fn text_arg<'a>(p: &'a Map<String, Value>, k: &str) -> Result<&'a str, Value> {
    p.get(k).and_then(Value::as_str).ok_or_else(|| {
        let mut f = fail("missing_argument", false);
        f["field"] = json!(k);
        f
    })
}

/// A selector (exactly `{text}` or `{nodeId}`) and its optional targetRef → one node.
fn bind(nodes: &[RNode], epoch: &str, p: &Map<String, Value>) -> Result<Option<usize>, Value> {
    let Some(sel) = p.get("selector") else {
        return if p.contains_key("targetRef") { Err(fail("invalid_flutter_target_ref", false)) } else { Ok(None) };
    };
    let Some(sel) = sel.as_object().filter(|s| s.len() == 1) else { return Err(fail("invalid_argument", false)) };
    let hits: Vec<usize> = if let Some(t) = sel.get("text").and_then(Value::as_str) {
        nodes.iter().enumerate().filter(|(_, n)| n.visible && (n.text.as_deref() == Some(t) || (n.text.is_none() && n.label.as_deref() == Some(t)))).map(|(i, _)| i).collect()
    } else if let Some(id) = sel.get("nodeId").and_then(Value::as_str) {
        nodes.iter().enumerate().filter(|(_, n)| n.id == id).map(|(i, _)| i).collect()
    } else {
        return Err(fail("invalid_argument", false));
    };
    let i = match hits.as_slice() {
        [] => return Err(fail("flutter_selector_not_found", false)),
        [one] => *one,
        _ => return Err(fail("flutter_selector_not_unique", false)),
    };
    if let Some(tr) = p.get("targetRef") {
        let Some(o) = tr.as_object().filter(|o| o.len() == 4 && ["schemaVersion", "runtimeEpoch", "elementId", "guard"].iter().all(|k| o.get(*k).is_some_and(Value::is_string))) else {
            return Err(fail("invalid_flutter_target_ref", false));
        };
        if o["schemaVersion"] != TARGET_SCHEMA {
            return Err(fail("flutter_target_schema_mismatch", false));
        }
        if o["runtimeEpoch"] != epoch {
            return Err(fail("flutter_runtime_changed", false));
        }
        if o["elementId"] != nodes[i].id.as_str() {
            return Err(fail("flutter_target_replaced", false));
        }
        if o["guard"] != nodes[i].guard.as_str() {
            return Err(fail("flutter_target_changed", false));
        }
    }
    Ok(Some(i))
}

/// The tap node for a bound node: itself or its tap ancestor, operable.
fn tap_node(nodes: &[RNode], i: usize) -> Result<usize, Value> {
    let n = &nodes[i];
    let t = if n.has("tap") || n.has("input") { Some(i) } else { n.tap_ancestor.as_ref().and_then(|id| nodes.iter().position(|x| &x.id == id)) };
    match t {
        Some(t) if nodes[t].operable() && nodes[i].operable() => Ok(t),
        _ => Err(fail("flutter_target_not_operable", false)),
    }
}

/// The topmost operable tappable (or input) node under a logical point.
fn hit(nodes: &[RNode], x: f64, y: f64) -> Option<usize> {
    nodes.iter().enumerate().rev().find(|(_, n)| n.operable() && (n.has("tap") || n.has("input")) && n.contains(x, y)).map(|(i, _)| i)
}

fn scroll_target(nodes: &[RNode], bound: Option<usize>) -> Result<usize, Value> {
    let s = match bound {
        Some(i) if nodes[i].scroll.is_some() => Some(i),
        Some(i) => nodes[i].scroll_ancestor,
        None => nodes.iter().position(|n| n.scroll.is_some() && n.visible),
    };
    match s {
        Some(s) if nodes[s].operable() => Ok(s),
        _ => Err(fail("flutter_target_not_operable", false)),
    }
}

fn summary(n: &RNode) -> Value {
    json!({ "id": n.id, "widgetType": n.widget_type, "text": n.text, "label": n.label, "value": n.value })
}

/// A tap on node `t` at logical (x, y): focus, route changes, side effects.
fn tap_effect(e: &mut Engine, nodes: &[RNode], t: Option<usize>, x: f64, y: f64, view: &View, side: &mut Vec<FlutterTapSpec>) -> Value {
    let route = e.route().to_string();
    let (sx, sy) = view.to_screen(x, y);
    let mut effects = vec![];
    if let Some(t) = t {
        let n = &nodes[t];
        if n.has("input") && !n.read_only {
            e.focused = Some(n.value_key.clone());
            e.keyboard = true;
            effects.push(json!({ "focus": n.value_key }));
        }
        if let Some(on) = &n.on_tap {
            if on.pop && e.pop() {
                effects.push(json!({ "pop": route }));
            }
            if let Some(r) = &on.push {
                e.push(r);
                effects.push(json!({ "push": r }));
            }
            if let Some(g) = &on.native_goto {
                effects.push(json!({ "nativeScreen": g }));
            }
            side.push(on.clone());
        }
    }
    json!({ "x": x, "y": y, "screenX": sx, "screenY": sy, "route": route, "target": t.map(|t| summary(&nodes[t])), "effects": effects })
}

#[allow(clippy::too_many_arguments)]
fn perform(e: &mut Engine, spec: &FlutterSpec, view: &View, p: &Map<String, Value>, apply: bool, side: &mut Vec<FlutterTapSpec>, native_back: &mut bool) -> Result<(Value, Truth), Value> {
    let epoch = e.epoch.clone();
    let r = resolve(e, spec, view);
    let nodes = &r.nodes;
    let action = p.get("action").and_then(Value::as_str).unwrap_or("");
    let receipt = |validation: &str, target: Option<&RNode>, x: f64, y: f64| {
        let (sx, sy) = view.to_screen(x, y);
        json!({ "ok": true, "dispatched": true, "ambiguous": false, "action": action, "targetValidation": validation, "targetRef": target.map(|n| n.target_ref(&epoch)), "target": target.map(summary), "x": x, "y": y, "screenX": sx, "screenY": sy, "devicePixelRatio": view.dpr })
    };
    match action {
        "tapAt" | "tapText" | "tapTarget" => {
            let (t, validation, x, y) = match action {
                "tapAt" => {
                    let (x, y) = (num(p, "x")?, num(p, "y")?);
                    (hit(nodes, x, y), "coordinates", x, y)
                }
                "tapText" => {
                    let want = text_arg(p, "text")?;
                    let mut q = Map::new();
                    q.insert("selector".into(), json!({ "text": want }));
                    let i = bind(nodes, &epoch, &q)?.unwrap();
                    let t = tap_node(nodes, i)?;
                    let (x, y) = nodes[t].center();
                    (Some(t), "text", x, y)
                }
                _ => {
                    if !p.contains_key("targetRef") {
                        return Err(fail("invalid_flutter_target_ref", false));
                    }
                    let i = bind(nodes, &epoch, p)?.ok_or_else(|| fail("missing_argument", false))?;
                    let t = tap_node(nodes, i)?;
                    let (x, y) = nodes[t].center();
                    (Some(t), TARGET_SCHEMA, x, y)
                }
            };
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let rec = receipt(validation, t.map(|t| &nodes[t]), x, y);
            let truth = tap_effect(e, nodes, t, x, y, view, side);
            Ok((rec, vec![("flutter-tap", truth)]))
        }
        "inputText" => {
            let text = text_arg(p, "text")?.to_string();
            if text.chars().count() > 16384 {
                return Err(fail("invalid_argument", false));
            }
            let bound = bind(nodes, &epoch, p)?;
            let coords = match (p.get("x"), p.get("y")) {
                (None, None) => None,
                _ => Some((num(p, "x")?, num(p, "y")?)),
            };
            let mut truth: Truth = vec![];
            let target = match (bound, coords) {
                (Some(i), _) => Some(i),
                (None, Some((x, y))) => hit(nodes, x, y),
                (None, None) => nodes.iter().position(|n| n.focused),
            };
            let Some(t) = target else { return Err(fail("flutter_input_not_editable", false)) };
            let n = &nodes[t];
            if !n.has("input") || n.read_only {
                return Err(fail("flutter_input_not_editable", false));
            }
            if !n.operable() {
                return Err(fail("flutter_target_not_operable", false));
            }
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let (x, y) = n.center();
            if let Some((cx, cy)) = coords {
                truth.push(("flutter-tap", tap_effect(e, nodes, Some(t), cx, cy, view, side)));
            }
            e.values.insert(n.value_key.clone(), text.clone());
            e.focused = Some(n.value_key.clone());
            e.keyboard = true;
            truth.push(("flutter-text", json!({ "key": n.value_key, "text": text, "target": summary(n) })));
            let mut rec = receipt(if bound.is_some() { TARGET_SCHEMA } else if coords.is_some() { "coordinates" } else { "focus" }, Some(n), x, y);
            // The receipt's reference is the element after the edit (its guard follows the value).
            let after = resolve(e, spec, view);
            if let Some(m) = after.nodes.iter().find(|m| m.id == n.id) {
                rec["targetRef"] = m.target_ref(&epoch);
            }
            rec["textLength"] = json!(text.chars().count());
            Ok((rec, truth))
        }
        "swipe" => {
            let (sx, sy, ex, ey) = (num(p, "startX")?, num(p, "startY")?, num(p, "endX")?, num(p, "endY")?);
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let s = nodes.iter().enumerate().rev().find(|(_, n)| n.scroll.is_some() && n.operable() && n.contains(sx, sy)).map(|(i, _)| i);
            let mut rec = receipt("coordinates", s.map(|s| &nodes[s]), sx, sy);
            let mut truth: Truth = vec![];
            if let Some(s) = s {
                let (axis, px, max) = nodes[s].scroll.clone().unwrap();
                let delta = if axis == "horizontal" { sx - ex } else { sy - ey };
                let to = (px + delta).clamp(0.0, max);
                e.scroll.insert(nodes[s].value_key.clone(), to);
                rec["pixels"] = json!(to);
                truth.push(("flutter-scroll", json!({ "key": nodes[s].value_key, "from": px, "to": to, "via": "swipe" })));
            }
            Ok((rec, truth))
        }
        "scrollBy" => {
            let delta = num(p, "delta")?;
            let bound = bind(nodes, &epoch, p)?;
            let s = scroll_target(nodes, bound)?;
            let (_, px, max) = nodes[s].scroll.clone().unwrap();
            let to = (px + delta).clamp(0.0, max);
            if delta == 0.0 || to == px {
                return Err(fail("flutter_scroll_boundary", false));
            }
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            e.scroll.insert(nodes[s].value_key.clone(), to);
            let (x, y) = nodes[s].center();
            let mut rec = receipt(if bound.is_some() { TARGET_SCHEMA } else { "first-scrollable" }, Some(&nodes[s]), x, y);
            rec["pixels"] = json!(to);
            rec["scrolled"] = json!(to - px);
            Ok((rec, vec![("flutter-scroll", json!({ "key": nodes[s].value_key, "from": px, "to": to, "via": "scrollBy" }))]))
        }
        "scrollUntilText" => {
            let want = text_arg(p, "text")?.to_string();
            let max_swipes = p.get("maxSwipes").map(|v| v.as_u64().filter(|m| *m <= 1000).ok_or_else(|| fail("invalid_argument", false))).transpose()?.unwrap_or(10);
            let bound = bind(nodes, &epoch, p)?;
            let s = scroll_target(nodes, bound)?;
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let key = nodes[s].value_key.clone();
            let sid = nodes[s].id.clone();
            let mut truth: Truth = vec![];
            let mut swipes = 0u64;
            loop {
                let now = resolve(e, spec, view);
                let Some(si) = now.nodes.iter().position(|n| n.id == sid) else { return Err(fail("flutter_target_not_operable", swipes > 0)) };
                let sb = now.nodes[si].bounds;
                if let Some(found) = now.nodes.iter().find(|n| n.visible && n.text.as_deref() == Some(want.as_str()) && n.bounds[1] >= sb[1] && n.bounds[3] <= sb[3]) {
                    let (x, y) = found.center();
                    let mut rec = receipt("text", Some(found), x, y);
                    rec["swipes"] = json!(swipes);
                    rec["pixels"] = json!(now.nodes[si].scroll.as_ref().map(|s| s.1));
                    return Ok((rec, truth));
                }
                if swipes >= max_swipes {
                    let mut f = fail("flutter_selector_not_found", swipes > 0);
                    f["swipes"] = json!(swipes);
                    return Err(f);
                }
                let (_, px, max) = now.nodes[si].scroll.clone().unwrap();
                let to = (px + (sb[3] - sb[1]) * 0.8).clamp(0.0, max);
                if to == px {
                    let mut f = fail("flutter_scroll_boundary", swipes > 0);
                    f["swipes"] = json!(swipes);
                    return Err(f);
                }
                e.scroll.insert(key.clone(), to);
                truth.push(("flutter-scroll", json!({ "key": key, "from": px, "to": to, "via": "scrollUntilText" })));
                swipes += 1;
            }
        }
        "hideKeyboard" => {
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let was = e.keyboard;
            e.keyboard = false;
            e.focused = None;
            let mut rec = receipt("none", None, 0.0, 0.0);
            rec["keyboardWasVisible"] = json!(was);
            Ok((rec, vec![("flutter-key", json!({ "key": "hideKeyboard", "keyboardWasVisible": was }))]))
        }
        "back" => {
            if !apply {
                return Ok((Value::Null, vec![]));
            }
            let route = e.route().to_string();
            let popped = e.pop();
            *native_back = !popped;
            let mut rec = receipt("none", None, 0.0, 0.0);
            rec["handledBy"] = json!(if popped { "flutter" } else { "android" });
            Ok((rec, vec![("flutter-route", json!({ "pop": route, "handledBy": if popped { "flutter" } else { "android" } }))]))
        }
        _ => Err(fail("unknown_action", false)),
    }
}
