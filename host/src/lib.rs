//! aab host: everything between an adapter's typed request and a plugin call.
//!
//! Layers (outer to inner): [`client`] (used by the CLI and MCP adapters: validates
//! the public request, finds or starts the runtime, sends it) → [`runtime`] (daemon:
//! OS lock, endpoint record, authenticated loopback RPC) → [`pipeline`] (dispatch of
//! one validated command to a built-in or a plugin, with deadline and cancellation)
//! → plugins ([`plugins`]: discovery, trust, loading). [`registry`] is the single
//! source of commands, schemas and validation; [`reply`] assembles every public reply.
//! See docs/ARCHITECTURE.md for the invariants.

pub mod admission;
pub mod builtins;
pub mod client;
pub mod config;
pub mod digest;
pub mod engines;
pub mod error;
pub mod executors;
pub mod facts;
pub mod feedback;
pub mod fsread;
pub mod ids;
pub mod ownership;
pub mod pipeline;
pub mod plugins;
pub mod registry;
pub mod reply;
pub mod runtime;

pub use error::{CommandError, CommandResult};

/// Version of this host (the `aab` package version).
pub const HOST_VERSION: &str = env!("CARGO_PKG_VERSION");
