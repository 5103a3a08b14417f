//! Reading and controlling a script: status / wait / result, pause / resume /
//! decide / cancel, and what is left of a script after its runtime was lost
//! (restore, checkpoint resume, stored result).

use super::*;

pub(super) async fn wait(op: &Arc<Op>, page: Page, wait_ms: u64) -> Value {
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

pub(super) fn pause(op: &Op) -> Result<(), CommandError> {
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

pub(super) fn resume(op: &Op) -> Result<(), CommandError> {
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

pub(super) fn decide(op: &Op, a: &Value) -> Result<(), CommandError> {
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

pub(super) async fn cancel(op: &Arc<Op>, page: Page) -> Value {
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

pub(super) async fn result(host: &Host, op: &Arc<Op>) -> Result<Value, CommandError> {
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

pub(super) async fn read_result(host: &Host, id: &str, r: Value) -> Result<Value, CommandError> {
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
pub(super) async fn read_records(host: &Host, id: &str) -> Result<Vec<(String, Value, String)>, CommandError> {
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

pub(super) fn is_terminal_record(kind: &str, r: &Value) -> bool {
    kind == "checkpoint" && r["stepId"] == json!("terminal") && r.get("checkpointType").is_none()
}

pub(super) fn action_sequence_of(r: &Value) -> Option<u64> {
    r["actionSequence"].as_u64().or_else(|| r["actionId"].as_str().and_then(|a| a.rsplit_once(":action-")).and_then(|(_, n)| n.parse().ok()))
}

/// What the durable records say about a checkpoint resume.
pub(super) struct Resumability {
    pub(super) start: Value,
    pub(super) terminal: Option<Value>,
    /// The last `ctx.checkpoint` (or the start checkpoint): (record, evidenceId).
    pub(super) boundary: (Value, String),
    pub(super) max_revision: u64,
    pub(super) max_action: u64,
    /// `None` = resumable.
    pub(super) refusal: Option<CommandError>,
}

pub(super) fn resumability(records: &[(String, Value, String)]) -> Resumability {
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
pub(super) async fn restore(host: &Host, id: &str) -> Result<Value, CommandError> {
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
pub(super) async fn resume_restored(host: &Host, id: &str, a: &Value, caller_cwd: &str) -> Result<Value, CommandError> {
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

pub(super) async fn restored_result(host: &Host, id: &str) -> Result<Value, CommandError> {
    let snap = restore(host, id).await?;
    match snap["status"].as_str() {
        Some("completed") if snap["resultRef"].is_object() => read_result(host, id, snap["resultRef"].clone()).await,
        Some("completed") => Err(CommandError::new("result_not_persisted", "the completed script has no result ref")),
        status => Err(CommandError::new("result_unavailable", format!("the script ended {}", status.unwrap_or("?"))).with_details(json!({"status": snap["status"], "executionError": snap["error"]}))),
    }
}
