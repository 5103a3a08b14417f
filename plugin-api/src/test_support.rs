//! Run a provider under the real host loader in a plugin crate's own tests, with
//! the host's rules: [`TestPlugin::load`] refuses a manifest [`Manifest::check`]
//! refuses (the host loader calls the same function) or whose `inputSchema` does not
//! compile; [`TestPlugin::invoke`] refuses an unknown command and validates the
//! arguments with the host's own validator ([`crate::validate`]: same codes, dotted
//! `field`s and messages, `dispatched:false`) before the plugin sees them; and calls
//! get in-memory host services — `host.info` (with a private temporary data dir), `facts.append` /
//! `facts.read`, `host.time`, `host.echo` — so a provider's tests exercise the same
//! service paths as in the runtime.
//!
//! ```ignore
//! let plugin = aab_plugin_api::test_support::TestPlugin::load(path_to_cdylib)?;
//! let outcome = plugin.invoke("my-command", serde_json::json!({}));
//! let answer = plugin.hook("reconcile", serde_json::json!({"serial": "s", "pending": {}}));
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::loader::{self, CallState, LoadError, LoadedModule};
use crate::protocol::{Invocation, Manifest, Outcome};
use crate::validate;

/// A plugin loaded through the host's loader, invoked with an in-memory host.
pub struct TestPlugin {
    module: LoadedModule,
    pub manifest: Manifest,
    host: Arc<MemoryHost>,
    /// Per command: the schema the host validates against (with its execution
    /// options) and its compiled validator.
    schemas: BTreeMap<String, (Value, jsonschema::Validator)>,
}

/// `stream/key` → `(sequence, value, recorded-at ms)` records of [`MemoryHost`].
type FactRecords = BTreeMap<String, Vec<(u64, Value, u64)>>;

/// The in-memory host services of one [`TestPlugin`].
pub struct MemoryHost {
    plugin: String,
    data_dir: PathBuf,
    /// `stream/key` → records in append order (sequence = index + 1 across all keys).
    facts: Mutex<(u64, FactRecords)>,
    /// Log lines the plugin sent: (level, message).
    pub logs: Mutex<Vec<(u8, String)>>,
}

impl MemoryHost {
    fn new(plugin: &str) -> Self {
        let data_dir = std::env::temp_dir().join(format!("aab-test-plugin-{}-{}-{}", plugin, std::process::id(), crate::protocol::PLUGIN_API_VERSION));
        MemoryHost { plugin: plugin.to_string(), data_dir, facts: Mutex::new((0, BTreeMap::new())), logs: Mutex::new(Vec::new()) }
    }

    fn service(&self, method: &str, params: &str) -> Result<String, String> {
        let params: Value = serde_json::from_str(params).map_err(|e| json!({"error": crate::codes::INVALID_ARGUMENT, "message": format!("params are not JSON: {e}")}).to_string())?;
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let key = || format!("{}/{}", params.get("stream").and_then(Value::as_str).unwrap_or(""), params.get("key").and_then(Value::as_str).unwrap_or(""));
        let reply = match method {
            "host.info" => {
                let dir = std::fs::create_dir_all(&self.data_dir).ok().map(|_| self.data_dir.display().to_string());
                json!({"hostVersion": "test", "pluginApi": crate::protocol::PLUGIN_API_VERSION, "runtimeId": "test-epoch", "plugin": self.plugin,
                       "dataDir": dir, "services": crate::host::BASELINE_SERVICES, "features": ["invocation-host-options"]})
            }
            "host.time" => json!({"unixMs": now_ms}),
            "host.echo" => json!({"params": params}),
            "facts.append" => {
                let record = params.get("record").filter(|r| r.is_object()).cloned().ok_or_else(|| json!({"error": crate::codes::INVALID_ARGUMENT, "message": "`record` must be an object", "field": "record"}).to_string())?;
                let mut facts = self.facts.lock().unwrap_or_else(|p| p.into_inner());
                facts.0 += 1;
                let seq = facts.0;
                facts.1.entry(key()).or_default().push((seq, record, now_ms));
                json!({"sequence": seq, "receiptId": format!("test-receipt-{seq}"), "committedAtMs": now_ms})
            }
            "facts.read" => {
                let after = params.get("afterSequence").and_then(Value::as_u64).unwrap_or(0);
                let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(100).clamp(1, 1000) as usize;
                let facts = self.facts.lock().unwrap_or_else(|p| p.into_inner());
                let key_name = params.get("key").and_then(Value::as_str).unwrap_or("");
                let all: Vec<&(u64, Value, u64)> = facts.1.get(&key()).map(|v| v.iter().filter(|(s, _, _)| *s > after).collect()).unwrap_or_default();
                let page: Vec<Value> = all.iter().take(limit).map(|(s, r, t)| json!({"sequence": s, "key": key_name, "record": r, "committedAtMs": t})).collect();
                let next = all.iter().take(limit).next_back().map(|(s, _, _)| *s).unwrap_or(after);
                json!({"records": page, "nextSequence": next, "hasMore": all.len() > limit, "gap": null, "expired": false})
            }
            other => return Err(json!({"error": crate::codes::UNSUPPORTED_HOST_SERVICE, "message": format!("test host has no `{other}`")}).to_string()),
        };
        Ok(reply.to_string())
    }
}

impl TestPlugin {
    /// Load through the host's loader and apply [`Manifest::check`], like the host.
    pub fn load(path: &Path) -> Result<Self, LoadError> {
        let module = loader::load(path)?;
        let manifest = module.manifest()?;
        manifest.check().map_err(|p| LoadError { code: crate::codes::PLUGIN_MANIFEST_INVALID, message: p.to_string() })?;
        let mut schemas = BTreeMap::new();
        for spec in &manifest.commands {
            let schema = validate::input_schema_with_host_options(spec);
            let validator = validate::compile(&schema).map_err(|reason| LoadError {
                code: crate::codes::PLUGIN_MANIFEST_INVALID,
                message: format!("command `{}` is invalid: its inputSchema does not compile: {reason}", spec.command),
            })?;
            schemas.insert(spec.command.clone(), (schema, validator));
        }
        let host = Arc::new(MemoryHost::new(&manifest.name));
        Ok(TestPlugin { module, manifest, host, schemas })
    }

    /// What the host answers before dispatch: `unknown_command` for a command the
    /// manifest does not list, else the argument validation of [`crate::validate`].
    pub fn validate(&self, command: &str, arguments: &Value) -> Result<(), crate::ProviderError> {
        let Some((schema, validator)) = self.schemas.get(command) else {
            return Err(crate::ProviderError::new(crate::codes::UNKNOWN_COMMAND, format!("unknown command `{command}`")).with_field("command").not_dispatched());
        };
        validate::validate_arguments(command, validator, schema, arguments)
    }

    /// The in-memory host (facts written, log lines received).
    pub fn host(&self) -> &MemoryHost {
        &self.host
    }

    /// Invoke a command with a 10 s deadline; the outcome says whether the plugin
    /// marked dispatch. Arguments the host would refuse never reach the plugin: the
    /// outcome is then the host's refusal ([`TestPlugin::validate`]).
    pub fn invoke(&self, command: &str, arguments: Value) -> Outcome {
        self.invoke_with(command, arguments, Duration::from_secs(10), Arc::new(AtomicBool::new(false)))
    }

    pub fn invoke_with(&self, command: &str, arguments: Value, timeout: Duration, cancelled: Arc<AtomicBool>) -> Outcome {
        if let Err(refused) = self.validate(command, &arguments) {
            return Outcome::from_result(Err(refused));
        }
        self.invoke_unvalidated(command, arguments, timeout, cancelled)
    }

    /// Invoke without the host's validation: for testing what the plugin itself does
    /// with arguments no host would send (its typed arguments' own refusals).
    pub fn invoke_unvalidated(&self, command: &str, arguments: Value, timeout: Duration, cancelled: Arc<AtomicBool>) -> Outcome {
        let dispatched = Arc::new(AtomicBool::new(false));
        let host = self.callbacks(timeout, cancelled, dispatched.clone());
        let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_else(|_| "/".into());
        let mut invocation = Invocation::new(command, arguments, "test-action", "test-epoch", cwd, timeout.as_millis() as u64);
        invocation.lift_host_options();
        let raw = self.module.call("invoke", &serde_json::to_string(&invocation).expect("invocation JSON"), &host);
        let mut outcome: Outcome = serde_json::from_str(&raw).unwrap_or_else(|e| Outcome::failure(crate::codes::PLUGIN_OUTPUT_INVALID, e.to_string()));
        outcome.dispatch_marked = dispatched.load(std::sync::atomic::Ordering::SeqCst);
        outcome
    }

    /// Call a hook (e.g. `reconcile` with `{serial, pending}`) with a 10 s deadline.
    pub fn hook(&self, method: &str, request: Value) -> Outcome {
        let host = self.callbacks(Duration::from_secs(10), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let raw = self.module.call(method, &request.to_string(), &host);
        serde_json::from_str(&raw).unwrap_or_else(|e| Outcome::failure(crate::codes::PLUGIN_OUTPUT_INVALID, e.to_string()))
    }

    fn callbacks(&self, timeout: Duration, cancelled: Arc<AtomicBool>, dispatched: Arc<AtomicBool>) -> crate::abi::HostCallbacksRef {
        let (log_host, service_host) = (self.host.clone(), self.host.clone());
        loader::host_callbacks(CallState {
            deadline: Instant::now() + timeout,
            cancelled,
            dispatched,
            on_dispatch: None,
            logger: Box::new(move |level, message| log_host.logs.lock().unwrap_or_else(|p| p.into_inner()).push((level, message.to_string()))),
            service: Box::new(move |method, params| service_host.service(method, params)),
        })
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
