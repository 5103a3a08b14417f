//! `aab demo ios`: the iOS flow on a simulated iPhone, step by step. It builds a
//! private world — the simulator `aab-ios-sim serve` (its own home, its
//! devicectl/xcodebuild doubles) and a private runtime with only the `ios` and
//! `wda` plugins, pointed at that devicectl — then drives the sample app through
//! the public runtime client like an agent would: SDK reads, the prepared
//! WebDriverAgent Runner, a native sign-in, an H5 read. Each effect is checked
//! against the simulator's ground truth (its control socket), not our own reply.
//! At the end it stops everything it started: runtime, Runner, simulator.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aab_host::client::Client;
use serde_json::{Value, json};

use crate::demo_sim::{self, Failure, find_program};

pub const USAGE: &str = "aab demo ios\n\n\
Starts the simulated iPhone (aab-ios-sim serve: devicectl and xcodebuild doubles, the\n\
sample app com.example.aab.ios with the aab iOS SDK, the prepared WebDriverAgent Runner)\n\
and a private runtime with the ios and wda plugins, then walks the iOS flow: devices,\n\
status, tree, setup of the Runner, a WDA session, the native tree, a sign-in by\n\
accessibility id and an H5 read of the web screen, checking each step against the\n\
simulator's ground truth. Stops everything it started at the end. Needs no root.\n";

const SAMPLE: &str = "com.example.aab.ios";
const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";
const SIM_BINARY: &str = "aab-ios-sim";
const PLUGINS: [&str; 2] = ["libaab_plugin_ios.so", "libaab_plugin_wda.so"];
const USER: &str = "alice";

/// Run the demo; returns the process exit code.
pub fn run() -> i32 {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("aab-demo-ios-{}-{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())));
    let mut demo = Demo { t0, dir, sim: None, control: None, udid: String::new(), client: None, started_runtime: false, commands: 0 };
    let outcome = demo.script();
    demo.cleanup();
    match outcome {
        Ok(()) => {
            demo.say(&format!("Done: {} aab commands in {:.1} s. Everything the demo started has been stopped.", demo.commands, demo.t0.elapsed().as_secs_f64()));
            0
        }
        Err(Failure(why)) => {
            eprintln!("aab demo ios failed: {why}");
            1
        }
    }
}

struct Demo {
    t0: Instant,
    dir: PathBuf,
    sim: Option<Child>,
    /// The simulator's control address and token.
    control: Option<(SocketAddr, String)>,
    udid: String,
    client: Option<Client>,
    started_runtime: bool,
    commands: usize,
}

/// Merge `extra`'s fields into a copy of `base`.
fn with(base: &Value, extra: Value) -> Value {
    let mut out = base.clone();
    if let (Some(o), Value::Object(extra)) = (out.as_object_mut(), extra) {
        o.extend(extra);
    }
    out
}

impl Demo {
    fn say(&self, line: &str) {
        println!("[{:6.2}s] {line}", self.t0.elapsed().as_secs_f64());
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("client is set before commands run")
    }

    fn call(&mut self, command: &str, arguments: Value) -> Result<Value, Value> {
        self.commands += 1;
        crate::demo::run_command(self.client(), &self.dir, command, arguments)
    }

    /// One demo step: run `command`, print `command ok <fact> (ms)`, fail clearly otherwise.
    fn step(&mut self, command: &str, arguments: Value, fact: impl Fn(&Value) -> String) -> Result<Value, Failure> {
        let started = Instant::now();
        let outcome = self.call(command, arguments);
        let ms = started.elapsed().as_millis();
        match outcome {
            Ok(value) => {
                self.say(&format!("{command:<24} ok  {} ({ms} ms)", fact(&value)));
                Ok(value)
            }
            Err(e) => {
                self.say(&format!("{command:<24} FAILED {} ({ms} ms)", e["error"].as_str().unwrap_or("?")));
                Err(Failure(format!("`{command}` failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""))))
            }
        }
    }

    /// One request on the simulator's control socket: the token line, then the request line.
    fn control(&self, request: Value) -> Result<Value, String> {
        let (addr, token) = self.control.as_ref().ok_or("the simulator is not running")?;
        let mut s = TcpStream::connect_timeout(addr, Duration::from_secs(2)).map_err(|e| format!("control {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        s.write_all(format!("{}\n{request}\n", token.trim()).as_bytes()).map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        BufReader::new(s).take(16 * 1024 * 1024).read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        let reply: Value = serde_json::from_slice(&line).map_err(|e| format!("control reply: {e}"))?;
        if reply["ok"] != json!(true) {
            return Err(format!("control {}: {reply}", request["op"]));
        }
        Ok(reply)
    }

    /// The sample app's native screen as the device itself holds it (ground truth).
    fn native(&self) -> Result<Value, Failure> {
        Ok(self.control(json!({"op": "native", "bundleId": SAMPLE}))?)
    }

    fn start_simulator(&mut self) -> Result<Value, Failure> {
        let sim_bin = find_program(SIM_BINARY).ok_or_else(|| Failure(format!("{SIM_BINARY} was not found next to aab nor on PATH (build it with: cargo build -p aab-ios-sim)")))?;
        let sim_log = self.dir.join("simulator.log");
        let log = std::fs::File::create(&sim_log).map_err(|e| Failure(format!("cannot create {}: {e}", sim_log.display())))?;
        let mut child = Command::new(&sim_bin)
            .args(["serve", "--home"])
            .arg(self.dir.join("sim"))
            .env("AAB_IOS_SIM_BIN", &sim_bin)
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
                let _ = BufReader::new(out).take(1024 * 1024).read_line(&mut line);
            }
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let Ok(info) = serde_json::from_str::<Value>(&line) else {
            let why = std::fs::read_to_string(&sim_log).unwrap_or_default();
            return Err(Failure(format!("the simulator did not start: {}", why.trim())));
        };
        let control = info["control"].as_str().and_then(|a| a.parse().ok()).ok_or_else(|| Failure(format!("the simulator printed no control address: {line}")))?;
        let token_file = info["tokenFile"].as_str().ok_or_else(|| Failure(format!("the simulator printed no token file: {line}")))?;
        let token = std::fs::read_to_string(token_file).map_err(|e| Failure(format!("cannot read the simulator's token {token_file}: {e}")))?;
        self.control = Some((control, token.trim().to_string()));
        self.udid = info["devices"][0]["udid"].as_str().unwrap_or_default().to_string();
        Ok(info)
    }

    fn script(&mut self) -> Result<(), Failure> {
        self.say("aab demo ios — an agent's view of an iOS app on a simulated iPhone, through the public aab client");
        for sub in ["home", "facts", "ownership", "plugins"] {
            std::fs::create_dir_all(self.dir.join(sub)).map_err(|e| Failure(format!("cannot create {}: {e}", self.dir.display())))?;
        }
        // A private facts dir (the runtime's key) and ownership dir keep the demo away
        // from any runtime already running; the runtime home stays the user's, so its
        // plugin digest cache spares a reload of every plugin's manifest.
        let runtime_home = std::env::var_os("AI_APP_BRIDGE_RUNTIME_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ai-app-bridge/runtimes/v1")))
            .unwrap_or_else(|| self.dir.join("runtimes"));
        // Only the iOS plugins: the runtime loads (and the demo waits for) nothing else.
        let plugin_dir = std::env::var_os("AI_APP_BRIDGE_PLUGIN_DIR").map(PathBuf::from).or_else(|| std::env::current_exe().ok()?.parent().map(Path::to_path_buf)).unwrap_or_default();
        let private_plugins = self.dir.join("plugins");
        for name in PLUGINS {
            std::fs::copy(plugin_dir.join(name), private_plugins.join(name)).map_err(|e| {
                Failure(format!("the plugin {} cannot be used: {e} (build it with: cargo build -p aab-plugin-ios -p aab-plugin-wda, or set AI_APP_BRIDGE_PLUGIN_DIR)", plugin_dir.join(name).display()))
            })?;
        }
        // Set before the simulator starts: every process the demo starts (simulator,
        // its xcodebuild double, the runtime) inherits this environment.
        // SAFETY: the CLI has not started any thread yet (argv parsing only), so no
        // other thread can read the environment while it changes.
        unsafe {
            std::env::set_var("HOME", self.dir.join("home"));
            std::env::set_var("AI_APP_BRIDGE_RUNTIME_HOME", &runtime_home);
            std::env::set_var("AI_APP_BRIDGE_PLUGIN_DIR", &private_plugins);
            std::env::set_var("AI_APP_BRIDGE_FACT_STORE_DIR", self.dir.join("facts"));
            std::env::set_var("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", self.dir.join("ownership"));
        }

        // 1. The simulated iPhone and its tool doubles.
        let info = self.start_simulator()?;
        let devicectl = info["xcrun"].as_str().unwrap_or_default().to_string();
        let xcodebuild = info["xcodebuild"].as_str().unwrap_or_default().to_string();
        // SAFETY: as above; the only other thread (the simulator's stdout reader) has ended.
        unsafe {
            std::env::set_var("AI_APP_BRIDGE_DEVICECTL", &devicectl);
        }
        let state = self.control(json!({"op": "state"}))?;
        self.say(&format!(
            "Started the simulated iPhone {} {} (pid {}, home {}); foreground app {}",
            info["devices"][0]["name"].as_str().unwrap_or("?"),
            self.udid,
            self.sim.as_ref().map_or(0, Child::id),
            self.dir.join("sim").display(),
            state["foreground"].as_str().unwrap_or("?")
        ));

        // 2. The private runtime (it inherits AI_APP_BRIDGE_DEVICECTL).
        let client = Client::from_env().map_err(|e| Failure(format!("cannot set up the runtime client: {}: {}", e.code, e.message)))?;
        self.client = Some(client);
        if self.client().registry().get("ios-status").is_none() || self.client().registry().get("ios-wda-session").is_none() {
            return Err(Failure(format!("the ios and wda plugins are not installed in {}", self.client().config().plugin_dir.display())));
        }
        // Marked before the start: a start that times out may still leave a runtime
        // coming up, which the cleanup's `runtime stop` then ends.
        self.started_runtime = true;
        self.step("runtime", json!({"operation": "start"}), |v| format!("private runtime pid {} with the ios and wda plugins", v["pid"]))?;

        // 3. SDK reads through devicectl and the app's listener.
        let udid = self.udid.clone();
        let app = json!({"deviceId": udid, "bundleId": SAMPLE});
        self.step("ios-devices", json!({}), |v| {
            let d = &v["devices"][0];
            format!("{} device(s); {} {} iOS {} tunnel {}", v["devices"].as_array().map_or(0, Vec::len), d["name"].as_str().unwrap_or("?"), d["productType"].as_str().unwrap_or("?"), d["osVersion"].as_str().unwrap_or("?"), d["tunnelState"].as_str().unwrap_or("?"))
        })?;
        let status = self.step("ios-status", app.clone(), |v| format!("{} runtimeEpoch {} pid {} via {}", v["bundleId"].as_str().unwrap_or("?"), v["runtimeEpoch"].as_str().unwrap_or("?"), v["processId"], v["endpoint"]["url"].as_str().unwrap_or("?")))?;
        let truth = self.native()?;
        if status["runtimeEpoch"] != truth["runtimeEpoch"] {
            return Err(Failure(format!("ios-status reported runtimeEpoch {} but the device's app process has {}", status["runtimeEpoch"], truth["runtimeEpoch"])));
        }
        self.step("ios-tree", app.clone(), |v| format!("{} node(s) of the login screen", count_nodes(v)))?;

        // 4. The prepared WDA Runner: build-for-testing + test-without-building through the xcodebuild double.
        let setup = self.step("ios-setup", json!({"deviceId": udid, "teamId": "ABCDE12345", "xcodebuild": xcodebuild, "timeoutMs": 60000}), |v| {
            format!("Runner {} built (exit {}), serving on port {} (runnerEpoch {})", v["wdaRunnerBundleId"].as_str().unwrap_or("?"), v["build"]["exitCode"], v["runner"]["port"], v["runner"]["runtimeEpoch"].as_str().unwrap_or("?"))
        })?;
        let state = self.control(json!({"op": "state"}))?;
        if state["runner"]["runtimeEpoch"] != setup["runner"]["runtimeEpoch"] {
            return Err(Failure(format!("ios-setup reported Runner {} but the device runs {}", setup["runner"]["runtimeEpoch"], state["runner"])));
        }
        // The Runner took the foreground: bring the app back.
        self.step("ios-launch-app", with(&app, json!({"terminateExisting": false})), |v| format!("{} in the foreground again (pid {})", SAMPLE, v["processId"]))?;
        let wda = with(&app, json!({"wdaRunnerBundleId": RUNNER}));
        let session = self.step("ios-wda-session", with(&wda, json!({"operation": "create"})), |v| format!("session {} bound to pid {}", v["wdaSessionId"].as_str().unwrap_or("?"), v["sessionRef"]["processId"]))?;
        let session_id = session["wdaSessionId"].as_str().ok_or_else(|| Failure(format!("ios-wda-session returned no wdaSessionId: {session}")))?.to_string();
        let wda = with(&wda, json!({"wdaSessionId": session_id}));
        self.step("ios-uia-tree", wda.clone(), |v| format!("{} XCUIElement node(s)", count_nodes(v)))?;

        // 5. Sign in by accessibility id, each action checked on the device.
        for (field, text) in [("username", USER), ("password", "correct-horse")] {
            self.step("ios-input-native-text", with(&wda, json!({"selector": {"accessibilityId": field}, "text": text})), |v| format!("typed into {field} (settled {})", v["settled"]))?;
        }
        let typed = self.native()?;
        if typed["ui"]["values"]["username"] != json!(USER) {
            return Err(Failure(format!("the device's username field does not hold {USER:?}: {}", typed["ui"])));
        }
        self.say(&format!("          the device's username field holds {USER:?}"));
        self.step("ios-tap-native", with(&wda, json!({"selector": {"accessibilityId": "signIn"}})), |v| format!("tapped signIn (settled {}, proof {})", v["settled"], v["proof"]["kind"].as_str().unwrap_or("?")))?;
        let signed_in = format!("Signed in as {USER}");
        let tree = self.step("ios-tree", app.clone(), |v| if v.to_string().contains(&signed_in) { format!("status label reads {signed_in:?}") } else { "no sign-in text".into() })?;
        if !tree.to_string().contains(&signed_in) || self.native()?["ui"]["texts"]["status"] != json!(signed_in) {
            return Err(Failure(format!("after the tap neither the SDK tree nor the device shows {signed_in:?}")));
        }

        // 6. The web screen: an H5 read of the WKWebView's real page.
        self.step("ios-tap-native", with(&wda, json!({"selector": {"accessibilityId": "openWeb"}})), |_| "opened the web screen".into())?;
        // The simulator starts its Chromium page with the screen; wait for it through the
        // simulator (ground truth) first, so the H5 read does not race a cold browser start.
        let page = self.control(json!({"op": "h5", "bundleId": SAMPLE, "expression": "document.title"}))?;
        let dom = self.step("ios-h5-dom", app, |v| format!("page {} webView {}, {} control(s)", v["dom"]["url"].as_str().or(v["pageRef"]["url"].as_str()).unwrap_or("?"), v["pageRef"]["webViewId"].as_str().unwrap_or("?"), v["dom"]["controls"].as_array().map_or(0, Vec::len)))?;
        if dom["pageRef"]["webViewId"].is_null() {
            return Err(Failure(format!("ios-h5-dom returned no pageRef: {dom}")));
        }
        self.say(&format!("          the device's WebView shows {} ({:?})", page["url"].as_str().unwrap_or("?"), page["value"].as_str().unwrap_or("")));
        Ok(())
    }

    /// Stop what the demo started, in reverse order; failures are reported only.
    fn cleanup(&mut self) {
        if self.started_runtime && demo_sim::stop_runtime("aab demo ios", || self.call("runtime", json!({"operation": "stop"}))) {
            // Its directory is keyed by the demo's private facts dir: nobody else uses it.
            let _ = std::fs::remove_dir_all(&self.client().config().runtime_dir);
            self.say("Stopped the runtime.");
        }
        if let Some(child) = self.sim.take() {
            // SIGTERM: the simulator stops its listeners, the Runner, Chromium and the xcodebuild doubles.
            demo_sim::stop_simulator(child);
            self.say("Stopped the simulated iPhone.");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Nodes in a tree reply: the longest array of objects found in it (the shapes differ by provider).
fn count_nodes(value: &Value) -> usize {
    match value {
        Value::Array(a) => a.len().max(a.iter().map(count_nodes).max().unwrap_or(0)).max(a.iter().map(|v| count_children(v)).sum::<usize>()),
        Value::Object(o) => o.values().map(count_nodes).max().unwrap_or(0),
        _ => 0,
    }
}

/// Nodes of a nested tree (objects with `children`).
fn count_children(value: &Value) -> usize {
    match value {
        Value::Object(o) => 1 + o.get("children").and_then(Value::as_array).map_or(0, |c| c.iter().map(count_children).sum()),
        _ => 0,
    }
}
