//! Step 5: the control interface (socket + token) and injected faults —
//! reboot, disconnect, malformed/slow dumpsys, foreground change during
//! verification, descriptor faults.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;

fn wait_online(env: &Env, serial: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reconnected = false;
    loop {
        let st = env.adb(&["-s", serial, "get-state"]);
        if String::from_utf8_lossy(&st.stdout).trim() == "device" && env.shell_on(serial, "true").2 == 0 {
            return;
        }
        if !reconnected && deadline.saturating_duration_since(Instant::now()) < Duration::from_secs(17) {
            // adb's own reconnect can take ~10 s; the documented shortcut is disconnect + connect.
            env.adb(&["disconnect", serial]);
            env.adb(&["connect", serial]);
            reconnected = true;
        }
        assert!(Instant::now() < deadline, "{serial} did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn control_socket_requires_the_token() {
    let env = Env::start(1);
    let addr = env.sim().control_addr.unwrap();
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut ask = |req: Value| -> Value {
        w.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(ask(json!({ "op": "devices" }))["error"], "bad_token");
    let token = std::fs::read_to_string(env.sim().base_dir.join("control.token")).unwrap();
    let v = ask(json!({ "op": "devices", "token": token }));
    assert_eq!(v["devices"][0]["serial"], env.serial());
    let v = ask(json!({ "op": "tap", "token": token, "x": 540, "y": 470 }));
    assert_eq!(v["ok"], true);
    assert!(env.sh("dumpsys input_method").contains("mInputShown=true"));
}

#[test]
fn reboot_changes_boot_id_kills_processes_and_drops_the_connection() {
    let env = Env::start(1);
    let serial = env.serial();
    let boot1 = env.sh("cat /proc/sys/kernel/random/boot_id");
    let pid1 = env.sh("pidof com.example.aab.sample");
    // A long-running device process (e.g. a shell worker) dies with the reboot.
    env.sh("setsid nohup sleep 1000 </dev/null >/dev/null 2>&1 &");
    let r = env.control(json!({ "op": "reboot", "offlineMs": 300 }));
    assert_eq!(r["ok"], true);
    wait_online(&env, &serial);
    let boot2 = env.sh("cat /proc/sys/kernel/random/boot_id");
    assert_ne!(boot1, boot2);
    assert_eq!(boot2.trim(), r["bootId"].as_str().unwrap());
    let up: f64 = env.sh("cat /proc/uptime").split(' ').next().unwrap().parse().unwrap();
    assert!(up < 30.0);
    assert_eq!(crate::support::processes_in(&env.sim().devices[0].root), 0, "the detached sleep died with the reboot");
    assert_ne!(env.sh("pidof com.example.aab.sample"), pid1);
    assert_eq!(env.truth("reboot").len(), 1);
}

#[test]
fn disconnect_then_the_device_comes_back() {
    let env = Env::start(1);
    let serial = env.serial();
    env.control(json!({ "op": "disconnect", "offlineMs": 200 }));
    wait_online(&env, &serial);
    assert_eq!(env.sh("echo back"), "back\n");
    assert_eq!(env.truth("disconnect").len(), 1);
}

#[test]
fn dumpsys_faults_and_foreground_change_during_verification() {
    let env = Env::start(1);
    env.control(json!({ "op": "faults", "set": { "dumpsysMalformed": 1 } }));
    let bad = env.sh("dumpsys window -a");
    assert!(!bad.contains("mFocusedApp=") && bad.contains("mCurrentFocus=Window{\n"), "{bad}");
    assert!(env.sh("dumpsys window -a").contains("mFocusedApp=ActivityRecord{"));
    // The foreground changes right after the first read: a second read sees another app.
    env.control(json!({ "op": "faults", "set": { "foregroundAfterDumpsys": "com.example.notes" } }));
    let first = env.sh("dumpsys window -a");
    let second = env.sh("dumpsys window -a");
    assert!(first.contains("mCurrentFocus=Window{") && first.contains("com.example.aab.sample/com.example.aab.sample.MainActivity}\n  mFocusedApp"), "{first}");
    assert!(second.contains("u0 com.example.notes/com.example.notes.NotesActivity}\n  mFocusedApp"), "{second}");
    // Same app, new process between the two reads.
    env.control(json!({ "op": "launch", "package": "com.example.aab.sample" }));
    let pid1 = env.sh("pidof com.example.aab.sample");
    env.control(json!({ "op": "faults", "set": { "restartAfterDumpsys": true } }));
    env.sh("dumpsys window -a");
    assert_ne!(env.sh("pidof com.example.aab.sample"), pid1);
    assert_eq!(env.state()["foreground"], "com.example.aab.sample");
    // Slow dumpsys still answers.
    env.control(json!({ "op": "faults", "reset": true, "set": { "dumpsysDelayMs": 100 } }));
    assert!(env.sh("dumpsys input_method").contains("mInputShown="));
}

#[test]
fn descriptor_faults_are_visible_through_run_as() {
    let env = Env::start(1);
    let pkg = "com.example.aab.sample";
    env.control(json!({ "op": "descriptor", "package": pkg, "raw": "not json" }));
    assert_eq!(env.sh(&format!("run-as {pkg} cat files/ai_app_bridge_endpoint.json")), "not json");
    env.control(json!({ "op": "descriptor", "package": pkg, "value": { "schema": "ai-app-bridge.android-endpoint.v1", "ok": false, "error": "starting" } }));
    let v: Value = serde_json::from_str(&env.sh(&format!("run-as {pkg} cat files/ai_app_bridge_endpoint.json"))).unwrap();
    assert_eq!(v["error"], "starting");
    env.control(json!({ "op": "descriptor", "package": pkg, "remove": true }));
    assert_eq!(env.shell(&format!("run-as {pkg} cat files/ai_app_bridge_endpoint.json")).2, 1);
    // A restart publishes a fresh descriptor again.
    env.control(json!({ "op": "restart", "package": pkg }));
    let v: Value = serde_json::from_str(&env.sh(&format!("run-as {pkg} cat files/ai_app_bridge_endpoint.json"))).unwrap();
    assert_eq!(v["ok"], true);
}
