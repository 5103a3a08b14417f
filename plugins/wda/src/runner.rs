//! The host side of one WDA command: open the device's Runner (devicectl, tunnel,
//! descriptor, `/aab/status` preflight), prove the App session the caller names
//! (`/aab/session`: that session, that App, still in the foreground), and run
//! managed actions (`aab.wda-execution/v1`): the action record before the dispatch
//! mark, ONE POST with the Runner epoch and a timeout inside the command deadline,
//! the reply classified by what it proves. A lost, pending or unbelievable reply is
//! never resent and never settled here: the outcome stays unknown (the host keeps
//! the device unresolved) until reconcile finds the Runner's durable completion.

use std::time::Duration;

use aab_ios_transport::wda::execution::{ActionReply, action_body, settled_error};
use aab_ios_transport::wda::record::{self, ActionRecord};
use aab_ios_transport::wda::{Connection, Target, codes as wcodes, connect};
use aab_ios_transport::ids::{peer_code, peer_message};
use aab_ios_transport::{Deadline, Devicectl};
use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The Runner's cleanup grace before a running action's pending reply.
const GRACE: Duration = Duration::from_millis(1500);
/// Time kept after the Runner's own timeout: its grace, the reply's way back.
const RESERVE: Duration = Duration::from_millis(2000);
/// The best-effort cancel after an unknown outcome.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(2);

pub const SESSION_REQUIRED: &str = "ios_wda_session_required";
pub const SESSION_CHANGED: &str = "ios_wda_session_changed";
pub const TARGET_CHANGED: &str = "ios_wda_target_changed";

/// How a command reaches its Runner (the connection options of every WDA command).
pub struct Reach<'a> {
    pub device_id: &'a str,
    pub runner_bundle_id: &'a str,
    pub wda_url: Option<&'a str>,
    pub devicectl: Option<&'a str>,
}

/// An open, preflighted Runner.
pub struct Wda {
    pub conn: Connection,
    pub status: Value,
    pub deadline: Deadline,
    pub device_id: String,
    devicectl: Option<String>,
    wda_url: Option<String>,
}

/// Connect and read `/aab/status` (it must be the prepared Runner).
pub async fn open(ctx: &Context<'_>, reach: &Reach<'_>) -> Result<Wda, ProviderError> {
    let deadline = aab_ios_transport::command::deadline(ctx);
    let devicectl = Devicectl::resolve(reach.devicectl);
    let conn = connect(&devicectl, reach.device_id, reach.runner_bundle_id, reach.wda_url, deadline).await?;
    let status = conn.status(deadline).await?;
    Ok(Wda { conn, status, deadline, device_id: reach.device_id.to_string(), devicectl: reach.devicectl.map(str::to_string), wda_url: reach.wda_url.map(str::to_string) })
}

/// [`open`], then prove the App session the caller names ([`Wda::bound`]).
pub async fn open_session(ctx: &Context<'_>, reach: &Reach<'_>, bundle_id: &str, session_id: &str) -> Result<(Wda, Target), ProviderError> {
    let wda = open(ctx, reach).await?;
    let target = wda.bound(bundle_id, session_id).await?;
    Ok((wda, target))
}

fn pid_of(v: &Value) -> Option<u64> {
    v.get("processId").and_then(Value::as_u64)
}

/// The session the caller names must be the Runner's bound session of that App,
/// and the App must still be the foreground process the session froze.
pub fn check_session(view: &Value, bundle_id: &str, session_id: &str) -> Result<Target, ProviderError> {
    let session = view.get("session").filter(|s| s.is_object());
    let Some(session) = session else {
        return Err(ProviderError::new(SESSION_REQUIRED, "the Runner has no session: create one with ios-wda-session --operation create").with_field("wdaSessionId").with_details(json!({"runner": view})).not_dispatched());
    };
    if session.get("sessionId").and_then(Value::as_str) != Some(session_id) {
        return Err(ProviderError::new(SESSION_CHANGED, format!("the Runner's session is not {session_id}")).with_field("wdaSessionId").with_details(json!({"session": session})).not_dispatched());
    }
    if session.get("bundleId").and_then(Value::as_str) != Some(bundle_id) {
        return Err(ProviderError::new(SESSION_CHANGED, format!("session {session_id} belongs to {}, not {bundle_id}", session["bundleId"])).with_field("bundleId").with_details(json!({"session": session})).not_dispatched());
    }
    let Some(pid) = pid_of(session) else {
        return Err(ProviderError::new(wcodes::IOS_WDA_PROTOCOL_ERROR, "the Runner's session has no processId").with_details(json!({"session": session})).not_dispatched());
    };
    let fg = view.get("foreground").filter(|f| f.is_object());
    if fg.and_then(|f| f.get("bundleId")).and_then(Value::as_str) != Some(bundle_id) || fg.and_then(pid_of) != Some(pid) {
        return Err(ProviderError::new(TARGET_CHANGED, format!("{bundle_id} (pid {pid}) of session {session_id} is no longer the foreground App"))
            .with_details(json!({"session": session, "foreground": fg}))
            .not_dispatched());
    }
    Ok(Target { bundle_id: bundle_id.to_string(), process_id: pid, session_id: Some(session_id.to_string()) })
}

/// The execution timeout the Runner gets and how long aab waits for its reply.
pub fn action_budget(remaining: Duration) -> (u64, Duration) {
    let timeout = if remaining > RESERVE * 2 { remaining - RESERVE } else { remaining / 2 };
    let timeout_ms = (timeout.as_millis() as u64).max(1);
    let wait = (Duration::from_millis(timeout_ms) + GRACE + Duration::from_millis(250)).min(remaining);
    (timeout_ms, wait)
}

/// sha256 hex of a JSON value (settlement proofs).
pub fn sha256_json(v: &Value) -> String {
    Sha256::digest(serde_json::to_vec(v).unwrap_or_default()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Wda {
    pub fn runner_epoch(&self) -> &str {
        &self.conn.descriptor.runtime_epoch
    }

    /// `/aab/session` for the App and session the caller names.
    pub async fn bound(&self, bundle_id: &str, session_id: &str) -> Result<Target, ProviderError> {
        let view = self.conn.session(self.deadline).await?;
        check_session(&view, bundle_id, session_id)
    }

    /// The identity facts every reply repeats.
    pub fn facts(&self, target: Option<&Target>) -> Value {
        let mut v = json!({
            "deviceId": self.device_id, "udid": self.conn.device.udid, "device": self.conn.device.identifier,
            "wdaRunnerBundleId": self.conn.descriptor.bundle_id, "runnerEpoch": self.runner_epoch(), "runnerProcessId": self.conn.descriptor.process_id,
            "wdaUrl": self.conn.url,
        });
        if let Some(t) = target {
            v["bundleId"] = json!(t.bundle_id);
            v["processId"] = json!(t.process_id);
            v["wdaSessionId"] = json!(t.session_id);
        }
        v
    }

    /// Run one managed action (see the module doc); the settled success value.
    /// The Runner knows it by [`runner_action_id`]; the record is keyed by the host id.
    pub async fn execute(&self, ctx: &Context<'_>, inv: &Invocation, command: &str, operation: &str, target: &Target, payload: Value) -> Result<Value, ProviderError> {
        let runner_action_id = runner_action_id(inv);
        let action_id = runner_action_id.as_str();
        let epoch = self.runner_epoch().to_string();
        let (timeout_ms, wait) = action_budget(self.deadline.remaining());
        let body = action_body(operation, target, payload, action_id, &epoch, timeout_ms);
        let rec = ActionRecord {
            action_id: inv.action_id.clone(),
            runner_action_id: runner_action_id.clone(),
            command: command.to_string(),
            operation: operation.to_string(),
            device_id: self.device_id.clone(),
            device_identifier: self.conn.device.identifier.clone(),
            udid: self.conn.device.udid.clone(),
            runner_bundle_id: self.conn.descriptor.bundle_id.clone(),
            runner_epoch: epoch.clone(),
            runner_process_id: self.conn.descriptor.process_id,
            wda_url: self.wda_url.clone(),
            devicectl: self.devicectl.clone(),
            target: target.to_json(),
        };
        record::append(ctx, &rec)?;
        let ids = json!({"actionId": action_id, "runnerEpoch": epoch, "operation": operation, "timeoutMs": timeout_ms});
        ctx.mark_dispatched();
        match self.conn.action(&body, Some(target), action_id, wait).await {
            ActionReply::NotSent(message) => Err(ProviderError::new(wcodes::IOS_WDA_UNREACHABLE, format!("the Runner could not be reached; the action was not sent: {message}")).with_details(ids).not_dispatched()),
            ActionReply::Rejected(v) => {
                let code = peer_code(v.get("error")).unwrap_or(wcodes::IOS_WDA_PROTOCOL_ERROR).to_string();
                let mut e = ProviderError::new(code, format!("the Runner refused the {operation} before admission: {}", peer_message(v.get("message")).unwrap_or_default())).with_details(json!({"ids": ids, "runner": v})).not_dispatched();
                if let Some(f) = peer_code(v.get("field")) {
                    e = e.with_field(f);
                }
                Err(e)
            }
            ActionReply::Settled(v) => match settled_error(&v) {
                None => Ok(v),
                Some(code) => {
                    let code = peer_code(Some(&json!(code))).unwrap_or(wcodes::IOS_WDA_PROTOCOL_ERROR).to_string();
                    let e = ProviderError::new(code, format!("the Runner settled the {operation} as failed: {}", peer_message(v.get("message")).unwrap_or_default())).with_details(json!({"ids": ids, "runner": v, "proof": proof(&v)}));
                    // A settled result is a known outcome either way.
                    Err(if v["dispatched"] == false { e.not_dispatched() } else { e.settled_after_dispatch() })
                }
            },
            ActionReply::Unknown { reason, detail } => {
                // Stop queued work and later steps; this never settles the action.
                let cancel = if self.deadline.remaining() > Duration::from_millis(300) {
                    match self.conn.cancel(action_id, &epoch, self.deadline.capped(CANCEL_TIMEOUT)).await {
                        Ok(v) => v,
                        Err(e) => json!({"error": e.error, "message": e.message}),
                    }
                } else {
                    Value::Null
                };
                let code = match reason {
                    "binding_mismatch" => wcodes::IOS_WDA_BINDING_MISMATCH.to_string(),
                    "pending" => peer_code(detail.pointer("/value/error")).unwrap_or(wcodes::IOS_WDA_ACTION_UNRESOLVED).to_string(),
                    _ => wcodes::IOS_WDA_ACTION_UNRESOLVED.to_string(),
                };
                Err(ProviderError::new(
                    code,
                    format!("the {operation}'s outcome is unknown ({reason}); it is never resent: the device stays unresolved until `ios-execution --operation reconcile --device-id <device>` or `device-ownership --operation reconcile --serial ios:<UDID>` finds the Runner's completion"),
                )
                .with_details(json!({"ids": ids, "reason": reason, "reply": detail, "cancel": cancel, "ambiguous": true})))
            }
        }
    }

    /// The success reply of a managed action.
    pub fn action_reply(&self, inv: &Invocation, target: &Target, operation: &str, settled: &Value) -> Value {
        let mut out = self.facts(Some(target));
        out["ok"] = json!(true);
        out["operation"] = json!(operation);
        out["actionId"] = json!(runner_action_id(inv));
        out["hostActionId"] = json!(inv.action_id);
        out["settled"] = json!(true);
        out["dispatched"] = settled["dispatched"].clone();
        out["ambiguous"] = json!(false);
        out["result"] = settled.clone();
        out["proof"] = proof(settled);
        out
    }
}

/// The operation's outcome in a settled result: its `value` (older Runners put
/// the outcome fields next to the identity instead).
pub fn outcome(settled: &Value) -> &Value {
    settled.get("value").filter(|v| v.is_object()).unwrap_or(settled)
}

/// The compact settlement proof of a settled WDA result.
pub fn proof(v: &Value) -> Value {
    json!({"kind": "wda", "settled": true, "actionId": v["actionId"], "runtimeEpoch": v["runtimeEpoch"], "execution": v["execution"], "dispatched": v["dispatched"], "error": v.get("error").cloned().unwrap_or(Value::Null), "resultSha256": sha256_json(v)})
}

/// The id the Runner knows an action by: a Script's `requestId` (or Intent's
/// runtime action id) is preserved as the contract asks, when the Runner's grammar
/// takes it (1..256 visible ASCII); otherwise the host action id.
pub fn runner_action_id(inv: &Invocation) -> String {
    match &inv.request_id {
        Some(r) if (1..=256).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_graphic()) => r.clone(),
        _ => inv.action_id.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_keeps_the_caller_s_request_id_when_its_grammar_takes_it() {
        let inv = Invocation::new("ios-tap", serde_json::json!({}), "host-action-1", "rt", "/", 1000);
        assert_eq!(runner_action_id(&inv), "host-action-1");
        assert_eq!(runner_action_id(&inv.clone().with_request_id(Some("script-step-7".into()))), "script-step-7");
        assert_eq!(runner_action_id(&inv.clone().with_request_id(Some("has space".into()))), "host-action-1");
        assert_eq!(runner_action_id(&inv.clone().with_request_id(Some("x".repeat(257)))), "host-action-1");
    }

    fn view(fg: (&str, u64), session: Option<(&str, &str, u64)>) -> Value {
        json!({"foreground": {"bundleId": fg.0, "processId": fg.1}, "session": session.map(|(id, b, p)| json!({"sessionId": id, "bundleId": b, "processId": p}))})
    }

    #[test]
    fn the_named_session_must_be_bound_and_its_app_in_front() {
        let t = check_session(&view(("com.example", 4), Some(("S", "com.example", 4))), "com.example", "S").unwrap();
        assert_eq!((t.process_id, t.session_id.as_deref()), (4, Some("S")));
        let code = |v: Value| check_session(&v, "com.example", "S").unwrap_err();
        assert_eq!(code(view(("com.example", 4), None)).error, SESSION_REQUIRED);
        assert_eq!(code(view(("com.example", 4), Some(("T", "com.example", 4)))).field.as_deref(), Some("wdaSessionId"));
        assert_eq!(code(view(("com.example", 4), Some(("S", "com.other", 4)))).field.as_deref(), Some("bundleId"));
        assert_eq!(code(view(("com.other", 9), Some(("S", "com.example", 4)))).error, TARGET_CHANGED, "switched App");
        assert_eq!(code(view(("com.example", 5), Some(("S", "com.example", 4)))).error, TARGET_CHANGED, "relaunched App");
        assert_eq!(code(json!({"foreground": null, "session": {"sessionId": "S", "bundleId": "com.example", "processId": 4}})).error, TARGET_CHANGED);
        assert!(code(view(("com.other", 9), None)).dispatched == Some(false));
    }

    #[test]
    fn the_runner_timeout_leaves_room_for_the_reply_inside_the_deadline() {
        let (ms, wait) = action_budget(Duration::from_secs(30));
        assert_eq!(ms, 28_000);
        assert!(wait <= Duration::from_secs(30) && wait > Duration::from_millis(ms));
        let (ms, wait) = action_budget(Duration::from_millis(1000));
        assert_eq!(ms, 500);
        assert!(wait <= Duration::from_millis(1000));
        assert_eq!(action_budget(Duration::ZERO).0, 1);
    }
}
