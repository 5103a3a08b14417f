//! Runtime identity: the code fingerprint (the host executable and the sha256 of
//! every plugin file in the plugin directory) and the configuration fingerprint. A
//! client whose installation or configuration differs from the running runtime's is
//! refused instead of being served by stale code.

use crate::config::Config;
use crate::digest::{DigestCache, sha256_hex};
use crate::error::CommandError;
use crate::plugins::Catalog;

use super::protocol::Identity;

pub fn code_fingerprint(cache: &mut DigestCache, catalog: &Catalog) -> Result<String, CommandError> {
    // Hash the running image through /proc/self/exe: it stays readable when the file
    // on disk was replaced (e.g. by a rebuild) after this process started.
    let exe = std::path::Path::new("/proc/self/exe");
    let (exe_sha, _) = cache.sha256(exe).map_err(|e| CommandError::new("runtime_start_failed", format!("cannot hash the running aab executable: {e}")))?;
    cache.save();
    let text = format!("aab-code/v1\nhost {exe_sha}\n{}", catalog.plugin_fingerprint_lines());
    Ok(sha256_hex(text.as_bytes()))
}

pub fn identity(config: &Config, cache: &mut DigestCache, catalog: &Catalog) -> Result<Identity, CommandError> {
    Ok(Identity { code: code_fingerprint(cache, catalog)?, config: config.fingerprint_with(&catalog.plugin_environment()) })
}
