//! The host hooks of the executor. `reconcile`: the host asks for the outcome of
//! an action it left unresolved (`{serial: sessionId, pending: {actionId,
//! runtimeEpoch, …}}`); the answer comes only from evidence — the action's own
//! settled record, or the page's proof read now (the renderer's ledger, CDP's
//! binding, the page URL for a navigation, the remote session's absence for a
//! close) — and is otherwise `unknown`. Nothing is ever replayed.
//! `runtime-stop`: the runtime is stopping; every session is closed within the
//! hook's deadline.

use std::time::Duration;

use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

use super::args::EngineKind;
use super::engine::EngineError;
use super::ops::{Proof, delivery_proof};
use super::receipts::settles;
use super::session::{EndReason, Row, lock};
use super::webdriver::WdPage;
use super::{Executor, budget};
use crate::ids::now_ms;

/// A handle on a former runtime's WebDriver session (sends nothing).
pub fn attach(row: &Row) -> Option<WdPage> {
    if EngineKind::parse(&row.engine) != Some(EngineKind::Webdriver) {
        return None;
    }
    let endpoint = super::webdriver::endpoint(row.endpoint.as_deref()?).ok()?;
    let client = aab_webdriver::Client::new(endpoint);
    let session = client.attach(row.webdriver_session_id.as_deref()?);
    Some(WdPage::new(client, session))
}

/// Whether a proof settles an action of this type: the event reached the bound
/// element, and (for pointer and key input) it was real input, not a script's.
/// Typing may be proven by WebDriver's clear, scrolling into view by the renderer.
pub fn proven(proof: &Proof, action_type: &str) -> bool {
    proof.delivered && (proof.trusted != Some(false) || action_type == "input" || action_type == "scroll")
}

/// Try to settle a `pending`/`unresolved` record from the page as it is now;
/// returns the record to report: a new settled one when proven, else the same.
pub async fn settle_from_page(ex: &Executor, ctx: &Context<'_>, session_id: &str, record: Value) -> Value {
    match proof_now(ex, ctx, session_id, &record).await {
        Some(extra) => {
            let mut r = record;
            r["status"] = json!("settled");
            r["atMs"] = json!(now_ms());
            r["settledBy"] = json!("reconcile");
            if let (Value::Object(r), Value::Object(e)) = (&mut r, extra) {
                r.extend(e);
            }
            if ex.records.put(ctx, session_id, &r).is_err() {
                return r;
            }
            ex.records.event(Some(ctx), session_id, "action-settled", json!({"actionId": r["actionId"], "by": "reconcile"}));
            r
        }
        None => record,
    }
}

/// What the page (or the remote end) proves about this record's operation now,
/// as fields of the settled record; `None` = nothing proven.
async fn proof_now(ex: &Executor, ctx: &Context<'_>, session_id: &str, record: &Value) -> Option<Value> {
    let action_id = record["actionId"].as_str().unwrap_or_default();
    match record["operation"].as_str().unwrap_or_default() {
        "act" => {
            let s = ex.live(session_id)?;
            let proof = delivery_proof(&s.engine, action_id, None, budget(ctx).min(Duration::from_secs(2))).await?;
            proven(&proof, record["action"]["type"].as_str().unwrap_or_default())
                .then(|| json!({"delivery": {"delivered": true, "trusted": proof.trusted, "eventType": proof.event_type, "source": proof.source}}))
        }
        "navigate" => {
            let s = ex.live(session_id)?;
            let url = s.engine.probe(budget(ctx)).await.ok()?;
            record["targetUrl"].as_str().is_some_and(|t| same_url(t, &url)).then(|| json!({"navigated": true, "after": {"url": url}}))
        }
        "close" => {
            // The session is gone here; ask the remote end whether it still exists.
            if record["engine"] != "webdriver" {
                return Some(json!({"closed": true, "remote": "killed"}));
            }
            let row = Row {
                session_id: session_id.to_string(),
                engine: "webdriver".into(),
                endpoint: record["endpoint"].as_str().map(str::to_string),
                webdriver_session_id: record["webdriverSessionId"].as_str().map(str::to_string),
                browser: None,
                runtime_epoch: String::new(),
                lease_ms: super::schema::DEFAULT_LEASE_MS,
                lease_expires_at_ms: 0,
                created_at_ms: 0,
                ended: None,
                ended_at_ms: None,
            };
            match attach(&row)?.probe(budget(ctx)).await {
                Err(EngineError::Gone { .. }) | Err(EngineError::Refused { .. }) => Some(json!({"closed": true, "remote": "gone"})),
                // Still there: the close did not take effect (a known outcome; close again).
                Ok(_) => Some(json!({"closed": false, "remote": "still-open"})),
                Err(_) => None,
            }
        }
        _ => None,
    }
}

/// URLs equal up to a trailing slash on an empty path (what browsers add).
fn same_url(wanted: &str, got: &str) -> bool {
    let norm = |u: &str| u.trim_end_matches('/').to_string();
    wanted == got || norm(wanted) == norm(got)
}

pub async fn reconcile(ex: &Executor, ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let serial = request.get("serial").and_then(Value::as_str).unwrap_or_default();
    let pending = request.get("pending").cloned().unwrap_or(Value::Null);
    let action_id = pending.get("actionId").and_then(Value::as_str).unwrap_or_default();
    let epoch = pending.get("runtimeEpoch").and_then(Value::as_str).unwrap_or_default();
    if serial.is_empty() || action_id.is_empty() {
        return Ok(json!({"status": "unknown", "reason": "the request names no session (serial) or action"}));
    }
    if pending.get("command").and_then(Value::as_str).is_some_and(|c| c != "web-executor") {
        return Ok(json!({"status": "unknown", "reason": "not a web-executor action"}));
    }
    let record = match ex.records.find(ctx, serial, action_id)? {
        Some(r) => r,
        None => return Ok(json!({"status": "unknown", "reason": "no record of this action (it never reached the pending step here)", "actionId": action_id})),
    };
    if settles(&record, action_id, epoch) {
        return Ok(json!({"status": "settled", "receipt": record}));
    }
    if record["status"] == "refused" {
        // Refused before any effect: that is the outcome, as a settled receipt.
        let mut r = record;
        r["status"] = json!("settled");
        r["dispatched"] = json!(false);
        return Ok(json!({"status": "settled", "receipt": r}));
    }
    let live = ex.live(serial).is_some();
    let now = settle_from_page(ex, ctx, serial, record).await;
    if settles(&now, action_id, epoch) {
        return Ok(json!({"status": "settled", "receipt": now}));
    }
    let reason = if live { "the page shows no proof of this action" } else { "the session cannot be asked (closed, lost or not live in this runtime)" };
    Ok(json!({"status": "unknown", "reason": reason, "record": now}))
}

/// Close every session (live ones and a former runtime's dormant ones) within
/// the hook's deadline, all at once.
pub async fn runtime_stop(ex: &Executor, ctx: &Context<'_>) -> Result<Value, ProviderError> {
    let live: Vec<_> = lock(&ex.sessions).values().cloned().collect();
    let dormant: Vec<Row> = lock(&ex.rows).values().filter(|r| r.ended.is_none()).cloned().collect();
    let per = budget(ctx);
    for s in &live {
        lock(&s.state).ending = Some(EndReason::RuntimeStop);
    }
    let closing = live.iter().map(|s| {
        let s = s.clone();
        async move {
            let r = s.engine.close(per).await;
            (s, r)
        }
    });
    let results = futures_util::future::join_all(closing).await;
    let mut report = Vec::new();
    for (s, r) in results {
        ex.end(Some(ctx), &s, EndReason::RuntimeStop, json!({"close": r.as_ref().err().map(EngineError::message)}));
        report.push(json!({"sessionId": s.session_id, "closed": r.is_ok() || !r.as_ref().err().is_some_and(EngineError::may_have_reached), "error": r.err().map(|e| e.message())}));
    }
    let dormant_closing = dormant.iter().map(|row| async move {
        let r = match attach(row) {
            Some(p) => p.close(per).await,
            None => Ok(()),
        };
        (row.session_id.clone(), r)
    });
    for (id, r) in futures_util::future::join_all(dormant_closing).await {
        ex.bury(Some(ctx), &id, EndReason::RuntimeStop, json!({"dormant": true}));
        report.push(json!({"sessionId": id, "closed": r.is_ok(), "dormant": true, "error": r.err().map(|e| e.message())}));
    }
    Ok(json!({"ok": true, "closed": report.len(), "sessions": report}))
}
