//! Installing and removing bundled plugins (`aab plugins install BUNDLE`,
//! `aab plugins remove NAME`) and where each plugin file came from.
//!
//! Install verifies the whole bundle before the plugin directory changes: every
//! listed file's sha256 (and no unlisted plugin file), the bundle's platform, and
//! each plugin's ABI major and plugin-API range by loading a staged copy with the
//! runtime's own checks, in an `aab plugin-host` child (plugin code never runs in the
//! installing process). Files are staged in a hidden directory inside the plugin
//! directory (same filesystem), re-hashed, then renamed into place, so a refused or
//! interrupted install never leaves a half-written plugin. What was installed from
//! which bundle is recorded in `aab-installed.json`; when the plugin directory is
//! itself a bundle (carries `aab-bundle.json`), its entries are updated too, or the
//! runtime would refuse the new files as unlisted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::bundle::{self, BUNDLE_MANIFEST, BundleManifest};
use crate::client::PublicReply;
use crate::config::Config;
use crate::digest::file_sha256;
use crate::error::CommandError;

pub const INSTALLS_FILE: &str = "aab-installed.json";
pub const INSTALLS_SCHEMA: &str = "aab.plugin-installs/v1";

/// `aab-installed.json`: one record per plugin file installed from a bundle.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installs {
    pub schema: String,
    pub plugins: Vec<InstallRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstallRecord {
    pub file: String,
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub bundle_id: String,
    pub bundle_version: String,
    pub bundle_manifest_sha256: String,
    pub installed_at_ms: u64,
}

/// Largest `aab-installed.json` read.
const MAX_INSTALLS_BYTES: u64 = 4 * 1024 * 1024;

/// The install records of `dir` (none when the file is absent or unreadable: the
/// records only describe provenance, the bundle manifest decides trust).
pub fn read_installs(dir: &Path) -> Installs {
    crate::fsread::read_regular_bounded(&dir.join(INSTALLS_FILE), MAX_INSTALLS_BYTES)
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice::<Installs>(&bytes).ok())
        .filter(|i| i.schema == INSTALLS_SCHEMA)
        .unwrap_or_else(|| Installs { schema: INSTALLS_SCHEMA.into(), plugins: Vec::new() })
}

/// Where the plugin file `file` (sha256 `sha`) came from, for `aab plugins list`:
/// the bundle it was installed from, the bundle the directory itself is, or a loose
/// file.
pub fn source_of(installs: &Installs, dir_bundle: Option<&BundleManifest>, file: &Path, sha: Option<&str>) -> Value {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if let Some(r) = installs.plugins.iter().find(|r| r.file == name && Some(r.sha256.as_str()) == sha) {
        return json!({"kind": "bundle", "bundleId": r.bundle_id, "bundleVersion": r.bundle_version, "installedAtMs": r.installed_at_ms});
    }
    match dir_bundle {
        Some(b) if b.plugins.iter().any(|p| p.file == name) => json!({"kind": "bundle", "bundleId": b.id, "bundleVersion": b.version, "installedAtMs": null}),
        _ => json!({"kind": "file"}),
    }
}

/// `aab plugins install BUNDLE`.
pub fn install_report(bundle_dir: &Path) -> PublicReply {
    match install(bundle_dir) {
        Ok(v) => crate::reply::local_value("plugins", v),
        Err(e) => crate::reply::rejection(Some("plugins"), &e),
    }
}

/// `aab plugins remove NAME`.
pub fn remove_report(name: &str) -> PublicReply {
    match remove(name) {
        Ok(v) => crate::reply::local_value("plugins", v),
        Err(e) => crate::reply::rejection(Some("plugins"), &e),
    }
}

/// Stages files in a hidden directory of the plugin directory; removed on drop, so
/// every refusal leaves the plugin directory as it was.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_failed(path: &Path, e: impl std::fmt::Display) -> CommandError {
    CommandError::new("plugin_install_failed", format!("{}: {e}", path.display())).with_details(json!({"path": path.display().to_string()}))
}

fn install(bundle_dir: &Path) -> Result<Value, CommandError> {
    let config = Config::from_env()?;
    let dest = config.plugin_dir.clone();
    if !dest.is_dir() {
        let e = std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory");
        return Err(super::plugin_dir_unavailable(&dest, &e));
    }
    // 1. The bundle's own integrity: manifest, every hash, nothing unlisted.
    let bytes = match bundle::read_bundle_bytes(bundle_dir) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(CommandError::new("plugin_bundle_invalid", format!("{} is not a plugin bundle: it has no {BUNDLE_MANIFEST}", bundle_dir.display()))
                .with_field("bundle")
                .with_details(json!({"bundle": bundle_dir.display().to_string()})));
        }
        Err(e) => return Err(e.with_field("bundle")),
    };
    let manifest = bundle::parse_bundle_manifest(bundle_dir, &bytes).map_err(|e| e.with_field("bundle"))?;
    let manifest_sha = crate::digest::sha256_hex(&bytes);
    bundle::verify(bundle_dir)?;
    if manifest.plugins.is_empty() {
        return Err(CommandError::new("plugin_bundle_invalid", format!("bundle {} lists no plugin", bundle_dir.display())).with_field("bundle"));
    }
    if let Some(platform) = &manifest.platform
        && platform != &bundle::platform()
    {
        return Err(CommandError::new("plugin_bundle_platform_mismatch", format!("bundle {} was built for {platform}; this host is {}", bundle_dir.display(), bundle::platform()))
            .with_details(json!({"bundlePlatform": platform, "hostPlatform": bundle::platform()})));
    }
    for entry in &manifest.plugins {
        if !super::is_plugin_file_name(&entry.file) || entry.file.contains('/') {
            return Err(CommandError::new("plugin_bundle_invalid", format!("bundle entry `{}` is not a plugin file name (libaab_plugin_<name>.so)", entry.file)).with_field("bundle"));
        }
    }

    // The plugin directory's own bundle manifest, if any, must be rewritable before
    // anything is copied (the commit below adds the new entries to it).
    let dir_bundle = match bundle::read_bundle_bytes(&dest).map_err(|e| e.with_field("pluginDir"))? {
        Some(bytes) => Some(bundle::parse_bundle_manifest(&dest, &bytes).map_err(|e| e.with_field("pluginDir"))?),
        None => None,
    };

    // 2. Stage copies next to their destination and check them as the runtime would.
    let staging = Staging(dest.join(format!(".aab-install-{}-{}", std::process::id(), crate::ids::now_ms())));
    std::fs::create_dir(&staging.0).map_err(|e| write_failed(&staging.0, e))?;
    let installs = read_installs(&dest);
    let mut staged = Vec::new();
    for entry in &manifest.plugins {
        let from = bundle_dir.join(&entry.file);
        let to = staging.0.join(&entry.file);
        std::fs::copy(&from, &to).map_err(|e| write_failed(&to, e))?;
        match file_sha256(&to) {
            Ok(sha) if sha == entry.sha256 => {}
            _ => {
                return Err(CommandError::new("plugin_hash_mismatch", format!("plugin {} changed while it was installed", from.display()))
                    .with_details(json!({"file": entry.file, "expected": entry.sha256})));
            }
        }
        // Loaded in a short-lived `aab plugin-host` child, never in this process: a
        // plugin whose load or manifest crashes ends that child, and the install stops
        // with `plugin_crashed` while the plugin directory stays as it was.
        let plugin = super::isolation::ChildPlugin::start(&from, &to, &entry.sha256)?.manifest;
        if plugin.name != entry.name {
            return Err(CommandError::new("plugin_bundle_invalid", format!("bundle entry {} says plugin `{}` but the file is plugin `{}`", entry.file, entry.name, plugin.name))
                .with_field("bundle")
                .with_details(json!({"file": entry.file, "listed": entry.name, "actual": plugin.name})));
        }
        let mut registry = crate::registry::Registry::new(crate::builtins::host_specs());
        registry.reserve(crate::builtins::ENGINE_COMMANDS);
        registry.add_plugin_checked(&plugin.name, &from, &plugin, false)?;
        // The engine data rules the catalog applies at load (execution targets, observation target schemas).
        crate::engines::catalog::check_manifest(&plugin).map_err(|reason| {
            CommandError::new("plugin_manifest_invalid", format!("plugin {}: its manifest is invalid: {reason}", from.display())).with_details(json!({"file": entry.file}))
        })?;
        // One plugin name, one file: a same-named plugin under another file name
        // would make the runtime refuse one of them.
        if let Some(other) = installs.plugins.iter().find(|r| r.name == plugin.name && r.file != entry.file) {
            return Err(CommandError::new("plugin_name_conflict", format!("plugin `{}` is already installed as {}; remove it first (`aab plugins remove {}`)", plugin.name, other.file, plugin.name))
                .with_details(json!({"name": plugin.name, "file": other.file})));
        }
        staged.push((entry.clone(), to, dest.join(&entry.file).exists()));
    }

    // 3. Commit: rename the verified copies into place, then record where they came from.
    let bundle_id = manifest.id.clone().unwrap_or_else(|| "unnamed".into());
    let bundle_version = manifest.version.clone().unwrap_or_else(|| manifest.host_version.clone());
    let now = crate::ids::now_ms();
    let mut records = installs;
    let mut installed = Vec::new();
    for (entry, path, replaced) in &staged {
        let target = dest.join(&entry.file);
        std::fs::rename(path, &target).map_err(|e| write_failed(&target, e))?;
        records.plugins.retain(|r| r.file != entry.file);
        records.plugins.push(InstallRecord {
            file: entry.file.clone(),
            name: entry.name.clone(),
            version: entry.version.clone(),
            sha256: entry.sha256.clone(),
            bundle_id: bundle_id.clone(),
            bundle_version: bundle_version.clone(),
            bundle_manifest_sha256: manifest_sha.clone(),
            installed_at_ms: now,
        });
        installed.push(json!({"file": entry.file, "name": entry.name, "version": entry.version, "sha256": entry.sha256, "replaced": replaced}));
    }
    write_installs(&dest, &records)?;
    if let Some(mut manifest) = dir_bundle.clone() {
        for (entry, _, _) in &staged {
            manifest.plugins.retain(|p| p.file != entry.file);
            manifest.plugins.push(entry.clone());
        }
        write_atomically(&dest.join(BUNDLE_MANIFEST), &serde_json::to_vec_pretty(&manifest).expect("bundle manifest serialises"))?;
    }
    Ok(json!({
        "ok": true, "command": "plugins", "operation": "install",
        "pluginDir": dest.display().to_string(),
        "bundle": {"dir": bundle_dir.display().to_string(), "id": bundle_id, "version": bundle_version, "manifestSha256": manifest_sha},
        "installed": installed,
        "pluginDirBundleUpdated": dir_bundle.is_some(),
        "note": "a running runtime answers runtime_code_mismatch until `aab runtime --operation stop`; the next call starts one with the new plugins",
    }))
}

fn remove(name: &str) -> Result<Value, CommandError> {
    if !aab_plugin_api::check::is_valid_command_name(name) {
        return Err(CommandError::invalid("name", format!("`{name}` is not a plugin name (lower-case kebab-case)")));
    }
    let config = Config::from_env()?;
    let dest = config.plugin_dir.clone();
    let mut records = read_installs(&dest);
    // Refuse before deleting anything if the directory's bundle manifest cannot be rewritten.
    let dir_bundle = match bundle::read_bundle_bytes(&dest).map_err(|e| e.with_field("pluginDir"))? {
        Some(bytes) => Some(bundle::parse_bundle_manifest(&dest, &bytes).map_err(|e| e.with_field("pluginDir"))?),
        None => None,
    };
    // The files of plugin `name`: recorded installs, the directory's bundle entries,
    // else the conventional file name.
    let mut files: Vec<String> = records.plugins.iter().filter(|r| r.name == name).map(|r| r.file.clone()).collect();
    if let Some(b) = &dir_bundle {
        files.extend(b.plugins.iter().filter(|p| p.name == name).map(|p| p.file.clone()));
    }
    let conventional = format!("{}aab_plugin_{}{}", std::env::consts::DLL_PREFIX, name.replace('-', "_"), std::env::consts::DLL_SUFFIX);
    if files.is_empty() && dest.join(&conventional).is_file() {
        files.push(conventional);
    }
    files.sort();
    files.dedup();
    files.retain(|f| super::is_plugin_file_name(f) && !f.contains('/'));
    if files.is_empty() {
        return Err(CommandError::new("plugin_not_installed", format!("no plugin `{name}` in {}", dest.display())).with_field("name").with_details(json!({"name": name, "pluginDir": dest.display().to_string()})));
    }
    let mut removed = Vec::new();
    for file in &files {
        let path = dest.join(file);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(file.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(write_failed(&path, e)),
        }
    }
    records.plugins.retain(|r| !files.contains(&r.file));
    write_installs(&dest, &records)?;
    if let Some(mut manifest) = dir_bundle.clone() {
        manifest.plugins.retain(|p| !files.contains(&p.file));
        write_atomically(&dest.join(BUNDLE_MANIFEST), &serde_json::to_vec_pretty(&manifest).expect("bundle manifest serialises"))?;
    }
    Ok(json!({
        "ok": true, "command": "plugins", "operation": "remove", "name": name,
        "pluginDir": dest.display().to_string(), "removed": removed, "pluginDirBundleUpdated": dir_bundle.is_some(),
    }))
}

fn write_installs(dir: &Path, installs: &Installs) -> Result<(), CommandError> {
    let path = dir.join(INSTALLS_FILE);
    if installs.plugins.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(write_failed(&path, e)),
            _ => Ok(()),
        };
    }
    let installs = Installs { schema: INSTALLS_SCHEMA.into(), plugins: installs.plugins.clone() };
    write_atomically(&path, &serde_json::to_vec_pretty(&installs).expect("install records serialise"))
}

/// Temp file in the same directory, fsync, rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CommandError> {
    use std::io::Write;
    let tmp = path.with_file_name(format!(".{}.{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("file"), std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_failed(path, e)
    })
}
