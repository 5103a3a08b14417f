//! The `aab.web/v2` wire protocol as the provider sees it: schema ids, the limits
//! of §6.1–6.3, the `hello` validation, the `binding` object every later message
//! carries in both directions, and the host→page frame builders. Only this module
//! knows message shapes; the socket task and the commands use its functions.

use std::time::Duration;

use serde_json::{Map, Value, json};

pub const PROTOCOL: &str = "aab.web/v2";
pub const EXECUTION_SCHEMA: &str = "aab.web-execution/v1";
pub const DOM_TARGET_SCHEMA: &str = "aab.web-dom-target/v1";
pub const CAPTURE_SCHEMA: &str = "aab.web-capture/v1";
pub const CAPTURE_WINDOW_SCHEMA: &str = "aab.web-capture-window/v1";
pub const FACT_SCHEMA: &str = "aab.web-fact/v1";
pub const TARGET_ID: &str = "main";

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 18180;
pub const DEFAULT_PATH: &str = "/ai-app-bridge-web";
/// Header that authenticates `GET /sessions`.
pub const TOKEN_HEADER: &str = "x-ai-app-bridge-token";

/// Largest WebSocket message either side may send.
pub const MAX_PAYLOAD: usize = 256 * 1024;
pub const MAX_SOCKETS: usize = 64;
pub const MAX_SESSIONS: usize = 32;
/// Host requests (reads and commands) awaiting a page reply, per connection.
pub const MAX_PENDING: usize = 64;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
pub const PING_INTERVAL: Duration = Duration::from_secs(20);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A request head must arrive within this (also ends idle keep-alive HTTP connections).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The endpoint's timers: the contract's defaults, adjustable per endpoint
/// (`web-session-start --ping-interval-ms ...`) and announced in `helloAck`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeepAlive {
    pub ping_interval: Duration,
    pub idle_timeout: Duration,
    pub handshake_timeout: Duration,
    pub header_timeout: Duration,
}

impl Default for KeepAlive {
    fn default() -> Self {
        KeepAlive { ping_interval: PING_INTERVAL, idle_timeout: IDLE_TIMEOUT, handshake_timeout: HANDSHAKE_TIMEOUT, header_timeout: HEADER_TIMEOUT }
    }
}
pub const FORGET_AFTER: Duration = Duration::from_secs(300);
/// A stored `aab.web-fact/v1` record.
pub const MAX_FACT_BYTES: usize = 128 * 1024;
/// A terminal action result in a `completion`.
pub const MAX_COMPLETION_BYTES: usize = 64 * 1024;

const MAX_ID: usize = 1024;
const MAX_URL: usize = 4096;
const MAX_ORIGIN: usize = 1024;
const MAX_ROUTE: usize = 4096;

/// The limits announced in `helloAck`, so the page can size its queues.
pub fn limits(keep_alive: &KeepAlive) -> Value {
    json!({
        "maxMessageBytes": MAX_PAYLOAD,
        "maxCaptureRecordBytes": 124 * 1024,
        "maxFactBytes": MAX_FACT_BYTES,
        "maxCompletionBytes": MAX_COMPLETION_BYTES,
        "maxPendingRequests": MAX_PENDING,
        "maxSockets": MAX_SOCKETS,
        "maxSessions": MAX_SESSIONS,
        "pingIntervalMs": keep_alive.ping_interval.as_millis() as u64,
        "idleTimeoutMs": keep_alive.idle_timeout.as_millis() as u64,
        "handshakeTimeoutMs": keep_alive.handshake_timeout.as_millis() as u64,
        "headerTimeoutMs": keep_alive.header_timeout.as_millis() as u64,
    })
}

/// A validated `hello`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hello {
    pub session_id: String,
    pub runtime_epoch: String,
    pub app_name: String,
    pub url: String,
    pub origin: String,
    pub route: String,
}

fn bounded_string(v: &Value, key: &str, min: usize, max: usize) -> Result<String, String> {
    match v.get(key) {
        Some(Value::String(s)) if (min..=max).contains(&s.chars().count()) => Ok(s.clone()),
        Some(Value::String(s)) => Err(format!("`{key}` must have {min}..{max} characters, got {}", s.chars().count())),
        Some(_) => Err(format!("`{key}` must be a string")),
        None if min == 0 => Ok(String::new()),
        None => Err(format!("`{key}` is required")),
    }
}

fn exact(v: &Value, key: &str, expected: &str) -> Result<(), String> {
    match v.get(key).and_then(Value::as_str) {
        Some(s) if s == expected => Ok(()),
        Some(s) => Err(format!("`{key}` must be `{expected}`, got `{s}`")),
        None => Err(format!("`{key}` must be the string `{expected}`")),
    }
}

/// Check a `hello` (§6.2). The error text goes into the `invalid_web_hello` frame.
pub fn parse_hello(v: &Value) -> Result<Hello, String> {
    if !v.is_object() {
        return Err("the first message must be a JSON object".into());
    }
    exact(v, "type", "hello")?;
    exact(v, "schemaVersion", PROTOCOL)?;
    exact(v, "targetId", TARGET_ID)?;
    exact(v, "executionSchema", EXECUTION_SCHEMA)?;
    exact(v, "domTargetSchema", DOM_TARGET_SCHEMA)?;
    exact(v, "captureSchema", CAPTURE_SCHEMA)?;
    Ok(Hello {
        session_id: bounded_string(v, "sessionId", 1, MAX_ID)?,
        runtime_epoch: bounded_string(v, "runtimeEpoch", 1, MAX_ID)?,
        app_name: bounded_string(v, "appName", 0, MAX_ID)?,
        url: bounded_string(v, "url", 0, MAX_URL)?,
        origin: bounded_string(v, "origin", 0, MAX_ORIGIN)?,
        route: bounded_string(v, "route", 0, MAX_ROUTE)?,
    })
}

/// The binding object of one accepted connection; echoed verbatim on every message.
pub fn binding(provider_epoch: &str, connection_id: &str, session_id: &str, runtime_epoch: &str) -> Value {
    json!({
        "schemaVersion": PROTOCOL,
        "providerEpoch": provider_epoch,
        "connectionId": connection_id,
        "sessionId": session_id,
        "runtimeEpoch": runtime_epoch,
        "targetId": TARGET_ID,
    })
}

/// `{type:"error", error, message}`: sent before a 1008 close.
pub fn error_frame(code: &str, message: &str) -> Value {
    json!({"type": "error", "error": code, "message": message})
}

pub fn hello_ack(binding: &Value, keep_alive: &KeepAlive) -> Value {
    json!({"type": "helloAck", "ok": true, "binding": binding, "limits": limits(keep_alive)})
}

/// The `target` object of a page command and of barrier replies.
pub fn target(session_id: &str, runtime_epoch: &str) -> Value {
    json!({"sessionId": session_id, "runtimeEpoch": runtime_epoch, "targetId": TARGET_ID})
}

/// A `command` payload (§6.3) for one managed action.
pub fn command_payload(name: &str, args: Value, session_id: &str, runtime_epoch: &str, action_id: &str, timeout_ms: u64) -> Value {
    json!({
        "command": {"name": name, "args": args},
        "target": target(session_id, runtime_epoch),
        "actionId": action_id,
        "execution": {"schemaVersion": EXECUTION_SCHEMA, "actionId": action_id, "runtimeEpoch": runtime_epoch, "timeoutMs": timeout_ms},
    })
}

/// True when `found` is exactly the connection's binding (same keys, same values).
pub fn binding_matches(expected: &Value, found: Option<&Value>) -> bool {
    found == Some(expected)
}

/// Keys of a validated capture message, borrowed from the frame.
pub struct Capture<'a> {
    pub capture_id: &'a str,
    pub stream: &'a str,
    pub sequence: u64,
    pub action_id: Option<&'a str>,
    pub item: &'a Map<String, Value>,
}

pub const STREAMS: [&str; 4] = ["logs", "network", "state", "events"];

/// Check a `capture` message (§6.3); the error text goes into a `stored:false` ack.
pub fn parse_capture(v: &Value) -> Result<Capture<'_>, String> {
    let capture_id = v.get("captureId").and_then(Value::as_str).filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()));
    let capture_id = capture_id.ok_or("`captureId` must be 32 hex characters")?;
    let stream = v.get("stream").and_then(Value::as_str).filter(|s| STREAMS.contains(s)).ok_or("`stream` must be logs, network, state or events")?;
    let sequence = v.get("sequence").and_then(Value::as_u64).filter(|s| *s >= 1).ok_or("`sequence` must be an integer ≥ 1")?;
    let action_id = match v.get("actionId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => Some(s.as_str()),
        Some(_) => return Err("`actionId` must be null or a string of 1..256 characters".into()),
    };
    let item = v.get("item").and_then(Value::as_object).ok_or("`item` must be an object")?;
    if !item.get("source").is_some_and(Value::is_string) {
        return Err("`item.source` must be a string".into());
    }
    if !item.get("timestampMs").is_some_and(Value::is_number) {
        return Err("`item.timestampMs` must be a number".into());
    }
    match item.get("association").and_then(Value::as_str) {
        Some("explicit" | "synchronous" | "unattributed") => {}
        _ => return Err("`item.association` must be explicit, synchronous or unattributed".into()),
    }
    Ok(Capture { capture_id, stream, sequence, action_id, item })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Value {
        json!({"type": "hello", "schemaVersion": PROTOCOL, "sessionId": "s1", "runtimeEpoch": "0123456789abcdef0123456789abcdef",
               "targetId": "main", "executionSchema": EXECUTION_SCHEMA, "domTargetSchema": DOM_TARGET_SCHEMA, "captureSchema": CAPTURE_SCHEMA,
               "appName": "demo", "url": "http://127.0.0.1/", "origin": "http://127.0.0.1", "route": "/"})
    }

    #[test]
    fn hello_validation() {
        let h = parse_hello(&hello()).unwrap();
        assert_eq!(h.session_id, "s1");
        let mut bad = hello();
        bad["targetId"] = json!("other");
        assert!(parse_hello(&bad).unwrap_err().contains("targetId"));
        let mut bad = hello();
        bad["sessionId"] = json!("");
        assert!(parse_hello(&bad).is_err());
        let mut bad = hello();
        bad["url"] = json!("x".repeat(4097));
        assert!(parse_hello(&bad).is_err());
        assert!(parse_hello(&json!([])).is_err());
    }

    #[test]
    fn capture_validation() {
        let ok = json!({"captureId": "0123456789abcdef0123456789abcdef", "stream": "logs", "sequence": 1, "actionId": null,
                        "item": {"source": "console-auto", "timestampMs": 1, "association": "unattributed"}});
        assert!(parse_capture(&ok).is_ok());
        let mut bad = ok.clone();
        bad["sequence"] = json!(0);
        assert!(parse_capture(&bad).is_err());
        let mut bad = ok;
        bad["item"]["association"] = json!("guess");
        assert!(parse_capture(&bad).is_err());
    }
}
