//! App processes and device power: starting/stopping an app process (pid,
//! start time, SDK runtime epoch and socket, /proc files), launching and
//! foreground changes, reboot. Keeps the simulator-maintained /proc files
//! (boot_id, uptime, /proc/<pid>/{stat,status,cmdline}, /proc/net/unix).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::device::{Device, now_ms, random_hex, uuid4};
use crate::phone::Proc;
use crate::rootfs::write_atomic;

const ZYGOTE_PID: u32 = 612;

fn proc_path(dev: &Device, rel: &str) -> std::path::PathBuf {
    dev.root.join("proc").join(rel)
}

pub fn write_boot_files(dev: &Device) {
    let _ = write_atomic(&proc_path(dev, "sys/kernel/random/boot_id"), format!("{}\n", dev.boot_id()).as_bytes());
    // The launcher is a process too (foreground identity on the home screen).
    let launcher = Proc { pid: crate::dumpsys::LAUNCHER_PID, start_ticks: 2, epoch: String::new(), window_token: String::new(), activity_token: String::new(), session_token: String::new() };
    write_proc_files(dev, crate::dumpsys::LAUNCHER_PKG, crate::dumpsys::LAUNCHER_UID, &launcher, false);
    write_uptime(dev);
    write_net_unix(dev);
}

pub fn write_uptime(dev: &Device) {
    let up = dev.uptime().as_secs_f64() + 0.01;
    let _ = write_atomic(&proc_path(dev, "uptime"), format!("{:.2} {:.2}\n", up, up * 1.7).as_bytes());
}

/// Keeps /proc/uptime moving while the device runs.
pub fn spawn_uptime_ticker(dev: Arc<Device>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_millis(50));
        loop {
            t.tick().await;
            write_uptime(&dev);
        }
    })
}

/// /proc/net/unix with the abstract sockets simulator listeners stand for.
pub fn write_net_unix(dev: &Device) {
    let mut s = String::from("Num       RefCount Protocol Flags    Type St Inode Path\n");
    let mut names = dev.listener_names();
    names.sort();
    for (i, n) in names.iter().enumerate() {
        if let Some(name) = n.strip_prefix("localabstract:") {
            s.push_str(&format!("{:016x}: 00000002 00000000 00010000 0001 01 {} @{}\n", 0xffff_8880_0000_0000u64 + i as u64 * 0x400, 40000 + i, name));
        }
    }
    s.push_str("0000000000000000: 00000003 00000000 00000000 0001 03 21234 /dev/socket/logdw\n");
    let _ = write_atomic(&proc_path(dev, "net/unix"), s.as_bytes());
}

fn comm(package: &str) -> String {
    let b = package.as_bytes();
    String::from_utf8_lossy(&b[b.len().saturating_sub(15)..]).into_owned()
}

pub fn write_proc_files(dev: &Device, package: &str, uid: u32, p: &Proc, frozen: bool) {
    let dir = proc_path(dev, &p.pid.to_string());
    let state = if frozen { 'T' } else { 'S' };
    let c = comm(package);
    let stat = format!(
        "{pid} ({c}) {state} {ZYGOTE_PID} {ZYGOTE_PID} 0 0 -1 1077952832 21413 0 412 0 163 57 0 0 10 -10 31 0 {start} 15430565888 31337 18446744073709551615 1 1 0 0 0 0 4612 1 1073775864 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        pid = p.pid,
        start = p.start_ticks
    );
    let status = format!(
        "Name:\t{c}\nUmask:\t0077\nState:\t{}\nTgid:\t{pid}\nNgid:\t0\nPid:\t{pid}\nPPid:\t{ZYGOTE_PID}\nTracerPid:\t0\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nFDSize:\t128\nGroups:\t3003 9997 20123 50123\nVmPeak:\t15069376 kB\nVmSize:\t15069376 kB\nVmRSS:\t125348 kB\nThreads:\t31\nSigQ:\t0/6517\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000080001204\nSigIgn:\t0000000000001001\nSigCgt:\t0000006e400084f8\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nSeccomp:\t2\nvoluntary_ctxt_switches:\t1220\nnonvoluntary_ctxt_switches:\t310\n",
        if frozen { "T (stopped)" } else { "S (sleeping)" },
        pid = p.pid
    );
    let _ = write_atomic(&dir.join("stat"), stat.as_bytes());
    let _ = write_atomic(&dir.join("status"), status.as_bytes());
    let _ = write_atomic(&dir.join("cmdline"), format!("{package}\0").as_bytes());
}

/// Starts the app's process if it is not running; returns its pid.
pub fn start_process(dev: &Arc<Device>, idx: usize) -> u32 {
    let (proc_, package, uid, sdk, sdk_version) = {
        let mut ph = dev.phone.lock().unwrap();
        if let Some(p) = &ph.apps[idx].process {
            return p.pid;
        }
        ph.next_pid += 1 + (ph.next_pid % 7);
        let pid = ph.next_pid;
        ph.next_task += 1;
        let task = ph.next_task;
        let epoch = format!("{}-{}", now_ms(), uuid4());
        let p = Proc { pid, start_ticks: dev.uptime_ticks(), epoch, window_token: random_hex(7), activity_token: random_hex(7), session_token: random_hex(7) };
        let app = &mut ph.apps[idx];
        app.process = Some(p.clone());
        app.task_id = task;
        app.frozen = false;
        app.reset_runtime();
        let (package, uid, sdk, v) = (app.package.clone(), app.uid(), app.spec.sdk, app.spec.sdk_version.clone().unwrap_or_else(|| "0.4.5".into()));
        ph.log(pid, 'I', "ActivityManager", &format!("Start proc {pid}:{package}/u0a{} for activity", uid % 100000 - 10000));
        (p, package, uid, sdk, v)
    };
    write_proc_files(dev, &package, uid, &proc_, false);
    if sdk {
        crate::sdk::start(dev.clone(), package.clone(), proc_.epoch.clone(), sdk_version);
    }
    write_net_unix(dev);
    crate::webview::process_started(dev);
    dev.record("process-start", json!({ "package": package, "pid": proc_.pid, "runtimeEpoch": if sdk { Some(&proc_.epoch) } else { None } }));
    proc_.pid
}

pub fn stop_process(dev: &Arc<Device>, idx: usize, reason: &str) {
    let (p, package, sdk) = {
        let mut ph = dev.phone.lock().unwrap();
        let app = &mut ph.apps[idx];
        let Some(p) = app.process.take() else { return };
        let (package, sdk) = (app.package.clone(), app.spec.sdk);
        if ph.foreground == Some(idx) {
            ph.foreground = None;
            ph.keyboard = false;
        }
        ph.log(1000, 'I', "ActivityManager", &format!("Killing {}:{package}/u0a: {reason}", p.pid));
        (p, package, sdk)
    };
    if sdk {
        dev.unlisten(&format!("localabstract:aab-sdk-{}", p.epoch));
        crate::sdk_actions::process_gone(&p.epoch);
    }
    // An instrumentation runs inside its target's process and dies with it.
    crate::executor::process_gone(dev, &package, p.pid);
    let _ = std::fs::remove_dir_all(proc_path(dev, &p.pid.to_string()));
    crate::webview::process_stopped(dev, &package);
    write_net_unix(dev);
    dev.record("process-stop", json!({ "package": package, "pid": p.pid, "reason": reason }));
}

/// `kill -SIG PID` on an app process (through `run-as PKG kill`): STOP/CONT
/// freeze and thaw it (`/proc/<pid>/stat` state T), KILL/TERM end it.
pub fn signal(dev: &Arc<Device>, package: &str, pid: u32, sig: &str) -> Result<(), String> {
    let idx = dev.phone.lock().unwrap().apps.iter().position(|a| a.package == package && a.process.as_ref().is_some_and(|p| p.pid == pid));
    let Some(idx) = idx else { return Err(format!("kill: {pid}: No such process")) };
    let sig = sig.trim_start_matches('-').trim_start_matches("SIG").to_uppercase();
    match sig.as_str() {
        "STOP" | "19" | "CONT" | "18" => {
            let frozen = matches!(sig.as_str(), "STOP" | "19");
            let (uid, p) = {
                let mut ph = dev.phone.lock().unwrap();
                let app = &mut ph.apps[idx];
                app.frozen = frozen;
                (app.uid(), app.process.clone().unwrap())
            };
            write_proc_files(dev, package, uid, &p, frozen);
        }
        "KILL" | "9" | "TERM" | "15" | "" => stop_process(dev, idx, "signal"),
        "0" => {}
        other => return Err(format!("kill: unknown signal {other}")),
    }
    dev.record("signal", json!({ "package": package, "pid": pid, "signal": sig }));
    Ok(())
}

/// Brings an app to the foreground (starting it), optionally on an activity's screen.
pub fn launch(dev: &Arc<Device>, package: &str, activity: Option<&str>) -> Result<String, String> {
    let idx = dev.phone.lock().unwrap().app_index(package).ok_or_else(|| format!("Error: Activity class {{{package}/{}}} does not exist.", activity.unwrap_or("?")))?;
    start_process(dev, idx);
    let mut ph = dev.phone.lock().unwrap();
    let app = &mut ph.apps[idx];
    if let Some(act) = activity {
        let full = app.activity_class(act);
        if !app.spec.activities.iter().any(|a| app.activity_class(a) == full) {
            return Err(format!("Error: Activity class {{{package}/{full}}} does not exist."));
        }
        if app.current_activity().as_deref() != Some(&full)
            && let Some(i) = app.spec.screens.iter().position(|s| s.activity.as_ref().map(|a| app.activity_class(a)).or_else(|| app.launcher().map(|l| app.activity_class(&l))) == Some(full.clone())) {
                app.screen = i;
                app.focused = None;
            }
    }
    let component = format!("{package}/{}", app.current_activity().unwrap_or_default());
    let pid = app.process.as_ref().map(|p| p.pid).unwrap_or(0);
    ph.foreground = Some(idx);
    ph.keyboard = false;
    ph.log(1000, 'I', "ActivityTaskManager", &format!("Displayed {component}: +312ms"));
    let _ = pid;
    drop(ph);
    dev.record("launch", json!({ "package": package, "component": component }));
    Ok(component)
}

/// Foreground change without a launch (control interface); None = launcher.
pub fn set_foreground(dev: &Arc<Device>, package: Option<&str>) -> Result<(), String> {
    match package {
        Some(p) => launch(dev, p, None).map(|_| ()),
        None => {
            let mut ph = dev.phone.lock().unwrap();
            ph.foreground = None;
            ph.keyboard = false;
            drop(ph);
            dev.record("foreground", json!({ "package": null }));
            Ok(())
        }
    }
}

/// Crash (or restart) the app's process; `restart` starts it again in the foreground.
pub fn crash(dev: &Arc<Device>, package: &str, restart: bool) -> Result<(), String> {
    let idx = dev.phone.lock().unwrap().app_index(package).ok_or("unknown package")?;
    let was_fg = dev.phone.lock().unwrap().foreground == Some(idx);
    let pid = dev.phone.lock().unwrap().pid_of(package).unwrap_or(0);
    dev.phone.lock().unwrap().log(pid, 'E', "AndroidRuntime", &format!("FATAL EXCEPTION: main\nProcess: {package}, PID: {pid}"));
    stop_process(dev, idx, "crash");
    if restart {
        start_process(dev, idx);
        if was_fg {
            launch(dev, package, None)?;
        }
    }
    Ok(())
}

/// Reboot: kills every device process, new boot id and uptime, adb connections
/// dropped and refused for `offline_ms`, then the scenario's foreground app starts again.
pub fn reboot(dev: &Arc<Device>, offline_ms: u64) {
    dev.record("reboot", json!({ "oldBootId": dev.boot_id() }));
    *dev.offline_until.lock().unwrap() = Some(Instant::now() + Duration::from_millis(offline_ms));
    dev.drop_connections();
    crate::rootfs::kill_processes_in(&dev.root);
    crate::uia::reboot(dev);
    let n = dev.phone.lock().unwrap().apps.len();
    for i in 0..n {
        stop_process(dev, i, "reboot");
    }
    dev.new_boot();
    write_boot_files(dev);
    boot_apps(dev);
}

pub fn boot_apps(dev: &Arc<Device>) {
    if let Some(fg) = dev.scenario.foreground.clone() {
        let _ = launch(dev, &fg, None);
    }
}
