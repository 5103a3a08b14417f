//! The physical-device key of an iOS command (hook `device-key`): every alias a
//! user may give as `deviceId` — CoreDevice identifier, UDID, serial number or
//! name — resolves through `devicectl list devices` to `ios:<UDID>`, so the host
//! keeps one ownership journal and one lane per phone across both iOS plugins.

use serde_json::{Value, json};

use aab_plugin_api::Context;

use crate::{Deadline, Devicectl, ProviderError, select_device};

/// Prefix of every iOS device key.
pub const KEY_PREFIX: &str = "ios:";

/// The key of a physical device.
pub fn key_of(udid: &str) -> String {
    format!("{KEY_PREFIX}{udid}")
}

/// The `device-key` hook of either iOS plugin, inside the host's budget for it
/// (one journal and one lane per phone, whichever plugin or alias names it).
pub async fn hook(ctx: &Context<'_>, request: &Value) -> Result<Value, ProviderError> {
    device_key(request, crate::command::deadline(ctx)).await
}

/// Answer the host's `device-key` hook: `{command, arguments, deviceKey}` →
/// `{deviceKey: "ios:<UDID>"}`. The command's own `devicectl` argument chooses the
/// program, as the command itself would.
pub async fn device_key(request: &Value, deadline: Deadline) -> Result<Value, ProviderError> {
    let arguments = &request["arguments"];
    let device_id = arguments.get("deviceId").and_then(Value::as_str).or_else(|| request.get("deviceKey").and_then(Value::as_str)).unwrap_or_default();
    if device_id.is_empty() {
        return Err(ProviderError::new("invalid_argument", "the command names no deviceId").with_field("deviceId").not_dispatched());
    }
    // Already canonical (e.g. from an operator's `device-ownership --serial ios:<UDID>`).
    if device_id.starts_with(KEY_PREFIX) {
        return Ok(json!({"deviceKey": device_id}));
    }
    let devicectl = Devicectl::resolve(arguments.get("devicectl").and_then(Value::as_str));
    let devices = devicectl.list_devices(deadline).await?;
    let device = select_device(&devices, device_id)?;
    Ok(json!({"deviceKey": key_of(&device.udid), "udid": device.udid, "identifier": device.identifier}))
}
