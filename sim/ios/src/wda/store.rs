//! The durable `aab.wda-completion/v1` store: an append-only file under the
//! Runner's store directory that outlives Runner processes, so a new epoch still
//! answers `/aab/execution/result` for an action settled by an old one.
//!
//! One record per line: `<sequence> <sha256 of json> <json>\n`, written with one
//! `write` and `fdatasync` before the action's HTTP reply. Opening re-indexes the
//! file (record offsets only), skips lines whose digest does not verify and cuts
//! a torn tail left by a crash mid-append. Lookups read the disk in pages of at
//! most 64 records / 2 MiB up to the committed sequence fixed by the first page,
//! continuing through an opaque base64 cursor bound to the lookup's scope.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use base64::Engine;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

pub const COMPLETION_SCHEMA: &str = "aab.wda-completion/v1";
const FILE_NAME: &str = "aab-wda-completions.log";
pub const MAX_RECORD_BYTES: usize = 128 * 1024;
/// A record line: sequence, digest, two spaces, the JSON and the newline.
const MAX_LINE_BYTES: usize = MAX_RECORD_BYTES + 96;
const PAGE_RECORDS: usize = 64;
const PAGE_BYTES: u64 = 2 * 1024 * 1024;
const MAX_CURSOR_CHARS: usize = 2048;
const CURSOR_VERSION: u64 = 1;

#[derive(Clone, Copy, Debug)]
struct Entry {
    sequence: u64,
    offset: u64,
    len: u64,
}

struct Inner {
    /// `None` when the directory or file could not be opened: the store is unavailable.
    file: Option<File>,
    error: Option<String>,
    end: u64,
    next_sequence: u64,
    index: Vec<Entry>,
}

pub struct Store {
    inner: Mutex<Inner>,
    /// Test hook: the next N appends fail as a full disk would.
    #[cfg(test)]
    pub fail_appends: std::sync::atomic::AtomicU32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub sequence: u64,
    pub sha256: String,
}

impl Receipt {
    pub fn to_json(&self) -> Value {
        json!({ "sequence": self.sequence, "sha256": self.sha256, "committed": true })
    }
}

/// Which completion a lookup is for.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    pub runner_bundle_id: &'a str,
    pub action_id: &'a str,
    pub runtime_epoch: &'a str,
}

impl Scope<'_> {
    fn matches(&self, record: &Value) -> bool {
        let result = &record["executionResult"];
        record["schemaVersion"] == COMPLETION_SCHEMA
            && record["runnerBundleId"] == self.runner_bundle_id
            && result["actionId"] == self.action_id
            && result["runtimeEpoch"] == self.runtime_epoch
    }

    /// A digest of the scope, so a cursor cannot be replayed for another lookup.
    fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [self.runner_bundle_id, self.action_id, self.runtime_epoch] {
            h.update(part.as_bytes());
            h.update([0u8]);
        }
        hex(&h.finalize())[..32].to_string()
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum PageError {
    InvalidCursor(String),
    Stalled(String),
    ReadFailed(String),
    Unavailable(String),
}

impl PageError {
    pub fn code(&self) -> &'static str {
        match self {
            PageError::InvalidCursor(_) => "invalid_ios_wda_completion_cursor",
            PageError::Stalled(_) => "ios_wda_completion_cursor_stalled",
            PageError::ReadFailed(_) => "ios_wda_completion_read_failed",
            PageError::Unavailable(_) => "ios_wda_completion_store_unavailable",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            PageError::InvalidCursor(m) | PageError::Stalled(m) | PageError::ReadFailed(m) | PageError::Unavailable(m) => m,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

enum Line {
    Eof,
    Complete(Vec<u8>),
    /// Longer than any record can be; skipped (its bytes are still counted).
    TooLong(u64),
    /// Bytes after the last newline: an append torn by a crash.
    Torn,
}

/// Reads one line without ever holding more than `max` bytes of it.
fn next_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Line> {
    let (mut buf, mut consumed, mut too_long) = (Vec::new(), 0u64, false);
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if consumed == 0 { Line::Eof } else { Line::Torn });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long && buf.len() + take <= max {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            too_long = true;
            buf = Vec::new();
        }
        r.consume(take);
        consumed += take as u64;
        if done {
            return Ok(if too_long { Line::TooLong(consumed) } else { Line::Complete(buf) });
        }
    }
}

/// `(sequence, digest, json)` of a record line whose digest verifies.
fn parse_line(line: &[u8]) -> Option<(u64, &str, &str)> {
    let text = std::str::from_utf8(line.strip_suffix(b"\n")?).ok()?;
    let mut parts = text.splitn(3, ' ');
    let sequence = parts.next()?.parse().ok()?;
    let digest = parts.next()?;
    let json = parts.next()?;
    (sha256_hex(json.as_bytes()) == digest).then_some((sequence, digest, json))
}

fn sequence_prefix(line: &[u8]) -> Option<u64> {
    let end = line.iter().position(|&b| b == b' ')?;
    std::str::from_utf8(&line[..end]).ok()?.parse().ok()
}

fn open_file(dir: &Path) -> std::io::Result<(File, u64, u64, Vec<Entry>)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(FILE_NAME);
    let created = !path.exists();
    let file = OpenOptions::new().read(true).append(true).create(true).open(&path)?;
    if !file.metadata()?.is_file() {
        // A device or FIFO here would never end the index scan below.
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    if created {
        // Make the new directory entry itself durable, not just the file's bytes.
        File::open(dir)?.sync_all()?;
    }
    let (mut index, mut offset, mut max_sequence) = (Vec::new(), 0u64, 0u64);
    let mut reader = BufReader::new(&file);
    loop {
        match next_line(&mut reader, MAX_LINE_BYTES)? {
            Line::Eof => break,
            Line::Torn => {
                file.set_len(offset)?;
                file.sync_data()?;
                break;
            }
            Line::TooLong(n) => offset += n,
            Line::Complete(line) => {
                let len = line.len() as u64;
                if let Some((sequence, _, _)) = parse_line(&line) {
                    index.push(Entry { sequence, offset, len });
                }
                // A damaged line still reserves its sequence, so it is never reissued.
                max_sequence = max_sequence.max(sequence_prefix(&line).unwrap_or(0));
                offset += len;
            }
        }
    }
    index.sort_by_key(|e| e.sequence);
    Ok((file, offset, max_sequence + 1, index))
}

impl Store {
    /// Opens (or creates) the store in `dir`; failures leave it unavailable rather than failing the Runner.
    pub fn open(dir: &Path) -> Store {
        let inner = match open_file(dir) {
            Ok((file, end, next_sequence, index)) => Inner { file: Some(file), error: None, end, next_sequence, index },
            Err(e) => Inner { file: None, error: Some(format!("completion store {}: {e}", dir.display())), end: 0, next_sequence: 1, index: Vec::new() },
        };
        Store {
            inner: Mutex::new(inner),
            #[cfg(test)]
            fail_appends: Default::default(),
        }
    }

    pub fn available(&self) -> bool {
        self.inner.lock().unwrap().file.is_some()
    }

    /// Committed records readable in the store.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().index.len()
    }

    /// Appends one completion record and syncs it to disk; returns its receipt.
    pub fn append(&self, completion: &Value) -> Result<Receipt, String> {
        let json = completion.to_string();
        if json.len() > MAX_RECORD_BYTES {
            return Err(format!("completion record is {} bytes (limit {MAX_RECORD_BYTES})", json.len()));
        }
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            if self.fail_appends.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err("completion store write failed: no space left on device (test)".into());
            }
        }
        let mut g = self.inner.lock().unwrap();
        let sequence = g.next_sequence;
        let (end, error) = (g.end, g.error.clone());
        let Some(file) = g.file.as_mut() else { return Err(error.unwrap_or_else(|| "completion store unavailable".into())) };
        let sha256 = sha256_hex(json.as_bytes());
        let line = format!("{sequence} {sha256} {json}\n");
        if let Err(e) = file.write_all(line.as_bytes()).and_then(|()| file.sync_data()) {
            // Cut any partial write so the next append starts on a record boundary.
            let _ = file.set_len(end);
            return Err(format!("completion store write failed: {e}"));
        }
        let len = line.len() as u64;
        g.index.push(Entry { sequence, offset: end, len });
        g.end = end + len;
        g.next_sequence = sequence + 1;
        Ok(Receipt { sequence, sha256 })
    }

    fn read(file: &File, e: &Entry) -> Result<(Value, Receipt), PageError> {
        let mut buf = vec![0u8; e.len as usize];
        file.read_exact_at(&mut buf, e.offset).map_err(|err| PageError::ReadFailed(format!("reading record {}: {err}", e.sequence)))?;
        let (sequence, digest, json) = parse_line(&buf).ok_or_else(|| PageError::ReadFailed(format!("record {} no longer verifies", e.sequence)))?;
        let record = serde_json::from_str(json).map_err(|err| PageError::ReadFailed(format!("record {} is not JSON: {err}", e.sequence)))?;
        Ok((record, Receipt { sequence, sha256: digest.to_string() }))
    }

    /// One result-lookup page (protocols §4.5 format).
    pub fn page(&self, scope: Scope<'_>, cursor: Option<&str>) -> Result<Value, PageError> {
        let g = self.inner.lock().unwrap();
        let Some(file) = g.file.as_ref() else { return Err(PageError::Unavailable(g.error.clone().unwrap_or_default())) };
        let committed = g.index.last().map_or(0, |e| e.sequence);
        let (start, through) = match cursor {
            None => (1, committed),
            Some(c) => {
                let (next, through) = decode_cursor(c, &scope)?;
                if through > committed {
                    return Err(PageError::Stalled(format!("the cursor's committed bound {through} is beyond the store's {committed}")));
                }
                (next, through)
            }
        };
        let first = g.index.partition_point(|e| e.sequence < start);
        let (mut count, mut bytes) = (0usize, 0u64);
        for e in &g.index[first..] {
            if e.sequence > through || count == PAGE_RECORDS || (count > 0 && bytes + e.len > PAGE_BYTES) {
                break;
            }
            let (record, receipt) = Self::read(file, e)?;
            count += 1;
            bytes += e.len;
            if scope.matches(&record) {
                return Ok(json!({
                    "ok": true,
                    "found": true,
                    "actionId": scope.action_id,
                    "runtimeEpoch": scope.runtime_epoch,
                    "executionResult": record["executionResult"],
                    "receipt": receipt.to_json(),
                }));
            }
        }
        let next = g.index[first + count..].first().filter(|e| e.sequence <= through);
        let next_sequence = next.map_or(through + 1, |e| e.sequence);
        let next_cursor = next.map(|_| encode_cursor(&scope, next_sequence, through));
        Ok(json!({
            "ok": true,
            "found": false,
            "settled": false,
            "hasMore": next.is_some(),
            "nextSequence": next_sequence,
            "throughSequence": through,
            "nextCursor": next_cursor,
        }))
    }

    /// The whole-store lookup a cancel of an inactive action uses.
    pub fn find(&self, scope: Scope<'_>) -> Result<Option<(Value, Receipt)>, PageError> {
        let g = self.inner.lock().unwrap();
        let Some(file) = g.file.as_ref() else { return Err(PageError::Unavailable(g.error.clone().unwrap_or_default())) };
        for e in &g.index {
            let (record, receipt) = Self::read(file, e)?;
            if scope.matches(&record) {
                return Ok(Some((record["executionResult"].clone(), receipt)));
            }
        }
        Ok(None)
    }
}

fn encode_cursor(scope: &Scope<'_>, next_sequence: u64, through: u64) -> String {
    let c = json!({ "v": CURSOR_VERSION, "scope": scope.key(), "nextSequence": next_sequence, "throughSequence": through });
    base64::engine::general_purpose::STANDARD.encode(c.to_string())
}

fn decode_cursor(cursor: &str, scope: &Scope<'_>) -> Result<(u64, u64), PageError> {
    let bad = |m: &str| PageError::InvalidCursor(m.to_string());
    if cursor.is_empty() || cursor.len() > MAX_CURSOR_CHARS {
        return Err(bad("cursor must be 1..2048 characters"));
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(cursor).map_err(|_| bad("cursor is not base64"))?;
    let v: Map<String, Value> = serde_json::from_slice(&bytes).map_err(|_| bad("cursor is not a cursor this Runner issued"))?;
    if v.len() != 4 || v.get("v").and_then(Value::as_u64) != Some(CURSOR_VERSION) {
        return Err(bad("cursor is not a cursor this Runner issued"));
    }
    if v.get("scope").and_then(Value::as_str) != Some(scope.key().as_str()) {
        return Err(bad("cursor belongs to another lookup"));
    }
    let next = v.get("nextSequence").and_then(Value::as_u64).ok_or_else(|| bad("cursor nextSequence is missing"))?;
    let through = v.get("throughSequence").and_then(Value::as_u64).ok_or_else(|| bad("cursor throughSequence is missing"))?;
    if next == 0 || next > through {
        return Err(bad("cursor sequences are out of order"));
    }
    Ok((next, through))
}
