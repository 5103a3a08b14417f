//! End-to-end test harness for aab: real `aab` processes, a real runtime daemon,
//! real sockets, and the fixture plugins built by this workspace.
//!
//! Modelled on ripgrep's `TestCommand`: every failure panics with everything needed
//! to understand it without re-running — the command line, the working directory,
//! the exit status, stdout, stderr, the runtime log(s) and a listing of the test's
//! directories. Use [`TestEnv::report`] in your own assertion messages.
//!
//! Every test gets its own [`TestEnv`] (a fresh temp directory with its own runtime
//! home, FactStore, plugin directory and ownership journal), so tests run in
//! parallel without seeing each other's runtime. Dropping a `TestEnv` stops its
//! runtime and kills whatever process is still running with this environment's
//! runtime home, so a test leaves no process behind even when it fails.
//!
//! Build everything first: `cargo build --workspace --all-targets` (the `aab`
//! binary and the fixture cdylibs live in other crates of the workspace).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod pages;
pub mod chromium;
pub mod fake_adbd;
pub mod runtime_wire;
pub mod watchdog;
pub mod web;

/// Environment variable names the host reads (kept from the original contract).
pub const ENV_RUNTIME_HOME: &str = "AI_APP_BRIDGE_RUNTIME_HOME";
pub const ENV_FACT_STORE_DIR: &str = "AI_APP_BRIDGE_FACT_STORE_DIR";
pub const ENV_PLUGIN_DIR: &str = "AI_APP_BRIDGE_PLUGIN_DIR";
pub const ENV_OWNERSHIP_DIR: &str = "AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR";

/// Longest a single `aab` invocation may take before the harness kills it and fails
/// the test (a hang is a bug; the budget is generous for a 2-core machine).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// Longest to wait for one MCP response.
pub const MCP_TIMEOUT: Duration = Duration::from_secs(90);

/// Set `AAB_E2E_KEEP=1` to keep every test's temp directory for inspection.
pub const ENV_KEEP: &str = "AAB_E2E_KEEP";

/// `target/<profile>` of the running test binary
/// (`target/<profile>/deps/e2e-<hash>` → `target/<profile>`).
pub fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a parent directory");
    let profile = if deps.file_name().is_some_and(|n| n == "deps") { deps.parent().expect("target/<profile>") } else { deps };
    profile.to_path_buf()
}

/// Path of the `aab` binary of this build.
pub fn aab_binary() -> PathBuf {
    let path = target_profile_dir().join(format!("aab{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the aab binary is missing at {}; build the workspace first: cargo build --workspace --all-targets",
        path.display()
    );
    path
}

/// Path of a cdylib built by this workspace, by its underscored crate name
/// (e.g. `aab_fixture_fixture` → `target/<profile>/libaab_fixture_fixture.so`).
pub fn built_cdylib(crate_underscored: &str) -> PathBuf {
    let path = target_profile_dir().join(format!("{}{}{}", std::env::consts::DLL_PREFIX, crate_underscored, std::env::consts::DLL_SUFFIX));
    assert!(path.is_file(), "the cdylib {} is missing; build the workspace first: cargo build --workspace --all-targets", path.display());
    path
}

/// File name the host loads a plugin from: `libaab_plugin_<name>.so`.
pub fn plugin_file_name(name: &str) -> String {
    format!("{}aab_plugin_{}{}", std::env::consts::DLL_PREFIX, name, std::env::consts::DLL_SUFFIX)
}

/// The outcome of one `aab` process.
#[derive(Clone, Debug)]
pub struct Run {
    /// Printable command line (program and arguments, shell-quoted).
    pub cmdline: String,
    /// Extra environment given to this run beyond the `TestEnv`'s own.
    pub extra_env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Exit code; `None` when killed by a signal (see `status_text`).
    pub code: Option<i32>,
    pub status_text: String,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Harness notes (timeouts, pipes held open by a detached child, ...).
    pub notes: Vec<String>,
}

impl Run {
    /// The exit code, -1 when the process died from a signal.
    pub fn exit(&self) -> i32 {
        self.code.unwrap_or(-1)
    }

    /// stdout parsed as exactly one line of JSON, or a description of why not.
    pub fn single_json_line(&self) -> Result<Value, String> {
        let text = self.stdout.strip_suffix('\n').unwrap_or(&self.stdout);
        if text.is_empty() {
            return Err("stdout is empty".into());
        }
        if text.contains('\n') {
            return Err(format!("stdout has {} lines, expected exactly one JSON line", text.lines().count()));
        }
        serde_json::from_str(text).map_err(|e| format!("stdout is not JSON: {e}"))
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%^".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Collects a child's output pipe on a thread into a shared buffer, so the output
/// read so far is available even if a detached grandchild keeps the pipe open.
struct PipeReader {
    buffer: Arc<Mutex<Vec<u8>>>,
    done: Receiver<()>,
    _thread: JoinHandle<()>,
}

impl PipeReader {
    fn new(mut pipe: impl Read + Send + 'static) -> PipeReader {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let sink = buffer.clone();
        let thread = thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&chunk[..n]),
                }
            }
            let _ = tx.send(());
        });
        PipeReader { buffer, done, _thread: thread }
    }

    /// Wait up to `grace` for end-of-file; returns the text and whether EOF came.
    fn finish(self, grace: Duration) -> (String, bool) {
        let eof = !matches!(self.done.recv_timeout(grace), Err(RecvTimeoutError::Timeout));
        let bytes = self.buffer.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (String::from_utf8_lossy(&bytes).into_owned(), eof)
    }

    fn snapshot(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

fn status_text(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{status:?}"),
    }
}

/// One test's isolated world.
pub struct TestEnv {
    dir: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub home: PathBuf,
    pub facts: PathBuf,
    pub plugins: PathBuf,
    pub ownership: PathBuf,
    pub work: PathBuf,
    /// Environment given to every `aab` process of this test (on top of the
    /// directory variables), e.g. `AAB_MISBEHAVE_*` or a different plugin dir.
    env: Mutex<BTreeMap<String, String>>,
    /// Every command this env ran, for the failure report (and the hang watchdog).
    history: Arc<Mutex<Vec<String>>>,
    _watchdog: watchdog::Guard,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::Builder::new().prefix("aab-e2e-").tempdir().expect("create temp dir");
        // Canonical, so paths compare equal to what the host reports (getcwd/realpath).
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let sub = |name: &str| {
            let p = root.join(name);
            std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
            p
        };
        let history = Arc::new(Mutex::new(Vec::new()));
        let home = sub("home");
        let env = TestEnv {
            _watchdog: watchdog::enter(history.clone(), format!("{ENV_RUNTIME_HOME}={}", home.display())),
            home,
            facts: sub("facts"),
            plugins: sub("plugins"),
            ownership: sub("ownership"),
            work: sub("work"),
            root,
            dir: Some(dir),
            env: Mutex::new(BTreeMap::new()),
            history,
        };
        // HOME/XDG dirs inside the test dir so no cache of another test or of the user
        // leaks in (digest caches, default runtime home, ...).
        let user_home = env.root.join("user-home");
        std::fs::create_dir_all(user_home.join(".cache")).expect("create user home");
        env.set_env("HOME", user_home.display().to_string());
        env.set_env("XDG_CACHE_HOME", user_home.join(".cache").display().to_string());
        env.set_env(ENV_RUNTIME_HOME, env.home.display().to_string());
        env.set_env(ENV_FACT_STORE_DIR, env.facts.display().to_string());
        env.set_env(ENV_PLUGIN_DIR, env.plugins.display().to_string());
        env.set_env(ENV_OWNERSHIP_DIR, env.ownership.display().to_string());
        env
    }

    /// A second, independent world — its own runtime home, FactStore and plugin
    /// directory, hence its own runtime process — that shares this env's device
    /// ownership directory: a second runtime contending for the same devices.
    /// Install its plugins yourself; its environment starts like a fresh `TestEnv`'s.
    pub fn sibling_sharing_ownership(&self) -> TestEnv {
        let mut other = TestEnv::new();
        other.ownership = self.ownership.clone();
        other.set_env(ENV_OWNERSHIP_DIR, self.ownership.display().to_string());
        other
    }

    /// Path of the ownership journal of device `serial`:
    /// `<ownership dir>/<sha256hex(serial)>.json`.
    pub fn journal_path(&self, serial: &str) -> PathBuf {
        self.ownership.join(format!("{}.json", sha256_hex(serial.as_bytes())))
    }

    /// Set (or override) an environment variable for every later process of this test.
    pub fn set_env(&self, key: impl Into<String>, value: impl Into<String>) {
        lock(&self.env).insert(key.into(), value.into());
    }

    pub fn remove_env(&self, key: &str) {
        lock(&self.env).remove(key);
    }

    /// Copy `target/<profile>/lib<crate>.so` into the plugin directory as
    /// `libaab_plugin_<name>.so`; returns the installed path.
    pub fn install_plugin(&self, crate_underscored: &str, name: &str) -> PathBuf {
        self.install_plugin_into(&self.plugins, crate_underscored, name)
    }

    pub fn install_plugin_into(&self, dir: &Path, crate_underscored: &str, name: &str) -> PathBuf {
        let from = built_cdylib(crate_underscored);
        let to = dir.join(plugin_file_name(name));
        std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copy {} -> {}: {e}", from.display(), to.display()));
        to
    }

    /// The usual pair: the `fixture` plugin and the `misbehaving` plugin.
    pub fn install_fixtures(&self) {
        self.install_plugin("aab_fixture_fixture", "fixture");
        self.install_plugin("aab_fixture_misbehaving", "misbehaving");
    }

    fn command<S: AsRef<std::ffi::OsStr>>(&self, args: &[S], extra_env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(aab_binary());
        cmd.args(args).current_dir(&self.work).stdin(Stdio::null());
        // Nothing of the outer environment that configures aab may leak in (another
        // test of this process may have set AAB_MISBEHAVE_* for an in-process load).
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("AI_APP_BRIDGE_") || k.starts_with("AAB_") {
                cmd.env_remove(&key);
            }
        }
        for (k, v) in lock(&self.env).iter() {
            cmd.env(k, v);
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    fn cmdline<S: AsRef<std::ffi::OsStr>>(args: &[S], extra_env: &[(&str, &str)]) -> String {
        let mut line = String::new();
        for (k, v) in extra_env {
            let _ = write!(line, "{}={} ", k, shell_quote(v));
        }
        line.push_str("aab");
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(&a.as_ref().to_string_lossy()));
        }
        line
    }

    /// Run `aab ARGS` in `work/` and return its outcome (no assertion).
    pub fn aab(&self, args: &[&str]) -> Run {
        self.aab_with_env(args, &[])
    }

    /// Run `aab ARGS` with extra environment variables for this run only.
    pub fn aab_with_env(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Run {
        self.aab_with_timeout(args, extra_env, COMMAND_TIMEOUT)
    }

    /// Run `aab` with arguments that need not be UTF-8.
    pub fn aab_os(&self, args: &[std::ffi::OsString]) -> Run {
        self.aab_with_timeout(args, &[], COMMAND_TIMEOUT)
    }

    pub fn aab_with_timeout<S: AsRef<std::ffi::OsStr>>(&self, args: &[S], extra_env: &[(&str, &str)], timeout: Duration) -> Run {
        let cmdline = Self::cmdline(args, extra_env);
        lock(&self.history).push(cmdline.clone());
        let mut cmd = self.command(args, extra_env);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn `{cmdline}`: {e}"));
        let out = PipeReader::new(child.stdout.take().expect("stdout pipe"));
        let err = PipeReader::new(child.stderr.take().expect("stderr pipe"));
        let mut notes = Vec::new();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > timeout => {
                    notes.push(format!("HARNESS: the process did not exit within {timeout:?}; killed it"));
                    let _ = child.kill();
                    break child.wait().expect("wait after kill");
                }
                Ok(None) => thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("wait for `{cmdline}`: {e}"),
            }
        };
        let elapsed = started.elapsed();
        let (stdout, out_eof) = out.finish(Duration::from_secs(3));
        let (stderr, err_eof) = err.finish(Duration::from_secs(1));
        if !out_eof || !err_eof {
            notes.push(
                "HARNESS: stdout/stderr stayed open after `aab` exited: a process it started (the runtime daemon?) inherited \
                 the client's pipes instead of writing to runtime.log"
                    .to_string(),
            );
        }
        Run {
            cmdline,
            extra_env: extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cwd: self.work.clone(),
            code: status.code(),
            status_text: status_text(&status),
            stdout,
            stderr,
            elapsed,
            notes,
        }
    }

    /// Run `aab ARGS`; stdout must be exactly one JSON line. Returns it and the exit code.
    #[track_caller]
    pub fn aab_json(&self, args: &[&str]) -> (Value, i32) {
        let run = self.aab(args);
        let value = self.json_of(&run);
        (value, run.exit())
    }

    #[track_caller]
    pub fn aab_json_with_env(&self, args: &[&str], extra_env: &[(&str, &str)]) -> (Value, i32) {
        let run = self.aab_with_env(args, extra_env);
        let value = self.json_of(&run);
        (value, run.exit())
    }

    /// Run `aab ARGS`; it must exit 0 with exactly one JSON line, which is returned.
    #[track_caller]
    pub fn aab_ok(&self, args: &[&str]) -> Value {
        let run = self.aab(args);
        let value = self.json_of(&run);
        if run.exit() != 0 {
            self.fail(&run, "expected exit code 0");
        }
        value
    }

    /// The single JSON line of a run's stdout, or a failure with the full report.
    #[track_caller]
    pub fn json_of(&self, run: &Run) -> Value {
        match run.single_json_line() {
            Ok(v) => v,
            Err(why) => self.fail(run, &why),
        }
    }

    /// Panic with `what` and the full report of `run`.
    #[track_caller]
    pub fn fail(&self, run: &Run, what: &str) -> ! {
        panic!("\n{what}\n{}", self.report(Some(run)))
    }

    /// Panic with `what` unless `cond` holds.
    #[track_caller]
    pub fn check(&self, cond: bool, run: &Run, what: &str) {
        if !cond {
            self.fail(run, what)
        }
    }

    /// A counter of the running daemon's `runtime --operation status` (`executed`:
    /// requests the daemon executed, `active`: requests inside it right now).
    #[track_caller]
    pub fn runtime_counter(&self, name: &str) -> u64 {
        let run = self.aab(&["runtime", "--operation", "status"]);
        let body = self.expect_ok(&run, "runtime status");
        match body.get("value").and_then(|v| v.get(name)).and_then(Value::as_u64) {
            Some(n) => n,
            None => self.fail(&run, &format!("runtime status must report value.{name}")),
        }
    }

    /// The run must exit 0 with `execution.ok:true`; returns the reply body.
    #[track_caller]
    pub fn expect_ok(&self, run: &Run, what: &str) -> Value {
        let body = self.json_of(run);
        self.check(
            run.exit() == 0 && body.pointer("/execution/ok") == Some(&Value::Bool(true)),
            run,
            &format!("{what}: expected a successful reply (exit 0, execution.ok:true)"),
        );
        body
    }

    /// Everything needed to understand a failure: the run (if any), the commands this
    /// test ran, its environment, the runtime log(s) and a listing of its directories.
    pub fn report(&self, run: Option<&Run>) -> String {
        let mut r = String::new();
        let _ = writeln!(r, "==================== aab e2e failure report ====================");
        if let Some(run) = run {
            let _ = writeln!(r, "command: {}", run.cmdline);
            let _ = writeln!(r, "cwd:     {}", run.cwd.display());
            let _ = writeln!(r, "status:  {} (after {:?})", run.status_text, run.elapsed);
            for note in &run.notes {
                let _ = writeln!(r, "{note}");
            }
            let _ = writeln!(r, "---- stdout ({} bytes) ----\n{}", run.stdout.len(), clip(&run.stdout, 16 * 1024));
            let _ = writeln!(r, "---- stderr ({} bytes) ----\n{}", run.stderr.len(), clip(&run.stderr, 16 * 1024));
        }
        let _ = writeln!(r, "---- commands run by this test ----");
        for c in lock(&self.history).iter() {
            let _ = writeln!(r, "  {c}");
        }
        let _ = writeln!(r, "---- environment ----");
        for (k, v) in lock(&self.env).iter() {
            let _ = writeln!(r, "  {k}={v}");
        }
        for log in find_files(&self.root, &|p| p.extension().is_some_and(|e| e == "log")) {
            let text =
                std::fs::read(&log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_else(|e| format!("<unreadable: {e}>"));
            let _ = writeln!(r, "---- {} ({} bytes, tail) ----\n{}", log.display(), text.len(), tail(&text, 12 * 1024));
        }
        for endpoint in self.endpoint_files() {
            let text = std::fs::read_to_string(&endpoint).unwrap_or_default();
            let _ = writeln!(r, "---- {} ----\n{}", endpoint.display(), text);
        }
        let _ = writeln!(r, "---- files under {} ----", self.root.display());
        list_tree(&self.root, &self.root, &mut r);
        let pids = self.live_processes();
        let _ = writeln!(r, "---- live processes with this runtime home: {pids:?} ----");
        r
    }

    /// `home/*/endpoint.json` files.
    pub fn endpoint_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.home) {
            for e in entries.flatten() {
                let p = e.path().join("endpoint.json");
                if p.is_file() {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    /// The endpoint record `{protocol, runtimeId, pid, token, port, facts}` of the
    /// runtime, if one is published.
    pub fn endpoint(&self) -> Option<Value> {
        self.endpoint_files().into_iter().find_map(|p| serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok())
    }

    /// The pid named by `home/*/endpoint.json`.
    pub fn runtime_pid(&self) -> Option<i32> {
        self.endpoint()?.get("pid")?.as_i64().and_then(|p| i32::try_from(p).ok())
    }

    /// SIGKILL the runtime named by this env's endpoint record; returns its pid once
    /// it is gone.
    #[track_caller]
    pub fn kill_runtime(&self) -> i32 {
        let pid = self.runtime_pid().unwrap_or_else(|| panic!("no runtime pid to kill\n{}", self.report(None)));
        assert!(process_alive(pid), "runtime {pid} is not alive before SIGKILL\n{}", self.report(None));
        // SAFETY: plain syscall on the pid of this test's own endpoint.json.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(wait_for_exit(pid, Duration::from_secs(15)), "runtime {pid} survived SIGKILL\n{}", self.report(None));
        pid
    }

    /// Pids of live (non-zombie) processes whose environment carries this test's
    /// runtime home: the runtime daemon(s) and any `aab` client still running.
    pub fn live_processes(&self) -> Vec<i32> {
        let needle = format!("{ENV_RUNTIME_HOME}={}", self.home.display());
        let me = std::process::id() as i32;
        let mut pids = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if pid == me || !process_alive(pid) {
                continue;
            }
            let Ok(environ) = std::fs::read(e.path().join("environ")) else { continue };
            if environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        pids
    }

    /// Spawn `aab mcp` with piped stdio and perform the MCP handshake.
    pub fn mcp(&self) -> Mcp<'_> {
        lock(&self.history).push("aab mcp".to_string());
        let mut cmd = self.command(&["mcp"], &[]);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn aab mcp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("mcp stdout");
        let stderr = PipeReader::new(child.stderr.take().expect("mcp stderr"));
        let (tx, lines) = mpsc::channel();
        let reader = thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match stdout.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let mut mcp = Mcp { env: self, child, stdin, lines, _reader: reader, stderr, next_id: 1, transcript: Vec::new() };
        let init = mcp.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "aab-e2e", "version": "0"},
            }),
        );
        if init.get("result").is_none() {
            mcp.fail(&format!("initialize failed: {init}"));
        }
        mcp.notify("notifications/initialized", json!({}));
        mcp
    }

    /// Stop the runtime and make sure no process of this test survives.
    fn shutdown(&self) {
        if self.endpoint().is_some() || !self.live_processes().is_empty() {
            let _ = self.aab_with_timeout(&["runtime", "--operation", "stop"], &[], Duration::from_secs(20));
        }
        // A runtime that ignored stop (or a second daemon from a lost race) is killed
        // by pid — only processes carrying this test's unique runtime home.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut pids: Vec<i32> = self.live_processes();
        if let Some(pid) = self.runtime_pid()
            && process_alive(pid)
            && !pids.contains(&pid)
            && self.process_has_our_home(pid)
        {
            pids.push(pid);
        }
        while !pids.is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
            pids.retain(|p| process_alive(*p));
        }
        for pid in pids {
            eprintln!("aab-e2e: runtime process {pid} still alive after `runtime --operation stop`; sending SIGKILL");
            // SAFETY: plain syscall on a pid we verified belongs to this test.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    fn process_has_our_home(&self, pid: i32) -> bool {
        let needle = format!("{ENV_RUNTIME_HOME}={}", self.home.display());
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.shutdown();
        if std::env::var_os(ENV_KEEP).is_some_and(|v| v == "1")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("aab-e2e: keeping {}", dir.keep().display());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// True when `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Format: `pid (comm) S ...`; comm may contain spaces and parentheses.
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// Wait until `pid` is gone (or a zombie) with every one of its threads; false on
/// timeout. The leader of a multi-threaded process turns zombie while its other
/// threads are still exiting, and the process's sockets close only when the last
/// thread is gone: a test that acted on "the leader is a zombie" could still reach
/// the dying process's open sockets (and see a reset instead of a refusal).
pub fn wait_for_exit(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_alive(pid) || threads_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Whether any thread of `pid` is neither gone nor a zombie.
fn threads_alive(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat")).ok().and_then(|stat| {
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next())?.to_string();
            Some(state != "Z" && state != "X")
        }) == Some(true)
    })
}

fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n... ({} more bytes)", &s[..end], s.len() - end)
}

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("... ({start} earlier bytes)\n{}", &s[start..])
}

pub fn find_files(dir: &Path, pred: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() && pred(&p) => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

fn list_tree(root: &Path, dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
        match e.metadata() {
            Ok(m) if m.is_dir() => {
                let _ = writeln!(out, "  {rel}/");
                list_tree(root, &p, out);
            }
            Ok(m) => {
                use std::os::unix::fs::PermissionsExt;
                let _ = writeln!(out, "  {rel}  ({} bytes, mode {:o})", m.len(), m.permissions().mode() & 0o7777);
            }
            Err(err) => {
                let _ = writeln!(out, "  {rel}  (<{err}>)");
            }
        }
    }
}

/// A running `aab mcp` speaking newline-delimited JSON-RPC over stdio.
pub struct Mcp<'a> {
    env: &'a TestEnv,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    _reader: JoinHandle<()>,
    stderr: PipeReader,
    next_id: u64,
    /// Every frame sent (`>`) and received (`<`), for the failure report.
    transcript: Vec<String>,
}

impl Mcp<'_> {
    fn send(&mut self, frame: &Value) {
        let line = frame.to_string();
        self.transcript.push(format!("> {line}"));
        let ok = match self.stdin.as_mut() {
            Some(stdin) => stdin.write_all(line.as_bytes()).and_then(|()| stdin.write_all(b"\n")).and_then(|()| stdin.flush()).is_ok(),
            None => false,
        };
        if !ok {
            self.fail("could not write to `aab mcp` stdin (did it exit?)");
        }
    }

    /// Send a notification (no id, no response).
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Send a request and return the whole JSON-RPC response object (with `result`
    /// or `error`). Server-initiated messages in between are recorded and skipped.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + MCP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = line.trim_end().to_string();
                    self.transcript.push(format!("< {line}"));
                    if line.is_empty() {
                        continue;
                    }
                    let frame: Value = match serde_json::from_str(&line) {
                        Ok(v) => v,
                        Err(e) => self.fail(&format!("`aab mcp` wrote a line that is not JSON ({e})")),
                    };
                    if frame.get("id") == Some(&json!(id)) && (frame.get("result").is_some() || frame.get("error").is_some()) {
                        return frame;
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!("no response to `{method}` (id {id}) within {MCP_TIMEOUT:?}")),
                Err(RecvTimeoutError::Disconnected) => self.fail(&format!("`aab mcp` closed stdout before answering `{method}` (id {id})")),
            }
        }
    }

    /// Write raw bytes followed by a newline, as a misbehaving client would.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.transcript.push(format!("> {} ({} bytes)", clip(&String::from_utf8_lossy(bytes), 512), bytes.len()));
        let ok = match self.stdin.as_mut() {
            Some(stdin) => stdin.write_all(bytes).and_then(|()| stdin.write_all(b"\n")).and_then(|()| stdin.flush()).is_ok(),
            None => false,
        };
        if !ok {
            self.fail("could not write to `aab mcp` stdin (did it exit?)");
        }
    }

    /// Every frame the server writes until the response with `id` (included).
    pub fn frames_until(&mut self, id: &Value) -> Vec<Value> {
        let deadline = Instant::now() + MCP_TIMEOUT;
        let mut frames = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let line = line.trim_end().to_string();
                    self.transcript.push(format!("< {}", clip(&line, 4096)));
                    if line.is_empty() {
                        continue;
                    }
                    let frame: Value = match serde_json::from_str(&line) {
                        Ok(v) => v,
                        Err(e) => self.fail(&format!("`aab mcp` wrote a line that is not JSON ({e})")),
                    };
                    let done = frame.get("id") == Some(id) && (frame.get("result").is_some() || frame.get("error").is_some());
                    frames.push(frame);
                    if done {
                        return frames;
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!("no response with id {id} within {MCP_TIMEOUT:?}")),
                Err(RecvTimeoutError::Disconnected) => self.fail(&format!("`aab mcp` closed stdout before answering id {id}")),
            }
        }
    }

    /// Whether the `aab mcp` process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `tools/call NAME ARGS` → (the public reply parsed from the text content, isError).
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> (Value, bool) {
        let response = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let Some(result) = response.get("result") else {
            self.fail(&format!("tools/call {name} returned a JSON-RPC error instead of a tool result: {response}"))
        };
        let text = result.pointer("/content/0/text").and_then(Value::as_str);
        let Some(text) = text else { self.fail(&format!("tools/call {name}: result has no content[0].text: {result}")) };
        let body: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => self.fail(&format!("tools/call {name}: content[0].text is not JSON ({e})")),
        };
        let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
        (body, is_error)
    }

    /// Panic with `what`, the MCP transcript, its stderr and the env report.
    #[track_caller]
    pub fn fail(&self, what: &str) -> ! {
        panic!("\n{what}\n{}", self.report())
    }

    pub fn report(&self) -> String {
        let mut r = String::from("---- aab mcp transcript ----\n");
        for line in &self.transcript {
            let _ = writeln!(r, "{}", clip(line, 4096));
        }
        let _ = writeln!(r, "---- aab mcp stderr ----\n{}", tail(&self.stderr.snapshot(), 8192));
        r.push_str(&self.env.report(None));
        r
    }
}

impl Drop for Mcp<'_> {
    fn drop(&mut self) {
        // EOF on stdin ends the adapter (it must never stop the shared runtime).
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    eprintln!("aab-e2e: `aab mcp` (pid {}) did not exit after stdin EOF; killing it", self.child.id());
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                Ok(None) => thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

// ---------------------------------------------------------------- reply helpers

/// Depth-first search for the first value stored under `key` anywhere in `v`.
pub fn find_key<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// The error facts of a public reply: `execution` first (the contract's public
/// reply), else the top level (a bare error envelope).
pub fn error_facts(body: &Value) -> &Value {
    match body.get("execution") {
        Some(e) if e.get("error").is_some() => e,
        _ => body,
    }
}

/// The error code of a public reply, if it failed.
pub fn error_code(body: &Value) -> Option<&str> {
    error_facts(body).get("error").and_then(Value::as_str)
}

pub fn error_field(body: &Value) -> Option<&str> {
    error_facts(body).get("field").and_then(Value::as_str)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// All files under `dir` (recursively) whose file name is `name`.
pub fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    find_files(dir, &|p| p.file_name().is_some_and(|n| n == name))
}

/// All files under `dir` (recursively).
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    find_files(dir, &|_| true)
}

/// `camelCase` → `kebab-case`, the CLI flag spelling of an argument name.
pub fn kebab(name: &str) -> String {
    name.chars().fold(String::new(), |mut out, c| {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
        out
    })
}

/// `--flag value` pairs for a JSON object of arguments (strings verbatim, other
/// values as JSON), as a person would type them.
pub fn flags(args: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in args.as_object().expect("arguments object") {
        out.push(format!("--{}", kebab(k)));
        out.push(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    out
}
