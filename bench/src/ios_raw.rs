//! The peer paths of `aab-bench-ios`: what a naive client sends to the simulated
//! iPhone's listeners with nothing but a TCP socket — one HTTP/1.1 exchange per
//! call (`Connection: close`, as both listeners answer one request per connection
//! by default), the JSON body parsed, no binding check on the answer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// Replies larger than this are refused: the bench never reads without a bound.
const MAX_REPLY: u64 = 16 * 1024 * 1024;

/// One exchange; returns the HTTP status and the parsed JSON body.
pub fn exchange(port: u16, method: &str, path: &str, headers: &[(&str, String)], body: Option<&Value>) -> Result<(u16, Value), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("{method} {path}: connect: {e}"))?;
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if body.is_some() {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", payload.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(payload.as_bytes())).map_err(|e| format!("{method} {path}: send: {e}"))?;
    let mut raw = Vec::new();
    s.take(MAX_REPLY).read_to_end(&mut raw).map_err(|e| format!("{method} {path}: read: {e}"))?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("{method} {path}: no HTTP header in the reply"))?;
    let status_line = String::from_utf8_lossy(&raw[..split]).lines().next().unwrap_or_default().to_string();
    let status = status_line.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("{method} {path}: bad status line {status_line:?}"))?;
    let value = serde_json::from_slice(&raw[split + 4..]).map_err(|e| format!("{method} {path}: reply is not JSON: {e}"))?;
    Ok((status, value))
}

/// The five SDK identity headers, copied from the app's descriptor.
pub fn sdk_identity(bundle: &str, epoch: &str, pid: u64, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("X-AAB-Runtime-Schema", "aab.ios-runtime/v1".to_string()),
        ("X-AAB-Bundle-Id", bundle.to_string()),
        ("X-AAB-Runtime-Epoch", epoch.to_string()),
        ("X-AAB-Process-Id", pid.to_string()),
        ("X-AAB-Runtime-Port", port.to_string()),
    ]
}

/// The five Runner identity headers (the Runner refuses a request without them),
/// copied from its descriptor.
pub fn wda_identity(runner_bundle: &str, epoch: &str, pid: u64, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("X-AAB-WDA-Schema", "aab.ios-wda/v1".to_string()),
        ("X-AAB-WDA-Bundle-Id", runner_bundle.to_string()),
        ("X-AAB-WDA-Runtime-Epoch", epoch.to_string()),
        ("X-AAB-WDA-Process-Id", pid.to_string()),
        ("X-AAB-WDA-Port", port.to_string()),
    ]
}
