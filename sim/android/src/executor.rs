//! The instrumentation side of the executors (`android-executor`,
//! `flutter-executor`): what an installed test APK's `<instrumentation>` does
//! when the host starts it with `am instrument -w -r -e aab.executor.session
//! <id> -e aab.executor.epoch <uuid> … <pkg>/<runner>`. This module owns the
//! session registry of a device, the `am instrument` tool (AMS's part: find the
//! instrumentation, force-stop and restart the target process, launch the
//! activity, stream `INSTRUMENTATION_STATUS` lines, finish with
//! `INSTRUMENTATION_RESULT`/`INSTRUMENTATION_CODE`), the session lease, the
//! executor server on `localabstract:aab-executor-<targetPackage>` speaking the
//! JSON dialect `aab.executor/v1`, and the session's durable journal in the target
//! app's files dir. The action sets (native View hierarchy, Flutter engine) live
//! in `executor_actions`.
//!
//! An aapt-built APK carries no code, so the simulator stands in for the runner's
//! code: an instrumentation started with `aab.executor.session` serves the
//! executor dialect; one started without it runs zero tests and finishes.
//! The instrumentation runs inside the target's process (as on Android): any
//! death of that process (crash, force-stop, kill, reboot) ends the session
//! and leaves an action that was running unresolved (its journal record stays
//! `admitted`, its request connection closes without a reply). Killing the `am`
//! process does not stop the instrumentation (as on Android); only close, the
//! lease or the process's death do. Close and lease expiry finish the
//! instrumentation and AMS then kills the target process ("finished inst").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;

use crate::device::{Device, now_ms, sha256_hex};
use crate::tools::{Ctx, Res};

pub const SCHEMA: &str = "aab.executor/v1";
pub const EXECUTION_SCHEMA: &str = "aab.executor-execution/v1";
pub const RECORD_SCHEMA: &str = "aab.executor.record/v1";
pub const SESSION_SCHEMA: &str = "aab.executor.session/v1";
pub const DEFAULT_LEASE_MS: u64 = 60_000;
const MIN_LEASE_MS: u64 = 1_000;
const MAX_LEASE_MS: u64 = 3_600_000;
/// Request limits of the executor server (a request beyond them is refused, never read on).
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 256 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Actions one session records (its journal keeps every one).
const MAX_ACTIONS: usize = 1024;
/// Ended sessions the registry keeps for control `executors`.
const KEEP_ENDED: usize = 32;
pub const HEADER_SESSION: &str = "x-aab-executor-session";
pub const HEADER_EPOCH: &str = "x-aab-executor-epoch";

/// One `<instrumentation>` element of an installed APK (names resolved against its package).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instrumentation {
    pub name: String,
    pub target: String,
    pub label: Option<String>,
}

/// `flattenToShortString` of a component: `pkg/.Rest` when the class is inside the package.
pub fn short_component(package: &str, class: &str) -> String {
    match class.strip_prefix(package).and_then(|r| r.strip_prefix('.')) {
        Some(rest) => format!("{package}/.{rest}"),
        None => format!("{package}/{class}"),
    }
}

/// A class name as the manifest parser resolves it: `.X` and `X` (no dot) are relative to the package.
pub fn resolve_class(package: &str, name: &str) -> String {
    if let Some(rest) = name.strip_prefix('.') {
        format!("{package}.{rest}")
    } else if !name.contains('.') {
        format!("{package}.{name}")
    } else {
        name.to_string()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Native,
    Flutter,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Native => "native",
            Engine::Flutter => "flutter",
        }
    }
}

/// Why a session ended.
#[derive(Clone, Debug)]
pub struct End {
    pub reason: &'static str,
    pub at_ms: u64,
}

#[derive(Clone)]
pub(crate) enum Outcome {
    Pending,
    Settled(Value),
    /// The process died before the action settled: it stays unresolved.
    Gone,
}

pub(crate) struct Running {
    pub action_id: String,
    pub outcome: watch::Sender<Outcome>,
}

/// One action's journal entry (`aab.executor.record/v1`).
#[derive(Clone)]
pub(crate) struct Record {
    pub action_id: String,
    pub request_sha256: String,
    pub kind: String,
    pub phase: &'static str,
    pub admitted_at_ms: u64,
    pub settled_at_ms: Option<u64>,
    pub receipt: Option<Value>,
}

pub(crate) struct St {
    pub expires: Instant,
    pub snapshot: Option<crate::executor_actions::Snapshot>,
    pub next_snapshot: u64,
    pub active: Option<Arc<Running>>,
    pub records: BTreeMap<String, Record>,
    pub requests: u64,
}

pub struct Session {
    pub id: String,
    pub epoch: String,
    /// `pkg/.Runner` of the instrumentation.
    pub component: String,
    pub target: String,
    pub engine: Engine,
    pub test_class: Option<String>,
    pub activity: Option<String>,
    pub lease_ms: u64,
    pub pid: u32,
    pub started_at_ms: u64,
    pub(crate) st: Mutex<St>,
    end: watch::Sender<Option<End>>,
}

impl Session {
    pub fn ended(&self) -> Option<End> {
        self.end.borrow().clone()
    }

    pub(crate) fn subscribe_end(&self) -> watch::Receiver<Option<End>> {
        self.end.subscribe()
    }

    fn renew(&self) {
        self.st.lock().unwrap().expires = Instant::now() + Duration::from_millis(self.lease_ms);
    }

    pub fn socket(&self) -> String {
        socket_name(&self.target)
    }
}

pub fn socket_name(target: &str) -> String {
    format!("aab-executor-{target}")
}

/// The executor sessions of one device since boot (running and recently ended).
#[derive(Default)]
pub struct Registry {
    sessions: Vec<Arc<Session>>,
}

impl Registry {
    fn running_for(&self, target: &str) -> Option<Arc<Session>> {
        self.sessions.iter().rev().find(|s| s.target == target && s.ended().is_none()).cloned()
    }
}

fn journal_dir(dev: &Device, target: &str, session_id: &str) -> std::path::PathBuf {
    dev.root.join("data/user/0").join(target).join("files/aab-executor").join(session_id)
}

/// Device path of an action's journal record (what `run-as <target> cat` reads).
pub fn record_path(session_id: &str, action_id: &str) -> String {
    format!("files/aab-executor/{session_id}/actions/{}.json", sha256_hex(action_id.as_bytes()))
}

fn write_session_file(dev: &Device, s: &Session, state: &str, reason: Option<&str>) {
    let v = json!({
        "schemaVersion": SESSION_SCHEMA, "sessionId": s.id, "runtimeEpoch": s.epoch, "instrumentation": s.component, "targetPackage": s.target,
        "engine": s.engine.name(), "pid": s.pid, "leaseMs": s.lease_ms, "state": state, "endReason": reason, "startedAtMs": s.started_at_ms, "updatedAtMs": now_ms(),
    });
    let _ = crate::rootfs::write_atomic(&journal_dir(dev, &s.target, &s.id).join("session.json"), serde_json::to_vec_pretty(&v).unwrap().as_slice());
}

pub(crate) fn record_json(s: &Session, r: &Record) -> Value {
    json!({
        "schemaVersion": RECORD_SCHEMA, "sessionId": s.id, "runtimeEpoch": s.epoch, "actionId": r.action_id, "type": r.kind,
        "requestSha256": r.request_sha256, "phase": r.phase, "admittedAtMs": r.admitted_at_ms, "settledAtMs": r.settled_at_ms, "receipt": r.receipt,
    })
}

/// Writes an action's journal record; a record is durable before the effect it describes.
pub(crate) fn write_record(dev: &Device, s: &Session, r: &Record) {
    let path = dev.root.join("data/user/0").join(&s.target).join(record_path(&s.id, &r.action_id));
    let _ = crate::rootfs::write_atomic(&path, serde_json::to_vec_pretty(&record_json(s, r)).unwrap().as_slice());
}

// ------------------------------------------------------------------ am instrument

fn fail_lines(component: &str, error: &str) -> Res {
    Res {
        out: format!("INSTRUMENTATION_STATUS: id=ActivityManagerService\nINSTRUMENTATION_STATUS: Error={error}\nINSTRUMENTATION_STATUS_CODE: -1\n").into_bytes(),
        err: format!("android.util.AndroidException: INSTRUMENTATION_FAILED: {component}\n"),
        code: 1,
    }
}

fn crashed_lines(exception: &str, message: &str) -> String {
    format!("INSTRUMENTATION_RESULT: shortMsg={exception}\nINSTRUMENTATION_RESULT: longMsg={exception}: {message}\nINSTRUMENTATION_CODE: 0\n")
}

fn is_session_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.len() <= 64 && b[0].is_ascii_alphanumeric() && b.iter().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
}

pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36 && b.iter().enumerate().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { *c == b'-' } else { c.is_ascii_digit() || (b'a'..=b'f').contains(c) })
}

struct Invocation {
    wait: bool,
    raw: bool,
    extras: Vec<(String, String)>,
    component: String,
}

fn parse_instrument(args: &[String]) -> Result<Invocation, String> {
    let mut inv = Invocation { wait: false, raw: false, extras: vec![], component: String::new() };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-w" => inv.wait = true,
            "-r" => inv.raw = true,
            "-m" | "--no-window-animation" | "--no-hidden-api-checks" | "--no-isolated-storage" | "--no-restart" => {}
            "-e" | "--es" => {
                let (Some(k), Some(v)) = (args.get(i + 1), args.get(i + 2)) else { return Err(format!("Error: No value specified for {a}")) };
                inv.extras.push((k.clone(), v.clone()));
                i += 2;
            }
            "-p" | "--user" | "--abi" => i += 1,
            s if s.starts_with('-') => return Err(format!("Error: Unknown option: {s}")),
            s => inv.component = s.to_string(),
        }
        i += 1;
    }
    if inv.component.is_empty() {
        return Err("Error: Bad component name: ".into());
    }
    Ok(inv)
}

/// `am instrument …`: runs an instrumentation the way AMS and a test runner do.
pub async fn instrument(ctx: &Ctx, args: &[String], w: &mut (dyn AsyncWrite + Unpin + Send)) -> Res {
    let dev = &ctx.dev;
    let inv = match parse_instrument(args) {
        Ok(i) => i,
        Err(e) => return Res::fail(1, format!("{e}\n")),
    };
    let Some((pkg, cls)) = inv.component.split_once('/') else { return Res::fail(1, format!("Error: Bad component name: {}\n", inv.component)) };
    let class = if cls.starts_with('.') { format!("{pkg}{cls}") } else { cls.to_string() };
    let full = format!("{pkg}/{class}");
    let found = {
        let ph = dev.phone.lock().unwrap();
        ph.apps.iter().filter(|a| a.installed && a.package == pkg).flat_map(|a| a.instrumentations.iter()).find(|i| i.name == class).cloned()
    };
    let Some(instr) = found else {
        dev.record("instrumentation", json!({ "component": full, "outcome": "not_found" }));
        return fail_lines(&full, &format!("Unable to find instrumentation info for: ComponentInfo{{{full}}}"));
    };
    let component = short_component(pkg, &class);
    let target_idx = dev.phone.lock().unwrap().app_index(&instr.target);
    let Some(target_idx) = target_idx else {
        dev.record("instrumentation", json!({ "component": component, "outcome": "target_not_found", "target": instr.target }));
        return fail_lines(&full, &format!("Unable to find instrumentation target package: {}", instr.target));
    };
    let extra = |k: &str| inv.extras.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let extras: serde_json::Map<String, Value> = inv.extras.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    // AMS force-stops the target and starts it again with the instrumentation in it.
    crate::lifecycle::stop_process(dev, target_idx, "start instr");
    let pid = crate::lifecycle::start_process(dev, target_idx);
    let Some(session_id) = extra("aab.executor.session") else {
        // A plain test run: the simulator's stand-in runner has no tests.
        dev.record("instrumentation", json!({ "component": component, "target": instr.target, "extras": extras, "outcome": "finished", "executor": false }));
        crate::lifecycle::stop_process(dev, target_idx, "finished inst");
        let text = "INSTRUMENTATION_RESULT: stream=\n\nTime: 0.001\n\nOK (0 tests)\n\n\nINSTRUMENTATION_CODE: -1\n";
        return Res::ok(text);
    };
    let crash = |why: String| {
        dev.record("instrumentation", json!({ "component": component, "target": instr.target, "extras": extras, "outcome": "crashed", "message": why }));
        crate::lifecycle::stop_process(dev, target_idx, "crash");
        Res::ok(crashed_lines("java.lang.IllegalArgumentException", &why))
    };
    let epoch = extra("aab.executor.epoch").unwrap_or_default();
    if !is_session_id(&session_id) {
        return crash("aab.executor.session must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}".into());
    }
    if !is_uuid(&epoch) {
        return crash("aab.executor.epoch must be a lower-case UUID".into());
    }
    let engine = match extra("aab.executor.engine").as_deref() {
        None | Some("native") => Engine::Native,
        Some("flutter") => Engine::Flutter,
        Some(other) => return crash(format!("unknown aab.executor.engine {other}")),
    };
    let lease_ms = match extra("aab.executor.leaseMs").map(|v| v.parse::<u64>()) {
        None => DEFAULT_LEASE_MS,
        Some(Ok(n)) if (MIN_LEASE_MS..=MAX_LEASE_MS).contains(&n) => n,
        Some(_) => return crash(format!("aab.executor.leaseMs must be {MIN_LEASE_MS}..{MAX_LEASE_MS}")),
    };
    let activity = extra("activity");
    if let Err(why) = show_activity(dev, target_idx, activity.as_deref()) {
        dev.record("instrumentation", json!({ "component": component, "target": instr.target, "extras": extras, "outcome": "crashed", "message": why }));
        crate::lifecycle::stop_process(dev, target_idx, "crash");
        return Res::ok(crashed_lines("java.lang.RuntimeException", &why));
    }
    let session = Arc::new(Session {
        id: session_id,
        epoch,
        component: component.clone(),
        target: instr.target.clone(),
        engine,
        test_class: extra("class"),
        activity,
        lease_ms,
        pid,
        started_at_ms: now_ms(),
        st: Mutex::new(St { expires: Instant::now() + Duration::from_millis(lease_ms), snapshot: None, next_snapshot: 1, active: None, records: BTreeMap::new(), requests: 0 }),
        end: watch::Sender::new(None),
    });
    {
        let mut reg = dev.executor.lock().unwrap();
        reg.sessions.push(session.clone());
        let ended: Vec<usize> = reg.sessions.iter().enumerate().filter(|(_, s)| s.ended().is_some()).map(|(i, _)| i).collect();
        if ended.len() > KEEP_ENDED {
            let drop_n = ended.len() - KEEP_ENDED;
            let mut k = 0;
            reg.sessions.retain(|s| {
                if s.ended().is_some() && k < drop_n {
                    k += 1;
                    return false;
                }
                true
            });
        }
    }
    write_session_file(dev, &session, "running", None);
    serve(dev.clone(), session.clone());
    spawn_lease(dev.clone(), session.clone());
    dev.record("executor-start", json!({ "sessionId": session.id, "runtimeEpoch": session.epoch, "instrumentation": component, "targetPackage": session.target, "engine": engine.name(), "pid": pid, "leaseMs": lease_ms, "testClass": session.test_class, "activity": session.activity }));
    dev.record("instrumentation", json!({ "component": component, "target": instr.target, "extras": extras, "outcome": "started", "executor": true, "sessionId": session.id }));
    if inv.raw {
        let lines = format!(
            "INSTRUMENTATION_STATUS: aab.executor.schema={SCHEMA}\nINSTRUMENTATION_STATUS: aab.executor.session={}\nINSTRUMENTATION_STATUS: aab.executor.epoch={}\nINSTRUMENTATION_STATUS: aab.executor.engine={}\nINSTRUMENTATION_STATUS: aab.executor.socket={}\nINSTRUMENTATION_STATUS: aab.executor.pid={pid}\nINSTRUMENTATION_STATUS: aab.executor.leaseMs={lease_ms}\nINSTRUMENTATION_STATUS: id=AabExecutor\nINSTRUMENTATION_STATUS_CODE: 1\n",
            session.id, session.epoch, engine.name(), session.socket()
        );
        let _ = w.write_all(lines.as_bytes()).await;
        let _ = w.flush().await;
    }
    if !inv.wait {
        return Res::ok("");
    }
    let mut rx = session.end.subscribe();
    let end = rx.wait_for(Option::is_some).await.ok().and_then(|e| e.clone());
    let text = match end.as_ref().map(|e| e.reason) {
        Some("process_died") | None => "INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n".to_string(),
        Some(reason) => format!("INSTRUMENTATION_RESULT: aab.executor.end={reason}\nINSTRUMENTATION_RESULT: stream=\nAab executor session {} ended: {reason}\nINSTRUMENTATION_CODE: -1\n", session.id),
    };
    Res::ok(text)
}

/// The runner launches the requested activity (a screen's activity or a declared one), else the launcher's.
fn show_activity(dev: &Arc<Device>, idx: usize, activity: Option<&str>) -> Result<(), String> {
    let package = dev.phone.lock().unwrap().apps[idx].package.clone();
    let Some(act) = activity else {
        return crate::lifecycle::launch(dev, &package, None).map(|_| ());
    };
    let screen = {
        let ph = dev.phone.lock().unwrap();
        let app = &ph.apps[idx];
        let full = app.activity_class(act);
        app.spec.screens.iter().position(|s| s.activity.as_ref().map(|a| app.activity_class(a)) == Some(full.clone()))
    };
    match screen {
        Some(i) => {
            crate::lifecycle::launch(dev, &package, None)?;
            let mut ph = dev.phone.lock().unwrap();
            ph.apps[idx].screen = i;
            ph.apps[idx].focused = None;
            ph.keyboard = false;
            Ok(())
        }
        None => crate::lifecycle::launch(dev, &package, Some(act)).map(|_| ()).map_err(|_| format!("Unable to resolve activity for: Intent {{ cmp={package}/{act} }}")),
    }
}

/// Ends a session once: the socket goes, the journal says why (not after a death:
/// a dead instrumentation writes nothing), a running action becomes unresolved,
/// and a finished instrumentation takes its target process with it.
fn end(dev: &Arc<Device>, s: &Arc<Session>, reason: &'static str) {
    let first = s.end.send_if_modified(|e| {
        if e.is_some() {
            return false;
        }
        *e = Some(End { reason, at_ms: now_ms() });
        true
    });
    if !first {
        return;
    }
    let current = dev.executor.lock().unwrap().running_for(&s.target).is_none();
    if current {
        dev.unlisten(&format!("localabstract:{}", s.socket()));
        crate::lifecycle::write_net_unix(dev);
    }
    let active = s.st.lock().unwrap().active.take();
    if let Some(a) = &active {
        a.outcome.send_replace(Outcome::Gone);
    }
    if reason != "process_died" {
        write_session_file(dev, s, if reason == "closed" { "closed" } else { "expired" }, Some(reason));
    }
    dev.record("executor-end", json!({ "sessionId": s.id, "runtimeEpoch": s.epoch, "reason": reason, "unresolvedActionId": active.as_ref().map(|a| a.action_id.clone()) }));
    if reason != "process_died" {
        let idx = dev.phone.lock().unwrap().apps.iter().position(|a| a.package == s.target && a.process.as_ref().is_some_and(|p| p.pid == s.pid));
        if let Some(i) = idx {
            crate::lifecycle::stop_process(dev, i, "finished inst");
        }
    }
}

/// The simulator stops: every session ends at once and touches nothing more (its
/// lease timer and a waiting `am instrument` see the end; no file is written into
/// a root that is being removed).
pub fn shutdown(dev: &Device) {
    for s in dev.executor.lock().unwrap().sessions.iter() {
        s.end.send_if_modified(|e| {
            if e.is_some() {
                return false;
            }
            *e = Some(End { reason: "shutdown", at_ms: now_ms() });
            true
        });
        if let Some(a) = s.st.lock().unwrap().active.take() {
            a.outcome.send_replace(Outcome::Gone);
        }
    }
}

/// The target process died (any cause): its instrumentation dies with it.
pub fn process_gone(dev: &Arc<Device>, package: &str, pid: u32) {
    let s = dev.executor.lock().unwrap().sessions.iter().find(|s| s.target == package && s.pid == pid && s.ended().is_none()).cloned();
    if let Some(s) = s {
        end(dev, &s, "process_died");
    }
}

fn spawn_lease(dev: Arc<Device>, s: Arc<Session>) {
    tokio::spawn(async move {
        loop {
            if s.ended().is_some() {
                return;
            }
            let (expires, busy) = {
                let st = s.st.lock().unwrap();
                (st.expires, st.active.is_some())
            };
            let now = Instant::now();
            if now >= expires && !busy {
                end(&dev, &s, "lease_expired");
                return;
            }
            // A running action holds the lease; look again shortly after it could settle.
            let wake = if busy || expires <= now { now + Duration::from_millis(50) } else { expires };
            let mut rx = s.end.subscribe();
            let _ = tokio::time::timeout_at(tokio::time::Instant::from_std(wake), rx.wait_for(Option::is_some)).await;
        }
    });
}

// ------------------------------------------------------------------ the server

struct Request {
    method: String,
    path: String,
    query: HashMap<String, String>,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Reads one request within the limits; Err = (HTTP status, code).
async fn read_request(io: &mut DuplexStream) -> Result<Request, (u16, &'static str)> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_HEAD {
            return Err((431, "android_executor_request_too_large"));
        }
        let n = io.read(&mut tmp).await.map_err(|_| (400, "android_executor_protocol_error"))?;
        if n == 0 {
            return Err((400, "android_executor_protocol_error"));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    if head_end > MAX_HEAD {
        return Err((431, "android_executor_request_too_large"));
    }
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| (400, "android_executor_protocol_error"))?.to_string();
    let mut lines = head.split("\r\n");
    let mut rl = lines.next().unwrap_or("").split(' ');
    let (method, target) = (rl.next().unwrap_or("").to_string(), rl.next().unwrap_or("").to_string());
    let mut headers = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    if headers.contains_key("transfer-encoding") {
        return Err((400, "android_executor_protocol_error"));
    }
    let len = match headers.get("content-length") {
        Some(v) => v.parse::<usize>().map_err(|_| (400, "android_executor_protocol_error"))?,
        None => 0,
    };
    if len > MAX_BODY {
        return Err((413, "android_executor_request_too_large"));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = io.read(&mut tmp).await.map_err(|_| (400, "android_executor_protocol_error"))?;
        if n == 0 {
            return Err((400, "android_executor_protocol_error"));
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    let (path, qs) = target.split_once('?').unwrap_or((&target, ""));
    let query = qs
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (crate::sdk::url_decode(k), crate::sdk::url_decode(v))
        })
        .collect();
    Ok(Request { method, path: path.to_string(), query, headers, body })
}

fn serve(dev: Arc<Device>, s: Arc<Session>) {
    let mut rx = dev.listen(&format!("localabstract:{}", s.socket()));
    crate::lifecycle::write_net_unix(&dev);
    tokio::spawn(async move {
        while let Some(io) = rx.recv().await {
            let (dev, s) = (dev.clone(), s.clone());
            tokio::spawn(async move { connection(dev, s, io).await });
        }
    });
}

async fn write_reply(io: &mut DuplexStream, status: u16, body: &Value) {
    let text = serde_json::to_vec(body).unwrap();
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    let head = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", text.len());
    let _ = io.write_all(head.as_bytes()).await;
    let _ = io.write_all(&text).await;
    let _ = io.shutdown().await;
}

fn error(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

/// The exact pre-admission rejection shape: nothing was done.
pub(crate) fn rejection(code: &str, message: impl Into<String>, field: Option<&str>) -> Value {
    let mut v = json!({ "ok": false, "error": code, "message": message.into(), "dispatched": false, "ambiguous": false });
    if let Some(f) = field {
        v["field"] = json!(f);
    }
    v
}

async fn connection(dev: Arc<Device>, s: Arc<Session>, mut io: DuplexStream) {
    let req = match tokio::time::timeout(READ_TIMEOUT, read_request(&mut io)).await {
        Ok(Ok(r)) => r,
        Ok(Err((status, code))) => {
            dev.record("executor-request", json!({ "sessionId": s.id, "status": status, "error": code }));
            return write_reply(&mut io, status, &error(code, "the request is malformed or exceeds the executor's limits")).await;
        }
        Err(_) => {
            let _ = io.shutdown().await;
            return;
        }
    };
    s.st.lock().unwrap().requests += 1;
    let (status, body, drop_reply) = route(&dev, &s, &req).await;
    dev.record("executor-request", json!({ "sessionId": s.id, "runtimeEpoch": s.epoch, "method": req.method, "path": req.path, "status": status, "error": body.as_ref().and_then(|b| b.get("error")).cloned(), "dropped": drop_reply || body.is_none() }));
    let Some(body) = body else {
        // The process died mid-action: the connection closes without a reply.
        let _ = io.shutdown().await;
        return;
    };
    if drop_reply {
        dev.record("fault", json!({ "kind": "executor-reply-lost", "sessionId": s.id, "path": req.path }));
        let _ = io.shutdown().await;
        return;
    }
    write_reply(&mut io, status, &body).await;
    if req.path == "/v1/executor/close" && body["ok"] == true {
        end(&dev, &s, "closed");
    }
}

/// Identity binding: both headers, equal to this session's.
fn identity(s: &Session, req: &Request) -> Result<(), (u16, Value)> {
    match (req.headers.get(HEADER_SESSION), req.headers.get(HEADER_EPOCH)) {
        (Some(id), Some(ep)) if *id == s.id && *ep == s.epoch => Ok(()),
        (Some(_), Some(_)) => Err((409, error("android_executor_identity_mismatch", "the request names another executor session or runtime epoch"))),
        _ => Err((401, error("android_executor_identity_required", "X-AAB-Executor-Session and X-AAB-Executor-Epoch are required"))),
    }
}

pub(crate) fn public_status(s: &Session) -> Value {
    json!({ "ok": true, "schemaVersion": SCHEMA, "active": s.ended().is_none(), "engine": s.engine.name(), "targetPackage": s.target, "instrumentation": s.component })
}

pub(crate) fn status(s: &Session) -> Value {
    let st = s.st.lock().unwrap();
    let remaining = st.expires.saturating_duration_since(Instant::now()).as_millis() as u64;
    json!({
        "ok": true, "schemaVersion": SCHEMA, "executionSchema": EXECUTION_SCHEMA, "sessionId": s.id, "runtimeEpoch": s.epoch, "active": s.ended().is_none(),
        "engine": s.engine.name(), "targetPackage": s.target, "instrumentation": s.component, "testClass": s.test_class, "activity": s.activity,
        "pid": s.pid, "leaseMs": s.lease_ms, "leaseRemainingMs": remaining, "activeActionId": st.active.as_ref().map(|a| a.action_id.clone()),
        "actionCount": st.records.len(), "snapshotId": st.snapshot.as_ref().map(|x| x.id.clone()), "startedAtMs": s.started_at_ms, "updatedAtMs": now_ms(),
    })
}

/// One request → (status, body or None = close without a reply, drop the reply).
async fn route(dev: &Arc<Device>, s: &Arc<Session>, req: &Request) -> (u16, Option<Value>, bool) {
    let known = ["/v1/executor/status", "/v1/executor/observe", "/v1/executor/act", "/v1/executor/receipt", "/v1/executor/close"];
    if !known.contains(&req.path.as_str()) {
        return (404, Some(error("not_found", format!("no route {}", req.path))), false);
    }
    let bound = !(req.path == "/v1/executor/status" && !req.headers.contains_key(HEADER_SESSION) && !req.headers.contains_key(HEADER_EPOCH));
    if !bound {
        return (200, Some(public_status(s)), false);
    }
    if let Err((status, body)) = identity(s, req) {
        return (status, Some(body), false);
    }
    if let Some(e) = s.ended() {
        return (410, Some(error("android_executor_session_ended", format!("the session ended: {}", e.reason))), false);
    }
    s.renew();
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/executor/status") => (200, Some(status(s)), false),
        ("GET", "/v1/executor/observe") => (200, Some(crate::executor_actions::observe(dev, s)), false),
        ("GET", "/v1/executor/receipt") => (200, Some(receipt(s, req.query.get("actionId").map(String::as_str).unwrap_or(""))), false),
        ("POST", "/v1/executor/act") => {
            let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
                return (200, Some(rejection("invalid_json", "the body is not a JSON object", None)), false);
            };
            match crate::executor_actions::act(dev, s, body).await {
                Some(reply) => {
                    let lost = reply.get("settled") == Some(&Value::Bool(true)) && crate::faults::Faults::take(&mut dev.faults.lock().unwrap().executor_drop_replies);
                    (200, Some(reply), lost)
                }
                None => (200, None, false),
            }
        }
        ("POST", "/v1/executor/close") => {
            let st = s.st.lock().unwrap();
            if let Some(a) = &st.active {
                return (200, Some(rejection("android_executor_action_busy", format!("action {} is still running", a.action_id), None)), false);
            }
            (200, Some(json!({ "ok": true, "schemaVersion": SCHEMA, "sessionId": s.id, "runtimeEpoch": s.epoch, "closed": true, "actionCount": st.records.len() })), false)
        }
        _ => (404, Some(error("not_found", format!("no route {} {}", req.method, req.path))), false),
    }
}

fn receipt(s: &Session, action_id: &str) -> Value {
    let st = s.st.lock().unwrap();
    match st.records.get(action_id) {
        Some(r) => json!({ "ok": true, "schemaVersion": SCHEMA, "sessionId": s.id, "runtimeEpoch": s.epoch, "actionId": r.action_id, "phase": r.phase, "settled": r.receipt.is_some(), "receipt": r.receipt, "record": record_json(s, r) }),
        None => error("android_executor_action_not_found", format!("no action {action_id:?} in this session")),
    }
}

pub(crate) fn capacity_left(st: &St) -> bool {
    st.records.len() < MAX_ACTIONS
}

// ------------------------------------------------------------------ control

/// Control `executors`: every session since boot with its actions, and the
/// executor actions' truth records (each applied action once).
pub fn control(dev: &Device) -> Value {
    let sessions: Vec<Value> = dev
        .executor
        .lock()
        .unwrap()
        .sessions
        .iter()
        .map(|s| {
            let mut v = status(s);
            let st = s.st.lock().unwrap();
            v["state"] = json!(if s.ended().is_some() { "ended" } else { "running" });
            v["endReason"] = json!(s.ended().map(|e| e.reason));
            v["endedAtMs"] = json!(s.ended().map(|e| e.at_ms));
            v["requests"] = json!(st.requests);
            v["actions"] = json!(st.records.values().map(|r| json!({ "actionId": r.action_id, "type": r.kind, "phase": r.phase, "ok": r.receipt.as_ref().map(|x| x["ok"].clone()), "dispatched": r.receipt.as_ref().map(|x| x["dispatched"].clone()), "error": r.receipt.as_ref().and_then(|x| x.get("error").cloned()) })).collect::<Vec<_>>());
            v
        })
        .collect();
    let applied: Vec<Value> = dev.truth_since(0).into_iter().filter(|r| r["kind"] == "executor-action").collect();
    json!({ "ok": true, "sessions": sessions, "applied": applied })
}
