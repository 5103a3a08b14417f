//! Plugin bundles: a directory of plugin files plus `aab-bundle.json`
//! (`aab.plugin-bundle/v1`), the sha256 of every file. A runtime whose plugin
//! directory carries this manifest only loads files whose bytes match it. The
//! bundle also names itself (`id`, `version`), the platform it was built for, and
//! per plugin the plugin-API range and ABI major it was checked with; fields added
//! by newer writers (e.g. an entry's `isolation`) are kept on rewrite.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{Catalog, LoadMode, scan};
use crate::client::PublicReply;
use crate::config::Config;
use crate::digest::{DigestCache, file_sha256};
use crate::error::CommandError;

pub const BUNDLE_MANIFEST: &str = "aab-bundle.json";
pub const BUNDLE_SCHEMA: &str = "aab.plugin-bundle/v1";

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleManifest {
    pub schema: String,
    /// Bundle identity shown by `aab plugins list` for what was installed from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub host_version: String,
    /// `<os>-<arch>` of the host that built and checked it (e.g. `linux-x86_64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    pub plugins: Vec<BundleEntry>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleEntry {
    pub file: String,
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub size: u64,
    /// The plugin's `pluginApi` semver range, as checked when bundled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_api: Option<String>,
    /// The plugin ABI major it was loaded with when bundled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abi_major: Option<u32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `<os>-<arch>` of this host, the platform a bundle built here is for.
pub fn platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

/// What `aab plugins bundle` packs and how it names the bundle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BundleOptions {
    pub out: std::path::PathBuf,
    /// Plugin directory to bundle (default: the configured one), e.g. `target/release`.
    pub from: Option<std::path::PathBuf>,
    pub id: Option<String>,
    pub version: Option<String>,
}

/// Largest bundle manifest read (it lists file names and hashes).
const MAX_BUNDLE_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;

/// The raw bytes of `<dir>/aab-bundle.json`, read once per catalog build (bounded,
/// regular file only): `Ok(None)` when there is none, `Err` for one that cannot be
/// read safely (FIFO, symlink, oversized).
pub fn read_bundle_bytes(dir: &Path) -> Result<Option<Vec<u8>>, CommandError> {
    let path = dir.join(BUNDLE_MANIFEST);
    crate::fsread::read_regular_bounded(&path, MAX_BUNDLE_MANIFEST_BYTES).map_err(|e| CommandError::new("plugin_bundle_invalid", format!("{}: {e}", path.display())))
}

/// The bundle manifest in `bytes` (read from `dir`); `Err` = one that cannot be trusted.
pub fn parse_bundle_manifest(dir: &Path, bytes: &[u8]) -> Result<BundleManifest, CommandError> {
    let path = dir.join(BUNDLE_MANIFEST);
    serde_json::from_slice::<BundleManifest>(bytes).map_err(|e| CommandError::new("plugin_bundle_invalid", format!("{}: {e}", path.display()))).and_then(|m| {
        if m.schema == BUNDLE_SCHEMA {
            Ok(m)
        } else {
            Err(CommandError::new("plugin_bundle_invalid", format!("{}: unsupported schema `{}`", path.display(), m.schema)))
        }
    })
}

/// Trust decision for one plugin file.
pub fn check_trust(bundle: Option<&Result<BundleManifest, CommandError>>, file_name: &str, sha: &str) -> Result<(), CommandError> {
    let Some(bundle) = bundle else { return Ok(()) };
    let bundle = bundle.as_ref().map_err(|e| e.clone())?;
    match bundle.plugins.iter().find(|p| p.file == file_name) {
        None => Err(CommandError::new("plugin_not_in_bundle", format!("plugin {file_name} is not listed in {BUNDLE_MANIFEST}; refusing to load it"))
            .with_details(json!({"file": file_name}))),
        Some(entry) if entry.sha256 != sha => Err(CommandError::new(
            "plugin_hash_mismatch",
            format!("plugin {file_name}: sha256 {sha} does not match {} recorded in {BUNDLE_MANIFEST}; refusing to load it", entry.sha256),
        )
        .with_details(json!({"file": file_name, "expected": entry.sha256, "actual": sha}))),
        Some(_) => Ok(()),
    }
}

/// `aab plugins bundle --out DIR [--from DIR] [--id ID] [--version V]`: copy every
/// loadable plugin into a new directory and write its sha256 manifest.
pub fn bundle_report(options: &BundleOptions) -> PublicReply {
    match bundle(options) {
        Ok(v) => crate::reply::local_value("plugins", v),
        Err(e) => crate::reply::rejection(Some("plugins"), &e),
    }
}

fn bundle(options: &BundleOptions) -> Result<Value, CommandError> {
    let out = options.out.as_path();
    let mut config = Config::from_env()?;
    if let Some(from) = &options.from {
        if !from.is_dir() {
            return Err(CommandError::new("invalid_argument", format!("{} is not a directory", from.display())).with_field("from"));
        }
        config.plugin_dir = from.clone();
    }
    if out.exists() {
        return Err(CommandError::new("invalid_argument", format!("{} already exists; a bundle is written to a new directory", out.display())).with_field("out"));
    }
    match out.parent() {
        Some(p) if p.as_os_str().is_empty() || p.is_dir() => {}
        _ => return Err(CommandError::new("invalid_argument", format!("the parent of {} must be an existing directory", out.display())).with_field("out")),
    }
    let mut cache = DigestCache::open(config.runtime_home.join("digest-cache.json"));
    let catalog = Catalog::build(&config, &mut cache, LoadMode::Load);
    std::fs::create_dir(out).map_err(|e| CommandError::new("bundle_write_failed", format!("cannot create {}: {e}", out.display())))?;
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for report in &catalog.reports {
        let (Some(manifest), Some(sha), None) = (&report.manifest, &report.sha256, &report.error) else {
            skipped.push(json!({"file": report.file.display().to_string(), "error": report.error.as_ref().map(|e| e.to_json())}));
            continue;
        };
        let file_name = report.file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let target = out.join(&file_name);
        std::fs::copy(&report.file, &target).map_err(|e| CommandError::new("bundle_write_failed", format!("cannot copy {}: {e}", report.file.display())))?;
        let copied = file_sha256(&target).map_err(|e| CommandError::new("bundle_write_failed", e.to_string()))?;
        if &copied != sha {
            return Err(CommandError::new("plugin_hash_mismatch", format!("{} changed while it was bundled", report.file.display())));
        }
        entries.push(BundleEntry {
            file: file_name,
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            sha256: copied,
            size: report.size.unwrap_or(0),
            plugin_api: Some(manifest.plugin_api.clone()),
            abi_major: Some(aab_plugin_api::abi::ABI_MAJOR),
            extra: Map::new(),
        });
    }
    let manifest = BundleManifest {
        schema: BUNDLE_SCHEMA.into(),
        id: Some(options.id.clone().unwrap_or_else(|| "aab-plugins".into())),
        version: Some(options.version.clone().unwrap_or_else(|| crate::HOST_VERSION.into())),
        host_version: crate::HOST_VERSION.into(),
        platform: Some(platform()),
        plugins: entries,
        extra: Map::new(),
    };
    let bytes = serde_json::to_vec_pretty(&manifest).expect("bundle manifest serialises");
    std::fs::write(out.join(BUNDLE_MANIFEST), &bytes).map_err(|e| CommandError::new("bundle_write_failed", e.to_string()))?;
    Ok(json!({
        "ok": true, "command": "plugins", "operation": "bundle",
        "bundleDir": out.display().to_string(),
        "pluginDir": config.plugin_dir.display().to_string(),
        "id": manifest.id, "version": manifest.version, "platform": manifest.platform,
        "manifest": BUNDLE_MANIFEST,
        "manifestSha256": crate::digest::sha256_hex(&bytes),
        "plugins": manifest.plugins,
        "skipped": skipped,
    }))
}

/// `aab plugins verify DIR`: recompute every hash of a bundle, offline.
pub fn verify_report(dir: &Path) -> PublicReply {
    match verify(dir) {
        Ok(v) => crate::reply::local_value("plugins", v),
        Err(e) => crate::reply::rejection(Some("plugins"), &e),
    }
}

pub(super) fn verify(dir: &Path) -> Result<Value, CommandError> {
    let manifest = match read_bundle_bytes(dir)? {
        None => return Err(CommandError::new("plugin_bundle_invalid", format!("{} has no {BUNDLE_MANIFEST}", dir.display())).with_field("dir")),
        Some(bytes) => parse_bundle_manifest(dir, &bytes)?,
    };
    let mut results = Vec::new();
    let mut problems = Vec::new();
    for entry in &manifest.plugins {
        let path = dir.join(&entry.file);
        let status = match file_sha256(&path) {
            Err(_) => "missing",
            Ok(sha) if sha != entry.sha256 => "hash_mismatch",
            Ok(_) => "ok",
        };
        if status != "ok" {
            problems.push(entry.file.clone());
        }
        results.push(json!({"file": entry.file, "name": entry.name, "sha256": entry.sha256, "status": status}));
    }
    for file in scan(dir).unwrap_or_default() {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if !manifest.plugins.iter().any(|p| p.file == name) {
            problems.push(name.clone());
            results.push(json!({"file": name, "status": "unlisted"}));
        }
    }
    if !problems.is_empty() {
        return Err(CommandError::new("plugin_hash_mismatch", format!("bundle {} does not verify: {}", dir.display(), problems.join(", ")))
            .with_details(json!({"plugins": results})));
    }
    Ok(json!({"ok": true, "command": "plugins", "operation": "verify", "bundleDir": dir.display().to_string(), "plugins": results}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_of_older_and_newer_writers_round_trip() {
        // A manifest from before bundle identity and per-plugin checks parses...
        let old = br#"{"schema":"aab.plugin-bundle/v1","hostVersion":"0.1.0","plugins":[{"file":"libaab_plugin_web.so","name":"web","version":"0.1.0","sha256":"ab","size":1}]}"#;
        let m = parse_bundle_manifest(Path::new("/b"), old).unwrap();
        assert_eq!((m.id.as_deref(), m.plugins[0].plugin_api.as_deref()), (None, None));
        // ...and fields this host does not know (an entry's `isolation`) survive a rewrite.
        let newer = br#"{"schema":"aab.plugin-bundle/v1","id":"x","hostVersion":"0.1.0","future":1,"plugins":[{"file":"f","name":"n","version":"1","sha256":"ab","size":1,"isolation":"process"}]}"#;
        let m = parse_bundle_manifest(Path::new("/b"), newer).unwrap();
        let again = serde_json::to_value(&m).unwrap();
        assert_eq!((again["future"].clone(), again["plugins"][0]["isolation"].clone(), again["id"].clone()), (json!(1), json!("process"), json!("x")));
        assert!(parse_bundle_manifest(Path::new("/b"), br#"{"schema":"other/v1","hostVersion":"0","plugins":[]}"#).is_err());
    }
}
