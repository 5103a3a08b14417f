//! Hostile input to the Web endpoint (tests only): property tests with bounded case
//! counts over the socket message handler and the hello check, the same frames
//! through a real in-process endpoint, and the replay of the regression corpus in
//! `tests/corpus/web/` (every input that ever broke something stays there).
//!
//! The properties: nothing panics, every refused frame gets the protocol's
//! rejection (`{type:"error", error}` then a close with the documented code), and
//! the endpoint keeps serving afterwards.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::server::{self, StartConfig};
use crate::state::{Conn, Shared, lock};
use crate::wire::{self, KeepAlive};

// ------------------------------------------------------------------ handler level

/// A registered connection on a fresh provider state (no server needed).
fn connection() -> (Shared, Conn, mpsc::Receiver<crate::state::Outgoing>) {
    let shared = Shared::default();
    let hello = wire::parse_hello(&json!({
        "type": "hello", "schemaVersion": wire::PROTOCOL, "sessionId": "prop", "runtimeEpoch": "0123456789abcdef0123456789abcdef",
        "targetId": "main", "executionSchema": wire::EXECUTION_SCHEMA, "domTargetSchema": wire::DOM_TARGET_SCHEMA, "captureSchema": wire::CAPTURE_SCHEMA
    }))
    .expect("valid hello");
    let (tx, rx) = mpsc::channel(4096);
    let (_closed_tx, closed_rx) = watch::channel(false);
    let conn = shared
        .register(&hello, "feedfacefeedfacefeedfacefeedface", |id, binding| Conn::new(id, hello.session_id.clone(), hello.runtime_epoch.clone(), binding, tx, closed_rx))
        .expect("register");
    (shared, conn, rx)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
        prop_oneof![Just("response"), Just("completion"), Just("capture"), Just("hello"), Just("")].prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("type".to_string()),
                    Just("requestId".to_string()),
                    Just("result".to_string()),
                    Just("item".to_string()),
                    Just("binding".to_string()),
                    Just("captureId".to_string()),
                    Just("stream".to_string()),
                    Just("sequence".to_string()),
                    "[a-zA-Z]{1,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Error codes a frame on an accepted socket may be refused with.
const FRAME_REJECTIONS: [&str; 2] = ["invalid_web_message", "web_binding_mismatch"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary text never panics and is refused with the protocol's codes.
    #[test]
    fn arbitrary_text_frames_are_refused(text in "\\PC{0,200}") {
        let (shared, conn, _rx) = connection();
        match crate::socket::on_frame(&shared, &conn, "feedfacefeedfacefeedfacefeedface", &text) {
            Ok(()) => prop_assert!(serde_json::from_str::<Value>(&text).ok().and_then(|v| v.get("binding").cloned()) == Some(conn.binding().clone())),
            Err((code, _)) => prop_assert!(FRAME_REJECTIONS.contains(&code), "{code}"),
        }
    }

    /// JSON frames, with the right binding or not: handled or refused, never a panic.
    #[test]
    fn arbitrary_json_frames_are_handled_or_refused(mut frame in json_value(), bind in any::<bool>(), kind in prop_oneof![Just("response"), Just("completion"), Just("capture"), Just("other")]) {
        let (shared, conn, _rx) = connection();
        if bind && let Some(map) = frame.as_object_mut() {
            map.insert("binding".into(), conn.binding().clone());
            map.insert("type".into(), json!(kind));
        }
        match crate::socket::on_frame(&shared, &conn, "feedfacefeedfacefeedfacefeedface", &frame.to_string()) {
            Ok(()) => prop_assert!(frame.get("binding") == Some(conn.binding())),
            Err((code, _)) => prop_assert!(FRAME_REJECTIONS.contains(&code), "{code}"),
        }
    }

    /// The hello check accepts nothing but a complete hello, and never panics.
    #[test]
    fn arbitrary_hellos_are_checked(v in json_value()) {
        prop_assert!(wire::parse_hello(&v).is_err());
        let _ = wire::parse_capture(&v);
    }
}

// ------------------------------------------------------------------ through a real endpoint

struct Live {
    rt: tokio::runtime::Runtime,
    url: String,
    _shared: Arc<Shared>,
}

/// One endpoint for every socket-level case (sessions come and go).
fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let shared = Arc::new(Shared::default());
        let config = StartConfig {
            host: "127.0.0.1".into(),
            port: 0,
            path: "/hostile".into(),
            token: "hostile-token-0123456789".into(),
            sample_app: false,
            allowed_origins: Vec::new(),
            env_origins: None,
            keep_alive: KeepAlive::default(),
        };
        let info = rt.block_on(server::start(shared.clone(), config)).expect("endpoint");
        let url = format!("{}?token={}", info.endpoint(), info.token);
        *lock(&shared.server) = Some(info);
        Live { rt, url, _shared: shared }
    })
}

/// What the endpoint answered a frame with: the `error` code of its error frame
/// (None when it sent none) and the close code (None when it did not close).
#[derive(Debug, PartialEq)]
struct Answer {
    error: Option<String>,
    close: Option<u16>,
}

static SESSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Connect, optionally complete the hello, send `frame`, collect the answer.
fn send(after_hello: bool, frame: Message) -> Answer {
    let l = live();
    l.rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(l.url.as_str()).await.expect("upgrade");
        if after_hello {
            let n = SESSION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let hello = json!({"type": "hello", "schemaVersion": wire::PROTOCOL, "sessionId": format!("hostile-{n}"), "runtimeEpoch": "0123456789abcdef0123456789abcdef",
                               "targetId": "main", "executionSchema": wire::EXECUTION_SCHEMA, "domTargetSchema": wire::DOM_TARGET_SCHEMA, "captureSchema": wire::CAPTURE_SCHEMA,
                               "origin": "http://127.0.0.1"});
            ws.send(Message::text(hello.to_string())).await.expect("send hello");
            match ws.next().await {
                Some(Ok(Message::Text(t))) => assert!(t.as_str().contains("helloAck"), "{t}"),
                other => panic!("no helloAck: {other:?}"),
            }
        }
        let _ = ws.send(frame).await;
        let mut answer = Answer { error: None, close: None };
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("the endpoint answered within 10 s") {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("host frames are JSON");
                    if v["type"] == json!("error") {
                        answer.error = v["error"].as_str().map(str::to_string);
                    }
                }
                Some(Ok(Message::Close(c))) => {
                    answer.close = c.map(|c| u16::from(c.code));
                    return answer;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return answer,
            }
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn binary_frames_after_hello_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let a = send(true, Message::binary(bytes));
        prop_assert_eq!(a, Answer { error: Some("invalid_web_message".into()), close: Some(1008) });
    }

    #[test]
    fn text_frames_after_hello_are_refused(text in "\\PC{0,300}") {
        let a = send(true, Message::text(text));
        prop_assert_eq!(a.close, Some(1008));
        prop_assert!(a.error.as_deref().is_some_and(|e| FRAME_REJECTIONS.contains(&e)), "{:?}", a);
    }

    #[test]
    fn anything_instead_of_hello_is_refused(text in "\\PC{0,300}", binary in any::<bool>()) {
        let frame = if binary { Message::binary(text.into_bytes()) } else { Message::text(text) };
        prop_assert_eq!(send(false, frame), Answer { error: Some("invalid_web_hello".into()), close: Some(1008) });
    }
}

#[test]
fn oversized_messages_are_refused_with_1009() {
    let a = send(true, Message::text("x".repeat(wire::MAX_PAYLOAD + 1)));
    assert_eq!(a, Answer { error: Some("web_message_too_large".into()), close: Some(1009) });
}

// ------------------------------------------------------------------ regression corpus

/// `tests/corpus/web/<phase>.<expected error>.<name>.<txt|bin>`: `phase` is `hello`
/// (sent instead of the hello) or `after` (sent after an accepted hello); `.txt`
/// goes as a text frame, `.bin` as a binary frame. The expected close code is 1008
/// unless the name says `close-<code>`.
#[test]
fn regression_corpus_is_refused() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/web");
    let mut entries: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten().map(|e| e.path()).collect();
    entries.sort();
    let mut replayed = 0;
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with('.') || name.ends_with(".md") {
            continue;
        }
        let parts: Vec<&str> = name.split('.').collect();
        assert!(parts.len() >= 4, "corpus name {name} is not <phase>.<error>.<name>.<txt|bin>");
        let bytes = std::fs::read(&path).unwrap();
        let frame = match *parts.last().unwrap() {
            "bin" => Message::binary(bytes),
            "txt" => Message::text(String::from_utf8(bytes).unwrap_or_else(|_| panic!("{name}: .txt entries are UTF-8"))),
            other => panic!("{name}: unknown kind {other}"),
        };
        let close = parts[2].strip_prefix("close-").and_then(|c| c.split('-').next()?.parse().ok()).unwrap_or(1008);
        let answer = send(parts[0] == "after", frame);
        assert_eq!(answer, Answer { error: Some(parts[1].to_string()), close: Some(close) }, "corpus entry {name}");
        replayed += 1;
    }
    assert!(replayed >= 8, "the corpus lost entries ({replayed})");
    // The endpoint still serves a well-behaved page: a valid frame after the hello
    // is answered (captureAck) without closing the socket.
    assert!(still_serves(), "the endpoint stopped serving after the corpus");
}

fn still_serves() -> bool {
    let l = live();
    l.rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(l.url.as_str()).await.expect("upgrade");
        let hello = json!({"type": "hello", "schemaVersion": wire::PROTOCOL, "sessionId": "hostile-after", "runtimeEpoch": "0123456789abcdef0123456789abcdef",
                           "targetId": "main", "executionSchema": wire::EXECUTION_SCHEMA, "domTargetSchema": wire::DOM_TARGET_SCHEMA, "captureSchema": wire::CAPTURE_SCHEMA});
        ws.send(Message::text(hello.to_string())).await.expect("send hello");
        let Some(Ok(Message::Text(t))) = ws.next().await else { return false };
        let ack: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
        ack["type"] == json!("helloAck")
    })
}
