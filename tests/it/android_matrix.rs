//! The Android test matrix against the SIMULATED phone (sim/android) behind
//! the real adb server, through the public CLI (and MCP for some steps): the rows
//! tests/it/android.rs covers only against the fake adbd, or not at all. Ground
//! truth is the simulator's control log (`truth`: what reached the app, the adb
//! services it served) and the `adb` binary (forwards, server state).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, sim_epoch, simulated};

/// The number of ground-truth records so far (the `since` of a later read).
fn mark(w: &World, sim: &aab_android_sim::Simulator, serial: &str) -> u64 {
    truth(w, sim, serial, 0, None).len() as u64
}

fn truth(w: &World, sim: &aab_android_sim::Simulator, serial: &str, since: u64, kind: Option<&str>) -> Vec<Value> {
    let mut req = json!({"op": "truth", "since": since, "serial": serial});
    if let Some(k) = kind {
        req["kind"] = json!(k);
    }
    let reply = w.rt.block_on(sim.control(req));
    reply["items"].as_array().cloned().unwrap_or_default()
}

/// SDK requests the app served since `since`: (path, runtimeEpoch).
fn sdk_requests(w: &World, sim: &aab_android_sim::Simulator, serial: &str, since: u64) -> Vec<(String, String)> {
    truth(w, sim, serial, since, Some("sdk-request")).iter().map(|r| (r["data"]["path"].as_str().unwrap_or("").to_string(), r["data"]["runtimeEpoch"].as_str().unwrap_or("").to_string())).collect()
}


fn kill_server(w: &World) {
    if let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], w.port).into(), Duration::from_secs(1)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(b"0009host:kill");
        let _ = s.read(&mut [0u8; 4]);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while w.server_listening() {
        assert!(Instant::now() < until, "the adb server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn android_matrix_each_descriptor_fault_has_its_code_on_the_simulator() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let good = control(&w, &sim, json!({"op": "descriptor", "package": SAMPLE}))["descriptor"].clone();
    assert_eq!(good["packageName"], json!(SAMPLE), "{good}");
    let with = |k: &str, v: Value| {
        let mut d = good.clone();
        d[k] = v;
        json!({"op": "descriptor", "package": SAMPLE, "value": d})
    };
    let cases: Vec<(&str, Option<Value>, &str, &str)> = vec![
        ("a package that is not installed", None, "com.example.absent", "bridge_endpoint_discovery_failed"),
        ("a package that is not debuggable (run-as refuses)", None, "com.example.notes", "bridge_endpoint_discovery_failed"),
        ("no descriptor file", Some(json!({"op": "descriptor", "package": SAMPLE, "remove": true})), SAMPLE, "bridge_endpoint_discovery_failed"),
        ("a descriptor that is not JSON", Some(json!({"op": "descriptor", "package": SAMPLE, "raw": "{\"schema\":"})), SAMPLE, "bridge_endpoint_invalid"),
        ("another schema", Some(with("schema", json!("ai-app-bridge.android-endpoint.v0"))), SAMPLE, "bridge_endpoint_invalid"),
        ("a socket name that is not the epoch's", Some(with("socketName", json!("aab-sdk-elsewhere"))), SAMPLE, "bridge_endpoint_invalid"),
        ("a transport other than localabstract", Some(with("transport", json!("tcp"))), SAMPLE, "bridge_endpoint_invalid"),
        ("an SDK that says it is not ready", Some(json!({"op": "descriptor", "package": SAMPLE, "value": {"schema": good["schema"], "ok": false, "packageName": SAMPLE, "error": "starting"}})), SAMPLE, "bridge_not_ready"),
        ("another app's descriptor", Some(with("packageName", json!("com.example.other"))), SAMPLE, "bridge_package_mismatch"),
    ];
    for (what, fault, package, code) in cases {
        if let Some(f) = fault {
            control(&w, &sim, f);
        }
        let since = mark(&w, &sim, &serial);
        let facts = w.fails("status", json!({"packageName": package}), code);
        assert!(!facts["message"].as_str().unwrap_or("").is_empty(), "{what}: {facts}");
        let seen = truth(&w, &sim, &serial, since, None);
        assert!(seen.iter().any(|r| r["kind"] == json!("run-as") || r["data"]["command"].as_str().is_some_and(|c| c.contains("run-as"))), "{what}: the descriptor was read with run-as: {seen:?}");
        assert!(sdk_requests(&w, &sim, &serial, since).is_empty(), "{what}: ground truth: nothing reached the app");
        assert!(w.forwards().iter().all(|l| !l.contains("aab-sdk-elsewhere")), "{what}: no forward to a socket the descriptor merely names");
    }

    // A crashed app: its socket is gone, the stale descriptor still names it.
    control(&w, &sim, json!({"op": "restart", "package": SAMPLE}));
    control(&w, &sim, json!({"op": "crash", "package": SAMPLE}));
    let since = mark(&w, &sim, &serial);
    let (body, run) = w.run("status", json!({"packageName": SAMPLE}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["dispatched"] == json!(false) && matches!(facts["error"].as_str(), Some("bridge_not_ready" | "bridge_endpoint_discovery_failed")), &run, "a crashed app: not ready, not dispatched");
    assert!(sdk_requests(&w, &sim, &serial, since).is_empty());

    // The app starts again (a fresh descriptor): the same command now reaches it.
    control(&w, &sim, json!({"op": "restart", "package": SAMPLE}));
    let since = mark(&w, &sim, &serial);
    let status = w.ok("status", json!({"packageName": SAMPLE}));
    let epoch = sim_epoch(&w, &sim);
    assert_eq!(status["debugBridge"]["runtimeEpoch"], json!(epoch));
    assert_eq!(sdk_requests(&w, &sim, &serial, since), vec![("/v1/status".to_string(), epoch)]);
    sim.shutdown();
}

#[test]
fn android_matrix_forward_reused_mismatched_and_cleaned_up_on_the_simulator() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let epoch = sim_epoch(&w, &sim);

    w.ok("status", json!({"packageName": SAMPLE}));
    let listed = w.forwards();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let port: u64 = listed[0].split_whitespace().nth(1).and_then(|l| l.strip_prefix("tcp:")).and_then(|p| p.parse().ok()).unwrap();
    assert_eq!(listed[0], format!("{serial} tcp:{port} localabstract:aab-sdk-{epoch}"), "ground truth (adb): the forward goes to the app's socket");

    // Reused: same port, no new rule.
    let fwd = w.ok("forward", json!({"packageName": SAMPLE}));
    assert_eq!((fwd["reused"].clone(), fwd["port"].clone()), (json!(true), json!(port)), "{fwd}");
    let fwd = w.ok("forward", json!({"packageName": SAMPLE, "port": port}));
    assert_eq!(fwd["reused"], json!(true), "{fwd}");
    assert_eq!(w.forwards(), listed, "ground truth: still the one rule");

    // Mismatched: an explicit port that forwards elsewhere is refused, untouched.
    w.adb(&["-s", &serial, "forward", "tcp:0", "localabstract:elsewhere"]);
    let other: u64 = w.forwards().iter().find(|l| l.ends_with("localabstract:elsewhere")).and_then(|l| l.split_whitespace().nth(1)?.strip_prefix("tcp:")?.parse().ok()).unwrap();
    let since = mark(&w, &sim, &serial);
    let facts = w.fails("status", json!({"packageName": SAMPLE, "port": other}), "bridge_forward_mismatch");
    assert_eq!(facts["field"], json!("port"), "{facts}");
    assert!(sdk_requests(&w, &sim, &serial, since).is_empty(), "ground truth: no request over a mismatched forward");
    assert!(w.forwards().iter().any(|l| l == &format!("{serial} tcp:{other} localabstract:elsewhere")), "the foreign rule is left as it was");

    // After a restart the old rule points at a dead socket: the next read makes a
    // new one to the new process and never talks to the old socket.
    control(&w, &sim, json!({"op": "restart", "package": SAMPLE}));
    let new_epoch = sim_epoch(&w, &sim);
    let since = mark(&w, &sim, &serial);
    w.ok("status", json!({"packageName": SAMPLE}));
    assert_eq!(sdk_requests(&w, &sim, &serial, since), vec![("/v1/status".to_string(), new_epoch.clone())]);
    assert!(w.forwards().iter().any(|l| l.ends_with(&format!("localabstract:aab-sdk-{new_epoch}"))), "{:?}", w.forwards());

    // Cleaned up: remove-forward checks the owner, then the rule is gone (adb says so).
    w.fails("remove-forward", json!({"serial": "127.0.0.1:1", "port": port}), "bridge_forward_mismatch");
    assert!(w.forwards().iter().any(|l| l.contains(&format!(" tcp:{port} "))), "a refused removal removes nothing");
    let ports: Vec<u64> = w.forwards().iter().filter_map(|l| l.split_whitespace().nth(1)?.strip_prefix("tcp:")?.parse().ok()).collect();
    assert_eq!(ports.len(), 3, "{:?}", w.forwards());
    let mut mcp = w.env.mcp();
    for p in &ports {
        let (body, is_error) = mcp.call_tool("run", json!({"command": "remove-forward", "arguments": {"serial": serial, "port": p}, "extract": null}));
        assert!(!is_error, "{body}");
    }
    assert!(w.forwards().is_empty(), "ground truth (adb): no forward left: {:?}", w.forwards());
    sim.shutdown();
}

#[test]
fn android_matrix_reboot_in_the_middle_of_a_read() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let boot = control(&w, &sim, json!({"op": "state"}))["bootId"].clone();
    w.ok("status", json!({"packageName": SAMPLE}));
    control(&w, &sim, json!({"op": "faults", "set": {"sdkDelayMs": 4000}}));
    let since = mark(&w, &sim, &serial);
    let env = &w.env;
    let (body, run) = std::thread::scope(|s| {
        let read = s.spawn(|| w.run("status", json!({"packageName": SAMPLE, "timeoutMs": 20000})));
        // The read is in the app (the SDK logged the request on receipt and now holds
        // it for the 4 s delay), then the phone reboots. Waiting only for the socket to
        // open raced the request bytes under load.
        let until = Instant::now() + Duration::from_secs(15);
        while !truth(&w, &sim, &serial, since, Some("sdk-request")).iter().any(|r| r["data"]["path"] == json!("/v1/status")) {
            assert!(Instant::now() < until, "the read never reached the app");
            std::thread::sleep(Duration::from_millis(20));
        }
        control(&w, &sim, json!({"op": "reboot", "offlineMs": 1000}));
        read.join().unwrap()
    });
    let facts = error_facts(&body).clone();
    // A read cut off after its request left is a hung-up SDK connection (§2 mapping:
    // socket hang up → bridge_not_ready); the provider says the request had been sent.
    env.check(run.exit() != 0 && facts["error"] == json!("bridge_not_ready") && facts["details"]["requestSent"] == json!(true), &run, "a read cut by a reboot: bridge_not_ready, request sent");
    // Ground truth: the request had reached the app (the SDK logs it on receipt),
    // and the phone rebooted while the app held it (a 4 s delay fault).
    let seen = truth(&w, &sim, &serial, since, None);
    let reboot_at = seen.iter().position(|r| r["kind"] == json!("reboot")).expect("the reboot is in the log");
    assert_eq!(seen[..reboot_at].iter().filter(|r| r["kind"] == json!("sdk-request") && r["data"]["path"] == json!("/v1/status")).count(), 1, "{:?}", &seen[..reboot_at]);

    // Back online (reconnected): a read works again, on a new boot.
    control(&w, &sim, json!({"op": "faults", "reset": true}));
    std::thread::sleep(Duration::from_millis(1100));
    let _ = w.adb(&["disconnect", &serial]);
    w.adb(&["connect", &serial]);
    w.wait_online(&serial);
    let status = w.ok("status", json!({"packageName": SAMPLE, "serial": serial}));
    assert_eq!(status["debugBridge"]["runtimeEpoch"], json!(sim_epoch(&w, &sim)));
    assert_ne!(control(&w, &sim, json!({"op": "state"}))["bootId"], boot);
    sim.shutdown();
}

#[test]
fn android_matrix_two_simulated_devices_with_and_without_serial() {
    let w = World::new();
    let mut sim = w.rt.block_on(aab_android_sim::Simulator::start(aab_android_sim::Options { ports: vec![0, 0], ..Default::default() })).expect("start the simulator");
    let (a, b) = (sim.devices[0].serial.clone(), sim.devices[1].serial.clone());
    for s in [&a, &b] {
        assert!(w.adb(&["connect", s]).contains("connected to"));
        w.wait_online(s);
    }
    let (since_a, since_b) = (mark(&w, &sim, &a), mark(&w, &sim, &b));
    let facts = w.fails("status", json!({"packageName": SAMPLE}), "serial_required");
    assert_eq!(facts["field"], json!("serial"), "{facts}");
    assert!(truth(&w, &sim, &a, since_a, Some("service")).is_empty() && truth(&w, &sim, &b, since_b, Some("service")).is_empty(), "ground truth: neither phone was asked anything");

    let status = w.ok("status", json!({"packageName": SAMPLE, "serial": b}));
    let epoch_b = w.rt.block_on(sim.control(json!({"op": "state", "serial": b})))["apps"].as_array().unwrap().iter().find(|x| x["package"] == json!(SAMPLE)).unwrap()["runtimeEpoch"].clone();
    assert_eq!(status["debugBridge"]["runtimeEpoch"], epoch_b);
    assert_eq!(sdk_requests(&w, &sim, &b, since_b).len(), 1);
    assert!(sdk_requests(&w, &sim, &a, since_a).is_empty(), "ground truth: only the named phone was asked");

    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "forward", "arguments": {"packageName": SAMPLE, "serial": a}, "extract": null}));
    assert!(!is_error, "{body}");
    let forwards = w.forwards();
    assert!(forwards.iter().any(|l| l.starts_with(&format!("{a} "))) && forwards.iter().any(|l| l.starts_with(&format!("{b} "))), "{forwards:?}");
    assert_eq!(forwards.len(), 2, "one forward per phone: {forwards:?}");

    w.fails("status", json!({"packageName": SAMPLE, "serial": "127.0.0.1:1"}), "device_not_found");
    // One phone gone: the other is the only device, so no serial is needed again.
    let _ = w.adb(&["disconnect", &a]);
    let until = Instant::now() + Duration::from_secs(10);
    while w.adb(&["devices"]).contains(&a) {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(50));
    }
    let since_b = mark(&w, &sim, &b);
    w.ok("status", json!({"packageName": SAMPLE}));
    assert_eq!(sdk_requests(&w, &sim, &b, since_b).len(), 1);
    sim.shutdown();
}

#[test]
fn android_matrix_no_adb_server_is_started_then_reaches_the_phone() {
    let w = World::new();
    let mut sim = w.rt.block_on(aab_android_sim::Simulator::start(aab_android_sim::Options::default())).expect("start the simulator");
    let serial = sim.devices[0].serial.clone();
    assert!(!w.server_listening());
    w.fails("status", json!({"packageName": SAMPLE}), "device_not_found");
    assert!(w.server_listening(), "the provider started the adb server on ANDROID_ADB_SERVER_PORT");
    // The server the provider started is a real one: the phone connects to it and is reached.
    assert!(w.adb(&["connect", &serial]).contains("connected to"));
    w.wait_online(&serial);
    let since = mark(&w, &sim, &serial);
    w.ok("status", json!({"packageName": SAMPLE}));
    assert_eq!(sdk_requests(&w, &sim, &serial, since), vec![("/v1/status".to_string(), sim_epoch(&w, &sim))]);
    sim.shutdown();
}

#[test]
fn android_matrix_wrong_adb_path_matters_only_when_a_server_must_be_started() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let bad = "/nonexistent/platform-tools/adb";
    // A server listens: the port protocol needs no adb binary, the read works.
    let since = mark(&w, &sim, &serial);
    w.ok("status", json!({"packageName": SAMPLE, "adb": bad}));
    assert_eq!(sdk_requests(&w, &sim, &serial, since).len(), 1);
    // None listens: starting one needs the binary, and the error names it.
    kill_server(&w);
    let since = mark(&w, &sim, &serial);
    let facts = w.fails("status", json!({"packageName": SAMPLE, "adb": bad}), "adb_unavailable");
    assert_eq!(facts["field"], json!("adb"), "{facts}");
    assert!(facts["message"].as_str().unwrap_or("").contains(bad), "{facts}");
    assert!(!w.server_listening(), "nothing was started");
    assert!(truth(&w, &sim, &serial, since, None).iter().all(|r| r["kind"] != json!("service")), "ground truth: the phone was not reached");
    sim.shutdown();
}
