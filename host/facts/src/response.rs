//! Response snapshots (the storage half of `control.source` and `response
//! read`): a public reply's snapshot is kept as `response` evidence in the
//! `response` namespace, and read back only through its unchanged ref.
//!
//! The snapshot is the canonical JSON of `{kind, value, execution, control
//! (without source), identity{responseId, command, capturedAtMs}}`, at most
//! 8 MiB, stored as canonical base64 in `snapshotBase64`. Like every stored
//! value it is redacted first; `representation.redacted` then tells the reader
//! that the bytes are not the original ones.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::canonical;
use crate::error::FactError;
use crate::evidence::{self, Namespace};
use crate::profile::Durability;
use crate::redaction::Representation;
use crate::store::FactStore;

/// Largest snapshot (canonical JSON bytes, before base64).
pub const MAX_SNAPSHOT_BYTES: usize = 8 * 1024 * 1024;

/// `control.source.ref`: `{namespace:"response", evidenceId, checksum, operationId}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseRef {
    pub evidence_id: String,
    pub checksum: String,
    /// The response id.
    pub operation_id: String,
}

impl ResponseRef {
    pub fn to_json(&self) -> Value {
        json!({ "namespace": "response", "evidenceId": self.evidence_id, "checksum": self.checksum, "operationId": self.operation_id })
    }
}

/// A snapshot read back and verified.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedResponse {
    pub snapshot: Value,
    pub reference: ResponseRef,
    pub committed_at_ms: i64,
    pub representation: Representation,
}

/// Persist a snapshot (`identity.responseId` must equal `response_id`).
/// Errors: `snapshot_too_large`, `evidence_invalid`, `payload_too_large`,
/// store errors.
pub fn save_snapshot(store: &FactStore, response_id: &str, snapshot: &Value, durability: Durability) -> Result<ResponseRef, FactError> {
    let text = canonical::to_canonical_string(snapshot);
    if text.len() > MAX_SNAPSHOT_BYTES {
        return Err(FactError::new("snapshot_too_large", format!("the response snapshot is {} bytes, over {MAX_SNAPSHOT_BYTES}", text.len()))
            .with_details(json!({ "bytes": text.len(), "limitBytes": MAX_SNAPSHOT_BYTES })));
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    let receipt = store.append_evidence(Namespace::Response, response_id, "response", &json!({ "revision": 1, "snapshotBase64": encoded }), durability)?;
    Ok(ResponseRef { evidence_id: receipt.evidence_id, checksum: receipt.checksum, operation_id: response_id.to_string() })
}

/// Read the snapshot an unchanged ref points at. Errors:
/// `response_namespace_mismatch`, `response_not_found` (unknown or evicted),
/// `response_checksum_mismatch`, `response_identity_mismatch`,
/// `response_invalid_snapshot`, `response_snapshot_too_large`, store errors.
pub fn read_snapshot(store: &FactStore, reference: &Value) -> Result<SavedResponse, FactError> {
    let field = |f: &str| reference.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
    if field("namespace") != Some("response") {
        return Err(
            FactError::new("response_namespace_mismatch", "the ref does not name the response namespace").with_details(json!({ "field": "ref.namespace" }))
        );
    }
    let (Some(evidence_id), Some(checksum), Some(operation_id)) = (field("evidenceId"), field("checksum"), field("operationId")) else {
        return Err(FactError::invalid_argument("ref", "ref needs evidenceId, checksum and operationId"));
    };
    let item = store.get_evidence(evidence_id).map_err(|e| match e.code {
        "not_found" => FactError { code: "response_not_found", ..e },
        "checksum_mismatch" => FactError { code: "response_checksum_mismatch", ..e },
        _ => e,
    })?;
    if item.namespace != Namespace::Response {
        return Err(FactError::new("response_namespace_mismatch", format!("`{evidence_id}` is {} evidence", item.namespace.as_str())));
    }
    if item.checksum != checksum {
        return Err(FactError::new("response_checksum_mismatch", "the stored response does not match the ref's checksum")
            .with_details(json!({ "expected": checksum, "actual": item.checksum })));
    }
    if item.operation_id != operation_id {
        return Err(FactError::new("response_identity_mismatch", "the stored response belongs to another response id")
            .with_details(json!({ "expected": operation_id, "actual": item.operation_id })));
    }
    let encoded = item.record.get("snapshotBase64").and_then(Value::as_str).unwrap_or_default();
    if encoded.len() > MAX_SNAPSHOT_BYTES.div_ceil(3) * 4 {
        return Err(FactError::new("response_snapshot_too_large", "the stored snapshot exceeds 8 MiB"));
    }
    let snapshot =
        evidence::check_snapshot(encoded, operation_id).map_err(|why| FactError::new("response_invalid_snapshot", format!("snapshotBase64 {why}")))?;
    Ok(SavedResponse {
        snapshot,
        reference: ResponseRef { evidence_id: item.evidence_id, checksum: item.checksum, operation_id: item.operation_id },
        committed_at_ms: item.committed_at_ms,
        representation: item.representation,
    })
}
