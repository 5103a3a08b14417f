//! The host's argument validator, shared with provider tests: the host's registry
//! and `test_support::TestPlugin` call the same functions, so a provider's tests
//! refuse exactly what the host refuses (same codes, same dotted `field`s, same
//! messages). Feature `validate` (on for the host and for `test-support`), because it
//! brings the JSON Schema engine (`jsonschema`) that a provider cdylib does not need.
//!
//! It compiles input schemas and turns jsonschema's error list into the one contract
//! error an agent should see first (`missing_argument`, `unsupported_argument` or
//! `invalid_argument`, with a dotted `field` path and a message that states the
//! accepted values).
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

use crate::protocol::{CommandSpec, ProviderError};

/// Argument refusals are [`ProviderError`]s — a contract code (`missing_argument`,
/// `unsupported_argument`, `invalid_argument`), a message, the dotted `field` and
/// optional `details` (`allowed`, `variants`, …) — always `dispatched:false`: the one
/// error type a provider and its tests see. The host turns them into its `CommandError`.
fn refusal(code: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

/// `invalid_argument` on `field`.
fn invalid(field: impl Into<String>, message: impl Into<String>) -> ProviderError {
    refusal(crate::codes::INVALID_ARGUMENT, message).with_field(field)
}

/// The schema the host validates a command's arguments against: the spec's
/// `inputSchema` plus the host's execution options `requestId`, `feedback` and
/// `timeoutMs` (unless the schema defines them itself: a command may narrow them,
/// e.g. a shorter `timeoutMs`). This is also the schema `capabilities` advertises.
pub fn input_schema_with_host_options(spec: &CommandSpec) -> Value {
    let mut schema = spec.input_schema.clone();
    let Value::Object(root) = &mut schema else { return schema };
    let properties = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(properties) = properties else { return schema };
    let options = [
        (
            "requestId",
            json!({"type": "string", "minLength": 1, "maxLength": 256,
                   "description": "Idempotency key: a repeated request with the same requestId and arguments returns the first outcome instead of acting again"}),
        ),
        (
            "feedback",
            json!({"type": "string", "enum": ["auto", "off", "full"],
                   "description": "Execution feedback attached to object results as `_feedback` (default auto; off returns the provider result unchanged)"}),
        ),
        (
            "timeoutMs",
            json!({"type": "integer", "minimum": 1, "maximum": spec.max_timeout_ms, "default": spec.default_timeout_ms,
                   "description": format!("Deadline for the whole command in milliseconds (default {}, at most {})", spec.default_timeout_ms, spec.max_timeout_ms)}),
        ),
    ];
    for (name, option) in options {
        properties.entry(name).or_insert(option);
    }
    schema
}

/// Validate one call's `arguments` of `command` the way the host does before
/// dispatch: a JSON object, at most [`MAX_ARGUMENT_DEPTH`] deep, valid against
/// `schema` (compiled as `validator`; normally [`input_schema_with_host_options`]).
pub fn validate_arguments(command: &str, validator: &Validator, schema: &Value, arguments: &Value) -> Result<(), ProviderError> {
    if !arguments.is_object() {
        return Err(invalid("arguments", format!("`arguments` must be a JSON object of `{command}` arguments, got {}", preview(arguments))));
    }
    check_depth(arguments, MAX_ARGUMENT_DEPTH, "arguments")?;
    validate_instance(validator, schema, arguments, "arguments")
}

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
pub fn check_depth(value: &Value, max_depth: usize, root_field: &str) -> Result<(), ProviderError> {
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
    Err(invalid(
        field.clone(),
        format!("`{root_field}` is nested too deeply: `{field}` is below {max_depth} levels of objects and arrays, the maximum"),
    )
    .with_details(json!({"maxDepth": max_depth})))
}

/// Validate `instance` against a compiled `validator` of `root` (the same schema),
/// mapping the first meaningful failure to a contract error. `root_field` names the
/// instance itself when the failure is about the whole value.
pub fn validate_instance(validator: &Validator, root: &Value, instance: &Value, root_field: &str) -> Result<(), ProviderError> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    let mapper = Mapper { root, root_field };
    let errors: Vec<ValidationError<'_>> = validator.iter_errors(instance).collect();
    let best = mapper.best(&errors);
    Err(best.map(|c| c.error).unwrap_or_else(|| invalid(root_field, format!("`{root_field}` does not match its schema"))))
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
    error: ProviderError,
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
        self.root.pointer(owner).map(|s| resolve(self.root, s))
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
                let mut details = json!({"unexpected": unexpected, "allowed": allowed});
                let near = suggestions(&name, allowed.iter().map(|a| a.as_str()));
                if !near.is_empty() {
                    details["suggestions"] = json!(near);
                }
                Candidate { rank: 0, path, error: refusal("unsupported_argument", message).with_field(field).with_details(details) }
            }
            ValidationErrorKind::FalseSchema if matches!(path.last(), Some(Step::Key(_))) => {
                let field = self.field(&path);
                let error = match self.operation_forbidding(error) {
                    Some(operation) => refusal("unsupported_argument", format!("unsupported argument `{field}`: operation `{operation}` does not accept it"))
                        .with_field(field)
                        .with_details(json!({"operation": operation})),
                    None => refusal("unsupported_argument", format!("unsupported argument `{field}`: it is not accepted here")).with_field(field),
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
                let error = invalid(field.clone(), format!("`{field}` matches more than one of its allowed variants; make it match exactly one"));
                Candidate { rank: 2, path, error }
            }
            kind => {
                let field = self.field(&path);
                let owner = self.keyword_owner(error);
                let mut details = None;
                let message = match (kind, owner) {
                    // A property a schema rules out (`"x": false`), e.g. one of two
                    // exclusive arguments under `dependentSchemas`.
                    (ValidationErrorKind::FalseSchema, _) if !field.is_empty() => {
                        format!("`{field}` cannot be given together with the other arguments of this call")
                    }
                    (ValidationErrorKind::Not { .. } | ValidationErrorKind::PropertyNames { .. } | ValidationErrorKind::FalseSchema, _) | (_, None) => {
                        format!("`{field}` is invalid: {error}")
                    }
                    (_, Some(owner)) => {
                        if let Some(values) = owner.get("enum").cloned().or_else(|| owner.get("const").map(|c| json!([c]))) {
                            let mut d = json!({"allowed": values});
                            if let (Some(got), Some(list)) = (instance.as_str(), values.as_array()) {
                                let near = suggestions(got, list.iter().filter_map(Value::as_str));
                                if !near.is_empty() {
                                    d["suggestions"] = json!(near);
                                }
                            }
                            details = Some(d);
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
                let mut error = invalid(field, message);
                if let Some(details) = details {
                    error = error.with_details(details);
                }
                Candidate { rank: 2, path, error }
            }
        }
    }

    fn missing(&self, path: &[Step], expected: Option<String>, allowed: Option<Vec<Value>>) -> ProviderError {
        let field = self.field(path);
        let mut message = format!("missing required argument `{field}`");
        if let Some(expected) = expected {
            message.push_str(&format!(" ({expected})"));
        }
        let error = refusal("missing_argument", message).with_field(field);
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
        let resolved: Vec<&Value> = branches.iter().map(|b| resolve(self.root, b)).collect();
        let live: Vec<usize> = if branches.is_empty() {
            (0..context.len()).collect()
        } else {
            (0..branches.len()).filter(|&i| admits_type(resolved[i], instance)).collect()
        };
        // No branch takes this JSON type: the type itself is the mistake.
        if live.is_empty() {
            let expected: Vec<String> = resolved.iter().map(|b| describe(self.root, b)).collect();
            let message = format!("`{field}` must be {}, got {}", join_alternatives(&expected), preview(instance));
            return Candidate { rank: 2, path, error: invalid(field, message) };
        }
        if live.len() == 1
            && let Some(best) = self.best(&context[live[0]])
        {
            return best;
        }
        if let Some(tagged) = tagged_union(self.root, branches, &live, None) {
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
                    Candidate { rank: 2, path, error: invalid(field, message) }
                }
                Some(tag) => match tagged.branch_for(tag).and_then(|i| self.best(&context[i])) {
                    Some(best) => best,
                    None => {
                        let tag_field = self.field(&tag_path);
                        let message = format!("`{tag_field}` must be one of {}, got {}", list_values(&allowed), preview(tag));
                        let mut d = json!({"allowed": allowed});
                        if let Some(got) = tag.as_str() {
                            let near = suggestions(got, allowed.iter().filter_map(Value::as_str));
                            if !near.is_empty() {
                                d["suggestions"] = json!(near);
                            }
                        }
                        let error = invalid(tag_field, message).with_details(d);
                        Candidate { rank: 2, path: tag_path, error }
                    }
                },
            };
        }
        // An untagged union: show what each plausible variant objected to.
        let variants: Vec<(usize, ProviderError)> = live.iter().filter_map(|&i| self.best(&context[i]).map(|c| (i, c.error))).collect();
        let summary: Vec<String> = variants.iter().map(|(i, e)| format!("variant {}: {}", i + 1, e.message)).collect();
        let message = format!("`{field}` does not match any of its {} allowed variants ({})", live.len(), summary.join("; "));
        let details: Vec<Value> = variants
            .iter()
            .map(|(i, e)| json!({"variant": i + 1, "error": e.error, "field": e.field, "message": e.message}))
            .collect();
        Candidate { rank: 2, path, error: invalid(field, message).with_details(json!({"variants": details})) }
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

#[doc(hidden)]
/// A short rendering of a value for messages (never the whole of a large value).
pub fn preview(value: &Value) -> String {
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

/// "Did you mean" candidates for a mistyped name or value: those within a small
/// edit distance (a third of the longer word, at least 1, at most 3), closest first.
pub fn suggestions<'a>(got: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut near: Vec<(usize, &str)> = candidates
        .filter(|c| *c != got)
        .map(|c| (edit_distance(got, c), c))
        .filter(|(d, c)| *d <= (got.chars().count().max(c.chars().count()) / 3).clamp(1, 3))
        .collect();
    near.sort();
    near.into_iter().take(3).map(|(_, c)| c.to_string()).collect()
}

/// Levenshtein distance (short names and values only); also the host's
/// "did you mean" for unknown commands.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb { previous } else { 1 + previous.min(row[j]).min(current) };
            previous = current;
        }
    }
    row[b.len()]
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

#[doc(hidden)]
/// One line of English for what a schema accepts, e.g. "an integer ≥ 1 and ≤ 30000"
/// or "one of \"auto\", \"off\", \"full\"". Used in every value error message.
pub fn describe(root: &Value, schema: &Value) -> String {
    let schema = resolve(root, schema);
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

// ---- Schema structure the error selection needs (also used by host discovery) ----
// Public for the host only (`#[doc(hidden)]`): not part of the provider API.

#[doc(hidden)]
/// Follow internal `$ref`s (`#/...`) from `schema`; a bounded number of hops keeps a
/// cyclic reference from looping. Anything unresolvable yields the schema as given.
pub fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..16 {
        let Some(Value::String(target)) = schema.get("$ref") else { break };
        let Some(pointer) = target.strip_prefix('#') else { break };
        match root.pointer(pointer) {
            Some(next) => schema = next,
            None => break,
        }
    }
    schema
}

#[doc(hidden)]
/// The JSON type name of a value, as JSON Schema spells it.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[doc(hidden)]
/// Whether `schema`'s own `type` keyword admits `value` (absent `type` admits all).
/// Used to discard union branches that cannot apply before explaining a failure.
pub fn admits_type(schema: &Value, value: &Value) -> bool {
    let actual = json_type(value);
    let admits = |t: &str| t == actual || (t == "number" && actual == "integer");
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => match map.get("type") {
            Some(Value::String(t)) => admits(t),
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(admits),
            _ => true,
        },
        _ => true,
    }
}

#[doc(hidden)]
/// The values a property schema pins with `const` or a non-empty `enum`.
pub fn pinned_values(property: &Value) -> Option<Vec<Value>> {
    if let Some(c) = property.get("const") {
        return Some(vec![c.clone()]);
    }
    match property.get("enum") {
        Some(Value::Array(values)) if !values.is_empty() => Some(values.clone()),
        _ => None,
    }
}

#[doc(hidden)]
/// A union whose branches are told apart by one property's value.
#[derive(Debug)]
pub struct TaggedUnion {
    pub property: String,
    /// `(index into the union's array, values selecting that branch)`.
    pub branches: Vec<(usize, Vec<Value>)>,
}

impl TaggedUnion {
    /// Every accepted tag value, in branch order.
    pub fn allowed(&self) -> Vec<Value> {
        self.branches.iter().flat_map(|(_, values)| values.iter().cloned()).collect()
    }

    /// The union index of the branch selected by `value`.
    pub fn branch_for(&self, value: &Value) -> Option<usize> {
        self.branches.iter().find(|(_, values)| values.contains(value)).map(|(i, _)| *i)
    }
}

#[doc(hidden)]
/// Recognise a tagged union among `candidates` (indices into `branches`): every
/// candidate pins the same property to disjoint values. `preferred` is tried first
/// (discovery asks specifically for `operation`); otherwise the first qualifying
/// property of the first branch wins, which keeps the choice deterministic.
pub fn tagged_union(root: &Value, branches: &[Value], candidates: &[usize], preferred: Option<&str>) -> Option<TaggedUnion> {
    let first = resolve(root, branches.get(*candidates.first()?)?);
    let names: Vec<&String> = first.get("properties")?.as_object()?.keys().collect();
    let ordered = preferred
        .filter(|p| names.iter().any(|n| n == p))
        .map(str::to_string)
        .into_iter()
        .chain(names.iter().map(|n| n.to_string()));
    'property: for property in ordered {
        let mut tagged = TaggedUnion { property: property.clone(), branches: Vec::new() };
        let mut seen: Vec<Value> = Vec::new();
        for &i in candidates {
            let branch = resolve(root, &branches[i]);
            let Some(prop) = branch.get("properties").and_then(|p| p.get(&property)) else { continue 'property };
            let Some(values) = pinned_values(resolve(root, prop)) else { continue 'property };
            if values.iter().any(|v| seen.contains(v)) {
                continue 'property;
            }
            seen.extend(values.iter().cloned());
            tagged.branches.push((i, values));
        }
        return Some(tagged);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistyped_flags_and_values_carry_did_you_mean_suggestions() {
        let spec = CommandSpec::query("echo").domain("core").input_schema(json!({
            "type": "object", "additionalProperties": false,
            "properties": {"operation": {"type": "string", "enum": ["start", "status", "stop"]}, "message": {"type": "string"}}
        }));
        let schema = input_schema_with_host_options(&spec);
        let validator = compile(&schema).unwrap();
        let check = |args: Value| validate_arguments("echo", &validator, &schema, &args).unwrap_err();
        assert_eq!(check(json!({"opration": "start"})).details.unwrap()["suggestions"], json!(["operation"]));
        assert_eq!(check(json!({"operation": "sttus"})).details.unwrap()["suggestions"], json!(["status"]));
        assert!(check(json!({"operation": "launch"})).details.unwrap().get("suggestions").is_none(), "nothing near: no suggestion");
        assert_eq!(suggestions("stp", ["start", "status", "stop"].into_iter()), ["stop"]);
    }

    #[test]
    fn arguments_are_validated_like_the_host_does() {
        let spec = CommandSpec::query("echo").domain("core").input_schema(json!({
            "type": "object", "additionalProperties": false,
            "properties": {"message": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
            "required": ["message"]
        }));
        let schema = input_schema_with_host_options(&spec);
        let validator = compile(&schema).unwrap();
        let check = |args: Value| validate_arguments("echo", &validator, &schema, &args);
        check(json!({"message": "hi", "requestId": "r", "feedback": "off", "timeoutMs": 30000})).unwrap();
        let e = check(json!([])).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("invalid_argument", Some("arguments")));
        let e = check(json!({})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("missing_argument", Some("message")));
        let e = check(json!({"message": "hi", "colour": "red"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("unsupported_argument", Some("colour")));
        let e = check(json!({"message": "hi", "timeoutMs": 30001})).unwrap_err();
        assert_eq!(e.message, "`timeoutMs` must be an integer ≥ 1 and ≤ 30000, got 30001");
        let e = check(json!({"message": "hi", "count": "2"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("invalid_argument", Some("count"), Some(false)));
    }
}
