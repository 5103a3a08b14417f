//! The adb server as a service: where it listens (`ADB_SERVER_SOCKET`,
//! `ANDROID_ADB_SERVER_PORT`, default 127.0.0.1:5037), which `adb` binary starts it
//! (the `adb` argument, then `ADB`, then `PATH`), starting it when nothing listens,
//! and the host services: `host:version`, `host:devices-l`, `host:kill`,
//! `host:connect`, the forward family (`forward`, `list-forward`, `killforward`)
//! and switching a connection to one device (`host:transport`, `host:tport`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Mutex;

use super::wire::{Conn, ConnectError, Status};
use super::{Deadline, ProviderError, Result, codes, err, select};

const DEFAULT_PORT: u16 = 5037;

/// How to reach (and, if needed, start) the adb server.
#[derive(Clone, Debug)]
pub struct AdbServer {
    pub addr: SocketAddr,
    /// The `adb` argument of the call, if any (wins over `ADB` and `PATH`).
    pub adb_argument: Option<String>,
    /// The environment the server address and binary were resolved from, and the
    /// extra variables a started server gets (tests give it its own `HOME`).
    pub env: Env,
}

/// Held while one call starts a server, so concurrent first calls (of any
/// configuration in this process) start it once.
static STARTING: Mutex<()> = Mutex::const_new(());

/// The environment variables the transport reads, captured once so tests can
/// supply their own without touching the process environment.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub adb_server_socket: Option<String>,
    pub adb_server_port: Option<String>,
    pub adb: Option<String>,
    pub path: Option<String>,
    /// Variables set on a spawned `adb start-server` (on top of the inherited ones).
    pub child_env: Vec<(String, String)>,
}

impl Env {
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env { adb_server_socket: var("ADB_SERVER_SOCKET"), adb_server_port: var("ANDROID_ADB_SERVER_PORT"), adb: var("ADB"), path: var("PATH"), child_env: Vec::new() }
    }
}

/// One line of `host:devices-l`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    pub serial: String,
    /// `device`, `offline`, `unauthorized`, `no permissions`, `recovery`, …
    pub state: String,
    pub product: Option<String>,
    pub model: Option<String>,
    pub device: Option<String>,
    pub transport_id: Option<u64>,
}

/// One line of `host:list-forward`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardRule {
    pub serial: String,
    pub local: String,
    pub remote: String,
}

/// The server address from `ADB_SERVER_SOCKET` (`tcp:<port>` or `tcp:<host>:<port>`),
/// else `ANDROID_ADB_SERVER_PORT`, else 127.0.0.1:5037.
pub fn resolve_address(env: &Env) -> Result<SocketAddr> {
    let invalid = |name: &str, value: &str, why: &str| ProviderError::new(codes::ADB_UNAVAILABLE, format!("{name}={value:?} is not usable: {why}")).with_details(json!({"variable": name})).not_dispatched();
    if let Some(socket) = &env.adb_server_socket {
        let Some(rest) = socket.strip_prefix("tcp:") else {
            return Err(invalid("ADB_SERVER_SOCKET", socket, "only tcp:<port> and tcp:<host>:<port> are supported"));
        };
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => ("127.0.0.1", rest),
        };
        let port: u16 = port.parse().map_err(|_| invalid("ADB_SERVER_SOCKET", socket, "bad port"))?;
        let host = match host {
            "localhost" | "" => IpAddr::V4(Ipv4Addr::LOCALHOST),
            h => h.trim_matches(['[', ']']).parse().map_err(|_| invalid("ADB_SERVER_SOCKET", socket, "host must be an IP address or localhost"))?,
        };
        return Ok(SocketAddr::new(host, port));
    }
    let port = match &env.adb_server_port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| invalid("ANDROID_ADB_SERVER_PORT", p, "not a port number"))?,
        None => DEFAULT_PORT,
    };
    Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
}

/// The `adb` executable: the call's `adb` argument, then `ADB`, then `adb` on `PATH`.
/// A name with a `/` is taken as a path; a bare name is looked up on `PATH`.
pub fn resolve_binary(argument: Option<&str>, env: &Env) -> Result<PathBuf> {
    let (source, name) = match (argument, env.adb.as_deref()) {
        (Some(a), _) => ("argument `adb`", a),
        (None, Some(e)) => ("ADB", e),
        (None, None) => ("PATH", "adb"),
    };
    let unavailable = |why: String| {
        let e = ProviderError::new(codes::ADB_UNAVAILABLE, format!("no adb server is running and the adb executable from {source} ({name:?}) {why}")).with_details(json!({"adb": name, "source": source})).not_dispatched();
        if argument.is_some() { e.with_field("adb") } else { e }
    };
    if name.is_empty() {
        return Err(unavailable("is empty".into()));
    }
    if name.contains('/') {
        let path = Path::new(name);
        return if is_executable(path) { Ok(path.to_path_buf()) } else { Err(unavailable("does not exist or is not an executable file".into())) };
    }
    for dir in env.path.as_deref().unwrap_or("/usr/bin:/bin").split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(name);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(unavailable("is not on PATH".into()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// Parse `host:devices-l` output.
pub fn parse_devices(text: &str) -> Vec<DeviceEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_end();
        let mut parts = line.splitn(2, |c: char| c.is_whitespace());
        let Some(serial) = parts.next().filter(|s| !s.is_empty()) else { continue };
        let rest = parts.next().unwrap_or("").trim_start();
        // `no permissions (…); see [url]` is the one state with spaces.
        let (state, props) = if let Some(after) = rest.strip_prefix("no permissions") {
            ("no permissions".to_string(), after.rsplit_once(']').map(|(_, p)| p).unwrap_or(""))
        } else {
            let mut it = rest.splitn(2, char::is_whitespace);
            (it.next().unwrap_or("").to_string(), it.next().unwrap_or(""))
        };
        let mut entry = DeviceEntry { serial: serial.to_string(), state, product: None, model: None, device: None, transport_id: None };
        for token in props.split_whitespace() {
            match token.split_once(':') {
                Some(("product", v)) => entry.product = Some(v.to_string()),
                Some(("model", v)) => entry.model = Some(v.to_string()),
                Some(("device", v)) => entry.device = Some(v.to_string()),
                Some(("transport_id", v)) => entry.transport_id = v.parse().ok(),
                _ => {}
            }
        }
        out.push(entry);
    }
    out
}

/// Parse `host:list-forward` output (`<serial> <local> <remote>` per line).
pub fn parse_forwards(text: &str) -> Vec<ForwardRule> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let (serial, local, remote) = (it.next()?, it.next()?, it.next()?);
            Some(ForwardRule { serial: serial.into(), local: local.into(), remote: remote.into() })
        })
        .collect()
}

impl AdbServer {
    pub fn new(adb_argument: Option<String>, env: Env) -> Result<Self> {
        let addr = resolve_address(&env)?;
        Ok(AdbServer { addr, adb_argument, env })
    }

    pub fn from_process_env(adb_argument: Option<String>) -> Result<Self> {
        Self::new(adb_argument, Env::from_process())
    }

    /// A connection to the server; starts one (once, even under concurrent calls)
    /// when nothing listens on a loopback address.
    pub async fn connect(&self, deadline: Deadline, what: &str) -> Result<Conn> {
        match Conn::connect(self.addr, deadline, what).await {
            Ok(c) => return Ok(c),
            Err(ConnectError::Timeout) => return Err(err::timeout(what, deadline)),
            Err(ConnectError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused && self.addr.ip().is_loopback() => {}
            Err(ConnectError::Io(e)) => {
                return Err(ProviderError::new(codes::ADB_UNAVAILABLE, format!("cannot reach the adb server at {}: {e}", self.addr)).with_details(json!({"address": self.addr.to_string()})).not_dispatched());
            }
        }
        {
            let _guard = tokio::time::timeout_at(deadline.instant(), STARTING.lock()).await.map_err(|_| err::timeout(what, deadline))?;
            // Another call may have started it while we waited for the lock.
            if let Ok(c) = Conn::connect(self.addr, deadline, what).await {
                return Ok(c);
            }
            self.start(deadline).await?;
        }
        match Conn::connect(self.addr, deadline, what).await {
            Ok(c) => Ok(c),
            Err(ConnectError::Timeout) => Err(err::timeout(what, deadline)),
            Err(ConnectError::Io(e)) => Err(ProviderError::new(codes::ADB_UNAVAILABLE, format!("the adb server was started but {} does not accept connections: {e}", self.addr)).not_dispatched()),
        }
    }

    /// `adb -P <port> start-server`, bounded by the deadline; the child is killed if
    /// the call is cancelled or times out.
    pub async fn start(&self, deadline: Deadline) -> Result<()> {
        let binary = resolve_binary(self.adb_argument.as_deref(), &self.env)?;
        let port = self.addr.port().to_string();
        let mut cmd = tokio::process::Command::new(&binary);
        cmd.arg("-P").arg(&port).arg("start-server");
        cmd.env("ANDROID_ADB_SERVER_PORT", &port).env_remove("ADB_SERVER_SOCKET");
        for (k, v) in &self.env.child_env {
            cmd.env(k, v);
        }
        // The server daemon may keep inherited descriptors: only stderr is piped,
        // and it is read with a short bound after the client exits.
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            ProviderError::new(codes::ADB_UNAVAILABLE, format!("cannot run {} to start the adb server: {e}", binary.display())).with_details(json!({"adb": binary.display().to_string()})).not_dispatched()
        })?;
        let status = match tokio::time::timeout_at(deadline.instant(), child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(ProviderError::new(codes::ADB_UNAVAILABLE, format!("waiting for `adb start-server` failed: {e}")).not_dispatched()),
            Err(_) => {
                let _ = child.kill().await;
                return Err(err::timeout("adb start-server", deadline));
            }
        };
        if !status.success() {
            let mut stderr = Vec::new();
            if let Some(mut pipe) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = tokio::time::timeout(Duration::from_millis(200).min(deadline.remaining()), pipe.read_to_end(&mut stderr)).await;
            }
            let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
            return Err(ProviderError::new(codes::ADB_UNAVAILABLE, format!("`{} -P {port} start-server` failed ({status}): {stderr}", binary.display()))
                .with_details(json!({"adb": binary.display().to_string(), "exitCode": status.code(), "stderr": stderr}))
                .not_dispatched());
        }
        Ok(())
    }

    /// A host service that answers `OKAY` + one length-prefixed string.
    async fn host_query(&self, service: &str, deadline: Deadline) -> Result<String> {
        let mut c = self.connect(deadline, service).await?;
        c.request(service).await?;
        c.read_hex_string().await
    }

    /// `host:version`: the server's protocol version (adb 29 answers 41, `0029`).
    pub async fn version(&self, deadline: Deadline) -> Result<u32> {
        let text = self.host_query("host:version", deadline).await?;
        u32::from_str_radix(text.trim(), 16).map_err(|_| err::command_failed("host:version", format!("not a hex version: {text:?}")))
    }

    pub async fn devices(&self, deadline: Deadline) -> Result<Vec<DeviceEntry>> {
        Ok(parse_devices(&self.host_query("host:devices-l", deadline).await?))
    }

    /// `host:kill`: stop the server (tests; never used by commands).
    pub async fn kill(&self, deadline: Deadline) -> Result<()> {
        let mut c = match Conn::connect(self.addr, deadline, "host:kill").await {
            Ok(c) => c,
            Err(_) => return Ok(()),
        };
        c.request("host:kill").await
    }

    /// `host:connect:<host:port>`: the server's own message ("connected to …",
    /// "already connected to …", or a failure text; adb reports both with OKAY).
    pub async fn connect_device(&self, target: &str, deadline: Deadline) -> Result<String> {
        self.host_query(&format!("host:connect:{target}"), deadline).await
    }

    pub async fn disconnect_device(&self, target: &str, deadline: Deadline) -> Result<String> {
        self.host_query(&format!("host:disconnect:{target}"), deadline).await
    }

    /// `host:list-forward`: every forward of this server, all devices.
    pub async fn list_forwards(&self, deadline: Deadline) -> Result<Vec<ForwardRule>> {
        Ok(parse_forwards(&self.host_query("host:list-forward", deadline).await?))
    }

    /// `host-serial:<s>:forward[:norebind]:<local>;<remote>`. Returns the port the
    /// server allocated for `tcp:0`, else the local port of `tcp:<n>`.
    pub async fn forward(&self, serial: &str, local: &str, remote: &str, no_rebind: bool, deadline: Deadline) -> Result<Option<u16>> {
        let service = format!("host-serial:{serial}:forward:{}{local};{remote}", if no_rebind { "norebind:" } else { "" });
        let what = format!("forward {local} {remote}");
        let mut c = self.connect(deadline, &what).await?;
        c.send_request(&service).await?;
        // First status: the server accepted the request (the device exists); second:
        // the listener was installed.
        for _ in 0..2 {
            if let Status::Fail(m) = c.read_status().await? {
                return Err(self.explain_fail(serial, &what, &m, deadline).await);
            }
        }
        if local == "tcp:0" {
            let port = c.read_hex_string().await?;
            return port.trim().parse::<u16>().map(Some).map_err(|_| err::command_failed(&what, format!("adb reported no port ({port:?})")));
        }
        Ok(local.strip_prefix("tcp:").and_then(|p| p.parse().ok()))
    }

    /// `host-serial:<s>:killforward:<local>`.
    pub async fn kill_forward(&self, serial: &str, local: &str, deadline: Deadline) -> Result<()> {
        let what = format!("remove forward {local}");
        let mut c = self.connect(deadline, &what).await?;
        c.send_request(&format!("host-serial:{serial}:killforward:{local}")).await?;
        for _ in 0..2 {
            if let Status::Fail(m) = c.read_status().await? {
                return Err(self.explain_fail(serial, &what, &m, deadline).await);
            }
        }
        Ok(())
    }

    /// `host-serial:<s>:get-state`: `device`, `offline`, … (or the selection error).
    pub async fn get_state(&self, serial: &str, deadline: Deadline) -> Result<String> {
        let what = "get-state";
        let mut c = self.connect(deadline, what).await?;
        c.send_request(&format!("host-serial:{serial}:get-state")).await?;
        match c.read_status().await? {
            Status::Okay => c.read_hex_string().await,
            Status::Fail(m) => Err(select::map_transport_fail(serial, what, &m)),
        }
    }

    /// Map a `FAIL` of a device-addressed request. adb 29 answers a forward to a
    /// missing device with an empty `FAIL`; the device's state then tells why.
    async fn explain_fail(&self, serial: &str, what: &str, message: &str, deadline: Deadline) -> ProviderError {
        if message.trim().is_empty() {
            match self.get_state(serial, deadline).await {
                Err(e) => return e,
                Ok(state) if state != "device" => return select::map_transport_fail(serial, what, &format!("device {state}")),
                Ok(_) => {}
            }
        }
        select::map_transport_fail(serial, what, message)
    }

    /// A connection switched to the device `serial` (`host:transport:<serial>`),
    /// ready for one device service.
    pub async fn transport(&self, serial: &str, deadline: Deadline, what: &str) -> Result<Conn> {
        let mut c = self.connect(deadline, what).await?;
        c.send_request(&format!("host:transport:{serial}")).await?;
        match c.read_status().await? {
            Status::Okay => Ok(c),
            Status::Fail(m) => Err(select::map_transport_fail(serial, what, &m)),
        }
    }

    /// `host:tport:serial:<serial>`: like [`AdbServer::transport`], and also returns
    /// the server's transport id (it changes when the device reconnects).
    pub async fn tport(&self, serial: &str, deadline: Deadline, what: &str) -> Result<(Conn, u64)> {
        let mut c = self.connect(deadline, what).await?;
        c.send_request(&format!("host:tport:serial:{serial}")).await?;
        match c.read_status().await? {
            Status::Okay => {
                let id = c.read_exact(8).await?;
                Ok((c, u64::from_le_bytes(id.try_into().expect("8 bytes"))))
            }
            Status::Fail(m) => Err(select::map_transport_fail(serial, what, &m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env::default()
    }

    #[test]
    fn address_defaults_then_port_then_socket() {
        assert_eq!(resolve_address(&env()).unwrap(), "127.0.0.1:5037".parse().unwrap());
        let e = Env { adb_server_port: Some("6001".into()), ..env() };
        assert_eq!(resolve_address(&e).unwrap(), "127.0.0.1:6001".parse().unwrap());
        let e = Env { adb_server_port: Some("6001".into()), adb_server_socket: Some("tcp:10.0.0.2:7000".into()), ..env() };
        assert_eq!(resolve_address(&e).unwrap(), "10.0.0.2:7000".parse().unwrap());
        let e = Env { adb_server_socket: Some("tcp:7001".into()), ..env() };
        assert_eq!(resolve_address(&e).unwrap(), "127.0.0.1:7001".parse().unwrap());
        let e = Env { adb_server_socket: Some("tcp:localhost:7002".into()), ..env() };
        assert_eq!(resolve_address(&e).unwrap(), "127.0.0.1:7002".parse().unwrap());
        for bad in ["localfilesystem:/x", "tcp:host:notaport", "tcp:some.name:5037"] {
            let e = Env { adb_server_socket: Some(bad.into()), ..env() };
            assert_eq!(resolve_address(&e).unwrap_err().error, codes::ADB_UNAVAILABLE, "{bad}");
        }
        let e = Env { adb_server_port: Some("0".into()), ..env() };
        assert_eq!(resolve_address(&e).unwrap_err().error, codes::ADB_UNAVAILABLE);
    }

    #[test]
    fn binary_argument_then_env_then_path() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("adb");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        let path_env = Env { path: Some(dir.path().display().to_string()), ..env() };
        assert_eq!(resolve_binary(None, &path_env).unwrap(), exe);
        let with_adb = Env { adb: Some("/nonexistent/adb".into()), ..path_env.clone() };
        let e = resolve_binary(None, &with_adb).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (codes::ADB_UNAVAILABLE, None, Some(false)));
        assert!(e.message.contains("/nonexistent/adb") && e.message.contains("ADB"), "{}", e.message);
        assert_eq!(resolve_binary(Some(exe.to_str().unwrap()), &with_adb).unwrap(), exe);
        let e = resolve_binary(Some(plain.to_str().unwrap()), &with_adb).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (codes::ADB_UNAVAILABLE, Some("adb")));
        let e = resolve_binary(None, &Env { path: Some("/nonexistent".into()), ..env() }).unwrap_err();
        assert!(e.message.contains("PATH"), "{}", e.message);
    }

    #[test]
    fn devices_l_lines() {
        let text = "127.0.0.1:40001         device product:sim model:Pixel_Sim device:sim transport_id:3\n\
                    emulator-5554          offline transport_id:1\n\
                    R58M                   unauthorized usb:1-1 transport_id:2\n\
                    0123456789ABCDEF       no permissions (missing udev rules? user is in the plugdev group); see [http://developer.android.com/tools/device.html] usb:1-2 transport_id:4\n";
        let d = parse_devices(text);
        assert_eq!(d.len(), 4);
        assert_eq!(d[0], DeviceEntry { serial: "127.0.0.1:40001".into(), state: "device".into(), product: Some("sim".into()), model: Some("Pixel_Sim".into()), device: Some("sim".into()), transport_id: Some(3) });
        assert_eq!((d[1].state.as_str(), d[1].transport_id), ("offline", Some(1)));
        assert_eq!(d[2].state, "unauthorized");
        assert_eq!((d[3].state.as_str(), d[3].transport_id), ("no permissions", Some(4)));
        assert!(parse_devices("").is_empty());
    }

    #[test]
    fn list_forward_lines() {
        let f = parse_forwards("emulator-5554 tcp:4000 localabstract:aab-sdk-1\n127.0.0.1:40001 tcp:4001 tcp:8080\n\nbad line\n");
        assert_eq!(f, vec![
            ForwardRule { serial: "emulator-5554".into(), local: "tcp:4000".into(), remote: "localabstract:aab-sdk-1".into() },
            ForwardRule { serial: "127.0.0.1:40001".into(), local: "tcp:4001".into(), remote: "tcp:8080".into() },
        ]);
    }
}
