//! The supervisor: one task per script that runs the child, reads its frames and
//! answers them (calls, progress, checkpoints, questions), under the deadline and
//! the control channel.

use super::*;

pub(super) struct Terminal {
    pub(super) status: &'static str,
    pub(super) error: Option<String>,
    pub(super) message: Option<String>,
    pub(super) result: Option<Value>,
}

impl Terminal {
    pub(super) fn failed(code: &str, message: impl Into<String>) -> Terminal {
        Terminal { status: "failed", error: Some(code.to_string()), message: Some(message.into()), result: None }
    }
}

/// Writes host → child frames, bounded by the channel's frame limit.
#[derive(Clone)]
pub(super) struct Writer {
    pub(super) tx: mpsc::Sender<String>,
    pub(super) max: usize,
}

impl Writer {
    pub(super) async fn send(&self, mut frame: Value) {
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

pub(super) async fn run(host: Host, op: Arc<Op>, ctl_rx: mpsc::UnboundedReceiver<Ctl>) {
    let terminal = supervise(&host, &op, ctl_rx).await;
    finish(&host, &op, terminal).await;
}

pub(super) async fn supervise(host: &Host, op: &Arc<Op>, mut ctl_rx: mpsc::UnboundedReceiver<Ctl>) -> Terminal {
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

pub(super) fn channel_message(code: &str) -> String {
    match code {
        "frame_too_large" => "the script wrote a frame larger than the channel limit".into(),
        "malformed_frame" => "the script wrote a line that is not a JSON frame object".into(),
        "channel_backlog" => format!("more than {} frames were waiting unconsumed", child::MAX_PENDING_FRAMES),
        _ => "the script's output channel closed".into(),
    }
}

pub(super) fn frame_id(f: &Value) -> Option<String> {
    f.get("id").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 64).map(str::to_string)
}

pub(super) async fn handle_frame(host: &Host, op: &Arc<Op>, writer: &Writer, tasks: &mut tokio::task::JoinSet<()>, f: Value) -> Option<Terminal> {
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

pub(super) async fn wait_unpaused(op: &Op) {
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

pub(super) fn record_payload(host: &Host, op: &Op, rec: &mut aab_facts::recording::Recording, kind: &str, data: &Value) -> Result<(), CommandError> {
    let store = host.facts().store()?;
    let seq = op.recording_seq.fetch_add(1, Ordering::SeqCst) + 1;
    let revision = op.lock().checkpoint_revision;
    let target = (!op.spec.target.is_null()).then_some(&op.spec.target);
    let call = aab_facts::recording::RecordedCall { sequence: seq, revision, kind, target, data, screenshots: &[], parent_fact_id: None };
    rec.record(&store, &call).map(|_| ()).map_err(|e| crate::facts::to_command_error(&e))
}
