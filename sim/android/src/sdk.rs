//! The aab SDK inside an app process: serves the §1 HTTP dialect on the
//! simulator-held `localabstract:aab-sdk-<runtimeEpoch>` socket (one request
//! per connection, 1500 ms read timeout, JSON replies, 404/500) and publishes
//! the endpoint descriptor in the app's files dir.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::device::{Device, now_ms};
use crate::phone::{App, Node};

pub const DESCRIPTOR: &str = "files/ai_app_bridge_endpoint.json";

pub fn descriptor_path(dev: &Device, package: &str) -> std::path::PathBuf {
    dev.root.join("data/user/0").join(package).join(DESCRIPTOR)
}

pub fn descriptor(package: &str, epoch: &str, version: &str) -> Value {
    json!({
        "schema": "ai-app-bridge.android-endpoint.v1",
        "ok": true,
        "packageName": package,
        "runtimeEpoch": epoch,
        "transport": "localabstract",
        "socketName": format!("aab-sdk-{epoch}"),
        "version": version,
        "updatedAtMs": now_ms(),
        "error": null,
    })
}

/// Starts the SDK of a freshly started process.
pub fn start(dev: Arc<Device>, package: String, epoch: String, version: String) {
    let key = format!("localabstract:aab-sdk-{epoch}");
    let mut rx = dev.listen(&key);
    let desc = descriptor(&package, &epoch, &version);
    let _ = crate::rootfs::write_atomic(&descriptor_path(&dev, &package), serde_json::to_vec_pretty(&desc).unwrap().as_slice());
    tokio::spawn(async move {
        while let Some(io) = rx.recv().await {
            let (dev, package, epoch, version) = (dev.clone(), package.clone(), epoch.clone(), version.clone());
            tokio::spawn(async move { serve(dev, package, epoch, version, io).await });
        }
    });
}

struct Request {
    method: String,
    path: String,
    query: HashMap<String, String>,
    body: Vec<u8>,
}

/// `application/x-www-form-urlencoded` decoding (`+` and `%XX`; a bad escape stays literal).
pub(crate) fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn read_request(io: &mut DuplexStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = io.read(&mut tmp).await.ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut rl = lines.next()?.split(' ');
    let method = rl.next()?.to_string();
    let target = rl.next()?.to_string();
    let mut len = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':')
            && k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = io.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    let (path, qs) = target.split_once('?').unwrap_or((&target, ""));
    let query = qs.split('&').filter(|s| !s.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (url_decode(k), url_decode(v))
    }).collect();
    Some(Request { method, path: path.to_string(), query, body })
}

async fn serve(dev: Arc<Device>, package: String, epoch: String, version: String, mut io: DuplexStream) {
    let Ok(Some(req)) = tokio::time::timeout(Duration::from_millis(1500), read_request(&mut io)).await else {
        let _ = io.shutdown().await;
        return;
    };
    let (status, body) = match (req.method.as_str(), req.path.as_str()) {
        ("POST", p) if p.starts_with("/v1/action/") || p == "/v1/app/clear-data" => match crate::sdk_actions::handle(&dev, &package, &epoch, &req.path, &req.body).await {
            Some(r) => r,
            None => {
                // The process died mid-action: the connection closes without a reply.
                let _ = io.shutdown().await;
                return;
            }
        },
        (_, p) if p.starts_with("/v1/h5/") => match crate::h5::handle(&dev, &package, &epoch, &req.method, &req.path, &req.query, &req.body).await { Some(r) => r, None => { let _ = io.shutdown().await; return; } },
        _ => route(&dev, &package, &epoch, &version, &req),
    };
    dev.record("sdk-request", json!({ "package": package, "runtimeEpoch": epoch, "method": req.method, "path": req.path, "status": status }));
    crate::hold::after_sdk(&dev, &req.path).await;
    let (delay, drop_reply) = {
        let mut f = dev.faults.lock().unwrap();
        (f.sdk_delay_ms, crate::faults::Faults::take(&mut f.sdk_drop_replies) || (crate::sdk_actions::is_action(&req.path) && crate::faults::Faults::take(&mut f.sdk_drop_action_replies)))
    };
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if drop_reply {
        dev.record("fault", json!({ "kind": "sdk-reply-lost", "path": req.path }));
        let _ = io.shutdown().await;
        return;
    }
    let text = serde_json::to_vec(&body).unwrap();
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let head = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", text.len());
    let _ = io.write_all(head.as_bytes()).await;
    let _ = io.write_all(&text).await;
    let _ = io.shutdown().await;
}

fn with_app<T>(dev: &Device, package: &str, epoch: &str, f: impl FnOnce(&mut crate::phone::Phone, usize) -> T) -> Option<T> {
    let mut ph = dev.phone.lock().unwrap();
    let idx = ph.apps.iter().position(|a| a.package == package && a.process.as_ref().is_some_and(|p| p.epoch == epoch))?;
    Some(f(&mut ph, idx))
}

fn route(dev: &Device, package: &str, epoch: &str, version: &str, req: &Request) -> (u16, Value) {
    let r = with_app(dev, package, epoch, |ph, idx| {
        let fg = ph.foreground == Some(idx);
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/v1/status") => (200, status(ph, idx, fg, epoch, version)),
            ("GET", "/v1/view/tree") => (200, view_tree(ph, idx, fg, epoch)),
            ("GET", "/v1/screenshot") => {
                if !fg {
                    return (200, json!({ "ok": false, "error": "no_current_activity" }));
                }
                let (w, h, png) = crate::screencap::png_of(ph);
                use base64::Engine;
                let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
                (200, json!({ "ok": true, "mimeType": "image/png", "width": w, "height": h, "base64": encode(&png), "updatedAtMs": now_ms() }))
            }
            ("GET", p @ ("/v1/logs" | "/v1/network" | "/v1/state" | "/v1/events")) => (200, capture_page(&ph.apps[idx], &p[4..], &req.query)),
            ("POST", p @ ("/v1/logs" | "/v1/network" | "/v1/state" | "/v1/events")) => {
                let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
                    return (200, json!({ "ok": false, "error": "invalid_json" }));
                };
                let kind = match &p[4..] {
                    "logs" => "log",
                    "events" => "event",
                    "state" => "state",
                    _ => "network",
                };
                let action = body.get("actionId").and_then(Value::as_str).map(str::to_string);
                let item = ph.apps[idx].capture_record(kind, body, action);
                (200, json!({ "ok": true, "event": item }))
            }
            ("POST", "/v1/ui/observation") => (200, crate::observation::handle(epoch, &req.body)),
            // No Flutter engine runs in a simulated app: the Dart channel is absent.
            ("POST", "/v1/flutter/observation") => (200, json!({ "ok": false, "error": "flutter_channel_failed", "message": "no Flutter engine is attached to this process" })),
            _ => (404, json!({ "ok": false, "error": "not_found" })),
        }
    });
    r.unwrap_or((500, json!({ "ok": false, "error": "java.lang.IllegalStateException: process is gone" })))
}

fn status(ph: &crate::phone::Phone, idx: usize, fg: bool, epoch: &str, version: &str) -> Value {
    let app = &ph.apps[idx];
    json!({
        "ok": true,
        "debugBridge": {
            "name": "ai_app_bridge", "version": version, "transport": "localabstract", "runtimeEpoch": epoch,
            "nativeTargetSchema": "aab.native-target/v1", "nativeExecutionSchema": "aab.native-execution/v1",
            "h5ExecutionSchema": "aab.h5-execution/v1", "h5TargetSchema": "aab.android-h5-target/v1",
            "h5Action": crate::sdk_actions::active_identity_of(epoch, "h5"), "nativeAction": crate::sdk_actions::active_identity(epoch), "flutterAction": null,
            "captureTargetKey": app.package, "socketName": format!("aab-sdk-{epoch}"),
        },
        "app": { "packageName": app.package, "versionName": app.spec.version_name, "versionCode": app.spec.version_code.unwrap_or(1), "debuggable": app.debuggable() },
        "android": { "manufacturer": ph.manufacturer, "model": ph.model, "sdkInt": ph.sdk_int },
        "activity": { "current": if fg { app.current_activity() } else { None } },
        "capture": { "logs": app.capture.logs.len(), "network": app.capture.network.len(), "state": app.capture.state.len(), "events": app.capture.events.len() },
        "capturePersistence": { "persistent": false, "attachmentState": "disabled", "attachmentError": null, "lifecycleState": "resumed", "profile": null, "directory": null, "disabledReason": "simulator", "operation": null },
        "uiObservation": crate::observation::status(epoch),
        "flutter": null,
        "updatedAtMs": now_ms(),
    })
}

fn uuid_from(seed: &str) -> String {
    let h = Sha256::digest(seed.as_bytes());
    let x: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-4{}-a{}-{}", &x[0..8], &x[8..12], &x[13..16], &x[17..20], &x[20..32])
}

pub fn view_tree(ph: &crate::phone::Phone, idx: usize, fg: bool, epoch: &str) -> Value {
    let app = &ph.apps[idx];
    let tree = if fg { app.tree(ph.width, ph.height) } else { None };
    let Some(tree) = tree else { return json!({ "ok": false, "error": "no_current_activity" }) };
    let window_id = uuid_from(&format!("{epoch}/window/{}", app.screen));
    let mut counter = 0u64;
    let root = node_json(app, &tree, epoch, &window_id, &window_id, "0", true, &mut counter, 0);
    let bounds = bounds_json(tree.bounds);
    json!({
        "ok": true,
        "activity": app.current_activity(),
        "foregroundWindowId": window_id,
        "foregroundWarning": null,
        "root": root.clone(),
        "windows": [{ "index": 0, "type": "activity", "rootClassName": "com.android.internal.policy.DecorView", "activityDecor": true, "windowId": window_id, "focused": true, "focusable": true, "touchable": true, "focusOwnerWindowId": window_id, "bounds": bounds, "root": root }],
        "windowCount": 1,
        "nodeCount": counter,
        "updatedAtMs": now_ms(),
    })
}

fn bounds_json(b: [i32; 4]) -> Value {
    json!({ "left": b[0], "top": b[1], "right": b[2], "bottom": b[3], "width": b[2] - b[0], "height": b[3] - b[1] })
}

#[allow(clippy::too_many_arguments)]
fn node_json(app: &App, n: &Node, epoch: &str, window_id: &str, parent_guard: &str, path: &str, parent_visible: bool, counter: &mut u64, depth: usize) -> Value {
    *counter += 1;
    let node_id = *counter;
    let view_id = uuid_from(&format!("{epoch}/{}/{path}", app.screen));
    let int_id = n.id.as_ref().map(|i| 0x7f0a_0000u32 as i64 + (i.bytes().fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b as u32)) % 0xffff) as i64);
    let text = n.text.as_ref().map(|t| if n.password { String::new() } else { t.chars().take(300).collect() });
    let checked = if n.checkable { Some(n.checked) } else { None };
    let guard_src = json!([epoch, window_id, view_id, parent_guard, n.class, n.resource_name, int_id, text, n.desc, n.editable, n.clickable, n.long_clickable, checked]);
    let guard: String = Sha256::digest(guard_src.to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let w = n.bounds[2] - n.bounds[0];
    let h = n.bounds[3] - n.bounds[1];
    let visible = parent_visible && n.visible && w > 0 && h > 0;
    let mut o = json!({
        "nodeId": node_id,
        "className": n.class,
        "simpleClassName": n.simple_class(),
        "id": int_id,
        "resourceName": n.resource_name,
        "contentDescription": n.desc,
        "visibility": if n.visible { "visible" } else { "gone" },
        "localVisible": n.visible,
        "effectiveVisible": visible,
        "visible": visible,
        "enabled": n.enabled,
        "editable": n.editable,
        "clickable": n.clickable,
        "longClickable": n.long_clickable,
        "focusable": n.focusable,
        "focused": n.focused,
        "selected": n.selected,
        "checked": checked,
        "alpha": 1.0,
        "bounds": bounds_json(n.bounds),
        "targetRef": { "schemaVersion": "aab.native-target/v1", "runtimeEpoch": epoch, "windowId": window_id, "viewId": view_id, "guard": guard },
    });
    if text.is_some() || n.class.contains("Text") || n.class.contains("Button") {
        o["text"] = json!(text.unwrap_or_default());
    }
    if !n.children.is_empty() && depth < 24 {
        let kids: Vec<Value> = n.children.iter().enumerate().map(|(i, c)| node_json(app, c, epoch, window_id, &guard, &format!("{path}.{i}"), visible, counter, depth + 1)).collect();
        o["children"] = json!(kids);
    }
    o
}

fn capture_page(app: &App, stream: &str, q: &HashMap<String, String>) -> Value {
    let list = match stream {
        "logs" => &app.capture.logs,
        "network" => &app.capture.network,
        "state" => &app.capture.state,
        _ => &app.capture.events,
    };
    let since_id = q.get("sinceId").and_then(|s| s.parse::<u64>().ok());
    let since_ms = q.get("sinceMs").and_then(|s| s.parse::<u64>().ok());
    let limit = q.get("limit").and_then(|s| s.parse::<usize>().ok()).unwrap_or(200).clamp(1, 500);
    let items: Vec<Value> = list
        .iter()
        .filter(|i| since_id.is_none_or(|s| i["id"].as_u64().unwrap_or(0) > s))
        .filter(|i| since_ms.is_none_or(|s| i["timestampMs"].as_u64().unwrap_or(0) >= s))
        .take(limit)
        .cloned()
        .collect();
    let kind = match stream {
        "logs" => "log",
        "events" => "event",
        s => s,
    };
    let mut page = json!({ "ok": true, "type": kind, "items": items, "count": items.len(), "sinceId": since_id, "sinceMs": since_ms, "limit": limit, "updatedAtMs": now_ms() });
    if stream == "state" {
        let mut values = serde_json::Map::new();
        for i in list {
            let k = format!("{}.{}", i["namespace"].as_str().unwrap_or("app"), i["key"].as_str().unwrap_or("value"));
            values.insert(k, i.get("value").cloned().unwrap_or(Value::Null));
        }
        page["values"] = Value::Object(values);
    }
    page
}
