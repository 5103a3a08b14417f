//! aab-ios-sim: simulated iOS devices at their real interfaces (see README.md).
//!
//! Modules: `device` (identity, apps, processes, truth), `scenario`, `native`
//! (UIKit screens, hit testing, both tree renderings), `screenshot`,
//! `lifecycle` (install/launch/terminate), `sdk` (the SDK listener, descriptor,
//! identity headers), `http`, `capture` (capture stores and queries),
//! `execution` (the shared action slot and the durable completion store),
//! `h5` + `web` (WKWebViews as Chromium pages), `flutter` + `sdk_flutter`
//! (the Flutter engine and its action route), `observation`, `screen` (the
//! NativeScreen seam) + `screen_impl`, `wda` (the WebDriverAgent Runner) +
//! `runner` (its device side), `devicectl` (the double's device side),
//! `cli` (the `devicectl` / `xcodebuild` doubles and `serve`), `control`, `faults`.

pub mod capture;
pub mod cli;
pub mod control;
pub mod device;
pub mod devicectl;
pub mod execution;
pub mod faults;
pub mod flutter;
mod h5;
mod http;
pub mod lifecycle;
pub mod native;
mod observation;
pub mod runner;
pub mod scenario;
pub mod screen;
mod screen_impl;
mod screenshot;
pub mod sdk;
mod sdk_flutter;
pub mod util;
pub mod wda;
pub mod web;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub use device::Device;
pub use scenario::Scenario;

/// How to start a simulator.
pub struct Options {
    pub scenario: Scenario,
    /// The simulator's home (wrapper scripts, control files, device containers);
    /// default a fresh temp dir removed on drop.
    pub home: Option<PathBuf>,
    /// How many simulated phones.
    pub devices: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { scenario: Scenario::sample(), home: None, devices: 1 }
    }
}

/// What the simulator's tasks share.
pub struct Shared {
    pub devices: Vec<Arc<Device>>,
    pub token: String,
    pub home: PathBuf,
    pub web: Arc<web::WebHost>,
    /// Processes the simulator must kill when it drops (xcodebuild doubles).
    pub children: Mutex<Vec<u32>>,
}

pub struct Simulator {
    pub devices: Vec<Arc<Device>>,
    pub home: PathBuf,
    pub control_addr: SocketAddr,
    pub token: String,
    shared: Arc<Shared>,
    owns_home: bool,
    rt: Option<tokio::runtime::Runtime>,
}

/// The `aab-ios-sim` binary the wrapper scripts exec: `AAB_IOS_SIM_BIN`, else
/// `target/<profile>/aab-ios-sim` next to the running executable (a test
/// binary in `deps/` or the simulator binary itself).
pub fn find_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("AAB_IOS_SIM_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let profile = if dir.file_name().is_some_and(|n| n == "deps") { dir.parent().map(Path::to_path_buf).unwrap_or(dir) } else { dir };
    profile.join("aab-ios-sim")
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn write_wrapper(path: &Path, bin: &Path, args: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let b = shell_quote(&bin.to_string_lossy());
    let text = format!("#!/bin/sh\n# aab-ios-sim double (generated)\nif [ ! -x {b} ]; then echo \"aab-ios-sim binary missing at \"{b}\"; build it: cargo build -p aab-ios-sim\" >&2; exit 127; fi\nexec {b} {args} \"$@\"\n");
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

impl Simulator {
    pub async fn start(opts: Options) -> std::io::Result<Simulator> {
        let (home, owns_home) = match opts.home {
            Some(h) => (h, false),
            None => (std::env::temp_dir().join(format!("aab-ios-sim-{}-{}", std::process::id(), util::random_hex(8))), true),
        };
        std::fs::create_dir_all(home.join("bin"))?;
        // The simulator's own runtime: its listeners serve whatever runtime (or
        // blocking client) the caller uses, and dropping it ends every task.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("aab-ios-sim").enable_all().build()?;
        let scenario = Arc::new(opts.scenario);
        let token = util::random_hex(48);
        let count = opts.devices.max(1);
        let home2 = home.clone();
        let setup = rt.spawn(async move {
            let shared = Arc::new_cyclic(|weak| {
                let devices = (0..count).map(|i| Device::new(i, &home2, scenario.clone(), weak.clone())).collect();
                Shared { devices, token: token.clone(), home: home2.clone(), web: web::WebHost::new(), children: Mutex::new(vec![]) }
            });
            for d in &shared.devices {
                for a in d.scenario.apps.iter().filter(|a| a.installed && a.launched) {
                    lifecycle::launch(d, &a.bundle_id, true, "boot").map_err(|e| std::io::Error::other(format!("{e:?}")))?;
                }
            }
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
            let addr = listener.local_addr()?;
            tokio::spawn(control::serve(listener, shared.clone()));
            Ok::<_, std::io::Error>((shared, addr))
        });
        let (shared, control_addr) = setup.await.map_err(std::io::Error::other)??;
        std::fs::write(home.join("control.token"), &shared.token)?;
        util::write_atomic(&home.join("control.json"), json!({ "address": control_addr.to_string(), "tokenFile": home.join("control.token") }).to_string().as_bytes())?;
        let bin = find_binary();
        let h = shell_quote(&home.to_string_lossy());
        write_wrapper(&home.join("bin/xcrun"), &bin, &format!("xcrun --home {h}"))?;
        write_wrapper(&home.join("bin/devicectl"), &bin, &format!("devicectl --home {h}"))?;
        write_wrapper(&home.join("bin/xcodebuild"), &bin, &format!("xcodebuild --home {h}"))?;
        Ok(Simulator { devices: shared.devices.clone(), home, control_addr, token: shared.token.clone(), shared, owns_home, rt: Some(rt) })
    }

    /// `<home>/bin/xcrun` (the provider prefixes `devicectl`).
    pub fn devicectl(&self) -> PathBuf {
        self.home.join("bin/xcrun")
    }

    /// `<home>/bin/devicectl` (no prefix).
    pub fn devicectl_direct(&self) -> PathBuf {
        self.home.join("bin/devicectl")
    }

    pub fn xcodebuild(&self) -> PathBuf {
        self.home.join("bin/xcodebuild")
    }

    /// A control request handled in process (same ops as the socket, no token).
    pub async fn control(&self, req: Value) -> Value {
        let shared = self.shared.clone();
        let Some(rt) = &self.rt else { return json!({ "ok": false, "error": "stopped" }) };
        match rt.spawn(async move { control::handle(&shared, req).await }).await {
            Ok(v) => v,
            Err(e) => json!({ "ok": false, "error": "control_failed", "message": e.to_string() }),
        }
    }

    /// The line `aab-ios-sim serve` prints.
    pub fn describe(&self) -> Value {
        json!({
            "control": self.control_addr.to_string(), "tokenFile": self.home.join("control.token"), "home": self.home,
            "xcrun": self.devicectl(), "devicectl": self.devicectl_direct(), "xcodebuild": self.xcodebuild(),
            "devices": self.devices.iter().map(|d| json!({ "udid": d.udid, "identifier": d.identifier, "serial": d.serial, "name": d.name, "tunnelIPAddress": d.tunnel_ip })).collect::<Vec<_>>(),
        })
    }

    /// Stops everything: Runners, listeners, Chromium, xcodebuild doubles; removes an owned home.
    pub fn shutdown(&mut self) {
        let Some(rt) = self.rt.take() else { return };
        for pid in self.shared.children.lock().unwrap().drain(..) {
            // SAFETY: kill(2) with a pid we were given by the child itself.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        self.shared.web.shutdown();
        for d in &self.devices {
            d.runner.lock().unwrap().take();
            let mut st = d.st.lock().unwrap();
            for app in st.apps.values_mut() {
                if let Some(p) = app.process.take() {
                    if let Some(t) = p.listener {
                        t.abort();
                    }
                    p.exec.gone();
                }
            }
        }
        rt.shutdown_background();
        if self.owns_home {
            let _ = std::fs::remove_dir_all(&self.home);
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}
