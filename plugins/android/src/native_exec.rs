//! The host side of the SDK's managed execution (`aab.native-execution/v1`,
//! aab-protocols §1.6) for every Android action that goes through the app SDK:
//! select the device, prove the app is in the foreground, read the SDK status
//! (it must advertise the schema: `native_execution_unavailable` otherwise, no
//! fallback), write the action record, mark the dispatch, POST once with the
//! 4-key execution object carrying the remaining deadline, and classify the
//! reply: the exact rejection shape → not dispatched; a settled receipt → the
//! outcome with a compact settlement proof; anything else (lost, pending,
//! invalid) → ONE cancel to the same endpoint that only a matching
//! `executionResult` settles, otherwise the outcome is ambiguous and the host
//! leaves the device unresolved. Nothing is ever resent.

use std::time::Duration;

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::adb::Deadline;
use crate::commands::{Budget, device};
use crate::sdk::{Route, SdkTarget, http};

pub const SCHEMA: &str = "aab.native-execution/v1";
pub const NATIVE_EXECUTION_UNAVAILABLE: &str = "native_execution_unavailable";
/// The SDK's cleanup grace before a running action's pending reply.
const GRACE: Duration = Duration::from_millis(1500);
/// The one cancel after a lost or invalid reply.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(4);

/// A family of the SDK's managed actions: its execution schema, cancel route and
/// the kind its action records and settlement proofs carry.
pub struct Family {
    pub schema: &'static str,
    pub cancel: &'static str,
    pub kind: &'static str,
    /// Whether the action's runtime epoch is the SDK process's (its descriptor's):
    /// a new process keeps no receipt, so reconcile stops at an epoch change.
    /// Flutter's is the Dart engine's, which its SDK checks itself.
    pub sdk_epoch: bool,
}

pub const NATIVE: Family = Family { schema: SCHEMA, cancel: "/v1/action/cancel", kind: "native", sdk_epoch: true };

/// The app an action targets and how to reach it.
pub struct App {
    pub package: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// A verified route to the SDK of the foreground app, with its status.
pub struct Session {
    pub serial: String,
    pub package: String,
    pub route: Route,
    pub epoch: String,
    pub budget: Budget,
    pub foreground: Value,
    /// The action family [`Session::execute`] acts in (native, or H5 through [`open_for`]).
    pub family: &'static Family,
    /// When `open` started (the reply's `timingsMs` split the round trip).
    pub started: std::time::Instant,
}

fn left(deadline: Deadline) -> Duration {
    deadline.instant().saturating_duration_since(tokio::time::Instant::now())
}

/// Device, foreground (must be the app), SDK route and status with the schema.
pub async fn open(ctx: &Context<'_>, app: &App) -> Result<Session, ProviderError> {
    open_for(ctx, app, &NATIVE, check_status).await
}

/// [`open`] for another managed-execution family of the same SDK (H5): `check`
/// reads the status (the schemas the family needs; returns the runtime epoch) and
/// `family` is what [`Session::execute`] sends and records.
pub async fn open_for(ctx: &Context<'_>, app: &App, family: &'static Family, check: fn(&str, &Value) -> Result<String, ProviderError>) -> Result<Session, ProviderError> {
    open_with(ctx, app, family, "/v1/status", check).await.map(|(session, _)| session)
}

/// What every family's session starts with: the device, the foreground proof (the
/// app must own it), the SDK route, then one read of `status_path` that `check`
/// turns into the family's runtime epoch. Returns the session and that read.
pub async fn open_with(ctx: &Context<'_>, app: &App, family: &'static Family, status_path: &str, check: impl FnOnce(&str, &Value) -> Result<String, ProviderError>) -> Result<(Session, Value), ProviderError> {
    let started = std::time::Instant::now();
    let budget = Budget::new(ctx, app.adb_timeout_ms);
    let device = device(app.adb.as_deref(), app.serial.as_deref(), &budget).await?;
    let serial = device.serial.clone();
    let foreground = crate::foreground::require(&device, Some(&app.package), budget.adb()).await?;
    let target = SdkTarget { device, package: app.package.clone(), port: app.port };
    let route = target.route(budget.adb()).await?;
    let status = http::request(route.forward.port, "GET", status_path, None, budget.adb()).await.map_err(|e| e.not_dispatched())?.body;
    let epoch = check(&app.package, &status)?;
    let foreground = foreground.map(|f| json!({"package": f.window.package, "activity": f.window.activity, "pid": f.process.pid})).unwrap_or(Value::Null);
    Ok((Session { serial, package: app.package.clone(), route, epoch, budget, foreground, family, started }, status))
}

/// The status must be ok, of this package, and advertise `aab.native-execution/v1`;
/// returns the SDK's runtime epoch.
pub fn check_status(package: &str, status: &Value) -> Result<String, ProviderError> {
    check_status_with(package, status, &[("nativeExecutionSchema", SCHEMA)], NATIVE_EXECUTION_UNAVAILABLE)
}

/// [`check_status`] with the `debugBridge` schema fields a family requires
/// (`(field, value)`); a missing or other value is `unavailable`, not dispatched.
pub fn check_status_with(package: &str, status: &Value, required: &[(&str, &str)], unavailable: &str) -> Result<String, ProviderError> {
    if status.get("ok") != Some(&Value::Bool(true)) {
        let code = status.get("error").and_then(Value::as_str).unwrap_or(http::BRIDGE_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("the SDK of {package} refused the status read")).with_details(json!({"body": status})).not_dispatched());
    }
    if let Some(found) = status.pointer("/app/packageName").and_then(Value::as_str)
        && found != package
    {
        return Err(ProviderError::new(crate::sdk::endpoint::codes::BRIDGE_PACKAGE_MISMATCH, format!("the SDK status belongs to {found:?}, not {package:?}")).not_dispatched());
    }
    for (field, want) in required {
        let found = status.get("debugBridge").and_then(|b| b.get(*field));
        if found.and_then(Value::as_str) != Some(*want) {
            return Err(ProviderError::new(unavailable, format!("the SDK of {package} does not advertise {field} {want}; these managed actions are unavailable"))
                .with_details(json!({ *field: found }))
                .not_dispatched());
        }
    }
    match status.pointer("/debugBridge/runtimeEpoch").and_then(Value::as_str) {
        Some(e) if crate::sdk::endpoint::is_runtime_epoch(e) => Ok(e.to_string()),
        _ => Err(ProviderError::new(http::BRIDGE_PROTOCOL_ERROR, "the SDK status has no valid debugBridge.runtimeEpoch").not_dispatched()),
    }
}

impl Session {
    /// A fresh `GET /v1/view/tree` (a read: failures are not dispatched).
    pub async fn tree(&self) -> Result<Value, ProviderError> {
        let body = http::request(self.route.forward.port, "GET", "/v1/view/tree", None, self.budget.adb()).await.map_err(|e| e.not_dispatched())?.body;
        if body.get("ok") != Some(&Value::Bool(true)) {
            let code = body.get("error").and_then(Value::as_str).unwrap_or(http::BRIDGE_PROTOCOL_ERROR).to_string();
            return Err(ProviderError::new(code, "the SDK could not read the view tree").with_details(json!({"body": body})).not_dispatched());
        }
        Ok(body)
    }

    /// Run one managed action: record, mark, POST once, classify (see the module doc).
    /// `extra_ms` widens the HTTP wait for actions that take time (gestures).
    pub async fn execute(&self, ctx: &Context<'_>, inv: &Invocation, command: &str, path: &str, body: Map<String, Value>, extra_ms: u64) -> Result<Value, ProviderError> {
        self.execute_as(self.family, ctx, inv, command, path, body, extra_ms).await
    }

    /// [`Session::execute`] for any action family (Flutter: `aab.flutter-execution/v1`, `/v1/flutter/cancel`).
    #[allow(clippy::too_many_arguments)]
    pub async fn execute_as(&self, fam: &Family, ctx: &Context<'_>, inv: &Invocation, command: &str, path: &str, mut body: Map<String, Value>, extra_ms: u64) -> Result<Value, ProviderError> {
        let action_id = inv.action_id.clone();
        // The SDK's timeout is the remaining deadline minus what the host needs
        // after it: the SDK's grace and the one cancel.
        let remaining = left(self.budget.deadline);
        let reserve = GRACE + CANCEL_TIMEOUT + Duration::from_millis(500);
        let timeout = if remaining > reserve * 2 { remaining - reserve } else { remaining / 2 };
        let timeout_ms = (timeout.as_millis() as u64).clamp(1, 2_147_483_647);
        let execution = json!({"schemaVersion": fam.schema, "actionId": action_id, "runtimeEpoch": self.epoch, "timeoutMs": timeout_ms});
        body.insert("actionId".into(), json!(action_id));
        body.insert("execution".into(), execution.clone());
        let device = json!({"actionId": action_id, "runtimeEpoch": self.epoch, "route": path, "port": self.route.forward.port, "socket": self.route.descriptor.socket_name});
        let record = crate::action_record::record(fam.kind, command, &self.serial, Some(&self.package), device);
        let prepared = self.started.elapsed();
        crate::action_record::append(ctx, &action_id, &record)?;
        let recorded = self.started.elapsed();
        let wait = Deadline::after(Duration::from_millis(timeout_ms) + GRACE + Duration::from_millis(500 + extra_ms));
        let http_deadline = if wait.instant() < self.budget.deadline.instant() { wait } else { self.budget.deadline };
        let body = Value::Object(body);
        ctx.mark_dispatched();
        let reply = http::request(self.route.forward.port, "POST", path, Some(&body), http_deadline).await;
        let first = match reply {
            Ok(r) => match classify(fam.schema, &r.body, &action_id, &self.epoch) {
                Reply::Rejected => {
                    let code = r.body["error"].as_str().map(str::to_string).unwrap_or_else(|| format!("{}_action_rejected", fam.kind));
                    let mut e = ProviderError::new(code, format!("the SDK refused the action before admission: {}", r.body["message"].as_str().unwrap_or("")))
                        .with_details(json!({"actionId": action_id, "runtimeEpoch": self.epoch, "route": path, "device": r.body}))
                        .not_dispatched();
                    if let Some(f) = r.body.get("field").and_then(Value::as_str) {
                        e = e.with_field(f);
                    }
                    return Err(e);
                }
                Reply::Settled => {
                    let ms = |d: Duration| (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0;
                    let timings = json!({"prepareMs": ms(prepared), "recordMs": ms(recorded - prepared), "actionMs": ms(self.started.elapsed() - recorded)});
                    return self.settled(fam, path, r.body, None).map(|mut v| {
                        v["timingsMs"] = timings;
                        v
                    });
                }
                Reply::Unknown => json!({"error": r.body.get("error").cloned().unwrap_or(Value::Null), "reply": r.body}),
            },
            // Nothing was written: the SDK never saw the action.
            Err(e) if e.dispatched == Some(false) => return Err(e),
            Err(e) => json!({"error": e.error, "message": e.message}),
        };
        // Lost, pending or invalid: ONE cancel with the same identity.
        let cancel_body = json!({"actionId": action_id, "runtimeEpoch": self.epoch});
        let answer = match http::request(self.route.forward.port, "POST", fam.cancel, Some(&cancel_body), Deadline::after(CANCEL_TIMEOUT)).await {
            Ok(r) => r.body,
            Err(e) => json!({"transportError": e.error, "message": e.message}),
        };
        if let Some(receipt) = matching_execution_result(fam.schema, &answer, &action_id, &self.epoch) {
            return self.settled(fam, path, receipt, Some(first));
        }
        let code = first["error"].as_str().filter(|c| !c.is_empty()).map(str::to_string).unwrap_or_else(|| format!("{}_action_unresolved", fam.kind));
        Err(ProviderError::new(code, "the SDK's reply was lost or unsettled and its cancel returned no matching receipt: the action's outcome is unknown (device unresolved; run device-ownership reconcile)")
            .with_details(json!({"actionId": action_id, "runtimeEpoch": self.epoch, "route": path, "ambiguous": true, "first": first, "cancel": answer})))
    }

    /// A settled receipt: success, or the SDK's failure with its dispatch fact.
    fn settled(&self, fam: &Family, path: &str, receipt: Value, recovered: Option<Value>) -> Result<Value, ProviderError> {
        let proof = proof(fam.kind, &receipt);
        let action_id = receipt["actionId"].clone();
        if receipt["ok"] == true {
            let mut out = json!({"ok": true, "serial": self.serial, "packageName": self.package, "actionId": action_id, "runtimeEpoch": self.epoch, "route": path, "foreground": self.foreground, "device": receipt, "proof": proof});
            if let Some(first) = recovered {
                out["recoveredBy"] = json!({"cancel": true, "first": first});
            }
            return Ok(out);
        }
        let code = receipt["error"].as_str().map(str::to_string).unwrap_or_else(|| format!("{}_action_failed", fam.kind));
        let e = ProviderError::new(code, format!("the SDK settled the action as failed: {}", receipt["message"].as_str().unwrap_or("")))
            .with_details(json!({"actionId": action_id, "runtimeEpoch": self.epoch, "route": path, "device": receipt, "proof": proof, "recoveredBy": recovered}));
        let e = match receipt.get("field").and_then(Value::as_str) {
            Some(f) => e.with_field(f),
            None => e,
        };
        // A settled receipt is a known outcome either way: the host settles the
        // device's journal instead of leaving it unresolved.
        Err(if receipt["dispatched"] == false { e.not_dispatched() } else { e.settled_after_dispatch() })
    }
}

enum Reply {
    Rejected,
    Settled,
    Unknown,
}

/// The exact pre-admission rejection `{ok:false, error, message, dispatched:false,
/// ambiguous:false}` (optionally `field`), with no `execution` member.
pub fn is_rejection(body: &Value) -> bool {
    let Some(o) = body.as_object() else { return false };
    o.keys().all(|k| ["ok", "error", "message", "dispatched", "ambiguous", "field"].contains(&k.as_str()))
        && o.get("ok") == Some(&Value::Bool(false))
        && o.get("error").and_then(Value::as_str).is_some_and(|e| !e.is_empty())
        && o.get("message").is_some_and(Value::is_string)
        && o.get("dispatched") == Some(&Value::Bool(false))
        && o.get("ambiguous") == Some(&Value::Bool(false))
}

/// A terminal receipt of exactly this action (§1.6 invariants) in the family
/// whose execution schema is `schema`.
pub fn is_settled_receipt(schema: &str, r: &Value, action_id: &str, epoch: &str) -> bool {
    aab_plugin_api::execution::is_settled_receipt(schema, r, action_id, epoch)
}

fn classify(schema: &str, body: &Value, action_id: &str, epoch: &str) -> Reply {
    if is_rejection(body) {
        Reply::Rejected
    } else if is_settled_receipt(schema, body, action_id, epoch) {
        Reply::Settled
    } else {
        Reply::Unknown
    }
}

/// The receipt inside a cancel answer `{ok:true, actionId, runtimeEpoch, executionResult}` of exactly this action.
pub fn matching_execution_result(schema: &str, answer: &Value, action_id: &str, epoch: &str) -> Option<Value> {
    let r = answer.get("executionResult")?;
    (answer.get("ok") == Some(&Value::Bool(true))
        && answer.get("actionId").and_then(Value::as_str) == Some(action_id)
        && answer.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch)
        && is_settled_receipt(schema, r, action_id, epoch))
    .then(|| r.clone())
}

/// The compact settlement proof of a terminal receipt of the family `kind`.
pub fn proof(kind: &str, receipt: &Value) -> Value {
    let sha = Sha256::digest(serde_json::to_vec(receipt).unwrap_or_default());
    json!({
        "kind": kind, "settled": true, "actionId": receipt["actionId"], "runtimeEpoch": receipt["runtimeEpoch"], "execution": receipt["execution"],
        "dispatched": receipt["dispatched"], "ambiguous": receipt["ambiguous"], "error": receipt.get("error").cloned().unwrap_or(Value::Null),
        "responseSha256": sha.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: &str = "1764633600000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

    fn receipt() -> Value {
        json!({"ok": true, "dispatched": true, "ambiguous": false, "actionId": "A", "runtimeEpoch": E, "settled": true,
               "execution": {"schemaVersion": SCHEMA, "actionId": "A", "runtimeEpoch": E, "settled": true}})
    }

    #[test]
    fn only_the_exact_rejection_shape_proves_non_dispatch() {
        let r = json!({"ok": false, "error": "native_action_busy", "message": "m", "dispatched": false, "ambiguous": false});
        assert!(is_rejection(&r));
        let mut with_exec = r.clone();
        with_exec["execution"] = json!({});
        assert!(!is_rejection(&with_exec));
        assert!(!is_rejection(&json!({"ok": false, "error": "invalid_json"})));
        let mut pending = r.clone();
        pending["dispatched"] = Value::Null;
        assert!(!is_rejection(&pending));
    }

    #[test]
    fn the_status_must_advertise_the_execution_schema() {
        let mut st = json!({"ok": true, "app": {"packageName": "com.example.app"}, "debugBridge": {"runtimeEpoch": E, "nativeExecutionSchema": SCHEMA}});
        assert_eq!(check_status("com.example.app", &st).unwrap(), E);
        st["debugBridge"]["nativeExecutionSchema"] = Value::Null;
        let e = check_status("com.example.app", &st).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (NATIVE_EXECUTION_UNAVAILABLE, Some(false)));
        st["debugBridge"]["nativeExecutionSchema"] = json!(SCHEMA);
        assert_eq!(check_status("com.other", &st).unwrap_err().error, "bridge_package_mismatch");
        st["debugBridge"]["runtimeEpoch"] = json!("nope");
        assert_eq!(check_status("com.example.app", &st).unwrap_err().dispatched, Some(false));
    }

    #[test]
    fn settled_receipts_must_match_the_action() {
        assert!(is_settled_receipt(SCHEMA, &receipt(), "A", E));
        assert!(!is_settled_receipt(SCHEMA, &receipt(), "B", E));
        let mut bad = receipt();
        bad["ambiguous"] = json!(true);
        assert!(!is_settled_receipt(SCHEMA, &bad, "A", E));
        let mut failed = receipt();
        failed["ok"] = json!(false);
        assert!(!is_settled_receipt(SCHEMA, &failed, "A", E), "ok:false needs an error");
        failed["error"] = json!("native_action_timeout");
        assert!(is_settled_receipt(SCHEMA, &failed, "A", E));
        let answer = json!({"ok": true, "actionId": "A", "runtimeEpoch": E, "executionResult": receipt()});
        assert!(matching_execution_result(SCHEMA, &answer, "A", E).is_some());
        assert!(matching_execution_result(SCHEMA, &json!({"ok": false, "error": "native_action_not_active"}), "A", E).is_none());
        let p = proof("native", &receipt());
        assert_eq!((p["kind"].as_str(), p["responseSha256"].as_str().map(str::len)), (Some("native"), Some(64)));
    }
}
