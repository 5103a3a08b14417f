//! Managed WDA actions (`aab.wda-execution/v1`, protocols §5.4): the body aab sends,
//! what a reply proves, the durable result pages, and the settlement of an action
//! whose reply was lost.
//!
//! A reply is believed only after its `wdaBinding` matched. Then it is exactly one
//! of: a pre-admission rejection (`dispatched:false, ambiguous:false`: nothing
//! happened), the settled result of exactly this action and Runner epoch, or
//! anything else — pending, lost, unbound, unrecognised — which leaves the
//! outcome unknown. Nothing is ever resent; an unknown outcome is settled later
//! only by the Runner's committed `aab.wda-completion/v1` for the same action id
//! and the ORIGINAL Runner epoch (a new Runner epoch never stands in for it).

use serde_json::{Value, json};

use super::codes::*;
use super::connection::connect;
use super::descriptor::Descriptor;
use super::identity::{self, Target};
use super::record::ActionRecord;
use super::{COMPLETION_SCHEMA, EXECUTION_SCHEMA};
use crate::http::{Failure, FailureKind, Reply};
use crate::{Deadline, Devicectl, ProviderError};

/// Largest `timeoutMs` the Runner accepts.
pub const MAX_TIMEOUT_MS: u64 = 2_147_483_647;

/// The body of `POST /aab/action`: exactly `{operation, target, payload, actionId, execution}`.
pub fn action_body(operation: &str, target: &Target, payload: Value, action_id: &str, runner_epoch: &str, timeout_ms: u64) -> Value {
    json!({
        "operation": operation,
        "target": target.to_json(),
        "payload": payload,
        "actionId": action_id,
        "execution": {"schemaVersion": EXECUTION_SCHEMA, "actionId": action_id, "runtimeEpoch": runner_epoch, "timeoutMs": timeout_ms.clamp(1, MAX_TIMEOUT_MS)},
    })
}

/// What one action POST proved.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionReply {
    /// No connection was made: the Runner never saw the action.
    NotSent(String),
    /// Refused before admission (`dispatched:false, ambiguous:false`): no effect.
    Rejected(Value),
    /// The settled result of exactly this action (success or a settled failure).
    Settled(Value),
    /// The outcome is unknown (`reason`: reply_lost, binding_mismatch, pending, …).
    Unknown { reason: &'static str, detail: Value },
}

fn non_empty_str(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The settled result of exactly `action_id` in Runner epoch `epoch` (§5.4 invariants).
pub fn is_settled(v: &Value, action_id: &str, epoch: &str) -> bool {
    let exec = &v["execution"];
    let failed = non_empty_str(v.get("error")).is_some();
    v.get("settled") == Some(&Value::Bool(true))
        && v.get("actionId").and_then(Value::as_str) == Some(action_id)
        && v.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch)
        && v.get("dispatched").is_some_and(Value::is_boolean)
        && v.get("ambiguous") == Some(&Value::Bool(false))
        && exec.get("schemaVersion").and_then(Value::as_str) == Some(EXECUTION_SCHEMA)
        && exec.get("actionId").and_then(Value::as_str) == Some(action_id)
        && exec.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch)
        && exec.get("settled") == Some(&Value::Bool(true))
        // `ok`, when present, agrees with the error.
        && v.get("ok").is_none_or(|ok| ok.as_bool() == Some(!failed))
}

/// Whether a settled result is a failure (its `error`).
pub fn settled_error(v: &Value) -> Option<&str> {
    non_empty_str(v.get("error"))
}

/// A pre-admission rejection: an error with `dispatched:false, ambiguous:false`
/// and no settlement claim.
pub fn is_rejection(v: &Value) -> bool {
    non_empty_str(v.get("error")).is_some() && v.get("dispatched") == Some(&Value::Bool(false)) && v.get("ambiguous") == Some(&Value::Bool(false)) && v.get("settled") != Some(&Value::Bool(true))
}

/// Classify one action reply (see the module doc).
pub fn classify(d: &Descriptor, action_id: &str, epoch: &str, reply: Result<Reply, Failure>) -> ActionReply {
    let r = match reply {
        Ok(r) => r,
        Err(f) if f.kind == FailureKind::NotSent => return ActionReply::NotSent(f.message),
        Err(f) => {
            let reason = match f.kind {
                FailureKind::TooLarge => "reply_too_large",
                FailureKind::NotJson => "reply_not_json",
                _ => "reply_lost",
            };
            return ActionReply::Unknown { reason, detail: json!({"message": f.message, "httpStatus": f.status}) };
        }
    };
    if let Err(e) = identity::check_binding(d, &r.body) {
        return ActionReply::Unknown { reason: "binding_mismatch", detail: json!({"message": e.message, "binding": e.details, "httpStatus": r.status}) };
    }
    let Some(v) = r.body.get("value").filter(|v| v.is_object()) else {
        return ActionReply::Unknown { reason: "protocol_error", detail: json!({"httpStatus": r.status, "body": r.body}) };
    };
    if is_settled(v, action_id, epoch) {
        ActionReply::Settled(v.clone())
    } else if is_rejection(v) {
        let mut v = v.clone();
        v["httpStatus"] = json!(r.status);
        ActionReply::Rejected(v)
    } else if v.get("settled") == Some(&Value::Bool(false)) {
        ActionReply::Unknown { reason: "pending", detail: json!({"httpStatus": r.status, "value": v}) }
    } else {
        ActionReply::Unknown { reason: "unrecognised_reply", detail: json!({"httpStatus": r.status, "value": v}) }
    }
}

/// A committed completion of the action, as a result page returned it.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub execution_result: Value,
    /// The Runner's store receipt (`{sequence, sha256, committed:true}`).
    pub receipt: Value,
}

/// One result page, read.
#[derive(Clone, Debug, PartialEq)]
pub enum Page {
    Found(Found),
    /// Not on this page; ask again with this cursor.
    More(String),
    /// The store has no (more) records: not found.
    End,
}

fn page_invalid(message: &str, page: &Value) -> ProviderError {
    ProviderError::new(IOS_WDA_PROTOCOL_ERROR, message.to_string()).with_details(json!({"page": page})).not_dispatched()
}

/// Read a result page for `action_id` / `epoch` of Runner `runner_bundle_id`.
pub fn parse_page(page: &Value, action_id: &str, epoch: &str, runner_bundle_id: &str) -> Result<Page, ProviderError> {
    if page.get("ok") != Some(&Value::Bool(true)) {
        return Err(page_invalid("the result page is not ok:true", page));
    }
    match page.get("found") {
        Some(Value::Bool(true)) => {
            let result = page.get("executionResult").cloned().unwrap_or(Value::Null);
            let same = page.get("actionId").and_then(Value::as_str) == Some(action_id) && page.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch);
            if !same || !is_settled(&result, action_id, epoch) {
                return Err(page_invalid("the result page's completion is not the settled result of this action and Runner epoch", page));
            }
            if page.pointer("/receipt/committed") != Some(&Value::Bool(true)) {
                return Err(page_invalid("the result page's completion is not committed", page));
            }
            // The completion binds its Runner (record `runnerBundleId`, execution target).
            let runners = [page.get("runnerBundleId"), page.pointer("/completion/runnerBundleId"), result.pointer("/execution/target/runnerBundleId")];
            if runners.iter().flatten().any(|r| r.as_str() != Some(runner_bundle_id)) {
                return Err(page_invalid("the completion belongs to another Runner", page));
            }
            if let Some(schema) = page.pointer("/completion/schemaVersion")
                && schema.as_str() != Some(COMPLETION_SCHEMA)
            {
                return Err(page_invalid("the completion record is not aab.wda-completion/v1", page));
            }
            Ok(Page::Found(Found { execution_result: result, receipt: page["receipt"].clone() }))
        }
        Some(Value::Bool(false)) => match page.get("nextCursor") {
            Some(Value::String(c)) if !c.is_empty() && c.len() <= 2048 => Ok(Page::More(c.clone())),
            None | Some(Value::Null) => Ok(Page::End),
            Some(_) => Err(page_invalid("the result page's nextCursor is not a cursor", page)),
        },
        _ => Err(page_invalid("the result page has no boolean found", page)),
    }
}

/// The outcome of reconciling one recorded action with its Runner.
#[derive(Clone, Debug, PartialEq)]
pub enum Settlement {
    /// The Runner's committed completion of exactly this action and original epoch.
    Settled { found: Found, serving_epoch: String },
    /// No proof: why, and what the device said.
    Unsettled { reason: String, answer: Value },
}

/// Ask the device's current Runner for the durable completion of the recorded
/// action, by its ORIGINAL Runner epoch. Never sends the action again; only a
/// committed matching completion settles. Idle status, a cancel acknowledgement
/// or a new Runner without the record are all unsettled.
pub async fn settle(devicectl: &Devicectl, record: &ActionRecord, deadline: Deadline) -> Settlement {
    let unsettled = |reason: &str, answer: Value| Settlement::Unsettled { reason: reason.to_string(), answer };
    let conn = match connect(devicectl, &record.device_id, &record.runner_bundle_id, record.wda_url.as_deref(), deadline).await {
        Ok(c) => c,
        Err(e) => return unsettled("runner_unreachable", json!({"error": e.error, "message": e.message, "details": e.details})),
    };
    if conn.device.udid != record.udid {
        return unsettled("device_changed", json!({"recordedUdid": record.udid, "selectedUdid": conn.device.udid}));
    }
    match conn.find_result(&record.runner_action_id, &record.runner_epoch, deadline).await {
        Ok(Some(found)) => Settlement::Settled { found, serving_epoch: conn.descriptor.runtime_epoch },
        Ok(None) => unsettled("completion_not_found", json!({"actionId": record.runner_action_id, "runnerEpoch": record.runner_epoch, "servingEpoch": conn.descriptor.runtime_epoch})),
        Err(e) => unsettled(&e.error, json!({"message": e.message, "details": e.details})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "host-action-1-2-3";
    const E: &str = "E1";

    fn d() -> Descriptor {
        Descriptor { bundle_id: "r.xctrunner".into(), runtime_epoch: E.into(), process_id: 7, port: 8100 }
    }

    fn settled() -> Value {
        json!({"sessionId": "S", "actionId": A, "runtimeEpoch": E, "settled": true, "dispatched": true, "ambiguous": false,
               "execution": {"schemaVersion": EXECUTION_SCHEMA, "actionId": A, "runtimeEpoch": E, "settled": true,
                             "target": {"bundleId": "com.example", "processId": 4, "runnerBundleId": "r.xctrunner", "operation": "tap"}}})
    }

    fn reply(status: u16, value: Value) -> Result<Reply, Failure> {
        Ok(Reply { status, body: json!({"wdaBinding": d().binding(), "sessionId": null, "value": value}), bytes: 0 })
    }

    #[test]
    fn the_body_has_exactly_the_five_keys_and_the_runner_epoch() {
        let t = Target { bundle_id: "com.example".into(), process_id: 4, session_id: Some("S".into()) };
        let b = action_body("tap", &t, json!({"x": 1, "y": 2}), A, E, 0);
        let mut keys: Vec<_> = b.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["actionId", "execution", "operation", "payload", "target"]);
        assert_eq!(b["execution"], json!({"schemaVersion": EXECUTION_SCHEMA, "actionId": A, "runtimeEpoch": E, "timeoutMs": 1}));
        assert_eq!(b["target"]["sessionId"], "S");
    }

    #[test]
    fn replies_are_classified_by_what_they_prove() {
        assert!(matches!(classify(&d(), A, E, reply(200, settled())), ActionReply::Settled(_)));
        let mut failed = settled();
        failed["error"] = json!("ios_wda_event_failed");
        assert!(matches!(classify(&d(), A, E, reply(200, failed.clone())), ActionReply::Settled(_)));
        assert_eq!(settled_error(&failed), Some("ios_wda_event_failed"));
        let mut wrong_ok = failed.clone();
        wrong_ok["ok"] = json!(true);
        assert!(matches!(classify(&d(), A, E, reply(200, wrong_ok)), ActionReply::Unknown { .. }));
        // Another action's or another epoch's result settles nothing.
        assert!(matches!(classify(&d(), "other", E, reply(200, settled())), ActionReply::Unknown { .. }));
        assert!(matches!(classify(&d(), A, "E2", reply(200, settled())), ActionReply::Unknown { .. }));
        let rejected = json!({"error": "ios_wda_action_busy", "message": "busy", "dispatched": false, "ambiguous": false});
        assert!(matches!(classify(&d(), A, E, reply(409, rejected)), ActionReply::Rejected(v) if v["httpStatus"] == 409));
        let pending = json!({"schemaVersion": EXECUTION_SCHEMA, "actionId": A, "runtimeEpoch": E, "ok": false, "error": "ios_wda_action_timeout", "settled": false, "dispatched": null, "ambiguous": true});
        assert!(matches!(classify(&d(), A, E, reply(200, pending)), ActionReply::Unknown { reason: "pending", .. }));
        // A mismatched binding is never believed, even when it claims a rejection.
        let mut body = json!({"wdaBinding": d().binding(), "value": {"error": "x", "message": "m", "dispatched": false, "ambiguous": false}});
        body["wdaBinding"]["processId"] = json!(8);
        assert!(matches!(classify(&d(), A, E, Ok(Reply { status: 409, body, bytes: 0 })), ActionReply::Unknown { reason: "binding_mismatch", .. }));
        let lost = Failure { kind: FailureKind::Lost, message: "reset".into(), status: None };
        assert!(matches!(classify(&d(), A, E, Err(lost)), ActionReply::Unknown { reason: "reply_lost", .. }));
        let refused = Failure { kind: FailureKind::NotSent, message: "refused".into(), status: None };
        assert!(matches!(classify(&d(), A, E, Err(refused)), ActionReply::NotSent(_)));
    }

    #[test]
    fn only_a_committed_completion_of_the_original_epoch_is_found() {
        let found = json!({"ok": true, "found": true, "actionId": A, "runtimeEpoch": E, "executionResult": settled(), "receipt": {"sequence": 3, "sha256": "ab", "committed": true}});
        assert!(matches!(parse_page(&found, A, E, "r.xctrunner").unwrap(), Page::Found(f) if f.receipt["sequence"] == 3));
        assert!(parse_page(&found, A, "E2", "r.xctrunner").is_err(), "another epoch's lookup cannot be answered with E1's record");
        assert!(parse_page(&found, A, E, "other.xctrunner").is_err());
        let mut uncommitted = found.clone();
        uncommitted["receipt"]["committed"] = json!(false);
        assert!(parse_page(&uncommitted, A, E, "r.xctrunner").is_err());
        let more = json!({"ok": true, "found": false, "settled": false, "hasMore": true, "nextSequence": 65, "throughSequence": 70, "nextCursor": "eyJzIjo2NX0="});
        assert_eq!(parse_page(&more, A, E, "r.xctrunner").unwrap(), Page::More("eyJzIjo2NX0=".into()));
        let end = json!({"ok": true, "found": false, "settled": false, "hasMore": false, "nextSequence": 70, "throughSequence": 70, "nextCursor": null});
        assert_eq!(parse_page(&end, A, E, "r.xctrunner").unwrap(), Page::End);
        assert!(parse_page(&json!({"ok": true}), A, E, "r.xctrunner").is_err());
    }
}
