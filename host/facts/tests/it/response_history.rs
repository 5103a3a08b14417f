//! Response snapshots (`control.source.ref` / `response read`) and ordinary
//! command history (`aab.command-history/v1`).

use aab_facts::history::{HistoryEvidence, HistoryRecorder};
use aab_facts::{Cursor, Durability, FactError, Namespace, Stream, archive, response};
use serde_json::{Value, json};

use crate::support::{open, tmp};

fn snapshot(id: &str) -> Value {
    json!({
        "kind": "json",
        "value": { "title": "Inbox", "count": 3, "ratio": 0.1 },
        "execution": { "ok": true, "dispatched": false, "ambiguous": false },
        "control": { "cursor": "c1" },
        "identity": { "responseId": id, "command": "ui-tree", "capturedAtMs": 1_700_000_000_123u64 },
    })
}

#[test]
fn response_snapshots_are_read_back_only_through_their_unchanged_ref() {
    let dir = tmp();
    let store = open(dir.path());
    let rref = response::save_snapshot(&store, "resp-1", &snapshot("resp-1"), Durability::Sync).unwrap();
    let j = rref.to_json();
    assert_eq!(j["namespace"], json!("response"));
    assert_eq!(j["operationId"], json!("resp-1"));
    let saved = response::read_snapshot(&store, &j).unwrap();
    assert_eq!(saved.snapshot, snapshot("resp-1"));
    assert!(!saved.representation.redacted);
    assert_eq!(saved.reference, rref);

    let with = |f: &str, v: Value| {
        let mut r = j.clone();
        r[f] = v;
        response::read_snapshot(&store, &r).unwrap_err().code
    };
    assert_eq!(with("checksum", json!("0".repeat(64))), "response_checksum_mismatch");
    assert_eq!(with("operationId", json!("resp-2")), "response_identity_mismatch");
    assert_eq!(with("namespace", json!("intent")), "response_namespace_mismatch");
    assert_eq!(with("evidenceId", json!("response:response:gone:1:9")), "response_not_found");

    // The snapshot must name its own response id; sizes are bounded.
    let e = response::save_snapshot(&store, "resp-3", &snapshot("resp-other"), Durability::Sync).unwrap_err();
    assert_eq!(e.code, "evidence_invalid");
    let huge = json!({ "kind": "text", "value": "v".repeat(8 * 1024 * 1024), "execution": {}, "control": {}, "identity": { "responseId": "r", "command": "c", "capturedAtMs": 1 } });
    assert_eq!(response::save_snapshot(&store, "r", &huge, Durability::Memory).unwrap_err().code, "snapshot_too_large");

    // Tampering with the stored base64 is a checksum failure.
    let item = store.get_evidence(&rref.evidence_id).unwrap();
    {
        let raw = rusqlite::Connection::open(dir.path().join("facts.sqlite")).unwrap();
        raw.execute("UPDATE facts SET record = replace(record, 'snapshotBase64\":\"ey', 'snapshotBase64\":\"eX') WHERE seq = ?1", [item.sequence as i64])
            .unwrap();
    }
    assert_eq!(response::read_snapshot(&store, &j).unwrap_err().code, "response_checksum_mismatch");

    // Response evidence exports and verifies like any other namespace.
    let ok = response::save_snapshot(&store, "resp-9", &snapshot("resp-9"), Durability::Sync).unwrap();
    let out = tmp();
    let r = archive::export(&store, Namespace::Response, &ok.operation_id, &out.path().join("a"), false).unwrap();
    assert_eq!(r.record_count, 1);
    archive::verify(&r.archive_dir, &r.manifest_sha256).unwrap();
}

#[test]
fn command_history_reports_what_was_stored() {
    let dir = tmp();
    let store = open(dir.path());
    let recorder = HistoryRecorder::new();
    let target = "android:[\"emulator-5554\",\"com.example.app\"]";
    let execution = json!({ "command": "tap", "status": "succeeded", "args": { "x": 1, "y": 2 }, "result": { "ok": true } });
    let evidence = [
        HistoryEvidence { stream: Stream::Ui, record: json!({ "tree": "<hierarchy/>" }) },
        HistoryEvidence { stream: Stream::StateEvent, record: json!({ "state": "resumed" }) },
    ];
    let h = recorder.record(&store, target, "req-1", &execution, &evidence);
    assert_eq!(h["schemaVersion"], json!("aab.command-history/v1"));
    assert_eq!(h["status"], json!("stored"));
    assert_eq!(h["replayed"], json!(false));
    assert_eq!(h["action"]["stored"], json!(true));
    let action_seq = h["action"]["globalSeq"].as_u64().unwrap();
    assert_eq!(h["evidence"].as_array().unwrap().len(), 2);

    let page = store.read_key(Stream::Action, target, &Cursor::Start, 10).unwrap();
    assert_eq!(page.records[0].sequence, action_seq);
    assert_eq!(page.records[0].record["kind"], json!("execution"));
    assert_eq!(page.records[0].record["actionId"], json!("req-1"));

    // The same observation again is deduplicated within the process.
    let h2 = recorder.record(&store, target, "req-2", &execution, &evidence[..1]);
    assert_eq!(h2["evidence"][0]["deduplicated"], json!(true));
    assert_eq!(h2["evidence"][0]["globalSeq"], h["evidence"][0]["globalSeq"]);
    assert_eq!(store.read(Stream::Ui, &Cursor::Start, 10).unwrap().records.len(), 1);

    // A failed write is reported, not retried.
    let reader = aab_facts::FactStore::open_read_only(dir.path()).unwrap();
    let h3 = recorder.record(&reader, target, "req-3", &execution, &[HistoryEvidence { stream: Stream::Note, record: json!({ "n": 1 }) }]);
    assert_eq!(h3["status"], json!("partial"));
    assert_eq!(h3["action"]["stored"], json!(false));
    assert_eq!(h3["action"]["globalSeq"], Value::Null);
    assert_eq!(h3["errors"][0]["error"], json!("fact_store_read_only"));

    assert_eq!(HistoryRecorder::disabled("req-4")["status"], json!("disabled"));
    let unavailable = HistoryRecorder::unavailable("req-5", &FactError::new("fact_store_writer_busy", "busy"));
    assert_eq!(unavailable["status"], json!("unavailable"));
    assert_eq!(unavailable["errors"][0]["error"], json!("fact_store_writer_busy"));
}
