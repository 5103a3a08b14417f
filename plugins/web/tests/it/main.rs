//! In-crate integration tests of the Web plugin's `web-executor`: the built
//! cdylib under the host's own loader and validator, against real headless
//! Chromium (engine cdp) and real chromedriver (engine webdriver), with ground
//! truth from the page server's request log and from the page over CDP.

mod harness;
mod pages;

mod appium;
mod cdp;
mod grid;
mod recovery;
mod schema;
mod webdriver;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use harness::{Plugin, Store};
use serde_json::Value;

/// This binary's scratch directory (removed by the OS's temp cleanup; small).
pub fn scratch() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("aab-web-executor-it-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
    .clone()
}

/// The plugin instance most tests share ("runtime A").
pub fn plugin() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| Plugin::load(&harness::cdylib(), &scratch().join("data-a"), "epoch-A", Arc::new(Store::default())))
}

/// A tag unique to one test, so its log lines and sessions are its own.
pub fn tag(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

pub fn process_alive(pid: u64) -> bool {
    // A reaped process has no /proc entry; a zombie would still show `Z`.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2).is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

pub fn controls(observed: &Value) -> Vec<Value> {
    observed["controls"].as_array().cloned().unwrap_or_default()
}

/// The observed control with this DOM id.
pub fn control<'a>(observed: &'a Value, dom_id: &str) -> &'a Value {
    observed["controls"].as_array().and_then(|l| l.iter().find(|c| c["id"] == dom_id)).unwrap_or_else(|| panic!("no control #{dom_id} in {observed}"))
}
