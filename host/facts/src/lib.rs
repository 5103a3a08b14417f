//! aab-facts: the host's durable memory.
//!
//! - [`FactStore`]: one SQLite store per directory, single writer (OS lock),
//!   global sequence, per-stream retention ([`Profile`], [`Stream`]), honest
//!   paged reads ([`Page`] with `gap`/`expired`).
//! - Execution evidence (`aab.execution-evidence/v1`):
//!   [`FactStore::append_evidence`], [`FactStore::read_evidence`],
//!   [`FactStore::get_evidence`].
//! - [`redaction`]: write-side credential removal applied to everything stored.
//! - [`canonical`]: RFC 8785 canonical JSON and sha256 helpers.
//! - [`archive`]: evidence export and offline verification.
//! - [`report`]: an archive rendered as one self-contained HTML report.
//! - [`recording`]: recorded payload files bound by `attachment` evidence.
//! - [`response`]: response snapshots (`control.source.ref`, `response read`).
//! - [`history`]: ordinary command history (`aab.command-history/v1`).
//!
//! The crate is synchronous; callers on an async runtime run it on a blocking
//! thread. A `FactStore` is `Send + Sync`.
//!
//! # Integration (runtime daemon)
//!
//! - At start: `FactStore::open(&facts_dir, Profile::from_env()?)` once, after
//!   the runtime owner lock is held; `fact_store_writer_busy` means another
//!   process writes this directory. Keep the store for the daemon's life; drop
//!   it on shutdown (a clean close checkpoints and keeps numbering dense).
//! - Offline commands (`evidence verify`, status without a runtime) use
//!   [`archive::verify`] (no store at all) or [`FactStore::open_read_only`].
//! - Durability: evidence and `action` history with [`Durability::Sync`],
//!   capture streams with [`Durability::Memory`] ([`Stream::default_durability`]).
//! - Every [`FactError`] carries a stable `code` for the contract envelope;
//!   `fact_store_corrupt` / `fact_store_unavailable` must surface as errors,
//!   never as empty results.

pub mod archive;
pub mod canonical;
mod error;
pub mod evidence;
mod fsutil;
pub mod history;
pub mod profile;
pub mod recording;
pub mod redaction;
pub mod report;
pub mod response;
mod store;

pub use error::FactError;
pub use evidence::{EvidenceItem, EvidencePage, EvidenceReceipt, Namespace};
pub use profile::{Durability, PROFILE_ENV, Profile, Quota, Stream};
pub use redaction::Representation;
pub use store::{Cursor, FactRecord, FactStore, Gap, MAX_PAGE, Page, Receipt, StoreStatus, StreamStatus};
