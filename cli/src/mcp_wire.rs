//! Owns the MCP stdio wire in front of rmcp: newline-delimited JSON-RPC read with a
//! bounded line reader, and the guarantee that every line carrying a request id
//! gets exactly one reply. rmcp drops what it cannot parse (invalid JSON, lone
//! surrogates, nesting beyond serde_json's limit, lines over 16 MiB) and answers
//! well-formed-but-invalid messages with `-32600` and no `id`, so a client waits
//! forever. Here each line is classified once ([`classify`], pure and
//! property-tested): a good message is handed to rmcp already parsed; a bad one is
//! answered directly (`-32700` parse error, `-32600` invalid request, `-32602`
//! invalid params for a known method whose params do not fit), with the request's
//! id when it can be recovered from the raw bytes and `null` otherwise.
//! Notifications are never answered (JSON-RPC forbids it). Both rmcp's messages and
//! these replies go through one writer, one whole line at a time.

use std::io;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Sink, Stream};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, ServerJsonRpcMessage};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

/// Longest accepted line (one JSON-RPC message), without its newline. Matches
/// rmcp's own cap; a longer line is answered and skipped without being held.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept to recover its id.
const ID_SCAN_BYTES: usize = 64 * 1024;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// Request methods rmcp parses into a typed request. One of these that comes out
/// of rmcp's parser as a custom request had params of the wrong shape (rmcp's
/// request union falls back to "custom", which it answers `-32601`).
const TYPED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// What to do with one line.
#[derive(Debug)]
pub enum Verdict {
    /// A valid message for rmcp.
    Forward(Box<ClientJsonRpcMessage>),
    /// A JSON-RPC error response to write instead.
    Reply(Value),
    /// Nothing to answer: a blank line, or a notification rmcp would not accept.
    Ignore,
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = Map::new();
    error.insert("code".into(), json!(code));
    error.insert("message".into(), json!(message));
    if let Some(data) = data {
        error.insert("data".into(), data);
    }
    json!({"jsonrpc": "2.0", "id": id, "error": Value::Object(error)})
}

/// Classify one line (without its `\n`).
pub fn classify(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            let id = recover_id(line).unwrap_or(Value::Null);
            return Verdict::Reply(error_response(id, PARSE_ERROR, "Parse error", Some(json!({"reason": error.to_string()}))));
        }
    };
    classify_value(value)
}

/// The reply to a line longer than [`MAX_LINE_BYTES`], of which `prefix` is kept.
pub fn classify_oversized(prefix: &[u8]) -> Verdict {
    let id = recover_id(prefix).unwrap_or(Value::Null);
    Verdict::Reply(error_response(
        id,
        PARSE_ERROR,
        "Parse error: message too large",
        Some(json!({"reason": format!("the line exceeds {MAX_LINE_BYTES} bytes and was not read"), "maxLineBytes": MAX_LINE_BYTES})),
    ))
}

fn classify_value(value: Value) -> Verdict {
    let Value::Object(object) = &value else {
        let reason = if value.is_array() { "batches are not supported: send one JSON-RPC object per line" } else { "a JSON-RPC message is an object" };
        return Verdict::Reply(error_response(Value::Null, INVALID_REQUEST, "Invalid Request", Some(json!({"reason": reason}))));
    };
    let method = object.get("method");
    let id = object.get("id");
    // A message without an id that names a method is a notification: never answered,
    // even when malformed.
    let notification = id.is_none() && matches!(method, Some(Value::String(_)));
    let reply_id = id.filter(|id| valid_id(id)).cloned().unwrap_or(Value::Null);
    if let Some(id) = id
        && !valid_id(id)
    {
        return Verdict::Reply(error_response(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request",
            Some(json!({"reason": "`id` must be a string or an integer within 64 bits"})),
        ));
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(JsonRpcMessage::Request(request)) => match &request.request {
            ClientRequest::CustomRequest(custom) if TYPED_METHODS.contains(&custom.method.as_str()) => {
                let reason = typed_params_error(&value).unwrap_or_else(|| "the params do not match the method".to_string());
                Verdict::Reply(error_response(reply_id, INVALID_PARAMS, "Invalid params", Some(json!({"method": custom.method, "reason": reason}))))
            }
            _ => Verdict::Forward(Box::new(JsonRpcMessage::Request(request))),
        },
        Ok(message) => Verdict::Forward(Box::new(message)),
        Err(_) if notification => Verdict::Ignore,
        Err(error) => {
            let known_method = method.and_then(Value::as_str).filter(|m| TYPED_METHODS.contains(m));
            match known_method {
                Some(method) if object.get("jsonrpc") == Some(&json!("2.0")) && id.is_some() => Verdict::Reply(error_response(
                    reply_id,
                    INVALID_PARAMS,
                    "Invalid params",
                    Some(json!({"method": method, "reason": error.to_string()})),
                )),
                _ => Verdict::Reply(error_response(reply_id, INVALID_REQUEST, "Invalid Request", Some(json!({"reason": error.to_string()})))),
            }
        }
    }
}

/// Why a typed method's params do not fit, in serde's words (for `data.reason`).
fn typed_params_error(value: &Value) -> Option<String> {
    use rmcp::model::{CallToolRequestParams, InitializeRequestParams};
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let result = match value.get("method").and_then(Value::as_str)? {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
        "initialize" => serde_json::from_value::<InitializeRequestParams>(params).err(),
        _ => None,
    };
    result.map(|e| e.to_string())
}

/// A JSON-RPC id rmcp can answer: a string, or an integer within 64 bits.
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.as_u64().is_some_and(|u| i64::try_from(u).is_ok()),
        _ => false,
    }
}

/// The `id` of a top-level JSON object in bytes that do not parse as a whole
/// (truncated, too deep, a lone surrogate elsewhere, cut at the size limit). A
/// linear scan that tracks strings and nesting without recursion; only a valid id
/// value (string or 64-bit integer) is returned.
pub fn recover_id(bytes: &[u8]) -> Option<Value> {
    let mut i = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[i] != b'{' {
        return None;
    }
    i += 1;
    let mut depth = 1usize;
    // At depth 1: true where the next string is a key.
    let mut expect_key = true;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let end = string_end(bytes, i)?;
                if depth == 1 && expect_key {
                    let key: Option<String> = serde_json::from_slice(&bytes[i..=end]).ok();
                    let mut j = end + 1;
                    while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    if bytes.get(j) != Some(&b':') {
                        return None;
                    }
                    if key.as_deref() == Some("id") {
                        return id_value(&bytes[j + 1..]);
                    }
                    expect_key = false;
                    i = j + 1;
                    continue;
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index of the closing quote of the string opening at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The id value at the start of `rest` (after the `:`), if valid.
fn id_value(rest: &[u8]) -> Option<Value> {
    let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &rest[start..];
    let token = if rest.first() == Some(&b'"') {
        &rest[..=string_end(rest, 0)?]
    } else {
        let len = rest.iter().position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')).unwrap_or(rest.len());
        // A number cut by the end of the bytes may be a prefix of a longer one.
        if len == rest.len() {
            return None;
        }
        &rest[..len]
    };
    let value: Value = serde_json::from_slice(token).ok()?;
    valid_id(&value).then_some(value)
}

// ---------------------------------------------------------------------------
// The transport handed to rmcp

/// One writer for every outgoing line (rmcp's messages and the replies above).
pub type SharedWriter = Arc<Mutex<Pin<Box<dyn AsyncWrite + Send>>>>;

pub fn shared_writer(writer: impl AsyncWrite + Send + 'static) -> SharedWriter {
    Arc::new(Mutex::new(Box::pin(writer)))
}

async fn write_line(writer: &SharedWriter, line: &[u8]) -> io::Result<()> {
    let mut writer = writer.lock().await;
    writer.write_all(line).await?;
    writer.write_all(b"\n").await?;
    writer.flush().await
}

/// The sink rmcp sends its messages to.
pub fn message_sink(writer: SharedWriter) -> Pin<Box<dyn Sink<ServerJsonRpcMessage, Error = io::Error> + Send>> {
    Box::pin(futures_util::sink::unfold(writer, |writer, message: ServerJsonRpcMessage| async move {
        let line = serde_json::to_vec(&message).map_err(io::Error::other)?;
        write_line(&writer, &line).await?;
        Ok::<_, io::Error>(writer)
    }))
}

/// Reads lines with a bounded buffer and yields the messages for rmcp; answers
/// the others itself.
pub struct LineReader<R> {
    reader: R,
    writer: SharedWriter,
    line: Vec<u8>,
    /// rmcp ends the session on a notification or response before `initialize`;
    /// until one was forwarded, those are dropped (nothing to answer).
    initialized: bool,
}

impl<R: AsyncBufRead + Unpin + Send + 'static> LineReader<R> {
    pub fn new(reader: R, writer: SharedWriter) -> Self {
        LineReader { reader, writer, line: Vec::new(), initialized: false }
    }

    /// The stream rmcp reads; it ends at EOF or on a read/write error.
    pub fn into_stream(self) -> Pin<Box<dyn Stream<Item = ClientJsonRpcMessage> + Send>> {
        Box::pin(futures_util::stream::unfold(self, |mut reader| async move {
            let message = reader.next_message().await?;
            Some((message, reader))
        }))
    }

    async fn next_message(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let verdict = match self.read_line().await {
                Ok(Some(Line::Complete)) => classify(&self.line),
                Ok(Some(Line::Oversized)) => classify_oversized(&self.line),
                Ok(None) => return None,
                Err(error) => {
                    tracing::error!(%error, "cannot read stdin");
                    return None;
                }
            };
            self.line.clear();
            // One huge message must not pin its buffer for the rest of the session.
            if self.line.capacity() > 1024 * 1024 {
                self.line.shrink_to(ID_SCAN_BYTES);
            }
            match verdict {
                Verdict::Forward(message) => {
                    let message = *message;
                    match &message {
                        JsonRpcMessage::Request(_) => self.initialized = true,
                        _ if !self.initialized => {
                            tracing::debug!("dropping a notification or response received before `initialize`");
                            continue;
                        }
                        _ => {}
                    }
                    return Some(message);
                }
                Verdict::Reply(reply) => {
                    tracing::debug!(%reply, "answering a message rmcp cannot");
                    let line = serde_json::to_vec(&reply).unwrap_or_default();
                    if let Err(error) = write_line(&self.writer, &line).await {
                        tracing::error!(%error, "cannot write to stdout");
                        return None;
                    }
                }
                Verdict::Ignore => {}
            }
        }
    }

    /// Read one line into `self.line` (newline stripped). A final line without a
    /// newline counts. An oversized line keeps its first bytes only; the rest is
    /// consumed without being stored.
    async fn read_line(&mut self) -> io::Result<Option<Line>> {
        let mut oversized = false;
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(match (oversized, self.line.is_empty()) {
                    (true, _) => Some(Line::Oversized),
                    (false, true) => None,
                    (false, false) => Some(Line::Complete),
                });
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            if !oversized {
                if self.line.len() + chunk.len() > MAX_LINE_BYTES {
                    oversized = true;
                    let keep = ID_SCAN_BYTES.saturating_sub(self.line.len()).min(chunk.len());
                    self.line.truncate(ID_SCAN_BYTES);
                    self.line.extend_from_slice(&chunk[..keep]);
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            let consumed = newline.map_or(available.len(), |n| n + 1);
            self.reader.consume(consumed);
            if newline.is_some() {
                return Ok(Some(if oversized { Line::Oversized } else { Line::Complete }));
            }
        }
    }
}

enum Line {
    Complete,
    Oversized,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &[u8]) -> Value {
        match classify(line) {
            Verdict::Reply(reply) => reply,
            other => panic!("{} gave {other:?}", String::from_utf8_lossy(line)),
        }
    }

    fn code_and_id(reply: &Value) -> (i64, Value) {
        (reply["error"]["code"].as_i64().unwrap(), reply.get("id").cloned().expect("`id` member present"))
    }

    #[test]
    fn unparseable_lines_are_parse_errors_with_the_id_when_readable() {
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","id":7,"method":"tools/li"#)), (PARSE_ERROR, json!(7)));
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","method":"x","params":{"s":"\ud800"},"id":"a"}"#)), (PARSE_ERROR, json!("a")));
        assert_eq!(code_and_id(&reply(b"not json")), (PARSE_ERROR, Value::Null));
        assert_eq!(code_and_id(&reply(b"{\"id\":3,\"x\":\"\xff\"}")), (PARSE_ERROR, json!(3)));
        let deep = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(code_and_id(&reply(deep.as_bytes())), (PARSE_ERROR, json!(9)));
        // The id after a deep value is still found.
        let deep = format!(r#"{{"params":{}{},"id":10}}"#, "[".repeat(5000), "]".repeat(5000));
        assert_eq!(code_and_id(&reply(deep.as_bytes())), (PARSE_ERROR, json!(10)));
    }

    #[test]
    fn valid_json_that_is_no_request_is_invalid_request_with_an_id_member() {
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","id":5}"#)), (INVALID_REQUEST, json!(5)));
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","id":5,"method":7}"#)), (INVALID_REQUEST, json!(5)));
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#)), (INVALID_REQUEST, json!("x")));
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#)), (INVALID_REQUEST, Value::Null));
        assert_eq!(code_and_id(&reply(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#)), (INVALID_REQUEST, Value::Null));
        assert_eq!(code_and_id(&reply(b"[1,2]")), (INVALID_REQUEST, Value::Null));
        assert_eq!(code_and_id(&reply(b"42")), (INVALID_REQUEST, Value::Null));
    }

    #[test]
    fn known_methods_with_bad_params_are_invalid_params() {
        let r = reply(br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run","arguments":[]}}"#);
        assert_eq!(code_and_id(&r), (INVALID_PARAMS, json!(4)));
        let r = reply(br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"x"}"#);
        assert_eq!(code_and_id(&r), (INVALID_PARAMS, json!(4)));
    }

    #[test]
    fn good_messages_go_to_rmcp_and_notifications_are_never_answered() {
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), Verdict::Forward(_)));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{}}}"#),
            Verdict::Forward(_)
        ));
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Verdict::Forward(_)));
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":7}"#), Verdict::Forward(_) | Verdict::Ignore));
        assert!(matches!(classify(b"   \r"), Verdict::Ignore));
        // An unknown method is rmcp's to answer (-32601).
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#), Verdict::Forward(_)));
    }

    #[test]
    fn recover_id_handles_strings_escapes_and_nesting() {
        assert_eq!(recover_id(br#"{"a":"}\"id\":1","id":"k"#), None);
        assert_eq!(recover_id(br#"{"a":"}\"id\":1","id":"k","#), Some(json!("k")));
        assert_eq!(recover_id(br#"{"a":{"id":1},"id":2,"#), Some(json!(2)));
        assert_eq!(recover_id(br#"{"\u0069d":3,"#), Some(json!(3)));
        assert_eq!(recover_id(br#"{"id":12"#), None, "a number cut at the end may be longer");
        assert_eq!(recover_id(br#"{"id":null,"#), None);
        assert_eq!(recover_id(br#"["id",1]"#), None);
    }

    #[test]
    fn oversized_lines_answer_with_the_recovered_id() {
        let r = match classify_oversized(br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"x":"aaaa"#) {
            Verdict::Reply(r) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(code_and_id(&r), (PARSE_ERROR, json!(11)));
    }

    #[tokio::test]
    async fn reader_bounds_lines_and_keeps_serving() {
        let mut input = Vec::new();
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#);
        input.push(b'\n');
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":""#);
        input.extend(std::iter::repeat_n(b'a', MAX_LINE_BYTES + 10));
        input.extend_from_slice(b"\"}}\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
        let (out_write, mut out_read) = tokio::io::duplex(1 << 20);
        let writer = shared_writer(out_write);
        let reader = LineReader::new(std::io::Cursor::new(input), writer.clone());
        use futures_util::StreamExt;
        let forwarded: Vec<ClientJsonRpcMessage> = reader.into_stream().collect().await;
        drop(writer);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut out_read, &mut out).await.unwrap();
        assert_eq!(forwarded.len(), 2, "initialize and the final line without a newline");
        let replies: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(replies.len(), 1, "{out}");
        assert_eq!(code_and_id(&replies[0]), (PARSE_ERROR, json!(2)));
    }

    /// The one property of a classified line: a line that carries a request id
    /// (readable or not) is never ignored, and a reply we write is a JSON-RPC
    /// error with an `id` member that is the request's id when it is known.
    fn check_line(line: &[u8]) -> Result<(), String> {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
        let parsed: Option<Value> = serde_json::from_slice(text).ok();
        let object_id = parsed.as_ref().and_then(|v| v.get("id")).cloned();
        match classify(line) {
            Verdict::Reply(reply) => {
                let id = reply.get("id").ok_or("a reply without an `id` member")?;
                if reply["jsonrpc"] != json!("2.0") || !reply["error"]["message"].is_string() {
                    return Err(format!("not a JSON-RPC error: {reply}"));
                }
                let code = reply["error"]["code"].as_i64().ok_or("no error code")?;
                if ![PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS].contains(&code) {
                    return Err(format!("unexpected code {code}"));
                }
                if !(id.is_null() || valid_id(id)) {
                    return Err(format!("reply id {id} is not a valid id"));
                }
                match (&parsed, &object_id) {
                    (Some(_), Some(known)) if valid_id(known) && id != known => return Err(format!("reply id {id}, request id {known}")),
                    (None, _) if code != PARSE_ERROR => return Err("an unparseable line must be a parse error".into()),
                    (None, _) => {
                        if let Some(recovered) = recover_id(text)
                            && &recovered != id
                        {
                            return Err(format!("reply id {id}, recoverable id {recovered}"));
                        }
                    }
                    _ => {}
                }
            }
            Verdict::Forward(message) => {
                if !parsed.as_ref().is_some_and(Value::is_object) {
                    return Err(format!("forwarded a line that is not a JSON object: {message:?}"));
                }
            }
            Verdict::Ignore => match &parsed {
                None if !text.iter().all(u8::is_ascii_whitespace) => return Err("ignored an unparseable line".into()),
                Some(v) if v.get("id").is_some() || !v.is_object() => return Err(format!("ignored {v}")),
                _ => {}
            },
        }
        Ok(())
    }

    /// The MCP corpus (`tests/corpus/mcp`): each case classified as expected.
    #[test]
    fn mcp_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/mcp");
        let expected: Map<String, Value> = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).expect("expected.json")).expect("parses");
        assert!(expected.len() >= 5);
        for (name, want) in expected {
            let line = std::fs::read(dir.join(format!("{name}.line"))).expect("case");
            check_line(&line).unwrap_or_else(|e| panic!("{name}: {e}"));
            match (classify(&line), want.get("reply")) {
                (Verdict::Reply(_) | Verdict::Forward(_), Some(Value::Bool(false))) => {}
                (Verdict::Ignore, Some(Value::Bool(false))) => {}
                (Verdict::Reply(reply), _) => {
                    assert_eq!(code_and_id(&reply), (want["code"].as_i64().unwrap(), want["id"].clone()), "{name}");
                }
                (other, _) => panic!("{name}: expected a reply, got {other:?}"),
            }
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "[a-z0-9]{0,6}".prop_map(|s| format!("\"{s}\"")),
                prop::sample::select(vec!["null", "1.5", "{}", "[]", "true", "99999999999999999999", "\"\\ud800\""]).prop_map(str::to_string),
            ]
        }

        fn fragment() -> impl Strategy<Value = String> {
            prop::sample::select(vec![
                "{}", "[]", "\"\\ud800\"", "\"\\udc00x\"", "[[[[[[[[", "]]]]", "{\"a\":", "null", "\"", "\\", "\"arguments\":[]",
                "{\"name\":\"run\",\"arguments\":[]}", "{\"name\":\"run\",\"arguments\":{}}", "7", "\"x\"",
            ])
            .prop_map(str::to_string)
        }

        /// JSON-RPC-shaped text: real members in any order, some missing, some
        /// broken, then maybe cut short or spliced with raw bytes.
        fn rpc_line() -> impl Strategy<Value = Vec<u8>> {
            let method = prop_oneof![
                prop::sample::select(vec!["\"tools/call\"", "\"tools/list\"", "\"ping\"", "\"initialize\"", "\"nope\"", "\"notifications/initialized\"", "7", "null"])
                    .prop_map(str::to_string),
            ];
            let members = (
                prop::option::of(prop::sample::select(vec!["\"2.0\"", "\"1.0\"", "2"]).prop_map(str::to_string)),
                prop::option::of(id()),
                prop::option::of(method),
                prop::option::of(fragment()),
                prop::option::of(prop::collection::vec(fragment(), 0..4).prop_map(|f| f.concat())),
            );
            (members, any::<prop::sample::Index>(), any::<bool>(), prop::collection::vec(any::<u8>(), 0..3), any::<prop::sample::Index>())
                .prop_map(|((jsonrpc, id, method, params, extra), cut, do_cut, noise, at)| {
                    let mut parts = Vec::new();
                    if let Some(v) = jsonrpc { parts.push(format!("\"jsonrpc\":{v}")); }
                    if let Some(v) = params { parts.push(format!("\"params\":{v}")); }
                    if let Some(v) = id { parts.push(format!("\"id\":{v}")); }
                    if let Some(v) = method { parts.push(format!("\"method\":{v}")); }
                    if let Some(v) = extra { parts.push(format!("\"x\":{v}")); }
                    let mut bytes = format!("{{{}}}", parts.join(",")).into_bytes();
                    if do_cut {
                        bytes.truncate(cut.index(bytes.len() + 1));
                    }
                    if !noise.is_empty() {
                        let at = at.index(bytes.len() + 1);
                        bytes.splice(at..at, noise);
                    }
                    bytes
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]

            #[test]
            fn arbitrary_bytes_get_at_most_their_one_reply(line in prop::collection::vec(any::<u8>(), 0..96)) {
                let line: Vec<u8> = line.into_iter().filter(|b| *b != b'\n').collect();
                prop_assert_eq!(check_line(&line), Ok(()));
            }

            /// Through the reader: a stream of lines (CRLF or LF, the last one maybe
            /// without a newline) yields, per line, exactly what `classify` says:
            /// one forwarded message or one written reply for every line that is
            /// not ignored, in order, and nothing else.
            #[test]
            fn the_reader_handles_each_line_once(lines in prop::collection::vec(prop_oneof![rpc_line(), prop::collection::vec(any::<u8>(), 0..24)], 0..8), crlf in any::<bool>(), last_newline in any::<bool>()) {
                let lines: Vec<Vec<u8>> = lines.into_iter().map(|l| l.into_iter().filter(|b| *b != b'\n' && *b != b'\r').collect()).collect();
                let mut input = Vec::new();
                for (i, line) in lines.iter().enumerate() {
                    input.extend_from_slice(line);
                    if i + 1 < lines.len() || last_newline {
                        input.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
                    }
                }
                let mut expected_forwards = 0;
                let mut expected_replies = 0;
                for (i, line) in lines.iter().enumerate() {
                    // A final empty line without a newline is no line at all.
                    if i + 1 == lines.len() && !last_newline && line.is_empty() {
                        continue;
                    }
                    match classify(line) {
                        Verdict::Forward(message) => {
                            // Before the first forwarded request, other messages are dropped.
                            if matches!(*message, JsonRpcMessage::Request(_)) || expected_forwards > 0 {
                                expected_forwards += 1;
                            }
                        }
                        Verdict::Reply(_) => expected_replies += 1,
                        Verdict::Ignore => {}
                    }
                }
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let (forwards, replies) = runtime.block_on(async move {
                    use futures_util::StreamExt;
                    let (out_write, mut out_read) = tokio::io::duplex(1 << 20);
                    let writer = shared_writer(out_write);
                    let forwarded: Vec<ClientJsonRpcMessage> = LineReader::new(std::io::Cursor::new(input), writer.clone()).into_stream().collect().await;
                    drop(writer);
                    let mut out = String::new();
                    tokio::io::AsyncReadExt::read_to_string(&mut out_read, &mut out).await.unwrap();
                    (forwarded.len(), out.lines().count())
                });
                prop_assert_eq!((forwards, replies), (expected_forwards, expected_replies));
            }

            #[test]
            fn json_rpc_shaped_lines_get_their_one_reply(line in rpc_line()) {
                let line: Vec<u8> = line.into_iter().filter(|b| *b != b'\n').collect();
                prop_assert_eq!(check_line(&line), Ok(()), "{}", String::from_utf8_lossy(&line));
            }
        }
    }
}
