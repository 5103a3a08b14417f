//! The action record of every Android device action (cross-lane contract): one
//! FactStore record in stream `android.actions` keyed by the host action id,
//! appended durably BEFORE the dispatch mark, so `device-ownership reconcile`
//! can find where to ask (the SDK endpoint or the shell worker) after any crash.
//! Record: `{schemaVersion:"aab.android-action-record/v1", kind:"native"|"flutter"|"h5"|"shell"|"install"|"uia"|"executor",
//! command, serial, packageName?, device:{…}}`.

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, ProviderError};
use serde_json::{Value, json};

pub const STREAM: &str = "android.actions";
pub const SCHEMA: &str = "aab.android-action-record/v1";
pub const ACTION_RECORD_UNAVAILABLE: &str = "action_record_unavailable";

/// The record of one action (`device` holds the kind's fields).
pub fn record(kind: &str, command: &str, serial: &str, package: Option<&str>, device: Value) -> Value {
    let mut r = json!({"schemaVersion": SCHEMA, "kind": kind, "command": command, "serial": serial, "device": device});
    if let Some(p) = package {
        r["packageName"] = json!(p);
    }
    r
}

/// Append durably (fsync'd) under the host action id; a failure is never dispatched.
pub fn append(ctx: &Context<'_>, action_id: &str, record: &Value) -> Result<(), ProviderError> {
    if !ctx.host().supports("facts.append") {
        return Err(ProviderError::new(ACTION_RECORD_UNAVAILABLE, "the host has no FactStore: the action record cannot be written before dispatch").not_dispatched());
    }
    ctx.facts().append(STREAM, action_id, record, Durability::Sync).map(|_| ()).map_err(|e| {
        ProviderError::new(ACTION_RECORD_UNAVAILABLE, format!("the action record could not be written before dispatch: {}", e.message)).with_details(json!({"cause": e.error})).not_dispatched()
    })
}

/// The newest record of `action_id`, if any.
pub fn lookup(ctx: &Context<'_>, action_id: &str) -> Result<Option<Value>, ProviderError> {
    let mut after = 0;
    let mut last = None;
    loop {
        let page = ctx.facts().read(STREAM, action_id, after, 1000)?;
        if let Some(r) = page.records.iter().rev().find(|r| r.key == action_id && r.record.get("schemaVersion").and_then(Value::as_str) == Some(SCHEMA)) {
            last = Some(r.record.clone());
        }
        if !page.has_more || page.next_sequence <= after {
            return Ok(last);
        }
        after = page.next_sequence;
    }
}
