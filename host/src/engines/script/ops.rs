//! Script operations, the per-operation supervisor and `ctx.call`: this module
//! dispatches the operations and keeps their shared helpers; each part lives in its
//! own child module (`start`, `control`, `supervisor`, `assertions`, `call`,
//! `terminal`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aab_facts::canonical::{canonical_sha256, to_canonical_string};
use aab_facts::{Cursor, Durability, Namespace};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::child::{self, ScriptChild};
use super::*;
use crate::admission::{Cancel, CancelReason};
use crate::error::CommandError;
use crate::engines::Host;
use crate::pipeline::InternalCall;

mod assertions;
mod call;
mod control;
mod start;
mod supervisor;
mod terminal;

use assertions::*;
use call::*;
use control::*;
use start::*;
use supervisor::*;
use terminal::*;

fn arg_str<'a>(a: &'a Value, k: &str) -> Option<&'a str> {
    a.get(k).and_then(Value::as_str)
}

fn op_not_found(id: &str) -> CommandError {
    CommandError::new("unknown_operation", format!("no script operation `{id}`")).with_field("operationId")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, CommandError> + Send + 'static) -> Result<T, CommandError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(CommandError::new("fact_store_unavailable", e.to_string())))
}

/// Append one evidence record (Sync durability) off the async workers.
async fn persist(host: &Host, op_id: &str, kind: &'static str, payload: Value) -> Result<aab_facts::EvidenceReceipt, CommandError> {
    let facts = host.facts().clone();
    let op_id = op_id.to_string();
    blocking(move || {
        let store = facts.store()?;
        store.append_evidence(Namespace::Script, &op_id, kind, &payload, Durability::Sync).map_err(|e| crate::facts::to_command_error(&e))
    })
    .await
}

pub async fn dispatch(host: &Host, a: &Value, cwd: &str) -> Result<Value, CommandError> {
    let operation = arg_str(a, "operation").unwrap_or("status");
    let id = arg_str(a, "operationId").unwrap_or_default().to_string();
    let page = Page::of(a);
    let engine = host.scripts();
    match operation {
        "start" => start(host, a, cwd).await,
        "runtime-status" => Ok(runtime_status(host)),
        "status" | "wait" | "result" | "pause" | "resume" | "decide" | "cancel" => {
            let Some(op) = engine.find(&id) else {
                return match operation {
                    "status" | "wait" => restore(host, &id).await,
                    "result" => restored_result(host, &id).await,
                    "resume" => resume_restored(host, &id, a, cwd).await,
                    _ => {
                        let _ = restore(host, &id).await?;
                        Err(CommandError::new("operation_not_live", format!("operation `{id}` is not running in this runtime")))
                    }
                };
            };
            match operation {
                "status" => Ok(with_catalog(host, &op, op.snapshot("status", page), a)),
                "wait" => {
                    let wait_ms = a.get("waitMs").and_then(Value::as_u64).unwrap_or(30_000);
                    Ok(with_catalog(host, &op, wait(&op, page, wait_ms).await, a))
                }
                "result" => result(host, &op).await,
                "pause" => pause(&op).map(|_| with_catalog(host, &op, op.snapshot("pause", page), a)),
                "resume" => {
                    // `script`/`pythonPath` re-run a lost operation; a live one is not re-run,
                    // so they would be dropped silently.
                    if let Some(k) = ["script", "pythonPath"].into_iter().find(|k| a.get(*k).is_some()) {
                        return Err(CommandError::new("unsupported_argument", format!("unsupported argument `{k}`: operation `{id}` is live in this runtime; only a lost checkpoint-policy operation is resumed with {k}")).with_field(k));
                    }
                    resume(&op).map(|_| with_catalog(host, &op, op.snapshot("resume", page), a))
                }
                "decide" => decide(&op, a).map(|_| with_catalog(host, &op, op.snapshot("decide", page), a)),
                _ => Ok(with_catalog(host, &op, cancel(&op, page).await, a)),
            }
        }
        other => Err(CommandError::invalid("operation", format!("unknown script operation `{other}`"))),
    }
}

fn with_catalog(host: &Host, op: &Op, mut v: Value, a: &Value) -> Value {
    if a.get("includeCatalog").and_then(Value::as_bool) == Some(true) {
        let names: Vec<String> = host
            .registry()
            .iter()
            .filter(|c| authorize(host, &op.spec.permissions, &c.spec.command).is_ok())
            .map(|c| c.spec.command.clone())
            .collect();
        v["catalog"] = json!(names);
    }
    v
}

fn runtime_status(host: &Host) -> Value {
    let probe = |name: &str| match child::find_executable(name) {
        Some(p) => json!({"available": true, "path": p.display().to_string()}),
        None => json!({"available": false}),
    };
    let node = std::env::var("AI_APP_BRIDGE_NODE").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "node".into());
    let python = std::env::var("AI_APP_BRIDGE_PYTHON").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "python3".into());
    let ops = host.scripts().ops.lock().unwrap_or_else(|e| e.into_inner());
    let live = ops.iter().filter(|o| !o.is_terminal()).count();
    json!({
        "ok": true, "command": "script", "operation": "runtime-status", "sdkVersion": SDK_VERSION,
        "runtimes": {"javascript": probe(&node), "python": probe(&python)},
        "operations": {"retained": ops.len(), "live": live, "max": MAX_OPERATIONS},
    })
}
