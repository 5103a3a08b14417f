//! `kill -9` in the middle of a burst of Sync evidence writes: every sequence
//! the writer acknowledged (printed after `append_evidence` returned) must be
//! present, readable and checksum-valid afterwards, and the next writer must
//! continue the global sequence above all of them.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aab_facts::{Cursor, Durability, FactStore, Namespace, Profile};
use serde_json::json;

use crate::support::tmp;

const BURST: u64 = 10_000;

#[test]
fn kill_9_during_a_sync_burst_loses_no_acknowledged_record() {
    let dir = tmp();
    let mut child = Command::new(env!("CARGO_BIN_EXE_facts-writer"))
        .arg(dir.path())
        .arg(BURST.to_string())
        .arg("crash-op")
        .env("AI_APP_BRIDGE_FACT_CACHE_PROFILE", "small")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn facts-writer");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        // Only complete lines count as acknowledgements.
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    let mut acked: Vec<(u64, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.len() < 300 && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let (seq, id) = line.split_once(' ').expect("`<seq> <evidenceId>`");
            acked.push((seq.parse().unwrap(), id.to_string()));
        }
    }
    assert!(acked.len() >= 300, "the writer acknowledged only {} records in time", acked.len());
    child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed, not finished: {status:?}");
    reader.join().unwrap();
    // Lines printed before the kill are still in the pipe.
    while let Ok(line) = rx.try_recv() {
        let (seq, id) = line.split_once(' ').unwrap();
        acked.push((seq.parse().unwrap(), id.to_string()));
    }
    assert!((acked.len() as u64) < BURST, "the burst was interrupted");
    assert!(acked.windows(2).all(|w| w[0].0 < w[1].0));

    // An offline reader recovers the WAL the dead writer left behind.
    let reader = FactStore::open_read_only(dir.path()).expect("read-only open after SIGKILL");
    for (seq, id) in acked.iter().step_by(37) {
        assert_eq!(reader.get_evidence(id).expect("acknowledged record readable offline").sequence, *seq);
    }
    drop(reader);

    // The lock died with the process; the store opens and is intact.
    let store = FactStore::open(dir.path(), Profile::Small).expect("reopen after SIGKILL");
    store.check().expect("quick_check after SIGKILL");
    for (seq, id) in &acked {
        let item = store.get_evidence(id).unwrap_or_else(|e| panic!("acknowledged {id} (seq {seq}) lost: {e:?}"));
        assert_eq!(item.sequence, *seq);
    }
    let mut cursor = Cursor::Start;
    let mut stored = Vec::new();
    loop {
        let page = store.read_evidence(Namespace::Script, "crash-op", &cursor, 1000).expect("verified read");
        assert!(page.gap.is_none());
        stored.extend(page.records.iter().map(|r| r.sequence));
        if !page.has_more {
            break;
        }
        cursor = Cursor::Resume(page.next_cursor);
    }
    assert!(stored.len() >= acked.len(), "at most the in-flight record is extra");
    assert!(stored.len() <= acked.len() + 1);
    assert_eq!(&stored[..acked.len()], acked.iter().map(|a| a.0).collect::<Vec<_>>().as_slice());

    let max_seen = *stored.last().unwrap();
    let next = store.append_evidence(Namespace::Script, "crash-op-2", "checkpoint", &json!({ "revision": 0, "stepId": "after" }), Durability::Sync).unwrap();
    assert!(next.sequence > max_seen, "the next writer continues the global sequence ({} > {max_seen})", next.sequence);
}
