//! The host's side of the FactStore: opening it for the runtime, the plugin host
//! services `facts.append` / `facts.read`, ordinary command history, response
//! snapshots and the `response` / `evidence` built-ins' store access.
//!
//! A store that cannot be opened is an error that every fact-dependent reply
//! reports (`control.history.status:"unavailable"` with the code; `evidence` and
//! `response` commands fail with it) — never an empty history.

use std::path::Path;
use std::sync::Arc;

use aab_facts::{Cursor, Durability, FactError, FactStore, Namespace, Profile, Stream};
use serde_json::{Value, json};

use crate::error::CommandError;

/// Whether history is switched off by the environment.
pub fn cache_disabled() -> bool {
    std::env::var("AI_APP_BRIDGE_FACT_CACHE").is_ok_and(|v| v.eq_ignore_ascii_case("off"))
}

pub fn to_command_error(e: &FactError) -> CommandError {
    let mut err = CommandError::new(e.code, e.message.clone());
    if let Some(d) = &e.details {
        if let Some(f) = d.get("field").and_then(Value::as_str) {
            err = err.with_field(f);
        }
        err = err.with_details(d.clone());
    }
    err
}

/// The runtime's FactStore, or why there is none. Cloning shares one handle.
///
/// A store that failed to open (a foreign `writer.lock` holder, a full disk,
/// read-only `-wal`/`-shm` files) is tried again — at most once per
/// [`REOPEN_INTERVAL`] and only when something needs it — so the runtime recovers
/// once the fault clears instead of running without a store for good.
#[derive(Clone)]
pub struct Facts {
    inner: Arc<FactsInner>,
}

struct FactsInner {
    dir: std::path::PathBuf,
    profile: String,
    state: std::sync::Mutex<State>,
}

#[derive(Clone)]
enum State {
    Open(Arc<FactStore>),
    Disabled,
    Failed { error: FactError, at: std::time::Instant },
}

/// Shortest time between two attempts to reopen a failed store.
pub const REOPEN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

fn try_open(dir: &Path, profile: &str) -> State {
    let profile = match Profile::parse(profile) {
        Ok(p) => p,
        Err(e) => return State::Failed { error: e, at: std::time::Instant::now() },
    };
    match FactStore::open(dir, profile) {
        Ok(store) => State::Open(Arc::new(store)),
        Err(e) => {
            tracing::error!("FactStore {} unavailable: {} {}", dir.display(), e.code, e.message);
            State::Failed { error: e, at: std::time::Instant::now() }
        }
    }
}

impl Facts {
    pub fn open(dir: &Path, profile: &str) -> Facts {
        let state = if cache_disabled() { State::Disabled } else { try_open(dir, profile) };
        Facts { inner: Arc::new(FactsInner { dir: dir.to_path_buf(), profile: profile.to_string(), state: std::sync::Mutex::new(state) }) }
    }

    /// The open store; a failed one is retried when the last attempt is old enough.
    pub fn store(&self) -> Result<Arc<FactStore>, CommandError> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        if let State::Failed { at, .. } = &*state
            && at.elapsed() >= REOPEN_INTERVAL
        {
            *state = try_open(&self.inner.dir, &self.inner.profile);
            if matches!(&*state, State::Open(_)) {
                tracing::info!("FactStore {} reopened", self.inner.dir.display());
            }
        }
        match &*state {
            State::Open(s) => Ok(s.clone()),
            State::Disabled => Err(CommandError::new("fact_cache_disabled", "the FactStore is disabled (AI_APP_BRIDGE_FACT_CACHE=off)")),
            State::Failed { error, .. } => Err(to_command_error(error)),
        }
    }

    /// `control.history` for one ordinary command (blocking: Sync durability).
    pub fn record_history(&self, target_key: &str, action_id: &str, execution: &Value) -> Value {
        let _ = self.store();
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match state {
            State::Disabled => aab_facts::history::HistoryRecorder::disabled(action_id),
            State::Failed { error, .. } => aab_facts::history::HistoryRecorder::unavailable(action_id, &error),
            State::Open(store) => aab_facts::history::HistoryRecorder::new().record(&store, target_key, action_id, execution, &[]),
        }
    }

    /// Persist a response snapshot; returns the ref JSON.
    pub fn save_snapshot(&self, response_id: &str, snapshot: &Value) -> Result<Value, CommandError> {
        let store = self.store()?;
        aab_facts::response::save_snapshot(&store, response_id, snapshot, Durability::Sync).map(|r| r.to_json()).map_err(|e| to_command_error(&e))
    }

    /// Host services for plugins: `facts.append` / `facts.read`. Provider streams
    /// live in the generic `capture` partition under `<stream>/<key>`, so the host
    /// never needs to know a provider's stream names.
    pub fn service(&self, method: &str, params: &Value) -> Result<Value, CommandError> {
        let store = self.store()?;
        let stream_name = params.get("stream").and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= 128);
        let Some(stream_name) = stream_name else {
            return Err(CommandError::invalid("stream", "`stream` must be a non-empty string of at most 128 characters"));
        };
        let key = params.get("key").and_then(Value::as_str).unwrap_or("");
        let full_key = format!("{stream_name}/{key}");
        match method {
            "facts.append" => {
                let record = params.get("record").filter(|r| r.is_object()).ok_or_else(|| CommandError::invalid("record", "`record` must be an object"))?;
                let durability = match params.get("durability").and_then(Value::as_str) {
                    Some("sync") => Durability::Sync,
                    _ => Durability::Memory,
                };
                let r = store.append(Stream::Capture, Some(&full_key), record, durability).map_err(|e| to_command_error(&e))?;
                Ok(json!({"sequence": r.sequence, "receiptId": r.receipt_id, "committedAtMs": r.committed_at_ms}))
            }
            "facts.read" => {
                let after = params.get("afterSequence").and_then(Value::as_u64).unwrap_or(0);
                let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(100).clamp(1, 1000) as usize;
                let page = store.read_key(Stream::Capture, &full_key, &Cursor::After(after), limit).map_err(|e| to_command_error(&e))?;
                let records: Vec<Value> = page
                    .records
                    .iter()
                    .map(|r| json!({"sequence": r.sequence, "key": key, "record": r.record, "committedAtMs": r.committed_at_ms}))
                    .collect();
                Ok(json!({
                    "records": records,
                    "nextSequence": page.next_sequence,
                    "hasMore": page.has_more,
                    "gap": page.gap.map(|g| json!({"from": g.from, "to": g.to})),
                    "expired": page.expired,
                }))
            }
            other => Err(CommandError::new("unsupported_host_service", format!("the host offers no service `{other}`"))),
        }
    }

    /// `evidence --operation export`.
    pub fn export(&self, namespace: &str, operation_id: &str, output_dir: &Path, include_payloads: bool) -> Result<Value, CommandError> {
        let store = self.store()?;
        let ns = Namespace::parse(namespace).map_err(|e| to_command_error(&e).with_field("namespace"))?;
        let report = aab_facts::archive::export(&store, ns, operation_id, output_dir, include_payloads).map_err(|e| to_command_error(&e))?;
        let mut v = report.to_json();
        if let Value::Object(m) = &mut v {
            m.insert("ok".into(), json!(true));
            m.insert("command".into(), json!("evidence"));
            m.insert("operation".into(), json!("export"));
        }
        Ok(v)
    }

    /// `response --operation read`: the stored snapshot behind an unchanged ref.
    pub fn read_snapshot(&self, reference: &Value) -> Result<aab_facts::response::SavedResponse, CommandError> {
        let store = self.store()?;
        aab_facts::response::read_snapshot(&store, reference).map_err(|e| to_command_error(&e))
    }
}

/// `evidence --operation render`: offline like verify; writes one HTML report.
pub fn render_archive(archive_dir: &Path, manifest_sha256: Option<&str>, output_file: &Path) -> Result<Value, CommandError> {
    let report = aab_facts::report::render(archive_dir, manifest_sha256, output_file).map_err(|e| to_command_error(&e))?;
    let mut v = report.to_json();
    if let Value::Object(m) = &mut v {
        m.insert("command".into(), json!("evidence"));
        m.insert("operation".into(), json!("render"));
    }
    Ok(v)
}

/// `evidence --operation verify`: offline, no runtime and no store.
pub fn verify_archive(archive_dir: &Path, manifest_sha256: &str) -> Result<Value, CommandError> {
    let report = aab_facts::archive::verify(archive_dir, manifest_sha256).map_err(|e| to_command_error(&e))?;
    let mut v = report.to_json();
    if let Value::Object(m) = &mut v {
        m.insert("ok".into(), json!(true));
        m.insert("command".into(), json!("evidence"));
        m.insert("operation".into(), json!("verify"));
    }
    Ok(v)
}
