//! Run a provider under the real host loader in a plugin crate's own tests.
//!
//! ```ignore
//! let plugin = aab_plugin_api::test_support::TestPlugin::load(path_to_cdylib)?;
//! let outcome = plugin.invoke("my-command", serde_json::json!({}))?;
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::loader::{self, CallState, LoadError, LoadedModule};
use crate::protocol::{INVOCATION_SCHEMA, Invocation, Manifest, Outcome};

/// A plugin loaded through the host's loader, invoked with a minimal host context.
pub struct TestPlugin {
    module: LoadedModule,
    pub manifest: Manifest,
}

impl TestPlugin {
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let module = loader::load(path)?;
        let manifest = module.manifest()?;
        Ok(TestPlugin { module, manifest })
    }

    /// Invoke a command with a 10 s deadline; returns the outcome and whether the
    /// plugin marked dispatch.
    pub fn invoke(&self, command: &str, arguments: Value) -> Outcome {
        self.invoke_with(command, arguments, Duration::from_secs(10), Arc::new(AtomicBool::new(false)))
    }

    pub fn invoke_with(&self, command: &str, arguments: Value, timeout: Duration, cancelled: Arc<AtomicBool>) -> Outcome {
        let dispatched = Arc::new(AtomicBool::new(false));
        let host = loader::host_callbacks(CallState {
            deadline: Instant::now() + timeout,
            cancelled,
            dispatched: dispatched.clone(),
            logger: Box::new(|_, _| {}),
            service: Box::new(|method, _| Err(format!(r#"{{"error":"unsupported_host_service","message":"test host has no `{method}`"}}"#))),
        });
        let invocation = Invocation {
            schema: INVOCATION_SCHEMA.into(),
            command: command.into(),
            arguments,
            action_id: "test-action".into(),
            runtime_epoch: "test-epoch".into(),
            request_id: None,
            cwd: std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_else(|_| "/".into()),
            timeout_ms: timeout.as_millis() as u64,
        };
        let raw = self.module.call("invoke", &serde_json::to_string(&invocation).expect("invocation JSON"), &host);
        let mut outcome: Outcome = serde_json::from_str(&raw).unwrap_or_else(|e| Outcome::failure("plugin_output_invalid", e.to_string()));
        outcome.dispatch_marked = dispatched.load(std::sync::atomic::Ordering::SeqCst);
        outcome
    }
}

/// Path of a cdylib built in this workspace's target directory for the running
/// test profile, e.g. `cdylib_path("aab_plugin_web")`.
pub fn cdylib_path(crate_underscored: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test-binary>
    let profile_dir = exe.parent().and_then(|p| p.parent()).expect("target profile dir");
    profile_dir.join(format!("{}{}{}", std::env::consts::DLL_PREFIX, crate_underscored, std::env::consts::DLL_SUFFIX))
}
