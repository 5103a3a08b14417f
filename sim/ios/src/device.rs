//! One simulated iPhone: its CoreDevice identity (UDID, identifier, serial,
//! product), developer services and tunnel state, the installed apps with
//! their data containers, running processes (pid, runtime epoch, SDK port,
//! native UI state, Flutter engine, action slot), the foreground app, the
//! interface orientation, the ground-truth effect log and injected faults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::capture::CaptureStore;
use crate::faults::Faults;
use crate::scenario::{AppSpec, Scenario};
use crate::util::{now_ms, random_hex, uuid_upper};

/// Facts kept in the truth log (a long benchmark must not grow it without bound).
const TRUTH_RETAINED: usize = 50_000;

pub struct Device {
    pub index: usize,
    /// `00008110-001A2B3C4D5E6F70` style (hardware UDID).
    pub udid: String,
    /// The CoreDevice identifier (a UUID).
    pub identifier: String,
    pub serial: String,
    pub name: String,
    pub product_type: String,
    pub marketing_name: String,
    pub hardware_model: String,
    pub os_version: String,
    pub os_build: String,
    pub ecid: u64,
    /// The developer tunnel's address (`connectionProperties.tunnelIPAddress`);
    /// every listener of the device binds it.
    pub tunnel_ip: String,
    /// `<home>/devices/<udid>`.
    pub dir: PathBuf,
    pub scenario: Arc<Scenario>,
    pub st: Mutex<DevState>,
    /// The running WDA Runner. Its own lock, never taken under `st`: the Runner
    /// calls back into the screen (which takes `st`) while holding its locks.
    pub runner: Mutex<Option<RunnerSlot>>,
    pub faults: Mutex<Faults>,
    /// (last sequence, the retained facts): bounded, oldest dropped first.
    truth: Mutex<(u64, std::collections::VecDeque<Value>)>,
    next_pid: AtomicU32,
    /// The running Runner's epoch (None = no Runner): what xcodebuild doubles wait on.
    pub runner_watch: tokio::sync::watch::Sender<Option<String>>,
    pub shared: Weak<crate::Shared>,
    pub me: Weak<Device>,
}

pub struct DevState {
    pub tunnel_connected: bool,
    pub apps: BTreeMap<String, App>,
    pub foreground: Option<String>,
    pub orientation: String,
}

/// An installed app.
pub struct App {
    pub spec: Arc<AppSpec>,
    pub container: PathBuf,
    pub process: Option<Process>,
    pub capture: CaptureStore,
    /// The last process that ran (epoch, pid, port): what a stale descriptor names.
    pub previous: Option<(String, u32, u16)>,
    pub installed_ms: u64,
}

/// A running app process.
pub struct Process {
    pub pid: u32,
    pub epoch: String,
    /// The SDK listener's bound port (0 = no SDK or not ready).
    pub port: u16,
    pub started_ms: u64,
    pub ui: crate::native::Ui,
    pub flutter: Option<crate::flutter::Engine>,
    pub exec: Arc<crate::execution::Slot>,
    pub observer: crate::observation::Observer,
    pub listener: Option<JoinHandle<()>>,
    /// The last Flutter snapshot posted to `/v1/flutter/snapshot` (ingress).
    pub flutter_ingress: Option<Value>,
}

/// The WebDriverAgent Runner while it runs.
pub struct RunnerSlot {
    pub bundle_id: String,
    pub pid: u32,
    pub runner: Option<crate::wda::Runner>,
    /// The `xcodebuild test-without-building` double that started it, if any.
    pub xcodebuild_pid: Option<u32>,
    pub started_ms: u64,
}

impl Device {
    pub fn new(index: usize, home: &std::path::Path, scenario: Arc<Scenario>, shared: Weak<crate::Shared>) -> Arc<Device> {
        let ecid_hex = random_hex(16);
        let udid = format!("00008120-{}", ecid_hex.to_uppercase());
        let d = &scenario.device;
        let name = if index == 0 { d.name.clone() } else { format!("{} {}", d.name, index + 1) };
        let dir = home.join("devices").join(&udid);
        let dev = Arc::new_cyclic(|me| Device {
            index,
            ecid: u64::from_str_radix(&ecid_hex, 16).unwrap_or(1),
            serial: random_hex(10).to_uppercase(),
            identifier: uuid_upper(),
            udid,
            name,
            product_type: d.product_type.clone(),
            marketing_name: d.marketing_name.clone(),
            hardware_model: d.hardware_model.clone(),
            os_version: d.os_version_number.clone(),
            os_build: d.os_build_update.clone(),
            tunnel_ip: "127.0.0.1".into(),
            dir,
            scenario: scenario.clone(),
            st: Mutex::new(DevState { tunnel_connected: true, apps: BTreeMap::new(), foreground: None, orientation: "portrait".into() }),
            runner: Mutex::new(None),
            faults: Mutex::new(Faults::default()),
            truth: Mutex::new((0, std::collections::VecDeque::new())),
            next_pid: AtomicU32::new(400 + index as u32 * 1000),
            runner_watch: tokio::sync::watch::Sender::new(None),
            shared,
            me: me.clone(),
        });
        for spec in scenario.apps.iter().filter(|a| a.installed) {
            dev.install_spec(Arc::new(spec.clone()));
        }
        dev
    }

    pub fn arc(&self) -> Arc<Device> {
        self.me.upgrade().expect("device alive")
    }

    pub fn next_pid(&self) -> u32 {
        self.next_pid.fetch_add(1 + (now_ms() % 7) as u32, Ordering::SeqCst) + 1
    }

    pub fn container(&self, bundle_id: &str) -> PathBuf {
        self.dir.join("containers").join(bundle_id)
    }

    /// Installs (or updates, keeping the data container) an app.
    pub fn install_spec(&self, spec: Arc<AppSpec>) {
        let container = self.container(&spec.bundle_id);
        for sub in ["Documents", "Library/Caches", "tmp"] {
            let _ = std::fs::create_dir_all(container.join(sub));
        }
        let mut st = self.st.lock().unwrap();
        match st.apps.get_mut(&spec.bundle_id) {
            Some(app) => app.spec = spec,
            None => {
                let bundle = spec.bundle_id.clone();
                st.apps.insert(bundle.clone(), App { capture: CaptureStore::new(&bundle), spec, container, process: None, previous: None, installed_ms: now_ms() });
            }
        }
    }

    /// Appends a fact to the ground-truth log; returns its sequence number.
    pub fn record(&self, kind: &str, mut data: Value) -> u64 {
        let mut t = self.truth.lock().unwrap();
        t.0 += 1;
        let seq = t.0;
        if !data.is_object() {
            data = json!({ "value": data });
        }
        data["seq"] = json!(seq);
        data["kind"] = json!(kind);
        data["atMs"] = json!(now_ms());
        t.1.push_back(data);
        if t.1.len() > TRUTH_RETAINED {
            t.1.pop_front();
        }
        seq
    }

    pub fn truth_since(&self, since: u64) -> Vec<Value> {
        self.truth.lock().unwrap().1.iter().filter(|r| r["seq"].as_u64().unwrap_or(0) > since).cloned().collect()
    }

    /// The last truth sequence number.
    pub fn truth_len(&self) -> u64 {
        self.truth.lock().unwrap().0
    }

    /// The process of `bundle_id` whose runtime epoch is `epoch`, under the lock.
    pub fn with_process<T>(&self, bundle_id: &str, epoch: &str, f: impl FnOnce(&mut DevState) -> T) -> Option<T> {
        let mut st = self.st.lock().unwrap();
        let alive = st.apps.get(bundle_id).and_then(|a| a.process.as_ref()).is_some_and(|p| p.epoch == epoch);
        if !alive {
            return None;
        }
        Some(f(&mut st))
    }

    /// The screen size in points for the current orientation.
    pub fn screen_points(&self, orientation: &str) -> (f64, f64) {
        let s = self.scenario.device.screen;
        if orientation.starts_with("landscape") { (s.height, s.width) } else { (s.width, s.height) }
    }

    pub fn scale(&self) -> f64 {
        self.scenario.device.screen.scale
    }

    pub fn web(&self) -> Option<Arc<crate::web::WebHost>> {
        self.shared.upgrade().map(|s| s.web.clone())
    }
}

impl DevState {
    pub fn process(&self, bundle_id: &str) -> Option<&Process> {
        self.apps.get(bundle_id)?.process.as_ref()
    }

    pub fn process_mut(&mut self, bundle_id: &str) -> Option<&mut Process> {
        self.apps.get_mut(bundle_id)?.process.as_mut()
    }

    /// Whether `bundle_id` (and, if given, process `pid`) is the foreground app.
    pub fn is_foreground(&self, bundle_id: &str) -> bool {
        self.foreground.as_deref() == Some(bundle_id) && self.process(bundle_id).is_some()
    }
}
