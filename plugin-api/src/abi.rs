//! The frozen binary interface between the host and a plugin.
//!
//! Invariant: these types never change shape within ABI major 1. New host services
//! are new method names on [`HostCallbacks::call`]; new plugin hooks are new method
//! names on [`PluginModule::call`]. Both carry JSON.

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RArc, RStr, RString},
};

/// The plain version symbol every plugin exports (`AAB_PLUGIN_ABI_MAJOR`). The host
/// reads it with libloading before abi_stable's layout check so an incompatible
/// plugin gets one readable error instead of a layout dump.
pub const ABI_MAJOR: u32 = 1;

/// Name of the exported version symbol.
pub const ABI_SYMBOL: &str = "AAB_PLUGIN_ABI_MAJOR";

/// Log levels accepted by [`HostCallbacks::log`].
pub mod level {
    pub const ERROR: u8 = 1;
    pub const WARN: u8 = 2;
    pub const INFO: u8 = 3;
    pub const DEBUG: u8 = 4;
}

/// Services the host offers to a plugin during one call. Implemented by the host;
/// must never panic (a panic inside a vtable shim aborts the process).
#[sabi_trait]
pub trait HostCallbacks: Send + Sync {
    /// True once the caller cancelled or the runtime is stopping.
    fn is_cancelled(&self) -> bool;

    /// Milliseconds left of the call's single deadline (0 when expired).
    fn remaining_ms(&self) -> u64;

    /// The plugin is about to cause an effect outside the process (write to a device
    /// socket, spawn an action). A failure after this mark is reported as ambiguous.
    fn mark_dispatched(&self);

    /// Plugin log line routed into the host's log (the plugin's own tracing
    /// dispatcher is invisible to the host).
    fn log(&self, level: u8, message: RStr<'_>);

    /// Generic JSON host service: `method` names the service, `params` is JSON.
    /// Ok = JSON result, Err = JSON error object `{error, message}`.
    #[sabi(last_prefix_field)]
    fn call(&self, method: RStr<'_>, params: RStr<'_>) -> abi_stable::std_types::RResult<RString, RString>;
}

/// The host callback object as passed to plugins.
pub type HostCallbacksRef = HostCallbacks_TO<'static, RArc<()>>;

/// The plugin's root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    /// The plugin manifest (`aab.plugin-manifest/v1`) as JSON, or an error outcome
    /// JSON when building it failed.
    pub manifest: extern "C" fn() -> RString,

    /// One plugin call. `method` is e.g. `invoke`; `request` and the returned string
    /// are JSON (`aab.plugin-outcome/v1`). Never unwinds.
    #[sabi(last_prefix_field)]
    pub call: extern "C" fn(method: RStr<'_>, request: RStr<'_>, host: &HostCallbacksRef) -> RString,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "aab_plugin";
    const NAME: &'static str = "aab_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
