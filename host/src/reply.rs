//! Assembles every public reply — the one place that knows its shape (reference
//! §2.3): `command, execution, control, extraction, delivery, kind, value?,
//! failureStage?`. The body is measured against the output budget as compact UTF-8;
//! over budget the value is dropped, never truncated.

use std::time::Instant;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::client::PublicReply;
use crate::error::CommandError;
use crate::registry::request::Extract;

pub const DEFAULT_OUTPUT_BYTES: usize = 96 * 1024;

/// What a command produced before extraction and delivery.
#[derive(Clone, Debug)]
pub enum ExecOutcome {
    /// kind = json | text | bytes (bytes: raw, base64-encoded on delivery).
    Json(Value),
    Text(String),
    Bytes(Vec<u8>),
    Failed(CommandError),
}

const EXECUTION_KEYS: &[&str] = &[
    "ok", "error", "message", "field", "details", "dispatched", "ambiguous", "settled", "executionReceipt", "executionReceipts", "exitCode", "target", "matched",
    "verified", "inconclusive",
];
const CONTROL_KEYS: &[&str] = &["cursor", "nextCursor", "factCursor", "hasMore", "truncated", "dropped", "gap", "updatedAtMs", "observedAtMs", "capturedAtMs"];

fn base_source() -> Value {
    json!({"responseId": crate::ids::uuid_v4(), "capturedAtMs": crate::ids::now_ms(), "persisted": false, "reason": "not_requested"})
}

/// The honest history fact until the FactStore exists.
pub fn history_unavailable() -> Value {
    json!({"schema": "aab.command-history/v1", "status": "unavailable", "replayed": false, "reason": "fact_store_not_implemented"})
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
    assemble(command, ExecOutcome::Json(value), Map::new(), &Extract::None, DEFAULT_OUTPUT_BYTES)
}

/// Build the public reply for an executed (or failed) command.
pub fn assemble(command: &str, outcome: ExecOutcome, mut control: Map<String, Value>, extract: &Extract, max_bytes: usize) -> PublicReply {
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
                for k in CONTROL_KEYS {
                    if let Some(x) = m.get(*k) {
                        control.insert((*k).into(), x.clone());
                    }
                }
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
    };
    control.entry("source").or_insert_with(base_source);

    let execution_failed = execution.get("ok") != Some(&Value::Bool(true)) || execution.get("ambiguous") == Some(&Value::Bool(true));
    let mut failure_stage: Option<&str> = execution_failed.then_some("execution");

    // Extraction runs only on a completed command.
    let (extraction, value) = match (extract, value, execution_failed) {
        (Extract::None, v, _) => (json!({"status": "skipped"}), v),
        (_, v, true) => (json!({"status": "skipped", "reason": "execution_failed"}), v),
        (Extract::Regex(spec), Some(v), false) => {
            let started = Instant::now();
            match crate::registry::extract::apply_regex(spec, kind, &v) {
                Ok(matches) => (json!({"status": "succeeded", "mode": "regex", "durationMs": started.elapsed().as_millis() as u64}), Some(matches)),
                Err(e) => {
                    failure_stage = Some("extraction");
                    (json!({"status": "failed", "mode": "regex", "error": e.code, "message": e.message}), None)
                }
            }
        }
        (Extract::Regex(_), None, false) => (json!({"status": "skipped"}), None),
        // Placeholder until script extraction is wired (aab_extract::prepare before
        // dispatch, aab_extract::run here): fail visibly rather than deliver the
        // unextracted result as if it had been extracted.
        (Extract::Script(spec), _, false) => {
            failure_stage = Some("extraction");
            let message = "script extraction is not wired into this host build yet";
            (json!({"status": "failed", "mode": "script", "language": spec.language.name(), "error": "extraction_runtime_unavailable", "message": message}), None)
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
        body.insert("delivery".into(), json!({"status": "unavailable", "limitBytes": max_bytes, "reason": "output_budget_exceeded", "attemptedBytes": size}));
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
    assemble(command, ExecOutcome::Failed(error), Map::new(), &Extract::None, DEFAULT_OUTPUT_BYTES)
}
