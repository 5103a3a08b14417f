//! Script `start`: freezing the spec (language, source, target, permissions,
//! policy), the start checkpoint and launching the supervised child.

use super::*;

pub(super) fn resolve_runtime(language: Language, python_path: Option<&str>) -> Result<PathBuf, CommandError> {
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

pub(super) fn freeze(a: &Value, caller_cwd: &str) -> Result<Frozen, CommandError> {
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

pub(super) async fn start(host: &Host, a: &Value, caller_cwd: &str) -> Result<Value, CommandError> {
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
pub(super) fn launch(host: &Host, id: String, frozen: Frozen, recording: Option<aab_facts::recording::Recording>, remaining: Duration, started_ms: u64, state: State) -> Result<Arc<Op>, CommandError> {
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

pub(super) async fn stored_exists(host: &Host, id: &str) -> bool {
    let facts = host.facts().clone();
    let id = id.to_string();
    blocking(move || {
        let store = facts.store()?;
        Ok(store.read_evidence(Namespace::Script, &id, &Cursor::Start, 1).map(|p| !p.records.is_empty()).unwrap_or(false))
    })
    .await
    .unwrap_or(false)
}
