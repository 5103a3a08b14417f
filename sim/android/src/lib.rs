//! aab-android-sim: a simulated Android phone behind the real adb server.
//! Each device listens on its own loopback port and speaks adbd's transport
//! (`adb connect 127.0.0.1:PORT`); shells run busybox chrooted into a per-device
//! root; apps come from a scenario file; a control interface gives ground truth
//! and injects faults. See sim/android/README.md.
//!
//! Modules: `wire` (message framing), `adbd` (connection, streams, flow control),
//! `services` (shell/exec, pty, sync, sockets, abb), `rootfs` (device root), `tools`
//! (Android tools behind the shim), `phone` (app/screen model), `lifecycle`
//! (processes, /proc, reboot), `dumpsys`/`uiautomator`/`screencap` (stock
//! renderings), `sdk` (the app SDK's HTTP dialect), `sdk_actions` (its native managed actions), `redact` (its network-capture redaction), `executor`/`executor_actions` (instrumentation sessions of the executors), `control`, `scenario`, `faults`.

mod adbd;
pub mod control;
mod control_timed;
pub mod device;
mod dumpsys;
mod executor;
mod executor_actions;
mod h5;
mod installer;
pub mod hold;
pub mod faults;
mod lifecycle;
mod flutter;
mod flutter_exec;
mod flutter_h5;
mod observation;
mod permission_dialog;
pub mod phone;
pub mod rootfs;
pub mod scenario;
mod screencap;
mod sdk;
mod sdk_actions;
mod redact;
mod services;
mod tools;
mod system_dialog;
pub mod test_apk;
mod uia;
mod uiautomator;
mod validation;
pub mod webview;
mod wire;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use device::Device;
pub use scenario::Scenario;

/// How to start a simulator.
pub struct Options {
    /// One entry per device: the port to listen on (0 = any free port).
    pub ports: Vec<u16>,
    pub scenario: Scenario,
    /// Directory holding one root per device (`<base>/<port>`); default a fresh
    /// directory under the system temp dir, removed at shutdown.
    pub base_dir: Option<PathBuf>,
    /// Control interface port (0 = any); `None` = no control socket.
    pub control_port: Option<u16>,
}

impl Default for Options {
    fn default() -> Self {
        Options { ports: vec![0], scenario: Scenario::sample(), base_dir: None, control_port: Some(0) }
    }
}

pub struct Simulator {
    pub devices: Vec<Arc<Device>>,
    pub base_dir: PathBuf,
    owns_base: bool,
    pub control_addr: Option<std::net::SocketAddr>,
    pub control_token: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Simulator {
    pub async fn start(opts: Options) -> std::io::Result<Simulator> {
        rootfs::require_root()?;
        let (base_dir, owns_base) = match opts.base_dir {
            Some(b) => (b, false),
            None => {
                let b = std::env::temp_dir().join(format!("aab-android-sim-{}-{}", std::process::id(), device::random_hex(8)));
                (b, true)
            }
        };
        std::fs::create_dir_all(&base_dir)?;
        let mut sim = Simulator { devices: vec![], base_dir: base_dir.clone(), owns_base, control_addr: None, control_token: device::random_hex(32), tasks: vec![] };
        for port in opts.ports {
            let listener = TcpListener::bind(("127.0.0.1", port)).await?;
            let port = listener.local_addr()?.port();
            let root = base_dir.join(port.to_string());
            rootfs::build(&root)?;
            let dev = Device::new(port, root, opts.scenario.clone());
            sim.tasks.push(tools::start_server(dev.clone()).await?);
            lifecycle::write_boot_files(&dev);
            sim.tasks.push(lifecycle::spawn_uptime_ticker(dev.clone()));
            lifecycle::boot_apps(&dev);
            let d = dev.clone();
            sim.tasks.push(tokio::spawn(async move {
                while let Ok((sock, _)) = listener.accept().await {
                    if d.is_offline() {
                        drop(sock);
                        continue;
                    }
                    tokio::spawn(adbd::serve(d.clone(), sock));
                }
            }));
            sim.devices.push(dev);
        }
        if let Some(cp) = opts.control_port {
            let l = TcpListener::bind(("127.0.0.1", cp)).await?;
            sim.control_addr = Some(l.local_addr()?);
            std::fs::write(base_dir.join("control.token"), &sim.control_token)?;
            sim.tasks.push(tokio::spawn(control::serve(l, sim.control_token.clone(), sim.devices.clone())));
        }
        Ok(sim)
    }

    /// The line printed at start by the binary: where to reach everything.
    pub fn describe(&self) -> Value {
        json!({
            "control": self.control_addr.map(|a| a.to_string()),
            "token": self.control_token,
            "tokenFile": self.base_dir.join("control.token"),
            "devices": self.devices.iter().map(|d| json!({ "serial": d.serial, "port": d.port, "root": d.root })).collect::<Vec<_>>(),
        })
    }

    /// A control request handled in-process (same ops as the socket, no token).
    pub async fn control(&self, req: Value) -> Value {
        control::handle(&self.devices, &req).await
    }

    pub fn device(&self, serial: &str) -> Option<&Arc<Device>> {
        self.devices.iter().find(|d| d.serial == serial)
    }

    /// Stops listeners, drops connections, kills device processes, removes owned roots.
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        for d in &self.devices {
            executor::shutdown(d);
            d.drop_connections();
            rootfs::kill_processes_in(&d.root);
            webview::shutdown(d);
        }
        if self.owns_base {
            let _ = std::fs::remove_dir_all(&self.base_dir);
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}
