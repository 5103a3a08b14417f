//! The SDK's H5 routes (§1.8) against WebViews that are real Chromium pages:
//! WebView choice (foreground window, adapters, ambiguity), the snapshot and
//! its pageRef, click/input effects read back from the page and the H5
//! server's request log, the native hit check's refusals, validation codes,
//! page changes → reobserve_required, the shared action slot with cancel, and
//! a lost completion found again through `/v1/action/cancel`.

use std::time::Duration;

use aab_android_sim::Scenario;
use serde_json::{Value, json};

use crate::support::{Env, request};

const PKG: &str = "com.example.hybrid";

fn scenario() -> Scenario {
    let text = json!({
        "foreground": PKG,
        "apps": [{
            "package": PKG, "versionName": "1.0", "versionCode": 1, "sdk": true, "debuggable": true,
            "activities": [".WebActivity"],
            "screens": [{ "name": "web", "activity": ".WebActivity", "root": { "class": "android.widget.FrameLayout", "id": "content", "bounds": [0, 0, 1080, 2400] } }],
            "webViews": [
                { "webViewId": "main", "url": "h5/signup.html", "bounds": [0, 200, 1080, 2400], "scale": 2.625 },
                { "webViewId": "x5", "adapter": "reflective", "className": "com.tencent.smtt.sdk.WebView", "url": "h5/news.html", "bounds": [0, 0, 1080, 200], "visible": false },
                { "webViewId": "popup", "url": "h5/news.html", "window": "dialog-1", "bounds": [100, 600, 980, 1800] },
                { "webViewId": "odd", "adapter": "reflective", "className": "com.example.FancyView", "url": "h5/news.html" }
            ]
        }]
    })
    .to_string();
    Scenario::parse(&text).expect("scenario")
}

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

/// One request; `None` when the connection closed without a reply.
fn get(s: &Sdk, path: &str) -> Value {
    request(s.port, "GET", path, None).expect("a reply")
}

fn post(s: &Sdk, path: &str, body: &Value) -> Option<Value> {
    request(s.port, "POST", path, Some(&body.to_string()))
}

fn dom(s: &Sdk, id: &str) -> Value {
    let r = get(s, &format!("/v1/h5/dom?webViewId={id}"));
    assert_eq!(r["ok"], json!(true), "{r}");
    r
}

fn element(snapshot: &Value, id: &str) -> Value {
    let c = snapshot["dom"]["controls"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no #{id}"));
    let mut e = serde_json::Map::new();
    for k in ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"] {
        e.insert(k.into(), c[k].clone());
    }
    Value::Object(e)
}

fn body(s: &Sdk, action_id: &str, payload: Value) -> Value {
    json!({ "payload": payload, "actionId": action_id, "execution": { "schemaVersion": "aab.h5-execution/v1", "actionId": action_id, "runtimeEpoch": s.epoch, "timeoutMs": 20000 } })
}

fn click(snapshot: &Value, id: &str) -> Value {
    json!({ "action": "click", "pageRef": snapshot["pageRef"], "element": element(snapshot, id) })
}

fn page_eval(env: &Env, id: &str, expression: &str) -> Value {
    let r = env.control(json!({ "op": "webview-eval", "package": PKG, "webViewId": id, "expression": expression }));
    assert_eq!(r["ok"], json!(true), "{r}");
    r["value"].clone()
}

fn set_view(env: &Env, id: &str, fields: Value) {
    let mut req = json!({ "op": "webview-set", "package": PKG, "webViewId": id });
    for (k, v) in fields.as_object().unwrap() {
        req[k] = v.clone();
    }
    let r = env.control(req);
    assert_eq!(r["ok"], json!(true), "{r}");
}

fn h5_effects(env: &Env) -> Vec<Value> {
    env.control(json!({ "op": "actions" }))["actions"].as_array().unwrap().iter().filter(|a| a["kind"] == "h5").cloned().collect()
}

fn sorted_keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn keys(list: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

fn refused(r: &Value, code: &str) {
    assert_eq!(r["ok"], json!(false), "{r}");
    assert_eq!(r["error"], json!(code), "{r}");
    assert_eq!(r["message"], json!(format!("WebView execution rejected: {code}")), "{r}");
    assert_eq!(r["dispatched"], json!(false), "{r}");
    assert_eq!(r["ambiguous"], json!(false), "{r}");
}

#[test]
fn h5_dom_picks_the_webview_and_builds_the_page_ref() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let st = get(&s, "/v1/status");
    assert_eq!(st["debugBridge"]["h5TargetSchema"], "aab.android-h5-target/v1");
    assert_eq!(st["debugBridge"]["h5ExecutionSchema"], "aab.h5-execution/v1");
    assert_eq!(st["debugBridge"]["h5Action"], Value::Null);

    // Only `main` is a visible WebView of the foreground activity window (x5 is
    // hidden, popup lives in a dialog, odd is not a WebView class).
    let r = get(&s, "/v1/h5/dom");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(sorted_keys(&r), keys(&["ok", "h5TargetSchema", "pageRef", "dom", "activity", "window", "webView", "updatedAtMs"]));
    assert_eq!(r["webView"]["webViewId"], "main");
    assert_eq!(sorted_keys(&r["webView"]), keys(&["adapter", "className", "url", "title", "progress", "webViewId"]));
    assert_eq!(r["webView"]["title"], "Web sign-up");
    let p = &r["pageRef"];
    assert_eq!(sorted_keys(p), keys(&["schemaVersion", "runtimeEpoch", "packageName", "processId", "activity", "windowId", "webViewId", "documentId", "url"]));
    assert_eq!(p["runtimeEpoch"], json!(s.epoch));
    assert_eq!(p["packageName"], PKG);
    assert_eq!(p["documentId"], r["dom"]["documentId"]);
    assert_eq!(r["window"]["type"], "activity");
    assert_eq!(r["window"]["id"], p["windowId"]);
    // Ground truth from the page itself.
    assert_eq!(p["url"], page_eval(&env, "main", "location.href"));
    let pid: u64 = env.sh(&format!("pidof {PKG}")).trim().parse().unwrap();
    assert_eq!(p["processId"], json!(pid));
    let tree = get(&s, "/v1/view/tree");
    assert_eq!(p["windowId"], tree["foregroundWindowId"]);
    assert_eq!(r["activity"], tree["activity"]);
    let names: Vec<&str> = r["dom"]["controls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(names.contains(&"name") && names.contains(&"submit"), "{names:?}");
    assert_eq!(r["dom"]["viewport"]["width"], page_eval(&env, "main", "innerWidth"));

    // Two visible WebViews in the foreground window: ambiguous, with both listed.
    set_view(&env, "x5", json!({ "visible": true }));
    let r = get(&s, "/v1/h5/dom");
    refused(&r, "android_h5_webview_ambiguous");
    let mut ids: Vec<&str> = r["webViews"].as_array().unwrap().iter().map(|v| v["webViewId"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["main", "x5"]);
    assert_eq!(sorted_keys(&r["webViews"][0]), keys(&["adapter", "className", "url", "title", "progress", "webViewId"]));
    // The reflective adapter reaches the vendor class; an id reaches another window.
    assert_eq!(dom(&s, "x5")["webView"]["className"], "com.tencent.smtt.sdk.WebView");
    let popup = dom(&s, "popup");
    assert_eq!(popup["window"]["type"], "dialog");
    assert_ne!(popup["window"]["id"], p["windowId"]);
    // Not a WebView class / not there / hidden: not found, with what there is.
    refused(&get(&s, "/v1/h5/dom?webViewId=odd"), "android_h5_webview_not_found");
    set_view(&env, "x5", json!({ "visible": false }));
    set_view(&env, "main", json!({ "visible": false }));
    let r = get(&s, "/v1/h5/dom");
    refused(&r, "android_h5_webview_not_found");
    assert!(r["webViews"].is_array(), "{r}");
}

#[test]
fn h5_click_and_input_change_the_real_page() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let snap = dom(&s, "main");
    let input = |id: &str, text: &str| json!({ "action": "input", "pageRef": snap["pageRef"], "element": element(&snap, id), "text": text });
    let r = post(&s, "/v1/h5/action", &body(&s, "in-1", input("name", "Ada Lovelace"))).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["execution"], json!({ "schemaVersion": "aab.h5-execution/v1", "actionId": "in-1", "runtimeEpoch": s.epoch, "settled": true }));
    assert_eq!((r["dispatched"].as_bool(), r["ambiguous"].as_bool(), r["settled"].as_bool()), (Some(true), Some(false), Some(true)));
    assert_eq!(r["nativeHit"]["ok"], json!(true), "{r}");
    let r = post(&s, "/v1/h5/action", &body(&s, "in-2", input("email", "ada@example.com"))).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(page_eval(&env, "main", "[document.getElementById('name').value, document.getElementById('email').value]"), json!(["Ada Lovelace", "ada@example.com"]));

    // The native point: WebView origin + CSS point × scale.
    let r = post(&s, "/v1/h5/action", &body(&s, "click-1", click(&snap, "submit"))).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    let g = &r["nativeHit"]["geometry"];
    assert_eq!(r["nativeHit"]["scale"], json!(2.625));
    assert_eq!(r["nativeHit"]["point"]["x"], json!((g["x"].as_f64().unwrap() * 2.625).round() as i64));
    assert_eq!(r["nativeHit"]["point"]["y"], json!((200.0 + g["y"].as_f64().unwrap() * 2.625).round() as i64));
    // The page really submitted: the H5 server received the form.
    let mut sent = Value::Null;
    for _ in 0..100 {
        let log = env.control(json!({ "op": "h5-requests" }));
        if let Some(req) = log["requests"].as_array().unwrap().iter().find(|r| r["path"] == "/api/signup") {
            sent = req.clone();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sent.to_string().contains("ada@example.com"), "signup request: {sent}");
    // Ground truth of the simulator: three H5 effects, each owned by its action.
    let effects = h5_effects(&env);
    let ids: Vec<&str> = effects.iter().map(|e| e["actionId"].as_str().unwrap_or("")).collect();
    assert_eq!(ids, ["in-1", "in-2", "click-1"], "{effects:?}");
    assert_eq!(effects[0]["data"]["text"], "Ada Lovelace");

    // eval, scrollBy and scroll.
    let snap = dom(&s, "main");
    let r = post(&s, "/v1/h5/action", &body(&s, "ev-1", json!({ "action": "eval", "pageRef": snap["pageRef"], "script": "document.title + '!'" }))).unwrap();
    assert_eq!((r["ok"].as_bool(), r["result"].as_str()), (Some(true), Some("Web sign-up!")), "{r}");
    page_eval(&env, "main", "document.body.style.height = '5000px'; true");
    let r = post(&s, "/v1/h5/action", &body(&s, "sb-1", json!({ "action": "scrollBy", "pageRef": snap["pageRef"], "deltaX": 0, "deltaY": 300 }))).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(page_eval(&env, "main", "Math.round(scrollY)"), json!(300));
}

#[test]
fn h5_native_layer_refusals_happen_before_dispatch() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    page_eval(&env, "main", "window.clicks = 0; document.getElementById('submit').addEventListener('click', e => { e.preventDefault(); clicks++; }); true");
    let snap = dom(&s, "main");
    let clicked = |env: &Env| page_eval(env, "main", "clicks");

    set_view(&env, "main", json!({ "transform": "rotate(5deg)" }));
    let r = post(&s, "/v1/h5/action", &body(&s, "t-1", click(&snap, "submit"))).unwrap();
    refused(&r, "android_h5_native_transform_unsupported");
    assert_eq!(r["settled"], json!(true));
    set_view(&env, "main", json!({ "transform": "identity" }));

    // A native view over the button's screen point.
    let r = get(&s, "/v1/h5/dom?webViewId=main");
    let b = &r["dom"]["controls"].as_array().unwrap().iter().find(|c| c["id"] == "submit").unwrap()["bounds"];
    let y = 200.0 + (b["y"].as_f64().unwrap() + b["height"].as_f64().unwrap() / 2.0) * 2.625;
    set_view(&env, "main", json!({ "obscured": [0, (y - 50.0) as i64, 1080, (y + 50.0) as i64] }));
    refused(&post(&s, "/v1/h5/action", &body(&s, "t-2", click(&snap, "submit"))).unwrap(), "android_h5_native_target_obscured");
    set_view(&env, "main", json!({ "obscured": null }));

    // The WebView hangs below the screen's edge: the button is in the page's
    // viewport but off the phone's screen.
    set_view(&env, "main", json!({ "bounds": [0, 2200, 1080, 4400] }));
    let snap2 = dom(&s, "main");
    refused(&post(&s, "/v1/h5/action", &body(&s, "t-3", click(&snap2, "submit"))).unwrap(), "android_h5_target_outside_native_viewport");
    assert_eq!(clicked(&env), json!(0));
    assert!(h5_effects(&env).is_empty());

    // The page's own refusals come through unchanged (a cover over the button).
    set_view(&env, "main", json!({ "bounds": [0, 200, 1080, 2400] }));
    let snap = dom(&s, "main");
    page_eval(&env, "main", "const c = document.createElement('div'); c.style.cssText = 'position:fixed;inset:0'; document.body.appendChild(c); true");
    refused(&post(&s, "/v1/h5/action", &body(&s, "t-4", click(&snap, "submit"))).unwrap(), "android_h5_target_obscured");
    assert_eq!(clicked(&env), json!(0));
}

#[test]
fn h5_validation_codes_and_reobserve() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let snap = dom(&s, "main");
    let good = click(&snap, "submit");
    let send = |b: &Value| post(&s, "/v1/h5/action", b).unwrap();
    let exact = |r: Value, code: &str| {
        assert_eq!(r, json!({ "ok": false, "error": code, "message": format!("WebView execution rejected: {code}"), "dispatched": false, "ambiguous": false }));
    };
    exact(request(s.port, "POST", "/v1/h5/action", Some("{not json")).unwrap(), "invalid_json");
    let mut extra = body(&s, "v-1", good.clone());
    extra["webViewId"] = json!("main");
    exact(send(&extra), "invalid_h5_request");
    let mut wrong = body(&s, "v-2", good.clone());
    wrong["execution"]["schemaVersion"] = json!("aab.native-execution/v1");
    exact(send(&wrong), "invalid_h5_execution");
    let mut old = body(&s, "v-3", good.clone());
    old["execution"]["runtimeEpoch"] = json!("another-epoch");
    exact(send(&old), "h5_runtime_changed");
    exact(send(&body(&s, "v-4", json!({ "action": "tap", "pageRef": snap["pageRef"] }))), "invalid_h5_action");
    exact(send(&body(&s, "v-5", json!({ "action": "click", "pageRef": snap["pageRef"], "element": element(&snap, "submit"), "text": "x" }))), "invalid_h5_payload");
    let mut page = snap["pageRef"].clone();
    page["extra"] = json!(1);
    exact(send(&body(&s, "v-6", json!({ "action": "click", "pageRef": page, "element": element(&snap, "submit") }))), "invalid_h5_page_ref");
    let mut el = element(&snap, "submit");
    el["role"] = json!("button");
    exact(send(&body(&s, "v-7", json!({ "action": "click", "pageRef": snap["pageRef"], "element": el }))), "invalid_h5_element_ref");
    exact(send(&body(&s, "v-8", json!({ "action": "input", "pageRef": snap["pageRef"], "element": element(&snap, "name"), "text": "x".repeat(16385) }))), "invalid_h5_text");
    exact(send(&body(&s, "v-9", json!({ "action": "eval", "pageRef": snap["pageRef"], "script": "  " }))), "invalid_h5_script");
    exact(send(&body(&s, "v-10", json!({ "action": "scrollBy", "pageRef": snap["pageRef"], "deltaX": 0, "deltaY": 0 }))), "invalid_h5_scroll");

    // Page mismatches: another document id; then a real history navigation.
    let mut stale = good.clone();
    stale["pageRef"]["documentId"] = json!("00000000-0000-4000-a000-000000000000");
    refused(&send(&body(&s, "v-11", stale)), "reobserve_required");
    page_eval(&env, "main", "history.pushState({}, '', location.pathname + '?step=2'); true");
    refused(&send(&body(&s, "v-12", good.clone())), "reobserve_required");
    page_eval(&env, "main", "history.back(); true");
    std::thread::sleep(Duration::from_millis(300));
    // Same url again, but a new generation of the document: still stale.
    assert_eq!(page_eval(&env, "main", "location.href"), snap["pageRef"]["url"]);
    refused(&send(&body(&s, "v-13", good)), "reobserve_required");
    // A new observation works.
    let fresh = dom(&s, "main");
    assert_ne!(fresh["pageRef"]["documentId"], snap["pageRef"]["documentId"]);
    assert_eq!(send(&body(&s, "v-14", json!({ "action": "eval", "pageRef": fresh["pageRef"], "script": "1 + 1" })))["result"], json!(2));
}

#[test]
fn h5_actions_share_the_one_slot_and_cancel_finds_their_receipts() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let snap = dom(&s, "main");
    page_eval(&env, "main", "window.clicks = 0; document.getElementById('submit').addEventListener('click', e => { e.preventDefault(); clicks++; }); true");
    env.control(json!({ "op": "faults", "set": { "h5ActionDelayMs": 2000 } }));
    let port = s.port;
    let first = body(&s, "slot-1", click(&snap, "submit"));
    let running = std::thread::spawn(move || request(port, "POST", "/v1/h5/action", Some(&first.to_string())));
    std::thread::sleep(Duration::from_millis(500));
    let st = get(&s, "/v1/status");
    assert_eq!(st["debugBridge"]["h5Action"]["actionId"], "slot-1", "{st}");
    assert_eq!(st["debugBridge"]["nativeAction"], Value::Null);
    // A native action and a second H5 action are both refused while it runs.
    let tap = json!({ "x": 540, "y": 990, "actionId": "n-1", "execution": { "schemaVersion": "aab.native-execution/v1", "actionId": "n-1", "runtimeEpoch": s.epoch, "timeoutMs": 5000 } });
    assert_eq!(post(&s, "/v1/action/tap", &tap).unwrap()["error"], "h5_action_busy");
    refused(&post(&s, "/v1/h5/action", &body(&s, "slot-2", click(&snap, "submit"))).unwrap(), "h5_action_busy");
    let r = running.join().unwrap().expect("reply");
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(page_eval(&env, "main", "clicks"), json!(1));
    // The retained receipt comes back through the native cancel route (and the H5 one).
    let c = post(&s, "/v1/action/cancel", &json!({ "actionId": "slot-1", "runtimeEpoch": s.epoch })).unwrap();
    assert_eq!(c["ok"], json!(true), "{c}");
    assert_eq!(c["executionResult"], r);
    let c2 = post(&s, "/v1/h5/cancel", &json!({ "actionId": "slot-1", "runtimeEpoch": s.epoch })).unwrap();
    assert_eq!(c2["executionResult"], r);
    refused(&post(&s, "/v1/h5/action", &body(&s, "slot-1", click(&snap, "submit"))).unwrap(), "h5_action_id_reused");

    // Cancelled while it waits in the slot: it never reaches the page.
    let second = body(&s, "slot-3", click(&snap, "submit"));
    let running = std::thread::spawn(move || request(port, "POST", "/v1/h5/action", Some(&second.to_string())));
    std::thread::sleep(Duration::from_millis(500));
    let c = post(&s, "/v1/action/cancel", &json!({ "actionId": "slot-3", "runtimeEpoch": s.epoch })).unwrap();
    let rec = &c["executionResult"];
    assert_eq!((c["ok"].as_bool(), rec["ok"].as_bool(), rec["error"].as_str(), rec["dispatched"].as_bool()), (Some(true), Some(false), Some("h5_action_cancelled"), Some(false)), "{c}");
    assert_eq!(rec["execution"]["schemaVersion"], "aab.h5-execution/v1");
    let r = running.join().unwrap().expect("reply");
    assert_eq!(r["error"], "h5_action_cancelled");
    assert_eq!(page_eval(&env, "main", "clicks"), json!(1));
    assert_eq!(h5_effects(&env).len(), 1);
}

#[test]
fn h5_lost_completion_stays_findable_through_cancel() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let snap = dom(&s, "main");
    env.control(json!({ "op": "faults", "set": { "h5DropActionReplies": 1 } }));
    let payload = json!({ "action": "input", "pageRef": snap["pageRef"], "element": element(&snap, "name"), "text": "Grace" });
    assert_eq!(post(&s, "/v1/h5/action", &body(&s, "lost-1", payload)), None, "the reply is lost");
    // The effect happened in the page, and the simulator knows which action did it.
    assert_eq!(page_eval(&env, "main", "document.getElementById('name').value"), json!("Grace"));
    let effects = h5_effects(&env);
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["actionId"], "lost-1");
    let c = post(&s, "/v1/action/cancel", &json!({ "actionId": "lost-1", "runtimeEpoch": s.epoch })).unwrap();
    let rec = &c["executionResult"];
    assert_eq!((c["ok"].as_bool(), rec["ok"].as_bool(), rec["dispatched"].as_bool(), rec["settled"].as_bool()), (Some(true), Some(true), Some(true), Some(true)), "{c}");
    assert_eq!(rec["actionId"], "lost-1");
}

#[test]
fn h5_timeout_before_the_effect_and_a_process_dying_mid_action() {
    let env = Env::with_scenario(1, scenario());
    let s = sdk(&env);
    let snap = dom(&s, "main");
    page_eval(&env, "main", "window.clicks = 0; document.getElementById('submit').addEventListener('click', e => { e.preventDefault(); clicks++; }); true");
    env.control(json!({ "op": "faults", "set": { "h5ActionDelayMs": 3000 } }));
    // The deadline passes while the action waits in the slot: it ends undispatched.
    let mut b = body(&s, "late-1", click(&snap, "submit"));
    b["execution"]["timeoutMs"] = json!(300);
    let r = post(&s, "/v1/h5/action", &b).unwrap();
    assert_eq!((r["ok"].as_bool(), r["error"].as_str(), r["dispatched"].as_bool(), r["settled"].as_bool()), (Some(false), Some("h5_action_timeout"), Some(false), Some(true)), "{r}");
    assert_eq!(page_eval(&env, "main", "clicks"), json!(0));
    // The process dies while the next one waits: no reply, no effect, no receipt.
    let port = s.port;
    let b = body(&s, "dies-1", click(&snap, "submit"));
    let running = std::thread::spawn(move || request(port, "POST", "/v1/h5/action", Some(&b.to_string())));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(env.control(json!({ "op": "crash", "package": PKG }))["ok"], json!(true));
    assert_eq!(running.join().unwrap(), None);
    assert!(h5_effects(&env).is_empty());
}

/// Figures (printed, not asserted): the SDK-side cost of a 1000-control page's
/// snapshot and of a click's three turns, through adb forward.
#[test]
fn h5_figures_for_a_1000_control_page() {
    let text = json!({
        "foreground": PKG,
        "apps": [{
            "package": PKG, "sdk": true, "debuggable": true, "activities": [".WebActivity"],
            "screens": [{ "name": "web", "activity": ".WebActivity", "root": { "class": "android.widget.FrameLayout", "id": "content", "bounds": [0, 0, 1080, 2400] } }],
            "webViews": [{ "webViewId": "big", "url": "h5/controls.html?n=1000" }]
        }]
    })
    .to_string();
    let env = Env::with_scenario(1, Scenario::parse(&text).unwrap());
    let s = sdk(&env);
    dom(&s, "big");
    let mut dom_ms = vec![];
    let mut snap = Value::Null;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        snap = get(&s, "/v1/h5/dom");
        dom_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    assert_eq!(snap["ok"], json!(true), "{snap}");
    assert_eq!(snap["dom"]["controlCount"], page_eval(&env, "big", r#"document.querySelectorAll('a,button,input,textarea,select,[role],[onclick],[aria-label],[contenteditable="true"]').length"#));
    assert_eq!(snap["dom"]["truncated"], json!(true));
    let mut click_ms = vec![];
    for i in 0..5 {
        let id = format!("big-{i}");
        let t = std::time::Instant::now();
        let r = post(&s, "/v1/h5/action", &body(&s, &id, click(&snap, "b0"))).unwrap();
        click_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r["ok"], json!(true), "{r}");
    }
    assert_eq!(page_eval(&env, "big", "document.getElementById('last').textContent"), json!("clicked b0"));
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!("h5 figures (SDK route through adb forward, 1000-control page): GET /v1/h5/dom median {:.1} ms, POST /v1/h5/action click median {:.1} ms", median(&mut dom_ms), median(&mut click_ms));
}
