//! The aab iOS SDK inside an app process (protocols §4.1–4.4): a TCP listener
//! on the device's tunnel address with an OS-assigned port, the descriptor
//! `Documents/ai_app_bridge_port.json` published atomically (sorted keys) once
//! it listens, and the HTTP/1.1 dialect: one request per connection, 8 MiB
//! request bound (413), a read deadline, the five identity headers on every
//! GET and every POST except the capture inputs (409
//! `ios_runtime_binding_required` / `_mismatch` / `ios_runtime_descriptor_unavailable`),
//! and `runtimeBinding` on every body. Descriptor and response faults live here.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::device::Device;
use crate::http::{self, ReadError, Request};
use crate::util::{now_ms, sorted_json, uuid_upper, write_atomic};

pub const DESCRIPTOR: &str = "Documents/ai_app_bridge_port.json";
pub const SCHEMA: &str = "aab.ios-runtime/v1";
pub const SDK_VERSION: &str = "0.3.4";
pub const H5_TARGET_SCHEMA: &str = "aab.ios-h5-target/v1";
const MAX_REQUEST: usize = 8 * 1024 * 1024;
const READ_DEADLINE: Duration = Duration::from_secs(5);
const CAPTURE_INPUTS: [&str; 5] = ["/v1/logs", "/v1/network", "/v1/state", "/v1/events", "/v1/flutter/snapshot"];
const HEADERS: [&str; 5] = ["X-AAB-Runtime-Schema", "X-AAB-Bundle-Id", "X-AAB-Runtime-Epoch", "X-AAB-Process-Id", "X-AAB-Runtime-Port"];

/// The identity of one SDK listener.
#[derive(Clone, Debug)]
pub struct Binding {
    pub bundle: String,
    pub epoch: String,
    pub pid: u32,
    pub port: u16,
}

impl Binding {
    pub fn json(&self) -> Value {
        json!({ "schemaVersion": SCHEMA, "bundleId": self.bundle, "runtimeEpoch": self.epoch, "processId": self.pid, "port": self.port })
    }
}

/// Starts the SDK listener of a new process; its port and accept task. The
/// descriptor is written by the caller once the process is registered.
pub fn listen(dev: &Arc<Device>, bundle: &str, epoch: &str, pid: u32) -> std::io::Result<(u16, JoinHandle<()>)> {
    let ip: IpAddr = dev.tunnel_ip.parse().map_err(|_| std::io::Error::other("bad tunnel address"))?;
    let std_l = std::net::TcpListener::bind(SocketAddr::new(ip, 0))?;
    std_l.set_nonblocking(true)?;
    let port = std_l.local_addr()?.port();
    let listener = tokio::net::TcpListener::from_std(std_l)?;
    let binding = Binding { bundle: bundle.into(), epoch: epoch.into(), pid, port };
    let weak = Arc::downgrade(dev);
    let task = tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let Some(dev) = weak.upgrade() else { return };
            tokio::spawn(serve(dev, binding.clone(), sock));
        }
    });
    Ok((port, task))
}

pub fn descriptor_path(dev: &Device, bundle: &str) -> std::path::PathBuf {
    dev.container(bundle).join(DESCRIPTOR)
}

/// (Re)publishes the descriptor of `bundle`'s running SDK process, honouring the descriptor faults.
pub fn publish(dev: &Device, bundle: &str) {
    let (cur, previous) = {
        let st = dev.st.lock().unwrap();
        let Some(app) = st.apps.get(bundle).filter(|a| a.spec.sdk) else { return };
        let Some(p) = app.process.as_ref() else { return };
        ((p.epoch.clone(), p.pid, p.port), app.previous.clone())
    };
    let f = dev.faults.lock().unwrap().clone();
    let path = descriptor_path(dev, bundle);
    let doc = |epoch: &str, pid: u32, port: u16, ok: bool, error: Value| {
        json!({ "schemaVersion": SCHEMA, "bundleId": bundle, "runtimeEpoch": epoch, "processId": pid, "port": port, "ok": ok, "sdkVersion": SDK_VERSION, "updatedAtMs": now_ms(), "error": error })
    };
    let r = if f.descriptor_absent {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    } else if f.descriptor_invalid {
        write_atomic(&path, br#"{"schemaVersion":"aab.ios-runtime/v1","bundleId":"#)
    } else if f.descriptor_not_ready {
        write_atomic(&path, sorted_json(&doc(&cur.0, cur.1, 0, false, json!("listener_waiting"))).as_bytes())
    } else if f.descriptor_stale {
        let (epoch, pid, port) = previous.unwrap_or_else(|| (uuid_upper(), cur.1.saturating_sub(7).max(1), cur.2.wrapping_add(1).max(1)));
        write_atomic(&path, sorted_json(&doc(&epoch, pid, port, true, Value::Null)).as_bytes())
    } else {
        write_atomic(&path, sorted_json(&doc(&cur.0, cur.1, cur.2, true, Value::Null)).as_bytes())
    };
    if let Err(e) = r {
        dev.record("descriptor-write-failed", json!({ "bundleId": bundle, "error": e.to_string() }));
    }
}

fn binding_error(code: &str, message: &str) -> (u16, Value) {
    (409, json!({ "ok": false, "error": code, "message": message, "dispatched": false, "ambiguous": false }))
}

/// The §4.3 identity check.
fn check_binding(req: &Request, b: &Binding, ready: bool) -> Result<(), (u16, Value)> {
    if !ready {
        return Err(binding_error("ios_runtime_descriptor_unavailable", "the runtime descriptor is not ready"));
    }
    let expected = [SCHEMA.to_string(), b.bundle.clone(), b.epoch.clone(), b.pid.to_string(), b.port.to_string()];
    let mut missing = false;
    let mut mismatch = false;
    for (name, want) in HEADERS.iter().zip(expected.iter()) {
        match req.header_values(name).as_slice() {
            [] => missing = true,
            [v] if v == want => {}
            _ => mismatch = true,
        }
    }
    if mismatch {
        return Err(binding_error("ios_runtime_binding_mismatch", "the request's runtime identity does not match this process"));
    }
    if missing {
        return Err(binding_error("ios_runtime_binding_required", "the runtime identity headers are required"));
    }
    Ok(())
}

async fn serve(dev: Arc<Device>, b: Binding, mut sock: TcpStream) {
    let reply = match http::read_request(&mut sock, MAX_REQUEST, READ_DEADLINE).await {
        Err(ReadError::Bad) => return,
        Err(ReadError::TooLarge) => Some((413, json!({ "ok": false, "error": "request_too_large", "message": format!("requests are limited to {MAX_REQUEST} bytes"), "dispatched": false, "ambiguous": false }))),
        Ok(req) => {
            // A request to a process that has since died (a stale port reused) gets nothing.
            if dev.with_process(&b.bundle, &b.epoch, |_| ()).is_none() {
                return;
            }
            let exempt = req.method == "POST" && CAPTURE_INPUTS.contains(&req.path.as_str());
            let ready = !dev.faults.lock().unwrap().descriptor_not_ready;
            match (exempt, check_binding(&req, &b, ready)) {
                (false, Err(e)) => Some(e),
                _ => {
                    let r = route(&dev, &b, &req).await;
                    if let Some((status, _)) = &r {
                        dev.record("sdk-request", json!({ "bundleId": b.bundle, "runtimeEpoch": b.epoch, "method": req.method, "path": req.path, "status": status }));
                    }
                    r
                }
            }
        }
    };
    let Some((status, mut body)) = reply else {
        // The lost-reply fault, or the process died mid-action: close without a reply.
        drop(sock);
        return;
    };
    let f = dev.faults.lock().unwrap().clone();
    let mut binding = b.json();
    if f.response_binding_mismatch {
        binding["runtimeEpoch"] = json!(uuid_upper());
    }
    if let Some(o) = body.as_object_mut() {
        o.insert("runtimeBinding".into(), binding);
        if f.response_ok_missing {
            o.remove("ok");
        }
    }
    http::respond_json(&mut sock, status, &body).await;
}

fn not_found() -> (u16, Value) {
    (404, json!({ "ok": false, "error": "not_found", "message": "no such route", "dispatched": false, "ambiguous": false }))
}

pub fn bad_request(message: &str) -> (u16, Value) {
    (400, json!({ "ok": false, "error": "bad_request", "message": message, "dispatched": false, "ambiguous": false }))
}

/// One request past the identity check; `None` = close without replying.
async fn route(dev: &Arc<Device>, b: &Binding, req: &Request) -> Option<(u16, Value)> {
    if !req.query_ok {
        return Some(bad_request("the query string is not valid percent-encoding"));
    }
    let path = req.path.as_str();
    match (req.method.as_str(), path) {
        ("GET", "/v1/status") => Some(sync_route(dev, b, |dev, st| (200, status(dev, st, b)))),
        ("GET", "/v1/view/tree") => Some(sync_route(dev, b, |dev, st| (200, view_tree(dev, st, b)))),
        ("GET", "/v1/screenshot") => {
            // The tree is taken under the lock; encoding runs outside it.
            let mut tree = None;
            let r = sync_route(dev, b, |dev, st| {
                tree = crate::native::current(dev, st, &b.bundle, true).map(|t| t.0);
                (200, Value::Null)
            });
            if r.0 != 200 {
                return Some(r);
            }
            Some((200, screenshot(dev, tree)))
        }
        ("GET", "/v1/logs" | "/v1/network" | "/v1/state" | "/v1/events") => {
            Some(sync_route(dev, b, |_, st| (200, st.apps.get(&b.bundle).map(|a| a.capture.query(&path[4..], &b.epoch, &req.query)).unwrap_or(Value::Null))))
        }
        ("POST", "/v1/logs" | "/v1/network" | "/v1/state" | "/v1/events") => {
            let Ok(record) = serde_json::from_slice::<Value>(&req.body) else { return Some(bad_request("the body is not JSON")) };
            if !record.is_object() {
                return Some(bad_request("a capture record is a JSON object"));
            }
            Some(sync_route(dev, b, |_, st| (200, st.apps.get_mut(&b.bundle).map(|a| a.capture.append(&path[4..], &b.epoch, record)).unwrap_or(Value::Null))))
        }
        ("POST", "/v1/app/clear-data") => Some(sync_route(dev, b, |dev, st| {
            let r = st.apps.get_mut(&b.bundle).map(|a| a.capture.clear()).unwrap_or(Value::Null);
            dev.record("clear-data", json!({ "bundleId": b.bundle, "runtimeEpoch": b.epoch, "scope": "captures" }));
            let mut out = json!({ "ok": true, "scope": "captures" });
            if let (Some(o), Value::Object(r)) = (out.as_object_mut(), r) {
                o.extend(r);
            }
            (200, out)
        })),
        ("POST", "/v1/action/tap" | "/v1/action/input-text") => Some((
            200,
            json!({ "ok": false, "error": "ios_runtime_action_unsupported", "message": "native iOS actions go through the WebDriverAgent Runner", "dispatched": false, "ambiguous": false }),
        )),
        ("POST", "/v1/ui/observation") => {
            let started = Instant::now();
            let _ = sync_route(dev, b, |dev, st| (200, view_tree(dev, st, b)));
            let sample_ms = started.elapsed().as_millis() as u64;
            Some(sync_route(dev, b, |_, st| (200, st.process_mut(&b.bundle).map(|p| p.observer.handle(&req.body, sample_ms)).unwrap_or(Value::Null))))
        }
        ("GET", "/v1/execution/status") => Some(sync_route(dev, b, |_, st| (200, json!({ "ok": true, "active": st.process(&b.bundle).map(|p| p.exec.active_json()).unwrap_or(Value::Null) })))),
        ("GET", "/v1/execution/result") => {
            let store = crate::execution::store_path(&dev.container(&b.bundle));
            let page = dev.faults.lock().unwrap().completion_page_records;
            Some((200, crate::execution::result_page(&store, &req.query, page)))
        }
        ("POST", "/v1/flutter/snapshot") => {
            let Ok(snap) = serde_json::from_slice::<Value>(&req.body) else { return Some(bad_request("the body is not JSON")) };
            if !snap.is_object() {
                return Some(bad_request("a snapshot is a JSON object"));
            }
            Some(sync_route(dev, b, |_, st| {
                if let Some(p) = st.process_mut(&b.bundle) {
                    p.flutter_ingress = Some(snap);
                }
                (200, json!({ "ok": true, "accepted": true, "updatedAtMs": now_ms() }))
            }))
        }
        ("POST", "/v1/flutter/action") => crate::sdk_flutter::action(dev, b, &req.body).await,
        ("POST", "/v1/flutter/cancel") | ("POST", "/v1/h5/cancel") => {
            let kind = if path.contains("flutter") { "flutter" } else { "h5" };
            let slot = dev.st.lock().unwrap().process(&b.bundle).map(|p| p.exec.clone())?;
            let store = crate::execution::store_path(&dev.container(&b.bundle));
            Some((200, crate::execution::cancel(&slot, &store, kind, &req.body).await))
        }
        ("GET", "/v1/h5/dom") => Some((200, crate::h5::dom(dev, b, &req.query).await)),
        ("POST", "/v1/h5/action") => crate::h5::action(dev, b, &req.body).await,
        _ => Some(not_found()),
    }
}

/// Runs `f` under the device lock if the process still runs (else a 500 the host treats as lost).
fn sync_route(dev: &Arc<Device>, b: &Binding, f: impl FnOnce(&Device, &mut crate::device::DevState) -> (u16, Value)) -> (u16, Value) {
    let mut st = dev.st.lock().unwrap();
    let alive = st.process(&b.bundle).is_some_and(|p| p.epoch == b.epoch);
    if !alive {
        return (500, json!({ "ok": false, "error": "ios_runtime_stopped", "message": "the app process is gone", "dispatched": false, "ambiguous": false }));
    }
    f(dev, &mut st)
}

fn status(dev: &Device, st: &mut crate::device::DevState, b: &Binding) -> Value {
    let fg = st.is_foreground(&b.bundle);
    let orientation = st.orientation.clone();
    let view = crate::sdk_flutter::view_size(dev, &orientation);
    let app = st.apps.get_mut(&b.bundle).expect("checked alive");
    let spec = app.spec.clone();
    let capture = app.capture.counts(None);
    let p = app.process.as_mut().expect("checked alive");
    let screen = spec.screen(&p.ui.screen);
    let flutter = match (&mut p.flutter, spec.screens.iter().find_map(|s| s.flutter.as_ref())) {
        (Some(engine), Some(fspec)) => engine.snapshot(fspec, view, fg && screen.is_some_and(|s| s.flutter.is_some())),
        _ => p.flutter_ingress.clone().unwrap_or(Value::Null),
    };
    json!({
        "ok": true,
        "debugBridge": {
            "name": "ai_app_bridge", "version": SDK_VERSION, "runtimeEpoch": b.epoch,
            "h5ExecutionSchema": "aab.h5-execution/v1", "h5TargetSchema": H5_TARGET_SCHEMA, "flutterExecutionSchema": crate::flutter::EXECUTION_SCHEMA,
            "platform": "ios", "transport": "http", "host": "0.0.0.0", "port": b.port,
        },
        "app": { "bundleId": b.bundle, "name": spec.name, "versionName": spec.version_name, "buildNumber": spec.build_number, "debuggable": true, "processId": b.pid, "applicationState": if fg { "active" } else { "background" } },
        "ios": { "systemName": "iOS", "systemVersion": dev.os_version, "model": "iPhone", "name": dev.name },
        "activity": { "current": screen.map(|s| s.controller.clone()) },
        "capture": {
            "logs": capture["logs"], "network": capture["network"], "state": capture["state"], "events": capture["events"],
            "persistent": true, "pendingRecords": 0, "pendingBytes": 0, "reason": null, "countsScope": "bounded-accepted-since-attachment",
        },
        "uiObservation": p.observer.status(),
        "flutter": flutter,
        "interfaceOrientation": orientation,
        "updatedAtMs": now_ms(),
    })
}

fn view_tree(dev: &Device, st: &mut crate::device::DevState, b: &Binding) -> Value {
    let Some((tree, epoch)) = crate::native::current(dev, st, &b.bundle, false) else { return json!({ "ok": false, "error": "no_root_view_controller" }) };
    let screen = st.process(&b.bundle).map(|p| p.ui.screen.clone()).unwrap_or_default();
    let controller = st.apps.get(&b.bundle).and_then(|a| a.spec.screen(&screen)).map(|s| s.controller.clone());
    let mut count = 0;
    let root = crate::native::sdk_node(&tree, &epoch, &screen, 0, &mut count);
    json!({
        "ok": true, "activity": controller, "root": root.clone(),
        "windows": [{ "index": 0, "rootClassName": "UIWindow", "bounds": root["bounds"], "root": root }],
        "windowCount": 1, "nodeCount": count, "updatedAtMs": now_ms(),
    })
}

fn screenshot(dev: &Device, tree: Option<crate::native::El>) -> Value {
    let Some(tree) = tree else { return json!({ "ok": false, "error": "no_root_view_controller" }) };
    let scale = dev.scale();
    let (w, h, png) = crate::screenshot::render(&tree, scale);
    json!({ "ok": true, "format": "png", "width": w, "height": h, "scale": scale, "base64": crate::util::b64(&png), "updatedAtMs": now_ms() })
}
