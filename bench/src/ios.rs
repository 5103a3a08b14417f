//! `aab-bench-ios`: iOS figures for docs/PERFORMANCE.md, in one run against one
//! simulated iPhone (`aab-ios-sim`: devicectl double, the sample app's SDK listener,
//! a prepared WebDriverAgent Runner), each aab command through one long-lived
//! `aab mcp` session beside the raw request a naive client would send instead:
//!   - `ios-status` (descriptor read through devicectl, identity headers, the
//!     reply's `runtimeBinding` checked) vs a raw `GET /v1/status` with the headers;
//!   - `ios-uia-tree` (the Runner's session source, bound to the session's App and
//!     process) vs a raw W3C `GET /session/<id>/source` (how Appium XCUITest and
//!     mobile-mcp read the WDA source);
//!   - `ios-tap-native` (selector resolved in a fresh source, bound tap) vs one
//!     managed coordinate `tap` POST — the prepared Runner serves no W3C actions
//!     route, so this is the closest to a blind tap it accepts;
//!   - `ios-h5-click` (selector-bound click in the WebView) vs a raw
//!     `/v1/h5/action` POST with a hand-built payload from one earlier observation.
//!
//! Every aab call is checked against the simulator's ground truth outside the
//! timed window (`truth`, `state`, the real page via `h5`): a missing or doubled
//! effect aborts the run. Nothing here asserts a threshold.
//!
//! Usage (release build first):
//!   cargo build --release -p aab-bench -p aab-cli -p aab-plugin-ios -p aab-plugin-wda -p aab-ios-sim
//!   target/release/aab-bench-ios [--calls 30]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod ios_raw;
mod mcp;
mod world;
use mcp::{Mcp, run_command};

const APP: &str = "com.example.aab.ios";
const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";

fn main() {
    let mut world = None;
    let code = match try_main(&mut world) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("aab-bench-ios: {e}");
            1
        }
    };
    if let Some(w) = world.take() {
        w.stop();
    }
    std::process::exit(code);
}

/// Median and p95 of one path, in milliseconds.
fn summary(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    (pick(0.5), pick(0.95))
}

/// One row of the table: aab's path beside its peer.
struct Row {
    command: &'static str,
    aab: (f64, f64),
    peer: &'static str,
    peer_figures: (f64, f64),
    not_verified: &'static str,
}

/// Everything this bench starts; `stop` ends it (also on errors).
struct World {
    dir: tempfile::TempDir,
    bin: PathBuf,
    rt: tokio::runtime::Runtime,
    sim: aab_ios_sim::Simulator,
    udid: String,
    runtime_started: bool,
}

impl World {
    fn start(bin: &Path) -> Result<World, String> {
        for (what, p) in [("aab", bin.join("aab")), ("aab-ios-sim", bin.join("aab-ios-sim")), ("the iOS plugin", bin.join("libaab_plugin_ios.so")), ("the WDA plugin", bin.join("libaab_plugin_wda.so"))] {
            if !p.exists() {
                return Err(format!("{what} not found at {}: build it first", p.display()));
            }
        }
        let dir = tempfile::Builder::new().prefix("aab-bench-ios-").tempdir().map_err(|e| e.to_string())?;
        for sub in ["home", "runtimes", "facts", "plugins", "ownership"] {
            std::fs::create_dir_all(dir.path().join(sub)).map_err(|e| e.to_string())?;
        }
        for plugin in ["libaab_plugin_ios.so", "libaab_plugin_wda.so"] {
            std::fs::copy(bin.join(plugin), dir.path().join("plugins").join(plugin)).map_err(|e| format!("{plugin}: {e}"))?;
        }
        // The simulator runs on its own runtime; this one only drives its async API.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let sim = rt.block_on(aab_ios_sim::Simulator::start(aab_ios_sim::Options::default())).map_err(|e| format!("start the iOS simulator: {e}"))?;
        let udid = sim.devices[0].udid.clone();
        Ok(World { dir, bin: bin.to_path_buf(), rt, sim, udid, runtime_started: false })
    }

    fn aab(&self, args: &[&str]) -> Command {
        let mut c = world::aab_command(&self.bin, self.dir.path(), args);
        c.env("AI_APP_BRIDGE_DEVICECTL", self.sim.devicectl());
        c
    }

    /// A control op that must succeed (ground truth and set-up).
    fn control(&self, req: Value) -> Result<Value, String> {
        let v = self.rt.block_on(self.sim.control(req.clone()));
        if v["ok"] != json!(true) {
            return Err(format!("control {req}: {v}"));
        }
        Ok(v)
    }

    /// Truth facts of `kind` after sequence number `since`.
    fn truth(&self, kind: &str, since: u64) -> Result<Vec<Value>, String> {
        Ok(self.control(json!({"op": "truth", "kind": kind, "since": since}))?["items"].as_array().cloned().unwrap_or_default())
    }

    /// The last sequence number of the truth log (a cursor for "effects since"),
    /// read from `since` on so the log is not copied whole each time.
    fn truth_cursor(&self, since: u64) -> Result<u64, String> {
        let newer = self.control(json!({"op": "truth", "since": since}))?["items"].as_array().cloned().unwrap_or_default();
        Ok(newer.iter().filter_map(|f| f["seq"].as_u64()).max().unwrap_or(since))
    }

    fn app(&self) -> Result<Value, String> {
        let state = self.control(json!({"op": "state"}))?;
        state["apps"].as_array().and_then(|a| a.iter().find(|a| a["bundleId"] == json!(APP)).cloned()).ok_or_else(|| format!("no {APP} in {state}"))
    }

    fn page(&self, expression: &str) -> Result<Value, String> {
        Ok(self.control(json!({"op": "h5", "bundleId": APP, "expression": expression}))?["value"].clone())
    }

    fn stop(self) {
        if self.runtime_started {
            let _ = self.aab(&["runtime", "--operation", "stop"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
        // Dropping the simulator stops its listeners and Runner, kills Chromium and
        // the doubles; the temp dir goes after it.
        let World { dir, rt, sim, .. } = self;
        drop(sim);
        drop(rt);
        drop(dir);
    }
}

/// `n` timed calls of `call`; `check` runs after each, outside the timed window.
fn measure(n: usize, mut call: impl FnMut(usize) -> Result<Value, String>, mut check: impl FnMut(usize, &Value) -> Result<(), String>) -> Result<(f64, f64), String> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let reply = call(i)?;
        samples.push(t.elapsed());
        check(i, &reply)?;
    }
    Ok(summary(samples))
}

fn centre(node: &Value) -> (f64, f64) {
    let r = &node["rect"];
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    (f("x") + f("width") / 2.0, f("y") + f("height") / 2.0)
}

fn try_main(world: &mut Option<World>) -> Result<(), String> {
    let arg = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let calls: usize = arg("--calls").and_then(|n| n.parse().ok()).filter(|n| *n > 0).unwrap_or(30);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.parent().ok_or("no exe dir")?.to_path_buf();
    let w = world.insert(World::start(&bin)?);
    let udid = w.udid.clone();
    println!("aab-bench-ios: simulated {udid}, {calls} calls per figure, {}", bin.display());

    // The Runner first (it takes the foreground when it starts), then the App in front.
    let runner = w.control(json!({"op": "start-runner"}))?;
    w.control(json!({"op": "launch", "bundleId": APP}))?;
    let app = w.app()?;
    let (app_pid, app_epoch, app_port) = (app["pid"].as_u64().ok_or("no app pid")?, app["runtimeEpoch"].as_str().ok_or("no app epoch")?.to_string(), app["port"].as_u64().ok_or("no app port")? as u16);
    let (runner_pid, runner_epoch, runner_port) = (runner["pid"].as_u64().ok_or("no runner pid")?, runner["runtimeEpoch"].as_str().ok_or("no runner epoch")?.to_string(), runner["port"].as_u64().ok_or("no runner port")? as u16);

    w.runtime_started = true;
    let started = w.aab(&["runtime", "--operation", "start"]).stderr(Stdio::null()).output().map_err(|e| format!("spawn aab: {e}"))?;
    let started: Value = serde_json::from_slice(&started.stdout).unwrap_or(Value::Null);
    if started["execution"]["ok"] != json!(true) {
        return Err(format!("runtime start: {started}"));
    }
    let mut aab = Mcp::start(w.aab(&["mcp"]), "aab-bench-ios")?;
    let mut rows = Vec::new();
    let sdk = json!({"deviceId": udid, "bundleId": APP});

    // ---- ios-status vs GET /v1/status
    let aab_status = measure(calls, |_| run_command(&mut aab, "ios-status", sdk.clone()), |i, body| {
        let b = &body["value"]["runtimeBinding"];
        if (b["bundleId"].as_str(), b["runtimeEpoch"].as_str(), b["processId"].as_u64(), b["port"].as_u64()) != (Some(APP), Some(app_epoch.as_str()), Some(app_pid), Some(u64::from(app_port))) {
            return Err(format!("ios-status call {i}: runtimeBinding {b} is not the simulator's process (pid {app_pid}, epoch {app_epoch}, port {app_port})"));
        }
        Ok(())
    })?;
    let identity = ios_raw::sdk_identity(APP, &app_epoch, app_pid, app_port);
    let raw_status = measure(calls, |_| ios_raw::exchange(app_port, "GET", "/v1/status", &identity, None).map(|(s, v)| json!({"status": s, "body": v})), |i, r| {
        if r["status"] != json!(200) {
            return Err(format!("raw GET /v1/status call {i}: {r}"));
        }
        Ok(())
    })?;
    rows.push(Row { command: "ios-status", aab: aab_status, peer: "raw `GET /v1/status` with identity headers", peer_figures: raw_status, not_verified: "that the reply's `runtimeBinding` is the descriptor's process (a restarted app or another app on the port goes unnoticed); no device/tunnel/descriptor read" });

    // ---- ios-uia-tree vs GET /session/<id>/source
    let runner_args = json!({"deviceId": udid, "wdaRunnerBundleId": RUNNER});
    let mut create = runner_args.clone();
    create["operation"] = json!("create");
    create["bundleId"] = json!(APP);
    let created = run_command(&mut aab, "ios-wda-session", create)?;
    let sid = created["value"]["wdaSessionId"].as_str().ok_or_else(|| format!("no session id in {created}"))?.to_string();
    let held = w.control(json!({"op": "state"}))?["runner"]["session"]["sessionId"].clone();
    if held != json!(sid) {
        return Err(format!("the Runner holds session {held}, aab created {sid}"));
    }
    let mut native = runner_args.clone();
    native["bundleId"] = json!(APP);
    native["wdaSessionId"] = json!(sid);
    let mut sign_in = Value::Null;
    let aab_tree = measure(calls, |_| run_command(&mut aab, "ios-uia-tree", native.clone()), |i, body| {
        let tree = &body["value"];
        if (tree["session"]["sessionId"].as_str(), tree["session"]["processId"].as_u64()) != (Some(sid.as_str()), Some(app_pid)) {
            return Err(format!("ios-uia-tree call {i}: session {} is not the Runner's {sid} for pid {app_pid}", tree["session"]));
        }
        let node = tree["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["rawIdentifier"] == json!("signIn")).cloned());
        sign_in = node.ok_or_else(|| format!("ios-uia-tree call {i}: no signIn node"))?;
        Ok(())
    })?;
    let wda = ios_raw::wda_identity(RUNNER, &runner_epoch, runner_pid, runner_port);
    let mut targeted = wda.clone();
    targeted.extend([("X-AAB-WDA-Target-Bundle-Id", APP.to_string()), ("X-AAB-WDA-Target-Process-Id", app_pid.to_string()), ("X-AAB-WDA-Session-Id", sid.clone())]);
    let source_path = format!("/session/{sid}/source?format=json");
    let raw_tree = measure(calls, |_| ios_raw::exchange(runner_port, "GET", &source_path, &targeted, None).map(|(s, v)| json!({"status": s, "body": v})), |i, r| {
        if r["status"] != json!(200) || r["body"]["value"].is_null() {
            return Err(format!("raw GET {source_path} call {i}: {}", r.to_string().chars().take(500).collect::<String>()));
        }
        Ok(())
    })?;
    rows.push(Row { command: "ios-uia-tree", aab: aab_tree, peer: "raw W3C `GET /session/<id>/source` to the Runner", peer_figures: raw_tree, not_verified: "the reply's `wdaBinding` (which Runner process answered), the descriptor / tunnel; no node identity or `expectedTarget` refs for later actions" });

    // ---- ios-tap-native vs one managed coordinate tap
    let mut tap_args = native.clone();
    tap_args["selector"] = json!({"label": "Sign in", "type": "XCUIElementTypeButton"});
    let mut cursor = w.truth_cursor(0)?;
    let aab_tap = measure(calls, |_| run_command(&mut aab, "ios-tap-native", tap_args.clone()), |i, body| {
        let action_id = &body["value"]["actionId"];
        let events: Vec<Value> = w.truth("wda", cursor)?.into_iter().filter(|e| &e["actionId"] == action_id && e["event"] != json!("reply-dropped")).collect();
        let taps: Vec<Value> = w.truth("native-tap", cursor)?;
        if events.len() != 1 || taps.len() != 1 || taps[0]["by"] != json!("wda") {
            return Err(format!("ios-tap-native call {i} ({action_id}): expected exactly one Runner event and one native tap on the device, saw {} events and {} taps: {events:?} {taps:?}", events.len(), taps.len()));
        }
        cursor = w.truth_cursor(cursor)?;
        Ok(())
    })?;
    let (x, y) = centre(&sign_in);
    let before_raw_taps = w.truth_cursor(cursor)?;
    let raw_tap = measure(calls, |i| {
        let action_id = format!("bench-raw-tap-{i}");
        let body = json!({
            "operation": "tap", "target": {"bundleId": APP, "processId": app_pid, "sessionId": sid}, "payload": {"x": x, "y": y},
            "actionId": action_id, "execution": {"schemaVersion": "aab.wda-execution/v1", "actionId": action_id, "runtimeEpoch": runner_epoch, "timeoutMs": 10000},
        });
        ios_raw::exchange(runner_port, "POST", "/aab/action", &wda, Some(&body)).map(|(s, v)| json!({"status": s, "body": v}))
    }, |i, r| {
        if r["status"] != json!(200) {
            return Err(format!("raw POST /aab/action tap {i}: {r}"));
        }
        Ok(())
    })?;
    // Not part of the peer path (it checks nothing): the bench's own count, so the row compares taps that landed.
    let landed = w.truth("native-tap", before_raw_taps)?.len();
    if landed != calls {
        return Err(format!("the raw taps landed {landed} times for {calls} POSTs"));
    }
    rows.push(Row { command: "ios-tap-native", aab: aab_tap, peer: "one unbound managed `tap` POST to `/aab/action` by coordinates (the Runner serves no W3C actions route)", peer_figures: raw_tap, not_verified: "no selector resolution (coordinates from an earlier read), no `expectedTarget` / element identity, no `wdaBinding` check, no ownership journal or reconcile of a lost reply" });

    // ---- ios-h5-click vs a hand-built /v1/h5/action POST
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "web"}))?;
    let dom = run_command(&mut aab, "ios-h5-dom", sdk.clone())?;
    let page_ref = dom["value"]["pageRef"].clone();
    let pay = dom["value"]["dom"]["controls"].as_array().and_then(|cs| cs.iter().find(|c| c["text"] == json!("Pay now")).cloned()).ok_or_else(|| format!("no Pay now control in {dom}"))?;
    let mut click_args = sdk.clone();
    click_args["selector"] = json!({"text": "Pay now"});
    let clicks = |w: &World| -> Result<u64, String> { Ok(w.page("(window.aabClicks || []).length")?.as_u64().unwrap_or(0)) };
    let mut page_clicks = clicks(w)?;
    let mut cursor = w.truth_cursor(0)?;
    let aab_click = measure(calls, |_| run_command(&mut aab, "ios-h5-click", click_args.clone()), |i, body| {
        let action_id = &body["value"]["actionId"];
        let effects: Vec<Value> = w.truth("h5", cursor)?;
        let now = clicks(w)?;
        let mine = effects.iter().filter(|e| &e["actionId"] == action_id && e["action"] == json!("click")).count();
        if mine != 1 || effects.len() != 1 || now != page_clicks + 1 {
            return Err(format!("ios-h5-click call {i} ({action_id}): expected one click in the page, saw {mine} effects of this action, {} in all, page clicks {page_clicks} -> {now}", effects.len()));
        }
        page_clicks = now;
        cursor = w.truth_cursor(cursor)?;
        Ok(())
    })?;
    let page_keys = ["schemaVersion", "runtimeEpoch", "bundleId", "processId", "webViewId", "documentId", "url"];
    let hand_page: serde_json::Map<String, Value> = page_keys.iter().map(|k| ((*k).to_string(), page_ref[*k].clone())).collect();
    let element_keys = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];
    let hand_element: serde_json::Map<String, Value> = element_keys.iter().map(|k| ((*k).to_string(), if pay[*k].is_string() { pay[*k].clone() } else { json!("") })).collect();
    let before_raw = clicks(w)?;
    let raw_click = measure(calls, |i| {
        let action_id = format!("bench-raw-click-{i}");
        let body = json!({
            "payload": {"action": "click", "pageRef": hand_page, "element": hand_element}, "actionId": action_id,
            "execution": {"schemaVersion": "aab.h5-execution/v1", "actionId": action_id, "runtimeEpoch": app_epoch, "timeoutMs": 10000},
        });
        ios_raw::exchange(app_port, "POST", "/v1/h5/action", &identity, Some(&body)).map(|(s, v)| json!({"status": s, "body": v}))
    }, |i, r| {
        if r["status"] != json!(200) || r["body"]["ok"] != json!(true) {
            return Err(format!("raw POST /v1/h5/action {i}: {r}"));
        }
        Ok(())
    })?;
    let landed = clicks(w)? - before_raw;
    if landed != calls as u64 {
        return Err(format!("the raw H5 clicks landed {landed} times for {calls} POSTs"));
    }
    rows.push(Row { command: "ios-h5-click", aab: aab_click, peer: "raw `POST /v1/h5/action` with a hand-built payload (pageRef + element from one earlier `ios-h5-dom`)", peer_figures: raw_click, not_verified: "no selector resolution in the current DOM, no `runtimeBinding` check of the reply, no ownership journal, no recovery of a lost reply from the completion store (no peer tool drives the aab SDK)" });

    drop(aab);
    println!();
    println!("| command ({calls} calls each) | aab median | aab p95 | peer path | peer median | peer p95 | what the peer path does not verify |");
    println!("|---|---:|---:|---|---:|---:|---|");
    for r in &rows {
        println!("| `{}` via MCP | {:.2} ms | {:.2} ms | {} | {:.2} ms | {:.2} ms | {} |", r.command, r.aab.0, r.aab.1, r.peer, r.peer_figures.0, r.peer_figures.1, r.not_verified);
    }
    Ok(())
}
