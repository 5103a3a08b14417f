//! Resolved configuration of one client or runtime: where facts, runtime records,
//! plugins and ownership journals live, and the configuration fingerprint that a
//! client must share with the runtime it talks to.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::digest::sha256_hex;
use crate::error::CommandError;

/// Environment variables that change what the host itself does; part of the
/// configuration fingerprint. Plugins add their own (`Manifest::environment`, see
/// [`Config::fingerprint_with`]): the host names no platform's variables.
pub const FINGERPRINT_ENV: &[&str] = &[
    "AI_APP_BRIDGE_FACT_CACHE",
    "AI_APP_BRIDGE_PYTHON",
    "AI_APP_BRIDGE_NODE",
    "AI_APP_BRIDGE_EXECUTOR_HOME",
];

#[derive(Clone, Debug)]
pub struct Config {
    /// Canonical FactStore directory (may not exist yet).
    pub facts_dir: PathBuf,
    pub runtime_home: PathBuf,
    /// `<runtime_home>/<sha256(facts_dir)>`: endpoint record, owner lock, log.
    pub runtime_dir: PathBuf,
    pub plugin_dir: PathBuf,
    pub ownership_dir: PathBuf,
    pub profile: String,
    pub environment: BTreeMap<String, Option<String>>,
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"))
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Canonicalise a path that may not exist yet: resolve the longest existing prefix
/// with realpath, then append the rest lexically.
pub fn canonical_path(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")).join(path) };
    let mut existing = absolute.clone();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return normalise(&out);
        }
        match (existing.file_name().map(|s| s.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return normalise(&absolute),
        }
    }
}

fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl Config {
    pub fn from_env() -> Result<Config, CommandError> {
        let facts = env_path("AI_APP_BRIDGE_FACT_STORE_DIR").unwrap_or_else(|| {
            let cache = env_path("XDG_CACHE_HOME").unwrap_or_else(|| home_dir().join(".cache"));
            cache.join("ai-app-bridge").join("facts")
        });
        let facts_dir = canonical_path(&facts);
        let runtime_home = canonical_path(&env_path("AI_APP_BRIDGE_RUNTIME_HOME").unwrap_or_else(|| home_dir().join(".ai-app-bridge").join("runtimes").join("v1")));
        // Every client keeps its digest cache and plugin copies there: a home that
        // can never be a directory is a configuration error, not a missing command.
        check_directory_path("AI_APP_BRIDGE_RUNTIME_HOME", &runtime_home)?;
        let key = sha256_hex(facts_dir.as_os_str().as_encoded_bytes());
        let runtime_dir = runtime_home.join(&key);
        let plugin_dir = match env_path("AI_APP_BRIDGE_PLUGIN_DIR") {
            Some(p) => canonical_path(&p),
            None => {
                let exe = std::env::current_exe().map_err(|e| CommandError::new("runtime_start_failed", format!("cannot locate the aab executable: {e}")))?;
                canonical_path(exe.parent().unwrap_or(Path::new("/")))
            }
        };
        let ownership_dir = canonical_path(&env_path("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR").unwrap_or_else(|| home_dir().join(".ai-app-bridge").join("device-ownership").join("v1")));
        let profile = std::env::var("AI_APP_BRIDGE_FACT_CACHE_PROFILE").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "standard".to_string());
        if !matches!(profile.as_str(), "small" | "standard" | "large") {
            return Err(CommandError::new("invalid_fact_store_profile", format!("AI_APP_BRIDGE_FACT_CACHE_PROFILE must be small, standard or large, got `{profile}`"))
                .with_field("AI_APP_BRIDGE_FACT_CACHE_PROFILE"));
        }
        check_fact_cache_switch()?;
        let environment = FINGERPRINT_ENV.iter().map(|name| (name.to_string(), std::env::var(name).ok())).collect();
        Ok(Config { facts_dir, runtime_home, runtime_dir, plugin_dir, ownership_dir, profile, environment })
    }

    /// sha256 of the configuration facts a client and its runtime must share,
    /// including the values of the environment variables the loaded plugins declare
    /// (both sides load the same plugins: the code fingerprint guarantees it).
    pub fn fingerprint_with(&self, plugin_environment: &[&str]) -> String {
        let mut environment = self.environment.clone();
        for name in plugin_environment {
            environment.entry(name.to_string()).or_insert_with(|| std::env::var(name).ok());
        }
        let doc = json!({
            "facts": self.facts_dir.display().to_string(),
            "profile": self.profile,
            "ownership": self.ownership_dir.display().to_string(),
            "plugins": self.plugin_dir.display().to_string(),
            "environment": environment,
        });
        sha256_hex(aab_facts::canonical::to_canonical_string(&doc).as_bytes())
    }

    pub fn endpoint_path(&self) -> PathBuf {
        self.runtime_dir.join("endpoint.json")
    }

    pub fn lock_path(&self) -> PathBuf {
        self.runtime_dir.join("owner.sqlite")
    }

    pub fn log_path(&self) -> PathBuf {
        self.runtime_dir.join("runtime.log")
    }

    /// Create the runtime directory (0700) and check it is ours.
    pub fn ensure_runtime_dir(&self) -> Result<(), CommandError> {
        ensure_private_dir(&self.runtime_dir)
    }
}

/// `invalid_configuration` naming `variable` unless `path` is a directory or can
/// become one: its nearest existing ancestor (or itself) must be a directory.
fn check_directory_path(variable: &str, path: &Path) -> Result<(), CommandError> {
    let mut existing = path;
    let metadata = loop {
        match std::fs::metadata(existing) {
            Ok(metadata) => break metadata,
            Err(_) => match existing.parent() {
                Some(parent) => existing = parent,
                None => return Ok(()),
            },
        }
    };
    if metadata.is_dir() {
        return Ok(());
    }
    let what = if existing == path { "is not a directory".to_string() } else { format!("cannot be created: {} is not a directory", existing.display()) };
    Err(CommandError::new("invalid_configuration", format!("{variable} must name a directory, but {} {what}", path.display()))
        .with_field(variable)
        .with_details(json!({"variable": variable, "path": path.display().to_string(), "notADirectory": existing.display().to_string()})))
}

/// `AI_APP_BRIDGE_FACT_CACHE` is a switch: unset/empty or `on` records command
/// history, `off` disables it (case-insensitive). Anything else is refused rather
/// than silently read as `on`.
fn check_fact_cache_switch() -> Result<(), CommandError> {
    const VARIABLE: &str = "AI_APP_BRIDGE_FACT_CACHE";
    let Some(value) = std::env::var_os(VARIABLE) else { return Ok(()) };
    let text = value.to_string_lossy();
    if text.is_empty() || text.eq_ignore_ascii_case("on") || text.eq_ignore_ascii_case("off") {
        return Ok(());
    }
    Err(CommandError::new("invalid_configuration", format!("{VARIABLE} must be `on` or `off`, got {}", serde_json::Value::String(text.chars().take(64).collect())))
        .with_field(VARIABLE)
        .with_details(json!({"variable": VARIABLE, "allowed": ["on", "off"]})))
}

/// Create `dir` (and parents) with mode 0700 and refuse one owned by someone else
/// or open to others (`runtime_directory_unsafe`).
pub fn ensure_private_dir(dir: &Path) -> Result<(), CommandError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| {
        CommandError::new("runtime_directory_unsafe", format!("cannot create {}: {e}", dir.display())).with_details(json!({"path": dir.display().to_string()}))
    })?;
    let meta = std::fs::metadata(dir).map_err(|e| CommandError::new("runtime_directory_unsafe", format!("cannot inspect {}: {e}", dir.display())))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(CommandError::new("runtime_directory_unsafe", format!("{} is owned by uid {}, not by the current user {uid}", dir.display(), meta.uid()))
            .with_details(json!({"path": dir.display().to_string()})));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| CommandError::new("runtime_directory_unsafe", format!("cannot restrict {}: {e}", dir.display())))?;
    }
    Ok(())
}
