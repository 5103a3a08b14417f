//! The provider's HTTP/1 endpoint (hyper): the `aab.web/v2` WebSocket upgrade on
//! the configured path (token in the query, else 403), `GET /health` (liveness
//! only; the full status with the token header), `GET /sessions` (token header,
//! else 401), the Web SDK at `/sdk/ai-app-bridge-web.js`, and — when started with
//! `sampleApp` — the bundled sample app under `/sample/`. It runs on the plugin's
//! own tokio runtime and keeps serving between commands until `web-session-stop`
//! or the runtime ends.
//!
//! What a peer can hold is bounded before anything is authenticated: every request
//! passes the [`OriginPolicy`] first (403 otherwise), at most
//! [`MAX_HTTP_CONNECTIONS`] connections speak HTTP at once (more are answered 503
//! and closed), a request head must arrive within the header timeout (which also
//! ends idle keep-alive connections), a connection that moves no byte for
//! [`HTTP_IDLE_TIMEOUT`] is closed, and a failing `accept` (EMFILE) backs off
//! instead of spinning.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use aab_plugin_api::ProviderError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::ids::{hex32, now_ms, secret_eq};
use crate::origin::OriginPolicy;
use crate::state::{ServerInfo, Shared, lock};
use crate::wire::{self, KeepAlive, MAX_PAYLOAD, MAX_SOCKETS, TOKEN_HEADER};

pub type Body = Full<Bytes>;

/// The SDK, served verbatim (plain JavaScript, no build step).
pub const SDK_JS: &str = include_str!("../sdk/ai-app-bridge-web.js");
pub const SDK_PATH: &str = "/sdk/ai-app-bridge-web.js";

/// Connections speaking HTTP at once (WebSockets count separately, [`MAX_SOCKETS`]).
pub const MAX_HTTP_CONNECTIONS: usize = 128;
/// A connection that moves no byte for this long is closed (slow bodies, readers
/// that never read the response).
pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Back-off after a failed `accept` (EMFILE, ENFILE, ENOBUFS): doubles up to the cap.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

pub struct StartConfig {
    pub host: String,
    pub port: u16,
    pub path: String,
    pub token: String,
    pub sample_app: bool,
    /// Origins allowed beyond the defaults (`--allowed-origins`).
    pub allowed_origins: Vec<String>,
    /// `AI_APP_BRIDGE_WEB_ALLOWED_ORIGINS` as read when the endpoint starts.
    pub env_origins: Option<String>,
    pub keep_alive: KeepAlive,
}

/// The next accept back-off after `current` (None = the first failure).
pub fn next_backoff(current: Option<Duration>) -> Duration {
    current.map(|d| (d * 2).min(ACCEPT_BACKOFF_MAX)).unwrap_or(ACCEPT_BACKOFF_MIN)
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
    let origins = OriginPolicy::new(&config.host, local.port(), &config.allowed_origins, config.env_origins.as_deref()).map_err(|e| {
        ProviderError::new("invalid_argument", format!("allowed origins: {e}")).with_field("allowedOrigins").not_dispatched()
    })?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let info = ServerInfo {
        host: config.host,
        port: local.port(),
        path: config.path,
        token: config.token,
        sample_app: config.sample_app,
        origins,
        keep_alive: config.keep_alive,
        provider_epoch: hex32(),
        started_at_ms: now_ms(),
        shutdown,
    };
    tokio::spawn(accept_loop(shared.clone(), listener, shutdown_rx.clone()));
    tokio::spawn(sweeper(shared, shutdown_rx));
    Ok(info)
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(MAX_HTTP_CONNECTIONS));
    let mut backoff: Option<Duration> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    backoff = None;
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        // Over the cap: say so in one non-blocking write and close.
                        shared.endpoint_stats.refused.fetch_add(1, Ordering::Relaxed);
                        let _ = tcp.try_write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 20\r\nconnection: close\r\n\r\ntoo many connections");
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let shared = shared.clone();
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        serve_http(shared, tcp, shutdown).await;
                    });
                }
                Err(e) => {
                    // EMFILE and friends: the failure repeats at once, so wait (and
                    // keep listening for shutdown) instead of spinning on it.
                    let wait = next_backoff(backoff);
                    backoff = Some(wait);
                    shared.endpoint_stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    *lock(&shared.endpoint_stats.last_accept_error) = Some(e.to_string());
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.changed() => break,
                    }
                }
            },
            _ = shutdown.changed() => break,
        }
    }
}

/// A TCP stream that notes when a byte last moved, for the idle watchdog.
struct Tracked<T> {
    inner: T,
    last: Arc<AtomicU64>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last.store(now_ms(), Ordering::Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.last.store(now_ms(), Ordering::Relaxed);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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

/// Counts the connections speaking HTTP (for `web-provider-status`).
struct HttpSlot(Arc<Shared>);
impl Drop for HttpSlot {
    fn drop(&mut self) {
        self.0.endpoint_stats.http_connections.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve_http(shared: Arc<Shared>, tcp: tokio::net::TcpStream, mut shutdown: watch::Receiver<bool>) {
    shared.endpoint_stats.http_connections.fetch_add(1, Ordering::SeqCst);
    let _slot = HttpSlot(shared.clone());
    let header_timeout = lock(&shared.server).as_ref().map(|s| s.keep_alive.header_timeout).unwrap_or(wire::HEADER_TIMEOUT);
    let svc_shared = shared.clone();
    let service = service_fn(move |req| {
        let shared = svc_shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req).await) }
    });
    let last = Arc::new(AtomicU64::new(now_ms()));
    let io = TokioIo::new(Tracked { inner: tcp, last: last.clone() });
    // The header timeout also bounds an idle keep-alive connection: hyper arms it
    // whenever it waits for the next request head.
    let conn = http1::Builder::new().timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true).serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    // A longer configured header timeout is honoured rather than cut short.
    let idle_ms = HTTP_IDLE_TIMEOUT.max(header_timeout).as_millis() as u64;
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = watchdog.tick() => {
                if now_ms().saturating_sub(last.load(Ordering::Relaxed)) > idle_ms {
                    break;
                }
            }
            _ = shutdown.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                break;
            }
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
    origins: OriginPolicy,
    keep_alive: KeepAlive,
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
            origins: s.origins.clone(),
            keep_alive: s.keep_alive,
            shutdown: s.shutdown.subscribe(),
        })
    };
    let Some(endpoint) = endpoint else {
        return json_response(StatusCode::SERVICE_UNAVAILABLE, &json!({"ok": false, "error": "web_provider_not_running"}));
    };
    // The origin policy comes before routing, tokens and bodies: a refused page
    // learns nothing and changes nothing.
    let origin = req.headers().get(header::ORIGIN).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let host = req.headers().get(header::HOST).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if !endpoint.origins.allows(origin) || !endpoint.origins.host_allowed(host) {
        shared.endpoint_stats.origin_refused.fetch_add(1, Ordering::Relaxed);
        return json_response(StatusCode::FORBIDDEN, &json!({"ok": false, "error": "web_origin_not_allowed"}));
    }
    let path = req.uri().path().to_string();
    let authenticated = req.headers().get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).is_some_and(|t| secret_eq(t, &endpoint.token));
    match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => json_response(StatusCode::OK, &health(&shared, &endpoint, authenticated)),
        (&Method::GET, "/sessions") => {
            if !authenticated {
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

/// Liveness for anyone the origin policy admits; epochs and counts only with the token.
fn health(shared: &Shared, endpoint: &Endpoint, authenticated: bool) -> Value {
    if !authenticated {
        return json!({"ok": true, "running": true, "protocol": wire::PROTOCOL});
    }
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
    let keep_alive = endpoint.keep_alive;
    tokio::spawn(async move {
        let _slot = slot;
        let Ok(upgraded) = on_upgrade.await else { return };
        // No permessage-deflate: tungstenite does not negotiate extensions.
        let config = WebSocketConfig::default().max_message_size(Some(MAX_PAYLOAD)).max_frame_size(Some(MAX_PAYLOAD));
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        crate::socket::serve(shared, ws, provider_epoch, keep_alive, shutdown).await;
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
    fn accept_backoff_doubles_to_a_cap() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..12 {
            let next = next_backoff(d);
            seen.push(next);
            d = Some(next);
        }
        assert_eq!(seen[0], ACCEPT_BACKOFF_MIN);
        assert!(seen.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*seen.last().unwrap(), ACCEPT_BACKOFF_MAX);
    }

    #[test]
    fn query_token() {
        assert_eq!(query_param(Some("a=1&token=xyz"), "token"), Some("xyz"));
        assert_eq!(query_param(Some("tokens=1"), "token"), None);
        assert_eq!(query_param(None, "token"), None);
    }
}
