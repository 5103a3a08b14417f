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

/// The host's FactStore as seen by one plugin: records under `stream`/`key`.
pub struct Facts<'c, 'a> {
    ctx: &'c Context<'a>,
}

impl<'c, 'a> Facts<'c, 'a> {
    pub(crate) fn new(ctx: &'c Context<'a>) -> Self {
        Facts { ctx }
    }

    /// Append one JSON object record; the receipt names its sequence.
    pub fn append(&self, stream: &str, key: &str, record: &Value, durability: Durability) -> Result<FactReceipt, ProviderError> {
        let reply = self.ctx.host_call("facts.append", &json!({"stream": stream, "key": key, "record": record, "durability": durability}))?;
        typed(reply)
    }

    /// Read up to `limit` (1..=1000) records after sequence `after`.
    pub fn read(&self, stream: &str, key: &str, after: u64, limit: usize) -> Result<FactPage, ProviderError> {
        let reply = self.ctx.host_call("facts.read", &json!({"stream": stream, "key": key, "afterSequence": after, "limit": limit}))?;
        typed(reply)
    }
}

fn typed<T: serde::de::DeserializeOwned>(reply: Value) -> Result<T, ProviderError> {
    serde_json::from_value(reply).map_err(|e| ProviderError::new(crate::codes::HOST_PROTOCOL_ERROR, format!("unexpected host reply: {e}")))
}
