//! The SDK's on-demand UI observer (`POST /v1/ui/observation`): one lease at a
//! time per app process, 100..5000 ms, sampling every 100 ms until it expires or
//! is stopped. State lives per runtimeEpoch, so a restarted process starts with
//! no lease (like a fresh SDK). Control `state` and `GET /v1/status` report it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde_json::{Value, json};

use crate::device::{now_ms, uuid4};

pub const SCHEMA: &str = "aab.ui-observation/v1";
pub const MAX_DURATION_MS: u64 = 5000;
pub const INTERVAL_MS: u64 = 100;

struct Lease {
    id: String,
    started: Instant,
    started_at_ms: u64,
    duration_ms: u64,
    /// Milliseconds after start at which `stop` ended it.
    stopped_after_ms: Option<u64>,
}

impl Lease {
    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
    /// `active`, `expired` (ran its duration) or `stopped` (ended early).
    fn state(&self) -> &'static str {
        match self.stopped_after_ms {
            Some(_) => "stopped",
            None if self.elapsed_ms() < self.duration_ms => "active",
            None => "expired",
        }
    }
}

/// Leases by runtimeEpoch (epochs are unique per process start).
fn leases() -> &'static Mutex<HashMap<String, Lease>> {
    static LEASES: OnceLock<Mutex<HashMap<String, Lease>>> = OnceLock::new();
    LEASES.get_or_init(Default::default)
}

fn status_of(lease: Option<&Lease>) -> Value {
    let Some(l) = lease else {
        return json!({ "schemaVersion": SCHEMA, "mode": "on-demand", "active": false, "state": "idle", "leaseId": null, "remainingMs": 0, "maxDurationMs": MAX_DURATION_MS, "intervalMs": INTERVAL_MS, "sampleCount": 0, "durationMs": null, "startedAtMs": null, "expiresAtMs": null });
    };
    let state = l.state();
    let ran = l.stopped_after_ms.unwrap_or_else(|| l.elapsed_ms()).min(l.duration_ms);
    json!({
        "schemaVersion": SCHEMA, "mode": "on-demand",
        "active": state == "active", "state": state, "leaseId": l.id,
        "remainingMs": if state == "active" { l.duration_ms - l.elapsed_ms() } else { 0 },
        "maxDurationMs": MAX_DURATION_MS, "intervalMs": INTERVAL_MS,
        // A sample at start, then one per interval while the lease ran.
        "sampleCount": 1 + ran / INTERVAL_MS,
        "durationMs": l.duration_ms, "startedAtMs": l.started_at_ms, "expiresAtMs": l.started_at_ms + l.duration_ms,
    })
}

/// The observer status of the process with this runtimeEpoch.
pub fn status(epoch: &str) -> Value {
    status_of(leases().lock().unwrap().get(epoch))
}

fn refuse(code: &str, message: &str, current: Value) -> Value {
    json!({ "ok": false, "error": code, "message": message, "observer": current })
}

/// `POST /v1/ui/observation` of the process with this runtimeEpoch.
pub fn handle(epoch: &str, body: &[u8]) -> Value {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return json!({ "ok": false, "error": "invalid_json" }) };
    let mut all = leases().lock().unwrap();
    let current = all.get(epoch);
    let with_ok = |mut s: Value| {
        s["ok"] = json!(true);
        s
    };
    match v.get("operation").and_then(Value::as_str) {
        Some("start") => {
            let d = v.get("durationMs").and_then(Value::as_u64).unwrap_or(0);
            if !(100..=MAX_DURATION_MS).contains(&d) {
                return refuse("invalid_ui_observation_duration", "durationMs must be 100..5000", status_of(current));
            }
            if current.is_some_and(|l| l.state() == "active") {
                return refuse("ui_observation_busy", "another observation lease is active", status_of(current));
            }
            let lease = Lease { id: uuid4(), started: Instant::now(), started_at_ms: now_ms(), duration_ms: d, stopped_after_ms: None };
            all.insert(epoch.to_string(), lease);
            with_ok(status_of(all.get(epoch)))
        }
        Some("stop") => {
            let wanted = v.get("leaseId").and_then(Value::as_str);
            match all.get_mut(epoch) {
                Some(l) if Some(l.id.as_str()) == wanted => {
                    // Stopping an expired or stopped lease is a no-op that reports it.
                    if l.state() == "active" {
                        l.stopped_after_ms = Some(l.elapsed_ms());
                    }
                    with_ok(status_of(Some(l)))
                }
                other => refuse("ui_observation_lease_mismatch", "no such lease in this process", status_of(other.map(|l| &*l))),
            }
        }
        Some("status") => with_ok(status_of(current)),
        _ => json!({ "ok": false, "error": "invalid_operation" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_starts_refuses_a_second_and_stops_only_with_its_id() {
        let epoch = format!("test-{}", uuid4());
        let bad = handle(&epoch, br#"{"operation":"start","durationMs":99}"#);
        assert_eq!(bad["error"], "invalid_ui_observation_duration");
        let started = handle(&epoch, br#"{"operation":"start","durationMs":5000}"#);
        assert_eq!((started["ok"].clone(), started["active"].clone(), started["state"].clone()), (json!(true), json!(true), json!("active")));
        assert_eq!(handle(&epoch, br#"{"operation":"start","durationMs":100}"#)["error"], "ui_observation_busy");
        assert_eq!(handle(&epoch, br#"{"operation":"stop","leaseId":"nope"}"#)["error"], "ui_observation_lease_mismatch");
        let stop = json!({"operation": "stop", "leaseId": started["leaseId"]}).to_string();
        let stopped = handle(&epoch, stop.as_bytes());
        assert_eq!((stopped["active"].clone(), stopped["state"].clone()), (json!(false), json!("stopped")));
        assert_eq!(status(&epoch)["state"], "stopped");
        assert_eq!(status("another-epoch")["state"], "idle");
    }
}
