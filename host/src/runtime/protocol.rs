//! RPC frames between a client and the daemon: one JSON object per line over a
//! 127.0.0.1 TCP connection, one reply frame per request frame, in order. Every
//! request frame carries the endpoint token; a frame without the right token is
//! refused (`runtime_access_denied`) and does nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::endpoint::PROTOCOL;

/// Largest frame either side accepts.
pub const MAX_FRAME_BYTES: usize = 128 * 1024 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Identity {
    pub code: String,
    pub config: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestFrame {
    pub protocol: String,
    pub token: String,
    /// status | stop | execute
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// The public request (execute only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The caller's working directory (execute only; absolute, existing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyFrame {
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_id: Option<String>,
    pub ok: bool,
    /// execute: `{body, exitCode}`; status/stop: the status object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Value>,
    /// The error envelope when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// Constant-time token comparison.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
