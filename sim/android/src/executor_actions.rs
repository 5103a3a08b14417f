//! What an executor session's instrumentation sees and does inside its target
//! process: `observe` (a snapshot with an id and a digest of what it shows) and
//! `act` (one managed action bound to that snapshot). Engine `native` reads the
//! app's View hierarchy (every node of the current screen, `targetRef`
//! `aab.executor-target/v1` = `{schemaVersion, ref, guard}`) and acts like an
//! instrumentation injecting events into a view: tap, longPress, input (replace
//! the text of an editable view), swipe (over a view, by direction), back.
//! Engine `flutter` reads the Flutter engine's operable tree (`aab.flutter-target/v1`
//! targetRefs) and runs the Flutter action set: tap, longPress, ensureVisible,
//! enterText, drag, fling, pageBack, pump.
//!
//! Admission order: request shape, the engine's action set, the one action slot
//! (`android_executor_action_busy`), a reused id, the latest snapshot whose digest
//! still equals what the app shows (`reobserve_required` otherwise), the target
//! bound in it, the action's own checks. Every refusal before admission is the
//! exact non-dispatch shape. An admitted action's journal record is written
//! before its effect; the effect lands once (truth `executor-action` with the
//! range of effect records it caused), then the record settles. Faults:
//! `executorActionDelayMs` (slow action), `executorCrashMidAction` (the
//! instrumentation's process dies before the effect), `executorDropReplies`
//! (the settled reply is lost, see `executor`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::device::{Device, now_ms, sha256_hex};
use crate::executor::{EXECUTION_SCHEMA, Engine, Outcome, Record, Running, Session, rejection, write_record};
use crate::phone::{Node, Phone};

pub const NATIVE_TARGET_SCHEMA: &str = "aab.executor-target/v1";
const MAX_NATIVE_NODES: usize = 2000;
const MAX_TEXT: usize = 16384;
pub const NATIVE_TYPES: [&str; 5] = ["tap", "longPress", "input", "swipe", "back"];
pub const FLUTTER_TYPES: [&str; 8] = ["tap", "longPress", "ensureVisible", "enterText", "drag", "fling", "pageBack", "pump"];
/// A fling travels this many times its drag distance (the scroll's momentum).
const FLING_FACTOR: f64 = 3.0;

/// The latest observation of a session.
#[derive(Clone)]
pub struct Snapshot {
    pub id: String,
    pub digest: String,
    pub view: View,
}

#[derive(Clone)]
pub enum View {
    Native { nodes: Vec<NativeRef> },
    Flutter { epoch: String },
}

#[derive(Clone)]
pub struct NativeRef {
    pub r: String,
    pub path: Vec<usize>,
    pub guard: String,
}

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

fn bounds_json(b: [i32; 4]) -> Value {
    json!({ "left": b[0], "top": b[1], "right": b[2], "bottom": b[3] })
}

/// The target app's index when its process is the session's.
fn target_index(ph: &Phone, s: &Session) -> Option<usize> {
    ph.apps.iter().position(|a| a.package == s.target && a.installed && a.process.as_ref().is_some_and(|p| p.pid == s.pid))
}

// ------------------------------------------------------------------ native capture

struct NativeCapture {
    refs: Vec<NativeRef>,
    nodes: Vec<Value>,
    digest: String,
    truncated: bool,
    activity: Option<String>,
}

fn walk<'a>(n: &'a Node, path: &mut Vec<usize>, parent_visible: bool, out: &mut Vec<(Vec<usize>, &'a Node, bool)>, cut: &mut bool) {
    if out.len() >= MAX_NATIVE_NODES {
        *cut = true;
        return;
    }
    let visible = parent_visible && n.visible && n.bounds[2] > n.bounds[0] && n.bounds[3] > n.bounds[1];
    out.push((path.clone(), n, visible));
    for (i, c) in n.children.iter().enumerate() {
        path.push(i);
        walk(c, path, visible, out, cut);
        path.pop();
    }
}

fn guard_of(path: &[usize], n: &Node, visible: bool) -> String {
    let src = json!([path, n.class, n.resource_name, n.text, n.desc, n.bounds, n.clickable, n.long_clickable, n.enabled, n.editable, n.checkable, n.checked, n.focused, visible]);
    sha256_hex(src.to_string().as_bytes())[..16].to_string()
}

fn native_capture(ph: &Phone, idx: usize) -> Option<NativeCapture> {
    let app = &ph.apps[idx];
    let tree = app.tree(ph.width, ph.height)?;
    let mut flat = vec![];
    let mut cut = false;
    walk(&tree, &mut vec![], true, &mut flat, &mut cut);
    let mut refs = vec![];
    let mut nodes = vec![];
    for (i, (path, n, visible)) in flat.iter().enumerate() {
        let r = format!("n{i}");
        let guard = guard_of(path, n, *visible);
        nodes.push(json!({
            "ref": r, "className": n.class, "resourceName": n.resource_name, "text": if n.password { n.text.as_ref().map(|_| String::new()) } else { n.text.clone() },
            "contentDescription": n.desc, "bounds": bounds_json(n.bounds), "clickable": n.clickable, "longClickable": n.long_clickable, "enabled": n.enabled,
            "editable": n.editable, "password": n.password, "focused": n.focused, "checkable": n.checkable, "checked": n.checked, "scrollable": n.scrollable,
            "visible": visible, "depth": path.len(), "targetRef": { "schemaVersion": NATIVE_TARGET_SCHEMA, "ref": r, "guard": guard },
        }));
        refs.push(NativeRef { r, path: path.clone(), guard });
    }
    let digest_src = json!([app.screen, ph.keyboard, refs.iter().map(|r| r.guard.as_str()).collect::<Vec<_>>()]);
    let digest = sha256_hex(digest_src.to_string().as_bytes())[..32].to_string();
    Some(NativeCapture { refs, nodes, digest, truncated: cut, activity: app.current_activity() })
}

fn node_at<'a>(root: &'a Node, path: &[usize]) -> Option<&'a Node> {
    let mut n = root;
    for &i in path {
        n = n.children.get(i)?;
    }
    Some(n)
}

// ------------------------------------------------------------------ flutter capture

struct FlutterCapture {
    epoch: String,
    operable: Value,
    route: String,
    digest: String,
}

fn flutter_capture(ph: &Phone, idx: usize) -> Option<FlutterCapture> {
    crate::flutter::with_engine(ph, idx, |e, spec, view| {
        let r = crate::flutter::resolve(e, spec, view);
        let operable = crate::flutter::operable(&r, &e.epoch, view);
        let stack: Vec<String> = e.stack.iter().map(|x| x.0.clone()).collect();
        let digest_src = json!([e.epoch, stack, e.keyboard, operable["nodes"]]);
        FlutterCapture { epoch: e.epoch.clone(), route: e.route().to_string(), digest: sha256_hex(digest_src.to_string().as_bytes())[..32].to_string(), operable }
    })
}

// ------------------------------------------------------------------ observe

/// `GET /v1/executor/observe`: a new snapshot (the latest one is the only one acts bind to).
pub fn observe(dev: &Arc<Device>, s: &Session) -> Value {
    let ph = dev.phone.lock().unwrap();
    let Some(idx) = target_index(&ph, s) else { return err("android_executor_session_ended", "the instrumentation's process is gone") };
    if ph.foreground != Some(idx) {
        return err("android_executor_target_not_foreground", format!("{} is not in the foreground: the instrumentation sees no resumed activity", s.target));
    }
    let (view, digest, mut body) = match s.engine {
        Engine::Native => {
            let Some(c) = native_capture(&ph, idx) else { return err("android_executor_target_not_foreground", "the target shows no screen") };
            let screen = ph.apps[idx].spec.screens.get(ph.apps[idx].screen).map(|x| x.name.clone());
            let body = json!({ "activity": c.activity, "screen": screen, "keyboardVisible": ph.keyboard, "nodes": c.nodes, "nodeCount": c.refs.len(), "truncated": c.truncated, "limits": { "maxNodes": MAX_NATIVE_NODES } });
            (View::Native { nodes: c.refs }, c.digest, body)
        }
        Engine::Flutter => {
            let Some(c) = flutter_capture(&ph, idx) else { return err("android_executor_flutter_view_absent", "the target's current screen shows no Flutter view") };
            let o = &c.operable;
            let body = json!({ "activity": ph.apps[idx].current_activity(), "flutter": { "runtimeEpoch": c.epoch, "route": c.route, "executionSchema": crate::flutter::EXECUTION_SCHEMA, "viewport": o["viewport"] }, "nodes": o["nodes"], "nodeCount": o["count"], "truncated": o["truncated"], "limits": o["limits"] });
            (View::Flutter { epoch: c.epoch }, c.digest, body)
        }
    };
    drop(ph);
    let id = {
        let mut st = s.st.lock().unwrap();
        let id = format!("s{}", st.next_snapshot);
        st.next_snapshot += 1;
        st.snapshot = Some(Snapshot { id: id.clone(), digest: digest.clone(), view });
        id
    };
    for (k, v) in [("ok", json!(true)), ("schemaVersion", json!(crate::executor::SCHEMA)), ("sessionId", json!(s.id)), ("runtimeEpoch", json!(s.epoch)), ("engine", json!(s.engine.name())), ("packageName", json!(s.target)), ("snapshotId", json!(id)), ("digest", json!(digest)), ("observedAtMs", json!(now_ms()))] {
        body[k] = v;
    }
    body
}

// ------------------------------------------------------------------ act

/// An admitted action's bound target and arguments.
struct Prepared {
    kind: String,
    snapshot_id: String,
    /// Native: the bound node's path and guard.
    path: Option<(Vec<usize>, String)>,
    /// Flutter: the bound element and its logical centre, and the Dart epoch.
    element: Option<(String, String, f64, f64)>,
    dart_epoch: Option<String>,
    text: Option<String>,
    duration_ms: u64,
    direction: Option<String>,
    delta: (f64, f64),
    target: Value,
}

fn allowed_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "tap" | "ensureVisible" => &["type", "targetRef"],
        "longPress" => &["type", "targetRef", "durationMs"],
        "input" | "enterText" => &["type", "targetRef", "text"],
        "swipe" => &["type", "targetRef", "direction", "durationMs"],
        "drag" | "fling" => &["type", "targetRef", "dx", "dy"],
        "pump" => &["type", "durationMs"],
        _ => &["type"],
    }
}

fn targeted(kind: &str) -> bool {
    !matches!(kind, "back" | "pageBack" | "pump")
}

fn invalid(field: &str, message: &str) -> Value {
    rejection("android_executor_invalid_action", message, Some(field))
}

/// An action's own arguments: text, duration, swipe direction, drag delta.
type Arguments = (Option<String>, u64, Option<String>, (f64, f64));

/// Checks of the action's own arguments (before any look at the app).
fn arguments(kind: &str, a: &Map<String, Value>) -> Result<Arguments, Value> {
    if let Some(k) = a.keys().find(|k| !allowed_keys(kind).contains(&k.as_str())) {
        return Err(invalid(&format!("action.{k}"), &format!("{kind} takes no {k}")));
    }
    if targeted(kind) && !a.contains_key("targetRef") {
        return Err(invalid("action.targetRef", &format!("{kind} needs the targetRef of a node of the snapshot")));
    }
    let text = match kind {
        "input" | "enterText" => match a.get("text").and_then(Value::as_str) {
            Some(t) if t.chars().count() <= MAX_TEXT => Some(t.to_string()),
            Some(_) => return Err(invalid("action.text", "text is longer than 16384 characters")),
            None => return Err(invalid("action.text", "text must be a string")),
        },
        _ => None,
    };
    let (min, default, max) = match kind {
        "longPress" => (500, 600, 10_000),
        "swipe" => (1, 300, 10_000),
        "pump" => (0, 0, 10_000),
        _ => (0, 0, 0),
    };
    let duration_ms = match a.get("durationMs") {
        None => default,
        Some(v) => match v.as_u64() {
            Some(d) if (min..=max).contains(&d) => d,
            _ => return Err(invalid("action.durationMs", &format!("durationMs must be an integer {min}..{max}"))),
        },
    };
    let direction = match kind {
        "swipe" => match a.get("direction").and_then(Value::as_str) {
            Some(d @ ("up" | "down" | "left" | "right")) => Some(d.to_string()),
            _ => return Err(invalid("action.direction", "direction must be up, down, left or right")),
        },
        _ => None,
    };
    let delta = match kind {
        "drag" | "fling" => {
            let n = |k: &str| a.get(k).and_then(Value::as_f64).filter(|v| v.is_finite() && v.abs() <= 100_000.0);
            match (n("dx"), n("dy")) {
                (Some(x), Some(y)) if x != 0.0 || y != 0.0 => (x, y),
                (Some(_), Some(_)) => return Err(invalid("action.dx", "dx and dy are both 0")),
                _ => return Err(invalid("action.dx", "dx and dy must be numbers within ±100000")),
            }
        }
        _ => (0.0, 0.0),
    };
    Ok((text, duration_ms, direction, delta))
}

fn stale(message: &str, field: &str) -> Value {
    rejection("reobserve_required", message, Some(field))
}

fn ref_object<'a>(a: &'a Map<String, Value>, keys: &[&str], schema: &str) -> Result<&'a Map<String, Value>, Value> {
    let bad = || rejection("android_executor_target_invalid", format!("targetRef must be exactly {{{}}} of {schema}", keys.join(", ")), Some("action.targetRef"));
    let o = a.get("targetRef").and_then(Value::as_object).ok_or_else(bad)?;
    if o.len() != keys.len() || !keys.iter().all(|k| o.get(*k).is_some_and(Value::is_string)) || o["schemaVersion"] != schema {
        return Err(bad());
    }
    Ok(o)
}

fn prepare(dev: &Arc<Device>, s: &Session, snap: &Snapshot, kind: &str, a: &Map<String, Value>) -> Result<Prepared, Value> {
    let (text, duration_ms, direction, delta) = arguments(kind, a)?;
    let mut p = Prepared { kind: kind.to_string(), snapshot_id: snap.id.clone(), path: None, element: None, dart_epoch: None, text, duration_ms, direction, delta, target: Value::Null };
    let ph = dev.phone.lock().unwrap();
    let Some(idx) = target_index(&ph, s) else { return Err(rejection("android_executor_session_ended", "the instrumentation's process is gone", None)) };
    if ph.foreground != Some(idx) {
        return Err(rejection("android_executor_target_not_foreground", format!("{} is not in the foreground", s.target), None));
    }
    match (&snap.view, s.engine) {
        (View::Native { nodes }, Engine::Native) => {
            let Some(c) = native_capture(&ph, idx) else { return Err(rejection("android_executor_target_not_foreground", "the target shows no screen", None)) };
            if c.digest != snap.digest {
                return Err(stale("the app changed since the snapshot; observe again", "snapshotId"));
            }
            if !targeted(kind) {
                return Ok(p);
            }
            let o = ref_object(a, &["schemaVersion", "ref", "guard"], NATIVE_TARGET_SCHEMA)?;
            let Some(bound) = nodes.iter().find(|n| n.r == o["ref"] && n.guard == o["guard"]) else { return Err(stale("the targetRef is not a node of this snapshot", "action.targetRef")) };
            let i = c.refs.iter().position(|r| r.path == bound.path).unwrap_or(0);
            let node_json = &c.nodes[i];
            let tree = ph.apps[idx].tree(ph.width, ph.height).unwrap();
            let node = node_at(&tree, &bound.path).unwrap();
            if node_json["visible"] != true || !node.enabled {
                return Err(rejection("android_executor_target_not_operable", "the target is not visible and enabled", Some("action.targetRef")));
            }
            if kind == "input" && (!node.editable || node.id.is_none()) {
                return Err(rejection("android_executor_target_not_editable", "the target is not an editable view", Some("action.targetRef")));
            }
            p.target = json!({ "ref": bound.r, "className": node.class, "resourceName": node.resource_name, "text": node_json["text"], "bounds": node_json["bounds"] });
            p.path = Some((bound.path.clone(), bound.guard.clone()));
            Ok(p)
        }
        (View::Flutter { epoch }, Engine::Flutter) => {
            let Some(c) = flutter_capture(&ph, idx) else { return Err(rejection("android_executor_flutter_view_absent", "the target's current screen shows no Flutter view", None)) };
            if c.digest != snap.digest || &c.epoch != epoch {
                return Err(stale("the Flutter view changed since the snapshot; observe again", "snapshotId"));
            }
            p.dart_epoch = Some(c.epoch.clone());
            drop(ph);
            if !targeted(kind) {
                return Ok(p);
            }
            let o = ref_object(a, &["schemaVersion", "runtimeEpoch", "elementId", "guard"], crate::flutter::TARGET_SCHEMA)?;
            if o["runtimeEpoch"] != c.epoch.as_str() {
                return Err(stale("the targetRef belongs to another Dart runtime", "action.targetRef"));
            }
            let nodes = c.operable["nodes"].as_array().cloned().unwrap_or_default();
            let Some(node) = nodes.iter().find(|n| n["id"] == o["elementId"] && n["targetRef"]["guard"] == o["guard"]) else { return Err(stale("the targetRef is not a node of this snapshot", "action.targetRef")) };
            let b = &node["bounds"];
            let (cx, cy) = ((b["left"].as_f64().unwrap_or(0.0) + b["right"].as_f64().unwrap_or(0.0)) / 2.0, (b["top"].as_f64().unwrap_or(0.0) + b["bottom"].as_f64().unwrap_or(0.0)) / 2.0);
            let id = node["id"].as_str().unwrap_or("").to_string();
            p.target = json!({ "id": id, "widgetType": node["widgetType"], "text": node["text"], "label": node["label"], "targetRef": node["targetRef"] });
            p.element = Some((id.clone(), o["guard"].as_str().unwrap_or("").to_string(), cx, cy));
            let operable = node["visible"] == true && node["enabled"] == true && node["offstage"] != true;
            let action_list = |name: &str| node["actions"].as_array().is_some_and(|l| l.iter().any(|x| x == name));
            match kind {
                "tap" | "enterText" => {
                    // The Dart side's own target checks, without effect.
                    let payload = flutter_payload(&p, kind);
                    crate::flutter_exec::act(dev, &s.target, "validation", &c.epoch, &payload, false).map_err(|f| rejection(f["error"].as_str().unwrap_or("flutter_target_not_operable"), "the Flutter target refused the action", Some("action.targetRef")))?;
                }
                "longPress" | "drag" | "fling" if !operable => return Err(rejection("flutter_target_not_operable", "the target is not visible and enabled", Some("action.targetRef"))),
                "ensureVisible" if !operable && node.get("scrollParent").is_none() && !action_list("scroll") => {
                    return Err(rejection("flutter_target_not_operable", "the target has no scrollable ancestor to bring it into view", Some("action.targetRef")));
                }
                _ => {}
            }
            Ok(p)
        }
        _ => Err(rejection("android_executor_action_unsupported", "the snapshot is of another engine", Some("snapshotId"))),
    }
}

fn flutter_payload(p: &Prepared, kind: &str) -> Map<String, Value> {
    let (id, guard, cx, cy) = p.element.clone().unwrap_or_default();
    let epoch = p.dart_epoch.clone().unwrap_or_default();
    let target_ref = json!({ "schemaVersion": crate::flutter::TARGET_SCHEMA, "runtimeEpoch": epoch, "elementId": id, "guard": guard });
    let v = match kind {
        "tap" => json!({ "action": "tapTarget", "selector": { "nodeId": id }, "targetRef": target_ref }),
        "enterText" => json!({ "action": "inputText", "selector": { "nodeId": id }, "targetRef": target_ref, "text": p.text }),
        "drag" | "fling" => {
            let k = if kind == "fling" { FLING_FACTOR } else { 1.0 };
            json!({ "action": "swipe", "startX": cx, "startY": cy, "endX": cx + p.delta.0 * k, "endY": cy + p.delta.1 * k })
        }
        _ => json!({ "action": "back" }),
    };
    v.as_object().cloned().unwrap_or_default()
}

/// `POST /v1/executor/act`: admission, then the action on its own task (a dropped
/// connection never cancels it); None = the process died before it settled.
pub async fn act(dev: &Arc<Device>, s: &Arc<Session>, body: Map<String, Value>) -> Option<Value> {
    if let Some(k) = body.keys().find(|k| !["actionId", "snapshotId", "action"].contains(&k.as_str())) {
        return Some(rejection("android_executor_invalid_request", format!("unknown member {k}"), Some(k)));
    }
    let Some(action_id) = body.get("actionId").and_then(Value::as_str).filter(|a| !a.is_empty() && a.len() <= 1024).map(str::to_string) else {
        return Some(rejection("android_executor_invalid_request", "actionId must be a string of 1..1024 bytes", Some("actionId")));
    };
    let Some(snapshot_id) = body.get("snapshotId").and_then(Value::as_str).map(str::to_string) else {
        return Some(rejection("android_executor_invalid_request", "snapshotId must be a string", Some("snapshotId")));
    };
    let Some(action) = body.get("action").and_then(Value::as_object) else {
        return Some(rejection("android_executor_invalid_request", "action must be an object", Some("action")));
    };
    let Some(kind) = action.get("type").and_then(Value::as_str) else {
        return Some(rejection("android_executor_invalid_request", "action.type must be a string", Some("action.type")));
    };
    let set: &[&str] = if s.engine == Engine::Flutter { &FLUTTER_TYPES } else { &NATIVE_TYPES };
    if !set.contains(&kind) {
        return Some(rejection("android_executor_action_unsupported", format!("the {} engine has no action {kind:?}", s.engine.name()), Some("action.type")));
    }
    let admission = |st: &crate::executor::St| -> Result<(), Value> {
        if let Some(a) = &st.active {
            return Err(rejection("android_executor_action_busy", format!("action {} is still running", a.action_id), None));
        }
        if st.records.contains_key(&action_id) {
            return Err(rejection("android_executor_action_id_reused", "this actionId was already used in the session; read its receipt", Some("actionId")));
        }
        if !crate::executor::capacity_left(st) {
            return Err(rejection("android_executor_action_capacity_exhausted", "the session recorded its maximum of actions", None));
        }
        Ok(())
    };
    let snap = {
        let st = s.st.lock().unwrap();
        if let Err(r) = admission(&st) {
            return Some(r);
        }
        match &st.snapshot {
            Some(x) if x.id == snapshot_id => x.clone(),
            _ => return Some(stale("snapshotId is not the session's latest snapshot; observe again", "snapshotId")),
        }
    };
    let prepared = match prepare(dev, s, &snap, kind, action) {
        Ok(p) => p,
        Err(r) => return Some(r),
    };
    let running = Arc::new(Running { action_id: action_id.clone(), outcome: watch::Sender::new(Outcome::Pending) });
    let record = Record { action_id: action_id.clone(), request_sha256: sha256_hex(Value::Object(body.clone()).to_string().as_bytes()), kind: kind.to_string(), phase: "admitted", admitted_at_ms: now_ms(), settled_at_ms: None, receipt: None };
    {
        let mut st = s.st.lock().unwrap();
        if let Err(r) = admission(&st) {
            return Some(r);
        }
        if s.ended().is_some() {
            return Some(rejection("android_executor_session_ended", "the session ended", None));
        }
        st.active = Some(running.clone());
        st.records.insert(action_id.clone(), record.clone());
    }
    write_record(dev, s, &record);
    let mut rx = running.outcome.subscribe();
    tokio::spawn(run(dev.clone(), s.clone(), prepared, running, record));
    match rx.wait_for(|o| !matches!(o, Outcome::Pending)).await.map(|o| o.clone()) {
        Ok(Outcome::Settled(v)) => Some(v),
        _ => None,
    }
}

async fn run(dev: Arc<Device>, s: Arc<Session>, p: Prepared, running: Arc<Running>, mut record: Record) {
    let (delay, crash) = {
        let mut f = dev.faults.lock().unwrap();
        (f.executor_action_delay_ms, crate::faults::Faults::take(&mut f.executor_crash_mid_action))
    };
    if crash {
        dev.record("fault", json!({ "kind": "executor-crash-mid-action", "sessionId": s.id, "actionId": running.action_id }));
        let _ = crate::lifecycle::crash(&dev, &s.target, false);
        return;
    }
    let wait = delay + if p.kind == "pump" { p.duration_ms } else { 0 };
    if wait > 0 {
        let mut end = s.subscribe_end();
        let _ = tokio::time::timeout(Duration::from_millis(wait), end.wait_for(Option::is_some)).await;
    }
    if s.ended().is_some() {
        return;
    }
    let before = dev.truth_len();
    let Some(mut receipt) = perform(&dev, &s, &p, &running.action_id) else { return };
    let through = dev.truth_len();
    let obj = receipt.as_object_mut().unwrap();
    obj.insert("ambiguous".into(), json!(false));
    obj.insert("settled".into(), json!(true));
    obj.insert("actionId".into(), json!(running.action_id));
    obj.insert("runtimeEpoch".into(), json!(s.epoch));
    obj.insert("sessionId".into(), json!(s.id));
    obj.insert("execution".into(), json!({ "schemaVersion": EXECUTION_SCHEMA, "actionId": running.action_id, "runtimeEpoch": s.epoch, "settled": true }));
    obj.insert("type".into(), json!(p.kind));
    obj.insert("engine".into(), json!(s.engine.name()));
    obj.insert("snapshotId".into(), json!(p.snapshot_id));
    obj.insert("target".into(), p.target.clone());
    obj.insert("settledAtMs".into(), json!(now_ms()));
    let still = {
        let mut st = s.st.lock().unwrap();
        let mine = st.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &running));
        if mine {
            st.active = None;
            record.phase = "settled";
            record.settled_at_ms = Some(now_ms());
            record.receipt = Some(receipt.clone());
            st.records.insert(record.action_id.clone(), record.clone());
        }
        mine
    };
    dev.record("executor-action", json!({ "sessionId": s.id, "runtimeEpoch": s.epoch, "actionId": running.action_id, "type": p.kind, "engine": s.engine.name(), "ok": receipt["ok"], "dispatched": receipt["dispatched"], "target": p.target, "settled": still, "effects": { "after": before, "through": through } }));
    if !still {
        // The process died right after the effect: applied, but never settled.
        return;
    }
    write_record(&dev, &s, &record);
    s.st.lock().unwrap().expires = std::time::Instant::now() + Duration::from_millis(s.lease_ms);
    running.outcome.send_replace(Outcome::Settled(receipt));
}

fn not_applied(code: &str, message: &str) -> Value {
    json!({ "ok": false, "dispatched": false, "error": code, "message": message })
}

/// The effect, once. None = the target process is no longer the session's.
fn perform(dev: &Arc<Device>, s: &Session, p: &Prepared, action_id: &str) -> Option<Value> {
    match s.engine {
        Engine::Native => perform_native(dev, s, p),
        Engine::Flutter => perform_flutter(dev, s, p, action_id),
    }
}

fn perform_native(dev: &Arc<Device>, s: &Session, p: &Prepared) -> Option<Value> {
    let mut ph = dev.phone.lock().unwrap();
    let idx = target_index(&ph, s)?;
    if ph.foreground != Some(idx) {
        return Some(not_applied("android_executor_target_not_foreground", "the target left the foreground before the action ran"));
    }
    if p.kind == "back" {
        drop(ph);
        crate::tools::android_key(dev, 4);
        return Some(json!({ "ok": true, "dispatched": true, "keyCode": 4 }));
    }
    let (path, guard) = p.path.clone()?;
    // The bound view must still be the one observed (a slow action may find another screen).
    let unchanged = native_capture(&ph, idx).is_some_and(|c| c.refs.iter().any(|r| r.path == path && r.guard == guard));
    let tree = ph.apps[idx].tree(ph.width, ph.height)?;
    let node = match node_at(&tree, &path) {
        Some(n) if unchanged => n.clone(),
        _ => return Some(not_applied("android_executor_target_changed", "the target changed before the action ran")),
    };
    let (cx, cy) = ((node.bounds[0] + node.bounds[2]) / 2, (node.bounds[1] + node.bounds[3]) / 2);
    let via = json!({ "via": "executor", "sessionId": s.id });
    match p.kind.as_str() {
        "tap" => {
            let hit = crate::tools::tap_app_node(&mut ph, idx, &node);
            drop(ph);
            dev.record("tap", json!({ "x": cx, "y": cy, "hit": hit, "via": via }));
            Some(json!({ "ok": true, "dispatched": true, "x": cx, "y": cy }))
        }
        "longPress" => {
            drop(ph);
            dev.record("gesture", json!({ "action": "longPress", "startX": cx, "startY": cy, "endX": cx, "endY": cy, "durationMs": p.duration_ms, "target": node.resource_name, "via": via }));
            Some(json!({ "ok": true, "dispatched": true, "x": cx, "y": cy, "durationMs": p.duration_ms }))
        }
        "input" => {
            let id = node.id.clone()?;
            let text = p.text.clone().unwrap_or_default();
            ph.apps[idx].values.insert(id.clone(), text.clone());
            ph.apps[idx].focused = Some(id.clone());
            ph.keyboard = true;
            let package = ph.apps[idx].package.clone();
            drop(ph);
            dev.record("text", json!({ "text": text, "via": via, "target": { "package": package, "id": id, "value": text } }));
            Some(json!({ "ok": true, "dispatched": true, "x": cx, "y": cy, "textLength": text.chars().count() }))
        }
        "swipe" => {
            drop(ph);
            let b = node.bounds;
            let (w, h) = (b[2] - b[0], b[3] - b[1]);
            let (x1, y1, x2, y2) = match p.direction.as_deref() {
                Some("up") => (cx, b[1] + h * 76 / 100, cx, b[1] + h * 22 / 100),
                Some("down") => (cx, b[1] + h * 22 / 100, cx, b[1] + h * 76 / 100),
                Some("left") => (b[0] + w * 76 / 100, cy, b[0] + w * 22 / 100, cy),
                _ => (b[0] + w * 22 / 100, cy, b[0] + w * 76 / 100, cy),
            };
            dev.record("swipe", json!({ "x1": x1, "y1": y1, "x2": x2, "y2": y2, "durationMs": p.duration_ms, "via": via }));
            Some(json!({ "ok": true, "dispatched": true, "startX": x1, "startY": y1, "endX": x2, "endY": y2, "durationMs": p.duration_ms }))
        }
        _ => Some(not_applied("android_executor_action_unsupported", "unknown action")),
    }
}

fn perform_flutter(dev: &Arc<Device>, s: &Session, p: &Prepared, action_id: &str) -> Option<Value> {
    let epoch = p.dart_epoch.clone().unwrap_or_default();
    {
        let ph = dev.phone.lock().unwrap();
        let idx = target_index(&ph, s)?;
        if ph.foreground != Some(idx) {
            return Some(not_applied("android_executor_target_not_foreground", "the target left the foreground before the action ran"));
        }
    }
    match p.kind.as_str() {
        "tap" | "enterText" | "drag" | "fling" | "pageBack" => {
            let payload = flutter_payload(p, &p.kind);
            match crate::flutter_exec::act(dev, &s.target, action_id, &epoch, &payload, true) {
                Ok(r) => {
                    let mut out = json!({ "ok": true, "dispatched": true, "flutter": r });
                    for k in ["x", "y", "screenX", "screenY", "pixels", "textLength", "handledBy"] {
                        if let Some(v) = r.get(k) {
                            out[k] = v.clone();
                        }
                    }
                    Some(out)
                }
                Err(f) => Some(not_applied(f["error"].as_str().unwrap_or("flutter_target_not_operable"), "the Flutter target refused the action when it ran")),
            }
        }
        "ensureVisible" | "longPress" => {
            let (id, guard, _, _) = p.element.clone()?;
            let ph = dev.phone.lock().unwrap();
            let idx = target_index(&ph, s)?;
            let out = crate::flutter::with_engine(&ph, idx, |e, spec, view| {
                if e.epoch != epoch {
                    return Err("flutter_runtime_changed");
                }
                let r = crate::flutter::resolve(e, spec, view);
                let Some(i) = r.nodes.iter().position(|n| n.id == id) else { return Err("flutter_target_replaced") };
                if r.nodes[i].guard != guard {
                    return Err("flutter_target_changed");
                }
                let n = r.nodes[i].clone();
                if p.kind == "longPress" {
                    let (x, y) = n.center();
                    let (sx, sy) = view.to_screen(x, y);
                    return Ok((json!({ "x": x, "y": y, "screenX": sx, "screenY": sy, "durationMs": p.duration_ms }), ("flutter-long-press", json!({ "target": { "id": n.id, "widgetType": n.widget_type, "text": n.text }, "x": x, "y": y, "screenX": sx, "screenY": sy, "durationMs": p.duration_ms }))));
                }
                let Some(si) = n.scroll_ancestor else { return Ok((json!({ "scrolled": 0.0, "alreadyVisible": true }), ("", Value::Null))) };
                let sc = &r.nodes[si];
                let (axis, px, max) = sc.scroll.clone().unwrap_or_default();
                let (lo, hi, a, b) = if axis == "horizontal" { (sc.bounds[0], sc.bounds[2], n.bounds[0], n.bounds[2]) } else { (sc.bounds[1], sc.bounds[3], n.bounds[1], n.bounds[3]) };
                let to = if a < lo { px - (lo - a) } else if b > hi { px + (b - hi) } else { px };
                let to = to.clamp(0.0, max);
                if to == px {
                    return Ok((json!({ "scrolled": 0.0, "alreadyVisible": true, "pixels": px }), ("", Value::Null)));
                }
                e.scroll.insert(sc.value_key.clone(), to);
                Ok((json!({ "scrolled": to - px, "alreadyVisible": false, "pixels": to }), ("flutter-scroll", json!({ "key": sc.value_key, "from": px, "to": to, "via": "ensureVisible" }))))
            });
            drop(ph);
            match out {
                Some(Ok((mut rec, (kind, mut data)))) => {
                    if !kind.is_empty() {
                        data["actionId"] = json!(action_id);
                        data["package"] = json!(s.target);
                        dev.record(kind, data);
                    }
                    rec["ok"] = json!(true);
                    rec["dispatched"] = json!(true);
                    Some(rec)
                }
                Some(Err(code)) => Some(not_applied(code, "the Flutter target changed before the action ran")),
                None => Some(not_applied("android_executor_flutter_view_absent", "the Flutter view is gone")),
            }
        }
        "pump" => Some(json!({ "ok": true, "dispatched": true, "pumpedMs": p.duration_ms })),
        _ => Some(not_applied("android_executor_action_unsupported", "unknown action")),
    }
}
