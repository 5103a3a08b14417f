//! The Runner's one managed admission slot (protocols §5.4, seed "iOS WDA
//! execution and recovery"): admission (`ios_wda_action_busy`,
//! `ios_wda_action_id_reused`), the action deadline (`ios_wda_action_timeout`),
//! cancellation, the settled result persisted BEFORE it is published, and the
//! pending reply after the 1500 ms grace. The slot is released only by a
//! persisted settlement: a lost XCTest callback keeps it occupied, and a failed
//! store write keeps admission closed until a cancel stores the same result.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::action::{ActionRequest, EXECUTION_SCHEMA};
use super::binding::Rejection;
use super::ops::{self, Outcome};
use super::store::{COMPLETION_SCHEMA, Scope};
use super::{Shared, ids};

/// Cleanup grace past a deadline before the reply becomes pending (ambiguous).
pub const GRACE: Duration = Duration::from_millis(1500);
const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Where an admitted action is, as its waiters see it.
#[derive(Clone, Debug)]
pub enum Phase {
    Running,
    /// Settled and persisted (or deliberately lost by the `wdaLoseCompletion` fault).
    Settled(Value),
    /// Settled, but the store write failed; admission stays closed.
    PersistenceFailed,
}

pub struct Active {
    pub request: ActionRequest,
    pub epoch: String,
    pub runner_bundle_id: String,
    admitted_at: Instant,
    pub permission_issued: AtomicBool,
    persistence_pending: AtomicBool,
    /// The completion a failed store write left behind, for a cancel to retry.
    unpersisted: Mutex<Option<Value>>,
    stop: watch::Sender<Option<&'static str>>,
    phase: watch::Sender<Phase>,
}

impl Active {
    pub fn operation(&self) -> &'static str {
        self.request.operation.name()
    }

    pub fn stop_reason(&self) -> Option<&'static str> {
        *self.stop.borrow()
    }

    /// The first stop wins (a cancel after a timeout keeps the timeout).
    fn request_stop(&self, reason: &'static str) {
        self.stop.send_if_modified(|s| {
            let first = s.is_none();
            if first {
                *s = Some(reason);
            }
            first
        });
    }

    pub fn stop_watch(&self) -> watch::Receiver<Option<&'static str>> {
        self.stop.subscribe()
    }

    /// `execution.target`: the request target plus the Runner and the operation.
    pub fn execution_target(&self) -> Value {
        let mut t = self.request.target.to_json();
        t["runnerBundleId"] = json!(self.runner_bundle_id);
        t["operation"] = json!(self.operation());
        t
    }

    fn status_json(&self) -> Value {
        json!({
            "identity": { "schemaVersion": EXECUTION_SCHEMA, "actionId": self.request.action_id, "runtimeEpoch": self.epoch },
            "target": self.execution_target(),
            "permissionIssued": self.permission_issued.load(Ordering::SeqCst),
            "persistencePending": self.persistence_pending.load(Ordering::SeqCst),
            "stopReason": self.stop_reason(),
        })
    }

    fn pending(&self, error: &str) -> Value {
        json!({
            "schemaVersion": EXECUTION_SCHEMA,
            "actionId": self.request.action_id,
            "runtimeEpoch": self.epoch,
            "ok": false,
            "error": error,
            "settled": false,
            "dispatched": null,
            "ambiguous": true,
        })
    }

    async fn wait(&self, deadline: Instant) -> Option<Phase> {
        let mut rx = self.phase.subscribe();
        match tokio::time::timeout_at(deadline, rx.wait_for(|p| !matches!(p, Phase::Running))).await {
            Ok(Ok(p)) => Some(p.clone()),
            _ => None,
        }
    }
}

#[derive(Default)]
struct SlotInner {
    active: Option<Arc<Active>>,
    /// Action ids admitted by this Runner process (its epoch), settled or not.
    used: HashSet<String>,
    completions: u64,
    tasks: Vec<AbortHandle>,
}

#[derive(Default)]
pub struct Slot {
    inner: Mutex<SlotInner>,
}

impl Slot {
    /// `(active status or null, settled-action count)` for `/aab/status` and `state`.
    pub fn snapshot(&self) -> (Value, u64) {
        let g = self.inner.lock().unwrap();
        (g.active.as_ref().map_or(Value::Null, |a| a.status_json()), g.completions)
    }

    pub fn active(&self) -> Option<Arc<Active>> {
        self.inner.lock().unwrap().active.clone()
    }

    /// The Runner process is going away: its action never completes.
    pub fn abort_tasks(&self) {
        for t in self.inner.lock().unwrap().tasks.drain(..) {
            t.abort();
        }
    }
}

/// What the action route answers: the reply value, and whether the
/// `wdaDropNextActionReply` fault claimed this action's reply.
pub struct Submitted {
    pub value: Value,
    pub drop_reply: bool,
}

/// Admits `request`, runs it and waits for its settlement (or the pending reply).
pub async fn submit(shared: &Arc<Shared>, request: ActionRequest) -> Result<Submitted, Rejection> {
    if !shared.store.available() {
        return Err(Rejection::new("ios_wda_completion_store_unavailable", "the completion store cannot be opened; no action is admitted"));
    }
    let (active, drop_reply) = {
        let mut g = shared.slot.inner.lock().unwrap();
        if g.used.contains(&request.action_id) {
            return Err(Rejection::new("ios_wda_action_id_reused", format!("action {} was already admitted by this Runner", request.action_id)));
        }
        if let Some(a) = &g.active {
            return Err(Rejection::new("ios_wda_action_busy", format!("action {} ({}) holds the admission slot", a.request.action_id, a.operation())));
        }
        let active = Arc::new(Active {
            epoch: shared.epoch.clone(),
            runner_bundle_id: shared.cfg.runner_bundle_id.clone(),
            admitted_at: Instant::now(),
            permission_issued: AtomicBool::new(false),
            persistence_pending: AtomicBool::new(false),
            unpersisted: Mutex::new(None),
            stop: watch::channel(None).0,
            phase: watch::channel(Phase::Running).0,
            request,
        });
        g.used.insert(active.request.action_id.clone());
        g.active = Some(active.clone());
        let drop_reply = shared.faults.lock().unwrap().take_drop_reply();
        let run = tokio::spawn(run(shared.clone(), active.clone()));
        let deadline = active.admitted_at + Duration::from_millis(active.request.timeout_ms);
        let timed = active.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            timed.request_stop("ios_wda_action_timeout");
        });
        g.tasks = vec![run.abort_handle(), timer.abort_handle()];
        (active, drop_reply)
    };
    let deadline = active.admitted_at + Duration::from_millis(active.request.timeout_ms) + GRACE;
    let value = match active.wait(deadline).await {
        Some(Phase::Settled(result)) => result,
        Some(Phase::PersistenceFailed) => active.pending("ios_wda_completion_store_unavailable"),
        _ => active.pending(active.stop_reason().unwrap_or("ios_wda_action_timeout")),
    };
    Ok(Submitted { value, drop_reply })
}

async fn run(shared: Arc<Shared>, active: Arc<Active>) {
    // `None`: the event's completion never came back (the screen panicked); the
    // action stays unresolved and keeps the slot, as a lost XCTest callback does.
    let Some(outcome) = ops::execute(&shared, &active).await else { return };
    let result = settled_result(&active, outcome);
    let completion = json!({ "schemaVersion": COMPLETION_SCHEMA, "runnerBundleId": active.runner_bundle_id, "executionResult": result });
    if shared.faults().lose_completion {
        shared.screen.record(json!({ "source": "wda", "event": "completion-lost", "actionId": active.request.action_id, "operation": active.operation(), "runnerEpoch": active.epoch }));
        release(&shared, &active, result);
        return;
    }
    match persist(&shared, completion.clone()).await {
        Ok(()) => release(&shared, &active, result),
        Err(_) => {
            *active.unpersisted.lock().unwrap() = Some(completion);
            active.persistence_pending.store(true, Ordering::SeqCst);
            active.phase.send_replace(Phase::PersistenceFailed);
        }
    }
}

async fn persist(shared: &Arc<Shared>, completion: Value) -> Result<(), String> {
    let s = shared.clone();
    match tokio::task::spawn_blocking(move || s.store.append(&completion)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(e.to_string()),
    }
}

/// Frees the slot, THEN publishes: a caller that sees the reply can admit the next action.
fn release(shared: &Shared, active: &Arc<Active>, result: Value) {
    {
        let mut g = shared.slot.inner.lock().unwrap();
        if g.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, active)) {
            g.active = None;
            g.completions += 1;
            for t in g.tasks.drain(..) {
                // Only the timer can still be running; the run task is this one.
                t.abort();
            }
        }
    }
    active.persistence_pending.store(false, Ordering::SeqCst);
    active.phase.send_replace(Phase::Settled(result));
}

/// The terminal result: the outcome, the identity and `execution` (§5.4). A stop
/// (timeout or cancel) forces `ok:false` with the stop reason.
fn settled_result(active: &Active, outcome: Outcome) -> Value {
    let stop = active.stop_reason();
    let (ok, error, message) = match (outcome.ok, stop) {
        (true, None) => (true, None, None),
        (true, Some(reason)) => (false, Some(reason), Some(format!("the action was stopped ({reason}) while its last event was in flight"))),
        (false, _) => (false, outcome.error, outcome.message),
    };
    let mut r = Map::new();
    r.insert("ok".into(), json!(ok));
    if !ok {
        r.insert("error".into(), json!(error.unwrap_or("ios_wda_event_failed")));
        r.insert("message".into(), json!(message.unwrap_or_default()));
    }
    r.insert("dispatched".into(), json!(outcome.dispatched));
    r.insert("ambiguous".into(), json!(false));
    r.insert("actionId".into(), json!(active.request.action_id));
    r.insert("runtimeEpoch".into(), json!(active.epoch));
    r.insert("settled".into(), json!(true));
    r.insert("operation".into(), json!(active.operation()));
    if let Some(v) = outcome.value {
        r.insert("value".into(), v);
    }
    r.insert(
        "execution".into(),
        json!({ "schemaVersion": EXECUTION_SCHEMA, "actionId": active.request.action_id, "runtimeEpoch": active.epoch, "settled": true, "target": active.execution_target() }),
    );
    let mut result = Value::Object(r);
    if result.to_string().len() > MAX_RESULT_BYTES {
        result.as_object_mut().map(|m| m.remove("value"));
        result["ok"] = json!(false);
        result["error"] = json!("ios_wda_action_result_too_large");
        result["message"] = json!("the action result is larger than 64 KiB; its value was dropped");
    }
    result
}

/// `POST /aab/execution/cancel` with body exactly `{actionId, runtimeEpoch}`.
pub async fn cancel(shared: &Arc<Shared>, body: &Value) -> Result<Value, Rejection> {
    let invalid = |m: &str| Rejection::new("invalid_ios_wda_execution", m.to_string());
    let obj = body.as_object().ok_or_else(|| invalid("the cancel body must be an object"))?;
    if obj.len() != 2 {
        return Err(invalid("the cancel body must be exactly {actionId, runtimeEpoch}"));
    }
    let action_id = obj.get("actionId").and_then(Value::as_str).filter(|s| ids::valid_token(s)).ok_or_else(|| invalid("actionId must be an action id"))?;
    let epoch = obj.get("runtimeEpoch").and_then(Value::as_str).filter(|s| ids::valid_epoch(s)).ok_or_else(|| invalid("runtimeEpoch must be a runtime epoch"))?;
    let answer = |result: Value| json!({ "ok": true, "actionId": action_id, "runtimeEpoch": epoch, "executionResult": result });

    if let Some(active) = shared.slot.active().filter(|a| a.request.action_id == action_id && a.epoch == epoch) {
        if active.persistence_pending.load(Ordering::SeqCst) {
            // Retry storing the SAME finished result; its events are never replayed.
            let Some(completion) = active.unpersisted.lock().unwrap().take() else { return Ok(active.pending("ios_wda_action_cancel_pending")) };
            return match persist(shared, completion.clone()).await {
                Ok(()) => {
                    let result = completion["executionResult"].clone();
                    release(shared, &active, result.clone());
                    Ok(answer(result))
                }
                Err(_) => {
                    *active.unpersisted.lock().unwrap() = Some(completion);
                    Ok(active.pending("ios_wda_completion_store_unavailable"))
                }
            };
        }
        active.request_stop("ios_wda_action_cancelled");
        return Ok(match active.wait(Instant::now() + GRACE).await {
            Some(Phase::Settled(result)) => answer(result),
            Some(Phase::PersistenceFailed) => active.pending("ios_wda_completion_store_unavailable"),
            _ => active.pending("ios_wda_action_cancel_pending"),
        });
    }

    // Not active here: the durable store is the only proof of how it ended.
    let (s, id, ep) = (shared.clone(), action_id.to_string(), epoch.to_string());
    let found = tokio::task::spawn_blocking(move || s.store.find(Scope { runner_bundle_id: &s.cfg.runner_bundle_id, action_id: &id, runtime_epoch: &ep }))
        .await
        .map_err(|e| Rejection::new("ios_wda_completion_read_failed", e.to_string()))?
        .map_err(|e| Rejection::new(e.code(), e.message().to_string()))?;
    Ok(match found {
        Some((result, receipt)) => {
            let mut a = answer(result);
            a["receipt"] = receipt.to_json();
            a
        }
        None => json!({
            "ok": false,
            "error": "ios_wda_action_not_active",
            "message": "no such action is active and the completion store has no record of it",
            "actionId": action_id,
            "runtimeEpoch": epoch,
            "found": false,
            "settled": false,
        }),
    })
}
