//! JSON Schema pieces both iOS plugins' command specs are built from, so an id
//! means the same grammar in every iOS command and a shared option is merged
//! the same way everywhere.

use serde_json::{Value, json};

/// The grammar of [`crate::ids::is_bundle_id`], as a schema.
pub const BUNDLE_ID_PATTERN: &str = "^[A-Za-z0-9_.-]{1,255}$";

/// A bundle id (an App's or a Runner's), described for its command.
pub fn bundle_id(description: &str) -> Value {
    json!({"type": "string", "pattern": BUNDLE_ID_PATTERN, "description": description})
}

/// A device id: a CoreDevice identifier, UDID, serial number or name — every
/// alias `select_device` resolves (no control characters; names have spaces).
pub fn device_id() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[^\\x00-\\x1F\\x7F]+$", "description": "The device: CoreDevice identifier, UDID, serial number or name (as devicectl list devices reports it)"})
}

/// An `http://` peer URL (no TLS stack is built: an `https://` URL would only fail later).
pub fn http_url(description: &str) -> Value {
    json!({"type": "string", "minLength": 8, "maxLength": 2048, "pattern": "^http://[^\\s?#]+$", "description": description})
}

/// A closed object schema: `properties`, nothing else, `required` present.
pub fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
}

/// `base` with the keys of `extra` added or replaced (both objects; else `base`).
pub fn merge(base: Value, extra: Value) -> Value {
    let mut base = base;
    if let (Value::Object(b), Value::Object(e)) = (&mut base, extra) {
        b.extend(e);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_id_pattern_is_the_checked_grammar() {
        // The schema and the runtime check must agree on the bounds.
        assert_eq!(BUNDLE_ID_PATTERN, "^[A-Za-z0-9_.-]{1,255}$");
        assert!(crate::ids::is_bundle_id(&"a".repeat(255)) && !crate::ids::is_bundle_id(&"a".repeat(256)));
        assert_eq!(bundle_id("x")["pattern"], BUNDLE_ID_PATTERN);
    }

    #[test]
    fn merge_adds_and_replaces_keys() {
        assert_eq!(merge(json!({"a": 1, "b": 2}), json!({"b": 3, "c": 4})), json!({"a": 1, "b": 3, "c": 4}));
        assert_eq!(merge(json!({"a": 1}), json!(null)), json!({"a": 1}));
        assert_eq!(object(json!({}), &["a"]), json!({"type": "object", "additionalProperties": false, "properties": {}, "required": ["a"]}));
    }
}
