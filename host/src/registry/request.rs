//! The public request `{command, arguments, extract, output?}` (stub).
use serde_json::{Map, Value, json};

use crate::error::CommandError;

#[derive(Clone, Debug, PartialEq)]
pub struct RegexExtract {
    pub pattern: String,
    pub input_path: String,
    pub flags: String,
    pub timeout_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Extract {
    /// `extract: null` — deliver the original result.
    None,
    Regex(RegexExtract),
}

#[derive(Clone, Debug, PartialEq)]
pub struct PublicRequest {
    pub command: String,
    pub arguments: Map<String, Value>,
    pub extract: Extract,
    pub output_max_bytes: usize,
}

pub fn parse_public_request(_v: &Value) -> Result<PublicRequest, CommandError> {
    Err(CommandError::new("invalid_argument", "stub"))
}

pub fn public_request_schema() -> Value {
    json!({"type": "object"})
}
