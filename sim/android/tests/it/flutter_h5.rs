//! Flutter-hosted WebViews through the Flutter action route: the adapter
//! registry (built with its route, visible only while the route shows),
//! `h5Dom` snapshots of the real Chromium page, `h5Control` / `h5Eval`
//! mutations whose effects are read back from the page and the H5 server's
//! request log, re-registration voiding page references, and rejections that
//! leave the page untouched.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Env, sdk_forward, request};

const PKG: &str = "com.example.aab.sample";

struct Sdk {
    port: u16,
}

fn sdk(env: &Env) -> Sdk {
    Sdk { port: sdk_forward(env, PKG).0 }
}

fn epoch(s: &Sdk) -> String {
    let st = request(s.port, "GET", "/v1/status", None).unwrap();
    st["flutter"]["runtimeEpoch"].as_str().unwrap_or_else(|| panic!("no Flutter runtime: {st}")).to_string()
}

/// One payload on `/v1/flutter/action` with a fresh execution envelope.
fn flutter_action(s: &Sdk, id: &str, payload: Value) -> Value {
    let mut b = payload;
    b["actionId"] = json!(id);
    b["execution"] = json!({ "schemaVersion": "aab.flutter-execution/v1", "actionId": id, "runtimeEpoch": epoch(s), "timeoutMs": 20000 });
    request(s.port, "POST", "/v1/flutter/action", Some(&b.to_string())).expect("a reply")
}

fn element(snapshot: &Value, id: &str) -> Value {
    let c = snapshot["dom"]["controls"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no #{id} in {snapshot}"));
    let mut e = serde_json::Map::new();
    for k in ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"] {
        e.insert(k.into(), c[k].clone());
    }
    Value::Object(e)
}

fn page_eval(env: &Env, expression: &str) -> Value {
    let r = env.control(json!({ "op": "webview-eval", "package": PKG, "webViewId": "shop-help", "expression": expression }));
    assert_eq!(r["ok"], json!(true), "{r}");
    r["value"].clone()
}

fn effects(env: &Env) -> Vec<Value> {
    env.truth("flutter-h5")
}

#[test]
fn flutter_hosted_webview_adapters_snapshots_and_managed_effects() {
    let env = Env::start(1);
    env.control(json!({ "op": "screen", "package": PKG, "screen": "shop" }));
    let s = sdk(&env);
    // Route "/" of the shop: the help page is not built, so no adapter is registered.
    let r = flutter_action(&s, "r0", json!({ "action": "h5Adapters" }));
    assert_eq!((r["ok"].clone(), r["adapters"].clone()), (json!(true), json!([])), "{r}");
    let r = flutter_action(&s, "r1", json!({ "action": "h5Dom" }));
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("flutter_h5_adapter_not_found"), json!(false)), "{r}");
    // Help → route "help" builds the WebView widget and registers the adapter.
    let tap = flutter_action(&s, "t1", json!({ "action": "tapText", "text": "Help" }));
    assert_eq!(tap["ok"], json!(true), "{tap}");
    let snap = flutter_action(&s, "r2", json!({ "action": "h5Dom" }));
    assert_eq!(snap["ok"], json!(true), "{snap}");
    assert_eq!(snap["h5TargetSchema"], json!("aab.flutter-h5-target/v1"));
    let page = snap["pageRef"].clone();
    let keys: Vec<&str> = page.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["schemaVersion", "runtimeEpoch", "adapterId", "adapterGeneration", "documentId", "url"]);
    assert_eq!((page["adapterId"].clone(), page["adapterGeneration"].clone(), page["runtimeEpoch"].clone()), (json!("shop-help"), json!(1), json!(epoch(&s))));
    assert_eq!(snap["dom"]["title"], json!("Shop help"));
    assert!(snap["dom"]["url"].as_str().unwrap().ends_with("/h5/help.html"));
    assert_eq!(flutter_action(&s, "r3", json!({ "action": "h5Adapters" }))["adapters"][0]["visible"], json!(true));
    // A read beside the Flutter tree does not count as an effect.
    assert!(effects(&env).is_empty());

    // input → the real page's field; click → the page's fetch reaches the H5 server.
    let input = flutter_action(&s, "m1", json!({ "action": "h5Control", "operation": "input", "expectedTarget": { "pageRef": page, "element": element(&snap, "question") }, "text": "Where is order 42?" }));
    assert_eq!((input["ok"].clone(), input["dispatched"].clone(), input["settled"].clone(), input["adapterId"].clone()), (json!(true), json!(true), json!(true), json!("shop-help")), "{input}");
    assert_eq!(input["execution"], json!({ "schemaVersion": "aab.flutter-execution/v1", "actionId": "m1", "runtimeEpoch": epoch(&s), "settled": true }));
    assert_eq!(page_eval(&env, "document.getElementById('question').value"), json!("Where is order 42?"));
    let click = flutter_action(&s, "m2", json!({ "action": "h5Control", "operation": "click", "expectedTarget": { "pageRef": page, "element": element(&snap, "send") } }));
    assert_eq!((click["ok"].clone(), click["dispatched"].clone()), (json!(true), json!(true)), "{click}");
    let mut sent = Value::Null;
    for _ in 0..100 {
        let log = env.control(json!({ "op": "h5-requests" }));
        if let Some(req) = log["requests"].as_array().unwrap().iter().find(|r| r["path"] == "/api/support") {
            sent = req.clone();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sent["body"].as_str().unwrap_or("").contains("Where is order 42?"), "support request: {sent}");
    let mut answer = Value::Null;
    for _ in 0..100 {
        answer = page_eval(&env, "document.getElementById('answer').textContent");
        if answer.as_str().is_some_and(|a| a.starts_with("Ticket")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(answer.as_str().unwrap().starts_with("Ticket T-"), "{answer}");
    // scrollBy and eval in the same document.
    let scrolled = flutter_action(&s, "m3", json!({ "action": "h5Control", "operation": "scrollBy", "expectedPage": page, "deltaX": 0, "deltaY": 300 }));
    assert_eq!(scrolled["scrollY"], json!(300), "{scrolled}");
    assert_eq!(page_eval(&env, "Math.round(window.scrollY)"), json!(300));
    let evaluated = flutter_action(&s, "m4", json!({ "action": "h5Eval", "expectedPage": page, "script": "document.title + '!'" }));
    assert_eq!(evaluated["result"], json!("Shop help!"), "{evaluated}");
    let kinds: Vec<(Value, Value)> = effects(&env).iter().map(|e| (e["data"]["action"].clone(), e["data"]["actionId"].clone())).collect();
    assert_eq!(kinds, [(json!("input"), json!("m1")), (json!("click"), json!("m2")), (json!("scrollBy"), json!("m3")), (json!("eval"), json!("m4"))]);

    // The adapter registered again: every reference to its old registration is void.
    let re = env.control(json!({ "op": "flutter-h5-reregister", "package": PKG, "adapterId": "shop-help" }));
    assert_eq!(re["adapterGeneration"], json!(2), "{re}");
    let before = page_eval(&env, "document.getElementById('question').value");
    let stale = flutter_action(&s, "m5", json!({ "action": "h5Control", "operation": "input", "expectedTarget": { "pageRef": page, "element": element(&snap, "question") }, "text": "changed" }));
    assert_eq!((stale["error"].clone(), stale["dispatched"].clone()), (json!("reobserve_required"), json!(false)), "{stale}");
    assert_eq!(page_eval(&env, "document.getElementById('question').value"), before, "a refused action leaves the page alone");
    assert_eq!(flutter_action(&s, "r4", json!({ "action": "h5Dom", "adapterId": "shop-help" }))["pageRef"]["adapterGeneration"], json!(2));
    // Malformed payloads are refused before admission.
    let bad = flutter_action(&s, "m6", json!({ "action": "h5Control", "operation": "click", "expectedTarget": { "pageRef": page }, "text": "x" }));
    assert_eq!(bad["error"], json!("invalid_h5_payload"), "{bad}");
    let bad = flutter_action(&s, "m7", json!({ "action": "h5Control", "operation": "scrollBy", "expectedPage": page, "deltaX": 0, "deltaY": 0 }));
    assert_eq!(bad["error"], json!("invalid_h5_scroll"), "{bad}");
    let bad = flutter_action(&s, "m8", json!({ "action": "h5Dom", "webViewId": "shop-help" }));
    assert_eq!((bad["error"].clone(), bad["field"].clone()), (json!("unsupported_argument"), json!("webViewId")), "{bad}");
    assert_eq!(effects(&env).len(), 4, "nothing refused reached the page");

    // Back to route "/": the adapter stays registered but is not visible.
    assert_eq!(flutter_action(&s, "t2", json!({ "action": "back" }))["ok"], json!(true));
    let r = flutter_action(&s, "r5", json!({ "action": "h5Dom" }));
    assert_eq!(r["error"], json!("flutter_h5_adapter_not_found"), "{r}");
    assert_eq!(r["adapters"][0]["visible"], json!(false), "{r}");
    let r = flutter_action(&s, "r6", json!({ "action": "h5Dom", "adapterId": "shop-help" }));
    assert_eq!(r["error"], json!("flutter_h5_adapter_not_visible"), "{r}");
}
