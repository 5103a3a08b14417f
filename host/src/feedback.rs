//! `_feedback`: the execution feedback the host adds to a plugin command's object
//! result on the public request path (reference §10), per the `feedback` execution
//! option — `auto` (default): a compact object; `full`: target identity, all
//! timings, evidence references and the outcome facts; `off`: the provider result
//! unchanged. Strings, bytes and arrays are never wrapped. Built only from the
//! command's spec and the call's own facts, never from a platform name.

use serde_json::{Map, Value, json};

use crate::registry::RegisteredCommand;
use crate::reply::ExecOutcome;

/// When one delivery was requested, admitted and settled.
#[derive(Clone, Debug, Default)]
pub struct CallTimings {
    pub requested_at_ms: u64,
    pub started_at_ms: u64,
    pub completed_at_ms: u64,
    pub queue_wait_ms: u64,
}

impl CallTimings {
    /// Settled now.
    pub fn settled_now(requested_at_ms: u64, started_at_ms: u64, queue_wait_ms: u64) -> CallTimings {
        CallTimings { requested_at_ms, started_at_ms, completed_at_ms: crate::ids::now_ms(), queue_wait_ms }
    }

    fn duration_ms(&self) -> u64 {
        self.completed_at_ms.saturating_sub(self.requested_at_ms)
    }
}

/// The outcome word of `_feedback.status`.
fn status_of(result: &Map<String, Value>) -> &'static str {
    let failed = result.get("ok") == Some(&Value::Bool(false)) || result.get("error").is_some_and(|e| !e.is_null());
    if failed {
        "failed"
    } else if result.get("inconclusive") == Some(&Value::Bool(true)) {
        "inconclusive"
    } else if result.get("verified") == Some(&Value::Bool(true)) {
        "verified"
    } else {
        "completed"
    }
}

/// Add `_feedback` to an object result unless `feedback:"off"` (or the provider set
/// its own `_feedback`, which is kept as it is).
pub fn attach(outcome: &mut ExecOutcome, command: &RegisteredCommand, arguments: &Value, target_key: &str, timings: &CallTimings, history: &Value) {
    let mode = arguments.get("feedback").and_then(Value::as_str).unwrap_or("auto");
    if mode == "off" {
        return;
    }
    let ExecOutcome::Json(Value::Object(result)) = outcome else { return };
    if result.contains_key("_feedback") {
        return;
    }
    let spec = &command.spec;
    let request_id = arguments.get("requestId").cloned().unwrap_or(Value::Null);
    let status = status_of(result);
    let feedback = if mode == "full" {
        let mut target = Map::new();
        target.insert("kind".into(), json!(spec.target_kind));
        target.insert("platform".into(), json!(spec.platform));
        target.insert("key".into(), json!(target_key));
        for k in &spec.target_key {
            if let Some(v) = arguments.get(k) {
                target.insert(k.clone(), v.clone());
            }
        }
        let evidence: Vec<Value> = history.get("actionId").map(|a| json!({"kind": "command-history", "actionId": a, "status": history.get("status")})).into_iter().collect();
        let mut outcome_facts = Map::new();
        for k in ["ok", "error", "dispatched", "ambiguous", "settled", "executionReceipt", "matched", "verified", "inconclusive"] {
            if let Some(v) = result.get(k) {
                outcome_facts.insert(k.into(), v.clone());
            }
        }
        json!({
            "status": status,
            "mode": "full",
            "target": target,
            "dispatch": {"command": spec.command, "requestId": request_id, "serializedByTarget": true},
            "timings": {"requestedAtMs": timings.requested_at_ms, "startedAtMs": timings.started_at_ms, "completedAtMs": timings.completed_at_ms,
                        "queueWaitMs": timings.queue_wait_ms, "durationMs": timings.duration_ms()},
            "evidence": evidence,
            "outcome": outcome_facts,
        })
    } else {
        json!({
            "status": status,
            "mode": "auto",
            "target": {"kind": spec.target_kind, "key": target_key},
            "dispatch": {"command": spec.command, "requestId": request_id, "serializedByTarget": true},
            "timings": {"queueWaitMs": timings.queue_wait_ms, "durationMs": timings.duration_ms()},
        })
    };
    result.insert("_feedback".into(), feedback);
}
