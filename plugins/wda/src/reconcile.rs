//! The `reconcile` hook (`device-ownership --operation reconcile`): the host hands
//! over the pending action `{pending:{actionId, runtimeEpoch, command, plugin,
//! target{serial}}, serial}`; the action record written before the dispatch mark
//! (`aab_ios_transport::wda::record`) names the device, the Runner and the ORIGINAL
//! Runner epoch. The action settles ONLY from the Runner's committed
//! `aab.wda-completion/v1` of that action id and epoch (the store outlives a Runner
//! restart; a new serving epoch never stands in for the original one). Nothing is
//! resent; anything else stays unsettled with the reason and the device's answer.
//! `ios-setup` runs have their own record kind: a Runner that came up with the
//! epoch the setup reported is its proof.

use aab_ios_transport::wda::execution::{Settlement, settle, settled_error};
use aab_ios_transport::wda::record;
use aab_ios_transport::{Deadline, Devicectl};
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

fn unsettled(reason: &str, answer: Value) -> Value {
    json!({"status": "unsettled", "reason": reason, "answer": answer})
}

pub async fn reconcile(ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
    let pending = &request["pending"];
    let Some(action_id) = pending.get("actionId").and_then(Value::as_str) else {
        return Err(ProviderError::new("invalid_argument", "reconcile needs pending.actionId").with_field("pending.actionId").not_dispatched());
    };
    if pending.get("command").and_then(Value::as_str) == Some("ios-setup") {
        return crate::commands::setup::reconcile(ctx, pending, action_id).await;
    }
    let Some(rec) = record::lookup(ctx, action_id)? else { return Ok(unsettled("no_action_record", Value::Null)) };
    let deadline = Deadline::after(ctx.remaining());
    let devicectl = Devicectl::resolve(rec.devicectl.as_deref());
    Ok(match settle(&devicectl, &rec, deadline).await {
        Settlement::Settled { found, serving_epoch } => {
            let result = &found.execution_result;
            json!({"status": "settled", "receipt": {
                "actionId": action_id, "runtimeEpoch": pending["runtimeEpoch"], "kind": "wda",
                "runnerBundleId": rec.runner_bundle_id, "runnerEpoch": rec.runner_epoch, "servingRunnerEpoch": serving_epoch,
                "operation": rec.operation, "udid": rec.udid,
                "ok": settled_error(result).is_none(), "error": settled_error(result),
                "dispatched": result["dispatched"], "executionResult": result, "completionReceipt": found.receipt,
                "proof": crate::runner::proof(result),
            }})
        }
        Settlement::Unsettled { reason, answer } => unsettled(&reason, answer),
    })
}
