//! The SDK's native action routes (`/v1/action/tap`, `tap-target`,
//! `input-text`, `input-target`, `cancel`) with the managed-execution
//! envelope of §1.6: the `execution` object is checked exactly, rejections
//! before admission carry no `execution` member, terminal receipts are settled
//! and the last one is retained for `cancel`. Actions complete synchronously,
//! so the single action slot is never busy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use crate::device::{Device, now_ms};

const SCHEMA: &str = "aab.native-execution/v1";

/// Last terminal receipt per runtime epoch (the SDK keeps exactly one).
static LAST: Mutex<Option<HashMap<String, Value>>> = Mutex::new(None);

fn reject(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Native execution rejected: {code}"), "dispatched": false, "ambiguous": false })
}

fn target_failure(code: &str, dispatched: bool) -> Value {
    json!({ "ok": false, "error": code, "message": format!("Native target validation failed: {code}"), "dispatched": dispatched, "ambiguous": false })
}

fn last(epoch: &str) -> Option<Value> {
    LAST.lock().unwrap().as_ref().and_then(|m| m.get(epoch).cloned())
}

pub fn handle(dev: &Arc<Device>, package: &str, epoch: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return (200, json!({ "ok": false, "error": "invalid_json" })) };
    let kind = path.trim_start_matches("/v1/action/");
    if kind == "cancel" {
        return (200, cancel(&req, epoch));
    }
    if !["tap", "tap-target", "input-text", "input-target"].contains(&kind) {
        return (404, json!({ "ok": false, "error": "not_found" }));
    }
    // Admission: the execution envelope.
    let action_id = req.get("actionId").and_then(Value::as_str).unwrap_or("").to_string();
    let exec = req.get("execution").and_then(Value::as_object);
    let valid = exec.is_some_and(|e| {
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        keys.len() == 4
            && e.get("schemaVersion").and_then(Value::as_str) == Some(SCHEMA)
            && e.get("actionId").and_then(Value::as_str) == Some(action_id.as_str())
            && e.get("runtimeEpoch").is_some_and(Value::is_string)
            && e.get("timeoutMs").and_then(Value::as_u64).is_some_and(|t| (1..=2147483647).contains(&t))
    }) && !action_id.is_empty();
    if !valid {
        return (200, reject("invalid_native_execution"));
    }
    let exec = exec.unwrap();
    if exec["runtimeEpoch"] != epoch || req.get("targetRef").and_then(|t| t.get("runtimeEpoch")).is_some_and(|e| e != epoch) {
        return (200, reject("native_runtime_changed"));
    }
    if last(epoch).is_some_and(|l| l["actionId"] == action_id.as_str()) {
        return (200, reject("native_action_id_reused"));
    }
    let mut result = match kind {
        "tap" => tap_xy(dev, package, &req),
        "tap-target" => with_target(dev, package, epoch, &req, false),
        "input-text" => input_text(dev, package, &req),
        _ => with_target(dev, package, epoch, &req, true),
    };
    // Settle: the terminal receipt.
    let obj = result.as_object_mut().unwrap();
    obj.insert("actionId".into(), json!(action_id));
    obj.insert("runtimeEpoch".into(), json!(epoch));
    obj.insert("settled".into(), json!(true));
    obj.insert("execution".into(), json!({ "schemaVersion": SCHEMA, "actionId": action_id, "runtimeEpoch": epoch, "settled": true }));
    obj.insert("updatedAtMs".into(), json!(now_ms()));
    LAST.lock().unwrap().get_or_insert_with(HashMap::new).insert(epoch.to_string(), result.clone());
    let settled = json!({ "category": "interaction", "name": "native.action.settled", "data": { "execution": result["execution"], "ok": result["ok"], "dispatched": result["dispatched"], "ambiguous": result["ambiguous"], "error": result.get("error") } });
    {
        let mut ph = dev.phone.lock().unwrap();
        if let Some(i) = ph.app_index(package) {
            ph.apps[i].capture_record("event", settled, Some(action_id.clone()));
        }
    }
    dev.record("sdk-action", json!({ "package": package, "kind": kind, "actionId": action_id, "ok": result["ok"], "dispatched": result["dispatched"] }));
    (200, result)
}

fn cancel(req: &Map<String, Value>, epoch: &str) -> Value {
    let ok_shape = req.len() == 2 && req.get("actionId").is_some_and(Value::is_string) && req.get("runtimeEpoch").is_some_and(Value::is_string);
    if !ok_shape {
        return reject("invalid_native_execution_identity");
    }
    let (id, ep) = (req["actionId"].as_str().unwrap(), req["runtimeEpoch"].as_str().unwrap());
    match last(epoch) {
        Some(l) if ep == epoch && l["actionId"] == id => json!({ "ok": true, "actionId": id, "runtimeEpoch": ep, "executionResult": l }),
        _ => json!({ "ok": false, "error": "native_action_not_active", "message": "Native action is not active", "actionId": id, "runtimeEpoch": ep, "dispatched": false, "ambiguous": false }),
    }
}

fn is_foreground(dev: &Device, package: &str) -> bool {
    dev.phone.lock().unwrap().foreground_app().is_some_and(|a| a.package == package)
}

fn summary(n: &Value) -> Value {
    json!({ "className": n["className"], "simpleClassName": n["simpleClassName"], "resourceName": n["resourceName"], "bounds": n["bounds"], "enabled": n["enabled"], "clickable": n["clickable"], "longClickable": n["longClickable"], "focusable": n["focusable"] })
}

fn tap_receipt(dev: &Arc<Device>, x: i32, y: i32, validation: &str, target_ref: Value, target: Value) -> Value {
    let (w, h) = {
        let ph = dev.phone.lock().unwrap();
        (ph.width as i32, ph.height as i32)
    };
    crate::tools::android_tap(dev, x, y);
    json!({
        "ok": true, "dispatched": true, "ambiguous": false, "targetValidation": validation, "targetRef": target_ref,
        "x": x, "y": y, "localX": x, "localY": y, "windowType": "activity", "windowFocused": true, "warnings": [],
        "rootClassName": "com.android.internal.policy.DecorView", "rootBounds": { "left": 0, "top": 0, "right": w, "bottom": h, "width": w, "height": h },
        "target": target, "handledDown": true, "handledUp": true,
    })
}

fn tap_xy(dev: &Arc<Device>, package: &str, req: &Map<String, Value>) -> Value {
    let (Some(x), Some(y)) = (req.get("x").and_then(Value::as_f64), req.get("y").and_then(Value::as_f64)) else { return target_failure("missing_argument", false) };
    if !is_foreground(dev, package) {
        return target_failure("no_current_activity", false);
    }
    let (x, y) = (x.round() as i32, y.round() as i32);
    let (w, h) = {
        let ph = dev.phone.lock().unwrap();
        (ph.width as i32, ph.height as i32)
    };
    if x < 0 || y < 0 || x >= w || y >= h {
        return target_failure("native_point_outside_foreground_window", false);
    }
    tap_receipt(dev, x, y, "coordinates", Value::Null, Value::Null)
}

fn flatten<'a>(n: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(n);
    if let Some(kids) = n.get("children").and_then(Value::as_array) {
        for k in kids {
            flatten(k, out);
        }
    }
}

fn with_target(dev: &Arc<Device>, package: &str, epoch: &str, req: &Map<String, Value>, input: bool) -> Value {
    let Some(sel) = req.get("selector").and_then(Value::as_object) else { return target_failure("missing_argument", false) };
    let keys: Vec<&String> = sel.keys().filter(|k| ["text", "resourceName", "contentDescription"].contains(&k.as_str())).collect();
    if keys.len() != 1 {
        return target_failure("invalid_argument", false);
    }
    let (key, want) = (keys[0].as_str(), &sel[keys[0].as_str()]);
    let tree = {
        let ph = dev.phone.lock().unwrap();
        let Some(idx) = ph.app_index(package) else { return target_failure("no_current_activity", false) };
        crate::sdk::view_tree(&ph, idx, ph.foreground == Some(idx), epoch)
    };
    if tree["ok"] != true {
        return target_failure("no_current_activity", false);
    }
    let mut all = vec![];
    flatten(&tree["root"], &mut all);
    let hits: Vec<&&Value> = all.iter().filter(|n| n["visible"] == true && n["enabled"] == true && &n[key] == want).collect();
    let node = match hits.len() {
        0 => return target_failure("native_selector_not_found", false),
        1 => *hits[0],
        _ => return target_failure("native_selector_ambiguous", false),
    };
    if let Some(tr) = req.get("targetRef") {
        let mine = &node["targetRef"];
        for (field, code) in [("windowId", "native_window_changed"), ("viewId", "native_target_replaced"), ("guard", "native_target_changed")] {
            if tr.get(field) != mine.get(field) {
                return target_failure(code, false);
            }
        }
    }
    let b = &node["bounds"];
    let (cx, cy) = ((b["left"].as_i64().unwrap() + b["right"].as_i64().unwrap()) / 2, (b["top"].as_i64().unwrap() + b["bottom"].as_i64().unwrap()) / 2);
    if !input {
        return tap_receipt(dev, cx as i32, cy as i32, "aab.native-target/v1", node["targetRef"].clone(), summary(node));
    }
    if node["editable"] != true {
        return target_failure("native_target_not_editable", false);
    }
    let text = req.get("text").and_then(Value::as_str).unwrap_or("");
    let id = node["resourceName"].as_str().and_then(|r| r.rsplit('/').next()).map(str::to_string);
    replace_text(dev, package, id, text, "aab.native-target/v1", node["targetRef"].clone(), summary(node))
}

fn input_text(dev: &Arc<Device>, package: &str, req: &Map<String, Value>) -> Value {
    let text = req.get("text").and_then(Value::as_str).unwrap_or("").to_string();
    if !is_foreground(dev, package) {
        return target_failure("no_current_activity", false);
    }
    match (req.get("x").and_then(Value::as_f64), req.get("y").and_then(Value::as_f64)) {
        (Some(x), Some(y)) => crate::tools::android_tap(dev, x.round() as i32, y.round() as i32),
        (None, None) => {}
        _ => return target_failure("invalid_argument", false),
    }
    let focused = {
        let ph = dev.phone.lock().unwrap();
        ph.foreground_app().and_then(|a| a.focused.clone())
    };
    match focused {
        Some(id) => replace_text(dev, package, Some(id), &text, "coordinates-or-focus", Value::Null, Value::Null),
        None => target_failure("input_target_not_found", false),
    }
}

fn replace_text(dev: &Arc<Device>, package: &str, id: Option<String>, text: &str, validation: &str, target_ref: Value, target: Value) -> Value {
    let Some(id) = id else { return target_failure("input_target_not_operable", false) };
    {
        let mut ph = dev.phone.lock().unwrap();
        let Some(i) = ph.app_index(package) else { return target_failure("no_current_activity", false) };
        ph.apps[i].values.insert(id.clone(), text.to_string());
        ph.apps[i].focused = Some(id.clone());
        ph.keyboard = true;
    }
    dev.record("text", json!({ "text": text, "via": "sdk", "target": { "package": package, "id": id, "value": text } }));
    json!({
        "ok": true, "dispatched": true, "ambiguous": false, "targetValidation": validation, "targetRef": target_ref,
        "transport": "bridge", "source": "native-view", "text": text, "textLength": text.chars().count(),
        "requestedFocus": true, "focused": true, "windowType": "activity", "target": target,
    })
}
