//! Executor sessions: the live table entry of one session (engine handle, lease,
//! page identity, retained snapshots, in-flight calls), lease arithmetic, and the
//! persisted session table in the plugin's data dir (`web-executor-sessions.json`,
//! written atomically: temp file, fsync, rename, directory fsync; read with a size
//! cap and every entry checked, so a damaged or hostile file costs the entries it
//! spoils, never the plugin). The table is what a new runtime recovers WebDriver
//! sessions from, and where closed sessions leave a tombstone so a late call gets
//! `web_executor_session_closed` instead of `not_found`.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::args::EngineKind;
use super::engine::Engine;

pub const TABLE_FILE: &str = "web-executor-sessions.json";
pub const TABLE_SCHEMA: &str = "aab.web-executor-sessions/v1";
/// A table larger than this is not read (it was never written by us).
pub const MAX_TABLE_BYTES: u64 = 1024 * 1024;
/// Entries read from (and written to) the table.
pub const MAX_TABLE_ENTRIES: usize = 512;
/// Tombstones of closed sessions kept.
pub const MAX_TOMBSTONES: usize = 256;
/// Observations kept per session for `act {snapshotId}`.
pub const SNAPSHOTS_KEPT: usize = 4;

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// `close`.
    Closed,
    /// The runtime stopped (the `runtime-stop` hook).
    RuntimeStop,
    /// No call renewed the lease in time.
    Expired,
    /// The browser, the node or the remote session went away.
    Lost,
}

impl EndReason {
    pub fn code(self) -> &'static str {
        match self {
            EndReason::Closed | EndReason::RuntimeStop => "web_executor_session_closed",
            EndReason::Expired => "web_executor_lease_expired",
            EndReason::Lost => "web_executor_session_lost",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Closed => "closed",
            EndReason::RuntimeStop => "runtime-stop",
            EndReason::Expired => "expired",
            EndReason::Lost => "lost",
        }
    }
}

/// One row of the persisted table: an open session (recoverable when WebDriver)
/// or the tombstone of an ended one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub session_id: String,
    pub engine: String,
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub webdriver_session_id: Option<String>,
    #[serde(default)]
    pub browser: Option<String>,
    pub runtime_epoch: String,
    pub lease_ms: u64,
    pub lease_expires_at_ms: u64,
    pub created_at_ms: u64,
    /// Set once the session ended.
    #[serde(default)]
    pub ended: Option<EndReason>,
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
}

fn valid_session_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// WebDriver session ids are opaque but short and printable (UUIDs, hex).
fn valid_remote_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

impl Row {
    /// Whether a row read from disk is one this plugin could have written.
    pub fn is_valid(&self) -> bool {
        let engine = EngineKind::parse(&self.engine);
        valid_session_id(&self.session_id)
            && engine.is_some()
            && self.runtime_epoch.len() <= 1024
            && (super::schema::MIN_LEASE_MS..=super::schema::MAX_LEASE_MS).contains(&self.lease_ms)
            && self.endpoint.as_deref().is_none_or(|e| e.len() <= 2048 && e.starts_with("http://"))
            && self.webdriver_session_id.as_deref().is_none_or(valid_remote_id)
            && self.browser.as_deref().is_none_or(|b| b.len() <= 64)
            // An open WebDriver row must say where and which remote session it is.
            && (self.ended.is_some() || engine != Some(EngineKind::Webdriver) || (self.endpoint.is_some() && self.webdriver_session_id.is_some()))
    }
}

/// What a table file held: the valid rows, and how many were dropped.
#[derive(Debug, Default, PartialEq)]
pub struct Loaded {
    pub rows: Vec<Row>,
    pub skipped: usize,
    /// Why the whole file was ignored, if it was.
    pub problem: Option<String>,
}

/// Parse a table file's bytes. Never fails: what is not a valid row is skipped.
pub fn parse_table(bytes: &[u8]) -> Loaded {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return Loaded { problem: Some(format!("not JSON: {e}")), ..Loaded::default() },
    };
    if value.get("schemaVersion").and_then(Value::as_str) != Some(TABLE_SCHEMA) {
        return Loaded { problem: Some("unknown schemaVersion".into()), ..Loaded::default() };
    }
    let Some(list) = value.get("sessions").and_then(Value::as_array) else {
        return Loaded { problem: Some("no sessions array".into()), ..Loaded::default() };
    };
    let mut out = Loaded::default();
    let mut seen = std::collections::HashSet::new();
    for item in list {
        if out.rows.len() >= MAX_TABLE_ENTRIES {
            out.skipped += 1;
            continue;
        }
        match serde_json::from_value::<Row>(item.clone()) {
            Ok(row) if row.is_valid() && seen.insert(row.session_id.clone()) => out.rows.push(row),
            _ => out.skipped += 1,
        }
    }
    out
}

pub fn table_path(dir: &Path) -> PathBuf {
    dir.join(TABLE_FILE)
}

/// Read the table (absent → empty), bounded by [`MAX_TABLE_BYTES`].
pub fn read_table(dir: &Path) -> Loaded {
    use std::io::Read;
    let path = table_path(dir);
    // No symlink, and a FIFO put where the table belongs must not block the open.
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::default(),
        Err(e) => return Loaded { problem: Some(format!("cannot open {}: {e}", path.display())), ..Loaded::default() },
    };
    if file.metadata().map(|m| !m.is_file()).unwrap_or(true) {
        return Loaded { problem: Some(format!("{} is not a regular file", path.display())), ..Loaded::default() };
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_TABLE_BYTES + 1).read_to_end(&mut bytes) {
        return Loaded { problem: Some(format!("cannot read {}: {e}", path.display())), ..Loaded::default() };
    }
    if bytes.len() as u64 > MAX_TABLE_BYTES {
        return Loaded { problem: Some(format!("{} is larger than {MAX_TABLE_BYTES} bytes", path.display())), ..Loaded::default() };
    }
    parse_table(&bytes)
}

pub fn table_bytes(rows: &[Row]) -> Vec<u8> {
    let rows: Vec<&Row> = rows.iter().take(MAX_TABLE_ENTRIES).collect();
    serde_json::to_vec_pretty(&json!({"schemaVersion": TABLE_SCHEMA, "sessions": rows})).unwrap_or_default()
}

/// Replace the table atomically; `durable` also syncs the file and its directory
/// (structural changes: open, close; lease renewals only rename).
pub fn write_table(dir: &Path, rows: &[Row], durable: bool) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = table_path(dir);
    let tmp = dir.join(format!(".{TABLE_FILE}.{}-{}.tmp", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut f = options.open(&tmp)?;
        f.write_all(&table_bytes(rows))?;
        if durable {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, &path)?;
        if durable {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

// ------------------------------------------------------------------ leases

/// The expiry of a lease renewed at `now_ms`.
pub fn lease_expiry(now_ms: u64, lease_ms: u64) -> u64 {
    now_ms.saturating_add(lease_ms)
}

/// Whether a lease expiring at `expires_at_ms` has run out at `now_ms` (the
/// expiry instant itself counts as expired).
pub fn lease_expired(expires_at_ms: u64, now_ms: u64) -> bool {
    now_ms >= expires_at_ms
}

/// Milliseconds left of a lease (0 once expired).
pub fn lease_left(expires_at_ms: u64, now_ms: u64) -> u64 {
    expires_at_ms.saturating_sub(now_ms)
}

// ------------------------------------------------------------------ live sessions

/// The page identity the session last saw.
#[derive(Clone, Debug, Default)]
pub struct PageInfo {
    pub document_id: Option<String>,
    pub url: Option<String>,
    pub title: Option<String>,
}

impl PageInfo {
    pub fn to_json(&self) -> Value {
        json!({"frameId": super::MAIN_FRAME, "documentId": self.document_id, "url": self.url, "title": self.title})
    }

    /// From a renderer `document` turn.
    pub fn from_document(v: &Value) -> PageInfo {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        PageInfo { document_id: s("documentId"), url: s("url"), title: s("title") }
    }
}

/// One retained observation.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub snapshot_id: String,
    pub document_id: String,
    pub url: String,
    /// The renderer's `dom` (controls as listed to the caller).
    pub dom: Value,
}

#[derive(Debug)]
pub struct LiveState {
    pub runtime_epoch: String,
    pub lease_ms: u64,
    pub lease_expires_at_ms: u64,
    /// Set when the session is being closed (by `close`, expiry or runtime stop).
    pub ending: Option<EndReason>,
    pub actions: u64,
    pub page: PageInfo,
    pub snapshots: VecDeque<Snapshot>,
    pub last_renewal_event_ms: u64,
    /// The last viewport the page reported.
    pub viewport: Option<Value>,
}

pub struct Session {
    pub session_id: String,
    pub engine: Engine,
    pub browser: String,
    pub endpoint: Option<String>,
    pub webdriver_session_id: Option<String>,
    pub created_at_ms: u64,
    /// Recovered from the persisted table by a later runtime.
    pub recovered_from: Option<String>,
    pub state: Mutex<LiveState>,
    /// Calls running on this session (the reaper leaves busy sessions alone).
    pub busy: AtomicUsize,
    /// Page scripts run in this session (false for e.g. an Appium driver:
    /// observation is then the page source, actions WebDriver's element commands).
    pub scripting: std::sync::atomic::AtomicBool,
    snapshot_seq: AtomicU64,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub fn new(session_id: String, engine: Engine, browser: String, endpoint: Option<String>, webdriver_session_id: Option<String>, runtime_epoch: String, lease_ms: u64, now_ms: u64, recovered_from: Option<String>, created_at_ms: u64) -> Session {
        Session {
            session_id,
            engine,
            browser,
            endpoint,
            webdriver_session_id,
            created_at_ms,
            recovered_from,
            state: Mutex::new(LiveState {
                runtime_epoch,
                lease_ms,
                lease_expires_at_ms: lease_expiry(now_ms, lease_ms),
                ending: None,
                actions: 0,
                page: PageInfo::default(),
                snapshots: VecDeque::new(),
                last_renewal_event_ms: now_ms,
                viewport: None,
            }),
            busy: AtomicUsize::new(0),
            scripting: std::sync::atomic::AtomicBool::new(true),
            snapshot_seq: AtomicU64::new(0),
        }
    }

    pub fn row(&self) -> Row {
        let st = lock(&self.state);
        Row {
            session_id: self.session_id.clone(),
            engine: self.engine.kind().as_str().to_string(),
            endpoint: self.endpoint.clone(),
            webdriver_session_id: self.webdriver_session_id.clone(),
            browser: Some(self.browser.clone()),
            runtime_epoch: st.runtime_epoch.clone(),
            lease_ms: st.lease_ms,
            lease_expires_at_ms: st.lease_expires_at_ms,
            created_at_ms: self.created_at_ms,
            ended: None,
            ended_at_ms: None,
        }
    }

    /// Keep an observation; returns its snapshotId.
    pub fn keep_snapshot(&self, document_id: &str, url: &str, dom: Value) -> String {
        let n = self.snapshot_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = format!("s{n}-{}", &crate::ids::hex32()[..8]);
        let mut st = lock(&self.state);
        st.snapshots.push_back(Snapshot { snapshot_id: snapshot_id.clone(), document_id: document_id.to_string(), url: url.to_string(), dom });
        while st.snapshots.len() > SNAPSHOTS_KEPT {
            st.snapshots.pop_front();
        }
        snapshot_id
    }

    pub fn snapshot(&self, snapshot_id: &str) -> Option<Snapshot> {
        lock(&self.state).snapshots.iter().find(|s| s.snapshot_id == snapshot_id).cloned()
    }

    pub fn status_json(&self, now_ms: u64) -> Value {
        let st = lock(&self.state);
        json!({
            "sessionId": self.session_id,
            "engine": self.engine.kind().as_str(),
            "browser": self.browser,
            "endpoint": self.endpoint,
            "webdriverSessionId": self.webdriver_session_id,
            "runtimeEpoch": st.runtime_epoch,
            "createdAtMs": self.created_at_ms,
            "lease": {"leaseMs": st.lease_ms, "expiresAtMs": st.lease_expires_at_ms, "remainingMs": lease_left(st.lease_expires_at_ms, now_ms)},
            "page": st.page.to_json(),
            "viewport": st.viewport,
            "actions": st.actions,
            "recovered": self.recovered_from.is_some(),
            "recoveredFromRuntimeEpoch": self.recovered_from,
            "ending": st.ending.map(EndReason::as_str),
            "busy": self.busy.load(Ordering::SeqCst) > 0,
            "scripting": self.scripting.load(Ordering::SeqCst),
            "engineDetails": self.engine.describe(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_symlink_in_place_of_the_table_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = table_path(dir.path());
        assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
        let loaded = read_table(dir.path());
        assert!(loaded.problem.as_deref().is_some_and(|p| p.contains("not a regular file")), "{:?}", loaded.problem);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(read_table(dir.path()).problem.is_some(), "a symlinked table is not followed");
    }

    fn row(id: &str) -> Row {
        Row {
            session_id: id.into(),
            engine: "webdriver".into(),
            endpoint: Some("http://127.0.0.1:4444".into()),
            webdriver_session_id: Some("0123abcd".into()),
            browser: Some("chromium".into()),
            runtime_epoch: "epoch-1".into(),
            lease_ms: 300_000,
            lease_expires_at_ms: 1_000_300_000,
            created_at_ms: 1_000_000_000,
            ended: None,
            ended_at_ms: None,
        }
    }

    #[test]
    fn lease_math_counts_the_expiry_instant_as_expired() {
        assert_eq!(lease_expiry(1_000, 300_000), 301_000);
        assert!(!lease_expired(301_000, 300_999));
        assert!(lease_expired(301_000, 301_000));
        assert_eq!(lease_left(301_000, 300_000), 1_000);
        assert_eq!(lease_left(301_000, 400_000), 0);
        // No overflow at the end of time.
        assert_eq!(lease_expiry(u64::MAX - 5, 300_000), u64::MAX);
    }

    #[test]
    fn the_table_round_trips_and_survives_hostile_files() {
        let rows = vec![row("a"), Row { ended: Some(EndReason::Closed), ended_at_ms: Some(5), ..row("b") }];
        let loaded = parse_table(&table_bytes(&rows));
        assert_eq!(loaded, Loaded { rows: rows.clone(), skipped: 0, problem: None });

        for bad in [&b""[..], b"null", b"[]", b"{\"schemaVersion\":\"other\",\"sessions\":[]}", b"{\"schemaVersion\":\"aab.web-executor-sessions/v1\"}", b"\xff\xfe"] {
            let l = parse_table(bad);
            assert!(l.rows.is_empty() && l.problem.is_some(), "{:?}", String::from_utf8_lossy(bad));
        }
        // Bad rows are skipped one by one; good rows survive.
        let hostile = json!({"schemaVersion": TABLE_SCHEMA, "sessions": [
            row("good"),
            {"sessionId": "../../etc/passwd", "engine": "webdriver", "runtimeEpoch": "e", "leaseMs": 300000, "leaseExpiresAtMs": 1, "createdAtMs": 1},
            {"sessionId": "x", "engine": "selenium", "runtimeEpoch": "e", "leaseMs": 300000, "leaseExpiresAtMs": 1, "createdAtMs": 1},
            Row { endpoint: Some("https://evil".into()), ..row("tls") },
            Row { endpoint: None, ..row("noendpoint") },
            Row { webdriver_session_id: Some("id with spaces".into()), ..row("space") },
            Row { lease_ms: 0, ..row("zero") },
            Row { session_id: "x".repeat(65), ..row("long") },
            row("good"),
            {"sessionId": 7},
            "a string",
            {"sessionId": "deep", "engine": "cdp", "runtimeEpoch": {"nested": [[[[]]]]}, "leaseMs": 300000, "leaseExpiresAtMs": 1, "createdAtMs": 1},
            {"sessionId": "neg", "engine": "cdp", "runtimeEpoch": "e", "leaseMs": -5, "leaseExpiresAtMs": 1, "createdAtMs": 1},
            {"sessionId": "cdp-ok", "engine": "cdp", "runtimeEpoch": "e", "leaseMs": 300000, "leaseExpiresAtMs": 1, "createdAtMs": 1, "unknownField": true}
        ]});
        let l = parse_table(hostile.to_string().as_bytes());
        let ids: Vec<&str> = l.rows.iter().map(|r| r.session_id.as_str()).collect();
        assert_eq!(ids, vec!["good", "cdp-ok"], "the duplicate `good` and every malformed row are dropped");
        assert_eq!(l.skipped, 12);

        // At most MAX_TABLE_ENTRIES rows are taken.
        let many: Vec<Row> = (0..MAX_TABLE_ENTRIES + 10).map(|i| row(&format!("s{i}"))).collect();
        let doc = json!({"schemaVersion": TABLE_SCHEMA, "sessions": many});
        let l = parse_table(doc.to_string().as_bytes());
        assert_eq!((l.rows.len(), l.skipped), (MAX_TABLE_ENTRIES, 10));
    }

    #[test]
    fn table_files_are_written_atomically_and_read_with_a_cap() {
        let dir = std::env::temp_dir().join(format!("aab-wx-table-{}-{}", std::process::id(), crate::ids::hex32()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_table(&dir), Loaded::default(), "absent = empty");
        write_table(&dir, &[row("a")], true).unwrap();
        write_table(&dir, &[row("a"), row("b")], false).unwrap();
        assert_eq!(read_table(&dir).rows.len(), 2);
        let leftovers: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".tmp")).collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // An oversized file is refused without reading it whole.
        std::fs::write(table_path(&dir), vec![b' '; (MAX_TABLE_BYTES + 1) as usize]).unwrap();
        let l = read_table(&dir);
        assert!(l.rows.is_empty() && l.problem.as_deref().unwrap_or("").contains("larger"), "{l:?}");
        // A directory where the file should be.
        std::fs::remove_file(table_path(&dir)).unwrap();
        std::fs::create_dir(table_path(&dir)).unwrap();
        assert!(read_table(&dir).problem.is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
