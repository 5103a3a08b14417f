//! Recorded payloads (`recordingDir`, schema `aab.recorded-payload/v1`): one
//! fsynced, redacted JSON document per recorded call (`<sequence>.json`) plus
//! copied, signature-checked screenshots (`<sequence>-<n>.png`), each bound to
//! the operation by an `attachment` evidence record that pins its size and
//! sha256. Archives v2 carry these files; verify re-hashes them.
//!
//! Any failure latches: every later `record` returns the same error, so a
//! Script or Intent cannot silently continue with a partial recording.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::canonical;
use crate::error::FactError;
use crate::evidence::{EvidenceReceipt, Namespace};
use crate::fsutil;
use crate::profile::Durability;
use crate::redaction;
use crate::store::FactStore;

pub const RECORDED_PAYLOAD_SCHEMA: &str = "aab.recorded-payload/v1";
/// Most attachments (documents + screenshots) per recording.
pub const MAX_ATTACHMENTS: u64 = 10_000;
/// Largest recorded file.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Largest total of one recording.
pub const MAX_RECORDING_BYTES: u64 = 256 * 1024 * 1024;

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A screenshot to copy into the recording; `sha256` is the digest the
/// capture issued, and the copy must match it.
#[derive(Clone, Debug)]
pub struct Screenshot {
    pub path: PathBuf,
    pub sha256: String,
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct RecordedCall<'a> {
    /// Caller's sequence (file name); each value once per recording.
    pub sequence: u64,
    pub revision: u64,
    /// `script-call`, `script-assertion` or `intent-capture`.
    pub kind: &'a str,
    pub target: Option<&'a Value>,
    pub data: &'a Value,
    pub screenshots: &'a [Screenshot],
    /// Evidence id this recording belongs to (e.g. the observation).
    pub parent_fact_id: Option<&'a str>,
}

/// An open recording directory.
#[derive(Debug)]
pub struct Recording {
    dir: PathBuf,
    namespace: Namespace,
    operation_id: String,
    recording_id: String,
    attachments: u64,
    bytes: u64,
    latched: Option<FactError>,
}

fn uuid_v4() -> Result<String, FactError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| FactError::new("recording_failed", format!("no OS randomness: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = canonical::hex(&b);
    Ok(format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]))
}

impl Recording {
    /// Create the recording directory: its parent must exist, it must not.
    pub fn create(dir: &Path, namespace: Namespace, operation_id: &str) -> Result<Recording, FactError> {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) {
            return Err(FactError::invalid_argument("recordingDir", "the parent of recordingDir must be an existing directory"));
        }
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(FactError::new("output_exists", format!("{} already exists", dir.display())).with_details(json!({ "field": "recordingDir" })));
            }
            Err(e) => return Err(FactError::io("recording_failed", &format!("cannot create {}", dir.display()), e)),
        }
        let dir = std::fs::canonicalize(dir).map_err(|e| FactError::io("recording_failed", "cannot resolve recordingDir", e))?;
        let _ = fsutil::sync_dir(parent);
        Ok(Recording { dir, namespace, operation_id: operation_id.to_string(), recording_id: uuid_v4()?, attachments: 0, bytes: 0, latched: None })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn recording_id(&self) -> &str {
        &self.recording_id
    }

    /// Write one call's document (and screenshots) and append their
    /// `attachment` evidence (sync). Returns the receipts, document first.
    pub fn record(&mut self, store: &FactStore, call: &RecordedCall<'_>) -> Result<Vec<EvidenceReceipt>, FactError> {
        if let Some(e) = &self.latched {
            return Err(e.clone());
        }
        let result = self.record_inner(store, call);
        if let Err(e) = &result {
            self.latched = Some(e.clone());
        }
        result
    }

    fn limit(&self, files: u64, bytes: u64) -> Result<(), FactError> {
        if self.attachments + files > MAX_ATTACHMENTS || self.bytes + bytes > MAX_RECORDING_BYTES {
            return Err(FactError::new("recording_limit_exceeded", "the recording exceeds its attachment or byte limit")
                .with_details(json!({ "maxAttachments": MAX_ATTACHMENTS, "maxBytes": MAX_RECORDING_BYTES })));
        }
        Ok(())
    }

    fn record_inner(&mut self, store: &FactStore, call: &RecordedCall<'_>) -> Result<Vec<EvidenceReceipt>, FactError> {
        let seq = call.sequence;
        let mut shots = Vec::new();
        for (n, shot) in call.screenshots.iter().enumerate() {
            let bytes = fsutil::read_regular_no_follow(&shot.path, MAX_FILE_BYTES)
                .map_err(|e| FactError::new("recording_payload_invalid", format!("cannot read screenshot {}: {e:?}", shot.path.display())))?;
            let ihdr = bytes.len() >= 16 && &bytes[12..16] == b"IHDR";
            if !bytes.starts_with(PNG_SIGNATURE) || !ihdr {
                return Err(FactError::new("recording_payload_invalid", format!("{} is not a PNG", shot.path.display())));
            }
            let sha = canonical::sha256_hex(&bytes);
            if sha != shot.sha256 {
                return Err(FactError::new("recording_payload_invalid", format!("{} does not match its issued sha256", shot.path.display())));
            }
            shots.push((format!("{seq}-{}.png", n + 1), bytes, sha));
        }
        let original_data = call.data;
        let redacted = redaction::redact(original_data);
        let screenshots: Vec<Value> = shots.iter().map(|(f, b, s)| json!({ "file": f, "bytes": b.len(), "sha256": s })).collect();
        let doc = |data: &Value| {
            json!({
                "schemaVersion": RECORDED_PAYLOAD_SCHEMA,
                "namespace": self.namespace.as_str(),
                "operationId": self.operation_id,
                "recordingId": self.recording_id,
                "sequence": seq,
                "kind": call.kind,
                "target": call.target,
                "data": data,
                "screenshots": screenshots,
            })
        };
        let stored_doc = doc(&redacted.value);
        let mut text = canonical::to_canonical_string(&stored_doc);
        text.push('\n');
        let total: u64 = text.len() as u64 + shots.iter().map(|s| s.1.len() as u64).sum::<u64>();
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(FactError::new("recording_limit_exceeded", "a recorded document exceeds 16 MiB"));
        }
        self.limit(1 + shots.len() as u64, total)?;

        let file = format!("{seq}.json");
        let io = |e: std::io::Error| FactError::io("recording_failed", "cannot write the recording", e);
        fsutil::write_new_file(&self.dir.join(&file), text.as_bytes()).map_err(io)?;
        for (name, bytes, _) in &shots {
            fsutil::write_new_file(&self.dir.join(name), bytes).map_err(io)?;
        }
        fsutil::sync_dir(&self.dir).map_err(io)?;
        self.attachments += 1 + shots.len() as u64;
        self.bytes += total;

        let ns = self.namespace.as_str();
        let directory = self.dir.display().to_string();
        let doc_id = format!("{ns}:attachment:{}:{}:{seq}", self.operation_id, self.recording_id);
        let mut payload = json!({
            "evidenceId": doc_id,
            "revision": call.revision,
            "recordingId": self.recording_id,
            "sequence": seq,
            "payloadKind": "json",
            "recordedKind": call.kind,
            "directory": directory,
            "file": file,
            "bytes": text.len(),
            "sha256": canonical::sha256_hex(text.as_bytes()),
            "representation": if redacted.changed() { "redacted-json" } else { "original-json" },
            "originalSha256": canonical::canonical_sha256(&doc(original_data)),
            "dataSha256": canonical::canonical_sha256(&redacted.value),
        });
        if let Some(p) = call.parent_fact_id {
            payload["parentFactId"] = json!(p);
        }
        let mut receipts = vec![store.append_evidence(self.namespace, &self.operation_id, "attachment", &payload, Durability::Sync)?];
        for (name, bytes, sha) in &shots {
            let payload = json!({
                "evidenceId": format!("{doc_id}-{}", &name[name.find('-').map_or(0, |i| i + 1)..name.len() - 4]),
                "revision": call.revision,
                "recordingId": self.recording_id,
                "sequence": seq,
                "payloadKind": "png",
                "directory": directory,
                "file": name,
                "bytes": bytes.len(),
                "sha256": sha,
                "representation": "original-bytes",
                "originalSha256": sha,
                "parentFactId": doc_id,
            });
            receipts.push(store.append_evidence(self.namespace, &self.operation_id, "attachment", &payload, Durability::Sync)?);
        }
        Ok(receipts)
    }
}
