//! The prepared WebDriverAgent Runner as both iOS providers reach it (protocols §5):
//! what the `wda` plugin's commands and the `ios` plugin's `ios-execution
//! kind:"wda"` share, because either may have to settle a WDA action the other
//! started.
//!
//! - [`descriptor`]: the Runner's `aab.ios-wda/v1` descriptor, copied with devicectl
//!   from `Documents/ai_app_bridge_wda.json` of the Runner container, and parsed.
//! - [`identity`]: the `X-AAB-WDA-*` request headers and the `wdaBinding` check every
//!   response must pass before its body is believed.
//! - [`connection`]: [`connect`] (device, tunnel, descriptor, URL) and the requests of
//!   a [`Connection`]: reads, the `/aab/status` preflight, the managed action POST,
//!   the durable result lookup and cancel.
//! - [`execution`]: the `aab.wda-execution/v1` shapes: the action body, the
//!   classification of an action reply, result pages, and [`execution::settle`]
//!   (reconcile from the Runner's durable `aab.wda-completion/v1` only).
//! - [`record`]: the host-side action record written before every dispatch mark, so
//!   whichever plugin reconciles knows which device, Runner and epoch to ask.

pub mod connection;
pub mod descriptor;
pub mod execution;
pub mod identity;
pub mod record;

pub use connection::{Connection, Target, connect};
pub use descriptor::Descriptor;

/// Descriptor schema (`aab.ios-wda/v1`).
pub const DESCRIPTOR_SCHEMA: &str = "aab.ios-wda/v1";
/// Where the Runner publishes its descriptor inside its data container.
pub const DESCRIPTOR_PATH: &str = "Documents/ai_app_bridge_wda.json";
/// The managed action schema `/aab/status` must advertise.
pub const EXECUTION_SCHEMA: &str = "aab.wda-execution/v1";
/// The durable completion record the Runner commits before it replies.
pub const COMPLETION_SCHEMA: &str = "aab.wda-completion/v1";
/// Native element targets (`ios-tap-native`, `ios-input-native-text`).
pub const NATIVE_TARGET_SCHEMA: &str = "aab.ios-native-target/v1";
/// The session reference an observation hands to later actions.
pub const SESSION_SCHEMA: &str = "aab.ios-native-session/v1";
/// `ios-set-orientation` needs the Runner to advertise this.
pub const ORIENTATION_SCHEMA: &str = "aab.ios-orientation/v1";
/// Default XCTest bundle id of the prepared Runner (its app id adds `.xctrunner`).
pub const DEFAULT_TEST_BUNDLE_ID: &str = "io.github.mobileaidev.aiappbridge.wda";

/// Stable error codes of the WDA transport (the Runner's own codes pass through).
pub mod codes {
    /// The Runner container has no descriptor (the Runner never started there).
    pub const IOS_WDA_DESCRIPTOR_ABSENT: &str = "ios_wda_descriptor_absent";
    /// The Runner app is not installed on the device.
    pub const IOS_WDA_RUNNER_NOT_INSTALLED: &str = "ios_wda_runner_not_installed";
    /// The descriptor is not a valid `aab.ios-wda/v1` document.
    pub const INVALID_IOS_WDA_DESCRIPTOR: &str = "invalid_ios_wda_descriptor";
    /// The descriptor says the Runner is not ready (`ok:false`).
    pub const IOS_WDA_DESCRIPTOR_NOT_READY: &str = "ios_wda_descriptor_not_ready";
    /// A response's `wdaBinding` is missing or names another Runner process.
    pub const IOS_WDA_BINDING_MISMATCH: &str = "ios_wda_binding_mismatch";
    /// The Runner answered something that is not its response shape.
    pub const IOS_WDA_PROTOCOL_ERROR: &str = "ios_wda_protocol_error";
    /// No connection to the Runner could be made (nothing was sent).
    pub const IOS_WDA_UNREACHABLE: &str = "ios_wda_unreachable";
    /// A request may have reached the Runner but its reply was lost.
    pub const IOS_WDA_REPLY_LOST: &str = "ios_wda_reply_lost";
    /// The reply exceeded its byte cap.
    pub const IOS_WDA_RESPONSE_TOO_LARGE: &str = "ios_wda_response_too_large";
    /// `/aab/status` does not advertise `aab.wda-execution/v1` (an unprepared WDA).
    pub const IOS_WDA_EXECUTION_UNAVAILABLE: &str = "ios_wda_execution_unavailable";
    /// `/aab/status` says the Runner is not ready to act.
    pub const IOS_WDA_NOT_READY: &str = "ios_wda_not_ready";
    /// The action's reply was lost or unsettled: its outcome is unknown.
    pub const IOS_WDA_ACTION_UNRESOLVED: &str = "ios_wda_action_unresolved";
    /// A result lookup's cursor did not advance.
    pub const IOS_WDA_COMPLETION_CURSOR_STALLED: &str = "ios_wda_completion_cursor_stalled";
}
