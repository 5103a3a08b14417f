//! The hang watchdog of the e2e binary. A test that never ends would hold the
//! whole suite (and CI) until its outer time limit, and libtest would print
//! nothing about it but one "has been running for over 60 seconds" line. Every
//! [`crate::TestEnv`] registers here; a background thread names any test that
//! outlives [`WARN_AFTER`] with the commands it ran, and once one outlives the
//! hang limit it prints the process table and aborts the binary, so the run
//! ends in bounded time with the culprit at the end of the output.
//!
//! `AAB_E2E_HANG_LIMIT_SECS` overrides the limit (0 disables the abort).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// No test of this suite legitimately takes this long on a 2-core machine.
const HANG_LIMIT: Duration = Duration::from_secs(15 * 60);
const WARN_AFTER: Duration = Duration::from_secs(8 * 60);
const TICK: Duration = Duration::from_secs(15);

struct Entry {
    test: String,
    started: Instant,
    history: Arc<Mutex<Vec<String>>>,
    /// `AI_APP_BRIDGE_RUNTIME_HOME=<dir>`: what the test's processes carry in their environment.
    env_marker: String,
    warned: bool,
}

static ACTIVE: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static START: Once = Once::new();

/// Registered while alive (a `TestEnv` holds one).
pub struct Guard(u64);

impl Drop for Guard {
    fn drop(&mut self) {
        ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.0);
    }
}

/// Register the current test (libtest names its thread after the test).
pub fn enter(history: Arc<Mutex<Vec<String>>>, env_marker: String) -> Guard {
    START.call_once(|| {
        let _ = std::thread::Builder::new().name("aab-e2e-watchdog".into()).spawn(watch);
    });
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let test = std::thread::current().name().unwrap_or("<unnamed thread>").to_string();
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Entry { test, started: Instant::now(), history, env_marker, warned: false });
    Guard(id)
}

fn limit() -> Option<Duration> {
    match std::env::var("AAB_E2E_HANG_LIMIT_SECS").ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(s)),
        None => Some(HANG_LIMIT),
    }
}

fn describe(e: &Entry) -> String {
    let history = e.history.lock().unwrap_or_else(|p| p.into_inner());
    let tail: Vec<&String> = history.iter().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
    let cmds: String = tail.iter().map(|c| format!("\n    {c}")).collect();
    format!("{} (running {:?}; {} commands, the last ones:{cmds})", e.test, e.started.elapsed(), history.len())
}

/// Straight to the process's stderr: `eprintln!` in a thread spawned by a test
/// goes to that test's captured output, which an abort never prints.
fn say(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
    let _ = err.flush();
}

fn watch() {
    let limit = limit();
    loop {
        std::thread::sleep(TICK);
        let mut hung = None;
        {
            let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
            for e in active.values_mut() {
                if !e.warned && e.started.elapsed() > WARN_AFTER {
                    e.warned = true;
                    say(&format!("aab-e2e watchdog: still running: {}", describe(e)));
                }
                if limit.is_some_and(|l| e.started.elapsed() > l) && hung.is_none() {
                    hung = Some(describe(e));
                }
            }
        }
        if let Some(what) = hung {
            let ps = std::process::Command::new("ps").args(["-eo", "pid,ppid,stat,etime,args"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            let others: Vec<String> = ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).values().map(describe).collect();
            say(&format!("aab-e2e watchdog: a test outlived the hang limit {limit:?}: {what}\nall running tests:\n  {}\nprocesses:\n{ps}\naborting the e2e binary so the run ends.", others.join("\n  ")));
            // No destructor runs after abort: end the tests' processes (runtimes, the adb
            // servers they started) here, so the aborted run leaves nothing behind.
            let markers: Vec<String> = ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).values().map(|e| e.env_marker.clone()).collect();
            kill_marked(&markers);
            std::process::abort();
        }
    }
}

/// SIGKILL every other process whose environment carries one of `markers`.
fn kill_marked(markers: &[String]) {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(e.path().join("environ")) else { continue };
        if environ.split(|b| *b == 0).any(|var| markers.iter().any(|m| var == m.as_bytes())) {
            // SAFETY: a plain syscall on a process of an aborting test.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}
