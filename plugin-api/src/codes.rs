//! Error codes of the provider contract, each with its meaning. A provider returns
//! these (in [`crate::ProviderError::error`]) where the meaning fits, and its own
//! `<platform>_*` codes otherwise; the host uses the same constants where it names
//! them. A code is a public contract: its meaning never changes.

// ---- Codes a provider returns ------------------------------------------------

/// The invocation names a command this plugin does not have (the host routed a
/// command the manifest did not list: a host/plugin mismatch). Never dispatched.
pub const UNKNOWN_COMMAND: &str = "unknown_command";
/// A hook method (`reconcile`, …) the plugin does not implement. Never dispatched.
pub const UNSUPPORTED_PLUGIN_METHOD: &str = "unsupported_plugin_method";
/// An argument is well-formed by the schema but unusable (a value the target
/// refuses); set `field` to its dotted path. Never dispatched.
pub const INVALID_ARGUMENT: &str = "invalid_argument";
/// The call stopped because it was cancelled or its deadline passed; set
/// `dispatched` from what the provider knows (the host otherwise uses the mark).
pub const CANCELLED: &str = "cancelled";
/// The device/target named by the arguments is not connected or not known.
pub const DEVICE_NOT_FOUND: &str = "device_not_found";
/// The on-device bridge (agent, SDK, driver) is not reachable or not ready yet;
/// retrying after it starts may succeed. Never dispatched.
pub const BRIDGE_NOT_READY: &str = "bridge_not_ready";
/// Suffix of `<platform>_action_busy`: the target already runs an action that
/// must finish first (e.g. `web_action_busy`). Never dispatched.
pub const ACTION_BUSY_SUFFIX: &str = "_action_busy";
/// The host delivered something that breaks the invocation contract (a missing
/// validated argument, an unknown invocation schema).
pub const PLUGIN_PROTOCOL_ERROR: &str = "plugin_protocol_error";
/// Typed arguments could not be built from host-validated arguments: the
/// command's `inputSchema` and its argument type disagree (a provider bug).
pub const PLUGIN_ARGUMENTS_MISMATCH: &str = "plugin_arguments_mismatch";

// ---- Codes the SDK or the host produce about a plugin ------------------------

/// The plugin panicked; the SDK contained it and reports the message.
pub const PLUGIN_PANIC: &str = "plugin_panic";
/// The plugin's reply is not a valid `aab.plugin-outcome/v1`.
pub const PLUGIN_OUTPUT_INVALID: &str = "plugin_output_invalid";
/// The manifest is malformed or breaks a rule of [`crate::Manifest`]'s check.
pub const PLUGIN_MANIFEST_INVALID: &str = "plugin_manifest_invalid";
/// The manifest's `pluginApi` requirement does not accept the host's plugin API.
pub const PLUGIN_API_INCOMPATIBLE: &str = "plugin_api_incompatible";
/// The cdylib's ABI major or abi_stable layout does not match the host's.
pub const PLUGIN_ABI_INCOMPATIBLE: &str = "plugin_abi_incompatible";
/// The call did not finish before its deadline (host-decided).
pub const DEADLINE_EXCEEDED: &str = "deadline_exceeded";

// ---- Codes of host services (`Context::host_call`) ---------------------------

/// The host offers no service by that name (ask `host.info`'s `services` first).
pub const UNSUPPORTED_HOST_SERVICE: &str = "unsupported_host_service";
/// A host service failed internally (it panicked).
pub const HOST_SERVICE_FAILED: &str = "host_service_failed";
/// A host service answered with something that is not JSON.
pub const HOST_PROTOCOL_ERROR: &str = "host_protocol_error";
/// A host service failed with a reply that is not an error envelope.
pub const HOST_CALL_FAILED: &str = "host_call_failed";
