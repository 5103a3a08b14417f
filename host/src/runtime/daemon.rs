//! The runtime daemon (`aab runtime-daemon`, started detached by the client).
//!
//! Start: take the owner lock first (losing the election is a normal exit), load
//! plugins, compute identity, listen on 127.0.0.1:0, then publish the endpoint
//! record — so a published endpoint always names a listening, lock-holding owner.
//! Stop (RPC `stop`, SIGTERM or SIGINT): refuse new work, drain active work, unlink
//! the endpoint record, release the lock. Each connection and each request is
//! handled in isolation: a failing request never takes the server down.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::codec::{Framed, LinesCodec};

use super::endpoint::{self, EndpointRecord, PROTOCOL};
use super::identity::identity;
use super::lock;
use super::protocol::{Identity, MAX_FRAME_BYTES, ReplyFrame, RequestFrame, token_matches};
use crate::builtins;
use crate::config::{Config, ensure_private_dir};
use crate::digest::DigestCache;
use crate::error::CommandError;
use crate::ownership::Ownership;
use crate::pipeline::{ExecutionHost, RuntimeControl};
use crate::plugins::{Catalog, LoadMode};

/// Entry of the hidden `aab runtime-daemon` subcommand; returns the exit code.
pub fn run_daemon() -> i32 {
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

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(runtime.clone(), stream));
                }
            }
            _ = runtime.stop.notified() => break,
            _ = sigterm.recv() => { begin_stop(&runtime); break }
            _ = sigint.recv() => { begin_stop(&runtime); break }
        }
    }
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

async fn serve_connection(runtime: Arc<Runtime>, stream: TcpStream) {
    let mut framed = Framed::new(stream, LinesCodec::new_with_max_length(MAX_FRAME_BYTES));
    while let Some(line) = framed.next().await {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                let _ = framed.send(frame(&runtime, Err(CommandError::new("runtime_message_too_large", format!("request frame rejected: {e}"))))).await;
                return;
            }
        };
        // Authenticate before looking at anything else in the frame: a frame that does
        // not carry the right token is refused the same way whatever else is wrong.
        let raw: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let token = raw.get("token").and_then(Value::as_str).unwrap_or("");
        if !token_matches(&runtime.token, token) {
            let _ = framed.send(frame(&runtime, Err(CommandError::new("runtime_access_denied", "missing or wrong runtime token")))).await;
            return;
        }
        let request: RequestFrame = match serde_json::from_value(raw) {
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
        other => Err(CommandError::new("runtime_access_denied", format!("unknown runtime method `{other}`"))),
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
