//! The SDK's on-demand UI observer (protocols §4.9, `POST /v1/ui/observation`):
//! one lease at a time, `durationMs` 1..5000, `start` / `status` / `stop`; each
//! status read while active takes one sample of the view tree.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::uuid_upper;

const MAX_DURATION_MS: u64 = 5000;
const SCHEMA: &str = "aab.ui-observation/v1";

#[derive(Default)]
pub struct Observer {
    lease: Option<(String, Instant, Duration)>,
    samples: u64,
    max_sample_ms: u64,
}

fn fail(code: &str) -> Value {
    json!({ "ok": false, "error": code, "message": format!("UI observation rejected: {code}"), "dispatched": false, "ambiguous": false })
}

impl Observer {
    fn live(&mut self) -> Option<(String, u64)> {
        let (id, start, d) = self.lease.clone()?;
        let elapsed = start.elapsed();
        if elapsed >= d {
            self.lease = None;
            return None;
        }
        Some((id, (d - elapsed).as_millis() as u64))
    }

    pub fn status(&mut self) -> Value {
        let live = self.live();
        json!({
            "ok": true, "schemaVersion": SCHEMA, "mode": "on-demand", "active": live.is_some(),
            "leaseId": live.as_ref().map(|l| l.0.clone()), "remainingMs": live.as_ref().map(|l| l.1).unwrap_or(0),
            "maxDurationMs": MAX_DURATION_MS, "sampleCount": self.samples, "maxSampleDurationMs": self.max_sample_ms,
        })
    }

    /// One request; `sample_ms` is how long a tree sample took (recorded on status reads).
    pub fn handle(&mut self, body: &[u8], sample_ms: u64) -> Value {
        let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else { return fail("invalid_ui_observation_request") };
        if let Some(k) = req.keys().find(|k| !["operation", "durationMs", "leaseId"].contains(&k.as_str())) {
            let mut f = fail("invalid_ui_observation_request");
            f["field"] = json!(k);
            return f;
        }
        let lease_arg = req.get("leaseId").and_then(Value::as_str);
        match req.get("operation").and_then(Value::as_str) {
            Some("start") => {
                let Some(d) = req.get("durationMs").and_then(Value::as_u64).filter(|d| (1..=MAX_DURATION_MS).contains(d)) else { return fail("invalid_ui_observation_duration") };
                if self.live().is_some() {
                    return fail("ui_observation_busy");
                }
                self.lease = Some((uuid_upper(), Instant::now(), Duration::from_millis(d)));
                self.samples = 0;
                self.status()
            }
            Some("status") => {
                if let (Some(arg), Some((id, _))) = (lease_arg, self.live())
                    && arg != id
                {
                    return fail("ui_observation_lease_mismatch");
                }
                if self.live().is_some() {
                    self.samples += 1;
                    self.max_sample_ms = self.max_sample_ms.max(sample_ms);
                }
                self.status()
            }
            Some("stop") => match self.live() {
                Some((id, _)) if lease_arg == Some(id.as_str()) => {
                    self.lease = None;
                    self.status()
                }
                Some(_) => fail("ui_observation_lease_mismatch"),
                None => self.status(),
            },
            _ => fail("invalid_ui_observation_request"),
        }
    }
}
