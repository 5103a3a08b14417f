//! The shell-worker mutations (aab-protocols §2.3/§2.4) end to end through the CLI
//! (and MCP) against the simulated phone: each effect is seen on the phone exactly
//! once (the simulator's `effects`, its ground truth), the device journal settles
//! from the phone's receipt, a reboot mid-action is `shell_runtime_changed` and
//! leaves the device unresolved, the 512-job cap refuses before dispatch, and a
//! `kill -9` of the runtime waiting on the phone never re-runs the job.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};

const NOTES: &str = "com.example.notes";
const ROOT: &str = "/data/local/tmp/ai-app-bridge-shell/v1";

/// The phone's effects since `since` (sequence), as `(kind, data)`.
fn effects(w: &World, sim: &aab_android_sim::Simulator, since: u64) -> Vec<(String, Value)> {
    control(w, sim, json!({"op": "effects", "since": since}))["items"].as_array().unwrap().iter().map(|i| (i["kind"].as_str().unwrap().to_string(), i["data"].clone())).collect()
}

fn last_seq(w: &World, sim: &aab_android_sim::Simulator) -> u64 {
    control(w, sim, json!({"op": "truth"}))["items"].as_array().unwrap().last().map(|i| i["seq"].as_u64().unwrap()).unwrap_or(0)
}

fn phase(w: &World, serial: &str) -> Value {
    let run = w.env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    let body = w.env.expect_ok(&run, "device-ownership status");
    body["value"]["phase"].clone()
}

/// Until the worker on the phone has started the slow tool (truth `fault slow-tool`).
fn wait_for_slow_tool(w: &World, sim: &aab_android_sim::Simulator) {
    let until = Instant::now() + Duration::from_secs(15);
    while control(w, sim, json!({"op": "truth", "kind": "fault"}))["items"].as_array().unwrap().iter().all(|f| f["data"]["kind"] != json!("slow-tool")) {
        assert!(Instant::now() < until, "the worker never started the tool");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kinds(e: &[(String, Value)]) -> Vec<&str> {
    e.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn android_shell_mutations_each_happen_once_and_settle_the_device() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let s = json!(serial);

    let t0 = last_seq(&w, &sim);
    let k = w.ok("keyevent", json!({"serial": s, "keyCode": 66}));
    assert_eq!(k["execution"]["exitCode"], json!(0), "{k}");
    let e = effects(&w, &sim, t0);
    assert_eq!(e, vec![("keyevent".to_string(), json!({"keyCode": 66}))]);
    println!("keyevent --serial through the worker: round trips {}", k["execution"]["roundTrips"]);
    assert_eq!(phase(&w, &serial), json!("idle"), "settled from the receipt");

    let t = last_seq(&w, &sim);
    w.ok("swipe", json!({"serial": s, "startX": 100, "startY": 900, "endX": 100, "endY": 300, "durationMs": 50}));
    assert_eq!(effects(&w, &sim, t), vec![("swipe".to_string(), json!({"x1": 100, "y1": 900, "x2": 100, "y2": 300, "durationMs": 50}))]);

    // launch-app: am start -W, then the notes app is in front.
    let t = last_seq(&w, &sim);
    let l = w.ok("launch-app", json!({"serial": s, "packageName": NOTES, "clearTask": true}));
    assert_eq!((l["am"]["status"].clone(), l["foregroundPackage"].clone()), (json!("ok"), json!(NOTES)), "{l}");
    assert_eq!(kinds(&effects(&w, &sim, t)), ["launch"]);
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["foreground"], json!(NOTES));
    let intent = control(&w, &sim, json!({"op": "truth", "kind": "intent", "since": t}))["items"][0]["data"].clone();
    assert_eq!(intent["clearTask"], json!(true));
    let t = last_seq(&w, &sim);
    let l = w.ok("launch-activity", json!({"serial": s, "packageName": SAMPLE, "activity": ".MainActivity"}));
    assert_eq!(l["component"], json!(format!("{SAMPLE}/.MainActivity")));
    assert_eq!(kinds(&effects(&w, &sim, t)), ["launch"]);

    // freeze / thaw: the process state on the phone follows.
    let pid = app_state(&w, &sim, SAMPLE)["pid"].as_u64().unwrap();
    let t = last_seq(&w, &sim);
    let f = w.ok("freeze-app", json!({"serial": s, "packageName": SAMPLE}));
    assert_eq!((f["pid"].clone(), f["processState"].clone()), (json!(pid), json!("T")), "{f}");
    let th = w.ok("thaw-app", json!({"serial": s, "packageName": SAMPLE, "pid": pid}));
    assert_eq!(th["processState"], json!("S"));
    let e = effects(&w, &sim, t);
    assert_eq!(e.iter().map(|(_, d)| d["signal"].clone()).collect::<Vec<_>>(), [json!("STOP"), json!("CONT")]);

    // Permissions: revoke/grant change the phone; an install-time one is refused.
    let t = last_seq(&w, &sim);
    let r = w.ok("permission-revoke", json!({"serial": s, "packageName": SAMPLE, "permission": "android.permission.POST_NOTIFICATIONS"}));
    assert_eq!(r["granted"], json!(false), "{r}");
    let g = w.ok("permission-grant", json!({"serial": s, "packageName": SAMPLE, "permission": "android.permission.CAMERA", "userId": 0}));
    assert_eq!(g["granted"], json!(true));
    assert_eq!(app_state(&w, &sim, SAMPLE)["permissions"], json!({"android.permission.CAMERA": true, "android.permission.POST_NOTIFICATIONS": false}));
    let denied = w.fails("permission-grant", json!({"serial": s, "packageName": SAMPLE, "permission": "android.permission.INTERNET"}), "permission_change_denied");
    assert_eq!(denied["field"], json!("permission"));
    let a = w.ok("appops-set", json!({"serial": s, "packageName": SAMPLE, "op": "CAMERA", "mode": "ignore"}));
    assert_eq!(a["mode"], json!("ignore"));
    assert_eq!(app_state(&w, &sim, SAMPLE)["appops"]["CAMERA"], json!("ignore"));
    assert_eq!(kinds(&effects(&w, &sim, t)), ["permission", "permission", "appops"]);
    assert_eq!(phase(&w, &serial), json!("idle"), "a refused change is a known outcome");

    // clear-app-data: pm clear through the worker, and the SDK's runtime route.
    let t = last_seq(&w, &sim);
    let c = w.ok("clear-app-data", json!({"serial": s, "packageName": SAMPLE}));
    assert_eq!(c["output"], json!("Success"));
    control(&w, &sim, json!({"op": "launch", "package": SAMPLE}));
    let c = w.ok("clear-app-data", json!({"serial": s, "packageName": SAMPLE, "method": "runtime"}));
    assert_eq!(c["method"], json!("runtime"), "{c}");
    let e = effects(&w, &sim, t);
    let clears: Vec<&Value> = e.iter().filter(|(k, _)| k == "clear-data").map(|(_, d)| d).collect();
    assert_eq!(clears, [&json!({"package": SAMPLE}), &json!({"package": SAMPLE, "via": "sdk", "method": "runtime"})]);

    // hide-keyboard: focus the email field; ESCAPE hides it (BACK is not needed).
    control(&w, &sim, json!({"op": "tap", "x": 500, "y": 470}));
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["keyboard"], json!(true));
    let t = last_seq(&w, &sim);
    let h = w.ok("hide-keyboard", json!({"serial": s, "intervalMs": 50}));
    assert_eq!((h["shownBefore"].clone(), h["shown"].clone()), (json!(true), json!(false)), "{h}");
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["keyboard"], json!(false));
    let keys: Vec<Value> = effects(&w, &sim, t).into_iter().map(|(_, d)| d["keyCode"].clone()).collect();
    assert_eq!(keys, [json!(111)]);
    // force on a hidden keyboard: ESCAPE does nothing there, the state is re-read; nothing else is pressed.
    let t = last_seq(&w, &sim);
    let h = w.ok("hide-keyboard", json!({"serial": s, "force": true, "intervalMs": 0}));
    assert_eq!((h["shownBefore"].clone(), h["keys"].as_array().unwrap().len()), (json!(false), 1));
    assert_eq!(effects(&w, &sim, t).into_iter().map(|(_, d)| d["keyCode"].clone()).collect::<Vec<_>>(), [json!(111)]);
    // Already hidden: nothing pressed.
    let t = last_seq(&w, &sim);
    assert_eq!(w.ok("hide-keyboard", json!({"serial": s}))["keys"], json!([]));
    assert!(effects(&w, &sim, t).is_empty());

    // Argument rules are the schema's: refused before dispatch with the field.
    let bad = w.fails("launch-app", json!({"serial": s, "packageName": SAMPLE, "activity": ".MainActivity", "component": format!("{SAMPLE}/.MainActivity")}), "invalid_argument");
    let _ = bad;
    assert_eq!(w.fails("swipe", json!({"serial": s, "startX": 1, "startY": 1, "endX": 1}), "missing_argument")["field"], json!("endY"));
    assert_eq!(phase(&w, &serial), json!("idle"));

    // logcat clear: `logcat -c` through the worker, then the (now empty) read.
    let t = last_seq(&w, &sim);
    let before = control(&w, &sim, json!({"op": "log-ring"}))["lines"].as_array().unwrap().len();
    assert!(before > 0);
    let lc = w.ok("logcat", json!({"serial": s, "clear": true}));
    assert_eq!(lc["cleared"]["exitCode"], json!(0), "{lc}");
    assert_eq!(kinds(&effects(&w, &sim, t)), ["logcat-clear"]);
    assert_eq!(lc["count"], json!(control(&w, &sim, json!({"op": "log-ring"}))["lines"].as_array().unwrap().len()));
    // A clearing read is a mutation: it went through the device's ownership journal.
    let own = w.ok("device-ownership", json!({"operation": "status", "serial": s}));
    assert_eq!(own.pointer("/ownership/lastSettlement/command"), Some(&json!("logcat")), "{own}");
    w.fails("logcat", json!({"clear": true}), "missing_argument");

    // MCP: the same worker path.
    let t = last_seq(&w, &sim);
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "keyevent", "arguments": {"serial": serial, "keyCode": 67}, "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(effects(&w, &sim, t), vec![("keyevent".to_string(), json!({"keyCode": 67}))]);
    // launch-app with intent extras and categories (arrays) over MCP.
    let t = last_seq(&w, &sim);
    let (body, is_error) = mcp.call_tool("run", json!({"command": "launch-app", "arguments": {"serial": serial, "packageName": NOTES, "extra": ["k=v w", "n=1"], "category": ["android.intent.category.LAUNCHER"], "action": "android.intent.action.MAIN"}, "extract": null}));
    assert!(!is_error, "{body}");
    let intent = control(&w, &sim, json!({"op": "truth", "kind": "intent", "since": t}))["items"][0]["data"].clone();
    assert_eq!((intent["extras"].clone(), intent["action"].clone()), (json!([["k", "v w"], ["n", "1"]]), json!("android.intent.action.MAIN")));
    assert_eq!(kinds(&effects(&w, &sim, t)), ["launch"]);
    drop(mcp);

    // Round trips of a device keyevent through the worker, measured (no threshold).
    let mut ms = vec![];
    for _ in 0..10 {
        let t = Instant::now();
        let k = w.ok("keyevent", json!({"serial": s, "keyCode": 0}));
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if ms.len() == 10 {
            println!("keyevent via CLI, last: round trips {}", k["execution"]["roundTrips"]);
        }
    }
    ms.sort_by(f64::total_cmp);
    println!("keyevent via CLI (client + runtime + 3 adb shells): median {:.1} ms, min {:.1} ms, max {:.1} ms", ms[5], ms[0], ms[9]);
    sim.shutdown();
}

#[test]
fn android_shell_reboot_mid_action_is_runtime_changed_and_unresolved() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    w.ok("keyboard-state", json!({"serial": serial})); // the runtime is up
    control(&w, &sim, json!({"op": "faults", "set": {"slowTool": ["input", "keyevent"], "slowToolMs": 3000}}));
    let (body, run) = std::thread::scope(|scope| {
        let client = scope.spawn(|| w.run("keyevent", json!({"serial": serial, "timeoutMs": 15000})));
        wait_for_slow_tool(&w, &sim);
        control(&w, &sim, json!({"op": "reboot", "offlineMs": 300}));
        client.join().unwrap()
    });
    let facts = aab_e2e::error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("shell_runtime_changed") && facts["ambiguous"] == json!(true), &run, "a reboot while the worker runs is shell_runtime_changed, outcome unknown");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(control(&w, &sim, json!({"op": "truth", "kind": "keyevent"}))["items"].as_array().unwrap().is_empty(), "the reboot killed the worker: no key");
    assert_eq!(phase(&w, &serial), json!("unresolved"), "no guess: the device waits for reconcile");
    sim.shutdown();
}

#[test]
fn android_shell_store_full_refuses_before_dispatch() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    w.adb(&["-s", &serial, "shell", &format!("mkdir -p {ROOT} && cd {ROOT} && i=0; while [ $i -lt 512 ]; do mkdir j$i; i=$((i+1)); done")]);
    let f = w.fails("keyevent", json!({"serial": serial}), "shell_execution_store_full");
    assert_eq!(f["details"]["unacknowledged"], json!(512), "{f}");
    assert!(control(&w, &sim, json!({"op": "truth", "kind": "keyevent"}))["items"].as_array().unwrap().is_empty());
    assert_eq!(phase(&w, &serial), json!("idle"));
    // One acknowledged job is deleted by the next prepare; one free slot runs.
    w.adb(&["-s", &serial, "shell", &format!("touch {ROOT}/j0/acknowledged")]);
    w.ok("keyevent", json!({"serial": serial}));
    assert_eq!(control(&w, &sim, json!({"op": "truth", "kind": "keyevent"}))["items"].as_array().unwrap().len(), 1);
    sim.shutdown();
}

#[test]
fn android_shell_kill_9_of_the_waiting_runtime_does_not_rerun_the_job() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    w.ok("keyboard-state", json!({"serial": serial})); // the runtime is up
    control(&w, &sim, json!({"op": "faults", "set": {"slowTool": ["input", "keyevent"], "slowToolMs": 1500}}));
    std::thread::scope(|scope| {
        let client = scope.spawn(|| w.run("keyevent", json!({"serial": serial, "keyCode": 66})));
        wait_for_slow_tool(&w, &sim);
        w.env.kill_runtime();
        let (_, run) = client.join().unwrap();
        assert_ne!(run.exit(), 0);
    });
    std::thread::sleep(Duration::from_millis(2500));
    let keys = control(&w, &sim, json!({"op": "truth", "kind": "keyevent"}))["items"].as_array().unwrap().len();
    assert_eq!(keys, 1, "the detached worker ran the key once; nothing re-ran it");
    assert_eq!(phase(&w, &serial), json!("unresolved"), "dispatched, then the host died: unresolved until reconcile");
    // The phone's receipt exists and is the job's (reconcile reads it).
    let receipts = w.adb(&["-s", &serial, "shell", &format!("cat {ROOT}/*/receipt.json")]);
    assert!(receipts.contains("\"dispatched\":true") && receipts.contains("\"exitCode\":0"), "{receipts}");
    sim.shutdown();
}
