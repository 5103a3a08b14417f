//! The `android` plugin manifest and the schema pieces every command spec shares
//! (each command's own spec lives beside its code in [`crate::commands`]). Android arguments share one option bundle: `serial`, `adb`
//! (the executable that starts a server when none listens) and `adbTimeoutMs`
//! (cap of each adb step inside the command's deadline).

use aab_plugin_api::Manifest;
use serde_json::{Value, json};

/// Default cap of one adb step (the Node host's `AI_APP_BRIDGE_ADB_TIMEOUT_MS`).
pub const DEFAULT_ADB_TIMEOUT_MS: u64 = 15_000;

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("android", env!("CARGO_PKG_VERSION"));
    m.platforms = vec!["android".to_string()];
    // Which adb server the transport talks to and which `adb` starts it: a client
    // with other values must not share a runtime started with these.
    m.environment = vec!["ADB_SERVER_SOCKET".into(), "ANDROID_ADB_SERVER_PORT".into(), "ADB".into()];
    // `script.target` of an app on a device: its identity defaults `serial`/`packageName`
    // of every ctx.call; `adb` and `port` are optional connection fields.
    m.targets = vec![
        aab_plugin_api::protocol::ExecutionTarget::new("android", ["serial", "packageName"])
            .connection("adb", serde_json::json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": "connection option of this platform"}))
            .connection("port", serde_json::json!({"type": "integer", "minimum": 1, "maximum": 65535})),
    ];
    m
}

/// Android package name: dot-separated Java identifiers, at least two segments.
const PACKAGE_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)+$";
/// adb serials: USB ids, `emulator-N`, `host:port`, mDNS service names.
const SERIAL_PATTERN: &str = "^[A-Za-z0-9._:-]{1,128}$";

pub(crate) fn props(extra: Value) -> Value {
    let mut p = json!({
        "serial": {"type": "string", "pattern": SERIAL_PATTERN, "description": "adb serial of the device (required when several devices are connected)"},
        "adb": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "adb executable used only to start a server when none listens (default: $ADB, then adb on PATH)"},
        "adbTimeoutMs": {"type": "integer", "minimum": 1, "maximum": 2147483647, "description": "Cap of each adb step, within the command's deadline (default 15000)"}
    });
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    p
}

pub(crate) fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
}

pub(crate) fn package_name() -> Value {
    json!({"type": "string", "pattern": PACKAGE_PATTERN, "maxLength": 255, "description": "Package of the app that embeds the SDK"})
}

pub(crate) fn port(what: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535, "description": what})
}

/// A screen coordinate (`tapX`, `tapY`): number 0..2147483647.
pub(crate) fn coordinate(what: &str) -> Value {
    json!({"type": "number", "minimum": 0, "maximum": 2147483647, "description": what})
}

/// `serial` is required by Android mutations (the device-ownership journal is per serial).
pub(crate) const MUTATION_REQUIRED: [&str; 2] = ["serial", "packageName"];
