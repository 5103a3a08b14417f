//! A bounded HTTP/1.1 request reader and response writer shared by the H5
//! server and the DevTools relay: heads up to 16 KiB, bodies up to 1 MiB, every
//! read under a deadline. Keeps the raw head bytes so a relay can pass them on.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const MAX_HEAD: usize = 16 * 1024;
pub const MAX_BODY: usize = 1024 * 1024;
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Request {
    pub method: String,
    /// Path without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The head as received (request line + headers + blank line).
    pub raw_head: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

pub fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(v) => {
                    out.push(v);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one request; `None` on EOF, timeout, or a request over the limits.
/// With `with_body` false the body is left unread (WebSocket upgrades).
pub async fn read_request<R: AsyncRead + Unpin>(io: &mut R, with_body: bool) -> Option<Request> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let n = tokio::time::timeout(READ_TIMEOUT, io.read(&mut tmp)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut rl = lines.next()?.split(' ');
    let method = rl.next()?.to_string();
    let target = rl.next()?.to_string();
    let headers: Vec<(String, String)> = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let len: usize = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    if len > MAX_BODY {
        return None;
    }
    let mut body = buf[head_end..].to_vec();
    if with_body {
        while body.len() < len {
            let n = tokio::time::timeout(READ_TIMEOUT, io.read(&mut tmp)).await.ok()?.ok()?;
            if n == 0 {
                return None;
            }
            body.extend_from_slice(&tmp[..n]);
        }
        body.truncate(len);
    }
    let (path, qs) = target.split_once('?').unwrap_or((&target, ""));
    let query = qs
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (url_decode(k), url_decode(v))
        })
        .collect();
    Some(Request { method, path: path.to_string(), query, headers, body, raw_head: buf[..head_end].to_vec() })
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        502 => "Bad Gateway",
        _ => "Status",
    }
}

/// Writes a complete response and closes the write side (no keep-alive).
pub async fn respond<W: AsyncWrite + Unpin>(io: &mut W, status: u16, content_type: &str, body: &[u8]) {
    let head = format!("HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n", reason(status), body.len());
    let _ = tokio::time::timeout(READ_TIMEOUT, async {
        let _ = io.write_all(head.as_bytes()).await;
        let _ = io.write_all(body).await;
        let _ = io.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_head_query_and_body_within_limits() {
        let raw = b"POST /api/echo?a=1&b=x%20y HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
        let r = read_request(&mut &raw[..], true).await.unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/echo"));
        assert_eq!(r.query("b"), Some("x y"));
        assert_eq!(r.body, b"hello");
        assert_eq!(r.header("host"), Some("h"));
        let big = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
        assert!(read_request(&mut big.as_bytes(), true).await.is_none());
        let endless = vec![b'a'; MAX_HEAD + 8192];
        assert!(read_request(&mut &endless[..], true).await.is_none());
        assert_eq!(url_decode("%41%2"), "A%2");
    }
}
