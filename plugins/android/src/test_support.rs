//! Test helpers: a private REAL adb server (Debian `adb`) on its own port with its
//! own `HOME`, killed with `host:kill` when dropped, so no test touches port 5037,
//! the user's adb keys, or leaves a server behind.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::adb::Deadline;
use crate::adb::server::{AdbServer, Env};

pub struct PrivateServer {
    pub server: AdbServer,
    pub home: tempfile::TempDir,
}

/// A free loopback port outside the emulator scan range (5555–5585).
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !(5037..=5585).contains(&port) {
            return port;
        }
    }
}

/// Whether the `adb` binary exists here (the real-adb tests need it; `.ci/run`
/// installs it, and a machine without it fails these tests loudly).
pub fn adb_path() -> String {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = std::path::Path::new(dir).join("adb");
        if p.is_file() {
            return p.display().to_string();
        }
    }
    panic!("the real-adb tests need the `adb` binary on PATH (apt-get install adb)");
}

impl PrivateServer {
    /// A configuration for a server that is NOT running yet (the first call starts it).
    pub fn new() -> Self {
        Self::with_env(|_| {})
    }

    pub fn with_env(edit: impl FnOnce(&mut Env)) -> Self {
        let _ = adb_path();
        let home = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut env = Env { adb_server_port: Some(port.to_string()), path: std::env::var("PATH").ok(), ..Env::default() };
        env.child_env.push(("HOME".into(), home.path().display().to_string()));
        edit(&mut env);
        let server = AdbServer::new(None, env).unwrap();
        PrivateServer { server, home }
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    pub fn is_listening(&self) -> bool {
        TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok()
    }
}

pub fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(20))
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        // `host:kill`, then wait until the port is closed (the server has exited).
        if let Ok(mut s) = TcpStream::connect_timeout(&self.addr(), Duration::from_secs(1)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"0009host:kill");
            let mut buf = [0u8; 4];
            let _ = s.read(&mut buf);
        }
        let until = Instant::now() + Duration::from_secs(10);
        while self.is_listening() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
