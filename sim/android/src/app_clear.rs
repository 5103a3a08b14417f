//! The SDK route `POST /v1/app/clear-data` (`clear-app-data` with
//! `method:"runtime"`): the app clears its own runtime data — screen values,
//! checked/focused state and its capture stores — without its process dying
//! (unlike `pm clear`). Recorded as truth `clear-data` with `method:"runtime"`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::device::{Device, now_ms};

pub fn handle(dev: &Arc<Device>, package: &str) -> (u16, Value) {
    {
        let mut ph = dev.phone.lock().unwrap();
        let Some(i) = ph.app_index(package) else { return (200, json!({"ok": false, "error": "app_not_found"})) };
        ph.apps[i].reset_runtime();
    }
    let _ = std::fs::remove_dir_all(dev.root.join("data/user/0").join(package).join("shared_prefs"));
    dev.record("clear-data", json!({ "package": package, "method": "runtime" }));
    (200, json!({"ok": true, "action": "clear-app-data", "app": {"packageName": package}, "cleared": ["values", "captureStores", "sharedPreferences"], "failures": [], "updatedAtMs": now_ms()}))
}
