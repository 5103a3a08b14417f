//! Evidence archives: export one operation's retained evidence to a directory
//! (`records.json` + `manifest.json`, schema `aab.evidence-archive/v1`, or `/v2`
//! with recorded payload files) and verify such a directory offline.
//!
//! Trust chain: the caller keeps `manifestSha256`; the manifest pins the size
//! and sha256 of `records.json` (and of every payload file); each record
//! carries its own checksum. `verify` needs no store and no runtime: it
//! re-runs the same analysis export ran (sequence order, namespace/operation
//! binding, schema, checksums, references, counts, targets, coverage) and
//! requires every analysed manifest field to match.
//!
//! Both files are written with exclusive create into a directory that export
//! creates itself; the manifest is written last. Nothing in an archive depends
//! on where it lives, so a moved or copied archive verifies unchanged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::canonical::{self, is_sha256_hex};
use crate::error::FactError;
use crate::evidence::{self, Namespace, record_checksum, target_identity};
use crate::fsutil::{self, NoFollowError};
use crate::store::{FactStore, now_ms};

pub const ARCHIVE_SCHEMA_V1: &str = "aab.evidence-archive/v1";
pub const ARCHIVE_SCHEMA_V2: &str = "aab.evidence-archive/v2";
pub const RECORDS_FILE: &str = "records.json";
pub const MANIFEST_FILE: &str = "manifest.json";
/// Most records one archive holds.
pub const MAX_RECORDS: usize = 10_000;
/// Largest `records.json`.
pub const MAX_RECORDS_BYTES: u64 = 128 * 1024 * 1024;
/// Largest `manifest.json`.
pub const MAX_MANIFEST_BYTES: u64 = 2 * 1024 * 1024;
/// Largest recorded payload file.
pub const MAX_PAYLOAD_BYTES: u64 = 16 * 1024 * 1024;

const EXCLUSIONS: &[&str] = &["capture-streams", "command-history", "device-side-facts", "evicted-records"];

/// What a successful export produced. Keep `manifest_sha256`: `verify` needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportReport {
    pub archive_dir: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest_sha256: String,
    pub schema_version: &'static str,
    pub namespace: Namespace,
    pub operation_id: String,
    pub record_count: usize,
    /// File names inside `archive_dir`, manifest last.
    pub files: Vec<String>,
    pub targets: Value,
    pub coverage: Value,
    pub recorded_payloads: Option<Value>,
}

impl ExportReport {
    /// The contract's export response body.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "ok": true,
            "archiveDir": self.archive_dir.display().to_string(),
            "manifestPath": self.manifest_path.display().to_string(),
            "manifestSha256": self.manifest_sha256,
            "namespace": self.namespace.as_str(),
            "operationId": self.operation_id,
            "recordCount": self.record_count,
            "targets": self.targets,
            "coverage": self.coverage,
        });
        if let Some(p) = &self.recorded_payloads {
            v["recordedPayloads"] = p.clone();
        }
        v
    }
}

/// What a successful verification established.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    pub archive_dir: PathBuf,
    pub manifest_sha256: String,
    pub schema_version: String,
    pub namespace: Namespace,
    pub operation_id: String,
    pub record_count: usize,
    pub first_global_seq: u64,
    pub last_global_seq: u64,
    pub store_id: String,
    pub through_global_seq: u64,
    pub targets: Value,
    pub coverage: Value,
    pub recorded_payloads: Option<Value>,
}

impl VerifyReport {
    /// The contract's verify response body (`integrity: "verified"`).
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "ok": true,
            "integrity": "verified",
            "archiveDir": self.archive_dir.display().to_string(),
            "manifestSha256": self.manifest_sha256,
            "schemaVersion": self.schema_version,
            "namespace": self.namespace.as_str(),
            "operationId": self.operation_id,
            "recordCount": self.record_count,
            "firstGlobalSeq": self.first_global_seq,
            "lastGlobalSeq": self.last_global_seq,
            "source": { "storeId": self.store_id, "throughGlobalSeq": self.through_global_seq },
            "targets": self.targets,
            "coverage": self.coverage,
        });
        if let Some(p) = &self.recorded_payloads {
            v["recordedPayloads"] = p.clone();
        }
        v
    }
}

fn err(code: &'static str, message: impl Into<String>, details: Value) -> FactError {
    FactError::new(code, message).with_details(details)
}

/// A payload file an archive (v2) must contain.
#[derive(Clone, Debug, PartialEq)]
struct PayloadFile {
    path: String,
    bytes: u64,
    sha256: String,
    evidence_ids: Vec<String>,
    source: PathBuf,
}

/// Everything export writes into the manifest that verify recomputes.
struct Analysis {
    record_count: usize,
    first_seq: u64,
    last_seq: u64,
    counts: Value,
    targets: Value,
    coverage: Value,
    payloads: Vec<PayloadFile>,
}

impl Analysis {
    fn recorded_payloads(&self) -> Value {
        let files: Vec<Value> =
            self.payloads.iter().map(|p| json!({ "path": p.path, "bytes": p.bytes, "sha256": p.sha256, "evidenceIds": p.evidence_ids })).collect();
        json!({ "count": self.payloads.len(), "bytes": self.payloads.iter().map(|p| p.bytes).sum::<u64>(), "files": files })
    }
}

fn str_field<'a>(v: &'a Value, f: &str) -> Option<&'a str> {
    v.get(f).and_then(Value::as_str)
}

/// The analysis shared by export and verify. `facts` are archived facts
/// (`{globalSeq, stream, targetKey, runtimeEpoch, actionId, committedAtMs,
/// representation, payload}`) in file order.
fn analyse(namespace: Namespace, operation_id: &str, through_seq: u64, facts: &[Value], with_payloads: bool) -> Result<Analysis, FactError> {
    let target_key = namespace.target_key(operation_id);
    let mut last: u64 = 0;
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut raw_trees: HashMap<&str, usize> = HashMap::new();
    let mut decisions: HashMap<&str, usize> = HashMap::new();
    let mut markers: HashMap<&str, usize> = HashMap::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut targets: BTreeSet<(String, String)> = BTreeSet::new();

    // Pass 1: per-record checks and indexes.
    for (i, fact) in facts.iter().enumerate() {
        let at = |extra: Value| {
            let mut d = json!({ "index": i });
            if let (Value::Object(d), Value::Object(e)) = (&mut d, extra) {
                d.extend(e);
            }
            d
        };
        let seq = fact.get("globalSeq").and_then(Value::as_u64).filter(|s| *s > last && *s <= through_seq && *s > 0).ok_or_else(|| {
            err(
                "invalid_record_sequence",
                "records are not in strictly increasing globalSeq order within the snapshot",
                at(json!({ "globalSeq": fact.get("globalSeq") })),
            )
        })?;
        last = seq;
        let payload = fact
            .get("payload")
            .filter(|p| p.is_object())
            .ok_or_else(|| err("invalid_evidence_record", "an archived fact has no payload object", at(json!({}))))?;
        let evidence_id = str_field(payload, "evidenceId").unwrap_or_default();
        if str_field(payload, "namespace") != Some(namespace.as_str()) || str_field(payload, "operationId") != Some(operation_id) {
            return Err(err("record_scope_mismatch", "a record belongs to another namespace or operation", at(json!({ "evidenceId": evidence_id }))));
        }
        if str_field(fact, "stream") != Some(namespace.stream().as_str())
            || str_field(fact, "targetKey") != Some(target_key.as_str())
            || str_field(fact, "runtimeEpoch") != Some(operation_id)
            || str_field(fact, "actionId") != Some(evidence_id)
        {
            return Err(err(
                "fact_binding_mismatch",
                "a fact's stream, targetKey, runtimeEpoch or actionId does not bind it to its record",
                at(json!({ "evidenceId": evidence_id })),
            ));
        }
        if payload.get("persisted") != Some(&Value::Bool(true)) {
            return Err(err("invalid_evidence_record", "a record is not marked persisted", at(json!({ "evidenceId": evidence_id }))));
        }
        if fact.get("representation").is_some_and(|r| serde_json::from_value::<crate::redaction::Representation>(r.clone()).is_err()) {
            return Err(err("invalid_evidence_record", "a record's representation declaration is malformed", at(json!({ "evidenceId": evidence_id }))));
        }
        if ids.insert(evidence_id, i).is_some() {
            return Err(err("duplicate_evidence_id", format!("evidence id `{evidence_id}` appears twice"), at(json!({ "evidenceId": evidence_id }))));
        }
        let kind = str_field(payload, "kind").unwrap_or_default();
        let unversioned = payload.get("schemaVersion").is_none();
        if let Err(invalid) = evidence::validate(namespace.as_str(), kind, payload, unversioned) {
            let code = if invalid.target { "invalid_record_target" } else { "invalid_evidence_record" };
            return Err(invalid.into_error(code, Some(evidence_id)));
        }
        if str_field(payload, "checksum") != Some(record_checksum(payload).as_str()) {
            return Err(err(
                "record_checksum_mismatch",
                format!("record `{evidence_id}` does not match its checksum"),
                at(json!({ "evidenceId": evidence_id })),
            ));
        }
        *counts.entry(kind.to_string()).or_default() += 1;
        match kind {
            "observation" => {
                if let Some(id) = str_field(payload, "rawTreeId")
                    && raw_trees.insert(id, i).is_some()
                {
                    return Err(err(
                        "ambiguous_evidence_reference",
                        format!("rawTreeId `{id}` names two observations"),
                        at(json!({ "field": "rawTreeId", "value": id })),
                    ));
                }
            }
            "decision" => {
                let id = str_field(payload, "decisionId").unwrap_or_default();
                if decisions.insert(id, i).is_some() {
                    return Err(err(
                        "ambiguous_evidence_reference",
                        format!("decisionId `{id}` names two decisions"),
                        at(json!({ "field": "decisionId", "value": id })),
                    ));
                }
            }
            "dispatch-marker" => {
                let id = str_field(payload, "actionId").unwrap_or_default();
                if markers.insert(id, i).is_some() {
                    return Err(err(
                        "ambiguous_evidence_reference",
                        format!("actionId `{id}` names two dispatch markers"),
                        at(json!({ "field": "actionId", "value": id })),
                    ));
                }
            }
            _ => {}
        }
        for (field, role) in
            [("target", if kind == "dispatch-marker" { "dispatch" } else { "owner" }), ("observedTarget", "observed"), ("foregroundTarget", "foreground")]
        {
            if let Some(t) = payload.get(field) {
                let identity = target_identity(t).map_err(|why| err("invalid_record_target", why, at(json!({ "evidenceId": evidence_id, "field": field }))))?;
                targets.insert((role.to_string(), identity));
            }
        }
    }

    // Pass 2: references. A reference to a later record or a contradicting
    // binding fails; a reference to a record outside the archive only makes
    // the closure partial.
    let mut missing: Vec<Value> = Vec::new();
    let payload_of = |j: usize| &facts[j]["payload"];
    for (i, fact) in facts.iter().enumerate() {
        let p = &fact["payload"];
        let evidence_id = str_field(p, "evidenceId").unwrap_or_default();
        let kind = str_field(p, "kind").unwrap_or_default();
        let later = |field: &str, value: &str| {
            err(
                "invalid_evidence_references",
                format!("`{evidence_id}`.{field} references `{value}`, which is not an earlier record"),
                json!({ "evidenceId": evidence_id, "field": field, "value": value }),
            )
        };
        let binding = |field: &str, value: &str, why: &str| {
            err(
                "invalid_reference_binding",
                format!("`{evidence_id}`.{field} = `{value}`: {why}"),
                json!({ "evidenceId": evidence_id, "field": field, "value": value }),
            )
        };
        let mut refs: Vec<(&str, &str)> = Vec::new();
        if kind == "decision" {
            for v in p["basedOnEvidenceIds"].as_array().into_iter().flatten() {
                refs.push(("basedOnEvidenceIds", v.as_str().unwrap_or_default()));
            }
        }
        if let Some(parent) = str_field(p, "parentFactId") {
            refs.push(("parentFactId", parent));
        }
        for (field, value) in refs {
            match ids.get(value) {
                Some(&j) if j < i => {}
                Some(_) => return Err(later(field, value)),
                None => missing.push(json!({ "evidenceId": evidence_id, "field": field, "value": value })),
            }
        }
        match kind {
            "summary" => {
                let raw = str_field(p, "rawTreeId").unwrap_or_default();
                match raw_trees.get(raw) {
                    Some(&j) if j < i => {
                        if payload_of(j).get("revision") != p.get("revision") {
                            return Err(binding("rawTreeId", raw, "the observation has another revision"));
                        }
                    }
                    Some(_) => return Err(later("rawTreeId", raw)),
                    None => missing.push(json!({ "evidenceId": evidence_id, "field": "rawTreeId", "value": raw })),
                }
            }
            "dispatch-marker" => {
                if let Some(d) = str_field(p, "decisionId") {
                    match decisions.get(d) {
                        Some(&j) if j < i => {
                            let dp = payload_of(j);
                            if dp.get("revision") != p.get("revision") || dp.get("actionSpecHash") != p.get("actionSpecHash") {
                                return Err(binding("decisionId", d, "the decision has another revision or actionSpecHash"));
                            }
                        }
                        Some(_) => return Err(later("decisionId", d)),
                        None => missing.push(json!({ "evidenceId": evidence_id, "field": "decisionId", "value": d })),
                    }
                }
            }
            "action-receipt" => {
                let a = str_field(p, "actionId").unwrap_or_default();
                match markers.get(a) {
                    Some(&j) if j < i => {
                        if let Some(t) = p.get("target") {
                            let mine = target_identity(t).ok();
                            let theirs = payload_of(j).get("target").and_then(|t| target_identity(t).ok());
                            if mine != theirs {
                                return Err(binding("actionId", a, "the dispatch marker has another target"));
                            }
                        }
                    }
                    Some(_) => return Err(later("actionId", a)),
                    None => missing.push(json!({ "evidenceId": evidence_id, "field": "actionId", "value": a })),
                }
            }
            "checkpoint" => {
                if let Some(r) = p.get("resultRef").filter(|r| r.is_object()) {
                    let rid = str_field(r, "evidenceId").unwrap_or_default();
                    match ids.get(rid) {
                        Some(&j) if j < i => {
                            let rp = payload_of(j);
                            let same = str_field(rp, "kind") == Some("result")
                                && ["bytes", "sha256", "originalSha256", "representation"].iter().all(|f| rp.get(*f) == r.get(*f));
                            if !same {
                                return Err(binding("resultRef", rid, "the result record differs (bytes, sha256, originalSha256 or representation)"));
                            }
                        }
                        Some(_) => return Err(later("resultRef", rid)),
                        None => missing.push(json!({ "evidenceId": evidence_id, "field": "resultRef", "value": rid })),
                    }
                }
            }
            _ => {}
        }
    }

    // Recorded payloads referenced by attachments.
    let mut payloads: BTreeMap<String, PayloadFile> = BTreeMap::new();
    let mut external: Vec<Value> = Vec::new();
    for fact in facts {
        let p = &fact["payload"];
        if str_field(p, "kind") != Some("attachment") {
            continue;
        }
        let evidence_id = str_field(p, "evidenceId").unwrap_or_default().to_string();
        let directory = str_field(p, "directory").unwrap_or_default();
        let file = str_field(p, "file").unwrap_or_default();
        if !with_payloads {
            external.push(json!({ "evidenceId": evidence_id, "directory": directory, "file": file }));
            continue;
        }
        let sha = str_field(p, "sha256").filter(|s| is_sha256_hex(s));
        let bytes = p.get("bytes").and_then(Value::as_u64);
        let (Some(sha), Some(bytes)) = (sha, bytes) else {
            return Err(err(
                "invalid_evidence_record",
                format!("attachment `{evidence_id}` has no sha256/bytes for its payload"),
                json!({ "evidenceId": evidence_id }),
            ));
        };
        let ext = if str_field(p, "payloadKind") == Some("png") || file.ends_with(".png") { "png" } else { "json" };
        let path = format!("payload-{sha}.{ext}");
        let entry = payloads.entry(path.clone()).or_insert_with(|| PayloadFile {
            path,
            bytes,
            sha256: sha.to_string(),
            evidence_ids: Vec::new(),
            source: Path::new(directory).join(file),
        });
        if entry.bytes != bytes {
            return Err(err("invalid_reference_binding", "two attachments give one payload different sizes", json!({ "evidenceId": evidence_id })));
        }
        entry.evidence_ids.push(evidence_id);
    }

    let coverage = json!({
        "scope": "retained-host-records",
        "priorHistoryComplete": "unknown",
        "referenceClosure": if missing.is_empty() { "complete" } else { "partial" },
        "missingReferences": missing,
        "externalPayloads": if with_payloads { "included-retained-recordings" } else { "not-included" },
        "externalReferences": external,
        "executionStatus": "not-inferred",
        "businessVerdict": "not-evaluated",
        "exclusions": EXCLUSIONS,
    });
    let targets: Vec<Value> = targets.into_iter().map(|(role, value)| json!({ "role": role, "value": value })).collect();
    Ok(Analysis {
        record_count: facts.len(),
        first_seq: facts.first().and_then(|f| f["globalSeq"].as_u64()).unwrap_or(0),
        last_seq: last,
        counts: serde_json::to_value(counts).unwrap_or(Value::Null),
        targets: Value::Array(targets),
        coverage,
        payloads: payloads.into_values().collect(),
    })
}

/// Export the retained evidence of one operation into `output_dir`, which
/// must not exist (its parent must). With `include_recorded_payloads` the
/// archive is v2 and carries every attachment's recorded file.
///
/// Errors: `invalid_argument`, `output_exists`, `operation_not_found`,
/// `evidence_gap`, `archive_limit_exceeded`, `checksum_mismatch`,
/// `recorded_payload_unavailable`, analysis codes, store errors.
pub fn export(
    store: &FactStore,
    namespace: Namespace,
    operation_id: &str,
    output_dir: &Path,
    include_recorded_payloads: bool,
) -> Result<ExportReport, FactError> {
    if operation_id.is_empty() || operation_id.chars().any(char::is_whitespace) {
        return Err(FactError::invalid_argument("operationId", "operationId must be a non-empty identifier"));
    }
    let parent = match output_dir.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return Err(FactError::invalid_argument("outputDir", "outputDir needs a parent directory")),
    };
    if !std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) {
        return Err(FactError::invalid_argument("outputDir", format!("the parent of outputDir ({}) must be an existing directory", parent.display())));
    }
    if std::fs::symlink_metadata(output_dir).is_ok() {
        return Err(err("output_exists", format!("{} already exists", output_dir.display()), json!({ "field": "outputDir" })));
    }

    let stream = namespace.stream();
    let snap = store.snapshot_key(stream, operation_id, MAX_RECORDS)?;
    if snap.rows.is_empty() {
        return Err(err(
            "operation_not_found",
            format!("no retained {} evidence for operation `{operation_id}`", namespace.as_str()),
            json!({ "operationId": operation_id }),
        ));
    }
    if let Some(g) = snap.gap {
        return Err(err(
            "evidence_gap",
            "retention evicted part of this operation's evidence; the archive would be incomplete",
            json!({ "from": g.from, "to": g.to }),
        ));
    }
    if snap.rows.len() > MAX_RECORDS {
        return Err(err(
            "archive_limit_exceeded",
            format!("an archive holds at most {MAX_RECORDS} records"),
            json!({ "limit": MAX_RECORDS, "field": "records" }),
        ));
    }
    let target_key = namespace.target_key(operation_id);
    let mut facts = Vec::with_capacity(snap.rows.len());
    for row in snap.rows {
        let item = evidence::verified_item(row.into_record()?)?;
        facts.push(json!({
            "globalSeq": item.sequence,
            "stream": stream.as_str(),
            "targetKey": target_key,
            "runtimeEpoch": operation_id,
            "actionId": item.evidence_id,
            "committedAtMs": item.committed_at_ms,
            "representation": item.representation.to_json(),
            "payload": item.record,
        }));
    }
    let analysis = analyse(namespace, operation_id, snap.through_seq, &facts, include_recorded_payloads)?;

    let mut records = String::from("[\n");
    for (i, f) in facts.iter().enumerate() {
        if i > 0 {
            records.push_str(",\n");
        }
        records.push_str(&canonical::to_storage_string(f));
    }
    records.push_str("\n]\n");
    if records.len() as u64 > MAX_RECORDS_BYTES {
        return Err(err("archive_limit_exceeded", "records.json would exceed 128 MiB", json!({ "limit": MAX_RECORDS_BYTES, "field": "records" })));
    }

    // Read every payload before creating anything, so a failure leaves no
    // half-written archive behind.
    let mut payload_bytes: Vec<(String, Vec<u8>)> = Vec::new();
    for p in &analysis.payloads {
        let unavailable =
            |why: String| err("recorded_payload_unavailable", why, json!({ "path": p.source.display().to_string(), "evidenceIds": p.evidence_ids }));
        let bytes = fsutil::read_regular_no_follow(&p.source, MAX_PAYLOAD_BYTES).map_err(|e| unavailable(format!("cannot read recorded payload: {e:?}")))?;
        if bytes.len() as u64 != p.bytes || canonical::sha256_hex(&bytes) != p.sha256 {
            return Err(unavailable(format!("recorded payload {} changed since it was recorded", p.source.display())));
        }
        payload_bytes.push((p.path.clone(), bytes));
    }

    let schema = if include_recorded_payloads { ARCHIVE_SCHEMA_V2 } else { ARCHIVE_SCHEMA_V1 };
    let quota = store.profile().quota(stream);
    let mut manifest = json!({
        "schemaVersion": schema,
        "namespace": namespace.as_str(),
        "operationId": operation_id,
        "exportedAtMs": now_ms(),
        "source": {
            "kind": "host-fact-store",
            "storeId": snap.store_id,
            "targetKey": target_key,
            "throughGlobalSeq": snap.through_seq,
            "retention": { "profile": store.profile().as_str(), "stream": stream.as_str(), "maxBytes": quota.max_bytes, "maxRecords": quota.max_records },
        },
        "records": { "path": RECORDS_FILE, "bytes": records.len(), "sha256": canonical::sha256_hex(records.as_bytes()) },
        "recordCount": analysis.record_count,
        "firstGlobalSeq": analysis.first_seq,
        "lastGlobalSeq": analysis.last_seq,
        "counts": analysis.counts,
        "targets": analysis.targets,
        "coverage": analysis.coverage,
    });
    if include_recorded_payloads {
        manifest["recordedPayloads"] = analysis.recorded_payloads();
    }
    let mut manifest_text = serde_json::to_string_pretty(&manifest).map_err(|e| FactError::new("archive_write_failed", e.to_string()))?;
    manifest_text.push('\n');
    if manifest_text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(err("archive_limit_exceeded", "manifest.json would exceed 2 MiB", json!({ "limit": MAX_MANIFEST_BYTES, "field": "manifest" })));
    }

    match std::fs::DirBuilder::new().mode(0o700).create(output_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(err("output_exists", format!("{} already exists", output_dir.display()), json!({ "field": "outputDir" })));
        }
        Err(e) => return Err(FactError::io("archive_write_failed", &format!("cannot create {}", output_dir.display()), e)),
    }
    let mut files = Vec::new();
    let written = (|| -> std::io::Result<()> {
        fsutil::write_new_file(&output_dir.join(RECORDS_FILE), records.as_bytes())?;
        files.push(RECORDS_FILE.to_string());
        for (name, bytes) in &payload_bytes {
            fsutil::write_new_file(&output_dir.join(name), bytes)?;
            files.push(name.clone());
        }
        fsutil::write_new_file(&output_dir.join(MANIFEST_FILE), manifest_text.as_bytes())?;
        files.push(MANIFEST_FILE.to_string());
        fsutil::sync_dir(output_dir)?;
        fsutil::sync_dir(parent)
    })();
    if let Err(e) = written {
        // We created the directory; do not leave a half archive behind.
        let _ = std::fs::remove_dir_all(output_dir);
        return Err(FactError::io("archive_write_failed", &format!("cannot write the archive in {}", output_dir.display()), e));
    }
    Ok(ExportReport {
        archive_dir: output_dir.to_path_buf(),
        manifest_path: output_dir.join(MANIFEST_FILE),
        manifest_sha256: canonical::sha256_hex(manifest_text.as_bytes()),
        schema_version: schema,
        namespace,
        operation_id: operation_id.to_string(),
        record_count: analysis.record_count,
        files,
        targets: manifest["targets"].clone(),
        coverage: manifest["coverage"].clone(),
        recorded_payloads: manifest.get("recordedPayloads").cloned(),
    })
}

fn read_archive_file(dir: &Path, name: &str, max: u64) -> Result<Vec<u8>, FactError> {
    fsutil::read_regular_no_follow(&dir.join(name), max).map_err(|e| match e {
        NoFollowError::Missing => err("invalid_archive_file", format!("{name} is missing"), json!({ "file": name, "reason": "missing" })),
        NoFollowError::NotRegular => {
            err("invalid_archive_file", format!("{name} is not a regular file (symlinks are refused)"), json!({ "file": name, "reason": "not_regular_file" }))
        }
        NoFollowError::TooLarge(n) => {
            err("archive_limit_exceeded", format!("{name} is {n} bytes, over the {max} byte limit"), json!({ "file": name, "limit": max }))
        }
        NoFollowError::Io(e) => err("invalid_archive_file", format!("cannot read {name}: {e}"), json!({ "file": name, "reason": "unreadable" })),
    })
}

/// Verify an archive offline against the manifest sha256 the exporter
/// returned. Opens no store and starts nothing.
///
/// Failure codes: `invalid_argument` (manifestSha256), `invalid_archive_directory`,
/// `invalid_archive_file` (missing, extra, symlinked or non-regular files,
/// unparsable JSON), `archive_limit_exceeded`, `manifest_checksum_mismatch`,
/// `unsupported_archive_schema`, `invalid_archive_path`, `invalid_archive_source`,
/// `records_checksum_mismatch`, `invalid_record_sequence`, `record_scope_mismatch`,
/// `fact_binding_mismatch`, `invalid_evidence_record`, `invalid_record_target`,
/// `duplicate_evidence_id`, `record_checksum_mismatch`,
/// `ambiguous_evidence_reference`, `invalid_evidence_references`,
/// `invalid_reference_binding`, `payload_checksum_mismatch`,
/// `manifest_analysis_mismatch`.
pub fn verify(archive_dir: &Path, manifest_sha256: &str) -> Result<VerifyReport, FactError> {
    if !is_sha256_hex(manifest_sha256) {
        return Err(FactError::invalid_argument("manifestSha256", "manifestSha256 must be 64 lowercase hex digits"));
    }
    match std::fs::symlink_metadata(archive_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(err(
                "invalid_archive_directory",
                format!("{} is not a real directory (symlinks are refused)", archive_dir.display()),
                json!({ "archiveDir": archive_dir.display().to_string() }),
            ));
        }
        Err(e) => {
            return Err(err(
                "invalid_archive_directory",
                format!("cannot use {}: {e}", archive_dir.display()),
                json!({ "archiveDir": archive_dir.display().to_string() }),
            ));
        }
    }

    let manifest_bytes = read_archive_file(archive_dir, MANIFEST_FILE, MAX_MANIFEST_BYTES)?;
    let actual = canonical::sha256_hex(&manifest_bytes);
    if actual != manifest_sha256 {
        return Err(err(
            "manifest_checksum_mismatch",
            "manifest.json does not match the expected sha256",
            json!({ "expected": manifest_sha256, "actual": actual }),
        ));
    }
    let manifest: Value = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| err("invalid_archive_file", format!("manifest.json is not JSON: {e}"), json!({ "file": MANIFEST_FILE, "reason": "not_json" })))?;
    let schema = str_field(&manifest, "schemaVersion").unwrap_or_default().to_string();
    let with_payloads = match schema.as_str() {
        ARCHIVE_SCHEMA_V1 => false,
        ARCHIVE_SCHEMA_V2 => true,
        _ => return Err(err("unsupported_archive_schema", format!("unsupported archive schema `{schema}`"), json!({ "schemaVersion": schema }))),
    };
    let bad_source = |why: &str| err("invalid_archive_source", format!("manifest source: {why}"), json!({ "field": "source" }));
    let namespace = str_field(&manifest, "namespace").and_then(|n| Namespace::parse(n).ok()).ok_or_else(|| bad_source("unknown namespace"))?;
    let operation_id = str_field(&manifest, "operationId").filter(|o| !o.is_empty()).ok_or_else(|| bad_source("missing operationId"))?.to_string();
    if str_field(&manifest["records"], "path") != Some(RECORDS_FILE) {
        return Err(err(
            "invalid_archive_path",
            format!("records.path must be `{RECORDS_FILE}`"),
            json!({ "field": "records.path", "value": manifest["records"].get("path") }),
        ));
    }
    let source = &manifest["source"];
    let store_id =
        str_field(source, "storeId").filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())).ok_or_else(|| bad_source("storeId"))?.to_string();
    if str_field(source, "kind") != Some("host-fact-store") {
        return Err(bad_source("kind must be host-fact-store"));
    }
    if str_field(source, "targetKey") != Some(namespace.target_key(&operation_id).as_str()) {
        return Err(bad_source("targetKey does not bind the namespace and operation"));
    }
    let through = source.get("throughGlobalSeq").and_then(Value::as_u64).filter(|n| *n < (1 << 53)).ok_or_else(|| bad_source("throughGlobalSeq"))?;

    // The directory holds exactly the files the manifest names.
    let mut expected: BTreeSet<String> = [MANIFEST_FILE.to_string(), RECORDS_FILE.to_string()].into();
    let declared_payloads: Vec<Value> = if with_payloads { manifest["recordedPayloads"]["files"].as_array().cloned().unwrap_or_default() } else { Vec::new() };
    for f in &declared_payloads {
        let path = str_field(f, "path").unwrap_or_default();
        let ok = path.strip_prefix("payload-").and_then(|r| r.split_once('.')).is_some_and(|(sha, ext)| is_sha256_hex(sha) && (ext == "json" || ext == "png"));
        if !ok {
            return Err(err(
                "invalid_archive_path",
                format!("payload path `{path}` is not payload-<sha256>.json|png"),
                json!({ "field": "recordedPayloads.files", "value": path }),
            ));
        }
        expected.insert(path.to_string());
    }
    let entries =
        std::fs::read_dir(archive_dir).map_err(|e| err("invalid_archive_directory", format!("cannot list {}: {e}", archive_dir.display()), json!({})))?;
    let mut present = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|e| err("invalid_archive_directory", format!("cannot list {}: {e}", archive_dir.display()), json!({})))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !expected.contains(&name) {
            return Err(err("invalid_archive_file", format!("unexpected file `{name}` in the archive"), json!({ "file": name, "reason": "unexpected" })));
        }
        let ft = entry
            .file_type()
            .map_err(|e| err("invalid_archive_file", format!("cannot inspect {name}: {e}"), json!({ "file": name, "reason": "unreadable" })))?;
        if !ft.is_file() {
            return Err(err(
                "invalid_archive_file",
                format!("{name} is not a regular file (symlinks are refused)"),
                json!({ "file": name, "reason": "not_regular_file" }),
            ));
        }
        present.insert(name);
    }
    if let Some(name) = expected.difference(&present).next() {
        return Err(err("invalid_archive_file", format!("{name} is missing"), json!({ "file": name, "reason": "missing" })));
    }

    let records_bytes = read_archive_file(archive_dir, RECORDS_FILE, MAX_RECORDS_BYTES)?;
    let want_bytes = manifest["records"].get("bytes").and_then(Value::as_u64);
    let want_sha = str_field(&manifest["records"], "sha256");
    let got_sha = canonical::sha256_hex(&records_bytes);
    if want_bytes != Some(records_bytes.len() as u64) || want_sha != Some(got_sha.as_str()) {
        return Err(err(
            "records_checksum_mismatch",
            "records.json does not match the size and sha256 in the manifest",
            json!({ "expected": want_sha, "actual": got_sha, "bytes": records_bytes.len() }),
        ));
    }
    let facts: Vec<Value> = serde_json::from_slice(&records_bytes)
        .map_err(|e| err("invalid_archive_file", format!("records.json is not a JSON array: {e}"), json!({ "file": RECORDS_FILE, "reason": "not_json" })))?;
    if facts.len() > MAX_RECORDS {
        return Err(err("archive_limit_exceeded", format!("an archive holds at most {MAX_RECORDS} records"), json!({ "limit": MAX_RECORDS })));
    }

    let analysis = analyse(namespace, &operation_id, through, &facts, with_payloads)?;

    for p in &analysis.payloads {
        if !present.contains(&p.path) {
            return Err(err("invalid_archive_file", format!("{} is missing", p.path), json!({ "file": p.path, "reason": "missing" })));
        }
        let bytes = read_archive_file(archive_dir, &p.path, MAX_PAYLOAD_BYTES)?;
        if bytes.len() as u64 != p.bytes || canonical::sha256_hex(&bytes) != p.sha256 {
            return Err(err(
                "payload_checksum_mismatch",
                format!("{} does not match its recorded size and sha256", p.path),
                json!({ "file": p.path, "evidenceIds": p.evidence_ids }),
            ));
        }
    }

    let mut recomputed = vec![
        ("recordCount", json!(analysis.record_count)),
        ("firstGlobalSeq", json!(analysis.first_seq)),
        ("lastGlobalSeq", json!(analysis.last_seq)),
        ("counts", analysis.counts.clone()),
        ("targets", analysis.targets.clone()),
        ("coverage", analysis.coverage.clone()),
    ];
    if with_payloads {
        recomputed.push(("recordedPayloads", analysis.recorded_payloads()));
    }
    for (field, value) in &recomputed {
        if manifest.get(*field) != Some(value) {
            return Err(err(
                "manifest_analysis_mismatch",
                format!("manifest `{field}` differs from the archived records"),
                json!({ "field": field, "manifest": manifest.get(*field), "recomputed": value }),
            ));
        }
    }
    let recorded_payloads = with_payloads.then(|| analysis.recorded_payloads());
    Ok(VerifyReport {
        archive_dir: archive_dir.to_path_buf(),
        manifest_sha256: manifest_sha256.to_string(),
        schema_version: schema,
        namespace,
        operation_id,
        record_count: analysis.record_count,
        first_global_seq: analysis.first_seq,
        last_global_seq: analysis.last_seq,
        store_id,
        through_global_seq: through,
        targets: analysis.targets,
        coverage: analysis.coverage,
        recorded_payloads,
    })
}
