//! RPC frames between a client and the daemon: one JSON object per line over a
//! 127.0.0.1 TCP connection.
//!
//! Every connection starts with a mutual challenge/response, so neither side sends
//! anything of value to a peer that has not proven it knows the endpoint token
//! (which only the owner's user can read, 0600 in a 0700 directory):
//!
//! 1. client → `{"protocol","hello":<client nonce>}`
//! 2. daemon → `{"protocol","challenge":<daemon nonce>,"proof":HMAC(token, "runtime"|c|d)}`;
//!    the client checks the proof *before* it sends a token-derived value, a command,
//!    arguments or its cwd: a stranger listening on a dead runtime's port learns nothing.
//! 3. client → `{"protocol","proof":HMAC(token, "client"|c|d)}`; the daemon checks it
//!    before it reads any frame larger than [`MAX_HANDSHAKE_BYTES`] (an unauthenticated
//!    peer can make the daemon hold a few KiB at most) and answers nothing that
//!    identifies the runtime to a peer that failed.
//!
//! After that, one reply frame per request frame, in order. Proofs use distinct
//! labels so one side's proof can never be replayed as the other's.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::endpoint::PROTOCOL;

/// Largest frame either side accepts after authentication.
pub const MAX_FRAME_BYTES: usize = 128 * 1024 * 1024;

/// Largest handshake line either side accepts (hello, challenge, proof).
pub const MAX_HANDSHAKE_BYTES: usize = 4096;

/// Client → daemon, first line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: String,
    pub hello: String,
}

/// Daemon → client: its nonce and its proof over both nonces.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    pub protocol: String,
    pub challenge: String,
    pub proof: String,
}

/// Client → daemon, second line.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientProof {
    pub protocol: String,
    pub proof: String,
}

/// Which side a proof speaks for.
#[derive(Clone, Copy)]
pub enum Side {
    Runtime,
    Client,
}

/// A fresh 32-byte nonce as 64 lowercase hex digits.
pub fn nonce() -> String {
    crate::ids::token()
}

/// True for 64 lowercase hex digits (the only nonce shape either side accepts).
pub fn is_nonce(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// HMAC-SHA256 keyed with the endpoint token over the side's label and both nonces.
pub fn proof(token: &str, side: Side, client_nonce: &str, runtime_nonce: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).expect("HMAC accepts any key length");
    let label: &[u8] = match side {
        Side::Runtime => b"aab.runtime/v2 runtime\n",
        Side::Client => b"aab.runtime/v2 client\n",
    };
    mac.update(label);
    mac.update(client_nonce.as_bytes());
    mac.update(b"\n");
    mac.update(runtime_nonce.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Identity {
    pub code: String,
    pub config: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestFrame {
    pub protocol: String,
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

/// Constant-time comparison (tokens, proofs).
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
