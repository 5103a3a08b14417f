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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod mcp;
use mcp::Mcp;

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
    let mut mcp = Mcp::start(env.command(&["mcp"]), "aab-bench")?;
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

/// A private world (runtime home, FactStore, plugin dir) with the given plugins.
fn fixture_env(bin_dir: &Path, aab: &Path, plugins: &[(&str, &str)], extra: Vec<(&'static str, &'static str)>) -> Result<Env, String> {
    // On tmpfs when there is one: the history fsync of every command (≈ 0.5 ms, very
    // noisy on a shared disk) would otherwise drown the difference being measured.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.map_err(|e| e.to_string())?;
    let root = dir.path().to_path_buf();
    for d in ["home", "runtimes", "facts", "plugins", "ownership"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    for (file, name) in plugins {
        let from = bin_dir.join(file);
        if !from.exists() {
            return Err(format!("{} not found: build the fixture crates", from.display()));
        }
        copy_plugin(&from, &root.join("plugins"), name)?;
    }
    Ok(Env { _dir: dir, root, aab: aab.to_path_buf(), extra })
}

fn mcp_run(mcp: &mut Mcp, args: &Value) -> Result<(Value, Duration), String> {
    let t = Instant::now();
    let (reply, _) = mcp.request("tools/call", json!({"name": "run", "arguments": args}))?;
    Ok((reply, t.elapsed()))
}

/// Process isolation. Per-call overhead: two runtimes with only the fixture plugin,
/// one in-process and one isolated (both on tmpfs), called alternately over MCP so both
/// see the same machine load; the paired difference is the isolation cost. Restart: the `crashing`
/// fixture segfaults, the next call starts a new child.
fn isolation_figures(bin_dir: &Path, aab: &Path, calls: usize) -> Result<Vec<Value>, String> {
    let fixture = ("libaab_fixture_fixture.so", "fixture");
    let crashing = ("libaab_fixture_crashing.so", "crashing");
    let inproc = fixture_env(bin_dir, aab, &[fixture], vec![("AI_APP_BRIDGE_PLUGIN_ISOLATION", "in-process")])?;
    let isolated = fixture_env(bin_dir, aab, &[fixture, crashing], vec![("AI_APP_BRIDGE_PLUGIN_ISOLATION", "process")])?;
    let mut figures = Vec::new();
    for env in [&inproc, &isolated] {
        env.run(&["runtime", "--operation", "start"])?;
    }
    let mut a = Mcp::start(inproc.command(&["mcp"]), "aab-bench")?;
    let mut b = Mcp::start(isolated.command(&["mcp"]), "aab-bench")?;
    let echo = json!({"command": "fixture-echo", "arguments": {"message": "hi"}, "extract": null});
    for m in [&mut a, &mut b] {
        mcp_run(m, &echo)?;
    }
    let (mut in_samples, mut iso_samples, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..calls {
        // Alternate which one goes first, so neither always runs right after the other.
        let order: [&mut Mcp; 2] = if i % 2 == 0 { [&mut a, &mut b] } else { [&mut b, &mut a] };
        let mut took = [Duration::ZERO; 2];
        for (slot, m) in order.into_iter().enumerate() {
            let (reply, t) = mcp_run(m, &echo)?;
            if reply.pointer("/result/isError") != Some(&json!(false)) {
                return Err(format!("fixture-echo: {reply}"));
            }
            took[slot] = t;
        }
        let (t_in, t_iso) = if i % 2 == 0 { (took[0], took[1]) } else { (took[1], took[0]) };
        in_samples.push(t_in);
        iso_samples.push(t_iso);
        diffs.push((t_iso.as_secs_f64() - t_in.as_secs_f64()) * 1000.0);
    }
    figures.push(stats("MCP run `fixture-echo`, in-process (A/B pair)", in_samples));
    figures.push(stats("MCP run `fixture-echo`, process-isolated (A/B pair)", iso_samples));
    diffs.sort_by(|x, y| x.total_cmp(y));
    let median_diff = diffs[diffs.len() / 2];
    println!("{:<58} median {median_diff:>8.3} ms   (paired, n={})", "isolation overhead per call (isolated - in-process)", diffs.len());
    figures.push(json!({"name": "isolation overhead per call", "medianMs": median_diff, "n": diffs.len()}));
    drop(a);

    // Restart after a crash: the call after a segfault pays for a new child.
    let crash = json!({"command": "crash", "arguments": {"mode": "segfault"}, "extract": null});
    let ok = json!({"command": "crash", "arguments": {"mode": "ok"}, "extract": null});
    let (mut first_calls, mut warm_calls, mut spawn) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = (calls / 10).max(10);
    for _ in 0..rounds {
        let (reply, _) = mcp_run(&mut b, &crash)?;
        if !reply.to_string().contains("plugin_crashed") {
            return Err(format!("crash: {reply}"));
        }
        let (reply, took) = mcp_run(&mut b, &ok)?;
        if reply.pointer("/result/isError") != Some(&json!(false)) {
            return Err(format!("crash ok after the crash: {reply}"));
        }
        first_calls.push(took);
        warm_calls.push(mcp_run(&mut b, &ok)?.1);
        let status = isolated.run(&["runtime", "--operation", "status"])?;
        let plugins = status.pointer("/value/plugins").and_then(Value::as_array).cloned().unwrap_or_default();
        let us = plugins.iter().find(|p| p.get("name") == Some(&json!("crashing"))).and_then(|p| p.pointer("/process/lastStartUs")).and_then(Value::as_u64).unwrap_or(0);
        spawn.push(Duration::from_micros(us));
    }
    figures.push(stats("plugin child start (spawn + checks + manifest), after a crash", spawn));
    figures.push(stats("MCP run, first call after a crash (includes the restart)", first_calls));
    figures.push(stats("MCP run, next call on the restarted child", warm_calls));
    drop(b);
    for env in [&inproc, &isolated] {
        env.run(&["runtime", "--operation", "stop"])?;
    }
    Ok(figures)
}
