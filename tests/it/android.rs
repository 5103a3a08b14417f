//! Android provider e2e through the public CLI and MCP: the `android` plugin talks
//! to a REAL adb server (Debian `adb`, on this test's own port with this test's
//! `HOME`), which is connected to fake phones (`aab_e2e::fake_adbd`) over TCP like
//! an emulator. Outcomes are checked independently of the provider's report: the
//! forwards through the `adb` binary itself, requests through what the phone saw.
//! Every test kills its adb server when it ends. Other Android test modules reuse
//! [`World`] and [`simulated`] (the simulated phone behind this world's server).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use aab_e2e::fake_adbd::FakeAdbd;
use aab_e2e::{Run, TestEnv, error_facts, flags};
use serde_json::{Value, json};

const PKG: &str = "com.example.app";
const EPOCH: &str = "1764633600000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

/// One test's world: aab with the android plugin, a private adb server port and
/// the fake phones (served by a background tokio runtime).
pub(crate) struct World {
    pub env: TestEnv,
    pub port: u16,
    pub rt: tokio::runtime::Runtime,
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
    pub(crate) fn new() -> World {
        let env = TestEnv::new();
        env.install_plugin("aab_plugin_android", "android");
        let port = free_port();
        env.set_env("ANDROID_ADB_SERVER_PORT", port.to_string());
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        World { env, port, rt }
    }

    pub(crate) fn home(&self) -> std::path::PathBuf {
        self.env.root.join("user-home")
    }

    /// The real `adb` binary on this world's server (setup and ground truth only).
    pub(crate) fn adb(&self, args: &[&str]) -> String {
        let out = Command::new("adb").args(["-P", &self.port.to_string()]).args(args).env("HOME", self.home()).output().expect("run adb (apt-get install adb)");
        assert!(out.status.success(), "adb {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn server_listening(&self) -> bool {
        TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_millis(200)).is_ok()
    }

    /// A fake phone with an SDK app, connected and online.
    pub(crate) fn phone(&self) -> FakeAdbd {
        let fake = self.rt.block_on(FakeAdbd::start());
        {
            let mut p = fake.phone.lock().unwrap();
            p.descriptors.insert(PKG.into(), (0, descriptor(), String::new()));
            p.sockets.push(format!("aab-sdk-{EPOCH}"));
            p.http_reply = Some(json!({"ok": true, "app": {"packageName": PKG, "versionName": "1.0"}, "debugBridge": {"runtimeEpoch": EPOCH}}));
        }
        let said = self.adb(&["connect", &fake.serial()]);
        assert!(said.contains("connected to"), "{said}");
        let until = Instant::now() + Duration::from_secs(15);
        while !self.adb(&["devices"]).lines().any(|l| l.starts_with(&fake.serial()) && l.ends_with("device")) {
            assert!(Instant::now() < until, "{} never came online", fake.serial());
            std::thread::sleep(Duration::from_millis(50));
        }
        fake
    }

    pub(crate) fn forwards(&self) -> Vec<String> {
        self.adb(&["forward", "--list"]).lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
    }

    pub(crate) fn run(&self, command: &str, args: Value) -> (Value, Run) {
        let mut argv = vec![command.to_string()];
        argv.extend(flags(&args));
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = self.env.aab(&refs);
        let body = self.env.json_of(&run);
        (body, run)
    }

    #[track_caller]
    pub(crate) fn ok(&self, command: &str, args: Value) -> Value {
        let (body, run) = self.run(command, args);
        self.env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("{command} should succeed"));
        body["value"].clone()
    }

    /// The command must fail with `code`, never dispatched; returns the error facts.
    #[track_caller]
    pub(crate) fn fails(&self, command: &str, args: Value, code: &str) -> Value {
        let (body, run) = self.run(command, args);
        let facts = error_facts(&body).clone();
        self.env.check(run.exit() != 0 && facts["error"] == json!(code) && facts["dispatched"] == json!(false), &run, &format!("{command} should fail with {code}, not dispatched"));
        facts
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // The adb server first (started by the runtime, it carries the runtime's
        // environment, so the env's own shutdown would otherwise count it as a
        // leftover runtime process); the runtime stops when `env` drops.
        if let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"0009host:kill");
            let _ = s.read(&mut [0u8; 4]);
        }
        let until = Instant::now() + Duration::from_secs(10);
        while self.server_listening() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn descriptor() -> String {
    json!({"schema": "ai-app-bridge.android-endpoint.v1", "ok": true, "packageName": PKG, "runtimeEpoch": EPOCH, "transport": "localabstract",
           "socketName": format!("aab-sdk-{EPOCH}"), "version": "0.4.5", "updatedAtMs": 1764633600123u64, "error": null})
    .to_string()
}

#[test]
fn android_no_adb_server_is_started_and_no_device_is_reported() {
    let w = World::new();
    assert!(!w.server_listening());
    let facts = w.fails("status", json!({"packageName": PKG}), "device_not_found");
    assert!(facts["message"].as_str().unwrap_or("").contains("no Android device"), "{facts}");
    assert!(w.server_listening(), "the provider started an adb server on ANDROID_ADB_SERVER_PORT");
    assert!(w.home().join(".android/adbkey").exists(), "with the runtime's HOME");
}

#[test]
fn android_wrong_adb_path_is_a_clear_error() {
    let w = World::new();
    let facts = w.fails("forward", json!({"packageName": PKG, "adb": "/nonexistent/platform-tools/adb"}), "adb_unavailable");
    assert_eq!(facts["field"], json!("adb"), "{facts}");
    assert!(facts["message"].as_str().unwrap().contains("/nonexistent/platform-tools/adb"), "{facts}");
    assert!(!w.server_listening(), "nothing was started");
}

#[test]
fn android_status_forward_and_remove_forward_against_a_phone() {
    let w = World::new();
    let phone = w.phone();
    let serial = phone.serial();

    let status = w.ok("status", json!({"packageName": PKG}));
    assert_eq!(status["app"]["packageName"], json!(PKG), "{status}");
    assert_eq!(phone.phone.lock().unwrap().http, vec!["GET /v1/status HTTP/1.1"], "ground truth: one request reached the app");
    let listed = w.forwards();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].starts_with(&format!("{serial} tcp:")) && listed[0].ends_with(&format!(" localabstract:aab-sdk-{EPOCH}")), "{listed:?}");

    // `forward` reuses the exact mapping `status` created.
    let fwd = w.ok("forward", json!({"packageName": PKG, "serial": serial}));
    assert_eq!((fwd["reused"].clone(), fwd["runtimeEpoch"].clone(), fwd["serial"].clone()), (json!(true), json!(EPOCH), json!(serial)), "{fwd}");
    let port = fwd["port"].as_u64().unwrap();
    assert_eq!(listed[0], format!("{serial} tcp:{port} localabstract:aab-sdk-{EPOCH}"));

    // An explicit port that forwards something else is a mismatch; nothing changes.
    w.adb(&["forward", "tcp:0", "localabstract:elsewhere"]);
    let other: u64 = w.forwards().iter().find(|l| l.ends_with("localabstract:elsewhere")).and_then(|l| l.split_whitespace().nth(1)?.strip_prefix("tcp:")?.parse().ok()).unwrap();
    let facts = w.fails("status", json!({"packageName": PKG, "port": other}), "bridge_forward_mismatch");
    assert_eq!(facts["field"], json!("port"), "{facts}");
    assert_eq!(phone.phone.lock().unwrap().http.len(), 1, "ground truth: no request on a mismatched forward");

    // remove-forward verifies the serial before removing.
    w.fails("remove-forward", json!({"serial": "127.0.0.1:1", "port": port}), "bridge_forward_mismatch");
    assert_eq!(w.forwards().len(), 2);
    let removed = w.ok("remove-forward", json!({"serial": serial, "port": port}));
    assert_eq!(removed["removed"]["remote"], json!(format!("localabstract:aab-sdk-{EPOCH}")), "{removed}");
    assert!(!w.forwards().iter().any(|l| l.contains(&format!("tcp:{port} "))), "ground truth: the forward is gone");

    // Descriptor faults surface with their codes, before any request.
    phone.phone.lock().unwrap().descriptors.insert(PKG.into(), (1, String::new(), "run-as: package not debuggable: com.example.app".into()));
    w.fails("status", json!({"packageName": PKG}), "bridge_endpoint_discovery_failed");
    phone.phone.lock().unwrap().descriptors.insert(PKG.into(), (0, json!({"schema": "ai-app-bridge.android-endpoint.v1", "ok": false, "packageName": PKG, "error": "starting"}).to_string(), String::new()));
    w.fails("status", json!({"packageName": PKG}), "bridge_not_ready");
    phone.phone.lock().unwrap().descriptors.insert(PKG.into(), (0, descriptor().replace(PKG, "com.other.app"), String::new()));
    w.fails("forward", json!({"packageName": PKG}), "bridge_package_mismatch");
    assert_eq!(phone.phone.lock().unwrap().http.len(), 1);
}

#[test]
fn android_two_phones_need_a_serial_and_mcp_reaches_the_named_one() {
    let w = World::new();
    let (a, b) = (w.phone(), w.phone());
    let facts = w.fails("status", json!({"packageName": PKG}), "serial_required");
    assert_eq!(facts["field"], json!("serial"), "{facts}");
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "status", "arguments": {"packageName": PKG, "serial": b.serial()}, "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(b.phone.lock().unwrap().http.len(), 1);
    assert!(a.phone.lock().unwrap().http.is_empty(), "ground truth: only the named phone was asked");
    w.fails("status", json!({"packageName": PKG, "serial": "127.0.0.1:1"}), "device_not_found");
}

// ------------------------------------------------------------ the simulated phone

pub(crate) const SAMPLE: &str = "com.example.aab.sample";

/// The simulator (sim/android) with one device, connected to this world's server.
pub(crate) fn simulated(w: &World) -> aab_android_sim::Simulator {
    simulated_with(w, aab_android_sim::Options::default().scenario)
}

/// The simulator running `scenario` with one device, connected to this world's server.
pub(crate) fn simulated_with(w: &World, scenario: aab_android_sim::Scenario) -> aab_android_sim::Simulator {
    let opts = aab_android_sim::Options { scenario, ..Default::default() };
    let sim = w.rt.block_on(aab_android_sim::Simulator::start(opts)).expect("start the simulator (root, adb, busybox-static)");
    let serial = sim.devices[0].serial.clone();
    let said = w.adb(&["connect", &serial]);
    assert!(said.contains("connected to"), "{said}");
    w.wait_online(&serial);
    sim
}

/// One control request to the simulator; it must succeed.
pub(crate) fn control(w: &World, sim: &aab_android_sim::Simulator, req: Value) -> Value {
    let reply = w.rt.block_on(sim.control(req.clone()));
    assert_eq!(reply["ok"], json!(true), "control {req}: {reply}");
    reply
}

/// The simulator's own record of an app (screen, activity, captures, runtimeEpoch, …).
pub(crate) fn app_state(w: &World, sim: &aab_android_sim::Simulator, package: &str) -> Value {
    let state = control(w, sim, json!({"op": "state"}));
    state["apps"].as_array().unwrap().iter().find(|a| a["package"] == json!(package)).unwrap().clone()
}

impl World {
    pub(crate) fn wait_online(&self, serial: &str) {
        let until = Instant::now() + Duration::from_secs(15);
        while !self.adb(&["devices"]).lines().any(|l| l.starts_with(serial) && l.ends_with("device")) {
            assert!(Instant::now() < until, "{serial} never came online");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub(crate) fn sim_epoch(w: &World, sim: &aab_android_sim::Simulator) -> String {
    app_state(w, sim, SAMPLE)["runtimeEpoch"].as_str().unwrap().to_string()
}

#[test]
fn android_status_on_the_simulator_follows_restart_and_reboot() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let status = w.ok("status", json!({"packageName": SAMPLE}));
    let epoch = sim_epoch(&w, &sim);
    assert_eq!(status["debugBridge"]["runtimeEpoch"], json!(epoch), "{status}");
    assert_eq!(status["app"]["packageName"], json!(SAMPLE));

    // The app restarts: the next status reaches the new process (new runtimeEpoch).
    w.rt.block_on(sim.control(json!({"op": "restart", "package": SAMPLE})));
    let status = w.ok("status", json!({"packageName": SAMPLE, "serial": serial}));
    let new_epoch = sim_epoch(&w, &sim);
    assert_ne!(new_epoch, epoch);
    assert_eq!(status["debugBridge"]["runtimeEpoch"], json!(new_epoch), "{status}");

    // The phone reboots: a read while it is away fails without dispatch; once it is
    // back (reconnected) the read works again, against a new boot.
    let boot = w.rt.block_on(sim.control(json!({"op": "state"})))["bootId"].clone();
    w.rt.block_on(sim.control(json!({"op": "reboot", "offlineMs": 3000})));
    let (body, run) = w.run("status", json!({"packageName": SAMPLE, "serial": serial, "adbTimeoutMs": 2000}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("device_offline") && facts["dispatched"] == json!(false), &run, "status during a reboot: device_offline, not dispatched");
    std::thread::sleep(Duration::from_millis(3100));
    let _ = w.adb(&["disconnect", &serial]);
    w.adb(&["connect", &serial]);
    w.wait_online(&serial);
    let status = w.ok("status", json!({"packageName": SAMPLE, "serial": serial}));
    assert_eq!(status["debugBridge"]["runtimeEpoch"], json!(sim_epoch(&w, &sim)));
    assert_ne!(w.rt.block_on(sim.control(json!({"op": "state"})))["bootId"], boot);
    sim.shutdown();
}

#[test]
fn android_status_against_a_slow_sdk_ends_at_its_deadline() {
    let w = World::new();
    let sim = simulated(&w);
    w.rt.block_on(sim.control(json!({"op": "faults", "set": {"sdkDelayMs": 20000}})));
    let (body, run) = w.run("status", json!({"packageName": SAMPLE, "timeoutMs": 1500}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("deadline_exceeded") && facts["dispatched"] == json!(false), &run, "a slow SDK ends the read at its deadline, not dispatched");
    // The plugin dropped the read (its lane is free): the next read on the same target,
    // with its own default deadline, succeeds instead of queueing behind a 20 s wait.
    w.rt.block_on(sim.control(json!({"op": "faults", "reset": true})));
    w.ok("status", json!({"packageName": SAMPLE}));
}

/// The adb server a runtime talks to is part of its configuration: the android
/// manifest declares `ANDROID_ADB_SERVER_PORT` (and the other adb variables), so a
/// client pointing at another server is refused instead of being served by a runtime
/// that would act on the wrong devices.
#[test]
fn android_a_client_with_another_adb_server_is_not_served_by_this_runtime() {
    let w = World::new();
    let started = w.env.aab(&["runtime", "--operation", "start"]);
    w.env.expect_ok(&started, "runtime start");
    let other = free_port();
    let run = w.env.aab_with_env(&["status", "--package-name", PKG], &[("ANDROID_ADB_SERVER_PORT", &other.to_string())]);
    let body = w.env.json_of(&run);
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("runtime_configuration_mismatch") && facts["dispatched"] == json!(false), &run, "another adb server port is another configuration");
    assert!(TcpStream::connect_timeout(&([127, 0, 0, 1], other).into(), Duration::from_millis(200)).is_err(), "ground truth: no adb server was started on the client's port");
    assert!(!w.server_listening(), "ground truth: nor on the runtime's");
}
