//! `decide`: checks against the committed revision, the autonomous budget gate,
//! decision evidence, the dispatch marker, the provider action, its receipt and
//! the observation after it.

use super::*;

pub(super) async fn live_op(host: &Host, args: &Value) -> Result<Arc<Op>, CommandError> {
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

pub(super) async fn decide(host: &Host, args: &Value) -> Result<Value, CommandError> {
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
pub(super) async fn budget_gate(op: &Arc<Op>, action: &str) -> Result<(), CommandError> {
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

pub(super) async fn decide_on<'a>(host: &Host, op: &'a Arc<Op>, decision: Value, guard: tokio::sync::MutexGuard<'a, ()>, decided_by: &str) -> Result<Value, CommandError> {
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
        if agent == "complete"
            && let Some(wf) = &st.workflow
        {
            return Err(details_of(
                &st,
                &op.id,
                CommandError::new("managed_intent_verification_required", format!("`{}` ends when its own verification settles; a complete decision cannot override it (use intent observe to re-check)", wf.def.command))
                    .with_field("decision.agentDecision"),
            ));
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
    let call = InternalCall { command: &decl.command, arguments: arguments.clone(), cwd: op.cwd.clone(), deadline_cap: Some(op.deadline), cancel: Some(op.cancel.clone()), control: None, managed: false };
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
