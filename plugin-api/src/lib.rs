//! aab plugin API: everything a provider plugin and the host share.
//!
//! * [`abi`] — the frozen abi_stable root module and host-callback object. Tiny on
//!   purpose: abi_stable rejects an *older* plugin once a newer host grows these types,
//!   so everything that may evolve travels as JSON instead.
//! * [`check`] — the host's manifest rules ([`Manifest::check`]), shared with tests.
//! * [`codes`] — the error codes of the provider contract, with their meaning.
//! * [`host`] — typed host services (`host.info`, FactStore, data dir).
//! * [`protocol`] — the versioned JSON shapes that cross the ABI (manifest,
//!   invocation, outcome). Schema ids are `aab.plugin-*`.
//! * [`sdk`] — the safe side for plugin authors: the [`sdk::Provider`] trait, the
//!   [`export_provider!`] macro, panic containment and the per-plugin tokio runtime.
//! * `validate` (feature `validate`) — the host's argument validator (same codes and
//!   dotted fields), used by the host's registry and by `test_support`.
//! * `loader` (feature `loader`) — the host's loader: version-symbol preflight with
//!   libloading, then abi_stable's layout check. `test_support` runs a provider
//!   through that same loader.

pub mod abi;
pub mod check;
pub mod codes;
pub mod execution;
pub mod h5;
pub mod host;
pub mod protocol;
pub mod screenshot;
pub mod sdk;

#[cfg(feature = "loader")]
pub mod loader;
#[cfg(feature = "test-support")]
pub mod test_support;
#[cfg(feature = "validate")]
pub mod validate;

#[doc(hidden)]
pub use abi_stable;
#[doc(hidden)]
pub use serde_json;

pub use protocol::{CommandSpec, DomainSpec, Invocation, Manifest, Outcome, ProviderError, Reply};
pub use sdk::{Command, Commands, Context, HostHandle, Provider};
