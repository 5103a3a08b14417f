//! Observing: one observation (the provider's observe call and the
//! `require.streams` capture reads, paged) committed as a new revision, and the
//! `observe` operation.

use super::*;

/// Observe once (work lock held by the caller). Success commits a new revision;
/// failure persists an `observation-failed` checkpoint and enters
/// `waiting_for_observation`.
pub(super) async fn observe(host: &Host, op: &Arc<Op>) -> Result<(), CommandError> {
    let observed = observe_once(host, op).await;
    // A managed workflow is verified after every observation, committed or not.
    workflow::settle(host, op).await;
    observed
}

async fn observe_once(host: &Host, op: &Arc<Op>) -> Result<(), CommandError> {
    let t0 = Instant::now();
    let (provider, target, observation_target, require, watermarks, action_window, host_actions, next_revision) = {
        let mut st = op.st.lock().expect("intent state");
        st.status = Status::Observing;
        st.event("observing", json!({}));
        st.pending += 1;
        (st.provider.clone(), st.target.clone(), st.observation_target.clone(), st.require.clone(), st.watermarks.clone(), st.action_window.clone(), st.host_actions.clone(), st.revision + 1)
    };
    let sources = provider::Sources { observation_target: Some(&observation_target), ..provider::Sources::new(&target) };
    let arguments = provider::render(&provider.observe.arguments, &sources);
    let call = InternalCall { command: &provider.observe.command, arguments, cwd: op.cwd.clone(), deadline_cap: Some(op.deadline), cancel: Some(op.cancel.clone()), control: None, managed: false };
    let result = host.clone().call(call).await;
    let acquire_ms = ms(t0.elapsed());
    let value = match result {
        Ok(r) => match r.outcome {
            ExecOutcome::Json(v) => Ok(v),
            ExecOutcome::Failed(e) => Err(e),
            _ => Err(CommandError::new("intent_observation_invalid", "the observation command returned no JSON")),
        },
        Err(e) => Err(e),
    };
    let observation = match value {
        Ok(v) => v,
        Err(e) => {
            op.st.lock().expect("intent state").pending -= 1;
            let payload = json!({"stepId": "observation-failed", "revision": next_revision - 1, "target": target,
                                 "payloadSummary": {"provider": provider.provider, "command": provider.observe.command, "attempted": {"provider": provider.provider, "observationTarget": observation_target}, "response": e.to_json()}});
            let saved = persist(&op.facts, &op.id, "checkpoint", payload).await;
            let mut st = op.st.lock().expect("intent state");
            if !st.status.is_terminal() && st.status == Status::Observing {
                st.status = Status::WaitingForObservation;
            }
            st.timing("providerAcquireMs", acquire_ms);
            match saved {
                Ok((eid, _)) => {
                    st.observation_failure = json!({"evidenceId": eid, "attempted": {"provider": provider.provider, "observationTarget": observation_target}, "response": e.to_json()});
                    st.latest.insert("observationFailure".into(), json!(eid));
                }
                Err(store) => st.error = Some(store.code.clone()),
            }
            st.event("blocked", json!({"error": e.code}));
            return Err(e);
        }
    };
    // Capture streams (`require.streams`), each read per observation through its
    // window (`require` semantics: docs/COMMAND_CONTRACT.md, Intent).
    let mut captures = Map::new();
    let mut capture_refs = Vec::new();
    let mut coverages = Vec::new();
    let mut new_watermarks = watermarks.clone();
    let ts = Instant::now();
    let history_view = require.get("view").and_then(Value::as_str) == Some("connected-history");
    let limit = require.get("limit").and_then(Value::as_u64).unwrap_or(schema::DEFAULT_REQUIRE_LIMIT) as usize;
    for s in require.get("streams").and_then(Value::as_array).into_iter().flatten() {
        let name = s.as_str().unwrap_or_default();
        let Some(decl) = provider.streams.iter().find(|d| d.stream == name) else { continue };
        // Lower bound: after an action, the watermark from before it (kept for every
        // re-observation of that action, so a delayed record stays visible);
        // otherwise the previous observation's (the first: `require.factCursor`).
        let lower = if history_view {
            None
        } else {
            match &action_window {
                Some((_, at)) => at.get(name).filter(|v| !v.is_null()).cloned(),
                None => watermarks.get(name).filter(|v| !v.is_null()).cloned(),
            }
        };
        // `afterActionId`: omitted = the current action, null = every record of the
        // window, a string = that action. An action filter needs the lower bound.
        let after_action = match (history_view, &lower, require.get("afterActionId")) {
            (true, _, _) | (_, None, _) | (_, _, Some(Value::Null)) => None,
            (_, _, Some(Value::String(a))) => Some(host_actions.get(a).cloned().unwrap_or_else(|| a.clone())),
            (_, _, _) => action_window.as_ref().map(|(id, _)| id.clone()),
        };
        let window = json!({"factCursor": lower, "afterActionId": after_action});
        let sources = provider::Sources { observation: Some(&observation), require: Some(&require), watermark: lower.as_ref(), window: Some(&window), observation_target: Some(&observation_target), ..provider::Sources::new(&target) };
        let base = provider::render(&decl.arguments, &sources);
        // `require.timeoutMs` bounds the reads of one stream (never past the lifetime).
        let deadline = match require.get("timeoutMs").and_then(Value::as_u64) {
            Some(t) => op.deadline.min(Instant::now() + Duration::from_millis(t)),
            None => op.deadline,
        };
        let read = read_stream(host, op, decl, &base, deadline, limit).await;
        match read {
            Ok(r) => {
                let watermark = decl.watermark.as_deref().and_then(|p| r.value.pointer(p)).cloned().unwrap_or(Value::Null);
                let mut coverage = decl.coverage.as_deref().and_then(|p| r.value.pointer(p)).and_then(Value::as_str).unwrap_or("unavailable").to_string();
                if r.error.is_some() && coverage == "complete" {
                    coverage = "partial".into();
                }
                if !watermark.is_null() {
                    new_watermarks.insert(name.into(), watermark.clone());
                }
                capture_refs.push(json!({"stream": name, "command": decl.command, "watermark": watermark, "previousWatermark": lower, "factCursor": lower,
                                         "afterActionId": after_action, "coverage": coverage, "records": r.records, "pages": r.pages, "limit": limit,
                                         "truncated": r.truncated, "error": r.error}));
                coverages.push(coverage);
                captures.insert(name.into(), r.value);
            }
            Err(e) => {
                coverages.push("unavailable".into());
                capture_refs.push(json!({"stream": name, "coverage": "unavailable", "factCursor": lower, "afterActionId": after_action, "error": e.code, "field": e.field, "message": e.message}));
            }
        }
    }
    let coverage = if coverages.is_empty() {
        Value::Null
    } else if coverages.iter().all(|c| c == "complete") {
        json!("complete")
    } else if coverages.iter().all(|c| c == "unavailable") {
        json!("unavailable")
    } else {
        json!("partial")
    };
    let capture_ms = ms(ts.elapsed());
    let raw_tree_id = format!("{}:{next_revision}", op.id);
    let tsum = Instant::now();
    let summary = provider::summarize(&provider, &observation, &raw_tree_id, provider::SUMMARY_MAX_BYTES);
    let summary_ms = ms(tsum.elapsed());
    let summary_bytes = serde_json::to_vec(&summary).map(|b| b.len()).unwrap_or(0);
    let tc = Instant::now();
    let obs_payload = json!({
        "revision": next_revision, "target": target, "provider": provider.provider, "capturedAtMs": crate::ids::now_ms(),
        "rawTreeId": raw_tree_id, "rawTree": observation, "command": provider.observe.command, "observationTarget": observation_target,
        "captureRefs": capture_refs, "captureCoverage": coverage, "captures": captures,
    });
    let committed = match persist(&op.facts, &op.id, "observation", obs_payload).await {
        Ok((obs_id, _)) => {
            let sum_payload = json!({"revision": next_revision, "rawTreeId": raw_tree_id, "parentFactId": obs_id, "summary": summary, "bytes": summary_bytes, "truncated": summary["truncated"]});
            persist(&op.facts, &op.id, "summary", sum_payload).await.map(|(sum_id, _)| (obs_id, sum_id))
        }
        Err(e) => Err(e),
    };
    let commit_ms = ms(tc.elapsed());
    let mut st = op.st.lock().expect("intent state");
    st.pending -= 1;
    st.timing("providerAcquireMs", acquire_ms);
    st.timing("captureMs", capture_ms);
    st.timing("summaryMs", summary_ms);
    st.timing("evidenceCommitMs", commit_ms);
    match committed {
        Ok((obs_id, sum_id)) => {
            // Only now the revision becomes visible.
            st.revision = next_revision;
            st.observation = observation;
            st.summary = summary;
            st.watermarks = new_watermarks;
            // Failed reads are reported too (their refs carry the error).
            st.capture = if capture_refs.is_empty() { Value::Null } else { json!({"coverage": coverage, "refs": capture_refs, "streams": captures}) };
            st.observation_failure = Value::Null;
            st.latest.insert("observation".into(), json!(obs_id));
            st.latest.insert("summary".into(), json!(sum_id));
            st.timing("summaryBytes", summary_bytes as u64);
            if st.status == Status::Observing {
                st.status = Status::WaitingForDecision;
                st.event("waiting_for_decision", json!({"summaryEvidenceId": sum_id}));
            }
            Ok(())
        }
        Err(e) => {
            // The observation is not committed: the revision stays where it was.
            if st.status == Status::Observing {
                st.status = Status::WaitingForObservation;
            }
            st.error = Some(e.code.clone());
            st.event("blocked", json!({"error": e.code}));
            Err(e)
        }
    }
}

/// One stream's read: its pages up to `limit` records.
pub(super) struct StreamRead {
    /// The first page (its window and watermark), with every kept record.
    pub(super) value: Value,
    pub(super) records: usize,
    pub(super) pages: usize,
    pub(super) truncated: bool,
    /// A later page that failed (the first page's failure is the `Err`).
    pub(super) error: Option<Value>,
}

/// Read one capture stream: the first page with `base`, then continuation pages
/// (the stream's `next` template over the previous page) until `limit` records are
/// kept, the window is exhausted, or the deadline passes. Records come from the
/// declared `records` pointer; a stream that declares none is one page.
pub(super) async fn read_stream(host: &Host, op: &Arc<Op>, decl: &aab_plugin_api::protocol::IntentStream, base: &Map<String, Value>, deadline: Instant, limit: usize) -> Result<StreamRead, CommandError> {
    const MAX_PAGES: usize = 256;
    let mut args = base.clone();
    let mut first: Option<Value> = None;
    let mut kept: Vec<Value> = Vec::new();
    let mut pages = 0;
    let mut truncated = false;
    let mut error = None;
    loop {
        let call = InternalCall { command: &decl.command, arguments: args.clone(), cwd: op.cwd.clone(), deadline_cap: Some(deadline), cancel: Some(op.cancel.clone()), control: None, managed: false };
        let page = match host.clone().call(call).await.map(|r| r.outcome) {
            Ok(ExecOutcome::Json(v)) => v,
            Ok(ExecOutcome::Failed(e)) | Err(e) => {
                if first.is_none() {
                    return Err(e);
                }
                error = Some(json!({"error": e.code, "message": e.message, "page": pages + 1}));
                truncated = true;
                break;
            }
            Ok(_) => {
                let e = CommandError::new("capture_not_json", format!("`{}` returned no JSON", decl.command));
                if first.is_none() {
                    return Err(e);
                }
                error = Some(json!({"error": e.code, "page": pages + 1}));
                truncated = true;
                break;
            }
        };
        pages += 1;
        let Some(ptr) = decl.records.as_deref() else {
            first = Some(page);
            break;
        };
        kept.extend(page.pointer(ptr).and_then(Value::as_array).cloned().unwrap_or_default());
        let next = decl.next.as_ref().and_then(|t| provider::render_complete(t, &provider::Sources { page: Some(&page), ..provider::Sources::new(&Value::Null) }));
        if first.is_none() {
            first = Some(page);
        }
        if kept.len() >= limit {
            truncated = kept.len() > limit || next.is_some();
            kept.truncate(limit);
            break;
        }
        match next {
            Some(extra) if pages < MAX_PAGES => {
                args = base.clone();
                args.extend(extra);
            }
            Some(_) => {
                truncated = true;
                break;
            }
            None => break,
        }
    }
    let mut value = first.unwrap_or(Value::Null);
    let records = kept.len();
    if let Some(ptr) = decl.records.as_deref() {
        if let Some(slot) = value.pointer_mut(ptr) {
            *slot = Value::Array(kept);
        }
        if let Value::Object(m) = &mut value {
            m.insert("count".into(), json!(records));
            m.insert("pages".into(), json!(pages));
            m.insert("truncated".into(), json!(truncated));
        }
    }
    Ok(StreamRead { value, records, pages, truncated, error })
}

pub(super) async fn observe_op(host: &Host, args: &Value) -> Result<Value, CommandError> {
    let op = live_op(host, args).await?;
    if let Some(p) = text(args, "provider") {
        let current = op.st.lock().expect("intent state").provider.provider.clone();
        if p != current {
            return Err(err_details(CommandError::new("intent_provider_unsupported", format!("this Intent's target offers provider `{current}` only; switching is not supported by this build")).with_field("provider"), &op));
        }
    }
    // Omitted: keep the current observationTarget; null: the whole target.
    let observation_target = match args.get("observationTarget") {
        Some(given) => {
            let provider = op.st.lock().expect("intent state").provider.clone();
            Some(checked_observation_target(&provider, given).map_err(|e| err_details(e, &op))?)
        }
        None => None,
    };
    let Ok(guard) = op.work.try_lock() else {
        return Err(err_details(CommandError::new("operation_busy", "an observation or action of this Intent is pending"), &op));
    };
    {
        let st = op.st.lock().expect("intent state");
        if !matches!(st.status, Status::WaitingForDecision | Status::WaitingForObservation) {
            return Err(details_of(&st, &op.id, CommandError::new("not_waiting_for_decision", format!("observe is allowed while waiting, not in `{}`", st.status))));
        }
        if let Some(r) = args.get("basedOnRevision").and_then(Value::as_u64)
            && r != st.revision
        {
            return Err(details_of(&st, &op.id, CommandError::new("reobserve_required", format!("revision {r} is not the committed revision {}", st.revision)).with_field("basedOnRevision")));
        }
    }
    if let Some(t) = observation_target {
        op.st.lock().expect("intent state").observation_target = t;
    }
    let _ = observe(host, &op).await;
    drop(guard);
    Ok(snapshot(&op))
}
