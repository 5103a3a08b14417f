//! The iOS SDK's H5 routes (protocols §4.7, §8): `GET /v1/h5/dom[?webViewId=]`
//! and `POST /v1/h5/action` against the app's WKWebViews, which are real
//! Chromium pages (`web`). The page side is the shared renderer
//! (`AiAppBridgeWeb.h5Render`, error prefix `ios_h5_`, state key
//! `__aabIOSH5TargetV1`), one evaluation per turn; the native side picks the
//! WebView, builds the `aab.ios-h5-target/v1` pageRef, validates the action
//! body, holds the shared execution slot, and between the renderer's `prepare`
//! and final `action` turns runs the native hit check (CSS point → screen
//! points through the WebView's frame and page zoom; the native view at that
//! point must be the WebView, not the toolbar over it). Effects land in truth.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::device::Device;
use crate::execution::{self, reject};
use crate::sdk::{Binding, H5_TARGET_SCHEMA};
use crate::util::{now_ms, uuid_upper};

const SDK_JS: &str = include_str!("../../../plugins/web/sdk/ai-app-bridge-web.js");
const PREFIX: &str = "ios_h5_";
/// The snapshot turn's bound (`h5_dom_timeout`). The SDK allows 1.5 s; Chromium on a
/// loaded 2-core test machine gets more so the simulator does not fail spuriously.
const DOM_TIMEOUT: Duration = Duration::from_secs(5);
const TURN_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TEXT: usize = 16384;
const MAX_SCRIPT: usize = 256 * 1024;
const PAGE_REF_KEYS: [&str; 7] = ["schemaVersion", "runtimeEpoch", "bundleId", "processId", "webViewId", "documentId", "url"];
const ELEMENT_KEYS: [&str; 8] = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];

fn fail(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("WebView execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

/// The shared renderer with the iOS state key registered (the Web SDK file
/// knows the Android and Flutter prefixes; the iOS SDK embeds its own key).
fn renderer_source() -> &'static str {
    SDK_JS
}

async fn render(host: &crate::web::WebHost, view: &crate::web::View, request: Value, limit: Duration) -> Result<Value, Option<String>> {
    let expression = format!("(function () {{\n{}\n;return AiAppBridgeWeb.h5Render({request});\n}})()", renderer_source());
    match tokio::time::timeout(limit, crate::web::evaluate(host, view, &expression)).await {
        Err(_) => Err(None),
        Ok(Err(e)) => Err(Some(e)),
        Ok(Ok(v)) if v.is_object() && v["ok"].is_boolean() => Ok(v),
        Ok(Ok(v)) => Err(Some(format!("unexpected renderer reply: {}", v.to_string().chars().take(200).collect::<String>()))),
    }
}

/// The WebView `request` means: with an id that one, else the only visible one
/// of the foreground app's current screen.
fn pick(dev: &Device, b: &Binding, web_view_id: Option<&str>) -> Result<Arc<crate::web::View>, Value> {
    let fg = dev.st.lock().unwrap().is_foreground(&b.bundle);
    let views = if fg { crate::web::find(dev, &b.bundle, b.pid, web_view_id) } else { vec![] };
    let summary = |v: &crate::web::View| json!({ "webViewId": v.key.3, "url": v.url, "visible": true });
    match views.as_slice() {
        [v] => Ok(v.clone()),
        [] => {
            let mut f = fail("ios_h5_webview_not_found");
            f["webViews"] = json!(crate::web::find(dev, &b.bundle, b.pid, None).iter().filter(|_| fg).map(|v| summary(v)).collect::<Vec<_>>());
            Err(f)
        }
        many => {
            let mut f = fail("ios_h5_webview_ambiguous");
            f["webViews"] = json!(many.iter().map(|v| summary(v)).collect::<Vec<_>>());
            Err(f)
        }
    }
}

/// `GET /v1/h5/dom[?webViewId=]`.
pub async fn dom(dev: &Arc<Device>, b: &Binding, query: &[(String, String)]) -> Value {
    if query.iter().any(|(k, _)| k != "webViewId") || query.len() > 1 {
        return fail("invalid_h5_request");
    }
    let view = match pick(dev, b, query.first().map(|q| q.1.as_str())) {
        Ok(v) => v,
        Err(f) => return f,
    };
    if *view.page_zoom.lock().unwrap() != 1.0 {
        return fail("ios_h5_page_zoom_unsupported");
    }
    let Some(host) = dev.web() else { return fail("ios_h5_webview_unavailable") };
    // The page must exist and load first; the renderer turn has its own timeout.
    if let Err(e) = crate::web::evaluate(&host, &view, "1").await {
        let mut f = fail("ios_h5_webview_unavailable");
        f["detail"] = json!(e);
        return f;
    }
    let request = json!({ "operation": "snapshot", "seed": uuid_upper(), "errorPrefix": PREFIX });
    let r = match render(&host, &view, request, DOM_TIMEOUT).await {
        Ok(r) => r,
        Err(None) => return fail("h5_dom_timeout"),
        Err(Some(e)) => {
            let mut f = fail("invalid_ios_h5_reply");
            f["detail"] = json!(e);
            return f;
        }
    };
    if r["ok"] != true {
        return r;
    }
    let dom = r["dom"].clone();
    let frame = web_view_frame(dev, b, &view.key.3);
    json!({
        "ok": true,
        "h5TargetSchema": H5_TARGET_SCHEMA,
        "pageRef": { "schemaVersion": H5_TARGET_SCHEMA, "runtimeEpoch": b.epoch, "bundleId": b.bundle, "processId": b.pid, "webViewId": view.key.3, "documentId": dom["documentId"], "url": dom["url"] },
        "dom": dom,
        "webView": { "webViewId": view.key.3, "url": dom["url"], "title": dom["title"], "frame": frame.map(|f| json!({ "x": f[0], "y": f[1], "width": f[2], "height": f[3] })), "pageZoom": 1.0 },
        "updatedAtMs": now_ms(),
    })
}

fn web_view_frame(dev: &Device, b: &Binding, id: &str) -> Option<[f64; 4]> {
    let st = dev.st.lock().unwrap();
    crate::native::current(dev, &st, &b.bundle, false).and_then(|(t, _)| t.find(id).map(|e| e.frame))
}

fn exact(o: &Map<String, Value>, keys: &[&str]) -> bool {
    o.len() == keys.len() && keys.iter().all(|k| o.contains_key(*k))
}

/// The payload checks before admission.
fn validate_payload(p: &Value) -> Result<(), &'static str> {
    let o = p.as_object().ok_or("invalid_h5_payload")?;
    let action = o.get("action").and_then(Value::as_str).ok_or("invalid_h5_operation")?;
    let keys: &[&str] = match action {
        "eval" => &["action", "pageRef", "script"],
        "scrollBy" => &["action", "pageRef", "deltaX", "deltaY"],
        "click" | "scroll" => &["action", "pageRef", "element"],
        "input" => &["action", "pageRef", "element", "text"],
        _ => return Err("invalid_h5_operation"),
    };
    if !exact(o, keys) {
        return Err("invalid_h5_payload");
    }
    let page = o["pageRef"].as_object().ok_or("invalid_h5_page_ref")?;
    let page_ok = exact(page, &PAGE_REF_KEYS)
        && page["schemaVersion"] == H5_TARGET_SCHEMA
        && page["processId"].as_u64().is_some_and(|p| p >= 1)
        && PAGE_REF_KEYS.iter().filter(|k| **k != "processId").all(|k| page[*k].as_str().is_some_and(|s| !s.is_empty()));
    if !page_ok {
        return Err("invalid_h5_page_ref");
    }
    if let Some(e) = o.get("element") {
        let ok = e.as_object().is_some_and(|e| exact(e, &ELEMENT_KEYS) && ELEMENT_KEYS.iter().all(|k| e[*k].is_string()) && e["elementId"].as_str().is_some_and(|s| !s.is_empty()));
        if !ok {
            return Err("invalid_h5_element_ref");
        }
    }
    match action {
        "input" if o["text"].as_str().is_none_or(|t| t.chars().count() > MAX_TEXT) => Err("invalid_h5_text"),
        "eval" if o["script"].as_str().is_none_or(|s| s.trim().is_empty() || s.len() > MAX_SCRIPT) => Err("invalid_h5_script"),
        "scrollBy" => {
            let d = |k: &str| o[k].as_f64().filter(|v| v.is_finite());
            match (d("deltaX"), d("deltaY")) {
                (Some(x), Some(y)) if x != 0.0 || y != 0.0 => Ok(()),
                _ => Err("invalid_h5_scroll"),
            }
        }
        _ => Ok(()),
    }
}

/// `POST /v1/h5/action`; `None` = close without a reply.
pub async fn action(dev: &Arc<Device>, b: &Binding, body: &[u8]) -> Option<(u16, Value)> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some(crate::sdk::bad_request("the body is not a JSON object")) };
    if !exact(&req, &["payload", "actionId", "execution"]) {
        return Some((200, reject("invalid_h5_execution")));
    }
    let (action_id, epoch, timeout_ms) = match execution::check_envelope("h5", &req) {
        Ok(e) => e,
        Err(r) => return Some((200, r)),
    };
    if epoch != b.epoch {
        return Some((200, reject("h5_runtime_changed")));
    }
    let payload = req["payload"].clone();
    if let Err(code) = validate_payload(&payload) {
        return Some((200, fail(code)));
    }
    if payload["pageRef"]["runtimeEpoch"] != b.epoch.as_str() {
        return Some((200, reject("h5_runtime_changed")));
    }
    let slot = dev.st.lock().unwrap().process(&b.bundle).map(|p| p.exec.clone())?;
    let store = execution::store_path(&dev.container(&b.bundle));
    let active = match slot.admit("h5", &action_id, &epoch, &store, timeout_ms) {
        Ok(a) => a,
        Err(r) => return Some((200, r)),
    };
    let task = {
        let (dev, b, active) = (dev.clone(), b.clone(), active.clone());
        async move { run(&dev, &b, &active, payload, &action_id).await }
    };
    execution::run_admitted(dev, &b.bundle, &slot, &active, timeout_ms, task).await
}

/// The task: page checks, renderer turns, the native hit check, the effect.
async fn run(dev: &Arc<Device>, b: &Binding, active: &execution::Active, payload: Value, action_id: &str) -> Value {
    let page = &payload["pageRef"];
    let Some(host) = dev.web() else { return fail("ios_h5_webview_unavailable") };
    let id = page["webViewId"].as_str().unwrap_or("").to_string();
    let view = match pick(dev, b, Some(&id)) {
        Ok(v) => v,
        Err(f) => return f,
    };
    if page["bundleId"] != b.bundle.as_str() || page["processId"] != b.pid {
        return fail("reobserve_required");
    }
    if *view.page_zoom.lock().unwrap() != 1.0 {
        return fail("ios_h5_page_zoom_unsupported");
    }
    let queue = dev.faults.lock().unwrap().action_queue_ms;
    if queue > 0 {
        active.queue(Duration::from_millis(queue)).await;
    }
    let action = payload["action"].as_str().unwrap_or("").to_string();
    let seed = uuid_upper();
    let mut native_hit = Value::Null;
    let mut geometry = Value::Null;
    if action == "click" || action == "input" {
        let prepare = json!({ "operation": "prepare", "seed": seed, "errorPrefix": PREFIX, "payload": payload });
        let prepared = match render(&host, &view, prepare, TURN_TIMEOUT).await {
            Ok(r) => r,
            Err(_) => return fail("invalid_ios_h5_reply"),
        };
        if prepared["ok"] != true {
            return prepared;
        }
        geometry = prepared["geometry"].clone();
        native_hit = match hit_check(dev, b, &id, &geometry) {
            Ok(h) => h,
            Err(code) => return fail(code),
        };
    }
    if let Err(reason) = active.permit() {
        return json!({ "ok": false, "error": reason, "message": format!("WebView execution stopped before it started: {reason}"), "dispatched": false, "ambiguous": false });
    }
    let delay = dev.faults.lock().unwrap().action_delay_ms;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let mut turn = json!({ "operation": "action", "seed": seed, "errorPrefix": PREFIX, "payload": payload });
    if !geometry.is_null() {
        turn["geometry"] = geometry;
    }
    let mut r = match render(&host, &view, turn, TURN_TIMEOUT).await {
        Ok(r) => r,
        Err(_) => {
            let mut f = fail("invalid_ios_h5_reply");
            f["dispatched"] = Value::Null;
            f["ambiguous"] = json!(true);
            return f;
        }
    };
    if r["dispatched"] == true {
        let mut effect = json!({ "bundleId": b.bundle, "pid": b.pid, "webViewId": id, "action": action, "element": payload["element"]["elementId"], "actionId": action_id });
        if action == "input" {
            effect["textLength"] = json!(payload["text"].as_str().map(|t| t.chars().count()));
            if r["sensitive"] != true {
                effect["text"] = payload["text"].clone();
            }
        }
        if action == "eval" {
            effect["scriptLength"] = json!(payload["script"].as_str().map(str::len));
        }
        dev.record("h5", effect);
    }
    if r["ok"] == true && !native_hit.is_null() {
        r["nativeHit"] = native_hit;
    }
    r["webViewId"] = json!(id);
    r
}

/// The native side between `prepare` and `action`: the renderer's viewport
/// point → screen points; the CSS viewport must be the WebView's frame; the
/// point inside it and the screen; the native view there must be the WebView.
fn hit_check(dev: &Device, b: &Binding, web_view_id: &str, g: &Value) -> Result<Value, &'static str> {
    let num = |v: &Value| v.as_f64().filter(|x| x.is_finite());
    let (Some(x), Some(y), Some(w), Some(h), Some(sx), Some(sy)) = (num(&g["x"]), num(&g["y"]), num(&g["width"]), num(&g["height"]), num(&g["scrollX"]), num(&g["scrollY"])) else {
        return Err("ios_h5_native_geometry_unsupported");
    };
    if !g["bounds"].is_object() {
        return Err("ios_h5_native_geometry_unsupported");
    }
    let st = dev.st.lock().unwrap();
    let Some((tree, _)) = crate::native::current(dev, &st, &b.bundle, false) else { return Err("ios_h5_viewport_invalid") };
    let Some(frame) = tree.find(web_view_id).map(|e| e.frame) else { return Err("ios_h5_viewport_invalid") };
    let zoom = 1.0;
    if w <= 0.0 || h <= 0.0 || (w * zoom - frame[2]).abs() > 1.0 || (h * zoom - frame[3]).abs() > 1.0 {
        return Err("ios_h5_viewport_invalid");
    }
    let (px, py) = (frame[0] + x * zoom, frame[1] + y * zoom);
    let (sw, sh) = (tree.frame[2], tree.frame[3]);
    if x < 0.0 || y < 0.0 || x >= w || y >= h || px < 0.0 || py < 0.0 || px >= sw || py >= sh {
        return Err("ios_h5_target_outside_native_viewport");
    }
    let hit = tree.hit(px, py);
    if hit.is_none_or(|e| e.key != web_view_id) {
        return Err("ios_h5_native_target_obscured");
    }
    Ok(json!({ "ok": true, "point": { "x": px, "y": py }, "scrollOffset": { "x": sx, "y": sy }, "scale": zoom, "hitView": "WKWebView", "geometry": g }))
}

/// Control op `h5`: the WebView's real page (url, title, an expression's value).
pub async fn control(dev: &Arc<Device>, bundle: &str, web_view_id: Option<&str>, expression: Option<&str>) -> Value {
    let pid = dev.st.lock().unwrap().process(bundle).map(|p| p.pid);
    let Some(pid) = pid else { return json!({ "ok": false, "error": "not_running", "message": format!("{bundle} is not running") }) };
    let views = crate::web::find(dev, bundle, pid, web_view_id);
    let Some(view) = views.first() else { return json!({ "ok": false, "error": "no_webview", "message": "the app's current screen shows no WebView" }) };
    let Some(host) = dev.web() else { return json!({ "ok": false, "error": "no_webview" }) };
    let expr = format!("({{ url: location.href, title: document.title, value: (function () {{ return {}; }})() }})", expression.unwrap_or("null"));
    match crate::web::evaluate(&host, view, &expr).await {
        Ok(v) => {
            if expression.is_some() {
                dev.record("h5-eval", json!({ "bundleId": bundle, "webViewId": view.key.3, "via": "control" }));
            }
            json!({ "ok": true, "webViewId": view.key.3, "url": v["url"], "title": v["title"], "value": v["value"], "browserPid": host.browser_pid() })
        }
        Err(e) => json!({ "ok": false, "error": "eval_failed", "message": e }),
    }
}

#[cfg(test)]
mod tests {
    use super::{PREFIX, renderer_source};
    /// The renderer's per-page state key for the `ios_h5_` prefix (in the shared SDK file).
    const STATE_KEY: &str = "__aabIOSH5TargetV1";

    #[test]
    fn the_renderer_knows_the_ios_prefix() {
        assert!(renderer_source().contains(&format!("{PREFIX}: '{STATE_KEY}'")));
    }
}
