//! `pause`, `resume`, `cancel` / `intervene`, and `finish`: the terminal
//! checkpoint persisted before a terminal status is exposed.

use super::*;

pub(super) async fn pause_resume(host: &Host, args: &Value, pause: bool) -> Result<Value, CommandError> {
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

pub(super) async fn stop(host: &Host, args: &Value, stopping: Status, terminal: Status, reason: Option<String>) -> Result<Value, CommandError> {
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
pub(super) async fn finish(op: &Arc<Op>, status: Status, error: Option<String>) {
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
