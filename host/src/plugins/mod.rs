//! Plugin discovery, trust and loading.
//!
//! Plugins are the files named `libaab_plugin_*.so` in the plugin directory (next to
//! the executable, or `AI_APP_BRIDGE_PLUGIN_DIR`). When the directory carries a
//! bundle manifest (`aab-bundle.json`), a file whose sha256 differs is refused with
//! `plugin_hash_mismatch`. The runtime loads each accepted plugin from a private
//! content-addressed copy (`<runtime_dir>/plugins/<sha256>.so`, verified after the
//! copy) so the bytes that were hashed are the bytes that run, and rebuilding a
//! plugin in place never changes a loaded mapping. A plugin that fails any check
//! gets one clear error naming its file; the others keep working.

pub mod bundle;
pub mod install;
pub mod isolation;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aab_plugin_api::Manifest;
use aab_plugin_api::loader::{self, LoadedModule};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::builtins;
use crate::client::PublicReply;
use crate::config::Config;
use crate::digest::{DigestCache, file_sha256};
use crate::error::CommandError;
use crate::engines::catalog::{self, EngineCatalog};
use crate::registry::Registry;

pub use bundle::{BUNDLE_MANIFEST, BundleOptions, bundle_report, verify_report};
pub use install::{install_report, remove_report};
pub use isolation::{Isolation, IsolationPolicy, PluginHandle};

/// File name prefix/suffix of plugin libraries.
pub fn is_plugin_file_name(name: &str) -> bool {
    let prefix = format!("{}aab_plugin_", std::env::consts::DLL_PREFIX);
    name.starts_with(&prefix) && name.ends_with(std::env::consts::DLL_SUFFIX) && name.len() > prefix.len() + std::env::consts::DLL_SUFFIX.len()
}

/// Plugin files in `dir`, sorted by name, or why the directory cannot be listed.
pub fn scan(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file() || t.is_symlink()).unwrap_or(false))
        .filter(|e| e.file_name().to_str().is_some_and(is_plugin_file_name))
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// `plugin_dir_unavailable`: the plugin directory cannot be listed, so no plugin
/// command can be found. Host built-ins keep working; a command that is not
/// registered reports this instead of `unknown_command` (it may well be a plugin's).
pub(crate) fn plugin_dir_unavailable(dir: &Path, error: &std::io::Error) -> CommandError {
    const VARIABLE: &str = "AI_APP_BRIDGE_PLUGIN_DIR";
    let from = if std::env::var_os(VARIABLE).is_some_and(|v| !v.is_empty()) { VARIABLE } else { "the aab executable's directory" };
    CommandError::new(
        "plugin_dir_unavailable",
        format!("the plugin directory {} ({from}) cannot be read: {error}; plugin commands are unavailable", dir.display()),
    )
    .with_field(VARIABLE)
    .with_details(json!({"pluginDir": dir.display().to_string(), "source": from, "reason": error.to_string()}))
}

/// What happened to one plugin file.
#[derive(Clone, Debug)]
pub struct PluginReport {
    pub file: PathBuf,
    pub sha256: Option<String>,
    pub size: Option<u64>,
    pub manifest: Option<Manifest>,
    /// `None` = loaded and registered.
    pub error: Option<CommandError>,
}

impl PluginReport {
    pub fn to_json(&self, registry: &Registry) -> Value {
        let name = self.manifest.as_ref().map(|m| m.name.clone());
        let commands: Vec<String> = match (&self.error, &name) {
            (None, Some(n)) => registry
                .iter()
                .filter(|c| matches!(&c.origin, crate::registry::CommandOrigin::Plugin { name, .. } if name == n))
                .map(|c| c.spec.command.clone())
                .collect(),
            _ => Vec::new(),
        };
        json!({
            "name": name,
            "version": self.manifest.as_ref().map(|m| m.version.clone()),
            "file": self.file.display().to_string(),
            "sha256": self.sha256,
            "size": self.size,
            "platforms": self.manifest.as_ref().map(|m| m.platforms.clone()).unwrap_or_default(),
            "commandCount": commands.len(),
            "commands": commands,
            "status": if self.error.is_none() { "loaded" } else { "refused" },
            "error": self.error.as_ref().map(|e| e.to_json()),
        })
    }
}

/// How the catalog obtains manifests.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Runtime: load every accepted plugin (manifests and callable modules).
    Load,
    /// Client: use cached manifests; load a plugin only when its bytes changed.
    ManifestsOnly,
}

/// The registry plus the state of every plugin file.
pub struct Catalog {
    pub registry: Registry,
    pub reports: Vec<PluginReport>,
    /// Callable plugins by plugin name (runtime only), in-process or in a child.
    pub modules: BTreeMap<String, PluginHandle>,
    /// Which plugins run in a child process (`aab-plugins.json`, environment).
    pub isolation: IsolationPolicy,
    /// sha256 of every candidate file by file name (for the code fingerprint).
    pub file_digests: BTreeMap<String, String>,
    pub bundle_digest: Option<String>,
    /// What the engine schemas took from the loaded manifests (built once per load).
    pub engines: EngineCatalog,
    /// How each built-in executes, registered with its spec.
    pub handlers: BTreeMap<String, builtins::Handler>,
}

impl Catalog {
    /// The Intent providers declared by loaded (registered) plugins, with the
    /// declaring plugin's name.
    /// The environment variables the loaded plugins declare (`Manifest::environment`).
    pub fn plugin_environment(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.reports.iter().filter(|r| r.error.is_none()).filter_map(|r| r.manifest.as_ref()).flat_map(|m| m.environment.iter().map(String::as_str)).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The managed Intent workflow whose public command is `command`, with its plugin.
    pub fn intent_workflow(&self, command: &str) -> Option<(String, aab_plugin_api::protocol::IntentWorkflow)> {
        self.reports
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| r.manifest.as_ref())
            .find_map(|m| m.intent_workflows.iter().find(|w| w.command == command).map(|w| (m.name.clone(), w.clone())))
    }

    fn loaded_manifests(&self) -> impl Iterator<Item = &aab_plugin_api::Manifest> {
        self.reports.iter().filter(|r| r.error.is_none()).filter_map(|r| r.manifest.as_ref())
    }

    /// Whether the loaded plugin `plugin` declares manifest feature `feature`.
    pub fn plugin_has_feature(&self, plugin: &str, feature: &str) -> bool {
        self.loaded_manifests().any(|m| m.name == plugin && m.features.iter().any(|f| f == feature))
    }

    /// The first loaded plugin that declares manifest feature `feature`.
    pub fn plugin_with_feature(&self, feature: &str) -> Option<String> {
        self.loaded_manifests().find(|m| m.features.iter().any(|f| f == feature)).map(|m| m.name.clone())
    }

    pub fn intent_providers(&self) -> Vec<(String, aab_plugin_api::protocol::IntentProvider)> {
        self.reports
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| r.manifest.as_ref())
            .flat_map(|m| m.intent_providers.iter().map(move |p| (m.name.clone(), p.clone())))
            .collect()
    }

    pub fn build(config: &Config, cache: &mut DigestCache, mode: LoadMode) -> Catalog {
        // The engine built-ins are registered after the plugins: their schemas name
        // the platforms and targets the plugins declare.
        let mut handlers = BTreeMap::new();
        let mut host_specs = Vec::new();
        for b in builtins::host_builtins() {
            handlers.insert(b.spec.command.clone(), b.handler);
            host_specs.push(b.spec);
        }
        let mut registry = Registry::new(host_specs);
        registry.reserve(builtins::ENGINE_COMMANDS);
        let mut reports = Vec::new();
        let mut modules = BTreeMap::new();
        let mut file_digests = BTreeMap::new();
        // One read of the bundle manifest serves the trust check, the identity digest
        // and the isolation policy.
        // Cached "these bytes passed every check" verdicts count only for the host
        // build that reached them: a rebuilt host may check more.
        let host_sha = cache.sha256(Path::new("/proc/self/exe")).map(|(sha, _)| sha).ok();
        let bundle_bytes = bundle::read_bundle_bytes(&config.plugin_dir);
        let bundle = match &bundle_bytes {
            Ok(Some(bytes)) => Some(bundle::parse_bundle_manifest(&config.plugin_dir, bytes)),
            Ok(None) => None,
            Err(e) => Some(Err(e.clone())),
        };
        let bundle_bytes = bundle_bytes.ok().flatten();
        let bundle_digest = bundle_bytes.as_deref().map(crate::digest::sha256_hex);
        let isolation = IsolationPolicy::read(&config.plugin_dir, bundle_bytes.as_deref().and_then(|b| std::str::from_utf8(b).ok()));

        let files = match scan(&config.plugin_dir) {
            Ok(files) => files,
            Err(error) => {
                registry.set_missing_commands_cause(plugin_dir_unavailable(&config.plugin_dir, &error));
                Vec::new()
            }
        };
        for file in files {
            let file_name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let mut report = PluginReport { file: file.clone(), sha256: None, size: None, manifest: None, error: None };
            let (sha, identity) = match cache.sha256(&file) {
                Ok(v) => v,
                Err(e) => {
                    report.error = Some(refusal("plugin_load_failed", &file, format!("cannot read plugin file: {e}")));
                    reports.push(report);
                    continue;
                }
            };
            file_digests.insert(file_name.clone(), sha.clone());
            report.sha256 = Some(sha.clone());
            report.size = Some(identity.size);

            if let Err(e) = bundle::check_trust(bundle.as_ref(), &file_name, &sha) {
                report.error = Some(e);
                reports.push(report);
                continue;
            }

            let mut module = None;
            let mut schemas_known_good = false;
            let manifest = match mode {
                LoadMode::ManifestsOnly => match cache.manifest(&file, &sha) {
                    Some(cached) => {
                        schemas_known_good = cached.get("schemasCompiled") == Some(&Value::Bool(true)) && host_sha.is_some() && cached.get("checkedBy").and_then(Value::as_str) == host_sha.as_deref();
                        manifest_from_cache(&file, cached)
                    }
                    // An isolated plugin's code never runs in the client either: a
                    // short-lived child reports the manifest.
                    None if isolation.mode_of(&file) == Isolation::Process => {
                        let loaded = private_copy(&file, &sha, config).and_then(|copy| isolation::ChildPlugin::start(&file, &copy, &sha)).map(|started| started.manifest);
                        cache.set_manifest(&file, &sha, manifest_to_cache(&loaded));
                        loaded
                    }
                    None => {
                        let loaded = load_manifest(&file, &sha, config).map(|(m, _)| m);
                        cache.set_manifest(&file, &sha, manifest_to_cache(&loaded));
                        loaded
                    }
                },
                LoadMode::Load if isolation.mode_of(&file) == Isolation::Process => {
                    // The runtime never maps an isolated plugin: its child does.
                    let loaded = private_copy(&file, &sha, config).and_then(|copy| isolation::ChildPlugin::start(&file, &copy, &sha)).map(|started| {
                        module = Some(PluginHandle::Process(started.plugin));
                        started.manifest
                    });
                    cache.set_manifest(&file, &sha, manifest_to_cache(&loaded));
                    loaded
                }
                LoadMode::Load => {
                    let loaded = load_manifest(&file, &sha, config).map(|(m, loaded_module)| {
                        module = Some(PluginHandle::InProcess(loaded_module));
                        m
                    });
                    cache.set_manifest(&file, &sha, manifest_to_cache(&loaded));
                    loaded
                }
            };
            match manifest {
                Ok(manifest) => {
                    let duplicate_name = reports.iter().any(|r: &PluginReport| r.error.is_none() && r.manifest.as_ref().is_some_and(|m| m.name == manifest.name));
                    if duplicate_name {
                        report.error = Some(refusal("plugin_name_conflict", &file, format!("another loaded plugin is already named `{}`", manifest.name)));
                    } else if let Some(reason) = (!schemas_known_good).then(|| catalog::check_manifest(&manifest).err()).flatten() {
                        report.error = Some(refusal("plugin_manifest_invalid", &file, format!("its manifest is invalid: {reason}")));
                    } else if let Err(e) = registry.add_plugin_checked(&manifest.name, &file, &manifest, schemas_known_good) {
                        report.error = Some(e);
                    } else {
                        if !schemas_known_good {
                            // Remember that these exact bytes' schemas compiled.
                            cache.set_manifest(&file, &sha, json!({"manifest": &manifest, "schemasCompiled": true, "checkedBy": host_sha}));
                        }
                        if let Some(module) = module {
                            modules.insert(manifest.name.clone(), module);
                        }
                    }
                    report.manifest = Some(manifest);
                }
                Err(e) => report.error = Some(e),
            }
            reports.push(report);
        }
        cache.save();
        let engines = EngineCatalog::from_manifests(reports.iter().filter(|r| r.error.is_none()).filter_map(|r| r.manifest.as_ref()));
        for b in builtins::engine_builtins(&engines) {
            handlers.insert(b.spec.command.clone(), b.handler);
            registry.add_host(b.spec);
        }
        let mut catalog = Catalog { registry, reports, modules, isolation, file_digests, bundle_digest, engines, handlers };
        // Discovery narrowing of `intent decide` by the loaded Intent providers.
        let narrowing = crate::engines::intent::discovery_narrowing(&catalog.intent_providers());
        catalog.registry.set_narrowing(narrowing);
        catalog
    }

    /// The code fingerprint input for plugins: every candidate file and its sha256,
    /// plus the bundle manifest.
    pub fn plugin_fingerprint_lines(&self) -> String {
        let mut s = String::new();
        for (name, sha) in &self.file_digests {
            s.push_str(&format!("plugin {name} {sha}\n"));
        }
        if let Some(b) = &self.bundle_digest {
            s.push_str(&format!("bundle {b}\n"));
        }
        // A changed isolation choice must restart the runtime like changed code.
        for r in &self.reports {
            if self.isolation.mode_of(&r.file) == Isolation::Process {
                s.push_str(&format!("isolated {}\n", isolation::file_plugin_name(&r.file)));
            }
        }
        s
    }
}

fn refusal(code: &str, file: &Path, message: String) -> CommandError {
    CommandError::new(code, format!("plugin {}: {message}", file.display())).with_details(json!({"file": file.display().to_string()}))
}

fn manifest_to_cache(result: &Result<Manifest, CommandError>) -> Value {
    match result {
        Ok(m) => json!({"manifest": m}),
        Err(e) => json!({"error": e.to_json()}),
    }
}

fn manifest_from_cache(file: &Path, cached: &Value) -> Result<Manifest, CommandError> {
    if let Some(m) = cached.get("manifest") {
        // Straight from the borrowed tree: cloning it first doubled the client's
        // allocation work for every plugin on every CLI call.
        return Manifest::deserialize(m).map_err(|e| refusal("plugin_manifest_invalid", file, e.to_string()));
    }
    let e = cached.get("error").and_then(CommandError::from_json).unwrap_or_else(|| refusal("plugin_load_failed", file, "unknown cached failure".into()));
    Err(e)
}

/// Load a plugin from its private content-addressed copy and read its manifest.
fn load_manifest(file: &Path, sha: &str, config: &Config) -> Result<(Manifest, LoadedModule), CommandError> {
    let copy = private_copy(file, sha, config)?;
    load_checked(file, &copy)
}

/// ABI preflight, abi_stable layout check and manifest checks of `copy` (errors name `file`).
pub(crate) fn load_checked(file: &Path, copy: &Path) -> Result<(Manifest, LoadedModule), CommandError> {
    let module = loader::load(copy).map_err(|e| refusal(e.code, file, e.message))?;
    let manifest = module.manifest().map_err(|e| refusal(e.code, file, e.message))?;
    Ok((manifest, module))
}

/// The plugin host child's load: the private copy must still hash to `sha` (the
/// digest the runtime checked against the bundle), then the same checks as in-process.
pub fn load_verified(copy: &Path, sha: &str) -> Result<(Manifest, LoadedModule), CommandError> {
    match file_sha256(copy) {
        Ok(actual) if actual == sha => load_checked(copy, copy),
        Ok(_) => Err(refusal("plugin_hash_mismatch", copy, "the plugin copy no longer matches the digest the runtime checked".into())),
        Err(e) => Err(refusal("plugin_load_failed", copy, format!("cannot read plugin copy: {e}"))),
    }
}

/// Copy the plugin to `<runtime_dir>/plugins/<sha>.so` and verify the copy's hash,
/// so the hashed bytes are exactly what gets loaded.
fn private_copy(file: &Path, sha: &str, config: &Config) -> Result<PathBuf, CommandError> {
    let dir = config.runtime_dir.join("plugins");
    crate::config::ensure_private_dir(&dir)?;
    let target = dir.join(format!("{sha}{}", std::env::consts::DLL_SUFFIX));
    if target.exists() && file_sha256(&target).ok().as_deref() == Some(sha) {
        return Ok(target);
    }
    let tmp = dir.join(format!(".{sha}.{}.tmp", std::process::id()));
    std::fs::copy(file, &tmp).map_err(|e| refusal("plugin_load_failed", file, format!("cannot copy plugin: {e}")))?;
    let copied = file_sha256(&tmp).map_err(|e| refusal("plugin_load_failed", file, format!("cannot hash plugin copy: {e}")))?;
    if copied != sha {
        let _ = std::fs::remove_file(&tmp);
        return Err(refusal("plugin_hash_mismatch", file, "the plugin file changed while it was being loaded".into()));
    }
    std::fs::rename(&tmp, &target).map_err(|e| refusal("plugin_load_failed", file, format!("cannot place plugin copy: {e}")))?;
    Ok(target)
}

/// `aab plugins list`: each plugin with name, version, file, sha256, command count
/// and status. Loads plugins in this process (it never starts the runtime).
pub fn list_report() -> PublicReply {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => return crate::reply::rejection(Some("plugins"), &e),
    };
    let mut cache = DigestCache::open(config.runtime_home.join("digest-cache.json"));
    let catalog = Catalog::build(&config, &mut cache, LoadMode::Load);
    let installs = install::read_installs(&config.plugin_dir);
    let dir_bundle = match bundle::read_bundle_bytes(&config.plugin_dir) {
        Ok(Some(bytes)) => bundle::parse_bundle_manifest(&config.plugin_dir, &bytes).ok(),
        _ => None,
    };
    let plugins: Vec<Value> = catalog
        .reports
        .iter()
        .map(|r| {
            let mut v = r.to_json(&catalog.registry);
            v["isolation"] = json!(catalog.isolation.mode_of(&r.file).as_str());
            // Where the file came from: a bundle (id, version) or a loose file.
            v["source"] = install::source_of(&installs, dir_bundle.as_ref(), &r.file, r.sha256.as_deref());
            v
        })
        .collect();
    let refused = catalog.reports.iter().filter(|r| r.error.is_some()).count();
    let value = json!({
        "ok": true,
        "command": "plugins",
        "operation": "list",
        "pluginDir": config.plugin_dir.display().to_string(),
        "bundle": config.plugin_dir.join(BUNDLE_MANIFEST).exists(),
        "pluginDirError": catalog.registry.missing_commands_cause().map(CommandError::to_json),
        "isolationError": catalog.isolation.problem,
        "plugins": plugins,
        "loaded": catalog.reports.len() - refused,
        "refused": refused,
        "hostCommands": catalog.registry.iter().filter(|c| c.origin == crate::registry::CommandOrigin::Host).count(),
    });
    crate::reply::local_value("plugins", value)
}
