//! `aab-bench-grid`: Selenium Grid 4 figures for docs/PERFORMANCE.md, in one run
//! against a real grid (hub + 2 nodes, 4 Chromium slots each, all on 127.0.0.1):
//!   (a) click throughput with 1, 2 and 8 parallel executor sessions through aab
//!       (`web-executor --operation act`, a CSS selector, no snapshotId: one
//!       self-contained call per click). Each session is its own `aab mcp`
//!       process with a caller-chosen `sessionId` (its own admission lane and
//!       ownership journal), all against one private runtime;
//!   (b) what aab adds per click: the same click sent straight through
//!       `aab_webdriver` (find element + click, nothing verified) beside
//!       web-executor's act, one session, and how many WebDriver HTTP requests one
//!       act makes (counted by a small forwarding proxy in front of the hub).
//!
//! Ground truth is the bench's own page server: the page's button sends
//! `GET /hit?s=<session>&n=<click number in this page>` on every click, and after
//! each series every session must have logged exactly the clicks it made, each
//! number once (none lost, none doubled). A mismatch aborts the run. Nothing here
//! asserts a threshold.
//!
//! Usage (release build first):
//!   cargo build --release -p aab-cli -p aab-plugin-web -p aab-bench
//!   target/release/aab-bench-grid [--actions 30] [--json bench/grid/results-release.json]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use aab_webdriver::servers::{self, Grid};
use serde_json::{Value, json};

mod mcp;
mod world;
use mcp::{Mcp, run_command};

/// Untimed clicks per session before each timed series (page, lane and pool warm).
const WARM: usize = 3;
/// Acts counted through the proxy per variant.
const COUNTED: usize = 10;
const NODES: usize = 2;
const SLOTS_PER_NODE: usize = 4;
const BUDGET: Duration = Duration::from_secs(60);

fn main() {
    let code = match try_main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("aab-bench-grid: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median and p90 in milliseconds.
fn summary(samples: &[Duration]) -> (f64, f64) {
    let mut s = samples.to_vec();
    s.sort();
    let pick = |q: f64| ms(s[((s.len() as f64 - 1.0) * q).round() as usize]);
    (pick(0.5), pick(0.9))
}

// ------------------------------------------------------------------ page server

/// The ground truth: every `/hit` the pages sent, by session, in arrival order.
struct PageServer {
    port: u16,
    hits: Arc<Mutex<HashMap<String, Vec<u64>>>>,
    stop: Arc<AtomicBool>,
}

impl PageServer {
    fn start() -> Result<PageServer, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let hits: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let h = h.clone();
                std::thread::spawn(move || serve_page(conn, &h));
            }
        });
        Ok(PageServer { port, hits, stop })
    }

    fn url(&self, session: &str) -> String {
        format!("http://127.0.0.1:{}/page?s={session}", self.port)
    }

    fn hits(&self, session: &str) -> Vec<u64> {
        lock(&self.hits).get(session).cloned().unwrap_or_default()
    }

    /// Waits until `session` logged `want` hits (a click's request may still be
    /// in flight when its act returns), then a little longer to catch doubles,
    /// and checks that the numbers are exactly 1..=want.
    fn verify(&self, session: &str, want: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.hits(session).len() < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(150));
        let mut got = self.hits(session);
        got.sort_unstable();
        let expected: Vec<u64> = (1..=want as u64).collect();
        if got != expected {
            return Err(format!("session {session}: the page server logged clicks {got:?}, expected each of 1..={want} exactly once"));
        }
        Ok(())
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>aab grid bench</title></head>
<body><h1>Grid bench</h1>
<button id="hit" type="button">Hit</button> <span id="count" role="status">0</span>
<script>
var clicks = 0, session = new URLSearchParams(location.search).get('s');
document.getElementById('hit').addEventListener('click', function () {
  clicks += 1;
  document.getElementById('count').textContent = String(clicks);
  fetch('/hit?s=' + encodeURIComponent(session) + '&n=' + clicks, {cache: 'no-store', keepalive: true});
});
</script></body></html>
"#;

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn serve_page(conn: TcpStream, hits: &Mutex<HashMap<String, Vec<u64>>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut out = conn;
    loop {
        let Ok(Some((start, _headers))) = read_head(&mut reader) else { return };
        let target = start.split_whitespace().nth(1).unwrap_or("/").to_string();
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        let (status, ctype, body): (&str, &str, &str) = match path {
            "/page" => ("200 OK", "text/html; charset=utf-8", PAGE),
            "/hit" => {
                if let (Some(s), Some(n)) = (query_param(query, "s"), query_param(query, "n").and_then(|n| n.parse::<u64>().ok())) {
                    lock(hits).entry(s.to_string()).or_default().push(n);
                }
                ("204 No Content", "text/plain", "")
            }
            _ => ("404 Not Found", "text/plain", "not found"),
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\r\n", body.len());
        if out.write_all(head.as_bytes()).and_then(|_| out.write_all(body.as_bytes())).is_err() {
            return;
        }
    }
}

// ------------------------------------------------------------------ HTTP framing (page server + proxy)

/// The start line and headers of one HTTP/1.1 message, at most 64 KiB; `None` at EOF.
fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<(String, Vec<(String, String)>)>> {
    let mut start = String::new();
    if r.read_line(&mut start)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    let mut total = start.len();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line)?;
        total += n;
        if n == 0 || total > 64 * 1024 {
            return Err(std::io::Error::other("header section too long or cut"));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    Ok(Some((start.trim_end().to_string(), headers)))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Copies one message body framed by `headers` from `r` to `w`, capped at
/// 256 MiB. Returns false when the body ran to EOF (the connection is done).
fn relay_body(headers: &[(String, String)], no_body: bool, r: &mut impl BufRead, w: &mut impl Write) -> std::io::Result<bool> {
    const CAP: u64 = 256 * 1024 * 1024;
    if no_body {
        return Ok(true);
    }
    if let Some(len) = header(headers, "content-length").and_then(|v| v.parse::<u64>().ok()) {
        if len > CAP {
            return Err(std::io::Error::other("body over the cap"));
        }
        let copied = std::io::copy(&mut r.take(len), w)?;
        return if copied == len { Ok(true) } else { Err(std::io::Error::other("body cut short")) };
    }
    if header(headers, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        let mut total = 0u64;
        loop {
            let mut size_line = String::new();
            if r.read_line(&mut size_line)? == 0 {
                return Err(std::io::Error::other("chunked body cut short"));
            }
            w.write_all(size_line.as_bytes())?;
            let size = u64::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16).map_err(|_| std::io::Error::other("bad chunk size"))?;
            total += size;
            if total > CAP {
                return Err(std::io::Error::other("body over the cap"));
            }
            if size == 0 {
                // Trailers up to the empty line.
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line)? == 0 {
                        return Ok(false);
                    }
                    w.write_all(line.as_bytes())?;
                    if line.trim_end_matches(['\r', '\n']).is_empty() {
                        return Ok(true);
                    }
                }
            }
            std::io::copy(&mut r.take(size + 2), w)?;
        }
    }
    // Close-delimited.
    std::io::copy(&mut r.take(CAP), w)?;
    Ok(false)
}

// ------------------------------------------------------------------ counting proxy

/// One forwarded request: `METHOD /session/:id/...`, the session id it named,
/// and how long the hub took (request sent upstream → reply fully relayed).
type Logged = (String, String, Duration);

/// Forwards HTTP/1.1 to the hub, one upstream connection per request, and logs
/// every request.
struct CountingProxy {
    port: u16,
    log: Arc<Mutex<Vec<Logged>>>,
    stop: Arc<AtomicBool>,
}

/// `/session/<id>/element/<eid>/click` → (`/session/:id/element/:el/click`, id).
fn normalise(path: &str) -> (String, String) {
    let segs: Vec<&str> = path.split('?').next().unwrap_or("").split('/').collect();
    let mut out = Vec::new();
    let mut session = String::new();
    let mut i = 0;
    while i < segs.len() {
        out.push(segs[i].to_string());
        if (segs[i] == "session" || segs[i] == "element" || segs[i] == "shadow") && i + 1 < segs.len() && segs[i + 1] != "active" {
            if segs[i] == "session" {
                session = segs[i + 1].to_string();
                out.push(":id".into());
            } else {
                out.push(":el".into());
            }
            i += 1;
        }
        i += 1;
    }
    (out.join("/"), session)
}

impl CountingProxy {
    fn start(upstream: u16) -> Result<CountingProxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let log: Arc<Mutex<Vec<Logged>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let l = l.clone();
                std::thread::spawn(move || {
                    let _ = proxy_connection(conn, upstream, &l);
                });
            }
        });
        Ok(CountingProxy { port, log, stop })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests logged so far that named `session`, with their hub time.
    fn for_session(&self, session: &str) -> Vec<(String, Duration)> {
        lock(&self.log).iter().filter(|(_, s, _)| s == session).map(|(c, _, d)| (c.clone(), *d)).collect()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn proxy_connection(client: TcpStream, upstream: u16, log: &Mutex<Vec<Logged>>) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut to_client = client;
    loop {
        let Some((start, headers)) = read_head(&mut from_client)? else { return Ok(()) };
        let mut parts = start.split_whitespace();
        let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let (command, session) = normalise(&target);
        let sent = Instant::now();
        let up = TcpStream::connect(("127.0.0.1", upstream))?;
        up.set_read_timeout(Some(Duration::from_secs(120)))?;
        let mut to_up = std::io::BufWriter::new(up.try_clone()?);
        let mut from_up = BufReader::new(up);
        write!(to_up, "{start}\r\n")?;
        for (k, v) in headers.iter().filter(|(k, _)| k != "connection") {
            write!(to_up, "{k}: {v}\r\n")?;
        }
        write!(to_up, "connection: close\r\n\r\n")?;
        // A request without a length or chunked framing has no body.
        let request_body = header(&headers, "content-length").is_some() || header(&headers, "transfer-encoding").is_some();
        relay_body(&headers, !request_body, &mut from_client, &mut to_up)?;
        to_up.flush()?;
        let Some((status_line, rheaders)) = read_head(&mut from_up)? else { return Err(std::io::Error::other("no reply upstream")) };
        let status: u16 = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let framed = header(&rheaders, "content-length").is_some() || header(&rheaders, "transfer-encoding").is_some();
        let no_body = method == "HEAD" || status == 204 || status == 304 || (100..200).contains(&status);
        let mut head = format!("{status_line}\r\n");
        for (k, v) in rheaders.iter().filter(|(k, _)| k != "connection") {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        // A close-delimited reply can only be passed on close-delimited.
        head.push_str(if framed || no_body { "\r\n" } else { "connection: close\r\n\r\n" });
        // The whole reply is read before it is passed on, so the log entry exists
        // before the client can see its reply.
        let mut reply = head.into_bytes();
        let more = relay_body(&rheaders, no_body, &mut from_up, &mut reply)?;
        lock(log).push((format!("{method} {command}"), session, sent.elapsed()));
        to_client.write_all(&reply)?;
        to_client.flush()?;
        if !(more && (framed || no_body)) {
            return Ok(());
        }
    }
}

// ------------------------------------------------------------------ the aab world

struct World {
    dir: tempfile::TempDir,
    bin: PathBuf,
    runtime_started: bool,
}

impl World {
    fn new(bin: &Path) -> Result<World, String> {
        for (what, p) in [("aab", bin.join("aab")), ("the web plugin", bin.join("libaab_plugin_web.so"))] {
            if !p.exists() {
                return Err(format!("{what} not found at {}: build it first (cargo build --release -p aab-cli -p aab-plugin-web)", p.display()));
            }
        }
        let dir = tempfile::Builder::new().prefix("aab-bench-grid-").tempdir().map_err(|e| e.to_string())?;
        for sub in ["home", "runtimes", "facts", "plugins", "ownership"] {
            std::fs::create_dir_all(dir.path().join(sub)).map_err(|e| e.to_string())?;
        }
        std::fs::copy(bin.join("libaab_plugin_web.so"), dir.path().join("plugins/libaab_plugin_web.so")).map_err(|e| format!("copy the web plugin: {e}"))?;
        Ok(World { dir, bin: bin.to_path_buf(), runtime_started: false })
    }

    fn aab(&self, args: &[&str]) -> Command {
        world::aab_command(&self.bin, self.dir.path(), args)
    }

    fn start_runtime(&mut self) -> Result<(), String> {
        self.runtime_started = true;
        let out = self.aab(&["runtime", "--operation", "start"]).stderr(Stdio::null()).output().map_err(|e| format!("spawn aab: {e}"))?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if v["execution"]["ok"] != json!(true) {
            return Err(format!("runtime start: {}", String::from_utf8_lossy(&out.stdout)));
        }
        Ok(())
    }

    fn mcp(&self) -> Result<Mcp, String> {
        Mcp::start(self.aab(&["mcp"]), "aab-bench-grid")
    }
}

impl World {
    /// Stops the runtime (its runtime-stop hook closes any executor session still
    /// open) and returns its pid once that process is gone, or why not.
    fn stop_runtime(&mut self) -> Result<Option<u64>, String> {
        if !std::mem::take(&mut self.runtime_started) {
            return Ok(None);
        }
        let out = self.aab(&["runtime", "--operation", "stop"]).stderr(Stdio::null()).output().map_err(|e| format!("spawn aab: {e}"))?;
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let pid = v["value"]["pid"].as_u64().ok_or_else(|| format!("runtime stop: {}", String::from_utf8_lossy(&out.stdout)))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                return Err(format!("the runtime (pid {pid}) still runs 10 s after stop"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(pid))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.stop_runtime();
    }
}

fn exec(m: &mut Mcp, arguments: Value) -> Result<Value, String> {
    let body = run_command(m, "web-executor", arguments)?;
    if body["value"]["ok"] != json!(true) {
        return Err(format!("web-executor: {}", body.to_string().chars().take(2000).collect::<String>()));
    }
    Ok(body["value"].clone())
}

fn open(m: &mut Mcp, session: &str, endpoint: &str, url: &str) -> Result<Value, String> {
    exec(m, json!({"operation": "open", "engine": "webdriver", "endpoint": endpoint, "sessionId": session, "url": url, "viewport": {"width": 1024, "height": 768}}))
}

fn act_css(session: &str) -> Value {
    json!({"operation": "act", "sessionId": session, "action": {"type": "click"}, "selector": {"by": "css", "value": "#hit"}})
}

fn act(m: &mut Mcp, arguments: &Value) -> Result<(), String> {
    let v = exec(m, arguments.clone())?;
    if v["status"] != json!("settled") {
        return Err(format!("act not settled: {v}"));
    }
    Ok(())
}

// ------------------------------------------------------------------ (a) throughput

struct Throughput {
    sessions: usize,
    actions: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    open_ms: Vec<f64>,
}

/// `k` sessions, each its own `aab mcp` process and thread: open, warm up, then
/// `n` timed clicks between two barriers; every click verified afterwards.
fn throughput(world: &World, pages: &PageServer, grid_url: &str, k: usize, n: usize) -> Result<Throughput, String> {
    let start = Arc::new(Barrier::new(k + 1));
    let done = Arc::new(Barrier::new(k + 1));
    let failed = Arc::new(AtomicBool::new(false));
    // Every MCP process first: no thread may wait at a barrier the others never reach.
    let clients = (0..k).map(|_| world.mcp()).collect::<Result<Vec<Mcp>, String>>()?;
    let mut handles = Vec::new();
    for (i, mut m) in clients.into_iter().enumerate() {
        let session = format!("tp{k}-{i}");
        let url = pages.url(&session);
        let grid = grid_url.to_string();
        let (start, done, failed) = (start.clone(), done.clone(), failed.clone());
        handles.push(std::thread::spawn(move || -> Result<(Vec<Duration>, f64), String> {
            let mut run = || -> Result<(Vec<Duration>, f64), String> {
                let t = Instant::now();
                open(&mut m, &session, &grid, &url)?;
                let opened = ms(t.elapsed());
                let a = act_css(&session);
                for _ in 0..WARM {
                    act(&mut m, &a)?;
                }
                Ok((Vec::new(), opened))
            };
            let prepared = run();
            if prepared.is_err() {
                failed.store(true, Ordering::SeqCst);
            }
            start.wait();
            let mut samples = Vec::with_capacity(n);
            let mut outcome = prepared;
            if !failed.load(Ordering::SeqCst) {
                let a = act_css(&session);
                for _ in 0..n {
                    let t = Instant::now();
                    if let Err(e) = act(&mut m, &a) {
                        failed.store(true, Ordering::SeqCst);
                        outcome = Err(e);
                        break;
                    }
                    samples.push(t.elapsed());
                }
            }
            done.wait();
            let closed = exec(&mut m, json!({"operation": "close", "sessionId": session}));
            let (_, opened) = outcome?;
            closed?;
            Ok((samples, opened))
        }));
    }
    start.wait();
    let t0 = Instant::now();
    done.wait();
    let wall = t0.elapsed();
    let mut latencies = Vec::new();
    let mut open_ms = Vec::new();
    let mut errors = Vec::new();
    for h in handles {
        match h.join().map_err(|_| "a session thread panicked".to_string()).and_then(|r| r) {
            Ok((s, o)) => {
                latencies.extend(s);
                open_ms.push(o);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(format!("{k} sessions: {}", errors.join("; ")));
    }
    for i in 0..k {
        pages.verify(&format!("tp{k}-{i}"), WARM + n)?;
    }
    Ok(Throughput { sessions: k, actions: k * n, wall, latencies, open_ms })
}

// ------------------------------------------------------------------ (b) direct clicks

/// The same click straight through `aab_webdriver`: find `#hit`, click it. Nothing
/// checked by the client; the page server counts afterwards.
fn direct_clicks(rt: &tokio::runtime::Runtime, endpoint: &str, page: &str, n: usize) -> Result<(Vec<Duration>, String), String> {
    let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(endpoint).map_err(|e| e.to_string())?);
    rt.block_on(async {
        let s = client.new_session(servers::chromium_capabilities(true), BUDGET).await.map_err(|e| format!("new session: {e}"))?;
        let id = s.id().to_string();
        let run = async {
            s.set_window_rect(1024, 768, BUDGET).await.map_err(|e| e.to_string())?;
            s.navigate(page, BUDGET).await.map_err(|e| e.to_string())?;
            let mut samples = Vec::with_capacity(n);
            for i in 0..WARM + n {
                let t = Instant::now();
                let el = s.find_element("#hit", BUDGET).await.map_err(|e| format!("find: {e}"))?;
                s.click(&el, BUDGET).await.map_err(|e| format!("click: {e}"))?;
                if i >= WARM {
                    samples.push(t.elapsed());
                }
            }
            Ok::<_, String>(samples)
        }
        .await;
        let deleted = s.delete(BUDGET).await.map_err(|e| format!("delete session: {e}"));
        let samples = run?;
        deleted?;
        Ok((samples, id))
    })
}

// ------------------------------------------------------------------ main

fn try_main() -> Result<(), String> {
    let arg = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let n: usize = arg("--actions").and_then(|n| n.parse().ok()).filter(|n| *n > 0).unwrap_or(30);
    let json_out = arg("--json");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no exe dir")?.to_path_buf();
    for p in [bin.join("aab"), bin.join("libaab_plugin_web.so")] {
        if !p.exists() {
            return Err(format!("{} not found: build first (cargo build --release -p aab-cli -p aab-plugin-web -p aab-bench)", p.display()));
        }
    }
    let pages = PageServer::start()?;
    println!("aab-bench-grid: {n} timed clicks per session and series, {WARM} warm-up clicks, binaries from {}", bin.display());

    // The Grid's processes get PR_SET_PDEATHSIG from the thread that spawns them:
    // start it on the main thread, which lives until the end.
    let t = Instant::now();
    let grid = Grid::start(NODES, SLOTS_PER_NODE);
    let grid_start_ms = ms(t.elapsed());
    println!("grid: hub {} + {NODES} nodes x {SLOTS_PER_NODE} slots, up in {grid_start_ms:.0} ms", grid.url());
    let hub_port: u16 = grid.url().rsplit(':').next().and_then(|p| p.parse().ok()).ok_or("grid url has no port")?;
    let proxy = CountingProxy::start(hub_port)?;
    // Declared after the grid: on any early return the runtime stops (closing open
    // executor sessions) while the grid still runs.
    let mut world = World::new(&bin)?;
    world.start_runtime()?;

    // (a) throughput with 1, 2 and 8 sessions.
    let mut series = Vec::new();
    for k in [1usize, 2, 8] {
        let r = throughput(&world, &pages, grid.url(), k, n)?;
        let (med, p90) = summary(&r.latencies);
        println!("throughput: {k} session(s), {} clicks in {:.2} s = {:.2} clicks/s; per click median {med:.1} ms p90 {p90:.1} ms; open {:?} ms", r.actions, r.wall.as_secs_f64(), r.actions as f64 / r.wall.as_secs_f64(), r.open_ms.iter().map(|o| o.round()).collect::<Vec<_>>());
        series.push(r);
    }

    // (b) direct aab_webdriver clicks, then the executor's bound variant (observe once,
    // act by snapshotId + elementId, like a client that reuses an observation).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let (direct, _) = direct_clicks(&rt, grid.url(), &pages.url("direct"), n)?;
    pages.verify("direct", WARM + n)?;
    let (d_med, d_p90) = summary(&direct);
    println!("direct aab_webdriver find+click: median {d_med:.1} ms p90 {d_p90:.1} ms");

    let mut m = world.mcp()?;
    open(&mut m, "bound", grid.url(), &pages.url("bound"))?;
    let observed = exec(&mut m, json!({"operation": "observe", "sessionId": "bound"}))?;
    let hit = observed["controls"].as_array().and_then(|cs| cs.iter().find(|c| c["id"] == json!("hit")).cloned()).ok_or_else(|| format!("observe lists no #hit: {observed}"))?;
    let bound_act = json!({"operation": "act", "sessionId": "bound", "action": {"type": "click"}, "selector": {"by": "elementId", "value": hit["elementId"]}, "snapshotId": observed["snapshotId"]});
    let mut bound = Vec::new();
    for i in 0..WARM + n {
        let t = Instant::now();
        act(&mut m, &bound_act)?;
        if i >= WARM {
            bound.push(t.elapsed());
        }
    }
    exec(&mut m, json!({"operation": "close", "sessionId": "bound"}))?;
    pages.verify("bound", WARM + n)?;
    let (b_med, b_p90) = summary(&bound);
    println!("web-executor act, snapshotId + elementId: median {b_med:.1} ms p90 {b_p90:.1} ms");

    // WebDriver requests per act, counted through the proxy, with the hub's time
    // per request: an act's wall time minus its requests' hub time is aab's own.
    struct Counted {
        total: usize,
        by: BTreeMap<String, usize>,
        act_ms: Vec<Duration>,
        hub_ms: Vec<Duration>,
    }
    let counted = |m: &mut Mcp, session: &str, arguments: &Value| -> Result<Counted, String> {
        let mut c = Counted { total: 0, by: BTreeMap::new(), act_ms: Vec::new(), hub_ms: Vec::new() };
        for _ in 0..COUNTED {
            let before = proxy.for_session(session).len();
            let t = Instant::now();
            act(m, arguments)?;
            c.act_ms.push(t.elapsed());
            let reqs = proxy.for_session(session);
            c.hub_ms.push(reqs[before..].iter().map(|(_, d)| *d).sum());
            c.total += reqs.len() - before;
            for (r, _) in &reqs[before..] {
                *c.by.entry(r.clone()).or_default() += 1;
            }
        }
        Ok(c)
    };
    let logged_before_open = lock(&proxy.log).len();
    let opened = open(&mut m, "counted", &proxy.url(), &pages.url("counted"))?;
    let remote = opened["webdriverSessionId"].as_str().unwrap_or_default().to_string();
    let open_log: Vec<String> = lock(&proxy.log)[logged_before_open..].iter().map(|(c, _, _)| c.clone()).collect();
    let open_requests = open_log.len();
    let css = counted(&mut m, &remote, &act_css("counted"))?;
    let observed = exec(&mut m, json!({"operation": "observe", "sessionId": "counted"}))?;
    let hit = observed["controls"].as_array().and_then(|cs| cs.iter().find(|c| c["id"] == json!("hit")).cloned()).ok_or("observe lists no #hit")?;
    let bound_counted = json!({"operation": "act", "sessionId": "counted", "action": {"type": "click"}, "selector": {"by": "elementId", "value": hit["elementId"]}, "snapshotId": observed["snapshotId"]});
    let bnd = counted(&mut m, &remote, &bound_counted)?;
    exec(&mut m, json!({"operation": "close", "sessionId": "counted"}))?;
    pages.verify("counted", 2 * COUNTED)?;
    // The direct client through the same proxy, for the same count.
    let (_, direct_remote) = direct_clicks(&rt, &proxy.url(), &pages.url("direct-counted"), COUNTED)?;
    pages.verify("direct-counted", WARM + COUNTED)?;
    let direct_reqs = proxy.for_session(&direct_remote);
    let direct_clicks_reqs = direct_reqs.iter().filter(|(r, _)| r.ends_with("/element") || r.ends_with("/click")).count();
    let per = |t: usize| t as f64 / COUNTED as f64;
    let own = |c: &Counted| -> Vec<Duration> { c.act_ms.iter().zip(&c.hub_ms).map(|(a, h)| a.saturating_sub(*h)).collect() };
    let (css_proxied, css_hub, css_own) = (summary(&css.act_ms), summary(&css.hub_ms), summary(&own(&css)));
    let (bnd_proxied, bnd_hub, bnd_own) = (summary(&bnd.act_ms), summary(&bnd.hub_ms), summary(&own(&bnd)));
    println!("WebDriver requests per act: css {:.1}, snapshotId-bound {:.1}, direct find+click {:.1} (open: {open_requests})", per(css.total), per(bnd.total), direct_clicks_reqs as f64 / (WARM + COUNTED) as f64);
    drop(m);

    // ---- report
    let mut table = String::new();
    table.push_str("| sessions (parallel, each its own `aab mcp`) | clicks | wall | clicks/s | per click median / p90 |\n|---:|---:|---:|---:|---:|\n");
    for r in &series {
        let (med, p90) = summary(&r.latencies);
        table.push_str(&format!("| {} | {} | {:.2} s | {:.2} | {med:.1} / {p90:.1} ms |\n", r.sessions, r.actions, r.wall.as_secs_f64(), r.actions as f64 / r.wall.as_secs_f64()));
    }
    let (c_med, c_p90) = summary(&series[0].latencies);
    table.push_str("\n| one click, one session | median / p90 | WebDriver requests per click |\n|---|---:|---:|\n");
    table.push_str(&format!("| direct `aab_webdriver`: find element + click (nothing verified) | {d_med:.1} / {d_p90:.1} ms | {:.1} |\n", direct_clicks_reqs as f64 / (WARM + COUNTED) as f64));
    table.push_str(&format!("| web-executor act, CSS selector (fresh observation in the call) | {c_med:.1} / {c_p90:.1} ms | {:.1} |\n", per(css.total)));
    table.push_str(&format!("| web-executor act, snapshotId + elementId (observation reused) | {b_med:.1} / {b_p90:.1} ms | {:.1} |\n", per(bnd.total)));
    table.push_str(&format!("\n| through the counting proxy ({COUNTED} acts each) | act median / p90 | hub time of its requests, median | aab's own (act minus hub), median / p90 |\n|---|---:|---:|---:|\n"));
    table.push_str(&format!("| web-executor act, CSS selector | {:.1} / {:.1} ms | {:.1} ms | {:.1} / {:.1} ms |\n", css_proxied.0, css_proxied.1, css_hub.0, css_own.0, css_own.1));
    table.push_str(&format!("| web-executor act, snapshotId + elementId | {:.1} / {:.1} ms | {:.1} ms | {:.1} / {:.1} ms |\n", bnd_proxied.0, bnd_proxied.1, bnd_hub.0, bnd_own.0, bnd_own.1));
    println!("\n{table}");
    println!("requests of {COUNTED} CSS acts: {:?}", css.by);
    println!("requests of {COUNTED} bound acts: {:?}", bnd.by);
    println!("requests of one open: {open_log:?}");

    if let Some(path) = json_out {
        let series_json: Vec<Value> = series
            .iter()
            .map(|r| {
                let (med, p90) = summary(&r.latencies);
                json!({"sessions": r.sessions, "clicks": r.actions, "wallMs": ms(r.wall), "clicksPerSecond": r.actions as f64 / r.wall.as_secs_f64(),
                       "perClickMedianMs": med, "perClickP90Ms": p90, "openMs": r.open_ms})
            })
            .collect();
        let out = json!({
            "schema": "aab.bench-grid/v1",
            "timedClicksPerSession": n, "warmUpClicks": WARM, "grid": {"nodes": NODES, "slotsPerNode": SLOTS_PER_NODE, "seleniumVersion": servers::SELENIUM_VERSION, "startMs": grid_start_ms},
            "driver": "one `aab mcp` process per session (MCP stdio), one private runtime",
            "throughput": series_json,
            "direct": {"medianMs": d_med, "p90Ms": d_p90, "requestsPerClick": direct_clicks_reqs as f64 / (WARM + COUNTED) as f64},
            "executorCss": {"medianMs": c_med, "p90Ms": c_p90, "requestsPerAct": per(css.total), "requests": css.by,
                            "proxied": {"actMedianMs": css_proxied.0, "actP90Ms": css_proxied.1, "hubMedianMs": css_hub.0, "aabOwnMedianMs": css_own.0, "aabOwnP90Ms": css_own.1}},
            "executorBound": {"medianMs": b_med, "p90Ms": b_p90, "requestsPerAct": per(bnd.total), "requests": bnd.by,
                              "proxied": {"actMedianMs": bnd_proxied.0, "actP90Ms": bnd_proxied.1, "hubMedianMs": bnd_hub.0, "aabOwnMedianMs": bnd_own.0, "aabOwnP90Ms": bnd_own.1}},
            "openRequests": open_requests, "openRequestLog": open_log,
            "table": table,
        });
        if let Some(dir) = Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap_or_default()).map_err(|e| format!("{path}: {e}"))?;
        println!("results: {path}");
    }
    // Teardown: executor sessions are closed; the runtime stops, then the proxy,
    // the grid (SIGKILL to each process group: JVMs, chromedrivers, Chromiums).
    let runtime_pid = world.stop_runtime()?;
    drop(world);
    drop(proxy);
    let groups = grid.pgids();
    drop(grid);
    let left: Vec<(i32, String)> = groups.iter().flat_map(|&g| servers::group_members(g)).collect();
    if !left.is_empty() {
        return Err(format!("grid processes outlived the grid: {left:?}"));
    }
    println!("cleanup: runtime {} stopped, grid process groups {groups:?} empty", runtime_pid.unwrap_or(0));
    drop(pages);
    Ok(())
}
