//! FactStore: sequence, paging, retention gaps, cursors, writer exclusivity,
//! read-only access, directory rules and corruption.

use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use aab_facts::{Cursor, Durability, FactStore, Profile, Stream};
use serde_json::json;

use crate::support::{open, tmp};

#[test]
fn appends_share_one_sequence_and_pages_follow_it() {
    let dir = tmp();
    let store = open(dir.path());
    let mut ui = Vec::new();
    for i in 0..25 {
        let r = store.append(Stream::Ui, Some("android:[\"s\",\"p\"]"), &json!({ "i": i }), Durability::Memory).unwrap();
        ui.push(r.sequence);
        store.append(Stream::Note, None, &json!({ "note": i }), Durability::Sync).unwrap();
    }
    assert!(ui.windows(2).all(|w| w[1] == w[0] + 2), "streams interleave on one global sequence: {ui:?}");

    let mut cursor = Cursor::Start;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = store.read(Stream::Ui, &cursor, 10).unwrap();
        assert!(page.next_cursor.starts_with("fc1:"));
        assert!(page.gap.is_none() && !page.expired);
        seen.extend(page.records.iter().map(|r| r.sequence));
        assert!(page.records.iter().all(|r| r.stream == Stream::Ui && r.key.as_deref() == Some("android:[\"s\",\"p\"]")));
        pages += 1;
        cursor = Cursor::Resume(page.next_cursor);
        if !page.has_more {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ui);
    // Reading past the end is empty and stays put.
    let end = store.read(Stream::Ui, &cursor, 10).unwrap();
    assert!(end.records.is_empty() && !end.has_more);
    let r = store.append(Stream::Ui, Some("android:[\"s\",\"p\"]"), &json!({ "i": 99 }), Durability::Memory).unwrap();
    let next = store.read(Stream::Ui, &Cursor::Resume(end.next_cursor), 10).unwrap();
    assert_eq!(next.records.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![r.sequence]);
    assert_eq!(next.records[0].record, json!({ "i": 99 }));

    // Resuming from a raw sequence number gives the same pages.
    let from_raw = store.read(Stream::Ui, &Cursor::After(ui[9]), 10).unwrap();
    assert_eq!(from_raw.records.iter().map(|r| r.sequence).collect::<Vec<_>>(), ui[10..20].to_vec());
    assert_eq!(from_raw.next_sequence, ui[19]);

    let status = store.status().unwrap();
    assert_eq!(status.last_sequence, r.sequence);
    let ui_status = status.streams.iter().find(|s| s.stream == Stream::Ui).unwrap();
    assert_eq!(ui_status.records, 26);
}

#[test]
fn provider_streams_live_under_capture_keyed_by_their_own_name() {
    let dir = tmp();
    let store = open(dir.path());
    let a = store.append(Stream::Capture, Some("web-capture/session-1"), &json!({ "kind": "console" }), Durability::Memory).unwrap();
    store.append(Stream::Capture, Some("web-dom/session-1"), &json!({ "kind": "dom" }), Durability::Memory).unwrap();
    let b = store.append(Stream::Capture, Some("web-capture/session-1"), &json!({ "kind": "network" }), Durability::Memory).unwrap();
    let page = store.read_key(Stream::Capture, "web-capture/session-1", &Cursor::After(0), 10).unwrap();
    assert_eq!(page.records.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![a.sequence, b.sequence]);
    let next = store.read_key(Stream::Capture, "web-capture/session-1", &Cursor::After(page.next_sequence), 10).unwrap();
    assert!(next.records.is_empty() && next.gap.is_none());
}

#[test]
fn the_sequence_continues_across_reopen_and_retention() {
    let dir = tmp();
    let mut last = 0;
    for round in 0..3 {
        let store = open(dir.path());
        for _ in 0..4 {
            let r = store.append(Stream::Action, Some("t"), &json!({ "round": round }), Durability::Sync).unwrap();
            assert!(r.sequence > last);
            if round > 0 && last > 0 {
                assert!(r.sequence <= last + 1, "a clean close gives back the reserved block, so numbering stays dense");
            }
            last = r.sequence;
            assert_eq!(r.receipt_id, format!("{}:{}", store.store_id(), r.sequence));
        }
    }
    // Retention removes the oldest rows; numbers keep growing.
    let store = open(dir.path());
    let quota = Profile::Small.quota(Stream::Note);
    let big = "x".repeat((quota.max_record_bytes - 1024) as usize);
    let mut evicted = 0;
    for _ in 0..8 {
        let r = store.append(Stream::Note, None, &json!({ "blob": big }), Durability::Memory).unwrap();
        assert!(r.sequence > last);
        last = r.sequence;
        evicted += r.evicted;
    }
    assert!(evicted >= 4, "the 1 MiB note quota holds ~4 records of 256 KiB; evicted {evicted}");
    drop(store);
    let store = open(dir.path());
    let r = store.append(Stream::Note, None, &json!({ "after": "reopen" }), Durability::Sync).unwrap();
    assert_eq!(r.sequence, last + 1);
}

#[test]
fn retention_gaps_are_reported_per_stream_and_per_key() {
    let dir = tmp();
    let store = open(dir.path());
    let quota = Profile::Small.quota(Stream::Note);
    let big = "y".repeat((quota.max_record_bytes - 1024) as usize);
    // Key "old" is written first, so retention removes only its records.
    let first = store.append(Stream::Note, Some("old"), &json!({ "blob": big }), Durability::Memory).unwrap();
    store.append(Stream::Note, Some("old"), &json!({ "blob": big }), Durability::Memory).unwrap();
    let page = store.read(Stream::Note, &Cursor::Start, 1).unwrap();
    assert_eq!(page.records[0].sequence, first.sequence);
    let cursor_after_first = Cursor::Resume(page.next_cursor);
    let mut young = Vec::new();
    for _ in 0..4 {
        young.push(store.append(Stream::Note, Some("young"), &json!({ "blob": big }), Durability::Memory).unwrap().sequence);
    }
    let status = store.status().unwrap();
    let note = status.streams.iter().find(|s| s.stream == Stream::Note).unwrap();
    assert!(note.evicted_through > first.sequence, "the second 'old' record was evicted too");

    let page = store.read(Stream::Note, &cursor_after_first, 100).unwrap();
    let gap = page.gap.expect("the reader missed evicted records");
    assert_eq!(gap.from, first.sequence + 1);
    assert_eq!(gap.to, note.evicted_through);
    assert!(page.records.iter().all(|r| r.sequence > gap.to));
    // The gap is reported once: the next cursor starts after it.
    let again = store.read(Stream::Note, &Cursor::Resume(page.next_cursor), 100).unwrap();
    assert!(again.gap.is_none() && again.records.is_empty());

    let from_start = store.read(Stream::Note, &Cursor::Start, 100).unwrap();
    assert_eq!(from_start.gap.map(|g| g.from), Some(1), "history before the oldest retained record is not complete");

    let old = store.read_key(Stream::Note, "old", &Cursor::Start, 100).unwrap();
    assert!(old.records.is_empty());
    assert!(old.gap.is_some(), "every record of key 'old' was evicted");
    let young_page = store.read_key(Stream::Note, "young", &Cursor::Start, 100).unwrap();
    assert!(young_page.gap.is_none(), "no record of key 'young' was evicted");
    assert_eq!(young_page.records.iter().map(|r| r.sequence).collect::<Vec<_>>(), young);
}

#[test]
fn cursors_are_bound_to_their_store_stream_and_key() {
    let a = tmp();
    let b = tmp();
    let sa = open(a.path());
    let sb = open(b.path());
    sa.append(Stream::Ui, Some("k"), &json!(1), Durability::Memory).unwrap();
    sb.append(Stream::Ui, Some("k"), &json!(2), Durability::Memory).unwrap();
    let page = sa.read(Stream::Ui, &Cursor::Start, 10).unwrap();

    let foreign = sb.read(Stream::Ui, &Cursor::Resume(page.next_cursor.clone()), 10).unwrap();
    assert!(foreign.expired, "a cursor from another store generation is expired");
    assert!(foreign.records.is_empty());
    let restarted = sb.read(Stream::Ui, &Cursor::Resume(foreign.next_cursor), 10).unwrap();
    assert_eq!(restarted.records.len(), 1);

    let code = |c: &str| sa.read(Stream::Ui, &Cursor::from(c), 10).unwrap_err().code;
    let mut tampered = page.next_cursor.clone();
    tampered.replace_range(tampered.len() - 1.., if tampered.ends_with('0') { "1" } else { "0" });
    assert_eq!(code(&tampered), "invalid_fact_cursor");
    assert_eq!(code("fc1:nonsense"), "invalid_fact_cursor");
    assert_eq!(code("cursor"), "invalid_fact_cursor");
    assert_eq!(sa.read(Stream::Note, &Cursor::Resume(page.next_cursor.clone()), 10).unwrap_err().code, "invalid_fact_cursor");
    assert_eq!(sa.read_key(Stream::Ui, "k", &Cursor::Resume(page.next_cursor.clone()), 10).unwrap_err().code, "invalid_fact_cursor");
    assert_eq!(sa.read(Stream::Ui, &Cursor::Start, 0).unwrap_err().code, "invalid_argument");
    assert_eq!(sa.read(Stream::Ui, &Cursor::Start, 1001).unwrap_err().code, "invalid_argument");
}

#[test]
fn a_second_writer_is_refused_in_process_and_across_processes() {
    let dir = tmp();
    let store = open(dir.path());
    store.append(Stream::Action, Some("t"), &json!({ "n": 1 }), Durability::Sync).unwrap();
    assert_eq!(FactStore::open(dir.path(), Profile::Small).unwrap_err().code, "fact_store_writer_busy");
    drop(store);

    let mut child = Command::new(env!("CARGO_BIN_EXE_facts-writer"))
        .arg(dir.path())
        .arg("--hold")
        .env("AI_APP_BRIDGE_FACT_CACHE_PROFILE", "small")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let err = FactStore::open(dir.path(), Profile::Small).unwrap_err();
    assert_eq!(err.code, "fact_store_writer_busy");
    // Offline readers never need the writer lock.
    let reader = FactStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.read(Stream::Action, &Cursor::Start, 10).unwrap().records.len(), 1);
    // The OS releases the lock when the holder dies, even by SIGKILL.
    child.kill().unwrap();
    child.wait().unwrap();
    let store = open(dir.path());
    store.append(Stream::Action, Some("t"), &json!({ "n": 2 }), Durability::Sync).unwrap();
}

#[test]
fn read_only_stores_read_beside_a_live_writer_and_never_write() {
    let dir = tmp();
    let store = open(dir.path());
    let reader = FactStore::open_read_only(dir.path()).unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.store_id(), store.store_id());
    assert_eq!(reader.profile(), Profile::Small);
    let r = store.append(Stream::StateEvent, None, &json!({ "state": "resumed" }), Durability::Memory).unwrap();
    let page = reader.read(Stream::StateEvent, &Cursor::Start, 10).unwrap();
    assert_eq!(page.records[0].sequence, r.sequence);
    assert_eq!(reader.append(Stream::Note, None, &json!(1), Durability::Sync).unwrap_err().code, "fact_store_read_only");
    drop(store);
    // After a clean close (WAL folded into the database) readers still work.
    let reader = FactStore::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.read(Stream::StateEvent, &Cursor::Start, 10).unwrap().records[0].sequence, r.sequence);
    let big = FactStore::open(dir.path(), Profile::Small).unwrap();
    let n = u64::MAX;
    big.append(Stream::Note, None, &json!({ "id": n }), Durability::Memory).unwrap();
    assert_eq!(big.read(Stream::Note, &Cursor::Start, 10).unwrap().records[0].record, json!({ "id": n }), "integers keep their exact value");
    let missing = tmp();
    assert_eq!(FactStore::open_read_only(&missing.path().join("nope")).unwrap_err().code, "fact_store_unavailable");
    assert_eq!(FactStore::open_read_only(missing.path()).unwrap_err().code, "fact_store_unavailable");
}

#[test]
fn appends_from_many_threads_get_unique_increasing_numbers() {
    let dir = tmp();
    let store = open(dir.path());
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let store = &store;
                s.spawn(move || {
                    (0..50).map(|i| store.append(Stream::AppLog, None, &json!({ "t": t, "i": i }), Durability::Memory).unwrap().sequence).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = per_thread.iter().flatten().copied().collect();
    assert!(per_thread.iter().all(|v| v.windows(2).all(|w| w[0] < w[1])));
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 200);
}

#[test]
fn raw_appends_refuse_evidence_streams_oversized_records_and_bad_keys() {
    let dir = tmp();
    let store = open(dir.path());
    assert_eq!(store.append(Stream::EvidenceScript, Some("op"), &json!({}), Durability::Sync).unwrap_err().code, "fact_stream_reserved");
    let quota = Profile::Small.quota(Stream::AppLog);
    let huge = "z".repeat(quota.max_record_bytes as usize + 1);
    let err = store.append(Stream::AppLog, None, &json!(huge), Durability::Memory).unwrap_err();
    assert_eq!(err.code, "payload_too_large");
    assert_eq!(store.append(Stream::AppLog, Some(""), &json!(1), Durability::Memory).unwrap_err().code, "invalid_argument");
    // A refused append consumes no sequence number.
    let a = store.append(Stream::AppLog, None, &json!(1), Durability::Memory).unwrap();
    let b = store.append(Stream::AppLog, None, &json!(2), Durability::Memory).unwrap();
    assert_eq!(b.sequence, a.sequence + 1);
    assert_eq!(Stream::parse("bogus").unwrap_err().code, "unknown_fact_stream");
    assert_eq!(Profile::parse("medium").unwrap_err().code, "invalid_fact_store_profile");
}

#[test]
fn an_invalid_profile_in_the_environment_is_refused() {
    let dir = tmp();
    let out = Command::new(env!("CARGO_BIN_EXE_facts-writer")).arg(dir.path()).arg("1").env("AI_APP_BRIDGE_FACT_CACHE_PROFILE", "huge").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_fact_store_profile"));
    assert!(!dir.path().join("facts.sqlite").exists(), "nothing is created before the profile is known");
}

#[test]
fn the_store_directory_is_private_and_must_be_ours() {
    let parent = tmp();
    let dir = parent.path().join("a").join("facts");
    let store = open(&dir);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    drop(store);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    drop(open(&dir));
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "a writer tightens its directory");

    let link = parent.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert_eq!(FactStore::open(&link, Profile::Small).unwrap_err().code, "fact_store_directory_unsafe");
    let file = parent.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(FactStore::open(&file, Profile::Small).unwrap_err().code, "fact_store_directory_unsafe");
}

fn filled_store() -> tempfile::TempDir {
    let dir = tmp();
    let store = open(dir.path());
    for i in 0..400 {
        store.append(Stream::Ui, Some("k"), &json!({ "i": i, "pad": "p".repeat(200) }), Durability::Memory).unwrap();
    }
    dir
}

fn overwrite(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_corrupt_store_is_an_error_never_an_empty_history() {
    // Damaged pages inside the database.
    let dir = filled_store();
    let db = dir.path().join("facts.sqlite");
    assert!(std::fs::metadata(&db).unwrap().len() > 64 * 1024, "a clean close checkpointed the WAL into the database");
    // Pages 5..8 (4 KiB pages) become garbage, headers included.
    overwrite(&db, 4 * 4096, &[0xA5; 4 * 4096]);
    let err = FactStore::open(dir.path(), Profile::Small).unwrap_err();
    assert_eq!(err.code, "fact_store_corrupt", "{err:?}");
    assert_eq!(FactStore::open_read_only(dir.path()).unwrap_err().code, "fact_store_corrupt");

    // A destroyed header.
    let dir = filled_store();
    overwrite(&dir.path().join("facts.sqlite"), 0, &[0u8; 100]);
    assert_eq!(FactStore::open(dir.path(), Profile::Small).unwrap_err().code, "fact_store_corrupt");

    // A truncated or deleted database while the directory still names its store.
    let dir = filled_store();
    std::fs::File::create(dir.path().join("facts.sqlite")).unwrap();
    assert_eq!(FactStore::open(dir.path(), Profile::Small).unwrap_err().code, "fact_store_corrupt");
    assert_eq!(FactStore::open_read_only(dir.path()).unwrap_err().code, "fact_store_corrupt");
    let dir = filled_store();
    std::fs::remove_file(dir.path().join("facts.sqlite")).unwrap();
    assert_eq!(FactStore::open(dir.path(), Profile::Small).unwrap_err().code, "fact_store_corrupt");

    // A database swapped in from another store.
    let a = filled_store();
    let b = filled_store();
    std::fs::copy(b.path().join("facts.sqlite"), a.path().join("facts.sqlite")).unwrap();
    assert_eq!(FactStore::open(a.path(), Profile::Small).unwrap_err().code, "fact_store_corrupt");

    // An intact store passes the explicit check.
    let ok = filled_store();
    let store = open(ok.path());
    store.check().unwrap();
    assert_eq!(store.read(Stream::Ui, &Cursor::Start, 1000).unwrap().records.len(), 400);
}
