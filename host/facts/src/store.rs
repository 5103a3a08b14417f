//! The FactStore: one SQLite database (`facts.sqlite`, WAL) per directory, one
//! writer per directory (an OS-held lock on `writer.lock`), a global sequence
//! shared by all streams, per-stream retention and honest paged reads.
//!
//! Files in the store directory (0700, owned by the current user):
//! - `facts.sqlite` (+ `-wal`, `-shm`): the facts; see `SCHEMA`.
//! - `writer.lock`: an empty SQLite database on which the writer holds an
//!   exclusive transaction for its whole life. The OS releases it when the
//!   process dies, so `kill -9` never leaves a stale lock, and a live writer is
//!   never overridden by a PID or timeout guess.
//! - `store-id`: the store's identity, written once. If `facts.sqlite`
//!   disappears or is replaced while this file remains, opening fails with
//!   `fact_store_corrupt` instead of silently starting an empty history.
//!
//! Sequence numbers are strictly increasing across restarts and never reused,
//! even after retention deletes the newest rows or a power cut loses `Memory`
//! appends: numbers are handed out from a block whose upper end is made durable
//! (fsync) before the first number of the block is used. A clean close shrinks
//! the reservation back, so the next opener continues densely; after a crash
//! the next opener continues above the reserved block.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::canonical::{self, hex};
use crate::error::{FactError, sqlite_code};
use crate::fsutil;
use crate::profile::{Durability, Profile, Quota, Stream};
use crate::redaction::{self, POLICY, Representation};

pub(crate) const FACTS_FILE: &str = "facts.sqlite";
pub(crate) const LOCK_FILE: &str = "writer.lock";
pub(crate) const STORE_ID_FILE: &str = "store-id";
const SCHEMA_ID: &str = "aab.fact-store/v1";
const USER_VERSION: i64 = 1;
/// Sequence numbers reserved per durable reservation (one fsync per block).
const RESERVE_BLOCK: u64 = 1024;
/// Stores up to this size get a full `PRAGMA quick_check` on open; larger
/// ones get the cheap structural checks and can call [`FactStore::check`].
const QUICK_CHECK_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Largest page a read returns.
pub const MAX_PAGE: usize = 1000;
const MAX_KEY_BYTES: usize = 1024;

const SCHEMA: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE streams (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    bytes INTEGER NOT NULL DEFAULT 0,
    records INTEGER NOT NULL DEFAULT 0,
    evicted_through INTEGER NOT NULL DEFAULT 0,   -- highest seq retention removed
    keys_pruned_through INTEGER NOT NULL DEFAULT 0, -- highest eviction mark of forgotten keys
    dead_keys INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE facts (
    seq INTEGER PRIMARY KEY,
    stream_id INTEGER NOT NULL REFERENCES streams(id),
    key TEXT,
    record TEXT NOT NULL,            -- canonical JSON, already redacted
    bytes INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL,
    original_sha256 TEXT NOT NULL,   -- of the unredacted canonical JSON
    redacted_paths TEXT              -- JSON array of pointers, NULL = not redacted
);
CREATE INDEX facts_by_stream ON facts(stream_id, seq);
CREATE INDEX facts_by_key ON facts(stream_id, key, seq) WHERE key IS NOT NULL;
-- Per-key eviction marks, so a keyed read reports a gap only when records of
-- that key were evicted.
CREATE TABLE fact_keys (
    stream_id INTEGER NOT NULL REFERENCES streams(id),
    key TEXT NOT NULL,
    live INTEGER NOT NULL,
    evicted_through INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream_id, key)
) WITHOUT ROWID;
CREATE INDEX fact_keys_dead ON fact_keys(stream_id, evicted_through) WHERE live = 0;
CREATE TABLE evidence (
    evidence_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE REFERENCES facts(seq) ON DELETE CASCADE
) WITHOUT ROWID;
";

/// What an append returns once the record is committed.
#[derive(Clone, Debug, PartialEq)]
pub struct Receipt {
    /// Global sequence number (strictly increasing across all streams).
    pub sequence: u64,
    /// `<storeId>:<sequence>`; unique across stores.
    pub receipt_id: String,
    pub committed_at_ms: i64,
    pub stream: Stream,
    /// Bytes the record counts against its stream quota.
    pub bytes: u64,
    /// Older records of the stream that retention removed in the same commit.
    pub evicted: u64,
    pub durability: Durability,
    pub representation: Representation,
}

/// One stored record as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct FactRecord {
    pub sequence: u64,
    pub stream: Stream,
    pub key: Option<String>,
    pub record: Value,
    pub committed_at_ms: i64,
    pub representation: Representation,
}

/// Global sequences (inclusive) in which records the reader had not yet seen
/// were evicted by retention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
}

/// One page of a stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub records: Vec<FactRecord>,
    /// Opaque (`fc1:` …); pass it back to continue after this page.
    pub next_cursor: String,
    /// The position `next_cursor` encodes, for callers that resume with
    /// [`Cursor::After`] (no generation check).
    pub next_sequence: u64,
    pub has_more: bool,
    /// Records after the cursor were evicted before this read could see them.
    pub gap: Option<Gap>,
    /// The cursor belongs to another store generation (the directory was
    /// recreated); no records are returned and `next_cursor` starts over.
    pub expired: bool,
}

/// Where a read starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// From the oldest record ever written (a gap reports evicted history).
    Start,
    /// After the position encoded in a `next_cursor` string.
    Resume(String),
    /// After a raw global sequence number (e.g. a provider's `afterSequence`).
    /// Gaps are still reported; a number from another store generation cannot
    /// be recognised, so prefer `Resume` where a cursor can be kept.
    After(u64),
}

impl From<&str> for Cursor {
    fn from(s: &str) -> Self {
        Cursor::Resume(s.to_string())
    }
}

/// Counters of one stream.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamStatus {
    pub stream: Stream,
    pub bytes: u64,
    pub records: u64,
    pub evicted_through: u64,
    pub quota: Quota,
}

/// A snapshot of the store's identity and counters.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreStatus {
    pub store_id: String,
    pub profile: Profile,
    pub read_only: bool,
    /// Highest committed sequence (0 when empty).
    pub last_sequence: u64,
    pub streams: Vec<StreamStatus>,
}

#[derive(Clone, Debug, Default)]
struct StreamState {
    id: i64,
    bytes: u64,
    records: u64,
    evicted_through: u64,
    keys_pruned_through: u64,
    dead_keys: u64,
}

struct Writer {
    conn: Connection,
    next_seq: u64,
    last_seq: u64,
    reserved_through: u64,
    full_sync: bool,
    streams: HashMap<Stream, StreamState>,
}

/// A record ready to be inserted (already redacted and serialised).
pub(crate) struct Prepared {
    pub text: String,
    pub original_sha256: String,
    pub redacted_paths: Vec<String>,
    pub evidence_id: Option<String>,
}

/// A row read back, before JSON parsing.
pub(crate) struct RawRow {
    pub seq: u64,
    pub stream: Stream,
    pub key: Option<String>,
    pub text: String,
    pub committed_at_ms: i64,
    pub original_sha256: String,
    pub redacted_paths: Option<String>,
}

impl RawRow {
    pub(crate) fn representation(&self) -> Result<Representation, FactError> {
        let paths: Vec<String> = match &self.redacted_paths {
            None => Vec::new(),
            Some(t) => serde_json::from_str(t).map_err(|e| corrupt_row(self.seq, &e.to_string()))?,
        };
        Ok(Representation { policy: POLICY.to_string(), redacted: !paths.is_empty(), paths, original_sha256: self.original_sha256.clone() })
    }

    pub(crate) fn into_record(self) -> Result<FactRecord, FactError> {
        let representation = self.representation()?;
        let record = serde_json::from_str(&self.text).map_err(|e| corrupt_row(self.seq, &e.to_string()))?;
        Ok(FactRecord { sequence: self.seq, stream: self.stream, key: self.key, record, committed_at_ms: self.committed_at_ms, representation })
    }
}

fn corrupt_row(seq: u64, why: &str) -> FactError {
    FactError::new("fact_store_corrupt", format!("stored record {seq} is unreadable: {why}")).with_details(json!({ "sequence": seq }))
}

/// A consistent view of one key's records (used by export).
pub(crate) struct KeySnapshot {
    pub store_id: String,
    pub through_seq: u64,
    pub rows: Vec<RawRow>,
    pub gap: Option<Gap>,
}

/// The store. `Send + Sync`: appends serialise on the writer connection, reads
/// use their own connection and never wait for a write to finish.
pub struct FactStore {
    dir: PathBuf,
    profile: Profile,
    store_id: String,
    cursor_secret: Vec<u8>,
    // Field order is drop order: the reader closes first so the writer is the
    // last connection and its close checkpoints the WAL into the database.
    reader: Mutex<Connection>,
    writer: Option<Mutex<Writer>>,
    // Dropped last: the OS lock outlives both connections. (In a Mutex only
    // so the store is Sync; nothing ever locks it.)
    _lock: Option<Mutex<Connection>>,
}

impl std::fmt::Debug for FactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FactStore").field("dir", &self.dir).field("store_id", &self.store_id).field("read_only", &self.writer.is_none()).finish()
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn random_hex(n: usize) -> Result<String, FactError> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| FactError::new("fact_store_unavailable", format!("no OS randomness: {e}")))?;
    Ok(hex(&b))
}

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> FactError {
    move |e| FactError::sqlite(context, e)
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let ih = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(ih);
    let mut out = [0u8; 32];
    out.copy_from_slice(&outer.finalize());
    out
}

impl FactStore {
    /// Open (creating if needed) the store in `dir` as its single writer.
    ///
    /// Errors: `fact_store_writer_busy` (another live writer, in this or any
    /// process), `fact_store_directory_unsafe`, `fact_store_corrupt`,
    /// `fact_store_unavailable`.
    pub fn open(dir: &Path, profile: Profile) -> Result<FactStore, FactError> {
        fsutil::prepare_store_dir(dir, true, true)?;
        let lock = acquire_writer_lock(dir)?;
        let facts = dir.join(FACTS_FILE);
        check_sidecars_writable(&facts)?;
        let marker = read_marker(dir)?;
        let existing_len = match std::fs::symlink_metadata(&facts) {
            Ok(m) if !m.is_file() => return Err(FactError::new("fact_store_corrupt", format!("{} is not a regular file", facts.display()))),
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(FactError::io("fact_store_unavailable", "cannot inspect facts.sqlite", e)),
        };
        if let Some(id) = &marker
            && existing_len.unwrap_or(0) == 0
        {
            return Err(FactError::new("fact_store_corrupt", format!("{FACTS_FILE} is missing or empty but the directory holds store {id}"))
                .with_details(json!({ "storeId": id })));
        }
        if existing_len.is_none() {
            fsutil::create_new_private(&facts).map_err(|e| FactError::io("fact_store_unavailable", "cannot create facts.sqlite", e))?;
        }
        let conn = Connection::open_with_flags(&facts, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(sql("cannot open facts.sqlite"))?;
        configure(&conn, false)?;
        integrity_on_open(&conn, existing_len.unwrap_or(0))?;
        init_schema(&conn)?;
        let (store_id, cursor_secret, last_seq, reserved_through) = load_meta(&conn)?;
        match &marker {
            Some(id) if *id != store_id => {
                return Err(FactError::new("fact_store_corrupt", format!("{FACTS_FILE} belongs to store {store_id}, the directory to store {id}"))
                    .with_details(json!({ "storeId": id, "databaseStoreId": store_id })));
            }
            Some(_) => {}
            None => fsutil::write_atomic(&dir.join(STORE_ID_FILE), format!("{store_id}\n").as_bytes())
                .map_err(|e| FactError::io("fact_store_unavailable", "cannot record the store id", e))?,
        }
        // Informational: offline readers report the profile the writer used.
        conn.execute("UPDATE meta SET value = ?1 WHERE key = 'profile'", params![profile.as_str()]).map_err(sql("cannot write meta"))?;
        let streams = load_streams(&conn)?;
        let reader = open_reader(&facts)?;
        let writer = Writer { conn, next_seq: last_seq.max(reserved_through) + 1, last_seq, reserved_through, full_sync: false, streams };
        Ok(FactStore {
            dir: dir.to_path_buf(),
            profile,
            store_id,
            cursor_secret,
            writer: Some(Mutex::new(writer)),
            reader: Mutex::new(reader),
            _lock: Some(Mutex::new(lock)),
        })
    }

    /// Open an existing store for reading only; takes no writer lock, so it
    /// works beside a live writer (or after one died) and never writes facts.
    pub fn open_read_only(dir: &Path) -> Result<FactStore, FactError> {
        fsutil::prepare_store_dir(dir, false, false)?;
        let facts = dir.join(FACTS_FILE);
        let marker = read_marker(dir)?;
        let len = match std::fs::symlink_metadata(&facts) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => return Err(FactError::new("fact_store_corrupt", format!("{} is not a regular file", facts.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(FactError::io("fact_store_unavailable", "cannot inspect facts.sqlite", e)),
        };
        if len == 0 {
            return Err(match marker {
                Some(id) => FactError::new("fact_store_corrupt", format!("{FACTS_FILE} is missing or empty but the directory holds store {id}")),
                None => FactError::new("fact_store_unavailable", format!("no fact store at {}", dir.display())),
            });
        }
        let reader = open_reader(&facts)?;
        integrity_on_open(&reader, len)?;
        let version: i64 = reader.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(sql("cannot read the schema version"))?;
        if version != USER_VERSION {
            return Err(FactError::new("fact_store_unavailable", format!("unsupported fact store schema version {version}")));
        }
        let (store_id, cursor_secret, _, _) = load_meta(&reader)?;
        if let Some(id) = &marker
            && *id != store_id
        {
            return Err(FactError::new("fact_store_corrupt", format!("{FACTS_FILE} belongs to store {store_id}, the directory to store {id}")));
        }
        // Profile only matters for writing; report the one the store records.
        let profile: Option<String> =
            reader.query_row("SELECT value FROM meta WHERE key='profile'", [], |r| r.get(0)).optional().map_err(sql("cannot read meta"))?;
        let profile = profile.as_deref().and_then(|p| Profile::parse(p).ok()).unwrap_or(Profile::Standard);
        Ok(FactStore { dir: dir.to_path_buf(), profile, store_id, cursor_secret, writer: None, reader: Mutex::new(reader), _lock: None })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Random identity of this store generation (new when the directory is
    /// recreated); part of every cursor and receipt id.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// Full `PRAGMA quick_check` now (open only runs it on stores ≤ 256 MiB).
    pub fn check(&self) -> Result<(), FactError> {
        run_quick_check(&self.reader())
    }

    /// Append a record to a capture or history stream. The record is redacted
    /// before it is serialised; the receipt declares what was removed.
    /// Evidence streams are refused (`fact_stream_reserved`): use
    /// `append_evidence`.
    pub fn append(&self, stream: Stream, key: Option<&str>, record: &Value, durability: Durability) -> Result<Receipt, FactError> {
        if stream.is_evidence() {
            return Err(FactError::new("fact_stream_reserved", format!("stream `{stream}` is written only through append_evidence"))
                .with_details(json!({ "stream": stream.as_str() })));
        }
        let redacted = redaction::redact(record);
        let text = canonical::to_storage_string(&redacted.value);
        let original_sha256 = canonical::canonical_sha256(record);
        let prepared = Prepared { text, original_sha256, redacted_paths: redacted.paths, evidence_id: None };
        self.append_prepared(stream, key, durability, |_, _| Ok(prepared)).map(|(r, _)| r)
    }

    /// The append engine: `build` receives the sequence and commit time the
    /// record will get (evidence ids and checksums depend on them).
    pub(crate) fn append_prepared<F>(&self, stream: Stream, key: Option<&str>, durability: Durability, build: F) -> Result<(Receipt, Prepared), FactError>
    where
        F: FnOnce(u64, i64) -> Result<Prepared, FactError>,
    {
        let writer = self.writer.as_ref().ok_or_else(|| FactError::new("fact_store_read_only", "this FactStore was opened read-only"))?;
        if let Some(k) = key
            && (k.is_empty() || k.len() > MAX_KEY_BYTES)
        {
            return Err(FactError::invalid_argument("key", format!("a fact key must be 1..={MAX_KEY_BYTES} bytes")));
        }
        let mut w = lock_writer(writer);
        let seq = w.next_seq;
        let committed_at_ms = now_ms();
        let prepared = build(seq, committed_at_ms)?;
        let quota = self.profile.quota(stream);
        let bytes = (prepared.text.len() + key.map_or(0, str::len)) as u64;
        if bytes > quota.max_record_bytes {
            return Err(FactError::new(
                "payload_too_large",
                format!("record of {bytes} bytes exceeds the {} byte limit of stream `{stream}`", quota.max_record_bytes),
            )
            .with_details(json!({ "bytes": bytes, "limitBytes": quota.max_record_bytes, "stream": stream.as_str() })));
        }
        // Never hand out a number twice, even if this commit's outcome is
        // unknown: advance first.
        w.next_seq = seq + 1;
        let result = w.commit_one(stream, key, seq, committed_at_ms, bytes, &prepared, durability, &quota);
        match result {
            Ok(evicted) => {
                let representation = Representation {
                    policy: POLICY.to_string(),
                    redacted: !prepared.redacted_paths.is_empty(),
                    paths: prepared.redacted_paths.clone(),
                    original_sha256: prepared.original_sha256.clone(),
                };
                let receipt = Receipt {
                    sequence: seq,
                    receipt_id: format!("{}:{seq}", self.store_id),
                    committed_at_ms,
                    stream,
                    bytes,
                    evicted,
                    durability,
                    representation,
                };
                Ok((receipt, prepared))
            }
            Err(e) => {
                // Counters may be stale after a failed commit; reload them.
                if let Err(reload) = w.reload() {
                    return Err(FactError { details: Some(json!({ "reloadError": reload.message })), ..e });
                }
                Err(e)
            }
        }
    }

    /// Read a stream in sequence order.
    pub fn read(&self, stream: Stream, cursor: &Cursor, limit: usize) -> Result<Page, FactError> {
        self.read_inner(stream, None, cursor, limit)
    }

    /// Read only the records of one key of a stream. The gap reflects
    /// evictions of this key's records.
    pub fn read_key(&self, stream: Stream, key: &str, cursor: &Cursor, limit: usize) -> Result<Page, FactError> {
        self.read_inner(stream, Some(key), cursor, limit)
    }

    /// Counters and quotas of every stream.
    pub fn status(&self) -> Result<StoreStatus, FactError> {
        let mut conn = self.reader();
        let tx = conn.transaction().map_err(sql("cannot read the store"))?;
        let streams = load_streams(&tx)?;
        let last: Option<String> = tx.query_row("SELECT value FROM meta WHERE key='last_seq'", [], |r| r.get(0)).optional().map_err(sql("cannot read meta"))?;
        let last_sequence = last.and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut list: Vec<StreamStatus> = streams
            .into_iter()
            .map(|(stream, st)| StreamStatus {
                stream,
                bytes: st.bytes,
                records: st.records,
                evicted_through: st.evicted_through,
                quota: self.profile.quota(stream),
            })
            .collect();
        list.sort_by_key(|s| s.stream);
        Ok(StoreStatus { store_id: self.store_id.clone(), profile: self.profile, read_only: self.is_read_only(), last_sequence, streams: list })
    }

    pub(crate) fn reader(&self) -> MutexGuard<'_, Connection> {
        let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn
    }

    fn cursor_string(&self, stream: Stream, key: Option<&str>, after: u64) -> String {
        let tag = key_tag(key);
        let body = format!("{}:{}:{}:{}", self.store_id, stream.as_str(), tag, after);
        let mac = hex(&hmac_sha256(&self.cursor_secret, body.as_bytes())[..8]);
        format!("fc1:{body}:{mac}")
    }

    /// `Ok(Some(after))`, `Ok(None)` = another store generation, or
    /// `invalid_fact_cursor`.
    fn parse_cursor(&self, stream: Stream, key: Option<&str>, cursor: &Cursor) -> Result<Option<u64>, FactError> {
        let token = match cursor {
            Cursor::Start => return Ok(Some(0)),
            Cursor::After(n) => return Ok(Some(*n)),
            Cursor::Resume(t) => t,
        };
        let invalid = |why: &str| FactError::new("invalid_fact_cursor", format!("invalid fact cursor: {why}")).with_details(json!({ "field": "cursor" }));
        let rest = token.strip_prefix("fc1:").ok_or_else(|| invalid("not an fc1 cursor"))?;
        let parts: Vec<&str> = rest.split(':').collect();
        if parts.len() != 5 {
            return Err(invalid("malformed"));
        }
        if parts[0] != self.store_id {
            if parts[0].len() == 32 && parts[0].bytes().all(|b| b.is_ascii_hexdigit()) {
                return Ok(None);
            }
            return Err(invalid("malformed store generation"));
        }
        let body = &rest[..rest.len() - parts[4].len() - 1];
        let mac = hex(&hmac_sha256(&self.cursor_secret, body.as_bytes())[..8]);
        if mac != parts[4] {
            return Err(invalid("checksum mismatch"));
        }
        if parts[1] != stream.as_str() || parts[2] != key_tag(key) {
            return Err(invalid("the cursor belongs to another stream or key"));
        }
        parts[3].parse::<u64>().map(Some).map_err(|_| invalid("malformed position"))
    }

    fn read_inner(&self, stream: Stream, key: Option<&str>, cursor: &Cursor, limit: usize) -> Result<Page, FactError> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(FactError::invalid_argument("limit", format!("limit must be 1..={MAX_PAGE}")));
        }
        let after = match self.parse_cursor(stream, key, cursor)? {
            Some(a) => a,
            None => {
                let conn = self.reader();
                let any = select_rows(&conn, stream, key, 0, 1)?;
                return Ok(Page {
                    records: Vec::new(),
                    next_cursor: self.cursor_string(stream, key, 0),
                    next_sequence: 0,
                    has_more: !any.is_empty(),
                    gap: None,
                    expired: true,
                });
            }
        };
        let mut conn = self.reader();
        let tx = conn.transaction().map_err(sql("cannot read the store"))?;
        let gap = gap_after(&tx, stream, key, after)?;
        let mut rows = select_rows(&tx, stream, key, after, limit + 1)?;
        drop(tx);
        let has_more = rows.len() > limit;
        rows.truncate(limit);
        let next_after = rows.last().map(|r| r.seq).unwrap_or_else(|| gap.map_or(after, |g| g.to.max(after)));
        let records = rows.into_iter().map(RawRow::into_record).collect::<Result<Vec<_>, _>>()?;
        Ok(Page { records, next_cursor: self.cursor_string(stream, key, next_after), next_sequence: next_after, has_more, gap, expired: false })
    }

    /// Every retained record of one key in a single read snapshot, plus the
    /// snapshot's highest sequence (export freezes exactly this view).
    pub(crate) fn snapshot_key(&self, stream: Stream, key: &str, max_rows: usize) -> Result<KeySnapshot, FactError> {
        let mut conn = self.reader();
        let tx = conn.transaction().map_err(sql("cannot read the store"))?;
        let last: Option<String> = tx.query_row("SELECT value FROM meta WHERE key='last_seq'", [], |r| r.get(0)).optional().map_err(sql("cannot read meta"))?;
        let through_seq = last.and_then(|v| v.parse().ok()).unwrap_or(0);
        let gap = gap_after(&tx, stream, Some(key), 0)?;
        let mut rows = Vec::new();
        let mut after = 0;
        loop {
            let page = select_rows(&tx, stream, Some(key), after, MAX_PAGE)?;
            let n = page.len();
            if let Some(last) = page.last() {
                after = last.seq;
            }
            rows.extend(page);
            if rows.len() > max_rows {
                break;
            }
            if n < MAX_PAGE {
                break;
            }
        }
        Ok(KeySnapshot { store_id: self.store_id.clone(), through_seq, rows, gap })
    }

    /// The stored row of an evidence id, if retained.
    pub(crate) fn row_by_evidence_id(&self, evidence_id: &str) -> Result<Option<RawRow>, FactError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare_cached(
                "SELECT f.seq, s.name, f.key, f.record, f.committed_at_ms, f.original_sha256, f.redacted_paths
                 FROM evidence e JOIN facts f ON f.seq = e.seq JOIN streams s ON s.id = f.stream_id WHERE e.evidence_id = ?1",
            )
            .map_err(sql("cannot read evidence"))?;
        stmt.query_row(params![evidence_id], raw_row).optional().map_err(sql("cannot read evidence"))?.transpose()
    }
}

impl Drop for FactStore {
    fn drop(&mut self) {
        // Clean close: give back the unused part of the reserved block so the
        // next opener continues densely.
        if let Some(w) = &self.writer {
            let mut w = lock_writer(w);
            if w.reserved_through > w.last_seq {
                let last = w.last_seq;
                let _ = w.set_full_sync(true);
                if w.conn.execute("UPDATE meta SET value = ?1 WHERE key = 'reserved_through'", params![last.to_string()]).is_ok() {
                    w.reserved_through = last;
                }
            }
            // Fold the WAL into the database now rather than leave it to
            // whichever connection happens to close last.
            let _ = w.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
}

// The store is shared across the daemon's blocking threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<FactStore>();
};

fn key_tag(key: Option<&str>) -> String {
    match key {
        None => "-".to_string(),
        Some(k) => canonical::sha256_hex(k.as_bytes())[..16].to_string(),
    }
}

fn lock_writer(m: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    let w = m.lock().unwrap_or_else(|p| p.into_inner());
    if !w.conn.is_autocommit() {
        let _ = w.conn.execute_batch("ROLLBACK");
    }
    w
}

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RawRow, FactError>> {
    let seq: i64 = r.get(0)?;
    let name: String = r.get(1)?;
    let stream = match Stream::parse(&name) {
        Ok(s) => s,
        Err(_) => return Ok(Err(corrupt_row(seq as u64, &format!("unknown stream `{name}`")))),
    };
    Ok(Ok(RawRow {
        seq: seq as u64,
        stream,
        key: r.get(2)?,
        text: r.get(3)?,
        committed_at_ms: r.get(4)?,
        original_sha256: r.get(5)?,
        redacted_paths: r.get(6)?,
    }))
}

fn select_rows(conn: &Connection, stream: Stream, key: Option<&str>, after: u64, limit: usize) -> Result<Vec<RawRow>, FactError> {
    let base = "SELECT f.seq, s.name, f.key, f.record, f.committed_at_ms, f.original_sha256, f.redacted_paths
                FROM facts f JOIN streams s ON s.id = f.stream_id WHERE s.name = ?1 AND f.seq > ?2";
    let rows: Vec<rusqlite::Result<Result<RawRow, FactError>>> = match key {
        None => {
            let mut stmt = conn.prepare_cached(&format!("{base} ORDER BY f.seq LIMIT ?3")).map_err(sql("cannot read facts"))?;
            stmt.query_map(params![stream.as_str(), after as i64, limit as i64], raw_row).map_err(sql("cannot read facts"))?.collect()
        }
        Some(k) => {
            let mut stmt = conn.prepare_cached(&format!("{base} AND f.key = ?4 ORDER BY f.seq LIMIT ?3")).map_err(sql("cannot read facts"))?;
            stmt.query_map(params![stream.as_str(), after as i64, limit as i64, k], raw_row).map_err(sql("cannot read facts"))?.collect()
        }
    };
    rows.into_iter().map(|r| r.map_err(sql("cannot read facts"))?).collect()
}

/// Records of (stream, key) after `after` that retention removed.
fn gap_after(conn: &Connection, stream: Stream, key: Option<&str>, after: u64) -> Result<Option<Gap>, FactError> {
    let (evicted_through, keys_pruned_through): (i64, i64) = conn
        .query_row("SELECT evicted_through, keys_pruned_through FROM streams WHERE name = ?1", params![stream.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql("cannot read stream state"))?;
    let mark = match key {
        None => evicted_through as u64,
        Some(k) => {
            let entry: Option<i64> = conn
                .query_row(
                    "SELECT k.evicted_through FROM fact_keys k JOIN streams s ON s.id = k.stream_id WHERE s.name = ?1 AND k.key = ?2",
                    params![stream.as_str(), k],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql("cannot read key state"))?;
            // A forgotten key may have lost records up to the pruning mark;
            // say so rather than claim a complete history.
            entry.unwrap_or(keys_pruned_through) as u64
        }
    };
    Ok((mark > after).then_some(Gap { from: after + 1, to: mark }))
}

impl Writer {
    fn set_full_sync(&mut self, full: bool) -> Result<(), FactError> {
        if self.full_sync != full {
            self.conn.execute_batch(if full { "PRAGMA synchronous=FULL" } else { "PRAGMA synchronous=NORMAL" }).map_err(sql("cannot set durability"))?;
            self.full_sync = full;
        }
        Ok(())
    }

    fn reload(&mut self) -> Result<(), FactError> {
        let (_, _, last, reserved) = load_meta(&self.conn)?;
        self.last_seq = last;
        self.reserved_through = reserved;
        self.next_seq = self.next_seq.max(last.max(reserved) + 1);
        self.streams = load_streams(&self.conn)?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn commit_one(
        &mut self,
        stream: Stream,
        key: Option<&str>,
        seq: u64,
        committed_at_ms: i64,
        bytes: u64,
        prepared: &Prepared,
        durability: Durability,
        quota: &Quota,
    ) -> Result<u64, FactError> {
        let reserve = seq > self.reserved_through;
        // WAL + synchronous=FULL fsyncs the log at this commit (and with it
        // every earlier commit); NORMAL commits are ordered but not fsynced.
        self.set_full_sync(durability == Durability::Sync || reserve)?;
        let mut st =
            self.streams.get(&stream).cloned().ok_or_else(|| FactError::new("fact_store_corrupt", format!("stream `{stream}` is missing from the store")))?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql("cannot start a write"))?;
        let new_reserved = if reserve { seq + RESERVE_BLOCK - 1 } else { self.reserved_through };
        if reserve {
            tx.execute("UPDATE meta SET value = ?1 WHERE key = 'reserved_through'", params![new_reserved.to_string()])
                .map_err(sql("cannot reserve sequences"))?;
        }
        let paths = if prepared.redacted_paths.is_empty() { None } else { Some(serde_json::to_string(&prepared.redacted_paths).unwrap_or_default()) };
        tx.prepare_cached(
            "INSERT INTO facts (seq, stream_id, key, record, bytes, committed_at_ms, original_sha256, redacted_paths) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut s| s.execute(params![seq as i64, st.id, key, prepared.text, bytes as i64, committed_at_ms, prepared.original_sha256, paths]))
        .map_err(sql("cannot append"))?;
        if let Some(id) = &prepared.evidence_id {
            match tx.prepare_cached("INSERT INTO evidence (evidence_id, seq) VALUES (?1, ?2)").and_then(|mut s| s.execute(params![id, seq as i64])) {
                Ok(_) => {}
                Err(e) if sqlite_code(&e) == Some(rusqlite::ErrorCode::ConstraintViolation) => {
                    return Err(FactError::new("duplicate_evidence_id", format!("evidence id `{id}` already exists")).with_details(json!({ "evidenceId": id })));
                }
                Err(e) => return Err(FactError::sqlite("cannot index evidence", e)),
            }
        }
        if let Some(k) = key {
            let revived: Option<i64> = tx
                .prepare_cached("UPDATE fact_keys SET live = live + 1 WHERE stream_id = ?1 AND key = ?2 RETURNING live")
                .and_then(|mut s| s.query_row(params![st.id, k], |r| r.get(0)).optional())
                .map_err(sql("cannot index the key"))?;
            match revived {
                None => {
                    tx.prepare_cached("INSERT INTO fact_keys (stream_id, key, live) VALUES (?1, ?2, 1)")
                        .and_then(|mut s| s.execute(params![st.id, k]))
                        .map_err(sql("cannot index the key"))?;
                }
                Some(1) => st.dead_keys = st.dead_keys.saturating_sub(1),
                Some(_) => {}
            }
        }
        st.bytes += bytes;
        st.records += 1;
        let evicted = evict(&tx, &mut st, quota, seq)?;
        tx.prepare_cached("UPDATE streams SET bytes = ?2, records = ?3, evicted_through = ?4, keys_pruned_through = ?5, dead_keys = ?6 WHERE id = ?1")
            .and_then(|mut s| {
                s.execute(params![st.id, st.bytes as i64, st.records as i64, st.evicted_through as i64, st.keys_pruned_through as i64, st.dead_keys as i64])
            })
            .map_err(sql("cannot update stream counters"))?;
        tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'last_seq'")
            .and_then(|mut s| s.execute(params![seq.to_string()]))
            .map_err(sql("cannot advance the sequence"))?;
        tx.commit().map_err(sql("cannot commit"))?;
        self.reserved_through = new_reserved;
        self.last_seq = seq;
        self.streams.insert(stream, st);
        Ok(evicted)
    }
}

/// Remove the stream's oldest records until it is within quota (never the
/// record just written). Returns how many were removed.
fn evict(tx: &Connection, st: &mut StreamState, quota: &Quota, newest: u64) -> Result<u64, FactError> {
    let mut evicted = 0;
    while st.bytes > quota.max_bytes || st.records > quota.max_records {
        let victims: Vec<(i64, Option<String>, i64)> = {
            let mut stmt = tx.prepare_cached("SELECT seq, key, bytes FROM facts WHERE stream_id = ?1 ORDER BY seq LIMIT 64").map_err(sql("cannot evict"))?;
            stmt.query_map(params![st.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .map_err(sql("cannot evict"))?
                .collect::<Result<_, _>>()
                .map_err(sql("cannot evict"))?
        };
        let before = evicted;
        for (seq, key, bytes) in victims {
            if (st.bytes <= quota.max_bytes && st.records <= quota.max_records) || seq as u64 == newest {
                break;
            }
            tx.prepare_cached("DELETE FROM facts WHERE seq = ?1").and_then(|mut s| s.execute(params![seq])).map_err(sql("cannot evict"))?;
            st.bytes = st.bytes.saturating_sub(bytes as u64);
            st.records = st.records.saturating_sub(1);
            st.evicted_through = st.evicted_through.max(seq as u64);
            evicted += 1;
            if let Some(k) = key {
                let live: Option<i64> = tx
                    .prepare_cached("UPDATE fact_keys SET live = live - 1, evicted_through = ?3 WHERE stream_id = ?1 AND key = ?2 RETURNING live")
                    .and_then(|mut s| s.query_row(params![st.id, k, seq], |r| r.get(0)).optional())
                    .map_err(sql("cannot evict"))?;
                if live == Some(0) {
                    st.dead_keys += 1;
                }
            }
        }
        if evicted == before {
            break; // only the record just written is left
        }
    }
    // Forget the oldest fully-evicted keys once there are too many, keeping
    // the highest forgotten eviction mark so their readers still see a gap.
    if st.dead_keys > quota.max_records {
        let cut: Option<i64> = tx
            .query_row(
                "SELECT evicted_through FROM fact_keys WHERE stream_id = ?1 AND live = 0 ORDER BY evicted_through LIMIT 1 OFFSET ?2",
                params![st.id, (quota.max_records / 2) as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("cannot prune keys"))?;
        if let Some(cut) = cut {
            let n = tx
                .execute("DELETE FROM fact_keys WHERE stream_id = ?1 AND live = 0 AND evicted_through <= ?2", params![st.id, cut])
                .map_err(sql("cannot prune keys"))?;
            st.dead_keys = st.dead_keys.saturating_sub(n as u64);
            st.keys_pruned_through = st.keys_pruned_through.max(cut as u64);
        }
    }
    Ok(evicted)
}

/// A writer needs its `-wal` and `-shm` files writable: SQLite falls back to a
/// read-only shared-memory mapping otherwise, and a truncated read-only `-shm`
/// then faults (SIGBUS) instead of failing. Refuse such a store up front; the host
/// retries the open later, once the files are fixed. `faccessat` opens nothing, so
/// no POSIX lock of another connection to these files can be dropped.
fn check_sidecars_writable(facts: &Path) -> Result<(), FactError> {
    use std::os::unix::ffi::OsStrExt;
    for suffix in ["-wal", "-shm"] {
        let mut name = facts.as_os_str().to_os_string();
        name.push(suffix);
        let path = std::path::PathBuf::from(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(FactError::io("fact_store_unavailable", "cannot inspect the store's WAL files", e)),
        };
        if !meta.is_file() {
            return Err(FactError::new("fact_store_corrupt", format!("{} is not a regular file", path.display())));
        }
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| FactError::new("fact_store_unavailable", "store path contains NUL"))?;
        // SAFETY: valid NUL-terminated path; faccessat has no other preconditions.
        let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::R_OK | libc::W_OK, libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(FactError::new("fact_store_unavailable", format!("{} is not writable ({e}); the store stays closed until it is", path.display()))
                .with_details(json!({ "path": path.display().to_string() })));
        }
    }
    Ok(())
}

fn acquire_writer_lock(dir: &Path) -> Result<Connection, FactError> {
    let path = dir.join(LOCK_FILE);
    match fsutil::create_new_private(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(FactError::io("fact_store_unavailable", "cannot create writer.lock", e)),
    }
    let conn =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(sql("cannot open writer.lock"))?;
    conn.busy_timeout(Duration::ZERO).map_err(sql("cannot configure writer.lock"))?;
    match conn.execute_batch("BEGIN EXCLUSIVE") {
        Ok(()) => Ok(conn),
        Err(e) if matches!(sqlite_code(&e), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)) => {
            Err(FactError::new("fact_store_writer_busy", format!("another process (or FactStore) is the writer of {}", dir.display()))
                .with_details(json!({ "dir": dir.display().to_string() })))
        }
        Err(e) => Err(FactError::sqlite("cannot take the writer lock", e)),
    }
}

fn read_marker(dir: &Path) -> Result<Option<String>, FactError> {
    match fsutil::read_regular_no_follow(&dir.join(STORE_ID_FILE), 256) {
        Ok(b) => {
            let s = String::from_utf8_lossy(&b).trim().to_string();
            if s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit()) {
                Ok(Some(s))
            } else {
                Err(FactError::new("fact_store_corrupt", "the store-id file is malformed"))
            }
        }
        Err(fsutil::NoFollowError::Missing) => Ok(None),
        Err(e) => Err(FactError::new("fact_store_corrupt", format!("the store-id file is unreadable: {e:?}"))),
    }
}

fn configure(conn: &Connection, read_only: bool) -> Result<(), FactError> {
    conn.busy_timeout(Duration::from_secs(5)).map_err(sql("cannot configure the store"))?;
    if !read_only {
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(sql("cannot enable WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(FactError::new("fact_store_unavailable", format!("cannot enable WAL (journal mode stays {mode})")));
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864;").map_err(sql("cannot configure the store"))?;
    }
    conn.execute_batch("PRAGMA foreign_keys=ON;").map_err(sql("cannot configure the store"))?;
    Ok(())
}

fn open_reader(facts: &Path) -> Result<Connection, FactError> {
    let conn =
        Connection::open_with_flags(facts, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX).map_err(sql("cannot open facts.sqlite"))?;
    configure(&conn, true)?;
    Ok(conn)
}

fn integrity_on_open(conn: &Connection, file_len: u64) -> Result<(), FactError> {
    // Reading the schema touches the header and the schema pages; garbage
    // there fails here as NOTADB/CORRUPT.
    let _: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(sql("cannot read the store schema"))?;
    if file_len <= QUICK_CHECK_MAX_BYTES {
        run_quick_check(conn)?;
    }
    Ok(())
}

fn run_quick_check(conn: &Connection) -> Result<(), FactError> {
    let mut stmt = conn.prepare("PRAGMA quick_check(8)").map_err(sql("integrity check failed"))?;
    let problems: Vec<String> =
        stmt.query_map([], |r| r.get(0)).map_err(sql("integrity check failed"))?.collect::<Result<_, _>>().map_err(sql("integrity check failed"))?;
    if problems.len() == 1 && problems[0] == "ok" {
        return Ok(());
    }
    Err(FactError::new("fact_store_corrupt", "the fact store failed its integrity check").with_details(json!({ "problems": problems })))
}

fn init_schema(conn: &Connection) -> Result<(), FactError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(sql("cannot read the schema version"))?;
    if version == USER_VERSION {
        // Streams added by a newer build of this version appear here.
        for s in Stream::ALL {
            conn.execute("INSERT OR IGNORE INTO streams (name) VALUES (?1)", params![s.as_str()]).map_err(sql("cannot add streams"))?;
        }
        return Ok(());
    }
    if version != 0 {
        return Err(FactError::new("fact_store_unavailable", format!("unsupported fact store schema version {version}"))
            .with_details(json!({ "userVersion": version })));
    }
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).map_err(sql("cannot read the store schema"))?;
    if tables != 0 {
        return Err(FactError::new("fact_store_corrupt", "facts.sqlite holds tables but no fact store schema version"));
    }
    let store_id = random_hex(16)?;
    let secret = random_hex(32)?;
    let mut batch = String::from("BEGIN IMMEDIATE;");
    batch.push_str(SCHEMA);
    conn.execute_batch(&batch).map_err(sql("cannot create the store schema"))?;
    let insert = |k: &str, v: &str| conn.execute("INSERT INTO meta (key, value) VALUES (?1, ?2)", params![k, v]).map_err(sql("cannot write meta"));
    let created = (|| {
        insert("schema", SCHEMA_ID)?;
        insert("store_id", &store_id)?;
        insert("cursor_secret", &secret)?;
        insert("created_at_ms", &now_ms().to_string())?;
        insert("last_seq", "0")?;
        insert("reserved_through", "0")?;
        insert("profile", "standard")?;
        for s in Stream::ALL {
            conn.execute("INSERT INTO streams (name) VALUES (?1)", params![s.as_str()]).map_err(sql("cannot add streams"))?;
        }
        conn.execute_batch(&format!("PRAGMA user_version={USER_VERSION}; COMMIT;")).map_err(sql("cannot create the store schema"))
    })();
    if created.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    created
}

fn load_meta(conn: &Connection) -> Result<(String, Vec<u8>, u64, u64), FactError> {
    let get = |k: &str| -> Result<String, FactError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", params![k], |r| r.get(0))
            .optional()
            .map_err(sql("cannot read meta"))?
            .ok_or_else(|| FactError::new("fact_store_corrupt", format!("store metadata `{k}` is missing")))
    };
    if get("schema")? != SCHEMA_ID {
        return Err(FactError::new("fact_store_corrupt", "facts.sqlite is not an aab fact store"));
    }
    let store_id = get("store_id")?;
    let secret = get("cursor_secret")?;
    let num =
        |k: &str| -> Result<u64, FactError> { get(k)?.parse().map_err(|_| FactError::new("fact_store_corrupt", format!("store metadata `{k}` is malformed"))) };
    Ok((store_id, secret.into_bytes(), num("last_seq")?, num("reserved_through")?))
}

fn load_streams(conn: &Connection) -> Result<HashMap<Stream, StreamState>, FactError> {
    let mut stmt =
        conn.prepare("SELECT id, name, bytes, records, evicted_through, keys_pruned_through, dead_keys FROM streams").map_err(sql("cannot read streams"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(1)?,
                StreamState {
                    id: r.get(0)?,
                    bytes: r.get::<_, i64>(2)? as u64,
                    records: r.get::<_, i64>(3)? as u64,
                    evicted_through: r.get::<_, i64>(4)? as u64,
                    keys_pruned_through: r.get::<_, i64>(5)? as u64,
                    dead_keys: r.get::<_, i64>(6)? as u64,
                },
            ))
        })
        .map_err(sql("cannot read streams"))?;
    let mut out = HashMap::new();
    for row in rows {
        let (name, st) = row.map_err(sql("cannot read streams"))?;
        // Streams of a newer build are kept on disk but not served here.
        if let Ok(s) = Stream::parse(&name) {
            out.insert(s, st);
        }
    }
    Ok(out)
}
