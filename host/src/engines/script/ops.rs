//! Script operations, the per-operation supervisor and `ctx.call`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aab_facts::canonical::{canonical_sha256, to_canonical_string};
use aab_facts::{Cursor, Durability, Namespace};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::child::{self, ScriptChild};
use super::*;
use crate::admission::{Cancel, CancelReason};
use crate::error::CommandError;
use crate::engines::Host;
use crate::pipeline::InternalCall;

fn arg_str<'a>(a: &'a Value, k: &str) -> Option<&'a str> {
    a.get(k).and_then(Value::as_str)
}

fn op_not_found(id: &str) -> CommandError {
    CommandError::new("unknown_operation", format!("no script operation `{id}`")).with_field("operationId")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, CommandError> + Send + 'static) -> Result<T, CommandError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(CommandError::new("fact_store_unavailable", e.to_string())))
}

/// Append one evidence record (Sync durability) off the async workers.
async fn persist(host: &Host, op_id: &str, kind: &'static str, payload: Value) -> Result<aab_facts::EvidenceReceipt, CommandError> {
    let facts = host.facts().clone();
    let op_id = op_id.to_string();
    blocking(move || {
        let store = facts.store()?;
        store.append_evidence(Namespace::Script, &op_id, kind, &payload, Durability::Sync).map_err(|e| crate::facts::to_command_error(&e))
    })
    .await
}

pub async fn dispatch(host: &Host, a: &Value, cwd: &str) -> Result<Value, CommandError> {
    let operation = arg_str(a, "operation").unwrap_or("status");
    let id = arg_str(a, "operationId").unwrap_or_default().to_string();
    let page = Page::of(a);
    let engine = host.scripts();
    match operation {
        "start" => start(host, a, cwd).await,
        "runtime-status" => Ok(runtime_status(host)),
        "status" | "wait" | "result" | "pause" | "resume" | "decide" | "cancel" => {
            let Some(op) = engine.find(&id) else {
                return match operation {
                    "status" | "wait" => restore(host, &id).await,
                    "result" => restored_result(host, &id).await,
                    "resume" => resume_restored(host, &id, a, cwd).await,
                    _ => {
                        let _ = restore(host, &id).await?;
                        Err(CommandError::new("operation_not_live", format!("operation `{id}` is not running in this runtime")))
                    }
                };
            };
            match operation {
                "status" => Ok(with_catalog(host, &op, op.snapshot("status", page), a)),
                "wait" => {
                    let wait_ms = a.get("waitMs").and_then(Value::as_u64).unwrap_or(30_000);
                    Ok(with_catalog(host, &op, wait(&op, page, wait_ms).await, a))
                }
                "result" => result(host, &op).await,
                "pause" => pause(&op).map(|_| with_catalog(host, &op, op.snapshot("pause", page), a)),
                "resume" => {
                    // `script`/`pythonPath` re-run a lost operation; a live one is not re-run,
                    // so they would be dropped silently.
                    if let Some(k) = ["script", "pythonPath"].into_iter().find(|k| a.get(*k).is_some()) {
                        return Err(CommandError::new("unsupported_argument", format!("unsupported argument `{k}`: operation `{id}` is live in this runtime; only a lost checkpoint-policy operation is resumed with {k}")).with_field(k));
                    }
                    resume(&op).map(|_| with_catalog(host, &op, op.snapshot("resume", page), a))
                }
                "decide" => decide(&op, a).map(|_| with_catalog(host, &op, op.snapshot("decide", page), a)),
                _ => Ok(with_catalog(host, &op, cancel(&op, page).await, a)),
            }
        }
        other => Err(CommandError::invalid("operation", format!("unknown script operation `{other}`"))),
    }
}

fn with_catalog(host: &Host, op: &Op, mut v: Value, a: &Value) -> Value {
    if a.get("includeCatalog").and_then(Value::as_bool) == Some(true) {
        let names: Vec<String> = host
            .registry()
            .iter()
            .filter(|c| authorize(host, &op.spec.permissions, &c.spec.command).is_ok())
            .map(|c| c.spec.command.clone())
            .collect();
        v["catalog"] = json!(names);
    }
    v
}

fn runtime_status(host: &Host) -> Value {
    let probe = |name: &str| match child::find_executable(name) {
        Some(p) => json!({"available": true, "path": p.display().to_string()}),
        None => json!({"available": false}),
    };
    let node = std::env::var("AI_APP_BRIDGE_NODE").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "node".into());
    let python = std::env::var("AI_APP_BRIDGE_PYTHON").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "python3".into());
    let ops = host.scripts().ops.lock().unwrap_or_else(|e| e.into_inner());
    let live = ops.iter().filter(|o| !o.is_terminal()).count();
    json!({
        "ok": true, "command": "script", "operation": "runtime-status", "sdkVersion": SDK_VERSION,
        "runtimes": {"javascript": probe(&node), "python": probe(&python)},
        "operations": {"retained": ops.len(), "live": live, "max": MAX_OPERATIONS},
    })
}

// ------------------------------------------------------------------ start

fn resolve_runtime(language: Language, python_path: Option<&str>) -> Result<PathBuf, CommandError> {
    let env = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
    let candidates: Vec<String> = match language {
        Language::JavaScript => vec![env("AI_APP_BRIDGE_NODE").unwrap_or_else(|| "node".into())],
        Language::Python => match python_path.map(str::to_string).or_else(|| env("AI_APP_BRIDGE_PYTHON")) {
            Some(p) => vec![p],
            None => vec!["python3".into(), "python".into()],
        },
    };
    candidates
        .iter()
        .find_map(|c| child::find_executable(c))
        .ok_or_else(|| CommandError::new("runtime_unavailable", format!("no {} runtime found (tried {})", language.name(), candidates.join(", "))).with_details(json!({"tried": candidates})))
}

fn freeze(a: &Value, caller_cwd: &str) -> Result<Frozen, CommandError> {
    let s = a.get("script").ok_or_else(|| CommandError::missing("script"))?;
    let language = match arg_str(s, "language") {
        Some("python") => Language::Python,
        _ => Language::JavaScript,
    };
    let python_path = arg_str(a, "pythonPath");
    if python_path.is_some() && language != Language::Python {
        return Err(CommandError::invalid("pythonPath", "pythonPath applies only to python scripts"));
    }
    let caller = PathBuf::from(caller_cwd);
    let cwd = match arg_str(s, "cwd") {
        Some(c) => caller.join(c),
        None => caller.clone(),
    };
    let cwd = cwd.canonicalize().ok().filter(|p| p.is_dir()).ok_or_else(|| CommandError::invalid("script.cwd", format!("`{}` is not a directory", cwd.display())))?;
    let source_path = arg_str(s, "sourcePath").map(str::to_string);
    let source = match (arg_str(s, "source"), &source_path) {
        (Some(src), None) => src.to_string(),
        (None, Some(p)) => {
            let path = caller.join(p);
            std::fs::read_to_string(&path).map_err(|e| CommandError::new("script_source_unavailable", format!("cannot read {}: {e}", path.display())).with_field("script.sourcePath"))?
        }
        _ => return Err(CommandError::invalid("script", "exactly one of script.source and script.sourcePath is required")),
    };
    let target = s.get("target").cloned().unwrap_or(Value::Null);
    if !target.is_null() {
        aab_facts::evidence::target_identity(&target).map_err(|why| CommandError::new("invalid_target", format!("script.target: {why}")).with_field("script.target"))?;
    }
    let permissions: Vec<String> = match s.get("permissions").and_then(Value::as_array) {
        Some(list) => list.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        None => DEFAULT_PERMISSIONS.iter().map(|p| p.to_string()).collect(),
    };
    let policy = s.get("policy").cloned().unwrap_or_else(|| json!({}));
    let num = |k: &str, d: u64| policy.get(k).and_then(Value::as_u64).unwrap_or(d);
    let timeout_ms = num("timeoutMs", 600_000);
    let restart_policy = policy.get("restartPolicy").and_then(Value::as_str).unwrap_or("none").to_string();
    let max_output = num("maxOutputBytes", MIB) as usize;
    let max_progress = num("maxProgressBytes", MIB) as usize;
    let policy = json!({"timeoutMs": timeout_ms, "restartPolicy": restart_policy, "maxOutputBytes": max_output, "maxProgressBytes": max_progress});
    let inputs = s.get("inputs").cloned().unwrap_or_else(|| json!({}));
    if to_canonical_string(&inputs).len() > max_output {
        return Err(CommandError::invalid("script.inputs", "inputs exceed policy.maxOutputBytes"));
    }
    if a.get("recordingDir").is_some() && restart_policy != "none" {
        return Err(CommandError::new("recording_restart_unsupported", "recordingDir requires policy.restartPolicy none").with_field("recordingDir"));
    }
    let entrypoint = arg_str(s, "entrypoint").unwrap_or("main").to_string();
    let name = arg_str(s, "name").unwrap_or("script").to_string();
    let runtime = resolve_runtime(language, python_path)?;
    let hash = canonical_sha256(&json!({
        "source": source, "sourcePath": source_path, "cwd": cwd.display().to_string(), "inputs": inputs, "policy": policy,
        "language": language.name(), "entrypoint": entrypoint, "sdkVersion": SDK_VERSION, "target": target, "permissions": permissions,
    }));
    Ok(Frozen { language, runtime, source, source_path, cwd, entrypoint, name, target, inputs, permissions, timeout_ms, restart_policy, max_output, max_progress, policy, hash })
}

async fn start(host: &Host, a: &Value, caller_cwd: &str) -> Result<Value, CommandError> {
    let engine = host.scripts();
    if engine.stopping.load(Ordering::SeqCst) {
        return Err(CommandError::new("runtime_stopped", "the runtime is stopping"));
    }
    let frozen = {
        let a = a.clone();
        let cwd = caller_cwd.to_string();
        blocking(move || freeze(&a, &cwd)).await?
    };
    let id = match arg_str(a, "operationId") {
        Some(id) => id.to_string(),
        None => format!("script-{}-{}", crate::ids::now_ms(), engine.counter.fetch_add(1, Ordering::SeqCst) + 1),
    };
    if engine.find(&id).is_some() || stored_exists(host, &id).await {
        return Err(CommandError::new("operation_exists", format!("operation `{id}` already exists")).with_field("operationId"));
    }
    let recording = match arg_str(a, "recordingDir") {
        None => None,
        Some(dir) => {
            let path = Path::new(caller_cwd).join(dir);
            let id2 = id.clone();
            Some(blocking(move || aab_facts::recording::Recording::create(&path, Namespace::Script, &id2).map_err(|e| crate::facts::to_command_error(&e).with_field("recordingDir"))).await?)
        }
    };
    // The start checkpoint is durable before the child starts.
    let mut payload = json!({
        "revision": 1, "stepId": "start", "status": "running", "hash": frozen.hash, "language": frozen.language.name(),
        "sourcePath": frozen.source_path, "name": frozen.name, "permissions": frozen.permissions, "policy": frozen.policy,
        "inputs": frozen.inputs, "entrypoint": frozen.entrypoint, "actionSequence": 0, "cwd": frozen.cwd.display().to_string(),
        "startedAtMs": crate::ids::now_ms(),
    });
    if !frozen.target.is_null() {
        payload["target"] = frozen.target.clone();
    }
    if frozen.restart_policy == "checkpoint" {
        payload["source"] = json!(frozen.source);
    }
    persist(host, &id, "checkpoint", payload).await?;
    let timeout = Duration::from_millis(frozen.timeout_ms);
    let op = launch(host, id, frozen, recording, timeout, crate::ids::now_ms(), State::new())?;
    op.update(|s| s.emit("script_started", json!({"hash": op.spec.hash, "language": op.spec.language.name()})));
    Ok(op.snapshot("start", Page::FIRST))
}

/// Register the operation and start its supervisor task.
fn launch(host: &Host, id: String, frozen: Frozen, recording: Option<aab_facts::recording::Recording>, remaining: Duration, started_ms: u64, state: State) -> Result<Arc<Op>, CommandError> {
    let engine = host.scripts();
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let now = Instant::now();
    let op = Arc::new(Op {
        id,
        deadline: now + remaining,
        spec: frozen,
        state: std::sync::Mutex::new(state),
        version: watch::channel(0).0,
        cancel: Cancel::default(),
        paused: watch::channel(false).0,
        ctl: ctl_tx,
        started: now,
        started_ms,
        recording: std::sync::Mutex::new(recording),
        recording_seq: AtomicU64::new(0),
    });
    engine.insert(op.clone())?;
    let task = tokio::spawn(run(host.clone(), op.clone(), ctl_rx));
    engine.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(task);
    Ok(op)
}

async fn stored_exists(host: &Host, id: &str) -> bool {
    let facts = host.facts().clone();
    let id = id.to_string();
    blocking(move || {
        let store = facts.store()?;
        Ok(store.read_evidence(Namespace::Script, &id, &Cursor::Start, 1).map(|p| !p.records.is_empty()).unwrap_or(false))
    })
    .await
    .unwrap_or(false)
}

// ------------------------------------------------------------------ read / control

async fn wait(op: &Arc<Op>, page: Page, wait_ms: u64) -> Value {
    let after = page.after;
    let mut rx = op.version.subscribe();
    let until = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    loop {
        {
            let s = op.lock();
            if s.event_seq > after || TERMINAL.contains(&s.status) {
                drop(s);
                let mut v = op.snapshot("wait", page);
                v["timedOut"] = json!(false);
                v["waitMs"] = json!(wait_ms);
                return v;
            }
        }
        if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
            let mut v = op.snapshot("wait", page);
            v["timedOut"] = json!(true);
            v["waitMs"] = json!(wait_ms);
            return v;
        }
    }
}

fn pause(op: &Op) -> Result<(), CommandError> {
    op.update(|s| {
        if TERMINAL.contains(&s.status) || s.status == "finishing" || s.status == "cancelling" {
            return Err(CommandError::new("not_pausable", format!("the script is {}", s.status)));
        }
        if PAUSED.contains(&s.status) {
            return Ok(());
        }
        if s.inflight_mutations > 0 {
            s.status = "pause_requested";
            s.emit("pause_requested", json!({}));
        } else {
            s.status = "paused_manual";
            s.pause_reason = Some("manual");
            s.emit("paused", json!({"pauseReason": "manual"}));
        }
        Ok(())
    })?;
    op.paused.send_replace(true);
    Ok(())
}

fn resume(op: &Op) -> Result<(), CommandError> {
    op.update(|s| {
        match s.status {
            "cancelling" => return Err(CommandError::new("runtime_stopped", "the script is being cancelled")),
            "finishing" => return Err(CommandError::new("not_resumable", "the script is finishing")),
            st if TERMINAL.contains(&st) => return Err(CommandError::new("not_resumable", format!("the script is {st}"))),
            st if !PAUSED.contains(&st) => return Ok(()),
            _ => {}
        }
        if s.ambiguous {
            return Err(CommandError::new("ambiguous", "a mutation's outcome is unknown; the script cannot resume").with_details(json!({"status": s.status})));
        }
        s.status = if s.pending_question.is_some() { "waiting_for_agent" } else { "running" };
        s.pause_reason = None;
        s.emit("resumed", json!({}));
        Ok(())
    })?;
    op.paused.send_replace(false);
    Ok(())
}

fn decide(op: &Op, a: &Value) -> Result<(), CommandError> {
    let Some(request_id) = arg_str(a, "questionId").or_else(|| arg_str(a, "requestId")).map(str::to_string) else {
        return Err(CommandError::missing("questionId"));
    };
    let revision = a.get("revision").and_then(Value::as_u64);
    let Some(decision) = a.get("decision").cloned() else {
        return Err(CommandError::missing("decision"));
    };
    let frame = op.update(|s| {
        if let Some(previous) = s.answered.get(&request_id) {
            return if to_canonical_string(previous) == to_canonical_string(&decision) {
                Ok(None)
            } else {
                Err(CommandError::invalid("decision", "this question was already answered with a different decision"))
            };
        }
        let Some(q) = &s.pending_question else {
            return Err(CommandError::invalid("requestId", format!("no pending question `{request_id}`")));
        };
        if q.request_id != request_id {
            return Err(CommandError::invalid("requestId", format!("no pending question `{request_id}` (pending: `{}`)", q.request_id)));
        }
        if revision != Some(q.revision) {
            return Err(CommandError::new("stale_decide", format!("the pending question has revision {}", q.revision)).with_field("revision"));
        }
        let q = s.pending_question.take().expect("checked");
        s.answered.insert(request_id.clone(), decision.clone());
        if s.status == "waiting_for_agent" {
            s.status = "running";
        }
        s.emit("agent_decision", json!({"requestId": request_id, "revision": q.revision, "decision": decision}));
        Ok(Some(q.frame_id))
    })?;
    if let Some(frame_id) = frame {
        let _ = op.ctl.send(Ctl::Decision { frame_id, value: decision });
    }
    Ok(())
}

async fn cancel(op: &Arc<Op>, page: Page) -> Value {
    let live = op.update(|s| {
        if TERMINAL.contains(&s.status) {
            return false;
        }
        if s.status != "finishing" {
            s.status = "cancelling";
        }
        s.emit("cancel_requested", json!({}));
        true
    });
    if live {
        op.cancel.cancel(CancelReason::Cancelled);
        op.paused.send_replace(false);
        let mut rx = op.version.subscribe();
        let until = tokio::time::Instant::now() + Duration::from_secs(15);
        while !op.is_terminal() {
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                break;
            }
        }
    }
    op.snapshot("cancel", page)
}

async fn result(host: &Host, op: &Arc<Op>) -> Result<Value, CommandError> {
    let (status, error, result_ref) = {
        let s = op.lock();
        (s.status, s.error.clone(), s.result_ref.clone())
    };
    match status {
        "completed" => {}
        "failed" | "cancelled" => {
            return Err(CommandError::new("result_unavailable", format!("the script ended {status}")).with_details(json!({"status": status, "executionError": error})));
        }
        _ => return Err(CommandError::new("result_not_ready", format!("the script is {status}")).with_details(json!({"status": status}))),
    }
    let Some(r) = result_ref else {
        return Err(CommandError::new("result_not_persisted", "the completed script has no result ref"));
    };
    read_result(host, &op.id, r).await
}

async fn read_result(host: &Host, id: &str, r: Value) -> Result<Value, CommandError> {
    let facts = host.facts().clone();
    let evidence_id = r["evidenceId"].as_str().unwrap_or_default().to_string();
    let reference = r.clone();
    let value = blocking(move || {
        let store = facts.store()?;
        let item = store.get_evidence(&evidence_id).map_err(|e| match e.code {
            "not_found" => CommandError::new("result_not_retained", format!("the result record `{evidence_id}` is no longer retained")),
            "checksum_mismatch" => CommandError::new("result_checksum_mismatch", e.message.clone()),
            _ => crate::facts::to_command_error(&e),
        })?;
        let value = item.record.get("result").cloned().unwrap_or(Value::Null);
        let sha = canonical_sha256(&value);
        if Some(sha.as_str()) != reference["sha256"].as_str() || item.record.get("sha256") != reference.get("sha256") {
            return Err(CommandError::new("result_checksum_mismatch", "the stored result does not match its ref"));
        }
        Ok(value)
    })
    .await?;
    Ok(json!({"ok": true, "command": "script", "operation": "result", "operationId": id, "status": "completed", "result": value, "resultRef": r, "persisted": true}))
}

/// Every durable record of `id` in order (checksums are verified by the store; a
/// damaged record is an error, never a shorter history).
async fn read_records(host: &Host, id: &str) -> Result<Vec<(String, Value, String)>, CommandError> {
    let facts = host.facts().clone();
    let id2 = id.to_string();
    blocking(move || {
        let store = facts.store()?;
        let mut cursor = Cursor::Start;
        let mut out = Vec::new();
        loop {
            let page = store.read_evidence(Namespace::Script, &id2, &cursor, 1000).map_err(|e| crate::facts::to_command_error(&e))?;
            out.extend(page.records.into_iter().map(|r| (r.kind, r.record, r.evidence_id)));
            if !page.has_more || out.len() > 100_000 {
                break;
            }
            cursor = Cursor::Resume(page.next_cursor);
        }
        Ok(out)
    })
    .await
}

fn is_terminal_record(kind: &str, r: &Value) -> bool {
    kind == "checkpoint" && r["stepId"] == json!("terminal") && r.get("checkpointType").is_none()
}

fn action_sequence_of(r: &Value) -> Option<u64> {
    r["actionSequence"].as_u64().or_else(|| r["actionId"].as_str().and_then(|a| a.rsplit_once(":action-")).and_then(|(_, n)| n.parse().ok()))
}

/// What the durable records say about a checkpoint resume.
struct Resumability {
    start: Value,
    terminal: Option<Value>,
    /// The last `ctx.checkpoint` (or the start checkpoint): (record, evidenceId).
    boundary: (Value, String),
    max_revision: u64,
    max_action: u64,
    /// `None` = resumable.
    refusal: Option<CommandError>,
}

fn resumability(records: &[(String, Value, String)]) -> Resumability {
    let start = records.iter().find(|(k, r, _)| k == "checkpoint" && r["stepId"] == json!("start")).map(|(_, r, _)| r.clone()).unwrap_or(Value::Null);
    let terminal = records.iter().rev().find(|(k, r, _)| is_terminal_record(k, r)).map(|(_, r, _)| r.clone());
    let boundary = records
        .iter()
        .rev()
        .find(|(k, r, _)| k == "checkpoint" && (r["checkpointType"] == json!("ctx") || r["stepId"] == json!("start")))
        .map(|(_, r, e)| (r.clone(), e.clone()))
        .unwrap_or((Value::Null, String::new()));
    let max_revision = records.iter().filter_map(|(_, r, _)| r["revision"].as_u64()).max().unwrap_or(1);
    let max_action = records.iter().filter(|(k, _, _)| k == "dispatch-marker" || k == "action-receipt").filter_map(|(_, r, _)| action_sequence_of(r)).max().unwrap_or(0);
    let policy = &start["policy"];
    let remaining = start["startedAtMs"].as_u64().zip(policy["timeoutMs"].as_u64()).map(|(s, t)| (s + t).saturating_sub(crate::ids::now_ms())).unwrap_or(0);
    let limit = boundary.0["actionSequence"].as_u64().unwrap_or(0);
    let refusal = (|| {
        if start.is_null() {
            return Some(CommandError::new("not_resumable", "the operation has no start checkpoint"));
        }
        if start.get("steps").is_some() {
            return Some(CommandError::new("script_format_removed", "step-list scripts are no longer supported"));
        }
        if policy["restartPolicy"] != json!("checkpoint") {
            return Some(CommandError::new("not_resumable", "policy.restartPolicy is none"));
        }
        if let Some(t) = &terminal {
            let crashed = t["status"] == json!("failed") && matches!(t["error"].as_str(), Some("child_crashed" | "runtime_lost"));
            if !crashed {
                return Some(CommandError::new("not_resumable", format!("the operation ended {} ({})", t["status"].as_str().unwrap_or("?"), t["error"].as_str().unwrap_or("-"))));
            }
        }
        if remaining == 0 {
            return Some(CommandError::new("not_resumable", "policy.timeoutMs has elapsed"));
        }
        if start["source"].as_str().is_none() {
            return Some(CommandError::new("script_source_required", "the start checkpoint holds no frozen source"));
        }
        // No action past the checkpoint boundary may be repeated.
        if let Some((_, r, _)) = records.iter().find(|(k, r, _)| (k == "action-receipt" || k == "dispatch-marker") && action_sequence_of(r).is_some_and(|n| n > limit)) {
            return Some(
                CommandError::new("ambiguous", format!("action `{}` happened after the last checkpoint; resuming would repeat or lose it", r["actionId"].as_str().unwrap_or("?")))
                    .with_details(json!({"reason": "checkpoint_precedes_action", "actionId": r["actionId"], "checkpointActionSequence": limit})),
            );
        }
        // Every prepared marker needs a settled receipt.
        for (k, m, _) in records {
            if k != "dispatch-marker" {
                continue;
            }
            let receipt = records.iter().find(|(k, r, _)| k == "action-receipt" && r["actionId"] == m["actionId"]);
            let settled = receipt.is_some_and(|(_, r, _)| r["ambiguous"] != json!(true) && r["mechanicalStatus"] != json!("unknown"));
            if !settled {
                return Some(
                    CommandError::new("ambiguous", format!("the outcome of action `{}` is unknown", m["actionId"].as_str().unwrap_or("?")))
                        .with_details(json!({"reason": "unsettled_action", "actionId": m["actionId"]})),
                );
            }
        }
        None
    })();
    Resumability { start, terminal, boundary, max_revision, max_action, refusal }
}

/// The durable records of an operation this runtime does not hold (e.g. after a
/// runtime restart): terminal status if recorded, else `failed/runtime_lost`.
async fn restore(host: &Host, id: &str) -> Result<Value, CommandError> {
    let records = read_records(host, id).await?;
    if records.is_empty() {
        return Err(op_not_found(id));
    }
    let r = resumability(&records);
    let (status, error, result_ref) = match &r.terminal {
        Some(t) => (t["status"].clone(), t["error"].clone(), t.get("resultRef").cloned().unwrap_or(Value::Null)),
        None => (json!("failed"), json!("runtime_lost"), Value::Null),
    };
    let checkpoint_policy = r.start["policy"]["restartPolicy"] == json!("checkpoint");
    let (b, bid) = &r.boundary;
    Ok(json!({
        "ok": true, "command": "script", "operationId": id, "status": status, "pauseReason": null, "pendingQuestion": null,
        "error": error, "hash": r.start["hash"], "resultRef": result_ref, "eventSequence": 0, "events": [],
        "eventsHasMore": false,
        // The execution ledger lived in the runtime that ran the operation; the
        // durable records remain readable through `evidence export`.
        "history": {"items": [], "lastSequence": 0, "hasMore": false, "gap": true},
        "restored": true, "resumable": r.refusal.is_none(), "resumeMode": if checkpoint_policy { "checkpoint" } else { "none" },
        "resumeRefusal": r.refusal.as_ref().map(|e| json!({"code": e.code, "message": e.message, "details": e.details})),
        "ambiguous": r.refusal.as_ref().is_some_and(|e| e.code == "ambiguous"),
        "checkpoint": (!b.is_null()).then(|| json!({"name": b["stepId"], "revision": b["revision"], "actionSequence": b["actionSequence"], "evidenceId": bid})),
        "actionSequence": r.max_action,
        "records": records.len(),
    }))
}

/// `resume` of an operation this runtime does not hold: re-run the frozen program
/// with `ctx.resume()` = the last checkpoint's state, when no action past that
/// checkpoint exists and every earlier action is settled.
async fn resume_restored(host: &Host, id: &str, a: &Value, caller_cwd: &str) -> Result<Value, CommandError> {
    if host.scripts().stopping.load(Ordering::SeqCst) {
        return Err(CommandError::new("runtime_stopped", "the runtime is stopping"));
    }
    let records = read_records(host, id).await?;
    if records.is_empty() {
        return Err(op_not_found(id));
    }
    let r = resumability(&records);
    if let Some(e) = r.refusal {
        return Err(e);
    }
    let st = &r.start;
    let language = match st["language"].as_str() {
        Some("python") => Language::Python,
        _ => Language::JavaScript,
    };
    let str_of = |k: &str| st[k].as_str().map(str::to_string);
    let source = str_of("source").unwrap_or_default();
    let target = st.get("target").cloned().unwrap_or(Value::Null);
    let permissions: Vec<String> = st["permissions"].as_array().map(|l| l.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default();
    let policy = st["policy"].clone();
    let inputs = st["inputs"].clone();
    let entrypoint = str_of("entrypoint").unwrap_or_else(|| "main".into());
    let cwd = str_of("cwd").unwrap_or_default();
    let source_path = str_of("sourcePath");
    let hash = canonical_sha256(&json!({
        "source": source, "sourcePath": source_path, "cwd": cwd, "inputs": inputs, "policy": policy,
        "language": language.name(), "entrypoint": entrypoint, "sdkVersion": SDK_VERSION, "target": target, "permissions": permissions,
    }));
    if st["hash"].as_str() != Some(hash.as_str()) {
        return Err(CommandError::new("script_hash_mismatch", "the start checkpoint does not match its recorded hash"));
    }
    // A supplied script must be the same program: never blended with stored fields.
    if a.get("script").is_some() {
        let supplied = {
            let a = a.clone();
            let cwd = caller_cwd.to_string();
            blocking(move || freeze(&a, &cwd)).await?
        };
        if supplied.target != target {
            return Err(CommandError::new("script_target_mismatch", "the supplied script's target differs from the frozen one").with_field("script.target"));
        }
        if supplied.permissions != permissions {
            return Err(CommandError::new("script_permissions_mismatch", "the supplied script's permissions differ from the frozen ones").with_field("script.permissions"));
        }
        if supplied.hash != hash {
            return Err(CommandError::new("script_hash_mismatch", "the supplied script differs from the frozen one").with_field("script"));
        }
    }
    let runtime = {
        let python = a["pythonPath"].as_str().map(str::to_string);
        blocking(move || resolve_runtime(language, python.as_deref())).await?
    };
    let num = |k: &str, d: u64| policy[k].as_u64().unwrap_or(d);
    let timeout_ms = num("timeoutMs", 600_000);
    let started_ms = st["startedAtMs"].as_u64().unwrap_or(0);
    let remaining = (started_ms + timeout_ms).saturating_sub(crate::ids::now_ms());
    let frozen = Frozen {
        language,
        runtime,
        source,
        source_path,
        cwd: PathBuf::from(&cwd),
        entrypoint,
        name: str_of("name").unwrap_or_else(|| "script".into()),
        target,
        inputs,
        permissions,
        timeout_ms,
        restart_policy: "checkpoint".into(),
        max_output: num("maxOutputBytes", MIB) as usize,
        max_progress: num("maxProgressBytes", MIB) as usize,
        policy,
        hash,
    };
    if !frozen.cwd.is_dir() {
        return Err(CommandError::new("not_resumable", format!("the frozen cwd `{cwd}` is gone")));
    }
    let (b, bid) = r.boundary;
    let boundary_seq = b["actionSequence"].as_u64().unwrap_or(0);
    let revision = r.max_revision + 1;
    let resume_state = if b["checkpointType"] == json!("ctx") { b["state"].clone() } else { Value::Null };
    let checkpoint = (b["checkpointType"] == json!("ctx")).then(|| json!({"name": b["stepId"], "revision": b["revision"], "evidenceId": bid}));
    // Durable before the child starts: a later loss sees this resume.
    persist(host, id, "checkpoint", json!({"revision": revision, "stepId": "resume", "status": "running", "actionSequence": boundary_seq, "resumedFrom": bid, "resumedAtMs": crate::ids::now_ms()})).await?;
    let mut state = State::new();
    state.action_seq = r.max_action.max(boundary_seq);
    state.checkpoint_revision = revision;
    state.last_checkpoint = checkpoint.clone();
    state.resume_state = resume_state;
    let op = launch(host, id.to_string(), frozen, None, Duration::from_millis(remaining), started_ms, state)?;
    op.update(|s| s.emit("resumed", json!({"restored": true, "checkpoint": checkpoint, "actionSequence": boundary_seq})));
    let mut v = op.snapshot("resume", Page::FIRST);
    v["resumedFrom"] = json!(bid);
    Ok(v)
}

async fn restored_result(host: &Host, id: &str) -> Result<Value, CommandError> {
    let snap = restore(host, id).await?;
    match snap["status"].as_str() {
        Some("completed") if snap["resultRef"].is_object() => read_result(host, id, snap["resultRef"].clone()).await,
        Some("completed") => Err(CommandError::new("result_not_persisted", "the completed script has no result ref")),
        status => Err(CommandError::new("result_unavailable", format!("the script ended {}", status.unwrap_or("?"))).with_details(json!({"status": snap["status"], "executionError": snap["error"]}))),
    }
}

// ------------------------------------------------------------------ supervisor

struct Terminal {
    status: &'static str,
    error: Option<String>,
    message: Option<String>,
    result: Option<Value>,
}

impl Terminal {
    fn failed(code: &str, message: impl Into<String>) -> Terminal {
        Terminal { status: "failed", error: Some(code.to_string()), message: Some(message.into()), result: None }
    }
}

/// Writes host → child frames, bounded by the channel's frame limit.
#[derive(Clone)]
struct Writer {
    tx: mpsc::Sender<String>,
    max: usize,
}

impl Writer {
    async fn send(&self, mut frame: Value) {
        let mut line = frame.to_string();
        if line.len() + 1 > self.max {
            // Too large for the channel: the child gets an error value instead.
            frame["value"] = json!({"ok": false, "error": "frame_too_large", "message": "the reply exceeds the channel's frame limit"});
            line = frame.to_string();
        }
        line.push('\n');
        let _ = self.tx.send(line).await;
    }
}

async fn run(host: Host, op: Arc<Op>, ctl_rx: mpsc::UnboundedReceiver<Ctl>) {
    let terminal = supervise(&host, &op, ctl_rx).await;
    finish(&host, &op, terminal).await;
}

async fn supervise(host: &Host, op: &Arc<Op>, mut ctl_rx: mpsc::UnboundedReceiver<Ctl>) -> Terminal {
    let frozen = &op.spec;
    let max_frame = frozen.max_output.max(frozen.max_progress).max(MIB as usize) + 64 * 1024;
    let mut child = match ScriptChild::spawn(&frozen.runtime, frozen.language == Language::Python, &frozen.source, &frozen.cwd, &op.id, max_frame) {
        Ok(c) => c,
        Err(e) => return Terminal::failed("child_start_failed", e),
    };
    let writer = Writer { tx: child.writer.clone(), max: max_frame };
    let pid = child.pid();
    op.update(|s| {
        s.child_pid = Some(pid);
        s.emit("child_started", json!({"pid": pid, "runtime": frozen.runtime.display().to_string()}));
    });
    let control = op.lock().control();
    let resume_state = op.lock().resume_state.clone();
    writer.send(json!({"type": "start", "inputs": frozen.inputs, "entrypoint": frozen.entrypoint, "control": control, "resume": resume_state})).await;

    let mut tasks = tokio::task::JoinSet::new();
    let deadline = tokio::time::Instant::from_std(op.deadline);
    let mut terminal = loop {
        tokio::select! {
            biased;
            _ = op.cancel.cancelled() => {
                break match op.cancel.reason() {
                    Some(CancelReason::RuntimeStopped) => Terminal { status: "cancelled", error: Some("runtime_stopped".into()), message: Some("the runtime stopped".into()), result: None },
                    _ => Terminal { status: "cancelled", error: Some("cancelled".into()), message: Some("cancelled by request".into()), result: None },
                };
            }
            _ = tokio::time::sleep_until(deadline) => {
                break Terminal::failed("timeout", format!("the script did not finish within policy.timeoutMs {} ms", frozen.timeout_ms));
            }
            Some(ctl) = ctl_rx.recv() => match ctl {
                Ctl::Decision { frame_id, value } => {
                    op.update(|s| s.outstanding = s.outstanding.saturating_sub(1));
                    let control = op.lock().control();
                    writer.send(json!({"type": "decision", "id": frame_id, "value": value, "control": control})).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            frame = child.frames.recv() => match frame {
                None => break Terminal::failed("channel_closed", "the script closed its output channel"),
                Some(Err(code)) => break Terminal::failed(code, channel_message(code)),
                Some(Ok(f)) => {
                    if let Some(t) = handle_frame(host, op, &writer, &mut tasks, f).await {
                        break t;
                    }
                }
            },
        }
    };
    // Every end path: stop the child's whole process group first.
    child.kill().await;
    if terminal.status != "completed" {
        // Calls still running are cancelled with the script.
        if !op.cancel.is_cancelled() {
            op.cancel.cancel(CancelReason::Cancelled);
        }
    }
    while tasks.join_next().await.is_some() {}
    if terminal.status == "failed" {
        op.update(|s| s.diagnostics = child.diagnostics());
    }
    if terminal.error.as_deref() == Some("channel_closed") {
        terminal.message = Some("the script closed stdout or exited without returning".into());
    }
    terminal
}

fn channel_message(code: &str) -> String {
    match code {
        "frame_too_large" => "the script wrote a frame larger than the channel limit".into(),
        "malformed_frame" => "the script wrote a line that is not a JSON frame object".into(),
        "channel_backlog" => format!("more than {} frames were waiting unconsumed", child::MAX_PENDING_FRAMES),
        _ => "the script's output channel closed".into(),
    }
}

fn frame_id(f: &Value) -> Option<String> {
    f.get("id").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 64).map(str::to_string)
}

async fn handle_frame(host: &Host, op: &Arc<Op>, writer: &Writer, tasks: &mut tokio::task::JoinSet<()>, f: Value) -> Option<Terminal> {
    let kind = f["type"].as_str().unwrap_or_default().to_string();
    let needs_id = matches!(kind.as_str(), "call" | "assert" | "checkpoint" | "ask" | "control-point");
    let id = frame_id(&f);
    if needs_id && id.is_none() {
        return Some(Terminal::failed("malformed_frame", format!("a `{kind}` frame needs a string id")));
    }
    let id = id.unwrap_or_default();
    let over = op.update(|s| {
        if matches!(kind.as_str(), "call" | "ask" | "control-point") {
            s.outstanding += 1;
            s.outstanding > MAX_OUTSTANDING
        } else {
            false
        }
    });
    if over {
        return Some(Terminal::failed("channel_backlog", format!("more than {MAX_OUTSTANDING} requests await a reply")));
    }
    match kind.as_str() {
        "ready" => None,
        "call" => {
            let (host, op, writer) = (host.clone(), op.clone(), writer.clone());
            tasks.spawn(async move {
                let command = f["command"].as_str().unwrap_or_default().to_string();
                let args = f.get("args").cloned().unwrap_or_else(|| json!({}));
                let envelope = ctx_call(&host, &op, &command, args).await;
                let control = op.update(|s| {
                    s.outstanding = s.outstanding.saturating_sub(1);
                    s.control()
                });
                writer.send(json!({"type": "result", "id": id, "value": envelope, "control": control})).await;
            });
            None
        }
        "control-point" => {
            let (op, writer) = (op.clone(), writer.clone());
            tasks.spawn(async move {
                wait_unpaused(&op).await;
                let control = op.update(|s| {
                    s.outstanding = s.outstanding.saturating_sub(1);
                    s.control()
                });
                writer.send(json!({"type": "control-state", "id": id, "control": control})).await;
            });
            None
        }
        "assert" => {
            let verdict = op.update(|s| assertion_verdict(s, &op.id, &f["assertion"]));
            let failed = {
                let mut guard = op.recording.lock().unwrap_or_else(|e| e.into_inner());
                guard.as_mut().and_then(|rec| record_payload(host, op, rec, "script-assertion", &json!({"assertion": f["assertion"], "verdict": verdict})).err())
            };
            let mut verdict = verdict;
            if let Some(e) = failed {
                let latched = latch_recording(op, &e);
                verdict["recordingError"] = latched;
            }
            let control = op.lock().control();
            writer.send(json!({"type": "verdict", "id": id, "value": verdict, "control": control})).await;
            None
        }
        "progress" => {
            let event = f.get("event").cloned().unwrap_or(Value::Null);
            let bytes = to_canonical_string(&event).len();
            if bytes > op.spec.max_progress {
                return Some(Terminal::failed("progress_too_large", format!("a progress event of {bytes} bytes exceeds policy.maxProgressBytes {}", op.spec.max_progress)));
            }
            op.update(|s| s.emit("progress", json!({"event": event})));
            None
        }
        "checkpoint" => {
            let state = f.get("state").cloned().unwrap_or(Value::Null);
            let bytes = to_canonical_string(&state).len();
            if bytes > op.spec.max_output {
                return Some(Terminal::failed("checkpoint_too_large", format!("checkpoint state of {bytes} bytes exceeds policy.maxOutputBytes {}", op.spec.max_output)));
            }
            let name = f["name"].as_str().filter(|n| !n.is_empty() && n.len() <= 256).unwrap_or("checkpoint").to_string();
            let (revision, action_seq, inflight) = op.update(|s| {
                s.checkpoint_revision += 1;
                (s.checkpoint_revision, s.action_seq, s.inflight_mutations)
            });
            // `actionSequence` is the resume boundary: every action up to it must have a
            // settled receipt, none after it may exist (see `resumability`).
            let payload = json!({"revision": revision, "stepId": name, "checkpointType": "ctx", "status": "running", "state": state, "actionSequence": action_seq, "inflightMutations": inflight});
            let value = match persist(host, &op.id, "checkpoint", payload).await {
                Ok(r) => {
                    op.update(|s| {
                        s.last_checkpoint = Some(json!({"name": name, "revision": revision, "evidenceId": r.evidence_id}));
                        s.emit("checkpoint", json!({"name": name, "revision": revision, "evidenceId": r.evidence_id}));
                    });
                    json!({"persisted": true, "evidenceId": r.evidence_id, "revision": revision})
                }
                Err(e) => {
                    // The script is told, and so is every reader of its status.
                    op.update(|s| s.emit("checkpoint_failed", json!({"name": name, "revision": revision, "error": e.code, "message": e.message})));
                    json!({"persisted": false, "error": e.code, "message": e.message})
                }
            };
            let control = op.lock().control();
            writer.send(json!({"type": "checkpoint-receipt", "id": id, "value": value, "control": control})).await;
            None
        }
        "ask" => {
            let request = f.get("request").cloned().unwrap_or(Value::Null);
            op.update(|s| {
                s.question_seq += 1;
                let request_id = format!("{}:ask-{}", op.id, s.question_seq);
                let revision = s.question_seq;
                s.emit("agent_question_created", json!({"questionId": request_id, "requestId": request_id, "revision": revision, "request": request}));
                s.pending_question = Some(Question { request_id, revision, request, frame_id: id });
                if s.status == "running" {
                    s.status = "waiting_for_agent";
                }
            });
            None
        }
        "return" => Some(Terminal { status: "completed", error: None, message: None, result: Some(f.get("result").cloned().unwrap_or(Value::Null)) }),
        "fail" => {
            let code = match f["error"].as_str() {
                Some(c @ ("script_failed" | "unsupported_entrypoint" | "script_load_failed" | "result_not_json")) => c.to_string(),
                _ => "script_failed".to_string(),
            };
            let mut message = f["message"].as_str().unwrap_or("the script failed").chars().take(4096).collect::<String>();
            if let Some(d) = f["diagnostic"].as_str() {
                let tail: String = d.chars().rev().take(4096).collect::<Vec<_>>().into_iter().rev().collect();
                op.update(|s| s.emit("script_diagnostic", json!({"diagnostic": tail})));
                if message.is_empty() {
                    message = tail;
                }
            }
            Some(Terminal::failed(&code, message))
        }
        other => Some(Terminal::failed("malformed_frame", format!("unknown frame type `{other}`"))),
    }
}

async fn wait_unpaused(op: &Op) {
    let mut rx = op.paused.subscribe();
    loop {
        if !*rx.borrow_and_update() || op.cancel.is_cancelled() {
            return;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = op.cancel.cancelled() => return,
        }
    }
}

fn record_payload(host: &Host, op: &Op, rec: &mut aab_facts::recording::Recording, kind: &str, data: &Value) -> Result<(), CommandError> {
    let store = host.facts().store()?;
    let seq = op.recording_seq.fetch_add(1, Ordering::SeqCst) + 1;
    let revision = op.lock().checkpoint_revision;
    let target = (!op.spec.target.is_null()).then_some(&op.spec.target);
    let call = aab_facts::recording::RecordedCall { sequence: seq, revision, kind, target, data, screenshots: &[], parent_fact_id: None };
    rec.record(&store, &call).map(|_| ()).map_err(|e| crate::facts::to_command_error(&e))
}

// ------------------------------------------------------------------ assertions

fn assertion_verdict(s: &mut State, op_id: &str, a: &Value) -> Value {
    let name = a["name"].as_str().unwrap_or("assertion").to_string();
    let evidence = a.get("evidence").filter(|e| !e.is_null());
    let scope = a["scope"].as_str().map(str::to_string).unwrap_or_else(|| if evidence.is_some() { "device".into() } else { "code".into() });
    let condition = a.get("condition").and_then(Value::as_bool);
    let required: Vec<&str> = match a.get("requiredEvidence") {
        Some(Value::String(r)) => vec![r.as_str()],
        Some(Value::Array(l)) => l.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let (verdict, reason): (&str, Option<&str>) = match (condition, scope.as_str()) {
        (None, _) => ("inconclusive", Some("condition_not_boolean")),
        (Some(c), "code") => (if c { "passed" } else { "failed" }, None),
        (Some(_), _) if !matches!(a.get("requireCoverage"), None | Some(Value::Bool(true))) && a.get("requireCoverage") != Some(&json!("complete")) => {
            // Only complete coverage can decide a device assertion; asking for less does not lower the bar.
            ("inconclusive", Some("coverage_requirement_unsupported"))
        }
        (Some(c), _) => match evidence {
            None => ("inconclusive", Some("evidence_required")),
            Some(e) if !e.is_object() => ("inconclusive", Some("evidence_not_issued")),
            Some(e) => {
                let call_id = e["callId"].as_str().unwrap_or_default();
                let issued = s.issued.get(call_id);
                let covers = |r: &str| e["command"].as_str() == Some(r) || e["coverage"]["scope"].as_str() == Some(r) || e["capture"]["stream"].as_str() == Some(r);
                if e["issuer"] != json!("aab-host") || e["operationId"].as_str() != Some(op_id) {
                    ("inconclusive", Some("evidence_foreign"))
                } else {
                    match issued {
                        None => ("inconclusive", Some("evidence_not_issued")),
                        Some((digest, _)) if *digest != canonical_sha256(e) => ("inconclusive", Some("evidence_modified")),
                        Some((_, window)) if *window != s.window || e["window"].as_u64() != Some(*window) => ("inconclusive", Some("evidence_outside_action_window")),
                        Some(_) if s.inflight_mutations > 0 => ("inconclusive", Some("mutation_in_flight")),
                        Some(_) if s.ambiguous => ("inconclusive", Some("ambiguous_action")),
                        Some(_) if e["coverage"]["status"] != json!("complete") => ("inconclusive", Some("coverage_incomplete")),
                        Some(_) if !required.iter().all(|r| covers(r)) => ("inconclusive", Some("required_evidence_missing")),
                        Some(_) => match e.get("capture").filter(|c| c.is_object()) {
                            Some(capture) => match capture_reason(s, capture) {
                                Some(reason) => ("inconclusive", Some(reason)),
                                None => (if c { "passed" } else { "failed" }, None),
                            },
                            None => (if c { "passed" } else { "failed" }, None),
                        },
                    }
                }
            }
        },
    };
    let v = json!({"verdict": verdict, "name": name, "scope": scope, "reason": reason});
    s.emit(&format!("assertion_{verdict}"), json!({"name": name, "scope": scope, "reason": reason}));
    v
}

/// Why evidence of a capture read cannot decide an assertion, if it cannot: the
/// read must cover its whole window (no continuation page, nothing left), and its
/// lower bound (`factCursor`) must be a watermark this operation was issued by an
/// earlier read of the same stream and target, with complete coverage, before the
/// latest action (a watermark taken after it moved past the action).
fn capture_reason(s: &State, capture: &Value) -> Option<&'static str> {
    if capture["continuation"] == json!(true) || capture["hasMore"] == json!(true) {
        return Some("capture_window_incomplete");
    }
    let Some(lower) = capture["factCursor"].as_str() else { return Some("capture_watermark_missing") };
    let Some(w) = s.watermarks.get(lower) else { return Some("capture_watermark_not_issued") };
    if w.stream != capture["stream"] || w.target != capture["target"] {
        return Some("capture_watermark_foreign");
    }
    if w.coverage != json!("complete") {
        return Some("capture_watermark_incomplete");
    }
    if w.window >= s.window {
        return Some("capture_watermark_not_pre_action");
    }
    None
}

// ------------------------------------------------------------------ ctx.call

/// The coverage a call's evidence claims: the result's own `coverage` when it
/// reports one (capture reads, history views), else the complete call result.
fn result_coverage(value: &Value) -> Value {
    match value.get("coverage") {
        Some(c) if c["status"].is_string() => {
            let mut out = Map::new();
            for k in ["status", "scope", "gap", "committed", "reasons"] {
                if let Some(v) = c.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            Value::Object(out)
        }
        _ => json!({"status": "complete", "scope": "call-result"}),
    }
}

/// The capture facts of a result that carries a watermark (`watermarkCursor`):
/// stream, target, window bounds and paging, as the evidence's `capture` object.
fn capture_facts(value: &Value, args: &Map<String, Value>) -> Option<Value> {
    let token = value.get("watermarkCursor").filter(|v| v.is_string())?;
    Some(json!({
        "stream": value.get("stream"), "target": value.get("target"), "view": value.get("view"),
        "watermarkCursor": token, "factCursor": value.get("factCursor"), "throughWatermark": value.get("throughWatermark"),
        "hasMore": value.get("hasMore"), "nextCursor": value.get("nextCursor"),
        "continuation": args.contains_key("cursor"),
    }))
}

/// Whether a Script may call `command` with these permissions.
pub(super) fn authorize(host: &Host, permissions: &[String], command: &str) -> Result<(), CommandError> {
    if NEVER_CALLABLE.contains(&command) {
        return Err(CommandError::new("command_permanently_denied", format!("`{command}` can never be called from a Script")));
    }
    let Some(registered) = host.registry().get(command) else {
        return Err(CommandError::new("command_not_in_catalog", format!("`{command}` is not a registered command")));
    };
    if registered.spec.role == "expert" {
        return Err(CommandError::new("command_permanently_denied", format!("`{command}` is an expert command; Scripts cannot call it")));
    }
    let Some(permission) = registered.spec.script_permission.as_deref() else {
        return Err(CommandError::new("command_not_in_catalog", format!("`{command}` declares no Script permission")));
    };
    if permissions.iter().any(|p| p == permission) {
        return Ok(());
    }
    if DEFAULT_PERMISSIONS.contains(&permission) {
        Err(CommandError::new("permission_not_granted", format!("`{command}` needs permission `{permission}`, which this script does not hold")).with_details(json!({"permission": permission})))
    } else {
        Err(CommandError::new("command_not_in_default_allowlist", format!("`{command}` needs the opt-in permission `{permission}`")).with_details(json!({"permission": permission})))
    }
}

fn rejection(command: &str, call_id: &str, op: &Op, e: &CommandError) -> Value {
    json!({
        "ok": false, "command": command, "result": null,
        "error": {"code": e.code, "message": e.message, "field": e.field, "details": e.details},
        "dispatched": e.dispatched, "ambiguous": e.ambiguous,
        "execution": {"executionId": op.id, "callId": call_id, "actionId": null, "target": op.spec.target},
        "evidence": null,
    })
}

/// Default the call's arguments from the frozen target's identity fields.
fn bind_target(op: &Op, spec: &aab_plugin_api::CommandSpec, args: &mut Map<String, Value>) -> Result<(), CommandError> {
    let Some(target) = op.spec.target.as_object() else { return Ok(()) };
    let platform = target.get("platform").and_then(Value::as_str).unwrap_or_default();
    let properties = spec.input_schema.get("properties").and_then(Value::as_object);
    let binds = properties.is_some_and(|p| target.keys().any(|k| k != "platform" && p.contains_key(k)));
    if binds && !matches!(spec.platform.as_str(), "host" | "multi") && spec.platform != platform {
        return Err(CommandError::new("target_platform_mismatch", format!("`{}` is a {} command; the script target is {platform}", spec.command, spec.platform)));
    }
    let Some(properties) = properties else { return Ok(()) };
    for (k, v) in target {
        if k == "platform" || !properties.contains_key(k) {
            continue;
        }
        match args.get(k) {
            Some(given) if given != v => {
                return Err(CommandError::new("target_argument_conflict", format!("`{k}` differs from the script target")).with_field(format!("args.{k}")));
            }
            Some(_) => {}
            None => {
                args.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

async fn ctx_call(host: &Host, op: &Arc<Op>, command: &str, args: Value) -> Value {
    let started_ms = crate::ids::now_ms();
    let started = Instant::now();
    let call_id = op.update(|s| {
        s.calls += 1;
        if s.first_call_ms.is_none() {
            s.first_call_ms = Some(op.started.elapsed().as_millis() as u64);
        }
        format!("call-{}", s.calls)
    });
    wait_unpaused(op).await;
    if op.cancel.is_cancelled() {
        let code = op.cancel.reason().map(|r| r.code()).unwrap_or("cancelled");
        return rejection(command, &call_id, op, &CommandError::new(code, "the script is being cancelled"));
    }
    if op.lock().ambiguous {
        return rejection(command, &call_id, op, &CommandError::new("ambiguous", "an earlier mutation's outcome is unknown; every further call is blocked"));
    }
    if let Some(r) = op.lock().recording_error.clone() {
        let code = r["code"].as_str().unwrap_or("recording_failed").to_string();
        return rejection(command, &call_id, op, &CommandError::new(code, "the recording failed earlier; every further call is refused").with_field("recordingDir").with_details(json!({"recording": r})));
    }
    if let Err(e) = authorize(host, &op.spec.permissions, command) {
        op.update(|s| s.emit("call_failed", json!({"callId": call_id, "command": command, "error": e.code})));
        return rejection(command, &call_id, op, &e);
    }
    let Value::Object(mut args) = args else {
        return rejection(command, &call_id, op, &CommandError::invalid("args", "ctx.call arguments must be an object"));
    };
    let registered = host.registry().get(command).expect("authorized commands are registered");
    if let Err(e) = bind_target(op, &registered.spec, &mut args) {
        return rejection(command, &call_id, op, &e);
    }
    let validated = match host.registry().validate(command, &Value::Object(args.clone())) {
        Ok(c) => c,
        Err(e) => return rejection(command, &call_id, op, &e),
    };
    let mutation = crate::pipeline::is_mutation(validated, &Value::Object(args.clone()));
    let mut action_id: Option<String> = None;
    let mut action_seq = 0u64;
    let mut evidence_refs: Vec<Value> = Vec::new();
    if mutation {
        if op.spec.target.is_null() {
            return rejection(command, &call_id, op, &CommandError::new("invalid_target", "a mutation needs script.target (the dispatch marker names it)"));
        }
        let (aid, revision, seq) = op.update(|s| {
            s.action_seq += 1;
            s.inflight_mutations += 1;
            (format!("{}:action-{}", op.id, s.action_seq), s.checkpoint_revision, s.action_seq)
        });
        action_seq = seq;
        args.entry("requestId").or_insert_with(|| json!(aid));
        let spec_hash = canonical_sha256(&json!({"command": command, "args": Value::Object(args.clone())}));
        let marker = json!({"actionId": aid, "actionSequence": seq, "target": op.spec.target, "actionSpecHash": spec_hash, "planStepId": aid, "state": "prepared", "revision": revision, "command": command});
        match persist(host, &op.id, "dispatch-marker", marker).await {
            Ok(r) => evidence_refs.push(json!(r.evidence_id)),
            Err(e) => {
                op.update(|s| {
                    s.inflight_mutations -= 1;
                    s.ambiguous = true;
                });
                return rejection(command, &call_id, op, &CommandError::new("dispatch_marker_not_persisted", e.message));
            }
        }
        action_id = Some(aid);
    }
    op.update(|s| s.emit("call_started", json!({"callId": call_id, "command": command, "mutation": mutation, "actionId": action_id})));
    let outcome = host
        .clone()
        .call(InternalCall {
            command,
            arguments: args.clone(),
            cwd: op.spec.cwd.display().to_string(),
            deadline_cap: Some(op.deadline),
            cancel: Some(op.cancel.clone()),
            control: None,
        })
        .await;
    let completed_ms = crate::ids::now_ms();
    let (ok, error, dispatched, ambiguous, value, kind, host_action, history) = match &outcome {
        Err(e) => (false, Some(e.clone()), e.dispatched, e.ambiguous, Value::Null, "json", None, Value::Null),
        Ok(r) => {
            let (value, kind) = outcome_value(&r.outcome);
            match &r.outcome {
                crate::reply::ExecOutcome::Failed(e) => (false, Some(e.clone()), e.dispatched, e.ambiguous, Value::Null, kind, Some(r.action_id.clone()), r.history.clone()),
                _ => (true, None, Some(mutation), false, value, kind, Some(r.action_id.clone()), r.history.clone()),
            }
        }
    };
    let mut receipt_error = None;
    if let Some(aid) = &action_id {
        let revision = op.lock().checkpoint_revision;
        let receipt = json!({
            "actionId": aid, "actionSequence": action_seq, "startedAtMs": started_ms, "completedAtMs": completed_ms,
            "mechanicalStatus": if ok { "ok" } else if ambiguous { "unknown" } else { "failed" },
            "error": error.as_ref().map(|e| e.code.clone()), "ambiguous": ambiguous, "dispatched": dispatched,
            "target": op.spec.target, "hostActionId": host_action, "revision": revision, "command": command,
        });
        let persisted = persist(host, &op.id, "action-receipt", receipt).await;
        match &persisted {
            Ok(r) => evidence_refs.push(json!(r.evidence_id)),
            Err(e) => receipt_error = Some(CommandError::ambiguous("action_receipt_not_persisted", e.message.clone())),
        }
        let unresolved = ambiguous || persisted.is_err();
        op.update(|s| {
            s.inflight_mutations = s.inflight_mutations.saturating_sub(1);
            s.window += 1;
            if unresolved {
                s.ambiguous = true;
            }
            s.emit("action_receipt", json!({"actionId": aid, "ok": ok, "ambiguous": unresolved}));
            if s.status == "pause_requested" && s.inflight_mutations == 0 {
                let reason = if s.ambiguous { "paused_ambiguous" } else { "paused_live" };
                s.status = reason;
                s.pause_reason = Some(if s.ambiguous { "ambiguous" } else { "live" });
                s.emit("paused", json!({"pauseReason": s.pause_reason}));
            }
        });
    }
    let error = receipt_error.or(error);
    let ok = ok && error.is_none();
    // Built and registered under one lock: the window in the object is the window the
    // host checks against (a concurrent mutation cannot slip between them).
    let evidence = ok.then(|| {
        let coverage = result_coverage(&value);
        let capture = capture_facts(&value, &args);
        op.update(|s| {
            let mut e = json!({
                "issuer": "aab-host", "operationId": op.id, "callId": call_id, "actionId": host_action, "command": command,
                "window": s.window, "resultSha256": canonical_sha256(&value), "committedAtMs": completed_ms,
                "coverage": coverage,
            });
            if let Some(c) = capture {
                if let Some(token) = c["watermarkCursor"].as_str() {
                    // Taken while a mutation was in flight, it may postdate that action:
                    // it counts as of the window after it (never as pre-action for it).
                    let window = s.window + u64::from(s.inflight_mutations);
                    let w = Watermark { window, coverage: e["coverage"]["status"].clone(), stream: c["stream"].clone(), target: c["target"].clone() };
                    s.issue_watermark(token, w);
                }
                e["capture"] = c;
            }
            s.issue(&call_id, canonical_sha256(&e));
            e
        })
    });
    let duration_ms = started.elapsed().as_millis() as u64;
    // The ledger records every call: what ran, its action, evidence and timings.
    let ledger = json!({
        "callId": call_id, "command": command, "mutation": mutation, "actionId": action_id.clone().or(host_action.clone()),
        "dispatched": error.as_ref().map(|e| json!(e.dispatched)).unwrap_or(json!(dispatched)),
        "evidenceRefs": evidence_refs, "timings": {"startedAtMs": started_ms, "completedAtMs": completed_ms, "durationMs": duration_ms},
        "coverage": evidence.as_ref().map(|e| e["coverage"]["status"].clone()),
    });
    op.update(|s| match &error {
        None => s.emit("call_completed", ledger),
        Some(e) => {
            let mut fields = ledger;
            fields["error"] = json!(e.code);
            fields["ambiguous"] = json!(e.ambiguous);
            s.emit("call_failed", fields)
        }
    });
    let envelope = json!({
        "ok": ok, "command": command, "kind": kind, "result": value,
        "error": error.as_ref().map(|e| json!({"code": e.code, "message": e.message, "field": e.field, "details": e.details})),
        "dispatched": error.as_ref().map(|e| json!(e.dispatched)).unwrap_or(json!(dispatched)),
        "ambiguous": error.as_ref().map(|e| e.ambiguous).unwrap_or(false),
        "execution": {"executionId": op.id, "callId": call_id, "actionId": action_id.clone().or(host_action), "target": op.spec.target},
        "evidence": evidence, "history": history,
        "timings": {"startedAtMs": started_ms, "durationMs": duration_ms},
    });
    let mut envelope = envelope;
    let failed = {
        let mut guard = op.recording.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(rec) => {
                let data = json!({"command": command, "args": Value::Object(args), "envelope": envelope});
                record_payload(host, op, rec, "script-call", &data).err()
            }
            None => None,
        }
    };
    if let Some(e) = failed {
        // Latched: this call reports it (its result and dispatch facts stay), every
        // later call is refused before dispatch.
        let latched = latch_recording(op, &e);
        envelope["ok"] = json!(false);
        envelope["error"] = json!({"code": latched["code"], "message": latched["message"], "field": "recordingDir", "details": {"recording": latched, "callError": envelope["error"]}});
    }
    envelope
}

fn latch_recording(op: &Op, e: &CommandError) -> Value {
    op.update(|s| {
        if s.recording_error.is_none() {
            let v = json!({"code": e.code, "message": e.message});
            s.emit("recording_failed", json!({"error": e.code, "message": e.message}));
            s.recording_error = Some(v);
        }
        s.recording_error.clone().unwrap_or(Value::Null)
    })
}

// ------------------------------------------------------------------ terminal

async fn finish(host: &Host, op: &Arc<Op>, mut t: Terminal) {
    op.update(|s| {
        if !TERMINAL.contains(&s.status) {
            s.status = if t.status == "cancelled" { "cancelling" } else { "finishing" };
        }
        s.pending_question = None;
    });
    let mut result_ref = Value::Null;
    if let (Some(result), "completed") = (t.result.take(), t.status) {
        match persist_result(host, op, result).await {
            Ok(r) => result_ref = r,
            Err(e) => t = Terminal::failed(&e.code, e.message),
        }
    }
    let (revision, action_seq, ambiguous, diagnostics) = op.update(|s| {
        s.checkpoint_revision += 1;
        (s.checkpoint_revision, s.action_seq, s.ambiguous, s.diagnostics.clone())
    });
    if t.status == "cancelled" && ambiguous {
        t.error = Some("ambiguous".into());
    }
    let mut payload = json!({"revision": revision, "stepId": "terminal", "status": t.status, "error": t.error, "message": t.message, "actionSequence": action_seq, "ambiguous": ambiguous});
    if !result_ref.is_null() {
        payload["resultRef"] = result_ref.clone();
    }
    if let Some(d) = diagnostics {
        payload["diagnostics"] = d;
    }
    if let Err(e) = persist(host, &op.id, "checkpoint", payload).await {
        t = Terminal::failed("terminal_not_persisted", e.message);
    }
    op.update(|s| {
        s.status = t.status;
        s.pause_reason = None;
        s.error = t.error.clone();
        s.message = t.message.clone();
        s.result_ref = (!result_ref.is_null() && t.status == "completed").then(|| result_ref.clone());
        let kind = match t.status {
            "completed" => "script_completed",
            "cancelled" => "script_cancelled",
            _ => "script_failed",
        };
        s.emit(kind, json!({"error": t.error, "resultRef": s.result_ref}));
    });
    op.paused.send_replace(false);
}

/// Redact, size, store, re-read and verify the returned JSON; returns `resultRef`.
async fn persist_result(host: &Host, op: &Arc<Op>, result: Value) -> Result<Value, CommandError> {
    let max = op.spec.max_output;
    let revision = op.lock().checkpoint_revision + 1;
    let facts = host.facts().clone();
    let id = op.id.clone();
    blocking(move || {
        let original = to_canonical_string(&result);
        if original.len() > max {
            return Err(CommandError::new("output_too_large", format!("the result of {} bytes exceeds policy.maxOutputBytes {max}", original.len())));
        }
        let redacted = aab_facts::redaction::redact(&result);
        let stored = to_canonical_string(&redacted.value);
        let sha256 = aab_facts::canonical::sha256_hex(stored.as_bytes());
        let original_sha256 = aab_facts::canonical::sha256_hex(original.as_bytes());
        let representation = if redacted.changed() { "redacted-json" } else { "original-json" };
        let payload = json!({"revision": revision, "result": redacted.value, "bytes": stored.len(), "sha256": sha256, "originalSha256": original_sha256, "representation": representation});
        let not_persisted = |why: String| CommandError::new("result_not_persisted", why);
        let store = facts.store().map_err(|e| not_persisted(e.message))?;
        let receipt = store.append_evidence(Namespace::Script, &id, "result", &payload, Durability::Sync).map_err(|e| not_persisted(format!("{}: {}", e.code, e.message)))?;
        let item = store.get_evidence(&receipt.evidence_id).map_err(|e| not_persisted(format!("re-read failed: {}: {}", e.code, e.message)))?;
        let back = item.record.get("result").cloned().unwrap_or(Value::Null);
        if canonical_sha256(&back) != sha256 || item.record.get("sha256") != Some(&json!(sha256)) {
            return Err(not_persisted("the stored result does not match what was written".into()));
        }
        Ok(json!({"evidenceId": receipt.evidence_id, "bytes": stored.len(), "sha256": sha256, "originalSha256": original_sha256, "representation": representation}))
    })
    .await
}
