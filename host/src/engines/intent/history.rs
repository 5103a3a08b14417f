//! `status`: the live snapshot, pages of the evidence ledger, and the status of an
//! Intent that is not live, rebuilt from checksum-verified evidence.

use super::*;

pub(super) fn snapshot(op: &Op) -> Value {
    let st = op.st.lock().expect("intent state");
    let events: Vec<&Value> = st.events.iter().rev().take(32).collect::<Vec<_>>().into_iter().rev().collect();
    let mut snap = json!({
        "ok": true, "command": "intent", "operationId": op.id, "status": st.status, "revision": st.revision, "error": st.error,
        "lastDecisionId": st.last_decision_id, "mode": st.mode, "goal": st.goal, "eventSequence": st.event_seq, "events": events,
        "eventGap": st.dropped > 0, "droppedEvents": st.dropped, "provider": st.provider.provider, "plugin": st.plugin,
        "observationTarget": st.observation_target, "observationFailure": st.observation_failure, "summary": st.summary,
        "evidenceId": st.latest.get("summary"), "latestEvidenceIds": st.latest, "timings": st.timings, "agentCalls": st.agent_calls,
        "actionSteps": st.action_steps, "deadlineMs": st.deadline_ms, "pendingOperations": st.pending,
        "terminalEvidenceId": st.terminal_evidence_id, "lastAction": st.last_action, "capture": st.capture,
        "live": true, "recovered": false, "restartPolicy": "none",
    });
    if let Some((key, answer)) = workflow::reply_fields(&st) {
        snap[key.as_str()] = answer;
    }
    snap
}

pub(super) fn after_sequence(args: &Value) -> u64 {
    match args.get("afterSequence") {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

pub(super) async fn status(host: &Host, args: &Value) -> Result<Value, CommandError> {
    let id = text(args, "operationId").unwrap_or_default().to_string();
    let after = after_sequence(args);
    let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize;
    match host.intents().get(&id) {
        Some(op) => {
            workflow::settle_if_idle(host, &op).await;
            let mut snap = snapshot(&op);
            snap["history"] = history(host.facts(), &id, after, limit).await?;
            Ok(snap)
        }
        None => recover(host.facts(), &id, after, limit).await,
    }
}

pub(super) fn ledger_item(op_id: &str, item: &aab_facts::evidence::EvidenceItem) -> Value {
    let r = &item.record;
    let kind = if item.kind == "checkpoint" { r.get("stepId").and_then(Value::as_str).unwrap_or("checkpoint").to_string() } else { item.kind.clone() };
    let summary = match item.kind.as_str() {
        "observation" => json!({"rawTreeId": r.get("rawTreeId"), "provider": r.get("provider"), "command": r.get("command"), "captureCoverage": r.get("captureCoverage")}),
        "summary" => json!({"rawTreeId": r.get("rawTreeId"), "bytes": r.get("bytes"), "truncated": r.get("truncated"), "nodes": r.pointer("/summary/nodes").and_then(Value::as_array).map(Vec::len)}),
        "decision" => json!({"decisionId": r.get("decisionId"), "agentDecision": r.get("agentDecision"), "action": r.get("action"), "basedOnRevision": r.get("basedOnRevision")}),
        "dispatch-marker" => json!({"decisionId": r.get("decisionId"), "command": r.get("command"), "state": r.get("state")}),
        "action-receipt" => json!({"mechanicalStatus": r.get("mechanicalStatus"), "dispatched": r.get("dispatched"), "ambiguous": r.get("ambiguous"), "error": r.pointer("/providerResult/error")}),
        _ => r.get("payloadSummary").cloned().unwrap_or(Value::Null),
    };
    json!({
        "schema": "aab.execution-fact/v1", "executionId": op_id, "sequence": item.sequence, "revision": r.get("revision"), "kind": kind,
        "target": r.get("target"), "timestampMs": item.committed_at_ms, "actionId": r.get("actionId"), "parentFactId": r.get("parentFactId"),
        "payloadSummary": summary, "evidenceRefs": [item.evidence_id], "checksum": item.checksum,
    })
}

pub(super) async fn read_all(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<aab_facts::evidence::EvidencePage, CommandError> {
    let store = facts.store()?.clone();
    let id = op_id.to_string();
    tokio::task::spawn_blocking(move || store.read_evidence(Namespace::Intent, &id, &Cursor::After(after), limit))
        .await
        .map_err(|e| CommandError::new("fact_store_unavailable", e.to_string()))?
        .map_err(|e| to_command_error(&e))
}

pub(super) async fn history(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<Value, CommandError> {
    let page = read_all(facts, op_id, after, limit).await?;
    let items: Vec<Value> = page.records.iter().map(|i| ledger_item(op_id, i)).collect();
    let last = page.records.last().map_or(after, |i| i.sequence);
    Ok(json!({"items": items, "lastSequence": last, "hasMore": page.has_more, "gap": page.gap.map(|g| json!({"from": g.from, "to": g.to}))}))
}

/// `status` of an Intent that is not live in this runtime: rebuilt from
/// checksum-verified evidence. Nothing is replayed.
pub(super) async fn recover(facts: &Facts, op_id: &str, after: u64, limit: usize) -> Result<Value, CommandError> {
    let mut records = Vec::new();
    let mut cursor = 0;
    loop {
        let page = read_all(facts, op_id, cursor, 1000).await?;
        cursor = page.next_sequence;
        let more = page.has_more;
        records.extend(page.records);
        if !more {
            break;
        }
    }
    if records.is_empty() {
        return Err(CommandError::new("operation_not_found", format!("no Intent `{op_id}` is live or retained")).with_field("operationId"));
    }
    let step = |i: &aab_facts::evidence::EvidenceItem| i.record.get("stepId").and_then(Value::as_str).map(str::to_string);
    let started = records.iter().find(|i| step(i).as_deref() == Some("intent-started")).map(|i| i.record["payloadSummary"].clone()).unwrap_or(Value::Null);
    let terminal = records.iter().rev().find(|i| step(i).as_deref() == Some("intent-terminal"));
    let mut latest = Map::new();
    let mut revision = 0;
    let mut summary = Value::Null;
    let mut markers: Vec<String> = Vec::new();
    let mut receipts: HashSet<String> = HashSet::new();
    for i in &records {
        let key = match i.kind.as_str() {
            "dispatch-marker" => "marker",
            "action-receipt" => "receipt",
            k => k,
        };
        latest.insert(key.into(), json!(i.evidence_id));
        match i.kind.as_str() {
            "summary" => {
                revision = i.record.get("revision").and_then(Value::as_u64).unwrap_or(revision);
                summary = i.record.get("summary").cloned().unwrap_or(Value::Null);
            }
            "dispatch-marker" => markers.push(i.record["actionId"].as_str().unwrap_or_default().to_string()),
            "action-receipt" => {
                receipts.insert(i.record["actionId"].as_str().unwrap_or_default().to_string());
            }
            _ => {}
        }
    }
    let unmatched: Vec<String> = markers.into_iter().filter(|m| !receipts.contains(m)).collect();
    let (status, error, terminal_id, saved) = match terminal {
        Some(t) => {
            let p = &t.record["payloadSummary"];
            (p["status"].clone(), p["error"].clone(), json!(t.evidence_id), p.clone())
        }
        None => (json!("interrupted"), json!("runtime_restarted"), Value::Null, started.clone()),
    };
    let page_items: Vec<Value> = records.iter().filter(|i| i.sequence > after).take(limit).map(|i| ledger_item(op_id, i)).collect();
    let has_more = records.iter().filter(|i| i.sequence > after).count() > page_items.len();
    let last = page_items.last().and_then(|i| i["sequence"].as_u64()).unwrap_or(after);
    Ok(json!({
        "ok": true, "command": "intent", "operationId": op_id, "status": status, "error": error, "revision": revision,
        "live": false, "recovered": true, "restartPolicy": "none", "terminalEvidenceId": terminal_id,
        "unmatchedActionIds": unmatched, "ambiguous": !unmatched.is_empty(),
        "goal": started.get("goal"), "provider": started.get("provider"), "mode": started.get("mode"),
        "startedAtMs": started.get("startedAtMs"), "deadlineMs": started.get("deadlineMs"),
        "lastDecisionId": saved.get("lastDecisionId"), "lastAction": saved.get("lastAction"), "actionSteps": saved.get("actionSteps"),
        "summary": summary, "latestEvidenceIds": latest, "evidenceId": latest.get("summary"),
        "history": {"items": page_items, "lastSequence": last, "hasMore": has_more, "gap": Value::Null},
    }))
}
