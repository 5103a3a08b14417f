//! The host's plugin loader: preflight the plain version symbol with libloading,
//! then run abi_stable's layout check through `lib_header_from_path` (never
//! `load_from_file`, which caches one module per interface type per process).
//!
//! Libraries are never unloaded; abi_stable leaks the handle on purpose because the
//! root module holds `'static` references into the library.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RArc, RResult, RStr, RString};

use crate::abi::{ABI_MAJOR, HostCallbacks, HostCallbacks_TO, HostCallbacksRef, PluginModuleRef};
use crate::protocol::{Manifest, OUTCOME_SCHEMA, Outcome, PLUGIN_API_VERSION};

/// Why a plugin could not be loaded. `code` is a stable error code.
#[derive(Debug, Clone)]
pub struct LoadError {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}
impl std::error::Error for LoadError {}

fn err(code: &'static str, message: impl Into<String>) -> LoadError {
    LoadError { code, message: message.into() }
}

/// A loaded plugin library.
#[derive(Clone, Copy)]
pub struct LoadedModule {
    module: PluginModuleRef,
}

/// Load a plugin: version-symbol preflight, then the abi_stable layout check.
pub fn load(path: &Path) -> Result<LoadedModule, LoadError> {
    // SAFETY: loading a library runs its initialisers; the host only loads files from
    // its configured plugin directory (and, with a bundle manifest, only files whose
    // sha256 matched before this call).
    let major = unsafe {
        let lib = libloading::Library::new(path).map_err(|e| err("plugin_load_failed", format!("cannot open library: {e}")))?;
        let symbol = lib
            .get::<*const u32>(b"AAB_PLUGIN_ABI_MAJOR\0")
            .map_err(|_| err(crate::codes::PLUGIN_ABI_INCOMPATIBLE, "library does not export AAB_PLUGIN_ABI_MAJOR; it is not an aab plugin"))?;
        **symbol
    };
    if major != ABI_MAJOR {
        return Err(err(
            "plugin_abi_incompatible",
            format!("plugin was built for plugin ABI {major}, this host speaks ABI {ABI_MAJOR}; rebuild the plugin against aab-plugin-api {ABI_MAJOR}.x"),
        ));
    }
    let module = abi_stable::library::lib_header_from_path(path)
        .and_then(|header| header.init_root_module::<PluginModuleRef>())
        .map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").to_string();
            err(crate::codes::PLUGIN_ABI_INCOMPATIBLE, format!("abi_stable layout check failed: {first}"))
        })?;
    Ok(LoadedModule { module })
}

impl LoadedModule {
    /// Read and check the manifest: JSON shape, schema id and plugin-API semver range.
    pub fn manifest(&self) -> Result<Manifest, LoadError> {
        let raw = (self.module.manifest())();
        let value: serde_json::Value = serde_json::from_str(raw.as_str()).map_err(|e| err(crate::codes::PLUGIN_MANIFEST_INVALID, format!("manifest is not JSON: {e}")))?;
        if value.get("schema").and_then(|s| s.as_str()) == Some(OUTCOME_SCHEMA) {
            let outcome: Outcome = serde_json::from_value(value).map_err(|e| err(crate::codes::PLUGIN_MANIFEST_INVALID, e.to_string()))?;
            let e = outcome.error.map(|e| e.to_string()).unwrap_or_default();
            return Err(err(crate::codes::PLUGIN_MANIFEST_INVALID, format!("plugin failed to build its manifest: {e}")));
        }
        let manifest: Manifest = serde_json::from_value(value).map_err(|e| err(crate::codes::PLUGIN_MANIFEST_INVALID, format!("manifest shape: {e}")))?;
        if manifest.schema != crate::protocol::MANIFEST_SCHEMA {
            return Err(err(crate::codes::PLUGIN_MANIFEST_INVALID, format!("unsupported manifest schema `{}`", manifest.schema)));
        }
        let req = semver::VersionReq::parse(&manifest.plugin_api)
            .map_err(|e| err(crate::codes::PLUGIN_MANIFEST_INVALID, format!("pluginApi `{}` is not a semver requirement: {e}", manifest.plugin_api)))?;
        let ours = semver::Version::parse(PLUGIN_API_VERSION).expect("crate version is semver");
        if !req.matches(&ours) {
            return Err(err(
                "plugin_api_incompatible",
                format!("plugin requires plugin API {}, host provides {}", manifest.plugin_api, PLUGIN_API_VERSION),
            ));
        }
        Ok(manifest)
    }

    /// One blocking call into the plugin. Run it on a blocking thread.
    pub fn call(&self, method: &str, request: &str, host: &HostCallbacksRef) -> String {
        (self.module.call())(RStr::from_str(method), RStr::from_str(request), host).into_string()
    }
}

/// Receives plugin log lines (level, message).
pub type LogSink = Box<dyn Fn(u8, &str) + Send + Sync>;
/// Called once, at the first dispatch mark of a call.
pub type DispatchHook = Arc<dyn Fn() + Send + Sync>;
/// The generic JSON host service: (method, params JSON) → result JSON or error JSON.
pub type HostService = Box<dyn Fn(&str, &str) -> Result<String, String> + Send + Sync>;

/// Host services behind one plugin call: deadline, cancellation, dispatch mark, log
/// sink and the generic JSON service. Shared with the caller through `Arc`s.
/// Milliseconds left until `deadline`, rounded up: 0 must mean "the deadline has
/// passed", never "less than 1 ms left", so a plugin that stops at 0 agrees with the
/// host about why it stopped. Shared by every host-callback implementation.
pub fn remaining_ms_until(deadline: Instant) -> u64 {
    deadline.saturating_duration_since(Instant::now()).as_micros().div_ceil(1000) as u64
}

pub struct CallState {
    pub deadline: Instant,
    pub cancelled: Arc<AtomicBool>,
    pub dispatched: Arc<AtomicBool>,
    /// Runs synchronously inside `mark_dispatched`, before the plugin's first effect
    /// (the runtime makes a device action's mark durable here).
    pub on_dispatch: Option<DispatchHook>,
    pub logger: LogSink,
    pub service: HostService,
}

impl HostCallbacks for CallState {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
    fn remaining_ms(&self) -> u64 {
        remaining_ms_until(self.deadline)
    }
    fn mark_dispatched(&self) {
        if !self.dispatched.swap(true, Ordering::SeqCst)
            && let Some(hook) = &self.on_dispatch
        {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook()));
        }
    }
    fn log(&self, level: u8, message: RStr<'_>) {
        // Never unwind across the vtable shim.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.logger)(level, message.as_str())));
    }
    fn call(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.service)(method.as_str(), params.as_str()))) {
            Ok(Ok(s)) => RResult::ROk(RString::from(s)),
            Ok(Err(e)) => RResult::RErr(RString::from(e)),
            Err(_) => RResult::RErr(RString::from(serde_json::json!({"error": crate::codes::HOST_SERVICE_FAILED, "message": "host service panicked"}).to_string())),
        }
    }
}

/// Wrap call state into the ABI callback object.
pub fn host_callbacks(state: CallState) -> HostCallbacksRef {
    HostCallbacks_TO::from_ptr(RArc::new(state), TD_Opaque)
}
