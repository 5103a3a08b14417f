//! Managed Intent workflows (`IntentWorkflow` in a plugin manifest, e.g.
//! `install-apk`, `permission-dialog`): the public command starts an Intent with
//! the workflow's fixed provider after one *begin* call of that command (the
//! plugin's own work: staging, submitting, probing), and the Intent's end is
//! decided by the workflow's read-only *settle* call after every observation,
//! never by the agent: a `complete` decision is refused while the plugin has not
//! verified the outcome. The engine still never names a platform or provider:
//! everything comes from the manifest.

use aab_plugin_api::protocol::IntentWorkflow;

use super::*;

/// The workflow part of one Intent.
pub(super) struct Workflow {
    pub(super) def: IntentWorkflow,
    pub(super) args: Value,
    pub(super) begin: Value,
    /// The latest settle answer (what replies carry under `statusKey`).
    pub(super) answer: Value,
}

impl Workflow {
    /// `${workflow.…}`: the public arguments, the begin result, how many actions
    /// the Intent dispatched and the name of the last one.
    fn source(&self, actions: u64, last_action: &Value) -> Value {
        json!({"args": self.args, "begin": self.begin, "actions": actions, "lastAction": last_action.get("action")})
    }
}

/// Start the workflow `def` of `plugin` for the public arguments `args`.
pub async fn start_workflow(host: &Host, plugin: &str, def: &IntentWorkflow, args: &Value, cwd: &str) -> ExecOutcome {
    match Box::pin(start_inner(host, plugin, def, args, cwd)).await {
        Ok(v) => ExecOutcome::Json(v),
        Err(e) => ExecOutcome::Failed(e),
    }
}

async fn start_inner(host: &Host, plugin: &str, def: &IntentWorkflow, args: &Value, cwd: &str) -> Result<Value, CommandError> {
    if host.intents().closed.load(Ordering::SeqCst) {
        return Err(CommandError::new("runtime_stopped", "the runtime is stopping; no new Intent starts"));
    }
    let Some((_, provider)) = host.intent_providers().into_iter().find(|(p, d)| p == plugin && d.provider == def.provider) else {
        return Err(CommandError::new("intent_provider_unsupported", format!("`{}` needs Intent provider `{}` of plugin `{plugin}`, which is not loaded", def.command, def.provider)));
    };
    if args.get("recordingDir").is_some() {
        return Err(CommandError::new("recording_unavailable", "Intent recording is not available in this build").with_field("recordingDir"));
    }
    // The begin call: the command itself, through the whole pipeline (validation,
    // admission, ownership journal, dispatch mark, history). Its failure is the
    // workflow's answer and no Intent exists.
    let arguments = args.as_object().cloned().unwrap_or_default();
    let call = InternalCall { command: &def.command, arguments, cwd: cwd.to_string(), deadline_cap: None, cancel: None, control: None, managed: true };
    let begin = match host.clone().call(call).await?.outcome {
        ExecOutcome::Json(v) => v,
        ExecOutcome::Failed(e) => return Err(e),
        _ => return Err(CommandError::new("intent_workflow_invalid", format!("`{}` returned no JSON", def.command))),
    };
    let wf = Workflow { def: def.clone(), args: args.clone(), begin: begin.clone(), answer: begin.get(&def.status_key).cloned().unwrap_or(Value::Null) };
    let source = wf.source(0, &Value::Null);
    let sources = provider::Sources { workflow: Some(&source), ..provider::Sources::new(&Value::Null) };
    let target = Value::Object(provider::render(&def.target, &sources));
    validate_with(&provider.target_schema, &target, "target")?;
    let goal = provider::render_text(&def.goal, &sources);
    let mut start_args = json!({"operation": "start", "goal": goal, "target": target, "provider": def.provider});
    for k in ["timeoutMs", "operationId"] {
        if let Some(v) = args.get(k) {
            start_args[k] = v.clone();
        }
    }
    start_with(host, &start_args, cwd, Some(wf)).await
}

/// Ask the plugin whether the workflow has ended (work lock held). A settled
/// answer finishes the Intent; an unsettled one (or a failed call) is kept for
/// the replies and the Intent goes on waiting.
pub(super) async fn settle(host: &Host, op: &Arc<Op>) {
    let (command, arguments) = {
        let st = op.st.lock().expect("intent state");
        let Some(wf) = &st.workflow else { return };
        if st.status.is_terminal() || st.status.is_stopping() {
            return;
        }
        let source = wf.source(st.action_steps, &st.last_action);
        let sources = provider::Sources { workflow: Some(&source), ..provider::Sources::new(&st.target) };
        (wf.def.settle.command.clone(), provider::render(&wf.def.settle.arguments, &sources))
    };
    let call = InternalCall { command: &command, arguments, cwd: op.cwd.clone(), deadline_cap: Some(op.deadline), cancel: Some(op.cancel.clone()), control: None, managed: false };
    let answer = match host.clone().call(call).await {
        Ok(r) => match r.outcome {
            ExecOutcome::Json(v) => v,
            ExecOutcome::Failed(e) => json!({"settled": false, "checkError": e.to_json()}),
            _ => json!({"settled": false, "checkError": {"error": "intent_workflow_invalid"}}),
        },
        Err(e) => json!({"settled": false, "checkError": e.to_json()}),
    };
    let settled = answer.get("settled") == Some(&json!(true));
    let (changed, terminal) = {
        let mut st = op.st.lock().expect("intent state");
        let changed = st.workflow.as_mut().is_some_and(|wf| std::mem::replace(&mut wf.answer, answer.clone()) != answer);
        if changed {
            st.event("workflow_checked", json!({"settled": settled, "succeeded": answer.get("succeeded"), "error": answer.get("error")}));
        }
        let ends = settled && !st.status.is_terminal() && !st.status.is_stopping();
        if ends {
            st.status = Status::Finishing;
        }
        (changed, ends.then(|| terminal_of(&answer)))
    };
    // Evidence of each new answer only: a status poll that learns nothing writes nothing.
    if changed {
        let payload = json!({"stepId": "workflow-check", "payloadSummary": {"command": command, "answer": answer}});
        if let Ok((eid, _)) = persist(&op.facts, &op.id, "checkpoint", payload).await {
            op.st.lock().expect("intent state").latest.insert("workflowCheck".into(), json!(eid));
        }
    }
    if let Some((status, error)) = terminal {
        finish(op, status, error).await;
    }
}

/// The terminal status a settled answer gives the Intent.
fn terminal_of(answer: &Value) -> (Status, Option<String>) {
    let error = |default: &str| Some(answer.get("error").and_then(Value::as_str).unwrap_or(default).to_string());
    if answer.get("succeeded") == Some(&json!(true)) {
        (Status::Completed, None)
    } else if answer.get("ambiguous") == Some(&json!(true)) {
        (Status::Ambiguous, error("intent_workflow_ambiguous"))
    } else {
        (Status::Failed, error("intent_workflow_failed"))
    }
}

/// `status` of a live workflow Intent re-checks it when no work is pending.
pub(super) async fn settle_if_idle(host: &Host, op: &Arc<Op>) {
    let has = { op.st.lock().expect("intent state").workflow.is_some() };
    if !has {
        return;
    }
    if let Ok(_guard) = op.work.try_lock() {
        let waiting = { matches!(op.st.lock().expect("intent state").status, Status::WaitingForDecision | Status::WaitingForObservation) };
        if waiting {
            settle(host, op).await;
        }
    }
}

/// The reply part of a workflow Intent: `{<statusKey>: answer, workflow: {...}}`.
pub(super) fn reply_fields(st: &St) -> Option<(String, Value)> {
    st.workflow.as_ref().map(|wf| (wf.def.status_key.clone(), wf.answer.clone()))
}
