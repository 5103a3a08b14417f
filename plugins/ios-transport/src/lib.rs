//! The iOS providers' shared transport: how aab reaches an iOS device and the two
//! peers on it. Both the `ios` (app SDK) and `wda` (prepared WebDriverAgent)
//! plugins link it, because every connection to either peer starts the same way
//! (select the device with `devicectl`, check its developer tunnel, copy the peer's
//! descriptor out of its data container) and `ios-execution` reconciles actions
//! of both.
//!
//! - [`command`]: the deadline and host cancellation every command of either plugin runs under.
//! - [`devicectl`]: running `xcrun devicectl … --timeout N --json-output F` as a
//!   bounded child process and reading its document; device records and selection.
//! - [`http`]: one bounded HTTP request to a peer, classified by whether the request
//!   can have reached it (a mutation's dispatch depends on that).
//! - [`sdk`]: the app SDK's identity (`aab.ios-runtime/v1`).
//! - [`wda`]: the Runner's identity (`aab.ios-wda/v1`).
//! - [`ids`]: the bundle-id and epoch grammars and query encoding both peers share.
//! - [`schema`]: JSON Schema pieces of both plugins' command specs (bundle id, closed objects, merging).
//! - [`ownership`]: the physical-device key (`ios:<UDID>`) of hook `device-key`.
//!
//! Errors are the plugin SDK's [`ProviderError`] with stable codes ([`codes`]).

use std::time::{Duration, Instant};

pub use aab_plugin_api::ProviderError;

pub mod command;
pub mod devicectl;
pub mod http;
pub mod ids;
pub mod ownership;
pub mod schema;
pub mod sdk;
pub mod wda;

pub use devicectl::{DeviceRecord, Devicectl, require_developer_tunnel, select_device};

/// Stable error codes of the transport.
pub mod codes {
    /// The devicectl program could not be started (not installed, not executable).
    pub const IOS_DEVICECTL_UNAVAILABLE: &str = "ios_devicectl_unavailable";
    /// devicectl ran and reported a failure (its `error` is in the details).
    pub const IOS_DEVICECTL_FAILED: &str = "ios_devicectl_failed";
    /// devicectl did not finish within its `--timeout` or the command deadline.
    pub const IOS_DEVICECTL_TIMEOUT: &str = "ios_devicectl_timeout";
    /// devicectl was started but ended without saying what it did (waiting for it
    /// failed, or it exited unsuccessfully without a `--json-output` document): a
    /// mutation's outcome is unknown.
    pub const IOS_DEVICECTL_INTERRUPTED: &str = "ios_devicectl_interrupted";
    /// devicectl's `--json-output` document is missing, too large or not its shape.
    pub const IOS_DEVICECTL_OUTPUT_INVALID: &str = "ios_devicectl_output_invalid";
    pub const IOS_DEVICE_NOT_FOUND: &str = "ios_device_not_found";
    /// A device id that names more than one device (e.g. a shared name).
    pub const IOS_DEVICE_AMBIGUOUS: &str = "ios_device_ambiguous";
    pub const IOS_TUNNEL_UNAVAILABLE: &str = "ios_tunnel_unavailable";
    pub const IOS_DEVELOPER_MODE_DISABLED: &str = "ios_developer_mode_disabled";
    pub const IOS_DDI_UNAVAILABLE: &str = "ios_ddi_unavailable";
    /// The peer's URL is not one this transport speaks (only `http://`).
    pub const IOS_URL_UNSUPPORTED: &str = "ios_url_unsupported";
}

/// A command's remaining budget: one instant every step of the command shares, so
/// nested steps can shorten but never extend it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Instant);

impl Deadline {
    pub fn at(instant: Instant) -> Self {
        Deadline(instant)
    }

    pub fn after(budget: Duration) -> Self {
        Deadline(Instant::now() + budget)
    }

    /// The earlier of this deadline and `now + budget`.
    pub fn capped(self, budget: Duration) -> Self {
        Deadline(self.0.min(Instant::now() + budget))
    }

    pub fn instant(self) -> Instant {
        self.0
    }

    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    pub fn is_past(self) -> bool {
        Instant::now() >= self.0
    }
}

/// `http://host:port` with an IPv6 literal bracketed (a tunnel address usually is one).
pub fn base_url(host: &str, port: u16) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.contains(':') { format!("http://[{bare}]:{port}") } else { format!("http://{bare}:{port}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_brackets_ipv6_once() {
        assert_eq!(base_url("127.0.0.1", 8100), "http://127.0.0.1:8100");
        assert_eq!(base_url("fd7a:115c::1", 62078), "http://[fd7a:115c::1]:62078");
        assert_eq!(base_url("[::1]", 1), "http://[::1]:1");
        assert_eq!(base_url("phone.local", 80), "http://phone.local:80");
    }

    #[test]
    fn deadline_caps_never_extend() {
        let d = Deadline::after(Duration::from_millis(50));
        assert!(d.capped(Duration::from_secs(60)).instant() <= d.instant());
        assert!(d.capped(Duration::from_millis(1)).instant() < d.instant());
        assert!(!d.is_past());
        assert!(Deadline::at(Instant::now() - Duration::from_millis(1)).is_past());
    }
}
