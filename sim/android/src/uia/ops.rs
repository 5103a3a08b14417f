//! The runtime's ops (§3.3): status, observe (snapshot XML of the focused
//! window), stop, the managed click (`prepare` → `start` → `query` / `cancel`
//! → `acknowledge`, request `aab.uia.execution.v1`), `acknowledge-record`; and
//! the phone journal (`<root>/sessions/<epoch>/actions/<sha256(actionId)>.json`,
//! `aab.uia.record.v2`) that the one-shot modes read after a restart.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{CAPACITY, Runtime, sha256_hex};
use crate::device::{Device, uuid4};
use crate::phone::{Node, Phone};
use crate::uiautomator::esc;

const SCHEMA: &str = "aab.uia.execution.v1";
const MAX_SNAPSHOTS: usize = 8;
const SNAPSHOT_TTL_MS: u64 = 60_000;
const MAX_NODES: usize = 2000;
const MAX_DEPTH: usize = 64;
const MAX_XML: usize = 512 * 1024;
const MAX_REQUEST: usize = 32 * 1024;

pub type After = Box<dyn FnOnce() + Send>;
type OpErr = (&'static str, String);

fn elapsed(dev: &Device) -> u64 {
    dev.uptime().as_millis() as u64
}

fn e(code: &'static str, msg: impl Into<String>) -> OpErr {
    (code, msg.into())
}

fn err_value((code, msg): OpErr) -> Value {
    json!({ "ok": false, "error": code, "message": msg })
}

// ---- windows and snapshots ----

enum Owner {
    App(usize),
    Dialog,
    Launcher,
}

struct Win {
    id: i64,
    kind: &'static str,
    title: String,
    package: String,
    root: Node,
    owner: Owner,
}

impl Win {
    fn json(&self) -> Value {
        json!({ "id": self.id, "displayId": 0, "type": self.kind, "focused": true, "title": self.title })
    }
}

fn launcher_tree(ph: &Phone) -> Node {
    let blank = |class: &str, b: [i32; 4]| Node {
        class: class.into(), id: None, resource_name: None, text: None, desc: None, bounds: b, clickable: false, long_clickable: false, enabled: true, focusable: false, focused: false, editable: false, password: false, checkable: false, checked: false, selected: false, scrollable: false, visible: true, color: None, children: vec![], on_tap: None,
    };
    let mut root = blank("android.widget.FrameLayout", [0, 0, ph.width as i32, ph.height as i32]);
    for (i, a) in ph.apps.iter().filter(|a| a.installed).enumerate() {
        let (col, row) = ((i % 4) as i32, (i / 4) as i32);
        let label = a.package.rsplit('.').next().unwrap_or(&a.package).to_string();
        let mut n = blank("android.widget.TextView", [60 + col * 250, 300 + row * 300, 230 + col * 250, 470 + row * 300]);
        n.text = Some(label.clone());
        n.desc = Some(label);
        n.clickable = true;
        root.children.push(n);
    }
    root
}

/// The focused window on display 0: a system dialog, else the foreground app's, else the launcher's.
fn focused_window(ph: &Phone) -> Win {
    if let Some(d) = &ph.system_dialog {
        return Win { id: d.window_id, kind: "system", title: d.title.clone(), package: d.package.clone(), root: d.tree(ph.width, ph.height), owner: Owner::Dialog };
    }
    if let Some(i) = ph.foreground
        && let Some(tree) = ph.apps[i].tree(ph.width, ph.height) {
            let app = &ph.apps[i];
            return Win { id: 1000 + app.task_id as i64, kind: "application", title: format!("{}/{}", app.package, app.current_activity().unwrap_or_default()), package: app.package.clone(), root: tree, owner: Owner::App(i) };
        }
    Win { id: 2, kind: "application", title: format!("{}/{}", crate::dumpsys::LAUNCHER_PKG, crate::dumpsys::LAUNCHER_ACT), package: crate::dumpsys::LAUNCHER_PKG.into(), root: launcher_tree(ph), owner: Owner::Launcher }
}


fn bounds_text(b: [i32; 4]) -> String {
    format!("[{},{}][{},{}]", b[0], b[1], b[2], b[3])
}

/// A node identity (`binding.target` / `actionTarget`); `sourceId` is the window id and the index path.
fn ident(n: &Node, path: &[usize], win: &Win) -> Value {
    let src = format!("{}/0{}", win.id, path.iter().map(|i| format!(".{i}")).collect::<String>());
    json!({
        "sourceId": src, "windowId": win.id, "packageName": win.package, "className": n.class,
        "text": n.shown_text(), "contentDescription": n.desc.clone().unwrap_or_default(),
        "resourceName": n.resource_name.clone().unwrap_or_default(), "bounds": bounds_text(n.bounds),
        "enabled": n.enabled, "visible": n.visible, "clickable": n.clickable, "checkable": n.checkable,
        "checked": n.checked, "scrollable": n.scrollable,
    })
}

fn node_at<'a>(root: &'a Node, path: &[usize]) -> Option<&'a Node> {
    let mut n = root;
    if !n.visible {
        return None;
    }
    for &i in path {
        n = n.children.iter().filter(|c| c.visible).nth(i)?;
    }
    Some(n)
}

pub struct SNode {
    r: String,
    path: Vec<usize>,
    ident: Value,
}

pub struct Snapshot {
    pub id: String,
    created: u64,
    expires: u64,
    window_id: i64,
    window: Value,
    nodes: Vec<SNode>,
    by_ref: HashMap<String, usize>,
}

fn walk(out: &mut String, n: &Node, index: usize, path: &mut Vec<usize>, win: &Win, nodes: &mut Vec<SNode>) -> Result<(), OpErr> {
    if nodes.len() >= MAX_NODES {
        return Err(e("uia_snapshot_too_large", format!("the focused window has more than {MAX_NODES} nodes")));
    }
    if path.len() >= MAX_DEPTH {
        return Err(e("uia_snapshot_too_large", format!("the focused window is deeper than {MAX_DEPTH} levels")));
    }
    let r = uuid4();
    let _ = write!(
        out,
        "<node index=\"{index}\" aab-ref=\"{r}\" package=\"{}\" class=\"{}\" text=\"{}\" content-desc=\"{}\" resource-id=\"{}\" bounds=\"{}\" enabled=\"{}\" visible-to-user=\"{}\" clickable=\"{}\" checkable=\"{}\" checked=\"{}\" scrollable=\"{}\"",
        esc(&win.package), esc(&n.class), esc(&n.shown_text()), esc(n.desc.as_deref().unwrap_or("")), esc(n.resource_name.as_deref().unwrap_or("")),
        bounds_text(n.bounds), n.enabled, n.visible, n.clickable, n.checkable, n.checked, n.scrollable
    );
    nodes.push(SNode { r, path: path.clone(), ident: ident(n, path, win) });
    let kids: Vec<&Node> = n.children.iter().filter(|c| c.visible).collect();
    if kids.is_empty() {
        out.push_str(" />");
        return Ok(());
    }
    out.push('>');
    for (i, c) in kids.into_iter().enumerate() {
        path.push(i);
        walk(out, c, i, path, win, nodes)?;
        path.pop();
    }
    out.push_str("</node>");
    Ok(())
}

fn observe(dev: &Arc<Device>, rt: &Runtime) -> Result<Value, OpErr> {
    let win = focused_window(&dev.phone.lock().unwrap());
    let id = uuid4();
    let mut xml = format!("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy aab-schema=\"aab.uia.snapshot.v1\" aab-boot-id=\"{}\" aab-runtime-epoch=\"{}\" aab-snapshot-id=\"{id}\">", rt.boot_id, rt.epoch);
    let mut nodes = vec![];
    if win.root.visible {
        walk(&mut xml, &win.root, 0, &mut vec![], &win, &mut nodes)?;
    }
    xml.push_str("</hierarchy>");
    if xml.len() > MAX_XML {
        return Err(e("uia_snapshot_too_large", "snapshot XML larger than 512 KiB"));
    }
    let ttl = match dev.faults.lock().unwrap().uia_snapshot_ttl_ms {
        0 => SNAPSHOT_TTL_MS,
        t => t,
    };
    let created = elapsed(dev);
    let by_ref = nodes.iter().enumerate().map(|(i, n)| (n.r.clone(), i)).collect();
    let snap = Snapshot { id: id.clone(), created, expires: created + ttl, window_id: win.id, window: win.json(), nodes, by_ref };
    let reply = json!({
        "ok": true, "schemaVersion": "aab.uia.snapshot.v1", "bootId": rt.boot_id, "runtimeEpoch": rt.epoch, "snapshotId": id,
        "createdAtElapsedMs": snap.created, "expiresAtElapsedMs": snap.expires, "window": snap.window, "nodeCount": snap.nodes.len(), "xml": xml,
    });
    let mut st = rt.st.lock().unwrap();
    st.snapshots.push_back(snap);
    while st.snapshots.len() > MAX_SNAPSHOTS {
        let old = st.snapshots.pop_front().unwrap();
        st.evicted.insert(old.id);
    }
    Ok(reply)
}

// ---- actions ----

#[derive(Clone)]
pub struct Action {
    pub id: String,
    request_json: String,
    request_sha: String,
    req: Value,
    pub phase: &'static str,
    pub acknowledged: bool,
    prepared_ms: u64,
    deadline_ms: u64,
    interaction_id: String,
    receipt_json: Option<String>,
    receipt_sha: Option<String>,
}

impl Action {
    pub fn summary(&self) -> Value {
        let r: Value = self.receipt_json.as_deref().and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null);
        json!({ "actionId": self.id, "phase": self.phase, "acknowledged": self.acknowledged, "completion": r.get("completion"), "ok": r.get("ok"), "dispatched": r.get("dispatched"), "error": r.get("error") })
    }

    fn journal(&self, rt: &Runtime) -> Value {
        json!({
            "schemaVersion": "aab.uia.record.v2", "bootId": rt.boot_id, "runtimeEpoch": rt.epoch, "actionId": self.id,
            "requestJson": self.request_json, "requestSha256": self.request_sha, "phase": self.phase, "acknowledged": self.acknowledged,
            "preparedAtElapsedMs": self.prepared_ms, "deadlineElapsedMs": self.deadline_ms, "interactionId": self.interaction_id,
            "receiptJson": self.receipt_json, "receiptSha256": self.receipt_sha,
        })
    }
}

fn record_path(dev: &Device, root: &str, epoch: &str, action_id: &str) -> std::path::PathBuf {
    dev.host_path(&format!("{root}/sessions/{epoch}/actions/{}.json", sha256_hex(action_id.as_bytes())))
}

fn write_journal(dev: &Device, rt: &Runtime, a: &Action) {
    let _ = crate::rootfs::write_atomic(&record_path(dev, &rt.root, &rt.epoch, &a.id), serde_json::to_vec_pretty(&a.journal(rt)).unwrap().as_slice());
}

#[allow(clippy::too_many_arguments)]
fn receipt(boot: &str, epoch: &str, action_id: &str, request_sha: &str, ok: bool, dispatched: bool, completion: &str, at: u64, binding: Option<Value>, callback: Option<Value>, error: Option<&str>) -> (String, String) {
    let mut r = json!({
        "schemaVersion": SCHEMA, "bootId": boot, "runtimeEpoch": epoch, "actionId": action_id, "requestSha256": request_sha,
        "settled": true, "ok": ok, "dispatched": dispatched, "ambiguous": false, "completion": completion, "completedAtElapsedMs": at,
    });
    if let Some(b) = binding {
        r["binding"] = b;
    }
    if let Some(c) = callback {
        r["callback"] = c;
    }
    if let Some(er) = error {
        r["error"] = json!(er);
    }
    let text = r.to_string();
    let sha = sha256_hex(text.as_bytes());
    (text, sha)
}

/// Settles an action that never reached admission (cancel, timeout, rejection).
fn settle_undispatched(dev: &Device, rt: &Runtime, a: &mut Action, completion: &str, error: &str, binding: Option<Value>) {
    let (t, s) = receipt(&rt.boot_id, &rt.epoch, &a.id, &a.request_sha, false, false, completion, elapsed(dev), binding, None, Some(error));
    a.phase = "terminal";
    a.receipt_json = Some(t);
    a.receipt_sha = Some(s);
    write_journal(dev, rt, a);
}

#[allow(clippy::too_many_arguments)]
fn envelope(boot: &str, epoch: &str, action_id: &str, request_sha: &str, phase: &str, acknowledged: bool, receipt_json: Option<&str>, receipt_sha: Option<&str>) -> Value {
    let mut env = json!({ "schemaVersion": SCHEMA, "bootId": boot, "runtimeEpoch": epoch, "actionId": action_id, "requestSha256": request_sha, "settled": phase == "terminal", "phase": phase, "acknowledged": acknowledged });
    match (phase, receipt_json) {
        ("terminal", Some(t)) => {
            let r: Value = serde_json::from_str(t).unwrap_or(Value::Null);
            env["ok"] = r["ok"].clone();
            env["dispatched"] = r["dispatched"].clone();
            env["ambiguous"] = json!(false);
            if let Some(er) = r.get("error") {
                env["error"] = er.clone();
            }
            env["receiptJson"] = json!(t);
            env["receiptSha256"] = json!(receipt_sha);
        }
        _ => {
            env["ok"] = json!(false);
            env["dispatched"] = Value::Null;
            env["ambiguous"] = json!(true);
            env["error"] = json!("uia_action_pending");
        }
    }
    env
}

fn action_envelope(rt: &Runtime, a: &Action) -> Value {
    envelope(&rt.boot_id, &rt.epoch, &a.id, &a.request_sha, a.phase, a.acknowledged, a.receipt_json.as_deref(), a.receipt_sha.as_deref())
}

fn exact_keys(v: &Value, keys: &[&str]) -> bool {
    v.as_object().is_some_and(|o| o.len() == keys.len() && keys.iter().all(|k| o.contains_key(*k)))
}

/// Checks `requestJson`/`requestSha256` and the exact `aab.uia.execution.v1` request.
fn parse_request(rt: &Runtime, body: &Value) -> Result<(String, String, Value), OpErr> {
    let (Some(rj), Some(sha)) = (body.get("requestJson").and_then(Value::as_str), body.get("requestSha256").and_then(Value::as_str)) else {
        return Err(e("uia_invalid_request", "requestJson and requestSha256 (strings) are required"));
    };
    if rj.len() > MAX_REQUEST {
        return Err(e("uia_invalid_request", "requestJson larger than 32 KiB"));
    }
    let actual = sha256_hex(rj.as_bytes());
    if actual != sha {
        return Err(e("uia_request_sha256_mismatch", format!("sha256(requestJson) is {actual}")));
    }
    let r: Value = serde_json::from_str(rj).map_err(|x| e("uia_invalid_request", format!("requestJson: {x}")))?;
    let bad = |m: &str| Err(e("uia_invalid_request", m.to_string()));
    if !exact_keys(&r, &["schemaVersion", "bootId", "runtimeEpoch", "actionId", "timeoutMs", "target", "clickPolicy"]) {
        return bad("request keys must be exactly schemaVersion, bootId, runtimeEpoch, actionId, timeoutMs, target, clickPolicy");
    }
    if r["schemaVersion"] != SCHEMA {
        return bad("schemaVersion must be aab.uia.execution.v1");
    }
    let t = &r["target"];
    if !exact_keys(t, &["snapshotId", "ref", "selector"]) || !t["snapshotId"].is_string() || !t["ref"].is_string() {
        return bad("target must be exactly {snapshotId, ref, selector} with string ids");
    }
    let s = &t["selector"];
    if !exact_keys(s, &["kind", "value", "exact", "packageName"]) || !s["value"].is_string() || !s["exact"].is_boolean() || !(s["packageName"].is_string() || s["packageName"].is_null()) {
        return bad("selector must be exactly {kind, value (string), exact (bool), packageName (string|null)}");
    }
    if !["text", "contentDescription", "resourceName", "nodeRef"].contains(&s["kind"].as_str().unwrap_or("")) {
        return bad("selector.kind must be text|contentDescription|resourceName|nodeRef");
    }
    if !["exact_node", "nearest_clickable_ancestor"].contains(&r["clickPolicy"].as_str().unwrap_or("")) {
        return bad("clickPolicy must be exact_node|nearest_clickable_ancestor");
    }
    let id = r["actionId"].as_str().unwrap_or("");
    if id.is_empty() || id.chars().count() > 1024 {
        return bad("actionId must be a string of 1..1024 characters");
    }
    if !r["timeoutMs"].as_u64().is_some_and(|t| (1..=60_000).contains(&t)) {
        return bad("timeoutMs must be an integer in 1..60000");
    }
    if r["bootId"] != rt.boot_id.as_str() {
        return Err(e("uia_boot_id_mismatch", format!("this runtime runs on boot {}", rt.boot_id)));
    }
    if r["runtimeEpoch"] != rt.epoch.as_str() {
        return Err(e("uia_runtime_epoch_mismatch", format!("this runtime's epoch is {}", rt.epoch)));
    }
    Ok((rj.to_string(), sha.to_string(), r))
}

/// What a click does once admitted: the window, the action target's path and identity.
struct Plan {
    window_id: i64,
    path: Vec<usize>,
    ident: Value,
    r: String,
}

fn selector_matches(sel: &Value, node: &SNode) -> bool {
    let value = sel["value"].as_str().unwrap_or("");
    let exact = sel["exact"].as_bool().unwrap_or(true);
    if let Some(p) = sel["packageName"].as_str()
        && node.ident["packageName"] != p {
            return false;
        }
    let field = match sel["kind"].as_str().unwrap_or("") {
        "text" => node.ident["text"].as_str().unwrap_or(""),
        "contentDescription" => node.ident["contentDescription"].as_str().unwrap_or(""),
        "resourceName" => node.ident["resourceName"].as_str().unwrap_or(""),
        _ => return value == node.r,
    };
    if exact { field == value } else { field.to_lowercase().contains(&value.to_lowercase()) }
}

/// Admission: the snapshot is retained and live, the ref and selector agree, the
/// focused window and the node are the same when re-observed, the click policy finds a target.
fn admit(dev: &Device, st: &super::RtState, r: &Value, now: u64) -> Result<(Value, Plan), (OpErr, Option<Value>)> {
    let t = &r["target"];
    let sid = t["snapshotId"].as_str().unwrap_or("");
    let Some(snap) = st.snapshots.iter().find(|s| s.id == sid) else {
        return Err(if st.evicted.contains(sid) { (e("uia_snapshot_evicted", "the snapshot is older than the 8 retained ones"), None) } else { (e("uia_snapshot_not_found", "no snapshot with this id in this runtime"), None) });
    };
    if now > snap.expires {
        return Err((e("uia_snapshot_expired", format!("the snapshot expired at {} ms", snap.expires)), None));
    }
    let rf = t["ref"].as_str().unwrap_or("");
    let Some(&ni) = snap.by_ref.get(rf) else { return Err((e("uia_target_not_found", "no node with this ref in the snapshot"), None)) };
    let node = &snap.nodes[ni];
    if !selector_matches(&t["selector"], node) {
        return Err((e("uia_selector_mismatch", "the selector does not match the referenced node"), None));
    }
    let ph = dev.phone.lock().unwrap();
    let win = focused_window(&ph);
    drop(ph);
    let mut binding = json!({
        "snapshotId": sid, "ref": rf, "selector": t["selector"], "clickPolicy": r["clickPolicy"], "target": node.ident, "actionTarget": Value::Null,
        "window": snap.window, "warnings": [], "identityStrength": "same_connection_node_and_reobserved_attributes",
    });
    if win.id != snap.window_id {
        return Err((e("uia_window_changed", format!("the focused window is now {} ({})", win.id, win.title)), Some(binding)));
    }
    let current = node_at(&win.root, &node.path).map(|n| ident(n, &node.path, &win));
    if current.as_ref() != Some(&node.ident) {
        return Err((e("uia_target_changed", "the node is gone or its attributes changed since the snapshot"), Some(binding)));
    }
    let clickable = |p: &[usize]| node_at(&win.root, p).filter(|n| n.clickable && n.enabled);
    let path = match r["clickPolicy"].as_str() {
        Some("exact_node") => clickable(&node.path).map(|_| node.path.clone()),
        _ => (0..=node.path.len()).rev().map(|k| node.path[..k].to_vec()).find(|p| clickable(p).is_some()),
    };
    let Some(path) = path else { return Err((e("uia_target_not_clickable", "no enabled clickable node for the click policy"), Some(binding))) };
    let target = ident(node_at(&win.root, &path).unwrap(), &path, &win);
    binding["actionTarget"] = target.clone();
    Ok((binding, Plan { window_id: win.id, path, ident: target, r: rf.to_string() }))
}

/// The click itself: the same effect as a tap on that node.
fn perform(dev: &Arc<Device>, plan: &Plan) -> Result<Value, OpErr> {
    let mut ph = dev.phone.lock().unwrap();
    let win = focused_window(&ph);
    if win.id != plan.window_id {
        return Err(e("uia_window_changed", "the focused window changed before the click"));
    }
    let Some(node) = node_at(&win.root, &plan.path).filter(|n| ident(n, &plan.path, &win) == plan.ident).cloned() else {
        return Err(e("uia_target_changed", "the action target changed before the click"));
    };
    let effect = match win.owner {
        Owner::App(i) => crate::tools::tap_app_node(&mut ph, i, &node),
        Owner::Dialog => {
            let i = node.id.as_deref().and_then(|s| s.strip_prefix("button")).and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
            crate::system_dialog::answer(dev, &mut ph, i, "uia")
        }
        Owner::Launcher => {
            drop(ph);
            let (x, y) = ((node.bounds[0] + node.bounds[2]) / 2, (node.bounds[1] + node.bounds[3]) / 2);
            crate::tools::android_tap(dev, x, y);
            json!({ "launcherTap": [x, y] })
        }
    };
    Ok(json!({ "package": win.package, "text": node.text, "resourceName": node.resource_name, "className": node.class, "windowId": win.id, "effect": effect }))
}

fn action_op(dev: &Arc<Device>, rt: &Arc<Runtime>, op: &str, body: &Value) -> Result<Value, OpErr> {
    let (rj, sha, r) = parse_request(rt, body)?;
    let id = r["actionId"].as_str().unwrap().to_string();
    let now = elapsed(dev);
    let mut st = rt.st.lock().unwrap();
    if op == "prepare" {
        if let Some(a) = st.actions.get(&id) {
            return if a.request_sha == sha { Ok(action_envelope(rt, a)) } else { Err(e("uia_action_id_reused", "this actionId was prepared with another request")) };
        }
        if st.closing {
            return Err(e("uia_runtime_closing", "the runtime is stopping"));
        }
        if st.count >= CAPACITY {
            return Err(e("uia_action_capacity_exhausted", format!("{CAPACITY} actions per runtime epoch")));
        }
        let a = Action { id: id.clone(), request_json: rj, request_sha: sha, deadline_ms: now + r["timeoutMs"].as_u64().unwrap(), req: r, phase: "prepared", acknowledged: false, prepared_ms: now, interaction_id: uuid4(), receipt_json: None, receipt_sha: None };
        write_journal(dev, rt, &a);
        let env = action_envelope(rt, &a);
        st.count += 1;
        st.actions.insert(id, a);
        return Ok(env);
    }
    let Some(mut a) = st.actions.get(&id).cloned() else { return Err(e("uia_action_not_found", "no action with this actionId in this runtime epoch")) };
    if a.request_sha != sha {
        return Err(e("uia_action_id_reused", "this actionId was prepared with another request"));
    }
    if matches!(a.phase, "prepared" | "queued") && now > a.deadline_ms {
        settle_undispatched(dev, rt, &mut a, "before_admission", "uia_action_timeout", None);
    }
    match op {
        "cancel" if matches!(a.phase, "prepared" | "queued") => settle_undispatched(dev, rt, &mut a, "before_admission", "uia_action_cancelled", None),
        "acknowledge" => {
            let Some(rs) = body.get("receiptSha256").and_then(Value::as_str) else { return Err(e("uia_invalid_request", "receiptSha256 is required")) };
            if a.phase != "terminal" {
                st.actions.insert(id, a);
                return Err(e("uia_action_not_terminal", "only a terminal action can be acknowledged"));
            }
            if a.receipt_sha.as_deref() != Some(rs) {
                return Err(e("uia_receipt_sha256_mismatch", "receiptSha256 differs from the retained receipt"));
            }
            if !a.acknowledged {
                a.acknowledged = true;
                write_journal(dev, rt, &a);
            }
        }
        "start" if a.phase == "prepared" => {
            if st.closing {
                return Err(e("uia_runtime_closing", "the runtime is stopping"));
            }
            a.phase = "queued";
            write_journal(dev, rt, &a);
            match admit(dev, &st, &a.req, now) {
                Err(((code, _), binding)) => settle_undispatched(dev, rt, &mut a, "admission_rejected", code, binding),
                Ok((binding, plan)) => {
                    a.phase = "admitted";
                    write_journal(dev, rt, &a);
                    st.active = Some(id.clone());
                    spawn_click(dev.clone(), rt.clone(), a.clone(), binding, plan);
                }
            }
        }
        _ => {}
    }
    let env = action_envelope(rt, &a);
    st.actions.insert(id, a);
    Ok(env)
}

fn spawn_click(dev: Arc<Device>, rt: Arc<Runtime>, a: Action, binding: Value, plan: Plan) {
    let delay = dev.faults.lock().unwrap().uia_click_delay_ms;
    tokio::spawn(async move {
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        // A runtime that died meanwhile never clicks (its record stays `admitted`).
        if !rt.alive() {
            return;
        }
        let result = perform(&dev, &plan);
        if let Ok(fx) = &result {
            dev.record("uia-tap", json!({ "runtimeEpoch": rt.epoch, "actionId": a.id, "ref": plan.r, "package": fx["package"], "text": fx["text"], "resourceName": fx["resourceName"], "className": fx["className"], "windowId": fx["windowId"], "effect": fx["effect"] }));
        }
        let mut st = rt.st.lock().unwrap();
        if !st.alive {
            return;
        }
        let Some(cur) = st.actions.get_mut(&a.id) else { return };
        let ok = result.is_ok();
        let (t, s) = receipt(&rt.boot_id, &rt.epoch, &cur.id, &cur.request_sha, ok, ok, "original_callback", elapsed(&dev), Some(binding), Some(json!({ "interactionId": cur.interaction_id, "handled": ok })), result.as_ref().err().map(|x| x.0));
        cur.phase = "terminal";
        cur.receipt_json = Some(t);
        cur.receipt_sha = Some(s);
        let snapshot = cur.clone();
        if st.active.as_deref() == Some(a.id.as_str()) {
            st.active = None;
        }
        drop(st);
        write_journal(&dev, &rt, &snapshot);
    });
}

// ---- journal records (one-shot modes and the `acknowledge-record` op) ----

fn identity_fields(identity: &Value, keys: &[&str]) -> Result<Vec<String>, OpErr> {
    keys.iter().map(|k| identity.get(*k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| e("uia_invalid_identity", format!("identity needs string {k}")))).collect()
}

fn live_runtime(dev: &Device, epoch: &str) -> Option<Arc<Runtime>> {
    dev.uia.lock().unwrap().epochs.iter().find(|r| r.epoch == epoch && r.alive()).cloned()
}

/// Marks a terminal record acknowledged: `{ok, schemaVersion:"aab.uia.ack.v1", identity, disposition}`.
/// Identity: `{bootId, runtimeEpoch, actionId, requestSha256, receiptSha256}`.
pub fn acknowledge_record(dev: &Arc<Device>, root: &str, identity: &Value) -> Result<Value, OpErr> {
    let f = identity_fields(identity, &["bootId", "runtimeEpoch", "actionId", "requestSha256", "receiptSha256"])?;
    let (boot, epoch, id, req_sha, rec_sha) = (&f[0], &f[1], &f[2], &f[3], &f[4]);
    let done = |disposition: &str| json!({ "ok": true, "schemaVersion": "aab.uia.ack.v1", "identity": identity, "disposition": disposition });
    let check = |b: &str, rs: &str, phase: &str, receipt: Option<&str>| -> Result<(), OpErr> {
        if b != boot || rs != req_sha {
            return Err(e("uia_identity_mismatch", "the record has another bootId or requestSha256"));
        }
        if phase != "terminal" {
            return Err(e("uia_action_not_terminal", format!("the record is {phase}")));
        }
        if receipt != Some(rec_sha.as_str()) {
            return Err(e("uia_receipt_sha256_mismatch", "receiptSha256 differs from the record's receipt"));
        }
        Ok(())
    };
    if let Some(rt) = live_runtime(dev, epoch).filter(|r| r.root == root) {
        let mut st = rt.st.lock().unwrap();
        let Some(a) = st.actions.get_mut(id) else { return Ok(done("not_retained")) };
        check(&rt.boot_id, &a.request_sha, a.phase, a.receipt_sha.as_deref())?;
        a.acknowledged = true;
        let a = a.clone();
        drop(st);
        write_journal(dev, &rt, &a);
        return Ok(done("acknowledged"));
    }
    let path = record_path(dev, root, epoch, id);
    let Some(mut rec) = std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()) else { return Ok(done("not_retained")) };
    if rec["actionId"] != id.as_str() {
        return Ok(done("not_retained"));
    }
    check(rec["bootId"].as_str().unwrap_or(""), rec["requestSha256"].as_str().unwrap_or(""), rec["phase"].as_str().unwrap_or(""), rec["receiptSha256"].as_str())?;
    rec["acknowledged"] = json!(true);
    let _ = crate::rootfs::write_atomic(&path, serde_json::to_vec_pretty(&rec).unwrap().as_slice());
    Ok(done("acknowledged"))
}

/// Settles a record of an epoch whose runtime is gone. Identity `{bootId, runtimeEpoch, actionId, requestSha256}`.
/// `{ok, schemaVersion:"aab.uia.recover.v1", identity, disposition, phase, acknowledged, receiptJson?, receiptSha256?}`:
/// `recovered_before_admission` (it was prepared/queued: now terminal, never dispatched), `terminal`
/// (already settled), `unknown` (it was admitted when the runtime died: the click may have run), `not_retained`.
pub fn recover_record(dev: &Arc<Device>, root: &str, identity: &Value) -> Result<Value, OpErr> {
    let f = identity_fields(identity, &["bootId", "runtimeEpoch", "actionId", "requestSha256"])?;
    let (boot, epoch, id, req_sha) = (&f[0], &f[1], &f[2], &f[3]);
    if live_runtime(dev, epoch).is_some_and(|r| r.root == root) {
        return Err(e("uia_runtime_epoch_live", "this epoch's runtime still runs: query it"));
    }
    let done = |disposition: &str, rec: &Value| json!({ "ok": true, "schemaVersion": "aab.uia.recover.v1", "identity": identity, "disposition": disposition, "phase": rec.get("phase"), "acknowledged": rec.get("acknowledged"), "receiptJson": rec.get("receiptJson"), "receiptSha256": rec.get("receiptSha256") });
    let path = record_path(dev, root, epoch, id);
    let Some(mut rec) = std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()).filter(|r| r["actionId"] == id.as_str()) else {
        return Ok(done("not_retained", &json!({})));
    };
    if rec["bootId"] != boot.as_str() || rec["requestSha256"] != req_sha.as_str() {
        return Err(e("uia_identity_mismatch", "the record has another bootId or requestSha256"));
    }
    let disposition = match rec["phase"].as_str().unwrap_or("") {
        "terminal" => "terminal",
        "prepared" | "queued" => {
            let (t, s) = receipt(boot, epoch, id, req_sha, false, false, "recovered_before_admission", elapsed(dev), None, None, Some("uia_runtime_restarted"));
            rec["phase"] = json!("terminal");
            rec["receiptJson"] = json!(t);
            rec["receiptSha256"] = json!(s);
            "recovered_before_admission"
        }
        _ => {
            rec["phase"] = json!("unknown");
            "unknown"
        }
    };
    let _ = crate::rootfs::write_atomic(&path, serde_json::to_vec_pretty(&rec).unwrap().as_slice());
    let mut out = done(disposition, &rec);
    if disposition == "recovered_before_admission" || disposition == "terminal" {
        let r = &rec;
        out["envelope"] = envelope(boot, epoch, id, req_sha, "terminal", r["acknowledged"].as_bool().unwrap_or(false), r["receiptJson"].as_str(), r["receiptSha256"].as_str());
    }
    Ok(out)
}

// ---- dispatch ----

/// One op: (HTTP status, reply, what to do after the reply is written).
pub fn handle(dev: &Arc<Device>, rt: &Arc<Runtime>, op: &str, body: &Value) -> (u16, Value, Option<After>) {
    if !rt.alive() {
        return (200, err_value(e("uia_runtime_stopped", "the runtime has stopped")), None);
    }
    let r = match op {
        "status" => {
            let st = rt.st.lock().unwrap();
            let pending = st.actions.values().filter(|a| a.phase != "terminal").count();
            let acked = st.actions.values().filter(|a| a.acknowledged).count();
            Ok(json!({ "ok": true, "schemaVersion": SCHEMA, "bootId": rt.boot_id, "runtimeEpoch": rt.epoch, "dexSha256": rt.dex_sha, "capacity": CAPACITY, "count": st.count, "pending": pending, "acknowledged": acked, "closing": st.closing, "activeActionId": st.active }))
        }
        "observe" => {
            if rt.st.lock().unwrap().closing { Err(e("uia_runtime_closing", "the runtime is stopping")) } else { observe(dev, rt) }
        }
        "stop" => {
            let mut st = rt.st.lock().unwrap();
            let open: Vec<String> = st.actions.values().filter(|a| a.phase != "terminal" || !a.acknowledged).map(|a| a.id.clone()).collect();
            if !open.is_empty() {
                Err(e("uia_runtime_has_pending_actions", format!("{} action(s) not terminal and acknowledged", open.len())))
            } else {
                st.closing = true;
                drop(st);
                let (d, r) = (dev.clone(), rt.clone());
                return (200, json!({ "ok": true, "runtimeEpoch": rt.epoch, "stopping": true }), Some(Box::new(move || super::end_runtime(&d, &r, "stop"))));
            }
        }
        "prepare" if std::mem::take(&mut dev.faults.lock().unwrap().uia_restart_after_prepare) => {
            // The process dies right after answering prepare: the action is in the old
            // epoch's journal, prepared, never admitted.
            let r = action_op(dev, rt, op, body);
            let (d, x) = (dev.clone(), rt.clone());
            dev.record("fault", json!({ "kind": "uia-restart-after-prepare", "runtimeEpoch": rt.epoch }));
            return match r {
                Ok(v) => (200, v, Some(Box::new(move || { let _ = super::restart(&d, &x); }))),
                Err(x) => (200, err_value(x), None),
            };
        }
        "prepare" | "start" | "query" | "cancel" | "acknowledge" => action_op(dev, rt, op, body),
        "acknowledge-record" => match body.get("identity").filter(|i| i.is_object()) {
            Some(i) => acknowledge_record(dev, &rt.root, i),
            None => Err(e("uia_invalid_identity", "identity (object) is required")),
        },
        other => return (400, json!({ "ok": false, "error": "uia_unknown_op", "message": format!("unknown op {other:?}") }), None),
    };
    match r {
        Ok(v) => (200, v, None),
        Err(x) => (200, err_value(x), None),
    }
}
