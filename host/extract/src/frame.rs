//! The host side of the `aab.extract-worker/v1` frames: building the one request
//! frame, parsing the one reply frame, and re-checking a result value (a script
//! can write to the reply channel itself, so the worker's checks are not trusted
//! blindly).

use std::io::{self, Write};

use serde_json::{Map, Value};

use crate::{
    ExtractError, MAX_INPUT_BYTES, MAX_REQUEST_FRAME_BYTES, MAX_STACK_BYTES, MAX_STACK_FRAMES, MAX_VALUE_BYTES, MAX_VALUE_DEPTH, PROTOCOL, PreparedScript,
    codes,
};

/// Largest integer magnitude a JSON number may carry here (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// Longest worker message passed on.
const MAX_MESSAGE_BYTES: usize = 4 * 1024;

/// `{"type":"check", ...}\n`
pub(crate) fn check_request(source_name: &str) -> Vec<u8> {
    let mut frame = serde_json::to_vec(&serde_json::json!({"schema": PROTOCOL, "type": "check", "sourceName": source_name})).unwrap_or_default();
    frame.push(b'\n');
    frame
}

/// `{"type":"start", ..., "inputs": <inputs>}\n`, refusing inputs over the limit
/// without serialising more than the limit.
pub(crate) fn start_request(prepared: &PreparedScript, inputs: &Value) -> Result<Vec<u8>, ExtractError> {
    let head = serde_json::json!({
        "schema": PROTOCOL,
        "type": "start",
        "entrypoint": "main",
        "sourceName": &*prepared.source_name,
        "extraction": {"mode": "script", "language": prepared.language.name(), "timeoutMs": prepared.timeout.as_millis() as u64},
    });
    let mut frame = serde_json::to_vec(&head).unwrap_or_default();
    frame.pop(); // the closing brace; `inputs` goes last
    frame.extend_from_slice(b",\"inputs\":");
    let before = frame.len();
    let mut capped = Capped {
        buf: frame,
        limit: before + MAX_INPUT_BYTES,
    };
    if serde_json::to_writer(&mut capped, inputs).is_err() {
        return Err(ExtractError::new(
            codes::INPUT_TOO_LARGE,
            format!("the extraction inputs (the command's response with its execution and control facts) exceed {MAX_INPUT_BYTES} bytes of JSON"),
        )
        .with("limitBytes", MAX_INPUT_BYTES as u64));
    }
    let mut frame = capped.buf;
    frame.extend_from_slice(b"}\n");
    debug_assert!(frame.len() <= MAX_REQUEST_FRAME_BYTES);
    Ok(frame)
}

/// A Vec writer that fails once it would grow past `limit`.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            return Err(io::Error::other("limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A parsed reply frame.
#[derive(Debug)]
pub(crate) enum Reply {
    Result(Value),
    /// The `runtime` object of a `checked` frame.
    Checked(Value),
    Fail(ExtractError),
}

impl Reply {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Reply::Result(_) => "result",
            Reply::Checked(_) => "checked",
            Reply::Fail(_) => "fail",
        }
    }
}

/// Codes a worker may report, and in which mode.
const WORKER_CODES: [&str; 6] = [
    codes::FAILED,
    codes::TYPE_ERROR,
    codes::OUTPUT_TOO_LARGE,
    codes::WORKER_FAILED,
    codes::SYNTAX_ERROR,
    codes::RUNTIME_UNAVAILABLE,
];

pub(crate) fn worker_may_report(code: &str, checking: bool) -> bool {
    match code {
        c if c == codes::SYNTAX_ERROR => checking,
        c if c == codes::FAILED || c == codes::TYPE_ERROR || c == codes::OUTPUT_TOO_LARGE => !checking,
        c => c == codes::WORKER_FAILED || c == codes::RUNTIME_UNAVAILABLE,
    }
}

/// Diagnostic keys a worker may send; anything else is dropped.
const DIAGNOSTIC_KEYS: [&str; 9] = ["name", "stack", "line", "column", "excerpt", "path", "valueBytes", "limitBytes", "version"];

pub(crate) fn parse_reply(line: &[u8]) -> Result<Reply, String> {
    let value: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(mut frame) = value else {
        return Err("not a JSON object".into());
    };
    if frame.get("schema").and_then(Value::as_str) != Some(PROTOCOL) {
        return Err(format!("missing `\"schema\":\"{PROTOCOL}\"`"));
    }
    match frame.get("type").and_then(Value::as_str) {
        Some("result") => frame.remove("value").map(Reply::Result).ok_or_else(|| "a result frame without `value`".into()),
        Some("checked") => Ok(Reply::Checked(frame.remove("runtime").unwrap_or(Value::Null))),
        Some("fail") => {
            let code = frame.get("error").and_then(Value::as_str).ok_or("a fail frame without `error`")?;
            let code = WORKER_CODES
                .into_iter()
                .find(|c| *c == code)
                .ok_or_else(|| format!("unknown error code {code:?}"))?;
            let message = frame.get("message").and_then(Value::as_str).unwrap_or("the script extraction failed");
            let mut error = ExtractError::new(code, clip(message, MAX_MESSAGE_BYTES));
            if let Some(Value::Object(diagnostic)) = frame.remove("diagnostic") {
                let mut kept = Map::new();
                for (key, value) in diagnostic {
                    if !DIAGNOSTIC_KEYS.contains(&key.as_str()) {
                        continue;
                    }
                    let value = match (key.as_str(), value) {
                        ("stack", Value::String(stack)) => Value::String(clip_stack(&stack)),
                        (_, Value::String(text)) => Value::String(clip(&text, MAX_MESSAGE_BYTES)),
                        (_, v @ (Value::Number(_) | Value::Bool(_) | Value::Null)) => v,
                        _ => continue,
                    };
                    kept.insert(key, value);
                }
                if !kept.is_empty() {
                    error.diagnostic = Some(Value::Object(kept));
                }
            }
            Ok(Reply::Fail(error))
        }
        Some(other) => Err(format!("unknown frame type {other:?}")),
        None => Err("a frame without `type`".into()),
    }
}

/// The host's own strict-JSON check of a result: safe integers, depth, size.
pub(crate) fn check_value(value: Value) -> Result<Value, ExtractError> {
    fn walk(value: &Value, depth: usize, path: &mut String) -> Result<(), ExtractError> {
        let type_error = |message: String, path: &str| {
            let error = ExtractError::new(codes::TYPE_ERROR, message);
            if path.is_empty() { error } else { error.with("path", path) }
        };
        match value {
            Value::Number(n) => {
                let unsafe_integer = match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => u > MAX_SAFE_INTEGER,
                    (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                    (None, None) => false,
                };
                if unsafe_integer {
                    return Err(type_error(format!("{} is the integer {n}, outside ±(2^53−1)", where_(path)), path));
                }
            }
            Value::Array(_) | Value::Object(_) if depth >= MAX_VALUE_DEPTH => {
                return Err(type_error(
                    format!("{} is nested deeper than {MAX_VALUE_DEPTH} levels of objects and arrays", where_(path)),
                    path,
                ));
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    walk(item, depth + 1, path)?;
                    path.truncate(len);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    walk(item, depth + 1, path)?;
                    path.truncate(len);
                }
            }
            _ => {}
        }
        Ok(())
    }
    walk(&value, 0, &mut String::new())?;
    let mut counter = Capped {
        buf: Vec::new(),
        limit: MAX_VALUE_BYTES,
    };
    if serde_json::to_writer(&mut counter, &value).is_err() {
        return Err(
            ExtractError::new(codes::OUTPUT_TOO_LARGE, format!("the result is more than {MAX_VALUE_BYTES} bytes of JSON"))
                .with("limitBytes", MAX_VALUE_BYTES as u64),
        );
    }
    Ok(value)
}

fn where_(path: &str) -> String {
    if path.is_empty() {
        "the result".into()
    } else {
        format!("the result at `{path}`")
    }
}

/// The start of an unparseable frame, for the diagnostic.
pub(crate) fn excerpt(line: &[u8]) -> String {
    clip(&String::from_utf8_lossy(&line[..line.len().min(512)]), 256)
}

/// Cut to at most `max` bytes on a character boundary.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// At most [`MAX_STACK_FRAMES`] frame lines (`at ...` / `File ...`) and
/// [`MAX_STACK_BYTES`] bytes.
fn clip_stack(stack: &str) -> String {
    let mut frames = 0;
    let kept: Vec<&str> = stack
        .lines()
        .filter(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("at ") || trimmed.starts_with("File \"") {
                frames += 1;
                frames <= MAX_STACK_FRAMES
            } else {
                true
            }
        })
        .collect();
    clip(&kept.join("\n"), MAX_STACK_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_recheck_rejects_unsafe_integers_and_depth() {
        assert!(check_value(json!({"a": [9007199254740991i64, -9007199254740991i64, 1.5e300]})).is_ok());
        let e = check_value(json!({"a": [1, 9007199254740992u64]})).unwrap_err();
        assert_eq!((e.code, e.diagnostic.unwrap()["path"].clone()), (codes::TYPE_ERROR, json!("/a/1")));
        assert_eq!(check_value(json!(-9007199254740992i64)).unwrap_err().code, codes::TYPE_ERROR);
        let mut deep = json!(1);
        for _ in 0..MAX_VALUE_DEPTH {
            deep = json!([deep]);
        }
        assert!(check_value(deep.clone()).is_ok());
        assert_eq!(check_value(json!([deep])).unwrap_err().code, codes::TYPE_ERROR);
        assert_eq!(check_value(json!("x".repeat(MAX_VALUE_BYTES))).unwrap_err().code, codes::OUTPUT_TOO_LARGE);
    }

    #[test]
    fn reply_frames_are_strict() {
        assert!(matches!(
            parse_reply(br#"{"schema":"aab.extract-worker/v1","type":"result","value":[1]}"#),
            Ok(Reply::Result(_))
        ));
        assert!(parse_reply(br#"{"type":"result","value":1}"#).unwrap_err().contains("schema"));
        assert!(parse_reply(b"hello").unwrap_err().starts_with("not JSON"));
        assert!(parse_reply(br#"[1]"#).is_err());
        assert!(
            parse_reply(br#"{"schema":"aab.extract-worker/v1","type":"fail","error":"extraction_busy"}"#)
                .unwrap_err()
                .contains("unknown error code")
        );
        let Ok(Reply::Fail(e)) = parse_reply(
            br#"{"schema":"aab.extract-worker/v1","type":"fail","error":"extraction_failed","message":"boom","diagnostic":{"line":3,"evil":{"x":1}}}"#,
        ) else {
            panic!("a fail frame")
        };
        assert_eq!((e.code, e.message.as_str(), e.diagnostic), (codes::FAILED, "boom", Some(json!({"line": 3}))));
    }

    #[test]
    fn stacks_are_clipped_to_twenty_frames() {
        let stack = std::iter::once("Error: x".to_string())
            .chain((0..30).map(|i| format!("    at f{i} (extract.js:{i}:1)")))
            .collect::<Vec<_>>()
            .join("\n");
        let clipped = clip_stack(&stack);
        assert_eq!(clipped.lines().count(), 21);
        assert!(clip_stack(&"x".repeat(MAX_STACK_BYTES * 2)).len() <= MAX_STACK_BYTES + "…".len());
    }
}
