//! The control interface: ground truth, faults and device operations, in
//! process (`Simulator::control`) or over an authenticated loopback socket.
//! Socket protocol: the token line first (≤256 bytes, 5 s) — nothing else is
//! read before it matches — then one JSON request per line (≤1 MiB), one JSON
//! reply per line, closed after 60 s idle. The `devicectl` / `xcodebuild`
//! doubles use it; `runner-wait` holds its connection until the Runner stops
//! (and a closed connection — a killed xcodebuild — stops the Runner).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::Shared;
use crate::device::Device;

const TOKEN_LINE: u64 = 256;
const REQUEST_LINE: u64 = 1024 * 1024;
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

/// Constant-time comparison (the token is a credential).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((sock, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let (rd, mut wr) = sock.into_split();
            let mut rd = BufReader::new(rd);
            let mut line = Vec::new();
            let authed = tokio::time::timeout(AUTH_TIMEOUT, (&mut rd).take(TOKEN_LINE).read_until(b'\n', &mut line)).await;
            if !matches!(authed, Ok(Ok(n)) if n > 0) || !same(line.trim_ascii(), shared.token.as_bytes()) {
                let _ = wr.write_all(b"{\"ok\":false,\"error\":\"bad_token\"}\n").await;
                return;
            }
            loop {
                line.clear();
                let r = tokio::time::timeout(IDLE_TIMEOUT, (&mut rd).take(REQUEST_LINE).read_until(b'\n', &mut line)).await;
                let n = match r {
                    Ok(Ok(n)) => n,
                    _ => return,
                };
                if n == 0 {
                    return;
                }
                if line.last() != Some(&b'\n') {
                    let _ = wr.write_all(b"{\"ok\":false,\"error\":\"request_too_large\"}\n").await;
                    return;
                }
                let reply = match serde_json::from_slice::<Value>(&line) {
                    Ok(req) if req["op"] == "runner-wait" => runner_wait(&shared, &req, &mut rd).await,
                    Ok(req) => handle(&shared, req).await,
                    Err(e) => err("invalid_json", e.to_string()),
                };
                let mut text = reply.to_string();
                text.push('\n');
                if wr.write_all(text.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// Holds until the Runner `runtimeEpoch` stops; if the peer goes away first
/// (the xcodebuild double was killed), the XCTest session ends: the Runner stops.
async fn runner_wait<R: AsyncReadExt + Unpin>(shared: &Arc<Shared>, req: &Value, rd: &mut R) -> Value {
    let Some(dev) = pick(&shared.devices, req) else { return err("no_device", "no such device") };
    let Some(epoch) = req["runtimeEpoch"].as_str().map(str::to_string) else { return err("missing_argument", "runtimeEpoch") };
    let xcodebuild = dev.runner.lock().unwrap().as_ref().and_then(|r| r.xcodebuild_pid);
    let mut buf = [0u8; 64];
    let reply = tokio::select! {
        _ = crate::runner::wait_stopped(&dev, &epoch) => json!({ "ok": true, "stopped": true }),
        _ = rd.read(&mut buf) => {
            let same_runner = dev.runner_watch.borrow().as_deref() == Some(epoch.as_str());
            if same_runner {
                crate::runner::stop(&dev, "xcodebuild-exited").await;
            }
            json!({ "ok": true, "stopped": true, "peerClosed": true })
        }
    };
    // The double exits by itself now: its pid must not be killed later (it may be reused).
    if let Some(pid) = xcodebuild {
        shared.children.lock().unwrap().retain(|p| *p != pid);
    }
    reply
}

fn s<'a>(req: &'a Value, k: &str) -> Option<&'a str> {
    req.get(k).and_then(Value::as_str)
}

/// The device a request names (`udid`, or `device` = identifier/UDID/serial/name), default the first.
pub fn pick(devices: &[Arc<Device>], req: &Value) -> Option<Arc<Device>> {
    match s(req, "udid").or(s(req, "device")) {
        Some(id) => devices.iter().find(|d| d.udid.eq_ignore_ascii_case(id) || d.identifier.eq_ignore_ascii_case(id) || d.serial == id || d.name == id).cloned(),
        None => devices.first().cloned(),
    }
}

pub fn state(dev: &Device) -> Value {
    let st = dev.st.lock().unwrap();
    let apps: Vec<Value> = st
        .apps
        .values()
        .map(|a| {
            let p = a.process.as_ref();
            json!({
                "bundleId": a.spec.bundle_id, "name": a.spec.name, "versionName": a.spec.version_name, "buildNumber": a.spec.build_number, "sdk": a.spec.sdk,
                "container": a.container, "running": p.is_some(), "pid": p.map(|p| p.pid), "runtimeEpoch": p.map(|p| p.epoch.clone()), "port": p.map(|p| p.port),
                "foreground": st.foreground.as_deref() == Some(a.spec.bundle_id.as_str()) && p.is_some(),
                "screen": p.map(|p| p.ui.screen.clone()), "ui": p.map(|p| p.ui.to_json()),
                "flutter": p.and_then(|p| p.flutter.as_ref().map(|e| e.state())),
                "execution": p.map(|p| p.exec.active_json()),
                "previous": a.previous.as_ref().map(|(e, pid, port)| json!({ "runtimeEpoch": e, "pid": pid, "port": port })),
                "capture": a.capture.counts(None),
            })
        })
        .collect();
    let processes: Vec<Value> = st.apps.values().filter_map(|a| a.process.as_ref().map(|p| json!({ "bundleId": a.spec.bundle_id, "pid": p.pid, "runtimeEpoch": p.epoch, "port": p.port, "startedMs": p.started_ms }))).collect();
    let f = dev.faults.lock().unwrap().clone();
    let foreground = st.foreground.clone().filter(|b| st.process(b).is_some());
    let orientation = st.orientation.clone();
    let tunnel = st.tunnel_connected;
    drop(st);
    json!({
        "ok": true,
        "device": {
            "udid": dev.udid, "identifier": dev.identifier, "serial": dev.serial, "name": dev.name, "productType": dev.product_type, "osVersionNumber": dev.os_version,
            "tunnelState": if tunnel { "connected" } else { "disconnected" }, "tunnelIPAddress": dev.tunnel_ip,
            "developerModeStatus": if f.developer_mode_disabled { "disabled" } else { "enabled" }, "ddiServicesAvailable": !f.ddi_unavailable,
        },
        "foreground": foreground, "orientation": orientation,
        "apps": apps, "processes": processes,
        "runner": crate::runner::state(dev),
        "faults": f,
        "browserPid": dev.web().and_then(|w| w.browser_pid()),
    })
}

/// Handles one control request.
pub async fn handle(shared: &Arc<Shared>, req: Value) -> Value {
    let op = s(&req, "op").unwrap_or("");
    match op {
        "devices" => return json!({ "ok": true, "devices": shared.devices.iter().map(|d| json!({ "udid": d.udid, "identifier": d.identifier, "serial": d.serial, "name": d.name })).collect::<Vec<_>>() }),
        "devicectl" => return crate::devicectl::handle(&shared.devices, &req).await,
        "register-child" => {
            if let Some(pid) = req["pid"].as_u64() {
                shared.children.lock().unwrap().push(pid as u32);
            }
            return json!({ "ok": true });
        }
        _ => {}
    }
    let Some(dev) = pick(&shared.devices, &req) else { return err("no_device", "no such device") };
    let bundle = s(&req, "bundleId");
    match op {
        "state" => state(&dev),
        "truth" => {
            let since = req["since"].as_u64().unwrap_or(0);
            let kind = s(&req, "kind");
            let items: Vec<Value> = dev.truth_since(since).into_iter().filter(|r| kind.is_none_or(|k| r["kind"] == k)).collect();
            json!({ "ok": true, "items": items })
        }
        "faults" => faults(&dev, &req),
        "launch" => {
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            match crate::lifecycle::launch(&dev, b, req["terminateExisting"].as_bool().unwrap_or(true), "control") {
                Ok((pid, epoch)) => {
                    let port = dev.st.lock().unwrap().process(b).map(|p| p.port);
                    json!({ "ok": true, "pid": pid, "runtimeEpoch": epoch, "port": port })
                }
                Err(e) => err("launch_failed", format!("{e:?}")),
            }
        }
        "terminate" => {
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            json!({ "ok": true, "terminated": crate::lifecycle::terminate(&dev, b, "control") })
        }
        "install" => match crate::lifecycle::install(&dev, &req["info"]) {
            Ok(spec) => json!({ "ok": true, "bundleId": spec.bundle_id }),
            Err(e) => err("install_failed", e),
        },
        "tunnel" => {
            let connected = req["connected"].as_bool().unwrap_or(true);
            dev.st.lock().unwrap().tunnel_connected = connected;
            dev.record("tunnel", json!({ "connected": connected }));
            json!({ "ok": true, "connected": connected })
        }
        "start-runner" => {
            let b = s(&req, "runnerBundleId").unwrap_or(crate::runner::DEFAULT_RUNNER).to_string();
            let xpid = req["xcodebuildPid"].as_u64().map(|p| p as u32);
            if let Some(p) = xpid {
                shared.children.lock().unwrap().push(p);
            }
            crate::runner::start(&dev, &b, xpid).await
        }
        "stop-runner" => json!({ "ok": true, "stopped": crate::runner::stop(&dev, "control").await }),
        "native" => {
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            let st = dev.st.lock().unwrap();
            crate::native::describe(&dev, &st, b)
        }
        "tap" => {
            // A touch by the control interface (not through WDA): for test set-up.
            let b = bundle.map(str::to_string).or_else(|| dev.st.lock().unwrap().foreground.clone());
            let Some(b) = b else { return err("no_foreground", "no app is foreground") };
            let (x, y) = (req["x"].as_f64().unwrap_or(0.0), req["y"].as_f64().unwrap_or(0.0));
            let hit = {
                let mut st = dev.st.lock().unwrap();
                crate::native::tap(&dev, &mut st, &b, x, y, "control").map(|o| o.hit)
            };
            crate::web::sync(&dev);
            json!({ "ok": hit.is_some(), "hit": hit.flatten() })
        }
        "input" => {
            // Replaces an editor's value (test set-up, not through WDA).
            let (Some(b), Some(id), Some(text)) = (bundle, s(&req, "id"), s(&req, "text")) else { return err("missing_argument", "bundleId, id, text") };
            let mut st = dev.st.lock().unwrap();
            let editable = crate::native::current(&dev, &st, b, false).and_then(|(t, _)| t.find(id).map(|e| e.kind.editable())).unwrap_or(false);
            if !editable {
                return err("invalid_argument", format!("{id} is not an editor on the current screen"));
            }
            crate::native::set_value(&mut st, b, id, text.to_string());
            drop(st);
            dev.record("native-input", json!({ "by": "control", "bundleId": b, "element": id, "textLength": text.chars().count() }));
            json!({ "ok": true })
        }
        "goto" => {
            let (Some(b), Some(screen)) = (bundle, s(&req, "screen")) else { return err("missing_argument", "bundleId, screen") };
            let ok = {
                let mut st = dev.st.lock().unwrap();
                let spec = st.apps.get(b).map(|a| a.spec.clone());
                match (spec, st.process_mut(b)) {
                    (Some(spec), Some(p)) if spec.screen(screen).is_some() => {
                        p.ui.screen = screen.to_string();
                        p.ui.focused = None;
                        if let Some(f) = spec.screen(screen).and_then(|s| s.flutter.as_ref())
                            && p.flutter.is_none()
                        {
                            p.flutter = Some(crate::flutter::Engine::new(f));
                        }
                        true
                    }
                    _ => false,
                }
            };
            if !ok {
                return err("invalid_argument", "the app is not running or has no such screen");
            }
            dev.record("screen", json!({ "bundleId": b, "screen": screen, "by": "control" }));
            crate::web::sync(&dev);
            json!({ "ok": true })
        }
        "orientation" => {
            let Some(o) = s(&req, "orientation") else { return err("missing_argument", "orientation") };
            dev.st.lock().unwrap().orientation = o.to_string();
            dev.record("orientation", json!({ "by": "control", "observed": o }));
            crate::web::sync(&dev);
            json!({ "ok": true })
        }
        "h5" => {
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            crate::h5::control(&dev, b, s(&req, "webViewId"), s(&req, "expression")).await
        }
        "webview" => {
            // Sets a WebView's page zoom (non-default zoom is refused by the SDK's H5 routes).
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            let pid = dev.st.lock().unwrap().process(b).map(|p| p.pid).unwrap_or(0);
            let views = crate::web::find(&dev, b, pid, s(&req, "webViewId"));
            let Some(v) = views.first() else { return err("no_webview", "the app's current screen shows no WebView") };
            if let Some(z) = req["pageZoom"].as_f64().filter(|z| *z > 0.0 && z.is_finite()) {
                *v.page_zoom.lock().unwrap() = z;
                dev.record("webview", json!({ "bundleId": b, "webViewId": v.key.3, "pageZoom": z, "by": "control" }));
            }
            json!({ "ok": true, "webViewId": v.key.3, "url": v.url, "pageZoom": *v.page_zoom.lock().unwrap(), "open": v.is_open() })
        }
        "h5-requests" => match dev.web() {
            Some(w) => w.requests(req["since"].as_u64().unwrap_or(0)),
            None => err("h5_unavailable", "no web host"),
        },
        "flutter" | "flutter-restart" => {
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            let mut st = dev.st.lock().unwrap();
            let spec = st.apps.get(b).map(|a| a.spec.clone());
            let Some(p) = st.process_mut(b) else { return err("not_running", b) };
            let fspec = spec.and_then(|s| s.screens.iter().find_map(|x| x.flutter.clone()));
            if op == "flutter-restart" {
                let Some(fspec) = fspec else { return err("no_flutter", "the app has no Flutter view") };
                p.flutter = Some(crate::flutter::Engine::new(&fspec));
                let epoch = p.flutter.as_ref().map(|e| e.epoch.clone());
                drop(st);
                dev.record("flutter-restart", json!({ "bundleId": b, "runtimeEpoch": epoch }));
                return json!({ "ok": true, "runtimeEpoch": epoch });
            }
            json!({ "ok": true, "engine": p.flutter.as_ref().map(|e| e.state()) })
        }
        "descriptor" => {
            // Reads (or, with `remove`, deletes) the SDK descriptor of an app.
            let Some(b) = bundle else { return err("missing_argument", "bundleId") };
            let path = crate::sdk::descriptor_path(&dev, b);
            if req["remove"].as_bool() == Some(true) {
                let _ = std::fs::remove_file(&path);
                return json!({ "ok": true });
            }
            match std::fs::read_to_string(&path) {
                Ok(t) => json!({ "ok": true, "text": t, "descriptor": serde_json::from_str::<Value>(&t).ok() }),
                Err(e) => err("not_found", e.to_string()),
            }
        }
        "xcodebuild-event" => {
            dev.record("xcodebuild", req["event"].clone());
            json!({ "ok": true })
        }
        _ => err("unknown_op", format!("unknown op {op:?}")),
    }
}

fn faults(dev: &Arc<Device>, req: &Value) -> Value {
    let before = dev.faults.lock().unwrap().clone();
    let next = if req["clear"].as_bool() == Some(true) { crate::faults::Faults::default() } else { before.clone() };
    let next = match req.get("set").and_then(Value::as_object) {
        Some(set) => match next.merged(set) {
            Ok(f) => f,
            Err(e) => return err("invalid_argument", e),
        },
        None => next,
    };
    *dev.faults.lock().unwrap() = next.clone();
    dev.record("faults", serde_json::to_value(&next).unwrap_or(Value::Null));
    crate::runner::set_faults(dev, req);
    // Descriptor faults take effect on the published files now.
    if before.any_descriptor_fault() || next.any_descriptor_fault() {
        let bundles: Vec<String> = dev.st.lock().unwrap().apps.iter().filter(|(_, a)| a.process.is_some() && a.spec.sdk).map(|(b, _)| b.clone()).collect();
        for b in bundles {
            crate::sdk::publish(dev, &b);
        }
    }
    json!({ "ok": true, "faults": next })
}
