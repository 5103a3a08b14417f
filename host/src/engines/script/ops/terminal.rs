//! The end of a script: persisting its result and terminal checkpoint, then
//! exposing the terminal status.

use super::*;

pub(super) async fn finish(host: &Host, op: &Arc<Op>, mut t: Terminal) {
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
pub(super) async fn persist_result(host: &Host, op: &Arc<Op>, result: Value) -> Result<Value, CommandError> {
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
