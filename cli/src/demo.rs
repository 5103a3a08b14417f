//! `aab demo`: the main job on a fresh machine. It starts the shared runtime (if
//! none runs), starts the Web endpoint with the bundled sample app, opens the
//! sample sign-up form in headless Chromium, and drives it like an agent would —
//! observe, type, click, wait, then read the page's logs and network through a
//! capture window — printing each step for a person to follow. Everything goes
//! through the public runtime client (`Client::run`), exactly as the CLI and MCP
//! adapters do. At the end it stops what it started (browser, endpoint, runtime).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aab_host::client::Client;
use serde_json::{Value, json};

pub const USAGE: &str = "aab demo [--browser PATH]\n\n\
Starts the runtime and the Web endpoint, serves the sample app, opens it in headless\n\
Chromium and drives it through observation, input, click, wait and capture reads,\n\
printing what happens, then drives the same form through `web-executor` (its own\n\
headless Chromium over CDP, no SDK in the loop). Needs Chromium (apt-get install -y chromium).\n\n\
Also: `aab demo android` (the simulated Android phone) and `aab demo ios` (the simulated\n\
iPhone); each takes --help.\n";

const BROWSER_NAMES: [&str; 4] = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];
const INSTALL_HINT: &str = "apt-get install -y chromium";

/// A demo step that failed: what to tell the person.
struct Failure(String);

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

/// Run the demo; returns the process exit code.
pub fn run(browser: Option<&Path>) -> i32 {
    let browser = match browser.map(Path::to_path_buf).or_else(find_browser) {
        Some(b) => b,
        None => {
            eprintln!(
                "aab demo: Chromium is required to open the sample app and none was found on PATH (looked for {}).\n\
                 Install it with:  {INSTALL_HINT}\n\
                 or name a Chrome/Chromium binary with --browser PATH.",
                BROWSER_NAMES.join(", ")
            );
            return 1;
        }
    };
    let client = match Client::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aab demo: cannot set up the runtime client: {}: {}", e.code, e.message);
            return 1;
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut demo = Demo { client, cwd, t0: Instant::now(), started_runtime: false, started_endpoint: false, browser: None, profile: None, commands: 0 };
    let outcome = demo.script(&browser);
    demo.cleanup();
    match outcome {
        Ok(()) => {
            demo.say(&format!("Done: {} aab commands in {:.1} s. Everything the demo started has been stopped.", demo.commands, demo.t0.elapsed().as_secs_f64()));
            0
        }
        Err(Failure(why)) => {
            eprintln!("aab demo failed: {why}");
            1
        }
    }
}

fn find_browser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| BROWSER_NAMES.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).is_ok();
    if !filled {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (nanos >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8);
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

struct Demo {
    client: Client,
    cwd: PathBuf,
    t0: Instant,
    started_runtime: bool,
    started_endpoint: bool,
    browser: Option<Child>,
    profile: Option<PathBuf>,
    commands: usize,
}

impl Demo {
    fn say(&self, line: &str) {
        println!("[{:6.2}s] {line}", self.t0.elapsed().as_secs_f64());
    }

    fn detail(&self, line: &str) {
        println!("          {line}");
    }

    /// Run one command through the public client; Ok = its value, Err = the error facts.
    fn call(&mut self, command: &str, arguments: Value) -> Result<Value, Value> {
        self.commands += 1;
        run_command(&self.client, &self.cwd, command, arguments)
    }

    /// `call`, turning a failure into a demo failure.
    fn must(&mut self, command: &str, arguments: Value) -> Result<Value, Failure> {
        self.call(command, arguments).map_err(|e| Failure(format!("`{command}` failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""))))
    }

    fn script(&mut self, browser: &Path) -> Result<(), Failure> {
        if self.client.registry().get("web-session-start").is_none() {
            return Err(Failure(format!(
                "the Web plugin is not installed in {} (expected libaab_plugin_web.so next to the aab binary, or set AI_APP_BRIDGE_PLUGIN_DIR)",
                self.client.config().plugin_dir.display()
            )));
        }
        self.say("aab demo — an agent's view of a web app, through the public aab client");

        // 1. Runtime.
        let status = self.must("runtime", json!({"operation": "status"}))?;
        if status["status"] == json!("running") {
            self.say(&format!("Using the runtime that already runs (pid {}).", status["pid"]));
        } else {
            let started = self.must("runtime", json!({"operation": "start"}))?;
            self.started_runtime = true;
            self.say(&format!("Started the shared runtime (pid {}).", started["pid"]));
        }

        // 2. Web endpoint + sample app.
        let info = match self.call("web-session-start", json!({"webPort": 0, "sampleApp": true})) {
            Ok(v) => {
                self.started_endpoint = v["reused"] != json!(true);
                v
            }
            Err(e) if e["error"] == json!("web_provider_running") => self.must("web-connect-info", json!({}))?,
            Err(e) => return Err(Failure(format!("web-session-start failed: {} — {}", e["error"], e["message"]))),
        };
        let Some(sample) = info["sampleAppUrl"].as_str().map(str::to_string) else {
            return Err(Failure("a Web endpoint without the sample app already runs; stop it with `aab web-session-stop` and retry".into()));
        };
        let endpoint = info["endpoint"].as_str().unwrap_or_default().to_string();
        let token = info["token"].as_str().unwrap_or_default().to_string();
        self.say(&format!("Web endpoint {endpoint} is up (protocol {}); it serves the sample app at {sample}", info["protocol"].as_str().unwrap_or("?")));

        // 3. Browser.
        let session_id = format!("demo-{}", random_hex(8));
        let url = format!("{sample}form.html#endpoint={endpoint}&token={token}&session={session_id}");
        let profile = std::env::temp_dir().join(format!("aab-demo-chromium-{}", random_hex(6)));
        std::fs::create_dir_all(&profile).map_err(|e| Failure(format!("cannot create {}: {e}", profile.display())))?;
        self.profile = Some(profile.clone());
        let child = Command::new(browser)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,1000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Failure(format!("cannot start {}: {e} (install Chromium with: {INSTALL_HINT})", browser.display())))?;
        self.say(&format!("Opened the sign-up form in headless Chromium (pid {}); its Web SDK connects back as session {session_id}.", child.id()));
        self.browser = Some(child);

        let deadline = Instant::now() + Duration::from_secs(20);
        let runtime_epoch = loop {
            let sessions = self.must("web-sessions", json!({}))?;
            let found = sessions["sessions"].as_array().into_iter().flatten().find(|s| s["sessionId"] == json!(session_id) && s["connected"] == json!(true)).cloned();
            if let Some(s) = found {
                self.say(&format!("web-sessions: the page is connected — app {:?}, url {}", s["appName"].as_str().unwrap_or(""), s["url"].as_str().unwrap_or("")));
                break s["runtimeEpoch"].as_str().unwrap_or_default().to_string();
            }
            if let Some(child) = self.browser.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(Failure(format!("Chromium exited ({status}) before the page connected")));
            }
            if Instant::now() > deadline {
                return Err(Failure("the sample page did not connect within 20 s".into()));
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let target = json!({"sessionId": session_id, "runtimeEpoch": runtime_epoch});
        let with = |extra: Value| {
            let mut a = target.clone();
            if let (Some(a), Some(extra)) = (a.as_object_mut(), extra.as_object()) {
                a.extend(extra.clone());
            }
            a
        };

        // 4. Observe.
        let dom = self.must("web-dom", target.clone())?;
        let controls = dom["dom"]["controls"].as_array().cloned().unwrap_or_default();
        self.say(&format!(
            "web-dom: {:?} — {} controls, navigation {}",
            dom["dom"]["title"].as_str().unwrap_or(""),
            dom["dom"]["controlCount"],
            dom["pageRef"]["navigationId"].as_str().unwrap_or("")
        ));
        for c in &controls {
            let label = c["text"].as_str().filter(|t| !t.is_empty()).or(c["id"].as_str()).unwrap_or("");
            let mut state = c["interaction"]["status"].as_str().unwrap_or("").to_string();
            if c["checked"].is_boolean() {
                state.push_str(&format!(", checked={}", c["checked"]));
            }
            if c["sensitive"] == json!(true) {
                state.push_str(", sensitive");
            }
            self.detail(&format!("{:>4}  {:<9} {:<28} {state}", c["elementId"].as_str().unwrap_or(""), c["tag"].as_str().unwrap_or(""), label));
        }

        // A capture watermark before acting bounds what we read afterwards.
        let before = self.must("web-network", target.clone())?;
        let watermark = before["watermarkCursor"].as_str().unwrap_or_default().to_string();
        self.say(&format!("web-network: capture barrier taken, watermark {watermark}"));

        // 5. Act.
        let find = |dom: &Value, id: &str| -> Result<Value, Failure> {
            dom["dom"]["controls"].as_array().and_then(|l| l.iter().find(|c| c["id"] == json!(id)).cloned()).ok_or_else(|| Failure(format!("the form has no control #{id}")))
        };
        let expect = |dom: &Value, c: &Value| {
            let mut element = serde_json::Map::new();
            for k in ["elementId", "tag", "id", "name", "type", "role", "ariaLabel", "placeholder", "href", "text"] {
                element.insert(k.into(), c[k].clone());
            }
            json!({"pageRef": dom["pageRef"], "element": element})
        };
        for (id, value) in [("name", "Ada Lovelace"), ("email", "ada@example.org")] {
            let c = find(&dom, id)?;
            let started = Instant::now();
            let r = self.must("web-input", with(json!({"selector": {"elementId": c["elementId"]}, "expectedTarget": expect(&dom, &c), "value": value})))?;
            self.say(&format!("web-input #{id} = {:?} (settled, {} ms)", r["value"].as_str().unwrap_or(""), started.elapsed().as_millis()));
        }
        let password = find(&dom, "password")?;
        let r = self.must("web-input", with(json!({"selector": {"elementId": password["elementId"]}, "value": "correct horse battery staple"})))?;
        self.say(&format!("web-input #password: sensitive={}, valueLength={} — the value itself never leaves the page", r["sensitive"], r["valueLength"]));

        self.must("web-scroll", with(json!({"mode": "into-view", "selector": {"css": "#save"}})))?;
        self.say("web-scroll: brought the Save button into view");
        let dom = self.must("web-dom", target.clone())?;
        let terms = find(&dom, "terms")?;
        self.must("web-click", with(json!({"selector": {"elementId": terms["elementId"]}, "expectedTarget": expect(&dom, &terms)})))?;
        let dom = self.must("web-dom", target.clone())?;
        self.say(&format!("web-click: ticked \"I accept the terms\" (observed checked={})", find(&dom, "terms")?["checked"]));
        let save = find(&dom, "save")?;
        let started = Instant::now();
        let clicked = self.must("web-click", with(json!({"selector": {"text": "Save"}, "expectedTarget": expect(&dom, &save)})))?;
        let action_id = clicked["actionId"].as_str().unwrap_or_default().to_string();
        self.say(&format!("web-click: pressed Save — action {action_id} settled by the page's completion ({} ms)", started.elapsed().as_millis()));

        // 6. Wait for the business result, then observe it.
        let waited = self.must("web-wait", with(json!({"targetText": "Saved #"})))?;
        self.say(&format!("web-wait: the page shows \"Saved #\" (after {} ms on the page)", waited["elapsedMs"]));
        let dom = self.must("web-dom", target.clone())?;
        let result = find(&dom, "result")?;
        self.say(&format!("web-dom: the result line reads {:?}", result["text"].as_str().unwrap_or("")));

        // 7. What the page logged and fetched since the watermark.
        for stream in ["logs", "network", "state"] {
            let read = self.must(&format!("web-{stream}"), with(json!({"factCursor": watermark})))?;
            let coverage = &read["coverage"];
            self.say(&format!(
                "web-{stream}: {} record(s) since the watermark — coverage {} ({})",
                read["count"],
                coverage["status"].as_str().unwrap_or("?"),
                coverage["reasons"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")).filter(|s| !s.is_empty()).unwrap_or_else(|| "no reasons".into())
            ));
            for r in read["records"].as_array().into_iter().flatten() {
                let item = &r["item"];
                let what = match stream {
                    "logs" => format!("{} {:?}", item["level"].as_str().unwrap_or(""), item["message"].as_str().unwrap_or("")),
                    "network" => format!("{} {} → {} in {} ms", item["method"].as_str().unwrap_or(""), item["url"].as_str().unwrap_or(""), item["status"], item["durationMs"]),
                    _ => format!("{} = {}", item["name"].as_str().unwrap_or(""), item["value"]),
                };
                let by = if r["actionId"] == json!(action_id) { "caused by the Save click".to_string() } else { r["association"].as_str().unwrap_or("").to_string() };
                self.detail(&format!("#{:<3} {what}  [{by}]", r["sequence"]));
            }
        }
        let status = self.must("web-execution", with(json!({"operation": "status"})))?;
        let actions = status["actions"].as_array().map(Vec::len).unwrap_or(0);
        self.say(&format!("web-execution: {actions} managed action(s) recorded for this page, persistence {}", status["persistence"].as_str().unwrap_or("?")));
        { #[path = "demo_script.rs"] mod demo_script; let t0 = self.t0; demo_script::run(&mut |c, a| self.call(c, a), &|l| println!("[{:6.2}s] {l}", t0.elapsed().as_secs_f64()), &target).map_err(Failure)?; }
        { #[path = "demo_executor.rs"] mod demo_executor; let t0 = self.t0; let form = format!("{sample}form.html"); demo_executor::run(&mut |c, a| self.call(c, a), &|l| println!("[{:6.2}s] {l}", t0.elapsed().as_secs_f64()), &form).map_err(Failure)?; }
        { #[path = "demo_intent.rs"] mod demo_intent; let t0 = self.t0; demo_intent::run(&mut |c, a| self.call(c, a), &|l| println!("[{:6.2}s] {l}", t0.elapsed().as_secs_f64()), &target).map_err(Failure)?; }
        Ok(())
    }

    /// Stop what the demo started, in reverse order. Failures here are reported but
    /// do not change the outcome.
    fn cleanup(&mut self) {
        if let Some(mut child) = self.browser.take() {
            if let Ok(pgid) = i32::try_from(child.id()) {
                // The browser runs in its own process group: end its helpers too.
                let _ = Command::new("kill").args(["-TERM", "--", &format!("-{pgid}")]).stderr(Stdio::null()).status();
            }
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            self.say("Closed Chromium.");
        }
        if let Some(profile) = self.profile.take() {
            let _ = std::fs::remove_dir_all(profile);
        }
        if self.started_endpoint {
            match self.call("web-session-stop", json!({})) {
                Ok(_) => self.say("Stopped the Web endpoint."),
                Err(e) => eprintln!("aab demo: web-session-stop failed: {e}"),
            }
        }
        if self.started_runtime {
            match self.call("runtime", json!({"operation": "stop"})) {
                Ok(_) => self.say("Stopped the runtime."),
                Err(e) => eprintln!("aab demo: runtime stop failed: {e}"),
            }
        }
    }
}

/// One command through the public client, as a demo runs it (no extraction, a 256 KiB
/// reply budget): Ok = its value, Err = the error facts. Shared by both demos.
pub(crate) fn run_command(client: &Client, cwd: &Path, command: &str, arguments: Value) -> Result<Value, Value> {
    let request = json!({"command": command, "arguments": arguments, "extract": null, "output": {"maxBytes": 262144}});
    let reply = client.run(&request, cwd);
    let body = reply.body;
    if body.pointer("/execution/ok") == Some(&json!(true)) && reply.exit_code == 0 {
        Ok(body.get("value").cloned().unwrap_or(Value::Null))
    } else {
        Err(body.get("execution").cloned().unwrap_or(body))
    }
}
