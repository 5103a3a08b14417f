//! Durable action records and the session event log, in the host FactStore
//! (`web-executor/receipts` and `web-executor/events`, key = sessionId; the
//! provider's bounded memory store when the host has none). A mutation writes a
//! `pending` record (fsync'd) before its dispatch mark and its terminal record
//! (`settled` or `unresolved`, fsync'd) before it replies, so after a lost reply
//! the `receipt` operation and the `reconcile` hook find what happened without
//! asking the caller or replaying anything. Events (opened, navigated, action
//! dispatched/settled/unresolved, lease renewed/expired, recovered, closed) are
//! appended without fsync: a crash may lose the log's tail, never a receipt.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

use crate::facts::{AppendError, Facts};
use crate::ids::now_ms;

pub const RECEIPTS: &str = "web-executor/receipts";
pub const EVENTS: &str = "web-executor/events";
pub const RECEIPT_SCHEMA: &str = "aab.web-executor-receipt/v1";
pub const EVENT_SCHEMA: &str = "aab.web-executor-event/v1";
/// Records scanned for one action id (pages of 1000) before giving up.
const MAX_SCAN_PAGES: usize = 64;
/// Latest records of this process's actions, kept for quick answers.
const CACHE: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Cache {
    by_action: HashMap<String, Value>,
    order: VecDeque<String>,
}

pub struct Records {
    pub facts: Facts,
    cache: Mutex<Cache>,
}

impl Default for Records {
    fn default() -> Self {
        Records { facts: Facts::default(), cache: Mutex::new(Cache::default()) }
    }
}

fn append_failed(e: AppendError, what: &str) -> ProviderError {
    match e {
        AppendError::Failed(e) => ProviderError::new("web_executor_receipt_store_failed", format!("the {what} could not be stored: {}: {}", e.error, e.message)).with_details(json!({"store": e.error})),
        AppendError::NeedsContext => ProviderError::new("web_executor_receipt_store_failed", format!("the {what} could not be stored: no host context")),
    }
}

impl Records {
    /// Append an action record durably (pending before the mark, terminal before
    /// the reply). A store that refuses makes the operation fail: an action whose
    /// record cannot be kept is not dispatched, and a terminal record that cannot
    /// be kept leaves the action unresolved.
    pub fn put(&self, ctx: &Context<'_>, session_id: &str, record: &Value) -> Result<(), ProviderError> {
        self.facts.append(Some(ctx), RECEIPTS, session_id, record).map_err(|e| append_failed(e, "action record"))?;
        if let Some(id) = record.get("actionId").and_then(Value::as_str) {
            let mut c = lock(&self.cache);
            if !c.by_action.contains_key(id) {
                c.order.push_back(id.to_string());
            }
            c.by_action.insert(id.to_string(), record.clone());
            while c.order.len() > CACHE {
                if let Some(old) = c.order.pop_front() {
                    c.by_action.remove(&old);
                }
            }
        }
        Ok(())
    }

    /// The latest record of `action_id` in `session_id`'s stream, if any.
    pub fn find(&self, ctx: &Context<'_>, session_id: &str, action_id: &str) -> Result<Option<Value>, ProviderError> {
        if let Some(r) = lock(&self.cache).by_action.get(action_id).filter(|r| r.get("sessionId").and_then(Value::as_str) == Some(session_id)) {
            return Ok(Some(r.clone()));
        }
        let mut after = 0;
        let mut found = None;
        for _ in 0..MAX_SCAN_PAGES {
            let page = self.facts.read(ctx, RECEIPTS, session_id, after, 1000)?;
            for r in &page.records {
                if r.record.get("actionId").and_then(Value::as_str) == Some(action_id) {
                    found = Some(r.record.clone());
                }
            }
            if !page.has_more || page.next_sequence <= after {
                break;
            }
            after = page.next_sequence;
        }
        Ok(found)
    }

    /// Append one event (best effort: the log is evidence, not a gate).
    pub fn event(&self, ctx: Option<&Context<'_>>, session_id: &str, kind: &str, data: Value) {
        let mut record = json!({"schemaVersion": EVENT_SCHEMA, "sessionId": session_id, "type": kind, "atMs": now_ms()});
        if let (Value::Object(r), Value::Object(d)) = (&mut record, data) {
            for (k, v) in d {
                r.entry(k).or_insert(v);
            }
        }
        let _ = self.facts.append_with(ctx, EVENTS, session_id, &record, Durability::Memory);
    }

    /// One page of a session's events.
    pub fn events(&self, ctx: &Context<'_>, session_id: &str, after: u64, limit: usize) -> Result<Value, ProviderError> {
        let page = self.facts.read(ctx, EVENTS, session_id, after, limit)?;
        let events: Vec<Value> = page
            .records
            .iter()
            .map(|r| {
                let mut v = r.record.clone();
                v["sequence"] = json!(r.sequence);
                v["committedAtMs"] = json!(r.committed_at_ms);
                v
            })
            .collect();
        Ok(json!({"events": events, "count": events.len(), "nextSequence": page.next_sequence, "hasMore": page.has_more, "gap": page.gap,
                  "store": self.facts.store_name()}))
    }
}

/// Whether a record is the settled receipt of exactly this action, as the
/// host's reconcile checks it.
pub fn settles(record: &Value, action_id: &str, runtime_epoch: &str) -> bool {
    record.get("status").and_then(Value::as_str) == Some("settled")
        && record.get("actionId").and_then(Value::as_str) == Some(action_id)
        && record.get("runtimeEpoch").and_then(Value::as_str) == Some(runtime_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_actions_settled_record_settles() {
        let r = json!({"status": "settled", "actionId": "a1", "runtimeEpoch": "E"});
        assert!(settles(&r, "a1", "E"));
        assert!(!settles(&r, "a2", "E"));
        assert!(!settles(&r, "a1", "F"));
        assert!(!settles(&json!({"status": "unresolved", "actionId": "a1", "runtimeEpoch": "E"}), "a1", "E"));
        assert!(!settles(&json!({"status": "pending", "actionId": "a1", "runtimeEpoch": "E"}), "a1", "E"));
    }
}
