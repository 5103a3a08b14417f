//! One script child process: its own process group, newline-delimited JSON frames on
//! stdin/stdout with bounded frame size and backlog, stderr kept as bounded
//! diagnostics, and a kill of the whole group on every end path.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Unconsumed child → host frames before `channel_backlog`.
pub const MAX_PENDING_FRAMES: usize = 32;
/// stderr bytes kept for diagnostics.
pub const MAX_DIAGNOSTIC_BYTES: usize = 8192;

pub const SDK_JS: &str = include_str!("sdk/sdk.js");
pub const SDK_PY: &str = include_str!("sdk/sdk.py");

/// What the reader task delivers: a parsed frame, or the channel's terminal error
/// (`frame_too_large`, `malformed_frame`, `channel_backlog`, `channel_closed`).
pub type Frame = Result<Value, &'static str>;

#[derive(Default)]
pub struct Diagnostics {
    tail: Vec<u8>,
    total: u64,
}

impl Diagnostics {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > MAX_DIAGNOSTIC_BYTES {
            let cut = self.tail.len() - MAX_DIAGNOSTIC_BYTES;
            self.tail.drain(..cut);
        }
    }

    pub fn to_json(&self) -> Option<Value> {
        if self.total == 0 {
            return None;
        }
        let mut start = 0;
        while start < self.tail.len() && (self.tail[start] & 0xc0) == 0x80 {
            start += 1;
        }
        let text = String::from_utf8_lossy(&self.tail[start..]).into_owned();
        Some(json!({"stderr": text, "stderrBytes": self.total, "stderrTruncated": self.total > self.tail.len() as u64 || start > 0}))
    }
}

pub struct ScriptChild {
    child: Child,
    pgid: i32,
    killed: bool,
    pub writer: mpsc::Sender<String>,
    pub frames: mpsc::Receiver<Frame>,
    pub diagnostics: Arc<Mutex<Diagnostics>>,
    dir: PathBuf,
}

/// Find an executable: a path (contains `/`) or a name on `PATH`.
pub fn find_executable(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if name.contains('/') {
        let p = PathBuf::from(name);
        return ok(&p).then(|| std::path::absolute(&p).unwrap_or(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| ok(p))
}

impl ScriptChild {
    /// Write the SDK and the frozen source into a fresh temp dir and start the runtime
    /// in its own process group with `cwd` as working directory.
    pub fn spawn(runtime: &Path, python: bool, source: &str, cwd: &Path, operation_id: &str, max_output_frame: usize) -> Result<ScriptChild, String> {
        let mut rand = [0u8; 8];
        let _ = getrandom::fill(&mut rand);
        let tag: String = rand.iter().map(|b| format!("{b:02x}")).collect();
        let safe: String = operation_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(48).collect();
        let dir = std::env::temp_dir().join(format!("aab-script-{safe}-{tag}"));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let (sdk_name, sdk_text, main_name) = if python { ("sdk.py", SDK_PY, "main.py") } else { ("sdk.js", SDK_JS, "main.js") };
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"));
        let cleanup = |e: String| {
            let _ = std::fs::remove_dir_all(&dir);
            e
        };
        write(sdk_name, sdk_text).map_err(cleanup)?;
        write(main_name, source).map_err(cleanup)?;
        let mut command = interpreter_command(runtime, python);
        command.arg(dir.join(sdk_name)).arg(dir.join(main_name)).current_dir(cwd);
        let mut child = command.spawn().map_err(|e| cleanup(format!("cannot start {}: {e}", runtime.display())))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        let diagnostics = Arc::new(Mutex::new(Diagnostics::default()));
        let diag = diagnostics.clone();
        tokio::spawn(async move {
            let mut stderr = stderr;
            let mut buf = vec![0u8; 8192];
            loop {
                match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => diag.lock().unwrap_or_else(|e| e.into_inner()).push(&buf[..n]),
                }
            }
        });

        let (writer, mut to_child) = mpsc::channel::<String>(64);
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = to_child.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });

        let (tx, frames) = mpsc::channel::<Frame>(MAX_PENDING_FRAMES);
        tokio::spawn(read_frames(stdout, tx, max_output_frame));
        Ok(ScriptChild { child, pgid, killed: false, writer, frames, diagnostics, dir })
    }

    /// Kill the whole process group (before reaping, so the group id is still ours),
    /// then reap the child and remove the temp dir.
    pub async fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            if self.pgid > 0 {
                // SAFETY: kill(2) on the group our own unreaped child leads.
                unsafe {
                    libc::kill(-self.pgid, libc::SIGKILL);
                }
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), self.child.wait()).await;
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    pub fn diagnostics(&self) -> Option<Value> {
        self.diagnostics.lock().unwrap_or_else(|e| e.into_inner()).to_json()
    }
}

impl Drop for ScriptChild {
    fn drop(&mut self) {
        if !self.killed && self.pgid > 0 {
            // SAFETY: as in `kill`; the child is reaped by tokio's orphan reaper.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The child must not outlive the runtime, even when the runtime is killed with
/// SIGKILL while the program never yields (a synchronous `while (true) {}` leaves the
/// SDK's own watchers no chance to run): on Linux the kernel sends SIGKILL when the
/// spawning thread dies (a tokio worker, alive as long as the runtime; so never spawn
/// from `spawn_blocking` or `block_in_place`, whose threads end when idle). The SDKs
/// also watch their parent themselves (portable, and for the process group).
/// A `node` or `python3` child as the engines run them: piped stdio, its own process
/// group (so the whole tree can be killed), killed on drop and with the runtime
/// ([`die_with_parent`]); Python unbuffered and without bytecode files. The caller
/// adds the program's arguments and working directory.
pub(crate) fn interpreter_command(runtime: &Path, python: bool) -> Command {
    let mut command = Command::new(runtime);
    if python {
        command.arg("-u");
    }
    command
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    die_with_parent(&mut command);
    command
}

#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut tokio::process::Command) {
    // SAFETY: getpid is async-signal-safe and called before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut tokio::process::Command) {}

/// Split stdout into frames. A line longer than `max` (or an unterminated tail
/// beyond it) is `frame_too_large`; a line that is not a JSON object with a string
/// `type` is `malformed_frame`; more than [`MAX_PENDING_FRAMES`] unconsumed frames is
/// `channel_backlog`; end of stdout is `channel_closed` (after the frames before it).
async fn read_frames(mut stdout: tokio::process::ChildStdout, tx: mpsc::Sender<Frame>, max: usize) {
    let mut buffer: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 65536];
    let fatal = |code: &'static str| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Err(code)).await;
        }
    };
    loop {
        let n = match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                fatal("channel_closed").await;
                return;
            }
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        while let Some(pos) = buffer[start..].iter().position(|b| *b == b'\n') {
            let line = &buffer[start..start + pos];
            start += pos + 1;
            if line.len() + 1 > max {
                fatal("frame_too_large").await;
                return;
            }
            let frame = match serde_json::from_slice::<Value>(line) {
                Ok(v) if v.get("type").is_some_and(Value::is_string) => v,
                _ => {
                    fatal("malformed_frame").await;
                    return;
                }
            };
            match tx.try_send(Ok(frame)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    fatal("channel_backlog").await;
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        buffer.drain(..start);
        if buffer.len() > max {
            fatal("frame_too_large").await;
            return;
        }
    }
}
