//! The simulated Flutter engine (§7) through the SDK routes: the operable tree
//! and its limits, managed Flutter actions with their effects checked in the
//! control op `flutter` (engine state and effects), the one slot (busy,
//! cancel before and after permission), engine restart and target checks.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Env, sdk_forward, http, request};

const PKG: &str = "com.example.aab.sample";

struct Sdk {
    port: u16,
}

fn sdk(env: &Env) -> Sdk {
    Sdk { port: sdk_forward(env, PKG).0 }
}

fn post(port: u16, path: &str, body: &Value) -> Option<Value> {
    request(port, "POST", path, Some(&body.to_string()))
}

fn operable(s: &Sdk) -> Value {
    http(s.port, "GET", "/v1/flutter/snapshot", None).1["flutter"]["layout"]["operable"].clone()
}

fn node<'a>(op: &'a Value, text: &str) -> &'a Value {
    op["nodes"].as_array().unwrap().iter().find(|n| n["text"] == text || n["label"] == text).unwrap_or_else(|| panic!("no node {text}"))
}

fn action(op: &Value, id: &str, payload: Value) -> Value {
    let mut b = payload;
    b["actionId"] = json!(id);
    b["execution"] = json!({ "schemaVersion": "aab.flutter-execution/v1", "actionId": id, "runtimeEpoch": op["runtimeEpoch"], "timeoutMs": 10000 });
    b
}

fn flutter(env: &Env) -> Value {
    env.control(json!({ "op": "flutter", "package": PKG }))
}

fn shop(env: &Env) -> Sdk {
    env.control(json!({ "op": "screen", "package": PKG, "screen": "shop" }));
    sdk(env)
}

#[test]
fn snapshot_actions_and_their_effects() {
    let env = Env::start(1);
    let s = sdk(&env);
    // A native screen shows no Flutter view.
    assert_eq!(http(s.port, "GET", "/v1/flutter/snapshot", None).1["flutter"], Value::Null);
    let s = shop(&env);
    let st = http(s.port, "GET", "/v1/flutter/snapshot", None).1;
    let op = &st["flutter"]["layout"]["operable"];
    assert_eq!((op["ok"].clone(), op["executionSchema"].clone(), op["truncated"].clone()), (json!(true), json!("aab.flutter-execution/v1"), json!(false)), "{op}");
    let epoch = op["runtimeEpoch"].as_str().unwrap();
    let (micros, rnd) = epoch.split_once('-').unwrap();
    assert!(micros.len() >= 16 && micros.bytes().all(|b| b.is_ascii_digit()) && !rnd.is_empty(), "{epoch}");
    assert_eq!(flutter(&env)["engine"]["runtimeEpoch"], json!(epoch));
    let add = node(op, "Add to cart");
    let mut keys: Vec<&String> = add["targetRef"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["elementId", "guard", "runtimeEpoch", "schemaVersion"]);
    assert!(add["id"].as_str().unwrap().starts_with('e') && add["targetRef"]["guard"].as_str().unwrap().starts_with('g'));
    assert!(st["flutter"]["layout"]["widgetInspector"]["root"].is_object() && st["flutter"]["layout"]["semantics"]["count"].as_u64().unwrap() > 0);
    assert!(http(s.port, "GET", "/v1/status", None).1["flutter"].get("layout").is_none(), "status carries the snapshot without layout");

    // tapTarget: the effect lands in the app (capture) and in the truth, at DPR-mapped screen px.
    let r = post(s.port, "/v1/flutter/action", &action(op, "t1", json!({ "action": "tapTarget", "selector": { "text": "Add to cart" }, "targetRef": add["targetRef"] }))).unwrap();
    assert_eq!((r["ok"].clone(), r["dispatched"].clone(), r["settled"].clone()), (json!(true), json!(true), json!(true)), "{r}");
    assert_eq!(r["execution"], json!({ "schemaVersion": "aab.flutter-execution/v1", "actionId": "t1", "runtimeEpoch": epoch, "settled": true }));
    let fx = flutter(&env)["effects"].as_array().unwrap().clone();
    let tap = fx.iter().find(|e| e["kind"] == "flutter-tap").unwrap();
    assert_eq!((tap["data"]["actionId"].clone(), tap["data"]["target"]["text"].clone(), tap["data"]["screenY"].clone()), (json!("t1"), json!("Add to cart"), json!(240 + (208.0f64 * 2.625).round() as i64)), "{tap}");

    // inputText on the search field; the guard follows the value (an old ref is changed).
    let search = node(op, "Search").clone();
    let r = post(s.port, "/v1/flutter/action", &action(op, "i1", json!({ "action": "inputText", "text": "shoes", "selector": { "text": "Search" }, "targetRef": search["targetRef"] }))).unwrap();
    assert_eq!((r["ok"].clone(), r["textLength"].clone()), (json!(true), json!(5)), "{r}");
    assert_eq!(flutter(&env)["engine"]["values"]["search"], json!("shoes"));
    let r = post(s.port, "/v1/flutter/action", &action(op, "i2", json!({ "action": "inputText", "text": "x", "selector": { "text": "Search" }, "targetRef": search["targetRef"] }))).unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("flutter_target_changed"), json!(false)), "{r}");
    let r = post(s.port, "/v1/flutter/action", &action(op, "i3", json!({ "action": "inputText", "text": "x", "selector": { "text": "Coupon" } }))).unwrap();
    assert_eq!(r["error"], json!("flutter_input_not_editable"));
    assert_eq!(flutter(&env)["engine"]["values"]["search"], json!("shoes"), "refused inputs changed nothing");

    // scrollUntilText scrolls the product list; scrollBy at the top edge is a boundary.
    let r = post(s.port, "/v1/flutter/action", &action(op, "u1", json!({ "action": "scrollUntilText", "text": "Product 25", "maxSwipes": 20 }))).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    assert!(flutter(&env)["engine"]["scroll"]["products"].as_f64().unwrap() > 0.0);
    assert_eq!(node(&operable(&s), "Product 25")["visible"], json!(true));
    let r = post(s.port, "/v1/flutter/action", &action(op, "u2", json!({ "action": "scrollBy", "delta": -100000 }))).unwrap();
    assert_eq!(r["ok"], json!(true));
    let r = post(s.port, "/v1/flutter/action", &action(op, "u3", json!({ "action": "scrollBy", "delta": -10 }))).unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("flutter_scroll_boundary"), json!(false)));

    // Navigation: the catalog route has >600 operable nodes (truncated), back pops it.
    let r = post(s.port, "/v1/flutter/action", &action(op, "n1", json!({ "action": "tapText", "text": "Browse catalog" }))).unwrap();
    assert_eq!(r["ok"], json!(true));
    assert_eq!(flutter(&env)["engine"]["route"], json!("catalog"));
    let big = operable(&s);
    assert_eq!((big["truncated"].clone(), big["count"].clone()), (json!(true), json!(600)));
    let r = post(s.port, "/v1/flutter/action", &action(op, "n2", json!({ "action": "back" }))).unwrap();
    assert_eq!(r["handledBy"], json!("flutter"));
    assert_eq!(flutter(&env)["engine"]["route"], json!("/"));
    // Unknown actions and arguments are refused before admission.
    assert_eq!(post(s.port, "/v1/flutter/action", &action(op, "x1", json!({ "action": "h5Nope" }))).unwrap()["error"], json!("unknown_action"));
    assert_eq!(post(s.port, "/v1/flutter/action", &action(op, "x2", json!({ "action": "back", "extra": 1 }))).unwrap()["field"], json!("extra"));
}

#[test]
fn one_slot_permission_cancel_and_engine_restart() {
    let env = Env::start(1);
    let s = shop(&env);
    let op = operable(&s);
    // The Dart side is busy before asking permission: a second action is busy; a cancel settles undispatched at once.
    env.control(json!({ "op": "faults", "set": { "flutterActionQueueMs": 3000 } }));
    let body = action(&op, "a1", json!({ "action": "tapText", "text": "Add to cart" }));
    let port = s.port;
    let h = std::thread::spawn(move || post(port, "/v1/flutter/action", &body));
    std::thread::sleep(Duration::from_millis(300));
    let busy = post(s.port, "/v1/flutter/action", &action(&op, "b1", json!({ "action": "back" }))).unwrap();
    assert_eq!(busy, json!({ "ok": false, "error": "flutter_action_busy", "message": "Flutter execution rejected: flutter_action_busy", "dispatched": false, "ambiguous": false }));
    // …and so is a native action (one action family at a time).
    let native = json!({ "x": 540, "y": 990, "actionId": "n1", "execution": { "schemaVersion": "aab.native-execution/v1", "actionId": "n1", "runtimeEpoch": http(s.port, "GET", "/v1/status", None).1["debugBridge"]["runtimeEpoch"], "timeoutMs": 5000 } });
    assert_eq!(post(s.port, "/v1/action/tap", &native).unwrap()["error"], json!("flutter_action_busy"));
    assert_eq!(http(s.port, "GET", "/v1/status", None).1["debugBridge"]["flutterAction"]["permissionIssued"], json!(false));
    let c = post(s.port, "/v1/flutter/cancel", &json!({ "actionId": "a1", "runtimeEpoch": op["runtimeEpoch"] })).unwrap();
    assert_eq!((c["executionResult"]["error"].clone(), c["executionResult"]["dispatched"].clone()), (json!("flutter_action_cancelled"), json!(false)), "{c}");
    assert_eq!(h.join().unwrap().unwrap()["error"], json!("flutter_action_cancelled"));
    assert!(flutter(&env)["effects"].as_array().unwrap().iter().all(|e| e["kind"] != "flutter-tap"), "nothing was tapped");
    // Id reuse and the retained receipt.
    assert_eq!(post(s.port, "/v1/flutter/action", &action(&op, "a1", json!({ "action": "back" }))).unwrap()["error"], json!("flutter_action_id_reused"));
    // After permission the cancel cannot undo: the tap happens, the receipt says cancelled + dispatched.
    env.control(json!({ "op": "faults", "set": { "flutterActionQueueMs": 0, "flutterActionDelayMs": 600 } }));
    let body = action(&op, "a2", json!({ "action": "tapText", "text": "Add to cart" }));
    let h = std::thread::spawn(move || post(port, "/v1/flutter/action", &body));
    std::thread::sleep(Duration::from_millis(200));
    let c = post(s.port, "/v1/flutter/cancel", &json!({ "actionId": "a2", "runtimeEpoch": op["runtimeEpoch"] })).unwrap();
    assert_eq!((c["executionResult"]["error"].clone(), c["executionResult"]["dispatched"].clone()), (json!("flutter_action_cancelled"), json!(true)), "{c}");
    h.join().unwrap();
    assert_eq!(flutter(&env)["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == "flutter-tap" && e["data"]["actionId"] == "a2").count(), 1);
    env.control(json!({ "op": "faults", "reset": true }));
    // Engine restart: a new runtime epoch; the old one is refused before admission.
    let restarted = env.control(json!({ "op": "flutter-restart", "package": PKG }));
    assert_ne!(restarted["runtimeEpoch"], op["runtimeEpoch"]);
    let r = post(s.port, "/v1/flutter/action", &action(&op, "r1", json!({ "action": "back" }))).unwrap();
    assert_eq!(r["error"], json!("flutter_runtime_changed"));
    // Rebuilt elements (same content) are replaced.
    let op2 = operable(&s);
    env.control(json!({ "op": "flutter-rebuild", "package": PKG }));
    let add = node(&op2, "Add to cart");
    let r = post(s.port, "/v1/flutter/action", &action(&op2, "r2", json!({ "action": "tapTarget", "selector": { "text": "Add to cart" }, "targetRef": add["targetRef"] }))).unwrap();
    assert_eq!(r["error"], json!("flutter_target_replaced"));
}

#[test]
fn semantics_stop_at_depth_24_while_the_operable_tree_goes_on() {
    // One Flutter screen whose widgets nest 55 deep (what a scenario file's JSON nesting
    // allows), each with a text.
    let mut w = json!({ "widgetType": "Text", "text": "leaf" });
    for i in 0..55 {
        w = json!({ "widgetType": "Padding", "text": format!("level {i}"), "children": [w] });
    }
    let scenario = json!({
        "foreground": PKG,
        "apps": [{ "package": PKG, "sdk": true, "activities": [".MainActivity"], "screens": [{ "name": "deep", "root": { "class": "android.widget.FrameLayout" },
            "flutter": { "routes": [{ "name": "/", "root": w }] } }] }]
    });
    let env = Env::with_scenario(1, aab_android_sim::Scenario::parse(&scenario.to_string()).unwrap());
    let s = sdk(&env);
    let layout = http(s.port, "GET", "/v1/flutter/snapshot", None).1["flutter"]["layout"].clone();
    let op = &layout["operable"];
    assert_eq!((op["truncated"].clone(), op["count"].clone()), (json!(false), json!(56)));
    assert_eq!((layout["widgetInspector"]["truncated"].clone(), layout["widgetInspector"]["count"].clone()), (json!(false), json!(56)));
    let sem = &layout["semantics"];
    assert_eq!((sem["truncated"].clone(), sem["count"].clone()), (json!(true), json!(25)), "depths 0..=24");
}

#[test]
fn timeout_before_permission_settles_undispatched_after_it_is_pending() {
    let env = Env::start(1);
    let s = shop(&env);
    let op = operable(&s);
    let timed = |id: &str, ms: u64| {
        let mut b = action(&op, id, json!({ "action": "tapText", "text": "Add to cart" }));
        b["execution"]["timeoutMs"] = json!(ms);
        b
    };
    // Busy Dart side: the timeout hits before the permission → settled at once, not dispatched.
    env.control(json!({ "op": "faults", "set": { "flutterActionQueueMs": 5000 } }));
    let r = post(s.port, "/v1/flutter/action", &timed("t1", 300)).unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone(), r["settled"].clone()), (json!("flutter_action_timeout"), json!(false), json!(true)), "{r}");
    // Slow after the permission: after the grace the reply is pending and ambiguous; the slot stays busy.
    env.control(json!({ "op": "faults", "set": { "flutterActionQueueMs": 0, "flutterActionDelayMs": 2500 } }));
    let r = post(s.port, "/v1/flutter/action", &timed("t2", 200)).unwrap();
    assert_eq!((r["settled"].clone(), r["ambiguous"].clone(), r["dispatched"].clone()), (json!(false), json!(true), Value::Null), "{r}");
    assert_eq!(post(s.port, "/v1/flutter/action", &timed("t3", 5000)).unwrap()["error"], json!("flutter_action_busy"));
    // The real completion frees the slot (polled, no timing assumption).
    while !flutter(&env)["slot"].is_null() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let c = post(s.port, "/v1/flutter/cancel", &json!({ "actionId": "t2", "runtimeEpoch": op["runtimeEpoch"] })).unwrap();
    let rec = &c["executionResult"];
    assert_eq!((rec["error"].clone(), rec["dispatched"].clone()), (json!("flutter_action_timeout"), json!(true)), "{c}");
    let taps: Vec<Value> = flutter(&env)["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == "flutter-tap").cloned().collect();
    assert_eq!(taps.iter().map(|t| t["data"]["actionId"].clone()).collect::<Vec<_>>(), [json!("t2")], "t1 never ran, t2 ran once");
}
