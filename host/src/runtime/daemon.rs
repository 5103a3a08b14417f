//! The runtime daemon (`aab runtime-daemon`, started detached by the client).
//!
//! Start: take the owner lock first (losing the election is a normal exit), load
//! plugins, compute identity, listen on 127.0.0.1:0, then publish the endpoint
//! record — so a published endpoint always names a listening, lock-holding owner.
//! While it runs, the owner repairs its record when someone deleted or replaced it
//! (otherwise a live runtime would be unreachable and unstoppable).
//! Stop (RPC `stop`, SIGTERM or SIGINT): refuse new work, drain active work, unlink
//! the endpoint record, release the lock. Each connection and each request is
//! handled in isolation: a failing request never takes the server down.
//!
//! The listener is hostile-proof: a connection must finish the handshake
//! (`protocol`) within [`HANDSHAKE_TIMEOUT`] reading at most a few KiB, at most
//! [`MAX_PENDING_HANDSHAKES`] unauthenticated connections exist at once (the oldest
//! is dropped for a newcomer), authenticated connections are capped and closed after
//! [`IDLE_TIMEOUT`] without a request, and the accept loop backs off when the
//! process runs out of descriptors instead of spinning.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio_util::codec::{Framed, LinesCodec, LinesCodecError};

use super::endpoint::{self, EndpointRecord, PROTOCOL};
use super::identity::identity;
use super::lock;
use super::protocol::{Challenge, ClientProof, Hello, Identity, MAX_FRAME_BYTES, MAX_HANDSHAKE_BYTES, ReplyFrame, RequestFrame, Side, is_nonce, nonce, proof, token_matches};
use crate::builtins;
use crate::config::{Config, ensure_private_dir};
use crate::digest::DigestCache;
use crate::error::CommandError;
use crate::ownership::Ownership;
use crate::pipeline::{ExecutionHost, RuntimeControl};
use crate::plugins::{Catalog, LoadMode};

/// Longest an unauthenticated connection may take to finish the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Unauthenticated connections held at once; a newcomer evicts the oldest, so a
/// flood of silent connections cannot lock real clients out.
pub const MAX_PENDING_HANDSHAKES: usize = 64;
/// Authenticated connections held at once (MCP servers pool up to 8 each).
pub const MAX_CONNECTIONS: usize = 512;
/// An authenticated connection with no request for this long is closed (pooled
/// clients notice and reconnect).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the owner checks that its endpoint record is still in place.
const ENDPOINT_REPAIR_INTERVAL: Duration = Duration::from_millis(250);

/// Entry of the hidden `aab runtime-daemon` subcommand; returns the exit code.
pub fn run_daemon() -> i32 {
    init_log();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().thread_name("aab-runtime").build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime_start_failed: cannot build the async runtime: {e}");
            return 1;
        }
    };
    let code = match rt.block_on(daemon_main()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}", json!({"status": "failed", "error": e.code, "message": e.message}));
            1
        }
    };
    // Plugin calls that ignore cancellation may still occupy blocking threads; they
    // must not keep a stopped runtime alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}

/// Default filter of the runtime's log (its stderr, which is `runtime.log`): host
/// warnings, and plugin lines (target `aab::plugin`) from `info` up. Without a
/// subscriber every `tracing` event — plugin log lines included — was dropped.
/// `AI_APP_BRIDGE_LOG` (an `EnvFilter` directive list) overrides it.
pub const DEFAULT_LOG_FILTER: &str = "warn,aab::plugin=info";

fn init_log() {
    let filter = std::env::var("AI_APP_BRIDGE_LOG").ok().and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok()).unwrap_or_else(|| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
}

struct Runtime {
    runtime_id: String,
    token: String,
    started_at_ms: u64,
    identity: Identity,
    config: Config,
    host: Arc<ExecutionHost>,
    stopping: AtomicBool,
    stop: Notify,
    active: AtomicUsize,
    idle: Notify,
    /// Unauthenticated connections in arrival order, each with its eviction switch.
    pending: Mutex<VecDeque<(u64, oneshot::Sender<()>)>>,
    next_conn: AtomicU64,
    connections: Arc<Semaphore>,
}

impl RuntimeControl for Runtime {
    fn status(&self) -> Value {
        status_json(self)
    }
    fn begin_stop(&self) {
        begin_stop(self)
    }
}

async fn daemon_main() -> Result<(), CommandError> {
    let config = Config::from_env()?;
    raise_descriptor_limit();
    config.ensure_runtime_dir()?;
    ensure_private_dir(&config.facts_dir)?;
    let Some(owner_lock) = lock::try_acquire(&config.lock_path())? else {
        println!("{}", json!({"status": "owned"}));
        return Ok(());
    };
    let mut cache = DigestCache::open(config.runtime_home.join("digest-cache.json"));
    let catalog = Catalog::build(&config, &mut cache, LoadMode::Load);
    for report in catalog.reports.iter().filter(|r| r.error.is_some()) {
        tracing::warn!("{}", report.error.as_ref().map(|e| e.message.clone()).unwrap_or_default());
    }
    let identity = identity(&config, &mut cache, &catalog)?;
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| CommandError::new("runtime_start_failed", format!("cannot listen on 127.0.0.1: {e}")))?;
    let port = listener.local_addr().map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?.port();
    let runtime_id = crate::ids::uuid_v4();
    let ownership = Ownership::new(config.ownership_dir.clone());
    let facts = crate::facts::Facts::open(&config.facts_dir, &config.profile);
    let plugin_data = config.runtime_dir.join("plugin-data");
    let runtime = Arc::new(Runtime {
        runtime_id: runtime_id.clone(),
        token: crate::ids::token(),
        started_at_ms: crate::ids::now_ms(),
        identity,
        config,
        host: Arc::new(ExecutionHost::new(catalog, runtime_id, ownership, facts, plugin_data)),
        stopping: AtomicBool::new(false),
        stop: Notify::new(),
        active: AtomicUsize::new(0),
        idle: Notify::new(),
        pending: Mutex::new(VecDeque::new()),
        next_conn: AtomicU64::new(0),
        connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
    });
    let record = EndpointRecord {
        protocol: PROTOCOL.into(),
        runtime_id: runtime.runtime_id.clone(),
        pid: std::process::id(),
        token: runtime.token.clone(),
        port,
        facts: runtime.config.facts_dir.display().to_string(),
    };
    endpoint::write(&runtime.config.endpoint_path(), &record).map_err(|e| CommandError::new("runtime_start_failed", format!("cannot publish the endpoint: {e}")))?;
    tracing::info!(runtime_id = %runtime.runtime_id, port, "runtime ready");
    println!("{}", json!({"status": "ready", "runtimeId": runtime.runtime_id, "pid": std::process::id()}));

    let repair = tokio::spawn(repair_endpoint(runtime.clone(), record));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(&runtime, stream),
                Err(e) => {
                    // Out of descriptors (or another transient accept error): the
                    // pending connection stays in the backlog, so retrying at once
                    // would spin. Wait for handshakes to time out and free some.
                    tracing::warn!("accept failed: {e}; backing off");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = runtime.stop.notified() => break,
            _ = sigterm.recv() => { begin_stop(&runtime); break }
            _ = sigint.recv() => { begin_stop(&runtime); break }
        }
    }
    repair.abort();
    let _ = repair.await;
    drop(listener);
    // Drain: every admitted request settles before ownership is released.
    while runtime.active.load(Ordering::SeqCst) > 0 {
        let notified = runtime.idle.notified();
        if runtime.active.load(Ordering::SeqCst) == 0 {
            break;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_millis(50), notified).await;
    }
    // Engine operations were cancelled by `begin_stop`; give them a bounded time to
    // persist their terminal checkpoints before ownership is released.
    let engines = async {
        runtime.host.intents.drain().await;
        runtime.host.scripts.drain().await;
    };
    if tokio::time::timeout(std::time::Duration::from_secs(15), engines).await.is_err() {
        tracing::warn!("engine operations did not finish draining within 15 s");
    }
    // Plugins end what outlives a call (remote sessions) while ownership is still ours.
    runtime.host.stop_plugins().await;
    remove_endpoint_if_ours(&runtime.config.endpoint_path(), &runtime.runtime_id, &runtime.config.facts_dir.display().to_string());
    tracing::info!(runtime_id = %runtime.runtime_id, "runtime stopped");
    drop(owner_lock);
    Ok(())
}

fn remove_endpoint_if_ours(path: &Path, runtime_id: &str, facts: &str) {
    if let Ok(Some(record)) = endpoint::read(path, facts)
        && record.runtime_id == runtime_id {
            let _ = std::fs::remove_file(path);
        }
}

fn frame(runtime: &Runtime, result: Result<Value, CommandError>) -> String {
    let reply = match result {
        Ok(v) => ReplyFrame { protocol: PROTOCOL.into(), runtime_id: Some(runtime.runtime_id.clone()), ok: true, reply: Some(v), error: None },
        Err(e) => ReplyFrame { protocol: PROTOCOL.into(), runtime_id: Some(runtime.runtime_id.clone()), ok: false, reply: None, error: Some(e.to_json()) },
    };
    serde_json::to_string(&reply).expect("reply frame serialises")
}

/// Raise the soft descriptor limit to the hard one: the connection caps, not the
/// default 1024, should decide when the runtime refuses work.
fn raise_descriptor_limit() {
    // SAFETY: getrlimit/setrlimit with a valid struct pointer.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max.min(65_536);
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The owner keeps its endpoint record in place: a deleted, truncated or replaced
/// record (even a FIFO or symlink) is rewritten by rename, so clients can always
/// reach — and stop — the runtime that holds the lock.
async fn repair_endpoint(runtime: Arc<Runtime>, record: EndpointRecord) {
    let path = runtime.config.endpoint_path();
    loop {
        tokio::time::sleep(ENDPOINT_REPAIR_INTERVAL).await;
        if runtime.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (p, r) = (path.clone(), record.clone());
        let intact = tokio::task::spawn_blocking(move || endpoint::is_intact(&p, &r)).await.unwrap_or(true);
        if !intact {
            let (p, r) = (path.clone(), record.clone());
            match tokio::task::spawn_blocking(move || endpoint::write(&p, &r)).await {
                Ok(Ok(())) => tracing::warn!("endpoint record {} was missing or replaced; rewrote it", path.display()),
                Ok(Err(e)) => tracing::warn!("cannot repair endpoint record {}: {e}", path.display()),
                Err(_) => {}
            }
        }
    }
}

/// Take a freshly accepted connection under the pending-handshake cap: the oldest
/// unauthenticated connection is evicted when the cap is reached.
fn admit(runtime: &Arc<Runtime>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let id = runtime.next_conn.fetch_add(1, Ordering::Relaxed);
    let (evict_tx, evict_rx) = oneshot::channel();
    if let Ok(mut pending) = runtime.pending.lock() {
        while pending.len() >= MAX_PENDING_HANDSHAKES {
            // Dropping the sender wakes the evicted connection's handshake.
            pending.pop_front();
        }
        pending.push_back((id, evict_tx));
    }
    tokio::spawn(serve_connection(runtime.clone(), stream, id, evict_rx));
}

fn leave_pending(runtime: &Runtime, id: u64) {
    if let Ok(mut pending) = runtime.pending.lock() {
        pending.retain(|(i, _)| *i != id);
    }
}

/// An error frame for a peer that has not authenticated: it names no runtime.
fn anonymous_frame(code: &str, message: &str) -> String {
    let reply = ReplyFrame { protocol: PROTOCOL.into(), runtime_id: None, ok: false, reply: None, error: Some(CommandError::new(code, message).to_json()) };
    serde_json::to_string(&reply).expect("reply frame serialises")
}

fn frame_error(e: &LinesCodecError) -> CommandError {
    match e {
        LinesCodecError::MaxLineLengthExceeded => CommandError::new("runtime_message_too_large", format!("request frame larger than {MAX_FRAME_BYTES} bytes")),
        LinesCodecError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => CommandError::new("runtime_protocol_error", "request frame is not valid UTF-8"),
        LinesCodecError::Io(io) => CommandError::new("runtime_protocol_error", format!("request frame rejected: {io}")),
    }
}

enum Handshake {
    Authenticated,
    /// Refused: the anonymous error line to send, if any.
    Refused(Option<String>),
}

/// Steps 1–3 of the protocol handshake on a connection read with a
/// [`MAX_HANDSHAKE_BYTES`] line cap.
async fn handshake(runtime: &Runtime, framed: &mut Framed<TcpStream, LinesCodec>) -> Handshake {
    let hello = match framed.next().await {
        Some(Ok(line)) => line,
        Some(Err(LinesCodecError::MaxLineLengthExceeded)) => return Handshake::Refused(Some(anonymous_frame("runtime_access_denied", "handshake line too large"))),
        Some(Err(_)) => return Handshake::Refused(Some(anonymous_frame("runtime_protocol_error", "handshake is not valid UTF-8 JSON"))),
        None => return Handshake::Refused(None),
    };
    let hello = match serde_json::from_str::<Hello>(&hello) {
        Ok(h) if is_nonce(&h.hello) => h,
        _ => return Handshake::Refused(Some(anonymous_frame("runtime_access_denied", "expected a handshake hello; see the aab.runtime/v2 protocol"))),
    };
    if hello.protocol != PROTOCOL {
        return Handshake::Refused(Some(anonymous_frame("runtime_protocol_error", &format!("unsupported protocol `{}`; this runtime speaks {PROTOCOL}", hello.protocol))));
    }
    let runtime_nonce = nonce();
    let challenge = Challenge { protocol: PROTOCOL.into(), challenge: runtime_nonce.clone(), proof: proof(&runtime.token, Side::Runtime, &hello.hello, &runtime_nonce) };
    if framed.send(serde_json::to_string(&challenge).expect("challenge serialises")).await.is_err() {
        return Handshake::Refused(None);
    }
    let line = match framed.next().await {
        Some(Ok(line)) => line,
        Some(Err(LinesCodecError::MaxLineLengthExceeded)) => return Handshake::Refused(Some(anonymous_frame("runtime_access_denied", "handshake line too large"))),
        Some(Err(_)) => return Handshake::Refused(Some(anonymous_frame("runtime_access_denied", "handshake is not valid UTF-8 JSON"))),
        None => return Handshake::Refused(None),
    };
    let expected = proof(&runtime.token, Side::Client, &hello.hello, &runtime_nonce);
    match serde_json::from_str::<ClientProof>(&line) {
        Ok(p) if p.protocol == PROTOCOL && token_matches(&expected, &p.proof) => Handshake::Authenticated,
        _ => Handshake::Refused(Some(anonymous_frame("runtime_access_denied", "missing or wrong proof of the runtime token"))),
    }
}

async fn serve_connection(runtime: Arc<Runtime>, stream: TcpStream, id: u64, evicted: oneshot::Receiver<()>) {
    let mut framed = Framed::new(stream, LinesCodec::new_with_max_length(MAX_HANDSHAKE_BYTES));
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&runtime, &mut framed)) => outcome.unwrap_or(Handshake::Refused(None)),
        _ = evicted => Handshake::Refused(None),
    };
    leave_pending(&runtime, id);
    match outcome {
        Handshake::Authenticated => {}
        Handshake::Refused(line) => {
            if let Some(line) = line {
                let _ = tokio::time::timeout(Duration::from_millis(500), framed.send(line)).await;
            }
            return;
        }
    }
    let Ok(_permit): Result<OwnedSemaphorePermit, _> = runtime.connections.clone().try_acquire_owned() else {
        let _ = framed.send(frame(&runtime, Err(CommandError::new("runtime_busy", format!("the runtime already serves {MAX_CONNECTIONS} connections; retry later"))))).await;
        return;
    };
    // Authenticated: frames may now be as large as the protocol allows.
    let mut framed = framed.map_codec(|_| LinesCodec::new_with_max_length(MAX_FRAME_BYTES));
    loop {
        let line = match tokio::time::timeout(IDLE_TIMEOUT, framed.next()).await {
            Err(_) | Ok(None) => return,
            Ok(Some(Ok(l))) => l,
            Ok(Some(Err(e))) => {
                let _ = framed.send(frame(&runtime, Err(frame_error(&e)))).await;
                return;
            }
        };
        let request: RequestFrame = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let _ = framed.send(frame(&runtime, Err(CommandError::new("runtime_protocol_error", format!("invalid request frame: {e}"))))).await;
                return;
            }
        };
        if request.protocol != PROTOCOL {
            let _ = framed.send(frame(&runtime, Err(CommandError::new("runtime_protocol_error", format!("unsupported protocol `{}`", request.protocol))))).await;
            return;
        }
        // An execute counts as active until its reply frame is written, so a stop
        // that drains active work never drops an admitted request's reply.
        let is_execute = request.method == "execute";
        if is_execute {
            runtime.active.fetch_add(1, Ordering::SeqCst);
        }
        let result = handle(&runtime, request).await;
        let sent = framed.send(frame(&runtime, result)).await;
        if is_execute && runtime.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            runtime.idle.notify_waiters();
        }
        if sent.is_err() {
            return;
        }
    }
}

async fn handle(runtime: &Arc<Runtime>, request: RequestFrame) -> Result<Value, CommandError> {
    match request.method.as_str() {
        "status" => Ok(status_json(runtime)),
        "stop" => {
            begin_stop(runtime);
            Ok(status_json(runtime))
        }
        "execute" => {
            if runtime.stopping.load(Ordering::SeqCst) {
                return Err(CommandError::new("runtime_stopping", "the runtime is stopping; retry after it stopped"));
            }
            match &request.identity {
                Some(id) if id.code != runtime.identity.code => {
                    return Err(CommandError::new(
                        "runtime_code_mismatch",
                        "the running runtime was started from different aab code or plugins; stop it with `aab runtime --operation stop` and retry",
                    )
                    .with_details(json!({"runtimeCode": runtime.identity.code, "clientCode": id.code})));
                }
                Some(id) if id.config != runtime.identity.config => {
                    return Err(CommandError::new(
                        "runtime_configuration_mismatch",
                        "the running runtime uses a different configuration (directories or environment); stop it or use the same configuration",
                    ));
                }
                Some(_) => {}
                None => return Err(CommandError::new("runtime_protocol_error", "execute requires `identity`")),
            }
            let cwd = request.cwd.unwrap_or_default();
            let cwd_path = Path::new(&cwd);
            if !cwd_path.is_absolute() || !cwd_path.is_dir() {
                return Err(CommandError::new("invalid_request_directory", format!("request directory `{cwd}` must be an existing absolute directory")).with_field("cwd"));
            }
            let Some(public_request) = request.request else {
                return Err(CommandError::new("runtime_protocol_error", "execute requires `request`"));
            };
            let reply = runtime.host.execute(public_request, cwd, runtime.as_ref()).await;
            Ok(json!({"body": reply.body, "exitCode": reply.exit_code}))
        }
        other => Err(CommandError::new("runtime_protocol_error", format!("unknown runtime method `{other}`"))),
    }
}

fn begin_stop(runtime: &Runtime) {
    if !runtime.stopping.swap(true, Ordering::SeqCst) {
        runtime.host.stop_admission();
        runtime.stop.notify_one();
    }
}

fn status_json(runtime: &Runtime) -> Value {
    let plugins: Vec<Value> = runtime
        .host
        .catalog
        .reports
        .iter()
        .map(|r| {
            json!({
                "name": r.manifest.as_ref().map(|m| m.name.clone()),
                "file": r.file.display().to_string(),
                "status": if r.error.is_none() { "loaded" } else { "refused" },
                "error": r.error.as_ref().map(|e| e.code.clone()),
                "process": r.manifest.as_ref().and_then(|m| runtime.host.catalog.modules.get(&m.name)).map(|h| h.status_json()),
            })
        })
        .collect();
    json!({
        "ok": true,
        "command": builtins::RUNTIME,
        "status": if runtime.stopping.load(Ordering::SeqCst) { "stopping" } else { "running" },
        "runtimeId": runtime.runtime_id,
        "pid": std::process::id(),
        "identity": {"protocol": PROTOCOL, "code": runtime.identity.code, "config": runtime.identity.config},
        "startedAtMs": runtime.started_at_ms,
        "facts": runtime.config.facts_dir.display().to_string(),
        "profile": runtime.config.profile,
        "pluginDir": runtime.config.plugin_dir.display().to_string(),
        "plugins": plugins,
        "executed": runtime.host.executed.load(Ordering::SeqCst),
        "active": runtime.active.load(Ordering::SeqCst),
        "host": {"version": crate::HOST_VERSION, "executable": std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()},
    })
}
