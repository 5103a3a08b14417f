//! FactStore benchmark: evidence append latency/throughput (Sync and Memory),
//! paged read throughput, and export + verify time of a 10 000-record archive.
//! Figures are printed, never asserted.
//!
//! Usage: cargo run --release -p aab-facts --bin facts-bench -- [--sync N] [--memory N] [--dir PARENT]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aab_facts::{Cursor, Durability, FactStore, Namespace, Profile, Stream, archive};
use serde_json::{Value, json};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn payload(i: u64) -> Value {
    json!({
        "revision": i,
        "target": { "platform": "android", "serial": "emulator-5554", "packageName": "com.example.app" },
        "provider": "native",
        "capturedAtMs": 1_700_000_000_000u64 + i,
        "rawTreeId": format!("tree-{i}"),
        "summary": {
            "activity": "com.example.app/.MainActivity",
            "nodes": (0..8).map(|n| json!({ "id": n, "text": format!("Item {n} of page {i}"), "bounds": [0, n * 40, 320, n * 40 + 40] })).collect::<Vec<_>>(),
            "url": "https://example.com/list?page=2&sort=asc",
        },
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn append_burst(store: &FactStore, op: &str, n: u64, durability: Durability) -> (Duration, Vec<Duration>) {
    let mut lat = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        store.append_evidence(Namespace::Intent, op, "observation", &payload(i), durability).expect("append");
        lat.push(t.elapsed());
    }
    let total = start.elapsed();
    lat.sort();
    (total, lat)
}

fn report(label: &str, n: u64, total: Duration, lat: &[Duration]) {
    println!(
        "{label:<28} n={n:<6} total={:>8.1} ms  throughput={:>9.0} rec/s  median={:>7.1} µs  p95={:>7.1} µs  p99={:>7.1} µs",
        total.as_secs_f64() * 1e3,
        n as f64 / total.as_secs_f64(),
        percentile(lat, 0.5).as_secs_f64() * 1e6,
        percentile(lat, 0.95).as_secs_f64() * 1e6,
        percentile(lat, 0.99).as_secs_f64() * 1e6,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sync_n: u64 = arg(&args, "--sync").and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let mem_n: u64 = arg(&args, "--memory").and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let parent = arg(&args, "--dir").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).expect("randomness");
    let root = parent.join(format!("aab-facts-bench-{}-{}", std::process::id(), suffix.iter().map(|b| format!("{b:02x}")).collect::<String>()));
    std::fs::create_dir_all(&root).expect("bench dir");
    let store_dir = root.join("store");
    let store = FactStore::open(&store_dir, Profile::Standard).expect("open");
    println!("store: {} (profile standard)", store_dir.display());
    let sample = aab_facts::canonical::to_canonical_string(&payload(1));
    println!("record: observation evidence, ~{} bytes of payload JSON", sample.len());

    // CPU share of an append: redaction, canonical JSON, two sha256.
    let t = Instant::now();
    for i in 0..mem_n {
        let v = payload(i);
        let r = aab_facts::redaction::redact(&v);
        std::hint::black_box(aab_facts::canonical::canonical_sha256(&v));
        std::hint::black_box(aab_facts::canonical::canonical_sha256(&r.value));
    }
    let t = t.elapsed();
    println!("redact+canonical+sha only    n={mem_n:<6} per record={:>7.1} µs", t.as_secs_f64() * 1e6 / mem_n as f64);

    let (t, lat) = append_burst(&store, "bench-sync", sync_n, Durability::Sync);
    report("append_evidence Sync", sync_n, t, &lat);
    let (t, lat) = append_burst(&store, "bench-memory", mem_n, Durability::Memory);
    report("append_evidence Memory", mem_n, t, &lat);

    // Paged reads of the Memory operation, 1000 per page, checksums verified.
    let mut pages = Vec::new();
    let start = Instant::now();
    let mut cursor = Cursor::Start;
    let mut total = 0usize;
    loop {
        let t = Instant::now();
        let page = store.read_evidence(Namespace::Intent, "bench-memory", &cursor, 1000).expect("read");
        pages.push(t.elapsed());
        total += page.records.len();
        if !page.has_more {
            break;
        }
        cursor = Cursor::Resume(page.next_cursor);
    }
    let t = start.elapsed();
    pages.sort();
    println!(
        "read_evidence (verified)     n={total:<6} total={:>8.1} ms  throughput={:>9.0} rec/s  page(1000) median={:.1} ms",
        t.as_secs_f64() * 1e3,
        total as f64 / t.as_secs_f64(),
        percentile(&pages, 0.5).as_secs_f64() * 1e3
    );
    let start = Instant::now();
    let mut cursor = Cursor::Start;
    let mut total = 0usize;
    loop {
        let page = store.read(Stream::EvidenceIntent, &cursor, 1000).expect("read");
        total += page.records.len();
        if !page.has_more {
            break;
        }
        cursor = Cursor::Resume(page.next_cursor);
    }
    let t = start.elapsed();
    println!("read (raw stream)            n={total:<6} total={:>8.1} ms  throughput={:>9.0} rec/s", t.as_secs_f64() * 1e3, total as f64 / t.as_secs_f64());

    let out = root.join("archive");
    let t = Instant::now();
    let export = archive::export(&store, Namespace::Intent, "bench-memory", &out, false).expect("export");
    let export_t = t.elapsed();
    let records_bytes = std::fs::metadata(out.join("records.json")).map(|m| m.len()).unwrap_or(0);
    println!("export                       n={:<6} total={:>8.1} ms  records.json={} bytes", export.record_count, export_t.as_secs_f64() * 1e3, records_bytes);
    let mut verify_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        archive::verify(&out, &export.manifest_sha256).expect("verify");
        verify_times.push(t.elapsed());
    }
    verify_times.sort();
    println!(
        "verify (offline, 5 runs)     n={:<6} median={:>8.1} ms  max={:.1} ms",
        export.record_count,
        percentile(&verify_times, 0.5).as_secs_f64() * 1e3,
        verify_times[4].as_secs_f64() * 1e3
    );

    let db = std::fs::metadata(store_dir.join("facts.sqlite")).map(|m| m.len()).unwrap_or(0);
    let wal = std::fs::metadata(store_dir.join("facts.sqlite-wal")).map(|m| m.len()).unwrap_or(0);
    println!("store files: facts.sqlite={db} bytes, wal={wal} bytes");
    drop(store);
    let db = std::fs::metadata(store_dir.join("facts.sqlite")).map(|m| m.len()).unwrap_or(0);
    let t = Instant::now();
    let store = FactStore::open(&store_dir, Profile::Standard).expect("reopen");
    let open_t = t.elapsed();
    let t = Instant::now();
    store.check().expect("quick_check");
    println!(
        "reopen (incl. quick_check)   db={db} bytes  open={:.1} ms  quick_check alone={:.1} ms",
        open_t.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&root);
}
