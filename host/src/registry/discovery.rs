//! `capabilities` discovery payloads and CLI help text (stub).
use serde_json::{Value, json};

use super::Registry;

pub const DEFAULT_OUTPUT_BYTES: usize = 96 * 1024;

pub fn capabilities(_registry: &Registry, _query: &Value) -> Value {
    json!({"ok": false, "error": "unknown_command"})
}

pub fn help_text(_registry: &Registry) -> String {
    String::new()
}

pub fn capabilities_input_schema() -> Value {
    json!({"type": "object"})
}
