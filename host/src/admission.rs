//! Admission of ordinary commands: per-target FIFO lanes, the single deadline's
//! queue part, cancellation of queued and running requests, and request-id
//! idempotency.
//!
//! Commands on the same admission key run one at a time in arrival order (tokio's
//! mutex is fair); different keys run in parallel. A request cancelled or expired
//! while queued never starts. Idempotency is process-local and bounded, as the
//! contract says: `[targetKey, requestId]` → the in-flight or settled outcome of the
//! same canonical command and arguments; different content → `idempotency_conflict`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::{OwnedMutexGuard, watch};
use tokio_util::sync::CancellationToken;

use crate::error::CommandError;
use crate::reply::ExecOutcome;

/// Why a request was cancelled; decides the error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    Cancelled,
    RuntimeStopped,
}

impl CancelReason {
    pub fn code(self) -> &'static str {
        match self {
            CancelReason::Cancelled => "cancelled",
            CancelReason::RuntimeStopped => "runtime_stopped",
        }
    }
}

/// Cancellation of one request, with its reason.
#[derive(Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
}

impl Cancel {
    pub fn cancel(&self, reason: CancelReason) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.token.cancel();
    }
    pub fn reason(&self) -> Option<CancelReason> {
        self.reason.lock().ok().and_then(|r| *r)
    }
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The admission key of one invocation: `<targetKind>:<values of the targetKey
/// arguments>[:<lane>]`, or `None` for commands without a target (they never queue).
pub fn admission_key(target_kind: &str, target_key: &[String], lane: Option<&str>, arguments: &Value) -> Option<String> {
    if target_key.is_empty() {
        return None;
    }
    let values: Vec<String> = target_key
        .iter()
        .map(|k| match arguments.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        })
        .collect();
    let mut key = format!("{target_kind}:{}", values.join("/"));
    if let Some(lane) = lane {
        key.push(':');
        key.push_str(lane);
    }
    Some(key)
}

#[derive(Default)]
pub struct Lanes {
    lanes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds a lane until dropped.
pub struct LaneGuard {
    _guard: Option<OwnedMutexGuard<()>>,
}

impl Lanes {
    /// Wait for the lane of `key` (FIFO) until the deadline or a cancellation.
    pub async fn admit(&self, key: Option<&str>, deadline: Instant, cancel: &Cancel) -> Result<LaneGuard, CommandError> {
        let Some(key) = key else { return Ok(LaneGuard { _guard: None }) };
        let lane = {
            let mut lanes = self.lanes.lock().expect("lanes lock");
            // Drop idle lanes so the map stays bounded by the number of busy targets.
            if lanes.len() > 1024 {
                lanes.retain(|_, l| Arc::strong_count(l) > 1);
            }
            lanes.entry(key.to_string()).or_default().clone()
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(cancelled_error(cancel, false, "while queued")),
            guard = lane.lock_owned() => Ok(LaneGuard { _guard: Some(guard) }),
            _ = tokio::time::sleep_until(deadline.into()) => Err(CommandError::new("deadline_exceeded", format!("deadline passed while queued behind earlier work on {key}")).with_details(json!({"stage": "queue", "targetKey": key}))),
        }
    }
}

/// The error for a cancelled request; `dispatched` from the plugin's mark.
pub fn cancelled_error(cancel: &Cancel, dispatched: bool, when: &str) -> CommandError {
    let reason = cancel.reason().unwrap_or(CancelReason::Cancelled);
    let message = match reason {
        CancelReason::Cancelled => format!("cancelled {when}"),
        CancelReason::RuntimeStopped => format!("the runtime stopped {when}"),
    };
    if dispatched { CommandError::ambiguous(reason.code(), message) } else { CommandError::new(reason.code(), message) }
}

const IDEMPOTENCY_TTL: Duration = Duration::from_secs(300);
const IDEMPOTENCY_MAX: usize = 2048;

struct IdemEntry {
    content: String,
    outcome: watch::Receiver<Option<ExecOutcome>>,
    settled_at: Option<Instant>,
}

/// What the caller should do with a request id.
pub enum Claim {
    /// First request with this key: execute, then `settle`.
    Execute(watch::Sender<Option<ExecOutcome>>),
    /// Same key and content: wait for (or take) the original outcome.
    Reuse(watch::Receiver<Option<ExecOutcome>>),
}

#[derive(Default)]
pub struct Idempotency {
    entries: Mutex<HashMap<String, IdemEntry>>,
}

/// Canonical digest of a command and its arguments without `requestId` (and
/// without `timeoutMs`/`feedback`, which do not change what is asked of the target).
pub fn content_digest(command: &str, arguments: &Map<String, Value>) -> String {
    let mut args = arguments.clone();
    args.remove("requestId");
    let doc = json!({"command": command, "arguments": Value::Object(args)});
    crate::digest::sha256_hex(aab_facts::canonical::to_canonical_string(&doc).as_bytes())
}

impl Idempotency {
    pub fn claim(&self, target_key: &str, request_id: &str, content: String) -> Result<Claim, CommandError> {
        let key = serde_json::to_string(&[target_key, request_id]).expect("key serialises");
        let mut entries = self.entries.lock().expect("idempotency lock");
        let now = Instant::now();
        entries.retain(|_, e| e.settled_at.is_none_or(|t| now.duration_since(t) < IDEMPOTENCY_TTL));
        if let Some(e) = entries.get(&key) {
            if e.content != content {
                return Err(CommandError::new(
                    "idempotency_conflict",
                    format!("requestId `{request_id}` was already used on this target for a different command or arguments"),
                )
                .with_field("requestId"));
            }
            return Ok(Claim::Reuse(e.outcome.clone()));
        }
        if entries.len() >= IDEMPOTENCY_MAX {
            // Evict the oldest settled entry; in-flight entries are never evicted.
            let oldest = entries.iter().filter_map(|(k, e)| e.settled_at.map(|t| (t, k.clone()))).min().map(|(_, k)| k);
            match oldest {
                Some(k) => {
                    entries.remove(&k);
                }
                None => return Err(CommandError::new("target_busy", "too many requests with a requestId are in flight").with_field("requestId")),
            }
        }
        let (tx, rx) = watch::channel(None);
        entries.insert(key, IdemEntry { content, outcome: rx, settled_at: None });
        Ok(Claim::Execute(tx))
    }

    pub fn settle(&self, target_key: &str, request_id: &str, sender: watch::Sender<Option<ExecOutcome>>, outcome: ExecOutcome) {
        let key = serde_json::to_string(&[target_key, request_id]).expect("key serialises");
        let _ = sender.send(Some(outcome));
        if let Some(e) = self.entries.lock().expect("idempotency lock").get_mut(&key) {
            e.settled_at = Some(Instant::now());
        }
    }
}

/// Wait for a reused outcome.
pub async fn await_outcome(mut rx: watch::Receiver<Option<ExecOutcome>>) -> ExecOutcome {
    loop {
        if let Some(o) = rx.borrow().clone() {
            return o;
        }
        if rx.changed().await.is_err() {
            return ExecOutcome::Failed(CommandError::ambiguous("runtime_result_missing", "the original request ended without a recorded outcome"));
        }
    }
}

/// Every queued or running ordinary request, for explicit cancellation by
/// requestId and for runtime stop (which cancels queued work and drains the rest).
#[derive(Default)]
pub struct ActiveRequests {
    next: std::sync::atomic::AtomicU64,
    entries: Mutex<HashMap<u64, ActiveEntry>>,
}

struct ActiveEntry {
    request_id: Option<String>,
    cancel: Cancel,
    admitted: bool,
}

impl ActiveRequests {
    pub fn register(&self, request_id: Option<&str>, cancel: Cancel) -> u64 {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.entries.lock().expect("active lock").insert(id, ActiveEntry { request_id: request_id.map(str::to_string), cancel, admitted: false });
        id
    }
    pub fn mark_admitted(&self, id: u64) {
        if let Some(e) = self.entries.lock().expect("active lock").get_mut(&id) {
            e.admitted = true;
        }
    }
    pub fn unregister(&self, id: u64) {
        self.entries.lock().expect("active lock").remove(&id);
    }
    /// Cancel every queued or running request with this id; returns how many.
    pub fn cancel(&self, request_id: &str) -> usize {
        let entries = self.entries.lock().expect("active lock");
        let mut n = 0;
        for e in entries.values().filter(|e| e.request_id.as_deref() == Some(request_id)) {
            e.cancel.cancel(CancelReason::Cancelled);
            n += 1;
        }
        n
    }
    /// Runtime stop: queued requests end with `runtime_stopped`; admitted ones drain.
    pub fn cancel_queued(&self, reason: CancelReason) {
        for e in self.entries.lock().expect("active lock").values().filter(|e| !e.admitted) {
            e.cancel.cancel(reason);
        }
    }
    pub fn len(&self) -> usize {
        self.entries.lock().expect("active lock").len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
