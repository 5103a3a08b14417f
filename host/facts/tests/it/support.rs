//! Shared fixtures: temp stores and realistic evidence payloads.

use std::path::Path;

use aab_facts::{Durability, EvidenceReceipt, FactStore, Namespace, Profile};
use serde_json::{Value, json};

pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("aab-facts-it-").tempdir().expect("tempdir")
}

pub fn open(dir: &Path) -> FactStore {
    FactStore::open(dir, Profile::Small).expect("open store")
}

pub fn android_target() -> Value {
    json!({ "platform": "android", "serial": "emulator-5554", "packageName": "com.example.app" })
}

/// All bytes SQLite keeps for the store (database, WAL, shared memory).
pub fn raw_store_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for name in ["facts.sqlite", "facts.sqlite-wal", "facts.sqlite-shm"] {
        if let Ok(b) = std::fs::read(dir.join(name)) {
            out.extend(b);
        }
    }
    out
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// One supervised Intent step: observation → summary → plan → decision →
/// dispatch marker → action receipt → checkpoint, all bound together.
pub fn intent_step(store: &FactStore, op: &str, rev: u64) -> Vec<EvidenceReceipt> {
    let ns = Namespace::Intent;
    let sync = Durability::Sync;
    let tree = format!("tree-{op}-{rev}");
    let action = format!("action-{op}-{rev}");
    let decision = format!("decision-{op}-{rev}");
    let hash = format!("spec-{rev}");
    let obs = store
        .append_evidence(ns, op, "observation", &json!({ "revision": rev, "target": android_target(), "provider": "native", "capturedAtMs": 1_700_000_000_000u64 + rev, "rawTreeId": tree, "tree": { "nodes": [ { "text": "Sign in" } ] } }), sync)
        .expect("observation");
    let summary = store.append_evidence(ns, op, "summary", &json!({ "revision": rev, "rawTreeId": tree, "summary": "login screen" }), sync).expect("summary");
    let plan =
        store.append_evidence(ns, op, "plan", &json!({ "revision": rev, "planStepId": format!("plan-{rev}"), "actionSpecHash": hash }), sync).expect("plan");
    let dec = store
        .append_evidence(
            ns,
            op,
            "decision",
            &json!({ "revision": rev, "decisionId": decision, "basedOnEvidenceIds": [obs.evidence_id], "actionSpecHash": hash, "agentDecision": "act" }),
            sync,
        )
        .expect("decision");
    let marker = store
        .append_evidence(
            ns,
            op,
            "dispatch-marker",
            &json!({ "revision": rev, "actionId": action, "decisionId": decision, "target": android_target(), "actionSpecHash": hash }),
            sync,
        )
        .expect("marker");
    let receipt = store
        .append_evidence(
            ns,
            op,
            "action-receipt",
            &json!({ "actionId": action, "target": android_target(), "startedAtMs": 10, "completedAtMs": 20, "mechanicalStatus": "delivered" }),
            sync,
        )
        .expect("receipt");
    let checkpoint = store.append_evidence(ns, op, "checkpoint", &json!({ "revision": rev, "stepId": format!("step-{rev}") }), sync).expect("checkpoint");
    vec![obs, summary, plan, dec, marker, receipt, checkpoint]
}
