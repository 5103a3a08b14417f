//! Intent `start`: choosing the provider, checking the target, the observation
//! target and `require`, creating the operation and its first observation; the
//! lifetime deadline (`expire`).

use super::*;

pub(super) fn choose_provider(host: &Host, platform: &str, wanted: Option<&str>) -> Result<(String, IntentProvider), CommandError> {
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
pub(super) fn checked_observation_target(provider: &IntentProvider, given: &Value) -> Result<Value, CommandError> {
    if given.is_null() {
        return Ok(Value::Null);
    }
    let Some(schema) = &provider.observation_target_schema else {
        return Err(CommandError::new("observation_target_unsupported", format!("provider `{}` takes no observationTarget", provider.provider)).with_field("observationTarget"));
    };
    validate_with(schema, given, "observationTarget")?;
    Ok(given.clone())
}

pub(super) fn validate_with(schema: &Value, instance: &Value, field: &str) -> Result<(), CommandError> {
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

pub(super) async fn start(host: &Host, args: &Value, cwd: &str) -> Result<Value, CommandError> {
    start_with(host, args, cwd, None).await
}

/// `start`, optionally as a managed workflow's Intent (its begin call done).
pub(super) async fn start_with(host: &Host, args: &Value, cwd: &str, workflow: Option<workflow::Workflow>) -> Result<Value, CommandError> {
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
            workflow,
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
pub(super) fn check_require(require: &Value, target: &Value) -> Result<(), CommandError> {
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

pub(super) async fn expire(op: &Arc<Op>) {
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
