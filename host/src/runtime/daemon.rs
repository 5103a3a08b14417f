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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::codec::{Framed, LinesCodec};

use super::endpoint::{self, EndpointRecord, PROTOCOL};
use super::identity::identity;
use super::lock;
use super::protocol::{Identity, MAX_FRAME_BYTES, ReplyFrame, RequestFrame, token_matches};
use crate::builtins;
use crate::client::PublicReply;
use crate::config::{Config, ensure_private_dir};
use crate::digest::DigestCache;
use crate::error::CommandError;
use crate::pipeline::{self, PluginCall};
use crate::plugins::{Catalog, LoadMode};
use crate::registry::CommandOrigin;
use crate::registry::request::parse_public_request;
use crate::reply::{self, ExecOutcome};

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
    catalog: Catalog,
    stopping: AtomicBool,
    stop: Notify,
    active: AtomicUsize,
    idle: Notify,
    executed: AtomicU64,
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
    let runtime = Arc::new(Runtime {
        runtime_id: crate::ids::uuid_v4(),
        token: crate::ids::token(),
        started_at_ms: crate::ids::now_ms(),
        identity,
        config,
        catalog,
        stopping: AtomicBool::new(false),
        stop: Notify::new(),
        active: AtomicUsize::new(0),
        idle: Notify::new(),
        executed: AtomicU64::new(0),
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
            _ = sigterm.recv() => { runtime.stopping.store(true, Ordering::SeqCst); break }
            _ = sigint.recv() => { runtime.stopping.store(true, Ordering::SeqCst); break }
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
    remove_endpoint_if_ours(&runtime.config.endpoint_path(), &runtime.runtime_id, &runtime.config.facts_dir.display().to_string());
    tracing::info!(runtime_id = %runtime.runtime_id, "runtime stopped");
    drop(owner_lock);
    Ok(())
}

fn remove_endpoint_if_ours(path: &Path, runtime_id: &str, facts: &str) {
    if let Ok(Some(record)) = endpoint::read(path, facts) {
        if record.runtime_id == runtime_id {
            let _ = std::fs::remove_file(path);
        }
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
        let result = handle(&runtime, request).await;
        if framed.send(frame(&runtime, result)).await.is_err() {
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
            runtime.active.fetch_add(1, Ordering::SeqCst);
            let reply = execute(runtime, public_request, cwd).await;
            runtime.executed.fetch_add(1, Ordering::SeqCst);
            if runtime.active.fetch_sub(1, Ordering::SeqCst) == 1 {
                runtime.idle.notify_waiters();
            }
            Ok(json!({"body": reply.body, "exitCode": reply.exit_code}))
        }
        other => Err(CommandError::new("runtime_access_denied", format!("unknown runtime method `{other}`"))),
    }
}

fn begin_stop(runtime: &Runtime) {
    if !runtime.stopping.swap(true, Ordering::SeqCst) {
        runtime.stop.notify_one();
    }
}

fn status_json(runtime: &Runtime) -> Value {
    let plugins: Vec<Value> = runtime
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
        "executed": runtime.executed.load(Ordering::SeqCst),
        "active": runtime.active.load(Ordering::SeqCst),
        "host": {"version": crate::HOST_VERSION, "executable": std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()},
    })
}

fn command_name(request: &Value) -> Option<&str> {
    request.get("command").and_then(Value::as_str)
}

/// The ordinary-command pipeline: parse → validate → dispatch → reply. Every
/// rejection happens before any plugin is called.
async fn execute(runtime: &Arc<Runtime>, request: Value, cwd: String) -> PublicReply {
    let parsed = match parse_public_request(&request) {
        Ok(p) => p,
        Err(e) => return reply::rejection(command_name(&request), &e),
    };
    let arguments = Value::Object(parsed.arguments.clone());
    let command = match runtime.catalog.registry.validate(&parsed.command, &arguments) {
        Ok(c) => c,
        Err(e) => return reply::rejection(Some(&parsed.command), &e),
    };
    let outcome = match &command.origin {
        CommandOrigin::Host => builtin(runtime, &parsed.command, &arguments),
        CommandOrigin::Plugin { name, .. } => match runtime.catalog.modules.get(name) {
            None => ExecOutcome::Failed(CommandError::new("plugin_unavailable", format!("plugin `{name}` is not loaded"))),
            Some(module) => {
                pipeline::invoke_plugin(PluginCall {
                    module: *module,
                    plugin: name,
                    command,
                    timeout: pipeline::timeout_of(command, &arguments),
                    request_id: arguments.get("requestId").and_then(Value::as_str).map(str::to_string),
                    arguments,
                    cwd,
                    runtime_id: &runtime.runtime_id,
                    cancelled: Arc::new(AtomicBool::new(false)),
                })
                .await
            }
        },
    };
    let mut control = Map::new();
    control.insert("history".into(), reply::history_unavailable());
    reply::assemble(&parsed.command, outcome, control, &parsed.extract, parsed.output_max_bytes)
}

fn builtin(runtime: &Arc<Runtime>, command: &str, arguments: &Value) -> ExecOutcome {
    match (command, arguments.get("operation").and_then(Value::as_str)) {
        (builtins::RUNTIME, Some("stop")) => {
            begin_stop(runtime);
            ExecOutcome::Json(status_json(runtime))
        }
        (builtins::RUNTIME, _) => ExecOutcome::Json(status_json(runtime)),
        _ => ExecOutcome::Failed(CommandError::new("unknown_command", format!("no host implementation for `{command}`"))),
    }
}
