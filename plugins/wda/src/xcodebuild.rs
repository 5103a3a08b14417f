//! The two `xcodebuild` runs of `ios-setup` (protocols §5.1), exactly:
//! `xcodebuild -project <prepared>/WebDriverAgent.xcodeproj -scheme WebDriverAgentRunner
//! -sdk iphoneos -destination id=<udid> -derivedDataPath <dir>/build DEVELOPMENT_TEAM=<team>
//! PRODUCT_BUNDLE_IDENTIFIER=<wdaTestBundleId> ENABLE_DEFAULT_HEADER_SEARCH_PATHS=NO
//! -allowProvisioningUpdates build-for-testing | test-without-building`.
//!
//! `build-for-testing` runs on the host to completion inside the deadline.
//! `test-without-building` starts the Runner on the device and keeps running while
//! the XCTest runs, so it is started in its OWN process group (detached from the
//! runtime's) with its output in a log file, and reaped by a background task.
//! Only process groups this module started are ever signalled: a Runner some other
//! process started is never killed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use aab_ios_transport::Deadline;
use aab_plugin_api::ProviderError;
use serde_json::json;

use crate::manifest::XCODEBUILD_ENV;

pub const XCODEBUILD_UNAVAILABLE: &str = "ios_xcodebuild_unavailable";
/// How much of a log an error message quotes.
const LOG_TAIL_BYTES: u64 = 8 * 1024;

/// The program: explicit argument, else `$AI_APP_BRIDGE_XCODEBUILD`, else `xcodebuild`.
pub fn resolve(explicit: Option<&str>) -> PathBuf {
    let env = std::env::var(XCODEBUILD_ENV).ok().filter(|v| !v.is_empty());
    PathBuf::from(explicit.map(str::to_string).or(env).unwrap_or_else(|| "xcodebuild".into()))
}

/// What both runs share.
pub struct Invocation<'a> {
    pub program: &'a Path,
    pub project_dir: &'a Path,
    pub udid: &'a str,
    pub derived_data: &'a Path,
    pub team_id: &'a str,
    pub test_bundle_id: &'a str,
}

impl Invocation<'_> {
    /// The contract's argument list for `action`.
    pub fn args(&self, action: &str) -> Vec<String> {
        vec![
            "-project".into(),
            self.project_dir.join(crate::prepared::PROJECT_DIR).display().to_string(),
            "-scheme".into(),
            "WebDriverAgentRunner".into(),
            "-sdk".into(),
            "iphoneos".into(),
            "-destination".into(),
            format!("id={}", self.udid),
            "-derivedDataPath".into(),
            self.derived_data.display().to_string(),
            format!("DEVELOPMENT_TEAM={}", self.team_id),
            format!("PRODUCT_BUNDLE_IDENTIFIER={}", self.test_bundle_id),
            "ENABLE_DEFAULT_HEADER_SEARCH_PATHS=NO".into(),
            "-allowProvisioningUpdates".into(),
            action.into(),
        ]
    }

    fn command(&self, action: &str, log: &Path) -> Result<tokio::process::Command, ProviderError> {
        let out = std::fs::File::create(log).map_err(|e| ProviderError::new(crate::prepared::SETUP_UNAVAILABLE, format!("cannot create {}: {e}", log.display())).not_dispatched())?;
        let err = out.try_clone().map_err(|e| ProviderError::new(crate::prepared::SETUP_UNAVAILABLE, format!("cannot share {}: {e}", log.display())).not_dispatched())?;
        let mut cmd = tokio::process::Command::new(self.program);
        cmd.args(self.args(action)).stdin(Stdio::null()).stdout(Stdio::from(out)).stderr(Stdio::from(err)).process_group(0);
        Ok(cmd)
    }
}

/// The last bytes of a log (for error messages).
pub fn tail(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(log) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
    let mut buf = Vec::new();
    let _ = f.take(LOG_TAIL_BYTES).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn spawn_failed(program: &Path, e: std::io::Error) -> ProviderError {
    ProviderError::new(XCODEBUILD_UNAVAILABLE, format!("cannot run xcodebuild `{}`: {e}", program.display())).with_details(json!({"program": program, "env": XCODEBUILD_ENV})).not_dispatched()
}

/// Signal the process group `pgid` leads (one this module started).
fn signal_group(pgid: u32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: kill(2) on the negated id of a process group our own child leads.
        unsafe {
            libc::kill(-(pgid as libc::pid_t), signal);
        }
    }
}

/// Stop a group we started and wait for its leader: TERM, then KILL after a grace.
pub async fn stop_group(child: &mut tokio::process::Child) {
    let Some(pid) = child.id() else { return };
    signal_group(pid, libc::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_err() {
        signal_group(pid, libc::SIGKILL);
        let _ = child.wait().await;
    }
    // Whatever the leader left in its group goes too.
    signal_group(pid, libc::SIGKILL);
}

/// How `build-for-testing` ended.
#[derive(Debug)]
pub struct Built {
    pub exit_code: Option<i32>,
    pub success: bool,
    pub log: PathBuf,
}

/// Run `build-for-testing` to completion (killed with its group at the deadline).
pub async fn build_for_testing(inv: &Invocation<'_>, log: &Path, deadline: Deadline) -> Result<Built, ProviderError> {
    let mut child = inv.command("build-for-testing", log)?.kill_on_drop(true).spawn().map_err(|e| spawn_failed(inv.program, e))?;
    let mut guard = GroupGuard::new(child.id());
    match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline.instant()), child.wait()).await {
        Ok(Ok(status)) => {
            guard.disarm();
            // A build leaves nothing running behind it.
            signal_group(child.id().unwrap_or(0), libc::SIGKILL);
            Ok(Built { exit_code: status.code(), success: status.success(), log: log.to_path_buf() })
        }
        Ok(Err(e)) => Err(ProviderError::new(XCODEBUILD_UNAVAILABLE, format!("waiting for xcodebuild failed: {e}")).not_dispatched()),
        Err(_) => {
            stop_group(&mut child).await;
            guard.disarm();
            Err(ProviderError::new(aab_plugin_api::codes::DEADLINE_EXCEEDED, "xcodebuild build-for-testing did not finish within the setup deadline").with_details(json!({"log": log, "tail": tail(log)})).not_dispatched())
        }
    }
}

/// Start `test-without-building` in its own group (the caller polls for the Runner).
pub fn start_test(inv: &Invocation<'_>, log: &Path) -> Result<tokio::process::Child, ProviderError> {
    inv.command("test-without-building", log)?.kill_on_drop(false).spawn().map_err(|e| spawn_failed(inv.program, e))
}

/// Whether `pid` is a live process (a zombie waiting for its reaper is not).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()).is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Kills the group it names when dropped while armed: a setup cancelled or failed
/// mid-way never leaves its own xcodebuild behind.
pub struct GroupGuard(Option<u32>);

impl GroupGuard {
    pub fn new(pgid: Option<u32>) -> Self {
        GroupGuard(pgid)
    }
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Reap a long-running child in the background (its exit is never waited on by the call).
pub fn reap(mut child: tokio::process::Child, on_exit: impl FnOnce() + Send + 'static) {
    tokio::spawn(async move {
        let _ = child.wait().await;
        on_exit();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_the_contracts() {
        let inv = Invocation { program: Path::new("xcodebuild"), project_dir: Path::new("/p"), udid: "00008110-1", derived_data: Path::new("/d/build"), team_id: "ABCDE12345", test_bundle_id: "io.github.mobileaidev.aiappbridge.wda" };
        assert_eq!(
            inv.args("build-for-testing").join(" "),
            "-project /p/WebDriverAgent.xcodeproj -scheme WebDriverAgentRunner -sdk iphoneos -destination id=00008110-1 -derivedDataPath /d/build DEVELOPMENT_TEAM=ABCDE12345 PRODUCT_BUNDLE_IDENTIFIER=io.github.mobileaidev.aiappbridge.wda ENABLE_DEFAULT_HEADER_SEARCH_PATHS=NO -allowProvisioningUpdates build-for-testing"
        );
        assert_eq!(inv.args("test-without-building").last().map(String::as_str), Some("test-without-building"));
    }

    #[tokio::test]
    async fn a_failed_build_is_reported_and_a_hung_one_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("xcodebuild");
        std::fs::write(&script, "#!/bin/sh\necho \"error: no signing certificate for $8\" >&2\nexit 65\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let inv = Invocation { program: &script, project_dir: dir.path(), udid: "U1", derived_data: &dir.path().join("build"), team_id: "T", test_bundle_id: "b" };
        let log = dir.path().join("build.log");
        let built = build_for_testing(&inv, &log, Deadline::after(Duration::from_secs(20))).await.unwrap();
        assert_eq!((built.success, built.exit_code), (false, Some(65)));
        assert!(tail(&log).contains("no signing certificate for id=U1"), "{}", tail(&log));

        let pidfile = dir.path().join("grandchild.pid");
        std::fs::write(&script, format!("#!/bin/sh\nsleep 30 &\necho $! > {}\nwait\n", pidfile.display())).unwrap();
        let e = build_for_testing(&inv, &log, Deadline::after(Duration::from_millis(500))).await.unwrap_err();
        assert_eq!(e.error, aab_plugin_api::codes::DEADLINE_EXCEEDED);
        let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) {
            assert!(std::time::Instant::now() < until, "the build's grandchild {pid} survived");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
