//! What the simulator demos (`aab demo android`, `aab demo ios`) share: their
//! failure type, finding a helper program, and stopping what they started (the
//! private runtime and the simulator child). Each demo keeps its own messages and
//! passes them in, so both print exactly what they printed before.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Why a demo stopped early; printed once as `<demo> failed: <why>`.
pub struct Failure(pub String);

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

/// A program next to this `aab` binary, else on PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join(name))).filter(|p| p.is_file());
    beside.or_else(|| std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file()))
}

/// Ask the demo's runtime to stop through `stop` (one `runtime stop` call); true
/// when it stopped. A runtime still coming up answers `runtime_starting`, so that
/// is asked again a few times; any other failure is reported as
/// `<demo>: runtime stop failed: …` and gives up.
pub fn stop_runtime(demo: &str, mut stop: impl FnMut() -> Result<Value, Value>) -> bool {
    for attempt in 1..=5 {
        match stop() {
            Ok(_) => return true,
            Err(e) if e["error"] == json!("runtime_starting") && attempt < 5 => std::thread::sleep(Duration::from_secs(2)),
            Err(e) => {
                eprintln!("{demo}: runtime stop failed: {e}");
                return false;
            }
        }
    }
    false
}

/// Stop a simulator child started in its own process group: SIGTERM first, so it
/// can end what it started itself; if it is still alive after 10 s, SIGKILL the
/// whole group (its children with it); then reap it.
pub fn stop_simulator(mut child: Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).stderr(Stdio::null()).status();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).stderr(Stdio::null()).status();
    }
    let _ = child.wait();
}
