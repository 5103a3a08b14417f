//! The host side of the executors (`android-executor`, `flutter-executor`): an
//! instrumentation session on the phone, started with `am instrument -w -r -e
//! aab.executor.session <sessionId> -e aab.executor.epoch <runtimeEpoch> -e
//! aab.executor.engine <engine> -e aab.executor.leaseMs <ms> [-e class <testClass>]
//! [-e activity <activity>] <pkg>/<runner>` as a long-lived shell this plugin keeps
//! reading (its `INSTRUMENTATION_STATUS` lines say when the session serves, its
//! `INSTRUMENTATION_RESULT`/`INSTRUMENTATION_CODE` how it ended), and reached
//! through `adb forward tcp:0 localabstract:aab-executor-<targetPackage>` with the
//! JSON dialect `aab.executor/v1`: every call carries the identity headers
//! `X-AAB-Executor-Session` / `X-AAB-Executor-Epoch`, every reply is read under an
//! 8 MiB cap. The device owns the lease (renewed by each bound call) and the
//! durable journal (`files/aab-executor/<sessionId>/` of the target app: the
//! session record and one record per action, written before the effect).
//!
//! Operations: `status` (instrumentations + whether a session serves; with an
//! identity: that session), `open` (the instrumentation must be installed —
//! `android_executor_not_prepared` otherwise, naming `executor-prepare` and
//! `install-apk` — and no session may serve the target), `observe`, `act` (a
//! managed action whose id is the invocation's action id; the device refuses a
//! stale snapshot with `reobserve_required`), `receipt` (the device's record of
//! an action: the live session's, or the journal's after it ended), `close`.
//! Every operation on a session first proves it still serves (a bound status
//! call); a session that does not is diagnosed from the am stream or the
//! journal (expired, closed, lost, not found), never dispatched. An act whose
//! reply is lost is ambiguous and never resent: `receipt` or `device-ownership
//! reconcile` ([`reconcile`]) settles it from the device's record.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::adb::Deadline;
use crate::adb::device::{Device, command_line};
use crate::adb::wire::Conn;
use crate::commands::Budget;
use crate::sdk::{forward, http};

pub const SCHEMA: &str = "aab.executor/v1";
pub const EXECUTION_SCHEMA: &str = "aab.executor-execution/v1";
/// The kind of the executors' action records (reconcile reads them).
pub const RECORD_KIND: &str = "executor";
pub const DEFAULT_LEASE_MS: u64 = 60_000;
/// The largest executor reply read (a 2000-node observation is well under it).
const MAX_REPLY: usize = 8 * 1024 * 1024;
/// How long `close` waits for the am stream to report the instrumentation's end.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
const HEADER_SESSION: &str = "X-AAB-Executor-Session";
const HEADER_EPOCH: &str = "X-AAB-Executor-Epoch";

pub mod codes {
    /// No installed instrumentation targets the package (build one with executor-prepare, install it with install-apk).
    pub const NOT_PREPARED: &str = "android_executor_not_prepared";
    /// Several instrumentations target the package and the call named none.
    pub const INSTRUMENTATION_AMBIGUOUS: &str = "android_executor_instrumentation_ambiguous";
    /// The named instrumentation targets another package.
    pub const TARGET_MISMATCH: &str = "android_executor_target_mismatch";
    /// An executor session already serves the target.
    pub const SESSION_ACTIVE: &str = "android_executor_session_active";
    /// The instrumentation started but ended (crashed) before it served.
    pub const START_FAILED: &str = "android_executor_start_failed";
    /// The instrumentation did not report that it serves within the deadline (it may be running).
    pub const START_TIMEOUT: &str = "android_executor_start_timeout";
    pub const SESSION_EXPIRED: &str = "android_executor_session_expired";
    pub const SESSION_CLOSED: &str = "android_executor_session_closed";
    /// The session's process died (crash, kill, reboot) without finishing.
    pub const SESSION_LOST: &str = "android_executor_session_lost";
    pub const SESSION_NOT_FOUND: &str = "android_executor_session_not_found";
    /// flutter-executor on a session opened with another engine.
    pub const ENGINE_MISMATCH: &str = "android_executor_engine_mismatch";
    /// The act (or close) request was sent and no reply came: its outcome is unknown.
    pub const REPLY_LOST: &str = "android_executor_reply_lost";
    /// The device answered an act with neither a rejection nor a settled receipt.
    pub const ACTION_UNRESOLVED: &str = "android_executor_action_unresolved";
    pub const ACTION_NOT_FOUND: &str = "android_executor_action_not_found";
    /// The device's answer is not the executor dialect.
    pub const PROTOCOL_ERROR: &str = "android_executor_protocol_error";
}

/// Which command: `android-executor` (engine native or flutter) or `flutter-executor` (always flutter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Android,
    Flutter,
}

impl Flavor {
    pub fn command(self) -> &'static str {
        match self {
            Flavor::Android => "android-executor",
            Flavor::Flutter => "flutter-executor",
        }
    }
}

/// The arguments of both executor commands (validated by the host against their schemas).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecutorArgs {
    pub operation: String,
    pub package_name: String,
    pub serial: Option<String>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub session_id: Option<String>,
    pub runtime_epoch: Option<String>,
    pub instrumentation: Option<String>,
    pub test_class: Option<String>,
    pub activity: Option<String>,
    pub lease_ms: Option<u64>,
    pub engine: Option<String>,
    pub snapshot_id: Option<String>,
    pub action_id: Option<String>,
    pub action: Option<Value>,
}

fn uuid4() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn socket_name(package: &str) -> String {
    format!("aab-executor-{package}")
}

/// Percent-encoding of a query value (RFC 3986 unreserved kept).
fn encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

// ------------------------------------------------------------------ instrumentations

/// One line of `pm list instrumentation`: `instrumentation:<pkg>/<class> (target=<target>)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// As printed (`pkg/.Runner` or `pkg/full.Runner`).
    pub component: String,
    pub package: String,
    /// The runner's full class name.
    pub class: String,
    pub target: String,
}

/// `pkg/.X` → (pkg, pkg.X); `pkg/a.b.X` → (pkg, a.b.X).
pub fn split_component(component: &str) -> Option<(String, String)> {
    let (pkg, cls) = component.split_once('/')?;
    let class = if cls.starts_with('.') { format!("{pkg}{cls}") } else { cls.to_string() };
    Some((pkg.to_string(), class))
}

pub fn parse_instrumentations(text: &str) -> Vec<Listed> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("instrumentation:")?;
            let (component, target) = rest.rsplit_once(" (target=")?;
            let target = target.strip_suffix(')')?;
            // `-f` prints `<apk>=<component>`.
            let component = component.rsplit_once('=').map(|(_, c)| c).unwrap_or(component);
            let (package, class) = split_component(component)?;
            Some(Listed { component: component.to_string(), package, class, target: target.to_string() })
        })
        .collect()
}

fn not_prepared(package: &str, serial: &str, found: &[Listed], why: &str) -> ProviderError {
    ProviderError::new(
        codes::NOT_PREPARED,
        format!("{why} on {serial}: build an instrumentation APK targeting {package} with `executor-prepare` (platform android) and install it with `install-apk`"),
    )
    .with_field("instrumentation")
    .with_details(json!({"packageName": package, "serial": serial, "installed": found.iter().map(|l| json!({"component": l.component, "targetPackage": l.target})).collect::<Vec<_>>()}))
    .not_dispatched()
}

/// The instrumentation to run: the named one (a component, or a package with one
/// runner for the target), else the only one targeting `package`.
pub fn choose(listed: &[Listed], package: &str, named: Option<&str>, serial: &str) -> Result<Listed, ProviderError> {
    let for_target: Vec<&Listed> = listed.iter().filter(|l| l.target == package).collect();
    let Some(named) = named else {
        return match for_target.as_slice() {
            [] => Err(not_prepared(package, serial, listed, &format!("no installed instrumentation targets {package}"))),
            [one] => Ok((*one).clone()),
            many => Err(ProviderError::new(codes::INSTRUMENTATION_AMBIGUOUS, format!("{} instrumentations target {package}; name one with `instrumentation`", many.len()))
                .with_field("instrumentation")
                .with_details(json!({"candidates": many.iter().map(|l| l.component.clone()).collect::<Vec<_>>()}))
                .not_dispatched()),
        };
    };
    let matches: Vec<&Listed> = match split_component(named) {
        Some((pkg, class)) => listed.iter().filter(|l| l.package == pkg && l.class == class).collect(),
        None => listed.iter().filter(|l| l.package == named).collect(),
    };
    if matches.is_empty() {
        return Err(not_prepared(package, serial, listed, &format!("the instrumentation {named} is not installed")));
    }
    let aimed: Vec<&&Listed> = matches.iter().filter(|l| l.target == package).collect();
    match aimed.as_slice() {
        [one] => Ok((**one).clone()),
        [] => Err(ProviderError::new(codes::TARGET_MISMATCH, format!("the instrumentation {named} targets {}, not {package}", matches[0].target))
            .with_field("instrumentation")
            .with_details(json!({"targetPackage": matches[0].target}))
            .not_dispatched()),
        many => Err(ProviderError::new(codes::INSTRUMENTATION_AMBIGUOUS, format!("{named} has {} runners for {package}; name the component", many.len()))
            .with_field("instrumentation")
            .with_details(json!({"candidates": many.iter().map(|l| l.component.clone()).collect::<Vec<_>>()}))
            .not_dispatched()),
    }
}

async fn list_instrumentations(device: &Device, deadline: Deadline) -> Result<Vec<Listed>, ProviderError> {
    let out = device.shell_limited("pm list instrumentation", None, 1 << 20, deadline).await.map_err(|e| e.not_dispatched())?;
    Ok(parse_instrumentations(&out.stdout_text()))
}

// ------------------------------------------------------------------ the am stream

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Ended,
}

/// What the `am instrument` stream said (bounded: 64 keys per map, 32 first and 32 last lines of ≤1024 chars).
#[derive(Default, Debug)]
struct Heard {
    status: BTreeMap<String, String>,
    result: BTreeMap<String, String>,
    code: Option<i64>,
    exit: Option<u8>,
    head: Vec<String>,
    tail: VecDeque<String>,
    lost: Option<String>,
    partial: Vec<u8>,
}

impl Heard {
    fn line(&mut self, line: &str) -> bool {
        let line: String = line.chars().take(1024).collect();
        let kv = |m: &mut BTreeMap<String, String>, rest: &str| {
            if let Some((k, v)) = rest.split_once('=')
                && (m.len() < 64 || m.contains_key(k))
            {
                m.insert(k.to_string(), v.to_string());
            }
        };
        let mut ready = false;
        if let Some(rest) = line.strip_prefix("INSTRUMENTATION_STATUS: ") {
            kv(&mut self.status, rest);
        } else if let Some(code) = line.strip_prefix("INSTRUMENTATION_STATUS_CODE: ") {
            ready = code.trim() == "1" && self.status.contains_key("aab.executor.session");
        } else if let Some(rest) = line.strip_prefix("INSTRUMENTATION_RESULT: ") {
            kv(&mut self.result, rest);
        } else if let Some(code) = line.strip_prefix("INSTRUMENTATION_CODE: ") {
            self.code = code.trim().parse().ok();
        }
        if self.head.len() < 32 {
            self.head.push(line);
        } else {
            self.tail.push_back(line);
            if self.tail.len() > 32 {
                self.tail.pop_front();
            }
        }
        ready
    }

    fn feed(&mut self, data: &[u8]) -> bool {
        let mut ready = false;
        self.partial.extend_from_slice(data);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            ready |= self.line(String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']));
        }
        if self.partial.len() > 4096 {
            let line: Vec<u8> = std::mem::take(&mut self.partial);
            ready |= self.line(&String::from_utf8_lossy(&line));
        }
        ready
    }

    /// Why the instrumentation ended, from its result lines.
    fn end_reason(&self) -> Option<String> {
        if let Some(r) = self.result.get("aab.executor.end") {
            return Some(r.clone());
        }
        if self.result.get("shortMsg").is_some_and(|m| m.contains("crashed")) {
            return Some("process_died".into());
        }
        self.code.map(|_| "finished".to_string())
    }

    fn json(&self) -> Value {
        json!({"status": self.status, "result": self.result, "code": self.code, "exitCode": self.exit, "lost": self.lost, "lines": self.head.iter().chain(self.tail.iter()).collect::<Vec<_>>()})
    }
}

struct Watch {
    serial: String,
    session_id: String,
    epoch: String,
    heard: Mutex<Heard>,
    phase: watch::Sender<Phase>,
}

/// The am streams this plugin process holds (the newest 32).
static WATCHES: Mutex<Vec<Arc<Watch>>> = Mutex::new(Vec::new());

fn watch_of(serial: &str, session_id: &str, epoch: &str) -> Option<Arc<Watch>> {
    WATCHES.lock().unwrap_or_else(|p| p.into_inner()).iter().rev().find(|w| w.serial == serial && w.session_id == session_id && w.epoch == epoch).cloned()
}

const SHELL_STDOUT: u8 = 1;
const SHELL_STDERR: u8 = 2;
const SHELL_EXIT: u8 = 3;
const SHELL_CLOSE_STDIN: u8 = 4;

/// Start the instrumentation's shell and keep reading it on this plugin's runtime
/// (the stream lives until the instrumentation finishes or the adb server goes).
async fn start_instrument(device: &Device, argv: &[String], session_id: &str, epoch: &str, deadline: Deadline) -> Result<Arc<Watch>, ProviderError> {
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut conn: Conn = device.open(&format!("shell,v2,raw:{}", command_line(&args)), deadline).await?;
    conn.what = "am instrument".into();
    conn.write_all(&[SHELL_CLOSE_STDIN, 0, 0, 0, 0]).await?;
    // A session lives as long as its lease keeps being renewed: the stream has no deadline of its own.
    conn.deadline = Deadline::after(Duration::from_secs(7 * 24 * 3600));
    let w = Arc::new(Watch { serial: device.serial.clone(), session_id: session_id.to_string(), epoch: epoch.to_string(), heard: Mutex::new(Heard::default()), phase: watch::Sender::new(Phase::Starting) });
    {
        let mut all = WATCHES.lock().unwrap_or_else(|p| p.into_inner());
        all.push(w.clone());
        let n = all.len();
        if n > 32 {
            all.drain(..n - 32);
        }
    }
    let pump = w.clone();
    tokio::spawn(async move {
        loop {
            let head = match conn.read_exact(5).await {
                Ok(h) => h,
                Err(e) => {
                    pump.heard.lock().unwrap().lost = Some(e.message);
                    break;
                }
            };
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > 1 << 20 {
                pump.heard.lock().unwrap().lost = Some(format!("a shell packet of {len} bytes"));
                break;
            }
            let data = match conn.read_exact(len).await {
                Ok(d) => d,
                Err(e) => {
                    pump.heard.lock().unwrap().lost = Some(e.message);
                    break;
                }
            };
            match head[0] {
                SHELL_STDOUT => {
                    let ready = pump.heard.lock().unwrap().feed(&data);
                    if ready {
                        pump.phase.send_replace(Phase::Ready);
                    }
                }
                SHELL_STDERR => {
                    let text = String::from_utf8_lossy(&data).to_string();
                    let mut h = pump.heard.lock().unwrap();
                    for l in text.lines() {
                        h.line(l);
                    }
                }
                SHELL_EXIT => {
                    pump.heard.lock().unwrap().exit = data.first().copied();
                    break;
                }
                _ => {}
            }
        }
        pump.phase.send_replace(Phase::Ended);
    });
    Ok(w)
}

// ------------------------------------------------------------------ a bound session

struct Bound {
    device: Device,
    package: String,
    session_id: String,
    epoch: String,
    port: u16,
}

impl Bound {
    async fn connect(device: &Device, package: &str, session_id: &str, epoch: &str, deadline: Deadline) -> Result<Bound, ProviderError> {
        let fwd = forward::ensure(&device.server, &device.serial, &socket_name(package), None, deadline).await.map_err(|e| e.not_dispatched())?;
        Ok(Bound { device: device.clone(), package: package.to_string(), session_id: session_id.to_string(), epoch: epoch.to_string(), port: fwd.port })
    }

    /// One bound request. The executor refuses with a 4xx before it does anything
    /// (identity, ended session, limits): such an answer is never dispatched.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>, deadline: Deadline) -> Result<http::Response, ProviderError> {
        let headers = [(HEADER_SESSION, self.session_id.as_str()), (HEADER_EPOCH, self.epoch.as_str())];
        http::request_capped(self.port, method, path, &headers, body, MAX_REPLY, deadline).await.map_err(|e| {
            let details = e.details.clone().unwrap_or(Value::Null);
            match details["httpStatus"].as_u64() {
                Some(400..=499) => {
                    let code = details["body"]["error"].as_str().filter(|c| c.starts_with("android_executor_")).unwrap_or(codes::PROTOCOL_ERROR).to_string();
                    ProviderError::new(code, format!("the executor refused {method} {path} (HTTP {})", details["httpStatus"])).with_details(details).not_dispatched()
                }
                _ => e,
            }
        })
    }

    fn identity(&self) -> Value {
        json!({"serial": self.device.serial, "packageName": self.package, "sessionId": self.session_id, "runtimeEpoch": self.epoch})
    }

    /// Read a file of the target's data dir through `run-as` (None: absent or unreadable).
    async fn journal(&self, path: &str, deadline: Deadline) -> Option<Value> {
        let out = self.device.shell_limited(&command_line(&["run-as", &self.package, "cat", path]), None, 1 << 20, deadline).await.ok()?;
        if out.exit_code != 0 {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    async fn session_record(&self, deadline: Deadline) -> Option<Value> {
        self.journal(&format!("files/aab-executor/{}/session.json", self.session_id), deadline).await.filter(|v| v["sessionId"] == json!(self.session_id) && v["runtimeEpoch"] == json!(self.epoch))
    }

    async fn action_record(&self, action_id: &str, deadline: Deadline) -> Option<Value> {
        let path = format!("files/aab-executor/{}/actions/{}.json", self.session_id, sha256_hex(action_id.as_bytes()));
        self.journal(&path, deadline).await.filter(|v| v["sessionId"] == json!(self.session_id) && v["runtimeEpoch"] == json!(self.epoch) && v["actionId"] == json!(action_id))
    }

    /// The session's bound status: it proves the session serves and renews its lease.
    async fn live(&self, deadline: Deadline) -> Result<Value, ProviderError> {
        let cause = match self.call("GET", "/v1/executor/status", None, deadline).await {
            Ok(r) if r.body["ok"] == true && r.body["sessionId"] == json!(self.session_id) && r.body["runtimeEpoch"] == json!(self.epoch) => return Ok(r.body),
            Ok(r) => json!({"body": r.body}),
            Err(e) => json!({"error": e.error, "message": e.message, "details": e.details}),
        };
        Err(self.diagnose(cause, deadline).await)
    }

    /// Why a session does not serve: the am stream's end, else its journal.
    async fn diagnose(&self, cause: Value, deadline: Deadline) -> ProviderError {
        let heard = watch_of(&self.device.serial, &self.session_id, &self.epoch).map(|w| {
            let h = w.heard.lock().unwrap();
            (h.end_reason(), h.json())
        });
        let journal = self.session_record(deadline).await;
        let reason = heard.as_ref().and_then(|h| h.0.clone()).or_else(|| match journal.as_ref().map(|j| j["state"].as_str().unwrap_or("")) {
            Some("expired") => Some("lease_expired".into()),
            Some("closed") => Some("closed".into()),
            // The journal says running but nothing serves: the process died.
            Some(_) => Some("process_died".into()),
            None => None,
        });
        let (code, message) = match reason.as_deref() {
            Some("lease_expired") => (codes::SESSION_EXPIRED, "the executor session's lease expired (no call renewed it in time); open a new session"),
            Some("closed") => (codes::SESSION_CLOSED, "the executor session was closed"),
            Some(_) => (codes::SESSION_LOST, "the executor session's instrumentation died (its process crashed or was killed)"),
            None => (codes::SESSION_NOT_FOUND, "no executor session with this sessionId and runtimeEpoch serves the package"),
        };
        ProviderError::new(code, message).with_details(json!({"session": self.identity(), "cause": cause, "journal": journal, "instrumentation": heard.map(|h| h.1)})).not_dispatched()
    }
}

fn check_engine(flavor: Flavor, status: &Value) -> Result<(), ProviderError> {
    if flavor == Flavor::Flutter && status["engine"] != "flutter" {
        return Err(ProviderError::new(codes::ENGINE_MISMATCH, format!("the session runs engine {}; flutter-executor needs a session opened with engine flutter", status["engine"]))
            .with_details(json!({"engine": status["engine"]}))
            .not_dispatched());
    }
    Ok(())
}

/// An `ok:false` answer of a read: its code, not dispatched.
fn refused(body: &Value, what: &str) -> ProviderError {
    let code = body["error"].as_str().filter(|c| !c.is_empty()).unwrap_or(codes::PROTOCOL_ERROR).to_string();
    let mut e = ProviderError::new(code, format!("the executor refused {what}: {}", body["message"].as_str().unwrap_or(""))).with_details(json!({"device": body})).not_dispatched();
    if let Some(f) = body.get("field").and_then(Value::as_str) {
        e = e.with_field(f);
    }
    e
}

fn with(mut v: Value, extra: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut v, extra) {
        a.extend(b);
    }
    v
}

// ------------------------------------------------------------------ operations

/// Run one operation on `device` (the command selected it; tests pass their own).
pub async fn run_on(ctx: &Context<'_>, inv: &Invocation, flavor: Flavor, a: &ExecutorArgs, device: Device, budget: &Budget) -> Result<Value, ProviderError> {
    let out = match a.operation.as_str() {
        "status" => status(flavor, a, &device, budget).await?,
        "open" => open(ctx, inv, flavor, a, &device, budget).await?,
        "observe" => observe(flavor, a, &device, budget).await?,
        "act" => act(ctx, inv, flavor, a, &device, budget).await?,
        "receipt" => receipt(flavor, a, &device, budget).await?,
        "close" => close(ctx, inv, flavor, a, &device, budget).await?,
        other => return Err(ProviderError::new(aab_plugin_api::codes::INVALID_ARGUMENT, format!("unknown operation {other}")).with_field("operation").not_dispatched()),
    };
    Ok(with(json!({"ok": true, "command": flavor.command(), "operation": a.operation}), out))
}

async fn bound(a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Bound, ProviderError> {
    let (Some(sid), Some(epoch)) = (a.session_id.as_deref(), a.runtime_epoch.as_deref()) else {
        return Err(ProviderError::new("missing_argument", "this operation needs sessionId and runtimeEpoch (from open)").with_field("sessionId").not_dispatched());
    };
    Bound::connect(device, &a.package_name, sid, epoch, budget.adb()).await
}

async fn status(flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    if a.session_id.is_some() {
        let b = bound(a, device, budget).await?;
        let st = b.live(budget.adb()).await?;
        check_engine(flavor, &st)?;
        return Ok(with(b.identity(), json!({"session": st})));
    }
    let listed = list_instrumentations(device, budget.adb()).await?;
    let mine: Vec<Value> = listed.iter().filter(|l| l.target == a.package_name).map(|l| json!({"component": l.component, "targetPackage": l.target})).collect();
    let fwd = forward::ensure(&device.server, &device.serial, &socket_name(&a.package_name), None, budget.adb()).await.map_err(|e| e.not_dispatched())?;
    let serving = public_status(fwd.port, budget.adb()).await;
    Ok(json!({"serial": device.serial, "packageName": a.package_name, "prepared": !mine.is_empty(), "instrumentations": mine, "session": serving}))
}

/// The unbound status of whatever session serves the target (None: nothing serves).
async fn public_status(port: u16, deadline: Deadline) -> Option<Value> {
    let r = http::request_capped(port, "GET", "/v1/executor/status", &[], None, 64 * 1024, deadline).await.ok()?;
    (r.body["ok"] == true && r.body["schemaVersion"] == SCHEMA).then_some(r.body)
}

async fn open(ctx: &Context<'_>, inv: &Invocation, flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    let package = &a.package_name;
    let listed = list_instrumentations(device, budget.adb()).await?;
    let chosen = choose(&listed, package, a.instrumentation.as_deref(), &device.serial)?;
    let socket = socket_name(package);
    let fwd = forward::ensure(&device.server, &device.serial, &socket, None, budget.adb()).await.map_err(|e| e.not_dispatched())?;
    if let Some(live) = public_status(fwd.port, budget.adb()).await.filter(|s| s["active"] == true) {
        return Err(ProviderError::new(codes::SESSION_ACTIVE, format!("an executor session already serves {package}; close it first"))
            .with_details(json!({"serving": live}))
            .not_dispatched());
    }
    let session_id = a.session_id.clone().unwrap_or_else(uuid4);
    let epoch = uuid4();
    let engine = match flavor {
        Flavor::Flutter => "flutter".to_string(),
        Flavor::Android => a.engine.clone().unwrap_or_else(|| "native".into()),
    };
    let lease = a.lease_ms.unwrap_or(DEFAULT_LEASE_MS);
    let mut argv: Vec<String> = ["am", "instrument", "-w", "-r", "-e", "aab.executor.session", &session_id, "-e", "aab.executor.epoch", &epoch, "-e", "aab.executor.engine", &engine, "-e", "aab.executor.leaseMs", &lease.to_string()].iter().map(|s| s.to_string()).collect();
    if let Some(c) = &a.test_class {
        argv.extend(["-e".into(), "class".into(), c.clone()]);
    }
    if let Some(act) = &a.activity {
        argv.extend(["-e".into(), "activity".into(), act.clone()]);
    }
    argv.push(chosen.component.clone());
    let device_facts = json!({"operation": "open", "sessionId": session_id, "runtimeEpoch": epoch, "actionId": inv.action_id, "instrumentation": chosen.component, "socket": socket, "engine": engine});
    crate::action_record::append(ctx, &inv.action_id, &crate::action_record::record(RECORD_KIND, flavor.command(), &device.serial, Some(package), device_facts))?;
    ctx.mark_dispatched();
    let w = start_instrument(device, &argv, &session_id, &epoch, budget.adb()).await?;
    // Leave the last half second of the deadline for the confirming status read.
    let ready_by = tokio::time::Instant::from_std(budget.deadline.instant().into_std().checked_sub(Duration::from_millis(500)).unwrap_or_else(std::time::Instant::now));
    let mut rx = w.phase.subscribe();
    let phase = tokio::time::timeout_at(ready_by, rx.wait_for(|p| *p != Phase::Starting)).await.ok().and_then(|r| r.ok().map(|p| *p));
    let heard = w.heard.lock().unwrap().json();
    match phase {
        Some(Phase::Ready) => {}
        Some(_) => {
            let text = heard["lines"].to_string();
            if text.contains("Unable to find instrumentation") {
                return Err(not_prepared(package, &device.serial, &listed, &format!("AMS could not find the instrumentation {}", chosen.component)).with_details(json!({"instrumentation": heard})));
            }
            // The target was restarted and the instrumentation ended: a known, failed start.
            return Err(ProviderError::new(codes::START_FAILED, format!("the instrumentation {} ended before it served: {}", chosen.component, heard["result"]["longMsg"].as_str().or(heard["result"]["shortMsg"].as_str()).unwrap_or("no result")))
                .with_details(json!({"instrumentation": heard, "sessionId": session_id, "runtimeEpoch": epoch}))
                .settled_after_dispatch());
        }
        None => {
            return Err(ProviderError::new(codes::START_TIMEOUT, format!("the instrumentation {} did not report that it serves in time; it may still be starting (device unresolved)", chosen.component))
                .with_details(json!({"instrumentation": heard, "sessionId": session_id, "runtimeEpoch": epoch})));
        }
    }
    let said = &heard["status"];
    if said["aab.executor.session"] != json!(session_id) || said["aab.executor.epoch"] != json!(epoch) {
        return Err(ProviderError::new(codes::PROTOCOL_ERROR, "the instrumentation reported another session identity").with_details(json!({"instrumentation": heard})));
    }
    let b = Bound { device: device.clone(), package: package.clone(), session_id: session_id.clone(), epoch: epoch.clone(), port: fwd.port };
    let st = b.call("GET", "/v1/executor/status", None, budget.deadline).await?;
    if st.body["ok"] != true || st.body["sessionId"] != json!(session_id) {
        return Err(ProviderError::new(codes::PROTOCOL_ERROR, "the instrumentation serves but its status does not confirm the session").with_details(json!({"status": st.body})));
    }
    Ok(with(b.identity(), json!({"engine": engine, "instrumentation": chosen.component, "testClass": a.test_class, "activity": a.activity, "leaseMs": lease, "socket": socket, "port": fwd.port, "session": st.body, "started": heard["status"]})))
}

async fn observe(flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    let b = bound(a, device, budget).await?;
    let st = b.live(budget.adb()).await?;
    check_engine(flavor, &st)?;
    let r = b.call("GET", "/v1/executor/observe", None, budget.deadline).await.map_err(|e| e.not_dispatched())?;
    if r.body["ok"] != true {
        return Err(refused(&r.body, "the observation"));
    }
    Ok(with(b.identity(), json!({"snapshotId": r.body["snapshotId"], "engine": r.body["engine"], "snapshot": r.body})))
}

async fn act(ctx: &Context<'_>, inv: &Invocation, flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    let b = bound(a, device, budget).await?;
    let st = b.live(budget.adb()).await?;
    check_engine(flavor, &st)?;
    let action_id = inv.action_id.clone();
    let body = json!({"actionId": action_id, "snapshotId": a.snapshot_id, "action": a.action});
    let facts = json!({"operation": "act", "sessionId": b.session_id, "runtimeEpoch": b.epoch, "actionId": action_id, "socket": socket_name(&b.package), "type": a.action.as_ref().and_then(|x| x.get("type")).cloned()});
    crate::action_record::append(ctx, &action_id, &crate::action_record::record(RECORD_KIND, flavor.command(), &device.serial, Some(&b.package), facts))?;
    ctx.mark_dispatched();
    let reply = match b.call("POST", "/v1/executor/act", Some(&body), budget.deadline).await {
        Ok(r) => r.body,
        Err(e) if e.dispatched == Some(false) => return Err(e),
        Err(e) => {
            return Err(ProviderError::new(codes::REPLY_LOST, "the act request was sent and no reply came: the action's outcome is unknown (device unresolved; read it with operation receipt or run device-ownership reconcile)")
                .with_details(with(b.identity(), json!({"actionId": action_id, "ambiguous": true, "transport": {"error": e.error, "message": e.message}}))));
        }
    };
    settle(&b, &action_id, reply, "act")
}

/// The act reply: the exact rejection (not dispatched), a settled receipt of this
/// action (its outcome, with a compact proof), or anything else (unresolved).
fn settle(b: &Bound, action_id: &str, reply: Value, source: &str) -> Result<Value, ProviderError> {
    if crate::native_exec::is_rejection(&reply) {
        return Err(refused(&reply, "the action before admission").with_details(with(b.identity(), json!({"actionId": action_id, "device": reply}))));
    }
    if crate::native_exec::is_settled_receipt(EXECUTION_SCHEMA, &reply, action_id, &b.epoch) && reply["sessionId"] == json!(b.session_id) {
        let proof = crate::native_exec::proof(RECORD_KIND, &reply);
        if reply["ok"] == true {
            return Ok(with(b.identity(), json!({"actionId": action_id, "snapshotId": reply["snapshotId"], "settled": true, "source": source, "receipt": reply, "proof": proof})));
        }
        let code = reply["error"].as_str().unwrap_or(codes::ACTION_UNRESOLVED).to_string();
        let e = ProviderError::new(code, format!("the executor settled the action as failed: {}", reply["message"].as_str().unwrap_or(""))).with_details(with(b.identity(), json!({"actionId": action_id, "receipt": reply, "proof": proof})));
        return Err(if reply["dispatched"] == false { e.not_dispatched() } else { e.settled_after_dispatch() });
    }
    Err(ProviderError::new(codes::ACTION_UNRESOLVED, "the executor answered neither a rejection nor a settled receipt of this action: its outcome is unknown").with_details(with(b.identity(), json!({"actionId": action_id, "ambiguous": true, "device": reply}))))
}

/// The device's record of `action_id`: the live session's, else the journal's.
async fn lookup(b: &Bound, action_id: &str, deadline: Deadline) -> Result<(Value, &'static str), ProviderError> {
    match b.live(deadline).await {
        Ok(_) => {
            let r = b.call("GET", &format!("/v1/executor/receipt?actionId={}", encode(action_id)), None, deadline).await.map_err(|e| e.not_dispatched())?;
            if r.body["ok"] != true {
                return Err(refused(&r.body, "the receipt"));
            }
            Ok((r.body["record"].clone(), "executor"))
        }
        Err(gone) => match b.action_record(action_id, deadline).await {
            Some(rec) => Ok((rec, "journal")),
            None if gone.error == codes::SESSION_NOT_FOUND => Err(gone),
            None => Err(ProviderError::new(codes::ACTION_NOT_FOUND, format!("the ended session keeps no record of action {action_id}")).with_details(json!({"session": gone.details})).not_dispatched()),
        },
    }
}

async fn receipt(flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    let b = bound(a, device, budget).await?;
    let Some(action_id) = a.action_id.as_deref() else {
        return Err(ProviderError::new("missing_argument", "receipt needs actionId").with_field("actionId").not_dispatched());
    };
    if flavor == Flavor::Flutter
        && let Ok(st) = b.live(budget.adb()).await
    {
        check_engine(flavor, &st)?;
    }
    let (record, source) = lookup(&b, action_id, budget.adb()).await?;
    let receipt = record["receipt"].clone();
    let settled = crate::native_exec::is_settled_receipt(EXECUTION_SCHEMA, &receipt, action_id, &b.epoch);
    let mut out = with(b.identity(), json!({"actionId": action_id, "phase": record["phase"], "settled": settled, "source": source, "receipt": receipt, "record": record}));
    if settled {
        out["proof"] = crate::native_exec::proof(RECORD_KIND, &receipt);
    } else if source == "journal" {
        // Admitted when its session died: applied or not, nobody can tell; never retried.
        out["outcome"] = json!("unknown");
    }
    Ok(out)
}

async fn close(ctx: &Context<'_>, inv: &Invocation, flavor: Flavor, a: &ExecutorArgs, device: &Device, budget: &Budget) -> Result<Value, ProviderError> {
    let b = bound(a, device, budget).await?;
    let st = b.live(budget.adb()).await?;
    check_engine(flavor, &st)?;
    let facts = json!({"operation": "close", "sessionId": b.session_id, "runtimeEpoch": b.epoch, "actionId": inv.action_id, "socket": socket_name(&b.package)});
    crate::action_record::append(ctx, &inv.action_id, &crate::action_record::record(RECORD_KIND, flavor.command(), &device.serial, Some(&b.package), facts))?;
    ctx.mark_dispatched();
    let r = match b.call("POST", "/v1/executor/close", Some(&json!({})), budget.deadline).await {
        Ok(r) => r.body,
        Err(e) if e.dispatched == Some(false) => return Err(e),
        Err(e) => return Err(ProviderError::new(codes::REPLY_LOST, "the close request was sent and no reply came (device unresolved; run device-ownership reconcile)").with_details(with(b.identity(), json!({"transport": {"error": e.error, "message": e.message}})))),
    };
    if crate::native_exec::is_rejection(&r) {
        return Err(refused(&r, "close"));
    }
    if r["ok"] != true || r["closed"] != true {
        return Err(ProviderError::new(codes::PROTOCOL_ERROR, "the executor's close answer is not the dialect").with_details(json!({"device": r})));
    }
    // The am stream reports the instrumentation's end (when this process holds it).
    let heard = match watch_of(&device.serial, &b.session_id, &b.epoch) {
        Some(w) => {
            let mut rx = w.phase.subscribe();
            let until = Deadline::after(CLOSE_WAIT).instant().min(budget.deadline.instant());
            let _ = tokio::time::timeout_at(until, rx.wait_for(|p| *p == Phase::Ended)).await;
            let h = w.heard.lock().unwrap();
            Some(json!({"code": h.code, "endReason": h.end_reason(), "result": h.result}))
        }
        None => None,
    };
    Ok(with(b.identity(), json!({"closed": true, "actionCount": r["actionCount"], "instrumentation": heard})))
}

// ------------------------------------------------------------------ reconcile

fn unsettled(reason: &str, answer: Value) -> Value {
    json!({"status": "unsettled", "reason": reason, "answer": answer})
}

/// `device-ownership reconcile` of an executor action record: an act settles only
/// from the device's settled receipt; an open or close settles from what the
/// session (or its journal) says now.
pub async fn reconcile(ctx: &Context<'_>, record: &Value) -> Result<(Value, Value), Value> {
    let Some(serial) = record["serial"].as_str() else { return Err(unsettled("action_record_invalid", record.clone())) };
    let budget = Budget::new(ctx, None);
    let device = crate::commands::device(None, Some(serial), &budget).await.map_err(|e| unsettled("device_unreachable", json!({"error": e.error, "message": e.message})))?;
    reconcile_on(ctx, record, device).await
}

/// [`reconcile`] on a selected device.
pub async fn reconcile_on(ctx: &Context<'_>, record: &Value, device: Device) -> Result<(Value, Value), Value> {
    let d = &record["device"];
    let (Some(package), Some(op), Some(sid), Some(epoch), Some(action_id)) = (
        record["packageName"].as_str(),
        d["operation"].as_str(),
        d["sessionId"].as_str(),
        d["runtimeEpoch"].as_str(),
        d["actionId"].as_str(),
    ) else {
        return Err(unsettled("action_record_invalid", record.clone()));
    };
    let budget = Budget::new(ctx, None);
    let b = Bound::connect(&device, package, sid, epoch, budget.adb()).await.map_err(|e| unsettled("executor_unreachable", json!({"error": e.error, "message": e.message})))?;
    let proof = |evidence: Value| json!({"kind": RECORD_KIND, "settled": true, "operation": op, "sessionId": sid, "runtimeEpoch": epoch, "actionId": action_id, "evidence": evidence});
    match op {
        "act" => {
            let (rec, source) = lookup(&b, action_id, budget.adb()).await.map_err(|e| unsettled(&e.error, json!({"message": e.message, "details": e.details})))?;
            let receipt = rec["receipt"].clone();
            if crate::native_exec::is_settled_receipt(EXECUTION_SCHEMA, &receipt, action_id, epoch) {
                let p = crate::native_exec::proof(RECORD_KIND, &receipt);
                Ok((with(receipt, json!({"source": source})), p))
            } else {
                Err(unsettled(codes::ACTION_UNRESOLVED, json!({"record": rec, "source": source})))
            }
        }
        "open" => match b.live(budget.adb()).await {
            Ok(st) => Ok((json!({"ok": true, "operation": "open", "started": true, "serving": true, "session": st}), proof(json!({"status": "serving"})))),
            Err(_) => match b.session_record(budget.adb()).await {
                Some(j) => Ok((json!({"ok": true, "operation": "open", "started": true, "serving": false, "journal": j}), proof(json!({"journal": j["state"]})))),
                // A started instrumentation writes its session record before it serves.
                None => Ok((json!({"ok": false, "error": codes::SESSION_NOT_FOUND, "operation": "open", "started": false, "dispatched": false}), proof(json!({"journal": null})))),
            },
        },
        _ => match b.live(budget.adb()).await {
            Ok(st) => Ok((json!({"ok": false, "error": "android_executor_close_not_applied", "operation": op, "closed": false, "session": st}), proof(json!({"status": "serving"})))),
            Err(gone) => {
                let j = b.session_record(budget.adb()).await;
                let closed = j.as_ref().is_some_and(|j| j["state"] == "closed");
                Ok((json!({"ok": closed, "operation": op, "closed": closed, "ended": gone.error, "journal": j}), proof(json!({"ended": gone.error}))))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pm_list_instrumentation_lines_parse_and_names_resolve() {
        let text = "instrumentation:com.x.test/.Runner (target=com.x)\ninstrumentation:/data/app/~~a==/com.y-1==/base.apk=com.y/io.aab.Exec (target=com.z)\nnoise\n";
        let l = parse_instrumentations(text);
        assert_eq!(l[0], Listed { component: "com.x.test/.Runner".into(), package: "com.x.test".into(), class: "com.x.test.Runner".into(), target: "com.x".into() });
        assert_eq!((l[1].component.as_str(), l[1].class.as_str(), l[1].target.as_str()), ("com.y/io.aab.Exec", "io.aab.Exec", "com.z"));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn the_instrumentation_is_chosen_or_refused_undispatched() {
        let l = parse_instrumentations("instrumentation:com.x.test/.Runner (target=com.x)\ninstrumentation:com.x.test/.Other (target=com.x)\ninstrumentation:com.o.test/.R (target=com.o)\n");
        let e = choose(&l, "com.none", None, "s").unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::NOT_PREPARED, Some(false)));
        assert!(e.message.contains("executor-prepare") && e.message.contains("install-apk"), "{}", e.message);
        assert_eq!(choose(&l, "com.x", None, "s").unwrap_err().error, codes::INSTRUMENTATION_AMBIGUOUS);
        assert_eq!(choose(&l, "com.x", Some("com.x.test/.Other"), "s").unwrap().class, "com.x.test.Other");
        assert_eq!(choose(&l, "com.x", Some("com.x.test/com.x.test.Runner"), "s").unwrap().component, "com.x.test/.Runner");
        assert_eq!(choose(&l, "com.o", Some("com.o.test"), "s").unwrap().component, "com.o.test/.R");
        assert_eq!(choose(&l, "com.x", Some("com.o.test/.R"), "s").unwrap_err().error, codes::TARGET_MISMATCH);
        assert_eq!(choose(&l, "com.x", Some("com.x.test/.Gone"), "s").unwrap_err().error, codes::NOT_PREPARED);
    }

    #[test]
    fn the_am_stream_says_when_the_session_serves_and_how_it_ended() {
        let mut h = Heard::default();
        assert!(!h.feed(b"INSTRUMENTATION_STATUS: aab.executor.session=s1\nINSTRUMENTATION_STATUS: aab.executor.epoch=e\nINSTRUMENTATION_STATUS_CO"));
        assert!(h.feed(b"DE: 1\n"));
        assert_eq!(h.status["aab.executor.session"], "s1");
        assert_eq!(h.end_reason(), None);
        h.feed(b"INSTRUMENTATION_RESULT: aab.executor.end=lease_expired\nINSTRUMENTATION_CODE: -1\n");
        assert_eq!((h.end_reason().as_deref(), h.code), (Some("lease_expired"), Some(-1)));
        let mut c = Heard::default();
        c.feed(b"INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n");
        assert_eq!(c.end_reason().as_deref(), Some("process_died"));
        // Bounded: a flood keeps 64 lines.
        let mut f = Heard::default();
        for i in 0..1000 {
            f.feed(format!("line {i}\n").as_bytes());
        }
        assert_eq!(f.head.len() + f.tail.len(), 64);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        assert_eq!(encode("host-action-1.2_x~"), "host-action-1.2_x~");
    }
}
