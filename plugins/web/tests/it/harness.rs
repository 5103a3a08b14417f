//! A host for the built plugin, as the runtime is one: the host's own loader
//! (ABI preflight, layout check), `Manifest::check`, the host's argument
//! validator, per-call deadlines, cancellation and dispatch marks, and host
//! services (`host.info` with a data dir, an in-memory FactStore shared by the
//! "runtimes" of one test so a restart keeps its receipts, as the real store
//! does). Unlike `TestPlugin` it gives every call its own action id and lets a
//! test load a second copy of the library: a new plugin instance, as after a
//! runtime restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aab_plugin_api::loader::{self, CallState, LoadedModule};
use aab_plugin_api::protocol::{Invocation, Manifest, Outcome};
use aab_plugin_api::validate;
use serde_json::{Value, json};

/// `stream/key` → (sequence, record, committed ms), in append order.
type Streams = BTreeMap<String, Vec<(u64, Value, u64)>>;

/// The FactStore of one test "installation", with its last sequence.
#[derive(Default)]
pub struct Store {
    records: Mutex<(u64, Streams)>,
}

impl Store {
    pub fn records(&self, stream: &str, key: &str) -> Vec<Value> {
        let r = self.records.lock().unwrap();
        r.1.get(&format!("{stream}/{key}")).map(|v| v.iter().map(|(_, r, _)| r.clone()).collect()).unwrap_or_default()
    }
}

pub struct Host {
    pub data_dir: PathBuf,
    pub epoch: String,
    pub store: Arc<Store>,
    pub logs: Mutex<Vec<(u8, String)>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Host {
    fn service(&self, method: &str, params: &str) -> Result<String, String> {
        let params: Value = serde_json::from_str(params).map_err(|e| json!({"error": "invalid_argument", "message": e.to_string()}).to_string())?;
        let key = format!("{}/{}", params["stream"].as_str().unwrap_or(""), params["key"].as_str().unwrap_or(""));
        let reply = match method {
            "host.info" => json!({"hostVersion": "it", "pluginApi": "1.0.0", "runtimeId": self.epoch, "plugin": "web", "dataDir": self.data_dir,
                                  "services": ["host.info", "host.echo", "host.time", "facts.append", "facts.read"], "features": ["invocation-host-options"]}),
            "host.time" => json!({"unixMs": now_ms()}),
            "facts.append" => {
                let record = params.get("record").filter(|r| r.is_object()).cloned().ok_or_else(|| json!({"error": "invalid_argument", "field": "record", "message": "record"}).to_string())?;
                let mut f = self.store.records.lock().unwrap();
                f.0 += 1;
                let seq = f.0;
                f.1.entry(key).or_default().push((seq, record, now_ms()));
                json!({"sequence": seq, "receiptId": format!("r{seq}"), "committedAtMs": now_ms()})
            }
            "facts.read" => {
                let after = params["afterSequence"].as_u64().unwrap_or(0);
                let limit = params["limit"].as_u64().unwrap_or(100).clamp(1, 1000) as usize;
                let f = self.store.records.lock().unwrap();
                let all: Vec<&(u64, Value, u64)> = f.1.get(&key).map(|v| v.iter().filter(|(s, _, _)| *s > after).collect()).unwrap_or_default();
                let page: Vec<Value> = all.iter().take(limit).map(|(s, r, t)| json!({"sequence": s, "key": params["key"], "record": r, "committedAtMs": t})).collect();
                let next = all.iter().take(limit).next_back().map(|(s, _, _)| *s).unwrap_or(after);
                json!({"records": page, "nextSequence": next, "hasMore": all.len() > limit, "gap": null, "expired": false})
            }
            other => return Err(json!({"error": "unsupported_host_service", "message": other}).to_string()),
        };
        Ok(reply.to_string())
    }
}

pub struct Plugin {
    module: LoadedModule,
    pub manifest: Manifest,
    schemas: BTreeMap<String, Check>,
    pub host: Arc<Host>,
    next: AtomicU64,
}

/// A compiled argument check (the host's validator behind it).
type Check = Box<dyn Fn(&Value) -> Result<(), aab_plugin_api::ProviderError> + Send + Sync>;

/// One call's result, with what the host would know.
#[derive(Debug)]
pub struct Call {
    pub action_id: String,
    pub outcome: Outcome,
}

impl Call {
    pub fn ok(&self) -> &Value {
        assert!(self.outcome.ok, "{} failed: {:?}", self.action_id, self.outcome.error);
        self.outcome.value.as_ref().expect("a value")
    }

    pub fn err(&self) -> &aab_plugin_api::ProviderError {
        assert!(!self.outcome.ok, "{} succeeded: {}", self.action_id, self.outcome.value.clone().unwrap_or_default());
        self.outcome.error.as_ref().expect("an error")
    }

    /// The host's view of the dispatch facts: (dispatched, ambiguous).
    pub fn dispatch(&self) -> (Option<bool>, bool) {
        let e = self.err();
        match e.dispatched {
            Some(false) => (Some(false), false),
            Some(true) => (Some(true), e.ambiguous != Some(false)),
            None if self.outcome.dispatch_marked => (Some(true), e.ambiguous != Some(false)),
            None => (Some(false), false),
        }
    }
}

/// The built cdylib (cargo keeps it next to the test binary's deps).
pub fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let deps = exe.parent().expect("deps dir");
    let name = format!("{}aab_plugin_web{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    for dir in [deps, deps.parent().expect("profile dir")] {
        let p = dir.join(&name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} not found next to {}", exe.display());
}

impl Plugin {
    /// Load `path` as a plugin with its own data dir, runtime epoch and store.
    pub fn load(path: &Path, data_dir: &Path, epoch: &str, store: Arc<Store>) -> Plugin {
        let module = loader::load(path).unwrap_or_else(|e| panic!("load {}: {e}", path.display()));
        let manifest = module.manifest().expect("manifest");
        manifest.check().expect("Manifest::check accepts the manifest");
        let mut schemas = BTreeMap::new();
        for spec in &manifest.commands {
            let schema = validate::input_schema_with_host_options(spec);
            let compiled = validate::compile(&schema).unwrap_or_else(|e| panic!("{}: {e}", spec.command));
            let (name, s2) = (spec.command.clone(), schema);
            let check: Check = Box::new(move |args: &Value| validate::validate_arguments(&name, &compiled, &s2, args));
            schemas.insert(spec.command.clone(), check);
        }
        std::fs::create_dir_all(data_dir).unwrap();
        let host = Arc::new(Host { data_dir: data_dir.to_path_buf(), epoch: epoch.to_string(), store, logs: Mutex::new(Vec::new()) });
        Plugin { module, manifest, schemas, host, next: AtomicU64::new(0) }
    }

    /// A second, independent instance of the library (a copy at a new path):
    /// what a restarted runtime loads.
    pub fn load_copy(data_dir: &Path, epoch: &str, store: Arc<Store>) -> Plugin {
        let parent = data_dir.parent().unwrap();
        std::fs::create_dir_all(parent).unwrap();
        let copy = parent.join(format!("libaab_plugin_web-{epoch}.so"));
        std::fs::copy(cdylib(), &copy).unwrap();
        Plugin::load(&copy, data_dir, epoch, store)
    }

    fn callbacks(&self, timeout: Duration, cancelled: Arc<AtomicBool>, dispatched: Arc<AtomicBool>) -> aab_plugin_api::abi::HostCallbacksRef {
        let (log_host, service_host) = (self.host.clone(), self.host.clone());
        loader::host_callbacks(CallState {
            deadline: Instant::now() + timeout,
            cancelled,
            dispatched,
            on_dispatch: None,
            logger: Box::new(move |level, message| log_host.logs.lock().unwrap().push((level, message.to_string()))),
            service: Box::new(move |method, params| service_host.service(method, params)),
        })
    }

    /// The host's refusal, if it would refuse these arguments.
    pub fn validate(&self, command: &str, args: &Value) -> Result<(), aab_plugin_api::ProviderError> {
        let check = self.schemas.get(command).expect("a listed command");
        check(args)
    }

    /// Validate and invoke with a deadline of `timeout`.
    pub fn call_with(&self, command: &str, args: Value, timeout: Duration) -> Call {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let action_id = format!("{}-a{n}", self.host.epoch);
        if let Err(e) = self.validate(command, &args) {
            return Call { action_id, outcome: Outcome::from_result(Err(e)) };
        }
        let dispatched = Arc::new(AtomicBool::new(false));
        let host = self.callbacks(timeout, Arc::new(AtomicBool::new(false)), dispatched.clone());
        let cwd = std::env::current_dir().unwrap().display().to_string();
        let mut inv = Invocation::new(command, args, action_id.clone(), self.host.epoch.clone(), cwd, timeout.as_millis() as u64);
        inv.lift_host_options();
        let raw = self.module.call("invoke", &serde_json::to_string(&inv).unwrap(), &host);
        let mut outcome: Outcome = serde_json::from_str(&raw).unwrap_or_else(|e| panic!("outcome {raw}: {e}"));
        outcome.dispatch_marked = dispatched.load(Ordering::SeqCst);
        Call { action_id, outcome }
    }

    pub fn call(&self, args: Value) -> Call {
        self.call_with("web-executor", args, Duration::from_secs(60))
    }

    pub fn hook(&self, method: &str, request: Value) -> Outcome {
        let host = self.callbacks(Duration::from_secs(30), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let raw = self.module.call(method, &request.to_string(), &host);
        serde_json::from_str(&raw).unwrap()
    }
}
