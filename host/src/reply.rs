//! Assembles every public reply — the one place that knows its shape (reference
//! §2.3): `command, execution, control, extraction, delivery, kind, value?,
//! failureStage?`. The body is measured against the output budget as compact UTF-8;
//! over budget the value is dropped, never truncated.

use std::time::Instant;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::client::PublicReply;
use crate::error::CommandError;
use crate::registry::request::{Extract, RegexExtract};

pub const DEFAULT_OUTPUT_BYTES: usize = 96 * 1024;

/// The extraction to apply once the command completed, checked before dispatch.
#[derive(Clone, Debug)]
pub enum ExtractPlan {
    None,
    Regex(RegexExtract),
    /// A script whose source is frozen and whose syntax was checked without
    /// running it; it runs in a fresh child after the command completed.
    Script(aab_extract::PreparedScript),
}

impl ExtractPlan {
    /// Whether applying it blocks (runs a child process).
    pub fn is_blocking(&self) -> bool {
        matches!(self, ExtractPlan::Script(_))
    }
}

/// Pre-dispatch extraction checks: regexes were compiled while parsing; a script is
/// frozen and syntax-checked here (never executing top-level code). Blocking for
/// scripts: call it off the async workers. A failure is a validation rejection.
pub fn plan(extract: &Extract, cwd: &std::path::Path) -> Result<ExtractPlan, CommandError> {
    match extract {
        Extract::None => Ok(ExtractPlan::None),
        Extract::Regex(r) => Ok(ExtractPlan::Regex(r.clone())),
        Extract::Script(s) => {
            let language = aab_extract::Language::from_name(s.language.name()).expect("request languages are extractor languages");
            let spec = aab_extract::ScriptSpec { language, source: s.source.clone(), source_path: s.source_path.clone(), timeout_ms: s.timeout_ms };
            aab_extract::prepare(spec, cwd).map(ExtractPlan::Script).map_err(|e| {
                let mut err = CommandError::new(e.code, e.message.clone());
                if let Some(f) = e.field {
                    err = err.with_field(f);
                }
                if let Some(d) = e.diagnostic.clone() {
                    err = err.with_details(json!({"diagnostic": d}));
                }
                err
            })
        }
    }
}

/// What a command produced before extraction and delivery.
#[derive(Clone, Debug)]
pub enum ExecOutcome {
    /// kind = json | text | bytes (bytes: raw, base64-encoded on delivery).
    Json(Value),
    Text(String),
    Bytes(Vec<u8>),
    Failed(CommandError),
    /// A stored snapshot read back (`response read`): its own execution is
    /// `{ok:true, dispatched:false, ambiguous:false}`; `kind` as stored.
    Stored { kind: String, value: Value, origin: Value },
}

/// Persists a response snapshot: `(responseId, snapshot) → ref`.
pub type SnapshotSink<'a> = &'a dyn Fn(&str, &Value) -> Result<Value, CommandError>;

const EXECUTION_KEYS: &[&str] = &[
    "ok", "error", "message", "field", "details", "dispatched", "ambiguous", "settled", "executionReceipt", "executionReceipts", "exitCode", "target", "matched",
    "verified", "inconclusive",
];
const CONTROL_KEYS: &[&str] = &["cursor", "nextCursor", "factCursor", "hasMore", "truncated", "dropped", "gap", "updatedAtMs", "observedAtMs", "capturedAtMs"];

/// Continuation facts of a long-running operation (Script, Intent and the managed
/// Intents): picked when the result names its `operationId`. Null values are
/// dropped. Chosen by what the result carries, never by platform or command name.
const OPERATION_CONTROL_KEYS: &[&str] = &[
    "operationId", "status", "pauseReason", "eventSequence", "resultRef", "persisted", "timedOut", "waitMs", "pendingQuestion", "revision", "lastDecisionId",
    "eventGap", "droppedEvents", "evidenceId", "latestEvidenceIds", "terminalEvidenceId", "observationFailure", "provider", "observationTarget", "deadlineMs",
    "pendingOperations", "lastAction",
];

/// Continuation facts of a capture read: picked when the result carries a capture
/// window (`watermarkCursor`) or a `coverage` report.
const CAPTURE_CONTROL_KEYS: &[&str] =
    &["stream", "coverage", "window", "view", "runtimeEpoch", "targetKey", "storeGeneration", "watermarkCursor", "throughCursor", "throughWatermark", "barrier", "committed"];

/// The continuation facts `control` keeps from an object result, whatever an
/// extractor later makes of the value.
fn continuation(result: &Map<String, Value>, control: &mut Map<String, Value>) {
    for k in CONTROL_KEYS {
        if let Some(x) = result.get(*k) {
            control.insert((*k).into(), x.clone());
        }
    }
    if result.get("operationId").is_some_and(Value::is_string) {
        for k in OPERATION_CONTROL_KEYS {
            if let Some(x) = result.get(*k).filter(|x| !x.is_null()) {
                control.insert((*k).into(), x.clone());
            }
        }
    }
    if result.get("watermarkCursor").is_some() || result.get("coverage").is_some() {
        for k in CAPTURE_CONTROL_KEYS {
            if let Some(x) = result.get(*k).filter(|x| !x.is_null()) {
                control.insert((*k).into(), x.clone());
            }
        }
    }
}

fn base_source() -> Value {
    json!({"responseId": crate::ids::uuid_v4(), "capturedAtMs": crate::ids::now_ms(), "persisted": false, "reason": "not_requested"})
}

fn exit_code_for(stage: Option<&str>) -> i32 {
    match stage {
        None => 0,
        Some("validation") | Some("execution") => 1,
        Some(_) => 2,
    }
}

/// A request rejected before execution (parse or validation).
pub fn rejection(command: Option<&str>, error: &CommandError) -> PublicReply {
    let body = json!({
        "command": command,
        "execution": error.to_json(),
        "control": {"source": base_source()},
        "extraction": {"status": "skipped"},
        "delivery": {"status": "unavailable", "limitBytes": DEFAULT_OUTPUT_BYTES},
        "kind": "json",
        "failureStage": "validation",
    });
    PublicReply { body, exit_code: 1 }
}

/// A host-local JSON result (plugins list, offline runtime status).
pub fn local_value(command: &str, value: Value) -> PublicReply {
    assemble(command, ExecOutcome::Json(value), Map::new(), &ExtractPlan::None, DEFAULT_OUTPUT_BYTES)
}

/// Build the public reply for an executed (or failed) command.
/// Blocking when `extract` is a script (it runs the extraction child): call it off
/// the async workers then.
pub fn assemble(command: &str, outcome: ExecOutcome, control: Map<String, Value>, extract: &ExtractPlan, max_bytes: usize) -> PublicReply {
    assemble_with_sink(command, outcome, control, extract, max_bytes, None)
}

/// [`assemble`] that persists a response snapshot through `sink` when the contract
/// asks for one: always when an extraction is requested (so the original can be
/// re-extracted later), and for `extract:null` when the value does not fit the
/// budget (the reply then carries the ref instead of a cut value).
pub fn assemble_with_sink(
    command: &str,
    outcome: ExecOutcome,
    mut control: Map<String, Value>,
    extract: &ExtractPlan,
    max_bytes: usize,
    sink: Option<SnapshotSink<'_>>,
) -> PublicReply {
    let mut execution = Map::new();
    let (kind, value) = match outcome {
        ExecOutcome::Failed(e) => {
            let Value::Object(m) = e.to_json() else { unreachable!("envelope is an object") };
            execution = m;
            ("json", None)
        }
        ExecOutcome::Json(v) => {
            if let Value::Object(m) = &v {
                for k in EXECUTION_KEYS {
                    if let Some(x) = m.get(*k) {
                        execution.insert((*k).into(), x.clone());
                    }
                }
                continuation(m, &mut control);
            }
            // The provider call completed; an object without `ok` is a confirmed success.
            execution.entry("ok").or_insert(Value::Bool(true));
            ("json", Some(v))
        }
        ExecOutcome::Text(t) => {
            execution.insert("ok".into(), Value::Bool(true));
            ("text", Some(Value::String(t)))
        }
        ExecOutcome::Bytes(b) => {
            execution.insert("ok".into(), Value::Bool(true));
            ("bytes", Some(Value::String(base64::engine::general_purpose::STANDARD.encode(b))))
        }
        ExecOutcome::Stored { kind, value, origin } => {
            // The original facts travel in control.origin; the extractor cannot alter them.
            control.insert("origin".into(), origin);
            execution.insert("ok".into(), Value::Bool(true));
            execution.insert("dispatched".into(), Value::Bool(false));
            execution.insert("ambiguous".into(), Value::Bool(false));
            let kind: &'static str = match kind.as_str() {
                "text" => "text",
                "bytes" => "bytes",
                _ => "json",
            };
            (kind, Some(value))
        }
    };
    let mut source = match control.remove("source") {
        Some(Value::Object(m)) => m,
        _ => match base_source() {
            Value::Object(m) => m,
            _ => unreachable!("source is an object"),
        },
    };
    let response_id = source.get("responseId").and_then(Value::as_str).unwrap_or_default().to_string();
    let captured_at = source.get("capturedAtMs").cloned().unwrap_or(Value::Null);
    // The snapshot is taken of the original value before any extraction.
    let snapshot_base = json!({
        "kind": kind,
        "execution": Value::Object(execution.clone()),
        "control": Value::Object(control.clone()),
        "identity": {"command": command, "responseId": response_id, "capturedAtMs": captured_at},
    });
    let snapshot = |value: &Value| {
        let mut snap = snapshot_base.clone();
        snap["value"] = value.clone();
        snap
    };
    let persist = |value: &Value, source: &mut Map<String, Value>| -> Option<Value> {
        let sink = sink?;
        if kind == "bytes" {
            source.insert("persisted".into(), json!(false));
            source.insert("reason".into(), json!("binary_snapshot_unsupported"));
            return None;
        }
        match sink(&response_id, &snapshot(value)) {
            Ok(r) => {
                source.insert("persisted".into(), json!(true));
                source.remove("reason");
                source.insert("ref".into(), r.clone());
                Some(r)
            }
            Err(e) => {
                source.insert("persisted".into(), json!(false));
                source.insert("reason".into(), json!("store_error"));
                source.insert("error".into(), json!({"error": e.code, "message": e.message}));
                None
            }
        }
    };
    let mut reference: Option<Value> = None;
    if !matches!(extract, ExtractPlan::None)
        && let Some(v) = &value {
            reference = persist(v, &mut source);
        }
    let original_for_budget = if matches!(extract, ExtractPlan::None) { value.clone() } else { None };
    control.insert("source".into(), Value::Object(source.clone()));

    let execution_failed = execution.get("ok") != Some(&Value::Bool(true)) || execution.get("ambiguous") == Some(&Value::Bool(true));
    let mut failure_stage: Option<&str> = execution_failed.then_some("execution");

    // Extraction runs only on a completed command.
    let (extraction, value) = match (extract, value, execution_failed) {
        (ExtractPlan::None, v, _) => (json!({"status": "skipped"}), v),
        (_, v, true) => (json!({"status": "skipped", "reason": "execution_failed"}), v),
        (_, None, false) => (json!({"status": "skipped"}), None),
        (ExtractPlan::Regex(spec), Some(v), false) => {
            let started = Instant::now();
            match crate::registry::extract::apply_regex(spec, kind, &v) {
                Ok(matches) => (json!({"status": "succeeded", "mode": "regex", "durationMs": started.elapsed().as_millis() as u64}), Some(matches)),
                Err(e) => {
                    failure_stage = Some("extraction");
                    (json!({"status": "failed", "mode": "regex", "error": e.code, "message": e.message}), None)
                }
            }
        }
        (ExtractPlan::Script(prepared), Some(v), false) => {
            let inputs = aab_extract::build_inputs(kind, v, Value::Object(execution.clone()), Value::Object(control.clone()));
            let language = prepared.language().name();
            let run = aab_extract::run_timed(prepared, &inputs);
            let duration_ms = run.timings.total.as_millis() as u64;
            match run.result {
                Ok(result) => (
                    json!({"status": "succeeded", "mode": "script", "language": language, "durationMs": duration_ms, "timings": run.timings.to_json()}),
                    Some(result),
                ),
                Err(e) => {
                    failure_stage = Some("extraction");
                    let mut x = json!({"status": "failed", "mode": "script", "language": language, "durationMs": duration_ms, "error": e.code, "message": e.message});
                    if let Some(d) = e.diagnostic {
                        x["diagnostic"] = d;
                    }
                    (x, None)
                }
            }
        }
    };

    let mut body = Map::new();
    body.insert("command".into(), Value::String(command.into()));
    body.insert("execution".into(), Value::Object(execution));
    body.insert("control".into(), Value::Object(control));
    body.insert("extraction".into(), extraction);
    body.insert("delivery".into(), json!({"status": "inline", "limitBytes": max_bytes}));
    body.insert("kind".into(), Value::String(kind.into()));
    let extraction_failed = failure_stage == Some("extraction");
    if let Some(v) = value {
        let value_bytes = serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0);
        body.insert("delivery".into(), json!({"status": "inline", "valueBytes": value_bytes, "limitBytes": max_bytes}));
        body.insert("value".into(), v);
    } else if extraction_failed {
        body.insert("delivery".into(), json!({"status": "unavailable", "limitBytes": max_bytes, "reason": "extraction_failed"}));
    }
    if let Some(stage) = failure_stage {
        body.insert("failureStage".into(), Value::String(stage.into()));
    }

    let size = serde_json::to_vec(&body).map(|b| b.len()).unwrap_or(usize::MAX);
    if size > max_bytes {
        body.remove("value");
        // extract:null over budget: keep the whole value behind a ref instead.
        if reference.is_none()
            && let Some(v) = &original_for_budget {
                reference = persist(v, &mut source);
                if let Some(Value::Object(c)) = body.get_mut("control") {
                    c.insert("source".into(), Value::Object(source.clone()));
                }
            }
        let status = if reference.is_some() { "reference" } else { "unavailable" };
        body.insert("delivery".into(), json!({"status": status, "limitBytes": max_bytes, "reason": "output_budget_exceeded", "attemptedBytes": size}));
        if failure_stage.is_none() {
            failure_stage = Some("delivery");
            body.insert("failureStage".into(), Value::String("delivery".into()));
        }
        let size = serde_json::to_vec(&body).map(|b| b.len()).unwrap_or(usize::MAX);
        if size > max_bytes {
            // Even the protected control block does not fit: keep only what the
            // caller needs to know about dispatch and where the answer went.
            let execution = body.get("execution").cloned().unwrap_or(Value::Null);
            let keep = |k: &str| execution.get(k).cloned().unwrap_or(Value::Null);
            let source = body.get("control").and_then(|c| c.get("source")).cloned().unwrap_or(Value::Null);
            let minimal = json!({
                "command": command,
                "execution": {"ok": keep("ok"), "error": keep("error"), "dispatched": keep("dispatched"), "ambiguous": keep("ambiguous")},
                "control": {"source": source, "controlComplete": false},
                "extraction": body.get("extraction").cloned().unwrap_or(Value::Null),
                "delivery": {"status": "unavailable", "limitBytes": max_bytes, "reason": "control_over_budget", "attemptedBytes": size},
                "kind": kind,
                "failureStage": failure_stage,
            });
            return PublicReply { body: minimal, exit_code: exit_code_for(failure_stage) };
        }
    }
    PublicReply { body: Value::Object(body), exit_code: exit_code_for(failure_stage) }
}

/// A failure after validation (runtime unreachable, identity mismatch, ...).
pub fn failure(command: &str, error: CommandError) -> PublicReply {
    assemble(command, ExecOutcome::Failed(error), Map::new(), &ExtractPlan::None, DEFAULT_OUTPUT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control_of(value: Value) -> Map<String, Value> {
        let body = assemble("x", ExecOutcome::Json(value), Map::new(), &ExtractPlan::None, DEFAULT_OUTPUT_BYTES).body;
        body["control"].as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn operation_facts_are_picked_when_the_result_names_an_operation() {
        let c = control_of(json!({"operationId": "op-1", "status": "completed", "eventSequence": 7, "resultRef": {"evidenceId": "e"}, "pendingQuestion": null, "echo": "x"}));
        assert_eq!((c["operationId"].clone(), c["status"].clone(), c["eventSequence"].clone()), (json!("op-1"), json!("completed"), json!(7)));
        assert_eq!(c["resultRef"], json!({"evidenceId": "e"}));
        assert!(!c.contains_key("pendingQuestion"), "nulls are dropped");
        assert!(!c.contains_key("echo"));
        // Without an operationId, `status` is the provider's business, not a continuation fact.
        let c = control_of(json!({"status": "running"}));
        assert!(!c.contains_key("status"));
    }

    #[test]
    fn capture_facts_are_picked_when_the_result_carries_a_window() {
        let c = control_of(json!({"stream": "logs", "watermarkCursor": "wc1:x", "coverage": {"status": "complete"}, "records": [1, 2], "hasMore": false}));
        assert_eq!((c["stream"].clone(), c["watermarkCursor"].clone(), c["coverage"]["status"].clone()), (json!("logs"), json!("wc1:x"), json!("complete")));
        assert_eq!(c["hasMore"], json!(false));
        assert!(!c.contains_key("records"));
        let c = control_of(json!({"stream": "logs"}));
        assert!(!c.contains_key("stream"), "no window, no capture facts");
    }

    #[test]
    fn an_extractor_never_removes_continuation_facts() {
        let plan = ExtractPlan::Regex(RegexExtract { pattern: "x".into(), input_path: "/x".into(), flags: String::new(), timeout_ms: 1000 });
        let body = assemble("x", ExecOutcome::Json(json!({"operationId": "op-1", "status": "paused", "x": "x"})), Map::new(), &plan, DEFAULT_OUTPUT_BYTES).body;
        assert_eq!((body["control"]["operationId"].clone(), body["control"]["status"].clone()), (json!("op-1"), json!("paused")), "{body}");
    }
}
