//! Size profiles and the fixed set of streams (partitions) with their retention
//! quotas. Quotas are per stream so a chatty capture stream can never evict
//! execution evidence.
//!
//! Base quotas (profile `small`); `standard` multiplies bytes and records by 4,
//! `large` by 16:
//!
//! | stream              | bytes  | records | durability advice |
//! |---------------------|--------|---------|-------------------|
//! | `action`            | 4 MiB  | 20 000  | sync              |
//! | `ui`                | 4 MiB  | 5 000   | memory            |
//! | `network`           | 4 MiB  | 10 000  | memory            |
//! | `app-log`           | 2 MiB  | 20 000  | memory            |
//! | `device-log`        | 2 MiB  | 20 000  | memory            |
//! | `state-event`       | 2 MiB  | 10 000  | memory            |
//! | `note`              | 1 MiB  | 5 000   | memory            |
//! | `capture`           | 8 MiB  | 20 000  | memory            |
//! | `evidence.intent`   | 32 MiB | 50 000  | sync              |
//! | `evidence.script`   | 32 MiB | 50 000  | sync              |
//! | `evidence.response` | 48 MiB | 5 000   | sync              |
//!
//! `capture` holds provider-defined streams (e.g. the Web provider's
//! `web-capture`, `web-dom`): the host's `facts.*` services key them as
//! `<provider stream>/<key>`, so the host never needs to know their names.
//!
//! Totals: small ≈ 139 MiB, standard ≈ 556 MiB, large ≈ 2.2 GiB (plus SQLite
//! page overhead). A record counts its stored JSON plus its key. The largest
//! single record a stream accepts is a quarter of its byte quota, capped at
//! 8 MiB, except `evidence.response`, which takes one response snapshot
//! (⌈8 MiB/3⌉·4 + 64 KiB of base64 and envelope).

use crate::error::FactError;

/// The environment variable that selects the profile.
pub const PROFILE_ENV: &str = "AI_APP_BRIDGE_FACT_CACHE_PROFILE";

const MIB: u64 = 1024 * 1024;
/// Largest evidence or fact record (the contract's 8 MiB).
pub const MAX_RECORD_BYTES: u64 = 8 * MIB;
/// Largest response-evidence record: an 8 MiB snapshot in base64 plus envelope.
pub const MAX_RESPONSE_RECORD_BYTES: u64 = (8 * MIB).div_ceil(3) * 4 + 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Small,
    Standard,
    Large,
}

impl Profile {
    /// `small | standard | large`; anything else is `invalid_fact_store_profile`.
    pub fn parse(value: &str) -> Result<Profile, FactError> {
        match value {
            "small" => Ok(Profile::Small),
            "standard" => Ok(Profile::Standard),
            "large" => Ok(Profile::Large),
            other => Err(FactError::new("invalid_fact_store_profile", format!("{PROFILE_ENV} must be small, standard or large, got `{other}`"))
                .with_details(serde_json::json!({ "field": PROFILE_ENV, "value": other }))),
        }
    }

    /// The profile named by [`PROFILE_ENV`]; unset or empty means `standard`.
    pub fn from_env() -> Result<Profile, FactError> {
        match std::env::var(PROFILE_ENV) {
            Ok(v) if !v.is_empty() => Profile::parse(&v),
            Ok(_) | Err(std::env::VarError::NotPresent) => Ok(Profile::Standard),
            Err(std::env::VarError::NotUnicode(_)) => Profile::parse("<not unicode>"),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Small => "small",
            Profile::Standard => "standard",
            Profile::Large => "large",
        }
    }

    fn multiplier(self) -> u64 {
        match self {
            Profile::Small => 1,
            Profile::Standard => 4,
            Profile::Large => 16,
        }
    }

    /// The retention quota of `stream` under this profile.
    pub fn quota(self, stream: Stream) -> Quota {
        let (mib, records) = match stream {
            Stream::Action => (4, 20_000),
            Stream::Ui => (4, 5_000),
            Stream::Network => (4, 10_000),
            Stream::AppLog => (2, 20_000),
            Stream::DeviceLog => (2, 20_000),
            Stream::StateEvent => (2, 10_000),
            Stream::Note => (1, 5_000),
            Stream::Capture => (8, 20_000),
            Stream::EvidenceIntent | Stream::EvidenceScript => (32, 50_000),
            Stream::EvidenceResponse => (48, 5_000),
        };
        let max_bytes = mib * MIB * self.multiplier();
        let max_record_bytes = match stream {
            Stream::EvidenceResponse => MAX_RESPONSE_RECORD_BYTES,
            _ => (max_bytes / 4).min(MAX_RECORD_BYTES),
        };
        Quota { max_bytes, max_records: records * self.multiplier(), max_record_bytes }
    }
}

/// Retention limits of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Oldest records are evicted once the stream holds more bytes than this.
    pub max_bytes: u64,
    /// … or more records than this.
    pub max_records: u64,
    /// A single larger record is refused (`payload_too_large`).
    pub max_record_bytes: u64,
}

/// How durable an append must be when it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// On disk (WAL fsynced) before `append` returns.
    Sync,
    /// Committed and visible, survives a process crash, may be lost on power
    /// loss; never reordered relative to other appends.
    Memory,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Memory => "memory",
        }
    }
}

/// A stream (partition). Evidence streams are written only through
/// `append_evidence`, which validates, redacts and checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    Action,
    Ui,
    Network,
    AppLog,
    DeviceLog,
    StateEvent,
    Note,
    Capture,
    EvidenceIntent,
    EvidenceScript,
    EvidenceResponse,
}

impl Stream {
    pub const ALL: [Stream; 11] = [
        Stream::Action,
        Stream::Ui,
        Stream::Network,
        Stream::AppLog,
        Stream::DeviceLog,
        Stream::StateEvent,
        Stream::Note,
        Stream::Capture,
        Stream::EvidenceIntent,
        Stream::EvidenceScript,
        Stream::EvidenceResponse,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Action => "action",
            Stream::Ui => "ui",
            Stream::Network => "network",
            Stream::AppLog => "app-log",
            Stream::DeviceLog => "device-log",
            Stream::StateEvent => "state-event",
            Stream::Note => "note",
            Stream::Capture => "capture",
            Stream::EvidenceIntent => "evidence.intent",
            Stream::EvidenceScript => "evidence.script",
            Stream::EvidenceResponse => "evidence.response",
        }
    }

    /// The stream named `name`, or `unknown_fact_stream`.
    pub fn parse(name: &str) -> Result<Stream, FactError> {
        Stream::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| FactError::new("unknown_fact_stream", format!("unknown fact stream `{name}`")).with_details(serde_json::json!({ "stream": name })))
    }

    pub fn is_evidence(self) -> bool {
        matches!(self, Stream::EvidenceIntent | Stream::EvidenceScript | Stream::EvidenceResponse)
    }

    /// The contract's default: `action` and evidence writes are sync, capture
    /// streams are memory.
    pub fn default_durability(self) -> Durability {
        if self == Stream::Action || self.is_evidence() { Durability::Sync } else { Durability::Memory }
    }
}

impl std::fmt::Display for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_holds_at_least_four_of_its_largest_records() {
        for p in [Profile::Small, Profile::Standard, Profile::Large] {
            for s in Stream::ALL {
                let q = p.quota(s);
                assert!(q.max_bytes >= 4 * q.max_record_bytes, "{p:?} {s}");
                assert_eq!(Stream::parse(s.as_str()).unwrap(), s);
            }
            assert!(p.quota(Stream::EvidenceScript).max_bytes >= 8 * p.quota(Stream::Ui).max_bytes);
        }
        assert_eq!(Profile::parse("huge").unwrap_err().code, "invalid_fact_store_profile");
    }
}
