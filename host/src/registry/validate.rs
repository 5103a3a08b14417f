//! Argument validation: compiles input schemas and turns jsonschema's error list into
//! the one contract error an agent should see first (`missing_argument`,
//! `unsupported_argument` or `invalid_argument`, with a dotted `field` path and a
//! message that states the accepted values).
//!
//! Selection is deterministic: an unknown key is reported before a missing one
//! (a typo such as `tapx` explains the "missing" `tapX`), a missing one before a bad
//! value, and ties go to the smallest instance path. A failed `oneOf`/`anyOf` is
//! explained by the branch the instance meant (by its JSON type, then by its tag
//! value) instead of jsonschema's "not valid under any of the schemas".

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use jsonschema::{Draft, PatternOptions, ValidationError, Validator};
use serde_json::{Map, Value, json};

use super::schema;
use crate::error::CommandError;

/// Deepest accepted nesting of an arguments value (the arguments object itself is
/// level 1). Bounds the work of validation and of every later recursive consumer.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Compile a schema the way the registry does for every command: draft 2020-12,
/// formats asserted, and the linear-time `regex` engine for `pattern` so a plugin's
/// schema cannot make validation backtrack catastrophically.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_pattern_options(PatternOptions::regex())
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| {
            let at = e.instance_path().as_str();
            if at.is_empty() { e.to_string() } else { format!("{e} (at schema location `{at}`)") }
        })
}

/// Reject values nested deeper than `max_depth` containers. `root_field` names the
/// value itself in the error (e.g. `arguments`).
pub fn check_depth(value: &Value, max_depth: usize, root_field: &str) -> Result<(), CommandError> {
    fn deepest<'a>(value: &'a Value, depth: usize, max: usize, path: &mut Vec<String>) -> bool {
        let children: Box<dyn Iterator<Item = (String, &'a Value)> + 'a> = match value {
            Value::Object(map) => Box::new(map.iter().map(|(k, v)| (k.clone(), v))),
            Value::Array(items) => Box::new(items.iter().enumerate().map(|(i, v)| (i.to_string(), v))),
            _ => return true,
        };
        if depth > max {
            return false;
        }
        for (key, child) in children {
            path.push(key);
            if !deepest(child, depth + 1, max, path) {
                return false;
            }
            path.pop();
        }
        true
    }
    let mut path = Vec::new();
    if deepest(value, 1, max_depth, &mut path) {
        return Ok(());
    }
    let field = if path.is_empty() { root_field.to_string() } else { path.join(".") };
    Err(CommandError::invalid(
        field.clone(),
        format!("`{root_field}` is nested too deeply: `{field}` is below {max_depth} levels of objects and arrays, the maximum"),
    )
    .with_details(json!({"maxDepth": max_depth})))
}

/// Validate `instance` against a compiled `validator` of `root` (the same schema),
/// mapping the first meaningful failure to a contract error. `root_field` names the
/// instance itself when the failure is about the whole value.
pub fn validate_instance(validator: &Validator, root: &Value, instance: &Value, root_field: &str) -> Result<(), CommandError> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    let mapper = Mapper { root, root_field };
    let errors: Vec<ValidationError<'_>> = validator.iter_errors(instance).collect();
    let best = mapper.best(&errors);
    Err(best.map(|c| c.error).unwrap_or_else(|| CommandError::invalid(root_field, format!("`{root_field}` does not match its schema"))))
}

/// One step of an instance path; ordered so that array positions sort numerically.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Index(usize),
    Key(String),
}

/// A mapped error and its sort key.
struct Candidate {
    /// 0 = unsupported key, 1 = missing key, 2 = bad value.
    rank: u8,
    path: Vec<Step>,
    error: CommandError,
}

struct Mapper<'s> {
    root: &'s Value,
    root_field: &'s str,
}

impl Mapper<'_> {
    fn best(&self, errors: &[ValidationError<'_>]) -> Option<Candidate> {
        errors.iter().map(|e| self.candidate(e)).min_by(|a, b| (a.rank, &a.path).cmp(&(b.rank, &b.path)))
    }

    fn field(&self, path: &[Step]) -> String {
        if path.is_empty() {
            return self.root_field.to_string();
        }
        path.iter()
            .map(|s| match s {
                Step::Index(i) => i.to_string(),
                Step::Key(k) => k.clone(),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The schema object holding the failing keyword (the schema path minus the keyword).
    /// For a property set to `false` in a branch tagged on `operation` (each
    /// operation accepts only its own fields), the operation of that branch.
    fn operation_forbidding(&self, error: &ValidationError<'_>) -> Option<&str> {
        let path = error.schema_path().as_str();
        let properties = &path[..path.rfind('/')?];
        let branch = properties.strip_suffix("/properties")?;
        self.root.pointer(branch)?.pointer("/properties/operation/const")?.as_str()
    }

    fn keyword_owner(&self, error: &ValidationError<'_>) -> Option<&Value> {
        let path = error.schema_path().as_str();
        let owner = &path[..path.rfind('/')?];
        self.root.pointer(owner).map(|s| schema::resolve(self.root, s))
    }

    fn candidate(&self, error: &ValidationError<'_>) -> Candidate {
        let mut path: Vec<Step> = error
            .instance_path()
            .iter()
            .map(|s| match s {
                LocationSegment::Property(p) => Step::Key(p.into_owned()),
                LocationSegment::Index(i) => Step::Index(i),
            })
            .collect();
        let instance: &Value = error.instance();
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                let owner = self.keyword_owner(error);
                let allowed: Vec<&String> = owner.and_then(|o| o.get("properties")).and_then(Value::as_object).map(|p| p.keys().collect()).unwrap_or_default();
                let name = unexpected.first().cloned().unwrap_or_default();
                let parent = self.field(&path);
                path.push(Step::Key(name.clone()));
                let field = self.field(&path);
                let mut message = if parent == self.root_field {
                    format!("unsupported argument `{field}`")
                } else {
                    format!("unsupported argument `{field}`: `{parent}` does not accept `{name}`")
                };
                if !allowed.is_empty() {
                    message.push_str(&format!("; accepted here: {}", list_names(&allowed)));
                }
                let details = json!({"unexpected": unexpected, "allowed": allowed});
                Candidate { rank: 0, path, error: CommandError::new("unsupported_argument", message).with_field(field).with_details(details) }
            }
            ValidationErrorKind::FalseSchema if matches!(path.last(), Some(Step::Key(_))) => {
                let field = self.field(&path);
                let error = match self.operation_forbidding(error) {
                    Some(operation) => CommandError::new("unsupported_argument", format!("unsupported argument `{field}`: operation `{operation}` does not accept it"))
                        .with_field(field)
                        .with_details(json!({"operation": operation})),
                    None => CommandError::new("unsupported_argument", format!("unsupported argument `{field}`: it is not accepted here")).with_field(field),
                };
                Candidate { rank: 0, path, error }
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().map(str::to_string).unwrap_or_else(|| property.to_string());
                let expected = self
                    .keyword_owner(error)
                    .and_then(|o| o.get("properties"))
                    .and_then(|p| p.get(&name))
                    .map(|p| describe(self.root, p));
                path.push(Step::Key(name));
                Candidate { rank: 1, path: path.clone(), error: self.missing(&path, expected, None) }
            }
            ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => self.union(error, path, instance, context),
            ValidationErrorKind::OneOfMultipleValid { .. } => {
                let field = self.field(&path);
                let error = CommandError::invalid(field.clone(), format!("`{field}` matches more than one of its allowed variants; make it match exactly one"));
                Candidate { rank: 2, path, error }
            }
            kind => {
                let field = self.field(&path);
                let owner = self.keyword_owner(error);
                let mut details = None;
                let message = match (kind, owner) {
                    (ValidationErrorKind::Not { .. } | ValidationErrorKind::PropertyNames { .. } | ValidationErrorKind::FalseSchema, _) | (_, None) => {
                        format!("`{field}` is invalid: {error}")
                    }
                    (_, Some(owner)) => {
                        if let Some(values) = owner.get("enum").cloned().or_else(|| owner.get("const").map(|c| json!([c]))) {
                            details = Some(json!({"allowed": values}));
                        }
                        // A pattern or format is opaque to most readers; the schema's
                        // own description says what it means, when there is one.
                        let expected = match owner.get("description") {
                            Some(Value::String(description)) if matches!(kind, ValidationErrorKind::Pattern { .. } | ValidationErrorKind::Format { .. }) => {
                                description.clone()
                            }
                            _ => describe(self.root, owner),
                        };
                        let got = match kind {
                            ValidationErrorKind::UniqueItems => "an array with duplicate items".to_string(),
                            _ => preview(instance),
                        };
                        let mut message = format!("`{field}` must be {expected}, got {got}");
                        if matches!(kind, ValidationErrorKind::Type { .. }) && looks_numeric(instance) && expects_number(owner) {
                            message.push_str(" (strings are not converted to numbers)");
                        }
                        message
                    }
                };
                let mut error = CommandError::invalid(field, message);
                if let Some(details) = details {
                    error = error.with_details(details);
                }
                Candidate { rank: 2, path, error }
            }
        }
    }

    fn missing(&self, path: &[Step], expected: Option<String>, allowed: Option<Vec<Value>>) -> CommandError {
        let field = self.field(path);
        let mut message = format!("missing required argument `{field}`");
        if let Some(expected) = expected {
            message.push_str(&format!(" ({expected})"));
        }
        let error = CommandError::new("missing_argument", message).with_field(field);
        match allowed {
            Some(allowed) => error.with_details(json!({"allowed": allowed})),
            None => error,
        }
    }

    /// Explain a failed `oneOf`/`anyOf` by the branch the instance was aiming at.
    fn union(&self, error: &ValidationError<'_>, path: Vec<Step>, instance: &Value, context: &[Vec<ValidationError<'static>>]) -> Candidate {
        let field = self.field(&path);
        let branches: &[Value] = match self.root.pointer(error.schema_path().as_str()) {
            Some(Value::Array(branches)) if branches.len() == context.len() => branches,
            _ => &[],
        };
        let resolved: Vec<&Value> = branches.iter().map(|b| schema::resolve(self.root, b)).collect();
        let live: Vec<usize> = if branches.is_empty() {
            (0..context.len()).collect()
        } else {
            (0..branches.len()).filter(|&i| schema::admits_type(resolved[i], instance)).collect()
        };
        // No branch takes this JSON type: the type itself is the mistake.
        if live.is_empty() {
            let expected: Vec<String> = resolved.iter().map(|b| describe(self.root, b)).collect();
            let message = format!("`{field}` must be {}, got {}", join_alternatives(&expected), preview(instance));
            return Candidate { rank: 2, path, error: CommandError::invalid(field, message) };
        }
        if live.len() == 1
            && let Some(best) = self.best(&context[live[0]])
        {
            return best;
        }
        if let Some(tagged) = schema::tagged_union(self.root, branches, &live, None) {
            let mut tag_path = path.clone();
            tag_path.push(Step::Key(tagged.property.clone()));
            let allowed = tagged.allowed();
            return match instance.get(&tagged.property) {
                None if instance.is_object() => {
                    let expected = format!("one of {}", list_values(&allowed));
                    Candidate { rank: 1, path: tag_path.clone(), error: self.missing(&tag_path, Some(expected), Some(allowed)) }
                }
                None => {
                    let message = format!("`{field}` must be an object with `{}`, got {}", tagged.property, preview(instance));
                    Candidate { rank: 2, path, error: CommandError::invalid(field, message) }
                }
                Some(tag) => match tagged.branch_for(tag).and_then(|i| self.best(&context[i])) {
                    Some(best) => best,
                    None => {
                        let tag_field = self.field(&tag_path);
                        let message = format!("`{tag_field}` must be one of {}, got {}", list_values(&allowed), preview(tag));
                        let error = CommandError::invalid(tag_field, message).with_details(json!({"allowed": allowed}));
                        Candidate { rank: 2, path: tag_path, error }
                    }
                },
            };
        }
        // An untagged union: show what each plausible variant objected to.
        let variants: Vec<(usize, CommandError)> = live.iter().filter_map(|&i| self.best(&context[i]).map(|c| (i, c.error))).collect();
        let summary: Vec<String> = variants.iter().map(|(i, e)| format!("variant {}: {}", i + 1, e.message)).collect();
        let message = format!("`{field}` does not match any of its {} allowed variants ({})", live.len(), summary.join("; "));
        let details: Vec<Value> = variants
            .iter()
            .map(|(i, e)| json!({"variant": i + 1, "error": e.code, "field": e.field, "message": e.message}))
            .collect();
        Candidate { rank: 2, path, error: CommandError::invalid(field, message).with_details(json!({"variants": details})) }
    }
}

/// Whether the schema wants a number (so a numeric-looking string deserves a hint).
fn expects_number(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "integer" || t == "number",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer" || t == "number"),
        _ => false,
    }
}

fn looks_numeric(value: &Value) -> bool {
    value.as_str().is_some_and(|s| s.trim().parse::<f64>().is_ok())
}

/// A short rendering of a value for messages (never the whole of a large value).
pub(crate) fn preview(value: &Value) -> String {
    match value {
        Value::Object(map) if map.is_empty() => "an empty object".into(),
        Value::Object(_) => "an object".into(),
        Value::Array(items) => format!("an array of {} item{}", items.len(), if items.len() == 1 { "" } else { "s" }),
        Value::String(s) if s.chars().count() > 60 => {
            let head: String = s.chars().take(57).collect();
            format!("{}… ({} characters)", Value::String(head), s.chars().count())
        }
        other => other.to_string(),
    }
}

fn list_values(values: &[Value]) -> String {
    values.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")
}

fn list_names(names: &[&String]) -> String {
    const SHOWN: usize = 40;
    let mut listed = names.iter().take(SHOWN).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        listed.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    listed
}

fn join_alternatives(items: &[String]) -> String {
    let mut unique: Vec<&String> = Vec::new();
    for item in items {
        if !unique.contains(&item) {
            unique.push(item);
        }
    }
    match unique.as_slice() {
        [] => "a valid value".into(),
        [one] => (*one).clone(),
        [init @ .., last] => format!("{} or {last}", init.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
    }
}

/// One line of English for what a schema accepts, e.g. "an integer ≥ 1 and ≤ 30000"
/// or "one of \"auto\", \"off\", \"full\"". Used in every value error message.
pub(crate) fn describe(root: &Value, schema: &Value) -> String {
    let schema = schema::resolve(root, schema);
    let Value::Object(map) = schema else {
        return if schema == &Value::Bool(false) { "absent".into() } else { "any value".into() };
    };
    if let Some(c) = map.get("const") {
        return format!("exactly {c}");
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        return format!("one of {}", list_values(values));
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.is_empty() {
        if let Some(Value::Array(branches)) = map.get("anyOf").or_else(|| map.get("oneOf")) {
            let parts: Vec<String> = branches.iter().map(|b| describe(root, b)).collect();
            return join_alternatives(&parts);
        }
        return "a valid value".into();
    }
    let parts: Vec<String> = types.iter().map(|t| describe_typed(t, map)).collect();
    join_alternatives(&parts)
}

fn describe_typed(kind: &str, map: &Map<String, Value>) -> String {
    let mut text = match kind {
        "integer" => "an integer".to_string(),
        "number" => "a number".to_string(),
        "string" => "a string".to_string(),
        "boolean" => "a boolean (true or false)".to_string(),
        "object" => "an object".to_string(),
        "array" => "an array".to_string(),
        "null" => "null".to_string(),
        other => format!("a value of type {other}"),
    };
    match kind {
        "integer" | "number" => {
            let mut bounds = Vec::new();
            for (keyword, sign) in [("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")] {
                if let Some(limit) = map.get(keyword).filter(|v| v.is_number()) {
                    bounds.push(format!("{sign} {limit}"));
                }
            }
            if let Some(step) = map.get("multipleOf") {
                bounds.push(format!("a multiple of {step}"));
            }
            if !bounds.is_empty() {
                text.push(' ');
                text.push_str(&bounds.join(" and "));
            }
        }
        "string" => {
            text.push_str(&count_range(map.get("minLength"), map.get("maxLength"), "character"));
            if let Some(Value::String(format)) = map.get("format") {
                text.push_str(&format!(" in `{format}` format"));
            }
            if let Some(Value::String(pattern)) = map.get("pattern") {
                text.push_str(&format!(" matching `{pattern}`"));
            }
        }
        "array" => {
            text.push_str(&count_range(map.get("minItems"), map.get("maxItems"), "item"));
            if map.get("uniqueItems") == Some(&Value::Bool(true)) {
                text.push_str(" with unique items");
            }
        }
        _ => {}
    }
    text
}

fn count_range(min: Option<&Value>, max: Option<&Value>, unit: &str) -> String {
    let plural = |n: u64| if n == 1 { unit.to_string() } else { format!("{unit}s") };
    match (min.and_then(Value::as_u64), max.and_then(Value::as_u64)) {
        (Some(lo), Some(hi)) if lo == hi => format!(" of exactly {lo} {}", plural(lo)),
        (Some(lo), Some(hi)) => format!(" of {lo} to {hi} {}", plural(hi)),
        (Some(lo), None) if lo > 0 => format!(" of at least {lo} {}", plural(lo)),
        (_, Some(hi)) => format!(" of at most {hi} {}", plural(hi)),
        _ => String::new(),
    }
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
