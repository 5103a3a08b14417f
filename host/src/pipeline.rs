//! The protocol-neutral execution host: the ordinary-command pipeline.
//!
//! parse → validate (every rejection before any device, store or file access) →
//! request-id idempotency → admission (per-target FIFO lane, one deadline) →
//! device ownership (pending action durable *before* dispatch) → provider call
//! (deadline, cancellation, dispatch mark) → settlement → public reply.
//!
//! Nothing here ever retries a call. A failure before the plugin's dispatch mark is
//! `dispatched:false, ambiguous:false`; after it the outcome is ambiguous and the
//! device stays unresolved until reconciled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aab_plugin_api::codes;
use aab_plugin_api::loader::{self, CallState};
use aab_plugin_api::protocol::{Invocation, Mutation, Outcome};
use serde_json::{Map, Value, json};

use crate::admission::{self, ActiveRequests, Cancel, CancelReason, Claim, Idempotency, Lanes};
use crate::builtins;
use crate::client::PublicReply;
use crate::error::CommandError;
use crate::facts::Facts;
use crate::ownership::Ownership;
use crate::plugins::{Catalog, PluginHandle};
use crate::registry::request::parse_public_request;
use crate::registry::{CommandOrigin, RegisteredCommand};
use crate::reply::{self, ExecOutcome};

/// How long a plugin gets to return after its cancellation flag was set at the
/// deadline, so it can close its subprocesses and sockets before the call settles.
const CANCEL_GRACE: Duration = Duration::from_millis(250);

/// One command for [`ExecutionHost::call`].
pub struct InternalCall<'a> {
    pub command: &'a str,
    pub arguments: Map<String, Value>,
    /// The caller's working directory (absolute).
    pub cwd: String,
    /// An outer deadline (e.g. an Intent's or Script's); the call's own can only be shorter.
    pub deadline_cap: Option<Instant>,
    /// Cancellation shared with the caller (e.g. a Script being cancelled).
    pub cancel: Option<Cancel>,
    /// Present only on the public request path (the `runtime` built-in needs it).
    pub control: Option<&'a dyn RuntimeControl>,
    /// The begin call of a managed Intent workflow (`IntentWorkflow`): reaches the
    /// plugin itself. Every other call of a workflow command starts its Intent.
    pub managed: bool,
}

/// What [`ExecutionHost::call`] produced.
pub struct CallResult {
    pub outcome: ExecOutcome,
    /// The host action id of this call (also in the invocation the plugin saw).
    pub action_id: String,
    /// `control.history` of this call.
    pub history: Value,
    /// The outcome of an earlier request with the same requestId was reused.
    pub reused: bool,
    pub target_key: String,
    /// When this delivery was requested, admitted and settled (`_feedback.timings`).
    pub timings: crate::feedback::CallTimings,
}

/// Runtime-level services the `runtime` built-in needs from its daemon.
pub trait RuntimeControl: Send + Sync {
    fn status(&self) -> Value;
    fn begin_stop(&self);
}

pub struct ExecutionHost {
    pub catalog: Catalog,
    pub runtime_id: String,
    pub ownership: Ownership,
    pub facts: Facts,
    /// Root of the plugins' private state directories (`host.info` → `dataDir`).
    pub plugin_data: std::path::PathBuf,
    lanes: Lanes,
    idempotency: Idempotency,
    pub active: ActiveRequests,
    pub executed: AtomicU64,
    /// Per-runtime state of the engines (operations, their tasks and events).
    pub intents: crate::engines::intent::IntentEngine,
    pub scripts: crate::engines::script::ScriptEngine,
}

/// The effective timeout: `timeoutMs` argument (already validated against the
/// command's maximum) or the command's default.
pub fn timeout_of(command: &RegisteredCommand, arguments: &Value) -> Duration {
    let ms = arguments.get("timeoutMs").and_then(Value::as_u64).unwrap_or_else(|| command.spec.default_timeout_for(arguments));
    Duration::from_millis(ms.clamp(1, command.spec.max_timeout_ms.max(1)))
}

/// Whether this invocation changes its target.
pub fn is_mutation(command: &RegisteredCommand, arguments: &Value) -> bool {
    match command.spec.mutation {
        Mutation::None => false,
        Mutation::Always => true,
        Mutation::Conditional => {
            let op = arguments.get("operation").and_then(Value::as_str).unwrap_or("");
            command.spec.mutating_operations.iter().any(|m| m == op) || command.spec.mutating_flags.iter().any(|f| arguments.get(f).is_some_and(flag_set))
        }
    }
}

/// Whether a mutating flag's argument turns the mutation on: `true`, or any
/// non-empty value (e.g. a page `script`); absent, `null`, `false` and `""` do not.
pub fn flag_set(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

/// Manifest feature: the plugin maps device arguments to a physical device key (hook `device-key`).
pub const DEVICE_KEY_FEATURE: &str = "device-ownership.device-key";
/// Manifest feature: a command's `operation:"reconcile"` is device-ownership reconcile.
pub const RECONCILE_OPERATION_FEATURE: &str = "device-ownership.reconcile-operation";

/// Manifest feature: a command's `operation:"status"` reply also carries the device's
/// ownership journal status (`hostOwnership`).
pub const STATUS_OPERATION_FEATURE: &str = "device-ownership.status-operation";
/// Manifest feature: at runtime stop, after active work drained and before device
/// ownership is released, the host calls the plugin's `runtime-stop` hook so it can
/// end what outlives a call (remote WebDriver sessions, instrumentation runs).
pub const STOP_HOOK_FEATURE: &str = "runtime.stop-hook";
/// How long one plugin's `runtime-stop` hook may take.
pub const STOP_HOOK_BUDGET: Duration = Duration::from_secs(10);

/// The physical device a mutation is bound to, from the command's device key. The
/// command's schema decides whether the device arguments are required (the registry
/// is the only validator); a mutation that names no device takes no journal.
fn device_of(command: &RegisteredCommand, arguments: &Value) -> Result<Option<String>, CommandError> {
    if command.spec.device_key.is_empty() {
        return Ok(None);
    }
    let mut parts = Vec::new();
    for name in &command.spec.device_key {
        match arguments.get(name) {
            Some(Value::String(s)) => parts.push(s.clone()),
            Some(v) if !v.is_null() => parts.push(v.to_string()),
            _ => return Ok(None),
        }
    }
    Ok(Some(parts.join("/")))
}

impl ExecutionHost {
    pub fn new(catalog: Catalog, runtime_id: String, ownership: Ownership, facts: Facts, plugin_data: std::path::PathBuf) -> ExecutionHost {
        ExecutionHost {
            catalog,
            runtime_id,
            ownership,
            facts,
            plugin_data,
            lanes: Lanes::default(),
            idempotency: Idempotency::default(),
            active: ActiveRequests::default(),
            executed: AtomicU64::new(0),
            intents: Default::default(),
            scripts: Default::default(),
        }
    }

    /// Run one public request and build its reply.
    pub async fn execute(self: &Arc<Self>, request: Value, cwd: String, control: &dyn RuntimeControl) -> PublicReply {
        let name = request.get("command").and_then(Value::as_str).map(str::to_string);
        let parsed = match parse_public_request(&request) {
            Ok(p) => p,
            Err(e) => return reply::rejection(name.as_deref(), &e),
        };
        let arguments = Value::Object(parsed.arguments.clone());
        if let Err(e) = self.catalog.registry.validate(&parsed.command, &arguments) {
            return reply::rejection(Some(&parsed.command), &e);
        }
        // Pre-dispatch extraction checks (a script is frozen and syntax-checked in a
        // child process, so off the async workers).
        let plan = {
            let extract = parsed.extract.clone();
            let dir = std::path::PathBuf::from(&cwd);
            match tokio::task::spawn_blocking(move || reply::plan(&extract, &dir)).await {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => return reply::rejection(Some(&parsed.command), &e),
                Err(e) => return reply::rejection(Some(&parsed.command), &CommandError::new("extraction_worker_failed", e.to_string())),
            }
        };
        let call = InternalCall { command: &parsed.command, arguments: parsed.arguments.clone(), cwd, deadline_cap: None, cancel: None, control: Some(control), managed: false };
        match self.call(call).await {
            Err(e) => reply::rejection(Some(&parsed.command), &e),
            Ok(mut result) => {
                // `_feedback` on object results of plugin commands (reference §10).
                if let Some(command) = self.catalog.registry.get(&parsed.command)
                    && matches!(command.origin, CommandOrigin::Plugin { .. })
                {
                    crate::feedback::attach(&mut result.outcome, command, &arguments, &result.target_key, &result.timings, &result.history);
                }
                let mut ctl = Map::new();
                ctl.insert("history".into(), result.history);
                if result.reused {
                    ctl.insert("idempotency".into(), json!({"requestId": parsed.arguments.get("requestId"), "reused": true}));
                }
                // A managed workflow answers as the Intent it started.
                let name = if self.catalog.intent_workflow(&parsed.command).is_some() { "intent".to_string() } else { parsed.command.clone() };
                self.finish(name, result.outcome, ctl, plan, parsed.output_max_bytes).await
            }
        }
    }

    /// One command through the whole pipeline — validation, idempotency, admission,
    /// ownership, dispatch, settlement, history — for the public request path and for
    /// the Intent and Script engines (`ctx.call`, Intent actions). `Err` = rejected
    /// before anything was admitted (validation-stage, `dispatched:false`).
    pub async fn call(self: &Arc<Self>, call: InternalCall<'_>) -> Result<CallResult, CommandError> {
        let name = call.command;
        let arguments = Value::Object(call.arguments.clone());
        let command = self.catalog.registry.validate(name, &arguments)?;
        if !call.managed
            && let Some((plugin, workflow)) = self.catalog.intent_workflow(name)
        {
            // A managed workflow: the Intent engine starts its Intent, whose begin
            // call comes back here with `managed` (and takes the device's lane then).
            let requested_at_ms = crate::ids::now_ms();
            let host: crate::engines::Host = self.clone();
            let outcome = crate::engines::intent::start_workflow(&host, &plugin, &workflow, &arguments, &call.cwd).await;
            let action_id = crate::ids::uuid_v4();
            let target_key = format!("host:{name}");
            let history = self.history(&target_key, &action_id, name, &arguments, &outcome).await;
            let timings = crate::feedback::CallTimings::settled_now(requested_at_ms, requested_at_ms, 0);
            return Ok(CallResult { outcome, action_id, history, reused: false, target_key, timings });
        }
        let mutation = is_mutation(command, &arguments);
        let device = if mutation { device_of(command, &arguments)? } else { None };
        let now = Instant::now();
        let requested_at_ms = crate::ids::now_ms();
        let mut timeout = timeout_of(command, &arguments);
        let mut deadline = now + timeout;
        if let Some(cap) = call.deadline_cap {
            // Nested calls can only shorten the deadline (and the budget they report).
            if cap < deadline {
                deadline = cap;
                timeout = cap.saturating_duration_since(now);
            }
        }
        // Aliases of one physical device share its journal and lane (within the deadline).
        let device = match device {
            Some(raw) => Some(self.canonical_device_key(command, &arguments, raw, deadline).await?),
            None => None,
        };
        // A mutation whose target is named by its device (the target key shares an
        // argument with the device key, e.g. Android's `serial`) waits in that device's
        // single lane, whatever its target kind: an SDK tap and a shell key event of the
        // same phone queue behind each other instead of racing for its ownership lock.
        // Other commands keep their own target lanes.
        let on_device = command.spec.target_key.iter().any(|k| command.spec.device_key.contains(k));
        let admission_key = match &device {
            Some(d) if on_device => Some(format!("device:{d}")),
            _ => admission::admission_key(&command.spec.target_kind, &command.spec.target_key, command.spec.lane.as_deref(), &arguments),
        };
        let request_id = arguments.get("requestId").and_then(Value::as_str).map(str::to_string);
        let target_key = admission_key.clone().unwrap_or_else(|| format!("host:{name}"));

        let claim = match &request_id {
            Some(rid) => Some(self.idempotency.claim(&target_key, rid, admission::content_digest(name, &call.arguments))?),
            None => None,
        };
        let sender = match claim {
            Some(Claim::Reuse(rx)) => {
                let outcome = admission::await_outcome(rx).await;
                let action_id = crate::ids::uuid_v4();
                let history = self.history(&target_key, &action_id, name, &arguments, &outcome).await;
                let timings = crate::feedback::CallTimings::settled_now(requested_at_ms, requested_at_ms, 0);
                return Ok(CallResult { outcome, action_id, history, reused: true, target_key, timings });
            }
            Some(Claim::Execute(tx)) => Some(tx),
            None => None,
        };

        let cancel = call.cancel.clone().unwrap_or_default();
        let action_id = crate::ids::uuid_v4();
        let active_id = self.active.register(request_id.as_deref(), cancel.clone());
        let started = Instant::now();
        let mut queue_wait_ms = 0;
        let outcome = match self.lanes.admit(admission_key.as_deref(), deadline, &cancel).await {
            Err(e) => ExecOutcome::Failed(e),
            Ok(_lane) => {
                self.active.mark_admitted(active_id);
                let queue_wait = started.elapsed();
                queue_wait_ms = queue_wait.as_millis() as u64;
                let outcome = self.dispatch(command, name, arguments.clone(), call.cwd.clone(), (timeout, deadline), &cancel, device, &action_id, call.control).await;
                tracing::debug!(command = %name, queue_ms = queue_wait.as_millis() as u64, "settled");
                outcome
            }
        };
        self.active.unregister(active_id);
        self.executed.fetch_add(1, Ordering::SeqCst);
        if let (Some(tx), Some(rid)) = (sender, &request_id) {
            self.idempotency.settle(&target_key, rid, tx, outcome.clone());
        }
        // History is written after the action settled; a failed write is reported in
        // `control.history` and never retries or rewrites the action.
        let timings = crate::feedback::CallTimings::settled_now(requested_at_ms, requested_at_ms + queue_wait_ms, queue_wait_ms);
        let history = self.history(&target_key, &action_id, name, &arguments, &outcome).await;
        Ok(CallResult { outcome, action_id, history, reused: false, target_key, timings })
    }

    async fn history(&self, target_key: &str, action_id: &str, command: &str, arguments: &Value, outcome: &ExecOutcome) -> Value {
        let (status, error, dispatched, ambiguous) = match outcome {
            ExecOutcome::Failed(e) => (if e.ambiguous { "ambiguous" } else { "failed" }, Some(e.code.clone()), e.dispatched, e.ambiguous),
            _ => ("completed", None, None, false),
        };
        let execution = json!({
            "command": command, "status": status, "args": arguments, "error": error,
            "dispatched": dispatched, "ambiguous": ambiguous, "runtimeEpoch": self.runtime_id,
        });
        let facts = self.facts.clone();
        let (target_key, action_id) = (target_key.to_string(), action_id.to_string());
        let fallback = action_id.clone();
        tokio::task::spawn_blocking(move || facts.record_history(&target_key, &action_id, &execution))
            .await
            .unwrap_or_else(|e| json!({"schema": "aab.command-history/v1", "status": "unavailable", "replayed": false, "actionId": fallback, "errors": [{"error": "history_write_failed", "message": e.to_string()}]}))
    }

    /// Assemble the public reply off the async workers: a script extraction runs
    /// its child and a response snapshot is written durably (the command has
    /// completed and released its target by now).
    async fn finish(&self, command: String, outcome: ExecOutcome, control: Map<String, Value>, plan: reply::ExtractPlan, max_bytes: usize) -> PublicReply {
        let name = command.clone();
        let facts = self.facts.clone();
        let stored = matches!(outcome, ExecOutcome::Stored { .. });
        let assembled = tokio::task::spawn_blocking(move || {
            let sink = |id: &str, snapshot: &Value| facts.save_snapshot(id, snapshot);
            // A response read never saves another snapshot.
            let sink: Option<reply::SnapshotSink<'_>> = if stored { None } else { Some(&sink) };
            reply::assemble_with_sink(&command, outcome, control, &plan, max_bytes, sink)
        })
        .await;
        match assembled {
            Ok(reply) => reply,
            Err(e) => reply::failure(&name, CommandError::ambiguous("reply_assembly_failed", format!("reply assembly failed: {e}"))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        self: &Arc<Self>,
        command: &RegisteredCommand,
        name: &str,
        arguments: Value,
        cwd: String,
        (timeout, deadline): (Duration, Instant),
        cancel: &Cancel,
        device: Option<String>,
        action_id: &str,
        control: Option<&dyn RuntimeControl>,
    ) -> ExecOutcome {
        let plugin = match &command.origin {
            CommandOrigin::Host => return self.builtin(name, &arguments, &cwd, deadline, control).await,
            CommandOrigin::Plugin { name, .. } => name.clone(),
        };
        let Some(module) = self.catalog.modules.get(&plugin).cloned() else {
            return ExecOutcome::Failed(CommandError::new("plugin_unavailable", format!("plugin `{plugin}` is not loaded")));
        };
        let action_id = action_id.to_string();
        if arguments.get("operation").and_then(Value::as_str) == Some("reconcile") && self.catalog.plugin_has_feature(&plugin, RECONCILE_OPERATION_FEATURE) {
            // The plugin's `operation:"reconcile"` is the host's device-ownership
            // reconcile of the device it names (only the host holds the journal).
            let raw = match device_of(command, &arguments) {
                Ok(Some(raw)) => raw,
                Ok(None) => return ExecOutcome::Failed(CommandError::invalid(command.spec.device_key.first().map_or("deviceId", String::as_str), "reconcile names the device whose journal it settles")),
                Err(e) => return ExecOutcome::Failed(e),
            };
            let key = match self.canonical_device_key(command, &arguments, raw, deadline).await {
                Ok(k) => k,
                Err(e) => return ExecOutcome::Failed(e),
            };
            return match self.reconcile(key, deadline).await {
                ExecOutcome::Json(mut v) => {
                    v["command"] = json!(name);
                    v["deviceKey"] = v["serial"].take();
                    v.as_object_mut().map(|o| o.remove("serial"));
                    ExecOutcome::Json(v)
                }
                other => other,
            };
        }
        let guard = match &device {
            None => None,
            Some(serial) => {
                let mut pending = Map::new();
                pending.insert("kind".into(), json!("plugin-action"));
                pending.insert("plugin".into(), json!(plugin));
                pending.insert("command".into(), json!(name));
                pending.insert("actionId".into(), json!(action_id));
                pending.insert("runtimeEpoch".into(), json!(self.runtime_id));
                pending.insert("target".into(), json!({"serial": serial}));
                pending.insert("requestDigest".into(), json!(admission::content_digest(name, arguments.as_object().expect("validated object"))));
                let ownership = self.ownership.clone();
                let serial = serial.clone();
                match tokio::task::spawn_blocking(move || ownership.begin(&serial, pending)).await {
                    Ok(Ok(g)) => Some(g),
                    Ok(Err(e)) => return ExecOutcome::Failed(e),
                    Err(e) => return ExecOutcome::Failed(CommandError::new("device_ownership_unavailable", format!("ownership check failed: {e}"))),
                }
            }
        };
        let on_dispatch: Option<loader::DispatchHook> = guard.as_ref().map(|g| {
            let marker = g.dispatch_marker();
            std::sync::Arc::new(move || marker.mark()) as loader::DispatchHook
        });
        // `operation:"status"` of a plugin that asks for it also reports the device's
        // ownership journal (the plugin cannot read it: only the host holds journals).
        let status_device = match arguments.get("operation").and_then(Value::as_str) {
            Some("status") if guard.is_none() && self.catalog.plugin_has_feature(&plugin, STATUS_OPERATION_FEATURE) => device_of(command, &arguments).ok().flatten().map(|raw| (raw, arguments.clone())),
            _ => None,
        };
        let mut outcome = invoke_plugin(PluginCall {
            module,
            plugin: &plugin,
            command,
            request_id: arguments.get("requestId").and_then(Value::as_str).map(str::to_string),
            arguments,
            cwd,
            runtime_id: &self.runtime_id,
            facts: self.facts.clone(),
            data_root: self.plugin_data.clone(),
            action_id: action_id.clone(),
            timeout,
            deadline,
            cancel: cancel.clone(),
            on_dispatch,
        })
        .await;
        if let (Some((raw, args)), ExecOutcome::Json(Value::Object(reply))) = (status_device, &mut outcome) {
            let journal = match self.canonical_device_key(command, &args, raw, deadline).await {
                Ok(key) => {
                    let ownership = self.ownership.clone();
                    match tokio::task::spawn_blocking(move || ownership.status(&key)).await {
                        Ok(Ok(v)) => v,
                        Ok(Err(e)) => json!({"error": e.code, "message": e.message}),
                        Err(e) => json!({"error": "device_ownership_unavailable", "message": e.to_string()}),
                    }
                }
                Err(e) => json!({"error": e.code, "message": e.message}),
            };
            reply.insert("hostOwnership".into(), journal);
        }
        if let Some(guard) = guard {
            let known = match &outcome {
                // Not dispatched, or dispatched and settled by the device's receipt.
                ExecOutcome::Failed(e) => e.dispatched.is_some() && !e.ambiguous,
                _ => true,
            };
            let result = if known {
                let proof = match &outcome {
                    ExecOutcome::Failed(e) => json!({"ok": false, "error": e.code, "dispatched": e.dispatched}),
                    _ => json!({"ok": true}),
                };
                tokio::task::spawn_blocking(move || guard.settle(json!({"source": "provider-reply", "outcome": proof}))).await
            } else {
                let reason = match &outcome {
                    ExecOutcome::Failed(e) => json!({"error": e.code, "message": e.message}),
                    _ => Value::Null,
                };
                tokio::task::spawn_blocking(move || guard.leave_unresolved(reason)).await
            };
            // A failed journal write leaves the pending record in place, so the device
            // stays blocked: the safe direction.
            match result {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("ownership journal not updated after {name}: {e}"),
                Err(e) => tracing::error!("ownership journal not updated after {name}: {e}"),
            }
        }
        outcome
    }

    /// The ownership key of the device a command names. A plugin whose device
    /// arguments are aliases (an iOS `deviceId` may be a CoreDevice identifier, a
    /// UDID, a serial or a name) declares feature `device-ownership.device-key` and
    /// answers hook `device-key` with the physical device's key (`ios:<UDID>`), so
    /// every alias shares one journal. Others use the argument as given.
    async fn canonical_device_key(&self, command: &RegisteredCommand, arguments: &Value, raw: String, deadline: Instant) -> Result<String, CommandError> {
        let CommandOrigin::Plugin { name: plugin, .. } = &command.origin else { return Ok(raw) };
        if !self.catalog.plugin_has_feature(plugin, DEVICE_KEY_FEATURE) {
            return Ok(raw);
        }
        let Some(module) = self.catalog.modules.get(plugin).cloned() else { return Ok(raw) };
        let request = json!({"command": command.spec.command, "arguments": arguments, "deviceKey": raw});
        let answer = call_hook(module, plugin, "device-key", &request, deadline, &self.runtime_id, self.facts.clone(), self.plugin_data.clone()).await.map_err(|mut e| {
            e.dispatched = Some(false);
            e
        })?;
        match answer.get("deviceKey").and_then(Value::as_str) {
            Some(k) if !k.is_empty() && k.len() <= 1024 => Ok(k.to_string()),
            _ => Err(CommandError::new(codes::PLUGIN_OUTPUT_INVALID, format!("plugin `{plugin}` answered device-key without a deviceKey")).with_details(json!({"answer": answer}))),
        }
    }

    /// Run a built-in through the handler registered with its spec.
    async fn builtin(self: &Arc<Self>, name: &str, arguments: &Value, cwd: &str, deadline: Instant, control: Option<&dyn RuntimeControl>) -> ExecOutcome {
        match self.catalog.handlers.get(name) {
            Some(handler) => handler(self, builtins::BuiltinCall { arguments, cwd, deadline, control }).await,
            None => ExecOutcome::Failed(CommandError::new("unknown_command", format!("no host implementation for `{name}`"))),
        }
    }

    /// `runtime`: start / status / stop / cancel (needs the daemon's control).
    pub(crate) fn run_runtime<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move {
            let (arguments, control) = (call.arguments, call.control);
            match arguments.get("operation").and_then(Value::as_str).unwrap_or("status") {
                _ if control.is_none() => {
                    ExecOutcome::Failed(CommandError::new("command_not_allowed", "`runtime` can only be called directly, not from an Intent or Script"))
                }
                "stop" => {
                    let control = control.expect("checked above");
                    control.begin_stop();
                    ExecOutcome::Json(control.status())
                }
                "cancel" => {
                    let rid = arguments.get("cancelRequestId").and_then(Value::as_str).unwrap_or_default();
                    let n = host.active.cancel(rid);
                    ExecOutcome::Json(json!({"ok": true, "command": "runtime", "operation": "cancel", "cancelRequestId": rid, "cancelled": n}))
                }
                _ => ExecOutcome::Json(control.expect("checked above").status()),
            }
        })
    }

    /// `executor-prepare`: host-side preparation for the executors (`crate::executors`).
    pub(crate) fn run_executor_prepare<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move {
            let runtime_dir = host.plugin_data.parent().map(std::path::Path::to_path_buf).unwrap_or_else(|| host.plugin_data.clone());
            match crate::executors::prepare(call.arguments, call.cwd, &runtime_dir, call.deadline).await {
                Ok(v) => ExecOutcome::Json(v),
                Err(e) => ExecOutcome::Failed(e),
            }
        })
    }

    /// `intent`: the Intent engine.
    pub(crate) fn run_intent<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move { crate::engines::intent::handle(&(host.clone() as crate::engines::Host), call.arguments, call.cwd).await })
    }

    /// `script`: the Script engine.
    pub(crate) fn run_script<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move { crate::engines::script::handle(&(host.clone() as crate::engines::Host), call.arguments, call.cwd).await })
    }

    /// `device-ownership`: status / receipt / reconcile of a device's journal.
    pub(crate) fn run_device_ownership<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move {
            let op = call.arguments.get("operation").and_then(Value::as_str).unwrap_or("status");
            host.device_ownership(op, call.arguments, call.deadline).await
        })
    }

    /// `evidence`: export an operation's evidence, or verify an archive offline.
    pub(crate) fn run_evidence<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move {
            let facts = host.facts.clone();
            let args = call.arguments.clone();
            let cwd = std::path::PathBuf::from(call.cwd);
            let op = call.arguments.get("operation").and_then(Value::as_str).unwrap_or("status").to_string();
            blocking(move || {
                let path = |k: &str| cwd.join(args.get(k).and_then(Value::as_str).unwrap_or_default());
                let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                if op == "verify" {
                    crate::facts::verify_archive(&path("archiveDir"), &text("manifestSha256"))
                } else if op == "render" {
                    let sha = args.get("manifestSha256").and_then(Value::as_str);
                    crate::facts::render_archive(&path("archiveDir"), sha, &path("outputFile"))
                } else {
                    let include = args.get("includeRecordedPayloads").and_then(Value::as_bool).unwrap_or(false);
                    facts.export(&text("namespace"), &text("operationId"), &path("outputDir"), include)
                }
            })
            .await
        })
    }

    /// `response`: re-extract a stored response snapshot by its ref.
    pub(crate) fn run_response<'a>(host: &'a Arc<Self>, call: builtins::BuiltinCall<'a>) -> builtins::BuiltinFuture<'a> {
        Box::pin(async move {
            let facts = host.facts.clone();
            let reference = call.arguments.get("ref").cloned().unwrap_or(Value::Null);
            match tokio::task::spawn_blocking(move || facts.read_snapshot(&reference)).await {
                Ok(Ok(saved)) => {
                    let snap = saved.snapshot;
                    ExecOutcome::Stored {
                        kind: snap.get("kind").and_then(Value::as_str).unwrap_or("json").to_string(),
                        value: snap.get("value").cloned().unwrap_or(Value::Null),
                        origin: json!({
                            "identity": snap.get("identity"),
                            "execution": snap.get("execution"),
                            "ref": saved.reference.to_json(),
                            "committedAtMs": saved.committed_at_ms,
                            "representation": saved.representation.to_json(),
                        }),
                    }
                }
                Ok(Err(e)) => ExecOutcome::Failed(e),
                Err(e) => ExecOutcome::Failed(CommandError::new("fact_store_unavailable", e.to_string())),
            }
        })
    }

    async fn device_ownership(&self, op: &str, arguments: &Value, deadline: Instant) -> ExecOutcome {
        let serial = arguments.get("serial").and_then(Value::as_str).unwrap_or_default().to_string();
        let ownership = self.ownership.clone();
        match op {
            "status" => blocking(move || ownership.status(&serial)).await,
            "receipt" => {
                let epoch = arguments.get("runtimeEpoch").and_then(Value::as_str).unwrap_or_default().to_string();
                let action = arguments.get("actionId").and_then(Value::as_str).unwrap_or_default().to_string();
                blocking(move || ownership.receipt(&serial, &epoch, &action)).await
            }
            "cancel-install" => self.cancel_install(serial, arguments, deadline).await,
            _ => self.reconcile(serial, deadline).await,
        }
    }

    /// `cancel-install`: the plugin that declares feature
    /// `device-ownership.cancel-install` abandons its retained install.
    async fn cancel_install(&self, serial: String, arguments: &Value, deadline: Instant) -> ExecOutcome {
        const FEATURE: &str = "device-ownership.cancel-install";
        let plugin = self.catalog.plugin_with_feature(FEATURE);
        let Some((plugin, module)) = plugin.and_then(|p| self.catalog.modules.get(&p).cloned().map(|m| (p, m))) else {
            return ExecOutcome::Failed(CommandError::new("provider_unavailable", format!("no loaded plugin offers {FEATURE}")).with_field("operation"));
        };
        let request = json!({"serial": serial, "actionId": arguments.get("actionId")});
        match call_hook(module, &plugin, "cancel-install", &request, deadline, &self.runtime_id, self.facts.clone(), self.plugin_data.clone()).await {
            Ok(mut v) => {
                v["command"] = json!("device-ownership");
                v["serial"] = json!(serial);
                ExecOutcome::Json(v)
            }
            Err(e) => ExecOutcome::Failed(e),
        }
    }

    /// Ask the provider that owned the pending action for its durable receipt. Only
    /// a receipt for the same action id and runtime epoch settles it; an idle or
    /// foreign answer leaves the device unresolved. Never replays the action.
    async fn reconcile(&self, serial: String, deadline: Instant) -> ExecOutcome {
        let ownership = self.ownership.clone();
        let s = serial.clone();
        let guard = match tokio::task::spawn_blocking(move || ownership.begin_reconcile(&s)).await {
            Ok(Ok(g)) => g,
            Ok(Err(e)) => return ExecOutcome::Failed(e),
            Err(e) => return ExecOutcome::Failed(CommandError::new("device_ownership_unavailable", e.to_string())),
        };
        let Some(pending) = guard.journal.pending.clone() else {
            return ExecOutcome::Json(json!({
                "ok": true, "command": "device-ownership", "serial": serial, "phase": "idle", "recovered": false,
                "settlement": guard.journal.last_settlement,
            }));
        };
        let plugin = pending.get("plugin").and_then(Value::as_str).unwrap_or_default().to_string();
        let unresolved = |recovery: Value| {
            ExecOutcome::Failed(
                CommandError::new("device_ownership_unresolved", format!("device `{serial}` stays unresolved: the provider did not produce the original action's receipt"))
                    .with_details(json!({"serial": serial, "phase": "unresolved", "pending": pending, "recovery": recovery})),
            )
        };
        let Some(module) = self.catalog.modules.get(&plugin).cloned() else {
            return unresolved(json!({"reason": "provider_unavailable", "plugin": plugin}));
        };
        let request = json!({"pending": pending, "serial": serial});
        let answer = match call_hook(module, &plugin, "reconcile", &request, deadline, &self.runtime_id, self.facts.clone(), self.plugin_data.clone()).await {
            Ok(v) => v,
            Err(e) => return unresolved(json!({"reason": "provider_error", "error": e.to_json()})),
        };
        let receipt = answer.get("receipt").cloned().unwrap_or(Value::Null);
        let matches = answer.get("status").and_then(Value::as_str) == Some("settled")
            && receipt.get("actionId") == pending.get("actionId")
            && receipt.get("runtimeEpoch") == pending.get("runtimeEpoch")
            && receipt.get("actionId").is_some_and(|a| a.is_string());
        if !matches {
            return unresolved(json!({"reason": "no_matching_receipt", "answer": answer}));
        }
        match tokio::task::spawn_blocking(move || guard.settle(receipt.clone()).map(|s| (s, receipt))).await {
            Ok(Ok((settlement, receipt))) => ExecOutcome::Json(json!({
                "ok": true, "command": "device-ownership", "serial": serial, "phase": "idle", "recovered": true,
                "settlement": settlement, "executionReceipt": receipt,
            })),
            Ok(Err(e)) => ExecOutcome::Failed(e),
            Err(e) => ExecOutcome::Failed(CommandError::new("device_ownership_unavailable", e.to_string())),
        }
    }

    /// Runtime stop, after draining: every plugin declaring [`STOP_HOOK_FEATURE`] is
    /// asked (concurrently, each within [`STOP_HOOK_BUDGET`]) to end what it keeps
    /// open between calls. A failing or slow hook is logged; it never blocks the stop.
    pub async fn stop_plugins(&self) {
        let names: Vec<String> = self.catalog.modules.keys().filter(|p| self.catalog.plugin_has_feature(p, STOP_HOOK_FEATURE)).cloned().collect();
        let calls = names.into_iter().filter_map(|plugin| {
            let module = self.catalog.modules.get(&plugin).cloned()?;
            let (facts, data, runtime_id) = (self.facts.clone(), self.plugin_data.clone(), self.runtime_id.clone());
            Some(async move {
                let deadline = Instant::now() + STOP_HOOK_BUDGET;
                match call_hook(module, &plugin, "runtime-stop", &json!({"reason": "runtime-stop"}), deadline, &runtime_id, facts, data).await {
                    Ok(answer) => tracing::info!(plugin = %plugin, answer = %answer, "runtime-stop hook"),
                    Err(e) => tracing::warn!(plugin = %plugin, error = %e.code, message = %e.message, "runtime-stop hook failed"),
                }
            })
        });
        futures_util::future::join_all(calls).await;
    }

    /// Runtime stop: queued requests end with `runtime_stopped`; running ones drain;
    /// the engines cancel their operations (they persist terminal checkpoints).
    pub fn stop_admission(&self) {
        self.active.cancel_queued(CancelReason::RuntimeStopped);
        self.intents.shutdown();
        self.scripts.shutdown();
    }
}

async fn blocking(f: impl FnOnce() -> Result<Value, CommandError> + Send + 'static) -> ExecOutcome {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => ExecOutcome::Json(v),
        Ok(Err(e)) => ExecOutcome::Failed(e),
        Err(e) => ExecOutcome::Failed(CommandError::new("device_ownership_unavailable", e.to_string())),
    }
}

/// Everything one plugin call needs from the runtime.
pub struct PluginCall<'a> {
    pub module: PluginHandle,
    pub plugin: &'a str,
    pub command: &'a RegisteredCommand,
    pub arguments: Value,
    pub cwd: String,
    pub runtime_id: &'a str,
    pub facts: Facts,
    pub data_root: std::path::PathBuf,
    /// Runs at the plugin's first dispatch mark (the ownership journal's durable mark).
    pub on_dispatch: Option<loader::DispatchHook>,
    pub action_id: String,
    pub request_id: Option<String>,
    /// The command's configured timeout (the deadline may already be shorter
    /// because of queue wait).
    pub timeout: Duration,
    pub deadline: Instant,
    pub cancel: Cancel,
}

/// The services [`host_service`] answers, advertised by `host.info`.
const HOST_SERVICES: [&str; 5] = ["host.info", "host.echo", "host.time", "facts.append", "facts.read"];

/// JSON services a plugin may call through `Context::host_call`.
fn host_service(plugin: String, runtime_id: String, facts: Facts, data_root: std::path::PathBuf) -> impl Fn(&str, &str) -> Result<String, String> + Send + Sync {
    move |method, params| match method {
        "host.info" => {
            // A private 0700 directory for the plugin's own protocol state (e.g. its
            // pending-action table); evidence still goes through the FactStore.
            let data_dir = data_root.join(&plugin);
            let data_dir = crate::config::ensure_private_dir(&data_dir).ok().map(|_| data_dir.display().to_string());
            Ok(json!({
                "hostVersion": crate::HOST_VERSION,
                "pluginApi": aab_plugin_api::protocol::PLUGIN_API_VERSION,
                "runtimeId": runtime_id,
                "plugin": plugin,
                "dataDir": data_dir,
                "services": HOST_SERVICES,
                "features": ["invocation-host-options"],
            })
            .to_string())
        }
        "facts.append" | "facts.read" => {
            let params: Value = serde_json::from_str(params).map_err(|e| json!({"error": "invalid_argument", "message": format!("params are not JSON: {e}")}).to_string())?;
            facts.service(method, &params).map(|v| v.to_string()).map_err(|e| e.to_json().to_string())
        }
        "host.echo" => serde_json::from_str::<Value>(params)
            .map(|v| json!({"params": v}).to_string())
            .map_err(|e| json!({"error": "invalid_argument", "message": format!("params are not JSON: {e}")}).to_string()),
        "host.time" => Ok(json!({"unixMs": crate::ids::now_ms()}).to_string()),
        other => Err(json!({"error": codes::UNSUPPORTED_HOST_SERVICE, "message": format!("the host offers no service `{other}`")}).to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
fn callbacks(
    plugin: &str,
    runtime_id: &str,
    facts: Facts,
    data_root: std::path::PathBuf,
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
    dispatched: Arc<AtomicBool>,
    on_dispatch: Option<loader::DispatchHook>,
) -> aab_plugin_api::abi::HostCallbacksRef {
    let log_name = plugin.to_string();
    loader::host_callbacks(CallState {
        deadline,
        cancelled,
        dispatched,
        on_dispatch,
        logger: Box::new(move |level, message| plugin_log(&log_name, level, message)),
        service: Box::new(host_service(plugin.to_string(), runtime_id.to_string(), facts, data_root)),
    })
}

/// One plugin log line, at the level the plugin sent (`abi::level`; anything else
/// is logged as debug), under the target `aab::plugin`.
fn plugin_log(plugin: &str, level: u8, message: &str) {
    use aab_plugin_api::abi::level as l;
    match level {
        l::ERROR => tracing::error!(target: "aab::plugin", plugin, "{message}"),
        l::WARN => tracing::warn!(target: "aab::plugin", plugin, "{message}"),
        l::INFO => tracing::info!(target: "aab::plugin", plugin, "{message}"),
        _ => tracing::debug!(target: "aab::plugin", plugin, "{message}"),
    }
}

/// Call a plugin hook (e.g. `reconcile`) under a deadline.
#[allow(clippy::too_many_arguments)]
pub async fn call_hook(
    module: PluginHandle,
    plugin: &str,
    method: &str,
    request: &Value,
    deadline: Instant,
    runtime_id: &str,
    facts: Facts,
    data_root: std::path::PathBuf,
) -> Result<Value, CommandError> {
    let flag = Arc::new(AtomicBool::new(false));
    let host = callbacks(plugin, runtime_id, facts, data_root, deadline, flag.clone(), Arc::new(AtomicBool::new(false)), None);
    let method = method.to_string();
    let body = request.to_string();
    let handle = tokio::task::spawn_blocking(move || module.call(&method, &body, &host));
    let raw = match tokio::time::timeout_at(deadline.into(), handle).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(e)) => return Err(CommandError::new("plugin_call_failed", e.to_string())),
        Err(_) => {
            flag.store(true, Ordering::SeqCst);
            return Err(CommandError::new(codes::DEADLINE_EXCEEDED, "the provider did not answer in time"));
        }
    };
    let outcome: Outcome = serde_json::from_str(&raw).map_err(|e| CommandError::new(codes::PLUGIN_OUTPUT_INVALID, e.to_string()))?;
    if outcome.ok {
        Ok(outcome.value.unwrap_or(Value::Null))
    } else {
        let e = outcome.error.unwrap_or_else(|| aab_plugin_api::ProviderError::new(codes::PLUGIN_OUTPUT_INVALID, "failed outcome without an error"));
        let mut out = CommandError::new(e.error, e.message);
        if let Some(f) = e.field {
            out = out.with_field(f);
        }
        if let Some(d) = e.details {
            out = out.with_details(d);
        }
        Err(out)
    }
}

pub async fn invoke_plugin(call: PluginCall<'_>) -> ExecOutcome {
    let dispatched = Arc::new(AtomicBool::new(false));
    let cancelled_flag = Arc::new(AtomicBool::new(false));
    let host = callbacks(call.plugin, call.runtime_id, call.facts.clone(), call.data_root.clone(), call.deadline, cancelled_flag.clone(), dispatched.clone(), call.on_dispatch);
    let timeout_ms = call.timeout.as_millis() as u64;
    // Host execution options travel as invocation fields, not as arguments, so a
    // provider's typed arguments can refuse unknown fields.
    let mut invocation = Invocation::new(call.command.spec.command.clone(), call.arguments, call.action_id, call.runtime_id, call.cwd, timeout_ms).with_request_id(call.request_id);
    invocation.lift_host_options();
    let request = serde_json::to_string(&invocation).expect("invocation serialises");
    let module = call.module;
    let mut handle = tokio::task::spawn_blocking(move || module.call("invoke", &request, &host));
    let marked = || dispatched.load(Ordering::SeqCst);

    let raw = tokio::select! {
        joined = &mut handle => joined,
        _ = tokio::time::sleep_until(call.deadline.into()) => {
            cancelled_flag.store(true, Ordering::SeqCst);
            let _ = tokio::time::timeout(CANCEL_GRACE, &mut handle).await;
            return ExecOutcome::Failed(after_mark(
                marked(),
                "deadline_exceeded",
                format!("`{}` did not finish within its {} ms deadline", invocation.command, timeout_ms),
            ));
        }
        _ = call.cancel.cancelled() => {
            // Let the plugin see the flag and close what it opened; it may still
            // finish (then its real outcome is reported) until the deadline.
            cancelled_flag.store(true, Ordering::SeqCst);
            match tokio::time::timeout_at(call.deadline.into(), &mut handle).await {
                Ok(joined) => match joined {
                    Ok(raw) => match outcome_from_raw(&raw, marked()) {
                        ExecOutcome::Failed(e) if e.dispatched == Some(false) => return ExecOutcome::Failed(admission::cancelled_error(&call.cancel, false, "before dispatch")),
                        ExecOutcome::Failed(_) => return ExecOutcome::Failed(admission::cancelled_error(&call.cancel, true, "after dispatch")),
                        ok => return ok,
                    },
                    Err(_) => return ExecOutcome::Failed(admission::cancelled_error(&call.cancel, marked(), "while running")),
                },
                Err(_) => return ExecOutcome::Failed(admission::cancelled_error(&call.cancel, marked(), "while running")),
            }
        }
    };
    match raw {
        Ok(raw) => match outcome_from_raw(&raw, marked()) {
            // The plugin noticed the expired deadline (remaining 0) a moment before our
            // timer fired: it is still the deadline that ended the call.
            ExecOutcome::Failed(e) if Instant::now() >= call.deadline => ExecOutcome::Failed(CommandError {
                code: "deadline_exceeded".into(),
                message: format!("`{}` did not finish within its {} ms deadline ({})", invocation.command, timeout_ms, e.message),
                ..e
            }),
            other => other,
        },
        // The SDK contains panics, so this is a host-side failure of the call thread.
        Err(join) => ExecOutcome::Failed(after_mark(marked(), "plugin_call_failed", format!("plugin call did not complete: {join}"))),
    }
}

fn outcome_from_raw(raw: &str, marked: bool) -> ExecOutcome {
    let outcome: Outcome = match serde_json::from_str(raw) {
        Ok(o) => o,
        Err(e) => return ExecOutcome::Failed(after_mark(marked, "plugin_output_invalid", format!("plugin returned an invalid outcome: {e}"))),
    };
    if outcome.ok {
        return match (outcome.kind.as_deref(), outcome.value) {
            (Some("text"), Some(Value::String(t))) => ExecOutcome::Text(t),
            (Some("bytes"), Some(Value::Array(items))) => {
                let bytes: Option<Vec<u8>> = items.iter().map(|v| v.as_u64().and_then(|n| u8::try_from(n).ok())).collect();
                match bytes {
                    Some(b) => ExecOutcome::Bytes(b),
                    None => ExecOutcome::Failed(after_mark(marked, "plugin_output_invalid", "bytes outcome is not a byte array".into())),
                }
            }
            (Some("json") | None, v) => ExecOutcome::Json(v.unwrap_or(Value::Null)),
            (kind, _) => ExecOutcome::Failed(after_mark(marked, "plugin_output_invalid", format!("unsupported outcome kind {kind:?}"))),
        };
    }
    let e = outcome.error.unwrap_or_else(|| aab_plugin_api::ProviderError::new(codes::PLUGIN_OUTPUT_INVALID, "failed outcome without an error"));
    // A panic after the mark is as ambiguous as any other failure after it.
    let dispatched_fact = match (e.dispatched, marked) {
        (Some(d), _) => Some(d),
        (None, true) if e.error == "plugin_panic" => None,
        (None, true) => Some(true),
        (None, false) => Some(false),
    };
    ExecOutcome::Failed(CommandError {
        code: e.error,
        message: e.message,
        field: e.field,
        details: e.details,
        dispatched: dispatched_fact,
        // Only an explicit dispatch fact with the device's settled receipt is a
        // known failure after the mark; anything else after it stays unknown.
        ambiguous: match (e.ambiguous, dispatched_fact) {
            (Some(false), Some(true)) => false,
            _ => dispatched_fact != Some(false),
        },
    })
}

/// An error whose dispatch fact comes from the mark: before it nothing happened;
/// after it the effect may or may not have happened (unknown, ambiguous).
fn after_mark(marked: bool, code: &str, message: String) -> CommandError {
    if marked { CommandError::ambiguous(code, message) } else { CommandError::new(code, message) }
}

/// The engines' narrow view of this host (`crate::engines::Pipeline`).
impl crate::engines::Pipeline for ExecutionHost {
    fn call<'a>(self: Arc<Self>, call: InternalCall<'a>) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<CallResult, CommandError>> + Send + 'a>> {
        Box::pin(async move { ExecutionHost::call(&self, call).await })
    }
    fn registry(&self) -> &crate::registry::Registry {
        &self.catalog.registry
    }
    fn intent_providers(&self) -> Vec<(String, aab_plugin_api::protocol::IntentProvider)> {
        self.catalog.intent_providers()
    }
    fn engine_catalog(&self) -> &crate::engines::catalog::EngineCatalog {
        &self.catalog.engines
    }
    fn facts(&self) -> &Facts {
        &self.facts
    }
    fn intents(&self) -> &crate::engines::intent::IntentEngine {
        &self.intents
    }
    fn scripts(&self) -> &crate::engines::script::ScriptEngine {
        &self.scripts
    }
}
