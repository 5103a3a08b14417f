//! Test helper: appends evidence with Sync durability to a FactStore and prints
//! every acknowledged sequence (`<sequence> <evidenceId>`) on its own line,
//! flushed, as soon as `append_evidence` returned. The crash test kills it with
//! SIGKILL mid-burst and checks every printed sequence survived.
//!
//! Usage: `facts-writer STORE_DIR COUNT [OPERATION_ID]`, or
//! `facts-writer STORE_DIR --hold` to take the writer lock, print `ready` and
//! wait to be killed.

use std::io::Write;
use std::path::Path;

use aab_facts::{Durability, FactStore, Namespace, Profile};
use serde_json::json;

fn fail(e: aab_facts::FactError) -> ! {
    eprintln!("error: {} {}", e.code, e.message);
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: facts-writer <store-dir> <count> [operation-id] | <store-dir> --hold");
        std::process::exit(64);
    }
    let profile = Profile::from_env().unwrap_or_else(|e| fail(e));
    let store = FactStore::open(Path::new(&args[0]), profile).unwrap_or_else(|e| fail(e));
    let mut out = std::io::stdout().lock();
    if args[1] == "--hold" {
        let _ = writeln!(out, "ready");
        let _ = out.flush();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    let count: u64 = args[1].parse().unwrap_or_else(|_| {
        eprintln!("count must be a number");
        std::process::exit(64);
    });
    let op = args.get(2).map(String::as_str).unwrap_or("crash-op");
    for i in 0..count {
        let payload = json!({
            "revision": i,
            "stepId": format!("step-{i}"),
            "note": format!("burst record {i}"),
        });
        let r = store.append_evidence(Namespace::Script, op, "checkpoint", &payload, Durability::Sync).unwrap_or_else(|e| fail(e));
        if writeln!(out, "{} {}", r.sequence, r.evidence_id).and_then(|_| out.flush()).is_err() {
            std::process::exit(3);
        }
    }
}
