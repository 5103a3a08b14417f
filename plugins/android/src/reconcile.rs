//! The `reconcile` hook (`device-ownership --operation reconcile`): the host
//! hands over a pending action `{pending:{actionId, runtimeEpoch, command,
//! plugin, target{serial}}, serial}`; the action record (written before the
//! dispatch mark, [`crate::action_record`]) says where to ask. Native actions
//! ask the SDK that ran them (`POST /v1/action/cancel {actionId,
//! runtimeEpoch}`) and settle ONLY from a matching `executionResult`; anything
//! else — not active, a new runtime (the SDK keeps its one receipt in memory),
//! unreachable — stays unsettled with the reason and the device's answer.
//! Flutter actions (kind `flutter`) ask `POST /v1/flutter/cancel` the same way.
//! Executor actions (kind `executor`) ask the session's receipt route, or its
//! journal in the target's files dir once the session ended ([`crate::executor::reconcile`]).
//! Shell actions ask the phone's shell worker for the job's durable receipt
//! ([`crate::shell_exec::reconcile`]).

use std::time::Duration;

use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

use crate::adb::Deadline;
use crate::commands::{Budget, device};
use crate::native_exec::{Family, matching_execution_result, proof};
use crate::sdk::{SdkTarget, http};

fn unsettled(reason: &str, answer: Value) -> Value {
    json!({"status": "unsettled", "reason": reason, "answer": answer})
}

pub async fn reconcile(ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let pending = &request["pending"];
    let Some(action_id) = pending.get("actionId").and_then(Value::as_str) else {
        return Err(ProviderError::new("invalid_argument", "reconcile needs pending.actionId").with_field("pending.actionId").not_dispatched());
    };
    let Some(record) = crate::action_record::lookup(ctx, action_id)? else { return Ok(unsettled("no_action_record", Value::Null)) };
    let answer = match record["kind"].as_str() {
        Some("native") => sdk(ctx, &record, &crate::native_exec::NATIVE).await,
        Some("flutter") => sdk(ctx, &record, &crate::flutter::FAMILY).await,
        Some("h5") => sdk(ctx, &record, &crate::h5::FAMILY).await,
        Some("shell") => {
            // The phone's receipt names the job; the host matches on its own action
            // identity, which the record ties to the job.
            let mut answer = crate::shell_exec::reconcile(ctx, &record).await?;
            if answer["status"] == json!("settled") {
                answer["receipt"]["runtimeEpoch"] = pending["runtimeEpoch"].clone();
                answer["receipt"]["kind"] = json!("shell");
            }
            return Ok(answer);
        }
        Some("install") => {
            // The install job's receipt and the installed bytes (never a second install).
            let budget = Budget::new(ctx, None);
            let Some(serial) = record["serial"].as_str() else { return Ok(unsettled("action_record_invalid", record.clone())) };
            let dev = match device(None, Some(serial), &budget).await {
                Ok(d) => d,
                Err(e) => return Ok(unsettled("device_unreachable", json!({"error": e.error, "message": e.message}))),
            };
            let answer = crate::commands::install_apk::settle(ctx, &dev, action_id, &record, budget.deadline, budget.adb_step).await?;
            if answer["settled"] != json!(true) {
                let reason = answer["reason"].as_str().or(answer["status"].as_str()).unwrap_or("install_unresolved").to_string();
                return Ok(unsettled(&reason, answer));
            }
            return Ok(json!({"status": "settled", "receipt": {"actionId": action_id, "runtimeEpoch": pending["runtimeEpoch"], "kind": "install", "ok": answer["succeeded"], "installation": answer}}));
        }
        Some("executor") => crate::executor::reconcile(ctx, &record).await,
        Some("uia") => {
            let budget = Budget::new(ctx, None);
            let Some(serial) = record["serial"].as_str() else { return Ok(unsettled("action_record_invalid", record.clone())) };
            match device(None, Some(serial), &budget).await {
                Ok(dev) => crate::uia::reconcile(&dev, &record, budget.deadline).await.map(|r| (r["device"].clone(), r["proof"].clone())),
                Err(e) => Err(unsettled("device_unreachable", json!({"error": e.error, "message": e.message}))),
            }
        }
        _ => return Ok(unsettled("unsupported_action_kind", json!({"kind": record["kind"]}))),
    };
    Ok(match answer {
        Ok((device, proof)) => json!({"status": "settled", "receipt": {"actionId": action_id, "runtimeEpoch": pending["runtimeEpoch"], "kind": record["kind"], "device": device, "proof": proof}}),
        Err(unsettled) => unsettled,
    })
}

/// Ask the SDK for the receipt of the recorded action of `fam` (native: `/v1/action/cancel`,
/// Flutter: `/v1/flutter/cancel` with the Dart runtime epoch).
async fn sdk(ctx: &Context<'_>, record: &Value, fam: &Family) -> Result<(Value, Value), Value> {
    let (Some(serial), Some(package), Some(action_id), Some(epoch)) = (
        record["serial"].as_str(),
        record["packageName"].as_str(),
        record.pointer("/device/actionId").and_then(Value::as_str),
        record.pointer("/device/runtimeEpoch").and_then(Value::as_str),
    ) else {
        return Err(unsettled("action_record_invalid", record.clone()));
    };
    let budget = Budget::new(ctx, None);
    let dev = device(None, Some(serial), &budget).await.map_err(|e| unsettled("device_unreachable", json!({"error": e.error, "message": e.message})))?;
    let route = SdkTarget { device: dev, package: package.to_string(), port: None }
        .route(budget.adb())
        .await
        .map_err(|e| unsettled("sdk_unreachable", json!({"error": e.error, "message": e.message})))?;
    if fam.sdk_epoch && route.descriptor.runtime_epoch != epoch {
        // The SDK keeps its one terminal receipt in memory: a new process cannot answer.
        return Err(unsettled("runtime_changed", json!({"recordedRuntimeEpoch": epoch, "currentRuntimeEpoch": route.descriptor.runtime_epoch})));
    }
    let body = json!({"actionId": action_id, "runtimeEpoch": epoch});
    let deadline = budget.deadline.capped(Duration::from_secs(4));
    let answer = match http::request(route.forward.port, "POST", fam.cancel, Some(&body), Deadline::at(deadline.instant().into_std())).await {
        Ok(r) => r.body,
        Err(e) => return Err(unsettled("sdk_unreachable", json!({"error": e.error, "message": e.message}))),
    };
    match matching_execution_result(fam.schema, &answer, action_id, epoch) {
        Some(receipt) => {
            let p = proof(fam.kind, &receipt);
            Ok((receipt, p))
        }
        None => {
            let reason = answer.get("error").and_then(Value::as_str).unwrap_or("no_matching_receipt").to_string();
            Err(unsettled(&reason, answer))
        }
    }
}
