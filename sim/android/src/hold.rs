//! Control op `hold`: keeps a device's action replies in hand until released, so
//! a test can hold one phone mid-action for as long as it needs — no timing —
//! and show that other devices (or other runtimes) are not waiting on it.
//!
//! While a device is held, an SDK action route (`POST /v1/action/…`) and an
//! `input` tool call still take effect at once (the phone changed, the truth log
//! has it), but their reply waits until `hold` with `"on": false`. Each reply that
//! starts waiting records truth `held` (`{what, path|argv}`), the ground truth
//! that the action is on the phone and its caller is still waiting; the release
//! records `released` with how many replies were waiting.
//!
//! `{"op":"hold","serial":S,"on":true|false}`; `on` omitted reads the state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::device::Device;

/// Per device root (unique per simulator instance, unlike a port number).
static HOLDS: Mutex<Option<HashMap<PathBuf, watch::Sender<bool>>>> = Mutex::new(None);

fn sender(dev: &Device) -> watch::Sender<bool> {
    HOLDS.lock().unwrap().get_or_insert_with(HashMap::new).entry(dev.root.clone()).or_insert_with(|| watch::Sender::new(false)).clone()
}

fn is_held(dev: &Device) -> bool {
    HOLDS.lock().unwrap().as_ref().and_then(|m| m.get(&dev.root)).is_some_and(|s| *s.borrow())
}

/// The control op.
pub fn control(dev: &Device, req: &Value) -> Value {
    let tx = sender(dev);
    if let Some(on) = req.get("on").and_then(Value::as_bool) {
        // Count the waiters before the release wakes them (they drop their receivers).
        let waiting = tx.receiver_count();
        let was = tx.send_replace(on);
        if was && !on {
            dev.record("released", json!({ "waiting": waiting }));
        }
    }
    json!({ "ok": true, "held": *tx.borrow(), "waiting": tx.receiver_count() })
}

async fn wait(dev: &Device, what: &str, detail: Value) {
    if !is_held(dev) {
        return;
    }
    let mut rx = sender(dev).subscribe();
    dev.record("held", json!({ "what": what, "detail": detail }));
    let _ = rx.wait_for(|on| !*on).await;
}

/// Called after an SDK request took effect, before its reply is written.
pub async fn after_sdk(dev: &Device, path: &str) {
    if path.starts_with("/v1/action/") {
        wait(dev, "sdk-action", json!(path)).await;
    }
}

/// Called after a tool ran, before its output and exit code go back to the shell.
pub async fn after_tool(dev: &Device, argv: &[String]) {
    if argv.first().is_some_and(|a| a == "input") {
        wait(dev, "input", json!(argv)).await;
    }
}
