//! Flutter through the Android SDK routes e2e through the public CLI (and MCP)
//! against the simulated phone's Flutter engine (the sample app's `shop`
//! screen). Ground truth is the simulator's control op `flutter`: the engine's
//! state (route, typed values, scroll offsets, runtime epoch) and every Flutter
//! effect with the action id that caused it.

use std::time::{Duration, Instant};

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};

type Sim = aab_android_sim::Simulator;

fn flutter(w: &World, sim: &Sim) -> Value {
    control(w, sim, json!({"op": "flutter", "package": SAMPLE}))
}

/// Flutter effects of `kind` (flutter-tap, flutter-text, flutter-scroll, …).
fn effects(w: &World, sim: &Sim, kind: &str) -> Vec<Value> {
    flutter(w, sim)["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == json!(kind)).cloned().collect()
}

fn ids(list: &[Value]) -> Vec<String> {
    list.iter().map(|e| e["data"]["actionId"].as_str().unwrap_or("<none>").to_string()).collect()
}

fn phase(w: &World, serial: &str) -> Value {
    let run = w.env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    w.env.expect_ok(&run, "device-ownership status")["value"]["phase"].clone()
}

/// The simulator with the sample app on its Flutter `shop` screen.
fn shop(w: &World) -> (Sim, Value) {
    let sim = simulated(w);
    control(w, &sim, json!({"op": "screen", "package": SAMPLE, "screen": "shop"}));
    let base = json!({"packageName": SAMPLE, "serial": sim.devices[0].serial});
    (sim, base)
}

fn with(base: &Value, extra: Value) -> Value {
    let mut a = base.clone();
    a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    a
}

#[test]
fn android_flutter_tap_input_and_scroll_land_in_the_engine_once() {
    let w = World::new();
    let (mut sim, base) = shop(&w);
    let serial = sim.devices[0].serial.clone();

    let nodes = w.ok("flutter-nodes", json!({"packageName": SAMPLE}));
    let epoch = flutter(&w, &sim)["engine"]["runtimeEpoch"].clone();
    assert_eq!((nodes["runtimeEpoch"].clone(), nodes["truncated"].clone(), nodes["executionSchema"].clone()), (epoch.clone(), json!(false), json!("aab.flutter-execution/v1")), "{nodes}");
    assert!(nodes["nodes"].as_array().unwrap().iter().any(|n| n["text"] == json!("Add to cart") && n["targetRef"]["schemaVersion"] == json!("aab.flutter-target/v1")));

    // tap-flutter by selector: bound in a fresh tree, one tap by this action.
    let tap = w.ok("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}})));
    assert_eq!((tap["device"]["targetValidation"].clone(), tap["proof"]["kind"].clone(), tap["runtimeEpoch"].clone(), tap["bound"]["text"].clone()), (json!("aab.flutter-target/v1"), json!("flutter"), epoch.clone(), json!("Add to cart")), "{tap}");
    assert_eq!(ids(&effects(&w, &sim, "flutter-tap")), [tap["actionId"].as_str().unwrap()]);
    let cart = app_state(&w, &sim, SAMPLE)["capture"]["state"].as_array().unwrap().iter().any(|s| s["namespace"] == json!("shop") && s["key"] == json!("cart"));
    assert!(cart, "ground truth: the button's state record is in the app");

    // input-flutter-text into the Search field, then the keyboard hidden by a second action.
    let input = w.ok("input-flutter-text", with(&base, json!({"selector": {"text": "Search"}, "text": "red shoes", "hideKeyboard": true})));
    assert_eq!((input["device"]["textLength"].clone(), input["hideKeyboard"]["ok"].clone()), (json!(9), json!(true)), "{input}");
    let engine = flutter(&w, &sim)["engine"].clone();
    assert_eq!((engine["values"]["search"].clone(), engine["keyboard"].clone()), (json!("red shoes"), json!(false)), "{engine}");
    assert_eq!(ids(&effects(&w, &sim, "flutter-text")), [input["actionId"].as_str().unwrap()]);
    // A read-only input is refused by the Dart side, nothing typed.
    let facts = w.fails("input-flutter-text", with(&base, json!({"selector": {"text": "Coupon"}, "text": "X"})), "flutter_input_not_editable");
    assert_eq!(facts["details"]["device"]["settled"], json!(true), "{facts}");
    assert_eq!(effects(&w, &sim, "flutter-text").len(), 1);

    // scroll-flutter until an off-screen product is in view; then by a delta.
    let scrolled = w.ok("scroll-flutter", with(&base, json!({"targetText": "Product 25", "maxSwipes": 10})));
    assert!(scrolled["device"]["swipes"].as_u64().unwrap() >= 1, "{scrolled}");
    let px = flutter(&w, &sim)["engine"]["scroll"]["products"].as_f64().unwrap();
    assert!(px > 0.0);
    let nodes = w.ok("flutter-nodes", json!({"packageName": SAMPLE}));
    assert!(nodes["nodes"].as_array().unwrap().iter().any(|n| n["text"] == json!("Product 25") && n["visible"] == json!(true)));
    w.ok("scroll-flutter", with(&base, json!({"delta": -40})));
    assert_eq!(flutter(&w, &sim)["engine"]["scroll"]["products"].as_f64().unwrap(), px - 40.0);
    w.ok("scroll-flutter", with(&base, json!({"delta": -100000})));
    let facts = w.fails("scroll-flutter", with(&base, json!({"delta": -10})), "flutter_scroll_boundary");
    assert_eq!(facts["details"]["device"]["dispatched"], json!(false));

    // tap-flutter at logical coordinates (tapAt) through the DPR: Browse catalog → route catalog.
    let at = w.ok("tap-flutter", with(&base, json!({"tapX": 300, "tapY": 208})));
    assert_eq!((at["device"]["targetValidation"].clone(), at["device"]["screenX"].clone()), (json!("coordinates"), json!((300.0f64 * 2.625).round() as i64)), "{at}");
    assert_eq!(flutter(&w, &sim)["engine"]["route"], json!("catalog"));

    // flutter-tree through MCP; flutter-action (expert) back pops the route.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "flutter-tree", "arguments": {"packageName": SAMPLE}, "extract": null}));
    assert!(!is_error, "{body}");
    let layout = &body["value"]["flutter"]["layout"];
    assert!(layout["widgetInspector"]["root"].is_object() && layout["semantics"]["count"].as_u64().unwrap() > 0 && layout["operable"]["truncated"] == json!(true), "{body}");
    let back = w.ok("flutter-action", with(&base, json!({"payload": {"action": "back"}})));
    assert_eq!(back["device"]["handledBy"], json!("flutter"));
    assert_eq!(flutter(&w, &sim)["engine"]["route"], json!("/"));
    assert_eq!(phase(&w, &serial), json!("idle"), "every action settled from its receipt");
    sim.shutdown();
}

#[test]
fn android_flutter_tap_text_auto_crosses_native_and_flutter() {
    let w = World::new();
    let (mut sim, base) = shop(&w);
    // Not a native view: auto falls through to the Flutter view.
    let tapped = w.ok("tap-text", with(&base, json!({"targetText": "Add to cart"})));
    assert_eq!((tapped["provider"].clone(), tapped["selected"]["provider"].clone()), (json!("flutter"), json!("flutter")), "{tapped}");
    assert_eq!(ids(&effects(&w, &sim, "flutter-tap")), [tapped["actionId"].as_str().unwrap()]);
    // Pinned providers stay in their layer.
    w.fails("tap-text", with(&base, json!({"targetText": "Add to cart", "provider": "native"})), "native_selector_not_found");
    w.fails("tap-text", with(&base, json!({"targetText": "Close", "provider": "flutter"})), "flutter_selector_not_found");
    w.fails("tap-text", with(&base, json!({"targetText": "Nowhere"})), "flutter_selector_not_found");
    assert_eq!(effects(&w, &sim, "flutter-tap").len(), 1, "refusals tapped nothing");
    // A native view wins: the native Close button leaves the Flutter screen.
    let close = w.ok("tap-text", with(&base, json!({"targetText": "Close"})));
    assert_eq!(close["provider"], json!("native"));
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("welcome"));
    // Without a Flutter view, auto answers with the native refusal.
    w.fails("tap-text", with(&base, json!({"targetText": "Add to cart"})), "native_selector_not_found");
    w.fails("flutter-nodes", json!({"packageName": SAMPLE}), "flutter_unavailable");
    sim.shutdown();
}

#[test]
fn android_flutter_busy_cancelled_and_engine_restart_are_not_dispatched() {
    let w = World::new();
    let (mut sim, base) = shop(&w);
    let serial = sim.devices[0].serial.clone();

    // Another client's action holds the Flutter slot (the Dart side is busy): busy.
    control(&w, &sim, json!({"op": "faults", "set": {"flutterActionQueueMs": 60000}}));
    let epoch = flutter(&w, &sim)["engine"]["runtimeEpoch"].as_str().unwrap().to_string();
    let sdk_epoch = app_state(&w, &sim, SAMPLE)["runtimeEpoch"].as_str().unwrap().to_string();
    let fwd = w.adb(&["-s", &serial, "forward", "tcp:0", &format!("localabstract:aab-sdk-{sdk_epoch}")]);
    let port: u16 = fwd.trim().parse().unwrap();
    let foreign = json!({"action": "back", "actionId": "foreign-1", "execution": {"schemaVersion": "aab.flutter-execution/v1", "actionId": "foreign-1", "runtimeEpoch": epoch, "timeoutMs": 60000}});
    let post = |path: &str, body: &Value| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let b = body.to_string();
        s.write_all(format!("POST {path} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{b}", b.len()).as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        serde_json::from_str::<Value>(out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("")).unwrap_or(Value::Null)
    };
    std::thread::scope(|s| {
        let held = s.spawn(|| post("/v1/flutter/action", &foreign));
        let until = Instant::now() + Duration::from_secs(10);
        while flutter(&w, &sim)["slot"].is_null() {
            assert!(Instant::now() < until, "the foreign action never took the slot");
            std::thread::sleep(Duration::from_millis(20));
        }
        let facts = w.fails("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}})), "flutter_action_busy");
        assert_eq!(facts["details"]["device"]["error"], json!("flutter_action_busy"), "{facts}");
        let c = post("/v1/flutter/cancel", &json!({"actionId": "foreign-1", "runtimeEpoch": epoch}));
        assert_eq!(c["executionResult"]["dispatched"], json!(false), "{c}");
        held.join().unwrap();
    });

    // Our own action waits on the busy Dart side; a cancel before its permission: cancelled, not dispatched.
    std::thread::scope(|s| {
        let run = s.spawn(|| w.run("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}}))));
        let until = Instant::now() + Duration::from_secs(10);
        let active = loop {
            let slot = flutter(&w, &sim)["slot"].clone();
            if !slot.is_null() {
                break slot;
            }
            assert!(Instant::now() < until, "the action never reached the slot");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(active["permissionIssued"], json!(false));
        let c = post("/v1/flutter/cancel", &json!({"actionId": active["actionId"], "runtimeEpoch": active["runtimeEpoch"]}));
        assert_eq!(c["ok"], json!(true), "{c}");
        let (body, run) = run.join().unwrap();
        let facts = error_facts(&body).clone();
        w.env.check(run.exit() != 0 && facts["error"] == json!("flutter_action_cancelled") && facts["dispatched"] == json!(false), &run, "cancelled before permission: not dispatched");
    });
    assert!(effects(&w, &sim, "flutter-tap").is_empty(), "ground truth: nothing was tapped");
    control(&w, &sim, json!({"op": "faults", "reset": true}));

    // The engine restarts between the host's observation and its action.
    control(&w, &sim, json!({"op": "faults", "set": {"flutterRestartAfterSnapshot": 1}}));
    let facts = w.fails("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}})), "flutter_runtime_changed");
    assert_eq!(facts["details"]["runtimeEpoch"], json!(epoch), "bound in the old runtime: {facts}");
    assert_ne!(flutter(&w, &sim)["engine"]["runtimeEpoch"], json!(epoch));
    // An expert payload observed before a restart is refused the same way.
    let nodes = w.ok("flutter-nodes", json!({"packageName": SAMPLE}));
    let add = nodes["nodes"].as_array().unwrap().iter().find(|n| n["text"] == json!("Add to cart")).unwrap().clone();
    control(&w, &sim, json!({"op": "flutter-restart", "package": SAMPLE}));
    w.fails("flutter-action", with(&base, json!({"payload": {"action": "tapTarget", "selector": {"text": "Add to cart"}, "targetRef": add["targetRef"]}})), "flutter_runtime_changed");
    assert!(effects(&w, &sim, "flutter-tap").is_empty(), "ground truth: nothing was tapped");
    assert_eq!(phase(&w, &serial), json!("idle"));
    sim.shutdown();
}

#[test]
fn android_flutter_lost_reply_is_unresolved_until_reconciled() {
    let w = World::new();
    let (mut sim, base) = shop(&w);
    let serial = sim.devices[0].serial.clone();
    // The tap takes effect; its reply and the one cancel's reply are lost.
    control(&w, &sim, json!({"op": "faults", "set": {"flutterDropReplies": 2}}));
    let (body, run) = w.run("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}})));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true) && facts["dispatched"] != json!(false), &run, "a lost reply is ambiguous");
    let taps = effects(&w, &sim, "flutter-tap");
    assert_eq!(taps.len(), 1, "ground truth: the tap happened once");
    assert_eq!(phase(&w, &serial), json!("unresolved"));
    w.fails("tap-flutter", with(&base, json!({"selector": {"text": "Add to cart"}})), "device_ownership_unresolved");
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.expect_ok(&run, "reconcile");
    let receipt = &body["value"]["executionReceipt"];
    assert_eq!((body["value"]["recovered"].clone(), receipt["kind"].clone(), receipt["device"]["ok"].clone()), (json!(true), json!("flutter"), json!(true)), "{body}");
    assert_eq!(receipt["device"]["actionId"], taps[0]["data"]["actionId"]);
    assert_eq!(phase(&w, &serial), json!("idle"));
    assert_eq!(effects(&w, &sim, "flutter-tap").len(), 1, "ground truth: never resent");
    sim.shutdown();
}

#[test]
fn android_flutter_truncated_tree_refuses_selector_binding() {
    let w = World::new();
    let (mut sim, base) = shop(&w);
    w.ok("tap-flutter-text", with(&base, json!({"targetText": "Browse catalog"})));
    assert_eq!(flutter(&w, &sim)["engine"]["route"], json!("catalog"));
    let nodes = w.ok("flutter-nodes", json!({"packageName": SAMPLE}));
    assert_eq!((nodes["truncated"].clone(), nodes["count"].clone()), (json!(true), json!(600)));
    let before = effects(&w, &sim, "flutter-tap").len();
    let facts = w.fails("tap-flutter", with(&base, json!({"selector": {"text": "Catalog item 3"}})), "flutter_observation_incomplete");
    assert_eq!(facts["field"], json!("selector"));
    w.fails("tap-flutter-text", with(&base, json!({"targetText": "Back"})), "flutter_observation_incomplete");
    w.fails("input-flutter-text", with(&base, json!({"selector": {"text": "Back"}, "text": "x"})), "flutter_observation_incomplete");
    assert_eq!(effects(&w, &sim, "flutter-tap").len(), before, "ground truth: nothing dispatched");
    // Coordinates bind nothing: the Back button at logical (20, 20) still works.
    w.ok("tap-flutter", with(&base, json!({"tapX": 20, "tapY": 20})));
    assert_eq!(flutter(&w, &sim)["engine"]["route"], json!("/"));
    sim.shutdown();
}
