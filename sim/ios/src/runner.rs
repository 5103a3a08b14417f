//! The device side of the WebDriverAgent Runner (`wda`): installing the
//! Runner app (`<test bundle id>.xctrunner`), starting its process (it becomes
//! the foreground app, as XCTest's runner does: the app under test is NOT
//! foreground again until it is launched), publishing
//! `Documents/ai_app_bridge_wda.json` in the Runner's container, passing the
//! WDA faults on, and stopping it (the xcodebuild double waiting on it exits).

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::{Device, RunnerSlot};
use crate::scenario::AppSpec;
use crate::util::{now_ms, sorted_json, write_atomic};

pub const DEFAULT_RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";
pub const DESCRIPTOR: &str = "Documents/ai_app_bridge_wda.json";

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

pub fn valid_bundle(b: &str) -> bool {
    !b.is_empty() && b.len() <= 255 && b.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
}

/// The device faults as the Runner reads them (a consumed drop is not re-armed).
fn runner_faults(dev: &Device) -> Value {
    let mut f = serde_json::to_value(&*dev.faults.lock().unwrap()).unwrap_or(Value::Null);
    if let Some(o) = f.as_object_mut() {
        o.remove("wdaDropNextActionReply");
    }
    f
}

/// Starts (or restarts) the Runner `bundle` on the device.
pub async fn start(dev: &Arc<Device>, bundle: &str, xcodebuild_pid: Option<u32>) -> Value {
    if !valid_bundle(bundle) {
        return err("invalid_argument", "runnerBundleId");
    }
    stop(dev, "restart").await;
    let installed = dev.st.lock().unwrap().apps.contains_key(bundle);
    if !installed {
        dev.install_spec(Arc::new(AppSpec::plain(bundle, "WebDriverAgentRunner-Runner", "14.1.1", "1")));
        dev.record("install", json!({ "bundleId": bundle, "by": "xcodebuild", "runner": true }));
    }
    let pid = match crate::lifecycle::launch(dev, bundle, true, "xctest") {
        Ok((pid, _)) => pid,
        Err(e) => return err("runner_launch_failed", format!("{e:?}")),
    };
    let container = dev.container(bundle);
    let cfg = crate::wda::RunnerConfig {
        runner_bundle_id: bundle.to_string(),
        bind: dev.tunnel_ip.parse::<IpAddr>().unwrap_or(IpAddr::from([127, 0, 0, 1])),
        process_id: pid,
        store_dir: container.join("Library/Application Support/ai_app_bridge/wda"),
    };
    let screen = Arc::new(crate::screen_impl::DeviceScreen { dev: Arc::downgrade(dev) });
    let runner = match crate::wda::Runner::start(cfg, screen).await {
        Ok(r) => r,
        Err(e) => {
            crate::lifecycle::terminate(dev, bundle, "runner-failed");
            return err("runner_start_failed", e.to_string());
        }
    };
    runner.set_faults(&runner_faults(dev));
    let descriptor = runner.descriptor();
    if let Err(e) = write_atomic(&container.join(DESCRIPTOR), sorted_json(&descriptor).as_bytes()) {
        dev.record("descriptor-write-failed", json!({ "bundleId": bundle, "error": e.to_string() }));
    }
    let (epoch, port) = (runner.epoch().to_string(), runner.port());
    *dev.runner.lock().unwrap() = Some(RunnerSlot { bundle_id: bundle.to_string(), pid, runner: Some(runner), xcodebuild_pid, started_ms: now_ms() });
    dev.runner_watch.send_replace(Some(epoch.clone()));
    dev.record("runner-start", json!({ "bundleId": bundle, "pid": pid, "runtimeEpoch": epoch, "port": port, "xcodebuildPid": xcodebuild_pid }));
    json!({ "ok": true, "runnerBundleId": bundle, "pid": pid, "runtimeEpoch": epoch, "port": port, "ip": dev.tunnel_ip, "descriptor": descriptor })
}

/// Stops the Runner, if one runs; whether one did.
pub async fn stop(dev: &Arc<Device>, why: &str) -> bool {
    let slot = dev.runner.lock().unwrap().take();
    let Some(mut slot) = slot else { return false };
    let epoch = slot.runner.as_ref().map(|r| r.epoch().to_string());
    if let Some(r) = slot.runner.take() {
        r.stop().await;
    }
    crate::lifecycle::terminate(dev, &slot.bundle_id, why);
    dev.runner_watch.send_replace(None);
    dev.record("runner-stop", json!({ "bundleId": slot.bundle_id, "pid": slot.pid, "runtimeEpoch": epoch, "why": why }));
    true
}

pub fn state(dev: &Device) -> Value {
    let slot = dev.runner.lock().unwrap();
    match slot.as_ref() {
        Some(s) => {
            let mut v = s.runner.as_ref().map(|r| r.state()).unwrap_or(json!({}));
            v["bundleId"] = json!(s.bundle_id);
            v["pid"] = json!(s.pid);
            v["xcodebuildPid"] = json!(s.xcodebuild_pid);
            v["startedMs"] = json!(s.started_ms);
            v["running"] = json!(true);
            v
        }
        None => Value::Null,
    }
}

pub fn set_faults(dev: &Device, faults: &Value) {
    if let Some(r) = dev.runner.lock().unwrap().as_ref().and_then(|s| s.runner.as_ref()) {
        r.set_faults(faults);
    }
}

/// Waits until the Runner with `epoch` is no longer the running one.
pub async fn wait_stopped(dev: &Device, epoch: &str) {
    let mut rx = dev.runner_watch.subscribe();
    let _ = rx.wait_for(|cur| cur.as_deref() != Some(epoch)).await;
}
