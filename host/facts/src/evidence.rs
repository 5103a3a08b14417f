//! Execution evidence (`aab.execution-evidence/v1`): the record schema (kinds,
//! required fields, platform targets), the envelope and checksum, and the
//! FactStore operations that write and re-verify evidence.
//!
//! Write path: payload → envelope (`schemaVersion, namespace, kind, evidenceId,
//! operationId, committedAtMs`) → redaction → validation of what will be stored
//! → `checksum` = sha256 of the canonical JSON of that body → stored with
//! `checksum` and `persisted:true`. Evidence lives in the stream of its
//! namespace (`evidence.<namespace>`), keyed by operation id, indexed by
//! evidence id. Every read re-verifies the checksum.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::canonical;
use crate::error::FactError;
use crate::profile::{Durability, Stream};
use crate::redaction::{self, Representation};
use crate::store::{Cursor, FactRecord, FactStore, Gap, Prepared};

/// Schema id of every evidence record.
pub const EVIDENCE_SCHEMA: &str = "aab.execution-evidence/v1";
/// Record kinds.
pub const KINDS: &[&str] =
    &["observation", "summary", "plan", "decision", "dispatch-marker", "action-receipt", "checkpoint", "result", "attachment", "response"];
const AGENT_DECISIONS: &[&str] = &["act", "complete", "fail", "inconclusive"];
const MAX_IDENTITY_CHARS: usize = 1024;

/// Evidence namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Namespace {
    Intent,
    Script,
    Response,
}

impl Namespace {
    pub const ALL: [Namespace; 3] = [Namespace::Intent, Namespace::Script, Namespace::Response];

    pub fn as_str(self) -> &'static str {
        match self {
            Namespace::Intent => "intent",
            Namespace::Script => "script",
            Namespace::Response => "response",
        }
    }

    /// `intent | script | response`, else `invalid_argument` (field `namespace`).
    pub fn parse(s: &str) -> Result<Namespace, FactError> {
        Namespace::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| FactError::invalid_argument("namespace", format!("namespace must be intent, script or response, got `{s}`")))
    }

    /// The stream holding this namespace's evidence.
    pub fn stream(self) -> Stream {
        match self {
            Namespace::Intent => Stream::EvidenceIntent,
            Namespace::Script => Stream::EvidenceScript,
            Namespace::Response => Stream::EvidenceResponse,
        }
    }

    /// The fact binding the archive records (`evidence:<namespace>:<operationId>`).
    pub fn target_key(self, operation_id: &str) -> String {
        format!("evidence:{}:{operation_id}", self.as_str())
    }
}

/// What `append_evidence` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct EvidenceReceipt {
    pub evidence_id: String,
    pub sequence: u64,
    /// sha256 hex of the canonical stored body (without `checksum`/`persisted`).
    pub checksum: String,
    pub committed_at_ms: i64,
    pub representation: Representation,
}

/// One evidence record, checksum-verified.
#[derive(Clone, Debug, PartialEq)]
pub struct EvidenceItem {
    pub sequence: u64,
    pub namespace: Namespace,
    pub operation_id: String,
    pub evidence_id: String,
    pub kind: String,
    pub checksum: String,
    /// The stored envelope, including `checksum` and `persisted:true`.
    pub record: Value,
    pub committed_at_ms: i64,
    pub representation: Representation,
}

/// One page of an operation's evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct EvidencePage {
    pub records: Vec<EvidenceItem>,
    pub next_cursor: String,
    pub next_sequence: u64,
    pub has_more: bool,
    pub gap: Option<Gap>,
    pub expired: bool,
}

/// A schema violation: the field and why; `target` marks a platform-target
/// failure (archives report those as `invalid_record_target`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Invalid {
    pub field: String,
    pub reason: String,
    pub target: bool,
}

impl Invalid {
    fn new(field: &str, reason: impl Into<String>) -> Self {
        Invalid { field: field.to_string(), reason: reason.into(), target: false }
    }

    pub(crate) fn into_error(self, code: &'static str, evidence_id: Option<&str>) -> FactError {
        let mut details = json!({ "field": self.field, "reason": self.reason });
        if let Some(id) = evidence_id {
            details["evidenceId"] = json!(id);
        }
        FactError::new(code, format!("evidence field `{}`: {}", self.field, self.reason)).with_details(details)
    }
}

/// sha256 of the canonical JSON of `record` without `checksum` and `persisted`.
pub fn record_checksum(record: &Value) -> String {
    match record {
        Value::Object(m) if m.contains_key("checksum") || m.contains_key("persisted") => {
            let mut body = m.clone();
            body.remove("checksum");
            body.remove("persisted");
            canonical::canonical_sha256(&Value::Object(body))
        }
        other => canonical::canonical_sha256(other),
    }
}

fn safe_int(v: Option<&Value>) -> Option<i64> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    v.and_then(Value::as_i64).filter(|n| (-MAX_SAFE..=MAX_SAFE).contains(n))
}

fn text<'a>(rec: &'a Map<String, Value>, field: &str) -> Result<&'a str, Invalid> {
    match rec.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(Invalid::new(field, "must be a non-empty string")),
    }
}

fn identity<'a>(t: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    match t.get(field) {
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_IDENTITY_CHARS && !s.chars().any(char::is_whitespace) => Ok(s),
        _ => Err(format!("`{field}` must be 1..={MAX_IDENTITY_CHARS} characters without whitespace")),
    }
}

fn platform_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_lowercase()) && s.len() <= 64 && c.all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-' || ch == '_')
}

/// The identity key of a platform target (`<platform>:<JSON array of identity
/// fields>`), or why the target is invalid.
///
/// The rule names no platform: every field but `platform` identifies the target,
/// in key order (a `null` field is the same as an absent one), each an identity
/// string or a non-negative integer. Which fields a platform's targets have, and
/// their finer formats, are the plugin manifest's business (its `targets` and
/// Intent `targetSchema`, validated by the host before anything is recorded), so
/// an archive verifies offline without knowing any plugin.
pub fn target_identity(target: &Value) -> Result<String, String> {
    let t = target.as_object().ok_or("a target must be an object")?;
    let platform = t.get("platform").and_then(Value::as_str).ok_or("`platform` must be a platform name")?;
    if !platform_name(platform) {
        return Err("`platform` must be a platform name (lowercase letters, digits, `-`, `_`; at most 64)".into());
    }
    let mut keys: Vec<&String> = t.keys().filter(|k| *k != "platform" && !t[k.as_str()].is_null()).collect();
    keys.sort();
    let mut ids = Map::new();
    for k in keys {
        let v = match &t[k.as_str()] {
            Value::Number(n) if n.as_u64().is_some() => Value::Number(n.clone()),
            _ => json!(identity(t, k)?),
        };
        ids.insert(k.clone(), v);
    }
    Ok(format!("{platform}:{}", Value::Array(vec![Value::Object(ids)])))
}

fn required_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "observation" => &["operationId", "revision", "target", "provider", "capturedAtMs"],
        "summary" => &["operationId", "revision", "rawTreeId"],
        "plan" => &["operationId", "revision", "planStepId", "actionSpecHash"],
        "decision" => &["decisionId", "operationId", "revision", "basedOnEvidenceIds", "actionSpecHash", "agentDecision"],
        "dispatch-marker" => &["actionId", "operationId", "target", "actionSpecHash"],
        "action-receipt" => &["actionId", "startedAtMs", "completedAtMs", "mechanicalStatus"],
        "checkpoint" => &["operationId", "revision", "stepId"],
        "result" => &["operationId", "revision", "result", "bytes", "sha256", "originalSha256", "representation"],
        "attachment" => &["operationId", "revision", "recordingId", "sequence", "payloadKind", "directory", "file"],
        "response" => &["operationId", "revision", "snapshotBase64"],
        _ => &[],
    }
}

/// Validate a stored (or to-be-stored) evidence body.
/// `archived_unversioned` accepts legacy records without `schemaVersion`.
pub(crate) fn validate(namespace: &str, kind: &str, rec: &Value, archived_unversioned: bool) -> Result<(), Invalid> {
    let rec = rec.as_object().ok_or_else(|| Invalid::new("record", "must be a JSON object"))?;
    if !Namespace::ALL.iter().any(|n| n.as_str() == namespace) {
        return Err(Invalid::new("namespace", "must be intent, script or response"));
    }
    if !KINDS.contains(&kind) {
        return Err(Invalid::new("kind", format!("unknown evidence kind `{kind}`")));
    }
    if (namespace == "response") != (kind == "response") {
        return Err(Invalid::new("kind", "kind `response` belongs to, and only to, namespace `response`"));
    }
    if kind == "result" && namespace != "script" {
        return Err(Invalid::new("kind", "kind `result` belongs to namespace `script`"));
    }
    match rec.get("schemaVersion") {
        Some(Value::String(s)) if s == EVIDENCE_SCHEMA => {}
        None if archived_unversioned => {}
        _ => return Err(Invalid::new("schemaVersion", format!("must be {EVIDENCE_SCHEMA}"))),
    }
    if rec.get("namespace").and_then(Value::as_str) != Some(namespace) {
        return Err(Invalid::new("namespace", "does not match the record's namespace"));
    }
    if rec.get("kind").and_then(Value::as_str) != Some(kind) {
        return Err(Invalid::new("kind", "does not match the record's kind"));
    }
    text(rec, "evidenceId")?;
    if !archived_unversioned && safe_int(rec.get("committedAtMs")).is_none_or(|n| n < 0) {
        return Err(Invalid::new("committedAtMs", "must be a non-negative safe integer"));
    }
    for field in required_fields(kind) {
        if rec.get(*field).is_none_or(Value::is_null) {
            return Err(Invalid::new(field, "is required"));
        }
    }
    if let Some(r) = rec.get("revision")
        && safe_int(Some(r)).is_none_or(|n| n < 0)
    {
        return Err(Invalid::new("revision", "must be a non-negative safe integer"));
    }
    if rec.contains_key("operationId") {
        text(rec, "operationId")?;
    }
    for field in ["target", "observedTarget"] {
        if let Some(t) = rec.get(field) {
            target_identity(t).map_err(|why| Invalid { field: field.to_string(), reason: why, target: true })?;
        }
    }
    match kind {
        "observation" => {
            // Provider names come from plugin manifests; the store checks only their shape.
            if !rec.get("provider").and_then(Value::as_str).is_some_and(platform_name) {
                return Err(Invalid::new("provider", "must be a provider name (lowercase letters, digits, `-`, `_`; at most 64)"));
            }
            if safe_int(rec.get("capturedAtMs")).is_none() {
                return Err(Invalid::new("capturedAtMs", "must be a safe integer"));
            }
        }
        "summary" => {
            text(rec, "rawTreeId")?;
        }
        "plan" => {
            text(rec, "planStepId")?;
            text(rec, "actionSpecHash")?;
        }
        "decision" => {
            text(rec, "decisionId")?;
            text(rec, "actionSpecHash")?;
            let ok = rec.get("basedOnEvidenceIds").and_then(Value::as_array).is_some_and(|ids| ids.iter().all(|i| i.as_str().is_some_and(|s| !s.is_empty())));
            if !ok {
                return Err(Invalid::new("basedOnEvidenceIds", "must be an array of evidence ids"));
            }
            if !rec.get("agentDecision").and_then(Value::as_str).is_some_and(|d| AGENT_DECISIONS.contains(&d)) {
                return Err(Invalid::new("agentDecision", "must be act, complete, fail or inconclusive"));
            }
        }
        "dispatch-marker" => {
            text(rec, "actionId")?;
            text(rec, "actionSpecHash")?;
            if text(rec, "decisionId").is_err() && text(rec, "planStepId").is_err() {
                return Err(Invalid::new("decisionId", "a dispatch marker needs decisionId or planStepId"));
            }
        }
        "action-receipt" => {
            text(rec, "actionId")?;
            text(rec, "mechanicalStatus")?;
            for f in ["startedAtMs", "completedAtMs"] {
                if safe_int(rec.get(f)).is_none() {
                    return Err(Invalid::new(f, "must be a safe integer"));
                }
            }
        }
        "checkpoint" => {
            text(rec, "stepId")?;
        }
        "result" => {
            if safe_int(rec.get("bytes")).is_none_or(|b| b < 1) {
                return Err(Invalid::new("bytes", "must be a positive safe integer"));
            }
            for f in ["sha256", "originalSha256"] {
                if !rec.get(f).and_then(Value::as_str).is_some_and(canonical::is_sha256_hex) {
                    return Err(Invalid::new(f, "must be 64 lowercase hex digits"));
                }
            }
            if !matches!(rec.get("representation").and_then(Value::as_str), Some("original-json" | "redacted-json")) {
                return Err(Invalid::new("representation", "must be original-json or redacted-json"));
            }
        }
        "attachment" => {
            text(rec, "recordingId")?;
            text(rec, "payloadKind")?;
            text(rec, "directory")?;
            let file = text(rec, "file")?;
            if file.contains('/') || file == "." || file == ".." {
                return Err(Invalid::new("file", "must be a plain file name"));
            }
            if safe_int(rec.get("sequence")).is_none_or(|n| n < 0) {
                return Err(Invalid::new("sequence", "must be a non-negative safe integer"));
            }
        }
        "response" => {
            if rec.get("revision").and_then(Value::as_i64) != Some(1) {
                return Err(Invalid::new("revision", "a response record has revision 1"));
            }
            let op = text(rec, "operationId")?;
            let encoded = rec.get("snapshotBase64").and_then(Value::as_str).unwrap_or("");
            check_snapshot(encoded, op).map_err(|why| Invalid::new("snapshotBase64", why))?;
        }
        _ => {}
    }
    Ok(())
}

/// Decode and check a response snapshot (canonical base64 of UTF-8 JSON).
pub(crate) fn check_snapshot(encoded: &str, response_id: &str) -> Result<Value, String> {
    let engine = &base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(encoded).map_err(|_| "is not base64".to_string())?;
    if engine.encode(&bytes) != encoded {
        return Err("is not canonical base64".into());
    }
    let snap: Value = serde_json::from_slice(&bytes).map_err(|_| "does not hold JSON".to_string())?;
    let s = snap.as_object().ok_or("does not hold a JSON object")?;
    if !matches!(s.get("kind").and_then(Value::as_str), Some("json" | "text")) {
        return Err("snapshot kind must be json or text".into());
    }
    if !s.contains_key("value") {
        return Err("snapshot has no value".into());
    }
    if !s.get("execution").is_some_and(Value::is_object) {
        return Err("snapshot execution must be an object".into());
    }
    match s.get("control") {
        Some(Value::Object(c)) if !c.contains_key("source") => {}
        _ => return Err("snapshot control must be an object without source".into()),
    }
    let id = s.get("identity").and_then(Value::as_object).ok_or("snapshot identity is missing")?;
    if id.get("responseId").and_then(Value::as_str) != Some(response_id) {
        return Err("snapshot identity.responseId differs from operationId".into());
    }
    if !id.get("command").is_some_and(Value::is_string) || safe_int(id.get("capturedAtMs")).is_none() {
        return Err("snapshot identity needs command and capturedAtMs".into());
    }
    Ok(snap)
}

fn check_id(field: &str, s: &str) -> Result<(), FactError> {
    if s.is_empty() || s.chars().count() > MAX_IDENTITY_CHARS || s.chars().any(char::is_whitespace) {
        return Err(FactError::invalid_argument(field, format!("`{field}` must be 1..={MAX_IDENTITY_CHARS} characters without whitespace")));
    }
    Ok(())
}

/// Build the stored body (envelope + redaction + validation + checksum).
fn prepare_evidence(
    namespace: Namespace,
    operation_id: &str,
    kind: &str,
    payload: &Value,
    seq: u64,
    committed_at_ms: i64,
) -> Result<(Prepared, String), FactError> {
    let invalid = |field: &str, why: &str| Invalid::new(field, why).into_error("evidence_invalid", None);
    let mut body = payload.as_object().cloned().ok_or_else(|| invalid("payload", "must be a JSON object"))?;
    for reserved in ["checksum", "persisted", "committedAtMs"] {
        if body.contains_key(reserved) {
            return Err(invalid(reserved, "is assigned by the store"));
        }
    }
    for (field, want) in [("namespace", namespace.as_str()), ("kind", kind), ("operationId", operation_id), ("schemaVersion", EVIDENCE_SCHEMA)] {
        if let Some(v) = body.get(field)
            && v.as_str() != Some(want)
        {
            return Err(invalid(field, &format!("must be `{want}` (or omitted)")));
        }
    }
    let evidence_id = match body.get("evidenceId") {
        Some(Value::String(s)) => {
            check_id("evidenceId", s).map_err(|e| FactError { code: "evidence_invalid", ..e })?;
            s.clone()
        }
        Some(_) => return Err(invalid("evidenceId", "must be a string")),
        None => {
            let revision = body.get("revision").map_or_else(|| "-".to_string(), |r| r.to_string());
            format!("{}:{kind}:{operation_id}:{revision}:{seq}", namespace.as_str())
        }
    };
    body.insert("schemaVersion".into(), json!(EVIDENCE_SCHEMA));
    body.insert("namespace".into(), json!(namespace.as_str()));
    body.insert("kind".into(), json!(kind));
    body.insert("operationId".into(), json!(operation_id));
    body.insert("evidenceId".into(), json!(evidence_id));
    body.insert("committedAtMs".into(), json!(committed_at_ms));
    // The identity fields are chosen by the host, index the record and bind it
    // to its operation; redaction never rewrites them.
    let mut rest = body.clone();
    let identity: Vec<(String, Value)> =
        ["schemaVersion", "namespace", "kind", "operationId", "evidenceId"].iter().filter_map(|k| rest.remove(*k).map(|v| (k.to_string(), v))).collect();
    let original = Value::Object(body);
    let mut redacted = redaction::redact(&Value::Object(rest));
    if let Value::Object(m) = &mut redacted.value {
        m.extend(identity);
    }
    validate(namespace.as_str(), kind, &redacted.value, false).map_err(|e| e.into_error("evidence_invalid", Some(&evidence_id)))?;
    let checksum = canonical::canonical_sha256(&redacted.value);
    let original_sha256 = if redacted.changed() { canonical::canonical_sha256(&original) } else { checksum.clone() };
    let mut stored = redacted.value;
    if let Value::Object(m) = &mut stored {
        m.insert("checksum".into(), json!(checksum));
        m.insert("persisted".into(), json!(true));
    }
    let prepared = Prepared { text: canonical::to_storage_string(&stored), original_sha256, redacted_paths: redacted.paths, evidence_id: Some(evidence_id) };
    Ok((prepared, checksum))
}

/// Re-verify a stored evidence record: checksum, and binding to the stream
/// (namespace) and key (operation) it was found under.
pub(crate) fn verified_item(fact: FactRecord) -> Result<EvidenceItem, FactError> {
    let seq = fact.sequence;
    let mismatch = |why: &str, id: Option<&str>| {
        FactError::new("checksum_mismatch", format!("evidence record {seq} failed verification: {why}"))
            .with_details(json!({ "sequence": seq, "evidenceId": id }))
    };
    let rec = &fact.record;
    let evidence_id = rec.get("evidenceId").and_then(Value::as_str).ok_or_else(|| mismatch("no evidenceId", None))?.to_string();
    let checksum = rec.get("checksum").and_then(Value::as_str).ok_or_else(|| mismatch("no checksum", Some(&evidence_id)))?.to_string();
    if record_checksum(rec) != checksum {
        return Err(mismatch("content does not match its checksum", Some(&evidence_id)));
    }
    let namespace = Namespace::ALL.into_iter().find(|n| n.stream() == fact.stream).ok_or_else(|| mismatch("not an evidence stream", Some(&evidence_id)))?;
    let operation_id = rec.get("operationId").and_then(Value::as_str).unwrap_or_default().to_string();
    if rec.get("namespace").and_then(Value::as_str) != Some(namespace.as_str()) || fact.key.as_deref() != Some(operation_id.as_str()) {
        return Err(mismatch("record is bound to another namespace or operation", Some(&evidence_id)));
    }
    let kind = rec.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    Ok(EvidenceItem {
        sequence: seq,
        namespace,
        operation_id,
        evidence_id,
        kind,
        checksum,
        committed_at_ms: fact.committed_at_ms,
        representation: fact.representation,
        record: fact.record,
    })
}

impl FactStore {
    /// Validate, redact, checksum and durably append one evidence record.
    ///
    /// `payload` holds the kind's fields; the store adds `schemaVersion`,
    /// `namespace`, `kind`, `operationId`, `committedAtMs` and (unless the
    /// payload names one) the evidence id
    /// `<namespace>:<kind>:<operationId>:<revision>:<sequence>`.
    ///
    /// Errors: `invalid_argument` (operation id), `evidence_invalid`
    /// (`details.field`), `duplicate_evidence_id`, `payload_too_large`, store
    /// errors.
    pub fn append_evidence(
        &self,
        namespace: Namespace,
        operation_id: &str,
        kind: &str,
        payload: &Value,
        durability: Durability,
    ) -> Result<EvidenceReceipt, FactError> {
        check_id("operationId", operation_id)?;
        let mut checksum = String::new();
        let (receipt, prepared) = self.append_prepared(namespace.stream(), Some(operation_id), durability, |seq, at| {
            let (prepared, sum) = prepare_evidence(namespace, operation_id, kind, payload, seq, at)?;
            checksum = sum;
            Ok(prepared)
        })?;
        Ok(EvidenceReceipt {
            evidence_id: prepared.evidence_id.unwrap_or_default(),
            sequence: receipt.sequence,
            checksum,
            committed_at_ms: receipt.committed_at_ms,
            representation: receipt.representation,
        })
    }

    /// Page through one operation's evidence in commit order; every record is
    /// checksum-verified (`checksum_mismatch` on tampering).
    pub fn read_evidence(&self, namespace: Namespace, operation_id: &str, cursor: &Cursor, limit: usize) -> Result<EvidencePage, FactError> {
        check_id("operationId", operation_id)?;
        let page = self.read_key(namespace.stream(), operation_id, cursor, limit)?;
        let records = page.records.into_iter().map(verified_item).collect::<Result<Vec<_>, _>>()?;
        Ok(EvidencePage {
            records,
            next_cursor: page.next_cursor,
            next_sequence: page.next_sequence,
            has_more: page.has_more,
            gap: page.gap,
            expired: page.expired,
        })
    }

    /// One evidence record by id (`not_found` when unknown or evicted,
    /// `checksum_mismatch` when tampered).
    pub fn get_evidence(&self, evidence_id: &str) -> Result<EvidenceItem, FactError> {
        let row = self
            .row_by_evidence_id(evidence_id)?
            .ok_or_else(|| FactError::new("not_found", format!("no retained evidence `{evidence_id}`")).with_details(json!({ "evidenceId": evidence_id })))?;
        let item = verified_item(row.into_record()?)?;
        if item.evidence_id != evidence_id {
            return Err(FactError::new("checksum_mismatch", format!("evidence index points `{evidence_id}` at record `{}`", item.evidence_id))
                .with_details(json!({ "evidenceId": evidence_id, "sequence": item.sequence })));
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_identities() {
        assert_eq!(
            target_identity(&json!({"platform": "phone", "serial": "emu-1", "packageName": "com.x.app"})).unwrap(),
            r#"phone:[{"packageName":"com.x.app","serial":"emu-1"}]"#
        );
        // A null field is an absent one: the same page with and without `targetId: null`.
        assert_eq!(
            target_identity(&json!({"platform": "page", "sessionId": "s", "runtimeEpoch": 3, "targetId": null})).unwrap(),
            target_identity(&json!({"platform": "page", "sessionId": "s", "runtimeEpoch": 3})).unwrap()
        );
        assert!(target_identity(&json!({"platform": "phone", "serial": "a b", "packageName": "com.x"})).is_err());
        assert!(target_identity(&json!({"platform": "page", "sessionId": "s", "runtimeEpoch": -1})).is_err());
        // Another platform: every other field identifies it, in key order.
        assert_eq!(target_identity(&json!({"platform": "tv", "screen": "s1", "app": "a", "n": 3})).unwrap(), r#"tv:[{"app":"a","n":3,"screen":"s1"}]"#);
        assert_eq!(target_identity(&json!({"platform": "tv"})).unwrap(), "tv:[{}]");
        assert!(target_identity(&json!({"platform": "tv", "screen": "a b"})).is_err());
        assert!(target_identity(&json!({"platform": "TV"})).is_err());
        assert!(target_identity(&json!({"platform": "tv", "screen": {"x": 1}})).is_err());
    }

    #[test]
    fn checksum_ignores_checksum_and_persisted() {
        let a = json!({"a": 1});
        let b = json!({"a": 1, "checksum": "x", "persisted": true});
        assert_eq!(record_checksum(&a), record_checksum(&b));
    }
}
