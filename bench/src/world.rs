//! A bench's private aab world: the `aab` command of one private directory
//! (runtime home, FactStore, plugins, ownership journals, `HOME`), with none of the
//! caller's aab configuration leaking in. Shared by the bench binaries that drive
//! the CLI (each binary declares `mod world;`).

use std::path::Path;
use std::process::{Command, Stdio};

/// `<bin>/aab ARGS` in the private world rooted at `root`.
pub fn aab_command(bin: &Path, root: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin.join("aab"));
    c.args(args).current_dir(root).stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("AI_APP_BRIDGE_") || k.starts_with("AAB_") {
            c.env_remove(&key);
        }
    }
    c.env("HOME", root.join("home"))
        .env("AI_APP_BRIDGE_RUNTIME_HOME", root.join("runtimes"))
        .env("AI_APP_BRIDGE_FACT_STORE_DIR", root.join("facts"))
        .env("AI_APP_BRIDGE_PLUGIN_DIR", root.join("plugins"))
        .env("AI_APP_BRIDGE_DEVICE_OWNERSHIP_DIR", root.join("ownership"));
    c
}
