//! Test environment: a simulator on its own runtime plus a private adb server.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use aab_android_sim::{Options, Scenario, Simulator};
use serde_json::Value;

pub struct Env {
    pub sim: Option<Simulator>,
    pub home: tempfile::TempDir,
    pub adb_port: u16,
    rt: Option<tokio::runtime::Runtime>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Env {
    pub fn start(devices: usize) -> Env {
        Env::with_scenario(devices, Scenario::sample())
    }

    pub fn with_scenario(devices: usize, scenario: Scenario) -> Env {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let sim = rt.block_on(Simulator::start(Options { ports: vec![0; devices], scenario, base_dir: None, control_port: Some(0) })).expect("simulator starts (needs root)");
        let env = Env { sim: Some(sim), home: tempfile::tempdir().unwrap(), adb_port: free_port(), rt: Some(rt) };
        let out = env.adb(&["start-server"]);
        assert!(out.status.success(), "adb start-server: {}", String::from_utf8_lossy(&out.stderr));
        for s in env.serials() {
            env.connect(&s);
        }
        env
    }

    pub fn sim(&self) -> &Simulator {
        self.sim.as_ref().unwrap()
    }

    pub fn serials(&self) -> Vec<String> {
        self.sim().devices.iter().map(|d| d.serial.clone()).collect()
    }

    pub fn serial(&self) -> String {
        self.serials()[0].clone()
    }

    pub fn connect(&self, serial: &str) {
        let out = self.adb(&["connect", serial]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("connected to"), "adb connect {serial}: {text}");
        // `adb connect` returns before the transport is online.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.adb(&["-s", serial, "get-state"]);
            if String::from_utf8_lossy(&st.stdout).trim() == "device" {
                return;
            }
            assert!(Instant::now() < deadline, "device {serial} never came online");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `adb -P PORT ARGS…` with this env's HOME, killed after 30 s.
    pub fn adb(&self, args: &[&str]) -> Output {
        self.adb_stdin(args, None)
    }

    pub fn adb_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = Command::new("adb");
        cmd.arg("-P").arg(self.adb_port.to_string()).args(args).env("HOME", self.home.path()).env_remove("ANDROID_SERIAL").env_remove("ADB_SERVER_SOCKET");
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("adb runs (apt-get install adb)");
        if let Some(data) = stdin {
            use std::io::Write;
            let mut si = child.stdin.take().unwrap();
            si.write_all(data).unwrap();
        }
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t1 = std::thread::spawn(move || {
            let mut v = vec![];
            let _ = so.read_to_end(&mut v);
            v
        });
        let t2 = std::thread::spawn(move || {
            let mut v = vec![];
            let _ = se.read_to_end(&mut v);
            v
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("adb {args:?} timed out");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        Output { status, stdout: t1.join().unwrap(), stderr: t2.join().unwrap() }
    }

    /// `adb -s SERIAL shell CMD` → (stdout, stderr, exit code).
    pub fn shell_on(&self, serial: &str, cmd: &str) -> (String, String, i32) {
        let out = self.adb(&["-s", serial, "shell", cmd]);
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code().unwrap_or(-1))
    }

    pub fn shell(&self, cmd: &str) -> (String, String, i32) {
        self.shell_on(&self.serial(), cmd)
    }

    /// Shell command that must succeed; returns stdout.
    pub fn sh(&self, cmd: &str) -> String {
        let (o, e, c) = self.shell(cmd);
        assert_eq!(c, 0, "`{cmd}` failed: stdout={o} stderr={e}");
        o
    }

    pub fn control(&self, req: Value) -> Value {
        let sim = self.sim.as_ref().unwrap();
        self.rt.as_ref().unwrap().block_on(sim.control(req))
    }

    pub fn truth(&self, kind: &str) -> Vec<Value> {
        let v = self.control(serde_json::json!({ "op": "truth", "kind": kind }));
        v["items"].as_array().cloned().unwrap_or_default()
    }

    pub fn state(&self) -> Value {
        self.control(serde_json::json!({ "op": "state" }))
    }

    /// Runs a future on the simulator's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().unwrap().block_on(f)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.adb(&["kill-server"]);
        if let Some(mut sim) = self.sim.take() {
            sim.shutdown();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// Reads one HTTP/1.1 response from a forwarded port: (status, JSON body).
pub fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let b = body.unwrap_or("");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}", b.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = vec![];
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(head.contains("Content-Type: application/json; charset=utf-8"), "{head}");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// One request without [`http`]'s asserts: `None` when the connection closed
/// without a (JSON) reply — a lost reply is what the fault tests look for. The
/// 60 s read timeout outlasts the slowest simulated action.
pub fn request(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<Value> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let b = body.unwrap_or("");
    s.write_all(format!("{method} {path} HTTP/1.1\r\nContent-Length: {}\r\n\r\n{b}", b.len()).as_bytes()).unwrap();
    let mut buf = vec![];
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (_, body) = text.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// Processes whose root directory is the device root (device shells and what they started).
pub fn processes_in(root: &std::path::Path) -> usize {
    let canon = std::fs::canonicalize(root).unwrap();
    std::fs::read_dir("/proc").unwrap().flatten().filter(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))).filter(|e| std::fs::read_link(e.path().join("root")).ok().as_deref() == Some(canon.as_path())).count()
}

/// An `adb forward` to the SDK socket of `package` (its descriptor names it): (port, descriptor).
pub fn sdk_forward(env: &Env, package: &str) -> (u16, Value) {
    let text = env.sh(&format!("run-as {package} cat files/ai_app_bridge_endpoint.json"));
    let d: Value = serde_json::from_str(&text).unwrap();
    let out = env.adb(&["-s", &env.serial(), "forward", "tcp:0", &format!("localabstract:{}", d["socketName"].as_str().unwrap())]);
    (String::from_utf8_lossy(&out.stdout).trim().parse().unwrap(), d)
}
