//! Device ownership of Android actions across a runtime killed with SIGKILL: the
//! simulated phone's own record of what happened (control `actions`) decides. Killed
//! before the dispatch mark (the SDK status read still hanging), nothing reached the
//! phone and the device reads idle; killed after it (the tap running on the app's UI
//! thread), the device is unresolved until `reconcile` finds the SDK's receipt, and
//! the tap happened exactly once.

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, sim_epoch, simulated};

/// The phone's action effects (taps, text, …) in order.
fn phone_actions(w: &World, sim: &aab_android_sim::Simulator) -> Vec<Value> {
    control(w, sim, json!({"op": "actions"}))["actions"].as_array().cloned().unwrap_or_default()
}

fn journal(w: &World, serial: &str) -> Option<Value> {
    std::fs::read(w.env.journal_path(serial)).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// Poll the journal until `ok` holds for it.
#[track_caller]
fn wait_journal(w: &World, serial: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(j) = journal(w, serial).filter(|j| ok(j)) {
            return j;
        }
        assert!(Instant::now() < until, "the journal of {serial} never showed {what}: {:?}\n{}", journal(w, serial), w.env.report(None));
        thread::sleep(Duration::from_millis(5));
    }
}

fn phase(w: &World, serial: &str) -> Value {
    w.ok("device-ownership", json!({"operation": "status", "serial": serial}))
}

fn tap_args(serial: &str) -> Value {
    json!({"packageName": SAMPLE, "serial": serial, "tapX": 540, "tapY": 990, "timeoutMs": 60000})
}

#[test]
fn android_kill_9_before_the_dispatch_mark_is_idle_and_after_it_unresolved_until_the_sdk_receipt() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    w.ok("runtime", json!({"operation": "start"}));

    // 1. Before the mark: every SDK reply hangs, so the tap is stuck reading the status.
    control(&w, &sim, json!({"op": "faults", "set": {"sdkDelayMs": 20000}}));
    let (body, _) = thread::scope(|s| {
        let h = s.spawn(|| w.run("tap", tap_args(&serial)));
        let j = wait_journal(&w, &serial, "a pending tap", |j| j.pointer("/pending/command") == Some(&json!("tap")));
        assert_eq!(j.pointer("/pending/dispatchMark"), Some(&json!("pending")), "{j}");
        thread::sleep(Duration::from_millis(200));
        w.env.kill_runtime();
        h.join().unwrap()
    });
    assert_eq!(body.pointer("/execution/ok"), Some(&json!(false)), "{body}");
    control(&w, &sim, json!({"op": "faults", "reset": true}));
    assert_eq!(phase(&w, &serial)["phase"], json!("idle"), "killed before the mark: idle");
    assert!(phone_actions(&w, &sim).is_empty(), "ground truth: nothing reached the phone");
    let first = w.ok("tap", tap_args(&serial));
    let actions = phone_actions(&w, &sim);
    assert_eq!(actions.len(), 1, "exactly the new tap: {actions:?}");
    assert_eq!(actions[0]["actionId"], first["actionId"], "{actions:?} / {first}");

    // 2. After the mark: the tap runs 1.5 s on the UI thread; kill the runtime meanwhile.
    let epoch = sim_epoch(&w, &sim);
    control(&w, &sim, json!({"op": "faults", "set": {"sdkActionDelayMs": 1500}}));
    let (body, _) = thread::scope(|s| {
        let h = s.spawn(|| w.run("tap", tap_args(&serial)));
        let j = wait_journal(&w, &serial, "the dispatch mark", |j| j.pointer("/pending/dispatchMark") == Some(&json!("marked")));
        // Kill once the phone runs the tap (the mark precedes the request by design).
        let until = Instant::now() + Duration::from_secs(30);
        while control(&w, &sim, json!({"op": "native-slot", "runtimeEpoch": epoch}))["active"]["actionId"] != j["pending"]["actionId"] {
            assert!(Instant::now() < until, "the phone never admitted the tap");
            thread::sleep(Duration::from_millis(5));
        }
        w.env.kill_runtime();
        h.join().unwrap()
    });
    assert_eq!(body.pointer("/execution/ok"), Some(&json!(false)), "{body}");
    control(&w, &sim, json!({"op": "faults", "reset": true}));
    let status = phase(&w, &serial);
    assert_eq!(status["phase"], json!("unresolved"), "killed after the mark: {status}");
    let pending = status.pointer("/ownership/pending/actionId").cloned().expect("the pending tap");
    w.fails("tap", tap_args(&serial), "device_ownership_unresolved");

    // The tap completes on the phone regardless; reconcile settles it from the SDK's receipt.
    let until = Instant::now() + Duration::from_secs(30);
    while phone_actions(&w, &sim).len() < 2 {
        assert!(Instant::now() < until, "the running tap never completed on the phone: {}", control(&w, &sim, json!({"op": "truth"})));
        thread::sleep(Duration::from_millis(20));
    }
    let settled = w.ok("device-ownership", json!({"operation": "reconcile", "serial": serial}));
    assert_eq!((settled["recovered"].clone(), settled["phase"].clone()), (json!(true), json!("idle")), "{settled}");
    assert_eq!(settled.pointer("/executionReceipt/actionId"), Some(&pending), "{settled}");
    let actions = phone_actions(&w, &sim);
    assert_eq!(actions.len(), 2, "reconcile never repeats the tap: {actions:?}");
    assert_eq!(actions[1]["actionId"], pending, "{actions:?}");
    w.ok("tap", tap_args(&serial));
    assert_eq!(phone_actions(&w, &sim).len(), 3);
    sim.shutdown();
}
