//! `aab-bench-android`: Android figures for docs/PERFORMANCE.md, side by side in one
//! run against the simulated phone (`aab-android-sim`, scenario
//! bench/android/scenario.json) behind a private real adb server:
//!   - `status` round trips through the aab CLI (a process per call) and MCP (one session);
//!   - adb transport: one device service over the adb server's port protocol (what the
//!     Android plugin does: a connection, `host:transport:S`, a `shell,v2` service)
//!     vs spawning `adb -s S shell …` per call;
//!   - element listing of the same screens (a 5-control form, a 500-node list) through
//!     aab `tree` and mobile-mcp's `mobile_list_elements_on_screen`, and a screenshot
//!     through aab `screenshot` and mobile-mcp's `mobile_take_screenshot` — aab's side
//!     only for the commands this build advertises (a clear line otherwise).
//!
//! Nothing here asserts a threshold.
//!
//! Usage (as root; adb, busybox-static, node; release build first):
//!   cargo build --release -p aab-cli -p aab-plugin-android -p aab-plugin-web -p aab-android-sim -p aab-bench
//!   (cd bench/mobile-mcp && npm install)  # or let the bench run it when missing
//!   target/release/aab-bench-android [--calls 100] [--json FILE] [--actions | --h5 | --install]
//!
//! `--actions` measures the Android actions instead (src/android_actions.rs), `--h5`
//! the WebView path against the Web provider on the same page (src/android_h5.rs),
//! `--install` install-apk and permission-dialog against adb install and a blind tap
//! (src/android_install.rs).
//!
//! mobile-mcp runs with MOBILEMCP_LEGACY_ROBOT=1: its adb robot (`uiautomator dump`,
//! `screencap`, `input` over `adb`). Its default robot first waits ~5 s for an
//! on-device agent (`localabstract:mobilecli-server`, started with app_process) that a
//! simulated phone cannot run, then falls back to the same adb commands.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod android_actions;
mod android_h5;
mod android_install;
mod mcp;
use mcp::Mcp;

const PKG: &str = "com.example.aab.bench";

fn main() {
    let mut world = None;
    let code = match try_main(&mut world) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("aab-bench-android: {e}");
            1
        }
    };
    if let Some(mut w) = world.take() {
        w.stop();
        // `exit` runs no destructors: the temp dir goes now.
        drop(w);
    }
    std::process::exit(code);
}

fn stats(rows: &mut Vec<Value>, name: &str, mut samples: Vec<Duration>, bytes: Option<usize>) {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    let (median, p95) = (pick(0.5), pick(0.95));
    let size = bytes.map(|b| format!("   {b:>8} bytes")).unwrap_or_default();
    println!("{name:<66} median {median:>8.3} ms   p95 {p95:>8.3} ms   (n={}){size}", samples.len());
    rows.push(json!({"name": name, "medianMs": median, "p95Ms": p95, "n": samples.len(), "bytes": bytes}));
}

fn skip(rows: &mut Vec<Value>, name: &str, why: &str) {
    println!("{name:<66} skipped: {why}");
    rows.push(json!({"name": name, "skipped": why}));
}

/// The private world: temp dir, simulator, adb server; everything started here is
/// stopped by `stop` (also on errors).
struct World {
    dir: tempfile::TempDir,
    bin: PathBuf,
    adb_port: u16,
    serial: String,
    sim: Option<Child>,
    control: (SocketAddr, String),
    runtime_started: bool,
    /// Marks every process this bench starts (and their children): `stop` ends the
    /// ones still alive, e.g. a daemon mobile-mcp's helpers may leave.
    marker: String,
}

fn free_port() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !(5037..=5585).contains(&port) {
            return port;
        }
    }
}

impl World {
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn env(&self, c: &mut Command) {
        let root = self.dir.path();
        c.env("HOME", self.home())
            .env("ANDROID_ADB_SERVER_PORT", self.adb_port.to_string())
            .env_remove("ADB_SERVER_SOCKET")
            .env_remove("ANDROID_HOME")
            .env("AI_APP_BRIDGE_RUNTIME_HOME", root.join("runtimes"))
            .env("AI_APP_BRIDGE_FACT_STORE_DIR", root.join("facts"))
            .env("AI_APP_BRIDGE_PLUGIN_DIR", root.join("plugins"))
            .env("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", root.join("ownership"))
            .env("AAB_BENCH_ANDROID", &self.marker)
            .current_dir(root);
    }

    fn aab(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.bin.join("aab"));
        c.args(args);
        self.env(&mut c);
        c
    }

    fn aab_json(&self, args: &[&str]) -> Result<(Value, usize), String> {
        let out = self.aab(args).stderr(Stdio::null()).output().map_err(|e| format!("spawn aab: {e}"))?;
        let v = serde_json::from_slice(&out.stdout).map_err(|e| format!("aab {args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))?;
        Ok((v, out.stdout.len()))
    }

    fn adb(&self, args: &[&str]) -> Result<String, String> {
        let mut c = Command::new("adb");
        c.arg("-P").arg(self.adb_port.to_string()).args(args);
        self.env(&mut c);
        let out = c.stdin(Stdio::null()).output().map_err(|e| format!("adb: {e} (apt-get install adb)"))?;
        if !out.status.success() {
            return Err(format!("adb {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn control(&self, mut req: Value) -> Result<Value, String> {
        req["token"] = json!(self.control.1);
        let mut s = TcpStream::connect(self.control.0).map_err(|e| e.to_string())?;
        s.write_all(format!("{req}\n").as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
        if v["ok"] != json!(true) {
            return Err(format!("control {req}: {v}"));
        }
        Ok(v)
    }

    fn start(bin: &Path) -> Result<World, String> {
        for (what, p) in [("aab", bin.join("aab")), ("aab-android-sim", bin.join("aab-android-sim")), ("the Android plugin", bin.join("libaab_plugin_android.so"))] {
            if !p.exists() {
                return Err(format!("{what} not found at {}: build it first", p.display()));
            }
        }
        let dir = tempfile::Builder::new().prefix("aab-bench-android-").tempdir().map_err(|e| e.to_string())?;
        for sub in ["home", "runtimes", "facts", "plugins", "ownership"] {
            std::fs::create_dir_all(dir.path().join(sub)).map_err(|e| e.to_string())?;
        }
        std::fs::copy(bin.join("libaab_plugin_android.so"), dir.path().join("plugins/libaab_plugin_android.so")).map_err(|e| e.to_string())?;
        if std::env::args().any(|a| a == "--h5") {
            // `--h5` compares with the Web provider on the same page.
            std::fs::copy(bin.join("libaab_plugin_web.so"), dir.path().join("plugins/libaab_plugin_web.so")).map_err(|e| format!("the Web plugin: {e}"))?;
        }
        let marker = dir.path().display().to_string();
        let mut w = World { dir, bin: bin.to_path_buf(), adb_port: free_port(), serial: String::new(), sim: None, control: (SocketAddr::from(([127, 0, 0, 1], 0)), String::new()), runtime_started: false, marker };
        let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("android/scenario.json");
        let mut c = Command::new(bin.join("aab-android-sim"));
        c.arg("--scenario").arg(&scenario).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        w.env(&mut c);
        let mut child = c.spawn().map_err(|e| format!("start the simulator: {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line).map_err(|e| e.to_string())?;
        w.sim = Some(child);
        let info: Value = serde_json::from_str(&line).map_err(|_| "the simulator did not start (it needs root, adb and busybox-static)".to_string())?;
        w.control = (info["control"].as_str().and_then(|a| a.parse().ok()).ok_or("no control address")?, info["token"].as_str().unwrap_or_default().to_string());
        w.serial = info["devices"][0]["serial"].as_str().unwrap_or_default().to_string();
        w.adb(&["start-server"])?;
        w.adb(&["connect", &w.serial])?;
        let until = Instant::now() + Duration::from_secs(15);
        while !w.adb(&["devices"])?.lines().any(|l| l.starts_with(&w.serial) && l.ends_with("device")) {
            if Instant::now() > until {
                return Err(format!("{} never came online", w.serial));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(w)
    }

    fn stop(&mut self) {
        if self.runtime_started {
            let _ = self.aab(&["runtime", "--operation", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        let _ = self.adb(&["kill-server"]);
        if let Some(mut child) = self.sim.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever still carries the marker (a helper daemon of a peer tool) ends too.
        let needle = format!("AAB_BENCH_ANDROID={}", self.marker);
        let me = std::process::id().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            if std::fs::read(e.path().join("environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes())) {
                let _ = Command::new("kill").args(["-KILL", &name]).status();
            }
        }
    }
}

/// One device service over the adb server's port protocol, the way the Android
/// plugin opens one: a fresh connection, `host:transport:SERIAL`, then the service;
/// a `shell,v2` service ends with its exit packet. Returns stdout.
fn port_protocol_shell(port: u16, serial: &str, command: &str) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).ok();
    let send = |s: &mut TcpStream, req: &str| -> Result<(), String> {
        s.write_all(format!("{:04x}{req}", req.len()).as_bytes()).map_err(|e| e.to_string())?;
        let mut status = [0u8; 4];
        s.read_exact(&mut status).map_err(|e| e.to_string())?;
        if &status != b"OKAY" {
            return Err(format!("{req}: {}", String::from_utf8_lossy(&status)));
        }
        Ok(())
    };
    send(&mut s, &format!("host:transport:{serial}"))?;
    send(&mut s, &format!("shell,v2,raw:{command}"))?;
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        s.read_exact(&mut head).map_err(|e| e.to_string())?;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).map_err(|e| e.to_string())?;
        match head[0] {
            1 => out.extend_from_slice(&body),
            3 => return if body.first() == Some(&0) { Ok(out) } else { Err(format!("{command}: exit {:?}", body.first())) },
            _ => {}
        }
    }
}

/// A device service the phone answers without starting a process: `sync:` with one
/// STAT of a path, then QUIT — the transport's own cost per device service.
fn port_protocol_stat(port: u16, serial: &str, path: &str) -> Result<u32, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_nodelay(true).ok();
    for req in [format!("host:transport:{serial}"), "sync:".to_string()] {
        s.write_all(format!("{:04x}{req}", req.len()).as_bytes()).map_err(|e| e.to_string())?;
        let mut status = [0u8; 4];
        s.read_exact(&mut status).map_err(|e| e.to_string())?;
        if &status != b"OKAY" {
            return Err(format!("{req}: {}", String::from_utf8_lossy(&status)));
        }
    }
    let mut req = b"STAT".to_vec();
    req.extend_from_slice(&(path.len() as u32).to_le_bytes());
    req.extend_from_slice(path.as_bytes());
    s.write_all(&req).map_err(|e| e.to_string())?;
    let mut reply = [0u8; 16];
    s.read_exact(&mut reply).map_err(|e| e.to_string())?;
    if &reply[..4] != b"STAT" {
        return Err(format!("sync STAT {path}: {:?}", &reply[..4]));
    }
    s.write_all(b"QUIT\0\0\0\0").map_err(|e| e.to_string())?;
    Ok(u32::from_le_bytes([reply[4], reply[5], reply[6], reply[7]]))
}

fn try_main(world: &mut Option<World>) -> Result<(), String> {
    let arg = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let calls: usize = arg("--calls").and_then(|n| n.parse().ok()).unwrap_or(100);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no exe dir")?.to_path_buf();
    let w = world.insert(World::start(&bin)?);
    let mut rows = Vec::new();
    println!("aab-bench-android: {} on a private adb server (port {}), {calls} calls per figure, {}", w.serial, w.adb_port, bin.display());

    // ---- status: CLI (process per call) and MCP (one session)
    w.runtime_started = true;
    let (started, _) = w.aab_json(&["runtime", "--operation", "start"])?;
    if started["execution"]["ok"] != json!(true) {
        return Err(format!("runtime start: {started}"));
    }
    let (first, _) = w.aab_json(&["status", "--package-name", PKG])?;
    if first["execution"]["ok"] != json!(true) {
        return Err(format!("status: {first}"));
    }
    if std::env::args().any(|a| a == "--h5") {
        let mut aab = Mcp::start(w.aab(&["mcp"]), "aab-bench-android")?;
        android_h5::run_h5(w, calls, &mut rows, &mut aab)?;
        return write_json(arg("--json"), calls, w, &bin, &rows);
    }
    if std::env::args().any(|a| a == "--install") {
        let mut aab = Mcp::start(w.aab(&["mcp"]), "aab-bench-android")?;
        android_install::run_install(w, calls, &mut rows, &mut aab)?;
        return write_json(arg("--json"), calls, w, &bin, &rows);
    }
    if std::env::args().any(|a| a == "--actions") {
        let mut aab = Mcp::start(w.aab(&["mcp"]), "aab-bench-android")?;
        let mut mobile = mobile_mcp(w)?;
        android_actions::run_actions(w, calls, &mut rows, &mut aab, mobile.as_mut())?;
        return write_json(arg("--json"), calls, w, &bin, &rows);
    }
    let mut samples = Vec::new();
    let mut bytes = 0;
    for _ in 0..calls {
        let t = Instant::now();
        let (v, n) = w.aab_json(&["status", "--package-name", PKG])?;
        samples.push(t.elapsed());
        bytes = n;
        if v["execution"]["ok"] != json!(true) {
            return Err(format!("status: {v}"));
        }
    }
    stats(&mut rows, "aab status via CLI (a process per call)", samples, Some(bytes));
    let mut aab_mcp = Mcp::start(w.aab(&["mcp"]), "aab-bench-android")?;
    // A command whose execution succeeded counts, also when its reply went over the
    // output budget and was delivered by reference (`isError` then, exit code 2).
    let run = |m: &mut Mcp, command: &str, arguments: Value| -> Result<(Value, usize), String> {
        let (v, n) = m.request("tools/call", json!({"name": "run", "arguments": {"command": command, "arguments": arguments, "extract": null}}))?;
        let r = &v["result"];
        let body: Value = r["structuredContent"].clone();
        let body = if body.is_null() { serde_json::from_str(r["content"][0]["text"].as_str().unwrap_or("null")).unwrap_or(Value::Null) } else { body };
        if body["execution"]["ok"] != json!(true) {
            return Err(format!("{command}: {}", v.to_string().chars().take(2000).collect::<String>()));
        }
        Ok((body, n))
    };
    let mut samples = Vec::new();
    for _ in 0..calls {
        let t = Instant::now();
        let (_, n) = run(&mut aab_mcp, "status", json!({"packageName": PKG}))?;
        samples.push(t.elapsed());
        bytes = n;
    }
    stats(&mut rows, "aab status via MCP (one session)", samples, Some(bytes));

    // ---- adb transport: one device service, port protocol vs a spawned adb
    let mut samples = Vec::new();
    for _ in 0..calls * 2 {
        let t = Instant::now();
        let mode = port_protocol_stat(w.adb_port, &w.serial, "/system/bin/sh")?;
        samples.push(t.elapsed());
        if mode == 0 {
            return Err("sync STAT /system/bin/sh: not found".into());
        }
    }
    stats(&mut rows, "port protocol: sync STAT (no process on the phone)", samples, None);
    for (label, command) in [("echo ok", "echo ok"), ("getprop ro.product.model", "getprop ro.product.model")] {
        let mut samples = Vec::new();
        for _ in 0..calls * 2 {
            let t = Instant::now();
            let out = port_protocol_shell(w.adb_port, &w.serial, command)?;
            samples.push(t.elapsed());
            if out.is_empty() {
                return Err(format!("{command}: no output"));
            }
        }
        stats(&mut rows, &format!("port protocol: shell,v2 `{label}`"), samples, None);
        let mut samples = Vec::new();
        for _ in 0..(calls / 2).max(10) {
            let t = Instant::now();
            let out = w.adb(&["-s", &w.serial, "shell", command])?;
            samples.push(t.elapsed());
            if out.is_empty() {
                return Err(format!("adb shell {command}: no output"));
            }
        }
        stats(&mut rows, &format!("spawn `adb -s S shell {label}`"), samples, None);
    }

    // ---- element listing and screenshot: aab vs mobile-mcp, same screens
    let advertised = |w: &World, command: &str| w.aab_json(&["--help", command]).is_ok_and(|(v, _)| v["ok"] != json!(false) && v.get("execution").is_none_or(|e| e["ok"] != json!(false)));
    let has_tree = advertised(w, "tree");
    let has_screenshot = advertised(w, "screenshot");
    let mut mobile = mobile_mcp(w)?;
    for (screen, tap) in [("form (5 controls)", None), ("list (500 nodes)", Some((540, 990)))] {
        if let Some((x, y)) = tap {
            w.control(json!({"op": "tap", "x": x, "y": y}))?;
            let state = w.control(json!({"op": "state"}))?;
            let app = state["apps"].as_array().and_then(|a| a.iter().find(|a| a["package"] == json!(PKG)).cloned()).unwrap_or_default();
            if app["screen"] != json!("list") {
                return Err(format!("the list screen did not open: {app}"));
            }
        }
        if has_tree {
            for (variant, args) in [("full nodes", json!({"packageName": PKG})), ("compact", json!({"packageName": PKG, "compact": true}))] {
                let mut samples = Vec::new();
                let mut nodes = 0;
                let mut delivery = String::new();
                for _ in 0..calls {
                    let t = Instant::now();
                    let (body, n) = run(&mut aab_mcp, "tree", args.clone())?;
                    samples.push(t.elapsed());
                    bytes = n;
                    nodes = body["value"]["nodes"].as_array().map_or_else(|| body["execution"]["matched"].as_u64().unwrap_or(0) as usize, Vec::len);
                    delivery = match body["delivery"]["status"].as_str() {
                        Some("reference") => format!(" — over the reply budget ({} bytes): delivered by reference", body["delivery"]["attemptedBytes"]),
                        _ => String::new(),
                    };
                }
                stats(&mut rows, &format!("aab tree ({variant}) via MCP, {screen}: {nodes} nodes{delivery}"), samples, Some(bytes));
            }
        } else {
            skip(&mut rows, &format!("aab tree via MCP, {screen}"), "`tree` is not advertised by this build");
        }
        if let Some(m) = mobile.as_mut() {
            let mut samples = Vec::new();
            let mut lines = 0;
            for _ in 0..calls {
                let t = Instant::now();
                let (r, n) = m.tool("mobile_list_elements_on_screen", json!({"device": w.serial}))?;
                samples.push(t.elapsed());
                bytes = n;
                lines = r["content"][0]["text"].as_str().unwrap_or("").lines().count().saturating_sub(1);
            }
            stats(&mut rows, &format!("mobile-mcp mobile_list_elements_on_screen, {screen}: {lines} elements"), samples, Some(bytes));
        }
    }
    let shots = (calls / 4).max(5);
    if has_screenshot {
        let mut samples = Vec::new();
        for _ in 0..shots {
            let t = Instant::now();
            let (_, n) = run(&mut aab_mcp, "screenshot", json!({"packageName": PKG}))?;
            samples.push(t.elapsed());
            bytes = n;
        }
        stats(&mut rows, "aab screenshot via MCP (1080x2400)", samples, Some(bytes));
    } else {
        skip(&mut rows, "aab screenshot via MCP", "`screenshot` is not advertised by this build");
    }
    if let Some(m) = mobile.as_mut() {
        let mut samples = Vec::new();
        for _ in 0..shots {
            let t = Instant::now();
            let (_, n) = m.tool("mobile_take_screenshot", json!({"device": w.serial}))?;
            samples.push(t.elapsed());
            bytes = n;
        }
        stats(&mut rows, "mobile-mcp mobile_take_screenshot (1080x2400)", samples, Some(bytes));
    }
    drop(mobile);
    drop(aab_mcp);
    write_json(arg("--json"), calls, w, &bin, &rows)
}

fn write_json(path: Option<String>, calls: usize, w: &World, bin: &Path, rows: &[Value]) -> Result<(), String> {
    if let Some(path) = path {
        let doc = json!({"calls": calls, "serial": w.serial, "bin": bin, "results": rows});
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap_or_default()).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// mobile-mcp as an MCP session on this world's adb server (installed on first use);
/// `None` (and a line saying so) when it cannot be installed.
fn mobile_mcp(w: &World) -> Result<Option<Mcp>, String> {
    let mm_index = Path::new(env!("CARGO_MANIFEST_DIR")).join("mobile-mcp/node_modules/@mobilenext/mobile-mcp/lib/index.js");
    if !mm_index.exists() {
        // The bench's own setup: the pinned version from package-lock.json.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("mobile-mcp");
        println!("installing mobile-mcp (npm ci in {})", dir.display());
        // `npm install` rather than `npm ci`: npm writes a lockfile with only this
        // machine's platform build of mobile-mcp's optional native helper, which `npm ci`
        // then refuses as out of sync; `install` keeps the locked versions and fills in
        // the platform entry.
        let _ = Command::new("npm").args(["install", "--no-audit", "--no-fund"]).current_dir(&dir).stdout(Stdio::null()).status();
    }
    Ok(if mm_index.exists() {
        let mut c = Command::new("node");
        c.arg(&mm_index);
        w.env(&mut c);
        c.env("MOBILEMCP_LEGACY_ROBOT", "1");
        Some(Mcp::start(c, "aab-bench-android")?)
    } else {
        println!("mobile-mcp skipped: not installed ({}) and `npm install` in bench/mobile-mcp failed", mm_index.display());
        None
    })
}
