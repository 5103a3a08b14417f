//! The Runner's HTTP/1.1 server side: keep-alive connections (like the real
//! WDA's GCDWebServer), a 16 KiB head limit, `Content-Length` bodies only (no
//! chunked uploads), a per-route body limit checked before any body byte is
//! read, an idle timeout between requests and a deadline for each request.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};

pub const MAX_HEAD: usize = 16 * 1024;
/// How long a kept-alive connection may sit between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one request (head and body) may take once its first byte arrived.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Request {
    pub method: String,
    /// Percent-decoded path without the query.
    pub path: String,
    /// Percent-decoded query pairs in order (duplicates kept so callers can reject them).
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub keep_alive: bool,
}

impl Request {
    /// Every value of the header `name` (case-insensitive).
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers.iter().filter(move |(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
pub enum ReadError {
    /// EOF, reset, idle or request timeout: nothing worth answering.
    Closed,
    /// Not HTTP/1.1 the Runner accepts; answered with 400, then closed.
    Malformed(String),
    /// `Content-Length` above the route's limit; answered with 409, then closed.
    TooLarge { limit: usize },
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn read_some(io: &mut TcpStream, tmp: &mut [u8], deadline: Instant) -> Result<usize, ReadError> {
    match timeout_at(deadline, io.read(tmp)).await {
        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => Err(ReadError::Closed),
        Ok(Ok(n)) => Ok(n),
    }
}

fn malformed(m: impl Into<String>) -> ReadError {
    ReadError::Malformed(m.into())
}

/// Percent-decodes `s` (`+` is a space only in queries); `None` if not UTF-8.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok())?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Reads the next request from `io`; `carry` holds bytes read past the previous
/// request (pipelining). `body_limit(method, path)` bounds the body.
pub async fn read_request(io: &mut TcpStream, carry: &mut Vec<u8>, body_limit: impl Fn(&str, &str) -> usize) -> Result<Request, ReadError> {
    let mut tmp = [0u8; 8192];
    if carry.is_empty() {
        match timeout(IDLE_TIMEOUT, io.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(ReadError::Closed),
            Ok(Ok(n)) => carry.extend_from_slice(&tmp[..n]),
        }
    }
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let head_end = loop {
        if let Some(p) = find(carry, b"\r\n\r\n") {
            break p + 4;
        }
        if carry.len() > MAX_HEAD {
            return Err(malformed("request head larger than 16 KiB"));
        }
        let n = read_some(io, &mut tmp, deadline).await?;
        carry.extend_from_slice(&tmp[..n]);
    };
    if head_end > MAX_HEAD {
        return Err(malformed("request head larger than 16 KiB"));
    }
    let head = std::str::from_utf8(&carry[..head_end - 4]).map_err(|_| malformed("request head is not UTF-8"))?.to_string();
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else { return Err(malformed(format!("bad request line {line:?}"))) };
    if !is_token(method) || !target.starts_with('/') {
        return Err(malformed(format!("bad request line {line:?}")));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(malformed(format!("unsupported HTTP version {version:?}"))),
    };
    let mut headers = Vec::new();
    for l in lines {
        let Some((k, v)) = l.split_once(':') else { return Err(malformed(format!("malformed header line {l:?}"))) };
        if !is_token(k) {
            return Err(malformed(format!("malformed header name {k:?}")));
        }
        headers.push((k.to_string(), v.trim_matches([' ', '\t']).to_string()));
    }
    let mut length = None::<usize>;
    let mut connection = None::<String>;
    let mut expect_continue = false;
    for (k, v) in &headers {
        if k.eq_ignore_ascii_case("transfer-encoding") {
            return Err(malformed("Transfer-Encoding is not accepted; send Content-Length"));
        } else if k.eq_ignore_ascii_case("content-length") {
            if length.is_some() || v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed(format!("bad or repeated Content-Length {v:?}")));
            }
            length = v.parse().ok();
        } else if k.eq_ignore_ascii_case("expect") {
            expect_continue = v.eq_ignore_ascii_case("100-continue");
        } else if k.eq_ignore_ascii_case("connection") {
            connection = Some(v.to_ascii_lowercase());
        }
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(raw_path, false).ok_or_else(|| malformed("path is not UTF-8"))?;
    let mut query = Vec::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode(k, true).ok_or_else(|| malformed("query is not UTF-8"))?;
        let v = percent_decode(v, true).ok_or_else(|| malformed("query is not UTF-8"))?;
        query.push((k, v));
    }
    let length = length.unwrap_or(0);
    let limit = body_limit(method, &path);
    if length > limit {
        return Err(ReadError::TooLarge { limit });
    }
    if expect_continue && carry.len() < head_end + length {
        // curl waits for this before sending a larger body.
        io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.map_err(|_| ReadError::Closed)?;
    }
    while carry.len() < head_end + length {
        let n = read_some(io, &mut tmp, deadline).await?;
        carry.extend_from_slice(&tmp[..n]);
    }
    let body = carry[head_end..head_end + length].to_vec();
    carry.drain(..head_end + length);
    let keep_alive = match connection.as_deref() {
        Some(c) if c.split(',').any(|t| t.trim() == "close") => false,
        Some(c) if c.split(',').any(|t| t.trim() == "keep-alive") => true,
        _ => http11,
    };
    Ok(Request { method: method.to_string(), path, query, headers, body, keep_alive })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        409 => "Conflict",
        _ => "Error",
    }
}

/// Writes one JSON response in a single write.
pub async fn write_response(io: &mut TcpStream, status: u16, body: &Value, keep_alive: bool) -> std::io::Result<()> {
    let text = body.to_string();
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        reason(status),
        text.len()
    )
    .into_bytes();
    out.extend_from_slice(text.as_bytes());
    io.write_all(&out).await?;
    io.flush().await
}

/// Most bytes (and time) spent discarding an unread request before closing.
const DRAIN_BYTES: usize = 8 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Half-closes `io` and discards what the peer still sends (bounded), so the
/// final close does not turn into a reset that destroys the reply in flight.
pub async fn close_draining(mut io: TcpStream) {
    let _ = io.shutdown().await;
    let deadline = Instant::now() + DRAIN_TIME;
    let (mut tmp, mut drained) = ([0u8; 16 * 1024], 0usize);
    while drained < DRAIN_BYTES {
        match timeout_at(deadline, io.read(&mut tmp)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}
