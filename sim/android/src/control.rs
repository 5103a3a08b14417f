//! The control interface (not through adb): ground truth and fault injection.
//! Line-delimited JSON over a loopback TCP socket; every request carries the
//! token printed at start (and written to `<base>/control.token`). The same
//! requests can be handled in-process with `Simulator::control`.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::device::Device;
use crate::faults::Faults;
use crate::lifecycle;
use crate::tools;

pub async fn serve(listener: TcpListener, token: String, devices: Vec<Arc<Device>>) {
    while let Ok((s, _)) = listener.accept().await {
        let (token, devices) = (token.clone(), devices.clone());
        tokio::spawn(async move {
            let (rd, mut wr) = s.into_split();
            let mut lines = BufReader::new(rd).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let reply = match serde_json::from_str::<Value>(&line) {
                    Ok(req) if req.get("token").and_then(Value::as_str) == Some(token.as_str()) => handle(&devices, &req).await,
                    Ok(_) => json!({ "ok": false, "error": "bad_token" }),
                    Err(e) => json!({ "ok": false, "error": "invalid_json", "message": e.to_string() }),
                };
                let mut text = reply.to_string();
                text.push('\n');
                if wr.write_all(text.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

fn s<'a>(req: &'a Value, k: &str) -> Option<&'a str> {
    req.get(k).and_then(Value::as_str)
}

/// Handles one control request (`op` + arguments; `serial` picks the device, default the first).
pub async fn handle(devices: &[Arc<Device>], req: &Value) -> Value {
    let op = s(req, "op").unwrap_or("");
    if op == "devices" {
        return json!({ "ok": true, "devices": devices.iter().map(|d| json!({ "serial": d.serial, "port": d.port, "root": d.root, "bootId": d.boot_id() })).collect::<Vec<_>>() });
    }
    let dev = match s(req, "serial") {
        Some(serial) => devices.iter().find(|d| d.serial == serial),
        None => devices.first(),
    };
    let Some(dev) = dev.cloned() else { return err("no_device", "no such device") };
    let pkg = s(req, "package");
    match op {
        "actions" => crate::sdk_actions::actions(&dev),
        // The SDK's native action slot of one app process (by its runtime epoch).
        "native-slot" => json!({ "ok": true, "active": crate::sdk_actions::active_identity(req.get("runtimeEpoch").and_then(Value::as_str).unwrap_or_default()) }),
        "effects" => {
            // Ground truth of what changed the phone, in order (a view of `truth`).
            let since = req.get("since").and_then(Value::as_u64).unwrap_or(0);
            let items: Vec<Value> = dev.truth_since(since).into_iter().filter(|r| EFFECT_KINDS.contains(&r["kind"].as_str().unwrap_or(""))).collect();
            json!({ "ok": true, "items": items })
        }
        "truth" => {
            let since = req.get("since").and_then(Value::as_u64).unwrap_or(0);
            let kind = s(req, "kind");
            let items: Vec<Value> = dev.truth_since(since).into_iter().filter(|r| kind.is_none_or(|k| r["kind"] == k)).collect();
            json!({ "ok": true, "items": items })
        }
        "state" => {
            let ph = dev.phone.lock().unwrap();
            let apps: Vec<Value> = ph
                .apps
                .iter()
                .map(|a| {
                    json!({
                        "package": a.package, "installed": a.installed, "uid": a.uid(),
                        "pid": a.process.as_ref().map(|p| p.pid), "runtimeEpoch": a.process.as_ref().filter(|_| a.spec.sdk).map(|p| p.epoch.clone()),
                        "screen": a.spec.screens.get(a.screen).map(|s| s.name.clone()), "activity": a.current_activity(),
                        "values": a.values, "focused": a.focused, "permissions": a.permissions, "appops": a.appops,
                        "uiObservation": a.process.as_ref().filter(|_| a.spec.sdk).map(|p| crate::observation::status(&p.epoch)),
                        "capture": { "logs": a.capture.logs, "network": a.capture.network, "state": a.capture.state, "events": a.capture.events },
                    })
                })
                .collect();
            json!({ "ok": true, "serial": dev.serial, "bootId": dev.boot_id(), "uptimeMs": dev.uptime().as_millis() as u64, "foreground": ph.foreground_app().map(|a| a.package.clone()), "keyboard": ph.keyboard, "apps": apps, "faults": *dev.faults.lock().unwrap() })
        }
        "tap" => {
            let (x, y) = (req["x"].as_i64().unwrap_or(0) as i32, req["y"].as_i64().unwrap_or(0) as i32);
            tools::android_tap(&dev, x, y);
            json!({ "ok": true })
        }
        "text" => {
            tools::android_text(&dev, s(req, "text").unwrap_or(""));
            json!({ "ok": true })
        }
        "keyevent" => {
            tools::android_key(&dev, req["keyCode"].as_u64().unwrap_or(4) as u32);
            json!({ "ok": true })
        }
        "launch" => match pkg {
            Some(p) => match lifecycle::launch(&dev, p, s(req, "activity")) {
                Ok(c) => json!({ "ok": true, "component": c }),
                Err(e) => err("launch_failed", e),
            },
            None => err("missing_argument", "package"),
        },
        "foreground" => match lifecycle::set_foreground(&dev, pkg) {
            Ok(()) => json!({ "ok": true }),
            Err(e) => err("foreground_failed", e),
        },
        "crash" | "restart" => match pkg {
            Some(p) => match lifecycle::crash(&dev, p, op == "restart" || req["restart"].as_bool() == Some(true)) {
                Ok(()) => json!({ "ok": true, "pid": dev.phone.lock().unwrap().pid_of(p) }),
                Err(e) => err("crash_failed", e),
            },
            None => err("missing_argument", "package"),
        },
        "reboot" => {
            lifecycle::reboot(&dev, req["offlineMs"].as_u64().unwrap_or(0));
            json!({ "ok": true, "bootId": dev.boot_id() })
        }
        "disconnect" => {
            let ms = req["offlineMs"].as_u64().unwrap_or(0);
            *dev.offline_until.lock().unwrap() = Some(std::time::Instant::now() + std::time::Duration::from_millis(ms));
            dev.drop_connections();
            dev.record("disconnect", json!({ "offlineMs": ms }));
            json!({ "ok": true })
        }
        "faults" => {
            let mut f = dev.faults.lock().unwrap();
            if req.get("reset").and_then(Value::as_bool) == Some(true) {
                *f = Faults::default();
            }
            if let Some(set) = req.get("set").and_then(Value::as_object) {
                let mut cur = serde_json::to_value(&*f).unwrap();
                for (k, v) in set {
                    cur[k] = v.clone();
                }
                match serde_json::from_value::<Faults>(cur) {
                    Ok(nf) => *f = nf,
                    Err(e) => return err("invalid_argument", e.to_string()),
                }
            }
            let now = f.clone();
            drop(f);
            dev.record("faults", serde_json::to_value(&now).unwrap());
            json!({ "ok": true, "faults": now })
        }
        "descriptor" => {
            // Overwrites an app's endpoint descriptor (descriptor faults): `value` (JSON) or `raw` (text); `remove` deletes it.
            let Some(p) = pkg else { return err("missing_argument", "package") };
            let path = crate::sdk::descriptor_path(&dev, p);
            let r = if req["remove"].as_bool() == Some(true) {
                std::fs::remove_file(&path)
            } else if let Some(raw) = s(req, "raw") {
                crate::rootfs::write_atomic(&path, raw.as_bytes())
            } else if let Some(v) = req.get("value") {
                crate::rootfs::write_atomic(&path, v.to_string().as_bytes())
            } else {
                return match std::fs::read_to_string(&path) {
                    Ok(t) => json!({ "ok": true, "descriptor": serde_json::from_str::<Value>(&t).unwrap_or(Value::String(t)) }),
                    Err(e) => err("not_found", e.to_string()),
                };
            };
            dev.record("fault", json!({ "kind": "descriptor", "package": p }));
            match r {
                Ok(()) => json!({ "ok": true }),
                Err(e) => err("io_error", e.to_string()),
            }
        }
        "permission" => {
            let (Some(p), Some(perm)) = (pkg, s(req, "permission")) else { return err("missing_argument", "package, permission") };
            let granted = req["granted"].as_bool().unwrap_or(true);
            let mut ph = dev.phone.lock().unwrap();
            let Some(i) = ph.app_index(p) else { return err("unknown_package", p) };
            ph.apps[i].permissions.insert(perm.to_string(), granted);
            drop(ph);
            dev.record("permission", json!({ "package": p, "permission": perm, "granted": granted, "via": "control" }));
            json!({ "ok": true })
        }
        "logcat" => {
            let pid = pkg.and_then(|p| dev.phone.lock().unwrap().pid_of(p)).unwrap_or(1000);
            let level = s(req, "level").and_then(|l| l.chars().next()).unwrap_or('I');
            dev.phone.lock().unwrap().log(pid, level, s(req, "tag").unwrap_or("Sim"), s(req, "message").unwrap_or(""));
            json!({ "ok": true })
        }
        "hold" => crate::hold::control(&dev, req),
        "executors" => crate::executor::control(&dev),
        "installs" => crate::installer::control(&dev),
        "permission-request" => crate::permission_dialog::request(&dev, req),
        "uia" | "uia-restart" | "uia-kill" | "system-dialog" => crate::uia::control(&dev, req),
        "flutter" | "flutter-restart" | "flutter-rebuild" | "flutter-h5-reregister" => crate::flutter::control(&dev, req),
        "log-ring" => {
            // Ground truth of the logcat ring: every line held, oldest first, with its buffer.
            let ph = dev.phone.lock().unwrap();
            let lines: Vec<Value> = ph.logcat.iter().map(|l| json!({ "atMs": l.at_ms, "pid": l.pid, "tid": l.tid, "level": l.level.to_string(), "tag": l.tag, "message": l.message, "buffer": crate::tools::logcat::buffer_of(l) })).collect();
            json!({ "ok": true, "total": ph.logcat_total, "lines": lines })
        }
        "capture" => {
            let Some(p) = pkg else { return err("missing_argument", "package") };
            let kind = s(req, "kind").unwrap_or("log").to_string();
            let mut ph = dev.phone.lock().unwrap();
            let Some(i) = ph.app_index(p) else { return err("unknown_package", p) };
            let item = ph.apps[i].capture_record(&kind, req.get("record").cloned().unwrap_or(json!({})), None);
            json!({ "ok": true, "item": item })
        }
        "listen" => {
            // A simulator-held listener for `localabstract:NAME`/`tcp:PORT` that answers every connection with `reply` and closes.
            let Some(name) = s(req, "name") else { return err("missing_argument", "name") };
            let reply = s(req, "reply").unwrap_or("").to_string();
            let mut rx = dev.listen(name);
            lifecycle::write_net_unix(&dev);
            tokio::spawn(async move {
                while let Some(mut io) = rx.recv().await {
                    let reply = reply.clone();
                    tokio::spawn(async move {
                        let _ = io.write_all(reply.as_bytes()).await;
                        let _ = io.shutdown().await;
                    });
                }
            });
            json!({ "ok": true })
        }
        "webviews" | "webview-set" | "webview-eval" | "h5-requests" => crate::webview::control(&dev, req).await,
        _ => crate::control_timed::handle(devices, &dev, req).unwrap_or_else(|| err("unknown_op", format!("unknown op {op:?}"))),
    }
}

/// Truth kinds that are effects on the phone (control `effects`): input, launches,
/// data/permission/app-op changes, signals to app processes, log clears.
pub const EFFECT_KINDS: &[&str] = &["tap", "text", "keyevent", "swipe", "launch", "force-stop", "clear-data", "permission", "appops", "signal", "logcat-clear", "install", "uninstall", "uia-tap", "system-dialog-answer"];
