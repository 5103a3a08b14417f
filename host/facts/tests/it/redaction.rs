//! Secrets never reach disk in clear: not in the database, not in the WAL, not
//! in recordings or archives, including inside JSON embedded in strings and
//! inside base64 JSON snapshots. What was removed is declared.

use aab_facts::canonical::canonical_sha256;
use aab_facts::recording::{RecordedCall, Recording};
use aab_facts::redaction::REDACTED;
use aab_facts::{Cursor, Durability, Namespace, Stream, archive, response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{contains, open, raw_store_bytes, tmp};

const SECRETS: &[&str] = &[
    "pw-MARK-one",
    "tok-MARK-two",
    "pass-MARK-three",
    "tok-MARK-four",
    "pw-MARK-five",
    "tok-MARK-six",
    "pw-MARK-seven",
    "key-MARK-eight",
    "tok-MARK-nine",
    "tok-MARK-ten",
    "sec-MARK-eleven",
    "pw-MARK-twelve",
    "tok-MARK-thirteen",
];

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Substrings that appear in any base64 text that encodes `secret`, at each
/// of the three possible alignments.
fn base64_forms(secret: &str) -> Vec<String> {
    (0..3)
        .map(|k| {
            let mut bytes = vec![b'x'; k];
            bytes.extend(secret.as_bytes());
            let enc = b64().encode(&bytes);
            let skip = (k * 4).div_ceil(3) + 1;
            enc[skip..enc.len() - 4].to_string()
        })
        .collect()
}

fn assert_clean(label: &str, bytes: &[u8]) {
    for s in SECRETS {
        assert!(!contains(bytes, s.as_bytes()), "{label} holds {s} in clear");
        for form in base64_forms(s) {
            assert!(!contains(bytes, form.as_bytes()), "{label} holds {s} in base64 ({form})");
        }
    }
}

fn basic(user_pass: &str) -> String {
    format!("Basic {}", b64().encode(user_pass))
}

#[test]
fn secrets_never_reach_disk_and_redaction_is_declared() {
    let dir = tmp();
    let store = open(dir.path());
    let embedded = json!({ "user": "ann", "password": "pw-MARK-five" }).to_string();
    let doubly = json!({ "inner": json!({ "refresh_token": "tok-MARK-six" }).to_string() }).to_string();
    let request = json!({
        "password": "pw-MARK-one",
        "headers": { "Authorization": "Bearer tok-MARK-two", "X-Trace": "abc" },
        "url": "https://ann:pass-MARK-three@api.example.com/v1/items?page=2&access_token=tok-MARK-four",
        "body": embedded,
        "log": doubly,
        "console": "login ok password=pw-MARK-seven user=ann",
        "settings": { "apiKey": "key-MARK-eight" },
        "raw": format!("GET /x HTTP/1.1\r\nAuthorization: {}\r\n", basic("ann:tok-MARK-nine")),
    });
    let receipt = store.append(Stream::Network, Some("web:[\"s\",1,null]"), &request, Durability::Memory).unwrap();
    assert!(receipt.representation.redacted);
    assert_eq!(receipt.representation.policy, "aab.redaction/v1");
    assert_eq!(receipt.representation.original_sha256, canonical_sha256(&request));
    for p in ["/password", "/headers/Authorization", "/url", "/body#/password", "/log#/inner#/refresh_token", "/console", "/settings/apiKey", "/raw"] {
        assert!(receipt.representation.paths.iter().any(|x| x == p), "{p} missing from {:?}", receipt.representation.paths);
    }
    let page = store.read(Stream::Network, &Cursor::Start, 10).unwrap();
    let stored = &page.records[0];
    assert_eq!(stored.representation, receipt.representation);
    assert_eq!(stored.record["password"], json!(REDACTED));
    assert_eq!(stored.record["headers"]["X-Trace"], json!("abc"), "non-secrets stay");
    assert_eq!(stored.record["url"], json!("https://ann:[REDACTED]@api.example.com/v1/items?page=2&access_token=[REDACTED]"));
    let body: Value = serde_json::from_str(stored.record["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, json!({ "user": "ann", "password": REDACTED }));

    // Evidence: redacted before the checksum, so the checksum verifies the stored form.
    let ev = store
        .append_evidence(
            Namespace::Script,
            "op-secret",
            "checkpoint",
            &json!({ "revision": 1, "stepId": "login", "input": { "clientSecret": "sec-MARK-eleven", "note": "typed passcode: pw-MARK-twelve" } }),
            Durability::Sync,
        )
        .unwrap();
    assert!(ev.representation.redacted);
    assert_ne!(ev.representation.original_sha256, ev.checksum);
    let item = store.get_evidence(&ev.evidence_id).unwrap();
    assert_eq!(item.record["input"]["clientSecret"], json!(REDACTED));
    assert_eq!(item.record["input"]["note"], json!("typed passcode: [REDACTED]"));

    // A response snapshot carries its secret inside base64 JSON.
    let snapshot = json!({
        "kind": "json",
        "value": { "session": { "accessToken": "tok-MARK-ten" }, "items": [1, 2] },
        "execution": { "ok": true, "dispatched": true, "ambiguous": false },
        "control": {},
        "identity": { "responseId": "resp-1", "command": "snapshot", "capturedAtMs": 1 },
    });
    let rref = response::save_snapshot(&store, "resp-1", &snapshot, Durability::Sync).unwrap();
    let saved = response::read_snapshot(&store, &rref.to_json()).unwrap();
    assert!(saved.representation.redacted);
    assert_eq!(saved.snapshot["value"]["session"]["accessToken"], json!(REDACTED));
    assert_eq!(saved.snapshot["value"]["items"], json!([1, 2]));

    // A recording document.
    let rec_parent = tmp();
    let mut recording = Recording::create(&rec_parent.path().join("rec"), Namespace::Script, "op-secret").unwrap();
    recording
        .record(
            &store,
            &RecordedCall {
                sequence: 1,
                revision: 1,
                kind: "script-call",
                target: None,
                data: &json!({ "command": "type", "args": { "text": "x", "token": "tok-MARK-thirteen" } }),
                screenshots: &[],
                parent_fact_id: Some(&ev.evidence_id),
            },
        )
        .unwrap();

    // While the store is open the records live in the WAL…
    assert_clean("open store (db + WAL)", &raw_store_bytes(dir.path()));
    let out = tmp();
    let export = archive::export(&store, Namespace::Script, "op-secret", &out.path().join("archive"), true).unwrap();
    archive::verify(&export.archive_dir, &export.manifest_sha256).unwrap();
    drop(store);
    // …and after a clean close they were checkpointed into the database.
    assert_clean("closed store", &raw_store_bytes(dir.path()));
    for entry in std::fs::read_dir(&export.archive_dir).unwrap() {
        let p = entry.unwrap().path();
        assert_clean(&p.display().to_string(), &std::fs::read(&p).unwrap());
    }
    for entry in std::fs::read_dir(recording.dir()).unwrap() {
        let p = entry.unwrap().path();
        assert_clean(&p.display().to_string(), &std::fs::read(&p).unwrap());
    }
}
