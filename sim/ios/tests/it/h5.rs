//! iOS H5 in a real Chromium page: the DOM snapshot and pageRef, managed
//! input and click that change the page (checked over control `h5`), the
//! native hit check refusing a control under the toolbar, password redaction.

use serde_json::{Value, json};

use crate::common::*;

const ELEMENT_KEYS: [&str; 8] = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];

fn control<'a>(dom: &'a Value, id: &str) -> &'a Value {
    dom["dom"]["controls"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id}"))
}

fn element(c: &Value) -> Value {
    Value::Object(ELEMENT_KEYS.iter().map(|k| (k.to_string(), c[*k].clone())).collect())
}

async fn act(app: &App, id: &str, payload: Value) -> Value {
    let body = json!({ "payload": payload, "actionId": id, "execution": execution("h5", id, &app.epoch, 20000) });
    let r = app.post("/v1/h5/action", &body).await;
    app.assert_binding(&r);
    r.body
}

#[tokio::test]
async fn an_h5_click_changes_the_real_page() {
    let sim = sim().await;
    let app = app(&sim, APP).await;
    tap_id(&sim, APP, "openWeb").await;
    let dom = app.get("/v1/h5/dom").await;
    app.assert_binding(&dom);
    assert_eq!(dom.body["ok"], true, "{:?}", dom.body);
    let page = dom.body["pageRef"].clone();
    assert_eq!(page.as_object().unwrap().len(), 7);
    assert_eq!((page["schemaVersion"].as_str(), page["bundleId"].as_str(), page["processId"].as_u64()), (Some("aab.ios-h5-target/v1"), Some(APP), Some(app.pid)));
    assert_eq!(page["runtimeEpoch"], json!(app.epoch));
    assert_eq!(dom.body["dom"]["title"], "Checkout");

    let r = act(&app, "w1", json!({ "action": "input", "pageRef": page, "element": element(control(&dom.body, "name")), "text": "alice" })).await;
    assert_eq!((r["ok"].as_bool(), r["settled"].as_bool()), (Some(true), Some(true)), "{r}");
    let r = act(&app, "w2", json!({ "action": "input", "pageRef": page, "element": element(control(&dom.body, "pin")), "text": "1234" })).await;
    assert_eq!(r["ok"], true, "{r}");
    let r = act(&app, "w3", json!({ "action": "click", "pageRef": page, "element": element(control(&dom.body, "pay")) })).await;
    assert_eq!((r["ok"].as_bool(), r["nativeHit"]["hitView"].as_str()), (Some(true), Some("WKWebView")), "{r}");
    let shown = sim.control(json!({ "op": "h5", "bundleId": APP, "expression": "document.getElementById('result').textContent" })).await;
    assert_eq!(shown["value"], "Paid by alice with PIN", "{shown}");
    let effects = truth(&sim, "h5").await;
    assert!(effects.iter().any(|e| e["action"] == "click" && e["actionId"] == "w3"));
    let pin = effects.iter().find(|e| e["actionId"] == "w2").unwrap();
    assert!(pin.get("text").is_none() && pin["textLength"] == 4, "the PIN is not logged: {pin}");
    let again = app.get("/v1/h5/dom").await;
    assert_eq!(control(&again.body, "pin")["value"], "[REDACTED]");
    assert_eq!(control(&again.body, "name")["value"], "alice");
    let reqs = sim.control(json!({ "op": "h5-requests" })).await;
    assert!(reqs["requests"].as_array().unwrap().iter().any(|r| r["path"] == "/api/checkout" && r["body"].as_str().unwrap().contains("alice")));

    // The fixed Help button lies under the native toolbar: refused before any effect.
    let r = act(&app, "w4", json!({ "action": "click", "pageRef": again.body["pageRef"], "element": element(control(&again.body, "help")) })).await;
    assert_eq!((r["error"].as_str(), r["dispatched"].as_bool()), (Some("ios_h5_native_target_obscured"), Some(false)), "{r}");
    let clicks = sim.control(json!({ "op": "h5", "bundleId": APP, "expression": "window.aabClicks" })).await;
    assert_eq!(clicks["value"], json!(["pay"]));
    // Scroll an element into view, and an expert eval in the same page.
    let r = act(&app, "w6", json!({ "action": "scroll", "pageRef": again.body["pageRef"], "element": element(control(&again.body, "last")) })).await;
    assert_eq!(r["ok"], true, "{r}");
    let y = sim.control(json!({ "op": "h5", "bundleId": APP, "expression": "window.scrollY" })).await;
    assert!(y["value"].as_f64().unwrap() > 0.0, "the page scrolled: {y}");
    let r = act(&app, "w7", json!({ "action": "eval", "pageRef": again.body["pageRef"], "script": "document.title + '!'" })).await;
    assert_eq!(r["result"], "Checkout!");
    // A non-default page zoom is refused.
    sim.control(json!({ "op": "webview", "bundleId": APP, "pageZoom": 1.5 })).await;
    assert_eq!(app.get("/v1/h5/dom").await.body["error"], "ios_h5_page_zoom_unsupported");
    sim.control(json!({ "op": "webview", "bundleId": APP, "pageZoom": 1.0 })).await;
    // A stale pageRef (another document id) is refused by the renderer.
    let mut stale = again.body["pageRef"].clone();
    stale["documentId"] = json!("not-this-document");
    let r = act(&app, "w5", json!({ "action": "click", "pageRef": stale, "element": element(control(&again.body, "pay")) })).await;
    assert_eq!(r["error"], "reobserve_required");
    // Leaving the screen tears the WebView down.
    tap_id(&sim, APP, "back").await;
    let r = app.get("/v1/h5/dom").await;
    assert_eq!(r.body["error"], "ios_h5_webview_not_found");
}
