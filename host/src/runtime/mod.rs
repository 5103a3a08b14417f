//! The shared local runtime: one long-lived daemon per canonical FactStore
//! directory. It owns the OS-held owner lock, the private endpoint record, the
//! authenticated loopback RPC server, the loaded plugins and all execution state.
//!
//! * [`endpoint`] — the endpoint record (`aab.runtime/v1`, 0600, atomic write).
//! * [`lock`] — owner election through an exclusive SQLite transaction.
//! * [`protocol`] — RPC frames (newline-delimited JSON over 127.0.0.1 TCP).
//! * [`identity`] — code and configuration fingerprints.
//! * [`daemon`] — the daemon itself (`aab runtime-daemon`).

pub mod daemon;
pub mod endpoint;
pub mod identity;
pub mod lock;
pub mod protocol;

pub use daemon::run_daemon;
