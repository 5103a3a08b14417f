//! Evidence archives: export, offline verify, and every way an archive can be
//! damaged or forged.

use std::path::{Path, PathBuf};

use aab_facts::archive::{self, ExportReport};
use aab_facts::canonical::{sha256_hex, to_canonical_string};
use aab_facts::recording::{RecordedCall, Recording, Screenshot};
use aab_facts::{Durability, FactStore, Namespace};
use serde_json::{Value, json};

use crate::support::{intent_step, open, tmp};

fn code(dir: &Path, sha: &str) -> &'static str {
    archive::verify(dir, sha).map(|_| "ok").unwrap_or_else(|e| e.code)
}

/// A store with two interleaved operations; `op-a` has two full steps.
fn exported(out: &Path) -> (tempfile::TempDir, ExportReport) {
    let dir = tmp();
    let store = open(dir.path());
    intent_step(&store, "op-a", 1);
    intent_step(&store, "op-b", 1);
    intent_step(&store, "op-a", 2);
    let report = archive::export(&store, Namespace::Intent, "op-a", out, false).unwrap();
    (dir, report)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Rewrite `records.json` from `facts` and re-pin it in the manifest, as a
/// forger who controls the whole directory would; returns the new manifest
/// sha256 (the one a deceived caller would be handed).
fn forge(dir: &Path, facts: &[Value], edit_manifest: impl FnOnce(&mut Value)) -> String {
    let mut records = String::from("[\n");
    records.push_str(&facts.iter().map(to_canonical_string).collect::<Vec<_>>().join(",\n"));
    records.push_str("\n]\n");
    std::fs::write(dir.join("records.json"), &records).unwrap();
    let mut manifest = read_json(&dir.join("manifest.json"));
    manifest["records"]["bytes"] = json!(records.len());
    manifest["records"]["sha256"] = json!(sha256_hex(records.as_bytes()));
    edit_manifest(&mut manifest);
    let text = serde_json::to_string_pretty(&manifest).unwrap() + "\n";
    std::fs::write(dir.join("manifest.json"), &text).unwrap();
    sha256_hex(text.as_bytes())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn an_export_verifies_offline_and_after_being_moved() {
    let out = tmp();
    let dir = out.path().join("archive");
    let (_store_dir, report) = exported(&dir);
    assert_eq!(report.record_count, 14);
    assert_eq!(report.schema_version, "aab.evidence-archive/v1");
    assert_eq!(report.files, vec!["records.json", "manifest.json"]);
    assert_eq!(report.manifest_sha256, sha256_hex(&std::fs::read(&report.manifest_path).unwrap()));
    assert_eq!(report.coverage["referenceClosure"], json!("complete"));
    assert_eq!(
        report.targets,
        json!([{ "role": "dispatch", "value": "android:[{\"packageName\":\"com.example.app\",\"serial\":\"emulator-5554\"}]" }, { "role": "owner", "value": "android:[{\"packageName\":\"com.example.app\",\"serial\":\"emulator-5554\"}]" }])
    );
    let manifest = read_json(&report.manifest_path);
    assert_eq!(
        manifest["counts"],
        json!({ "action-receipt": 2, "checkpoint": 2, "decision": 2, "dispatch-marker": 2, "observation": 2, "plan": 2, "summary": 2 })
    );
    assert_eq!(manifest["source"]["targetKey"], json!("evidence:intent:op-a"));
    assert!(manifest["lastGlobalSeq"].as_u64().unwrap() <= manifest["source"]["throughGlobalSeq"].as_u64().unwrap());
    let records = read_json(&dir.join("records.json"));
    assert!(records.as_array().unwrap().iter().all(|f| f["payload"]["operationId"] == json!("op-a")), "only the exported operation");

    let v = archive::verify(&dir, &report.manifest_sha256).unwrap();
    assert_eq!(v.record_count, 14);
    assert_eq!(v.to_json()["integrity"], json!("verified"));

    // Moved to another directory, with no store anywhere near it.
    let elsewhere = tmp();
    let moved = elsewhere.path().join("moved-archive");
    std::fs::rename(&dir, &moved).unwrap();
    drop(_store_dir);
    assert_eq!(code(&moved, &report.manifest_sha256), "ok");
}

#[test]
fn export_refuses_existing_outputs_missing_parents_and_unknown_operations() {
    let dir = tmp();
    let store = open(dir.path());
    intent_step(&store, "op-a", 1);
    let out = tmp();
    let e = |p: PathBuf, op: &str| archive::export(&store, Namespace::Intent, op, &p, false).unwrap_err().code;
    assert_eq!(e(out.path().to_path_buf(), "op-a"), "output_exists");
    assert_eq!(e(out.path().join("missing").join("archive"), "op-a"), "invalid_argument");
    assert_eq!(e(out.path().join("x"), "op-zzz"), "operation_not_found");
    assert!(!out.path().join("x").exists(), "a failed export leaves nothing behind");
    assert_eq!(
        archive::export(&store, Namespace::Script, "op-a", &out.path().join("y"), false).unwrap_err().code,
        "operation_not_found",
        "namespaces are separate"
    );
    // Export needs no writer: an offline reader exports the same archive.
    let reader = FactStore::open_read_only(dir.path()).unwrap();
    let r = archive::export(&reader, Namespace::Intent, "op-a", &out.path().join("offline"), false).unwrap();
    assert_eq!(r.record_count, 7);
    assert_eq!(code(&r.archive_dir, &r.manifest_sha256), "ok");
}

#[test]
fn flipping_any_single_byte_fails_verification() {
    // One step (7 records) keeps the exhaustive loop affordable in debug builds.
    let store_dir = tmp();
    let store = open(store_dir.path());
    intent_step(&store, "op-f", 1);
    let out = tmp();
    let dir = out.path().join("archive");
    let report = archive::export(&store, Namespace::Intent, "op-f", &dir, false).unwrap();
    for (file, want) in [("manifest.json", "manifest_checksum_mismatch"), ("records.json", "records_checksum_mismatch")] {
        let path = dir.join(file);
        let original = std::fs::read(&path).unwrap();
        for i in 0..original.len() {
            let mut bytes = original.clone();
            bytes[i] ^= 0x20;
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(code(&dir, &report.manifest_sha256), want, "{file} byte {i}");
        }
        std::fs::write(&path, &original).unwrap();
    }
    assert_eq!(code(&dir, &report.manifest_sha256), "ok");
}

#[test]
fn reordered_deleted_or_rewritten_records_fail_with_specific_codes() {
    let out = tmp();
    let dir = out.path().join("archive");
    let (_s, report) = exported(&dir);
    let pristine = out.path().join("pristine");
    copy_dir(&dir, &pristine);
    let facts: Vec<Value> = read_json(&dir.join("records.json")).as_array().unwrap().clone();
    let restore = || {
        std::fs::remove_dir_all(&dir).unwrap();
        copy_dir(&pristine, &dir);
    };

    // Naive tampering without touching the manifest.
    let mut swapped = facts.clone();
    swapped.swap(3, 4);
    let mut text = String::from("[\n");
    text.push_str(&swapped.iter().map(to_canonical_string).collect::<Vec<_>>().join(",\n"));
    text.push_str("\n]\n");
    std::fs::write(dir.join("records.json"), text).unwrap();
    assert_eq!(code(&dir, &report.manifest_sha256), "records_checksum_mismatch");
    restore();

    // A forger re-pins records.json; the caller's manifest hash still catches it.
    forge(&dir, &swapped, |_| {});
    assert_eq!(code(&dir, &report.manifest_sha256), "manifest_checksum_mismatch");

    // Forged but self-consistent archives fail the analysis with specific codes.
    restore();
    let sha = forge(&dir, &swapped, |_| {});
    assert_eq!(code(&dir, &sha), "invalid_record_sequence", "reordered");

    restore();
    let mut deleted = facts.clone();
    deleted.remove(2); // a plan: nothing references it
    let sha = forge(&dir, &deleted, |_| {});
    assert_eq!(code(&dir, &sha), "manifest_analysis_mismatch", "deleted");

    restore();
    let mut deleted = facts.clone();
    deleted.remove(0); // the observation the summary and decision reference
    let sha = forge(&dir, &deleted, |m| {
        m["recordCount"] = json!(13);
        m["firstGlobalSeq"] = json!(deleted[0]["globalSeq"]);
        m["counts"]["observation"] = json!(1);
    });
    assert_eq!(code(&dir, &sha), "manifest_analysis_mismatch", "closure became partial: {:?}", archive::verify(&dir, &sha).unwrap_err());

    restore();
    let mut dup = facts.clone();
    dup.insert(5, facts[4].clone());
    let sha = forge(&dir, &dup, |_| {});
    assert_eq!(code(&dir, &sha), "invalid_record_sequence", "duplicated");

    restore();
    let mut edited = facts.clone();
    edited[2]["payload"]["planStepId"] = json!("plan-9");
    let sha = forge(&dir, &edited, |_| {});
    assert_eq!(code(&dir, &sha), "record_checksum_mismatch", "edited content");

    restore();
    let mut rebound = facts.clone();
    rebound[1]["actionId"] = json!("intent:other");
    let sha = forge(&dir, &rebound, |_| {});
    assert_eq!(code(&dir, &sha), "fact_binding_mismatch");

    restore();
    let mut scoped = facts.clone();
    scoped[1]["payload"]["operationId"] = json!("op-b");
    let sha = forge(&dir, &scoped, |_| {});
    assert_eq!(code(&dir, &sha), "record_scope_mismatch");

    restore();
    let mut beyond = facts.clone();
    let last = beyond.len() - 1;
    beyond[last]["globalSeq"] = json!(10_000);
    let sha = forge(&dir, &beyond, |_| {});
    assert_eq!(code(&dir, &sha), "invalid_record_sequence", "beyond the snapshot");

    restore();
    let sha = forge(&dir, &facts, |m| m["counts"]["plan"] = json!(3));
    assert_eq!(code(&dir, &sha), "manifest_analysis_mismatch");

    restore();
    let sha = forge(&dir, &facts, |m| m["schemaVersion"] = json!("aab.evidence-archive/v9"));
    assert_eq!(code(&dir, &sha), "unsupported_archive_schema");

    restore();
    let sha = forge(&dir, &facts, |m| m["records"]["path"] = json!("../records.json"));
    assert_eq!(code(&dir, &sha), "invalid_archive_path");

    restore();
    let sha = forge(&dir, &facts, |m| m["source"]["targetKey"] = json!("evidence:intent:op-b"));
    assert_eq!(code(&dir, &sha), "invalid_archive_source");

    restore();
    assert_eq!(code(&dir, &report.manifest_sha256), "ok");
}

#[test]
fn symlinks_extra_and_missing_files_are_refused() {
    let out = tmp();
    let dir = out.path().join("archive");
    let (_s, report) = exported(&dir);
    let sha = report.manifest_sha256.clone();

    // records.json pointing at an identical copy elsewhere.
    let copy = out.path().join("records-copy.json");
    std::fs::copy(dir.join("records.json"), &copy).unwrap();
    std::fs::remove_file(dir.join("records.json")).unwrap();
    std::os::unix::fs::symlink(&copy, dir.join("records.json")).unwrap();
    let err = archive::verify(&dir, &sha).unwrap_err();
    assert_eq!(err.code, "invalid_archive_file");
    assert_eq!(err.details.unwrap()["reason"], json!("not_regular_file"));
    std::fs::remove_file(dir.join("records.json")).unwrap();
    let missing = archive::verify(&dir, &sha).unwrap_err();
    assert_eq!((missing.code, missing.details.unwrap()["reason"].clone()), ("invalid_archive_file", json!("missing")));
    std::fs::copy(&copy, dir.join("records.json")).unwrap();
    assert_eq!(code(&dir, &sha), "ok");

    // manifest.json as a symlink.
    let mcopy = out.path().join("manifest-copy.json");
    std::fs::rename(dir.join("manifest.json"), &mcopy).unwrap();
    std::os::unix::fs::symlink(&mcopy, dir.join("manifest.json")).unwrap();
    assert_eq!(code(&dir, &sha), "invalid_archive_file");
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    std::fs::rename(&mcopy, dir.join("manifest.json")).unwrap();

    // An extra file, or an extra directory.
    std::fs::write(dir.join("notes.txt"), b"hi").unwrap();
    let extra = archive::verify(&dir, &sha).unwrap_err();
    assert_eq!((extra.code, extra.details.unwrap()["reason"].clone()), ("invalid_archive_file", json!("unexpected")));
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    std::fs::create_dir(dir.join("payload-x")).unwrap();
    assert_eq!(code(&dir, &sha), "invalid_archive_file");
    std::fs::remove_dir(dir.join("payload-x")).unwrap();

    // The archive directory itself as a symlink, or not a directory.
    let link = out.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert_eq!(code(&link, &sha), "invalid_archive_directory");
    assert_eq!(code(&dir.join("records.json"), &sha), "invalid_archive_directory");
    assert_eq!(code(&out.path().join("nowhere"), &sha), "invalid_archive_directory");

    assert_eq!(code(&dir, "ABC"), "invalid_argument");
    assert_eq!(code(&dir, &"0".repeat(64)), "manifest_checksum_mismatch");
    assert_eq!(code(&dir, &sha), "ok");
}

fn png(tag: u8) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00".to_vec();
    b.push(tag);
    b
}

#[test]
fn recorded_payloads_travel_in_v2_archives() {
    let dir = tmp();
    let store = open(dir.path());
    let cp = store.append_evidence(Namespace::Script, "op-r", "checkpoint", &json!({ "revision": 1, "stepId": "start" }), Durability::Sync).unwrap();
    let work = tmp();
    let shot = work.path().join("shot.png");
    std::fs::write(&shot, png(7)).unwrap();
    let rec_dir = work.path().join("recording");
    let mut rec = Recording::create(&rec_dir, Namespace::Script, "op-r").unwrap();
    assert_eq!(Recording::create(&rec_dir, Namespace::Script, "op-r").unwrap_err().code, "output_exists");
    let screenshots = [Screenshot { path: shot.clone(), sha256: sha256_hex(&png(7)) }];
    let receipts = rec
        .record(
            &store,
            &RecordedCall {
                sequence: 1,
                revision: 1,
                kind: "script-call",
                target: None,
                data: &json!({ "command": "tap", "x": 1 }),
                screenshots: &screenshots,
                parent_fact_id: Some(&cp.evidence_id),
            },
        )
        .unwrap();
    assert_eq!(receipts.len(), 2);
    assert!(rec_dir.join("1.json").is_file() && rec_dir.join("1-1.png").is_file());
    // A screenshot whose bytes differ from the issued digest is refused and latches.
    let bad = [Screenshot { path: shot.clone(), sha256: "0".repeat(64) }];
    let e = rec
        .record(
            &store,
            &RecordedCall { sequence: 2, revision: 1, kind: "script-call", target: None, data: &json!({}), screenshots: &bad, parent_fact_id: None },
        )
        .unwrap_err();
    assert_eq!(e.code, "recording_payload_invalid");
    let again = rec
        .record(&store, &RecordedCall { sequence: 3, revision: 1, kind: "script-call", target: None, data: &json!({}), screenshots: &[], parent_fact_id: None })
        .unwrap_err();
    assert_eq!(again.code, "recording_payload_invalid", "failures latch");

    let out = tmp();
    let v1 = archive::export(&store, Namespace::Script, "op-r", &out.path().join("v1"), false).unwrap();
    assert_eq!(v1.schema_version, "aab.evidence-archive/v1");
    assert_eq!(v1.coverage["externalPayloads"], json!("not-included"));
    assert_eq!(v1.coverage["externalReferences"].as_array().unwrap().len(), 2);
    assert_eq!(code(&v1.archive_dir, &v1.manifest_sha256), "ok");

    let v2 = archive::export(&store, Namespace::Script, "op-r", &out.path().join("v2"), true).unwrap();
    assert_eq!(v2.schema_version, "aab.evidence-archive/v2");
    assert_eq!(v2.files.len(), 4, "{:?}", v2.files);
    assert_eq!(v2.recorded_payloads.as_ref().unwrap()["count"], json!(2));
    assert_eq!(code(&v2.archive_dir, &v2.manifest_sha256), "ok");
    let png_name = v2.files.iter().find(|f| f.ends_with(".png")).unwrap().clone();
    let p = v2.archive_dir.join(&png_name);
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(code(&v2.archive_dir, &v2.manifest_sha256), "payload_checksum_mismatch");
    std::fs::remove_file(&p).unwrap();
    assert_eq!(code(&v2.archive_dir, &v2.manifest_sha256), "invalid_archive_file");

    // A recording changed after the fact cannot be exported as evidence.
    std::fs::write(rec_dir.join("1-1.png"), png(8)).unwrap();
    assert_eq!(archive::export(&store, Namespace::Script, "op-r", &out.path().join("v2b"), true).unwrap_err().code, "recorded_payload_unavailable");
    assert!(!out.path().join("v2b").exists());
}

#[test]
fn references_decide_closure_and_contradictions_fail() {
    let dir = tmp();
    let store = open(dir.path());
    let ns = Namespace::Intent;
    // A decision based on evidence outside the archive: closure is partial.
    store
        .append_evidence(ns, "op-p", "decision", &json!({ "revision": 1, "decisionId": "d1", "basedOnEvidenceIds": ["intent:observation:elsewhere:1:1"], "actionSpecHash": "h", "agentDecision": "act" }), Durability::Sync)
        .unwrap();
    let out = tmp();
    let r = archive::export(&store, ns, "op-p", &out.path().join("p"), false).unwrap();
    assert_eq!(r.coverage["referenceClosure"], json!("partial"));
    assert_eq!(r.coverage["missingReferences"][0]["field"], json!("basedOnEvidenceIds"));
    assert_eq!(code(&r.archive_dir, &r.manifest_sha256), "ok");

    // A decision that cites a record written after it.
    store
        .append_evidence(
            ns,
            "op-c",
            "decision",
            &json!({ "revision": 1, "decisionId": "d1", "basedOnEvidenceIds": ["intent:late"], "actionSpecHash": "h", "agentDecision": "act" }),
            Durability::Sync,
        )
        .unwrap();
    store.append_evidence(ns, "op-c", "checkpoint", &json!({ "evidenceId": "intent:late", "revision": 1, "stepId": "s" }), Durability::Sync).unwrap();
    assert_eq!(archive::export(&store, ns, "op-c", &out.path().join("c"), false).unwrap_err().code, "invalid_evidence_references");

    // A marker whose decision has another actionSpecHash.
    store
        .append_evidence(
            ns,
            "op-m",
            "decision",
            &json!({ "revision": 1, "decisionId": "d1", "basedOnEvidenceIds": [], "actionSpecHash": "h1", "agentDecision": "act" }),
            Durability::Sync,
        )
        .unwrap();
    store
        .append_evidence(
            ns,
            "op-m",
            "dispatch-marker",
            &json!({ "revision": 1, "actionId": "a1", "decisionId": "d1", "target": crate::support::android_target(), "actionSpecHash": "h2" }),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(archive::export(&store, ns, "op-m", &out.path().join("m"), false).unwrap_err().code, "invalid_reference_binding");

    // Two observations claiming the same raw tree.
    for _ in 0..2 {
        store
            .append_evidence(
                ns,
                "op-a",
                "observation",
                &json!({ "revision": 1, "rawTreeId": "t", "target": crate::support::android_target(), "provider": "uia", "capturedAtMs": 1 }),
                Durability::Sync,
            )
            .unwrap();
    }
    assert_eq!(archive::export(&store, ns, "op-a", &out.path().join("a"), false).unwrap_err().code, "ambiguous_evidence_reference");
}
