//! The on-device UiAutomation runtime (aab-protocols §3): the `app_process`
//! tool runs its main class — one-shot maintenance modes, or a start that
//! leaves a simulated runtime process behind (pid, owner lock of its root,
//! descriptor files, `localabstract:aab-uia-<epoch>` served by `http.rs`, ops
//! in `ops.rs`, the phone journal under `<root>/sessions/<epoch>/`).
//! Control ops `uia`, `uia-restart`, `uia-kill`, `system-dialog`.

mod http;
mod ops;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::device::{Device, random_hex, uuid4};
use crate::tools::{Ctx, Res};

pub const MAIN_CLASS: &str = "io.github.mobileaidev.aiappbridge.uia.UiaRuntime";
pub const CAPACITY: usize = 256;

pub use crate::device::sha256_hex;

/// Runtimes of one device: the running one per root (the owner lock) and every epoch started since boot.
#[derive(Default)]
pub struct Registry {
    running: HashMap<String, Arc<Runtime>>,
    epochs: Vec<Arc<Runtime>>,
}

pub struct Runtime {
    pub root: String,
    pub epoch: String,
    pub token: String,
    pub pid: u32,
    pub boot_id: String,
    pub dex_sha: String,
    pub classpath: String,
    pub api: u32,
    pub st: Mutex<RtState>,
}

#[derive(Default)]
pub struct RtState {
    pub alive: bool,
    pub closing: bool,
    pub snapshots: VecDeque<ops::Snapshot>,
    pub evicted: HashSet<String>,
    pub actions: BTreeMap<String, ops::Action>,
    pub count: usize,
    pub active: Option<String>,
}

impl Runtime {
    pub fn session_path(&self) -> String {
        format!("{}/sessions/{}", self.root, self.epoch)
    }

    fn descriptor(&self, running: bool) -> Value {
        json!({
            "schemaVersion": "aab.uia.runtime.v1",
            "bootId": self.boot_id,
            "runtimeEpoch": self.epoch,
            "dexSha256": self.dex_sha,
            "apiLevel": self.api,
            "pid": self.pid,
            "socketName": format!("aab-uia-{}", self.epoch),
            "token": self.token,
            "sessionPath": self.session_path(),
            "running": running,
        })
    }

    fn write_descriptor(&self, dev: &Device, running: bool) {
        let text = serde_json::to_vec_pretty(&self.descriptor(running)).unwrap();
        let _ = crate::rootfs::write_atomic(&dev.host_path(&format!("{}/runtime.json", self.session_path())), &text);
        let _ = crate::rootfs::write_atomic(&dev.host_path(&format!("{}/runtime.json", self.root)), &text);
    }

    pub fn alive(&self) -> bool {
        self.st.lock().unwrap().alive
    }
}

fn err_json(code: &str, message: impl Into<String>) -> String {
    format!("{}\n", json!({ "ok": false, "error": code, "message": message.into() }))
}

fn fail2(code: &str, message: impl Into<String>) -> Res {
    Res::fail(2, err_json(code, message))
}

fn valid_root(root: &str) -> bool {
    root == "/data/local/tmp/ai-app-bridge-uia/v1"
        || root.strip_prefix("/data/local/tmp/ai-app-bridge-uia-test-").is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'))
}

/// `CLASSPATH=<jar> app_process [-opts] <cmd-dir> <class> <root> <sha256> [mode …]`.
pub fn app_process(ctx: &Ctx, args: &[String]) -> Res {
    let mut it = args.iter().peekable();
    let classpath = it.next().and_then(|a| a.strip_prefix("--sim-classpath=")).unwrap_or("").to_string();
    while it.peek().is_some_and(|a| a.starts_with('-')) {
        it.next();
    }
    let rest: Vec<&String> = it.collect();
    if rest.len() < 2 {
        return Res::fail(1, "Usage: app_process [java-options] cmd-dir start-class-name [options]\n");
    }
    let class = rest[1].as_str();
    let cp = if classpath.is_empty() { String::new() } else if classpath.starts_with('/') { classpath.clone() } else { format!("{}/{classpath}", ctx.cwd.trim_end_matches('/')) };
    let jar = if cp.is_empty() { None } else { std::fs::read(ctx.dev.host_path(&cp)).ok() };
    if class != MAIN_CLASS || jar.is_none() {
        return Res::fail(1, format!("Exception in thread \"main\" java.lang.ClassNotFoundException: Didn't find class \"{class}\" on path: DexPathList[[zip file \"{cp}\"],nativeLibraryDirectories=[/system/lib64, /system_ext/lib64]]\n\tat dalvik.system.BaseDexClassLoader.findClass(BaseDexClassLoader.java:259)\n\tat java.lang.ClassLoader.loadClass(ClassLoader.java:379)\n"));
    }
    let (Some(root), Some(sha)) = (rest.get(2), rest.get(3)) else { return fail2("uia_invalid_arguments", "usage: UiaRuntime <root> <sha256> [owner-status|acknowledge-record JSON|recover-record JSON]") };
    let root = root.trim_end_matches('/').to_string();
    if !valid_root(&root) {
        return fail2("uia_invalid_root", format!("root {root:?} is not /data/local/tmp/ai-app-bridge-uia/v1 or /data/local/tmp/ai-app-bridge-uia-test-<[a-z0-9-]>"));
    }
    let actual = sha256_hex(jar.as_deref().unwrap());
    if !sha.eq_ignore_ascii_case(&actual) {
        return fail2("uia_runtime_artifact_mismatch", format!("CLASSPATH {cp} has sha256 {actual}, expected {sha}"));
    }
    let dev = &ctx.dev;
    match rest.get(4).map(|s| s.as_str()) {
        None => match start_runtime(dev, &root, &actual, &cp) {
            Ok(rt) => Res::ok(format!("{}\n", json!({ "ok": true, "event": "uia_runtime_started", "runtimeEpoch": rt.epoch, "pid": rt.pid, "socketName": format!("aab-uia-{}", rt.epoch) }))),
            Err((code, msg)) => fail2(code, msg),
        },
        Some("owner-status") => {
            let owned = dev.uia.lock().unwrap().running.contains_key(&root);
            Res::ok(format!("{}\n", json!({ "ok": true, "schemaVersion": "aab.uia.owner.v1", "root": root, "dexSha256": actual, "owned": owned })))
        }
        Some(mode @ ("acknowledge-record" | "recover-record")) => {
            let Some(identity) = rest.get(5).and_then(|s| serde_json::from_str::<Value>(s).ok()).filter(Value::is_object) else { return fail2("uia_invalid_identity", format!("{mode} needs a JSON identity argument")) };
            let r = if mode == "acknowledge-record" { ops::acknowledge_record(dev, &root, &identity) } else { ops::recover_record(dev, &root, &identity) };
            match r {
                Ok(v) => Res::ok(format!("{v}\n")),
                Err((code, msg)) => fail2(code, msg),
            }
        }
        Some(other) => fail2("uia_unknown_mode", format!("unknown mode {other:?}")),
    }
}

/// Starts a runtime on `root` (takes its owner lock): descriptor files, socket, pid.
fn start_runtime(dev: &Arc<Device>, root: &str, sha: &str, classpath: &str) -> Result<Arc<Runtime>, (&'static str, String)> {
    let mut reg = dev.uia.lock().unwrap();
    if let Some(rt) = reg.running.get(root) {
        return Err(("uia_runtime_already_running", format!("{root}/owner.lock is held by pid {} (runtimeEpoch {})", rt.pid, rt.epoch)));
    }
    let pid = {
        let mut ph = dev.phone.lock().unwrap();
        ph.next_pid += 1 + (ph.next_pid % 7);
        ph.next_pid
    };
    let api = dev.props.lock().unwrap().get("ro.build.version.sdk").and_then(|s| s.parse().ok()).unwrap_or(0);
    let rt = Arc::new(Runtime {
        root: root.to_string(),
        epoch: uuid4(),
        token: random_hex(64),
        pid,
        boot_id: dev.boot_id(),
        dex_sha: sha.to_string(),
        classpath: classpath.to_string(),
        api,
        st: Mutex::new(RtState { alive: true, ..Default::default() }),
    });
    let _ = std::fs::create_dir_all(dev.host_path(&format!("{}/actions", rt.session_path())));
    let lock = dev.host_path(&format!("{root}/owner.lock"));
    if !lock.exists() {
        let _ = std::fs::write(&lock, b"");
    }
    rt.write_descriptor(dev, true);
    let p = crate::phone::Proc { pid, start_ticks: dev.uptime_ticks(), epoch: rt.epoch.clone(), window_token: String::new(), activity_token: String::new(), session_token: String::new() };
    crate::lifecycle::write_proc_files(dev, "app_process", 2000, &p, false);
    let mut rx = dev.listen(&format!("localabstract:aab-uia-{}", rt.epoch));
    reg.running.insert(root.to_string(), rt.clone());
    reg.epochs.push(rt.clone());
    drop(reg);
    crate::lifecycle::write_net_unix(dev);
    dev.phone.lock().unwrap().log(pid, 'I', "UiaRuntime", &format!("started runtimeEpoch {} on {root}", rt.epoch));
    dev.record("uia-runtime-start", json!({ "root": root, "runtimeEpoch": rt.epoch, "pid": pid, "dexSha256": sha }));
    let (d, r) = (dev.clone(), rt.clone());
    tokio::spawn(async move {
        while let Some(io) = rx.recv().await {
            let (d, r) = (d.clone(), r.clone());
            tokio::spawn(async move { http::serve(d, r, io).await });
        }
    });
    Ok(rt)
}

/// The runtime process ends (stop, kill, restart, reboot). A stop rewrites the descriptor with `running:false`.
/// The runtime process dies and the same jar starts again: a new epoch, the old
/// epoch's journal left on the phone for `recover-record`.
fn restart(dev: &Arc<Device>, rt: &Arc<Runtime>) -> Result<Arc<Runtime>, (&'static str, String)> {
    end_runtime(dev, rt, "restart");
    let jar = std::fs::read(dev.host_path(&rt.classpath)).unwrap_or_default();
    if sha256_hex(&jar) != rt.dex_sha {
        return Err(("uia_runtime_artifact_mismatch", "the jar changed; the runtime did not start again".into()));
    }
    start_runtime(dev, &rt.root, &rt.dex_sha, &rt.classpath)
}

fn end_runtime(dev: &Arc<Device>, rt: &Arc<Runtime>, reason: &str) {
    {
        let mut st = rt.st.lock().unwrap();
        if !st.alive {
            return;
        }
        st.alive = false;
    }
    {
        let mut reg = dev.uia.lock().unwrap();
        if reg.running.get(&rt.root).is_some_and(|r| Arc::ptr_eq(r, rt)) {
            reg.running.remove(&rt.root);
        }
    }
    dev.unlisten(&format!("localabstract:aab-uia-{}", rt.epoch));
    if reason == "stop" {
        rt.write_descriptor(dev, false);
    }
    let _ = std::fs::remove_dir_all(dev.root.join("proc").join(rt.pid.to_string()));
    crate::lifecycle::write_net_unix(dev);
    dev.record("uia-runtime-stop", json!({ "root": rt.root, "runtimeEpoch": rt.epoch, "pid": rt.pid, "reason": reason }));
}

/// A reboot kills every runtime (and the system dialog).
pub fn reboot(dev: &Arc<Device>) {
    let all: Vec<Arc<Runtime>> = dev.uia.lock().unwrap().running.values().cloned().collect();
    for rt in all {
        end_runtime(dev, &rt, "reboot");
    }
    dev.uia.lock().unwrap().epochs.clear();
    dev.phone.lock().unwrap().system_dialog = None;
}

/// Pids of running runtimes (`ps`).
pub fn pids(dev: &Device) -> Vec<u32> {
    let mut v: Vec<u32> = dev.uia.lock().unwrap().running.values().map(|r| r.pid).collect();
    v.sort();
    v
}

fn cerr(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

fn pick_running(dev: &Device, req: &Value) -> Option<Arc<Runtime>> {
    let reg = dev.uia.lock().unwrap();
    match req.get("root").and_then(Value::as_str) {
        Some(r) => reg.running.get(r.trim_end_matches('/')).cloned(),
        None => reg.running.values().next().cloned(),
    }
}

/// Control ops `uia` (state), `uia-restart`, `uia-kill`, `system-dialog`.
pub fn control(dev: &Arc<Device>, req: &Value) -> Value {
    match req.get("op").and_then(Value::as_str).unwrap_or("") {
        "uia" => {
            let epochs: Vec<Arc<Runtime>> = dev.uia.lock().unwrap().epochs.clone();
            let list: Vec<Value> = epochs
                .iter()
                .filter(|rt| req.get("root").and_then(Value::as_str).is_none_or(|r| r.trim_end_matches('/') == rt.root))
                .map(|rt| {
                    let st = rt.st.lock().unwrap();
                    let actions: Vec<Value> = st.actions.values().map(ops::Action::summary).collect();
                    let pending = st.actions.values().filter(|a| a.phase != "terminal").count();
                    let dir = dev.host_path(&format!("{}/actions", rt.session_path()));
                    let mut journal: Vec<Value> = std::fs::read_dir(&dir).into_iter().flatten().flatten().filter_map(|e| std::fs::read_to_string(e.path()).ok()).filter_map(|t| serde_json::from_str::<Value>(&t).ok()).collect();
                    journal.sort_by(|a, b| a["preparedAtElapsedMs"].as_u64().cmp(&b["preparedAtElapsedMs"].as_u64()));
                    json!({ "root": rt.root, "runtimeEpoch": rt.epoch, "pid": rt.pid, "running": st.alive, "closing": st.closing, "dexSha256": rt.dex_sha, "count": st.count, "pendingActions": pending, "activeActionId": st.active, "snapshots": st.snapshots.len(), "actions": actions, "journal": journal })
                })
                .collect();
            json!({ "ok": true, "runtimes": list })
        }
        "uia-kill" => match pick_running(dev, req) {
            Some(rt) => {
                end_runtime(dev, &rt, "killed");
                json!({ "ok": true, "runtimeEpoch": rt.epoch, "pid": rt.pid })
            }
            None => cerr("uia_not_running", "no running UIA runtime"),
        },
        "uia-restart" => match pick_running(dev, req) {
            Some(rt) => match restart(dev, &rt) {
                Ok(n) => json!({ "ok": true, "oldRuntimeEpoch": rt.epoch, "runtimeEpoch": n.epoch, "pid": n.pid }),
                Err((c, m)) => cerr(c, m),
            },
            None => cerr("uia_not_running", "no running UIA runtime"),
        },
        "system-dialog" => {
            let mut ph = dev.phone.lock().unwrap();
            if req.get("dismiss").and_then(Value::as_bool) == Some(true) {
                let d = ph.system_dialog.take();
                drop(ph);
                dev.record("system-dialog-dismiss", json!({ "package": d.as_ref().map(|d| d.package.clone()) }));
                return json!({ "ok": true, "dismissed": d.is_some() });
            }
            if req.get("package").is_none() {
                return json!({ "ok": true, "dialog": ph.system_dialog.as_ref().map(|d| json!({ "package": d.package, "title": d.title, "windowId": d.window_id, "buttons": d.buttons.iter().map(|b| b.text.clone()).collect::<Vec<_>>() })) });
            }
            match serde_json::from_value::<crate::system_dialog::SystemDialog>(req.clone()) {
                Ok(mut d) => {
                    d.window_id = crate::system_dialog::next_window_id();
                    let v = json!({ "package": d.package, "title": d.title, "windowId": d.window_id });
                    ph.system_dialog = Some(d);
                    ph.keyboard = false;
                    drop(ph);
                    dev.record("system-dialog", v.clone());
                    json!({ "ok": true, "dialog": v })
                }
                Err(e) => cerr("invalid_argument", e.to_string()),
            }
        }
        other => cerr("unknown_op", format!("unknown op {other:?}")),
    }
}
