//! The SDK's capture store of one app (logs, network, state, events), kept
//! across process relaunches like the SDK's segmented disk store: one global
//! sequence, per-process capture ids, `mobileFactId`s, bounded retention with
//! a recorded gap, and the §4.6 query rules (exact parameter names, plain
//! digits, limit 1..1000, string lengths, the three views, opaque page cursors
//! with a fixed upper watermark, coverage, refs).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::util::{b64, now_ms, unb64, uuid_upper};

/// Records kept per app (oldest dropped first; the loss is reported as a gap).
const RETAINED: usize = 5000;
/// One record's serialized bound.
const MAX_RECORD: usize = 64 * 1024;
const ALLOWED: [&str; 9] = ["view", "sinceId", "sinceMs", "limit", "runtimeEpoch", "afterActionId", "factCursor", "mobileFactId", "targetKey"];
const NUMERIC: [&str; 3] = ["sinceId", "sinceMs", "limit"];
pub const STREAMS: [&str; 4] = ["logs", "network", "state", "events"];

struct Rec {
    seq: u64,
    stream: &'static str,
    epoch: String,
    id: u64,
    ts: u64,
    item: Value,
}

pub struct CaptureStore {
    bundle: String,
    generation: String,
    seq: u64,
    ids: HashMap<(String, &'static str), u64>,
    records: Vec<Rec>,
    /// Highest sequence dropped by retention (0 = none).
    dropped_through: u64,
}

fn stream_of(name: &str) -> Option<&'static str> {
    STREAMS.iter().copied().find(|s| *s == name)
}

fn item_type(stream: &str) -> &'static str {
    match stream {
        "logs" => "log",
        "network" => "network",
        "state" => "state",
        _ => "event",
    }
}

pub fn fact_id(epoch: &str, stream: &str, id: u64) -> String {
    format!("{epoch}:{stream}:{id}")
}

fn invalid(detail: String) -> Value {
    json!({ "ok": false, "error": "invalid_argument", "reason": "invalid_argument", "detail": detail, "message": format!("Invalid capture query: {detail}") })
}

impl CaptureStore {
    pub fn new(bundle: &str) -> CaptureStore {
        CaptureStore { bundle: bundle.into(), generation: uuid_upper(), seq: 0, ids: HashMap::new(), records: vec![], dropped_through: 0 }
    }

    pub fn counts(&self, epoch: Option<&str>) -> Value {
        let n = |s: &str| self.records.iter().filter(|r| r.stream == s && epoch.is_none_or(|e| r.epoch == e)).count();
        json!({ "logs": n("logs"), "network": n("network"), "state": n("state"), "events": n("events") })
    }

    /// Appends one record; the append receipt.
    pub fn append(&mut self, stream: &str, epoch: &str, record: Value) -> Value {
        let Some(stream) = stream_of(stream) else { return json!({ "ok": false, "error": "invalid_argument", "detail": "unknown_stream" }) };
        let Value::Object(mut rec) = record else { return json!({ "ok": false, "error": "invalid_argument", "message": "a capture record is a JSON object" }) };
        if Value::Object(rec.clone()).to_string().len() > MAX_RECORD {
            return json!({ "ok": false, "error": "capture_record_too_large", "message": format!("a capture record is at most {MAX_RECORD} bytes") });
        }
        let id = {
            let c = self.ids.entry((epoch.to_string(), stream)).or_default();
            *c += 1;
            *c
        };
        self.seq += 1;
        let ts = rec.get("timestampMs").and_then(Value::as_u64).unwrap_or_else(now_ms);
        let mut item = Map::new();
        item.insert("id".into(), json!(id));
        item.insert("type".into(), json!(item_type(stream)));
        item.insert("source".into(), rec.remove("source").unwrap_or(json!("app")));
        item.insert("timestampMs".into(), json!(ts));
        match stream {
            "logs" => {
                item.insert("level".into(), rec.remove("level").unwrap_or(json!("info")));
                item.insert("tag".into(), rec.remove("tag").unwrap_or(json!("app")));
                item.insert("message".into(), rec.remove("message").unwrap_or(json!("")));
            }
            "state" => {
                let ns = rec.remove("namespace").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "app".into());
                let key = rec.remove("key").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "value".into());
                item.insert("stateKey".into(), json!(format!("{ns}:{key}")));
                item.insert("namespace".into(), json!(ns));
                item.insert("key".into(), json!(key));
                item.insert("value".into(), rec.remove("value").unwrap_or(Value::Null));
            }
            "events" => {
                item.insert("category".into(), rec.remove("category").unwrap_or(json!("app")));
                item.insert("name".into(), rec.remove("name").unwrap_or(json!("event")));
            }
            _ => {}
        }
        for (k, v) in rec {
            item.entry(k).or_insert(v);
        }
        let mfid = fact_id(epoch, stream, id);
        item.insert("mobileFactId".into(), json!(mfid));
        item.insert("runtimeEpoch".into(), json!(epoch));
        self.records.push(Rec { seq: self.seq, stream, epoch: epoch.into(), id, ts, item: Value::Object(item) });
        if self.records.len() > RETAINED {
            let gone = self.records.remove(0);
            self.dropped_through = gone.seq;
        }
        json!({ "ok": true, "accepted": true, "committed": false, "mobileFactId": mfid, "stream": stream, "id": id, "sequence": self.seq, "runtimeEpoch": epoch, "targetKey": self.bundle })
    }

    /// Clears every stream (`/v1/app/clear-data`): a new store generation.
    pub fn clear(&mut self) -> Value {
        let counts = self.counts(None);
        self.records.clear();
        self.dropped_through = 0;
        self.generation = uuid_upper();
        json!({ "cleared": counts, "storeGeneration": self.generation })
    }

    fn cursor(&self, stream: &str, after: u64, upper: u64) -> String {
        b64(json!({ "v": 1, "stream": stream, "after": after, "upper": upper, "generation": self.generation }).to_string().as_bytes())
    }

    fn parse_cursor(&self, stream: &str, text: &str) -> Option<(u64, u64)> {
        let v: Value = serde_json::from_slice(&unb64(text)?).ok()?;
        if v["v"] != 1 || v["stream"] != stream || v["generation"] != self.generation.as_str() {
            return None;
        }
        let (after, upper) = (v["after"].as_u64()?, v["upper"].as_u64()?);
        (after <= upper).then_some((after, upper))
    }

    /// `GET /v1/<stream>` with the raw query pairs.
    pub fn query(&self, stream: &str, current_epoch: &str, params: &[(String, String)]) -> Value {
        let Some(stream) = stream_of(stream) else { return invalid("unknown_stream".into()) };
        let mut q: HashMap<&str, &str> = HashMap::new();
        for (k, v) in params {
            if !ALLOWED.contains(&k.as_str()) {
                return invalid(format!("unknown_parameter: {k}"));
            }
            if q.insert(k.as_str(), v.as_str()).is_some() {
                return invalid(format!("duplicate_parameter: {k}"));
            }
        }
        let mut nums: HashMap<&str, u64> = HashMap::new();
        for k in NUMERIC {
            if let Some(v) = q.get(k) {
                if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return invalid(format!("invalid_number: {k}"));
                }
                nums.insert(k, v.parse().unwrap_or(u64::MAX));
            }
        }
        for k in ["runtimeEpoch", "afterActionId", "factCursor", "mobileFactId", "targetKey"] {
            if let Some(v) = q.get(k)
                && (v.is_empty() || v.len() > 1024)
            {
                return invalid(format!("invalid_string_length: {k}"));
            }
        }
        let limit = nums.get("limit").copied().unwrap_or(200);
        if !(1..=1000).contains(&limit) {
            return invalid("limit_out_of_range".into());
        }
        let view = q.get("view").copied().unwrap_or("legacy-live");
        if !["legacy-live", "decision-window", "connected-history"].contains(&view) {
            return invalid(format!("unknown_view: {view}"));
        }
        let cursor = match q.get("factCursor") {
            Some(c) => match self.parse_cursor(stream, c) {
                Some(c) => Some(c),
                None => return invalid("invalid_fact_cursor".into()),
            },
            None => None,
        };
        let epoch_filter = q.get("runtimeEpoch").copied();
        match view {
            "decision-window" => {
                if epoch_filter.is_some_and(|e| e != current_epoch) {
                    return invalid("runtime_epoch_not_current".into());
                }
                if q.contains_key("afterActionId") && cursor.is_none() && !nums.contains_key("sinceId") && !nums.contains_key("sinceMs") {
                    return invalid("action_filter_requires_bound".into());
                }
            }
            "connected-history" if (nums.contains_key("sinceId") || q.contains_key("mobileFactId")) && epoch_filter.is_none() => {
                return invalid("capture_id_filter_requires_runtime_epoch".into());
            }
            _ => {}
        }
        let scope_epoch: Option<&str> = match view {
            "connected-history" => epoch_filter,
            _ => Some(epoch_filter.unwrap_or(current_epoch)),
        };
        let upper = cursor.map(|c| c.1).unwrap_or(self.seq);
        let after = cursor.map(|c| c.0).unwrap_or(0);
        let target_ok = q.get("targetKey").is_none_or(|t| *t == self.bundle);
        let mut selected: Vec<&Rec> = self
            .records
            .iter()
            .filter(|r| target_ok && r.stream == stream && r.seq > after && r.seq <= upper)
            .filter(|r| scope_epoch.is_none_or(|e| r.epoch == e))
            .filter(|r| nums.get("sinceId").is_none_or(|s| r.id > *s))
            .filter(|r| nums.get("sinceMs").is_none_or(|s| r.ts >= *s))
            .filter(|r| q.get("mobileFactId").is_none_or(|m| r.item["mobileFactId"] == *m))
            .collect();
        if let Some(aid) = q.get("afterActionId") {
            match selected.iter().position(|r| r.item["actionId"] == *aid) {
                Some(i) => {
                    selected.drain(..i);
                }
                None => selected.clear(),
            }
        }
        let has_more = selected.len() > limit as usize;
        selected.truncate(limit as usize);
        let last_seq = selected.last().map(|r| r.seq).unwrap_or(upper);
        let gap = self.dropped_through > after && self.dropped_through > 0;
        let items: Vec<Value> = selected.iter().map(|r| r.item.clone()).collect();
        let refs: Vec<Value> = selected
            .iter()
            .map(|r| json!({ "mobileFactId": r.item["mobileFactId"], "stream": stream, "captureId": r.id, "targetKey": self.bundle, "runtimeEpoch": r.epoch, "capturedAtMs": r.ts }))
            .collect();
        let mut page = json!({
            "ok": true, "type": item_type(stream), "view": view, "items": items, "count": selected.len(),
            "sinceId": nums.get("sinceId"), "sinceMs": nums.get("sinceMs"), "limit": limit, "updatedAtMs": now_ms(),
            "coverage": { "status": if has_more { "partial" } else { "complete" }, "gap": gap, "committed": true },
            "gap": gap, "hasMore": has_more, "refs": refs,
            "nextCursor": if has_more { json!(self.cursor(stream, last_seq, upper)) } else { Value::Null },
            "watermarkCursor": self.cursor(stream, upper, upper),
            "runtimeEpoch": scope_epoch, "targetKey": self.bundle, "storeGeneration": self.generation,
            "throughWatermark": !has_more, "reason": Value::Null,
        });
        if view == "decision-window" {
            page["window"] = json!({ "afterSequence": after, "throughSequence": upper, "afterActionId": q.get("afterActionId") });
        }
        if stream == "state" {
            let mut values = Map::new();
            for r in self.records.iter().filter(|r| r.stream == "state" && scope_epoch.is_none_or(|e| r.epoch == e)) {
                values.insert(r.item["stateKey"].as_str().unwrap_or("app:value").to_string(), r.item["value"].clone());
            }
            page["values"] = Value::Object(values);
        }
        page
    }
}
