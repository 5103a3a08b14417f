//! The managed write of every H5 and Flutter action (aab-protocols §4.5, §4.8):
//! connect, the status preflight (a verified `GET /v1/status` that advertises
//! the kind's execution schema — an old SDK that ignores identity headers cannot
//! pass it), the caller's binding checks on fresh observations, then the durable
//! action record, the dispatch mark and ONE `POST /v1/<kind>/action` with the
//! exact execution object (`actionId` from the invocation: a Script's
//! `requestId` is preserved; the kind's runtime epoch; `timeoutMs` from the
//! remaining budget). The reply is classified: the exact rejection shape → not
//! dispatched; a settled result of exactly this action → its outcome; anything
//! else (lost, pending, another runtime's binding) → one cancel and the durable
//! completion pages, and only the original completion settles it. Otherwise the
//! outcome stays unknown (`dispatched:null, ambiguous:true, settled:false`), the
//! host leaves the device unresolved and `reconcile` finishes the job. Nothing is
//! ever resent.

use std::time::{Duration, Instant};

use aab_ios_transport::Deadline;
use aab_ios_transport::ids::{peer_code, peer_message};
use aab_ios_transport::sdk::{self, Completion, Connection, Failure, Kind, record::ActionRecord};
use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::runtime::{Target, with_facts};

/// The SDK's cleanup grace before a running action's pending reply.
const GRACE: Duration = Duration::from_millis(1500);
/// What the host keeps after the SDK's timeout: the grace, one cancel (which may
/// itself wait a grace) and the completion lookup.
const RESERVE: Duration = Duration::from_millis(4500);
const CANCEL_TIMEOUT: Duration = Duration::from_secs(4);

/// A verified connection whose status allows `kind`'s managed actions.
pub struct Session {
    pub conn: Connection,
    pub status: Value,
    pub kind: Kind,
    pub deadline: Deadline,
    /// The call's `deviceId` (the ownership journal's key) and `devicectl`.
    device_arg: String,
    devicectl: Option<String>,
    started: Instant,
}

/// Connect and preflight (every refusal here is before dispatch).
pub async fn open(target: &Target, kind: Kind, deadline: Deadline) -> Result<Session, ProviderError> {
    let started = Instant::now();
    target.check()?;
    let conn = target.connect(deadline).await?;
    let status = sdk::preflight(&conn.endpoint, kind, deadline).await?;
    Ok(Session { conn, status, kind, deadline, device_arg: target.device_id.clone(), devicectl: target.devicectl.clone(), started })
}

/// The id the SDK knows the action by: a Script's `requestId` (or Intent's
/// runtime action id) is preserved, else the host action id.
pub fn sdk_action_id(inv: &Invocation) -> String {
    match &inv.request_id {
        Some(r) if !r.is_empty() && r.len() <= 256 => r.clone(),
        _ => inv.action_id.clone(),
    }
}

/// The SDK's timeout: the remaining budget minus what the host needs after it.
pub fn sdk_timeout(remaining: Duration) -> Duration {
    if remaining > RESERVE * 2 { remaining - RESERVE } else { remaining / 2 }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The compact settlement proof of a terminal result.
pub fn proof(kind: Kind, result: &Value, store: Option<&Value>) -> Value {
    let sha = Sha256::digest(serde_json::to_vec(result).unwrap_or_default());
    json!({
        "kind": kind.name(), "settled": true, "actionId": result["actionId"], "runtimeEpoch": result["runtimeEpoch"], "execution": result["execution"],
        "dispatched": result["dispatched"], "ambiguous": result["ambiguous"], "error": result.get("error").cloned().unwrap_or(Value::Null),
        "responseSha256": sha.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "completionReceipt": store.cloned().unwrap_or(Value::Null),
    })
}

enum First {
    Settled(Value),
    Unknown(Value),
}

impl Session {
    /// Run one managed action: `payload` under `epoch` (H5: the SDK's, Flutter: the
    /// Dart engine's). See the module doc.
    pub async fn execute(&self, ctx: &Context<'_>, inv: &Invocation, command: &str, epoch: &str, payload: Map<String, Value>) -> Result<Value, ProviderError> {
        let kind = self.kind;
        let action_id = sdk_action_id(inv);
        let timeout = sdk_timeout(self.deadline.remaining());
        let timeout_ms = (timeout.as_millis() as u64).clamp(1, 2_147_483_647);
        let body = sdk::action_body(kind, payload, &action_id, epoch, timeout_ms);
        let id = &self.conn.endpoint.identity;
        let record = ActionRecord {
            host_action_id: inv.action_id.clone(),
            action_id: action_id.clone(),
            kind,
            command: command.to_string(),
            device_id: self.device_arg.clone(),
            device_identifier: self.conn.device.identifier.clone(),
            udid: self.conn.device.udid.clone(),
            bundle_id: id.bundle_id.clone(),
            runtime_epoch: epoch.to_string(),
            sdk_runtime_epoch: id.runtime_epoch.clone(),
            sdk_process_id: id.process_id,
            devicectl: self.devicectl.clone(),
        };
        let prepared = self.started.elapsed();
        sdk::record::append(ctx, &record)?;
        let recorded = self.started.elapsed();
        ctx.mark_dispatched();
        let wait = Duration::from_millis(timeout_ms) + GRACE + Duration::from_millis(500);
        let reply = sdk::exchange(&self.conn.endpoint, "POST", kind.action_path(), Some(&body), wait, self.deadline).await;
        let first = match reply {
            Ok(a) if sdk::is_rejection(&a.body) => {
                let mut e = sdk::refusal(&a.body, "the SDK refused the action before admission");
                e.details = Some(json!({"actionId": action_id, "runtimeEpoch": epoch, "device": a.body}));
                return Err(e);
            }
            Ok(a) if sdk::is_settled_result(kind, &a.body, &action_id, epoch) => First::Settled(a.body),
            Ok(a) => First::Unknown(json!({"httpStatus": a.status, "reply": a.body})),
            // Nothing reached the SDK: the action cannot have run.
            Err(Failure::NotSent(e)) => return Err(e.not_dispatched()),
            Err(Failure::MaybeReceived(e)) => First::Unknown(json!({"error": e.error, "message": e.message, "details": e.details})),
        };
        let timings = |end: Duration| json!({"prepareMs": ms(prepared), "recordMs": ms(recorded - prepared), "actionMs": ms(end - recorded)});
        match first {
            First::Settled(result) => self.settled(inv, &action_id, epoch, result, None, None, timings(self.started.elapsed())),
            First::Unknown(first) => {
                let (settlement, cancel, lookup) = self.recover(&action_id, epoch).await;
                match settlement {
                    Some((result, store)) => {
                        let recovered = json!({"first": first, "cancel": cancel});
                        self.settled(inv, &action_id, epoch, result, store, Some(recovered), timings(self.started.elapsed()))
                    }
                    None => {
                        let code = peer_code(first.pointer("/reply/error").or(first.get("error"))).map(str::to_string).unwrap_or_else(|| format!("{}_action_unresolved", kind.name()));
                        Err(ProviderError::new(code, "the SDK's reply was lost or unsettled and neither its cancel nor its completion store proves the outcome: it is unknown (the device stays unresolved; run ios-execution reconcile or device-ownership reconcile)")
                            .with_details(json!({"actionId": action_id, "hostActionId": inv.action_id, "runtimeEpoch": epoch, "kind": kind.name(),
                                                 "dispatched": null, "ambiguous": true, "settled": false, "first": first, "cancel": cancel, "lookup": lookup})))
                    }
                }
            }
        }
    }

    /// One cancel, then the completion pages: the original result, if proven.
    async fn recover(&self, action_id: &str, epoch: &str) -> (Option<(Value, Option<Value>)>, Value, Value) {
        let cancel_deadline = self.deadline.capped(CANCEL_TIMEOUT);
        let cancel = match sdk::cancel(&self.conn.endpoint, self.kind, action_id, epoch, cancel_deadline).await {
            Ok(answer) => {
                if let Some(result) = sdk::matching_execution_result(self.kind, &answer, action_id, epoch) {
                    return (Some((result, None)), answer, Value::Null);
                }
                answer
            }
            Err(f) => json!({"error": f.error().error, "message": f.error().message}),
        };
        match sdk::find_completion(&self.conn.endpoint, self.kind, action_id, epoch, self.deadline).await {
            Ok(Completion::Found { execution_result, receipt }) => (Some((execution_result, Some(receipt))), cancel, Value::Null),
            Ok(Completion::NotFound { pages, complete, .. }) => (None, cancel, json!({"found": false, "pages": pages, "complete": complete})),
            Err(e) => (None, cancel, json!({"error": e.error, "message": e.message})),
        }
    }

    /// A settled result: success, or the SDK's failure with its dispatch fact.
    #[allow(clippy::too_many_arguments)]
    fn settled(&self, inv: &Invocation, action_id: &str, epoch: &str, result: Value, store: Option<Value>, recovered: Option<Value>, timings: Value) -> Result<Value, ProviderError> {
        let proof = proof(self.kind, &result, store.as_ref());
        if result["ok"] == true {
            let mut out = with_facts(json!({"ok": true}), &self.conn);
            for (k, v) in [("kind", json!(self.kind.name())), ("actionId", json!(action_id)), ("hostActionId", json!(inv.action_id)), ("executionRuntimeEpoch", json!(epoch)), ("device", result), ("proof", proof), ("timingsMs", timings)] {
                out[k] = v;
            }
            if let Some(r) = recovered {
                out["recoveredBy"] = r;
            }
            return Ok(out);
        }
        let code = peer_code(result.get("error")).map(str::to_string).unwrap_or_else(|| format!("{}_action_failed", self.kind.name()));
        let message = format!("the SDK settled the action as failed: {}", peer_message(result.get("message")).unwrap_or_else(|| code.clone()));
        let mut e = ProviderError::new(code, message).with_details(json!({"actionId": action_id, "hostActionId": inv.action_id, "runtimeEpoch": epoch, "device": result, "proof": proof, "recoveredBy": recovered}));
        if let Some(f) = peer_code(result.get("field")) {
            e = e.with_field(f);
        }
        // A settled result is a known outcome either way: the host settles the journal.
        Err(if result["dispatched"] == false { e.not_dispatched() } else { e.settled_after_dispatch() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_keeps_the_caller_s_request_id() {
        let inv = Invocation::new("ios-h5-click", json!({}), "host-action-1", "rt", "/", 30_000);
        assert_eq!(sdk_action_id(&inv), "host-action-1");
        assert_eq!(sdk_action_id(&inv.clone().with_request_id(Some("script-step-7".into()))), "script-step-7");
        assert_eq!(sdk_action_id(&inv.clone().with_request_id(Some("x".repeat(257)))), "host-action-1", "the SDK's id limit");
    }

    #[test]
    fn the_sdk_timeout_leaves_room_for_recovery() {
        assert_eq!(sdk_timeout(Duration::from_secs(30)), Duration::from_millis(25_500));
        assert_eq!(sdk_timeout(Duration::from_secs(6)), Duration::from_secs(3));
        assert!(sdk_timeout(Duration::from_millis(1)) <= Duration::from_millis(1));
    }
}
