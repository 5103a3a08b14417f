//! The runtime client used by both adapters (CLI and MCP). It validates the public
//! request against the registry (so a bad request never starts a runtime), finds or
//! starts the shared runtime, checks identity, sends the request with the caller's
//! cwd and returns the public reply. It never retries a request that may have
//! reached the runtime.
//!
//! It trusts an endpoint record only while the owner lock is held (a dead owner's
//! record is stale, whoever answers on its port) and only after the peer proved
//! knowledge of the token in the handshake (`runtime::protocol`): nothing — not the
//! token, a command, arguments or the cwd — is sent to an unproven peer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::builtins;
use crate::config::Config;
use crate::digest::DigestCache;
use crate::error::CommandError;
use crate::plugins::{Catalog, LoadMode};
use crate::registry::Registry;
use crate::registry::request::parse_public_request;
use crate::runtime::endpoint::{self, EndpointRecord};
use crate::runtime::identity::identity;
use crate::runtime::lock;
use crate::runtime::protocol::{Challenge, ClientProof, Hello, Identity, MAX_HANDSHAKE_BYTES, PROTOCOL, ReplyFrame, RequestFrame, Side, is_nonce, nonce, proof, token_matches};

/// A public reply ready for an adapter: the compact body and the CLI exit code
/// (0 delivered, 1 validation/execution failure, 2 extraction/delivery failure).
#[derive(Clone, Debug)]
pub struct PublicReply {
    pub body: Value,
    pub exit_code: i32,
}

const START_TIMEOUT: Duration = Duration::from_secs(10);
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
const STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `runtime status` waits for an owner to republish a missing record (it
/// checks every 250 ms).
const ENDPOINT_REPAIR_PATIENCE: Duration = Duration::from_millis(1500);

struct Pooled {
    runtime_id: String,
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

pub struct Client {
    config: Config,
    catalog: Catalog,
    identity: Identity,
    pool: Mutex<Vec<Pooled>>,
}

/// What a probe found.
enum Probe {
    Running(EndpointRecord, Value),
    Stopped,
    /// Lock held, no answering endpoint yet (a runtime is starting).
    Starting,
    Unresponsive(EndpointRecord),
}

impl Client {
    /// Resolve configuration from the environment and build the registry view
    /// (from the manifest cache; plugins are loaded only when a digest changed).
    pub fn from_env() -> Result<Client, CommandError> {
        let config = Config::from_env()?;
        let mut cache = DigestCache::open(config.runtime_home.join("digest-cache.json"));
        let catalog = Catalog::build(&config, &mut cache, LoadMode::ManifestsOnly);
        let identity = identity(&config, &mut cache, &catalog)?;
        Ok(Client { config, catalog, identity, pool: Mutex::new(Vec::new()) })
    }

    pub fn registry(&self) -> &Registry {
        &self.catalog.registry
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// MCP `capabilities` / CLI `--help COMMAND`: never starts the runtime.
    pub fn capabilities(&self, query: &Value) -> Value {
        crate::registry::discovery::capabilities(&self.catalog.registry, query)
    }

    /// The reply for a request rejected before it reached the client (argv errors).
    pub fn rejection(command: Option<&str>, error: CommandError) -> PublicReply {
        crate::reply::rejection(command, &error)
    }

    /// Execute one public request `{command, arguments, extract, output?}`.
    pub fn run(&self, request: &Value, cwd: &Path) -> PublicReply {
        let command_name = request.get("command").and_then(Value::as_str).map(str::to_string);
        let parsed = match parse_public_request(request) {
            Ok(p) => p,
            Err(e) => return crate::reply::rejection(command_name.as_deref(), &e),
        };
        let arguments = Value::Object(parsed.arguments.clone());
        if let Err(e) = self.catalog.registry.validate(&parsed.command, &arguments) {
            return crate::reply::rejection(Some(&parsed.command), &e);
        }
        if parsed.command == builtins::RUNTIME {
            let op = arguments.get("operation").and_then(Value::as_str).unwrap_or("status");
            // Extraction is checked before the operation runs, like every command.
            let plan = match crate::reply::plan(&parsed.extract, cwd) {
                Ok(p) => p,
                Err(e) => return crate::reply::rejection(Some(&parsed.command), &e),
            };
            let result = match op {
                "status" => self.runtime_status(),
                "stop" => self.runtime_stop(),
                // Cancel reaches only a running runtime; it never starts one.
                "cancel" => match self.probe_settled(ENDPOINT_REPAIR_PATIENCE) {
                    Ok(Probe::Running(..)) => {
                        return match self.execute(request, cwd) {
                            Ok(reply) => reply,
                            Err(e) => crate::reply::failure(&parsed.command, e),
                        };
                    }
                    Ok(_) => Ok(json!({"ok": true, "command": "runtime", "operation": "cancel", "cancelled": 0, "status": "stopped"})),
                    Err(e) => Err(e),
                },
                _ => self.ensure_running().and_then(|_| self.runtime_status()),
            };
            return match result {
                Ok(v) => crate::reply::assemble(&parsed.command, crate::reply::ExecOutcome::Json(v), Default::default(), &plan, parsed.output_max_bytes),
                Err(e) => crate::reply::failure(&parsed.command, e),
            };
        }
        // `evidence verify` and `render` are offline: no runtime, no store.
        let evidence_op = arguments.get("operation").and_then(Value::as_str);
        if parsed.command == builtins::EVIDENCE && matches!(evidence_op, Some("verify" | "render")) {
            let dir = cwd.join(arguments.get("archiveDir").and_then(Value::as_str).unwrap_or_default());
            let sha = arguments.get("manifestSha256").and_then(Value::as_str);
            let plan = match crate::reply::plan(&parsed.extract, cwd) {
                Ok(p) => p,
                Err(e) => return crate::reply::rejection(Some(&parsed.command), &e),
            };
            let done = if evidence_op == Some("render") {
                let output = cwd.join(arguments.get("outputFile").and_then(Value::as_str).unwrap_or_default());
                crate::facts::render_archive(&dir, sha, &output)
            } else {
                crate::facts::verify_archive(&dir, sha.unwrap_or_default())
            };
            return match done {
                Ok(v) => crate::reply::assemble(&parsed.command, crate::reply::ExecOutcome::Json(v), Default::default(), &plan, parsed.output_max_bytes),
                Err(e) => crate::reply::failure(&parsed.command, e),
            };
        }
        let cwd = match cwd.canonicalize() {
            Ok(p) if p.is_dir() => p,
            _ => {
                let e = CommandError::new("invalid_request_directory", format!("working directory {} is not an existing directory", cwd.display())).with_field("cwd");
                return crate::reply::rejection(Some(&parsed.command), &e);
            }
        };
        match self.execute(request, &cwd) {
            Ok(reply) => reply,
            Err(e) => crate::reply::failure(&parsed.command, e),
        }
    }

    fn execute(&self, request: &Value, cwd: &Path) -> Result<PublicReply, CommandError> {
        let record = self.ensure_running()?;
        let frame = RequestFrame {
            protocol: PROTOCOL.into(),
            method: "execute".into(),
            identity: Some(self.identity.clone()),
            request: Some(request.clone()),
            cwd: Some(cwd.display().to_string()),
        };
        let reply = self.send(&record, &frame, None)?;
        let value = reply.reply.ok_or_else(|| CommandError::ambiguous("runtime_protocol_error", "execute reply without a body"))?;
        let body = value.get("body").cloned().ok_or_else(|| CommandError::ambiguous("runtime_protocol_error", "execute reply without a body"))?;
        let exit_code = value.get("exitCode").and_then(Value::as_i64).unwrap_or(1) as i32;
        Ok(PublicReply { body, exit_code })
    }

    /// Send one frame and read its reply. Transport failures before the frame was
    /// written are `dispatched:false`; after it, unknown and ambiguous. A daemon
    /// error frame is returned as that error (the daemon decides dispatch facts).
    fn send(&self, record: &EndpointRecord, frame: &RequestFrame, timeout: Option<Duration>) -> Result<ReplyFrame, CommandError> {
        let mut conn = match self.take_pooled(&record.runtime_id) {
            Some(c) => c,
            None => connect(record)?,
        };
        let _ = conn.stream.set_read_timeout(timeout);
        let mut line = serde_json::to_string(frame).expect("frame serialises");
        line.push('\n');
        if let Err(e) = conn.stream.write_all(line.as_bytes()) {
            return Err(if frame.method == "execute" {
                CommandError::ambiguous("runtime_connection_lost", format!("connection to the runtime failed while sending: {e}"))
            } else {
                CommandError::new("runtime_connection_lost", format!("connection to the runtime failed: {e}"))
            });
        }
        let mut reply_line = String::new();
        let read = conn.reader.read_line(&mut reply_line);
        let lost = |message: String| {
            if frame.method == "execute" { CommandError::ambiguous("runtime_connection_lost", message) } else { CommandError::new("runtime_connection_lost", message) }
        };
        match read {
            Ok(0) => return Err(lost("the runtime closed the connection before replying".into())),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(if frame.method == "execute" {
                    CommandError::ambiguous("runtime_connection_timeout", "no reply from the runtime in time")
                } else {
                    CommandError::new("runtime_connection_timeout", "no reply from the runtime in time")
                });
            }
            Err(e) => return Err(lost(format!("reading the runtime reply failed: {e}"))),
            Ok(_) => {}
        }
        let reply: ReplyFrame = serde_json::from_str(&reply_line).map_err(|e| {
            if frame.method == "execute" {
                CommandError::ambiguous("runtime_protocol_error", format!("invalid reply frame: {e}"))
            } else {
                CommandError::new("runtime_protocol_error", format!("invalid reply frame: {e}"))
            }
        })?;
        let _ = conn.stream.set_read_timeout(None);
        // The handshake proved the peer; a reply naming another runtime is a bug or
        // a confused peer, never something to print as a result.
        if reply.runtime_id.as_deref().is_some_and(|id| id != record.runtime_id) {
            return Err(if frame.method == "execute" {
                CommandError::ambiguous("runtime_protocol_error", "reply frame from another runtime")
            } else {
                CommandError::new("runtime_protocol_error", "reply frame from another runtime")
            });
        }
        if let Ok(mut pool) = self.pool.lock()
            && pool.len() < 8 {
                pool.push(conn);
            }
        if !reply.ok {
            let e = reply.error.as_ref().and_then(CommandError::from_json).unwrap_or_else(|| CommandError::ambiguous("runtime_protocol_error", "error frame without an error"));
            return Err(e);
        }
        Ok(reply)
    }

    /// A pooled connection to this runtime that is still open (a closed one would
    /// turn a never-sent request into an ambiguous one).
    fn take_pooled(&self, runtime_id: &str) -> Option<Pooled> {
        let mut pool = self.pool.lock().ok()?;
        while let Some(conn) = pool.pop() {
            if conn.runtime_id != runtime_id {
                continue;
            }
            let _ = conn.stream.set_nonblocking(true);
            let mut buf = [0u8; 1];
            let alive = matches!(conn.stream.peek(&mut buf), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock);
            let _ = conn.stream.set_nonblocking(false);
            if alive && conn.reader.buffer().is_empty() {
                return Some(conn);
            }
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        None
    }

    fn read_endpoint(&self) -> Result<Option<EndpointRecord>, CommandError> {
        endpoint::read(&self.config.endpoint_path(), &self.config.facts_dir.display().to_string())
    }

    fn status_frame(&self, record: &EndpointRecord) -> RequestFrame {
        let _ = record;
        RequestFrame { protocol: PROTOCOL.into(), method: "status".into(), identity: None, request: None, cwd: None }
    }

    fn probe(&self) -> Result<Probe, CommandError> {
        // The lock decides whether a record can be live at all: with no owner, any
        // record is stale (and a bad or unreadable one is replaced by the next start).
        if !lock::is_held(&self.config.lock_path())? {
            return Ok(Probe::Stopped);
        }
        // An unreadable record under a held lock is being repaired by its owner.
        let Ok(record) = self.read_endpoint() else { return Ok(Probe::Starting) };
        if let Some(record) = &record {
            match self.send(record, &self.status_frame(record), Some(PROBE_TIMEOUT)) {
                Ok(reply) => return Ok(Probe::Running(record.clone(), reply.reply.unwrap_or(Value::Null))),
                // A peer that cannot prove the token is not our runtime: the record is
                // stale while a new owner starts (or is about to be repaired).
                Err(e) if e.code == "runtime_authentication_failed" => return Ok(Probe::Starting),
                Err(e) if e.code == "runtime_access_denied" => return Err(e),
                Err(_) => {}
            }
        }
        if !lock::is_held(&self.config.lock_path())? {
            return Ok(Probe::Stopped);
        }
        Ok(match record {
            // The record names a process that is gone (or a zombie): it is the stale
            // record of a dead owner, and the lock belongs to a runtime that is still
            // starting (loading and hashing plugins can take seconds on a busy
            // machine). Only a live named process that does not answer is unresponsive.
            Some(r) if !process_running(r.pid) => Probe::Starting,
            Some(r) => Probe::Unresponsive(r),
            None => Probe::Starting,
        })
    }

    /// Make sure a compatible runtime is running and return its endpoint.
    fn ensure_running(&self) -> Result<EndpointRecord, CommandError> {
        // Fast path: a live pooled connection to the published runtime (long-lived
        // clients such as `aab mcp`). A fresh client probes with a short status call
        // first: an execute may legitimately run for minutes, so only the probe can
        // tell an unresponsive owner from a busy one.
        if let Ok(Some(record)) = self.read_endpoint()
            && let Some(conn) = self.take_pooled(&record.runtime_id)
        {
            if let Ok(mut pool) = self.pool.lock() {
                pool.push(conn);
            }
            return Ok(record);
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let mut child: Option<Child> = None;
        let mut launches = 0;
        let mut unresponsive_since: Option<Instant> = None;
        loop {
            match self.probe()? {
                Probe::Running(record, _) => {
                    reap(&mut child);
                    return Ok(record);
                }
                Probe::Stopped => {
                    let exited = child.as_mut().map(|c| matches!(c.try_wait(), Ok(Some(_)))).unwrap_or(true);
                    if exited {
                        if launches >= 3 {
                            return Err(self.start_failed("the runtime exited during start"));
                        }
                        reap(&mut child);
                        child = Some(self.launch()?);
                        launches += 1;
                    }
                }
                Probe::Starting => {}
                Probe::Unresponsive(record) => {
                    let since = *unresponsive_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > PROBE_TIMEOUT * 2 {
                        reap(&mut child);
                        return Err(CommandError::new(
                            "runtime_unresponsive",
                            format!("the runtime (pid {}) holds the owner lock but does not answer; it is never killed or replaced automatically", record.pid),
                        )
                        .with_details(json!({"pid": record.pid, "runtimeId": record.runtime_id})));
                    }
                }
            }
            if Instant::now() > deadline {
                reap(&mut child);
                return Err(CommandError::new("runtime_start_timeout", format!("the runtime did not become ready within {} s", START_TIMEOUT.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    }

    fn start_failed(&self, what: &str) -> CommandError {
        let log = crate::fsread::tail_lossy(&self.config.log_path(), 16 * 1024);
        let tail: Vec<&str> = log.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
        CommandError::new("runtime_start_failed", format!("{what}; see {}", self.config.log_path().display())).with_details(json!({"logTail": tail}))
    }

    /// Start `aab runtime-daemon` detached (own session, stdio to runtime.log).
    fn launch(&self) -> Result<Child, CommandError> {
        self.config.ensure_runtime_dir()?;
        let exe = std::env::current_exe().map_err(|e| CommandError::new("runtime_start_failed", format!("cannot locate the aab executable: {e}")))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.config.log_path())
            .map_err(|e| CommandError::new("runtime_start_failed", format!("cannot open {}: {e}", self.config.log_path().display())))?;
        let log2 = log.try_clone().map_err(|e| CommandError::new("runtime_start_failed", e.to_string()))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("runtime-daemon")
            .current_dir("/")
            .env("AI_APP_BRIDGE_FACT_STORE_DIR", &self.config.facts_dir)
            .env("AI_APP_BRIDGE_RUNTIME_HOME", &self.config.runtime_home)
            .env("AI_APP_BRIDGE_PLUGIN_DIR", &self.config.plugin_dir)
            .env("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", &self.config.ownership_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: setsid is async-signal-safe; it detaches the daemon from the
        // client's session so client signals and terminal hang-ups do not reach it.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().map_err(|e| CommandError::new("runtime_start_failed", format!("cannot start the runtime: {e}")))
    }

    /// Probe, waiting up to `patience` while the lock is held but no record answers
    /// yet (a starting runtime, or a live one whose deleted or replaced record its
    /// owner is about to repair).
    fn probe_settled(&self, patience: Duration) -> Result<Probe, CommandError> {
        let deadline = Instant::now() + patience;
        loop {
            let probe = self.probe()?;
            if !matches!(probe, Probe::Starting) || Instant::now() > deadline {
                return Ok(probe);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn runtime_status(&self) -> Result<Value, CommandError> {
        match self.probe_settled(ENDPOINT_REPAIR_PATIENCE)? {
            Probe::Running(_, mut status) => {
                let compatible = status.get("identity").map(|id| {
                    id.get("code").and_then(Value::as_str) == Some(&self.identity.code) && id.get("config").and_then(Value::as_str) == Some(&self.identity.config)
                });
                if let Value::Object(m) = &mut status {
                    m.insert("compatible".into(), Value::Bool(compatible.unwrap_or(false)));
                }
                Ok(status)
            }
            Probe::Stopped => Ok(json!({"ok": true, "command": "runtime", "status": "stopped", "facts": self.config.facts_dir.display().to_string()})),
            Probe::Starting => Ok(json!({"ok": true, "command": "runtime", "status": "starting", "facts": self.config.facts_dir.display().to_string()})),
            Probe::Unresponsive(record) => Err(CommandError::new("runtime_unresponsive", format!("the runtime (pid {}) holds the owner lock but does not answer", record.pid))),
        }
    }

    /// Ask the runtime to stop and wait until it released ownership.
    fn runtime_stop(&self) -> Result<Value, CommandError> {
        let record = match self.probe_settled(START_TIMEOUT)? {
            Probe::Running(record, _) => record,
            Probe::Stopped => return Ok(json!({"ok": true, "command": "runtime", "status": "stopped", "facts": self.config.facts_dir.display().to_string()})),
            Probe::Starting => return Err(CommandError::new("runtime_starting", "a runtime is starting; retry stop in a moment")),
            Probe::Unresponsive(record) => {
                return Err(CommandError::new("runtime_unresponsive", format!("the runtime (pid {}) holds the owner lock but does not answer", record.pid)));
            }
        };
        let frame = RequestFrame { protocol: PROTOCOL.into(), method: "stop".into(), identity: None, request: None, cwd: None };
        self.send(&record, &frame, Some(PROBE_TIMEOUT))?;
        if let Ok(mut pool) = self.pool.lock() {
            pool.clear();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while lock::is_held(&self.config.lock_path())? {
            if Instant::now() > deadline {
                return Err(CommandError::new("runtime_stop_timeout", "the runtime did not finish draining in time; it keeps running"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(json!({"ok": true, "command": "runtime", "status": "stopped", "runtimeId": record.runtime_id, "pid": record.pid, "facts": self.config.facts_dir.display().to_string()}))
    }
}

/// A new, mutually authenticated connection to the runtime named by `record`.
/// Everything before the client's proof is `dispatched:false`: no request left.
fn connect(record: &EndpointRecord) -> Result<Pooled, CommandError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], record.port));
    let stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)
        .map_err(|e| CommandError::new("runtime_connection_lost", format!("cannot connect to the runtime on port {}: {e}", record.port)))?;
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| CommandError::new("runtime_connection_lost", e.to_string()))?);
    let mut stream = stream;
    let lost = |e: std::io::Error| CommandError::new("runtime_connection_lost", format!("runtime handshake failed: {e}"));
    let _ = stream.set_read_timeout(Some(PROBE_TIMEOUT));
    let client_nonce = nonce();
    let mut hello = serde_json::to_string(&Hello { protocol: PROTOCOL.into(), hello: client_nonce.clone() }).expect("hello serialises");
    hello.push('\n');
    stream.write_all(hello.as_bytes()).map_err(lost)?;
    // A bounded read: an impostor cannot make the client buffer more than a few KiB.
    let mut line = Vec::new();
    (&mut reader).take(MAX_HANDSHAKE_BYTES as u64 + 1).read_until(b'\n', &mut line).map_err(lost)?;
    let untrusted = |why: &str| {
        CommandError::new(
            "runtime_authentication_failed",
            format!("the process on port {} did not prove it is the runtime ({why}); nothing was sent to it", record.port),
        )
        .with_details(json!({"port": record.port}))
    };
    let challenge: Challenge = match serde_json::from_slice(&line) {
        Ok(c) => c,
        Err(_) if line.is_empty() => return Err(CommandError::new("runtime_connection_lost", "the runtime closed the connection during the handshake")),
        Err(_) => {
            // An older or foreign peer may answer with an error frame; never trust it.
            return Err(untrusted("no valid challenge"));
        }
    };
    if challenge.protocol != PROTOCOL || !is_nonce(&challenge.challenge) {
        return Err(untrusted("wrong protocol or nonce"));
    }
    if !token_matches(&proof(&record.token, Side::Runtime, &client_nonce, &challenge.challenge), &challenge.proof) {
        return Err(untrusted("wrong proof"));
    }
    let mut mine = serde_json::to_string(&ClientProof { protocol: PROTOCOL.into(), proof: proof(&record.token, Side::Client, &client_nonce, &challenge.challenge) }).expect("proof serialises");
    mine.push('\n');
    stream.write_all(mine.as_bytes()).map_err(lost)?;
    let _ = stream.set_read_timeout(None);
    Ok(Pooled { runtime_id: record.runtime_id.clone(), stream, reader })
}

fn reap(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        // The daemon outlives us when it won; only collect an already-exited child.
        let _ = c.try_wait();
    }
}

/// Whether `pid` names a process that is running (not gone, not a zombie).
fn process_running(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks for existence and permission.
    if pid <= 0 || unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // A kernel-generated file of a few hundred bytes, read with a cap all the same.
    let mut stat = String::new();
    let read = std::fs::File::open(format!("/proc/{pid}/stat")).and_then(|f| std::io::Read::read_to_string(&mut std::io::Read::take(f, 4096), &mut stat));
    match read {
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(_) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s != "Z" && s != "X")).unwrap_or(true),
        // No /proc entry: gone (reaped between the two checks).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}
