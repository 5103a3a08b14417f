//! Capture ingress and capture windows (§6.3, §6.6). Every `capture` frame becomes
//! an `aab.web-fact/v1` record appended to the FactStore (`web-capture` stream,
//! key `<sessionId>/<stream>`); the page gets a `captureAck` with the receipt only
//! after the append. Host FactStore appends need a call context, so frames that
//! arrive between calls wait in a bounded ingress queue that the next call — or the
//! call currently waiting on the page — commits first ([`Captures::pump`]).
//!
//! The module also tracks, per page document and stream, which page sequences were
//! committed, so a window between two capture barriers can report gaps, losses,
//! pending requests and connection changes honestly.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

use aab_plugin_api::Context;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::execution::ExecTable;
use crate::facts::{AppendError, Facts, Mode};
use crate::ids::{now_ms, sha256_hex};
use crate::state::{Conn, lock};
use crate::wire::{self, Capture, FACT_SCHEMA, MAX_FACT_BYTES, STREAMS};

pub const CAPTURE_STREAM: &str = "web-capture";
pub const BARRIER_STREAM: &str = "web-barrier";
pub const EXECUTION_STREAM: &str = "web-execution";
pub const DOM_STREAM: &str = "web-dom";

/// Frames waiting for a call context; beyond this the provider refuses captures
/// (`stored:false`), which the page counts and the window reports as a gap.
const MAX_QUEUED: usize = 4096;
/// captureIds remembered for de-duplicating resends after a reconnect.
const MAX_SEEN: usize = 20_000;

/// A capture frame accepted from a socket, not yet committed.
pub struct Ingress {
    pub conn: Conn,
    pub provider_epoch: String,
    pub capture_id: String,
    pub stream: String,
    pub sequence: u64,
    pub action_id: Option<String>,
    pub item: Map<String, Value>,
    pub received_at_ms: u64,
    pub original_sha256: String,
}

/// Committed page sequences of one (session, document, stream).
#[derive(Default, Clone)]
struct Track {
    /// Every sequence 1..=contiguous is committed.
    contiguous: u64,
    /// Committed sequences above `contiguous`.
    extra: BTreeSet<u64>,
    max_seen: u64,
    /// Latest page-reported loss counter (from barriers).
    losses: u64,
    rejected: u64,
}

impl Track {
    fn commit(&mut self, seq: u64) {
        self.max_seen = self.max_seen.max(seq);
        if seq <= self.contiguous {
            return;
        }
        self.extra.insert(seq);
        while self.extra.remove(&(self.contiguous + 1)) {
            self.contiguous += 1;
        }
        // Bound memory for pathological pages: far-ahead sequences beyond a gap.
        while self.extra.len() > 100_000 {
            self.extra.pop_first();
        }
    }

    fn committed(&self, seq: u64) -> bool {
        seq <= self.contiguous || self.extra.contains(&seq)
    }

    /// Whether any sequence in (lo, hi] was not committed.
    fn gap(&self, lo: u64, hi: u64) -> bool {
        if hi <= self.contiguous || hi <= lo {
            return false;
        }
        ((lo.max(self.contiguous) + 1)..=hi).any(|s| !self.committed(s))
    }
}

#[derive(Default, Clone)]
struct Counters {
    accepted: u64,
    rejected: u64,
    last_receipt: Option<Value>,
}

/// Per page document: which connections carried it and where its records start.
#[derive(Default, Clone)]
struct DocumentInfo {
    connections: BTreeSet<String>,
    /// FactStore sequence of the document's first record, per stream.
    first_fact: HashMap<String, u64>,
}

#[derive(Default)]
pub struct Captures {
    queue: Mutex<VecDeque<Ingress>>,
    notify: Notify,
    drain: tokio::sync::Mutex<()>,
    tracks: Mutex<HashMap<(String, String, String), Track>>,
    documents: Mutex<HashMap<(String, String), DocumentInfo>>,
    counters: Mutex<HashMap<String, Counters>>,
    seen: Mutex<(HashMap<String, Value>, VecDeque<String>)>,
    barriers: Mutex<HashMap<String, Value>>,
    /// FactStore key → sequence of its last committed record.
    key_last: Mutex<HashMap<String, u64>>,
}

pub fn capture_key(session_id: &str, stream: &str) -> String {
    format!("{session_id}/{stream}")
}

impl Captures {
    pub fn session_counters(&self, session_id: &str) -> Value {
        let c = lock(&self.counters).get(session_id).cloned().unwrap_or_default();
        json!({"accepted": c.accepted, "rejected": c.rejected, "lastReceipt": c.last_receipt})
    }

    pub fn queued(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Resolves when frames are waiting for a context.
    pub async fn ingress_ready(&self) {
        loop {
            let notified = self.notify.notified();
            if !lock(&self.queue).is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// Note that `conn` carries this document (for connection-change coverage).
    pub fn note_connection(&self, conn: &Conn) {
        lock(&self.documents)
            .entry((conn.session_id().to_string(), conn.runtime_epoch().to_string()))
            .or_default()
            .connections
            .insert(conn.connection_id().to_string());
    }

    /// A capture frame from the socket task. Memory mode commits at once; host mode
    /// queues the frame for the next call context.
    pub fn ingest(&self, facts: &Facts, conn: &Conn, provider_epoch: &str, frame: &Value) {
        let capture: Capture<'_> = match wire::parse_capture(frame) {
            Ok(c) => c,
            Err(why) => {
                let capture_id = frame.get("captureId").cloned().unwrap_or(Value::Null);
                self.count(conn.session_id(), None);
                let _ = conn.send(json!({"type": "captureAck", "captureId": capture_id, "receipt": {"stored": false}, "error": "invalid_web_capture", "message": why}));
                return;
            }
        };
        let item_bytes = serde_json::to_vec(capture.item).unwrap_or_default();
        let ingress = Ingress {
            conn: conn.clone(),
            provider_epoch: provider_epoch.to_string(),
            capture_id: capture.capture_id.to_string(),
            stream: capture.stream.to_string(),
            sequence: capture.sequence,
            action_id: capture.action_id.map(str::to_string),
            item: capture.item.clone(),
            received_at_ms: now_ms(),
            original_sha256: sha256_hex(&item_bytes),
        };
        if facts.mode() == Mode::Memory {
            self.commit(facts, None, ingress);
            return;
        }
        let mut queue = lock(&self.queue);
        if queue.len() >= MAX_QUEUED {
            drop(queue);
            self.refuse(&ingress, "web_capture_backpressure", "the provider's ingress queue is full; no command has run to commit it");
            return;
        }
        queue.push_back(ingress);
        drop(queue);
        self.notify.notify_waiters();
    }

    fn count(&self, session_id: &str, receipt: Option<Value>) {
        let mut counters = lock(&self.counters);
        let c = counters.entry(session_id.to_string()).or_default();
        match receipt {
            Some(r) => {
                c.accepted += 1;
                c.last_receipt = Some(r);
            }
            None => c.rejected += 1,
        }
    }

    fn refuse(&self, ingress: &Ingress, code: &str, message: &str) {
        self.count(ingress.conn.session_id(), None);
        let key = (ingress.conn.session_id().to_string(), ingress.conn.runtime_epoch().to_string(), ingress.stream.clone());
        let mut tracks = lock(&self.tracks);
        let t = tracks.entry(key).or_default();
        t.rejected += 1;
        t.max_seen = t.max_seen.max(ingress.sequence);
        drop(tracks);
        let _ = ingress.conn.send(json!({"type": "captureAck", "captureId": ingress.capture_id, "receipt": {"stored": false}, "error": code, "message": message}));
    }

    /// Commit one frame; returns it when it must wait for a context.
    fn commit(&self, facts: &Facts, ctx: Option<&Context<'_>>, ingress: Ingress) -> Option<Ingress> {
        let session_id = ingress.conn.session_id().to_string();
        let runtime_epoch = ingress.conn.runtime_epoch().to_string();
        if let Some(receipt) = lock(&self.seen).0.get(&ingress.capture_id).cloned() {
            // A resend after reconnect: acknowledge with the original receipt.
            let _ = ingress.conn.send(json!({"type": "captureAck", "captureId": ingress.capture_id, "receipt": receipt}));
            return None;
        }
        let key = capture_key(&session_id, &ingress.stream);
        let record = json!({
            "schemaVersion": FACT_SCHEMA,
            "sessionId": session_id,
            "runtimeEpoch": runtime_epoch,
            "targetId": wire::TARGET_ID,
            "connectionId": ingress.conn.connection_id(),
            "providerEpoch": ingress.provider_epoch,
            "captureId": ingress.capture_id,
            "stream": ingress.stream,
            "sequence": ingress.sequence,
            "actionId": ingress.action_id,
            "association": ingress.item.get("association").cloned().unwrap_or(Value::Null),
            "item": ingress.item,
            "receivedAtMs": ingress.received_at_ms,
            "representation": "json",
            "originalSha256": ingress.original_sha256,
        });
        let stored_bytes = serde_json::to_vec(&record).unwrap_or_default();
        if stored_bytes.len() > MAX_FACT_BYTES {
            self.refuse(&ingress, "web_capture_too_large", "the record exceeds the 128 KiB fact limit");
            return None;
        }
        let receipt = match facts.append(ctx, CAPTURE_STREAM, &key, &record) {
            Ok(r) => r,
            Err(AppendError::NeedsContext) => return Some(ingress),
            Err(AppendError::Failed(e)) => {
                self.refuse(&ingress, &e.error, &e.message);
                return None;
            }
        };
        let public = json!({
            "stored": true,
            "source": facts.store_name(),
            "globalSeq": receipt.sequence,
            "receiptId": receipt.receipt_id,
            "committedAtMs": receipt.committed_at_ms,
            "targetKey": format!("{session_id}/{runtime_epoch}/{}", wire::TARGET_ID),
            "runtimeEpoch": runtime_epoch,
            "captureId": ingress.capture_id,
            "representation": "json",
            "originalSha256": ingress.original_sha256,
            "storedSha256": sha256_hex(&stored_bytes),
        });
        lock(&self.tracks).entry((session_id.clone(), runtime_epoch.clone(), ingress.stream.clone())).or_default().commit(ingress.sequence);
        {
            let mut docs = lock(&self.documents);
            let doc = docs.entry((session_id.clone(), runtime_epoch)).or_default();
            doc.connections.insert(ingress.conn.connection_id().to_string());
            doc.first_fact.entry(ingress.stream.clone()).or_insert(receipt.sequence);
        }
        {
            let mut last = lock(&self.key_last);
            let e = last.entry(key).or_insert(0);
            *e = (*e).max(receipt.sequence);
        }
        {
            let mut seen = lock(&self.seen);
            seen.0.insert(ingress.capture_id.clone(), public.clone());
            seen.1.push_back(ingress.capture_id.clone());
            while seen.1.len() > MAX_SEEN {
                if let Some(old) = seen.1.pop_front() {
                    seen.0.remove(&old);
                }
            }
        }
        self.count(&session_id, Some(public.clone()));
        let _ = ingress.conn.send(json!({"type": "captureAck", "captureId": ingress.capture_id, "receipt": public}));
        None
    }

    /// Commit every queued frame with this call's context, and mirror settled
    /// actions into the FactStore. Serialised so per-stream order is preserved.
    pub async fn pump(&self, facts: &Facts, exec: &ExecTable, ctx: &Context<'_>) {
        facts.probe(ctx);
        let _guard = self.drain.lock().await;
        loop {
            let next = lock(&self.queue).pop_front();
            let Some(ingress) = next else { break };
            if let Some(back) = self.commit(facts, Some(ctx), ingress) {
                lock(&self.queue).push_front(back);
                break;
            }
        }
        for record in exec.take_mirror() {
            match facts.append(Some(ctx), EXECUTION_STREAM, &record.action_id, &record.to_json()) {
                Ok(receipt) => exec.set_fact_sequence(&record.action_id, receipt.sequence),
                Err(AppendError::NeedsContext) => exec.requeue_mirror(&record.action_id),
                // The table file (or memory) still holds the result; the mirror is a copy.
                Err(AppendError::Failed(_)) => {}
            }
        }
    }

    /// The host-side view of a document's streams at this moment (part of a barrier).
    pub fn streams_view(&self, session_id: &str, runtime_epoch: &str) -> Value {
        let tracks = lock(&self.tracks);
        let last = lock(&self.key_last);
        let mut out = Map::new();
        for stream in STREAMS {
            let t = tracks.get(&(session_id.to_string(), runtime_epoch.to_string(), stream.to_string())).cloned().unwrap_or_default();
            out.insert(
                stream.to_string(),
                json!({
                    "committedThrough": t.contiguous,
                    "maxSeen": t.max_seen,
                    "losses": t.losses,
                    "rejected": t.rejected,
                    "factSequence": last.get(&capture_key(session_id, stream)).copied().unwrap_or(0),
                }),
            );
        }
        Value::Object(out)
    }

    pub fn note_losses(&self, session_id: &str, runtime_epoch: &str, stream: &str, losses: u64) {
        let mut tracks = lock(&self.tracks);
        let t = tracks.entry((session_id.to_string(), runtime_epoch.to_string(), stream.to_string())).or_default();
        t.losses = t.losses.max(losses);
    }

    pub fn gap(&self, session_id: &str, runtime_epoch: &str, stream: &str, lo: u64, hi: u64) -> bool {
        lock(&self.tracks).get(&(session_id.to_string(), runtime_epoch.to_string(), stream.to_string())).map(|t| t.gap(lo, hi)).unwrap_or(hi > lo)
    }

    pub fn document_connections(&self, session_id: &str, runtime_epoch: &str) -> usize {
        lock(&self.documents).get(&(session_id.to_string(), runtime_epoch.to_string())).map(|d| d.connections.len()).unwrap_or(0)
    }

    pub fn document_first_fact(&self, session_id: &str, runtime_epoch: &str, stream: &str) -> Option<u64> {
        lock(&self.documents).get(&(session_id.to_string(), runtime_epoch.to_string())).and_then(|d| d.first_fact.get(stream).copied())
    }

    /// Keep a barrier for later lookups (the FactStore holds the durable copy).
    pub fn remember_barrier(&self, token: &str, barrier: &Value) {
        let mut b = lock(&self.barriers);
        if b.len() > 10_000 {
            b.clear();
        }
        b.insert(token.to_string(), barrier.clone());
    }

    pub fn barrier(&self, facts: &Facts, ctx: &Context<'_>, token: &str) -> Option<Value> {
        if let Some(b) = lock(&self.barriers).get(token) {
            return Some(b.clone());
        }
        // Issued by an earlier runtime: the durable copy is in the FactStore.
        let page = facts.read(ctx, BARRIER_STREAM, token, 0, 1).ok()?;
        let barrier = page.records.into_iter().next()?.record;
        self.remember_barrier(token, &barrier);
        Some(barrier)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use aab_plugin_api::loader::{CallState, host_callbacks};
    use tokio::sync::{mpsc, watch};

    use super::*;
    use crate::state::Outgoing;

    /// A host whose FactStore services keep records in a vector.
    fn fake_host(store: Arc<Mutex<Vec<(String, String, Value)>>>) -> aab_plugin_api::abi::HostCallbacksRef {
        host_callbacks(CallState {
            deadline: Instant::now() + Duration::from_secs(10),
            cancelled: Arc::new(AtomicBool::new(false)),
            dispatched: Arc::new(AtomicBool::new(false)),
            on_dispatch: None,
            logger: Box::new(|_, _| {}),
            service: Box::new(move |method, params| {
                let p: Value = serde_json::from_str(params).unwrap();
                let mut s = store.lock().unwrap();
                match method {
                    "facts.append" => {
                        s.push((p["stream"].as_str().unwrap().into(), p["key"].as_str().unwrap_or("").into(), p["record"].clone()));
                        Ok(json!({"sequence": s.len(), "receiptId": format!("r{}", s.len()), "committedAtMs": 1}).to_string())
                    }
                    "facts.read" => {
                        let after = p["afterSequence"].as_u64().unwrap_or(0) as usize;
                        let records: Vec<Value> = s
                            .iter()
                            .enumerate()
                            .filter(|(i, (st, k, _))| i + 1 > after && st == p["stream"].as_str().unwrap() && p.get("key").is_none_or(|want| want == k))
                            .map(|(i, (_, k, r))| json!({"sequence": i + 1, "key": k, "record": r, "committedAtMs": 1}))
                            .collect();
                        Ok(json!({"records": records, "nextSequence": s.len(), "hasMore": false, "gap": null, "expired": false}).to_string())
                    }
                    other => Err(json!({"error": "unsupported_host_service", "message": other}).to_string()),
                }
            }),
        })
    }

    fn frame(capture_id: &str, sequence: u64) -> Value {
        json!({"type": "capture", "captureId": capture_id, "stream": "logs", "sequence": sequence, "actionId": null,
               "item": {"source": "app", "timestampMs": 1, "association": "unattributed", "message": "m"}})
    }

    #[test]
    fn host_mode_commits_queued_frames_with_the_next_context() {
        let store = Arc::new(Mutex::new(Vec::new()));
        let host = fake_host(store.clone());
        let ctx = Context::new(&host);
        let facts = Facts::default();
        facts.probe(&ctx);
        assert_eq!(facts.mode(), Mode::Host);
        let captures = Captures::default();
        let exec = ExecTable::default();
        let (tx, mut rx) = mpsc::channel(16);
        let (_closed_tx, closed_rx) = watch::channel(false);
        let conn = Conn::new("c1".into(), "s1".into(), "e1".into(), json!({}), tx, closed_rx);
        let a = "0123456789abcdef0123456789abcdef";
        let b = "fedcba9876543210fedcba9876543210";
        captures.ingest(&facts, &conn, "p1", &frame(a, 1));
        captures.ingest(&facts, &conn, "p1", &frame(b, 2));
        // No context between calls: the frames wait, unacknowledged.
        assert_eq!(captures.queued(), 2);
        assert!(rx.try_recv().is_err());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(captures.pump(&facts, &exec, &ctx));
        assert_eq!(captures.queued(), 0);
        let mut acks = Vec::new();
        while let Ok(Outgoing::Frame(f)) = rx.try_recv() {
            acks.push(f);
        }
        assert_eq!(acks.len(), 2);
        assert_eq!(acks[0]["receipt"]["source"], json!("host-fact-store"));
        assert_eq!(acks[0]["receipt"]["globalSeq"], json!(1));
        assert_eq!(acks[1]["receipt"]["globalSeq"], json!(2));
        assert_eq!(store.lock().unwrap().iter().filter(|(s, k, _)| s == CAPTURE_STREAM && k == "s1/logs").count(), 2);
        // A resend after reconnect is acknowledged with the original receipt, not stored twice.
        captures.ingest(&facts, &conn, "p1", &frame(a, 1));
        rt.block_on(captures.pump(&facts, &exec, &ctx));
        let Ok(Outgoing::Frame(again)) = rx.try_recv() else { panic!("no ack for the resend") };
        assert_eq!(again["receipt"], acks[0]["receipt"]);
        assert_eq!(store.lock().unwrap().len(), 2);
        // Committed sequences feed the window's gap check.
        assert!(!captures.gap("s1", "e1", "logs", 0, 2));
        assert!(captures.gap("s1", "e1", "logs", 0, 3));
        let page = facts.read(&ctx, CAPTURE_STREAM, "s1/logs", 0, 16).unwrap();
        assert_eq!(page.records.len(), 2);
    }

    #[test]
    fn track_gaps() {
        let mut t = Track::default();
        for s in [1, 2, 3, 5] {
            t.commit(s);
        }
        assert_eq!(t.contiguous, 3);
        assert!(!t.gap(0, 3));
        assert!(t.gap(0, 5));
        assert!(t.gap(3, 4));
        assert!(!t.gap(4, 5));
        t.commit(4);
        assert_eq!(t.contiguous, 5);
        assert!(!t.gap(0, 5));
    }
}
