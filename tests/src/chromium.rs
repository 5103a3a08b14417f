//! Real headless Chromium for the Web scenarios, driven over the raw DevTools
//! protocol (CDP) with tokio-tungstenite. The browser gets a fresh profile and an
//! OS-assigned debugging port (read from `<profile>/DevToolsActivePort`), and is
//! killed when the [`Chromium`] value drops, so a failing test leaves no process.
//!
//! The tests use CDP only to *check* outcomes independently of the aab Web SDK
//! (read the live DOM, ask the sample server what it received) and to create the
//! page situations under test (cover a button, replace a node, close a tab) — the
//! actions themselves always go through the public aab CLI/MCP surface.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long one CDP call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The browser executable: `AAB_CHROMIUM` if set, else the first of the usual
/// names on PATH.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("AAB_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// One attached page.
#[derive(Clone, Debug)]
pub struct Tab {
    pub target_id: String,
    pub session_id: String,
}

pub struct Chromium {
    child: Child,
    _profile: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    socket: Socket,
    next_id: u64,
}

impl Chromium {
    /// Launch headless Chromium with a fresh profile; panics with the install
    /// command when no browser is found.
    pub fn launch() -> Chromium {
        Self::launch_with(&[])
    }

    /// [`Chromium::launch`] with extra command-line switches (for example
    /// `--host-resolver-rules=MAP site.example 127.0.0.1` to give a local page a
    /// foreign origin).
    pub fn launch_with(extra: &[&str]) -> Chromium {
        let exe = find_chromium().unwrap_or_else(|| {
            panic!("Chromium is required for the Web scenarios and was not found on PATH; install it with: apt-get install -y chromium")
        });
        let profile = tempfile::Builder::new().prefix("aab-chromium-").tempdir().expect("chromium profile dir");
        let mut child = Command::new(&exe)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so dropping kills the renderers and zygote too.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", exe.display()));
        let active = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&active) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break (port.trim().to_string(), path.trim().to_string());
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("Chromium exited during start-up ({status})");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("Chromium did not publish DevToolsActivePort within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime for CDP");
        let url = format!("ws://127.0.0.1:{port}{path}");
        let socket = match rt.block_on(tokio_tungstenite::connect_async(url.as_str())) {
            Ok((s, _)) => s,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("cannot connect to Chromium's DevTools at {url}: {e}");
            }
        };
        Chromium { child, _profile: profile, rt, socket, next_id: 1 }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One CDP call (browser-level when `session` is None); events are skipped.
    pub fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            frame["sessionId"] = json!(s);
        }
        let socket = &mut self.socket;
        self.rt.block_on(async {
            socket.send(Message::text(frame.to_string())).await.map_err(|e| format!("send {method}: {e}"))?;
            let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
            loop {
                let next = tokio::time::timeout_at(deadline, socket.next()).await.map_err(|_| format!("{method}: no reply within {CALL_TIMEOUT:?}"))?;
                let text = match next {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(format!("{method}: {e}")),
                    None => return Err(format!("{method}: DevTools socket closed")),
                };
                let v: Value = serde_json::from_str(text.as_str()).map_err(|e| format!("{method}: bad frame: {e}"))?;
                if v.get("id") != Some(&json!(id)) {
                    continue;
                }
                if let Some(err) = v.get("error") {
                    return Err(format!("{method}: {err}"));
                }
                return Ok(v.get("result").cloned().unwrap_or(Value::Null));
            }
        })
    }

    /// Open `url` in a new tab and attach to it.
    pub fn open(&mut self, url: &str) -> Tab {
        let created = self.call("Target.createTarget", json!({"url": url}), None).unwrap_or_else(|e| panic!("{e}"));
        let target_id = created["targetId"].as_str().expect("targetId").to_string();
        let attached = self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).unwrap_or_else(|e| panic!("{e}"));
        let session_id = attached["sessionId"].as_str().expect("sessionId").to_string();
        Tab { target_id, session_id }
    }

    /// Evaluate `expression` in the tab (promises awaited) and return its value.
    pub fn eval(&mut self, tab: &Tab, expression: &str) -> Value {
        let r = self
            .call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}), Some(&tab.session_id))
            .unwrap_or_else(|e| panic!("evaluate `{expression}`: {e}"));
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluate `{expression}` threw: {ex}");
        }
        r.pointer("/result/value").cloned().unwrap_or(Value::Null)
    }

    /// Poll `expression` until it is truthy (or panic after `timeout`).
    pub fn wait_for(&mut self, tab: &Tab, expression: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}), Some(&tab.session_id));
            if let Ok(r) = r
                && r.get("exceptionDetails").is_none()
            {
                let v = r.pointer("/result/value").cloned().unwrap_or(Value::Null);
                if !matches!(v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("") {
                    return v;
                }
            }
            if Instant::now() > deadline {
                panic!("`{expression}` did not become true within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn close(&mut self, tab: &Tab) {
        let _ = self.call("Target.closeTarget", json!({"targetId": tab.target_id}), None);
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // Ask the browser to shut down first so it reaps its own helpers; the
        // process-group kill below is for whatever remains.
        let close = json!({"id": self.next_id, "method": "Browser.close"}).to_string();
        let socket = &mut self.socket;
        let _ = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), socket.send(Message::text(close))).await });
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            // SAFETY: plain syscall on the process group this value created.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
