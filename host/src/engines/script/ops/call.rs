//! `ctx.call`: authorisation by permission, binding the script target, the
//! dispatch marker and receipt of mutations, and the call through the pipeline.

use super::*;

/// The coverage a call's evidence claims: the result's own `coverage` when it
/// reports one (capture reads, history views), else the complete call result.
pub(super) fn result_coverage(value: &Value) -> Value {
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
pub(super) fn capture_facts(value: &Value, args: &Map<String, Value>) -> Option<Value> {
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

pub(super) fn rejection(command: &str, call_id: &str, op: &Op, e: &CommandError) -> Value {
    json!({
        "ok": false, "command": command, "result": null,
        "error": {"code": e.code, "message": e.message, "field": e.field, "details": e.details},
        "dispatched": e.dispatched, "ambiguous": e.ambiguous,
        "execution": {"executionId": op.id, "callId": call_id, "actionId": null, "target": op.spec.target},
        "evidence": null,
    })
}

/// Default the call's arguments from the frozen target's identity fields.
pub(super) fn bind_target(op: &Op, spec: &aab_plugin_api::CommandSpec, args: &mut Map<String, Value>) -> Result<(), CommandError> {
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

pub(super) async fn ctx_call(host: &Host, op: &Arc<Op>, command: &str, args: Value) -> Value {
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
    // A capture read that would change what it captures (logcat clear, a WebView
    // capture that runs page script) is not a Script's to make: its evidence
    // could no longer say what the app did on its own.
    if let Some(flag) = validated.spec.mutating_flags.iter().find(|f| args.get(f.as_str()).is_some_and(crate::pipeline::flag_set)) {
        return rejection(
            command,
            &call_id,
            op,
            &CommandError::new("capture_mutation_not_allowed", format!("`{command}` with `{flag}` changes the app it captures; Scripts may only read captures"))
                .with_field(format!("args.{flag}")),
        );
    }
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
            managed: false,
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

pub(super) fn latch_recording(op: &Op, e: &CommandError) -> Value {
    op.update(|s| {
        if s.recording_error.is_none() {
            let v = json!({"code": e.code, "message": e.message});
            s.emit("recording_failed", json!({"error": e.code, "message": e.message}));
            s.recording_error = Some(v);
        }
        s.recording_error.clone().unwrap_or(Value::Null)
    })
}
