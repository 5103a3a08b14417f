//! The SDK's H5 routes (protocols §1.8): `GET /v1/h5/dom[?webViewId=]`,
//! `POST /v1/h5/action` and `POST /v1/h5/cancel`, run against the app's
//! WebViews, which are real Chromium pages (`webview`). The page side is the
//! shared renderer of the Web SDK (`AiAppBridgeWeb.h5Render`, the same file the
//! Web provider serves), evaluated in the page once per turn; the native side
//! here picks the WebView (adapters, foreground window, visible), builds the
//! `pageRef`, validates action bodies, and between the renderer's `prepare` and
//! final `action` turns runs the native hit check (CSS point → screen through
//! the WebView's bounds, scale and scroll; identity transform; viewport;
//! native occlusion). H5 actions hold the SDK's one action slot
//! (`sdk_actions::admit`), so a second action is busy and `/v1/action/cancel`
//! returns an H5 receipt like a native one. Effects are recorded as device
//! truth (`h5`), listed by control `actions`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::device::{Device, now_ms, uuid4};

/// The Web SDK file; its `h5Render` is the shared renderer (§8).
const SDK_JS: &str = include_str!("../../../plugins/web/sdk/ai-app-bridge-web.js");
const TARGET_SCHEMA: &str = "aab.android-h5-target/v1";
const EXECUTION_SCHEMA: &str = "aab.h5-execution/v1";
const PREFIX: &str = "android_h5_";
/// `h5_dom_timeout`: how long the snapshot turn may take once the page is there.
const DOM_TIMEOUT: Duration = Duration::from_millis(1500);
/// One renderer turn of an action (the action's own deadline bounds the whole).
const TURN_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TEXT: usize = 16384;
const MAX_SCRIPT: usize = 256 * 1024;
const PAGE_REF_KEYS: [&str; 9] = ["schemaVersion", "runtimeEpoch", "packageName", "processId", "activity", "windowId", "webViewId", "documentId", "url"];
const ELEMENT_KEYS: [&str; 8] = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];
/// Class-name fragments of WebView implementations reached through the reflective adapter.
const REFLECTIVE: [&str; 7] = ["webview", "smtt", "x5", "xwalk", "crosswalk", "ucweb", "nebulauc"];

/// The H5 failure shape (no `execution` member: proof of non-dispatch before admission).
fn fail(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("WebView execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

/// One request on an `/v1/h5/` route; `None` = close the connection without a
/// reply (the process died, or the lost-completion fault).
pub async fn handle(dev: &Arc<Device>, package: &str, epoch: &str, method: &str, path: &str, query: &HashMap<String, String>, body: &[u8]) -> Option<(u16, Value)> {
    match (method, path) {
        ("GET", "/v1/h5/dom") => Some((200, dom(dev, package, epoch, query.get("webViewId").map(String::as_str)).await)),
        ("POST", "/v1/h5/action") => action(dev, package, epoch, body).await.map(|v| (200, v)),
        ("POST", "/v1/h5/cancel") => {
            let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some((200, fail("invalid_json"))) };
            crate::sdk_actions::cancel(&req, epoch, "h5").await
        }
        _ => Some((404, json!({ "ok": false, "error": "not_found" }))),
    }
}

/// What the native side knows about the app process of `epoch`.
struct AppInfo {
    pid: u32,
    activity: Option<String>,
    /// The window id of the app's activity window (the current screen).
    activity_window: Option<String>,
}

fn app_info(dev: &Device, package: &str, epoch: &str) -> Option<AppInfo> {
    let ph = dev.phone.lock().unwrap();
    let idx = ph.apps.iter().position(|a| a.package == package && a.process.as_ref().is_some_and(|p| p.epoch == epoch))?;
    let app = &ph.apps[idx];
    let fg = ph.foreground == Some(idx);
    let tree = crate::sdk::view_tree(&ph, idx, true, epoch);
    Some(AppInfo {
        pid: app.process.as_ref().map(|p| p.pid).unwrap_or(0),
        activity: if fg { app.current_activity() } else { None },
        activity_window: tree["foregroundWindowId"].as_str().map(str::to_string),
    })
}

/// Whether the SDK can reach this view at all: the standard WebView, or a
/// vendor WebView through the reflective adapter.
fn adapted(v: &Value) -> bool {
    let class = v["className"].as_str().unwrap_or("").to_ascii_lowercase();
    match v["adapter"].as_str() {
        Some("standard") => true,
        Some("reflective") => REFLECTIVE.iter().any(|k| class.contains(k)),
        _ => false,
    }
}

fn summary(v: &Value) -> Value {
    json!({ "adapter": v["adapter"], "className": v["className"], "url": v["url"], "title": v["title"], "progress": v["progress"], "webViewId": v["webViewId"] })
}

/// The one WebView a request means: with an id, that view in any window;
/// without, the single visible one of the foreground action window.
fn pick(dev: &Device, package: &str, web_view_id: Option<&str>) -> Result<Value, Value> {
    let all: Vec<Value> = crate::webview::list(dev, package).into_iter().filter(adapted).collect();
    let candidates: Vec<&Value> = match web_view_id {
        Some(id) => all.iter().filter(|v| v["webViewId"] == id && v["visible"] == true).collect(),
        None => all.iter().filter(|v| v["foreground"] == true && v["visible"] == true).collect(),
    };
    match candidates.len() {
        1 => Ok(candidates[0].clone()),
        n => {
            let code = if n == 0 { "android_h5_webview_not_found" } else { "android_h5_webview_ambiguous" };
            let listed: Vec<Value> = if n == 0 { all.iter().filter(|v| v["visible"] == true).map(summary).collect() } else { candidates.iter().map(|v| summary(v)).collect() };
            let mut f = fail(code);
            f["webViews"] = json!(listed);
            Err(f)
        }
    }
}

fn render_expression(request: &Value) -> String {
    format!("(function () {{\n{SDK_JS}\n;return AiAppBridgeWeb.h5Render({request});\n}})()")
}

/// One renderer turn in the WebView's page. Err(None) = no usable reply within
/// `limit`; Err(Some(text)) = the page or the evaluation failed.
pub(crate) async fn render(dev: &Arc<Device>, package: &str, web_view_id: &str, request: Value, limit: Duration) -> Result<Value, Option<String>> {
    let expression = render_expression(&request);
    match tokio::time::timeout(limit, crate::webview::evaluate(dev, package, web_view_id, &expression)).await {
        Err(_) => Err(None),
        Ok(Err(e)) => Err(Some(e)),
        Ok(Ok(v)) if v.is_object() && v["ok"].is_boolean() => Ok(v),
        Ok(Ok(v)) => Err(Some(format!("unexpected renderer reply: {}", clip(&v.to_string(), 200)))),
    }
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

async fn dom(dev: &Arc<Device>, package: &str, epoch: &str, web_view_id: Option<&str>) -> Value {
    let Some(info) = app_info(dev, package, epoch) else { return fail("no_current_activity") };
    let view = match pick(dev, package, web_view_id) {
        Ok(v) => v,
        Err(f) => return f,
    };
    let id = view["webViewId"].as_str().unwrap_or("").to_string();
    // Wait for the page to exist and load (a fresh WebView); the timeout below is the renderer's own.
    if let Err(e) = crate::webview::evaluate(dev, package, &id, "1").await {
        let mut f = fail("android_h5_webview_unavailable");
        f["detail"] = json!(e);
        return f;
    }
    let request = json!({ "operation": "snapshot", "seed": uuid4(), "errorPrefix": PREFIX });
    let r = match render(dev, package, &id, request, DOM_TIMEOUT).await {
        Ok(r) => r,
        Err(None) => return fail("h5_dom_timeout"),
        Err(Some(e)) => {
            let mut f = fail("invalid_android_h5_reply");
            f["detail"] = json!(e);
            return f;
        }
    };
    if r["ok"] != true {
        return r;
    }
    let dom = r["dom"].clone();
    // The view list again: url/title follow the real page.
    let view = crate::webview::list(dev, package).into_iter().find(|v| v["webViewId"] == id.as_str()).unwrap_or(view);
    let window_type = if view["windowId"].as_str() == info.activity_window.as_deref() { "activity" } else { "dialog" };
    json!({
        "ok": true,
        "h5TargetSchema": TARGET_SCHEMA,
        "pageRef": {
            "schemaVersion": TARGET_SCHEMA, "runtimeEpoch": epoch, "packageName": package, "processId": info.pid,
            "activity": info.activity, "windowId": view["windowId"], "webViewId": id, "documentId": dom["documentId"], "url": dom["url"],
        },
        "dom": dom,
        "activity": info.activity,
        "window": { "type": window_type, "id": view["windowId"] },
        "webView": summary(&view),
        "updatedAtMs": now_ms(),
    })
}

// ------------------------------------------------------------------ actions

fn exact_keys(o: &Map<String, Value>, keys: &[&str]) -> bool {
    o.len() == keys.len() && keys.iter().all(|k| o.contains_key(*k))
}

/// The task constructor's checks of `payload` (rejections before admission).
fn validate_payload(p: &Value) -> Result<(), &'static str> {
    let Some(o) = p.as_object() else { return Err("invalid_h5_payload") };
    let action = o.get("action").and_then(Value::as_str).ok_or("invalid_h5_action")?;
    let keys: &[&str] = match action {
        "eval" => &["action", "pageRef", "script"],
        "scrollBy" => &["action", "pageRef", "deltaX", "deltaY"],
        "click" | "scroll" => &["action", "pageRef", "element"],
        "input" => &["action", "pageRef", "element", "text"],
        _ => return Err("invalid_h5_action"),
    };
    if !exact_keys(o, keys) {
        return Err("invalid_h5_payload");
    }
    let page = o["pageRef"].as_object().ok_or("invalid_h5_page_ref")?;
    let page_ok = exact_keys(page, &PAGE_REF_KEYS)
        && page["schemaVersion"] == TARGET_SCHEMA
        && page["processId"].as_u64().is_some_and(|p| p >= 1)
        && PAGE_REF_KEYS.iter().filter(|k| **k != "processId" && **k != "activity").all(|k| page[*k].as_str().is_some_and(|s| !s.is_empty()))
        && (page["activity"].is_string() || page["activity"].is_null());
    if !page_ok {
        return Err("invalid_h5_page_ref");
    }
    if let Some(e) = o.get("element") {
        let ok = e.as_object().is_some_and(|e| exact_keys(e, &ELEMENT_KEYS) && ELEMENT_KEYS.iter().all(|k| e[*k].is_string()) && e["elementId"].as_str().is_some_and(|s| !s.is_empty()));
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

/// `POST /v1/h5/action`.
async fn action(dev: &Arc<Device>, package: &str, epoch: &str, body: &[u8]) -> Option<Value> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return Some(fail("invalid_json")) };
    if !exact_keys(&req, &["payload", "actionId", "execution"]) {
        return Some(fail("invalid_h5_request"));
    }
    let action_id = req["actionId"].as_str().unwrap_or("").to_string();
    let exec = req["execution"].as_object();
    let valid = !action_id.is_empty()
        && exec.is_some_and(|e| {
            exact_keys(e, &["schemaVersion", "actionId", "runtimeEpoch", "timeoutMs"])
                && e["schemaVersion"] == EXECUTION_SCHEMA
                && e["actionId"] == action_id.as_str()
                && e["runtimeEpoch"].is_string()
                && e["timeoutMs"].as_u64().is_some_and(|t| (1..=2147483647).contains(&t))
        });
    if !valid {
        return Some(fail("invalid_h5_execution"));
    }
    let exec = exec.unwrap();
    if exec["runtimeEpoch"] != epoch {
        return Some(fail("h5_runtime_changed"));
    }
    let timeout_ms = exec["timeoutMs"].as_u64().unwrap();
    let payload = req["payload"].clone();
    if let Err(code) = validate_payload(&payload) {
        return Some(fail(code));
    }
    let kind = format!("h5-{}", payload["action"].as_str().unwrap_or(""));
    let lease = match crate::sdk_actions::admit(epoch, "h5", &kind, &action_id, timeout_ms) {
        Ok(l) => Arc::new(l),
        Err(code) => return Some(fail(&code)),
    };
    {
        let (dev, package, epoch, lease) = (dev.clone(), package.to_string(), epoch.to_string(), lease.clone());
        tokio::spawn(async move {
            let before = dev.truth_len();
            let result = run(&dev, &package, &epoch, &lease, payload).await;
            let after = dev.truth_len();
            if let Some(result) = result {
                lease.settle(&dev, &package, result, (before, after));
            }
        });
    }
    let reply = lease.reply(timeout_ms).await?;
    if reply["settled"] == true && crate::faults::Faults::take(&mut dev.faults.lock().unwrap().h5_drop_action_replies) {
        // The effect happened and the receipt is retained; only the reply is lost.
        dev.record("fault", json!({ "kind": "h5-reply-lost", "actionId": action_id }));
        return None;
    }
    Some(reply)
}

/// The task: native page checks, the renderer turns, the native hit check.
/// None = the process died (never settles).
async fn run(dev: &Arc<Device>, package: &str, epoch: &str, lease: &crate::sdk_actions::Lease, payload: Value) -> Option<Value> {
    let page = &payload["pageRef"];
    let Some(info) = app_info(dev, package, epoch) else { return Some(fail("no_current_activity")) };
    let id = page["webViewId"].as_str().unwrap_or("").to_string();
    let view = crate::webview::list(dev, package).into_iter().find(|v| v["webViewId"] == id.as_str() && adapted(v));
    // The url is the renderer's to check (location.href is the truth; the view's url follows it by events).
    let same = view.as_ref().is_some_and(|v| v["visible"] == true && v["windowId"] == page["windowId"])
        && page["runtimeEpoch"] == epoch
        && page["packageName"] == package
        && page["processId"] == info.pid
        && page["activity"] == json!(info.activity);
    if !same {
        return Some(fail("reobserve_required"));
    }
    let view = view.unwrap();
    let action = payload["action"].as_str().unwrap_or("").to_string();
    let seed = uuid4();
    let mut native_hit = Value::Null;
    let mut geometry = Value::Null;
    if action == "click" || action == "input" {
        let prepare = json!({ "operation": "prepare", "seed": seed, "errorPrefix": PREFIX, "payload": payload });
        let prepared = match render(dev, package, &id, prepare, TURN_TIMEOUT).await {
            Ok(r) => r,
            Err(_) => return Some(fail("invalid_android_h5_reply")),
        };
        if prepared["ok"] != true {
            return Some(prepared);
        }
        geometry = prepared["geometry"].clone();
        let screen = {
            let ph = dev.phone.lock().unwrap();
            (ph.width as f64, ph.height as f64)
        };
        native_hit = match hit_check(screen, &view, &geometry) {
            Ok(h) => h,
            Err(code) => return Some(fail(code)),
        };
    }
    // Holding the slot: a stop during the configured delay ends it undispatched.
    let delay = dev.faults.lock().unwrap().h5_action_delay_ms;
    if delay > 0 {
        lease.pause(Duration::from_millis(delay)).await;
    }
    if !lease.alive() {
        return None;
    }
    if let Err(reason) = lease.start() {
        return Some(json!({ "ok": false, "error": reason, "message": format!("WebView execution stopped before it started: {reason}"), "dispatched": false, "ambiguous": false }));
    }
    let mut turn = json!({ "operation": "action", "seed": seed, "errorPrefix": PREFIX, "payload": payload });
    if !geometry.is_null() {
        turn["geometry"] = geometry;
    }
    let mut r = match render(dev, package, &id, turn, TURN_TIMEOUT).await {
        Ok(r) => r,
        Err(_) => {
            let mut f = fail("invalid_android_h5_reply");
            f["dispatched"] = json!(true);
            f["ambiguous"] = json!(true);
            return Some(f);
        }
    };
    if r["dispatched"] == true {
        let mut effect = json!({ "package": package, "webViewId": id, "action": action, "element": payload["element"]["elementId"] });
        if action == "input" {
            effect["textLength"] = json!(payload["text"].as_str().map(|t| t.chars().count()));
            if r["sensitive"] != true {
                effect["text"] = payload["text"].clone();
            }
        }
        dev.record("h5", effect);
    }
    if r["ok"] == true && !native_hit.is_null() {
        r["nativeHit"] = native_hit;
    }
    r["webViewId"] = json!(id);
    Some(r)
}

/// The native hit check between `prepare` and `action`: the renderer's CSS
/// point (viewport-relative) → document → screen through the WebView's
/// bounds, scale and scroll; identity transform; a sane viewport; the point
/// inside the WebView and the screen; no native view over it.
fn hit_check(screen: (f64, f64), view: &Value, g: &Value) -> Result<Value, &'static str> {
    let num = |v: &Value| v.as_f64().filter(|x| x.is_finite());
    let (Some(x), Some(y), Some(w), Some(h), Some(sx), Some(sy)) = (num(&g["x"]), num(&g["y"]), num(&g["width"]), num(&g["height"]), num(&g["scrollX"]), num(&g["scrollY"])) else {
        return Err("android_h5_native_geometry_unsupported");
    };
    if !g["bounds"].is_object() {
        return Err("android_h5_native_geometry_unsupported");
    }
    if view["transform"].as_str().is_none_or(|t| t != "identity") {
        return Err("android_h5_native_transform_unsupported");
    }
    let scale = num(&view["scale"]).unwrap_or(0.0);
    let b: Vec<f64> = view["bounds"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default();
    if b.len() != 4 || b[2] <= b[0] || b[3] <= b[1] || scale <= 0.0 || w <= 0.0 || h <= 0.0 {
        return Err("android_h5_viewport_invalid");
    }
    // The CSS viewport must be the WebView's size at its scale (within rounding).
    if (w * scale - (b[2] - b[0])).abs() > scale + 1.0 || (h * scale - (b[3] - b[1])).abs() > scale + 1.0 {
        return Err("android_h5_viewport_invalid");
    }
    // Document point, then the WebView's own scroll (device px) takes it back to the view.
    let (native_scroll_x, native_scroll_y) = (sx * scale, sy * scale);
    let px = b[0] + (x + sx) * scale - native_scroll_x;
    let py = b[1] + (y + sy) * scale - native_scroll_y;
    let (sw, sh) = screen;
    let inside = |l: f64, t: f64, r: f64, bt: f64| px >= l && px < r && py >= t && py < bt;
    if x < 0.0 || y < 0.0 || x >= w || y >= h || !inside(b[0], b[1], b[2], b[3]) || !inside(0.0, 0.0, sw, sh) {
        return Err("android_h5_target_outside_native_viewport");
    }
    if let Some(o) = view["obscured"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<f64>>())
        && o.len() == 4
        && inside(o[0], o[1], o[2], o[3])
    {
        return Err("android_h5_native_target_obscured");
    }
    let point = json!({ "x": px.round() as i64, "y": py.round() as i64 });
    Ok(json!({ "ok": true, "point": point, "scale": scale, "geometry": g }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> Value {
        json!({ "webViewId": "w", "bounds": [0, 200, 1080, 2400], "scale": 2.625, "transform": "identity", "obscured": null })
    }

    fn geometry(x: f64, y: f64) -> Value {
        json!({ "x": x, "y": y, "width": 411, "height": 838, "scrollX": 0, "scrollY": 120, "bounds": { "x": 0, "y": 0, "width": 10, "height": 10 } })
    }

    const SCREEN: (f64, f64) = (1080.0, 2400.0);

    #[test]
    fn the_css_point_maps_through_bounds_scale_and_scroll() {
        let hit = hit_check(SCREEN, &view(), &geometry(100.0, 50.0)).unwrap();
        assert_eq!(hit["point"], json!({ "x": 263, "y": 331 }));
        assert_eq!(hit["scale"], json!(2.625));
    }

    #[test]
    fn each_native_refusal_has_its_code() {
        let mut g = geometry(100.0, 50.0);
        g["x"] = json!("a");
        assert_eq!(hit_check(SCREEN, &view(), &g), Err("android_h5_native_geometry_unsupported"));
        let mut v = view();
        v["transform"] = json!("rotate(5deg)");
        assert_eq!(hit_check(SCREEN, &v, &geometry(100.0, 50.0)), Err("android_h5_native_transform_unsupported"));
        let mut v = view();
        v["scale"] = json!(1.0);
        assert_eq!(hit_check(SCREEN, &v, &geometry(100.0, 50.0)), Err("android_h5_viewport_invalid"), "a CSS viewport that is not the WebView at its scale");
        let mut g = geometry(100.0, 50.0);
        g["width"] = json!(0);
        assert_eq!(hit_check(SCREEN, &view(), &g), Err("android_h5_viewport_invalid"));
        assert_eq!(hit_check(SCREEN, &view(), &geometry(100.0, 900.0)), Err("android_h5_target_outside_native_viewport"));
        let mut v = view();
        v["bounds"] = json!([0, 2000, 1080, 4200]);
        assert_eq!(hit_check(SCREEN, &v, &geometry(100.0, 300.0)), Err("android_h5_target_outside_native_viewport"), "inside the WebView, below the screen");
        let mut v = view();
        v["obscured"] = json!([0, 300, 1080, 400]);
        assert_eq!(hit_check(SCREEN, &v, &geometry(100.0, 50.0)), Err("android_h5_native_target_obscured"));
        assert!(hit_check(SCREEN, &v, &geometry(100.0, 100.0)).is_ok(), "the point below the covering view is free");
    }
}
