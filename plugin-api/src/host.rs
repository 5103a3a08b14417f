//! Typed host services for providers: what `host.info` advertises (read once per
//! loaded plugin, on its first call, and cached), the plugin's private data
//! directory, and FactStore append/read with typed replies. Each wraps one generic
//! JSON host service (`Context::host_call`); docs/PLUGIN_AUTHORING.md documents
//! every request and reply.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ProviderError;
use crate::sdk::Context;

/// Services every plugin-API 1.0 host offers; assumed when `host.info` predates its
/// `services` list.
pub const BASELINE_SERVICES: [&str; 5] = ["host.info", "host.echo", "host.time", "facts.append", "facts.read"];

/// The reply of `host.info`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HostInfo {
    #[serde(default)]
    pub host_version: String,
    /// The plugin API version the host implements.
    #[serde(default)]
    pub plugin_api: String,
    #[serde(default)]
    pub runtime_id: String,
    /// The plugin's name as loaded.
    #[serde(default)]
    pub plugin: String,
    /// The plugin's private 0700 directory, or `None` when the host could not
    /// create it (then keep state in memory).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// Host service method names offered; `None` from hosts that predate the list
    /// (they offer [`BASELINE_SERVICES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<String>>,
    /// Optional host behaviour by name (e.g. `invocation-host-options`).
    #[serde(default)]
    pub features: Vec<String>,
}

impl HostInfo {
    /// Whether the host offers the service or feature `name`.
    pub fn supports(&self, name: &str) -> bool {
        let service = match &self.services {
            Some(s) => s.iter().any(|x| x == name),
            None => BASELINE_SERVICES.contains(&name),
        };
        service || self.features.iter().any(|x| x == name)
    }
}

static HOST_INFO: OnceLock<HostInfo> = OnceLock::new();

/// `host.info`, asked once per loaded plugin (each cdylib has its own copy of this
/// static). A host that cannot answer yields an empty [`HostInfo`] (no data dir,
/// baseline services), which is not cached so a later call asks again.
pub(crate) fn host_info(ctx: &Context<'_>) -> HostInfo {
    if let Some(info) = HOST_INFO.get() {
        return info.clone();
    }
    match ctx.host_call("host.info", &json!({})).and_then(|v| serde_json::from_value::<HostInfo>(v).map_err(|e| ProviderError::new(crate::codes::HOST_PROTOCOL_ERROR, e.to_string()))) {
        Ok(info) => HOST_INFO.get_or_init(|| info).clone(),
        Err(_) => HostInfo::default(),
    }
}

/// How durable an appended fact must be before `facts.append` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Committed to the store's memory tier (default): fast, lost on a host crash.
    Memory,
    /// fsync'd before the reply: a receipt that survives a crash.
    Sync,
}

/// The receipt of one `facts.append`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FactReceipt {
    pub sequence: u64,
    pub receipt_id: String,
    pub committed_at_ms: u64,
}

/// One record of a `facts.read` page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FactRecord {
    pub sequence: u64,
    pub key: String,
    pub record: Value,
    pub committed_at_ms: u64,
}

/// Sequences missing between two retained records (expired or never written).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FactGap {
    pub from: u64,
    pub to: u64,
}

/// One `facts.read` page.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FactPage {
    pub records: Vec<FactRecord>,
    /// Pass as `after` to read the next page.
    pub next_sequence: u64,
    pub has_more: bool,
    #[serde(default)]
    pub gap: Option<FactGap>,
    #[serde(default)]
    pub expired: bool,
}

/// The host's FactStore as seen by one plugin: records under `stream`/`key`. From a
/// call ([`Context::facts`]) or between calls ([`crate::HostHandle::facts`]).
pub struct Facts<'c, 'a> {
    via: Via<'c, 'a>,
}

/// Where a [`Facts`] sends its host calls.
enum Via<'c, 'a> {
    Call(&'c Context<'a>),
    Detached(&'c crate::sdk::HostHandle),
}

impl<'c, 'a> Facts<'c, 'a> {
    pub(crate) fn new(ctx: &'c Context<'a>) -> Self {
        Facts { via: Via::Call(ctx) }
    }

    pub(crate) fn detached(handle: &'c crate::sdk::HostHandle) -> Self {
        Facts { via: Via::Detached(handle) }
    }

    fn call(&self, method: &str, params: &Value) -> Result<Value, ProviderError> {
        match self.via {
            Via::Call(ctx) => ctx.host_call(method, params),
            Via::Detached(handle) => handle.host_call(method, params),
        }
    }

    /// Append one JSON object record; the receipt names its sequence.
    pub fn append(&self, stream: &str, key: &str, record: &Value, durability: Durability) -> Result<FactReceipt, ProviderError> {
        let reply = self.call("facts.append", &json!({"stream": stream, "key": key, "record": record, "durability": durability}))?;
        typed(reply)
    }

    /// Read up to `limit` (1..=1000) records after sequence `after`.
    pub fn read(&self, stream: &str, key: &str, after: u64, limit: usize) -> Result<FactPage, ProviderError> {
        let reply = self.call("facts.read", &json!({"stream": stream, "key": key, "afterSequence": after, "limit": limit}))?;
        typed(reply)
    }
}

fn typed<T: serde::de::DeserializeOwned>(reply: Value) -> Result<T, ProviderError> {
    serde_json::from_value(reply).map_err(|e| ProviderError::new(crate::codes::HOST_PROTOCOL_ERROR, format!("unexpected host reply: {e}")))
}

#[cfg(all(test, feature = "loader"))]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::loader::{CallState, host_callbacks};

    #[test]
    fn facts_work_from_a_call_and_from_a_detached_handle() {
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let log = seen.clone();
        let host = host_callbacks(CallState {
            deadline: Instant::now() + Duration::from_secs(10),
            cancelled: Arc::new(AtomicBool::new(false)),
            dispatched: Arc::new(AtomicBool::new(false)),
            on_dispatch: None,
            logger: Box::new(|_, _| {}),
            service: Box::new(move |method, params| {
                let params: Value = serde_json::from_str(params).unwrap();
                log.lock().unwrap().push(json!({"method": method, "params": params}));
                let n = log.lock().unwrap().len();
                match method {
                    "facts.append" => Ok(json!({"sequence": n, "receiptId": format!("r{n}"), "committedAtMs": 7}).to_string()),
                    "facts.read" => Ok(json!({"records": [{"sequence": 1, "key": "k", "record": {"a": 1}, "committedAtMs": 7}], "nextSequence": 1, "hasMore": false, "gap": {"from": 0, "to": 0}, "expired": false}).to_string()),
                    _ => Err(json!({"error": crate::codes::UNSUPPORTED_HOST_SERVICE, "message": method}).to_string()),
                }
            }),
        });
        let ctx = Context::new(&host);
        let receipt = ctx.facts().append("s", "k", &json!({"a": 1}), Durability::Sync).unwrap();
        assert_eq!((receipt.sequence, receipt.receipt_id.as_str()), (1, "r1"));
        let handle = ctx.detach();
        let receipt = handle.facts().append("s", "k", &json!({"a": 2}), Durability::Memory).unwrap();
        assert_eq!(receipt.sequence, 2);
        let page = handle.facts().read("s", "k", 0, 10).unwrap();
        assert_eq!((page.records.len(), page.gap.clone()), (1, Some(FactGap { from: 0, to: 0 })));
        let sent = seen.lock().unwrap().clone();
        assert_eq!(sent[0]["params"], json!({"stream": "s", "key": "k", "record": {"a": 1}, "durability": "sync"}));
        assert_eq!(sent[1]["params"]["durability"], json!("memory"));
        assert_eq!(sent[2], json!({"method": "facts.read", "params": {"stream": "s", "key": "k", "afterSequence": 0, "limit": 10}}));
    }
}
