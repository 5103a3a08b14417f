//! The Intent engine: a supervised observe → decide → act loop against committed
//! revisions, with durable execution evidence (namespace `intent`).
//!
//! Provider-generic: what to observe, how to summarise and how each public action
//! maps to a command come from the plugins' manifest `intentProviders`; the engine
//! never branches on a platform or provider name. Every device call goes through
//! [`ExecutionHost::call`] (validation, admission, ownership, dispatch, history),
//! bounded by the Intent's lifetime deadline and its shared cancellation.
//!
//! Order of an `act`: decision evidence → dispatch marker → `host.call` → action
//! receipt → new observation + summary → revision visible. Terminal outcomes pass
//! through `finishing` / `cancelling` and a durable `intent-terminal` checkpoint
//! before they are exposed (`blocked_evidence_store` when that commit fails).

mod agent;
mod provider;
mod schema;
mod status;

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

use status::Status;

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

// ------------------------------------------------------------------ start

fn choose_provider(host: &Host, platform: &str, wanted: Option<&str>) -> Result<(String, IntentProvider), CommandError> {
    let all = host.intent_providers();
    let offered: Vec<&(String, IntentProvider)> = all.iter().filter(|(_, p)| p.platform == platform).collect();
    let names: Vec<&str> = offered.iter().map(|(_, p)| p.provider.as_str()).collect();
    let found = match wanted {
        Some(w) => offered.iter().find(|(_, p)| p.provider == w),
        None => offered.iter().find(|(_, p)| p.default).or(if offered.len() == 1 { offered.first() } else { None }),
    };
    found.map(|x| (*x).clone()).ok_or_else(|| {
        CommandError::new(
            "intent_provider_unsupported",
            format!("no loaded plugin offers Intent provider {} for platform `{platform}`; offered: {names:?}", wanted.map_or("(default)".to_string(), |w| format!("`{w}`"))),
        )
        .with_field(if wanted.is_some() { "provider" } else { "target.platform" })
        .with_details(json!({"platform": platform, "allowed": names}))
    })
}

/// An `observationTarget` checked against the provider's declared
/// `observationTargetSchema` (null: the whole target). A provider that declares
/// none takes none.
fn checked_observation_target(provider: &IntentProvider, given: &Value) -> Result<Value, CommandError> {
    if given.is_null() {
        return Ok(Value::Null);
    }
    let Some(schema) = &provider.observation_target_schema else {
        return Err(CommandError::new("observation_target_unsupported", format!("provider `{}` takes no observationTarget", provider.provider)).with_field("observationTarget"));
    };
    validate_with(schema, given, "observationTarget")?;
    Ok(given.clone())
}

fn validate_with(schema: &Value, instance: &Value, field: &str) -> Result<(), CommandError> {
    let validator = crate::registry::validate::compile(schema).map_err(|e| CommandError::new("intent_provider_invalid", format!("provider schema does not compile: {e}")))?;
    crate::registry::validate::validate_instance(&validator, schema, instance, field).map_err(|mut e| {
        // Field paths are reported from the request root (`decision.action.selector`).
        if let Some(f) = e.field.clone()
            && f != field
            && !f.starts_with(&format!("{field}."))
        {
            let full = format!("{field}.{f}");
            e.message = e.message.replacen(&format!("`{f}`"), &format!("`{full}`"), 1);
            e.field = Some(full);
        }
        e
    })
}

async fn start(host: &Host, args: &Value, cwd: &str) -> Result<Value, CommandError> {
    let engine = host.intents();
    if engine.closed.load(Ordering::SeqCst) {
        return Err(CommandError::new("runtime_stopped", "the runtime is stopping; no new Intent starts"));
    }
    let autonomous = text(args, "mode") == Some("autonomous");
    if !autonomous {
        for f in ["agentModule", "budget"] {
            if args.get(f).is_some() {
                return Err(CommandError::invalid(f, format!("`{f}` needs mode:\"autonomous\"")));
            }
        }
    }
    if args.get("recordingDir").is_some() {
        return Err(CommandError::new("recording_unavailable", "Intent recording is not available in this build").with_field("recordingDir"));
    }
    let target = args.get("target").cloned().unwrap_or(Value::Null);
    let platform = text(&target, "platform").unwrap_or_default().to_string();
    let (plugin, provider) = choose_provider(host, &platform, text(args, "provider"))?;
    validate_with(&provider.target_schema, &target, "target")?;
    let observation_target = checked_observation_target(&provider, args.get("observationTarget").unwrap_or(&Value::Null))?;
    let require = args.get("require").cloned().unwrap_or(Value::Null);
    let mut watermarks = Map::new();
    for s in require.get("streams").and_then(Value::as_array).into_iter().flatten() {
        let name = s.as_str().unwrap_or_default();
        if !provider.streams.iter().any(|d| d.stream == name) {
            return Err(CommandError::new("intent_stream_unsupported", format!("provider `{}` offers no capture stream `{name}`", provider.provider)).with_field("require.streams"));
        }
        // `factCursor`: the first window resumes from it.
        if let Some(c) = require.get("factCursor") {
            watermarks.insert(name.into(), c.clone());
        }
    }
    check_require(&require, &target)?;
    let (agent, budget) = if autonomous { prepare_agent(args, cwd, &provider).await.map(|(a, b)| (Some(a), Some(b)))? } else { (None, None) };
    let op_id = text(args, "operationId").map(str::to_string).unwrap_or_else(|| format!("intent-{}", crate::ids::uuid_v4()));
    let facts = host.facts().clone();
    let store = facts.store()?.clone();
    {
        let ops = engine.ops.lock().expect("intent ops");
        if ops.contains_key(&op_id) {
            return Err(CommandError::new("operation_exists", format!("operation `{op_id}` exists; ids are never reused")).with_field("operationId"));
        }
        let live = ops.values().filter(|o| !o.st.lock().expect("intent state").status.is_terminal()).count();
        if live >= MAX_LIVE {
            return Err(CommandError::new("registry_full", format!("{MAX_LIVE} Intents are live; finish one first")));
        }
    }
    let id = op_id.clone();
    let retained = tokio::task::spawn_blocking(move || store.read_evidence(Namespace::Intent, &id, &Cursor::After(0), 1))
        .await
        .map_err(|e| CommandError::new("fact_store_unavailable", e.to_string()))?
        .map_err(|e| to_command_error(&e))?;
    if !retained.records.is_empty() {
        return Err(CommandError::new("operation_exists", format!("operation `{op_id}` has retained evidence; ids are never reused")).with_field("operationId"));
    }
    let mut lifetime = args.get("timeoutMs").and_then(Value::as_u64).unwrap_or(schema::DEFAULT_LIFETIME_MS);
    if let Some(b) = &budget {
        lifetime = lifetime.min(b.max_duration_ms);
    }
    // Autonomous: the agent child starts now and must export decide(signal).
    let agent_child = match &agent {
        Some(a) => Some(agent::AgentChild::spawn(a, std::path::Path::new(cwd), &op_id, &tokio_util::sync::CancellationToken::new()).await.map_err(|e| {
            CommandError::new("agent_adapter_unavailable", format!("agentModule: {}", e.message)).with_field("agentModule").with_details(json!({"diagnostic": e.diagnostic}))
        })?),
        None => None,
    };
    let started_at_ms = crate::ids::now_ms();
    let op = Arc::new(Op {
        id: op_id.clone(),
        facts: facts.clone(),
        cwd: cwd.to_string(),
        deadline: Instant::now() + Duration::from_millis(lifetime),
        cancel: Cancel::default(),
        work: tokio::sync::Mutex::new(()),
        done: tokio_util::sync::CancellationToken::new(),
        agent,
        agent_child: tokio::sync::Mutex::new(agent_child),
        st: Mutex::new(St {
            status: Status::Created,
            revision: 0,
            error: None,
            last_decision_id: None,
            decisions: HashSet::new(),
            mode: if autonomous { "autonomous" } else { "supervised" }.into(),
            goal: text(args, "goal").unwrap_or_default().to_string(),
            target: target.clone(),
            plugin,
            provider,
            observation_target,
            observation_failure: Value::Null,
            summary: Value::Null,
            observation: Value::Null,
            latest: Map::new(),
            events: VecDeque::new(),
            event_seq: 0,
            dropped: 0,
            timings: Map::new(),
            action_steps: 0,
            agent_calls: 0,
            started_at_ms,
            deadline_ms: started_at_ms + lifetime,
            last_action: Value::Null,
            terminal_evidence_id: None,
            pending: 0,
            require,
            watermarks,
            capture: Value::Null,
            paused_from: None,
            agent_abort: tokio_util::sync::CancellationToken::new(),
            budget,
            action_window: None,
            host_actions: HashMap::new(),
            turn: 0,
        }),
    });
    {
        let mut ops = engine.ops.lock().expect("intent ops");
        if ops.contains_key(&op_id) {
            return Err(CommandError::new("operation_exists", format!("operation `{op_id}` exists")).with_field("operationId"));
        }
        ops.insert(op_id.clone(), op.clone());
    }
    let guard = op.work.lock().await;
    let started = {
        let st = op.st.lock().expect("intent state");
        let mut l = st.lifecycle(&op_id);
        l["status"] = json!("started");
        json!({"stepId": "intent-started", "revision": 0, "target": st.target, "payloadSummary": l})
    };
    match persist(&facts, &op_id, "checkpoint", started).await {
        Ok((eid, _)) => {
            let mut st = op.st.lock().expect("intent state");
            st.latest.insert("checkpoint".into(), json!(eid));
            st.event("intent_started", json!({"evidenceId": eid}));
        }
        Err(e) => {
            // Nothing was dispatched and nothing is retained: the id stays unused.
            engine.ops.lock().expect("intent ops").remove(&op_id);
            return Err(e);
        }
    }
    // The lifetime deadline.
    let watcher = op.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep_until(watcher.deadline.into()) => expire(&watcher).await,
            _ = watcher.done.cancelled() => {}
        }
    });
    let host2 = host.clone();
    let outcome = observe(&host2, &op).await;
    drop(guard);
    let _ = outcome;
    let snap = snapshot(&op);
    spawn_agent(host, &op);
    Ok(snap)
}

/// `require` rules the schema cannot express (docs/COMMAND_CONTRACT.md, Intent):
/// history forbids window bounds; an action filter needs a lower watermark; a
/// decision window reads the target's current runtime only.
fn check_require(require: &Value, target: &Value) -> Result<(), CommandError> {
    if require.is_null() {
        return Ok(());
    }
    let history = require.get("view").and_then(Value::as_str) == Some("connected-history");
    if history {
        for f in ["factCursor", "afterActionId"] {
            if require.get(f).is_some_and(|v| !v.is_null()) {
                return Err(CommandError::invalid(format!("require.{f}"), format!("`require.{f}` bounds a decision window; view connected-history reads retained records and forbids it")));
            }
        }
    }
    if require.get("afterActionId").is_some_and(Value::is_string) && require.get("factCursor").is_none() {
        return Err(CommandError::new("missing_argument", "an explicit `require.afterActionId` needs the lower watermark `require.factCursor`").with_field("require.factCursor"));
    }
    if !history
        && let (Some(wanted), Some(current)) = (text(require, "runtimeEpoch"), text(target, "runtimeEpoch"))
        && wanted != current
    {
        return Err(CommandError::new("runtime_epoch_stale", format!("require.runtimeEpoch `{wanted}` is not the target's current runtime `{current}`; a decision window reads the current runtime only"))
            .with_field("require.runtimeEpoch")
            .with_details(json!({"requested": wanted, "current": current})));
    }
    Ok(())
}

async fn expire(op: &Arc<Op>) {
    {
        let mut st = op.st.lock().expect("intent state");
        if st.status.is_terminal() || st.status.is_stopping() {
            return;
        }
        st.status = Status::Finishing;
        st.event("stop_requested", json!({"reason": "deadline_exceeded"}));
    }
    op.cancel.cancel(CancelReason::Cancelled);
    let _guard = op.work.lock().await;
    finish(op, Status::Timeout, Some("deadline_exceeded".into())).await;
}

// ------------------------------------------------------------------ observe

/// Observe once (work lock held by the caller). Success commits a new revision;
/// failure persists an `observation-failed` checkpoint and enters
/// `waiting_for_observation`.
async fn observe(host: &Host, op: &Arc<Op>) -> Result<(), CommandError> {
    let t0 = Instant::now();
    let (provider, target, observation_target, require, watermarks, action_window, host_actions, next_revision) = {
        let mut st = op.st.lock().expect("intent state");
        st.status = Status::Observing;
        st.event("observing", json!({}));
        st.pending += 1;
        (st.provider.clone(), st.target.clone(), st.observation_target.clone(), st.require.clone(), st.watermarks.clone(), st.action_window.clone(), st.host_actions.clone(), st.revision + 1)
    };
    let sources = provider::Sources { observation_target: Some(&observation_target), ..provider::Sources::new(&target) };
    let arguments = provider::render(&provider.observe.arguments, &sources);
    let call = InternalCall { command: &provider.observe.command, arguments, cwd: op.cwd.clone(), deadline_cap: Some(op.deadline), cancel: Some(op.cancel.clone()), control: None };
    let result = host.clone().call(call).await;
    let acquire_ms = ms(t0.elapsed());
    let value = match result {
        Ok(r) => match r.outcome {
            ExecOutcome::Json(v) => Ok(v),
            ExecOutcome::Failed(e) => Err(e),
            _ => Err(CommandError::new("intent_observation_invalid", "the observation command returned no JSON")),
        },
        Err(e) => Err(e),
    };
    let observation = match value {
        Ok(v) => v,
        Err(e) => {
            op.st.lock().expect("intent state").pending -= 1;
            let payload = json!({"stepId": "observation-failed", "revision": next_revision - 1, "target": target,
                                 "payloadSummary": {"provider": provider.provider, "command": provider.observe.command, "attempted": {"provider": provider.provider, "observationTarget": observation_target}, "response": e.to_json()}});
            let saved = persist(&op.facts, &op.id, "checkpoint", payload).await;
            let mut st = op.st.lock().expect("intent state");
            if !st.status.is_terminal() && st.status == Status::Observing {
                st.status = Status::WaitingForObservation;
            }
            st.timing("providerAcquireMs", acquire_ms);
            match saved {
                Ok((eid, _)) => {
                    st.observation_failure = json!({"evidenceId": eid, "attempted": {"provider": provider.provider, "observationTarget": observation_target}, "response": e.to_json()});
                    st.latest.insert("observationFailure".into(), json!(eid));
                }
                Err(store) => st.error = Some(store.code.clone()),
            }
            st.event("blocked", json!({"error": e.code}));
            return Err(e);
        }
    };
    // Capture streams (`require.streams`), each read per observation through its
    // window (`require` semantics: docs/COMMAND_CONTRACT.md, Intent).
    let mut captures = Map::new();
    let mut capture_refs = Vec::new();
    let mut coverages = Vec::new();
    let mut new_watermarks = watermarks.clone();
    let ts = Instant::now();
    let history_view = require.get("view").and_then(Value::as_str) == Some("connected-history");
    let limit = require.get("limit").and_then(Value::as_u64).unwrap_or(schema::DEFAULT_REQUIRE_LIMIT) as usize;
    for s in require.get("streams").and_then(Value::as_array).into_iter().flatten() {
        let name = s.as_str().unwrap_or_default();
        let Some(decl) = provider.streams.iter().find(|d| d.stream == name) else { continue };
        // Lower bound: after an action, the watermark from before it (kept for every
        // re-observation of that action, so a delayed record stays visible);
        // otherwise the previous observation's (the first: `require.factCursor`).
        let lower = if history_view {
            None
        } else {
            match &action_window {
                Some((_, at)) => at.get(name).filter(|v| !v.is_null()).cloned(),
                None => watermarks.get(name).filter(|v| !v.is_null()).cloned(),
            }
        };
        // `afterActionId`: omitted = the current action, null = every record of the
        // window, a string = that action. An action filter needs the lower bound.
        let after_action = match (history_view, &lower, require.get("afterActionId")) {
            (true, _, _) | (_, None, _) | (_, _, Some(Value::Null)) => None,
            (_, _, Some(Value::String(a))) => Some(host_actions.get(a).cloned().unwrap_or_else(|| a.clone())),
            (_, _, _) => action_window.as_ref().map(|(id, _)| id.clone()),
        };
        let window = json!({"factCursor": lower, "afterActionId": after_action});
        let sources = provider::Sources { observation: Some(&observation), require: Some(&require), watermark: lower.as_ref(), window: Some(&window), observation_target: Some(&observation_target), ..provider::Sources::new(&target) };
        let base = provider::render(&decl.arguments, &sources);
        // `require.timeoutMs` bounds the reads of one stream (never past the lifetime).
        let deadline = match require.get("timeoutMs").and_then(Value::as_u64) {
            Some(t) => op.deadline.min(Instant::now() + Duration::from_millis(t)),
            None => op.deadline,
        };
        let read = read_stream(host, op, decl, &base, deadline, limit).await;
        match read {
            Ok(r) => {
                let watermark = decl.watermark.as_deref().and_then(|p| r.value.pointer(p)).cloned().unwrap_or(Value::Null);
                let mut coverage = decl.coverage.as_deref().and_then(|p| r.value.pointer(p)).and_then(Value::as_str).unwrap_or("unavailable").to_string();
                if r.error.is_some() && coverage == "complete" {
                    coverage = "partial".into();
                }
                if !watermark.is_null() {
                    new_watermarks.insert(name.into(), watermark.clone());
                }
                capture_refs.push(json!({"stream": name, "command": decl.command, "watermark": watermark, "previousWatermark": lower, "factCursor": lower,
                                         "afterActionId": after_action, "coverage": coverage, "records": r.records, "pages": r.pages, "limit": limit,
                                         "truncated": r.truncated, "error": r.error}));
                coverages.push(coverage);
                captures.insert(name.into(), r.value);
            }
            Err(e) => {
                coverages.push("unavailable".into());
                capture_refs.push(json!({"stream": name, "coverage": "unavailable", "factCursor": lower, "afterActionId": after_action, "error": e.code, "field": e.field, "message": e.message}));
            }
        }
    }
    let coverage = if coverages.is_empty() {
        Value::Null
    } else if coverages.iter().all(|c| c == "complete") {
        json!("complete")
    } else if coverages.iter().all(|c| c == "unavailable") {
        json!("unavailable")
    } else {
        json!("partial")
    };
    let capture_ms = ms(ts.elapsed());
    let raw_tree_id = format!("{}:{next_revision}", op.id);
    let tsum = Instant::now();
    let summary = provider::summarize(&provider, &observation, &raw_tree_id, provider::SUMMARY_MAX_BYTES);
    let summary_ms = ms(tsum.elapsed());
    let summary_bytes = serde_json::to_vec(&summary).map(|b| b.len()).unwrap_or(0);
    let tc = Instant::now();
    let obs_payload = json!({
        "revision": next_revision, "target": target, "provider": provider.provider, "capturedAtMs": crate::ids::now_ms(),
        "rawTreeId": raw_tree_id, "rawTree": observation, "command": provider.observe.command, "observationTarget": observation_target,
        "captureRefs": capture_refs, "captureCoverage": coverage, "captures": captures,
    });
    let committed = match persist(&op.facts, &op.id, "observation", obs_payload).await {
        Ok((obs_id, _)) => {
            let sum_payload = json!({"revision": next_revision, "rawTreeId": raw_tree_id, "parentFactId": obs_id, "summary": summary, "bytes": summary_bytes, "truncated": summary["truncated"]});
            persist(&op.facts, &op.id, "summary", sum_payload).await.map(|(sum_id, _)| (obs_id, sum_id))
        }
        Err(e) => Err(e),
    };
    let commit_ms = ms(tc.elapsed());
    let mut st = op.st.lock().expect("intent state");
    st.pending -= 1;
    st.timing("providerAcquireMs", acquire_ms);
    st.timing("captureMs", capture_ms);
    st.timing("summaryMs", summary_ms);
    st.timing("evidenceCommitMs", commit_ms);
    match committed {
        Ok((obs_id, sum_id)) => {
            // Only now the revision becomes visible.
            st.revision = next_revision;
            st.observation = observation;
            st.summary = summary;
            st.watermarks = new_watermarks;
            // Failed reads are reported too (their refs carry the error).
            st.capture = if capture_refs.is_empty() { Value::Null } else { json!({"coverage": coverage, "refs": capture_refs, "streams": captures}) };
            st.observation_failure = Value::Null;
            st.latest.insert("observation".into(), json!(obs_id));
            st.latest.insert("summary".into(), json!(sum_id));
            st.timing("summaryBytes", summary_bytes as u64);
            if st.status == Status::Observing {
                st.status = Status::WaitingForDecision;
                st.event("waiting_for_decision", json!({"summaryEvidenceId": sum_id}));
            }
            Ok(())
        }
        Err(e) => {
            // The observation is not committed: the revision stays where it was.
            if st.status == Status::Observing {
                st.status = Status::WaitingForObservation;
            }
            st.error = Some(e.code.clone());
            st.event("blocked", json!({"error": e.code}));
            Err(e)
        }
    }
}

/// One stream's read: its pages up to `limit` records.
struct StreamRead {
    /// The first page (its window and watermark), with every kept record.
    value: Value,
    records: usize,
    pages: usize,
    truncated: bool,
    /// A later page that failed (the first page's failure is the `Err`).
    error: Option<Value>,
}

/// Read one capture stream: the first page with `base`, then continuation pages
/// (the stream's `next` template over the previous page) until `limit` records are
/// kept, the window is exhausted, or the deadline passes. Records come from the
/// declared `records` pointer; a stream that declares none is one page.
async fn read_stream(host: &Host, op: &Arc<Op>, decl: &aab_plugin_api::protocol::IntentStream, base: &Map<String, Value>, deadline: Instant, limit: usize) -> Result<StreamRead, CommandError> {
    const MAX_PAGES: usize = 256;
    let mut args = base.clone();
    let mut first: Option<Value> = None;
    let mut kept: Vec<Value> = Vec::new();
    let mut pages = 0;
    let mut truncated = false;
    let mut error = None;
    loop {
        let call = InternalCall { command: &decl.command, arguments: args.clone(), cwd: op.cwd.clone(), deadline_cap: Some(deadline), cancel: Some(op.cancel.clone()), control: None };
        let page = match host.clone().call(call).await.map(|r| r.outcome) {
            Ok(ExecOutcome::Json(v)) => v,
            Ok(ExecOutcome::Failed(e)) | Err(e) => {
                if first.is_none() {
                    return Err(e);
                }
                error = Some(json!({"error": e.code, "message": e.message, "page": pages + 1}));
                truncated = true;
                break;
            }
            Ok(_) => {
                let e = CommandError::new("capture_not_json", format!("`{}` returned no JSON", decl.command));
                if first.is_none() {
                    return Err(e);
                }
                error = Some(json!({"error": e.code, "page": pages + 1}));
                truncated = true;
                break;
            }
        };
        pages += 1;
        let Some(ptr) = decl.records.as_deref() else {
            first = Some(page);
            break;
        };
        kept.extend(page.pointer(ptr).and_then(Value::as_array).cloned().unwrap_or_default());
        let next = decl.next.as_ref().and_then(|t| provider::render_complete(t, &provider::Sources { page: Some(&page), ..provider::Sources::new(&Value::Null) }));
        if first.is_none() {
            first = Some(page);
        }
        if kept.len() >= limit {
            truncated = kept.len() > limit || next.is_some();
            kept.truncate(limit);
            break;
        }
        match next {
            Some(extra) if pages < MAX_PAGES => {
                args = base.clone();
                args.extend(extra);
            }
            Some(_) => {
                truncated = true;
                break;
            }
            None => break,
        }
    }
    let mut value = first.unwrap_or(Value::Null);
    let records = kept.len();
    if let Some(ptr) = decl.records.as_deref() {
        if let Some(slot) = value.pointer_mut(ptr) {
            *slot = Value::Array(kept);
        }
        if let Value::Object(m) = &mut value {
            m.insert("count".into(), json!(records));
            m.insert("pages".into(), json!(pages));
            m.insert("truncated".into(), json!(truncated));
        }
    }
    Ok(StreamRead { value, records, pages, truncated, error })
}

async fn observe_op(host: &Host, args: &Value) -> Result<Value, CommandError> {
    let op = live_op(host, args).await?;
    if let Some(p) = text(args, "provider") {
        let current = op.st.lock().expect("intent state").provider.provider.clone();
        if p != current {
            return Err(err_details(CommandError::new("intent_provider_unsupported", format!("this Intent's target offers provider `{current}` only; switching is not supported by this build")).with_field("provider"), &op));
        }
    }
    // Omitted: keep the current observationTarget; null: the whole target.
    let observation_target = match args.get("observationTarget") {
        Some(given) => {
            let provider = op.st.lock().expect("intent state").provider.clone();
            Some(checked_observation_target(&provider, given).map_err(|e| err_details(e, &op))?)
        }
        None => None,
    };
    let Ok(guard) = op.work.try_lock() else {
        return Err(err_details(CommandError::new("operation_busy", "an observation or action of this Intent is pending"), &op));
    };
    {
        let st = op.st.lock().expect("intent state");
        if !matches!(st.status, Status::WaitingForDecision | Status::WaitingForObservation) {
            return Err(details_of(&st, &op.id, CommandError::new("not_waiting_for_decision", format!("observe is allowed while waiting, not in `{}`", st.status))));
        }
        if let Some(r) = args.get("basedOnRevision").and_then(Value::as_u64)
            && r != st.revision
        {
            return Err(details_of(&st, &op.id, CommandError::new("reobserve_required", format!("revision {r} is not the committed revision {}", st.revision)).with_field("basedOnRevision")));
        }
    }
    if let Some(t) = observation_target {
        op.st.lock().expect("intent state").observation_target = t;
    }
    let _ = observe(host, &op).await;
    drop(guard);
    Ok(snapshot(&op))
}

// ------------------------------------------------------------------ decide

async fn live_op(host: &Host, args: &Value) -> Result<Arc<Op>, CommandError> {
    let id = text(args, "operationId").unwrap_or_default();
    if let Some(op) = host.intents().get(id) {
        return Ok(op);
    }
    // Retained but not live (an earlier runtime): never resumed, never replayed.
    let recovered = recover(host.facts(), id, 0, 1).await?;
    Err(CommandError::new("operation_not_live", format!("Intent `{id}` is not live in this runtime (status {}); nothing is replayed", recovered["status"]))
        .with_field("operationId")
        .with_details(json!({"operationId": id, "status": recovered["status"], "live": false, "recovered": true})))
}

async fn decide(host: &Host, args: &Value) -> Result<Value, CommandError> {
    let op = live_op(host, args).await?;
    let decision = args.get("decision").cloned().unwrap_or(Value::Null);
    let Ok(guard) = op.work.try_lock() else {
        return Err(err_details(CommandError::new("operation_busy", "an observation or action of this Intent is pending"), &op));
    };
    let result = decide_on(host, &op, decision, guard, "caller").await;
    if result.is_ok() {
        // Autonomous mode: a caller's correction hands the loop back to the agent.
        spawn_agent(host, &op);
    }
    result
}

/// The budget gate of autonomous mode (§8.4), before anything is persisted:
/// an action outside the allowlist or past maxActions ends the Intent with
/// `intervention_required` and is never dispatched.
async fn budget_gate(op: &Arc<Op>, action: &str) -> Result<(), CommandError> {
    let reason = {
        let st = op.st.lock().expect("intent state");
        let Some(b) = &st.budget else { return Ok(()) };
        if !b.allowlist.iter().any(|a| a == action) {
            Some(("action_not_allowed", format!("action `{action}` is not in the budget allowlist {:?}", b.allowlist), json!({"allowed": b.allowlist})))
        } else if st.action_steps >= b.max_actions {
            Some(("max_steps", format!("the action budget ({}) is spent", b.max_actions), json!({"maxActions": b.max_actions})))
        } else {
            None
        }
    };
    let Some((code, message, details)) = reason else { return Ok(()) };
    {
        let mut st = op.st.lock().expect("intent state");
        st.status = Status::Finishing;
        st.event("intervention_required", json!({"reason": code, "action": action}));
    }
    finish(op, Status::InterventionRequired, Some(code.into())).await;
    Err(err_details(CommandError::new(code, message).with_field("decision.action.action").with_details(details), op))
}

async fn decide_on<'a>(host: &Host, op: &'a Arc<Op>, decision: Value, guard: tokio::sync::MutexGuard<'a, ()>, decided_by: &str) -> Result<Value, CommandError> {
    let t_total = Instant::now();
    let decision_id = text(&decision, "decisionId").unwrap_or_default().to_string();
    let based_on = decision.get("basedOnRevision").and_then(Value::as_u64).unwrap_or(0);
    let agent = text(&decision, "agentDecision").unwrap_or_default().to_string();
    // Pre-dispatch checks, in the contract's order; nothing is persisted or dispatched on rejection.
    let (provider, observation, target, observation_target, obs_ids) = {
        let st = op.st.lock().expect("intent state");
        if st.status != Status::WaitingForDecision {
            return Err(details_of(&st, &op.id, CommandError::new("not_waiting_for_decision", format!("the Intent is `{}`, not waiting_for_decision", st.status))));
        }
        if based_on != st.revision {
            return Err(details_of(
                &st,
                &op.id,
                CommandError::new("reobserve_required", format!("decision is based on revision {based_on}; the committed revision is {}", st.revision)).with_field("decision.basedOnRevision"),
            ));
        }
        let ids: Vec<Value> = ["observation", "summary"].iter().filter_map(|k| st.latest.get(*k).cloned()).collect();
        (st.provider.clone(), st.observation.clone(), st.target.clone(), st.observation_target.clone(), ids)
    };
    // The provider may be named on the decision and/or inside the action (seed 002);
    // both must agree with each other and with the committed observation.
    let outer = text(&decision, "provider");
    let inner = decision.get("action").and_then(|a| text(a, "provider"));
    if let (Some(o), Some(i)) = (outer, inner)
        && o != i
    {
        return Err(err_details(
            CommandError::invalid("decision.action.provider", format!("decision.provider `{o}` and decision.action.provider `{i}` name different providers"))
                .with_details(json!({"decisionProvider": o, "actionProvider": i})),
            op,
        ));
    }
    for (named, field) in [(outer, "decision.provider"), (inner, "decision.action.provider")] {
        if let Some(p) = named
            && p != provider.provider
        {
            return Err(err_details(
                CommandError::new("intent_provider_mismatch", format!("the committed observation is from provider `{}`, not `{p}`", provider.provider)).with_field(field),
                op,
            ));
        }
    }
    let mut resolved: Option<(Value, &aab_plugin_api::protocol::IntentAction)> = None;
    let action = decision.get("action").cloned();
    // What the provider's action schema and templates see: the action without the
    // (already checked) provider name.
    let action_only = action.clone().map(|mut a| {
        if let Value::Object(m) = &mut a {
            m.remove("provider");
        }
        a
    });
    if let Some(action) = &action_only {
        let name = text(action, "action").unwrap_or_default();
        let Some(decl) = provider.actions.iter().find(|a| a.action == name) else {
            let allowed: Vec<&str> = provider.actions.iter().map(|a| a.action.as_str()).collect();
            return Err(err_details(
                CommandError::new("intent_action_unsupported", format!("provider `{}` has no action `{name}`; its actions are {allowed:?}", provider.provider))
                    .with_field("decision.action.action")
                    .with_details(json!({"allowed": allowed, "provider": provider.provider})),
                op,
            ));
        };
        validate_with(&decl.schema, action, "decision.action").map_err(|e| err_details(e, op))?;
        budget_gate(op, name).await?;
        let element = match action.get("selector") {
            Some(sel) => match provider::resolve(&provider.summarize, &observation, sel) {
                Ok(e) => Some(provider::element_source(&provider.summarize, e)),
                Err((why, n)) => {
                    return Err(err_details(
                        CommandError::new(if n > 1 { "intent_target_ambiguous" } else { "intent_target_not_observed" }, why).with_field("decision.action.selector"),
                        op,
                    ));
                }
            },
            None => None,
        };
        resolved = Some((element.unwrap_or(Value::Null), decl));
    }
    {
        let st = op.st.lock().expect("intent state");
        if st.decisions.contains(&decision_id) {
            return Err(details_of(&st, &op.id, CommandError::new("duplicate_decision", format!("decisionId `{decision_id}` was already used in this Intent")).with_field("decision.decisionId")));
        }
    }
    let action_hash = match &action {
        Some(a) => aab_facts::canonical::canonical_sha256(a),
        None => "terminal".to_string(),
    };
    let decision_payload = json!({
        "decisionId": decision_id, "revision": based_on, "basedOnRevision": based_on, "basedOnEvidenceIds": obs_ids, "actionSpecHash": action_hash,
        "agentDecision": agent, "action": action, "reason": decision.get("reason"), "provider": provider.provider,
        "decidedBy": decided_by,
    });
    let tc = Instant::now();
    let decision_eid = match persist(&op.facts, &op.id, "decision", decision_payload).await {
        Ok((eid, _)) => eid,
        Err(e) => {
            drop(guard);
            op.st.lock().expect("intent state").status = Status::Finishing;
            let _g = op.work.lock().await;
            finish(op, Status::BlockedEvidenceStore, Some(e.code.clone())).await;
            return Err(err_details(e, op));
        }
    };
    let mut commit_ms = ms(tc.elapsed());
    {
        let mut st = op.st.lock().expect("intent state");
        st.decisions.insert(decision_id.clone());
        st.last_decision_id = Some(decision_id.clone());
        st.latest.insert("decision".into(), json!(decision_eid));
    }
    let Some((element, decl)) = resolved else {
        // Terminal decisions.
        let (status, error) = match agent.as_str() {
            "complete" => (Status::Completed, None),
            "fail" => (Status::Failed, Some("agent_declared_failure".to_string())),
            _ => (Status::Inconclusive, Some("agent_declared_inconclusive".to_string())),
        };
        {
            let mut st = op.st.lock().expect("intent state");
            st.status = Status::Finishing;
            st.event("terminal_decision", json!({"decisionId": decision_id, "agentDecision": agent}));
        }
        finish(op, status, error).await;
        drop(guard);
        return Ok(snapshot(op));
    };

    // act: dispatch marker → provider action → receipt.
    let action_id = format!("{}:{decision_id}", op.id);
    let sources = provider::Sources {
        target: &target,
        action: action_only.as_ref(),
        element: (!element.is_null()).then_some(&element),
        observation: Some(&observation),
        observation_target: Some(&observation_target),
        ..provider::Sources::new(&target)
    };
    let arguments = provider::render(&decl.arguments_template, &sources);
    let raw_tree_id = format!("{}:{based_on}", op.id);
    {
        let mut st = op.st.lock().expect("intent state");
        st.status = Status::DecisionCommitted;
    }
    let marker = json!({
        "actionId": action_id, "target": target, "actionSpecHash": action_hash, "decisionId": decision_id, "revision": based_on,
        "state": "prepared", "command": decl.command, "action": decl.action, "rawTreeId": raw_tree_id, "parentFactId": decision_eid,
    });
    let tm = Instant::now();
    let marker_eid = match persist(&op.facts, &op.id, "dispatch-marker", marker).await {
        Ok((eid, _)) => eid,
        Err(e) => {
            op.st.lock().expect("intent state").status = Status::Finishing;
            finish(op, Status::BlockedEvidenceStore, Some(e.code.clone())).await;
            drop(guard);
            return Err(err_details(e, op));
        }
    };
    commit_ms += ms(tm.elapsed());
    {
        let mut st = op.st.lock().expect("intent state");
        st.latest.insert("marker".into(), json!(marker_eid));
        st.pending += 1;
    }
    let started_at = crate::ids::now_ms();
    let ta = Instant::now();
    let call = InternalCall { command: &decl.command, arguments: arguments.clone(), cwd: op.cwd.clone(), deadline_cap: Some(op.deadline), cancel: Some(op.cancel.clone()), control: None };
    let result = host.clone().call(call).await;
    let action_ms = ms(ta.elapsed());
    let completed_at = crate::ids::now_ms();
    op.st.lock().expect("intent state").pending -= 1;
    let (host_action_id, outcome) = match result {
        Ok(r) => (Some(r.action_id), r.outcome),
        Err(e) => (None, ExecOutcome::Failed(e)),
    };
    let (mechanical, dispatched, ambiguous, provider_result, error) = match &outcome {
        ExecOutcome::Failed(e) => {
            let mech = if e.ambiguous { "ambiguous" } else if e.dispatched == Some(false) { "rejected" } else { "failed" };
            (mech, json!(e.dispatched), e.ambiguous, e.to_json(), Some(e.clone()))
        }
        ExecOutcome::Json(v) => ("succeeded", json!(true), false, v.clone(), None),
        _ => ("succeeded", json!(true), false, Value::Null, None),
    };
    let receipt = json!({
        "actionId": action_id, "startedAtMs": started_at, "completedAtMs": completed_at, "mechanicalStatus": mechanical,
        "providerResult": provider_result, "dispatched": dispatched, "ambiguous": ambiguous,
        "executionReceipt": provider_result.get("executionReceipt").or_else(|| provider_result.get("receipt")),
        "rawTreeId": raw_tree_id, "basedOnEvidenceIds": [decision_eid], "parentFactId": marker_eid, "target": target,
        "revision": based_on, "command": decl.command, "hostActionId": host_action_id,
    });
    if let Some(h) = &host_action_id
        && dispatched != json!(false)
    {
        // This action's capture window starts at the watermarks observed before it.
        let mut st = op.st.lock().expect("intent state");
        let before = st.watermarks.clone();
        st.action_window = Some((h.clone(), before));
        st.host_actions.insert(action_id.clone(), h.clone());
    }
    let tr = Instant::now();
    let receipt_saved = persist(&op.facts, &op.id, "action-receipt", receipt).await;
    let receipt_ms = ms(tr.elapsed());
    let receipt_eid = receipt_saved.as_ref().ok().map(|(e, _)| e.clone());
    {
        let mut st = op.st.lock().expect("intent state");
        if let Some(r) = &receipt_eid {
            st.latest.insert("receipt".into(), json!(r));
        }
        st.last_action = json!({
            "actionId": action_id, "receiptId": receipt_eid, "error": error.as_ref().map(|e| e.code.clone()), "ambiguous": ambiguous,
            "warnings": [], "foregroundObservations": [], "dispatched": dispatched, "mechanicalStatus": mechanical,
            "command": decl.command, "action": decl.action, "hostActionId": host_action_id,
        });
        st.timing("actionMs", action_ms);
        st.timing("receiptCommitMs", receipt_ms);
        st.timing("decisionCommitMs", commit_ms);
    }
    if let Err(e) = receipt_saved {
        op.st.lock().expect("intent state").status = Status::Finishing;
        finish(op, Status::BlockedEvidenceStore, Some(e.code.clone())).await;
        drop(guard);
        return Err(err_details(e, op));
    }
    let stopping = { op.st.lock().expect("intent state").status.is_stopping() };
    let observe_ms = match error {
        None if stopping => {
            // Cancel / timeout / intervene arrived during the action: no new
            // observation; the stopper finishes once this work lock is released.
            let mut st = op.st.lock().expect("intent state");
            st.action_steps += 1;
            st.event("action_settled_while_stopping", json!({"actionId": action_id}));
            0
        }
        None => {
            op.st.lock().expect("intent state").action_steps += 1;
            let to = Instant::now();
            let _ = observe(host, op).await;
            ms(to.elapsed())
        }
        Some(e) if !e.ambiguous && e.dispatched == Some(false) => {
            // Not dispatched: back to waiting on the same revision, with the error.
            let mut st = op.st.lock().expect("intent state");
            if st.status == Status::DecisionCommitted {
                st.status = Status::WaitingForDecision;
            }
            st.error = Some(e.code.clone());
            st.event("action_failed", json!({"error": e.code, "dispatched": false}));
            drop(st);
            drop(guard);
            return Err(err_details(e, op));
        }
        Some(e) => {
            let terminal = if e.ambiguous { Status::Ambiguous } else { Status::Failed };
            {
                let mut st = op.st.lock().expect("intent state");
                if !stopping {
                    st.status = Status::Finishing;
                }
                st.event("action_failed", json!({"error": e.code, "dispatched": e.dispatched, "ambiguous": e.ambiguous}));
            }
            // A stop requested during the action keeps its own outcome (cancelled /
            // timeout / intervention_required); `lastAction` keeps dispatched/ambiguous.
            if !stopping {
                finish(op, terminal, Some(e.code.clone())).await;
            }
            drop(guard);
            return Err(err_details(e, op));
        }
    };
    drop(guard);
    {
        let mut st = op.st.lock().expect("intent state");
        let total = ms(t_total.elapsed());
        let observe_call = st.timings.get("providerAcquireMs").and_then(Value::as_u64).unwrap_or(0);
        st.timing("observeMs", observe_ms);
        st.timing("totalMs", total);
        st.timing("workerOverheadMs", total.saturating_sub(action_ms + observe_call));
    }
    Ok(snapshot(op))
}

// ------------------------------------------------------------------ autonomous mode

/// Freeze and syntax-check `agentModule` (aab-extract's `prepare`: no top-level
/// code runs) and resolve the budget with its defaults.
async fn prepare_agent(args: &Value, cwd: &str, provider: &IntentProvider) -> Result<(aab_extract::PreparedScript, Budget), CommandError> {
    let Some(module) = args.get("agentModule").filter(|m| m.is_object()) else {
        return Err(CommandError::new("agent_adapter_unavailable", "mode:\"autonomous\" needs an agentModule {language, source | sourcePath}").with_field("agentModule"));
    };
    let b = args.get("budget").cloned().unwrap_or(Value::Null);
    let num = |k: &str| b.get(k).and_then(Value::as_u64);
    let allowlist: Vec<String> = match b.get("allowlist").and_then(Value::as_array) {
        Some(a) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        None => vec!["tap".into()],
    };
    let offered: Vec<&str> = provider.actions.iter().map(|a| a.action.as_str()).collect();
    if let Some(bad) = allowlist.iter().find(|a| !offered.contains(&a.as_str())) {
        return Err(CommandError::invalid("budget.allowlist", format!("provider `{}` has no action `{bad}`", provider.provider)).with_details(json!({"allowed": offered})));
    }
    let budget = Budget {
        max_actions: num("maxActions").or(num("maxSteps")).unwrap_or(schema::DEFAULT_MAX_ACTIONS),
        max_agent_calls: num("maxAgentCalls").unwrap_or(schema::DEFAULT_MAX_AGENT_CALLS),
        max_duration_ms: num("maxDurationMs").unwrap_or(schema::DEFAULT_MAX_DURATION_MS),
        allowlist,
    };
    let language = aab_extract::Language::from_name(text(module, "language").unwrap_or_default())
        .ok_or_else(|| CommandError::invalid("agentModule.language", "agentModule.language is javascript or python"))?;
    let spec = aab_extract::ScriptSpec {
        language,
        source: text(module, "source").map(str::to_string),
        source_path: text(module, "sourcePath").map(str::to_string),
        timeout_ms: module.get("timeoutMs").and_then(Value::as_u64).unwrap_or(schema::DEFAULT_AGENT_TURN_MS),
    };
    let cwd = std::path::PathBuf::from(cwd);
    let prepared = tokio::task::spawn_blocking(move || aab_extract::prepare(spec, &cwd))
        .await
        .map_err(|e| CommandError::new("agent_adapter_unavailable", e.to_string()))?
        .map_err(|e| {
            let field = e.field.map(|f| f.replace("extract.", "agentModule."));
            let mut err = CommandError::new(e.code, format!("agentModule: {}", e.message)).with_details(json!({"diagnostic": e.diagnostic}));
            if let Some(f) = field {
                err = err.with_field(f);
            } else {
                err = err.with_field("agentModule");
            }
            err
        })?;
    Ok((prepared, budget))
}

/// Start the next agent turn when an autonomous Intent waits for a decision.
fn spawn_agent(host: &Host, op: &Arc<Op>) {
    if op.agent.is_none() {
        return;
    }
    let (host, op) = (host.clone(), op.clone());
    tokio::spawn(async move { agent_loop(host, op).await });
}

/// One `decide` call in the operation's agent child, started first if it is not
/// running (after a resume, a timeout or a crash). A fatal failure (timeout, exit,
/// malformed frame, abandoned turn) kills and reaps the child.
async fn agent_turn(op: &Arc<Op>, prepared: &aab_extract::PreparedScript, turn: u64, inputs: &Value, abort: &tokio_util::sync::CancellationToken) -> Result<Value, agent::AgentError> {
    let mut slot = op.agent_child.lock().await;
    if abort.is_cancelled() {
        return Err(agent::AgentError { code: "agent_aborted".into(), message: "the turn was abandoned before it started".into(), fatal: true, diagnostic: None });
    }
    if slot.is_none() {
        *slot = Some(agent::AgentChild::spawn(prepared, std::path::Path::new(&op.cwd), &op.id, abort).await?);
    }
    let child = slot.as_mut().expect("agent child");
    let result = child.decide(turn, inputs, prepared.timeout(), abort).await;
    if let Err(e) = &result
        && e.fatal
        && let Some(mut c) = slot.take()
    {
        c.kill().await;
    }
    result
}

/// Abandon any agent turn in flight and kill + reap the agent child (pause,
/// cancel, every terminal outcome). Resolves once the process is gone.
async fn kill_agent(op: &Op) {
    if op.agent.is_none() {
        return;
    }
    {
        let mut st = op.st.lock().expect("intent state");
        st.agent_abort.cancel();
        st.agent_abort = tokio_util::sync::CancellationToken::new();
    }
    let mut slot = op.agent_child.lock().await;
    if let Some(mut c) = slot.take() {
        c.kill().await;
    }
}

/// One agent call per turn, in the operation's persistent child (aab-extract: own process group,
/// SIGKILLed at the per-turn timeout or after the reply, temp dir removed). The
/// reply is validated exactly like a caller's `decide`; a malformed reply or an
/// adapter failure leaves the Intent `waiting_for_decision` with the error
/// recorded (no automatic re-ask); budget exhaustion → `intervention_required`.
async fn agent_loop(host: Host, op: Arc<Op>) {
    let Some(agent) = op.agent.clone() else { return };
    let agent = &agent;
    loop {
        let gate = {
            let mut st = op.st.lock().expect("intent state");
            if st.status != Status::WaitingForDecision {
                return;
            }
            let b = st.budget.clone().unwrap_or_default();
            if st.agent_calls >= b.max_agent_calls {
                Err(("max_agent_calls", json!({"maxAgentCalls": b.max_agent_calls})))
            } else if st.action_steps >= b.max_actions {
                Err(("max_steps", json!({"maxActions": b.max_actions})))
            } else {
                st.agent_calls += 1;
                st.turn += 1;
                st.status = Status::AutonomousDeciding;
                let (turn, calls) = (st.turn, st.agent_calls);
                let pid = op.agent_child.try_lock().ok().and_then(|c| c.as_ref().map(agent::AgentChild::pid));
                st.event("agent_call", json!({"turn": turn, "agentCalls": calls, "agentPid": pid}));
                let mut inputs = json!({"goal": st.goal, "revision": st.revision, "summary": st.summary, "evidenceId": st.latest.get("summary")});
                if !st.capture.is_null() {
                    inputs["capture"] = st.capture.clone();
                }
                Ok((turn, inputs, st.agent_abort.clone()))
            }
        };
        let (turn, inputs, abort) = match gate {
            Ok(x) => x,
            Err((reason, details)) => {
                let Ok(_guard) = op.work.try_lock() else { return };
                {
                    let mut st = op.st.lock().expect("intent state");
                    if st.status != Status::WaitingForDecision {
                        return;
                    }
                    st.status = Status::Finishing;
                    st.event("intervention_required", json!({"reason": reason, "budget": details}));
                }
                finish(&op, Status::InterventionRequired, Some(reason.into())).await;
                return;
            }
        };
        let t0 = Instant::now();
        let ran = agent_turn(&op, agent, turn, &inputs, &abort).await;
        let agent_ms = ms(t0.elapsed());
        let guard = op.work.lock().await;
        let reply = {
            let mut st = op.st.lock().expect("intent state");
            st.timing("decisionWaitMs", agent_ms);
            if st.turn != turn || st.status != Status::AutonomousDeciding {
                // Paused, cancelled, timed out or superseded: a late reply never dispatches.
                let reason = st.status;
                st.event("agent_reply_discarded", json!({"turn": turn, "reason": reason}));
                return;
            }
            st.status = Status::WaitingForDecision;
            ran.map_err(|e| e.to_json())
        };
        let decision = match reply {
            Ok(v) => v,
            Err(why) => {
                let mut st = op.st.lock().expect("intent state");
                st.error = Some("agent_adapter_failed".into());
                st.event("agent_adapter_failed", json!({"turn": turn, "agentMs": agent_ms, "cause": why}));
                return;
            }
        };
        let checked = validate_with(&schema::decision(host.engine_catalog()), &decision, "decision");
        let result = match checked {
            Ok(()) => decide_on(&host, &op, decision.clone(), guard, "agent").await,
            Err(e) => {
                drop(guard);
                Err(err_details(e, &op))
            }
        };
        let mut st = op.st.lock().expect("intent state");
        match result {
            Ok(_) => {
                if st.status != Status::WaitingForDecision {
                    return;
                }
            }
            Err(e) => {
                if !st.status.is_terminal() {
                    st.error = Some(e.code.clone());
                }
                st.event("agent_decision_rejected", json!({"turn": turn, "error": e.code, "field": e.field, "message": e.message, "reply": decision}));
                return;
            }
        }
    }
}

// ------------------------------------------------------------------ pause / resume / stop

async fn pause_resume(host: &Host, args: &Value, pause: bool) -> Result<Value, CommandError> {
    let op = live_op(host, args).await?;
    let Ok(_guard) = op.work.try_lock() else {
        return Err(err_details(CommandError::new("operation_busy", "an observation or action of this Intent is pending"), &op));
    };
    {
        let mut st = op.st.lock().expect("intent state");
        if pause {
            if !matches!(st.status, Status::WaitingForDecision | Status::WaitingForObservation | Status::AutonomousDeciding) {
                drop(st);
                return Err(err_details(CommandError::new("operation_busy", "only a waiting Intent can be paused"), &op));
            }
            // Pausing invalidates a pending agent reply (its turn no longer matches).
            st.paused_from = Some(if st.status == Status::AutonomousDeciding { Status::WaitingForDecision } else { st.status });
            st.turn += 1;
            st.status = Status::Paused;
            st.event("paused", json!({}));
        } else {
            if st.status != Status::Paused {
                drop(st);
                return Err(err_details(CommandError::new("not_paused", "the Intent is not paused"), &op));
            }
            st.status = st.paused_from.take().unwrap_or(Status::WaitingForDecision);
            st.event("resumed", json!({}));
        }
    }
    drop(_guard);
    if pause {
        // The agent child does not outlive a pause; resume starts a new one.
        kill_agent(&op).await;
    } else {
        // Autonomous: resume obtains a new decision.
        spawn_agent(host, &op);
    }
    Ok(snapshot(&op))
}

async fn stop(host: &Host, args: &Value, stopping: Status, terminal: Status, reason: Option<String>) -> Result<Value, CommandError> {
    let op = live_op(host, args).await?;
    {
        let mut st = op.st.lock().expect("intent state");
        if st.status.is_terminal() || st.status.is_stopping() {
            // A settled outcome is never rewritten.
            drop(st);
            return Ok(snapshot(&op));
        }
        st.status = stopping;
        st.event("stop_requested", json!({"reason": reason}));
    }
    op.cancel.cancel(CancelReason::Cancelled);
    let _guard = op.work.lock().await;
    let error = if terminal == Status::Cancelled { Some("cancelled".to_string()) } else { Some("intervention_required".to_string()) };
    if let Some(r) = &reason {
        op.st.lock().expect("intent state").last_action["interventionReason"] = json!(r);
    }
    finish(&op, terminal, error).await;
    Ok(snapshot(&op))
}

/// Persist the terminal checkpoint, then expose the terminal status (or
/// `blocked_evidence_store` when the commit fails). Idempotent.
async fn finish(op: &Arc<Op>, status: Status, error: Option<String>) {
    let payload = {
        let mut st = op.st.lock().expect("intent state");
        if st.status.is_terminal() {
            return;
        }
        st.error = error.clone();
        let mut l = st.lifecycle(&op.id);
        l["status"] = json!(status);
        json!({"stepId": "intent-terminal", "revision": st.revision, "target": st.target, "payloadSummary": l})
    };
    let saved = persist(&op.facts, &op.id, "checkpoint", payload).await;
    {
        let mut st = op.st.lock().expect("intent state");
        match saved {
            Ok((eid, _)) => {
                st.status = status;
                st.terminal_evidence_id = Some(eid.clone());
                st.latest.insert("checkpoint".into(), json!(eid));
                st.event("terminal", json!({"terminalEvidenceId": eid, "error": error}));
            }
            Err(e) => {
                st.status = Status::BlockedEvidenceStore;
                st.error = Some(e.code.clone());
                st.event("terminal_persistence_failed", json!({"error": e.code}));
            }
        }
        let lifetime = crate::ids::now_ms().saturating_sub(st.started_at_ms);
        st.timing("lifetimeMs", lifetime);
    }
    op.done.cancel();
    kill_agent(op).await;
}

// ------------------------------------------------------------------ status / history / recovery

fn snapshot(op: &Op) -> Value {
    let st = op.st.lock().expect("intent state");
    let events: Vec<&Value> = st.events.iter().rev().take(32).collect::<Vec<_>>().into_iter().rev().collect();
    json!({
        "ok": true, "command": "intent", "operationId": op.id, "status": st.status, "revision": st.revision, "error": st.error,
        "lastDecisionId": st.last_decision_id, "mode": st.mode, "goal": st.goal, "eventSequence": st.event_seq, "events": events,
        "eventGap": st.dropped > 0, "droppedEvents": st.dropped, "provider": st.provider.provider, "plugin": st.plugin,
        "observationTarget": st.observation_target, "observationFailure": st.observation_failure, "summary": st.summary,
        "evidenceId": st.latest.get("summary"), "latestEvidenceIds": st.latest, "timings": st.timings, "agentCalls": st.agent_calls,
        "actionSteps": st.action_steps, "deadlineMs": st.deadline_ms, "pendingOperations": st.pending,
        "terminalEvidenceId": st.terminal_evidence_id, "lastAction": st.last_action, "capture": st.capture,
        "live": true, "recovered": false, "restartPolicy": "none",
    })
}

fn after_sequence(args: &Value) -> u64 {
    match args.get("afterSequence") {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

async fn status(host: &Host, args: &Value) -> Result<Value, CommandError> {
    let id = text(args, "operationId").unwrap_or_default().to_string();
    let after = after_sequence(args);
    let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize;
    match host.intents().get(&id) {
        Some(op) => {
            let mut snap = snapshot(&op);
            snap["history"] = history(host.facts(), &id, after, limit).await?;
            Ok(snap)
        }
        None => recover(host.facts(), &id, after, limit).await,
    }
}

fn ledger_item(op_id: &str, item: &aab_facts::evidence::EvidenceItem) -> Value {
    let r = &item.record;
    let kind = if item.kind == "checkpoint" { r.get("stepId").and_then(Value::as_str).unwrap_or("checkpoint").to_string() } else { item.kind.clone() };
    let summary = match item.kind.as_str() {
        "observation" => json!({"rawTreeId": r.get("rawTreeId"), "provider": r.get("provider"), "command": r.get("command"), "captureCoverage": r.get("captureCoverage")}),
        "summary" => json!({"rawTreeId": r.get("rawTreeId"), "bytes": r.get("bytes"), "truncated": r.get("truncated"), "nodes": r.pointer("/summary/nodes").and_then(Value::as_array).map(Vec::len)}),
        "decision" => json!({"decisionId": r.get("decisionId"), "agentDecision": r.get("agentDecision"), "action": r.get("action"), "basedOnRevision": r.get("basedOnRevision")}),
        "dispatch-marker" => json!({"decisionId": r.get("decisionId"), "command": r.get("command"), "state": r.get("state")}),
        "action-receipt" => json!({"mechanicalStatus": r.get("mechanicalStatus"), "dispatched": r.get("dispatched"), "ambiguous": r.get("ambiguous"), "error": r.pointer("/providerResult/error")}),
        _ => r.get("payloadSummary").cloned().unwrap_or(Value::Null),
    };
    json!({
        "schema": "aab.execution-fact/v1", "executionId": op_id, "sequence": item.sequence, "revision": r.get("revision"), "kind": kind,
        "target": r.get("target"), "timestampMs": item.committed_at_ms, "actionId": r.get("actionId"), "parentFactId": r.get("parentFactId"),
        "payloadSummary": summary, "evidenceRefs": [item.evidence_id], "checksum": item.checksum,
    })
}

async fn read_all(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<aab_facts::evidence::EvidencePage, CommandError> {
    let store = facts.store()?.clone();
    let id = op_id.to_string();
    tokio::task::spawn_blocking(move || store.read_evidence(Namespace::Intent, &id, &Cursor::After(after), limit))
        .await
        .map_err(|e| CommandError::new("fact_store_unavailable", e.to_string()))?
        .map_err(|e| to_command_error(&e))
}

async fn history(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<Value, CommandError> {
    let page = read_all(facts, op_id, after, limit).await?;
    let items: Vec<Value> = page.records.iter().map(|i| ledger_item(op_id, i)).collect();
    let last = page.records.last().map_or(after, |i| i.sequence);
    Ok(json!({"items": items, "lastSequence": last, "hasMore": page.has_more, "gap": page.gap.map(|g| json!({"from": g.from, "to": g.to}))}))
}

/// `status` of an Intent that is not live in this runtime: rebuilt from
/// checksum-verified evidence. Nothing is replayed.
async fn recover(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<Value, CommandError> {
    let mut records = Vec::new();
    let mut cursor = 0;
    loop {
        let page = read_all(facts, op_id, cursor, 1000).await?;
        cursor = page.next_sequence;
        let more = page.has_more;
        records.extend(page.records);
        if !more {
            break;
        }
    }
    if records.is_empty() {
        return Err(CommandError::new("operation_not_found", format!("no Intent `{op_id}` is live or retained")).with_field("operationId"));
    }
    let step = |i: &aab_facts::evidence::EvidenceItem| i.record.get("stepId").and_then(Value::as_str).map(str::to_string);
    let started = records.iter().find(|i| step(i).as_deref() == Some("intent-started")).map(|i| i.record["payloadSummary"].clone()).unwrap_or(Value::Null);
    let terminal = records.iter().rev().find(|i| step(i).as_deref() == Some("intent-terminal"));
    let mut latest = Map::new();
    let mut revision = 0;
    let mut summary = Value::Null;
    let mut markers: Vec<String> = Vec::new();
    let mut receipts: HashSet<String> = HashSet::new();
    for i in &records {
        let key = match i.kind.as_str() {
            "dispatch-marker" => "marker",
            "action-receipt" => "receipt",
            k => k,
        };
        latest.insert(key.into(), json!(i.evidence_id));
        match i.kind.as_str() {
            "summary" => {
                revision = i.record.get("revision").and_then(Value::as_u64).unwrap_or(revision);
                summary = i.record.get("summary").cloned().unwrap_or(Value::Null);
            }
            "dispatch-marker" => markers.push(i.record["actionId"].as_str().unwrap_or_default().to_string()),
            "action-receipt" => {
                receipts.insert(i.record["actionId"].as_str().unwrap_or_default().to_string());
            }
            _ => {}
        }
    }
    let unmatched: Vec<String> = markers.into_iter().filter(|m| !receipts.contains(m)).collect();
    let (status, error, terminal_id, saved) = match terminal {
        Some(t) => {
            let p = &t.record["payloadSummary"];
            (p["status"].clone(), p["error"].clone(), json!(t.evidence_id), p.clone())
        }
        None => (json!("interrupted"), json!("runtime_restarted"), Value::Null, started.clone()),
    };
    let page_items: Vec<Value> = records.iter().filter(|i| i.sequence > after).take(limit).map(|i| ledger_item(op_id, i)).collect();
    let has_more = records.iter().filter(|i| i.sequence > after).count() > page_items.len();
    let last = page_items.last().and_then(|i| i["sequence"].as_u64()).unwrap_or(after);
    Ok(json!({
        "ok": true, "command": "intent", "operationId": op_id, "status": status, "error": error, "revision": revision,
        "live": false, "recovered": true, "restartPolicy": "none", "terminalEvidenceId": terminal_id,
        "unmatchedActionIds": unmatched, "ambiguous": !unmatched.is_empty(),
        "goal": started.get("goal"), "provider": started.get("provider"), "mode": started.get("mode"),
        "startedAtMs": started.get("startedAtMs"), "deadlineMs": started.get("deadlineMs"),
        "lastDecisionId": saved.get("lastDecisionId"), "lastAction": saved.get("lastAction"), "actionSteps": saved.get("actionSteps"),
        "summary": summary, "latestEvidenceIds": latest, "evidenceId": latest.get("summary"),
        "history": {"items": page_items, "lastSequence": last, "hasMore": has_more, "gap": Value::Null},
    }))
}
