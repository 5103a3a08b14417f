//! Ordinary command history (`aab.command-history/v1`): after an ordinary
//! command ran, record one `execution` fact in the `action` stream and its
//! UI/state/log evidence facts, and report what was stored. Best effort by
//! design: a failed write is reported (`partial`), never retried, and never
//! changes the command's own outcome.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use crate::canonical;
use crate::error::FactError;
use crate::profile::{Durability, Stream};
use crate::store::FactStore;

pub const HISTORY_SCHEMA: &str = "aab.command-history/v1";
/// Evidence dedupe entries kept per process before the set is reset.
const DEDUPE_CAPACITY: usize = 8192;

/// One evidence fact to record beside the execution fact.
#[derive(Clone, Debug)]
pub struct HistoryEvidence {
    pub stream: Stream,
    pub record: Value,
}

/// Records command history; holds the per-process evidence dedupe set.
#[derive(Debug, Default)]
pub struct HistoryRecorder {
    seen: Mutex<HashMap<String, u64>>,
}

fn base(status: &str, action_id: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("schemaVersion".into(), json!(HISTORY_SCHEMA));
    m.insert("status".into(), json!(status));
    m.insert("actionId".into(), json!(action_id));
    m
}

impl HistoryRecorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The history object when recording is switched off (`AI_APP_BRIDGE_FACT_CACHE=off`).
    pub fn disabled(action_id: &str) -> Value {
        let mut m = base("disabled", action_id);
        m.insert("action".into(), json!({ "partition": "action", "globalSeq": null, "stored": false, "actionId": action_id }));
        m.insert("evidence".into(), json!([]));
        m.insert("errors".into(), json!([]));
        m.insert("replayed".into(), json!(false));
        Value::Object(m)
    }

    /// The history object when the store could not be opened.
    pub fn unavailable(action_id: &str, error: &FactError) -> Value {
        let mut m = base("unavailable", action_id);
        m.insert("action".into(), json!({ "partition": "action", "globalSeq": null, "stored": false, "actionId": action_id, "error": error.code }));
        m.insert("evidence".into(), json!([]));
        m.insert("errors".into(), json!([{ "error": error.code, "message": error.message }]));
        m.insert("replayed".into(), json!(false));
        Value::Object(m)
    }

    /// Record one execution (`{command, status, args, result, error?}`, already
    /// summarised by the caller) under `target_key`, then its evidence.
    pub fn record(&self, store: &FactStore, target_key: &str, action_id: &str, execution: &Value, evidence: &[HistoryEvidence]) -> Value {
        let mut errors = Vec::new();
        let mut fact = execution.as_object().cloned().unwrap_or_default();
        fact.insert("kind".into(), json!("execution"));
        fact.insert("actionId".into(), json!(action_id));
        let action = match store.append(Stream::Action, Some(target_key), &Value::Object(fact), Durability::Sync) {
            Ok(r) => json!({ "partition": "action", "globalSeq": r.sequence, "stored": true, "actionId": action_id }),
            Err(e) => {
                errors.push(json!({ "partition": "action", "error": e.code }));
                json!({ "partition": "action", "globalSeq": null, "stored": false, "actionId": action_id, "error": e.code })
            }
        };
        let mut stored_evidence = Vec::new();
        for ev in evidence {
            let partition = ev.stream.as_str();
            let key = format!("{partition}\u{0}{}", canonical::to_canonical_string(&ev.record));
            let digest = canonical::sha256_hex(key.as_bytes());
            if let Some(seq) = self.seen.lock().unwrap_or_else(|p| p.into_inner()).get(&digest) {
                stored_evidence.push(json!({ "partition": partition, "globalSeq": seq, "stored": true, "deduplicated": true }));
                continue;
            }
            let record = json!({ "kind": "evidence", "stream": partition, "actionId": action_id, "record": ev.record });
            match store.append(ev.stream, Some(target_key), &record, Durability::Memory) {
                Ok(r) => {
                    // Only stored evidence enters the dedupe set, so a failed
                    // write can be retried by a later observation.
                    let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                    if seen.len() >= DEDUPE_CAPACITY {
                        seen.clear();
                    }
                    seen.insert(digest, r.sequence);
                    stored_evidence.push(json!({ "partition": partition, "globalSeq": r.sequence, "stored": true }));
                }
                Err(e) => {
                    errors.push(json!({ "partition": partition, "error": e.code }));
                    stored_evidence.push(json!({ "partition": partition, "globalSeq": null, "stored": false, "error": e.code }));
                }
            }
        }
        let mut m = base(if errors.is_empty() { "stored" } else { "partial" }, action_id);
        m.insert("action".into(), action);
        m.insert("evidence".into(), Value::Array(stored_evidence));
        m.insert("errors".into(), Value::Array(errors));
        m.insert("replayed".into(), json!(false));
        Value::Object(m)
    }
}
