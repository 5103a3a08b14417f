//! Execution evidence: validation, envelope, checksums and tamper detection.

use aab_facts::canonical::canonical_sha256;
use aab_facts::evidence::{EVIDENCE_SCHEMA, record_checksum};
use aab_facts::{Cursor, Durability, Namespace};
use serde_json::{Value, json};

use crate::support::{android_target, intent_step, open, tmp};

fn invalid_field(err: aab_facts::FactError) -> String {
    assert_eq!(err.code, "evidence_invalid", "{err:?}");
    err.details.as_ref().and_then(|d| d["field"].as_str()).unwrap_or_default().to_string()
}

#[test]
fn evidence_is_validated_against_its_kind() {
    let dir = tmp();
    let store = open(dir.path());
    let ns = Namespace::Intent;
    let s = Durability::Sync;
    let obs = |extra: Value| {
        let mut p = json!({ "revision": 1, "target": android_target(), "provider": "native", "capturedAtMs": 5 });
        p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        p
    };
    let e = store.append_evidence(ns, "op", "observation", &json!({ "revision": 1, "provider": "native", "capturedAtMs": 5 }), s).unwrap_err();
    assert_eq!(invalid_field(e), "target");
    // Provider names come from plugin manifests: only their shape is checked.
    let e = store.append_evidence(ns, "op", "observation", &obs(json!({ "provider": "Selenium 4" })), s).unwrap_err();
    assert_eq!(invalid_field(e), "provider");
    let e = store
        .append_evidence(ns, "op", "observation", &obs(json!({ "target": { "platform": "android", "serial": "a b", "packageName": "com.x" } })), s)
        .unwrap_err();
    assert_eq!(invalid_field(e), "target");
    let e = store.append_evidence(ns, "op", "observation", &obs(json!({ "revision": -1 })), s).unwrap_err();
    assert_eq!(invalid_field(e), "revision");
    let e = store.append_evidence(ns, "op", "observation", &obs(json!({ "operationId": "other" })), s).unwrap_err();
    assert_eq!(invalid_field(e), "operationId");
    let e = store.append_evidence(ns, "op", "observation", &obs(json!({ "checksum": "x" })), s).unwrap_err();
    assert_eq!(invalid_field(e), "checksum");
    let e = store
        .append_evidence(
            ns,
            "op",
            "decision",
            &json!({ "revision": 1, "decisionId": "d", "basedOnEvidenceIds": "x", "actionSpecHash": "h", "agentDecision": "act" }),
            s,
        )
        .unwrap_err();
    assert_eq!(invalid_field(e), "basedOnEvidenceIds");
    let e = store
        .append_evidence(
            ns,
            "op",
            "decision",
            &json!({ "revision": 1, "decisionId": "d", "basedOnEvidenceIds": [], "actionSpecHash": "h", "agentDecision": "maybe" }),
            s,
        )
        .unwrap_err();
    assert_eq!(invalid_field(e), "agentDecision");
    let e = store.append_evidence(ns, "op", "dispatch-marker", &json!({ "actionId": "a", "target": android_target(), "actionSpecHash": "h" }), s).unwrap_err();
    assert_eq!(invalid_field(e), "decisionId");
    let e = store
        .append_evidence(
            ns,
            "op",
            "result",
            &json!({ "revision": 1, "result": 1, "bytes": 1, "sha256": "0".repeat(64), "originalSha256": "0".repeat(64), "representation": "original-json" }),
            s,
        )
        .unwrap_err();
    assert_eq!(invalid_field(e), "kind", "result belongs to script");
    let e = store.append_evidence(ns, "op", "response", &json!({ "revision": 1, "snapshotBase64": "e30=" }), s).unwrap_err();
    assert_eq!(invalid_field(e), "kind", "response belongs to the response namespace");
    let e = store.append_evidence(Namespace::Response, "r1", "checkpoint", &json!({ "revision": 1, "stepId": "s" }), s).unwrap_err();
    assert_eq!(invalid_field(e), "kind");
    let e = store.append_evidence(ns, "op", "teleport", &json!({}), s).unwrap_err();
    assert_eq!(invalid_field(e), "kind");
    let e = store.append_evidence(ns, "op", "checkpoint", &json!([1]), s).unwrap_err();
    assert_eq!(invalid_field(e), "payload");
    assert_eq!(store.append_evidence(ns, "bad id", "checkpoint", &json!({ "revision": 1, "stepId": "s" }), s).unwrap_err().code, "invalid_argument");
    // Nothing invalid consumed a sequence number or reached the store.
    assert_eq!(store.status().unwrap().last_sequence, 0);
    assert_eq!(Namespace::parse("intents").unwrap_err().code, "invalid_argument");
    // Any well-formed provider name and platform of a plugin's own are accepted.
    let own = json!({ "revision": 1, "target": { "platform": "fixture", "screen": "s1" }, "provider": "selenium", "capturedAtMs": 5 });
    store.append_evidence(ns, "op", "observation", &own, s).unwrap();
}

#[test]
fn evidence_round_trips_with_verified_checksums() {
    let dir = tmp();
    let store = open(dir.path());
    let receipts = intent_step(&store, "op-1", 1);
    intent_step(&store, "op-2", 1);
    let first = &receipts[0];
    assert_eq!(first.evidence_id, format!("intent:observation:op-1:1:{}", first.sequence));
    assert_eq!(first.checksum.len(), 64);
    assert!(!first.representation.redacted);
    assert_eq!(first.representation.original_sha256, first.checksum, "unredacted: the original is what was stored");

    let item = store.get_evidence(&first.evidence_id).unwrap();
    assert_eq!(item.sequence, first.sequence);
    assert_eq!(item.kind, "observation");
    assert_eq!(item.namespace, Namespace::Intent);
    assert_eq!(item.record["schemaVersion"], json!(EVIDENCE_SCHEMA));
    assert_eq!(item.record["persisted"], json!(true));
    assert_eq!(item.record["checksum"], json!(first.checksum));
    assert_eq!(item.record["committedAtMs"], json!(first.committed_at_ms));
    assert_eq!(record_checksum(&item.record), first.checksum);
    let mut body = item.record.as_object().unwrap().clone();
    body.remove("checksum");
    body.remove("persisted");
    assert_eq!(canonical_sha256(&Value::Object(body)), first.checksum);

    let page1 = store.read_evidence(Namespace::Intent, "op-1", &Cursor::Start, 4).unwrap();
    assert_eq!(page1.records.len(), 4);
    assert!(page1.has_more);
    let page2 = store.read_evidence(Namespace::Intent, "op-1", &Cursor::Resume(page1.next_cursor), 4).unwrap();
    assert!(!page2.has_more);
    let ids: Vec<String> = page1.records.iter().chain(page2.records.iter()).map(|r| r.evidence_id.clone()).collect();
    assert_eq!(ids, receipts.iter().map(|r| r.evidence_id.clone()).collect::<Vec<_>>(), "only op-1, in commit order");

    let named = store
        .append_evidence(Namespace::Intent, "op-1", "checkpoint", &json!({ "evidenceId": "intent:custom:1", "revision": 2, "stepId": "s" }), Durability::Memory)
        .unwrap();
    assert_eq!(named.evidence_id, "intent:custom:1");
    let dup = store
        .append_evidence(Namespace::Intent, "op-1", "checkpoint", &json!({ "evidenceId": "intent:custom:1", "revision": 3, "stepId": "s" }), Durability::Sync)
        .unwrap_err();
    assert_eq!(dup.code, "duplicate_evidence_id");
    assert_eq!(store.get_evidence("intent:nope").unwrap_err().code, "not_found");
}

#[test]
fn tampering_with_a_stored_record_is_detected() {
    let dir = tmp();
    let store = open(dir.path());
    let receipts = intent_step(&store, "op-t", 1);
    let victim = &receipts[2]; // the plan
    {
        let raw = rusqlite::Connection::open(dir.path().join("facts.sqlite")).unwrap();
        raw.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        let n = raw
            .execute(
                "UPDATE facts SET record = replace(record, '\"planStepId\":\"plan-1\"', '\"planStepId\":\"plan-9\"') WHERE seq = ?1",
                [victim.sequence as i64],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    let err = store.get_evidence(&victim.evidence_id).unwrap_err();
    assert_eq!(err.code, "checksum_mismatch");
    assert_eq!(err.details.as_ref().unwrap()["evidenceId"], json!(victim.evidence_id));
    assert_eq!(store.read_evidence(Namespace::Intent, "op-t", &Cursor::Start, 100).unwrap_err().code, "checksum_mismatch");
    let out = tmp();
    let export = aab_facts::archive::export(&store, Namespace::Intent, "op-t", &out.path().join("a"), false).unwrap_err();
    assert_eq!(export.code, "checksum_mismatch", "a tampered store is never exported");
    // Untouched records still verify.
    store.get_evidence(&receipts[0].evidence_id).unwrap();

    // Moving a record to another operation breaks its binding too.
    {
        let raw = rusqlite::Connection::open(dir.path().join("facts.sqlite")).unwrap();
        raw.execute("UPDATE facts SET key = 'op-other' WHERE seq = ?1", [receipts[1].sequence as i64]).unwrap();
    }
    assert_eq!(store.get_evidence(&receipts[1].evidence_id).unwrap_err().code, "checksum_mismatch");
}
