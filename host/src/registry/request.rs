//! The public request `{command, arguments, extract, output?}` shared by MCP `run`
//! and the CLI: its schema (what adapters advertise) and its parser (what the host
//! accepts). Parsing uses that same schema, so the advertised contract and the
//! accepted one cannot drift; the few checks a schema cannot express well (regex
//! compilation, flag uniqueness, the UTF-8 size of a script source, a clear word on
//! `source` vs `sourcePath`) run around it. Everything here happens before
//! dispatch: a bad `extract` never reaches a device. A script extraction is only
//! parsed here — its file is not read and nothing runs; the host hands the
//! [`ScriptExtract`] with the caller's cwd to `aab_extract::prepare` before it
//! dispatches the command.

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
/// Script source limits (the same as `aab_extract::MAX_SOURCE_CHARS` /
/// `MAX_SOURCE_BYTES`, which enforces them again on the frozen text): 65 536
/// characters and 64 KiB of UTF-8.
pub const MAX_SCRIPT_SOURCE_CHARS: usize = 65_536;
pub const MAX_SCRIPT_SOURCE_BYTES: usize = 64 * 1024;
/// Longest `extract.sourcePath` (Linux `PATH_MAX`).
pub const MAX_SCRIPT_SOURCE_PATH_CHARS: usize = 4096;
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

/// The language of a script extraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptLanguage {
    JavaScript,
    Python,
}

impl ScriptLanguage {
    /// The contract's name, as `aab_extract::Language::from_name` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ScriptLanguage::JavaScript => "javascript",
            ScriptLanguage::Python => "python",
        }
    }
}

/// `extract: {mode:"script", language, source | sourcePath, timeoutMs?}`: exactly
/// one of `source` and `source_path` is set. `source_path` is as given (relative
/// paths resolve against the caller's cwd when the script is prepared).
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptExtract {
    pub language: ScriptLanguage,
    pub source: Option<String>,
    pub source_path: Option<String>,
    pub timeout_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Extract {
    /// `extract: null` — deliver the original result.
    None,
    Regex(RegexExtract),
    Script(ScriptExtract),
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
            "missing required argument `extract`: pass `null` for the command's own result, or `{\"mode\":\"regex\", ...}` / `{\"mode\":\"script\", ...}` to extract from it",
        )
        .with_field("extract"));
    };
    let is_script = extract.get("mode") == Some(&json!("script"));
    // Flags belong to regex mode; on a script the schema reports them as unsupported.
    if extract.get("mode") == Some(&json!("regex"))
        && let Some(Value::String(flags)) = extract.get("flags")
    {
        check_flags(flags)?;
    }
    if !plainly_valid(request)
        && let Err(e) = validate::validate_instance(request_validator(), request_schema(), v, "request")
    {
        // On a script extraction the only error about `extract` as a whole is the
        // source/sourcePath choice; say that plainly instead of "matches more than
        // one variant".
        if is_script && e.field.as_deref() == Some("extract") {
            return Err(source_choice_error(extract).unwrap_or(e));
        }
        return Err(e);
    }

    let text = |key: &str| extract.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let timeout_ms = extract.get("timeoutMs").and_then(Value::as_u64).unwrap_or(DEFAULT_EXTRACT_TIMEOUT_MS);
    let extract = match extract {
        Value::Null => Extract::None,
        _ if is_script => {
            let source = extract.get("source").and_then(Value::as_str).map(str::to_string);
            if let Some(source) = &source {
                check_source_size(source)?;
            }
            Extract::Script(ScriptExtract {
                language: if text("language") == "python" { ScriptLanguage::Python } else { ScriptLanguage::JavaScript },
                source,
                source_path: extract.get("sourcePath").and_then(Value::as_str).map(str::to_string),
                timeout_ms,
            })
        }
        _ => {
            let regex = RegexExtract { pattern: text("pattern"), input_path: text("inputPath"), flags: text("flags"), timeout_ms };
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

/// Exactly one of `source` and `sourcePath`: the error when that is not so.
fn source_choice_error(extract: &Value) -> Option<CommandError> {
    let details = json!({"exactlyOneOf": ["source", "sourcePath"]});
    match (extract.get("source").is_some(), extract.get("sourcePath").is_some()) {
        (true, true) => Some(
            CommandError::invalid(
                "extract",
                "`extract` takes exactly one of `source` (the script text) and `sourcePath` (a file, resolved against the caller's working directory), got both",
            )
            .with_details(details),
        ),
        (false, false) => Some(
            CommandError::new(
                "missing_argument",
                "missing required argument `extract.source`: a script extraction needs exactly one of `source` (the script text) and `sourcePath` (a file, resolved against the caller's working directory)",
            )
            .with_field("extract.source")
            .with_details(details),
        ),
        _ => None,
    }
}

/// The schema bounds characters; the contract also bounds UTF-8 bytes.
fn check_source_size(source: &str) -> Result<(), CommandError> {
    if source.len() > MAX_SCRIPT_SOURCE_BYTES {
        return Err(CommandError::invalid(
            "extract.source",
            format!("`extract.source` is {} bytes of UTF-8; the limit is {MAX_SCRIPT_SOURCE_BYTES} bytes (and {MAX_SCRIPT_SOURCE_CHARS} characters)", source.len()),
        )
        .with_details(json!({"limitBytes": MAX_SCRIPT_SOURCE_BYTES, "actualBytes": source.len()})));
    }
    Ok(())
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
                    "description": "null delivers the command's own result; a regex extraction returns all matches of a pattern in the result; a script extraction returns what `main(ctx)` returns for ctx.inputs = {kind, response, execution, control}",
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
                        },
                        {
                            "type": "object",
                            "additionalProperties": false,
                            "description": "runs trusted local code after the command completed, in a fresh node or python3 process; main(ctx) must return strict JSON (at most 256 KiB)",
                            "properties": {
                                "mode": {"const": "script"},
                                "language": {"type": "string", "enum": ["javascript", "python"]},
                                "source": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": MAX_SCRIPT_SOURCE_CHARS,
                                    "description": "the script text, defining main(ctx); at most 65536 characters and 64 KiB of UTF-8"
                                },
                                "sourcePath": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": MAX_SCRIPT_SOURCE_PATH_CHARS,
                                    "pattern": "^[^\\x00]*$",
                                    "description": "a script file, resolved against the caller's working directory and read before the command runs"
                                },
                                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": MAX_EXTRACT_TIMEOUT_MS}
                            },
                            "required": ["mode", "language"],
                            "oneOf": [{"required": ["source"]}, {"required": ["sourcePath"]}]
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

/// Whether the request is the common shape that [`request_schema`] accepts on sight:
/// a non-empty `command`, `arguments` absent or an object, `extract: null`, no
/// `output` (unknown fields were refused before). Compiling the schema costs more
/// CPU than all the rest of a CLI call's validation, and each CLI call is a new
/// process, so the plain shape skips it. `plain_shape_agrees_with_the_schema` holds
/// this to the schema's verdict.
fn plainly_valid(request: &serde_json::Map<String, Value>) -> bool {
    request.get("extract") == Some(&Value::Null)
        && !request.contains_key("output")
        && matches!(request.get("command"), Some(Value::String(c)) if !c.is_empty())
        && request.get("arguments").is_none_or(Value::is_object)
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
    fn plain_shape_agrees_with_the_schema() {
        let samples = [
            json!({"command": "status", "extract": null}),
            json!({"command": "status", "arguments": {}, "extract": null}),
            json!({"command": "status", "arguments": {"a": [1, {"b": null}]}, "extract": null}),
            json!({"command": "\u{e9}", "arguments": {}, "extract": null}),
            json!({"command": "", "arguments": {}, "extract": null}),
            json!({"command": 1, "arguments": {}, "extract": null}),
            json!({"command": null, "extract": null}),
            json!({"command": "status", "arguments": [], "extract": null}),
            json!({"command": "status", "arguments": null, "extract": null}),
            json!({"command": "status", "arguments": "x", "extract": null}),
            json!({"command": "status", "arguments": {}, "extract": null, "output": {"maxBytes": 4096}}),
            json!({"command": "status", "arguments": {}, "extract": {"mode": "regex", "pattern": "a", "inputPath": ""}}),
            json!({"arguments": {}, "extract": null}),
        ];
        for sample in samples {
            let Value::Object(map) = &sample else { unreachable!() };
            if plainly_valid(map) {
                assert!(request_validator().is_valid(&sample), "the fast path accepted what the schema refuses: {sample}");
            }
        }
        // It is taken for the shapes every CLI call sends.
        for plain in [json!({"command": "status", "extract": null}), json!({"command": "status", "arguments": {"x": 1}, "extract": null})] {
            let Value::Object(map) = &plain else { unreachable!() };
            assert!(plainly_valid(map), "{plain}");
        }
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
        let e = parse(json!({"command": "a", "extract": {"mode": "sql", "query": "x"}})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("extract.mode")));
        assert_eq!(e.details, Some(json!({"allowed": ["regex", "script"]})));
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
        assert_eq!(modes, [&json!("regex"), &json!("script")]);
        assert_eq!(schema["required"], json!(["command", "extract"]));
    }

    /// Parse `{command:"a", extract: <script spec>}` where `extra` overrides (or,
    /// with null, removes) keys of a valid inline JavaScript spec.
    fn script(extra: Value) -> Result<PublicRequest, CommandError> {
        let mut spec = json!({"mode": "script", "language": "javascript", "source": "function main(ctx) { return 1; }"});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                spec.as_object_mut().unwrap().remove(k);
            } else {
                spec[k] = v.clone();
            }
        }
        parse(json!({"command": "a", "extract": spec}))
    }

    fn script_field_of(extra: Value) -> (String, Option<String>) {
        let e = script(extra).expect_err("script spec should be rejected");
        (e.code, e.field)
    }

    #[test]
    fn script_requests_are_accepted() {
        let r = script(json!({})).unwrap();
        assert_eq!(
            r.extract,
            Extract::Script(ScriptExtract {
                language: ScriptLanguage::JavaScript,
                source: Some("function main(ctx) { return 1; }".into()),
                source_path: None,
                timeout_ms: DEFAULT_EXTRACT_TIMEOUT_MS,
            })
        );
        // A path is taken as given: parsing neither resolves nor reads it.
        let r = script(json!({"language": "python", "source": null, "sourcePath": "/nonexistent/extract.py", "timeoutMs": 10000})).unwrap();
        assert_eq!(
            r.extract,
            Extract::Script(ScriptExtract { language: ScriptLanguage::Python, source: None, source_path: Some("/nonexistent/extract.py".into()), timeout_ms: 10000 })
        );
        assert_eq!(ScriptLanguage::Python.name(), "python");
        let r = script(json!({"source": null, "sourcePath": "scripts/x.js", "timeoutMs": 1})).unwrap();
        assert!(matches!(r.extract, Extract::Script(ScriptExtract { timeout_ms: 1, .. })));
    }

    #[test]
    fn script_needs_exactly_one_source() {
        let e = script(json!({"sourcePath": "x.js"})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("extract")));
        assert!(e.message.contains("exactly one of `source`"), "{}", e.message);
        assert_eq!(e.details, Some(json!({"exactlyOneOf": ["source", "sourcePath"]})));
        let e = script(json!({"source": null})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("extract.source")));
        assert!(e.message.contains("`sourcePath`"), "{}", e.message);
        // A typo is reported as the unknown key it is, before the missing source.
        assert_eq!(script_field_of(json!({"source": null, "sourcepath": "x.js"})), ("unsupported_argument".into(), Some("extract.sourcepath".into())));
        // A missing language comes before the source choice.
        assert_eq!(script_field_of(json!({"language": null, "source": null})), ("missing_argument".into(), Some("extract.language".into())));
    }

    #[test]
    fn script_source_limits() {
        let head = "function main() { return 1; }\n";
        let exact = format!("{head}{}", "/".repeat(MAX_SCRIPT_SOURCE_BYTES - head.len()));
        assert_eq!(exact.len(), MAX_SCRIPT_SOURCE_BYTES);
        assert!(script(json!({"source": exact})).is_ok());
        let e = script(json!({"source": format!("{exact}/")})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("extract.source")));
        // Under 65 536 characters but over 64 KiB of UTF-8.
        let wide = format!("// {}\nfunction main() {{ return 1; }}", "é".repeat(40_000));
        let e = script(json!({"source": wide.clone()})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("extract.source"));
        assert!(e.message.contains("bytes of UTF-8"), "{}", e.message);
        assert_eq!(e.details.as_ref().unwrap()["actualBytes"], json!(wide.len()));
        // Over 65 536 characters: the schema's maxLength.
        assert_eq!(script_field_of(json!({"source": "x".repeat(MAX_SCRIPT_SOURCE_CHARS + 1)})), ("invalid_argument".into(), Some("extract.source".into())));
        assert_eq!(script_field_of(json!({"source": ""})), ("invalid_argument".into(), Some("extract.source".into())));
        assert_eq!(script_field_of(json!({"source": null, "sourcePath": ""})), ("invalid_argument".into(), Some("extract.sourcePath".into())));
        assert_eq!(script_field_of(json!({"source": null, "sourcePath": "a\u{0}b"})), ("invalid_argument".into(), Some("extract.sourcePath".into())));
        assert_eq!(
            script_field_of(json!({"source": null, "sourcePath": "a".repeat(MAX_SCRIPT_SOURCE_PATH_CHARS + 1)})),
            ("invalid_argument".into(), Some("extract.sourcePath".into()))
        );
    }

    #[test]
    fn script_language_timeout_and_foreign_fields() {
        let e = script(json!({"language": "ruby"})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("extract.language")));
        assert_eq!(e.details, Some(json!({"allowed": ["javascript", "python"]})));
        assert_eq!(script_field_of(json!({"language": "JavaScript"})), ("invalid_argument".into(), Some("extract.language".into())));
        assert_eq!(script_field_of(json!({"language": 1})), ("invalid_argument".into(), Some("extract.language".into())));
        assert_eq!(script_field_of(json!({"timeoutMs": 0})), ("invalid_argument".into(), Some("extract.timeoutMs".into())));
        assert_eq!(script_field_of(json!({"timeoutMs": 10001})), ("invalid_argument".into(), Some("extract.timeoutMs".into())));
        assert_eq!(script_field_of(json!({"timeoutMs": "500"})), ("invalid_argument".into(), Some("extract.timeoutMs".into())));
        // Regex-only fields are unsupported on a script, whatever their value:
        // `flags: "g"` must not be judged as a regex flag.
        assert_eq!(script_field_of(json!({"flags": "g"})), ("unsupported_argument".into(), Some("extract.flags".into())));
        assert_eq!(script_field_of(json!({"flags": "i"})), ("unsupported_argument".into(), Some("extract.flags".into())));
        assert_eq!(script_field_of(json!({"pattern": "a"})), ("unsupported_argument".into(), Some("extract.pattern".into())));
        assert_eq!(script_field_of(json!({"inputPath": ""})), ("unsupported_argument".into(), Some("extract.inputPath".into())));
        // Without `mode` the branch cannot be chosen.
        let e = script(json!({"mode": null})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("extract.mode")));
        assert_eq!(e.details, Some(json!({"allowed": ["regex", "script"]})));
    }
}
