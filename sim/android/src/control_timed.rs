//! Control ops for timed screen changes (tests of waits and observation):
//! `screen` shows a named screen of an app at once, `later` runs any other
//! control request after `delayMs` (its reply goes to the truth log as `later`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::device::Device;

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

/// Handles `screen` and `later`; `None` for ops it does not know.
pub fn handle(devices: &[Arc<Device>], dev: &Arc<Device>, req: &Value) -> Option<Value> {
    match req.get("op").and_then(Value::as_str)? {
        "screen" => Some(show_screen(dev, req)),
        "later" => {
            let delay = req.get("delayMs").and_then(Value::as_u64).unwrap_or(0);
            let Some(then) = req.get("then").filter(|t| t.is_object()).cloned() else { return Some(err("missing_argument", "then")) };
            let mut then = then;
            // The delayed request targets the same device unless it names another.
            if then.get("serial").is_none() {
                then["serial"] = json!(dev.serial);
            }
            let (devices, dev) = (devices.to_vec(), dev.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let reply = Box::pin(crate::control::handle(&devices, &then)).await;
                dev.record("later", json!({ "request": then, "reply": reply }));
            });
            Some(json!({ "ok": true, "scheduledInMs": delay }))
        }
        _ => None,
    }
}

fn show_screen(dev: &Device, req: &Value) -> Value {
    let (Some(package), Some(screen)) = (req.get("package").and_then(Value::as_str), req.get("screen").and_then(Value::as_str)) else {
        return err("missing_argument", "package, screen");
    };
    let mut ph = dev.phone.lock().unwrap();
    let Some(i) = ph.app_index(package) else { return err("unknown_package", package) };
    let app = &mut ph.apps[i];
    let Some(s) = app.spec.screens.iter().position(|s| s.name == screen) else { return err("unknown_screen", screen) };
    app.screen = s;
    app.focused = None;
    drop(ph);
    dev.record("screen", json!({ "package": package, "screen": screen }));
    json!({ "ok": true })
}
