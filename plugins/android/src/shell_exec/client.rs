//! Sending one worker script (`sh -c '<script>'` over the adb shell v2 transport)
//! and reading the one JSON object it prints.

use base64::Engine;
use serde_json::Value;

use super::codes;
use crate::adb::Deadline;
use crate::adb::device::Device;
use aab_plugin_api::ProviderError;

/// A script's JSON reply.
#[derive(Clone, Debug)]
pub struct Reply(pub Value);

impl Reply {
    pub fn str(&self, key: &str) -> &str {
        self.0.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// A base64 field (absent or empty = no bytes).
    pub fn b64(&self, key: &str) -> Result<Vec<u8>, ProviderError> {
        base64::engine::general_purpose::STANDARD.decode(self.str(key)).map_err(|e| ProviderError::new(codes::SHELL_PROTOCOL_ERROR, format!("`{key}` of the shell reply is not base64: {e}")))
    }
}

/// Replies are small except `stdout`/`stderr` (≤ 64 KiB each, base64).
const REPLY_LIMIT: usize = 1024 * 1024;

pub async fn run(device: &Device, script: &str, deadline: Deadline) -> Result<Reply, ProviderError> {
    let out = device.shell_limited(&super::scripts::wrap(script), None, REPLY_LIMIT, deadline).await?;
    let text = out.stdout_text();
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("");
    serde_json::from_str::<Value>(line).map(Reply).map_err(|e| {
        ProviderError::new(codes::SHELL_PROTOCOL_ERROR, format!("the shell worker script printed no JSON ({e})")).with_details(serde_json::json!({"stdout": text, "stderr": out.stderr_text(), "exitCode": out.exit_code}))
    })
}
