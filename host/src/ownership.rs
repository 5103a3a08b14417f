//! Device ownership journals, generic by physical device key (used by every
//! provider whose commands declare a `deviceKey`).
//!
//! Per device (key = sha256 of the device identifier) the ownership directory holds
//! `<key>.sqlite` — an OS-held lock (exclusive SQLite transaction, no expiry, never
//! force-released) — and `<key>.json`, the journal (`aab.device-ownership/v2`). A
//! mutation's pending action is durable in the journal *before* dispatch (temp file,
//! fsync, rename, directory fsync). A known outcome clears it into
//! `lastSettlement`; an unknown outcome leaves the device `unresolved`, which blocks
//! every later mutation on that device — across processes and restarts — until
//! `device-ownership reconcile` finds the original action's durable receipt. A
//! journal that cannot be read is reported (`device_ownership_corrupt`), never
//! reset.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::CommandError;
use crate::runtime::lock::{self, OwnerLock};

pub const JOURNAL_SCHEMA: &str = "aab.device-ownership/v2";
pub const MAX_JOURNAL_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub serial: String,
    /// owned | unresolved | idle
    pub phase: String,
    #[serde(default)]
    pub owner: Option<Value>,
    #[serde(default)]
    pub pending: Option<Value>,
    #[serde(default)]
    pub reservations: Vec<Value>,
    #[serde(default)]
    pub last_settlement: Option<Value>,
    #[serde(default)]
    pub pending_acknowledgements: Vec<Value>,
    /// Fields of newer or older writers, kept so a read-modify-write is lossless.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Journal {
    fn fresh(serial: &str) -> Journal {
        Journal {
            schema_version: 2,
            schema: Some(JOURNAL_SCHEMA.into()),
            serial: serial.into(),
            phase: "idle".into(),
            owner: None,
            pending: None,
            reservations: Vec::new(),
            last_settlement: None,
            pending_acknowledgements: Vec::new(),
            extra: Map::new(),
        }
    }

    pub fn is_unresolved(&self) -> bool {
        self.pending.is_some() || !self.reservations.is_empty() || self.phase == "unresolved"
    }

    /// The pending action's owner stopped before the provider's dispatch mark and
    /// before any outcome was recorded: nothing reached the device, so the record
    /// can be settled as not dispatched (only once the owner's lock is free).
    pub fn pending_never_dispatched(&self) -> bool {
        self.reservations.is_empty()
            && self.phase == "owned"
            && self.pending.as_ref().is_some_and(|p| p.get("dispatchMark").and_then(Value::as_str) == Some(MARK_PENDING) && p.get("unresolved").is_none())
    }

    /// Settle a never-dispatched pending action (see [`Journal::pending_never_dispatched`]).
    fn settle_undispatched(&mut self) {
        let pending = self.pending.take().unwrap_or(Value::Null);
        let pending_id = pending.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        self.last_settlement = Some(settlement(
            &pending,
            &pending_id,
            json!({"source": "dispatch-mark", "dispatched": false, "reason": "the owning runtime stopped before the provider's dispatch mark"}),
        ));
        self.phase = "idle".into();
        self.owner = None;
    }
}

/// The ownership directory.
#[derive(Clone, Debug)]
pub struct Ownership {
    dir: PathBuf,
}

/// A device whose lock this process holds for one mutation.
pub struct ActionGuard {
    _lock: OwnerLock,
    state: std::sync::Arc<std::sync::Mutex<GuardState>>,
    pending_id: String,
}

/// The journal of a held device, shared by the guard and its dispatch marker.
struct GuardState {
    path: PathBuf,
    journal: Journal,
}

/// Records the provider's dispatch mark in the journal (durably, before the first
/// effect), so a runtime killed before it can prove nothing reached the device.
#[derive(Clone)]
pub struct DispatchMarker {
    state: std::sync::Arc<std::sync::Mutex<GuardState>>,
}

/// `pending.dispatchMark` before the provider's mark: the action has not reached
/// the device. Journals without the field (older writers) never claim that.
const MARK_PENDING: &str = "pending";
const MARK_DONE: &str = "marked";

/// A device locked exclusively for reconciliation.
pub struct ReconcileGuard {
    _lock: OwnerLock,
    path: PathBuf,
    pub journal: Journal,
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> CommandError {
    CommandError::new("device_ownership_corrupt", format!("ownership journal {} cannot be trusted: {why}; it is left untouched", path.display()))
        .with_details(json!({"journal": path.display().to_string()}))
}

fn unavailable(path: &Path, why: impl std::fmt::Display) -> CommandError {
    CommandError::new("device_ownership_unavailable", format!("ownership journal {} cannot be written: {why}", path.display()))
        .with_details(json!({"journal": path.display().to_string()}))
}

/// Read a journal: `Ok(None)` when the device has none yet.
pub fn read_journal(path: &Path, serial: &str) -> Result<Option<Journal>, CommandError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(corrupt(path, e)),
    };
    if !meta.file_type().is_file() {
        return Err(corrupt(path, "it is not a regular file"));
    }
    if meta.len() > MAX_JOURNAL_BYTES {
        return Err(corrupt(path, format!("it is larger than {MAX_JOURNAL_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| corrupt(path, e))?;
    let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| corrupt(path, format!("not a journal: {e}")))?;
    match journal.schema_version {
        1 | 2 => {}
        v => return Err(corrupt(path, format!("unsupported schemaVersion {v}"))),
    }
    if journal.serial != serial {
        return Err(corrupt(path, format!("it belongs to device `{}`", journal.serial)));
    }
    if !matches!(journal.phase.as_str(), "owned" | "unresolved" | "idle") {
        return Err(corrupt(path, format!("unknown phase `{}`", journal.phase)));
    }
    if let Some(p) = &journal.pending
        && (!p.is_object() || p.get("id").and_then(Value::as_str).is_none()) {
            return Err(corrupt(path, "pending action without an id"));
        }
    if journal.pending_acknowledgements.len() > 8 {
        return Err(corrupt(path, "more than 8 pending acknowledgements"));
    }
    Ok(Some(journal))
}

/// How much a journal write must survive.
///
/// Only the dispatch mark must survive an operating-system crash: it is the one
/// record whose loss would turn "maybe dispatched" into "never dispatched". A lost
/// pending record (before the mark) loses nothing, because nothing was dispatched;
/// a lost settlement leaves the marked pending record, so the device reads
/// unresolved until `reconcile` — the safe direction. Those writes are still
/// atomic (temp file + rename) and survive a killed process; they skip the
/// fsyncs that would cost an action two more disk flushes.
#[derive(Clone, Copy, PartialEq)]
enum Flush {
    /// fsync the file, rename, fsync the directory.
    Durable,
    /// Atomic rename only.
    Atomic,
}

fn write_journal(path: &Path, journal: &Journal) -> Result<(), CommandError> {
    write_journal_with(path, journal, Flush::Durable)
}

/// Journal write: exclusive temp file (0600), [fsync], rename, [directory fsync].
fn write_journal_with(path: &Path, journal: &Journal, flush: Flush) -> Result<(), CommandError> {
    let mut journal = journal.clone();
    // A v1 journal is upgraded on its next write.
    journal.schema_version = 2;
    journal.schema = Some(JOURNAL_SCHEMA.into());
    let bytes = serde_json::to_vec(&journal).map_err(|e| unavailable(path, e))?;
    if bytes.len() as u64 > MAX_JOURNAL_BYTES {
        return Err(unavailable(path, "the journal would exceed 4 MiB"));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("journal");
    let tmp = dir.join(format!("{name}.{}.tmp", crate::ids::uuid_v4()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(&bytes)?;
        if flush == Flush::Durable {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, path)?;
        if flush == Flush::Durable {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        unavailable(path, e)
    })
}

impl Ownership {
    pub fn new(dir: PathBuf) -> Ownership {
        Ownership { dir }
    }

    fn paths(&self, serial: &str) -> (PathBuf, PathBuf) {
        let key = crate::digest::sha256_hex(serial.as_bytes());
        (self.dir.join(format!("{key}.sqlite")), self.dir.join(format!("{key}.json")))
    }

    fn lock(&self, serial: &str) -> Result<(OwnerLock, PathBuf), CommandError> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir).map_err(|e| unavailable(&self.dir, e))?;
        let (lock_path, journal_path) = self.paths(serial);
        match lock::try_acquire(&lock_path) {
            Ok(Some(l)) => Ok((l, journal_path)),
            Ok(None) => Err(CommandError::new("target_busy", format!("device `{serial}` is being changed by another action or process"))
                .with_details(json!({"serial": serial, "active": 1}))),
            Err(e) => Err(CommandError::new("device_ownership_unavailable", e.message)),
        }
    }

    /// Take the device for one mutation and record the pending action durably.
    pub fn begin(&self, serial: &str, mut pending: Map<String, Value>) -> Result<ActionGuard, CommandError> {
        let (lock, path) = self.lock(serial)?;
        let mut journal = read_journal(&path, serial)?.unwrap_or_else(|| Journal::fresh(serial));
        if journal.pending_never_dispatched() {
            journal.settle_undispatched();
        }
        if journal.is_unresolved() {
            return Err(unresolved_error(serial, &journal));
        }
        let pending_id = crate::ids::uuid_v4();
        pending.insert("id".into(), Value::String(pending_id.clone()));
        pending.insert("preparedAtMs".into(), json!(crate::ids::now_ms()));
        pending.insert("dispatchMark".into(), json!(MARK_PENDING));
        journal.phase = "owned".into();
        journal.owner = Some(json!({"id": crate::ids::uuid_v4(), "pid": std::process::id(), "acquiredAtMs": crate::ids::now_ms()}));
        journal.pending = Some(Value::Object(pending));
        // Before the mark nothing is dispatched: losing this record to an OS crash
        // loses nothing (see `Flush`).
        write_journal_with(&path, &journal, Flush::Atomic)?;
        Ok(ActionGuard { _lock: lock, state: std::sync::Arc::new(std::sync::Mutex::new(GuardState { path, journal })), pending_id })
    }

    pub fn status(&self, serial: &str) -> Result<Value, CommandError> {
        let (lock_path, journal_path) = self.paths(serial);
        let journal = read_journal(&journal_path, serial)?;
        let active = lock_path.exists() && !lock::is_free(&lock_path).unwrap_or(false);
        let phase = journal
            .as_ref()
            .map(|j| match () {
                // The owner died before dispatch: the next action or reconcile settles it.
                _ if !active && j.pending_never_dispatched() => "idle".to_string(),
                _ if j.is_unresolved() && !active => "unresolved".to_string(),
                _ => j.phase.clone(),
            })
            .unwrap_or_else(|| "idle".into());
        Ok(json!({
            "ok": true,
            "command": "device-ownership",
            "serial": serial,
            "active": if active { 1 } else { 0 },
            "maxActive": 1,
            "phase": phase,
            "ownership": journal,
        }))
    }

    /// Take the device exclusively to reconcile it.
    pub fn begin_reconcile(&self, serial: &str) -> Result<ReconcileGuard, CommandError> {
        let (lock, path) = self.lock(serial)?;
        let mut journal = read_journal(&path, serial)?.unwrap_or_else(|| Journal::fresh(serial));
        if journal.pending_never_dispatched() {
            journal.settle_undispatched();
            write_journal(&path, &journal)?;
        }
        Ok(ReconcileGuard { _lock: lock, path, journal })
    }

    /// The retained settlement of one action (journal `lastSettlement`).
    pub fn receipt(&self, serial: &str, runtime_epoch: &str, action_id: &str) -> Result<Value, CommandError> {
        let (_, journal_path) = self.paths(serial);
        let journal = read_journal(&journal_path, serial)?;
        let settlement = journal.as_ref().and_then(|j| j.last_settlement.clone());
        match settlement {
            Some(s) if s.get("actionId").and_then(Value::as_str) == Some(action_id) && s.get("runtimeEpoch").and_then(Value::as_str) == Some(runtime_epoch) => {
                Ok(json!({"ok": true, "command": "device-ownership", "serial": serial, "settlement": s}))
            }
            _ => Err(CommandError::new("device_completion_not_retained", format!("no retained completion for action `{action_id}` of runtime `{runtime_epoch}` on device `{serial}`"))
                .with_details(json!({"serial": serial}))),
        }
    }
}

pub fn unresolved_error(serial: &str, journal: &Journal) -> CommandError {
    CommandError::new(
        "device_ownership_unresolved",
        format!("device `{serial}` has an action whose outcome is unknown; run `device-ownership --operation reconcile --serial {serial}` before changing it again"),
    )
    .with_details(json!({"serial": serial, "active": 0, "ownership": journal}))
}

impl ActionGuard {
    pub fn pending_id(&self) -> &str {
        &self.pending_id
    }

    /// The marker the provider's dispatch mark writes through.
    pub fn dispatch_marker(&self) -> DispatchMarker {
        DispatchMarker { state: self.state.clone() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GuardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome is known: clear the pending action into `lastSettlement`.
    pub fn settle(self, proof: Value) -> Result<(), CommandError> {
        let mut st = self.state();
        let pending = st.journal.pending.take().unwrap_or(Value::Null);
        st.journal.last_settlement = Some(settlement(&pending, &self.pending_id, proof));
        st.journal.phase = "idle".into();
        st.journal.owner = None;
        // Losing this to an OS crash leaves the device unresolved (see `Flush`).
        write_journal_with(&st.path, &st.journal, Flush::Atomic)
    }

    /// The outcome is unknown: keep the pending action and block the device.
    pub fn leave_unresolved(self, reason: Value) -> Result<(), CommandError> {
        let mut st = self.state();
        if let Some(Value::Object(p)) = &mut st.journal.pending {
            p.insert("unresolved".into(), json!({"atMs": crate::ids::now_ms(), "reason": reason}));
        }
        st.journal.phase = "unresolved".into();
        st.journal.owner = None;
        write_journal(&st.path, &st.journal)
    }
}

impl DispatchMarker {
    /// Record the dispatch mark. When the journal cannot be written the pending
    /// record stays `pending`-marked in memory only; the write failure is logged and
    /// the device is treated as dispatched from here on (the safe direction: a later
    /// failure leaves it unresolved rather than idle).
    pub fn mark(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(Value::Object(p)) = &mut st.journal.pending else { return };
        if p.get("dispatchMark").and_then(Value::as_str) != Some(MARK_PENDING) {
            return;
        }
        p.insert("dispatchMark".into(), json!(MARK_DONE));
        p.insert("dispatchMarkedAtMs".into(), json!(crate::ids::now_ms()));
        let (path, journal) = (st.path.clone(), st.journal.clone());
        if let Err(e) = write_journal(&path, &journal) {
            tracing::error!("dispatch mark not persisted in {}: {e}", path.display());
        }
    }
}

fn settlement(pending: &Value, pending_id: &str, proof: Value) -> Value {
    json!({
        "pendingId": pending_id,
        "actionId": pending.get("actionId").cloned().unwrap_or(Value::Null),
        "runtimeEpoch": pending.get("runtimeEpoch").cloned().unwrap_or(Value::Null),
        "command": pending.get("command").cloned().unwrap_or(Value::Null),
        "settledAtMs": crate::ids::now_ms(),
        "proof": proof,
    })
}

impl ReconcileGuard {
    /// Settle the pending action with the provider's durable receipt.
    pub fn settle(mut self, receipt: Value) -> Result<Value, CommandError> {
        let pending = self.journal.pending.take().unwrap_or(Value::Null);
        let pending_id = pending.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        let s = settlement(&pending, &pending_id, json!({"source": "reconcile", "receipt": receipt}));
        self.journal.last_settlement = Some(s.clone());
        self.journal.phase = "idle".into();
        self.journal.owner = None;
        write_journal(&self.path, &self.journal)?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Map<String, Value> {
        let mut p = Map::new();
        p.insert("actionId".into(), json!("a1"));
        p
    }

    /// A guard dropped without an outcome is what a killed owner leaves behind.
    #[test]
    fn an_owner_gone_before_its_mark_leaves_the_device_idle_and_after_it_unresolved() {
        let dir = tempfile::tempdir().unwrap();
        let own = Ownership::new(dir.path().to_path_buf());

        drop(own.begin("s1", pending()).unwrap());
        assert_eq!(own.status("s1").unwrap()["phase"], "idle");
        let again = own.begin("s1", pending()).expect("a never-dispatched action does not block the device");
        let st = again.state.lock().unwrap().journal.last_settlement.clone().unwrap();
        assert_eq!(st["proof"]["source"], "dispatch-mark");
        drop(again);

        let guard = own.begin("s2", pending()).unwrap();
        guard.dispatch_marker().mark();
        drop(guard);
        assert_eq!(own.status("s2").unwrap()["phase"], "unresolved");
        assert_eq!(own.begin("s2", pending()).err().map(|e| e.code), Some("device_ownership_unresolved".to_string()));

        // A journal written by an older runtime (no `dispatchMark`) is never assumed undispatched.
        let guard = own.begin("s3", pending()).unwrap();
        {
            let mut st = guard.state.lock().unwrap();
            if let Some(Value::Object(p)) = &mut st.journal.pending {
                p.remove("dispatchMark");
            }
            let (path, journal) = (st.path.clone(), st.journal.clone());
            write_journal(&path, &journal).unwrap();
        }
        drop(guard);
        assert_eq!(own.status("s3").unwrap()["phase"], "unresolved");
    }
}
