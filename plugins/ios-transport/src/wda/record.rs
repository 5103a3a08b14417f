//! The host-side record of every managed WDA action: one FactStore record in stream
//! `ios.wda.actions` keyed by the host action id, appended durably (fsync'd) BEFORE
//! the dispatch mark. The host's ownership journal knows only the action id and
//! the device key; this record says which device (UDID), which Runner and which
//! ORIGINAL Runner epoch to ask, so `device-ownership reconcile` (the `wda`
//! plugin's hook) and `ios-execution reconcile kind:"wda"` (the `ios` plugin) settle
//! the same action from the same facts after any crash.

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

pub const STREAM: &str = "ios.wda.actions";
pub const SCHEMA: &str = "aab.ios-wda-action-record/v1";
pub const ACTION_RECORD_UNAVAILABLE: &str = "action_record_unavailable";

/// What reconciliation needs of one dispatched action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionRecord {
    /// The host action id (the ownership journal's pending id; the record's key).
    pub action_id: String,
    /// The id the Runner knows the action by: a Script's `requestId` or Intent's
    /// runtime action id when there is one, else the host action id.
    pub runner_action_id: String,
    pub command: String,
    /// The managed operation (`tap`, `session-create`, …).
    pub operation: String,
    /// The `deviceId` argument (the ownership journal's key).
    pub device_id: String,
    pub device_identifier: String,
    pub udid: String,
    pub runner_bundle_id: String,
    /// The Runner epoch the action was admitted under (its completion's epoch).
    pub runner_epoch: String,
    pub runner_process_id: u64,
    /// The explicit `wdaUrl` of the call, if any (a derived tunnel URL is re-derived).
    pub wda_url: Option<String>,
    /// The explicit `devicectl` of the call, if any.
    pub devicectl: Option<String>,
    /// The action's `target` (`{bundleId, processId, sessionId?}`).
    pub target: Value,
}

impl ActionRecord {
    pub fn to_json(&self) -> Value {
        json!({
            "schemaVersion": SCHEMA, "kind": "wda", "actionId": self.action_id, "runnerActionId": self.runner_action_id, "command": self.command, "operation": self.operation,
            "deviceId": self.device_id, "device": {"identifier": self.device_identifier, "udid": self.udid},
            "runner": {"bundleId": self.runner_bundle_id, "runtimeEpoch": self.runner_epoch, "processId": self.runner_process_id},
            "wdaUrl": self.wda_url, "devicectl": self.devicectl, "target": self.target,
        })
    }

    pub fn from_json(v: &Value) -> Option<ActionRecord> {
        if v.get("schemaVersion").and_then(Value::as_str) != Some(SCHEMA) {
            return None;
        }
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let action_id = s("/actionId")?;
        Some(ActionRecord {
            runner_action_id: s("/runnerActionId").unwrap_or_else(|| action_id.clone()),
            action_id,
            command: s("/command")?,
            operation: s("/operation")?,
            device_id: s("/deviceId")?,
            device_identifier: s("/device/identifier")?,
            udid: s("/device/udid")?,
            runner_bundle_id: s("/runner/bundleId")?,
            runner_epoch: s("/runner/runtimeEpoch")?,
            runner_process_id: v.pointer("/runner/processId").and_then(Value::as_u64)?,
            wda_url: s("/wdaUrl"),
            devicectl: s("/devicectl"),
            target: v.get("target").cloned().unwrap_or(Value::Null),
        })
    }
}

/// Append durably under the host action id; a failure is never dispatched.
pub fn append(ctx: &Context<'_>, record: &ActionRecord) -> Result<(), ProviderError> {
    if !ctx.host().supports("facts.append") {
        return Err(ProviderError::new(ACTION_RECORD_UNAVAILABLE, "the host has no FactStore: the WDA action record cannot be written before dispatch").not_dispatched());
    }
    ctx.facts().append(STREAM, &record.action_id, &record.to_json(), Durability::Sync).map(|_| ()).map_err(|e| {
        ProviderError::new(ACTION_RECORD_UNAVAILABLE, format!("the WDA action record could not be written before dispatch: {}", e.message)).with_details(json!({"cause": e.error})).not_dispatched()
    })
}

/// The newest record of `action_id`, if any.
pub fn lookup(ctx: &Context<'_>, action_id: &str) -> Result<Option<ActionRecord>, ProviderError> {
    let mut after = 0;
    let mut last = None;
    // Bounded: one action id has one record (a few at most after retries of the host).
    for _ in 0..64 {
        let page = ctx.facts().read(STREAM, action_id, after, 1000)?;
        if let Some(r) = page.records.iter().rev().filter(|r| r.key == action_id).find_map(|r| ActionRecord::from_json(&r.record)) {
            last = Some(r);
        }
        if !page.has_more || page.next_sequence <= after {
            break;
        }
        after = page.next_sequence;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_foreign_one_is_ignored() {
        let r = ActionRecord {
            action_id: "host-action-1".into(),
            runner_action_id: "script-step-3".into(),
            command: "ios-tap".into(),
            operation: "tap".into(),
            device_id: "iPhone".into(),
            device_identifier: "UUID-1".into(),
            udid: "00008110-1".into(),
            runner_bundle_id: "r.xctrunner".into(),
            runner_epoch: "E1".into(),
            runner_process_id: 9,
            wda_url: None,
            devicectl: Some("/x/xcrun".into()),
            target: json!({"bundleId": "com.example", "processId": 4, "sessionId": "S"}),
        };
        assert_eq!(ActionRecord::from_json(&r.to_json()), Some(r.clone()));
        let mut other = r.to_json();
        other["schemaVersion"] = json!("aab.android-action-record/v1");
        assert_eq!(ActionRecord::from_json(&other), None);
        let mut partial = r.to_json();
        partial["runner"]["runtimeEpoch"] = Value::Null;
        assert_eq!(ActionRecord::from_json(&partial), None);
    }
}
