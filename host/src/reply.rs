//! Assembles every public reply (stub).
use serde_json::Value;

use crate::client::PublicReply;
use crate::error::CommandError;

pub fn rejection(command: Option<&str>, error: &CommandError) -> PublicReply {
    let _ = command;
    PublicReply { body: error.to_json(), exit_code: 1 }
}

pub fn _unused(_: Value) {}
