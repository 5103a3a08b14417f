//! The Runner's injectable faults. `apply` takes the keys present in a faults
//! object (also the control op's `{set:{…}}` / `{clear:true}` shapes), so the
//! device model can pass its whole fault map; keys it does not know are ignored.
//!
//! - `wdaDropNextActionReply` (bool or count): the next action(s) run and persist,
//!   but the connection closes without a reply. Consumed at admission.
//! - `wdaLoseCompletion` (bool): settled actions are not written to the store.
//! - `wdaOrientationIgnored` (bool): the App refuses every rotation.
//! - `wdaSlowActionMs` (ms): a queued delay before an action's first event.
//! - `wdaBindingMismatch` (bool): responses carry another Runner's epoch.

use serde_json::{Value, json};

/// Longest queued delay a test can ask for (keeps a typo from hanging a suite).
const MAX_SLOW_MS: u64 = 600_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    pub drop_action_replies: u64,
    pub lose_completion: bool,
    pub orientation_ignored: bool,
    pub slow_action_ms: u64,
    pub binding_mismatch: bool,
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x > 0.0),
        _ => false,
    }
}

impl Faults {
    pub fn apply(&mut self, v: &Value) {
        if v.get("clear").is_some_and(truthy) {
            *self = Faults::default();
        }
        if let Some(set) = v.get("set").filter(|s| s.is_object()) {
            self.apply_keys(set);
        }
        self.apply_keys(v);
    }

    fn apply_keys(&mut self, v: &Value) {
        if let Some(x) = v.get("wdaDropNextActionReply") {
            self.drop_action_replies = match x {
                Value::Number(n) => n.as_u64().unwrap_or(0).min(1000),
                other => u64::from(truthy(other)),
            };
        }
        if let Some(x) = v.get("wdaLoseCompletion") {
            self.lose_completion = truthy(x);
        }
        if let Some(x) = v.get("wdaOrientationIgnored") {
            self.orientation_ignored = truthy(x);
        }
        if let Some(x) = v.get("wdaSlowActionMs") {
            self.slow_action_ms = x.as_u64().unwrap_or(0).min(MAX_SLOW_MS);
        }
        if let Some(x) = v.get("wdaBindingMismatch") {
            self.binding_mismatch = truthy(x);
        }
    }

    /// Consumes one armed reply drop, if any.
    pub fn take_drop_reply(&mut self) -> bool {
        let armed = self.drop_action_replies > 0;
        self.drop_action_replies = self.drop_action_replies.saturating_sub(1);
        armed
    }

    pub fn to_json(&self) -> Value {
        json!({
            "wdaDropNextActionReply": self.drop_action_replies,
            "wdaLoseCompletion": self.lose_completion,
            "wdaOrientationIgnored": self.orientation_ignored,
            "wdaSlowActionMs": self.slow_action_ms,
            "wdaBindingMismatch": self.binding_mismatch,
        })
    }
}
