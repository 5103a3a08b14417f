//! Managed execution of the iOS SDK (protocols §4.5): ONE admission slot per
//! process shared by H5 and Flutter actions, permission before the first
//! mutation (a stop before it settles at once with `dispatched:false`; after
//! it only the task's own end settles, the stop forcing `ok:false`), timeouts
//! with the 1500 ms cleanup grace and the ambiguous pending reply, cancel,
//! and the durable `aab.ios-completion/v1` store in the app's data container:
//! a completion is appended (and synced) BEFORE the settled reply, so it is
//! found again after a relaunch, paged ≤64 records / 2 MiB with an opaque
//! base64 cursor that keeps its fixed upper bound.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::device::Device;
use crate::util::{b64, now_ms, sha256_hex, unb64};

pub const GRACE: Duration = Duration::from_millis(1500);
const COMPLETION_SCHEMA: &str = "aab.ios-completion/v1";
const MAX_RESULT: usize = 64 * 1024;
const MAX_RECORD: usize = 128 * 1024;
const PAGE_RECORDS: usize = 64;
const PAGE_BYTES: usize = 2 * 1024 * 1024;
const MAX_CURSOR: usize = 2048;
/// The store file is read whole per page; a bound keeps a damaged store from exhausting memory.
const MAX_STORE: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
pub enum Outcome {
    Pending,
    Settled(Value),
    /// The process died with the action: no reply ever comes.
    Gone,
}

#[derive(Default)]
struct ActState {
    permitted: bool,
    stop: Option<String>,
    persisting: bool,
    persistence_failed: bool,
}

pub struct Active {
    pub kind: &'static str,
    pub action_id: String,
    pub epoch: String,
    st: Mutex<ActState>,
    outcome: watch::Sender<Outcome>,
}

#[derive(Default)]
struct SlotState {
    active: Option<Arc<Active>>,
    /// (kind, actionId, epoch) of every action this process settled.
    finished: HashSet<(String, String, String)>,
}

/// The admission slot of one process.
#[derive(Default)]
pub struct Slot {
    st: Mutex<SlotState>,
}

pub fn schema(kind: &str) -> String {
    format!("aab.{kind}-execution/v1")
}

/// The rejection shape before admission (no `execution` member: proof of non-dispatch).
pub fn reject(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("iOS execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

/// Validates `execution` = exactly `{schemaVersion, actionId, runtimeEpoch, timeoutMs}`; the timeout.
pub fn check_envelope(kind: &str, req: &Map<String, Value>) -> Result<(String, String, u64), Value> {
    let bad = || reject(&format!("invalid_{kind}_execution"));
    let action_id = req.get("actionId").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 256).ok_or_else(bad)?;
    let e = req.get("execution").and_then(Value::as_object).ok_or_else(bad)?;
    let keys_ok = e.len() == 4 && ["schemaVersion", "actionId", "runtimeEpoch", "timeoutMs"].iter().all(|k| e.contains_key(*k));
    if !keys_ok || e["schemaVersion"] != schema(kind).as_str() || e["actionId"] != action_id {
        return Err(bad());
    }
    let epoch = e["runtimeEpoch"].as_str().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let timeout = e["timeoutMs"].as_u64().filter(|t| (1..=2147483647).contains(t)).ok_or_else(bad)?;
    Ok((action_id.to_string(), epoch.to_string(), timeout))
}

impl Slot {
    pub fn active_json(&self) -> Value {
        let st = self.st.lock().unwrap();
        match &st.active {
            Some(a) => {
                let s = a.st.lock().unwrap();
                json!({ "schemaVersion": schema(a.kind), "actionId": a.action_id, "runtimeEpoch": a.epoch, "kind": a.kind, "settled": false, "permissionIssued": s.permitted, "stopReason": s.stop, "persisting": s.persisting, "persistenceFailed": s.persistence_failed })
            }
            None => Value::Null,
        }
    }

    /// Admission: busy, id reuse (this process or the durable store), then the slot.
    pub fn admit(self: &Arc<Self>, kind: &'static str, action_id: &str, epoch: &str, store: &Path, timeout_ms: u64) -> Result<Arc<Active>, Value> {
        let mut st = self.st.lock().unwrap();
        if st.active.is_some() {
            return Err(reject("ios_action_busy"));
        }
        if st.finished.contains(&(kind.to_string(), action_id.to_string(), epoch.to_string())) || find(store, kind, action_id, epoch).ok().flatten().is_some() {
            return Err(reject("ios_action_id_reused"));
        }
        let a = Arc::new(Active { kind, action_id: action_id.into(), epoch: epoch.into(), st: Mutex::new(ActState::default()), outcome: watch::Sender::new(Outcome::Pending) });
        st.active = Some(a.clone());
        drop(st);
        let timer = a.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
            timer.stop(&format!("{kind}_action_timeout"));
        });
        Ok(a)
    }

    /// The process died: its action never completes (connections close without a reply).
    pub fn gone(&self) {
        if let Some(a) = self.st.lock().unwrap().active.take() {
            a.outcome.send_replace(Outcome::Gone);
        }
    }

    fn active(&self) -> Option<Arc<Active>> {
        self.st.lock().unwrap().active.clone()
    }
}

impl Active {
    /// Stops the action (timeout, cancel): a task that has not asked for its
    /// permission yet ends undispatched; a permitted one runs to its end.
    pub fn stop(&self, reason: &str) {
        let mut st = self.st.lock().unwrap();
        if st.stop.is_none() {
            st.stop = Some(reason.to_string());
        }
    }

    /// A queued wait before permission that a stop cuts short.
    pub async fn queue(&self, d: Duration) {
        let end = tokio::time::Instant::now() + d;
        while tokio::time::Instant::now() < end && self.stop_reason().is_none() {
            tokio::time::sleep(Duration::from_millis(10).min(end - tokio::time::Instant::now())).await;
        }
    }

    /// Permission for the first mutation; Err(stop reason) if stopped before.
    pub fn permit(&self) -> Result<(), String> {
        let mut st = self.st.lock().unwrap();
        if let Some(r) = &st.stop {
            return Err(r.clone());
        }
        st.permitted = true;
        Ok(())
    }

    pub fn stop_reason(&self) -> Option<String> {
        self.st.lock().unwrap().stop.clone()
    }

    /// Waits up to `limit` for the outcome.
    pub async fn wait(&self, limit: Duration) -> Outcome {
        let mut rx = self.outcome.subscribe();
        match tokio::time::timeout(limit, rx.wait_for(|o| !matches!(o, Outcome::Pending))).await {
            Ok(Ok(o)) => o.clone(),
            _ => Outcome::Pending,
        }
    }

    /// The reply of the action route: the settled receipt, or after timeout + grace the pending reply.
    pub async fn reply(&self, timeout_ms: u64) -> Option<Value> {
        match self.wait(Duration::from_millis(timeout_ms) + GRACE).await {
            Outcome::Settled(v) => Some(v),
            Outcome::Gone => None,
            Outcome::Pending => {
                let st = self.st.lock().unwrap();
                let reason = if st.persistence_failed { "ios_completion_persistence_failed".to_string() } else { st.stop.clone().unwrap_or_else(|| format!("{}_action_timeout", self.kind)) };
                Some(json!({ "schemaVersion": schema(self.kind), "actionId": self.action_id, "runtimeEpoch": self.epoch, "ok": false, "error": reason, "dispatched": null, "ambiguous": true, "settled": false }))
            }
        }
    }
}

/// Run an admitted action's `task` in the background — it settles the slot
/// whatever happens to the reply — and answer the action route with the settled
/// receipt (or the pending reply). The `dropNextActionReply` fault loses a
/// settled reply here: the action ran and its completion is stored, only the
/// answer never leaves (`None`: the connection closes unanswered). H5 and Flutter
/// share this, as they share the SDK's one slot.
pub async fn run_admitted(dev: &Arc<Device>, bundle: &str, slot: &Arc<Slot>, active: &Arc<Active>, timeout_ms: u64, task: impl std::future::Future<Output = Value> + Send + 'static) -> Option<(u16, Value)> {
    {
        let (dev, bundle, slot, active) = (dev.clone(), bundle.to_string(), slot.clone(), active.clone());
        tokio::spawn(async move {
            let result = task.await;
            settle(&dev, &bundle, &slot, &active, result);
        });
    }
    let reply = active.reply(timeout_ms).await?;
    if reply["settled"] == true && std::mem::take(&mut dev.faults.lock().unwrap().drop_next_action_reply) {
        dev.record("fault", json!({ "kind": "action-reply-lost", "bundleId": bundle, "actionId": reply["actionId"] }));
        return None;
    }
    Some((200, reply))
}

/// The task ended with `result`: the terminal receipt is built, persisted (unless
/// the `loseCompletion` fault), the slot released, and waiters woken.
pub fn settle(dev: &Device, bundle: &str, slot: &Slot, a: &Arc<Active>, mut result: Value) {
    let stop = a.stop_reason();
    if let Some(reason) = &stop
        && result["ok"] == true
    {
        result["ok"] = json!(false);
        result["error"] = json!(reason);
    }
    if result["ok"] != true && result["error"].as_str().is_none_or(str::is_empty) {
        result["error"] = json!(stop.unwrap_or_else(|| format!("{}_action_failed", a.kind)));
    }
    if result["ok"] == true {
        result["ambiguous"] = json!(false);
    }
    for k in ["dispatched", "ambiguous"] {
        if !result[k].is_boolean() && !result[k].is_null() {
            result[k] = json!(false);
        }
    }
    result["actionId"] = json!(a.action_id);
    result["runtimeEpoch"] = json!(a.epoch);
    result["settled"] = json!(true);
    result["execution"] = json!({ "schemaVersion": schema(a.kind), "actionId": a.action_id, "runtimeEpoch": a.epoch, "settled": true });
    if result.to_string().len() > MAX_RESULT {
        result = json!({
            "ok": false, "error": "ios_action_result_too_large", "message": format!("the action result exceeds {MAX_RESULT} bytes"),
            "dispatched": result["dispatched"].clone(), "ambiguous": result["ambiguous"].clone(),
            "actionId": a.action_id, "runtimeEpoch": a.epoch, "settled": true, "execution": result["execution"].clone(),
        });
    }
    a.st.lock().unwrap().persisting = true;
    let lose = std::mem::take(&mut dev.faults.lock().unwrap().lose_completion);
    let store = {
        let st = dev.st.lock().unwrap();
        st.apps.get(bundle).map(|app| store_path(&app.container))
    };
    let persisted = if lose {
        dev.record("fault", json!({ "kind": "completion-lost", "bundleId": bundle, "actionId": a.action_id }));
        Ok(0)
    } else {
        match &store {
            Some(p) => append(p, &json!({ "schema": COMPLETION_SCHEMA, "targetKey": bundle, "kind": a.kind, "executionResult": result })),
            None => Err("the app is not installed".to_string()),
        }
    };
    match persisted {
        Ok(seq) => {
            {
                let mut st = dev.st.lock().unwrap();
                if let Some(app) = st.apps.get_mut(bundle) {
                    let epoch = app.process.as_ref().map(|p| p.epoch.clone()).unwrap_or_default();
                    app.capture.append("events", &epoch, json!({ "category": "interaction", "name": format!("{}.action.settled", a.kind), "actionId": a.action_id, "source": "sdk", "data": { "execution": result["execution"], "ok": result["ok"], "dispatched": result["dispatched"], "ambiguous": result["ambiguous"], "error": result.get("error") } }));
                }
            }
            dev.record("completion", json!({ "bundleId": bundle, "kind": a.kind, "actionId": a.action_id, "runtimeEpoch": a.epoch, "sequence": seq, "persisted": !lose, "ok": result["ok"], "dispatched": result["dispatched"] }));
            let mut s = slot.st.lock().unwrap();
            s.finished.insert((a.kind.to_string(), a.action_id.clone(), a.epoch.clone()));
            if s.active.as_ref().is_some_and(|x| Arc::ptr_eq(x, a)) {
                s.active = None;
            }
            drop(s);
            a.st.lock().unwrap().persisting = false;
            a.outcome.send_replace(Outcome::Settled(result));
        }
        Err(e) => {
            // Admission stays closed: the completion cannot be proven.
            let mut st = a.st.lock().unwrap();
            st.persisting = false;
            st.persistence_failed = true;
            dev.record("completion-persistence-failed", json!({ "bundleId": bundle, "actionId": a.action_id, "error": e }));
        }
    }
}

/// `POST /v1/<kind>/cancel` with `{actionId, runtimeEpoch}`.
pub async fn cancel(slot: &Slot, store: &Path, kind: &'static str, body: &[u8]) -> Value {
    let req = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) if m.len() == 2 && m.get("actionId").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) && m.get("runtimeEpoch").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) => m,
        _ => return reject("invalid_ios_execution"),
    };
    let (id, epoch) = (req["actionId"].as_str().unwrap_or(""), req["runtimeEpoch"].as_str().unwrap_or(""));
    if let Some(a) = slot.active().filter(|a| a.kind == kind && a.action_id == id && a.epoch == epoch) {
        a.stop(&format!("{kind}_action_cancelled"));
        return match a.wait(GRACE).await {
            Outcome::Settled(v) => json!({ "ok": true, "actionId": id, "runtimeEpoch": epoch, "executionResult": v }),
            _ => json!({ "ok": false, "error": "ios_action_cancel_pending", "message": "the action is still running; its completion is not known yet", "actionId": id, "runtimeEpoch": epoch, "dispatched": null, "ambiguous": true, "settled": false }),
        };
    }
    match find(store, kind, id, epoch) {
        Ok(Some((_, _, record))) => json!({ "ok": true, "actionId": id, "runtimeEpoch": epoch, "executionResult": record["executionResult"] }),
        Ok(None) => json!({ "ok": false, "error": "ios_action_not_active", "message": "no active action and no durable completion with this identity", "actionId": id, "runtimeEpoch": epoch, "dispatched": null, "ambiguous": true }),
        Err(e) => json!({ "ok": false, "error": "ios_completion_read_failed", "message": e, "dispatched": null, "ambiguous": true }),
    }
}

// ------------------------------------------------------------------ the durable store

pub fn store_path(container: &Path) -> PathBuf {
    container.join("Library/Application Support/ai_app_bridge/actions/completions.log")
}

/// (sequence, sha256, record) of every committed line, oldest first.
fn read_all(store: &Path) -> Result<Vec<(u64, String, Value)>, String> {
    let meta = match std::fs::metadata(store) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e.to_string()),
    };
    if meta.len() > MAX_STORE {
        return Err("the completion store exceeds its read bound".into());
    }
    let text = std::fs::read_to_string(store).map_err(|e| e.to_string())?;
    let mut out = vec![];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // A torn final line (a crash mid-append) is not a committed record.
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let (Some(seq), Some(sha)) = (v["sequence"].as_u64(), v["sha256"].as_str()) else { continue };
        let record = v["record"].clone();
        if sha256_hex(record.to_string().as_bytes()) != sha {
            continue;
        }
        out.push((seq, sha.to_string(), record));
    }
    Ok(out)
}

fn append(store: &Path, record: &Value) -> Result<u64, String> {
    let text = record.to_string();
    if text.len() > MAX_RECORD {
        return Err("the completion record exceeds 128 KiB".into());
    }
    let seq = read_all(store)?.last().map(|r| r.0).unwrap_or(0) + 1;
    if let Some(dir) = store.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let line = json!({ "sequence": seq, "sha256": sha256_hex(text.as_bytes()), "committedAtMs": now_ms(), "record": record });
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(store).map_err(|e| e.to_string())?;
    f.write_all(format!("{line}\n").as_bytes()).map_err(|e| e.to_string())?;
    f.sync_data().map_err(|e| e.to_string())?;
    Ok(seq)
}

fn matches(record: &Value, kind: &str, id: &str, epoch: &str) -> bool {
    record["schema"] == COMPLETION_SCHEMA && record["kind"] == kind && record["executionResult"]["actionId"] == id && record["executionResult"]["runtimeEpoch"] == epoch
}

fn find(store: &Path, kind: &str, id: &str, epoch: &str) -> Result<Option<(u64, String, Value)>, String> {
    Ok(read_all(store)?.into_iter().find(|r| matches(&r.2, kind, id, epoch)))
}

fn result_error(code: &str, message: &str) -> Value {
    json!({ "ok": false, "error": code, "message": message, "dispatched": false, "ambiguous": false })
}

/// `GET /v1/execution/result?kind=&actionId=&runtimeEpoch=[&cursor=]`.
pub fn result_page(store: &Path, params: &[(String, String)], page_records: Option<usize>) -> Value {
    let mut q = std::collections::HashMap::new();
    for (k, v) in params {
        if !["kind", "actionId", "runtimeEpoch", "cursor"].contains(&k.as_str()) || q.insert(k.as_str(), v.as_str()).is_some() {
            return result_error("invalid_ios_completion_query", &format!("unexpected or repeated parameter {k:?}"));
        }
    }
    let kind = q.get("kind").copied().unwrap_or("");
    let id = q.get("actionId").copied().unwrap_or("");
    let epoch = q.get("runtimeEpoch").copied().unwrap_or("");
    if !["h5", "flutter"].contains(&kind) || id.is_empty() || id.len() > 256 || epoch.is_empty() || epoch.len() > 256 {
        return result_error("invalid_ios_completion_query", "kind (h5|flutter), actionId and runtimeEpoch are required");
    }
    let all = match read_all(store) {
        Ok(a) => a,
        Err(e) => return result_error("ios_completion_read_failed", &e),
    };
    let last = all.last().map(|r| r.0).unwrap_or(0);
    let (mut next, through) = match q.get("cursor") {
        None => (1, last),
        Some(c) => {
            let parsed = (c.len() <= MAX_CURSOR).then(|| unb64(c)).flatten().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let Some(cur) = parsed.filter(|v| v["v"] == 1 && v["kind"] == kind && v["actionId"] == id && v["runtimeEpoch"] == epoch) else {
                return result_error("invalid_ios_completion_cursor", "the cursor is not one this store issued for this query");
            };
            let (Some(n), Some(t)) = (cur["next"].as_u64(), cur["through"].as_u64()) else { return result_error("invalid_ios_completion_cursor", "the cursor lacks its positions") };
            if t > last {
                return result_error("invalid_ios_completion_cursor", "the cursor's upper bound is beyond the committed store");
            }
            if n == 0 || n > t + 1 {
                return result_error("ios_completion_cursor_stalled", "the cursor cannot advance");
            }
            (n, t)
        }
    };
    let (mut count, mut bytes) = (0usize, 0usize);
    let max_records = page_records.unwrap_or(PAGE_RECORDS).clamp(1, PAGE_RECORDS);
    let start = next;
    for (seq, sha, record) in all.iter().filter(|r| r.0 >= start && r.0 <= through) {
        if count >= max_records || bytes >= PAGE_BYTES {
            break;
        }
        count += 1;
        bytes += record.to_string().len();
        next = seq + 1;
        if matches(record, kind, id, epoch) {
            return json!({ "ok": true, "found": true, "actionId": id, "runtimeEpoch": epoch, "executionResult": record["executionResult"], "receipt": { "sequence": seq, "sha256": sha, "committed": true } });
        }
    }
    if count == 0 {
        next = through + 1;
    }
    let has_more = next <= through;
    let cursor = has_more.then(|| b64(json!({ "v": 1, "kind": kind, "actionId": id, "runtimeEpoch": epoch, "next": next, "through": through }).to_string().as_bytes()));
    json!({ "ok": true, "found": false, "settled": false, "hasMore": has_more, "nextSequence": next, "throughSequence": through, "nextCursor": cursor })
}
