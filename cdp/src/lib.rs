//! aab-cdp: a minimal async Chrome DevTools Protocol client. One WebSocket to a
//! DevTools endpoint (browser or page), calls matched to replies by request id
//! with a per-call timeout, flattened sessions (`sessionId`), and a stream of the
//! events the endpoint sends. Behind the `launch` feature, [`Browser`] starts a
//! headless Chromium that cannot outlive its owner.
//!
//! The client never retries: a call whose reply does not arrive in time is
//! reported as [`CdpError::Timeout`] and its late reply, if any, is dropped.

#[cfg(feature = "launch")]
mod launch;
#[cfg(feature = "launch")]
pub use launch::{Browser, find_chromium};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Default time one call may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Events buffered per subscriber before the oldest are dropped (a subscriber
/// that falls this far behind sees [`EventStream::lagged`] grow).
const EVENT_BUFFER: usize = 16_384;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum CdpError {
    #[error("cannot connect to {url}: {message}")]
    Connect { url: String, message: String },
    #[error("{method}: no reply within {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    #[error("{method}: DevTools connection closed")]
    Closed { method: String },
    /// The endpoint answered with a protocol error.
    #[error("{method}: error {code}: {message}")]
    Protocol { method: String, code: i64, message: String },
    #[error("{0}")]
    Launch(String),
}

/// One event: its method, params, and the flattened session it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub method: String,
    pub params: Value,
    pub session_id: Option<String>,
}

type Reply = Result<Value, (i64, String)>;
type Pending = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>>;

/// A connection to one DevTools WebSocket endpoint.
pub struct Cdp {
    sink: tokio::sync::Mutex<SplitSink<Socket, Message>>,
    /// Waiting calls by id; `None` once the connection is gone.
    pending: Pending,
    next_id: AtomicU64,
    /// `None` once the connection is gone, so every stream ends.
    events: Arc<Mutex<Option<broadcast::Sender<Event>>>>,
    reader: JoinHandle<()>,
    timeout: Duration,
}

/// Events of one connection, from the moment of [`Cdp::events`] on.
pub struct EventStream {
    rx: broadcast::Receiver<Event>,
    lagged: u64,
}

impl EventStream {
    /// The next event; `None` once the connection is closed.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            match self.rx.recv().await {
                Ok(e) => return Some(e),
                Err(broadcast::error::RecvError::Lagged(n)) => self.lagged += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// Events dropped because this stream fell behind.
    pub fn lagged(&self) -> u64 {
        self.lagged
    }
}

impl Cdp {
    /// Connects to a DevTools WebSocket URL (`ws://host:port/devtools/...`).
    pub async fn connect(url: &str) -> Result<Cdp, CdpError> {
        Self::connect_with_timeout(url, DEFAULT_TIMEOUT).await
    }

    /// [`Cdp::connect`] with the per-call timeout used by [`Cdp::call`] (also bounds the handshake).
    pub async fn connect_with_timeout(url: &str, timeout: Duration) -> Result<Cdp, CdpError> {
        let conn_err = |message: String| CdpError::Connect { url: url.to_string(), message };
        let (socket, _) = tokio::time::timeout(timeout, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| conn_err(format!("no handshake within {timeout:?}")))?
            .map_err(|e| conn_err(e.to_string()))?;
        let (sink, mut stream) = socket.split();
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let events = Arc::new(Mutex::new(Some(events)));
        let (p, ev) = (pending.clone(), events.clone());
        let reader = tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let text = match msg {
                    Message::Text(t) => t,
                    Message::Close(_) => break,
                    _ => continue,
                };
                let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                if let Some(id) = v.get("id").and_then(Value::as_u64) {
                    let tx = p.lock().unwrap().as_mut().and_then(|m| m.remove(&id));
                    if let Some(tx) = tx {
                        let reply = match v.get("error") {
                            Some(e) => Err((e["code"].as_i64().unwrap_or(0), e["message"].as_str().unwrap_or_default().to_string())),
                            None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        let _ = tx.send(reply);
                    }
                } else if let Some(method) = v.get("method").and_then(Value::as_str) {
                    let tx = ev.lock().unwrap().clone();
                    let _ = tx.map(|tx| tx.send(Event {
                        method: method.to_string(),
                        params: v.get("params").cloned().unwrap_or(Value::Null),
                        session_id: v.get("sessionId").and_then(Value::as_str).map(str::to_string),
                    }));
                }
            }
            // Gone: every waiting call learns it now (dropping its sender), new calls see `None`.
            p.lock().unwrap().take();
            ev.lock().unwrap().take();
        });
        Ok(Cdp { sink: tokio::sync::Mutex::new(sink), pending, next_id: AtomicU64::new(1), events, reader, timeout })
    }

    /// The per-call timeout of [`Cdp::call`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the connection is still open.
    pub fn is_open(&self) -> bool {
        self.pending.lock().unwrap().is_some()
    }

    /// Events from now on (subscribe before the call that triggers them).
    pub fn events(&self) -> EventStream {
        let rx = match self.events.lock().unwrap().as_ref() {
            Some(tx) => tx.subscribe(),
            // Already closed: a stream that ends at once.
            None => broadcast::channel(1).1,
        };
        EventStream { rx, lagged: 0 }
    }

    /// One call (browser-level when `session_id` is None) with the connection's timeout.
    pub async fn call(&self, method: &str, params: Value, session_id: Option<&str>) -> Result<Value, CdpError> {
        self.call_with_timeout(method, params, session_id, self.timeout).await
    }

    /// One call with its own timeout.
    pub async fn call_with_timeout(&self, method: &str, params: Value, session_id: Option<&str>, timeout: Duration) -> Result<Value, CdpError> {
        let closed = || CdpError::Closed { method: method.to_string() };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().unwrap().as_mut() {
            Some(m) => m.insert(id, tx),
            None => return Err(closed()),
        };
        let mut frame = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session_id {
            frame["sessionId"] = json!(s);
        }
        let forget = || {
            if let Some(m) = self.pending.lock().unwrap().as_mut() {
                m.remove(&id);
            }
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let sent = tokio::time::timeout_at(deadline, async { self.sink.lock().await.send(Message::text(frame.to_string())).await }).await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                forget();
                return Err(closed());
            }
            Err(_) => {
                forget();
                return Err(CdpError::Timeout { method: method.to_string(), timeout });
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err((code, message)))) => Err(CdpError::Protocol { method: method.to_string(), code, message }),
            Ok(Err(_)) => Err(closed()),
            Err(_) => {
                forget();
                Err(CdpError::Timeout { method: method.to_string(), timeout })
            }
        }
    }

    /// Closes the WebSocket (close handshake bounded by the call timeout) and stops the reader.
    pub async fn close(self) {
        let _ = tokio::time::timeout(self.timeout, async {
            let mut sink = self.sink.lock().await;
            let _ = sink.send(Message::Close(None)).await;
            let _ = sink.close().await;
        })
        .await;
        self.pending.lock().unwrap().take();
        self.events.lock().unwrap().take();
        self.reader.abort();
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// `Runtime.evaluate` result → its value, or the exception's text.
pub fn evaluate_value(result: &Value) -> Result<Value, String> {
    if let Some(ex) = result.get("exceptionDetails") {
        let text = ex.pointer("/exception/description").and_then(Value::as_str).or_else(|| ex.get("text").and_then(Value::as_str)).unwrap_or("exception");
        return Err(text.to_string());
    }
    Ok(result.pointer("/result/value").cloned().unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluate_value_reads_value_and_exception() {
        assert_eq!(evaluate_value(&json!({"result": {"type": "number", "value": 3}})), Ok(json!(3)));
        assert_eq!(evaluate_value(&json!({"result": {"type": "undefined"}})), Ok(Value::Null));
        let thrown = json!({"result": {}, "exceptionDetails": {"text": "Uncaught", "exception": {"description": "Error: boom"}}});
        assert_eq!(evaluate_value(&thrown), Err("Error: boom".into()));
    }
}
