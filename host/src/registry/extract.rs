//! Regex extraction applied to a command result after the command completed: every
//! match of the pattern in one string of the result, with its capture groups.
//! The request was already checked by [`super::request`]; errors here describe the
//! result (wrong type, missing path, too many matches), so the caller reports them as
//! an extraction failure of a command that did run.

use serde_json::{Map, Value, json};

use super::request::RegexExtract;
use super::schema::json_type;
use crate::error::CommandError;

/// More matches than this is an extraction mistake (a too-general pattern), not a
/// result worth delivering.
pub const MAX_MATCHES: usize = 1000;

/// Apply a regex extraction to a result of `kind` (`json`, `text` or `bytes`; a text
/// result is a `Value::String`). Returns `[{match, groups, namedGroups}]`.
pub fn apply_regex(spec: &RegexExtract, kind: &str, value: &Value) -> Result<Value, CommandError> {
    if kind == "bytes" {
        return Err(CommandError::new("extraction_binary_unsupported", "regex extraction needs a JSON or text result; this command returned bytes"));
    }
    let input = if spec.input_path.is_empty() { Some(value) } else { value.pointer(&spec.input_path) };
    let Some(input) = input else {
        return Err(CommandError::new(
            "extraction_path_not_found",
            format!("`extract.inputPath` `{}` does not exist in the {kind} result", spec.input_path),
        )
        .with_field("extract.inputPath")
        .with_details(json!({"inputPath": spec.input_path})));
    };
    let Value::String(text) = input else {
        return Err(CommandError::new(
            "extraction_input_type",
            format!("regex extraction needs a string, but the value at `{}` is {}", display_path(&spec.input_path), article(json_type(input))),
        )
        .with_field("extract.inputPath")
        .with_details(json!({"inputPath": spec.input_path, "actualType": json_type(input)})));
    };
    let regex = spec.compile()?;
    let names: Vec<(usize, &str)> = regex.capture_names().enumerate().filter_map(|(i, name)| name.map(|n| (i, n))).collect();
    let text_of = |m: Option<regex::Match<'_>>| m.map_or(Value::Null, |m| Value::String(m.as_str().to_string()));

    // Walk matches like JavaScript's `matchAll` with the `u` flag: after an empty
    // match, step one character forward so the scan always progresses and never
    // splits a UTF-8 sequence.
    let mut matches = Vec::new();
    let mut at = 0;
    while at <= text.len() {
        let Some(caps) = regex.captures_at(text, at) else { break };
        if matches.len() == MAX_MATCHES {
            return Err(CommandError::new(
                "extraction_match_limit",
                format!("the pattern matched more than {MAX_MATCHES} times; make it more specific or narrow `extract.inputPath`"),
            )
            .with_field("extract.pattern")
            .with_details(json!({"limit": MAX_MATCHES})));
        }
        let whole = caps.get(0).expect("group 0 is the whole match");
        let groups: Vec<Value> = (1..caps.len()).map(|i| text_of(caps.get(i))).collect();
        let named: Map<String, Value> = names.iter().map(|(i, name)| (name.to_string(), text_of(caps.get(*i)))).collect();
        matches.push(json!({"match": whole.as_str(), "groups": groups, "namedGroups": named}));
        at = if whole.is_empty() {
            match text[whole.end()..].chars().next() {
                Some(c) => whole.end() + c.len_utf8(),
                None => break,
            }
        } else {
            whole.end()
        };
    }
    Ok(Value::Array(matches))
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "\"\" (the whole result)" } else { path }
}

fn article(kind: &str) -> String {
    match kind {
        "null" => "null".into(),
        "integer" | "object" | "array" => format!("an {kind}"),
        other => format!("a {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: &str, input_path: &str, flags: &str) -> RegexExtract {
        RegexExtract { pattern: pattern.into(), input_path: input_path.into(), flags: flags.into(), timeout_ms: 2000 }
    }

    #[test]
    fn all_matches_with_groups_and_named_groups() {
        let result = json!({"log": "id=7 ok; id=42 fail; id=x"});
        let out = apply_regex(&spec(r"id=(?<num>\d+) (ok|(fail))", "/log", ""), "json", &result).unwrap();
        assert_eq!(
            out,
            json!([
                {"match": "id=7 ok", "groups": ["7", "ok", null], "namedGroups": {"num": "7"}},
                {"match": "id=42 fail", "groups": ["42", "fail", "fail"], "namedGroups": {"num": "42"}}
            ])
        );
    }

    #[test]
    fn text_results_and_no_match() {
        let text = Value::String("Alpha\nbeta".into());
        assert_eq!(apply_regex(&spec("gamma", "", ""), "text", &text).unwrap(), json!([]));
        let out = apply_regex(&spec("^b\\w+", "", ""), "text", &text).unwrap();
        assert_eq!(out, json!([]), "without m, ^ anchors only at the start");
    }

    #[test]
    fn flags_are_honoured() {
        let text = Value::String("Alpha\nbeta".into());
        let matches = |flags: &str, pattern: &str| {
            apply_regex(&spec(pattern, "", flags), "text", &text).unwrap().as_array().unwrap().iter().map(|m| m["match"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(matches("m", "^\\w+"), ["Alpha", "beta"]);
        assert_eq!(matches("i", "ALPHA"), ["Alpha"]);
        assert!(matches("", "ALPHA").is_empty());
        assert_eq!(matches("s", "a.b"), ["a\nb"]);
        assert!(matches("", "a.b").is_empty());
        assert_eq!(matches("u", "β?eta"), ["eta"]);
    }

    #[test]
    fn empty_matches_advance_by_characters() {
        let text = Value::String("aé".into());
        let out = apply_regex(&spec("x*", "", ""), "text", &text).unwrap();
        assert_eq!(out.as_array().unwrap().len(), 3, "empty match at 0, after `a` and after `é`: {out}");
        let text = Value::String("aab".into());
        let out = apply_regex(&spec("a*", "", ""), "text", &text).unwrap();
        let found: Vec<&str> = out.as_array().unwrap().iter().map(|m| m["match"].as_str().unwrap()).collect();
        assert_eq!(found, ["aa", "", ""]);
    }

    #[test]
    fn match_limit() {
        let text = Value::String("a".repeat(MAX_MATCHES));
        assert_eq!(apply_regex(&spec("a", "", ""), "text", &text).unwrap().as_array().unwrap().len(), MAX_MATCHES);
        let text = Value::String("a".repeat(MAX_MATCHES + 1));
        let e = apply_regex(&spec("a", "", ""), "text", &text).unwrap_err();
        assert_eq!(e.code, "extraction_match_limit");
    }

    #[test]
    fn path_and_type_errors() {
        let result = json!({"a/b": {"n": 5, "s": "x"}, "list": ["zero", "one"]});
        assert_eq!(apply_regex(&spec("o", "/list/1", ""), "json", &result).unwrap()[0]["match"], json!("o"));
        assert_eq!(apply_regex(&spec("x", "/a~1b/s", ""), "json", &result).unwrap()[0]["match"], json!("x"));
        assert_eq!(apply_regex(&spec("x", "/missing", ""), "json", &result).unwrap_err().code, "extraction_path_not_found");
        assert_eq!(apply_regex(&spec("x", "/list/7", ""), "json", &result).unwrap_err().code, "extraction_path_not_found");
        let e = apply_regex(&spec("x", "/a~1b/n", ""), "json", &result).unwrap_err();
        assert_eq!(e.code, "extraction_input_type");
        assert_eq!(e.details.unwrap()["actualType"], json!("integer"));
        assert_eq!(apply_regex(&spec("x", "", ""), "json", &result).unwrap_err().code, "extraction_input_type");
        assert_eq!(apply_regex(&spec("x", "/a", ""), "text", &json!("text")).unwrap_err().code, "extraction_path_not_found");
        assert_eq!(apply_regex(&spec("x", "", ""), "bytes", &json!([1, 2])).unwrap_err().code, "extraction_binary_unsupported");
    }
}
