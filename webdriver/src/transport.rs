//! One HTTP exchange with a WebDriver remote end: budget, capped body read,
//! W3C reply decoding, and the sent/lost classification of every failure.

use std::error::Error as _;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use tokio::time::Instant;

use crate::{Endpoint, WdError};

/// Grid rejects `application/json` without the charset.
const JSON_UTF8: &str = "application/json; charset=utf-8";

/// Idle pooled connections are dropped before Node's default 5 s keep-alive
/// timeout (Appium runs on Node): a request written onto a socket the server is
/// closing at that moment would come back as a spurious *lost* reply.
const POOL_IDLE: Duration = Duration::from_secs(4);

pub(crate) struct Transport {
    pub(crate) endpoint: Endpoint,
    http: reqwest::Client,
}

impl Transport {
    pub(crate) fn new(endpoint: Endpoint) -> Transport {
        let http = reqwest::Client::builder()
            // A proxy from the environment would move loopback traffic elsewhere.
            .no_proxy()
            // A redirect would send the command a second time, and reqwest's
            // default policy retries some refused requests.
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .pool_idle_timeout(POOL_IDLE)
            .build()
            // Only TLS back-end or resolver set-up can fail here, and this
            // build has neither.
            .expect("plain-HTTP reqwest client");
        Transport { endpoint, http }
    }

    /// Sends one command and returns the reply's `value`. The whole exchange
    /// (connect, write, headers, body) must finish within `budget`.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        limit: usize,
        budget: Duration,
    ) -> Result<Value, WdError> {
        if budget.is_zero() {
            return Err(WdError::NotSent {
                message: "no budget left".into(),
            });
        }
        let deadline = Instant::now() + budget;
        let url = format!("{}{path}", self.endpoint.as_str());
        let mut request = self
            .http
            .request(method.clone(), &url)
            .header(CONTENT_TYPE, HeaderValue::from_static(JSON_UTF8))
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .body(serde_json::to_vec(body).expect("a serde_json::Value always serialises"));
        }
        let exchange = async {
            let response = request.send().await.map_err(classify_send_error)?;
            let status = response.status().as_u16();
            let bytes = read_capped(response, limit).await?;
            Ok::<_, WdError>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout_at(deadline, exchange).await {
            Ok(outcome) => outcome?,
            // The timer cannot tell a slow connect from a slow reply, so the
            // request may have been written: ambiguous.
            Err(_) => {
                return Err(WdError::Lost {
                    message: format!("{method} {path}: no complete reply within {budget:?}"),
                });
            }
        };
        decode(status, &bytes)
    }
}

/// A connect failure happened before any byte of the request was written;
/// anything else (reset, closed mid-reply) may have followed the write.
fn classify_send_error(e: reqwest::Error) -> WdError {
    let message = describe(&e);
    if e.is_connect() || e.is_builder() {
        WdError::NotSent { message }
    } else {
        WdError::Lost { message }
    }
}

async fn read_capped(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, WdError> {
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(WdError::TooLarge { limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| WdError::Lost {
        message: format!("reply body cut off: {}", describe(&e)),
    })? {
        if body.len() + chunk.len() > limit {
            return Err(WdError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Maps a complete reply to its `value` or to the W3C error it carries.
fn decode(status: u16, bytes: &[u8]) -> Result<Value, WdError> {
    let mut reply: Value = serde_json::from_slice(bytes).map_err(|e| WdError::NotJson {
        status,
        message: format!("{e}: {}", snippet(bytes)),
    })?;
    let Some(value) = reply.get_mut("value").map(Value::take) else {
        return Err(WdError::NotJson {
            status,
            message: format!("no `value` member: {}", snippet(bytes)),
        });
    };
    // W3C errors are non-2xx replies; a 2xx `value` is data, even one with an
    // `error` member (a script may return any object).
    if !(200..300).contains(&status) {
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            let message = value.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
            return Err(WdError::Protocol { status, error: error.to_string(), message });
        }
        return Err(WdError::Protocol {
            status,
            error: "unknown error".into(),
            message: format!("HTTP {status} without a W3C error: {}", snippet(bytes)),
        });
    }
    Ok(value)
}

/// The error and its causes on one line (reqwest's own text omits the OS error).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The start of a body for an error message.
pub(crate) fn snippet(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]);
    if bytes.len() > MAX {
        format!("{text}…")
    } else {
        text.into_owned()
    }
}

/// Percent-encodes one path segment (session and element ids are opaque).
pub(crate) fn segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decode_splits_values_and_w3c_errors() {
        assert_eq!(
            decode(200, br#"{"value":{"ready":true}}"#).unwrap(),
            json!({"ready": true})
        );
        assert_eq!(decode(200, br#"{"value":null}"#).unwrap(), Value::Null);
        // A script's own object is data on 200, even with an `error` member.
        assert_eq!(decode(200, br#"{"value":{"error":"mine"}}"#).unwrap(), serde_json::json!({"error": "mine"}));
        let err = decode(
            404,
            br#"{"value":{"error":"no such element","message":"gone","stacktrace":""}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err,
            WdError::Protocol {
                status: 404,
                error: "no such element".into(),
                message: "gone".into()
            }
        );
        assert_eq!(
            decode(500, br#"{"value":{}}"#).unwrap_err().w3c_error(),
            Some("unknown error")
        );
        assert_eq!(
            decode(200, b"<html>").unwrap_err().code(),
            "webdriver_response_not_json"
        );
        assert_eq!(
            decode(200, br#"{"status":0}"#).unwrap_err().code(),
            "webdriver_response_not_json"
        );
    }
}
