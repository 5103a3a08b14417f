//! Flutter-hosted WebViews (aab-protocols §7 "Flutter H5 adapters", seed 000
//! "Flutter H5"): the Dart side's explicit adapter registry and the four H5
//! payloads of `POST /v1/flutter/action` — `h5Adapters` and `h5Dom{adapterId}`
//! (reads: they never ask `checkFlutterAction`), `h5Eval{script,
//! expectedPage}` and `h5Control{operation, expectedTarget | expectedPage,
//! text, deltaX, deltaY}` (mutations: validated and prepared here, then
//! permitted and performed by `flutter_exec`'s managed task).
//!
//! An adapter is a scenario WebView with `adapter: "flutter"` (its webViewId
//! is the adapterId); it is registered while its Flutter screen's engine runs
//! and VISIBLE only while its `flutterRoute` is the engine's current route —
//! the Dart adapter's `isVisible()`, never inferred from native occlusion. Its
//! page is a real Chromium page (`webview`) running the shared renderer with
//! the `flutter_h5_` prefix and the `__aabFlutterH5TargetV1` state key; the
//! `pageRef` (`aab.flutter-h5-target/v1`) binds the Dart runtime epoch, the
//! adapter id and its registration generation, and the renderer's document.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::device::{Device, now_ms, uuid4};
use crate::flutter::with_engine;

pub const TARGET_SCHEMA: &str = "aab.flutter-h5-target/v1";
const PREFIX: &str = "flutter_h5_";
const PAGE_REF_KEYS: [&str; 6] = ["schemaVersion", "runtimeEpoch", "adapterId", "adapterGeneration", "documentId", "url"];
const ELEMENT_KEYS: [&str; 8] = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];
const DOM_TIMEOUT: Duration = Duration::from_millis(1500);
const TURN_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TEXT: usize = 16384;
const MAX_SCRIPT: usize = 256 * 1024;

/// The payload keys (besides `action`) each H5 payload may carry.
pub const PAYLOADS: [(&str, &[&str]); 4] = [
    ("h5Adapters", &[]),
    ("h5Dom", &["adapterId"]),
    ("h5Eval", &["script", "expectedPage"]),
    ("h5Control", &["operation", "expectedTarget", "expectedPage", "text", "deltaX", "deltaY"]),
];

pub fn is_read(action: &str) -> bool {
    action == "h5Adapters" || action == "h5Dom"
}

fn fail(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Flutter H5 request rejected: {code}"), "dispatched": false, "ambiguous": false })
}

/// One registered adapter as the Dart side reports it.
#[derive(Clone, Debug)]
struct Adapter {
    id: String,
    generation: u64,
    visible: bool,
    route: Option<String>,
    url: String,
    title: String,
    progress: u64,
}

impl Adapter {
    fn json(&self) -> Value {
        json!({ "adapterId": self.id, "adapterGeneration": self.generation, "visible": self.visible, "route": self.route, "url": self.url, "title": self.title, "progress": self.progress })
    }
}

/// The adapters of the foreground app's Flutter engine `epoch` (None: no such
/// engine on screen — the Dart runtime changed or the view is gone).
fn adapters(dev: &Device, package: &str, epoch: &str) -> Result<Vec<Adapter>, Value> {
    let views = crate::webview::list(dev, package);
    let ph = dev.phone.lock().unwrap();
    let Some(idx) = ph.app_index(package) else { return Err(fail("no_current_activity")) };
    if ph.foreground != Some(idx) {
        return Err(fail("no_current_activity"));
    }
    let screen = ph.apps[idx].spec.screens.get(ph.apps[idx].screen).map(|s| s.name.clone());
    let engine = with_engine(&ph, idx, |e, _, _| (e.epoch.clone(), e.route().to_string(), e.h5_generations.clone()));
    let Some((current, route, generations)) = engine else { return Err(fail("flutter_action_handler_absent")) };
    if current != epoch {
        return Err(fail("flutter_runtime_changed"));
    }
    let specs = &ph.apps[idx].spec.web_views;
    Ok(views
        .iter()
        .filter(|v| v["adapter"] == "flutter")
        .filter_map(|v| {
            let id = v["webViewId"].as_str()?;
            let spec = specs.iter().find(|s| s.web_view_id == id)?;
            // Registered by the Flutter screen it lives on, while that screen's engine runs.
            if spec.screen.is_some() && spec.screen != screen {
                return None;
            }
            let on_route = spec.flutter_route.as_deref().is_none_or(|r| r == route);
            Some(Adapter {
                id: id.to_string(),
                generation: generations.get(id).copied().unwrap_or(1),
                visible: v["visible"] == true && on_route,
                route: spec.flutter_route.clone(),
                url: v["url"].as_str().unwrap_or_default().to_string(),
                title: v["title"].as_str().unwrap_or_default().to_string(),
                progress: v["progress"].as_u64().unwrap_or(0),
            })
        })
        .collect())
}

/// The adapter a read means: the named one (registered), else the single visible one.
fn pick(all: &[Adapter], id: Option<&str>) -> Result<Adapter, Value> {
    if let Some(id) = id {
        return match all.iter().find(|a| a.id == id) {
            Some(a) if a.visible => Ok(a.clone()),
            Some(_) => Err(fail("flutter_h5_adapter_not_visible")),
            None => {
                let mut f = fail("flutter_h5_adapter_not_found");
                f["adapters"] = json!(all.iter().map(Adapter::json).collect::<Vec<_>>());
                Err(f)
            }
        };
    }
    let visible: Vec<&Adapter> = all.iter().filter(|a| a.visible).collect();
    match visible.as_slice() {
        [one] => Ok((*one).clone()),
        many => {
            let code = if many.is_empty() { "flutter_h5_adapter_not_found" } else { "flutter_h5_adapter_ambiguous" };
            let mut f = fail(code);
            f["adapters"] = json!(if many.is_empty() { all.iter().map(Adapter::json).collect::<Vec<_>>() } else { many.iter().map(|a| a.json()).collect() });
            Err(f)
        }
    }
}

/// The reads, answered at once (no slot, no permission): `{ok, adapters}` or the snapshot.
pub async fn read(dev: &Arc<Device>, package: &str, epoch: &str, action_id: &str, req: &Map<String, Value>) -> Value {
    let mut out = match req.get("action").and_then(Value::as_str) {
        Some("h5Adapters") => match adapters(dev, package, epoch) {
            Ok(all) => json!({ "ok": true, "adapters": all.iter().map(Adapter::json).collect::<Vec<_>>(), "dispatched": false, "ambiguous": false }),
            Err(f) => f,
        },
        _ => dom(dev, package, epoch, req).await,
    };
    out["actionId"] = json!(action_id);
    out["runtimeEpoch"] = json!(epoch);
    out["updatedAtMs"] = json!(now_ms());
    out
}

async fn dom(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>) -> Value {
    let id = match req.get("adapterId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 1024 => Some(s.as_str()),
        Some(_) => return fail("invalid_flutter_h5_adapter_id"),
    };
    let adapter = match adapters(dev, package, epoch).and_then(|all| pick(&all, id)) {
        Ok(a) => a,
        Err(f) => return f,
    };
    if let Err(e) = crate::webview::evaluate(dev, package, &adapter.id, "1").await {
        let mut f = fail("flutter_h5_adapter_unavailable");
        f["detail"] = json!(e);
        return f;
    }
    let request = json!({ "operation": "snapshot", "seed": uuid4(), "errorPrefix": PREFIX });
    let r = match crate::h5::render(dev, package, &adapter.id, request, DOM_TIMEOUT).await {
        Ok(r) => r,
        Err(None) => return fail("flutter_h5_dom_timeout"),
        Err(Some(e)) => {
            let mut f = fail("invalid_flutter_h5_reply");
            f["detail"] = json!(e);
            return f;
        }
    };
    if r["ok"] != true {
        return r;
    }
    let dom = r["dom"].clone();
    let mut adapter_json = adapter.json();
    adapter_json["url"] = dom["url"].clone();
    adapter_json["title"] = dom["title"].clone();
    json!({
        "ok": true, "dispatched": false, "ambiguous": false,
        "h5TargetSchema": TARGET_SCHEMA,
        "pageRef": { "schemaVersion": TARGET_SCHEMA, "runtimeEpoch": epoch, "adapterId": adapter.id, "adapterGeneration": adapter.generation, "documentId": dom["documentId"], "url": dom["url"] },
        "dom": dom,
        "adapter": adapter_json,
    })
}

/// A checked H5 mutation, ready for the permission step: the adapter's page and
/// the renderer payload (with the prepared geometry of click/input).
pub struct Prepared {
    web_view_id: String,
    payload: Value,
    geometry: Value,
    seed: String,
}

fn exact(o: &Map<String, Value>, keys: &[&str]) -> bool {
    o.len() == keys.len() && keys.iter().all(|k| o.contains_key(*k))
}

fn check_page_ref(p: &Value) -> Result<(), Value> {
    let ok = p.as_object().is_some_and(|o| {
        exact(o, &PAGE_REF_KEYS)
            && o["schemaVersion"] == TARGET_SCHEMA
            && o["adapterGeneration"].as_u64().is_some_and(|g| g >= 1)
            && ["runtimeEpoch", "adapterId", "documentId", "url"].iter().all(|k| o[*k].as_str().is_some_and(|s| !s.is_empty()))
    });
    if ok { Ok(()) } else { Err(fail("invalid_h5_page_ref")) }
}

/// The payload's shape → the renderer payload and the page it binds (rejections
/// before any permission: nothing was dispatched).
fn renderer_payload(req: &Map<String, Value>) -> Result<(Value, Value), Value> {
    let present: Vec<&str> = req.keys().map(String::as_str).filter(|k| !["action", "actionId", "execution"].contains(k)).collect();
    let only = |keys: &[&str]| present.iter().all(|k| keys.contains(k)) && keys.iter().all(|k| present.contains(k));
    if req["action"] == "h5Eval" {
        if !only(&["script", "expectedPage"]) {
            return Err(fail("invalid_h5_payload"));
        }
        check_page_ref(&req["expectedPage"])?;
        if req["script"].as_str().is_none_or(|s| s.trim().is_empty() || s.len() > MAX_SCRIPT) {
            return Err(fail("invalid_h5_script"));
        }
        let page = req["expectedPage"].clone();
        return Ok((json!({ "action": "eval", "pageRef": page, "script": req["script"] }), page));
    }
    let op = req.get("operation").and_then(Value::as_str).unwrap_or("");
    let keys: &[&str] = match op {
        "click" | "scroll" => &["operation", "expectedTarget"],
        "input" => &["operation", "expectedTarget", "text"],
        "scrollBy" => &["operation", "expectedPage", "deltaX", "deltaY"],
        _ => return Err(fail("invalid_h5_action")),
    };
    if !only(keys) {
        return Err(fail("invalid_h5_payload"));
    }
    if op == "scrollBy" {
        check_page_ref(&req["expectedPage"])?;
        let d = |k: &str| req[k].as_f64().filter(|v| v.is_finite());
        return match (d("deltaX"), d("deltaY")) {
            (Some(x), Some(y)) if x != 0.0 || y != 0.0 => {
                let page = req["expectedPage"].clone();
                Ok((json!({ "action": "scrollBy", "pageRef": page, "deltaX": x, "deltaY": y }), page))
            }
            _ => Err(fail("invalid_h5_scroll")),
        };
    }
    let Some(target) = req["expectedTarget"].as_object().filter(|t| exact(t, &["pageRef", "element"])) else { return Err(fail("invalid_h5_element_ref")) };
    check_page_ref(&target["pageRef"])?;
    let element_ok = target["element"].as_object().is_some_and(|e| exact(e, &ELEMENT_KEYS) && ELEMENT_KEYS.iter().all(|k| e[*k].is_string()) && e["elementId"].as_str().is_some_and(|s| !s.is_empty()));
    if !element_ok {
        return Err(fail("invalid_h5_element_ref"));
    }
    let page = target["pageRef"].clone();
    let mut p = json!({ "action": op, "pageRef": page, "element": target["element"] });
    if op == "input" {
        match req["text"].as_str() {
            Some(t) if t.chars().count() <= MAX_TEXT => p["text"] = json!(t),
            _ => return Err(fail("invalid_h5_text")),
        }
    }
    Ok((p, page))
}

/// Validation, the adapter binding and the renderer's read-only `prepare` turn
/// (click/input): everything before the Dart task asks for permission.
pub async fn prepare(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>) -> Result<Prepared, Value> {
    let (payload, page) = renderer_payload(req)?;
    let all = adapters(dev, package, epoch)?;
    let id = page["adapterId"].as_str().unwrap_or_default();
    let Some(adapter) = all.iter().find(|a| a.id == id) else { return Err(fail("flutter_h5_adapter_not_found")) };
    // Another Dart runtime or another registration of the adapter: the page reference is void.
    if page["runtimeEpoch"] != epoch || page["adapterGeneration"] != adapter.generation {
        return Err(fail("reobserve_required"));
    }
    if !adapter.visible {
        return Err(fail("flutter_h5_adapter_not_visible"));
    }
    let seed = uuid4();
    let mut geometry = Value::Null;
    if payload["action"] == "click" || payload["action"] == "input" {
        let turn = json!({ "operation": "prepare", "seed": seed, "errorPrefix": PREFIX, "payload": payload });
        let prepared = crate::h5::render(dev, package, id, turn, TURN_TIMEOUT).await.map_err(|_| fail("invalid_flutter_h5_reply"))?;
        if prepared["ok"] != true {
            return Err(prepared);
        }
        geometry = prepared["geometry"].clone();
    }
    Ok(Prepared { web_view_id: id.to_string(), payload, geometry, seed })
}

/// The permitted mutation: the renderer's final turn in the real page; the
/// receipt (its `dispatched` is the renderer's). Truth kind `flutter-h5`.
pub async fn perform(dev: &Arc<Device>, package: &str, action_id: &str, p: Prepared) -> Value {
    let mut turn = json!({ "operation": "action", "seed": p.seed, "errorPrefix": PREFIX, "payload": p.payload });
    if !p.geometry.is_null() {
        turn["geometry"] = p.geometry;
    }
    let mut r = match crate::h5::render(dev, package, &p.web_view_id, turn, TURN_TIMEOUT).await {
        Ok(r) => r,
        Err(_) => {
            let mut f = fail("invalid_flutter_h5_reply");
            f["dispatched"] = json!(true);
            f["ambiguous"] = json!(true);
            f
        }
    };
    let action = p.payload["action"].as_str().unwrap_or_default().to_string();
    if r["dispatched"] == true {
        let mut effect = json!({ "package": package, "adapterId": p.web_view_id, "action": action, "element": p.payload["element"]["elementId"], "actionId": action_id });
        if action == "input" {
            effect["textLength"] = json!(p.payload["text"].as_str().map(|t| t.chars().count()));
            if r["sensitive"] != true {
                effect["text"] = p.payload["text"].clone();
            }
        }
        dev.record("flutter-h5", effect);
    }
    r["adapterId"] = json!(p.web_view_id);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Value {
        json!({ "schemaVersion": TARGET_SCHEMA, "runtimeEpoch": "1-a", "adapterId": "help", "adapterGeneration": 1, "documentId": "d", "url": "http://x/" })
    }

    fn element() -> Value {
        json!({ "elementId": "e1", "tag": "button", "id": "", "name": "", "type": "", "text": "Send", "ariaLabel": "", "href": "" })
    }

    fn req(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn code(r: Result<(Value, Value), Value>) -> String {
        r.unwrap_err()["error"].as_str().unwrap().to_string()
    }

    #[test]
    fn payloads_are_checked_before_permission() {
        let ok = renderer_payload(&req(json!({ "action": "h5Control", "operation": "click", "expectedTarget": { "pageRef": page(), "element": element() } }))).unwrap();
        assert_eq!(ok.0["action"], "click");
        assert_eq!(ok.1["adapterId"], "help");
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "tap", "expectedTarget": {} })))), "invalid_h5_action");
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "click", "expectedTarget": { "pageRef": page(), "element": element() }, "text": "x" })))), "invalid_h5_payload");
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "input", "expectedTarget": { "pageRef": page(), "element": element() }, "text": 5 })))), "invalid_h5_text");
        let mut bad = page();
        bad["adapterGeneration"] = json!(0);
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "scroll", "expectedTarget": { "pageRef": bad, "element": element() } })))), "invalid_h5_page_ref");
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "scrollBy", "expectedPage": page(), "deltaX": 0, "deltaY": 0 })))), "invalid_h5_scroll");
        assert!(renderer_payload(&req(json!({ "action": "h5Control", "operation": "scrollBy", "expectedPage": page(), "deltaX": 0, "deltaY": 200 }))).is_ok());
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Eval", "script": " ", "expectedPage": page() })))), "invalid_h5_script");
        let mut sparse = element();
        sparse.as_object_mut().unwrap().remove("href");
        assert_eq!(code(renderer_payload(&req(json!({ "action": "h5Control", "operation": "click", "expectedTarget": { "pageRef": page(), "element": sparse } })))), "invalid_h5_element_ref");
    }

    #[test]
    fn a_read_without_an_id_needs_exactly_one_visible_adapter() {
        let a = |id: &str, visible: bool| Adapter { id: id.into(), generation: 1, visible, route: None, url: String::new(), title: String::new(), progress: 100 };
        assert_eq!(pick(&[a("x", true), a("y", false)], None).unwrap().id, "x");
        let amb = pick(&[a("x", true), a("y", true)], None).unwrap_err();
        assert_eq!(amb["error"], "flutter_h5_adapter_ambiguous");
        assert_eq!(amb["adapters"].as_array().unwrap().len(), 2);
        assert_eq!(pick(&[a("x", false)], None).unwrap_err()["error"], "flutter_h5_adapter_not_found");
        assert_eq!(pick(&[a("x", false)], Some("x")).unwrap_err()["error"], "flutter_h5_adapter_not_visible");
        assert_eq!(pick(&[a("x", true), a("y", true)], Some("y")).unwrap().id, "y");
        assert_eq!(pick(&[a("x", true)], Some("z")).unwrap_err()["error"], "flutter_h5_adapter_not_found");
    }
}
