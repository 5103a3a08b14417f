//! The provider's view of the host FactStore (`facts.append` / `facts.read` host
//! services). When the host does not offer them yet (`unsupported_host_service`)
//! the provider keeps records in a bounded in-memory store with the same shape and
//! says so: every receipt, read and coverage names the store it came from, and
//! memory-backed coverage is reported `unavailable`, never `complete`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

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
        let mode = match ctx.host_call("facts.read", &json!({"stream": "web-capture", "limit": 1})) {
            Ok(_) => Mode::Host,
            Err(e) if e.error == "unsupported_host_service" => {
                *lock(&self.reason) = Some(format!("the host answered `{}` to facts.read: {}", e.error, e.message));
                Mode::Memory
            }
            // Another failure (e.g. a transient store error): the service exists.
            Err(_) => Mode::Host,
        };
        if mode == Mode::Host {
            *lock(&self.detached) = Some(ctx.detach());
        }
        *lock(&self.mode) = mode;
    }

    fn host_append(&self, ctx: Option<&Context<'_>>, params: &Value) -> Result<Value, AppendError> {
        if let Some(ctx) = ctx {
            return ctx.host_call("facts.append", params).map_err(AppendError::Failed);
        }
        match lock(&self.detached).as_ref() {
            Some(handle) => handle.host_call("facts.append", params).map_err(AppendError::Failed),
            None => Err(AppendError::NeedsContext),
        }
    }

    /// Append one record. Memory mode needs no context; host mode does.
    pub fn append(&self, ctx: Option<&Context<'_>>, stream: &str, key: &str, record: &Value) -> Result<Receipt, AppendError> {
        match self.mode() {
            Mode::Host => {
                let params = json!({"stream": stream, "key": key, "record": record, "durability": "sync"});
                let reply = self.host_append(ctx, &params)?;
                let sequence = reply.get("sequence").and_then(Value::as_u64);
                let Some(sequence) = sequence else {
                    return Err(AppendError::Failed(ProviderError::new("host_protocol_error", format!("facts.append returned no sequence: {reply}"))));
                };
                Ok(Receipt {
                    sequence,
                    receipt_id: reply.get("receiptId").and_then(Value::as_str).unwrap_or_default().to_string(),
                    committed_at_ms: reply.get("committedAtMs").and_then(Value::as_u64).unwrap_or_else(now_ms),
                })
            }
            Mode::Unknown if ctx.is_none() => Err(AppendError::NeedsContext),
            Mode::Unknown => {
                if let Some(ctx) = ctx {
                    self.probe(ctx);
                }
                self.append(ctx, stream, key, record)
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
            let params = json!({"stream": stream, "key": key, "afterSequence": after, "limit": limit});
            let reply = ctx.host_call("facts.read", &params)?;
            let records = reply
                .get("records")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|r| {
                            Some(Stored {
                                sequence: r.get("sequence")?.as_u64()?,
                                key: r.get("key").and_then(Value::as_str).unwrap_or(key).to_string(),
                                record: r.get("record")?.clone(),
                                committed_at_ms: r.get("committedAtMs").and_then(Value::as_u64).unwrap_or(0),
                            })
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let next_sequence = reply.get("nextSequence").and_then(Value::as_u64).unwrap_or_else(|| records.last().map(|r| r.sequence).unwrap_or(after));
            return Ok(Page {
                next_sequence,
                has_more: reply.get("hasMore").and_then(Value::as_bool).unwrap_or(false),
                // The host reports a gap as `{from, to}` (or null when there is none).
                gap: reply.get("gap").is_some_and(|g| g.as_bool().unwrap_or(!g.is_null())) || reply.get("expired").and_then(Value::as_bool).unwrap_or(false),
                records,
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
