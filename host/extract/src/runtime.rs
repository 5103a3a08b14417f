//! Where extraction finds its runtimes and puts its temp dirs ([`Settings`]), and
//! the lookup of a language's executable: the configured one
//! (`AI_APP_BRIDGE_NODE` / `AI_APP_BRIDGE_PYTHON`) or the first default name on
//! `PATH`. The result is an absolute path, because the child runs with a cleared
//! environment and a temp dir as cwd.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::{ExtractError, Language, codes};

/// Which runtime executables to use and where temp dirs go. An unset (or empty)
/// runtime means "search `search_path` for the default names": `node`;
/// `python3`, then `python`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// A path (anything containing `/`) or a name to look up on `search_path`.
    pub node: Option<OsString>,
    pub python: Option<OsString>,
    /// The `PATH` to search, `:`-separated.
    pub search_path: Option<OsString>,
    /// Parent of the per-call `aab-extract-*` directories; `None` = the system
    /// temp dir (`$TMPDIR`, else `/tmp`).
    pub temp_dir: Option<PathBuf>,
}

impl Settings {
    /// `$AI_APP_BRIDGE_NODE`, `$AI_APP_BRIDGE_PYTHON` and `$PATH` of this process,
    /// and the system temp dir.
    pub fn from_env() -> Settings {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Settings {
            node: var(Language::JavaScript.env_var()),
            python: var(Language::Python.env_var()),
            search_path: var("PATH"),
            temp_dir: None,
        }
    }

    fn configured(&self, language: Language) -> Option<&OsStr> {
        match language {
            Language::JavaScript => self.node.as_deref(),
            Language::Python => self.python.as_deref(),
        }
        .filter(|v| !v.is_empty())
    }

    /// The absolute path of the runtime for `language`.
    pub(crate) fn resolve(&self, language: Language) -> Result<PathBuf, ExtractError> {
        let names: Vec<&OsStr> = match self.configured(language) {
            Some(configured) => vec![configured],
            None => match language {
                Language::JavaScript => vec![OsStr::new("node")],
                Language::Python => vec![OsStr::new("python3"), OsStr::new("python")],
            },
        };
        for name in &names {
            let found = if name.as_bytes().contains(&b'/') {
                Some(PathBuf::from(name)).filter(|p| is_executable(p))
            } else {
                self.search(name)
            };
            if let Some(path) = found {
                return Ok(std::path::absolute(&path).unwrap_or(path));
            }
        }
        let wanted: Vec<String> = names.iter().map(|n| n.to_string_lossy().into_owned()).collect();
        let message = match self.configured(language) {
            Some(configured) => format!(
                "{} is set to {}, which is not an executable file (or not found on PATH)",
                language.env_var(),
                configured.to_string_lossy()
            ),
            None => format!(
                "no {} runtime found: none of {} is on PATH; install it or set {}",
                language.name(),
                wanted.join(", "),
                language.env_var()
            ),
        };
        Err(ExtractError::new(codes::RUNTIME_UNAVAILABLE, message)
            .with("language", language.name())
            .with("tried", wanted))
    }

    fn search(&self, name: &OsStr) -> Option<PathBuf> {
        let path = self.search_path.as_deref()?;
        std::env::split_paths(path)
            .map(|dir| if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir })
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    }
}

pub(crate) fn is_executable(path: &Path) -> bool {
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}
