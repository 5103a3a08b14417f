//! The Script engine (`aab.code-script/v1`): repeatable JavaScript / Python programs
//! that run in a child process per operation and reach devices only through
//! `ctx.call` → [`ExecutionHost::call`] (registry, validation, admission, ownership,
//! dispatch, history), under the permissions, target, source and cwd frozen at start.
//!
//! Durable facts (namespace `script` of the FactStore): a `checkpoint` at start
//! (revision 1, stepId `start`), `checkpoint` records for `ctx.checkpoint`, a
//! `dispatch-marker` before and an `action-receipt` after every mutation, the
//! `result` record, and a terminal `checkpoint` carrying `resultRef`. `completed` is
//! exposed only after the result was stored, re-read and verified.

pub(crate) mod child;
mod ops;
mod schema;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aab_plugin_api::CommandSpec;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::admission::{Cancel, CancelReason};
use crate::error::CommandError;
use crate::engines::Host;
use crate::reply::ExecOutcome;

pub const SDK_VERSION: &str = "aab.script-sdk/v1";
pub const SPEC_SCHEMA: &str = "aab.code-script/v1";
const MAX_OPERATIONS: usize = 256;
const MAX_EVENTS: usize = 256;
const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Execution-ledger items retained per operation (older ones leave a gap).
const MAX_LEDGER: usize = 256;
/// Largest `payloadSummary` of one ledger item; a larger one is summarised by size.
const MAX_SUMMARY_BYTES: usize = 512;
pub const LEDGER_SCHEMA: &str = "aab.execution-fact/v1";
const MAX_ISSUED: usize = 4096;
/// Outstanding host replies (calls, asks, control points) before `channel_backlog`.
const MAX_OUTSTANDING: usize = 32;
const MIB: u64 = 1024 * 1024;

pub const PERMISSIONS: &[&str] = &["app.read", "app.interact", "capture.read", "app.lifecycle", "app.permissions", "app.test"];
pub const DEFAULT_PERMISSIONS: &[&str] = &["app.read", "app.interact", "capture.read"];
/// Never callable from a Script, whatever their spec says.
const NEVER_CALLABLE: &[&str] = &["script", "intent", "runtime"];
const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];
const PAUSED: &[&str] = &["pause_requested", "paused_manual", "paused_live", "paused_ambiguous"];

/// Per-runtime engine state (operations and their tasks).
#[derive(Default)]
pub struct ScriptEngine {
    ops: Mutex<Vec<Arc<Op>>>,
    counter: AtomicU64,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    stopping: AtomicBool,
}

impl ScriptEngine {
    /// Runtime stop: cancel running operations and persist their terminal checkpoints.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for op in self.ops.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if !op.is_terminal() {
                op.cancel.cancel(CancelReason::RuntimeStopped);
            }
        }
    }

    /// Resolves once every operation task has persisted its terminal checkpoint (the
    /// daemon awaits it, bounded, before releasing ownership).
    pub async fn drain(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
    }

    fn find(&self, id: &str) -> Option<Arc<Op>> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|o| o.id == id).cloned()
    }

    fn insert(&self, op: Arc<Op>) -> Result<(), CommandError> {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        if ops.iter().any(|o| o.id == op.id) {
            return Err(CommandError::new("operation_exists", format!("operation `{}` already exists", op.id)).with_field("operationId"));
        }
        if ops.len() >= MAX_OPERATIONS {
            match ops.iter().position(|o| o.is_terminal()) {
                Some(i) => {
                    ops.remove(i);
                }
                None => return Err(CommandError::new("registry_full", format!("{MAX_OPERATIONS} script operations are live; cancel one first"))),
            }
        }
        ops.push(op);
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Language {
    JavaScript,
    Python,
}

impl Language {
    fn name(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::Python => "python",
        }
    }
}

/// What the host froze at start.
pub struct Frozen {
    pub language: Language,
    pub runtime: PathBuf,
    pub source: String,
    pub source_path: Option<String>,
    pub cwd: PathBuf,
    pub entrypoint: String,
    pub name: String,
    /// `Value::Null` when the script has no target.
    pub target: Value,
    pub inputs: Value,
    pub permissions: Vec<String>,
    pub timeout_ms: u64,
    pub restart_policy: String,
    pub max_output: usize,
    pub max_progress: usize,
    pub policy: Value,
    pub hash: String,
}

pub struct Question {
    pub request_id: String,
    pub revision: u64,
    pub request: Value,
    pub frame_id: String,
}

pub struct State {
    pub status: &'static str,
    pub pause_reason: Option<&'static str>,
    pub error: Option<String>,
    pub message: Option<String>,
    pub diagnostics: Option<Value>,
    pub result_ref: Option<Value>,
    events: VecDeque<(u64, usize, Value)>,
    /// The execution ledger: (sequence, kind, atMs, revision, compact fields) of every event;
    /// kept apart from the byte-bounded event log so `history` pages independently.
    ledger: VecDeque<(u64, String, u64, u64, Value)>,
    /// Highest ledger sequence evicted so far (0 = none): a page after an earlier
    /// cursor has a gap.
    ledger_evicted_through: u64,
    pub event_seq: u64,
    event_bytes: usize,
    pub dropped: u64,
    pub pending_question: Option<Question>,
    pub answered: HashMap<String, Value>,
    pub question_seq: u64,
    pub ambiguous: bool,
    pub inflight_mutations: u32,
    pub action_seq: u64,
    pub checkpoint_revision: u64,
    pub window: u64,
    issued: HashMap<String, (String, u64)>,
    issued_order: VecDeque<String>,
    /// Capture watermarks (`watermarkCursor`) issued to this operation by its capture
    /// reads, for the pre-action watermark check of capture assertions.
    watermarks: HashMap<String, Watermark>,
    watermark_order: VecDeque<String>,
    pub last_checkpoint: Option<Value>,
    pub calls: u64,
    pub child_pid: Option<i32>,
    pub first_call_ms: Option<u64>,
    pub outstanding: usize,
    /// `ctx.resume()` of the child: the last committed checkpoint's state on a
    /// checkpoint resume, else null.
    pub resume_state: Value,
    /// The latched recording failure `{code, message}`: every later call fails with it.
    pub recording_error: Option<Value>,
}

impl State {
    fn new() -> State {
        State {
            status: "running",
            pause_reason: None,
            error: None,
            message: None,
            diagnostics: None,
            result_ref: None,
            events: VecDeque::new(),
            ledger: VecDeque::new(),
            ledger_evicted_through: 0,
            event_seq: 0,
            event_bytes: 0,
            dropped: 0,
            pending_question: None,
            answered: HashMap::new(),
            question_seq: 0,
            ambiguous: false,
            inflight_mutations: 0,
            action_seq: 0,
            checkpoint_revision: 1,
            window: 0,
            issued: HashMap::new(),
            issued_order: VecDeque::new(),
            watermarks: HashMap::new(),
            watermark_order: VecDeque::new(),
            last_checkpoint: None,
            calls: 0,
            child_pid: None,
            first_call_ms: None,
            outstanding: 0,
            resume_state: Value::Null,
            recording_error: None,
        }
    }

    /// Append one event to the bounded log (oldest evicted first).
    pub fn emit(&mut self, kind: &str, fields: Value) {
        self.event_seq += 1;
        let at_ms = crate::ids::now_ms();
        let mut event = json!({"sequence": self.event_seq, "type": kind, "atMs": at_ms});
        if let (Value::Object(e), Value::Object(f)) = (&mut event, &fields) {
            for (k, v) in f {
                e.insert(k.clone(), v.clone());
            }
        }
        self.ledger.push_back((self.event_seq, kind.to_string(), at_ms, self.checkpoint_revision, compact_fields(&fields)));
        while self.ledger.len() > MAX_LEDGER {
            if let Some((seq, ..)) = self.ledger.pop_front() {
                self.ledger_evicted_through = seq;
            }
        }
        let bytes = event.to_string().len();
        self.events.push_back((self.event_seq, bytes, event));
        self.event_bytes += bytes;
        while self.events.len() > MAX_EVENTS || (self.event_bytes > MAX_EVENT_BYTES && self.events.len() > 1) {
            if let Some((_, b, _)) = self.events.pop_front() {
                self.event_bytes -= b;
                self.dropped += 1;
            }
        }
    }

    fn issue(&mut self, call_id: &str, digest: String) {
        self.issued.insert(call_id.to_string(), (digest, self.window));
        self.issued_order.push_back(call_id.to_string());
        while self.issued_order.len() > MAX_ISSUED {
            if let Some(old) = self.issued_order.pop_front() {
                self.issued.remove(&old);
            }
        }
    }

    /// Remember a capture watermark this operation was issued (bounded like `issued`).
    fn issue_watermark(&mut self, token: &str, w: Watermark) {
        if self.watermarks.insert(token.to_string(), w).is_none() {
            self.watermark_order.push_back(token.to_string());
        }
        while self.watermark_order.len() > MAX_ISSUED {
            if let Some(old) = self.watermark_order.pop_front() {
                self.watermarks.remove(&old);
            }
        }
    }

    /// One page of the execution ledger after `after` (`aab.execution-fact/v1`
    /// items): `lastSequence` is the cursor of the next page, `hasMore` says one
    /// exists, `gap` that items after `after` were evicted.
    fn history(&self, execution_id: &str, target: &Value, after: u64, limit: usize) -> Value {
        let newer: Vec<&(u64, String, u64, u64, Value)> = self.ledger.iter().filter(|(seq, ..)| *seq > after).collect();
        let page: Vec<Value> = newer.iter().take(limit).map(|(seq, kind, at, revision, fields)| ledger_item(execution_id, target, *seq, kind, *at, *revision, fields)).collect();
        let last = match page.len() {
            0 => self.ledger.back().map(|(seq, ..)| *seq).unwrap_or(self.ledger_evicted_through),
            n => newer[n - 1].0,
        };
        json!({"items": page, "lastSequence": last, "hasMore": newer.len() > page.len(), "gap": after < self.ledger_evicted_through})
    }

    fn control(&self) -> Value {
        json!({"status": self.status, "pauseReason": self.pause_reason, "checkpoint": self.last_checkpoint})
    }
}

/// A capture watermark as issued: the action window it was read in, its read's
/// coverage status, and the stream and target it belongs to.
pub struct Watermark {
    pub window: u64,
    pub coverage: Value,
    pub stream: Value,
    pub target: Value,
}

/// The ledger's compact form of an event's fields, made once at emit so a ledger
/// item stays small whatever the event held: `{actionId, timings, evidenceRefs,
/// summary}`, the summary being the remaining fields or `{truncated, bytes}`.
fn compact_fields(fields: &Value) -> Value {
    let mut summary = fields.clone();
    let mut take = |k: &str| summary.as_object_mut().and_then(|m| m.remove(k));
    let action_id = take("actionId").unwrap_or(Value::Null);
    let timings = take("timings").unwrap_or(Value::Null);
    let mut refs: Vec<Value> = match take("evidenceRefs") {
        Some(Value::Array(list)) => list,
        _ => vec![],
    };
    if let Some(id) = fields.get("evidenceId").filter(|v| v.is_string()) {
        refs.push(id.clone());
    }
    let bytes = summary.to_string().len();
    if bytes > MAX_SUMMARY_BYTES {
        summary = json!({"truncated": true, "bytes": bytes});
    }
    json!({"actionId": action_id, "timings": timings, "evidenceRefs": refs, "summary": summary})
}

/// One `aab.execution-fact/v1` item of the ledger.
fn ledger_item(execution_id: &str, target: &Value, seq: u64, kind: &str, at_ms: u64, revision: u64, compact: &Value) -> Value {
    json!({
        "schemaVersion": LEDGER_SCHEMA, "executionId": execution_id, "sequence": seq, "revision": revision, "kind": kind,
        "target": target, "timestampMs": at_ms, "actionId": compact["actionId"], "parentFactId": null,
        "payloadSummary": compact["summary"], "evidenceRefs": compact["evidenceRefs"], "timings": compact["timings"],
    })
}

/// What one status-like response returns: events and history after `after`.
#[derive(Clone, Copy)]
pub struct Page {
    pub after: u64,
    pub events: usize,
    pub history: usize,
}

impl Page {
    /// History pages default to 20 items (as Intent's): with the events they share
    /// the reply's output budget.
    pub const FIRST: Page = Page { after: 0, events: 100, history: 20 };

    pub fn of(a: &Value) -> Page {
        let n = |k: &str| a.get(k).and_then(Value::as_u64).map(|n| n as usize);
        Page { after: a.get("afterSequence").and_then(Value::as_u64).unwrap_or(0), events: n("eventLimit").unwrap_or(Page::FIRST.events), history: n("limit").unwrap_or(Page::FIRST.history) }
    }
}

pub enum Ctl {
    Decision { frame_id: String, value: Value },
}

pub struct Op {
    pub id: String,
    pub spec: Frozen,
    pub state: Mutex<State>,
    version: watch::Sender<u64>,
    pub cancel: Cancel,
    /// `true` while paused: calls and control points wait.
    pub paused: watch::Sender<bool>,
    pub ctl: mpsc::UnboundedSender<Ctl>,
    pub started: Instant,
    pub started_ms: u64,
    pub deadline: Instant,
    pub recording: Mutex<Option<aab_facts::recording::Recording>>,
    pub recording_seq: AtomicU64,
}

impl Op {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the state, then wake every waiter.
    pub fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.version.send_modify(|v| *v += 1);
        r
    }

    pub fn is_terminal(&self) -> bool {
        TERMINAL.contains(&self.lock().status)
    }

    fn snapshot(&self, operation: &str, page: Page) -> Value {
        // The recording lock is taken before (never under) the state lock.
        let recording = self.recording.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| {
            json!({"dir": r.dir().display().to_string(), "recordingId": r.recording_id(), "sequence": self.recording_seq.load(Ordering::SeqCst)})
        });
        let s = self.lock();
        let after = page.after;
        let newer = s.events.iter().filter(|(seq, _, _)| *seq > after).count();
        let events: Vec<Value> = s.events.iter().filter(|(seq, _, _)| *seq > after).take(page.events).map(|(_, _, e)| e.clone()).collect();
        let first_retained = s.events.front().map(|(seq, _, _)| *seq).unwrap_or(s.event_seq + 1);
        // The cursor is honest: when the page was cut, it is the last event returned
        // (continuing from it loses nothing), else the operation's latest event.
        let more_events = newer > events.len();
        let cursor = if more_events { events.last().and_then(|e| e["sequence"].as_u64()).unwrap_or(after) } else { s.event_seq };
        let mut v = json!({
            "ok": true, "command": "script", "operation": operation, "operationId": self.id,
            "status": s.status, "pauseReason": s.pause_reason,
            "pendingQuestion": s.pending_question.as_ref().filter(|_| s.status == "waiting_for_agent").map(|q| json!({"questionId": q.request_id, "requestId": q.request_id, "revision": q.revision, "request": q.request})),
            "error": s.error, "message": s.message, "hash": self.spec.hash, "resultRef": s.result_ref,
            "eventSequence": cursor, "events": events, "eventsHasMore": more_events, "latestEventSequence": s.event_seq,
            "eventGap": after + 1 < first_retained && s.dropped > 0,
            "history": s.history(&self.id, &self.spec.target, after, page.history),
            "language": self.spec.language.name(), "actionSequence": s.action_seq, "ambiguous": s.ambiguous,
            "calls": s.calls, "restored": false,
        });
        if let Some(d) = &s.diagnostics {
            v["diagnostics"] = d.clone();
        }
        if let Some(mut r) = recording {
            r["error"] = s.recording_error.clone().unwrap_or(Value::Null);
            v["recording"] = r;
        }
        v
    }
}

/// The `script` command spec (its targets from the loaded catalog).
pub fn spec(catalog: &crate::engines::catalog::EngineCatalog) -> Option<CommandSpec> {
    Some(schema::spec(catalog))
}

/// Boxed (not `async fn`): `ctx.call` runs `ExecutionHost::call`, which reaches this
/// handler again, so the future type must not be opaque inside this module.
pub fn handle<'a>(host: &'a Host, arguments: &'a Value, cwd: &'a str) -> std::pin::Pin<Box<dyn std::future::Future<Output = ExecOutcome> + Send + 'a>> {
    Box::pin(async move {
        match ops::dispatch(host, arguments, cwd).await {
            Ok(v) => ExecOutcome::Json(v),
            Err(e) => ExecOutcome::Failed(e),
        }
    })
}

pub(crate) fn outcome_value(outcome: &ExecOutcome) -> (Value, &'static str) {
    use base64::Engine;
    match outcome {
        ExecOutcome::Json(v) => (v.clone(), "json"),
        ExecOutcome::Text(t) => (Value::String(t.clone()), "text"),
        ExecOutcome::Bytes(b) => (Value::String(base64::engine::general_purpose::STANDARD.encode(b)), "bytes"),
        ExecOutcome::Stored { value, .. } => (value.clone(), "json"),
        ExecOutcome::Failed(_) => (Value::Null, "json"),
    }
}
