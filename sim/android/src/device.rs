//! One simulated device: identity (serial, props, boot id), its root directory,
//! simulator-held socket listeners, the ground-truth journal, injected faults,
//! the phone model (apps, screens) and the connection generation that
//! "disconnect" and "reboot" bump to drop adb connections.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio::sync::{Notify, mpsc, watch};

use crate::faults::Faults;
use crate::phone::Phone;
use crate::scenario::Scenario;

/// Features advertised in the CNXN banner (adb 29 picks services from them).
pub const FEATURES: &str = "shell_v2,cmd,stat_v2,ls_v2,fixed_push_mkdir,abb_exec,abb,apex,fixed_push_symlink_timestamp";

pub struct Device {
    pub serial: String,
    pub port: u16,
    pub root: PathBuf,
    pub props: Mutex<BTreeMap<String, String>>,
    pub token: String,
    boot: Mutex<Boot>,
    gen_tx: watch::Sender<u64>,
    listeners: Mutex<HashMap<String, mpsc::UnboundedSender<DuplexStream>>>,
    truth: Mutex<Vec<Value>>,
    truth_changed: Notify,
    pub faults: Mutex<Faults>,
    pub phone: Mutex<Phone>,
    pub scenario: Scenario,
    /// Set while the device "reboots" or is disconnected: new adb connections are dropped.
    pub offline_until: Mutex<Option<Instant>>,
    pub tool_port: Mutex<u16>,
    /// UIA runtimes (src/uia/) by phone root.
    pub uia: Mutex<crate::uia::Registry>,
    /// Executor instrumentation sessions (src/executor.rs).
    pub executor: Mutex<crate::executor::Registry>,
}

pub struct Boot {
    pub id: String,
    pub at: Instant,
}

/// Lower-case hex SHA-256 of `b` (jar hashes, APK hashes, request/receipt digests).
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n.div_ceil(2)];
    getrandom::fill(&mut b).expect("getrandom");
    b.iter().map(|x| format!("{x:02x}")).collect::<String>()[..n].to_string()
}

pub fn uuid4() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("getrandom");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Device {
    pub fn new(port: u16, root: PathBuf, scenario: Scenario) -> Arc<Device> {
        let mut props = BTreeMap::new();
        let d = &scenario.device;
        for (k, v) in [
            ("ro.product.name", d.product.clone()),
            ("ro.product.model", d.model.clone()),
            ("ro.product.device", d.device.clone()),
            ("ro.product.manufacturer", d.manufacturer.clone()),
            ("ro.product.brand", d.manufacturer.to_lowercase()),
            ("ro.build.version.sdk", d.sdk_int.to_string()),
            ("ro.build.version.release", d.release.clone()),
            ("ro.serialno", format!("SIM{port}")),
            ("ro.debuggable", "1".into()),
            ("ro.secure", "1".into()),
            ("ro.product.cpu.abi", "x86_64".into()),
            ("sys.boot_completed", "1".into()),
            ("dev.bootcomplete", "1".into()),
            ("persist.sys.locale", "en-US".into()),
        ] {
            props.insert(k.to_string(), v);
        }
        for (k, v) in &d.props {
            props.insert(k.clone(), v.clone());
        }
        let (gen_tx, _) = watch::channel(0);
        let phone = Phone::from_scenario(&scenario);
        Arc::new(Device {
            serial: format!("127.0.0.1:{port}"),
            port,
            root,
            props: Mutex::new(props),
            token: random_hex(32),
            boot: Mutex::new(Boot { id: uuid4(), at: Instant::now() }),
            gen_tx,
            listeners: Mutex::new(HashMap::new()),
            truth: Mutex::new(Vec::new()),
            truth_changed: Notify::new(),
            faults: Mutex::new(Faults::default()),
            phone: Mutex::new(phone),
            scenario,
            offline_until: Mutex::new(None),
            tool_port: Mutex::new(0),
            uia: Mutex::new(Default::default()),
            executor: Mutex::new(Default::default()),
        })
    }

    pub fn banner(&self) -> String {
        let p = self.props.lock().unwrap();
        let g = |k: &str| p.get(k).cloned().unwrap_or_default();
        format!("device::ro.product.name={};ro.product.model={};ro.product.device={};features={FEATURES}", g("ro.product.name"), g("ro.product.model"), g("ro.product.device"))
    }

    pub fn boot_id(&self) -> String {
        self.boot.lock().unwrap().id.clone()
    }

    pub fn uptime(&self) -> Duration {
        self.boot.lock().unwrap().at.elapsed()
    }

    /// Clock ticks (USER_HZ = 100) since boot, as /proc/<pid>/stat counts them.
    pub fn uptime_ticks(&self) -> u64 {
        (self.uptime().as_millis() / 10) as u64
    }

    /// New boot id and uptime origin (a reboot).
    pub fn new_boot(&self) {
        *self.boot.lock().unwrap() = Boot { id: uuid4(), at: Instant::now() };
    }

    pub fn connection_generation(&self) -> watch::Receiver<u64> {
        self.gen_tx.subscribe()
    }

    /// Drops every adb connection to this device.
    pub fn drop_connections(&self) {
        self.gen_tx.send_modify(|g| *g += 1);
    }

    pub fn is_offline(&self) -> bool {
        let mut o = self.offline_until.lock().unwrap();
        match *o {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *o = None;
                false
            }
            None => false,
        }
    }

    // ---- simulator-held listeners (localabstract:NAME, tcp:PORT) ----

    pub fn listen(&self, key: &str) -> mpsc::UnboundedReceiver<DuplexStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.listeners.lock().unwrap().insert(key.to_string(), tx);
        rx
    }

    pub fn unlisten(&self, key: &str) {
        self.listeners.lock().unwrap().remove(key);
    }

    pub fn has_listener(&self, key: &str) -> bool {
        self.listeners.lock().unwrap().get(key).is_some_and(|t| !t.is_closed())
    }

    pub fn listener_names(&self) -> Vec<String> {
        self.listeners.lock().unwrap().iter().filter(|(_, t)| !t.is_closed()).map(|(k, _)| k.clone()).collect()
    }

    pub fn deliver(&self, key: &str, io: DuplexStream) -> Result<(), DuplexStream> {
        let tx = self.listeners.lock().unwrap().get(key).cloned();
        match tx {
            Some(tx) => tx.send(io).map_err(|e| e.0),
            None => Err(io),
        }
    }

    // ---- ground truth ----

    /// Appends a ground-truth record (what really happened on the phone).
    pub fn record(&self, kind: &str, data: Value) {
        let mut t = self.truth.lock().unwrap();
        let seq = t.len() as u64 + 1;
        t.push(json!({ "seq": seq, "kind": kind, "atMs": now_ms(), "data": data }));
        drop(t);
        self.truth_changed.notify_waiters();
    }

    /// The seq of the newest truth record.
    pub fn truth_len(&self) -> u64 {
        self.truth.lock().unwrap().len() as u64
    }

    pub fn truth_since(&self, seq: u64) -> Vec<Value> {
        self.truth.lock().unwrap().iter().skip(seq as usize).cloned().collect()
    }

    pub fn read_device_file(&self, p: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(p)
    }

    /// Host path of a device path.
    pub fn host_path(&self, dev_path: &str) -> PathBuf {
        crate::rootfs::resolve(&self.root, dev_path, true)
    }
}
