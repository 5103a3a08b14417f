//! The managed execution table (`aab.web-execution/v1`): one record per action sent
//! to a page. A record is written before the action is dispatched, moves to
//! `dispatched` when the frame is handed to the socket, and becomes `settled` only
//! when the page's `completion` has been persisted (then the page gets
//! `completionAck stored:true`). A call that ends without a completion (lost
//! socket, deadline) leaves the record `unresolved`; a completion arriving later —
//! e.g. resent by the page after reconnecting — settles it, and
//! `web-execution reconcile` reports that.
//!
//! Persistence: a JSON file in the plugin's private `dataDir` (temp file, fsync,
//! rename) when the host provides one, otherwise memory — and every reply says
//! which (`persistence`).

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use aab_plugin_api::ProviderError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::ids::now_ms;
use crate::wire::{EXECUTION_SCHEMA, MAX_COMPLETION_BYTES};

const TABLE_SCHEMA: &str = "aab.web-execution-table/v1";
const TABLE_FILE: &str = "web-executions.json";
/// Settled/rejected records kept for `web-execution result`; unresolved ones are
/// never dropped.
const KEEP_FINISHED: usize = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Recorded; not yet handed to the socket.
    Pending,
    /// Handed to the page's socket; waiting for its completion.
    Dispatched,
    /// Terminal result persisted.
    Settled,
    /// Refused by the page before any effect (`response`, dispatched:false).
    Rejected,
    /// The issuing call ended without a terminal result.
    Unresolved,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    pub schema_version: String,
    pub action_id: String,
    /// The host runtime that issued the action id.
    pub host_runtime_epoch: String,
    pub session_id: String,
    /// The page document the action was sent to.
    pub runtime_epoch: String,
    pub target_id: String,
    pub connection_id: String,
    pub command: String,
    pub page_command: String,
    pub state: State,
    pub created_at_ms: u64,
    #[serde(default)]
    pub dispatched_at_ms: Option<u64>,
    #[serde(default)]
    pub settled_at_ms: Option<u64>,
    #[serde(default)]
    pub unresolved_reason: Option<String>,
    #[serde(default)]
    pub cancel_requested: bool,
    /// The page's terminal result (from `completion`).
    #[serde(default)]
    pub completion: Option<Value>,
    /// The page's non-dispatch refusal (from `response`).
    #[serde(default)]
    pub rejection: Option<Value>,
    #[serde(default)]
    pub completion_connection_id: Option<String>,
    /// Sequence of the mirrored record in the host FactStore, once appended.
    #[serde(default)]
    pub fact_sequence: Option<u64>,
}

impl ActionRecord {
    pub fn new(action_id: &str, host_runtime_epoch: &str, session_id: &str, runtime_epoch: &str, connection_id: &str, command: &str, page_command: &str) -> Self {
        ActionRecord {
            schema_version: EXECUTION_SCHEMA.into(),
            action_id: action_id.into(),
            host_runtime_epoch: host_runtime_epoch.into(),
            session_id: session_id.into(),
            runtime_epoch: runtime_epoch.into(),
            target_id: crate::wire::TARGET_ID.into(),
            connection_id: connection_id.into(),
            command: command.into(),
            page_command: page_command.into(),
            state: State::Pending,
            created_at_ms: now_ms(),
            dispatched_at_ms: None,
            settled_at_ms: None,
            unresolved_reason: None,
            cancel_requested: false,
            completion: None,
            rejection: None,
            completion_connection_id: None,
            fact_sequence: None,
        }
    }

    pub fn in_flight(&self) -> bool {
        matches!(self.state, State::Pending | State::Dispatched)
    }

    pub fn open(&self) -> bool {
        matches!(self.state, State::Pending | State::Dispatched | State::Unresolved)
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
struct Inner {
    records: VecDeque<ActionRecord>,
    waiters: HashMap<String, oneshot::Sender<Value>>,
    file: Option<PathBuf>,
    configured: bool,
    load_note: Option<String>,
    /// Settled action ids still to be mirrored into the host FactStore.
    mirror: VecDeque<String>,
}

#[derive(Default)]
pub struct ExecTable {
    inner: Mutex<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn find(&mut self, action_id: &str) -> Option<&mut ActionRecord> {
        self.records.iter_mut().find(|r| r.action_id == action_id)
    }

    fn trim(&mut self) {
        let finished = self.records.iter().filter(|r| !r.open()).count();
        let mut excess = finished.saturating_sub(KEEP_FINISHED);
        self.records.retain(|r| {
            if excess > 0 && !r.open() {
                excess -= 1;
                return false;
            }
            true
        });
    }

    fn persist(&mut self) -> Result<(), String> {
        self.trim();
        let Some(path) = self.file.clone() else { return Ok(()) };
        let body = json!({"schemaVersion": TABLE_SCHEMA, "records": self.records});
        write_atomically(&path, body.to_string().as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// temp file + fsync + rename + directory fsync: the table is either the old or the
/// new version after a crash, never a torn one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("table")));
    {
        let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&tmp)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = f.set_permissions(std::fs::Permissions::from_mode(0o600));
        }
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

impl ExecTable {
    /// Attach the table to `dataDir` (once). Records left in flight by an earlier
    /// process can no longer be awaited: they become `unresolved`.
    pub fn configure(&self, data_dir: Option<&Path>) {
        let mut inner = lock(&self.inner);
        if inner.configured {
            return;
        }
        inner.configured = true;
        let Some(dir) = data_dir else {
            inner.load_note = Some("the host provides no dataDir; the table lives in memory and does not survive a runtime restart".into());
            return;
        };
        let path = dir.join(TABLE_FILE);
        if let Ok(text) = std::fs::read_to_string(&path) {
            match serde_json::from_str::<Value>(&text).ok().and_then(|v| serde_json::from_value::<Vec<ActionRecord>>(v.get("records")?.clone()).ok()) {
                Some(records) => {
                    for mut r in records {
                        if r.in_flight() {
                            r.state = State::Unresolved;
                            r.unresolved_reason = Some("provider_restarted".into());
                        }
                        inner.records.push_back(r);
                    }
                }
                None => inner.load_note = Some(format!("{} was unreadable and was replaced", path.display())),
            }
        }
        inner.file = Some(path);
    }

    pub fn persistence(&self) -> &'static str {
        if lock(&self.inner).file.is_some() { "file" } else { "memory" }
    }

    pub fn status(&self) -> Value {
        let inner = lock(&self.inner);
        let count = |s: State| inner.records.iter().filter(|r| r.state == s).count();
        json!({
            "persistence": if inner.file.is_some() { "file" } else { "memory" },
            "file": inner.file.as_ref().map(|p| p.display().to_string()),
            "note": inner.load_note,
            "inFlight": count(State::Pending) + count(State::Dispatched),
            "unresolved": count(State::Unresolved),
            "settled": count(State::Settled),
            "rejected": count(State::Rejected),
        })
    }

    /// Record an action before dispatch. Refused while an earlier action on the same
    /// page document is still open: its outcome is unknown and a second action could
    /// not be told apart from it.
    pub fn begin(&self, record: ActionRecord) -> Result<oneshot::Receiver<Value>, ProviderError> {
        let mut inner = lock(&self.inner);
        if let Some(busy) = inner.records.iter().find(|r| r.in_flight() && r.session_id == record.session_id && r.runtime_epoch == record.runtime_epoch) {
            return Err(ProviderError::new("web_target_busy", format!("action {} is still running on this page", busy.action_id))
                .with_details(json!({"actionId": busy.action_id, "state": busy.state, "command": busy.command}))
                .not_dispatched());
        }
        if let Some(open) = inner.records.iter().find(|r| r.open() && r.session_id == record.session_id && r.runtime_epoch == record.runtime_epoch) {
            return Err(ProviderError::new(
                "web_execution_unresolved",
                format!(
                    "action {} on this page is still {}; settle it first (`web-execution --operation reconcile`) or wait for it",
                    open.action_id,
                    serde_json::to_value(open.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
                ),
            )
            .with_details(json!({"actionId": open.action_id, "state": open.state, "command": open.command}))
            .not_dispatched());
        }
        let action_id = record.action_id.clone();
        inner.records.push_back(record);
        if let Err(e) = inner.persist() {
            inner.records.retain(|r| r.action_id != action_id);
            return Err(ProviderError::new("web_execution_store_failed", format!("the pending action could not be recorded: {e}")).not_dispatched());
        }
        let (tx, rx) = oneshot::channel();
        inner.waiters.insert(action_id, tx);
        Ok(rx)
    }

    /// The frame was handed to the socket.
    pub fn sent(&self, action_id: &str) {
        let mut inner = lock(&self.inner);
        if let Some(r) = inner.find(action_id)
            && r.state == State::Pending
        {
            r.state = State::Dispatched;
            r.dispatched_at_ms = Some(now_ms());
        }
        let _ = inner.persist();
    }

    /// The page refused before any effect; or the frame never left the provider.
    pub fn rejected(&self, action_id: &str, why: Value) {
        let mut inner = lock(&self.inner);
        inner.waiters.remove(action_id);
        if let Some(r) = inner.find(action_id)
            && r.in_flight()
        {
            r.state = State::Rejected;
            r.rejection = Some(why);
            r.settled_at_ms = Some(now_ms());
        }
        let _ = inner.persist();
    }

    /// A non-dispatch refusal that arrived after its call gave up: settles an open
    /// record of the same session as rejected (the page states nothing happened).
    pub fn rejected_late(&self, session_id: &str, action_id: &str, why: Value) {
        let mut inner = lock(&self.inner);
        if let Some(r) = inner.find(action_id)
            && r.session_id == session_id
            && r.open()
        {
            r.state = State::Rejected;
            r.rejection = Some(why);
            r.settled_at_ms = Some(now_ms());
            let _ = inner.persist();
        }
    }

    /// The issuing call ends without a terminal result.
    pub fn abandon(&self, action_id: &str, reason: &str) -> Option<ActionRecord> {
        let mut inner = lock(&self.inner);
        inner.waiters.remove(action_id);
        let r = inner.find(action_id)?;
        if r.in_flight() {
            r.state = State::Unresolved;
            r.unresolved_reason = Some(reason.to_string());
        }
        let copy = r.clone();
        let _ = inner.persist();
        Some(copy)
    }

    pub fn note_cancel(&self, action_id: &str) {
        let mut inner = lock(&self.inner);
        if let Some(r) = inner.find(action_id) {
            r.cancel_requested = true;
        }
        let _ = inner.persist();
    }

    /// Persist a page `completion` result. Ok = acknowledge `stored:true`; Err =
    /// `(code, message)` for a `stored:false` acknowledgement.
    pub fn complete(&self, session_id: &str, connection_id: &str, result: &Value, host_runtime_epoch: &str) -> Result<String, (String, String)> {
        let invalid = |m: &str| Err(("invalid_web_action_result".to_string(), m.to_string()));
        if !result.is_object() {
            return invalid("`result` must be an object");
        }
        if serde_json::to_vec(result).map(|b| b.len()).unwrap_or(usize::MAX) > MAX_COMPLETION_BYTES {
            return invalid("the terminal result exceeds 64 KiB");
        }
        let Some(action_id) = result.get("actionId").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 256) else {
            return invalid("`result.actionId` must be a non-empty string");
        };
        if !result.get("ok").is_some_and(Value::is_boolean) || result.get("settled") != Some(&Value::Bool(true)) {
            return invalid("`result` needs a boolean `ok` and `settled: true`");
        }
        let mut inner = lock(&self.inner);
        let now = now_ms();
        match inner.find(action_id) {
            Some(r) if r.session_id != session_id => {
                return Err(("web_execution_target_mismatch".into(), format!("action {action_id} belongs to another session")));
            }
            Some(r) if r.state == State::Settled => {
                // A resend of a completion already stored: acknowledge again.
                return Ok(action_id.to_string());
            }
            Some(r) => {
                r.state = State::Settled;
                r.completion = Some(result.clone());
                r.completion_connection_id = Some(connection_id.to_string());
                r.settled_at_ms = Some(now);
            }
            None => {
                // A completion for an action this table does not know (issued by an
                // earlier runtime whose table was not persisted): keep it so
                // `web-execution result` can show it rather than losing the outcome.
                let epoch = result.get("runtimeEpoch").and_then(Value::as_str).unwrap_or_default();
                let mut r = ActionRecord::new(action_id, host_runtime_epoch, session_id, epoch, connection_id, "unknown", "unknown");
                r.state = State::Settled;
                r.unresolved_reason = Some("unknown_action".into());
                r.completion = Some(result.clone());
                r.completion_connection_id = Some(connection_id.to_string());
                r.settled_at_ms = Some(now);
                inner.records.push_back(r);
            }
        }
        if let Err(e) = inner.persist() {
            if let Some(r) = inner.find(action_id) {
                r.state = State::Unresolved;
                r.completion = None;
            }
            return Err(("web_execution_store_failed".into(), e));
        }
        inner.mirror.push_back(action_id.to_string());
        if let Some(waiter) = inner.waiters.remove(action_id) {
            let _ = waiter.send(result.clone());
        }
        Ok(action_id.to_string())
    }

    pub fn get(&self, action_id: &str) -> Option<ActionRecord> {
        lock(&self.inner).find(action_id).cloned()
    }

    pub fn list(&self, session_id: &str) -> Vec<ActionRecord> {
        lock(&self.inner).records.iter().filter(|r| r.session_id == session_id).cloned().collect()
    }

    /// Settled records not yet mirrored into the host FactStore.
    pub fn take_mirror(&self) -> Vec<ActionRecord> {
        let mut inner = lock(&self.inner);
        let ids: Vec<String> = inner.mirror.drain(..).collect();
        ids.iter().filter_map(|id| inner.find(id).cloned()).collect()
    }

    pub fn requeue_mirror(&self, action_id: &str) {
        lock(&self.inner).mirror.push_back(action_id.to_string());
    }

    pub fn set_fact_sequence(&self, action_id: &str, sequence: u64) {
        let mut inner = lock(&self.inner);
        if let Some(r) = inner.find(action_id) {
            r.fact_sequence = Some(sequence);
        }
        let _ = inner.persist();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> ActionRecord {
        ActionRecord::new(id, "host", "s1", "e1", "c1", "web-click", "click")
    }

    fn done(id: &str) -> Value {
        json!({"ok": true, "actionId": id, "settled": true, "dispatched": true, "ambiguous": false})
    }

    #[test]
    fn lifecycle_and_blocking() {
        let t = ExecTable::default();
        t.configure(None);
        let mut rx = t.begin(record("a1")).unwrap();
        t.sent("a1");
        assert_eq!(t.begin(record("a2")).unwrap_err().error, "web_target_busy");
        t.complete("s1", "c1", &done("a1"), "host").unwrap();
        assert_eq!(rx.try_recv().unwrap()["actionId"], json!("a1"));
        assert_eq!(t.get("a1").unwrap().state, State::Settled);
        // a resend is acknowledged again
        t.complete("s1", "c2", &done("a1"), "host").unwrap();
        t.begin(record("a2")).unwrap();
        t.abandon("a2", "web_connection_lost");
        assert_eq!(t.get("a2").unwrap().state, State::Unresolved);
        assert_eq!(t.begin(record("a3")).unwrap_err().error, "web_execution_unresolved");
        // a late completion settles an unresolved action
        t.complete("s1", "c3", &done("a2"), "host").unwrap();
        assert_eq!(t.get("a2").unwrap().state, State::Settled);
        assert_eq!(t.complete("other", "c", &done("a2"), "host").unwrap_err().0, "web_execution_target_mismatch");
        assert_eq!(t.complete("s1", "c", &json!({"actionId": "x"}), "host").unwrap_err().0, "invalid_web_action_result");
    }

    #[test]
    fn file_persistence_survives_and_marks_in_flight_unresolved() {
        let dir = std::env::temp_dir().join(format!("aab-web-exec-{}", crate::ids::hex32()));
        std::fs::create_dir_all(&dir).unwrap();
        {
            let t = ExecTable::default();
            t.configure(Some(&dir));
            assert_eq!(t.persistence(), "file");
            let _rx = t.begin(record("a1")).unwrap();
            t.sent("a1");
        }
        let t = ExecTable::default();
        t.configure(Some(&dir));
        let r = t.get("a1").unwrap();
        assert_eq!(r.state, State::Unresolved);
        assert_eq!(r.unresolved_reason.as_deref(), Some("provider_restarted"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
