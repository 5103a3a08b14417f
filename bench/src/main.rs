//! `aab-bench`: measures the host through its public surface and prints figures
//! for docs/PERFORMANCE.md. Nothing here asserts a threshold.
//!
//! Usage (release build of everything first):
//!   cargo build --release --workspace --all-targets
//!   target/release/aab-bench [--calls 200]
//!
//! It runs in a private temp directory: its own runtime home, FactStore dir,
//! ownership dir and plugin dir (the release plugins plus the fixture plugin), and
//! stops the runtime it started.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn main() {
    if let Err(e) = try_main() {
        eprintln!("aab-bench: {e}");
        std::process::exit(1);
    }
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    aab: PathBuf,
    extra: Vec<(&'static str, &'static str)>,
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.aab);
        c.args(args)
            .env("HOME", self.root.join("home"))
            .env("AI_APP_BRIDGE_RUNTIME_HOME", self.root.join("runtimes"))
            .env("AI_APP_BRIDGE_FACT_STORE_DIR", self.root.join("facts"))
            .env("AI_APP_BRIDGE_PLUGIN_DIR", self.root.join("plugins"))
            .env("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", self.root.join("ownership"))
            .current_dir(&self.root);
        for (k, v) in &self.extra {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Result<Value, String> {
        let out = self.command(args).output().map_err(|e| format!("spawn aab: {e}"))?;
        serde_json::from_slice(&out.stdout).map_err(|e| format!("aab {args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }
}

fn stats(name: &str, mut samples: Vec<Duration>) -> Value {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    let (median, p95) = (pick(0.5), pick(0.95));
    println!("{name:<58} median {median:>8.3} ms   p95 {p95:>8.3} ms   (n={})", samples.len());
    json!({"name": name, "medianMs": median, "p95Ms": p95, "n": samples.len()})
}

struct Mcp {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(env: &Env) -> Result<Mcp, String> {
        let mut child = env.command(&["mcp"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().map_err(|e| e.to_string())?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut m = Mcp { child, stdin, stdout, next: 1 };
        m.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "aab-bench", "version": "0"}}))?;
        writeln!(m.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).map_err(|e| e.to_string())?;
        Ok(m)
    }

    fn request(&mut self, method: &str, params: Value) -> Result<(Value, usize), String> {
        let id = self.next;
        self.next += 1;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).map_err(|e| e.to_string())?;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("mcp closed".into());
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if v.get("id") == Some(&json!(id)) {
                return Ok((v, line.trim_end().len()));
            }
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kib(pid: i64) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

fn copy_plugin(from: &Path, to_dir: &Path, name: &str) -> Result<(), String> {
    std::fs::copy(from, to_dir.join(format!("libaab_plugin_{name}.so"))).map(|_| ()).map_err(|e| format!("copy {}: {e}", from.display()))
}

fn try_main() -> Result<(), String> {
    let calls: usize = std::env::args().skip_while(|a| a != "--calls").nth(1).and_then(|n| n.parse().ok()).unwrap_or(200);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe.parent().ok_or("no exe dir")?.to_path_buf();
    let aab = bin_dir.join("aab");
    if !aab.exists() {
        return Err(format!("{} not found: build the workspace first", aab.display()));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().to_path_buf();
    for d in ["home", "runtimes", "facts", "plugins", "ownership"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    let mut plugin_files = Vec::new();
    for p in ["android", "uia", "ios", "wda", "web"] {
        let f = bin_dir.join(format!("libaab_plugin_{p}.so"));
        if f.exists() {
            copy_plugin(&f, &root.join("plugins"), p)?;
            plugin_files.push(root.join("plugins").join(format!("libaab_plugin_{p}.so")));
        }
    }
    let fixture = bin_dir.join("libaab_fixture_fixture.so");
    if !fixture.exists() {
        return Err(format!("{} not found: build with --all-targets / the fixture crate", fixture.display()));
    }
    copy_plugin(&fixture, &root.join("plugins"), "fixture")?;
    let env = Env { _dir: dir, root: root.clone(), aab: aab.clone(), extra: Vec::new() };
    let mut figures = Vec::new();

    // Plugin load time (the host's own loader: version preflight + layout check + manifest).
    let mut load = Vec::new();
    for f in &plugin_files {
        let t = Instant::now();
        let module = aab_plugin_api::loader::load(f).map_err(|e| e.to_string())?;
        module.manifest().map_err(|e| e.to_string())?;
        load.push(t.elapsed());
    }
    if !load.is_empty() {
        figures.push(stats("plugin load (dlopen + ABI check + manifest), per plugin", load));
    }

    env.run(&["runtime", "--operation", "start"])?;
    let status = env.run(&["runtime", "--operation", "status"])?;
    let pid = status.pointer("/value/pid").and_then(Value::as_i64).ok_or("no runtime pid")?;
    std::thread::sleep(Duration::from_millis(300));
    let idle_rss = rss_kib(pid).unwrap_or(0);
    println!("{:<58} {} KiB", "runtime idle RSS (5 plugins + fixture loaded)", idle_rss);

    // CLI round trips with a warm runtime.
    for (label, args) in [
        ("CLI `runtime --operation status` (host-only)", vec!["runtime", "--operation", "status"]),
        ("CLI `fixture-echo` (plugin command via runtime)", vec!["fixture-echo", "--message", "hi"]),
    ] {
        env.run(&args)?;
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let out = env.command(&args).output().map_err(|e| e.to_string())?;
            samples.push(t.elapsed());
            if !out.status.success() {
                return Err(format!("{label}: {}", String::from_utf8_lossy(&out.stdout)));
            }
        }
        figures.push(stats(label, samples));
    }

    // MCP round trips over one stdio session.
    let mut mcp = Mcp::start(&env)?;
    let (tools, tools_bytes) = mcp.request("tools/list", json!({}))?;
    let tool_count = tools.pointer("/result/tools").and_then(Value::as_array).map(|a| a.len()).unwrap_or(0);
    println!("{:<58} {} bytes ({} tools)", "MCP tools/list response", tools_bytes, tool_count);
    let cases = [
        ("MCP run `runtime status` (host-only)", json!({"command": "runtime", "arguments": {"operation": "status"}, "extract": null})),
        ("MCP run `fixture-echo` (plugin, no target lane)", json!({"command": "fixture-echo", "arguments": {"message": "hi"}, "extract": null})),
        ("MCP run `fixture-sleep 0ms` on a lane (admission)", json!({"command": "fixture-sleep", "arguments": {"durationMs": 0, "lane": "a"}, "extract": null})),
        ("MCP run `fixture-sleep 0ms` on a device (journal fsyncs)", json!({"command": "fixture-sleep", "arguments": {"durationMs": 0, "lane": "a", "device": "bench-device"}, "extract": null})),
    ];
    for (label, args) in cases {
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let (reply, _) = mcp.request("tools/call", json!({"name": "run", "arguments": args}))?;
            samples.push(t.elapsed());
            if reply.pointer("/result/isError") != Some(&json!(false)) {
                return Err(format!("{label}: {reply}"));
            }
        }
        figures.push(stats(label, samples));
    }
    drop(mcp);
    let busy_rss = rss_kib(pid).unwrap_or(0);
    println!("{:<58} {} KiB", "runtime RSS after the run", busy_rss);
    env.run(&["runtime", "--operation", "stop"])?;
    figures.extend(isolation_figures(&bin_dir, &aab, calls)?);
    println!("{}", json!({"figures": figures, "idleRssKiB": idle_rss, "afterRssKiB": busy_rss, "toolsListBytes": tools_bytes}));
    Ok(())
}

/// Process isolation: the same plugin command over MCP with the fixture plugin in an
/// `aab plugin-host` child, and the child's restart after a crash (the `crashing`
/// fixture segfaults; the next call starts a new child). A separate runtime with only
/// the two fixture plugins, both isolated through the environment override.
fn isolation_figures(bin_dir: &Path, aab: &Path, calls: usize) -> Result<Vec<Value>, String> {
    let crashing = bin_dir.join("libaab_fixture_crashing.so");
    if !crashing.exists() {
        return Err(format!("{} not found: build the crashing fixture crate", crashing.display()));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().to_path_buf();
    for d in ["home", "runtimes", "facts", "plugins", "ownership"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    copy_plugin(&bin_dir.join("libaab_fixture_fixture.so"), &root.join("plugins"), "fixture")?;
    copy_plugin(&crashing, &root.join("plugins"), "crashing")?;
    let env = Env { _dir: dir, root, aab: aab.to_path_buf(), extra: vec![("AI_APP_BRIDGE_PLUGIN_ISOLATION", "process")] };
    env.run(&["runtime", "--operation", "start"])?;
    let mut figures = Vec::new();
    let mut mcp = Mcp::start(&env)?;
    let run = |mcp: &mut Mcp, args: &Value| -> Result<(Value, Duration), String> {
        let t = Instant::now();
        let (reply, _) = mcp.request("tools/call", json!({"name": "run", "arguments": args}))?;
        Ok((reply, t.elapsed()))
    };
    let echo = json!({"command": "fixture-echo", "arguments": {"message": "hi"}, "extract": null});
    run(&mut mcp, &echo)?;
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (reply, took) = run(&mut mcp, &echo)?;
        if reply.pointer("/result/isError") != Some(&json!(false)) {
            return Err(format!("isolated fixture-echo: {reply}"));
        }
        samples.push(took);
    }
    figures.push(stats("MCP run `fixture-echo`, plugin process-isolated", samples));

    // Restart after a crash: the call after a segfault pays for a new child.
    let crash = json!({"command": "crash", "arguments": {"mode": "segfault", "device": "bench-crash"}, "extract": null});
    let ok = json!({"command": "crash", "arguments": {"mode": "ok", "device": "bench-crash"}, "extract": null});
    let (mut first_calls, mut warm_calls, mut spawn) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = (calls / 10).max(10);
    for _ in 0..rounds {
        let (reply, _) = run(&mut mcp, &crash)?;
        if !reply.to_string().contains("plugin_crashed") {
            return Err(format!("crash: {reply}"));
        }
        let (reply, took) = run(&mut mcp, &ok)?;
        if reply.pointer("/result/isError") != Some(&json!(false)) {
            return Err(format!("crash ok after the crash: {reply}"));
        }
        first_calls.push(took);
        warm_calls.push(run(&mut mcp, &ok)?.1);
        let status = env.run(&["runtime", "--operation", "status"])?;
        let plugins = status.pointer("/value/plugins").and_then(Value::as_array).cloned().unwrap_or_default();
        let us = plugins.iter().find(|p| p.get("name") == Some(&json!("crashing"))).and_then(|p| p.pointer("/process/lastStartUs")).and_then(Value::as_u64).unwrap_or(0);
        spawn.push(Duration::from_micros(us));
    }
    figures.push(stats("plugin child start (spawn + checks + manifest), after a crash", spawn));
    figures.push(stats("MCP run, first call after a crash (includes the restart)", first_calls));
    figures.push(stats("MCP run, next call on the restarted child", warm_calls));
    drop(mcp);
    env.run(&["runtime", "--operation", "stop"])?;
    Ok(figures)
}
