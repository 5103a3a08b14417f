//! The `reconcile` hook (`device-ownership reconcile`, `ios-execution
//! reconcile`): the host hands over a pending action `{pending:{actionId,
//! runtimeEpoch, command, plugin, target}, …}`; the action record written before
//! the dispatch mark says where to ask. SDK actions (H5, Flutter) are settled
//! ONLY from the app's durable `aab.ios-completion/v1` completion of the
//! recorded SDK action id and ORIGINAL execution epoch (a relaunched app reads
//! the same store); WDA actions only from the Runner's durable completion
//! (`aab_ios_transport::wda::execution::settle`). Anything else — no record, an
//! unreachable app, a completion not found, an action still running — is
//! `unsettled` with the reason and what the device said. Nothing is ever resent.
//!
//! Optional request fields `runtimeUrl` / `iosHost` / `iosPort` / `devicectl` /
//! `wdaUrl` (top level or under `arguments`) select the connection used for the
//! recovery; the identity is still the device's and the app's.

use aab_ios_transport::sdk::{self, Overrides, Settlement, record};
use aab_ios_transport::{Deadline, Devicectl, wda};
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

fn unsettled(reason: &str, answer: Value) -> Value {
    json!({"status": "unsettled", "reason": reason, "answer": answer})
}

/// A connection option of the request (top level, else under `arguments`).
fn option<'a>(request: &'a Value, key: &str) -> Option<&'a Value> {
    request.get(key).or_else(|| request.pointer(&format!("/arguments/{key}"))).filter(|v| !v.is_null())
}

fn overrides(request: &Value) -> Overrides {
    let s = |k: &str| option(request, k).and_then(Value::as_str).map(str::to_string);
    Overrides { runtime_url: s("runtimeUrl"), ios_host: s("iosHost"), ios_port: option(request, "iosPort").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()) }
}

pub async fn reconcile(ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let pending = &request["pending"];
    let Some(host_action_id) = pending.get("actionId").and_then(Value::as_str) else {
        return Err(ProviderError::new("invalid_argument", "reconcile needs pending.actionId").with_field("pending.actionId").not_dispatched());
    };
    let host_epoch = pending.get("runtimeEpoch").cloned().unwrap_or(Value::Null);
    let deadline = Deadline::after(ctx.remaining());
    let over = overrides(&request);
    over.check()?;
    let devicectl = option(&request, "devicectl").and_then(Value::as_str).map(str::to_string);
    if let Some(rec) = record::lookup(ctx, host_action_id)? {
        let dc = Devicectl::resolve(devicectl.as_deref().or(rec.devicectl.as_deref()));
        return Ok(match sdk::settle(&dc, &rec, &over, deadline).await {
            Settlement::Settled { execution_result, receipt, serving_runtime_epoch } => {
                let proof = crate::managed::proof(rec.kind, &execution_result, Some(&receipt));
                json!({"status": "settled", "receipt": {
                    "actionId": host_action_id, "runtimeEpoch": host_epoch, "kind": rec.kind.name(), "command": rec.command,
                    "sdkActionId": rec.action_id, "executionRuntimeEpoch": rec.runtime_epoch, "servingRuntimeEpoch": serving_runtime_epoch,
                    "deviceId": rec.device_identifier, "udid": rec.udid, "bundleId": rec.bundle_id,
                    "ok": execution_result["ok"], "executionResult": execution_result, "completionReceipt": receipt, "proof": proof
                }})
            }
            Settlement::Unsettled { reason, answer } => unsettled(&reason, json!({"kind": rec.kind.name(), "sdkActionId": rec.action_id, "executionRuntimeEpoch": rec.runtime_epoch, "device": answer})),
        });
    }
    if let Some(mut rec) = wda::record::lookup(ctx, host_action_id)? {
        if let Some(u) = option(&request, "wdaUrl").and_then(Value::as_str) {
            rec.wda_url = Some(u.to_string());
        }
        let dc = Devicectl::resolve(devicectl.as_deref().or(rec.devicectl.as_deref()));
        return Ok(match wda::execution::settle(&dc, &rec, deadline).await {
            wda::execution::Settlement::Settled { found, serving_epoch } => json!({"status": "settled", "receipt": {
                "actionId": host_action_id, "runtimeEpoch": host_epoch, "kind": "wda", "command": rec.command, "operation": rec.operation,
                "runnerEpoch": rec.runner_epoch, "servingRunnerEpoch": serving_epoch, "deviceId": rec.device_identifier, "udid": rec.udid,
                "runnerBundleId": rec.runner_bundle_id, "ok": wda::execution::settled_error(&found.execution_result).is_none(),
                "executionResult": found.execution_result, "completionReceipt": found.receipt
            }}),
            wda::execution::Settlement::Unsettled { reason, answer } => unsettled(&reason, json!({"kind": "wda", "runnerEpoch": rec.runner_epoch, "device": answer})),
        });
    }
    // install / launch go through devicectl, which keeps no receipt to settle from.
    Ok(unsettled("no_action_record", json!({"actionId": host_action_id, "command": pending.get("command"), "note": "only managed SDK (H5, Flutter) and WDA actions keep a durable completion; devicectl installs and launches cannot be proven after the fact"})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_overrides_come_from_the_request_or_its_arguments() {
        let o = overrides(&json!({"runtimeUrl": "http://127.0.0.1:9", "arguments": {"iosPort": 7}}));
        assert_eq!(o, Overrides { runtime_url: Some("http://127.0.0.1:9".into()), ios_host: None, ios_port: Some(7) });
        assert_eq!(overrides(&json!({"iosPort": 70000})).ios_port, None);
        assert_eq!(overrides(&json!({})), Overrides::default());
    }
}
