//! The Android provider's adb transport: it speaks the adb server's port protocol
//! directly (one TCP connection per host or device service, never an `adb` process
//! per command) and runs the `adb` binary only to start a server when none listens.
//!
//! Layout: [`wire`] (framing, statuses, bounded reads), [`server`] (server address,
//! the `adb` binary, start-server, host services: version, devices, forwards),
//! [`device`] (device services over `host:transport`: shell v2, exec, sync),
//! [`select`] (choosing the device by `serial`, with the contract's errors).
//!
//! Every operation takes a [`Deadline`]; a read or write that would pass it fails
//! with `adb_timeout`. Cancellation is drop-based: a command races the operation
//! against the host's cancellation and dropping the future closes its sockets and
//! kills a `start-server` child.

pub mod device;
#[cfg(test)]
mod real_tests;
pub mod select;
pub mod server;
pub mod wire;

use std::time::{Duration, Instant};

pub use aab_plugin_api::ProviderError;

pub type Result<T> = std::result::Result<T, ProviderError>;

/// Codes of the adb transport. `adb_timeout`, `device_not_found` and
/// `serial_required` are the contract's; the others name the adb states and
/// failures the contract leaves to the provider.
pub mod codes {
    /// An adb server operation did not finish before its deadline.
    pub const ADB_TIMEOUT: &str = "adb_timeout";
    /// No adb server listens and none could be started (the `adb` binary is missing,
    /// not executable, or its `start-server` failed). Never dispatched.
    pub const ADB_UNAVAILABLE: &str = "adb_unavailable";
    /// The adb server refused a request (`FAIL`) or broke its protocol.
    pub const ADB_COMMAND_FAILED: &str = "adb_command_failed";
    /// No device, or none with the requested serial.
    pub const DEVICE_NOT_FOUND: &str = aab_plugin_api::codes::DEVICE_NOT_FOUND;
    /// Several devices are connected and the call named none.
    pub const SERIAL_REQUIRED: &str = "serial_required";
    /// The device is known to adb but not online (`offline`, `recovery`, …).
    pub const DEVICE_OFFLINE: &str = "device_offline";
    /// The device has not accepted this host's adb key.
    pub const DEVICE_UNAUTHORIZED: &str = "device_unauthorized";
}

/// The moment an operation must be finished by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Instant);

impl Deadline {
    pub fn at(instant: Instant) -> Self {
        Deadline(instant)
    }

    pub fn after(budget: Duration) -> Self {
        Deadline(Instant::now() + budget)
    }

    /// The earlier of this deadline and `now + budget` (a per-step cap inside the
    /// command's deadline; nested steps never extend it).
    pub fn capped(self, budget: Duration) -> Self {
        Deadline(self.0.min(Instant::now() + budget))
    }

    pub fn instant(self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.0)
    }

    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

/// Error constructors shared by the transport's modules.
pub mod err {
    use serde_json::json;

    use super::{Deadline, ProviderError, codes};

    pub fn timeout(what: &str, deadline: Deadline) -> ProviderError {
        let _ = deadline;
        ProviderError::new(codes::ADB_TIMEOUT, format!("adb did not answer in time ({what})")).with_details(json!({"operation": what}))
    }

    pub fn connection_lost(what: &str, e: &std::io::Error) -> ProviderError {
        ProviderError::new(codes::ADB_COMMAND_FAILED, format!("the adb server connection failed ({what}): {e}")).with_details(json!({"operation": what, "io": e.to_string()}))
    }

    pub fn command_failed(what: &str, message: impl Into<String>) -> ProviderError {
        let message = message.into();
        ProviderError::new(codes::ADB_COMMAND_FAILED, format!("{what}: {message}")).with_details(json!({"operation": what}))
    }

    /// A `FAIL` reply; `adbMessage` keeps the server's words for callers that map them.
    pub fn adb_fail(what: &str, message: &str) -> ProviderError {
        ProviderError::new(codes::ADB_COMMAND_FAILED, format!("adb refused {what}: {message}")).with_details(json!({"operation": what, "adbMessage": message}))
    }

    /// The server's message of an [`adb_fail`] error.
    pub fn adb_message(e: &ProviderError) -> Option<&str> {
        e.details.as_ref()?.get("adbMessage")?.as_str()
    }
}
