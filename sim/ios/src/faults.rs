//! Injected faults of one device (control op `faults`). Flags stay set until
//! cleared, except the "next" ones, which the first matching event consumes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Faults {
    /// The SDK descriptor file is removed.
    pub descriptor_absent: bool,
    /// The descriptor says `ok:false, port:0, error:<reason>`, and the SDK answers
    /// identity-checked routes with 409 `ios_runtime_descriptor_unavailable`.
    pub descriptor_not_ready: bool,
    /// The descriptor names the previous process of the app (its epoch, pid, port).
    pub descriptor_stale: bool,
    /// The descriptor is not valid JSON.
    pub descriptor_invalid: bool,
    /// Every SDK body carries a `runtimeBinding` of another runtime epoch.
    pub response_binding_mismatch: bool,
    /// SDK bodies lose their `ok` member.
    pub response_ok_missing: bool,
    /// The next managed H5/Flutter action runs and its completion is persisted,
    /// but the HTTP reply is never sent (the socket closes).
    pub drop_next_action_reply: bool,
    /// The next completion is not persisted (a cancel/result lookup cannot prove it).
    pub lose_completion: bool,
    /// How long an admitted H5/Flutter action waits before asking permission
    /// (queued: a cancel or timeout ends it undispatched).
    pub action_queue_ms: u64,
    /// How long an admitted H5/Flutter action runs after its permission (a busy
    /// slot; a timeout then gives the ambiguous pending reply).
    pub action_delay_ms: u64,
    /// Records per `/v1/execution/result` page (default 64; small values exercise paging).
    pub completion_page_records: Option<usize>,
    /// The WDA Runner's faults (passed to it with `set_faults`; see `wda/faults.rs`):
    /// the next action's reply is lost (bool or a count).
    pub wda_drop_next_action_reply: Value,
    /// The app ignores interface orientation requests.
    pub wda_orientation_ignored: bool,
    pub wda_lose_completion: bool,
    pub wda_slow_action_ms: u64,
    pub wda_binding_mismatch: bool,
    /// `{command, code}`: that devicectl command (`list`, `copy`, `install`,
    /// `launch`, `screenshot`, or `*`) fails with this CoreDevice error code.
    pub devicectl_fail: Option<DevicectlFail>,
    /// `true` (every command) or a command name: devicectl never answers.
    pub devicectl_hang: Value,
    pub developer_mode_disabled: bool,
    pub ddi_unavailable: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicectlFail {
    #[serde(default = "any")]
    pub command: String,
    #[serde(default = "default_code")]
    pub code: i64,
}

fn any() -> String {
    "*".into()
}

fn default_code() -> i64 {
    1000
}

/// Whether a fault naming `spec` (`*`, a short name or the full command) covers `command`.
pub fn covers(spec: &str, command: &str) -> bool {
    spec == "*" || spec == command || command.split(' ').next_back() == Some(spec) || short(command) == spec
}

/// `list`, `copy`, `install`, `launch`, `screenshot` for the devicectl commands.
pub fn short(command: &str) -> &str {
    match command {
        "list devices" => "list",
        "device copy from" => "copy",
        "device install app" => "install",
        "device process launch" => "launch",
        "device capture screenshot" => "screenshot",
        other => other,
    }
}

impl Faults {
    /// Merges `set` into these faults (validated as a whole).
    pub fn merged(&self, set: &serde_json::Map<String, Value>) -> Result<Faults, String> {
        let mut cur = serde_json::to_value(self).map_err(|e| e.to_string())?;
        for (k, v) in set {
            cur[k] = v.clone();
        }
        serde_json::from_value(cur).map_err(|e| e.to_string())
    }

    pub fn hangs(&self, command: &str) -> bool {
        match &self.devicectl_hang {
            Value::Bool(b) => *b,
            Value::String(s) => covers(s, command),
            _ => false,
        }
    }

    pub fn any_descriptor_fault(&self) -> bool {
        self.descriptor_absent || self.descriptor_not_ready || self.descriptor_stale || self.descriptor_invalid
    }
}
