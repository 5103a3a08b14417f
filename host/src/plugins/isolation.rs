//! Process isolation of plugins: which plugins run in a child process, the child
//! (`aab plugin-host`) that loads one cdylib and relays the frozen ABI over its
//! stdin/stdout, and the host-side handle that makes such a child look exactly like
//! an in-process module to the pipeline.
//!
//! Default: in-process. A call is then a plain function call (no copy, no context
//! switch), which is what first-party providers want. Process isolation is for
//! untrusted or unstable providers: a segfault, abort, exit or hang in the plugin
//! ends only its in-flight calls (`plugin_crashed` / `deadline_exceeded`), and the
//! child is started again for the next call.
//!
//! Choice, per plugin, keyed by the name in the file name (`libaab_plugin_<name>.so`
//! → `<name>`, known before any plugin code runs), last one wins:
//! 1. the bundle manifest: `"isolation": "process"` on a plugin's entry in `aab-bundle.json`;
//! 2. `aab-plugins.json` in the plugin directory: `{"isolation": {"<name>": "process", "*": "in-process"}}`;
//! 3. `AI_APP_BRIDGE_PLUGIN_ISOLATION`: `process` / `in-process` (every plugin) or
//!    `name=process,other=in-process`.
//!
//! Wire: one JSON object per line. child → host: `ready{manifest}` | `refused{error}`,
//! then per call `mark{id}`, `log{id,level,message}`, `host{id,rid,method,params}`,
//! `done{id,raw}`. host → child: `call{id,method,request,remainingMs}`, `cancel{id}`,
//! `reply{id,rid,ok|err}`. The child's frames go to a private duplicate of its stdout;
//! fd 1 itself is pointed at stderr so a plugin that prints cannot corrupt the wire.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aab_plugin_api::abi::{HostCallbacks, HostCallbacks_TO, HostCallbacksRef};
use aab_plugin_api::loader::LoadedModule;
use aab_plugin_api::protocol::{Manifest, OUTCOME_SCHEMA};
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RArc, RResult, RStr, RString};
use serde_json::{Value, json};

use crate::error::CommandError;

/// The per-plugin configuration file in the plugin directory.
pub const ISOLATION_FILE: &str = "aab-plugins.json";
/// The environment override (tests, one-off runs).
pub const ISOLATION_ENV: &str = "AI_APP_BRIDGE_PLUGIN_ISOLATION";

/// How often a waiting call looks at the host's cancellation flag and deadline.
const POLL: Duration = Duration::from_millis(5);
/// After the deadline the child gets this long to answer the relayed cancellation;
/// then it is killed (shorter than the pipeline's cancel grace, so the call's
/// thread returns and the child is gone before the reply is written).
const KILL_AFTER_DEADLINE: Duration = Duration::from_millis(100);
/// How long a child may take to load the plugin and report its manifest.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    InProcess,
    Process,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in-process",
            Isolation::Process => "process",
        }
    }
    fn parse(s: &str) -> Option<Isolation> {
        match s.trim() {
            "in-process" => Some(Isolation::InProcess),
            "process" => Some(Isolation::Process),
            _ => None,
        }
    }
}

/// The isolation choices for one plugin directory (file + environment).
#[derive(Clone, Debug, Default)]
pub struct IsolationPolicy {
    by_name: BTreeMap<String, Isolation>,
    default: Option<Isolation>,
    /// Why the configuration was ignored, if it was (reported by `plugins list`).
    pub problem: Option<String>,
}

impl IsolationPolicy {
    /// The policy for `plugin_dir`, given the bundle manifest's text the caller
    /// already read (the catalog reads it once for trust, identity and this).
    pub fn read(plugin_dir: &Path, bundle: Option<&str>) -> IsolationPolicy {
        let file = crate::fsread::read_regular_bounded(&plugin_dir.join(ISOLATION_FILE), 1024 * 1024).ok().flatten().and_then(|b| String::from_utf8(b).ok());
        let env = std::env::var(ISOLATION_ENV).ok();
        IsolationPolicy::from_sources(bundle, file.as_deref(), env.as_deref())
    }

    /// The policy from the three sources' texts, lowest precedence first.
    pub fn from_sources(bundle: Option<&str>, file: Option<&str>, env: Option<&str>) -> IsolationPolicy {
        let mut policy = IsolationPolicy::default();
        // A packager's choice: `"isolation": "process"` on a bundle entry (read raw, so
        // the bundle format itself is untouched; the entry's file names the plugin).
        if let Some(text) = bundle
            && let Ok(bundle) = serde_json::from_str::<Value>(text)
        {
            for entry in bundle.get("plugins").and_then(Value::as_array).into_iter().flatten() {
                let (Some(file), Some(mode)) = (entry.get("file").and_then(Value::as_str), entry.get("isolation").and_then(Value::as_str)) else { continue };
                match Isolation::parse(mode) {
                    Some(m) => {
                        policy.by_name.insert(file_plugin_name(Path::new(file)).to_string(), m);
                    }
                    None => policy.problem = Some(format!("{}: isolation of `{file}` must be \"in-process\" or \"process\"", super::BUNDLE_MANIFEST)),
                }
            }
        }
        if let Some(text) = file {
            match serde_json::from_str::<Value>(text) {
                Ok(v) => {
                    for (name, mode) in v.get("isolation").and_then(Value::as_object).into_iter().flatten() {
                        match mode.as_str().and_then(Isolation::parse) {
                            Some(m) if name == "*" => policy.default = Some(m),
                            Some(m) => {
                                policy.by_name.insert(name.clone(), m);
                            }
                            None => policy.problem = Some(format!("{ISOLATION_FILE}: isolation of `{name}` must be \"in-process\" or \"process\"")),
                        }
                    }
                }
                Err(e) => policy.problem = Some(format!("{ISOLATION_FILE} is not JSON: {e}")),
            }
        }
        if let Some(env) = env {
            for item in env.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                match item.split_once('=') {
                    None => match Isolation::parse(item) {
                        Some(m) => {
                            policy.default = Some(m);
                            policy.by_name.clear();
                        }
                        None => policy.problem = Some(format!("{ISOLATION_ENV}: unknown mode `{item}`")),
                    },
                    Some((name, mode)) => match Isolation::parse(mode) {
                        Some(m) => {
                            policy.by_name.insert(name.trim().to_string(), m);
                        }
                        None => policy.problem = Some(format!("{ISOLATION_ENV}: unknown mode `{mode}` for `{name}`")),
                    },
                }
            }
        }
        policy
    }

    /// The mode of the plugin in `file` (`libaab_plugin_<name>.so`).
    pub fn mode_of(&self, file: &Path) -> Isolation {
        let name = file_plugin_name(file);
        self.by_name.get(name).copied().or(self.default).unwrap_or(Isolation::InProcess)
    }
}

/// `<name>` of `libaab_plugin_<name>.so`.
pub fn file_plugin_name(file: &Path) -> &str {
    let base = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let prefix_len = std::env::consts::DLL_PREFIX.len() + "aab_plugin_".len();
    base.get(prefix_len..base.len().saturating_sub(std::env::consts::DLL_SUFFIX.len())).unwrap_or(base)
}

/// A callable plugin, wherever it runs. The pipeline calls [`PluginHandle::call`] on a
/// blocking thread with the call's host callbacks, exactly as for an in-process module.
#[derive(Clone)]
pub enum PluginHandle {
    InProcess(LoadedModule),
    Process(Arc<ChildPlugin>),
}

impl PluginHandle {
    /// One blocking call. Never panics; a crashed child yields a failed outcome.
    pub fn call(&self, method: &str, request: &str, host: &HostCallbacksRef) -> String {
        match self {
            PluginHandle::InProcess(module) => module.call(method, request, host),
            PluginHandle::Process(child) => child.call(method, request, host),
        }
    }

    pub fn isolation(&self) -> Isolation {
        match self {
            PluginHandle::InProcess(_) => Isolation::InProcess,
            PluginHandle::Process(_) => Isolation::Process,
        }
    }

    /// `runtime status` facts: mode, child pid, restarts.
    pub fn status_json(&self) -> Value {
        match self {
            PluginHandle::InProcess(_) => json!({"isolation": "in-process"}),
            PluginHandle::Process(child) => child.status_json(),
        }
    }
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

enum Event {
    Frame(Value),
    Ended(String),
}

/// One running child.
struct Connection {
    pid: u32,
    child: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    calls: Mutex<HashMap<u64, Sender<Event>>>,
    ended: Mutex<Option<String>>,
    next_id: AtomicU64,
}

impl Connection {
    fn send(&self, frame: &Value) -> std::io::Result<()> {
        let mut line = frame.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().unwrap_or_else(|p| p.into_inner());
        stdin.write_all(line.as_bytes())?;
        stdin.flush()
    }

    fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A plugin served by an `aab plugin-host` child, started again after it died.
pub struct ChildPlugin {
    name: String,
    copy: PathBuf,
    sha: String,
    connection: Mutex<Option<Arc<Connection>>>,
    restarts: AtomicU64,
    last_start_us: AtomicU64,
}

/// What starting a child produced.
pub struct Started {
    pub plugin: Arc<ChildPlugin>,
    pub manifest: Manifest,
}

impl ChildPlugin {
    /// Start the child for the private copy `copy` (sha256 `sha`) and read its manifest.
    pub fn start(file: &Path, copy: &Path, sha: &str) -> Result<Started, CommandError> {
        let name = file_plugin_name(file).to_string();
        let plugin = Arc::new(ChildPlugin {
            name,
            copy: copy.to_path_buf(),
            sha: sha.to_string(),
            connection: Mutex::new(None),
            restarts: AtomicU64::new(0),
            last_start_us: AtomicU64::new(0),
        });
        let (connection, manifest) = plugin.spawn().map_err(|e| super::refusal(e.0, file, e.1))?;
        *plugin.connection.lock().unwrap_or_else(|p| p.into_inner()) = Some(connection);
        Ok(Started { plugin, manifest })
    }

    fn spawn(&self) -> Result<(Arc<Connection>, Manifest), (&'static str, String)> {
        let started = Instant::now();
        let exe = std::env::current_exe().map_err(|e| ("plugin_load_failed", format!("cannot find the aab executable: {e}")))?;
        let mut child = Command::new(exe)
            .arg("plugin-host")
            .arg(&self.copy)
            .arg(&self.sha)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| ("plugin_load_failed", format!("cannot start the plugin host process: {e}")))?;
        let pid = child.id();
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        // The relay thread reads the hello line first, so a plugin that never builds its
        // manifest cannot hang the runtime's start: it is killed after MANIFEST_TIMEOUT.
        let (hello_tx, hello_rx) = mpsc::channel::<Value>();
        let (conn_tx, conn_rx) = mpsc::channel::<Arc<Connection>>();
        let thread_name = format!("aab-plugin-host-{}", self.name);
        std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || {
                let mut first = String::new();
                let hello = match stdout.read_line(&mut first) {
                    Ok(n) if n > 0 => serde_json::from_str(&first).unwrap_or(Value::Null),
                    _ => Value::Null,
                };
                let _ = hello_tx.send(hello);
                if let Ok(connection) = conn_rx.recv() {
                    read_frames(connection, stdout);
                }
            })
            .map_err(|e| ("plugin_load_failed", format!("cannot start the relay thread: {e}")))?;
        let hello = match hello_rx.recv_timeout(MANIFEST_TIMEOUT) {
            Ok(v) => v,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(("plugin_load_failed", format!("the plugin host process did not report the manifest within {} s; killed", MANIFEST_TIMEOUT.as_secs())));
            }
        };
        let manifest = match hello.get("t").and_then(Value::as_str) {
            Some("ready") => serde_json::from_value::<Manifest>(hello["manifest"].clone()).map_err(|e| ("plugin_manifest_invalid", format!("manifest shape: {e}"))),
            Some("refused") => {
                let e = CommandError::from_json(&hello["error"]).unwrap_or_else(|| CommandError::new("plugin_load_failed", "the plugin host refused the plugin"));
                Err((leak_code(&e.code), e.message))
            }
            _ => {
                let _ = child.kill();
                let status = child.wait().map(|s| describe_exit(&s)).unwrap_or_default();
                Err(("plugin_crashed", format!("the plugin host process ended before it reported the manifest ({status})")))
            }
        };
        let manifest = match manifest {
            Ok(m) => m,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let connection = Arc::new(Connection {
            pid,
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            calls: Mutex::new(HashMap::new()),
            ended: Mutex::new(None),
            next_id: AtomicU64::new(1),
        });
        let _ = conn_tx.send(Arc::clone(&connection));
        self.last_start_us.store(started.elapsed().as_micros() as u64, Ordering::SeqCst);
        Ok((connection, manifest))
    }

    /// The live child, started again when the last one ended.
    fn live(&self) -> Result<Arc<Connection>, String> {
        let mut slot = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = slot.as_ref()
            && c.ended.lock().unwrap_or_else(|p| p.into_inner()).is_none()
        {
            return Ok(Arc::clone(c));
        }
        let (connection, manifest) = self.spawn().map_err(|(code, message)| format!("{code}: {message}"))?;
        if manifest.name != self.name && !self.name.is_empty() {
            tracing::warn!(plugin = %self.name, "restarted plugin host reports the name `{}`", manifest.name);
        }
        self.restarts.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(plugin = %self.name, pid = connection.pid, "plugin host process restarted");
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    fn status_json(&self) -> Value {
        let slot = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        let pid = slot.as_ref().filter(|c| c.ended.lock().unwrap_or_else(|p| p.into_inner()).is_none()).map(|c| c.pid);
        json!({
            "isolation": "process",
            "childPid": pid,
            "restarts": self.restarts.load(Ordering::SeqCst),
            "lastStartUs": self.last_start_us.load(Ordering::SeqCst),
        })
    }

    /// End the child (runtime stop). Its in-flight calls end with `plugin_crashed`.
    pub fn shutdown(&self) {
        if let Some(c) = self.connection.lock().unwrap_or_else(|p| p.into_inner()).take() {
            c.kill();
        }
    }

    /// One call relayed to the child; every host callback the plugin makes during it
    /// is answered from `host` on this thread.
    pub fn call(&self, method: &str, request: &str, host: &HostCallbacksRef) -> String {
        let deadline = Instant::now() + Duration::from_millis(host.remaining_ms());
        let connection = match self.live() {
            Ok(c) => c,
            Err(e) => return failed_outcome("plugin_crashed", format!("plugin `{}` could not be restarted: {e}", self.name), Value::Null),
        };
        let id = connection.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        connection.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        // The reader marks the end before it drains the call table, so a call
        // registered after the drain sees the end here.
        if let Some(reason) = connection.ended.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            connection.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            return self.crashed(&connection, &reason);
        }
        let frame = json!({"t": "call", "id": id, "method": method, "request": request, "remainingMs": host.remaining_ms()});
        if connection.send(&frame).is_err() {
            // The child is gone; its reader reports why.
            return match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Event::Ended(reason)) => self.crashed(&connection, &reason),
                _ => self.crashed(&connection, "its stdin pipe is closed"),
            };
        }
        let mut cancel_sent = false;
        loop {
            match rx.recv_timeout(POLL) {
                Ok(Event::Frame(frame)) => match frame.get("t").and_then(Value::as_str) {
                    Some("mark") => {
                        // The host persists the mark before it answers, so the child's
                        // effect cannot precede the durable mark.
                        host.mark_dispatched();
                        if !frame["rid"].is_null() {
                            let _ = connection.send(&json!({"t": "reply", "id": id, "rid": frame["rid"], "ok": "{}"}));
                        }
                    }
                    Some("log") => {
                        let level = frame.get("level").and_then(Value::as_u64).unwrap_or(3) as u8;
                        host.log(level, RStr::from_str(frame.get("message").and_then(Value::as_str).unwrap_or_default()));
                    }
                    Some("host") => {
                        let method = frame.get("method").and_then(Value::as_str).unwrap_or_default();
                        let params = frame.get("params").and_then(Value::as_str).unwrap_or_default();
                        let reply = match host.call(RStr::from_str(method), RStr::from_str(params)) {
                            RResult::ROk(s) => json!({"t": "reply", "id": id, "rid": frame["rid"], "ok": s.as_str()}),
                            RResult::RErr(s) => json!({"t": "reply", "id": id, "rid": frame["rid"], "err": s.as_str()}),
                        };
                        let _ = connection.send(&reply);
                    }
                    Some("done") => {
                        connection.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                        return frame.get("raw").and_then(Value::as_str).unwrap_or_default().to_string();
                    }
                    _ => {}
                },
                Ok(Event::Ended(reason)) => return self.crashed(&connection, &reason),
                Err(RecvTimeoutError::Disconnected) => return self.crashed(&connection, "its relay ended"),
                Err(RecvTimeoutError::Timeout) => {
                    if !cancel_sent && host.is_cancelled() {
                        cancel_sent = true;
                        let _ = connection.send(&json!({"t": "cancel", "id": id}));
                    }
                    if Instant::now() >= deadline + KILL_AFTER_DEADLINE {
                        // A hang past the deadline: the child is killed, so the plugin
                        // cannot keep acting after the host reported the call over.
                        connection.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                        connection.kill();
                        tracing::warn!(plugin = %self.name, pid = connection.pid, "plugin host process killed: call hung past its deadline");
                        return failed_outcome(
                            "deadline_exceeded",
                            format!("plugin `{}` did not answer by its deadline; its host process {} was killed", self.name, connection.pid),
                            json!({"pid": connection.pid, "killed": true}),
                        );
                    }
                }
            }
        }
    }

    fn crashed(&self, connection: &Connection, reason: &str) -> String {
        failed_outcome(
            "plugin_crashed",
            format!("plugin `{}` crashed during the call: its host process {} {reason}; it is restarted for the next call", self.name, connection.pid),
            json!({"plugin": self.name, "pid": connection.pid, "exit": reason}),
        )
    }
}

impl Drop for ChildPlugin {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The reader thread of one child: frames to their calls; at EOF, the exit status to
/// every in-flight call.
fn read_frames(connection: Arc<Connection>, mut stdout: BufReader<std::process::ChildStdout>) {
    let mut line = String::new();
    loop {
        line.clear();
        match stdout.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(frame) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = frame.get("id").and_then(Value::as_u64) else { continue };
        if let Some(tx) = connection.calls.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            let _ = tx.send(Event::Frame(frame));
        }
    }
    let status = {
        let mut child = connection.child.lock().unwrap_or_else(|p| p.into_inner());
        child.wait().map(|s| describe_exit(&s)).unwrap_or_else(|e| format!("ended ({e})"))
    };
    *connection.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(status.clone());
    for (_, tx) in connection.calls.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        let _ = tx.send(Event::Ended(status.clone()));
    }
}

fn describe_exit(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(sig)) => format!("was killed by signal {sig}{}", signal_name(sig).map(|n| format!(" ({n})")).unwrap_or_default()),
        (Some(code), _) => format!("exited with status {code}"),
        _ => "ended".to_string(),
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

fn failed_outcome(code: &str, message: String, details: Value) -> String {
    let mut error = json!({"error": code, "message": message});
    if !details.is_null() {
        error["details"] = details;
    }
    json!({"schema": OUTCOME_SCHEMA, "ok": false, "error": error}).to_string()
}

/// Error codes travel as `&'static str` in the loader's errors; the child's codes are
/// from that same small set.
fn leak_code(code: &str) -> &'static str {
    match code {
        "plugin_abi_incompatible" => "plugin_abi_incompatible",
        "plugin_api_incompatible" => "plugin_api_incompatible",
        "plugin_manifest_invalid" => "plugin_manifest_invalid",
        "plugin_hash_mismatch" => "plugin_hash_mismatch",
        _ => "plugin_load_failed",
    }
}

// ---------------------------------------------------------------------------
// Child side: `aab plugin-host <private copy> <sha256>`
// ---------------------------------------------------------------------------

type FrameOut = Arc<Mutex<std::fs::File>>;
/// Waiting host-service calls of the child by (call id, request id).
type Replies = Arc<Mutex<HashMap<(u64, u64), Sender<Result<String, String>>>>>;

fn emit(out: &FrameOut, frame: &Value) {
    let mut line = frame.to_string();
    line.push('\n');
    let mut f = out.lock().unwrap_or_else(|p| p.into_inner());
    // Unbuffered file: the frame is in the pipe before the next plugin instruction,
    // so a dispatch mark survives a crash right after it.
    let _ = f.write_all(line.as_bytes());
}

/// Host callbacks inside the child: cancellation and deadline are local; the mark,
/// log lines and host services travel to the runtime.
struct ChildCallbacks {
    id: u64,
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
    out: FrameOut,
    replies: Replies,
    next_rid: AtomicU64,
}

impl HostCallbacks for ChildCallbacks {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
    fn remaining_ms(&self) -> u64 {
        aab_plugin_api::loader::remaining_ms_until(self.deadline)
    }
    fn mark_dispatched(&self) {
        // A round trip: the runtime records the mark (durably, for device actions)
        // before the plugin goes on to its first effect.
        let rid = self.next_rid.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.replies.lock().unwrap_or_else(|p| p.into_inner()).insert((self.id, rid), tx);
        emit(&self.out, &json!({"t": "mark", "id": self.id, "rid": rid}));
        let _ = rx.recv();
    }
    fn log(&self, level: u8, message: RStr<'_>) {
        emit(&self.out, &json!({"t": "log", "id": self.id, "level": level, "message": message.as_str()}));
    }
    fn call(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        let rid = self.next_rid.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.replies.lock().unwrap_or_else(|p| p.into_inner()).insert((self.id, rid), tx);
        emit(&self.out, &json!({"t": "host", "id": self.id, "rid": rid, "method": method.as_str(), "params": params.as_str()}));
        match rx.recv() {
            Ok(Ok(s)) => RResult::ROk(RString::from(s)),
            Ok(Err(s)) => RResult::RErr(RString::from(s)),
            Err(_) => RResult::RErr(RString::from(r#"{"error":"host_service_failed","message":"the runtime went away"}"#)),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The child's call threads: idle ones are reused (a thread start per call would be
/// most of the isolation overhead); a call never waits for a busy one — when none is
/// idle, a new thread takes it, so a hung call cannot hold up the next.
/// The job queue: the dispatcher's sender and the receiver the idle threads share.
type JobQueue = (Sender<Job>, Arc<Mutex<mpsc::Receiver<Job>>>);

#[derive(Default)]
struct Workers {
    queue: Option<JobQueue>,
    /// Threads waiting for a job and not yet claimed by the dispatcher.
    idle: Arc<std::sync::atomic::AtomicUsize>,
}

impl Workers {
    fn run(&mut self, job: Job) {
        let (tx, rx) = self.queue.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel();
            (tx, Arc::new(Mutex::new(rx)))
        });
        // Claim one idle thread; it (or another idle one) takes the job from the queue.
        if self.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            let _ = tx.send(job);
            return;
        }
        let rx = Arc::clone(rx);
        let idle = Arc::clone(&self.idle);
        std::thread::spawn(move || {
            let mut job = Some(job);
            while let Some(j) = job.take() {
                j();
                idle.fetch_add(1, Ordering::SeqCst);
                job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv().ok();
            }
        });
    }
}

/// The child's main loop. Returns the process exit code.
pub fn serve_child(copy: &Path, sha: &str) -> i32 {
    // Frames get a private duplicate of stdout; fd 1 becomes stderr.
    // SAFETY: plain fd duplication on descriptors this process owns.
    let out = unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            return 70;
        }
        use std::os::fd::FromRawFd;
        std::fs::File::from_raw_fd(fd)
    };
    let out: FrameOut = Arc::new(Mutex::new(out));
    let module = match super::load_verified(copy, sha) {
        Ok((manifest, module)) => {
            emit(&out, &json!({"t": "ready", "manifest": manifest}));
            module
        }
        Err(e) => {
            emit(&out, &json!({"t": "refused", "error": e.to_json()}));
            return 1;
        }
    };
    let cancels: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>> = Arc::default();
    let replies: Replies = Arc::default();
    let mut workers = Workers::default();
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            // The runtime closed the pipe (stopped or died): nothing may outlive it.
            Ok(0) | Err(_) => std::process::exit(0),
            Ok(_) => {}
        }
        let Ok(frame) = serde_json::from_str::<Value>(&line) else { continue };
        let id = frame.get("id").and_then(Value::as_u64).unwrap_or(0);
        match frame.get("t").and_then(Value::as_str) {
            Some("call") => {
                let cancelled = Arc::new(AtomicBool::new(false));
                cancels.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::clone(&cancelled));
                let callbacks = ChildCallbacks {
                    id,
                    deadline: Instant::now() + Duration::from_millis(frame.get("remainingMs").and_then(Value::as_u64).unwrap_or(0)),
                    cancelled,
                    out: Arc::clone(&out),
                    replies: Arc::clone(&replies),
                    next_rid: AtomicU64::new(1),
                };
                let method = frame.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
                let request = frame.get("request").and_then(Value::as_str).unwrap_or_default().to_string();
                let out = Arc::clone(&out);
                let cancels = Arc::clone(&cancels);
                workers.run(Box::new(move || {
                    let host: HostCallbacksRef = HostCallbacks_TO::from_ptr(RArc::new(callbacks), TD_Opaque);
                    let raw = module.call(&method, &request, &host);
                    cancels.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                    emit(&out, &json!({"t": "done", "id": id, "raw": raw}));
                }));
            }
            Some("cancel") => {
                if let Some(flag) = cancels.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            Some("reply") => {
                let rid = frame.get("rid").and_then(Value::as_u64).unwrap_or(0);
                if let Some(tx) = replies.lock().unwrap_or_else(|p| p.into_inner()).remove(&(id, rid)) {
                    let answer = match (frame.get("ok").and_then(Value::as_str), frame.get("err").and_then(Value::as_str)) {
                        (Some(ok), _) => Ok(ok.to_string()),
                        (_, Some(err)) => Err(err.to_string()),
                        _ => Err(r#"{"error":"host_service_failed","message":"malformed reply"}"#.to_string()),
                    };
                    let _ = tx.send(answer);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(policy: &IsolationPolicy, name: &str) -> Isolation {
        policy.mode_of(Path::new(&format!("/p/{}aab_plugin_{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)))
    }

    #[test]
    fn in_process_is_the_default() {
        let p = IsolationPolicy::from_sources(None, None, None);
        assert_eq!(mode(&p, "web"), Isolation::InProcess);
        assert!(p.problem.is_none());
    }

    #[test]
    fn bundle_then_file_then_environment() {
        let bundle = r#"{"plugins": [{"file": "libaab_plugin_a.so", "isolation": "process"}, {"file": "libaab_plugin_b.so", "isolation": "process"}, {"file": "libaab_plugin_c.so"}]}"#;
        let file = r#"{"isolation": {"b": "in-process", "c": "process"}}"#;
        let p = IsolationPolicy::from_sources(Some(bundle), Some(file), None);
        assert_eq!((mode(&p, "a"), mode(&p, "b"), mode(&p, "c"), mode(&p, "d")), (Isolation::Process, Isolation::InProcess, Isolation::Process, Isolation::InProcess));
        let p = IsolationPolicy::from_sources(Some(bundle), Some(file), Some("c=in-process, d=process"));
        assert_eq!((mode(&p, "a"), mode(&p, "c"), mode(&p, "d")), (Isolation::Process, Isolation::InProcess, Isolation::Process));
        // A bare mode in the environment applies to every plugin.
        let p = IsolationPolicy::from_sources(Some(bundle), Some(file), Some("in-process"));
        assert_eq!((mode(&p, "a"), mode(&p, "c")), (Isolation::InProcess, Isolation::InProcess));
        let p = IsolationPolicy::from_sources(None, Some(r#"{"isolation": {"*": "process", "web": "in-process"}}"#), None);
        assert_eq!((mode(&p, "x"), mode(&p, "web")), (Isolation::Process, Isolation::InProcess));
    }

    #[test]
    fn bad_configuration_is_reported_and_ignored() {
        let p = IsolationPolicy::from_sources(None, Some(r#"{"isolation": {"a": "sandbox"}}"#), None);
        assert_eq!(mode(&p, "a"), Isolation::InProcess);
        assert!(p.problem.as_deref().is_some_and(|m| m.contains("`a`")), "{:?}", p.problem);
        let p = IsolationPolicy::from_sources(None, Some("not json"), Some("weird"));
        assert!(p.problem.is_some());
    }

    #[test]
    fn the_file_name_names_the_plugin() {
        let f = format!("{}aab_plugin_my_provider{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
        assert_eq!(file_plugin_name(Path::new(&f)), "my_provider");
    }
}
