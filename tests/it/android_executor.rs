//! `executor-prepare` → `android-executor` / `flutter-executor` through the public
//! CLI on the simulated phone behind the real adb server: a real instrumentation
//! APK (aapt + apksigner) is prepared on the host, installed with the real `adb`,
//! and its session (`am instrument`) is driven by the executors. Ground truth is
//! the simulator's (control `executors`: sessions and each applied action once;
//! the app's own state) and the host's ownership journal, never the reply alone.

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, simulated};

const TEST_PKG: &str = "com.example.aab.sample.test";
const RUNNER: &str = "io.github.aab.executor.ExecutorRunner";

fn with(mut a: Value, extra: Value) -> Value {
    a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    a
}

fn node<'a>(observed: &'a Value, key: &str, value: &str) -> &'a Value {
    observed["snapshot"]["nodes"].as_array().unwrap().iter().find(|n| n[key] == json!(value)).unwrap_or_else(|| panic!("no node {key}={value} in {observed}"))
}

/// Applied actions of `action_id` in the simulator's truth.
fn applied(w: &World, sim: &aab_android_sim::Simulator, action_id: &str) -> usize {
    control(w, sim, json!({"op": "executors"}))["applied"].as_array().unwrap().iter().filter(|a| a["data"]["actionId"] == json!(action_id)).count()
}

fn app(w: &World, sim: &aab_android_sim::Simulator) -> Value {
    crate::android::app_state(w, sim, SAMPLE)
}

/// Prepares the instrumentation package on the host and installs the prepared copy.
fn prepare_and_install(w: &World, serial: &str) -> Value {
    let dir = w.env.root.join("apks");
    std::fs::create_dir_all(&dir).unwrap();
    let ks = aab_android_sim::test_apk::keystore(&dir, "exec");
    let apk = aab_android_sim::test_apk::instrumentation_apk(&dir, TEST_PKG, &[(RUNNER, SAMPLE)], &ks);
    let prep = w.ok("executor-prepare", json!({"platform": "android", "testPackagePath": apk}));
    assert_eq!(prep["instrumentation"]["component"], json!(format!("{TEST_PKG}/{RUNNER}")), "{prep}");
    let prepared = prep["package"]["path"].as_str().unwrap();
    w.adb(&["-s", serial, "push", prepared, "/data/local/tmp/exec-test.apk"]);
    let out = w.adb(&["-s", serial, "shell", "pm install /data/local/tmp/exec-test.apk"]);
    assert!(out.contains("Success"), "{out}");
    prep
}

#[test]
fn android_executor_runs_a_prepared_instrumentation_session_against_ground_truth() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let base = |op: &str| json!({"operation": op, "packageName": SAMPLE, "serial": serial});

    // Not prepared on the phone yet: refused before anything runs there.
    let e = w.fails("android-executor", with(base("open"), json!({"activity": ".MainActivity"})), "android_executor_not_prepared");
    assert!(e["message"].as_str().unwrap().contains("executor-prepare"), "{e}");
    assert!(control(&w, &sim, json!({"op": "executors"}))["sessions"].as_array().unwrap().is_empty(), "ground truth: no instrumentation ran");

    let prep = prepare_and_install(&w, &serial);
    let component = prep["instrumentation"]["component"].as_str().unwrap();
    let open = w.ok("android-executor", with(base("open"), json!({"activity": ".MainActivity", "instrumentation": component, "sessionId": "e2e-native"})));
    let id = json!({"sessionId": open["sessionId"], "runtimeEpoch": open["runtimeEpoch"]});
    let sessions = control(&w, &sim, json!({"op": "executors"}));
    let running = sessions["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == json!("e2e-native")).cloned().unwrap();
    assert_eq!(running["state"], json!("running"), "ground truth: the instrumentation session runs: {sessions}");

    // observe → input → observe → tap: the app is signed in, each action applied once.
    let s1 = w.ok("android-executor", with(base("observe"), id.clone()));
    let email = node(&s1, "resourceName", &format!("{SAMPLE}:id/email"))["targetRef"].clone();
    let typed = w.run("android-executor", with(base("act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "input", "targetRef": email, "text": "ann@example.com"}}))));
    assert_eq!(typed.0.pointer("/execution/ok"), Some(&json!(true)), "{}", typed.0);
    let typed_id = typed.0["value"]["receipt"]["actionId"].as_str().unwrap().to_string();
    assert_eq!(app(&w, &sim)["values"]["email"], json!("ann@example.com"));
    // The same snapshot is stale now: refused, the app untouched.
    let sign_in = node(&s1, "text", "Sign in")["targetRef"].clone();
    w.fails("android-executor", with(base("act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "tap", "targetRef": sign_in}}))), "reobserve_required");
    assert_ne!(app(&w, &sim)["screen"], json!("welcome"));
    let s2 = w.ok("android-executor", with(base("observe"), id.clone()));
    let sign_in = node(&s2, "text", "Sign in")["targetRef"].clone();
    let tap = w.ok("android-executor", with(base("act"), with(id.clone(), json!({"snapshotId": s2["snapshotId"], "action": {"type": "tap", "targetRef": sign_in}}))));
    let tap_id = tap["receipt"]["actionId"].as_str().unwrap().to_string();
    assert_eq!(app(&w, &sim)["screen"], json!("welcome"), "ground truth: signed in");
    assert_eq!((applied(&w, &sim, &typed_id), applied(&w, &sim, &tap_id)), (1, 1), "each action applied exactly once");
    let r = w.ok("android-executor", with(base("receipt"), with(id.clone(), json!({"actionId": tap_id}))));
    assert_eq!(r["settled"], json!(true), "{r}");

    // A lost reply: ambiguous, the host keeps the phone unresolved; reconcile settles
    // it from the phone's own record and the phone mutates again. Never resent.
    control(&w, &sim, json!({"op": "faults", "set": {"executorDropReplies": 1}}));
    let s3 = w.ok("android-executor", with(base("observe"), id.clone()));
    let (lost, run) = w.run("android-executor", with(base("act"), with(id.clone(), json!({"snapshotId": s3["snapshotId"], "action": {"type": "back"}}))));
    let facts = aab_e2e::error_facts(&lost).clone();
    w.env.check(facts["error"] == json!("android_executor_reply_lost") && facts["ambiguous"] == json!(true), &run, "a lost act reply is ambiguous");
    let status = w.ok("device-ownership", json!({"operation": "status", "serial": serial}));
    let pending_id = status.pointer("/ownership/pending/actionId").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| panic!("the pending act: {status}"));
    w.fails("android-executor", with(base("close"), id.clone()), "device_ownership_unresolved");
    let settled = w.ok("device-ownership", json!({"operation": "reconcile", "serial": serial}));
    assert_eq!((settled["recovered"].clone(), settled.pointer("/executionReceipt/actionId").cloned()), (json!(true), Some(json!(pending_id))), "{settled}");
    assert_eq!(applied(&w, &sim, &pending_id), 1, "ground truth: the lost action was applied once, not retried");

    // close: the instrumentation finishes; later calls say closed.
    let closed = w.ok("android-executor", with(base("close"), id.clone()));
    assert_eq!(closed["closed"], json!(true), "{closed}");
    let last = control(&w, &sim, json!({"op": "executors"}))["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == json!("e2e-native")).cloned().unwrap();
    assert_eq!(last["endReason"], json!("closed"), "ground truth: {last}");
    w.fails("android-executor", with(base("observe"), id), "android_executor_session_closed");
}

#[test]
fn flutter_executor_drives_the_flutter_action_set_through_the_cli() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let base = |op: &str| json!({"operation": op, "packageName": SAMPLE, "serial": serial});
    prepare_and_install(&w, &serial);
    let open = w.ok("flutter-executor", with(base("open"), json!({"activity": "io.flutter.embedding.android.FlutterActivity"})));
    assert_eq!(open["engine"], json!("flutter"), "{open}");
    let id = json!({"sessionId": open["sessionId"], "runtimeEpoch": open["runtimeEpoch"]});
    let flutter = || control(&w, &sim, json!({"op": "flutter", "package": SAMPLE}));
    let effects = |all: &Value, kind: &str, action_id: &str| all["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == json!(kind) && e["data"]["actionId"] == json!(action_id)).count();
    let act = |action: Value| {
        let s = w.ok("flutter-executor", with(base("observe"), id.clone()));
        let action = match action["targetText"].as_str() {
            Some(text) => {
                let mut a = action.clone();
                let key = if action["type"] == json!("enterText") { "label" } else { "text" };
                a["targetRef"] = node(&s, key, text)["targetRef"].clone();
                a.as_object_mut().unwrap().remove("targetText");
                a
            }
            None => action,
        };
        let r = w.ok("flutter-executor", with(base("act"), with(id.clone(), json!({"snapshotId": s["snapshotId"], "action": action}))));
        let action_id = r["receipt"]["actionId"].as_str().unwrap().to_string();
        (r, action_id)
    };
    let (_, tap) = act(json!({"type": "tap", "targetText": "Add to cart"}));
    assert_eq!(effects(&flutter(), "flutter-tap", &tap), 1, "ground truth: one Flutter tap by this action");
    let (_, typed) = act(json!({"type": "enterText", "targetText": "Search", "text": "red shoes"}));
    let engine = flutter();
    assert_eq!((engine["engine"]["values"]["search"].clone(), effects(&engine, "flutter-text", &typed)), (json!("red shoes"), 1));
    let (r, _) = act(json!({"type": "ensureVisible", "targetText": "Product 30"}));
    assert_eq!(r["receipt"]["alreadyVisible"], json!(false), "{r}");
    assert!(flutter()["engine"]["scroll"]["products"].as_f64().unwrap() > 0.0, "ground truth: the list scrolled");
    let closed = w.ok("flutter-executor", with(base("close"), id));
    assert_eq!(closed["closed"], json!(true));
}
