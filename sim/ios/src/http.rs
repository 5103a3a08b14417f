//! Minimal HTTP/1.1 server side for the simulated listeners (the SDK, the H5
//! server): one request per connection, bounded head and body, a read
//! deadline, raw header list (duplicates stay visible), JSON replies with
//! `Connection: close`.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const MAX_HEAD: usize = 64 * 1024;

pub struct Request {
    pub method: String,
    pub path: String,
    /// Decoded query pairs in order (repeats kept).
    pub query: Vec<(String, String)>,
    /// Whether every query pair decoded.
    pub query_ok: bool,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub enum ReadError {
    /// Closed, timed out or unparsable: drop the connection.
    Bad,
    /// Content-Length over the limit (answer 413 without reading it).
    TooLarge,
}

impl Request {
    /// Every value of header `name` (case-insensitive).
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }
}

/// Reads one request within `deadline`; bodies over `max_body` are refused unread.
pub async fn read_request<S: AsyncRead + Unpin>(s: &mut S, max_body: usize, deadline: Duration) -> Result<Request, ReadError> {
    match tokio::time::timeout(deadline, read_inner(s, max_body)).await {
        Ok(r) => r,
        Err(_) => Err(ReadError::Bad),
    }
}

async fn read_inner<S: AsyncRead + Unpin>(s: &mut S, max_body: usize) -> Result<Request, ReadError> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err(ReadError::Bad);
        }
        let n = s.read(&mut tmp).await.map_err(|_| ReadError::Bad)?;
        if n == 0 {
            return Err(ReadError::Bad);
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| ReadError::Bad)?.to_string();
    let mut lines = head.split("\r\n");
    let mut rl = lines.next().ok_or(ReadError::Bad)?.split(' ');
    let method = rl.next().ok_or(ReadError::Bad)?.to_string();
    let target = rl.next().ok_or(ReadError::Bad)?.to_string();
    let mut headers = vec![];
    for l in lines {
        let (k, v) = l.split_once(':').ok_or(ReadError::Bad)?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        return Err(ReadError::Bad);
    }
    let len = match headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        Some((_, v)) => v.parse::<usize>().map_err(|_| ReadError::Bad)?,
        None => 0,
    };
    if len > max_body {
        return Err(ReadError::TooLarge);
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut tmp).await.map_err(|_| ReadError::Bad)?;
        if n == 0 {
            return Err(ReadError::Bad);
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    let (path, qs) = target.split_once('?').unwrap_or((&target, ""));
    let mut query_ok = true;
    let mut query = vec![];
    for kv in qs.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match (crate::util::url_decode(k), crate::util::url_decode(v)) {
            (Some(k), Some(v)) => query.push((k, v)),
            _ => query_ok = false,
        }
    }
    Ok(Request { method, path: path.to_string(), query, query_ok, headers, body })
}

/// Writes a response and closes the write side.
pub async fn respond<S: AsyncWrite + Unpin>(s: &mut S, status: u16, reason: &str, content_type: &str, body: &[u8]) {
    let head = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let _ = s.flush().await;
    let _ = s.shutdown().await;
}

/// The SDK's reply: `HTTP/1.1 <status> OK|Error`, JSON.
pub async fn respond_json<S: AsyncWrite + Unpin>(s: &mut S, status: u16, body: &Value) {
    let text = serde_json::to_vec(body).unwrap_or_default();
    respond(s, status, if status == 200 { "OK" } else { "Error" }, "application/json; charset=utf-8", &text).await;
}
