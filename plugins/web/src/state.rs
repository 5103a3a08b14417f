//! Provider state shared by the command calls and the long-lived server tasks:
//! the running endpoint, the session table (one socket per session, origin pinned,
//! forgotten 5 minutes after disconnecting), and per-connection request routing
//! (host→page `read`/`command` frames matched to the page's `response` by
//! `requestId`, at most 64 outstanding).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aab_plugin_api::ProviderError;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::capture::Captures;
use crate::execution::ExecTable;
use crate::facts::Facts;
use crate::ids::{hex32, now_ms};
use crate::origin::OriginPolicy;
use crate::sample::SampleApi;
use crate::wire::{self, Hello, KeepAlive, MAX_PENDING, MAX_SESSIONS};

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A frame for the socket writer. The writer adds the connection's `binding`.
#[derive(Debug)]
pub enum Outgoing {
    Frame(Value),
    /// Send `{type:"error"}` then close with this code.
    Reject { code: u16, error: String, message: String },
}

/// Frames queued per socket before the connection counts as overloaded.
pub const OUTGOING_QUEUE: usize = 512;

struct ConnInner {
    connection_id: String,
    session_id: String,
    runtime_epoch: String,
    binding: Value,
    tx: mpsc::Sender<Outgoing>,
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    closed: watch::Receiver<bool>,
}

/// One accepted page socket.
#[derive(Clone)]
pub struct Conn(Arc<ConnInner>);

/// A host request awaiting the page's `response`; forgotten when dropped.
pub struct PendingRequest {
    pub request_id: String,
    pub reply: oneshot::Receiver<Value>,
    pub closed: watch::Receiver<bool>,
    conn: Conn,
}

impl Drop for PendingRequest {
    fn drop(&mut self) {
        lock(&self.conn.0.pending).remove(&self.request_id);
    }
}

impl Conn {
    pub fn new(connection_id: String, session_id: String, runtime_epoch: String, binding: Value, tx: mpsc::Sender<Outgoing>, closed: watch::Receiver<bool>) -> Conn {
        Conn(Arc::new(ConnInner {
            connection_id,
            session_id,
            runtime_epoch,
            binding,
            tx,
            pending: Mutex::new(HashMap::new()),
            closed,
        }))
    }

    pub fn connection_id(&self) -> &str {
        &self.0.connection_id
    }
    pub fn session_id(&self) -> &str {
        &self.0.session_id
    }
    pub fn runtime_epoch(&self) -> &str {
        &self.0.runtime_epoch
    }
    pub fn binding(&self) -> &Value {
        &self.0.binding
    }
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.0.closed.clone()
    }
    pub fn is_closed(&self) -> bool {
        *self.0.closed.borrow() || self.0.tx.is_closed()
    }
    pub fn pending_requests(&self) -> usize {
        lock(&self.0.pending).len()
    }

    /// Queue a frame (without binding; the writer adds it).
    pub fn send(&self, frame: Value) -> Result<(), ProviderError> {
        match self.0.tx.try_send(Outgoing::Frame(frame)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(ProviderError::new(
                "web_transport_capacity",
                format!("the page's socket has {OUTGOING_QUEUE} frames queued; it is not reading"),
            )),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ProviderError::new("web_target_disconnected", "the page disconnected")),
        }
    }

    /// Close the socket with a policy error (used when the provider stops).
    pub fn reject(&self, code: u16, error: &str, message: &str) {
        let _ = self.0.tx.try_send(Outgoing::Reject { code, error: error.into(), message: message.into() });
    }

    /// Send `{type: kind, requestId, payload}` and register for its `response`.
    pub fn request(&self, kind: &str, payload: Value) -> Result<PendingRequest, ProviderError> {
        if self.is_closed() {
            return Err(ProviderError::new("web_target_disconnected", "the page disconnected").not_dispatched());
        }
        let request_id = hex32();
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.0.pending);
            if pending.len() >= MAX_PENDING {
                return Err(ProviderError::new("web_pending_limit", format!("{MAX_PENDING} requests to this page are already outstanding")).not_dispatched());
            }
            pending.insert(request_id.clone(), tx);
        }
        let request = PendingRequest { request_id: request_id.clone(), reply: rx, closed: self.closed(), conn: self.clone() };
        self.send(json!({"type": kind, "requestId": request_id, "payload": payload})).map_err(ProviderError::not_dispatched)?;
        Ok(request)
    }

    /// Route a page `response`; false when nobody waits for it (late or unknown).
    pub fn resolve(&self, request_id: &str, result: Value) -> bool {
        match lock(&self.0.pending).remove(request_id) {
            Some(tx) => tx.send(result).is_ok(),
            None => false,
        }
    }

    /// Fail every outstanding request (the socket is gone).
    pub fn drop_pending(&self) {
        lock(&self.0.pending).clear();
    }
}

/// A page known to the provider.
pub struct Session {
    pub session_id: String,
    pub origin: String,
    pub app_name: String,
    pub url: String,
    pub route: String,
    pub runtime_epoch: String,
    pub connected_at_ms: u64,
    pub last_seen_at_ms: u64,
    pub disconnected_at_ms: Option<u64>,
    pub connections: u64,
    pub conn: Option<Conn>,
}

impl Session {
    pub fn to_json(&self, captures: &Captures, store: &str) -> Value {
        json!({
            "sessionId": self.session_id,
            "runtimeEpoch": self.runtime_epoch,
            "targetId": wire::TARGET_ID,
            "connected": self.conn.is_some(),
            "connectionId": self.conn.as_ref().map(|c| c.connection_id().to_string()),
            "pendingRequests": self.conn.as_ref().map(|c| c.pending_requests()).unwrap_or(0),
            "appName": self.app_name,
            "url": self.url,
            "origin": self.origin,
            "route": self.route,
            "connectedAtMs": self.connected_at_ms,
            "lastSeenAtMs": self.last_seen_at_ms,
            "disconnectedAtMs": self.disconnected_at_ms,
            "connections": self.connections,
            "capture": captures.session_counters(&self.session_id),
            "executionSchema": wire::EXECUTION_SCHEMA,
            "domTargetSchema": wire::DOM_TARGET_SCHEMA,
            "captureSource": store,
        })
    }
}

/// The running endpoint.
pub struct ServerInfo {
    pub host: String,
    pub port: u16,
    pub path: String,
    pub token: String,
    pub sample_app: bool,
    pub origins: OriginPolicy,
    pub keep_alive: KeepAlive,
    pub provider_epoch: String,
    pub started_at_ms: u64,
    pub shutdown: watch::Sender<bool>,
}

impl ServerInfo {
    pub fn endpoint(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("ws://{host}:{}{}", self.port, self.path)
    }
    pub fn http_base(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("http://{host}:{}", self.port)
    }
}

/// Counters of the HTTP endpoint, for `web-provider-status`.
#[derive(Default)]
pub struct EndpointStats {
    /// Connections currently speaking HTTP (not yet upgraded).
    pub http_connections: AtomicUsize,
    /// Connections answered 503 because [`crate::server::MAX_HTTP_CONNECTIONS`] were open.
    pub refused: AtomicU64,
    /// Requests refused by the origin policy.
    pub origin_refused: AtomicU64,
    pub accept_errors: AtomicU64,
    pub last_accept_error: Mutex<Option<String>>,
}

impl EndpointStats {
    pub fn to_json(&self) -> Value {
        json!({
            "httpConnections": self.http_connections.load(Ordering::SeqCst),
            "maxHttpConnections": crate::server::MAX_HTTP_CONNECTIONS,
            "refusedConnections": self.refused.load(Ordering::Relaxed),
            "originRefused": self.origin_refused.load(Ordering::Relaxed),
            "acceptErrors": self.accept_errors.load(Ordering::Relaxed),
            "lastAcceptError": lock(&self.last_accept_error).clone(),
        })
    }
}

/// Everything the provider shares between calls and server tasks.
#[derive(Default)]
pub struct Shared {
    pub server: Mutex<Option<ServerInfo>>,
    pub sessions: Mutex<HashMap<String, Session>>,
    /// Open WebSocket connections (accepted upgrades, before or after hello).
    pub sockets: AtomicUsize,
    pub endpoint_stats: EndpointStats,
    pub exec: ExecTable,
    pub captures: Captures,
    pub facts: Facts,
    pub sample: SampleApi,
    /// `host.info` as answered on the first call.
    pub host_info: Mutex<Option<Value>>,
}

impl Shared {
    pub fn socket_count(&self) -> usize {
        self.sockets.load(Ordering::SeqCst)
    }

    /// Forget sessions disconnected for longer than [`wire::FORGET_AFTER`].
    fn forget_stale(sessions: &mut HashMap<String, Session>) {
        let cutoff = now_ms().saturating_sub(wire::FORGET_AFTER.as_millis() as u64);
        sessions.retain(|_, s| s.conn.is_some() || s.disconnected_at_ms.is_none_or(|t| t > cutoff));
    }

    pub fn sweep(&self) {
        Self::forget_stale(&mut lock(&self.sessions));
    }

    /// Admit a `hello`: one socket per session, the session's origin never changes,
    /// at most [`MAX_SESSIONS`] sessions. Returns the binding.
    pub fn register(&self, hello: &Hello, provider_epoch: &str, make_conn: impl FnOnce(String, Value) -> Conn) -> Result<Conn, (&'static str, String)> {
        let mut sessions = lock(&self.sessions);
        Self::forget_stale(&mut sessions);
        if let Some(s) = sessions.get(&hello.session_id) {
            if s.conn.is_some() {
                return Err(("web_session_busy", format!("session {} already has a connected socket", hello.session_id)));
            }
            if s.origin != hello.origin {
                return Err(("web_session_origin_changed", format!("session {} belongs to origin {:?}, not {:?}", hello.session_id, s.origin, hello.origin)));
            }
        } else if sessions.len() >= MAX_SESSIONS {
            // Make room by forgetting the longest-disconnected session, if any.
            let oldest = sessions.values().filter(|s| s.conn.is_none()).min_by_key(|s| s.disconnected_at_ms.unwrap_or(0)).map(|s| s.session_id.clone());
            match oldest {
                Some(id) => {
                    sessions.remove(&id);
                }
                None => return Err(("web_session_limit", format!("the provider already serves {MAX_SESSIONS} sessions"))),
            }
        }
        let connection_id = hex32();
        let binding = wire::binding(provider_epoch, &connection_id, &hello.session_id, &hello.runtime_epoch);
        let conn = make_conn(connection_id, binding);
        let now = now_ms();
        let entry = sessions.entry(hello.session_id.clone()).or_insert_with(|| Session {
            session_id: hello.session_id.clone(),
            origin: hello.origin.clone(),
            app_name: String::new(),
            url: String::new(),
            route: String::new(),
            runtime_epoch: String::new(),
            connected_at_ms: now,
            last_seen_at_ms: now,
            disconnected_at_ms: None,
            connections: 0,
            conn: None,
        });
        entry.app_name = hello.app_name.clone();
        entry.url = hello.url.clone();
        entry.route = hello.route.clone();
        entry.runtime_epoch = hello.runtime_epoch.clone();
        entry.connected_at_ms = now;
        entry.last_seen_at_ms = now;
        entry.disconnected_at_ms = None;
        entry.connections += 1;
        entry.conn = Some(conn.clone());
        Ok(conn)
    }

    /// The socket of `connection_id` ended.
    pub fn unregister(&self, session_id: &str, connection_id: &str) {
        let mut sessions = lock(&self.sessions);
        if let Some(s) = sessions.get_mut(session_id)
            && s.conn.as_ref().is_some_and(|c| c.connection_id() == connection_id)
        {
            if let Some(c) = s.conn.take() {
                c.drop_pending();
            }
            s.disconnected_at_ms = Some(now_ms());
        }
    }

    pub fn touch(&self, session_id: &str, route: Option<&str>, url: Option<&str>) {
        if let Some(s) = lock(&self.sessions).get_mut(session_id) {
            s.last_seen_at_ms = now_ms();
            if let Some(r) = route {
                s.route = r.to_string();
            }
            if let Some(u) = url {
                s.url = u.to_string();
            }
        }
    }

    /// The connection of the page `(sessionId, runtimeEpoch)`, or why there is none.
    pub fn target(&self, session_id: &str, runtime_epoch: &str) -> Result<Conn, ProviderError> {
        if lock(&self.server).is_none() {
            return Err(ProviderError::new("web_provider_not_running", "the Web endpoint is not running; start it with `web-session-start`").not_dispatched());
        }
        let sessions = lock(&self.sessions);
        let Some(s) = sessions.get(session_id) else {
            return Err(ProviderError::new("web_session_not_found", format!("no page with sessionId {session_id:?} is known; list them with `web-sessions`"))
                .with_field("sessionId")
                .not_dispatched());
        };
        let Some(conn) = s.conn.as_ref().filter(|c| !c.is_closed()) else {
            return Err(ProviderError::new("web_target_disconnected", format!("session {session_id} is not connected"))
                .with_details(json!({"runtimeEpoch": s.runtime_epoch, "disconnectedAtMs": s.disconnected_at_ms}))
                .not_dispatched());
        };
        if conn.runtime_epoch() != runtime_epoch {
            return Err(ProviderError::new(
                "web_target_changed",
                format!("session {session_id} now runs another document (runtimeEpoch {}); observe it again", conn.runtime_epoch()),
            )
            .with_field("runtimeEpoch")
            .with_details(json!({"expected": runtime_epoch, "current": conn.runtime_epoch()}))
            .not_dispatched());
        }
        Ok(conn.clone())
    }

    pub fn sessions_json(&self) -> Vec<Value> {
        let mut sessions = lock(&self.sessions);
        Self::forget_stale(&mut sessions);
        let mut list: Vec<&Session> = sessions.values().collect();
        list.sort_by(|a, b| b.connected_at_ms.cmp(&a.connected_at_ms).then(a.session_id.cmp(&b.session_id)));
        let store = self.facts.store_name();
        list.iter().map(|s| s.to_json(&self.captures, store)).collect()
    }

    pub fn session_json(&self, session_id: &str) -> Option<Value> {
        let store = self.facts.store_name();
        lock(&self.sessions).get(session_id).map(|s| s.to_json(&self.captures, store))
    }

    /// Close every socket (the endpoint is stopping).
    pub fn disconnect_all(&self) {
        let sessions = lock(&self.sessions);
        for s in sessions.values() {
            if let Some(c) = &s.conn {
                c.reject(1001, "web_provider_stopped", "the Web endpoint stopped");
            }
        }
    }
}
