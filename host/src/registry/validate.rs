//! Argument validation for the host: the validator itself lives in plugin-api
//! (`aab_plugin_api::validate`) so a provider's `TestPlugin` refuses exactly what the
//! host refuses; this module converts its refusals (`ProviderError`s,
//! never dispatched) into the host's `CommandError` (same code, message, field and details).

use aab_plugin_api::ProviderError;
use aab_plugin_api::validate as shared;
use jsonschema::Validator;
use serde_json::Value;
#[cfg(test)]
use serde_json::json;

use crate::error::CommandError;

pub use aab_plugin_api::validate::{MAX_ARGUMENT_DEPTH, compile};
pub(crate) use aab_plugin_api::validate::preview;

/// An argument refusal of the shared validator (never dispatched).
fn refused(e: ProviderError) -> CommandError {
    let mut error = CommandError::new(e.error, e.message);
    error.field = e.field;
    error.details = e.details;
    error
}

/// Reject values nested deeper than `max_depth` containers. `root_field` names the
/// value itself in the error (e.g. `arguments`).
pub fn check_depth(value: &Value, max_depth: usize, root_field: &str) -> Result<(), CommandError> {
    shared::check_depth(value, max_depth, root_field).map_err(refused)
}

/// Validate `instance` against a compiled `validator` of `root` (the same schema),
/// mapping the first meaningful failure to a contract error. `root_field` names the
/// instance itself when the failure is about the whole value.
pub fn validate_instance(validator: &Validator, root: &Value, instance: &Value, root_field: &str) -> Result<(), CommandError> {
    shared::validate_instance(validator, root, instance, root_field).map_err(refused)
}

/// A command's arguments: object, depth, schema (see `aab_plugin_api::validate::validate_arguments`).
pub fn validate_arguments(command: &str, validator: &Validator, schema: &Value, arguments: &Value) -> Result<(), CommandError> {
    shared::validate_arguments(command, validator, schema, arguments).map_err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Validate with a fresh validator; the registry caches them, tests need not.
    fn check(schema: &Value, instance: &Value) -> Result<(), CommandError> {
        let validator = compile(schema).expect("test schema compiles");
        validate_instance(&validator, schema, instance, "arguments")
    }

    fn decision_schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 30000},
                "feedback": {"type": "string", "enum": ["auto", "off", "full"]},
                "decision": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "note": {"type": "string"},
                        "action": {"$ref": "#/$defs/action"}
                    },
                    "required": ["action"]
                },
                "context": {"type": "object", "properties": {"readings": {"type": "array", "items": {
                    "type": "object", "properties": {"value": {"type": "number"}}
                }}}}
            },
            "$defs": {"action": {"oneOf": [
                {"type": "object", "additionalProperties": false,
                 "properties": {"kind": {"const": "tap"}, "x": {"type": "integer"}, "y": {"type": "integer"}},
                 "required": ["kind", "x", "y"]},
                {"type": "object", "additionalProperties": false,
                 "properties": {"kind": {"const": "wait"}, "durationMs": {"type": "integer", "minimum": 100, "maximum": 5000}},
                 "required": ["kind", "durationMs"]}
            ]}}
        })
    }

    fn err(schema: &Value, instance: Value) -> CommandError {
        check(schema, &instance).expect_err("instance should be rejected")
    }

    #[test]
    fn valid_instances_pass() {
        let schema = decision_schema();
        check(&schema, &json!({"decision": {"action": {"kind": "wait", "durationMs": 100}}})).unwrap();
        check(&schema, &json!({"decision": {"action": {"kind": "tap", "x": 1, "y": 2}}, "timeoutMs": 30000})).unwrap();
    }

    #[test]
    fn minimum_inside_a_tagged_union_reports_the_nested_field() {
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "wait", "durationMs": 5}}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("decision.action.durationMs")));
        assert_eq!(e.message, "`decision.action.durationMs` must be an integer ≥ 100 and ≤ 5000, got 5");
    }

    #[test]
    fn missing_nested_property_names_the_full_path() {
        let e = err(&decision_schema(), json!({"decision": {"action": {"x": 1, "y": 2}}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("decision.action.kind")));
        assert_eq!(e.details, Some(json!({"allowed": ["tap", "wait"]})));
        let e = err(&decision_schema(), json!({"decision": {}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("decision.action")));
    }

    #[test]
    fn tagged_union_reports_the_selected_branch_only() {
        // The `wait` branch is missing durationMs; the `tap` branch's complaints
        // (x, y, const) must not leak into the answer.
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "wait"}}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("decision.action.durationMs")));
        assert!(e.message.contains("an integer ≥ 100 and ≤ 5000"), "{}", e.message);
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "tap", "x": 1, "y": 2, "durationMs": 3}}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("unsupported_argument", Some("decision.action.durationMs")));
    }

    #[test]
    fn unknown_tag_value_lists_the_allowed_values() {
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "swipe"}}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("decision.action.kind")));
        assert_eq!(e.details, Some(json!({"allowed": ["tap", "wait"]})));
        assert!(e.message.contains("\"swipe\""), "{}", e.message);
    }

    #[test]
    fn union_with_a_wrong_json_type_says_what_is_expected() {
        let e = err(&decision_schema(), json!({"decision": {"action": "tap"}}));
        assert_eq!(e.field.as_deref(), Some("decision.action"));
        assert_eq!(e.message, "`decision.action` must be an object, got \"tap\"");
    }

    #[test]
    fn untagged_union_failure_lists_variants() {
        let schema = json!({"type": "object", "properties": {"target": {"oneOf": [
            {"type": "object", "properties": {"selector": {"type": "string"}}, "required": ["selector"]},
            {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]}
        ]}}});
        let e = err(&schema, json!({"target": {}}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("target")));
        let variants = e.details.as_ref().unwrap()["variants"].as_array().unwrap().clone();
        assert_eq!(variants.len(), 2);
        assert_eq!(variants[0]["field"], json!("target.selector"));
        assert_eq!(variants[1]["error"], json!("missing_argument"));
    }

    #[test]
    fn unsupported_nested_key_is_reported_before_other_errors() {
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "tap", "x": 1, "y": 2}, "extra": true}, "timeoutMs": "x"}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("unsupported_argument", Some("decision.extra")));
        assert_eq!(e.details.as_ref().unwrap()["allowed"], json!(["note", "action"]));
        let e = err(&decision_schema(), json!({"decisions": 1}));
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("unsupported_argument", Some("decisions")));
    }

    #[test]
    fn array_indices_appear_as_numbers() {
        let e = err(&decision_schema(), json!({"decision": {"action": {"kind": "tap", "x": 1, "y": 2}}, "context": {"readings": [{"value": 1}, {}, {}, {"value": null}]}}));
        assert_eq!(e.field.as_deref(), Some("context.readings.3.value"));
        assert_eq!(e.message, "`context.readings.3.value` must be a number, got null");
    }

    #[test]
    fn no_implicit_conversion() {
        let schema = decision_schema();
        let base = json!({"decision": {"action": {"kind": "tap", "x": 1, "y": 2}}});
        let mut bad = base.clone();
        bad["timeoutMs"] = json!("5");
        let e = err(&schema, bad);
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("timeoutMs")));
        assert_eq!(e.message, "`timeoutMs` must be an integer ≥ 1 and ≤ 30000, got \"5\" (strings are not converted to numbers)");
        let mut bad = base.clone();
        bad["timeoutMs"] = json!("fast");
        assert_eq!(err(&schema, bad).message, "`timeoutMs` must be an integer ≥ 1 and ≤ 30000, got \"fast\"");
        let mut bad = base;
        bad["feedback"] = json!("loud");
        let e = err(&schema, bad);
        assert_eq!(e.message, "`feedback` must be one of \"auto\", \"off\", \"full\", got \"loud\"");
        assert_eq!(e.details, Some(json!({"allowed": ["auto", "off", "full"]})));
    }

    #[test]
    fn selection_is_deterministic_by_rank_then_path() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
            "required": ["c"]});
        // bad values at b and a, missing c: the missing key wins.
        let e = err(&schema, json!({"b": "x", "a": "y"}));
        assert_eq!(e.field.as_deref(), Some("c"));
        // two bad values: the smaller path wins regardless of key order.
        let e = err(&schema, json!({"c": 1, "b": "x", "a": "y"}));
        assert_eq!(e.field.as_deref(), Some("a"));
    }

    #[test]
    fn depth_limit_accepts_64_and_rejects_65() {
        fn nested(levels: usize) -> Value {
            let mut v = json!({});
            for _ in 1..levels {
                v = json!({"n": v});
            }
            v
        }
        check_depth(&nested(64), MAX_ARGUMENT_DEPTH, "arguments").unwrap();
        let e = check_depth(&nested(65), MAX_ARGUMENT_DEPTH, "arguments").unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert_eq!(e.field.as_deref().map(|f| f.split('.').count()), Some(64));
        let arrays = json!({"a": [[[1]]]});
        assert!(check_depth(&arrays, 4, "arguments").is_ok());
        assert!(check_depth(&arrays, 3, "arguments").is_err());
    }

    #[test]
    fn patterns_use_the_linear_engine() {
        // Look-around is a backtracking-only feature: refusing it proves the
        // linear-time engine compiled the pattern.
        let err = compile(&json!({"type": "string", "pattern": "(?=a)a"})).unwrap_err();
        assert!(err.contains("regex"), "{err}");
        assert!(compile(&json!({"type": "string", "pattern": "^(a+)+$"})).is_ok());
    }
}
