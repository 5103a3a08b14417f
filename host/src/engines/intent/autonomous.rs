//! Autonomous mode: the frozen agent module and budget, the persistent agent
//! child and its decision turns.

use super::*;

/// Freeze and syntax-check `agentModule` (aab-extract's `prepare`: no top-level
/// code runs) and resolve the budget with its defaults.
pub(super) async fn prepare_agent(args: &Value, cwd: &str, provider: &IntentProvider) -> Result<(aab_extract::PreparedScript, Budget), CommandError> {
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
pub(super) fn spawn_agent(host: &Host, op: &Arc<Op>) {
    if op.agent.is_none() {
        return;
    }
    let (host, op) = (host.clone(), op.clone());
    tokio::spawn(async move { agent_loop(host, op).await });
}

/// One `decide` call in the operation's agent child, started first if it is not
/// running (after a resume, a timeout or a crash). A fatal failure (timeout, exit,
/// malformed frame, abandoned turn) kills and reaps the child.
pub(super) async fn agent_turn(op: &Arc<Op>, prepared: &aab_extract::PreparedScript, turn: u64, inputs: &Value, abort: &tokio_util::sync::CancellationToken) -> Result<Value, agent::AgentError> {
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
pub(super) async fn kill_agent(op: &Op) {
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
pub(super) async fn agent_loop(host: Host, op: Arc<Op>) {
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
