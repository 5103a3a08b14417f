//! The SDK's single native action slot (§1.6): busy, timeout with the grace
//! and the ambiguous pending reply, cancel of queued and running actions, a
//! reply dropped after the effect, a process dying mid-action, gestures and
//! clear-data — each checked against control `actions` (what the phone did).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Env, http, request};

const PKG: &str = "com.example.aab.sample";

struct Sdk {
    port: u16,
    epoch: String,
}

fn sdk(env: &Env) -> Sdk {
    let text = env.sh(&format!("run-as {PKG} cat files/ai_app_bridge_endpoint.json"));
    let d: Value = serde_json::from_str(&text).unwrap();
    let out = env.adb(&["-s", &env.serial(), "forward", "tcp:0", &format!("localabstract:{}", d["socketName"].as_str().unwrap())]);
    Sdk { port: String::from_utf8_lossy(&out.stdout).trim().parse().unwrap(), epoch: d["runtimeEpoch"].as_str().unwrap().to_string() }
}

fn post(port: u16, path: &str, body: &Value) -> Option<Value> {
    request(port, "POST", path, Some(&body.to_string()))
}

fn tap(s: &Sdk, id: &str, timeout_ms: u64) -> Value {
    json!({ "x": 540, "y": 990, "actionId": id, "execution": { "schemaVersion": "aab.native-execution/v1", "actionId": id, "runtimeEpoch": s.epoch, "timeoutMs": timeout_ms } })
}

fn effects(env: &Env) -> Vec<Value> {
    env.control(json!({ "op": "actions" }))["actions"].as_array().cloned().unwrap()
}

fn taps_of(env: &Env, id: &str) -> usize {
    effects(env).iter().filter(|a| a["kind"] == "tap" && a["actionId"] == id).count()
}

fn in_background(port: u16, path: &'static str, body: Value) -> std::thread::JoinHandle<Option<Value>> {
    std::thread::spawn(move || post(port, path, &body))
}

#[test]
fn one_slot_timeout_grace_and_the_real_completion() {
    let env = Env::start(1);
    let s = sdk(&env);
    env.control(json!({ "op": "faults", "set": { "sdkActionDelayMs": 2500 } }));
    let a = in_background(s.port, "/v1/action/tap", tap(&s, "a1", 200));
    std::thread::sleep(Duration::from_millis(150));
    // A second action while one runs: busy, the exact non-dispatch shape (no `execution`).
    let busy = post(s.port, "/v1/action/tap-target", &json!({ "selector": { "text": "Sign in" }, "actionId": "b1", "execution": tap(&s, "b1", 5000)["execution"] })).unwrap();
    assert_eq!(busy, json!({ "ok": false, "error": "native_action_busy", "message": "Native execution rejected: native_action_busy", "dispatched": false, "ambiguous": false }));
    let st = http(s.port, "GET", "/v1/status", None).1;
    assert_eq!((st["debugBridge"]["nativeAction"]["actionId"].as_str(), st["debugBridge"]["nativeAction"]["settled"].as_bool()), (Some("a1"), Some(false)));
    // The timeout hit a running task: after the grace the reply is pending and ambiguous.
    let r = a.join().unwrap().expect("a pending reply");
    assert_eq!(r, json!({ "schemaVersion": "aab.native-execution/v1", "actionId": "a1", "runtimeEpoch": s.epoch, "ok": false, "error": "native_action_timeout", "dispatched": null, "ambiguous": true, "settled": false }));
    // The slot stays occupied until the real completion.
    assert_eq!(post(s.port, "/v1/action/tap", &tap(&s, "c1", 5000)).unwrap()["error"], "native_action_busy");
    assert_eq!(taps_of(&env, "a1"), 0);
    std::thread::sleep(Duration::from_millis(1200));
    let c = post(s.port, "/v1/action/cancel", &json!({ "actionId": "a1", "runtimeEpoch": s.epoch })).unwrap();
    let rec = &c["executionResult"];
    assert_eq!((c["ok"].as_bool(), rec["ok"].as_bool(), rec["error"].as_str(), rec["dispatched"].as_bool(), rec["settled"].as_bool()), (Some(true), Some(false), Some("native_action_timeout"), Some(true), Some(true)), "{c}");
    assert_eq!(taps_of(&env, "a1"), 1);
    assert_eq!(effects(&env).iter().filter(|a| a["kind"] == "tap").count(), 1, "b1 and c1 never ran");
    // Only the last terminal receipt is kept; its id cannot be reused.
    assert_eq!(post(s.port, "/v1/action/tap", &tap(&s, "a1", 5000)).unwrap()["error"], "native_action_id_reused");
}

#[test]
fn queued_stops_are_undispatched_and_a_running_cancel_is_pending() {
    let env = Env::start(1);
    let s = sdk(&env);
    env.control(json!({ "op": "faults", "set": { "sdkActionQueueMs": 3000 } }));
    // Timeout while queued: ends dispatched:false, settled.
    let r = post(s.port, "/v1/action/tap", &tap(&s, "q1", 100)).unwrap();
    assert_eq!((r["ok"].as_bool(), r["error"].as_str(), r["dispatched"].as_bool(), r["settled"].as_bool()), (Some(false), Some("native_action_timeout"), Some(false), Some(true)), "{r}");
    // Cancel while queued: the cancel receipt carries the undispatched result, the caller gets the same.
    let a = in_background(s.port, "/v1/action/tap", tap(&s, "q2", 10000));
    std::thread::sleep(Duration::from_millis(150));
    let c = post(s.port, "/v1/action/cancel", &json!({ "actionId": "q2", "runtimeEpoch": s.epoch })).unwrap();
    assert_eq!((c["ok"].as_bool(), c["executionResult"]["error"].as_str(), c["executionResult"]["dispatched"].as_bool()), (Some(true), Some("native_action_cancelled"), Some(false)), "{c}");
    assert_eq!(a.join().unwrap().unwrap(), c["executionResult"]);
    // Cancel while running: pending after the grace, then the real completion (forced ok:false).
    env.control(json!({ "op": "faults", "set": { "sdkActionQueueMs": 0, "sdkActionDelayMs": 2500 } }));
    let a = in_background(s.port, "/v1/action/tap", tap(&s, "r1", 10000));
    std::thread::sleep(Duration::from_millis(150));
    let c = post(s.port, "/v1/action/cancel", &json!({ "actionId": "r1", "runtimeEpoch": s.epoch })).unwrap();
    assert_eq!((c["error"].as_str(), c["ambiguous"].as_bool(), c["dispatched"].as_bool()), (Some("native_action_cancel_pending"), Some(true), None), "{c}");
    let r = a.join().unwrap().unwrap();
    assert_eq!((r["ok"].as_bool(), r["error"].as_str(), r["dispatched"].as_bool(), r["settled"].as_bool()), (Some(false), Some("native_action_cancelled"), Some(true), Some(true)), "{r}");
    assert_eq!((taps_of(&env, "q1"), taps_of(&env, "q2"), taps_of(&env, "r1")), (0, 0, 1));
    let bad = post(s.port, "/v1/action/cancel", &json!({ "actionId": "r1", "runtimeEpoch": s.epoch, "x": 1 })).unwrap();
    assert_eq!(bad["error"], "invalid_native_execution_identity");
    let settled = http(s.port, "GET", "/v1/events", None).1["items"].as_array().unwrap().iter().filter(|e| e["name"] == "native.action.settled").count();
    assert_eq!(settled, 3);
}

#[test]
fn a_dropped_action_reply_and_a_process_dying_mid_action() {
    let env = Env::start(1);
    let s = sdk(&env);
    // The action takes effect, then the connection closes; reads are not affected.
    env.control(json!({ "op": "faults", "set": { "sdkDropActionReplies": 1 } }));
    assert_eq!(http(s.port, "GET", "/v1/status", None).0, 200);
    assert_eq!(post(s.port, "/v1/action/tap", &tap(&s, "d1", 5000)), None);
    assert_eq!(taps_of(&env, "d1"), 1);
    let c = post(s.port, "/v1/action/cancel", &json!({ "actionId": "d1", "runtimeEpoch": s.epoch })).unwrap();
    assert_eq!((c["executionResult"]["ok"].as_bool(), c["executionResult"]["actionId"].as_str()), (Some(true), Some("d1")));
    // The process dies while the action runs: no reply, no effect, a new epoch afterwards.
    env.control(json!({ "op": "faults", "set": { "sdkActionDelayMs": 1500 } }));
    let a = in_background(s.port, "/v1/action/tap", tap(&s, "k1", 10000));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(env.control(json!({ "op": "crash", "package": PKG }))["ok"], true);
    assert_eq!(a.join().unwrap(), None);
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(taps_of(&env, "k1"), 0);
    env.control(json!({ "op": "launch", "package": PKG }));
    assert_ne!(sdk(&env).epoch, s.epoch);
}

#[test]
fn gestures_and_clear_data() {
    let env = Env::start(1);
    let s = sdk(&env);
    let exec = |id: &str, t: u64| json!({ "schemaVersion": "aab.native-execution/v1", "actionId": id, "runtimeEpoch": s.epoch, "timeoutMs": t });
    let g = |id: &str, extra: Value, t: u64| {
        let mut b = json!({ "selector": { "resourceName": "com.example.aab.sample:id/sign_in" }, "actionId": id, "execution": exec(id, t), "durationMs": 50 });
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        post(s.port, "/v1/action/gesture-target", &b).unwrap()
    };
    let r = g("g1", json!({ "action": "swipe", "deltaX": 100, "deltaY": -200 }), 5000);
    assert_eq!((r["ok"].as_bool(), r["completion"].as_str(), r["startX"].as_i64(), r["startY"].as_i64(), r["endX"].as_i64(), r["endY"].as_i64()), (Some(true), Some("completed"), Some(540), Some(990), Some(640), Some(790)), "{r}");
    let r = g("g2", json!({ "action": "scroll", "direction": "down" }), 5000);
    assert_eq!((r["startY"].as_i64(), r["endY"].as_i64()), (Some(1026), Some(950)), "{r}");
    for (extra, t, code, field) in [
        (json!({ "action": "pinch" }), 5000, "unsupported_gesture", "action"),
        (json!({ "action": "longPress" }), 5000, "invalid_argument", "durationMs"),
        (json!({ "action": "swipe", "deltaX": 0, "deltaY": 0 }), 5000, "swipe_delta_zero", "deltaX"),
        (json!({ "action": "scroll", "direction": "left" }), 5000, "invalid_argument", "direction"),
        (json!({ "action": "swipe", "deltaX": 5, "deltaY": 0, "durationMs": 800 }), 500, "insufficient_gesture_budget", "durationMs"),
    ] {
        let r = g("gx", extra, t);
        assert_eq!((r["error"].as_str(), r["field"].as_str(), r["dispatched"].as_bool(), r.get("execution")), (Some(code), Some(field), Some(false), None), "{r}");
    }
    let r = g("g3", json!({ "action": "swipe", "deltaX": 0, "deltaY": 5000 }), 5000);
    assert_eq!((r["error"].as_str(), r["dispatched"].as_bool(), r["settled"].as_bool()), (Some("swipe_endpoint_out_of_bounds"), Some(false), Some(true)));
    let gestures: Vec<Value> = effects(&env).into_iter().filter(|a| a["kind"] == "gesture").collect();
    assert_eq!(gestures.iter().map(|a| a["actionId"].as_str().unwrap()).collect::<Vec<_>>(), ["g1", "g2"]);
    // clear-data is refused while an action holds the slot.
    env.control(json!({ "op": "faults", "set": { "sdkActionDelayMs": 800 } }));
    let a = in_background(s.port, "/v1/action/tap", tap(&s, "t1", 5000));
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(post(s.port, "/v1/app/clear-data", &json!({})).unwrap()["error"], "native_action_busy");
    assert_eq!(a.join().unwrap().unwrap()["ok"], true);
    let r = post(s.port, "/v1/app/clear-data", &json!({})).unwrap();
    assert_eq!((r["ok"].as_bool(), r["action"].as_str(), r["app"]["packageName"].as_str()), (Some(true), Some("clear-app-data"), Some(PKG)));
    assert_eq!(effects(&env).iter().filter(|a| a["kind"] == "clear-data").count(), 1);
}
