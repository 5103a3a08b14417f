//! The app SDK's endpoint descriptor (`ai-app-bridge.android-endpoint.v1`, read
//! with `run-as <pkg> cat files/ai_app_bridge_endpoint.json`) and its validation,
//! each failure with the contract's code: `bridge_endpoint_discovery_failed`
//! (run-as failed), `bridge_endpoint_invalid`, `bridge_package_mismatch`,
//! `bridge_not_ready`. None of them is ever dispatched.

use serde_json::{Value, json};

use crate::adb::device::{Device, command_line};
use crate::adb::{Deadline, ProviderError, Result};

pub const SCHEMA: &str = "ai-app-bridge.android-endpoint.v1";
pub const DESCRIPTOR_PATH: &str = "files/ai_app_bridge_endpoint.json";

pub mod codes {
    pub const BRIDGE_ENDPOINT_DISCOVERY_FAILED: &str = "bridge_endpoint_discovery_failed";
    pub const BRIDGE_ENDPOINT_INVALID: &str = "bridge_endpoint_invalid";
    pub const BRIDGE_PACKAGE_MISMATCH: &str = "bridge_package_mismatch";
    pub const BRIDGE_NOT_READY: &str = aab_plugin_api::codes::BRIDGE_NOT_READY;
}

/// A validated, ready descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub package_name: String,
    pub runtime_epoch: String,
    pub socket_name: String,
    pub version: String,
    pub updated_at_ms: u64,
}

const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `<13 digits>-<canonical lowercase UUID>`.
pub fn is_runtime_epoch(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 13 + 1 + 36 || !b[..13].iter().all(u8::is_ascii_digit) || b[13] != b'-' {
        return false;
    }
    let uuid = &b[14..];
    uuid.iter().enumerate().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { *c == b'-' } else { c.is_ascii_digit() || (b'a'..=b'f').contains(c) })
}

fn invalid(package: &str, why: impl Into<String>) -> ProviderError {
    let why = why.into();
    ProviderError::new(codes::BRIDGE_ENDPOINT_INVALID, format!("the SDK endpoint descriptor of {package} is invalid: {why}")).with_details(json!({"packageName": package, "reason": why})).not_dispatched()
}

/// Validate descriptor bytes for `package`.
pub fn validate(bytes: &[u8], package: &str) -> Result<Descriptor> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| invalid(package, format!("not JSON ({e})")))?;
    let Some(obj) = value.as_object() else { return Err(invalid(package, "not a JSON object")) };
    if obj.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        return Err(invalid(package, format!("schema is not {SCHEMA:?}")));
    }
    let Some(found) = obj.get("packageName").and_then(Value::as_str) else { return Err(invalid(package, "packageName is missing")) };
    if found != package {
        return Err(ProviderError::new(codes::BRIDGE_PACKAGE_MISMATCH, format!("the SDK endpoint descriptor belongs to {found:?}, not {package:?}"))
            .with_details(json!({"packageName": package, "descriptorPackageName": found}))
            .not_dispatched());
    }
    match obj.get("ok") {
        Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            let reason = obj.get("error").map(|e| if let Some(s) = e.as_str() { s.to_string() } else { e.to_string() }).unwrap_or_else(|| "unknown".into());
            return Err(ProviderError::new(codes::BRIDGE_NOT_READY, format!("the SDK of {package} is not ready: {reason}")).with_details(json!({"packageName": package, "endpointError": reason})).not_dispatched());
        }
        _ => return Err(invalid(package, "ok is not a boolean")),
    }
    if obj.get("transport").and_then(Value::as_str) != Some("localabstract") {
        return Err(invalid(package, "transport is not \"localabstract\""));
    }
    let epoch = obj.get("runtimeEpoch").and_then(Value::as_str).filter(|e| is_runtime_epoch(e)).ok_or_else(|| invalid(package, "runtimeEpoch is not <13 digits>-<uuid>"))?;
    let socket = obj.get("socketName").and_then(Value::as_str).unwrap_or("");
    if socket != format!("aab-sdk-{epoch}") {
        return Err(invalid(package, format!("socketName {socket:?} is not \"aab-sdk-{epoch}\"")));
    }
    let version = obj.get("version").and_then(Value::as_str).filter(|v| !v.is_empty()).ok_or_else(|| invalid(package, "version is missing"))?;
    let updated = obj.get("updatedAtMs").and_then(Value::as_u64).filter(|n| (1..=MAX_SAFE_INTEGER).contains(n)).ok_or_else(|| invalid(package, "updatedAtMs is not a positive safe integer"))?;
    Ok(Descriptor { package_name: package.to_string(), runtime_epoch: epoch.to_string(), socket_name: socket.to_string(), version: version.to_string(), updated_at_ms: updated })
}

/// Read and validate the descriptor through `run-as` on the device.
pub async fn discover(device: &Device, package: &str, deadline: Deadline) -> Result<Descriptor> {
    let out = device.shell(&command_line(&["run-as", package, "cat", DESCRIPTOR_PATH]), None, deadline).await?;
    if out.exit_code != 0 {
        let stderr = out.stderr_text().trim().to_string();
        let stdout = out.stdout_text().trim().chars().take(512).collect::<String>();
        return Err(ProviderError::new(codes::BRIDGE_ENDPOINT_DISCOVERY_FAILED, format!("reading the SDK endpoint of {package} with run-as failed (exit {}): {}", out.exit_code, if stderr.is_empty() { &stdout } else { &stderr }))
            .with_details(json!({"packageName": package, "serial": device.serial, "exitCode": out.exit_code, "stderr": stderr, "stdout": stdout}))
            .not_dispatched());
    }
    validate(&out.stdout, package)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: &str = "1764633600000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

    fn good() -> Value {
        json!({"schema": SCHEMA, "ok": true, "packageName": "com.example.app", "runtimeEpoch": EPOCH, "transport": "localabstract",
               "socketName": format!("aab-sdk-{EPOCH}"), "version": "0.4.5", "updatedAtMs": 1764633600123u64, "error": null})
    }

    fn check(v: Value) -> Result<Descriptor> {
        validate(v.to_string().as_bytes(), "com.example.app")
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = good();
        v[key] = value;
        v
    }

    #[test]
    fn a_ready_descriptor_validates() {
        let d = check(good()).unwrap();
        assert_eq!((d.runtime_epoch.as_str(), d.socket_name.as_str(), d.version.as_str()), (EPOCH, format!("aab-sdk-{EPOCH}").as_str(), "0.4.5"));
    }

    #[test]
    fn each_fault_has_its_code_and_is_not_dispatched() {
        let mut no_version = good();
        no_version.as_object_mut().unwrap().remove("version");
        let cases = vec![
            (validate(b"not json", "com.example.app"), codes::BRIDGE_ENDPOINT_INVALID),
            (validate(b"[1]", "com.example.app"), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("schema", json!("ai-app-bridge.android-endpoint.v0"))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("transport", json!("tcp"))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("socketName", json!("aab-sdk-other"))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("runtimeEpoch", json!("123-abc"))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(no_version), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("updatedAtMs", json!(0))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("updatedAtMs", json!(9007199254740992u64))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("updatedAtMs", json!(1.5))), codes::BRIDGE_ENDPOINT_INVALID),
            (check(with("packageName", json!("com.other"))), codes::BRIDGE_PACKAGE_MISMATCH),
            (check(json!({"schema": SCHEMA, "ok": false, "packageName": "com.example.app", "error": "starting"})), codes::BRIDGE_NOT_READY),
        ];
        for (i, (r, code)) in cases.into_iter().enumerate() {
            let e = r.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (code, Some(false)), "case {i}: {e:?}");
        }
        let e = check(json!({"schema": SCHEMA, "ok": false, "packageName": "com.example.app", "error": "IOException"})).unwrap_err();
        assert!(e.message.contains("IOException"), "{}", e.message);
    }

    #[test]
    fn runtime_epoch_pattern() {
        assert!(is_runtime_epoch(EPOCH));
        assert!(!is_runtime_epoch("176463360000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30"));
        assert!(!is_runtime_epoch("1764633600000-0F8E6A52-1C2B-4E8F-9A3D-5B7C9D1E2F30"));
        assert!(!is_runtime_epoch("1764633600000_0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30"));
    }
}
