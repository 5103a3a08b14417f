//! The Intent engine: a supervised observe → decide → act loop against committed
//! revisions, with durable execution evidence (namespace `intent`).
//!
//! Provider-generic: what to observe, how to summarise and how each public action
//! maps to a command come from the plugins' manifest `intentProviders`; the engine
//! never branches on a platform or provider name. Every device call goes through
//! [`crate::engines::Pipeline::call`] (validation, admission, ownership, dispatch, history),
//! bounded by the Intent's lifetime deadline and its shared cancellation.
//!
//! Order of an `act`: decision evidence → dispatch marker → `host.call` → action
//! receipt → new observation + summary → revision visible. Terminal outcomes pass
//! through `finishing` / `cancelling` and a durable `intent-terminal` checkpoint
//! before they are exposed (`blocked_evidence_store` when that commit fails).
//!
//! This module keeps the operation state and the dispatch of operations; each
//! operation lives in its own child module (`start`, `observe`, `decide`,
//! `autonomous`, `control`, `history`).

mod agent;
mod autonomous;
mod control;
mod decide;
mod history;
mod observe;
mod provider;
mod schema;
mod start;
mod status;
mod workflow;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aab_facts::{Cursor, Durability, Namespace};
use aab_plugin_api::CommandSpec;
use aab_plugin_api::protocol::IntentProvider;
use serde_json::{Map, Value, json};

use crate::admission::{Cancel, CancelReason};
use crate::error::CommandError;
use crate::facts::{Facts, to_command_error};
use crate::engines::Host;
use crate::pipeline::InternalCall;
use crate::reply::ExecOutcome;

use autonomous::*;
use control::*;
use decide::*;
use history::*;
use observe::*;
use start::*;
use status::Status;
pub use workflow::start_workflow;

const LIFECYCLE: &str = "aab.intent-lifecycle/v1";
const MAX_LIVE: usize = 256;
const MAX_EVENTS: usize = 256;

/// The `intent` command spec (its platform and provider names from the loaded catalog).
pub fn spec(catalog: &crate::engines::catalog::EngineCatalog) -> Option<CommandSpec> {
    Some(schema::spec(catalog))
}

/// Discovery data: `capabilities {command:"intent", operation:"decide",
/// platform?, provider?, action?}` narrows `decision.action` to the declared
/// action schemas of the loaded providers.
pub fn discovery_narrowing(providers: &[(String, IntentProvider)]) -> crate::registry::FieldNarrowing {
    let variants = providers
        .iter()
        .flat_map(|(_, p)| {
            p.actions.iter().map(|a| crate::registry::NarrowingVariant {
                platform: p.platform.clone(),
                provider: p.provider.clone(),
                action: a.action.clone(),
                schema: action_schema_with_provider(&a.schema, &p.provider),
            })
        })
        .collect();
    crate::registry::FieldNarrowing {
        command: "intent".into(),
        operation: "decide".into(),
        pointer: "/properties/decision/properties/action".into(),
        provider_pointer: Some("/properties/decision/properties/provider".into()),
        variants,
    }
}

/// A provider's declared action schema as the public `decision.action` sees it:
/// seed 002 lets an action name its provider inside it (`{provider, action, ...}`).
fn action_schema_with_provider(schema: &Value, provider: &str) -> Value {
    let mut s = schema.clone();
    if let Some(Value::Object(props)) = s.get_mut("properties") {
        props.insert("provider".into(), json!({"const": provider, "description": "Optional: the provider of the committed observation"}));
    }
    s
}

/// Per-runtime engine state (operations and their tasks).
#[derive(Default)]
pub struct IntentEngine {
    ops: Mutex<HashMap<String, Arc<Op>>>,
    closed: AtomicBool,
}

struct Op {
    id: String,
    facts: Facts,
    cwd: String,
    deadline: Instant,
    cancel: Cancel,
    /// Serialises observation / action work of one Intent.
    work: tokio::sync::Mutex<()>,
    /// Set once the terminal status is exposed (ends the deadline watcher).
    done: tokio_util::sync::CancellationToken,
    /// Autonomous mode: the frozen, syntax-checked agent module.
    agent: Option<aab_extract::PreparedScript>,
    /// Autonomous mode: the live agent child (one per operation, `decide(signal)`
    /// per turn); gone after pause, cancel or the end, started again on resume.
    agent_child: tokio::sync::Mutex<Option<agent::AgentChild>>,
    st: Mutex<St>,
}

/// Autonomous budget (§8.4); the lifetime part is folded into the deadline.
#[derive(Clone, Default)]
struct Budget {
    max_actions: u64,
    max_agent_calls: u64,
    max_duration_ms: u64,
    allowlist: Vec<String>,
}

struct St {
    status: Status,
    revision: u64,
    error: Option<String>,
    last_decision_id: Option<String>,
    decisions: HashSet<String>,
    mode: String,
    goal: String,
    target: Value,
    plugin: String,
    provider: IntentProvider,
    observation_target: Value,
    observation_failure: Value,
    summary: Value,
    observation: Value,
    latest: Map<String, Value>,
    events: VecDeque<Value>,
    event_seq: u64,
    dropped: u64,
    timings: Map<String, Value>,
    action_steps: u64,
    agent_calls: u64,
    started_at_ms: u64,
    deadline_ms: u64,
    last_action: Value,
    terminal_evidence_id: Option<String>,
    pending: u64,
    require: Value,
    watermarks: Map<String, Value>,
    capture: Value,
    paused_from: Option<Status>,
    budget: Option<Budget>,
    /// The current action (host action id, as providers see it) and the stream
    /// watermarks from just before it: the lower bound of its capture window.
    action_window: Option<(String, Map<String, Value>)>,
    /// Intent action id (`<operationId>:<decisionId>`) → host action id.
    host_actions: HashMap<String, String>,
    /// Agent turn generation: a reply is accepted only for the current turn.
    turn: u64,
    /// Fired (and replaced) on pause / cancel / the end: abandons the turn in flight.
    agent_abort: tokio_util::sync::CancellationToken,
    /// A managed workflow's begin result and latest verification (install-apk, …).
    workflow: Option<workflow::Workflow>,
}

impl St {
    fn event(&mut self, kind: &str, extra: Value) {
        self.event_seq += 1;
        let mut e = json!({"sequence": self.event_seq, "type": kind, "status": self.status, "revision": self.revision, "atMs": crate::ids::now_ms()});
        if let (Value::Object(m), Value::Object(x)) = (&mut e, extra) {
            m.extend(x);
        }
        self.events.push_back(e);
        let bytes: usize = self.events.iter().map(|e| e.to_string().len()).sum();
        if self.events.len() > MAX_EVENTS || bytes > 256 * 1024 {
            self.events.pop_front();
            self.dropped += 1;
        }
    }

    fn timing(&mut self, key: &str, ms: u64) {
        self.timings.insert(key.into(), json!(ms));
    }

    fn lifecycle(&self, op_id: &str) -> Value {
        json!({
            "lifecycle": LIFECYCLE, "operationId": op_id, "status": self.status, "error": self.error, "goal": self.goal, "target": self.target,
            "provider": self.provider.provider, "observationTarget": self.observation_target, "observationFailure": self.observation_failure,
            "mode": self.mode, "revision": self.revision, "lastDecisionId": self.last_decision_id, "startedAtMs": self.started_at_ms,
            "deadlineMs": self.deadline_ms, "latestEvidenceIds": self.latest, "lastAction": self.last_action, "agentCalls": self.agent_calls,
            "actionSteps": self.action_steps, "timings": self.timings, "restartPolicy": "none",
            "workflow": self.workflow.as_ref().map(|w| json!({"command": w.def.command, "statusKey": w.def.status_key, "begin": w.begin, "answer": w.answer})),
        })
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn err_details(e: CommandError, op: &Op) -> CommandError {
    let st = op.st.lock().expect("intent state");
    details_of(&st, &op.id, e)
}

/// [`err_details`] while the state lock is already held.
fn details_of(st: &St, op_id: &str, e: CommandError) -> CommandError {
    let mut d = e.details.clone().unwrap_or_else(|| json!({}));
    if let Value::Object(m) = &mut d {
        m.insert("operationId".into(), json!(op_id));
        m.insert("status".into(), json!(st.status));
        m.insert("revision".into(), json!(st.revision));
    }
    e.with_details(d)
}

/// Append one evidence record durably (off the async workers).
async fn persist(facts: &Facts, op_id: &str, kind: &str, payload: Value) -> Result<(String, u64), CommandError> {
    let facts = facts.clone();
    let (op_id, kind) = (op_id.to_string(), kind.to_string());
    tokio::task::spawn_blocking(move || {
        let store = facts.store()?;
        store.append_evidence(Namespace::Intent, &op_id, &kind, &payload, Durability::Sync).map(|r| (r.evidence_id, r.sequence)).map_err(|e| to_command_error(&e))
    })
    .await
    .unwrap_or_else(|e| Err(CommandError::new("fact_store_unavailable", e.to_string())))
}

fn text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

pub async fn handle(host: &Host, arguments: &Value, cwd: &str) -> ExecOutcome {
    let op = text(arguments, "operation").unwrap_or("status");
    // Boxed: Intent actions re-enter the pipeline (`host.call`), which dispatches here.
    let result: Result<Value, CommandError> = Box::pin(async move { match op {
        "start" => start(host, arguments, cwd).await,
        "status" => status(host, arguments).await,
        "observe" => observe_op(host, arguments).await,
        "decide" => decide(host, arguments).await,
        "pause" | "resume" => pause_resume(host, arguments, op == "pause").await,
        "cancel" => stop(host, arguments, Status::Cancelling, Status::Cancelled, None).await,
        "intervene" => stop(host, arguments, Status::Finishing, Status::InterventionRequired, text(arguments, "reason").map(str::to_string)).await,
        other => Err(CommandError::invalid("operation", format!("unknown intent operation `{other}`"))),
    } })
    .await;
    match result {
        Ok(v) => ExecOutcome::Json(v),
        Err(e) => ExecOutcome::Failed(e),
    }
}

impl IntentEngine {
    fn get(&self, id: &str) -> Option<Arc<Op>> {
        self.ops.lock().expect("intent ops").get(id).cloned()
    }

    /// Runtime stop: close intake and cancel running operations' owned work.
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for op in self.ops.lock().expect("intent ops").values() {
            op.cancel.cancel(CancelReason::RuntimeStopped);
        }
    }

    /// Resolves once every live operation has persisted its terminal checkpoint.
    pub async fn drain(&self) {
        let ops: Vec<Arc<Op>> = self.ops.lock().expect("intent ops").values().cloned().collect();
        for op in ops {
            let live = { !op.st.lock().expect("intent state").status.is_terminal() };
            if live {
                op.st.lock().expect("intent state").status = Status::Cancelling;
                let _guard = op.work.lock().await;
                finish(&op, Status::Cancelled, Some("runtime_stopped".into())).await;
            }
        }
    }
}
