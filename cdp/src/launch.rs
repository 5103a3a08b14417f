//! Headless Chromium owned by a value: a fresh temporary profile, an
//! OS-assigned DevTools port read from `<profile>/DevToolsActivePort`, its own
//! process group, PR_SET_PDEATHSIG(SIGKILL) so it dies with the thread that
//! started it, and kill + wait on drop — no browser outlives its owner.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Cdp, CdpError};

/// How long the browser may take to publish its DevTools port.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The browser executable: `AAB_CHROMIUM` if set, else `chromium` or
/// `chromium-browser` on PATH.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AAB_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| ["chromium", "chromium-browser"].map(|n| dir.join(n))).find(|c| c.is_file())
}

pub struct Browser {
    child: Child,
    profile: tempfile::TempDir,
    port: u16,
    ws_path: String,
}

impl Browser {
    /// Starts headless Chromium on about:blank.
    pub async fn launch() -> Result<Browser, CdpError> {
        Self::launch_with(&[]).await
    }

    /// [`Browser::launch`] with extra command-line switches. PR_SET_PDEATHSIG is
    /// tied to the spawning *thread*: call this from a thread that lives as long
    /// as the owner (a runtime worker, not a blocking-pool thread).
    pub async fn launch_with(extra: &[&str]) -> Result<Browser, CdpError> {
        let exe = find_chromium().ok_or_else(|| CdpError::Launch("Chromium not found: set AAB_CHROMIUM or install chromium (apt-get install -y chromium)".into()))?;
        let profile = tempfile::Builder::new().prefix("aab-cdp-chromium-").tempdir().map_err(|e| CdpError::Launch(format!("profile dir: {e}")))?;
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--headless=new",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
        ]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // Chromium refuses to start its sandbox as root.
            cmd.arg("--no-sandbox");
        }
        cmd.args(extra).arg(format!("--user-data-dir={}", profile.path().display())).arg("about:blank");
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The owner may have died between fork and prctl.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| CdpError::Launch(format!("spawn {}: {e}", exe.display())))?;
        let mut b = Browser { child, profile, port: 0, ws_path: String::new() };
        let active = b.profile.path().join("DevToolsActivePort");
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&active) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next().and_then(|p| p.trim().parse().ok()), lines.next()) {
                    b.port = port;
                    b.ws_path = path.trim().to_string();
                    return Ok(b);
                }
            }
            if let Ok(Some(status)) = b.child.try_wait() {
                return Err(CdpError::Launch(format!("Chromium exited during start-up ({status})")));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(CdpError::Launch(format!("Chromium did not publish DevToolsActivePort within {START_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The DevTools HTTP/WebSocket port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The browser-level DevTools WebSocket URL.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}{}", self.port, self.ws_path)
    }

    /// A new connection to the browser endpoint.
    pub async fn connect(&self) -> Result<Cdp, CdpError> {
        Cdp::connect(&self.ws_url()).await
    }

    /// Whether the browser process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            // SAFETY: a plain syscall on the process group this value created
            // (renderers and the zygote are in it too).
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
