//! The provider's view of the host FactStore (the SDK's typed `facts.append` /
//! `facts.read`). When the host does not offer them (`host.info` `services`, asked
//! through `ctx.host().supports`) the provider keeps records in a bounded in-memory
//! store with the same shape and says so: every receipt, read and coverage names the store it came from, and
//! memory-backed coverage is reported `unavailable`, never `complete`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Context, HostHandle, ProviderError};
use serde_json::{Value, json};

use crate::ids::{now_ms, uuid_v4};

pub const HOST_STORE: &str = "host-fact-store";
pub const MEMORY_STORE: &str = "provider-memory";

/// Records kept per key by the memory store; older ones fall out (reads then
/// report a `gap`).
const MEMORY_PER_KEY: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Not probed yet (no call has run).
    Unknown,
    Host,
    Memory,
}

/// What `facts.append` returned.
#[derive(Clone, Debug, PartialEq)]
pub struct Receipt {
    pub sequence: u64,
    pub receipt_id: String,
    pub committed_at_ms: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub sequence: u64,
    pub key: String,
    pub record: Value,
    pub committed_at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    pub records: Vec<Stored>,
    pub next_sequence: u64,
    pub has_more: bool,
    pub gap: bool,
}

#[derive(Default)]
struct Memory {
    next: u64,
    /// (stream, key) → records in sequence order.
    keys: HashMap<(String, String), VecDeque<Stored>>,
    /// (stream, key) → records evicted so far (a read from before them has a gap).
    evicted_through: HashMap<(String, String), u64>,
}

pub struct Facts {
    mode: Mutex<Mode>,
    /// Host services kept from the first call, so capture records are committed the
    /// moment they arrive rather than at the next command.
    detached: Mutex<Option<HostHandle>>,
    memory: Mutex<Memory>,
    /// Why the host store is not used (for status replies).
    reason: Mutex<Option<String>>,
}

/// Outcome of an append that could not run now.
#[derive(Debug)]
pub enum AppendError {
    /// Host mode, but no call context: retry during the next call.
    NeedsContext,
    Failed(ProviderError),
}

impl Default for Facts {
    fn default() -> Self {
        Facts { mode: Mutex::new(Mode::Unknown), detached: Mutex::new(None), memory: Mutex::new(Memory::default()), reason: Mutex::new(None) }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Facts {
    pub fn mode(&self) -> Mode {
        *lock(&self.mode)
    }

    pub fn store_name(&self) -> &'static str {
        if self.mode() == Mode::Host { HOST_STORE } else { MEMORY_STORE }
    }

    pub fn status(&self) -> Value {
        json!({
            "store": self.store_name(),
            "mode": match self.mode() { Mode::Host => "host", Mode::Memory => "memory", Mode::Unknown => "unknown" },
            "reason": lock(&self.reason).clone(),
        })
    }

    /// Decide once per process whether the host offers the FactStore services. A
    /// host gains services only with a new runtime (new process), so the answer
    /// holds for this plugin's life and the two stores are never mixed.
    pub fn probe(&self, ctx: &Context<'_>) {
        if self.mode() != Mode::Unknown {
            return;
        }
        // A store that exists but fails (e.g. a transient error) is still the host's:
        // only a host that does not offer the services means memory.
        let host = ctx.host();
        let missing: Vec<&str> = ["facts.append", "facts.read"].into_iter().filter(|s| !host.supports(s)).collect();
        let mode = if missing.is_empty() {
            Mode::Host
        } else {
            *lock(&self.reason) = Some(format!("the host does not offer {} (host.info services)", missing.join(" and ")));
            Mode::Memory
        };
        if mode == Mode::Host {
            *lock(&self.detached) = Some(ctx.detach());
        }
        *lock(&self.mode) = mode;
    }

    fn host_append(&self, ctx: Option<&Context<'_>>, stream: &str, key: &str, record: &Value, durability: Durability) -> Result<Receipt, AppendError> {
        let receipt = match (ctx, lock(&self.detached).as_ref()) {
            (Some(ctx), _) => ctx.facts().append(stream, key, record, durability),
            (None, Some(handle)) => handle.facts().append(stream, key, record, durability),
            (None, None) => return Err(AppendError::NeedsContext),
        };
        let r = receipt.map_err(AppendError::Failed)?;
        Ok(Receipt { sequence: r.sequence, receipt_id: r.receipt_id, committed_at_ms: r.committed_at_ms })
    }

    /// Append one record, fsync'd by the host store before it answers. Memory mode
    /// needs no context; host mode does.
    pub fn append(&self, ctx: Option<&Context<'_>>, stream: &str, key: &str, record: &Value) -> Result<Receipt, AppendError> {
        self.append_with(ctx, stream, key, record, Durability::Sync)
    }

    /// [`Facts::append`] with a chosen durability (event logs that may lose their
    /// tail in a crash use `Memory`).
    pub fn append_with(&self, ctx: Option<&Context<'_>>, stream: &str, key: &str, record: &Value, durability: Durability) -> Result<Receipt, AppendError> {
        match self.mode() {
            Mode::Host => self.host_append(ctx, stream, key, record, durability),
            Mode::Unknown if ctx.is_none() => Err(AppendError::NeedsContext),
            Mode::Unknown => {
                if let Some(ctx) = ctx {
                    self.probe(ctx);
                }
                self.append_with(ctx, stream, key, record, durability)
            }
            Mode::Memory => Ok(self.memory_append(stream, key, record)),
        }
    }

    fn memory_append(&self, stream: &str, key: &str, record: &Value) -> Receipt {
        let mut m = lock(&self.memory);
        m.next += 1;
        let sequence = m.next;
        let committed_at_ms = now_ms();
        let id = (stream.to_string(), key.to_string());
        let list = m.keys.entry(id.clone()).or_default();
        list.push_back(Stored { sequence, key: key.to_string(), record: record.clone(), committed_at_ms });
        if list.len() > MEMORY_PER_KEY
            && let Some(old) = list.pop_front()
        {
            m.evicted_through.insert(id, old.sequence);
        }
        Receipt { sequence, receipt_id: format!("mem-{}", uuid_v4()), committed_at_ms }
    }

    /// Records of `(stream, key)` after `after`, at most `limit`.
    pub fn read(&self, ctx: &Context<'_>, stream: &str, key: &str, after: u64, limit: usize) -> Result<Page, ProviderError> {
        self.probe(ctx);
        if self.mode() == Mode::Host {
            let page = ctx.facts().read(stream, key, after, limit)?;
            return Ok(Page {
                records: page.records.into_iter().map(|r| Stored { sequence: r.sequence, key: r.key, record: r.record, committed_at_ms: r.committed_at_ms }).collect(),
                next_sequence: page.next_sequence,
                has_more: page.has_more,
                // A gap (`{from, to}`) or expired records: the page is not complete.
                gap: page.gap.is_some() || page.expired,
            });
        }
        let m = lock(&self.memory);
        let id = (stream.to_string(), key.to_string());
        let gap = m.evicted_through.get(&id).is_some_and(|through| *through > after);
        let Some(list) = m.keys.get(&id) else { return Ok(Page { next_sequence: after, gap, ..Page::default() }) };
        let mut records = Vec::new();
        let mut has_more = false;
        for r in list.iter().filter(|r| r.sequence > after) {
            if records.len() == limit {
                has_more = true;
                break;
            }
            records.push(r.clone());
        }
        let next_sequence = records.last().map(|r| r.sequence).unwrap_or(after);
        Ok(Page { records, next_sequence, has_more, gap })
    }

    /// Force a mode (unit tests and the in-memory default before any call).
    #[cfg(test)]
    pub fn set_mode(&self, mode: Mode) {
        *lock(&self.mode) = mode;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_store_pages_in_order() {
        let f = Facts::default();
        f.set_mode(Mode::Memory);
        for i in 0..5 {
            f.append(None, "s", "k", &json!({"i": i})).unwrap();
        }
        f.append(None, "s", "other", &json!({})).unwrap();
        let m = lock(&f.memory);
        let list = m.keys.get(&("s".to_string(), "k".to_string())).unwrap();
        assert_eq!(list.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn host_mode_without_context_defers() {
        let f = Facts::default();
        f.set_mode(Mode::Host);
        assert!(matches!(f.append(None, "s", "k", &json!({})), Err(AppendError::NeedsContext)));
    }
}
