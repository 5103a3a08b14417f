//! One page socket after the WebSocket upgrade: the `hello` handshake (5 s,
//! rejections close with 1008 after an `error` frame), the binding check on every
//! later frame, routing of `response` / `completion` / `capture`, the writer that
//! echoes the binding on every host frame, and keep-alive (ping every 20 s,
//! terminate after 60 s without traffic).

use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::state::{Conn, OUTGOING_QUEUE, Outgoing, Shared};
use crate::wire::{self, KeepAlive};

type Ws = WebSocketStream<TokioIo<Upgraded>>;

/// Policy violation: the page must not reconnect blindly.
const CLOSE_POLICY: u16 = 1008;

/// How long a refused peer gets to take its error and close frames.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

async fn close(ws: &mut (impl SinkExt<Message> + Unpin), code: u16, error: &str, message: &str) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        let _ = ws.send(Message::text(wire::error_frame(error, message).to_string())).await;
        let frame = CloseFrame { code: CloseCode::from(code), reason: error.to_string().into() };
        let _ = ws.send(Message::Close(Some(frame))).await;
        let _ = ws.close().await;
    })
    .await;
}

/// The first text frame as JSON (pings are answered by tungstenite).
async fn first_json(ws: &mut Ws) -> Result<Value, &'static str> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(t.as_str()).map_err(|_| "the hello is not JSON"),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Binary(_))) => return Err("binary frames are not part of aab.web/v2"),
            _ => return Err("the socket closed before hello"),
        }
    }
}

pub async fn serve(shared: Arc<Shared>, mut ws: Ws, provider_epoch: String, keep_alive: KeepAlive, mut shutdown: watch::Receiver<bool>) {
    let hello = tokio::select! {
        h = tokio::time::timeout(keep_alive.handshake_timeout, first_json(&mut ws)) => h,
        _ = shutdown.changed() => return,
    };
    let hello = match hello {
        Ok(Ok(v)) => v,
        Ok(Err(why)) => return close(&mut ws, CLOSE_POLICY, "invalid_web_hello", why).await,
        Err(_) => return close(&mut ws, CLOSE_POLICY, "invalid_web_hello", &format!("no hello within {} ms", keep_alive.handshake_timeout.as_millis())).await,
    };
    let hello = match wire::parse_hello(&hello) {
        Ok(h) => h,
        Err(why) => return close(&mut ws, CLOSE_POLICY, "invalid_web_hello", &why).await,
    };
    let (tx, mut rx) = mpsc::channel::<Outgoing>(OUTGOING_QUEUE);
    let (closed_tx, closed_rx) = watch::channel(false);
    let registered = shared.register(&hello, &provider_epoch, |connection_id, binding| {
        Conn::new(connection_id, hello.session_id.clone(), hello.runtime_epoch.clone(), binding, tx, closed_rx)
    });
    let conn = match registered {
        Ok(c) => c,
        Err((code, why)) => return close(&mut ws, CLOSE_POLICY, code, &why).await,
    };
    shared.captures.note_connection(&conn);
    let binding = conn.binding().clone();
    let (mut sink, mut stream) = ws.split();
    let mut outcome: Option<(u16, String, String)> = None;
    if matches!(tokio::time::timeout(keep_alive.handshake_timeout, sink.send(Message::text(wire::hello_ack(&binding, &keep_alive).to_string()))).await, Ok(Ok(()))) {
        let mut last_seen = Instant::now();
        let mut ping = tokio::time::interval(keep_alive.ping_interval);
        ping.tick().await;
        loop {
            tokio::select! {
                out = rx.recv() => match out {
                    Some(Outgoing::Frame(mut frame)) => {
                        frame["binding"] = binding.clone();
                        // A page that stops reading fills the socket; give up after the idle timeout.
                        if !matches!(tokio::time::timeout(keep_alive.idle_timeout, sink.send(Message::text(frame.to_string()))).await, Ok(Ok(()))) {
                            break;
                        }
                    }
                    Some(Outgoing::Reject { code, error, message }) => {
                        outcome = Some((code, error, message));
                        break;
                    }
                    None => break,
                },
                incoming = stream.next() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        last_seen = Instant::now();
                        if let Err((error, message)) = on_frame(&shared, &conn, &provider_epoch, text.as_str()) {
                            outcome = Some((CLOSE_POLICY, error.to_string(), message));
                            break;
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => last_seen = Instant::now(),
                    Some(Ok(Message::Binary(_))) => {
                        outcome = Some((CLOSE_POLICY, "invalid_web_message".into(), "binary frames are not part of aab.web/v2".into()));
                        break;
                    }
                    Some(Err(e)) => {
                        outcome = stream_error(&e);
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(Message::Frame(_))) => {}
                },
                _ = ping.tick() => {
                    if last_seen.elapsed() > keep_alive.idle_timeout {
                        break;
                    }
                    if !matches!(tokio::time::timeout(keep_alive.idle_timeout, sink.send(Message::Ping(Vec::new().into()))).await, Ok(Ok(()))) {
                        break;
                    }
                }
                _ = shutdown.changed() => {
                    outcome = Some((1001, "web_provider_stopped".into(), "the Web endpoint stopped".into()));
                    break;
                }
            }
        }
    }
    // Mark the connection gone before anything else so waiting calls see it at once.
    let _ = closed_tx.send(true);
    shared.unregister(conn.session_id(), conn.connection_id());
    // A peer that stopped reading must not hold this task: the goodbye is bounded.
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if let Some((code, error, message)) = outcome {
            let _ = sink.send(Message::text(wire::error_frame(&error, &message).to_string())).await;
            let _ = sink.send(Message::Close(Some(CloseFrame { code: CloseCode::from(code), reason: error.into() }))).await;
        }
        let _ = sink.close().await;
    })
    .await;
}

/// How a transport error ends the socket: oversized messages (1009), text that is
/// not UTF-8 (1007) and broken framing (1002) get the protocol's error frame; a
/// vanished peer gets nothing.
fn stream_error(e: &tokio_tungstenite::tungstenite::Error) -> Option<(u16, String, String)> {
    use tokio_tungstenite::tungstenite::Error as E;
    match e {
        E::Capacity(_) => Some((1009, "web_message_too_large".into(), format!("a message exceeds {} bytes", wire::MAX_PAYLOAD))),
        E::Utf8(_) => Some((1007, "invalid_web_message".into(), "a text frame is not UTF-8".into())),
        E::Protocol(p) => Some((1002, "invalid_web_message".into(), format!("WebSocket protocol error: {p}"))),
        _ => None,
    }
}

/// Handle one text frame; Err = close the socket with 1008 and this error.
pub(crate) fn on_frame(shared: &Shared, conn: &Conn, provider_epoch: &str, text: &str) -> Result<(), (&'static str, String)> {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        return Err(("invalid_web_message", "the frame is not JSON".into()));
    };
    if !wire::binding_matches(conn.binding(), frame.get("binding")) {
        return Err(("web_binding_mismatch", "the frame's binding is not this connection's binding".into()));
    }
    match frame.get("type").and_then(Value::as_str) {
        Some("response") => {
            let Some(request_id) = frame.get("requestId").and_then(Value::as_str) else {
                return Err(("invalid_web_message", "`response` needs a requestId".into()));
            };
            let result = frame.get("result").cloned().unwrap_or(Value::Null);
            shared.touch(conn.session_id(), None, None);
            if !conn.resolve(request_id, result.clone()) {
                // Nobody waits any more (the call gave up). A late non-dispatch refusal
                // of an action still settles it: the page states nothing happened.
                if result.get("dispatched") == Some(&Value::Bool(false))
                    && let Some(action_id) = result.get("actionId").and_then(Value::as_str)
                {
                    shared.exec.rejected_late(conn.session_id(), action_id, result.clone());
                }
            }
            Ok(())
        }
        Some("completion") => {
            let result = frame.get("result").cloned().unwrap_or(Value::Null);
            let host_epoch = lock_host_epoch(shared);
            let ack = match shared.exec.complete(conn.session_id(), conn.connection_id(), &result, &host_epoch) {
                Ok(action_id) => json!({"type": "completionAck", "actionId": action_id, "stored": true, "persistence": shared.exec.persistence()}),
                Err((error, message)) => json!({"type": "completionAck", "actionId": result.get("actionId").cloned().unwrap_or(Value::Null), "stored": false, "error": error, "message": message}),
            };
            shared.touch(conn.session_id(), None, None);
            let _ = conn.send(ack);
            Ok(())
        }
        Some("capture") => {
            let route = frame.pointer("/item/route").and_then(Value::as_str);
            let url = frame.pointer("/item/url").and_then(Value::as_str);
            shared.touch(conn.session_id(), route, url);
            shared.captures.ingest(&shared.facts, conn, provider_epoch, &frame);
            Ok(())
        }
        Some(other) => Err(("invalid_web_message", format!("unknown message type `{other}`"))),
        None => Err(("invalid_web_message", "the frame has no `type`".into())),
    }
}

fn lock_host_epoch(shared: &Shared) -> String {
    crate::state::lock(&shared.host_info).as_ref().and_then(|i| i.get("runtimeId")).and_then(Value::as_str).unwrap_or_default().to_string()
}
