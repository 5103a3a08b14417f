//! `aab demo`, Intent section: a supervised Intent on the sample page the demo
//! already drives — start (observe → revision 1), one harmless decision (scroll a
//! control of the committed observation into view), complete on the new revision,
//! then export the Intent's evidence and verify the archive offline.

use serde_json::{Value, json};

pub fn run(call: &mut dyn FnMut(&str, Value) -> Result<Value, Value>, say: &dyn Fn(&str), target: &Value) -> Result<(), String> {
    let fail = |what: &str, e: Value| format!("`intent {what}` failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""));
    let mut web_target = target.clone();
    web_target["platform"] = json!("web");
    let started = call("intent", json!({"operation": "start", "goal": "Bring a control of the sample page into view", "target": web_target, "timeoutMs": 60000}))
        .map_err(|e| fail("start", e))?;
    let op = started["operationId"].as_str().unwrap_or_default().to_string();
    let nodes = started["summary"]["nodes"].as_array().cloned().unwrap_or_default();
    say(&format!(
        "intent start: {op} is {} at revision {} — summary of {} node(s), {} bytes, truncated {}",
        started["status"].as_str().unwrap_or("?"),
        started["revision"],
        nodes.len(),
        started["timings"]["summaryBytes"],
        started["summary"]["truncated"]
    ));
    let Some(button) = nodes.iter().find(|n| n["tag"] == json!("button")).or(nodes.first()) else {
        return Err("the Intent observation has no control".into());
    };
    let decision = json!({"decisionId": "demo-1", "basedOnRevision": started["revision"], "agentDecision": "act",
                          "action": {"action": "scroll", "selector": {"elementId": button["elementId"]}}});
    let acted = call("intent", json!({"operation": "decide", "operationId": op, "decision": decision})).map_err(|e| fail("decide", e))?;
    say(&format!(
        "intent decide: scroll {:?} into view → {} at revision {} (action {} ms, host overhead {} ms)",
        button["text"].as_str().unwrap_or(""),
        acted["status"].as_str().unwrap_or("?"),
        acted["revision"],
        acted["timings"]["actionMs"],
        acted["timings"]["workerOverheadMs"]
    ));
    let done = call("intent", json!({"operation": "decide", "operationId": op,
                                     "decision": {"decisionId": "demo-2", "basedOnRevision": acted["revision"], "agentDecision": "complete", "reason": "the control is in view"}}))
        .map_err(|e| fail("decide complete", e))?;
    say(&format!("intent complete: {} (terminal checkpoint {})", done["status"].as_str().unwrap_or("?"), done["terminalEvidenceId"].as_str().unwrap_or("-")));
    let dir = std::env::temp_dir().join(format!("aab-demo-intent-{}", op));
    let exported = call("evidence", json!({"operation": "export", "namespace": "intent", "operationId": op, "outputDir": dir.display().to_string()}))
        .map_err(|e| fail("evidence export", e))?;
    let sha = exported["manifestSha256"].as_str().unwrap_or_default().to_string();
    let verified = call("evidence", json!({"operation": "verify", "archiveDir": dir.display().to_string(), "manifestSha256": sha}))
        .map_err(|e| fail("evidence verify", e))?;
    say(&format!(
        "evidence: {} record(s) exported to {} — verify: {}",
        verified["recordCount"],
        dir.display(),
        verified["integrity"].as_str().unwrap_or("?")
    ));
    Ok(())
}
