//! Android actions through the app SDK's managed execution
//! (`aab.native-execution/v1`) e2e through the public CLI (and MCP) against the
//! simulated phone. Ground truth is the simulator's control `actions`: every
//! effect that happened on the phone, with the SDK action id that caused it.

use std::time::{Duration, Instant};

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};

/// The phone's effects of `kind` (tap, text, gesture, …).
fn effects(w: &World, sim: &aab_android_sim::Simulator, kind: &str) -> Vec<Value> {
    control(w, sim, json!({"op": "actions"}))["actions"].as_array().unwrap().iter().filter(|a| a["kind"] == json!(kind)).cloned().collect()
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter().map(|a| a["actionId"].as_str().unwrap_or("<none>").to_string()).collect()
}

/// One raw GET to the SDK through a forward (the test's own client).
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nContent-Length: 0\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn phase(w: &World, serial: &str) -> Value {
    let run = w.env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    let body = w.env.expect_ok(&run, "device-ownership status");
    body["value"]["phase"].clone()
}

#[test]
fn android_native_each_mutation_happens_once_with_its_receipt() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let base = json!({"packageName": SAMPLE, "serial": serial});
    let with = |extra: Value| {
        let mut a = base.clone();
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        a
    };

    let input = w.ok("input-text", with(json!({"selector": {"resourceName": format!("{SAMPLE}:id/email")}, "text": "bob@example.com"})));
    assert_eq!((input["device"]["ok"].clone(), input["device"]["settled"].clone(), input["proof"]["kind"].clone(), input["proof"]["settled"].clone()), (json!(true), json!(true), json!("native"), json!(true)), "{input}");
    assert_eq!(input["proof"]["responseSha256"].as_str().map(str::len), Some(64));
    assert_eq!(input["runtimeEpoch"], app_state(&w, &sim, SAMPLE)["runtimeEpoch"]);
    let texts = effects(&w, &sim, "text");
    assert_eq!(ids(&texts), [input["actionId"].as_str().unwrap()], "ground truth: one input, by this action");
    assert_eq!(app_state(&w, &sim, SAMPLE)["values"]["email"], json!("bob@example.com"));

    let press = w.ok("native-gesture", with(json!({"payload": {"action": "longPress", "selector": {"resourceName": format!("{SAMPLE}:id/password")}, "durationMs": 500}})));
    assert_eq!((press["device"]["action"].clone(), press["device"]["completion"].clone()), (json!("longPress"), json!("completed")), "{press}");
    assert_eq!(ids(&effects(&w, &sim, "gesture")), [press["actionId"].as_str().unwrap()]);

    // tap-native through MCP.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "tap-native", "arguments": with(json!({"selector": {"text": "Sign in"}})), "extract": null}));
    assert!(!is_error, "{body}");
    let tapped = &body["value"];
    assert_eq!((tapped["device"]["targetValidation"].clone(), tapped["bound"]["resourceName"].clone()), (json!("aab.native-target/v1"), json!(format!("{SAMPLE}:id/sign_in"))), "{body}");
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("welcome"));

    // A coordinate tap on the welcome screen's sign-out button.
    let tap = w.ok("tap", with(json!({"tapX": 540, "tapY": 470})));
    assert_eq!((tap["scope"].clone(), tap["device"]["targetValidation"].clone(), tap["foreground"]["package"].clone()), (json!("app"), json!("coordinates"), json!(SAMPLE)), "{tap}");
    let taps = effects(&w, &sim, "tap");
    assert_eq!(ids(&taps), [tapped["actionId"].as_str().unwrap(), tap["actionId"].as_str().unwrap()], "ground truth: two taps, once each, in order");

    // tap-text by exact text (auto → native), back on the login screen.
    let by_text = w.ok("tap-text", with(json!({"targetText": "Sign in"})));
    assert_eq!(by_text["provider"], json!("native"));
    assert_eq!(effects(&w, &sim, "tap").len(), 3);
    assert_eq!(phase(&w, &serial), json!("idle"), "every action settled from its receipt");
    sim.shutdown();
}

#[test]
fn android_native_lost_reply_is_unresolved_until_reconciled_from_the_sdk_receipt() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    // The tap takes effect, its reply and the one cancel's reply are lost.
    control(&w, &sim, json!({"op": "faults", "set": {"sdkDropActionReplies": 2}}));
    let (body, run) = w.run("tap-native", json!({"packageName": SAMPLE, "serial": serial, "selector": {"text": "Sign in"}}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true) && facts["dispatched"] != json!(false), &run, "a lost reply is ambiguous");
    let taps = effects(&w, &sim, "tap");
    assert_eq!(taps.len(), 1, "ground truth: the tap happened once");
    assert_eq!(phase(&w, &serial), json!("unresolved"));

    // Nothing else may touch the device until it is reconciled.
    let refused = w.fails("tap", json!({"packageName": SAMPLE, "serial": serial, "tapX": 540, "tapY": 470}), "device_ownership_unresolved");
    assert_eq!(refused["dispatched"], json!(false));
    assert_eq!(effects(&w, &sim, "tap").len(), 1);

    // Reconcile asks the SDK (cancel with the same identity) and settles from its receipt.
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.expect_ok(&run, "reconcile");
    let receipt = &body["value"]["executionReceipt"];
    assert_eq!((body["value"]["recovered"].clone(), receipt["kind"].clone(), receipt["device"]["ok"].clone()), (json!(true), json!("native"), json!(true)), "{body}");
    assert_eq!(receipt["device"]["actionId"], taps[0]["actionId"], "the receipt of the tap that happened");
    assert_eq!(phase(&w, &serial), json!("idle"));
    assert_eq!(effects(&w, &sim, "tap").len(), 1, "ground truth: reconcile never taps again");
    sim.shutdown();
}

#[test]
fn android_native_app_death_mid_action_is_reported_and_not_repeated() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let epoch = app_state(&w, &sim, SAMPLE)["runtimeEpoch"].clone();
    control(&w, &sim, json!({"op": "faults", "set": {"sdkCrashMidAction": 1, "sdkActionDelayMs": 100}}));
    let (body, run) = w.run("tap", json!({"packageName": SAMPLE, "serial": serial, "tapX": 540, "tapY": 990}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true), &run, "the outcome of an action whose process died is unknown");
    assert_eq!(effects(&w, &sim, "tap").len(), 0, "ground truth: the action never completed");
    assert_eq!(phase(&w, &serial), json!("unresolved"));
    // A new process cannot vouch for the old one's action: reconcile leaves it unresolved.
    control(&w, &sim, json!({"op": "launch", "package": SAMPLE}));
    assert_ne!(app_state(&w, &sim, SAMPLE)["runtimeEpoch"], epoch);
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.json_of(&run);
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("device_ownership_unresolved"), &run, "reconcile cannot settle it");
    assert_eq!(facts["details"]["recovery"]["answer"]["reason"], json!("runtime_changed"), "{facts}");
    assert_eq!(effects(&w, &sim, "tap").len(), 0, "ground truth: never repeated");
    sim.shutdown();
}

#[test]
fn android_native_busy_slot_and_schema_refusals_are_not_dispatched() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    // The runtime is up first, so the tap below is not waiting for it.
    w.ok("status", json!({"packageName": SAMPLE, "serial": serial}));
    // Another client holds the SDK's one action slot.
    control(&w, &sim, json!({"op": "faults", "set": {"sdkActionDelayMs": 8000}}));
    let epoch = app_state(&w, &sim, SAMPLE)["runtimeEpoch"].as_str().unwrap().to_string();
    let port: u16 = w.adb(&["-s", &serial, "forward", "tcp:0", &format!("localabstract:aab-sdk-{epoch}")]).trim().parse().unwrap();
    let other = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let body = json!({"x": 540, "y": 990, "actionId": "other-client", "execution": {"schemaVersion": "aab.native-execution/v1", "actionId": "other-client", "runtimeEpoch": epoch, "timeoutMs": 10000}}).to_string();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(format!("POST /v1/action/tap HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    });
    // The slot is taken once the SDK's status names the other client's action.
    let until = Instant::now() + Duration::from_secs(5);
    while !http_get(port, "/v1/status").contains("other-client") {
        assert!(Instant::now() < until, "the other client's action never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let busy = w.fails("tap", json!({"packageName": SAMPLE, "serial": serial, "tapX": 540, "tapY": 470}), "native_action_busy");
    assert_eq!(busy["ambiguous"], json!(false), "{busy}");
    assert_eq!(phase(&w, &serial), json!("idle"), "a refusal before admission settles as not dispatched");
    assert!(other.join().unwrap().contains("\"ok\":true"));
    assert_eq!(ids(&effects(&w, &sim, "tap")), ["other-client"], "ground truth: only the other client's tap");

    // Argument rules live in the schema: refused before dispatch, with the field.
    let base = json!({"packageName": SAMPLE, "serial": serial});
    let with = |extra: Value| {
        let mut a = base.clone();
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        a
    };
    for (command, args, field) in [
        ("input-text", with(json!({"text": "x", "selector": {"text": "Sign in"}, "tapX": 1, "tapY": 2})), None),
        ("input-text", with(json!({"text": "x", "tapX": 1})), None),
        ("input-text", with(json!({"text": "x".repeat(16385)})), Some("text")),
        ("tap-native", with(json!({"selector": {"text": "Sign in", "resourceName": "a:id/b"}})), Some("selector")),
        ("native-gesture", with(json!({"payload": {"action": "longPress", "selector": {"text": "Sign in"}, "durationMs": 100}})), Some("payload")),
        ("tap", json!({"serial": serial, "tapX": 1, "tapY": 2, "scope": "app"}), None),
        ("tap-native", json!({"packageName": SAMPLE, "selector": {"text": "Sign in"}}), Some("serial")),
    ] {
        let (body, run) = w.run(command, args.clone());
        let facts = error_facts(&body).clone();
        w.env.check(run.exit() != 0 && facts["dispatched"] == json!(false) && facts["field"].is_string(), &run, &format!("{command} {args} is refused by the schema with a field"));
        if let Some(f) = field {
            assert!(facts["field"].as_str().unwrap().starts_with(f), "{command}: {facts}");
        }
    }
    // The uia provider needs a started UIA runtime; a selector that matches nothing.
    w.fails("tap-text", with(json!({"targetText": "Sign in", "provider": "uia"})), "uia_runtime_not_running");
    let nf = w.fails("tap-native", with(json!({"selector": {"text": "Nope"}})), "native_selector_not_found");
    assert_eq!(nf["field"], json!("selector"));
    assert_eq!(effects(&w, &sim, "tap").len(), 1, "ground truth: nothing else happened");
    assert_eq!(phase(&w, &serial), json!("idle"));
    sim.shutdown();
}

/// Round trip of `tap` on the SDK path (CLI, and a warm MCP client); prints the
/// figures, asserts only the ground truth.
#[test]
fn android_native_tap_round_trip_figures() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    // On the welcome screen a tap on the title does nothing: repeatable.
    let args = json!({"packageName": SAMPLE, "serial": serial, "tapX": 540, "tapY": 200});
    w.ok("tap", args.clone());
    let n = 10;
    let mut cli = vec![];
    for _ in 0..n {
        let t = Instant::now();
        w.ok("tap", args.clone());
        cli.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut mcp = w.env.mcp();
    let (_, e) = mcp.call_tool("run", json!({"command": "tap", "arguments": args, "extract": null}));
    assert!(!e);
    let mut warm = vec![];
    let (mut prepare, mut record, mut action) = (vec![], vec![], vec![]);
    for _ in 0..n {
        let t = Instant::now();
        let (body, is_error) = mcp.call_tool("run", json!({"command": "tap", "arguments": args, "extract": null}));
        warm.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(!is_error, "{body}");
        let tm = &body["value"]["timingsMs"];
        prepare.push(tm["prepareMs"].as_f64().unwrap());
        record.push(tm["recordMs"].as_f64().unwrap());
        action.push(tm["actionMs"].as_f64().unwrap());
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (c, w_) = (med(&mut cli), med(&mut warm));
    let (p, r, a) = (med(&mut prepare).0, med(&mut record).0, med(&mut action).0);
    eprintln!("FIGURES tap inside the plugin (warm MCP, medians): prepare (device, foreground proof, SDK route, status) {p:.1} ms, action record (FactStore, sync) {r:.1} ms, SDK action POST + receipt {a:.1} ms");
    eprintln!("FIGURES tap (SDK path, receipt verified) over {n} runs: CLI median {:.1} ms (min {:.1}, max {:.1}); warm MCP median {:.1} ms (min {:.1}, max {:.1})", c.0, c.1, c.2, w_.0, w_.1, w_.2);
    assert_eq!(effects(&w, &sim, "tap").len(), 2 * n + 2, "ground truth: every tap once");
    sim.shutdown();
}
