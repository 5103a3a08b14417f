//! The provider's HTTP/1 endpoint (hyper): the `aab.web/v2` WebSocket upgrade on
//! the configured path (token in the query, else 403), `GET /health` (no auth),
//! `GET /sessions` (token header, else 401), the Web SDK at
//! `/sdk/ai-app-bridge-web.js`, and — when started with `sampleApp` — the bundled
//! sample app under `/sample/`. It runs on the plugin's own tokio runtime and keeps
//! serving between commands until `web-session-stop` or the runtime ends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aab_plugin_api::ProviderError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::ids::{hex32, now_ms, secret_eq};
use crate::state::{ServerInfo, Shared, lock};
use crate::wire::{self, MAX_PAYLOAD, MAX_SOCKETS, TOKEN_HEADER};

pub type Body = Full<Bytes>;

/// The SDK, served verbatim (plain JavaScript, no build step).
pub const SDK_JS: &str = include_str!("../sdk/ai-app-bridge-web.js");
pub const SDK_PATH: &str = "/sdk/ai-app-bridge-web.js";

pub struct StartConfig {
    pub host: String,
    pub port: u16,
    pub path: String,
    pub token: String,
    pub sample_app: bool,
}

/// Bind the listener and spawn the accept loop on the current (plugin) runtime.
/// Binding is the only fallible step; it happens before anything is published.
pub async fn start(shared: Arc<Shared>, config: StartConfig) -> Result<ServerInfo, ProviderError> {
    let listener = TcpListener::bind((config.host.as_str(), config.port)).await.map_err(|e| {
        ProviderError::new("web_port_unavailable", format!("cannot listen on {}:{}: {e}", config.host, config.port))
            .with_field(if e.kind() == std::io::ErrorKind::AddrInUse { "webPort" } else { "host" })
            .not_dispatched()
    })?;
    let local: SocketAddr = listener.local_addr().map_err(|e| ProviderError::new("web_port_unavailable", e.to_string()).not_dispatched())?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let info = ServerInfo {
        host: config.host,
        port: local.port(),
        path: config.path,
        token: config.token,
        sample_app: config.sample_app,
        provider_epoch: hex32(),
        started_at_ms: now_ms(),
        shutdown,
    };
    tokio::spawn(accept_loop(shared.clone(), listener, shutdown_rx.clone()));
    tokio::spawn(sweeper(shared, shutdown_rx));
    Ok(info)
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(serve_http(shared.clone(), tcp, shutdown.clone()));
                }
            }
            _ = shutdown.changed() => break,
        }
    }
}

/// Forget long-disconnected sessions even when no command runs.
async fn sweeper(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(15)) => shared.sweep(),
            _ = shutdown.changed() => break,
        }
    }
}

async fn serve_http(shared: Arc<Shared>, tcp: tokio::net::TcpStream, mut shutdown: watch::Receiver<bool>) {
    let svc_shared = shared.clone();
    let service = service_fn(move |req| {
        let shared = svc_shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req).await) }
    });
    let conn = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(tcp), service).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
        }
    }
}

pub fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    respond(status, "application/json", value.to_string())
}

/// What a request handler needs of the running endpoint.
struct Endpoint {
    path: String,
    token: String,
    sample_app: bool,
    provider_epoch: String,
    shutdown: watch::Receiver<bool>,
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let endpoint = {
        let server = lock(&shared.server);
        server.as_ref().map(|s| Endpoint {
            path: s.path.clone(),
            token: s.token.clone(),
            sample_app: s.sample_app,
            provider_epoch: s.provider_epoch.clone(),
            shutdown: s.shutdown.subscribe(),
        })
    };
    let Some(endpoint) = endpoint else {
        return json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"ok": false, "error": "web_provider_not_running"}));
    };
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => json_response(StatusCode::OK, &health(&shared, &endpoint)),
        (&Method::GET, "/sessions") => {
            let given = req.headers().get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !secret_eq(given, &endpoint.token) {
                return json_response(StatusCode::UNAUTHORIZED, &json!({"ok": false, "error": "web_token_required"}));
            }
            let sessions = shared.sessions_json();
            json_response(StatusCode::OK, &json!({"ok": true, "running": true, "count": sessions.len(), "sessions": sessions}))
        }
        (&Method::GET, SDK_PATH) => respond(StatusCode::OK, "text/javascript; charset=utf-8", SDK_JS),
        (&Method::GET, p) if p == endpoint.path => upgrade(shared, req, endpoint),
        (_, p) if endpoint.sample_app && (p == "/sample" || p.starts_with("/sample/")) => crate::sample::handle(&shared, req).await,
        _ => json_response(StatusCode::NOT_FOUND, &json!({"ok": false, "error": "not_found"})),
    }
}

fn health(shared: &Shared, endpoint: &Endpoint) -> Value {
    let sessions = lock(&shared.sessions);
    json!({
        "ok": true,
        "running": true,
        "protocol": wire::PROTOCOL,
        "providerEpoch": endpoint.provider_epoch,
        "sessions": sessions.len(),
        "connected": sessions.values().filter(|s| s.conn.is_some()).count(),
        "sockets": shared.socket_count(),
    })
}

fn header_has(req: &Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers().get_all(name).iter().filter_map(|v| v.to_str().ok()).any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Decrements the socket count when the connection task ends, however it ends.
struct SocketSlot(Arc<Shared>);
impl Drop for SocketSlot {
    fn drop(&mut self) {
        self.0.sockets.fetch_sub(1, Ordering::SeqCst);
    }
}

fn upgrade(shared: Arc<Shared>, mut req: Request<Incoming>, endpoint: Endpoint) -> Response<Body> {
    let token = query_param(req.uri().query(), "token").unwrap_or("");
    if !secret_eq(token, &endpoint.token) {
        return respond(StatusCode::FORBIDDEN, "text/plain", "Forbidden");
    }
    if !header_has(&req, header::UPGRADE, "websocket") || !header_has(&req, header::CONNECTION, "upgrade") {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "expected a WebSocket upgrade");
    }
    if req.headers().get(header::SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok()) != Some("13") {
        let mut r = respond(StatusCode::UPGRADE_REQUIRED, "text/plain", "WebSocket version 13 required");
        r.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return r;
    }
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes().to_vec()) else {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "missing Sec-WebSocket-Key");
    };
    // Reserve a socket slot before answering, so the 65th upgrade is refused.
    if shared.sockets.fetch_add(1, Ordering::SeqCst) >= MAX_SOCKETS {
        shared.sockets.fetch_sub(1, Ordering::SeqCst);
        return respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "too many sockets");
    }
    let slot = SocketSlot(shared.clone());
    let on_upgrade = hyper::upgrade::on(&mut req);
    let provider_epoch = endpoint.provider_epoch.clone();
    let shutdown = endpoint.shutdown;
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(upgraded) = on_upgrade.await else { return };
        // No permessage-deflate: tungstenite does not negotiate extensions.
        let config = WebSocketConfig::default().max_message_size(Some(MAX_PAYLOAD)).max_frame_size(Some(MAX_PAYLOAD));
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        crate::socket::serve(shared, ws, provider_epoch, shutdown).await;
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(&key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_token() {
        assert_eq!(query_param(Some("a=1&token=xyz"), "token"), Some("xyz"));
        assert_eq!(query_param(Some("tokens=1"), "token"), None);
        assert_eq!(query_param(None, "token"), None);
    }
}
