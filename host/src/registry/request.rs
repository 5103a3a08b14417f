//! The public request `{command, arguments, extract, output?}` shared by MCP `run`
//! and the CLI: its schema (what adapters advertise) and its parser (what the host
//! accepts). Parsing uses that same schema, so the advertised contract and the
//! accepted one cannot drift; the few checks a schema cannot express well (regex
//! compilation, flag uniqueness, the not-yet-available script mode) run around it.
//! Everything here happens before dispatch: a bad `extract` never reaches a device.

use std::sync::OnceLock;

use jsonschema::Validator;
use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value, json};

use super::discovery::DEFAULT_OUTPUT_BYTES;
use super::validate;
use crate::error::CommandError;

/// Accepted range of `output.maxBytes`.
pub const MIN_OUTPUT_BYTES: usize = 16 * 1024;
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Extraction deadline when `extract.timeoutMs` is absent; it covers the whole
/// extraction step.
pub const DEFAULT_EXTRACT_TIMEOUT_MS: u64 = 2000;
pub const MAX_EXTRACT_TIMEOUT_MS: u64 = 10_000;
pub const MAX_PATTERN_CHARS: usize = 2048;
/// Compiled-program size cap: patterns are untrusted, and a bounded automaton keeps
/// both compile time and matching memory in check.
const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq)]
pub struct RegexExtract {
    pub pattern: String,
    /// JSON Pointer into the result; `""` is the whole value (or the text).
    pub input_path: String,
    /// A subset of `imsu`, each at most once.
    pub flags: String,
    pub timeout_ms: u64,
}

impl RegexExtract {
    /// Compile the pattern honouring the flags: `i` case-insensitive, `m` `^`/`$` at
    /// line boundaries, `s` `.` matches newlines. `u` is accepted for compatibility;
    /// matching is always Unicode-aware here.
    pub fn compile(&self) -> Result<Regex, CommandError> {
        RegexBuilder::new(&self.pattern)
            .case_insensitive(self.flags.contains('i'))
            .multi_line(self.flags.contains('m'))
            .dot_matches_new_line(self.flags.contains('s'))
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| {
                CommandError::invalid("extract.pattern", format!("`extract.pattern` is not a valid regular expression: {e}"))
                    .with_details(json!({"pattern": self.pattern}))
            })
    }
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

/// Parse and check a public request. Command arguments are only checked to be an
/// object here; [`super::Registry::validate`] owns their schema.
pub fn parse_public_request(v: &Value) -> Result<PublicRequest, CommandError> {
    let Value::Object(request) = v else {
        return Err(CommandError::invalid("request", format!("the request must be a JSON object, got {}", validate::preview(v))));
    };
    // Explicit first checks, in the order an agent most often needs them.
    if let Some(key) = request.keys().find(|k| !["command", "arguments", "extract", "output"].contains(&k.as_str())) {
        return Err(CommandError::new(
            "unsupported_argument",
            format!("unsupported request field `{key}`: a request has `command`, `arguments`, `extract` and `output`; command parameters go inside `arguments`"),
        )
        .with_field(key.clone()));
    }
    let Some(extract) = request.get("extract") else {
        return Err(CommandError::new(
            "missing_argument",
            "missing required argument `extract`: pass `null` for the command's own result or `{\"mode\":\"regex\", ...}` to extract from it",
        )
        .with_field("extract"));
    };
    if extract.get("mode") == Some(&json!("script")) {
        return Err(CommandError::invalid(
            "extract.mode",
            "script extraction is not supported by this build; use `{\"mode\":\"regex\", ...}` or `null`",
        )
        .with_details(json!({"allowed": ["regex"]})));
    }
    if let Some(Value::String(flags)) = extract.get("flags") {
        check_flags(flags)?;
    }
    validate::validate_instance(request_validator(), request_schema(), v, "request")?;

    let extract = match extract {
        Value::Null => Extract::None,
        spec => {
            let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
            let regex = RegexExtract {
                pattern: text("pattern"),
                input_path: text("inputPath"),
                flags: text("flags"),
                timeout_ms: spec.get("timeoutMs").and_then(Value::as_u64).unwrap_or(DEFAULT_EXTRACT_TIMEOUT_MS),
            };
            regex.compile()?;
            Extract::Regex(regex)
        }
    };
    Ok(PublicRequest {
        command: request.get("command").and_then(Value::as_str).unwrap_or_default().to_string(),
        arguments: request.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default(),
        extract,
        output_max_bytes: request
            .get("output")
            .and_then(|o| o.get("maxBytes"))
            .and_then(Value::as_u64)
            .map_or(DEFAULT_OUTPUT_BYTES, |n| n as usize),
    })
}

/// `g` and `y` are JavaScript iteration flags with no meaning here (all matches are
/// always returned, from the start); a repeated flag is almost certainly a mistake.
fn check_flags(flags: &str) -> Result<(), CommandError> {
    for (i, flag) in flags.chars().enumerate() {
        if flag == 'g' || flag == 'y' {
            return Err(CommandError::invalid(
                "extract.flags",
                format!("`extract.flags` may not contain `{flag}`: regex extraction always returns all matches; accepted flags are i, m, s, u"),
            )
            .with_details(json!({"allowed": ["i", "m", "s", "u"]})));
        }
        if flags.chars().take(i).any(|earlier| earlier == flag) {
            return Err(CommandError::invalid("extract.flags", format!("`extract.flags` repeats `{flag}`; each flag may appear once")));
        }
    }
    Ok(())
}

/// The MCP `run` input schema. It documents only what this build accepts.
pub fn public_request_schema() -> Value {
    request_schema().clone()
}

fn request_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "Command name (see the capabilities tool)"},
                "arguments": {"type": "object", "description": "The command's arguments (default {})"},
                "extract": {
                    "description": "null delivers the command's own result; a regex extraction returns all matches of a pattern in the result",
                    "oneOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "mode": {"const": "regex"},
                                "pattern": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS},
                                "inputPath": {
                                    "type": "string",
                                    "pattern": "^(/([^~/]|~[01])*)*$",
                                    "description": "a JSON Pointer: \"\" for the whole result, otherwise starting with \"/\", with ~ escaped as ~0 and / as ~1"
                                },
                                "flags": {"type": "string", "pattern": "^[imsu]*$", "maxLength": 4, "description": "a subset of the flags i, m, s, u, each at most once"},
                                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": MAX_EXTRACT_TIMEOUT_MS}
                            },
                            "required": ["mode", "pattern", "inputPath"]
                        }
                    ]
                },
                "output": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"maxBytes": {"type": "integer", "minimum": MIN_OUTPUT_BYTES, "maximum": MAX_OUTPUT_BYTES}}
                }
            },
            "required": ["command", "extract"]
        })
    })
}

fn request_validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    // The schema is a constant of this module; a failure is a bug caught by tests.
    VALIDATOR.get_or_init(|| validate::compile(request_schema()).expect("the public request schema compiles"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<PublicRequest, CommandError> {
        parse_public_request(&v)
    }

    fn field_of(v: Value) -> (String, Option<String>) {
        let e = parse(v).expect_err("request should be rejected");
        (e.code, e.field)
    }

    #[test]
    fn minimal_request_gets_defaults() {
        let r = parse(json!({"command": "status", "extract": null})).unwrap();
        assert_eq!(r, PublicRequest { command: "status".into(), arguments: Map::new(), extract: Extract::None, output_max_bytes: 98304 });
    }

    #[test]
    fn full_regex_request() {
        let r = parse(json!({
            "command": "tree", "arguments": {"packageName": "a"},
            "extract": {"mode": "regex", "pattern": "id=(\\d+)", "inputPath": "/nodes/0/te~1xt", "flags": "im", "timeoutMs": 500},
            "output": {"maxBytes": 16384}
        }))
        .unwrap();
        assert_eq!(r.arguments["packageName"], json!("a"));
        assert_eq!(r.output_max_bytes, 16384);
        assert_eq!(
            r.extract,
            Extract::Regex(RegexExtract { pattern: "id=(\\d+)".into(), input_path: "/nodes/0/te~1xt".into(), flags: "im".into(), timeout_ms: 500 })
        );
        let r = parse(json!({"command": "x", "extract": {"mode": "regex", "pattern": "a", "inputPath": ""}})).unwrap();
        assert!(matches!(r.extract, Extract::Regex(RegexExtract { timeout_ms: 2000, .. })));
    }

    #[test]
    fn missing_and_unsupported_fields() {
        assert_eq!(field_of(json!({"command": "status"})), ("missing_argument".into(), Some("extract".into())));
        assert_eq!(field_of(json!({"command": "status", "extract": null, "packageName": "a"})), ("unsupported_argument".into(), Some("packageName".into())));
        assert_eq!(field_of(json!({"extract": null})), ("missing_argument".into(), Some("command".into())));
        assert_eq!(field_of(json!({"command": "", "extract": null})), ("invalid_argument".into(), Some("command".into())));
        assert_eq!(field_of(json!({"command": "a", "arguments": [], "extract": null})), ("invalid_argument".into(), Some("arguments".into())));
        assert_eq!(field_of(json!({"command": "a", "extract": null, "output": {"maxBytes": 1024}})), ("invalid_argument".into(), Some("output.maxBytes".into())));
        assert_eq!(field_of(json!({"command": "a", "extract": null, "output": {"maxBytes": 262145}})), ("invalid_argument".into(), Some("output.maxBytes".into())));
        assert_eq!(field_of(json!({"command": "a", "extract": null, "output": {"limit": 1}})), ("unsupported_argument".into(), Some("output.limit".into())));
        assert_eq!(field_of(json!("status")), ("invalid_argument".into(), Some("request".into())));
    }

    #[test]
    fn extract_variants() {
        let e = parse(json!({"command": "a", "extract": 5})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("extract"));
        assert_eq!(e.message, "`extract` must be null or an object, got 5");
        let e = parse(json!({"command": "a", "extract": {"mode": "script", "language": "python", "source": "x"}})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("extract.mode")));
        assert!(e.message.contains("not supported by this build"), "{}", e.message);
        assert_eq!(e.details, Some(json!({"allowed": ["regex"]})));
        let regex = |extra: Value| {
            let mut spec = json!({"mode": "regex", "pattern": "a", "inputPath": ""});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    spec.as_object_mut().unwrap().remove(k);
                } else {
                    spec[k] = v.clone();
                }
            }
            field_of(json!({"command": "a", "extract": spec}))
        };
        assert_eq!(regex(json!({"mode": "xpath"})), ("invalid_argument".into(), Some("extract.mode".into())));
        assert_eq!(regex(json!({"mode": null})), ("missing_argument".into(), Some("extract.mode".into())));
        assert_eq!(regex(json!({"pattern": null})), ("missing_argument".into(), Some("extract.pattern".into())));
        assert_eq!(regex(json!({"pattern": ""})), ("invalid_argument".into(), Some("extract.pattern".into())));
        assert_eq!(regex(json!({"pattern": "a".repeat(2049)})), ("invalid_argument".into(), Some("extract.pattern".into())));
        assert_eq!(regex(json!({"pattern": "(unclosed"})), ("invalid_argument".into(), Some("extract.pattern".into())));
        assert_eq!(regex(json!({"inputPath": null})), ("missing_argument".into(), Some("extract.inputPath".into())));
        assert_eq!(regex(json!({"inputPath": "a/b"})), ("invalid_argument".into(), Some("extract.inputPath".into())));
        assert_eq!(regex(json!({"inputPath": "/a~2"})), ("invalid_argument".into(), Some("extract.inputPath".into())));
        assert_eq!(regex(json!({"flags": "g"})), ("invalid_argument".into(), Some("extract.flags".into())));
        assert_eq!(regex(json!({"flags": "ii"})), ("invalid_argument".into(), Some("extract.flags".into())));
        assert_eq!(regex(json!({"flags": "x"})), ("invalid_argument".into(), Some("extract.flags".into())));
        assert_eq!(regex(json!({"timeoutMs": 0})), ("invalid_argument".into(), Some("extract.timeoutMs".into())));
        assert_eq!(regex(json!({"timeoutMs": 10001})), ("invalid_argument".into(), Some("extract.timeoutMs".into())));
        assert_eq!(regex(json!({"source": "x"})), ("unsupported_argument".into(), Some("extract.source".into())));
        let e = parse(json!({"command": "a", "extract": {"mode": "regex", "pattern": "a", "inputPath": "a"}})).unwrap_err();
        assert!(e.message.starts_with("`extract.inputPath` must be a JSON Pointer"), "{}", e.message);
    }

    #[test]
    fn schema_documents_only_accepted_modes() {
        let schema = public_request_schema();
        let modes: Vec<&Value> = schema["properties"]["extract"]["oneOf"].as_array().unwrap().iter().filter_map(|b| b.pointer("/properties/mode/const")).collect();
        assert_eq!(modes, [&json!("regex")]);
        assert_eq!(schema["required"], json!(["command", "extract"]));
    }
}
