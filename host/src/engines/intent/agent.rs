//! The autonomous agent of one Intent (reference §8.4): one persistent `node` /
//! `python3` child per operation that loads `agentModule` once and exports
//! `decide(signal)`; every decision turn is one `decide` call in that child.
//!
//! Protocol (JSON lines): the worker (worker/agent-worker.{js,py}) writes
//! `{"type":"ready"}` once the module is loaded, or `{"type":"fail","error":
//! "agent_adapter_unavailable",...}`; per turn the host writes `{"type":"decide",
//! "turn","input"}` and reads `{"type":"decision","turn","value"}` or `{"type":
//! "fail","turn","error":"agent_threw"|"agent_reply_invalid",...}`. The child
//! runs in its own process group; the host kills the whole group on pause,
//! cancel, every terminal outcome, a turn timeout, an exit or a malformed frame
//! (and on drop), then reaps it and removes its temp dir.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

const WORKER_JS: &str = include_str!("worker/agent-worker.js");
const WORKER_PY: &str = include_str!("worker/agent-worker.py");
/// Largest reply frame (a decision is small; this bounds a runaway agent).
const MAX_FRAME: u64 = 1024 * 1024;
const DIAGNOSTIC_BYTES: usize = 8192;
/// Loading the module may take longer than one turn (interpreter start).
const MIN_READY_MS: u64 = 5000;

/// Why a turn produced no decision. `fatal`: the child is gone or unusable.
#[derive(Debug)]
pub struct AgentError {
    pub code: String,
    pub message: String,
    pub fatal: bool,
    pub diagnostic: Option<Value>,
}

impl AgentError {
    fn new(code: &str, message: impl Into<String>, fatal: bool) -> AgentError {
        AgentError { code: code.into(), message: message.into(), fatal, diagnostic: None }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": self.code, "message": self.message, "diagnostic": self.diagnostic})
    }
}

pub struct AgentChild {
    child: Child,
    pgid: i32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<u8>>>,
    dir: PathBuf,
    killed: bool,
}

impl AgentChild {
    /// Start the worker with the frozen module and wait for `ready` (or `abort`).
    pub async fn spawn(prepared: &aab_extract::PreparedScript, cwd: &Path, op_id: &str, abort: &CancellationToken) -> Result<AgentChild, AgentError> {
        let python = prepared.language() == aab_extract::Language::Python;
        let mut rand = [0u8; 8];
        let _ = getrandom::fill(&mut rand);
        let tag: String = rand.iter().map(|b| format!("{b:02x}")).collect();
        let safe: String = op_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(48).collect();
        let dir = std::env::temp_dir().join(format!("aab-agent-{safe}-{tag}"));
        let unavailable = |m: String| AgentError::new("agent_adapter_unavailable", m, true);
        std::fs::create_dir(&dir).map_err(|e| unavailable(format!("cannot create {}: {e}", dir.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        }
        let (worker, worker_text, module) = if python { ("agent-worker.py", WORKER_PY, "agent.py") } else { ("agent-worker.js", WORKER_JS, "agent.js") };
        let written = std::fs::write(dir.join(worker), worker_text).and_then(|_| std::fs::write(dir.join(module), prepared.source()));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(unavailable(format!("cannot write the agent worker: {e}")));
        }
        let name = prepared.source_path().map(|p| p.display().to_string()).unwrap_or_else(|| module.to_string());
        // The same child setup as Script children, so an agent also dies with the runtime.
        let mut command = crate::engines::script::child::interpreter_command(prepared.runtime(), python);
        if python {
            command.arg("-B");
        }
        command.arg(dir.join(worker)).arg(dir.join(module)).arg(&name).current_dir(if cwd.is_dir() { cwd } else { dir.as_path() });
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(unavailable(format!("cannot start {}: {e}", prepared.runtime().display())));
            }
        };
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut err_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = err_pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                t.extend_from_slice(&buf[..n]);
                if t.len() > DIAGNOSTIC_BYTES {
                    let cut = t.len() - DIAGNOSTIC_BYTES;
                    t.drain(..cut);
                }
            }
        });
        let mut agent = AgentChild { child, pgid, stdin, stdout, stderr, dir, killed: false };
        let ready_ms = prepared.timeout().as_millis() as u64 + MIN_READY_MS;
        match agent.frame(Duration::from_millis(ready_ms), abort).await {
            Ok(f) if f["type"] == json!("ready") => Ok(agent),
            Ok(f) => {
                let mut e = AgentError::new(
                    f["error"].as_str().unwrap_or("agent_adapter_unavailable"),
                    f["message"].as_str().unwrap_or("the agent worker did not start").to_string(),
                    true,
                );
                agent.kill().await;
                e.diagnostic = agent.diagnostic();
                if e.code != "agent_adapter_unavailable" {
                    e.code = "agent_adapter_unavailable".into();
                }
                Err(e)
            }
            Err(mut e) => {
                agent.kill().await;
                e.diagnostic = agent.diagnostic();
                e.code = if e.code == "agent_aborted" { e.code } else { "agent_adapter_unavailable".into() };
                Err(e)
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    fn diagnostic(&self) -> Option<Value> {
        let t = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        (!t.is_empty()).then(|| json!({"stderr": String::from_utf8_lossy(&t).into_owned()}))
    }

    /// The next frame within `timeout`, unless `abort` fires first.
    async fn frame(&mut self, timeout: Duration, abort: &CancellationToken) -> Result<Value, AgentError> {
        let mut line = Vec::new();
        let read = async {
            let mut limited = (&mut self.stdout).take(MAX_FRAME + 1);
            limited.read_until(b'\n', &mut line).await
        };
        let n = tokio::select! {
            r = tokio::time::timeout(timeout, read) => match r {
                Err(_) => return Err(AgentError::new("agent_timeout", format!("the agent did not answer within {} ms; its process was killed", timeout.as_millis()), true)),
                Ok(Err(e)) => return Err(AgentError::new("agent_exited", format!("reading the agent failed: {e}"), true)),
                Ok(Ok(n)) => n,
            },
            _ = abort.cancelled() => return Err(AgentError::new("agent_aborted", "the turn was abandoned (pause, cancel or the Intent ended)", true)),
        };
        if n == 0 {
            // Its output closed: give the exit a moment to be reaped, for the message.
            let status = match tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await {
                Ok(Ok(s)) => s.to_string(),
                _ => "closed its output".into(),
            };
            return Err(AgentError::new("agent_exited", format!("the agent process exited ({status})"), true));
        }
        if line.last() != Some(&b'\n') {
            return Err(AgentError::new("agent_malformed_reply", "the agent wrote an oversized or unterminated frame", true));
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(v) if v.get("type").is_some_and(Value::is_string) => Ok(v),
            _ => Err(AgentError::new("agent_malformed_reply", "the agent wrote a line that is not a protocol frame", true)),
        }
    }

    /// One decision turn.
    pub async fn decide(&mut self, turn: u64, input: &Value, timeout: Duration, abort: &CancellationToken) -> Result<Value, AgentError> {
        let mut frame = serde_json::to_vec(&json!({"type": "decide", "turn": turn, "input": input})).map_err(|e| AgentError::new("agent_adapter_failed", e.to_string(), false))?;
        frame.push(b'\n');
        let write = async {
            self.stdin.write_all(&frame).await?;
            self.stdin.flush().await
        };
        let written = tokio::select! {
            r = tokio::time::timeout(timeout, write) => r,
            _ = abort.cancelled() => return Err(AgentError::new("agent_aborted", "the turn was abandoned (pause, cancel or the Intent ended)", true)),
        };
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(self.with_diagnostic(AgentError::new("agent_exited", format!("the agent process is gone: {e}"), true))),
            Err(_) => return Err(AgentError::new("agent_timeout", "the agent did not read its input in time; its process was killed", true)),
        }
        let reply = self.frame(timeout, abort).await.map_err(|e| self.with_diagnostic(e))?;
        if reply.get("turn") != Some(&json!(turn)) {
            return Err(AgentError::new("agent_malformed_reply", "the agent answered another turn", true));
        }
        match reply["type"].as_str() {
            Some("decision") => Ok(reply.get("value").cloned().unwrap_or(Value::Null)),
            Some("fail") => {
                let mut e = AgentError::new(reply["error"].as_str().unwrap_or("agent_threw"), reply["message"].as_str().unwrap_or_default().to_string(), false);
                e.diagnostic = reply.get("stack").filter(|s| s.as_str().is_some_and(|s| !s.is_empty())).map(|s| json!({"stack": s}));
                Err(e)
            }
            _ => Err(AgentError::new("agent_malformed_reply", "unknown frame type", true)),
        }
    }

    fn with_diagnostic(&self, mut e: AgentError) -> AgentError {
        if e.diagnostic.is_none() {
            e.diagnostic = self.diagnostic();
        }
        e
    }

    /// Kill the whole process group (before reaping, so the group id is still
    /// ours), reap the child and remove the temp dir.
    pub async fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        if self.pgid > 0 {
            // SAFETY: kill(2) on the group our own unreaped child leads.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for AgentChild {
    fn drop(&mut self) {
        if !self.killed {
            if self.pgid > 0 {
                // SAFETY: as in `kill`; tokio's orphan reaper reaps the child.
                unsafe {
                    libc::kill(-self.pgid, libc::SIGKILL);
                }
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
