//! `aab demo android`: the Android flow on a simulated phone, step by step. It
//! builds a private world — its own adb server (own port, own `HOME`), the
//! simulator `aab-android-sim` with its sample app, and a private runtime that
//! inherits that adb port — then drives the sample app through the public runtime
//! client like an agent would, checking each step against the simulator's ground
//! truth. Steps for commands this build does not advertise are skipped (the
//! registry is the source of truth), so the demo stays correct as commands land.
//! At the end it stops everything it started: runtime, adb server, simulator.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aab_host::client::Client;
use serde_json::{Value, json};

use crate::demo_sim::{self, Failure, find_program};

pub const USAGE: &str = "aab demo android [--record FILE]\n\n\
Starts a private adb server (its own port and HOME), the simulated phone\n\
(aab-android-sim, sample app com.example.aab.sample) and a private runtime, then walks\n\
the Android flow: status, forward, the observation commands this build advertises,\n\
an app restart and remove-forward, checking each step against the simulator's ground\n\
truth. Stops everything it started at the end. Needs root (the simulator chroots its\n\
device shells), adb and busybox-static (apt-get install -y adb busybox-static).\n\n\
  --record FILE   write the simulator's ground-truth log (every request the phone saw)\n\
                  to FILE as JSON before stopping it\n";

const SAMPLE: &str = "com.example.aab.sample";
const SIM_BINARY: &str = "aab-android-sim";

/// Observation steps run when advertised: (command, what it shows). Each gets
/// `packageName` (and `serial`) when its input schema has them.
const OBSERVATIONS: [(&str, &str); 10] = [
    ("tree", "the native view tree of the foreground screen"),
    ("screenshot", "a PNG of the screen"),
    ("logs", "the app's log records"),
    ("network", "the app's network records"),
    ("state", "the app's state records"),
    ("events", "the app's events"),
    ("keyboard-state", "whether the soft keyboard is shown"),
    ("permission-state", "whether the app holds the camera permission"),
    ("logcat", "the device log"),
    ("wait-text", "waiting for a text on screen"),
];

/// Run the demo; returns the process exit code.
pub fn run(record: Option<&Path>) -> i32 {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("aab-demo-android-{}-{}", std::process::id(), t0.elapsed().as_nanos() ^ u128::from(std::process::id())));
    let mut demo = Demo { t0, dir, adb: PathBuf::new(), adb_port: 0, sim: None, control: None, serial: String::new(), adb_started: false, client: None, started_runtime: false, commands: 0, skipped: Vec::new() };
    let outcome = demo.script();
    if let (Some(path), Some(_)) = (record, demo.control.as_ref()) {
        match demo.control(json!({"op": "truth"})) {
            Ok(truth) => {
                if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&truth).unwrap_or_default()) {
                    eprintln!("aab demo android: cannot write {}: {e}", path.display());
                }
            }
            Err(e) => eprintln!("aab demo android: cannot read the simulator's ground truth: {e}"),
        }
    }
    demo.cleanup();
    match outcome {
        Ok(()) => {
            let skipped = if demo.skipped.is_empty() { String::new() } else { format!(" Not advertised by this build (skipped): {}.", demo.skipped.join(", ")) };
            demo.say(&format!("Done: {} aab commands in {:.1} s. Everything the demo started has been stopped.{skipped}", demo.commands, demo.t0.elapsed().as_secs_f64()));
            0
        }
        Err(Failure(why)) => {
            eprintln!("aab demo android failed: {why}");
            1
        }
    }
}

struct Demo {
    t0: Instant,
    dir: PathBuf,
    adb: PathBuf,
    adb_port: u16,
    sim: Option<Child>,
    /// The simulator's control address and token.
    control: Option<(SocketAddr, String)>,
    serial: String,
    adb_started: bool,
    client: Option<Client>,
    started_runtime: bool,
    commands: usize,
    skipped: Vec<String>,
}

/// A free loopback port outside adb's own range (5037 default server, 5555–5585 emulators).
fn free_port() -> Result<u16, Failure> {
    for _ in 0..50 {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| Failure(format!("cannot pick a free port: {e}")))?.port();
        if !(5037..=5585).contains(&port) {
            return Ok(port);
        }
    }
    Err(Failure("no free port outside 5037-5585".into()))
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

impl Demo {
    fn say(&self, line: &str) {
        println!("[{:6.2}s] {line}", self.t0.elapsed().as_secs_f64());
    }

    fn detail(&self, line: &str) {
        println!("          {line}");
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("client is set before commands run")
    }

    fn advertised(&self, command: &str) -> bool {
        self.client.as_ref().is_some_and(|c| c.registry().get(command).is_some())
    }

    /// Run one command through the public client; Ok = its value, Err = the error facts.
    fn call(&mut self, command: &str, arguments: Value) -> Result<Value, Value> {
        self.commands += 1;
        crate::demo::run_command(self.client(), &self.dir, command, arguments)
    }

    fn must(&mut self, command: &str, arguments: Value) -> Result<Value, Failure> {
        self.call(command, arguments).map_err(|e| Failure(format!("`{command}` failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""))))
    }

    /// One request on the simulator's control interface (ground truth, faults).
    fn control(&self, mut request: Value) -> Result<Value, String> {
        let (addr, token) = self.control.as_ref().ok_or("the simulator is not running")?;
        request["token"] = json!(token);
        let mut s = TcpStream::connect_timeout(addr, Duration::from_secs(2)).map_err(|e| format!("control {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        s.write_all(format!("{request}\n").as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
        let reply: Value = serde_json::from_str(&line).map_err(|e| format!("control reply: {e}"))?;
        if reply["ok"] != json!(true) {
            return Err(format!("control {}: {reply}", request["op"]));
        }
        Ok(reply)
    }

    /// SDK requests the phone saw from `since` on (ground truth): (method, path, status).
    fn sdk_requests(&self, since: u64) -> Result<Vec<Value>, Failure> {
        let truth = self.control(json!({"op": "truth", "kind": "sdk-request", "since": since}))?;
        Ok(truth["items"].as_array().cloned().unwrap_or_default())
    }

    fn truth_mark(&self) -> Result<u64, Failure> {
        let truth = self.control(json!({"op": "truth"}))?;
        Ok(truth["items"].as_array().and_then(|i| i.last()).and_then(|r| r["seq"].as_u64()).map_or(0, |s| s + 1))
    }

    fn epoch(&self) -> Result<String, Failure> {
        let state = self.control(json!({"op": "state"}))?;
        let app = state["apps"].as_array().and_then(|a| a.iter().find(|a| a["package"] == json!(SAMPLE)).cloned()).ok_or_else(|| Failure(format!("the simulator has no {SAMPLE}")))?;
        Ok(app["runtimeEpoch"].as_str().unwrap_or_default().to_string())
    }

    /// The real `adb` binary on the private server.
    fn adb(&self, args: &[&str]) -> Result<String, Failure> {
        let out = Command::new(&self.adb)
            .args(["-P", &self.adb_port.to_string()])
            .args(args)
            .env("HOME", self.dir.join("home"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Failure(format!("cannot run {}: {e}", self.adb.display())))?;
        if !out.status.success() {
            return Err(Failure(format!("adb {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn script(&mut self) -> Result<(), Failure> {
        self.say("aab demo android — an agent's view of an Android app on a simulated phone, through the public aab client");
        self.adb = std::env::var_os("ADB").map(PathBuf::from).filter(|p| p.is_file()).or_else(|| find_program("adb")).ok_or_else(|| Failure("adb is required and none was found on PATH (install it with: apt-get install -y adb)".into()))?;
        let sim_bin = find_program(SIM_BINARY).ok_or_else(|| Failure(format!("{SIM_BINARY} was not found next to aab nor on PATH (build it with: cargo build -p aab-android-sim)")))?;
        for sub in ["home", "facts", "ownership"] {
            std::fs::create_dir_all(self.dir.join(sub)).map_err(|e| Failure(format!("cannot create {}: {e}", self.dir.display())))?;
        }
        self.adb_port = free_port()?;
        // The runtime this demo starts inherits this process's environment: that is
        // how the Android plugin finds the private adb server. A private facts dir
        // (the runtime's key) and ownership dir keep the demo away from any runtime
        // already running; the runtime home stays the user's, so its plugin digest
        // cache spares a reload of every plugin's manifest.
        let runtime_home = std::env::var_os("AI_APP_BRIDGE_RUNTIME_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ai-app-bridge/runtimes/v1")))
            .unwrap_or_else(|| self.dir.join("runtimes"));
        // Only the Android plugin: the runtime loads (and the demo waits for) nothing else.
        let plugin_dir = std::env::var_os("AI_APP_BRIDGE_PLUGIN_DIR").map(PathBuf::from).or_else(|| std::env::current_exe().ok()?.parent().map(Path::to_path_buf)).unwrap_or_default();
        let plugin = plugin_dir.join("libaab_plugin_android.so");
        let private_plugins = self.dir.join("plugins");
        std::fs::create_dir_all(&private_plugins).and_then(|()| std::fs::copy(&plugin, private_plugins.join("libaab_plugin_android.so"))).map_err(|e| {
            Failure(format!("the Android plugin {} cannot be used: {e} (build it with: cargo build -p aab-plugin-android, or set AI_APP_BRIDGE_PLUGIN_DIR)", plugin.display()))
        })?;
        // SAFETY: the CLI has not started any thread yet (argv parsing only), so no
        // other thread can read the environment while it changes.
        unsafe {
            std::env::set_var("ANDROID_ADB_SERVER_PORT", self.adb_port.to_string());
            std::env::set_var("HOME", self.dir.join("home"));
            std::env::set_var("AI_APP_BRIDGE_RUNTIME_HOME", &runtime_home);
            std::env::set_var("AI_APP_BRIDGE_PLUGIN_DIR", &private_plugins);
            std::env::set_var("AI_APP_BRIDGE_FACT_STORE_DIR", self.dir.join("facts"));
            std::env::set_var("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", self.dir.join("ownership"));
            std::env::remove_var("ADB_SERVER_SOCKET");
        }

        // 1. The simulated phone.
        let sim_log = self.dir.join("simulator.log");
        let log = std::fs::File::create(&sim_log).map_err(|e| Failure(format!("cannot create {}: {e}", sim_log.display())))?;
        let mut child = Command::new(&sim_bin)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| Failure(format!("cannot start {}: {e}", sim_bin.display())))?;
        let stdout = child.stdout.take();
        self.sim = Some(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            if let Some(out) = stdout {
                let _ = BufReader::new(out).read_line(&mut line);
            }
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let info: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => {
                if let Some(c) = self.sim.as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let why = std::fs::read_to_string(&sim_log).unwrap_or_default();
                return Err(Failure(format!("the simulator did not start: {} (it needs root, adb and busybox-static)", why.trim())));
            }
        };
        let control = info["control"].as_str().and_then(|a| a.parse().ok()).ok_or_else(|| Failure(format!("the simulator printed no control address: {line}")))?;
        self.control = Some((control, info["token"].as_str().unwrap_or_default().to_string()));
        self.serial = info["devices"][0]["serial"].as_str().unwrap_or_default().to_string();
        let state = self.control(json!({"op": "state"}))?;
        self.say(&format!("Started the simulated phone {} (pid {}); foreground app {}", self.serial, self.sim.as_ref().map_or(0, Child::id), state["foreground"]["package"].as_str().or(state["foreground"].as_str()).unwrap_or("?")));

        // 2. A private adb server, connected to the phone like to an emulator.
        self.adb(&["start-server"])?;
        self.adb_started = true;
        let said = self.adb(&["connect", &self.serial.clone()])?;
        if !said.contains("connected to") {
            return Err(Failure(format!("adb connect {}: {}", self.serial, said.trim())));
        }
        let until = Instant::now() + Duration::from_secs(15);
        while !self.adb(&["devices"])?.lines().any(|l| l.starts_with(&self.serial) && l.ends_with("device")) {
            if Instant::now() > until {
                return Err(Failure(format!("{} did not come online on the adb server", self.serial)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.say(&format!("Started a private adb server on port {} (HOME {}); `adb devices` lists {} as online", self.adb_port, self.dir.join("home").display(), self.serial));

        // 3. The runtime (private: it carries ANDROID_ADB_SERVER_PORT).
        let client = Client::from_env().map_err(|e| Failure(format!("cannot set up the runtime client: {}: {}", e.code, e.message)))?;
        self.client = Some(client);
        if !self.advertised("status") {
            return Err(Failure(format!(
                "the Android plugin is not installed in {} (expected libaab_plugin_android.so next to the aab binary, or set AI_APP_BRIDGE_PLUGIN_DIR)",
                self.client().config().plugin_dir.display()
            )));
        }
        // Marked before the start: a start that times out may still leave a runtime
        // coming up, which the cleanup's `runtime stop` then ends.
        self.started_runtime = true;
        let started = self.must("runtime", json!({"operation": "start"}))?;
        self.say(&format!("Started a private runtime (pid {}); the Android plugin reaches the phone through the adb server's port protocol", started["pid"]));

        // 4. status: device selection, descriptor, verified forward, one SDK request.
        let mark = self.truth_mark()?;
        let status = self.must("status", json!({"packageName": SAMPLE}))?;
        let epoch = self.epoch()?;
        self.say(&format!(
            "status: {} {} — runtimeEpoch {} (the phone's app process says {epoch})",
            status["app"]["packageName"].as_str().unwrap_or("?"),
            status["app"]["versionName"].as_str().unwrap_or(""),
            status["debugBridge"]["runtimeEpoch"].as_str().unwrap_or("?")
        ));
        if status["debugBridge"]["runtimeEpoch"] != json!(epoch) {
            return Err(Failure("status reported another runtimeEpoch than the phone's app process".into()));
        }
        let seen = self.sdk_requests(mark)?;
        self.detail(&format!("the phone saw: {}", seen.iter().map(|r| format!("{} {} → {}", r["data"]["method"].as_str().unwrap_or(""), r["data"]["path"].as_str().unwrap_or(""), r["data"]["status"])).collect::<Vec<_>>().join(", ")));

        // 5. forward: the exact mapping status made is reused.
        let forward = self.must("forward", json!({"packageName": SAMPLE, "serial": self.serial}))?;
        let port = forward["port"].as_u64().unwrap_or(0);
        self.say(&format!("forward: tcp:{port} → {} (reused {})", forward["remote"].as_str().unwrap_or("?"), forward["reused"]));
        let listed = self.adb(&["forward", "--list"])?;
        for l in listed.lines().filter(|l| !l.trim().is_empty()) {
            self.detail(&format!("adb forward --list: {l}"));
        }

        // 6. Observation commands, as far as this build advertises them.
        for (command, what) in OBSERVATIONS {
            if !self.advertised(command) {
                self.skipped.push(command.to_string());
                self.say(&format!("{command}: not advertised by this build — skipped"));
                continue;
            }
            let args = self.arguments_for(command);
            let mark = self.truth_mark()?;
            match self.call(command, args) {
                Ok(value) => {
                    self.say(&format!("{command}: {what} — {}", summary(&value)));
                    // Node lists (tree) read like the Web demo's control list.
                    for n in value["nodes"].as_array().into_iter().flatten().take(12) {
                        let label = ["text", "desc", "contentDescription"].iter().find_map(|k| n[*k].as_str().filter(|t| !t.is_empty())).unwrap_or("");
                        let class = n["class"].as_str().or(n["simpleClassName"].as_str()).unwrap_or("");
                        let id = n["id"].as_str().or(n["resourceName"].as_str()).unwrap_or("");
                        self.detail(&format!("{:<14} {:<28} {label:?}", class, id));
                    }
                    let seen = self.sdk_requests(mark)?;
                    if !seen.is_empty() {
                        self.detail(&format!("the phone saw: {}", seen.iter().map(|r| format!("{} {}", r["data"]["method"].as_str().unwrap_or(""), r["data"]["path"].as_str().unwrap_or(""))).collect::<Vec<_>>().join(", ")));
                    }
                }
                Err(e) => self.say(&format!("{command}: failed with {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""))),
            }
        }

        // 6b. Actions: sign up through the SDK's managed execution, each action
        // checked against what the phone recorded (exactly one effect per action).
        if ["tap-native", "input-text", "device-ownership"].iter().all(|c| self.advertised(c)) {
            self.sign_up()?;
        } else {
            self.skipped.push("tap-native/input-text".into());
            self.say("actions: tap-native/input-text not advertised by this build — skipped");
        }

        // 7. The app restarts: the next status reaches the new process.
        self.control(json!({"op": "restart", "package": SAMPLE}))?;
        let new_epoch = self.epoch()?;
        self.say(&format!("The app restarted on the phone (simulator control): new runtimeEpoch {new_epoch}"));
        let status = self.must("status", json!({"packageName": SAMPLE, "serial": self.serial}))?;
        if status["debugBridge"]["runtimeEpoch"] != json!(new_epoch) {
            return Err(Failure("status after the restart did not reach the new process".into()));
        }
        self.say(&format!("status: reaches the new process (runtimeEpoch {new_epoch})"));

        // 8. remove-forward: the host-side mappings go away (checked with adb itself).
        let forwards: Vec<u64> = self.adb(&["forward", "--list"])?.lines().filter(|l| l.starts_with(&format!("{} ", self.serial))).filter_map(|l| l.split_whitespace().nth(1)?.strip_prefix("tcp:")?.parse().ok()).collect();
        for port in &forwards {
            self.must("remove-forward", json!({"serial": self.serial, "port": port}))?;
        }
        let left = self.adb(&["forward", "--list"])?.lines().filter(|l| !l.trim().is_empty()).count();
        self.say(&format!("remove-forward: removed {} forward(s); `adb forward --list` now lists {left}", forwards.len()));
        Ok(())
    }

    /// The sample app's sign-up: five managed SDK actions by selector, each seen
    /// exactly once on the phone, then the app's own state and the device journal.
    fn sign_up(&mut self) -> Result<(), Failure> {
        let steps: [(&str, Value, &str); 6] = [
            ("tap-native", json!({"selector": {"text": "Create account"}}), "open the sign-up screen"),
            ("input-text", json!({"selector": {"resourceName": format!("{SAMPLE}:id/name")}, "text": "Ada Lovelace"}), "type the name"),
            ("input-text", json!({"selector": {"resourceName": format!("{SAMPLE}:id/email")}, "text": "ada@example.org"}), "type the email"),
            ("input-text", json!({"selector": {"resourceName": format!("{SAMPLE}:id/new_password")}, "text": "analytical-engine"}), "type the password"),
            ("tap-native", json!({"selector": {"text": "I accept the terms"}}), "accept the terms"),
            ("tap-native", json!({"selector": {"text": "Sign up"}}), "submit"),
        ];
        let before = self.control(json!({"op": "actions"}))?["count"].as_u64().unwrap_or(0);
        for (i, (command, extra, what)) in steps.into_iter().enumerate() {
            let mut args = json!({"packageName": SAMPLE, "serial": self.serial});
            if let (Some(a), Value::Object(extra)) = (args.as_object_mut(), extra) {
                a.extend(extra);
            }
            let value = self.must(command, args)?;
            let seen = self.control(json!({"op": "actions"}))?;
            let count = seen["count"].as_u64().unwrap_or(0);
            let last = seen["actions"].as_array().and_then(|a| a.last()).cloned().unwrap_or(Value::Null);
            if count != before + i as u64 + 1 || last["actionId"] != value["actionId"] {
                return Err(Failure(format!("{command} ({what}): the phone did not record exactly this one action (count {count}, last {last})")));
            }
            self.say(&format!("{command}: {what} — settled receipt {} (the phone recorded one {} for it)", value["proof"]["responseSha256"].as_str().map(|h| &h[..12.min(h.len())]).unwrap_or("?"), last["kind"].as_str().unwrap_or("?")));
        }
        let app = self.control(json!({"op": "state"}))?["apps"].as_array().and_then(|a| a.iter().find(|a| a["package"] == json!(SAMPLE)).cloned()).unwrap_or(Value::Null);
        if app["screen"] != json!("welcome") {
            return Err(Failure(format!("after sign-up the app shows {} instead of welcome", app["screen"])));
        }
        let own = self.must("device-ownership", json!({"operation": "status", "serial": self.serial}))?;
        self.say(&format!("The app shows its welcome screen; device-ownership: phase {}, last settlement {}", own["phase"], own["ownership"]["lastSettlement"]["command"]));
        Ok(())
    }

    /// `packageName`/`serial` where the command's schema takes them; commands with
    /// extra required arguments get demo values for the ones known here.
    fn arguments_for(&self, command: &str) -> Value {
        let schema = self.client().registry().get(command).map(|c| c.input_schema.clone()).unwrap_or(Value::Null);
        let props = schema["properties"].as_object().cloned().unwrap_or_default();
        let mut args = serde_json::Map::new();
        let candidates = [
            ("packageName", json!(SAMPLE)),
            ("serial", json!(self.serial)),
            ("outFile", json!(self.dir.join("screen.png").display().to_string())),
            ("compact", json!(true)),
            ("targetText", json!("Sign in")),
            // The sample app requests the camera (not granted) in the simulator's scenario.
            ("permission", json!("android.permission.CAMERA")),
            ("timeoutMs", json!(5000)),
        ];
        for (key, value) in candidates {
            if props.contains_key(key) {
                args.insert(key.into(), value);
            }
        }
        Value::Object(args)
    }

    /// Stop what the demo started, in reverse order; failures are reported only.
    fn cleanup(&mut self) {
        if self.started_runtime && demo_sim::stop_runtime("aab demo android", || self.call("runtime", json!({"operation": "stop"}))) {
            // Its directory is keyed by the demo's private facts dir: nobody else uses it.
            let _ = std::fs::remove_dir_all(&self.client().config().runtime_dir);
            self.say("Stopped the runtime.");
        }
        if self.adb_started {
            let _ = self.adb(&["kill-server"]);
            let until = Instant::now() + Duration::from_secs(10);
            while listening(self.adb_port) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            self.say(&format!("Stopped the adb server on port {}.", self.adb_port));
        }
        if let Some(child) = self.sim.take() {
            // SIGTERM: the simulator kills its device processes and removes its roots.
            demo_sim::stop_simulator(child);
            self.say("Stopped the simulated phone.");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One line about a command's value: its counts and small scalars.
fn summary(value: &Value) -> String {
    let Some(map) = value.as_object() else { return value.to_string() };
    let mut parts = Vec::new();
    for (k, v) in map {
        match v {
            Value::Array(a) => parts.push(format!("{k}: {} item(s)", a.len())),
            Value::Number(_) | Value::Bool(_) if k != "ok" => parts.push(format!("{k}: {v}")),
            Value::String(s) if s.len() <= 60 => parts.push(format!("{k}: {s}")),
            _ => {}
        }
        if parts.len() == 6 {
            break;
        }
    }
    parts.join(", ")
}
