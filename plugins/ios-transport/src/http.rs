//! One HTTP request to an iOS peer (the app SDK listener or the WDA Runner), through
//! `reqwest`, with a body cap and a timeout inside the command deadline. The answer
//! must be a JSON object; anything else is a failure the caller maps to its code.
//!
//! What a failure means for a mutation is the point of [`FailureKind`]: a request
//! that provably never reached the peer ([`FailureKind::NotSent`]: no connection)
//! cannot have had an effect, while one that may have reached it ([`FailureKind::Lost`])
//! leaves the outcome unknown. Nothing here retries.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// Peers answer JSON; an SDK screenshot in base64 is the largest (contract: 8 MiB).
pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// The body's size on the wire.
    pub bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// No connection was made: the peer cannot have seen the request.
    NotSent,
    /// The request may have reached the peer (timeout or reset after connecting,
    /// a reply cut short): its effect is unknown.
    Lost,
    /// The reply was larger than the cap (the peer did answer; the body is dropped).
    TooLarge,
    /// The reply was not a JSON object.
    NotJson,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
    /// The HTTP status when one was received.
    pub status: Option<u16>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            // Peers close every connection (`Connection: close`); a pooled socket would
            // only be a stale one. Proxies from the environment must not see device traffic.
            .pool_max_idle_per_host(0)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("a plain-HTTP reqwest client builds")
    })
}

/// Send one request and read the JSON reply (any HTTP status; the caller decides
/// what a 409 means). `url` must be `http://…`.
pub async fn request(method: &str, url: &str, headers: &[(&str, String)], body: Option<&Value>, max_body_bytes: usize, timeout: Duration) -> Result<Reply, Failure> {
    let fail = |kind, message: String, status| Failure { kind, message, status };
    if !url.starts_with("http://") {
        return Err(fail(FailureKind::NotSent, format!("only http:// peers are supported, not {url}"), None));
    }
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| fail(FailureKind::NotSent, format!("bad method: {e}"), None))?;
    let mut rb = client().request(method.clone(), url).timeout(timeout).header("Accept", "application/json");
    for (name, value) in headers {
        rb = rb.header(*name, value.as_str());
    }
    if let Some(b) = body {
        rb = rb.header("Content-Type", "application/json; charset=utf-8").body(b.to_string());
    }
    let mut response = rb.send().await.map_err(|e| classify(&e, &method, url))?;
    let status = response.status().as_u16();
    if let Some(len) = response.content_length()
        && len as usize > max_body_bytes
    {
        return Err(fail(FailureKind::TooLarge, format!("{method} {url} answered {len} bytes (limit {max_body_bytes})"), Some(status)));
    }
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout(timeout, response.chunk()).await {
            Err(_) => return Err(fail(FailureKind::Lost, format!("{method} {url}: the reply stalled"), Some(status))),
            Ok(Err(e)) => return Err(fail(FailureKind::Lost, format!("{method} {url}: the reply was cut short: {e}"), Some(status))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => {
                if bytes.len() + chunk.len() > max_body_bytes {
                    return Err(fail(FailureKind::TooLarge, format!("{method} {url} answered more than {max_body_bytes} bytes"), Some(status)));
                }
                bytes.extend_from_slice(&chunk);
            }
        }
    }
    let body: Value = serde_json::from_slice(&bytes).map_err(|e| fail(FailureKind::NotJson, format!("{method} {url} (HTTP {status}) answered something that is not JSON: {e}"), Some(status)))?;
    if !body.is_object() {
        return Err(fail(FailureKind::NotJson, format!("{method} {url} (HTTP {status}) answered JSON that is not an object"), Some(status)));
    }
    Ok(Reply { status, body, bytes: bytes.len() })
}

fn classify(e: &reqwest::Error, method: &reqwest::Method, url: &str) -> Failure {
    // A connect error (refused, unreachable, connect timeout) happened before any
    // byte of the request left; everything else may have reached the peer.
    let kind = if e.is_connect() || e.is_builder() { FailureKind::NotSent } else { FailureKind::Lost };
    Failure { kind, message: format!("{method} {url}: {e}"), status: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn serve_once(reply: &'static [u8]) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            if !reply.is_empty() {
                let _ = s.write_all(reply).await;
            }
            // An empty reply: close without answering (a lost reply).
        });
        port
    }

    #[tokio::test]
    async fn json_object_replies_are_read_and_classified() {
        let port = serve_once(b"HTTP/1.1 409 Error\r\nContent-Type: application/json\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"ok\":false}").await;
        let r = request("GET", &format!("http://127.0.0.1:{port}/v1/status"), &[("X-Test", "1".into())], None, 1024, Duration::from_secs(5)).await.unwrap();
        assert_eq!((r.status, r.body["ok"].clone()), (409, Value::Bool(false)));

        let port = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\n[1]").await;
        let e = request("GET", &format!("http://127.0.0.1:{port}/"), &[], None, 1024, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::NotJson);

        let port = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n{}").await;
        let e = request("GET", &format!("http://127.0.0.1:{port}/"), &[], None, 1024, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::TooLarge);
    }

    #[tokio::test]
    async fn refused_is_not_sent_and_a_dropped_reply_is_lost() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = l.local_addr().unwrap().port();
        drop(l);
        let e = request("POST", &format!("http://127.0.0.1:{closed}/v1/h5/action"), &[], Some(&serde_json::json!({})), 1024, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::NotSent, "{e}");

        let port = serve_once(b"").await;
        let e = request("POST", &format!("http://127.0.0.1:{port}/v1/h5/action"), &[], Some(&serde_json::json!({})), 1024, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::Lost, "{e}");

        let e = request("GET", "https://127.0.0.1:1/", &[], None, 1024, Duration::from_secs(1)).await.unwrap_err();
        assert_eq!(e.kind, FailureKind::NotSent);
    }
}
