//! One HTTP/1.1 request per TCP connection to the SDK through its adb forward
//! (the SDK's dialect: `Content-Length` bodies, `Connection: close`, JSON replies),
//! with the contract's transport-error mapping and dispatch classification:
//! connection refused → `bridge_connection_refused` (not dispatched); reset,
//! closed without a reply or timed out → `bridge_not_ready` (dispatched unknown
//! once the request was written); 404 → not dispatched.

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::adb::{Deadline, ProviderError, Result};

pub const BRIDGE_CONNECTION_REFUSED: &str = "bridge_connection_refused";
pub const BRIDGE_NOT_READY: &str = aab_plugin_api::codes::BRIDGE_NOT_READY;
/// The SDK has no such route (HTTP 404); never dispatched.
pub const BRIDGE_ROUTE_NOT_FOUND: &str = "bridge_route_not_found";
/// The SDK failed internally (HTTP 500) or answered something that is not its dialect.
pub const BRIDGE_PROTOCOL_ERROR: &str = "bridge_protocol_error";

/// Largest reply accepted (a screenshot in base64 fits comfortably).
pub const MAX_RESPONSE: usize = 64 * 1024 * 1024;

/// A reply with a 2xx status and a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: Value,
}

fn failure(code: &str, message: String, method: &str, path: &str, written: bool) -> ProviderError {
    let e = ProviderError::new(code, message).with_details(json!({"method": method, "path": path, "requestSent": written}));
    // Before the request left, nothing can have happened on the device.
    if written { e } else { e.not_dispatched() }
}

/// Send `method path` (with an optional JSON body) to `127.0.0.1:<port>` and read
/// the one reply; the deadline bounds connect, write and read together.
pub async fn request(port: u16, method: &str, path: &str, body: Option<&Value>, deadline: Deadline) -> Result<Response> {
    request_with(port, method, path, &[], body, deadline).await
}

/// [`request`] with extra request headers (the UIA runtime's `Authorization`).
pub async fn request_with(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>, deadline: Deadline) -> Result<Response> {
    request_capped(port, method, path, headers, body, MAX_RESPONSE, deadline).await
}

/// [`request_with`] refusing a reply over `limit` bytes (a peer whose answers are
/// small, such as an executor session, gets a tighter bound than screenshots need).
pub async fn request_capped(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>, limit: usize, deadline: Deadline) -> Result<Response> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = |written: bool| failure(BRIDGE_NOT_READY, format!("the SDK did not answer {method} {path} in time"), method, path, written);
    let mut stream = match tokio::time::timeout_at(deadline.instant(), TcpStream::connect(addr)).await {
        Err(_) => return Err(timeout(false)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(failure(BRIDGE_CONNECTION_REFUSED, format!("nothing accepts connections on host port {port} for {method} {path}"), method, path, false));
        }
        Ok(Err(e)) => return Err(failure(BRIDGE_NOT_READY, format!("connecting to the SDK failed: {e}"), method, path, false)),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    let payload = body.map(|b| b.to_string().into_bytes());
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: application/json\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    match &payload {
        Some(p) => req.push_str(&format!("Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n", p.len())),
        None => req.push_str("Content-Length: 0\r\n\r\n"),
    }
    let mut bytes = req.into_bytes();
    if let Some(p) = payload {
        bytes.extend_from_slice(&p);
    }
    // The whole request goes out in one write: the SDK gives a client 1500 ms.
    match tokio::time::timeout_at(deadline.instant(), stream.write_all(&bytes)).await {
        Err(_) => return Err(timeout(true)),
        Ok(Err(e)) => return Err(failure(BRIDGE_NOT_READY, format!("sending {method} {path} to the SDK failed: {e}"), method, path, true)),
        Ok(Ok(())) => {}
    }
    let mut reply = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match tokio::time::timeout_at(deadline.instant(), stream.read(&mut chunk)).await {
            Err(_) => return Err(timeout(true)),
            Ok(Err(e)) => return Err(failure(BRIDGE_NOT_READY, format!("the SDK connection failed during {method} {path}: {e}"), method, path, true)),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            break;
        }
        if reply.len() + n > limit {
            return Err(failure(BRIDGE_PROTOCOL_ERROR, format!("the SDK reply to {method} {path} exceeds {limit} bytes"), method, path, true));
        }
        reply.extend_from_slice(&chunk[..n]);
        if let Some(done) = complete(&reply) {
            reply.truncate(done);
            break;
        }
    }
    if reply.is_empty() {
        // adb accepts a forward connection even when nothing listens on the device
        // socket, then closes it: the app is gone or restarting.
        return Err(failure(BRIDGE_NOT_READY, format!("the SDK closed the connection without answering {method} {path}"), method, path, true));
    }
    let parsed = parse(&reply).map_err(|why| failure(BRIDGE_PROTOCOL_ERROR, format!("the SDK reply to {method} {path} is not valid: {why}"), method, path, true))?;
    match parsed.status {
        200..=299 => Ok(parsed),
        404 => Err(failure(BRIDGE_ROUTE_NOT_FOUND, format!("the SDK has no route {method} {path}"), method, path, false).with_details(json!({"method": method, "path": path, "httpStatus": 404, "body": parsed.body}))),
        status => {
            let reason = parsed.body.get("error").and_then(Value::as_str).unwrap_or("").to_string();
            Err(failure(BRIDGE_PROTOCOL_ERROR, format!("the SDK answered {method} {path} with HTTP {status}: {reason}"), method, path, true).with_details(json!({"method": method, "path": path, "httpStatus": status, "body": parsed.body})))
        }
    }
}

/// The length of a complete response (headers + `Content-Length` body), if complete.
fn complete(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let len = content_length(&buf[..head_end])?;
    (buf.len() >= head_end + len).then_some(head_end + len)
}

fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim().eq_ignore_ascii_case("content-length").then(|| value.trim().parse().ok())?
    })
}

/// Parse a full response; the body must be JSON (the SDK only speaks JSON).
fn parse(buf: &[u8]) -> std::result::Result<Response, String> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of headers")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let status_line = head.split("\r\n").next().unwrap_or("");
    let mut parts = status_line.split(' ');
    if !parts.next().unwrap_or("").starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let body = &buf[head_end..];
    let body = match content_length(&buf[..head_end]) {
        Some(len) if body.len() >= len => &body[..len],
        Some(len) => return Err(format!("body has {} of {len} bytes", body.len())),
        None => body,
    };
    let body = if body.is_empty() { Value::Null } else { serde_json::from_slice(body).map_err(|e| format!("body is not JSON ({e})"))? };
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::TcpListener;

    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// A one-shot peer: reads the request head (and body), replies `reply`, closes.
    async fn peer(reply: &'static [u8]) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while complete(&buf).is_none() {
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            s.write_all(reply).await.unwrap();
            buf
        });
        (port, h)
    }

    fn deadline() -> Deadline {
        Deadline::after(Duration::from_secs(5))
    }

    #[test]
    fn one_request_with_a_json_body_and_the_reply() {
        rt().block_on(async {
            let (port, h) = peer(b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}").await;
            let r = request(port, "POST", "/v1/logs", Some(&json!({"a": 1})), deadline()).await.unwrap();
            assert_eq!(r, Response { status: 200, body: json!({"ok": true}) });
            let sent = String::from_utf8(h.await.unwrap()).unwrap();
            assert!(sent.starts_with("POST /v1/logs HTTP/1.1\r\n"), "{sent}");
            assert!(sent.contains("Content-Type: application/json; charset=utf-8\r\nContent-Length: 7\r\n"), "{sent}");
            assert!(sent.ends_with("\r\n\r\n{\"a\":1}"), "{sent}");
        });
    }

    #[test]
    fn failures_map_to_codes_and_dispatch_classes() {
        rt().block_on(async {
            // Refused: nothing listens.
            let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
            let e = request(port, "GET", "/v1/status", None, deadline()).await.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (BRIDGE_CONNECTION_REFUSED, Some(false)));
            // Accepted and closed without a reply (adb forward, app gone).
            let (port, _h) = peer(b"").await;
            let e = request(port, "POST", "/v1/action/tap", Some(&json!({})), deadline()).await.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (BRIDGE_NOT_READY, None));
            // 404: certainly not dispatched.
            let (port, _h) = peer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 33\r\n\r\n{\"ok\":false,\"error\":\"not_found\"}  ").await;
            let e = request(port, "GET", "/v1/nope", None, deadline()).await.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (BRIDGE_ROUTE_NOT_FOUND, Some(false)));
            // 500 carries the SDK's reason.
            let (port, _h) = peer(b"HTTP/1.1 500 Internal\r\nContent-Length: 32\r\n\r\n{\"ok\":false,\"error\":\"boom here\"}").await;
            let e = request(port, "GET", "/v1/status", None, deadline()).await.unwrap_err();
            assert_eq!(e.error, BRIDGE_PROTOCOL_ERROR);
            assert!(e.message.contains("boom here"), "{}", e.message);
        });
    }

    #[test]
    fn a_silent_sdk_times_out_as_not_ready() {
        rt().block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = l.local_addr().unwrap().port();
            let _h = tokio::spawn(async move {
                let (s, _) = l.accept().await.unwrap();
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(s);
            });
            let e = request(port, "GET", "/v1/status", None, Deadline::after(Duration::from_millis(200))).await.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (BRIDGE_NOT_READY, None));
        });
    }

    #[test]
    fn parse_edge_cases() {
        assert!(parse(b"garbage\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}").is_err());
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap().body, json!({}));
        assert_eq!(complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{"), None);
    }
}
