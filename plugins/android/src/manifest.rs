//! The `android` plugin manifest and the spec of each command it executes. Only
//! commands that work end to end are listed (aab never advertises a command that
//! cannot execute). Android arguments share one option bundle: `serial`, `adb`
//! (the executable that starts a server when none listens) and `adbTimeoutMs`
//! (cap of each adb step inside the command's deadline).

use aab_plugin_api::{CommandSpec, Manifest};
use serde_json::{Value, json};

/// Default cap of one adb step (the Node host's `AI_APP_BRIDGE_ADB_TIMEOUT_MS`).
pub const DEFAULT_ADB_TIMEOUT_MS: u64 = 15_000;

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("android", env!("CARGO_PKG_VERSION"));
    m.platforms = vec!["android".to_string()];
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

fn props(extra: Value) -> Value {
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

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
}

fn package_name() -> Value {
    json!({"type": "string", "pattern": PACKAGE_PATTERN, "maxLength": 255, "description": "Package of the app that embeds the SDK"})
}

fn port(what: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535, "description": what})
}

pub fn status() -> CommandSpec {
    CommandSpec::query("status")
        .platform("android")
        .domain("core")
        .target_kind("android-app")
        .summary("The app SDK's status (runtimeEpoch, app, device, foreground activity, capture counters), read through the SDK endpoint on the device.")
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket")})), &["packageName"]))
}

pub fn forward() -> CommandSpec {
    CommandSpec::query("forward")
        .platform("android")
        .domain("advanced")
        .role("expert")
        .target_kind("android-app")
        .summary("Create (or reuse) and verify the adb forward from a host TCP port to the app SDK's socket; reports the host port.")
        .target_key("serial")
        .target_key("packageName")
        .timeouts(15_000, 30_000)
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Wanted host port (default: reuse an exact forward, else let adb allocate one)")})), &["packageName"]))
}

pub fn remove_forward() -> CommandSpec {
    CommandSpec::query("remove-forward")
        .platform("android")
        .domain("advanced")
        .role("expert")
        .target_kind("android-device")
        .summary("Remove the adb forward on a host port after checking that it belongs to the device.")
        .target_key("serial")
        .timeouts(15_000, 30_000)
        .input_schema(object(props(json!({"port": port("Host port of the forward")})), &["serial", "port"]))
}
