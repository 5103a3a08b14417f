//! Step 3: apps from the scenario — foreground identity text, stock UI dump,
//! input, screencap, logcat, package manager and app-ops, install.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Env;

/// The foreground identity as §2.2 parses it: (window token, package, activity, pid, uid).
fn foreground(env: &Env) -> (String, String, String, u32, u32) {
    let text = env.sh("dumpsys window -a");
    let focus = text.lines().find_map(|l| l.trim().strip_prefix("mCurrentFocus=Window{")).expect("mCurrentFocus");
    let focus = focus.trim_end_matches('}');
    let mut parts = focus.split(' ');
    let (token, user, title) = (parts.next().unwrap().to_string(), parts.next().unwrap(), parts.next().unwrap().to_string());
    assert_eq!(user, "u0");
    let header = format!("Window{{{token} u0 {title}}}:");
    let block: Vec<&str> = text.lines().skip_while(|l| !l.trim_start().starts_with("Window #") || !l.ends_with(&header)).skip(1).take_while(|l| !l.trim_start().starts_with("Window #") && !l.trim().is_empty()).collect();
    let session: Vec<&&str> = block.iter().filter(|l| l.contains("mSession=Session{")).collect();
    assert_eq!(session.len(), 1, "{block:?}");
    assert!(session[0].trim_start().starts_with("mDisplayId=0 rootTaskId="));
    let s = session[0].split("mSession=Session{").nth(1).unwrap();
    let pid_user = s.split(' ').nth(1).unwrap();
    let pid: u32 = pid_user.split(':').next().unwrap().parse().unwrap();
    let owner: Vec<&&str> = block.iter().filter(|l| l.trim_start().starts_with("mOwnerUid=")).collect();
    assert_eq!(owner.len(), 1);
    let uid: u32 = owner[0].trim().strip_prefix("mOwnerUid=").unwrap().split(' ').next().unwrap().parse().unwrap();
    let package = owner[0].split("package=").nth(1).unwrap().split(' ').next().unwrap().to_string();
    assert_eq!(block.iter().filter(|l| l.contains("mAttrs={") && l.contains("ty=BASE_APPLICATION")).count(), 1, "{block:?}");
    let rec = block.iter().find_map(|l| l.trim().strip_prefix("mActivityRecord=ActivityRecord{")).expect("mActivityRecord");
    let comp = rec.split(' ').nth(2).unwrap();
    let (p2, act) = comp.split_once('/').unwrap();
    assert_eq!(p2, package);
    (token, package, act.to_string(), pid, uid)
}

#[test]
fn foreground_identity_is_consistent_across_dumpsys_proc_and_package() {
    let env = Env::start(1);
    let (_, package, act, pid, uid) = foreground(&env);
    assert_eq!((package.as_str(), act.as_str()), ("com.example.aab.sample", ".MainActivity"));
    assert_eq!(env.sh("pidof com.example.aab.sample").trim(), pid.to_string());
    assert_eq!(uid, 10123);
    let pkg = env.sh("dumpsys package com.example.aab.sample");
    assert_eq!(pkg.matches("\nPackages:\n").count(), 1);
    assert!(pkg.contains("  Package [com.example.aab.sample] ("));
    assert!(pkg.contains("\n    appId=10123\n"));
    assert!(pkg.contains("User 0: ") && pkg.contains(" installed=true "));
    assert!(pkg.contains("        android.permission.CAMERA: granted=false, flags=["), "{pkg}");
    let status = env.sh(&format!("cat /proc/{pid}/status"));
    assert!(status.contains(&format!("\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")));
    // A launch changes the identity; a force-stop removes the process.
    let out = env.sh("am start -W -n com.example.notes/.NotesActivity");
    assert!(out.contains("Status: ok") && out.contains("LaunchState: COLD") && out.contains("Complete"), "{out}");
    let (_, package2, act2, pid2, uid2) = foreground(&env);
    assert_eq!((package2.as_str(), act2.as_str(), uid2), ("com.example.notes", ".NotesActivity", 10101));
    assert_ne!(pid2, pid);
    env.sh("am force-stop com.example.notes");
    assert_eq!(env.shell("pidof com.example.notes").2, 1);
    assert!(env.sh("dumpsys window -a").contains("mCurrentFocus=Window{9e1f2a3 u0 com.android.launcher3/"));
    let (o, _, c) = env.shell("am start -n com.example.notes/.Missing");
    assert_eq!(c, 1);
    assert!(o.contains("Error: Activity class {com.example.notes/com.example.notes.Missing} does not exist."), "{o}");
    assert!(env.truth("launch").iter().any(|r| r["data"]["component"] == "com.example.notes/com.example.notes.NotesActivity"));
}

#[test]
fn ui_dump_and_input_drive_the_scenario_screens() {
    let env = Env::start(1);
    let xml = String::from_utf8_lossy(&env.adb(&["-s", &env.serial(), "exec-out", "uiautomator dump /dev/tty"]).stdout).into_owned();
    assert!(xml.starts_with("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\"><node index=\"0\" text=\"\" resource-id=\"com.example.aab.sample:id/content\" class=\"android.widget.FrameLayout\" package=\"com.example.aab.sample\""), "{xml}");
    assert!(xml.contains("<node index=\"4\" text=\"Sign in\" resource-id=\"com.example.aab.sample:id/sign_in\" class=\"android.widget.Button\" package=\"com.example.aab.sample\" content-desc=\"\" checkable=\"false\" checked=\"false\" clickable=\"true\" enabled=\"true\" focusable=\"true\" focused=\"false\" scrollable=\"false\" long-clickable=\"false\" password=\"false\" selected=\"false\" bounds=\"[60,920][1020,1060]\" />"), "{xml}");
    assert!(xml.ends_with("</hierarchy>UI hierchary dumped to: /dev/tty\n"));
    assert!(env.sh("dumpsys input_method").contains("mInputShown=false"));
    // Tap the email field: focus + keyboard; type; tap "Sign in": next screen.
    env.sh("input tap 540 470");
    assert!(env.sh("dumpsys input_method").contains("mInputShown=true"));
    env.sh("input text alice@example.com");
    env.sh("input tap 100 800");
    env.sh("uiautomator dump");
    let xml = env.sh("cat /sdcard/window_dump.xml");
    assert!(xml.contains("text=\"alice@example.com\" resource-id=\"com.example.aab.sample:id/email\""), "{xml}");
    assert!(xml.contains("resource-id=\"com.example.aab.sample:id/remember\" class=\"android.widget.CheckBox\" package=\"com.example.aab.sample\" content-desc=\"\" checkable=\"true\" checked=\"true\""), "{xml}");
    env.sh("input keyevent 4");
    assert!(env.sh("dumpsys input_method").contains("mInputShown=false"));
    env.sh("input tap 540 990");
    let xml = String::from_utf8_lossy(&env.adb(&["-s", &env.serial(), "exec-out", "uiautomator dump /dev/tty"]).stdout).into_owned();
    assert!(xml.contains("text=\"Welcome alice@example.com\""), "{xml}");
    assert_eq!(foreground(&env).2, ".WelcomeActivity");
    // Ground truth: what really happened.
    let taps = env.truth("tap");
    assert_eq!(taps.len(), 3);
    assert_eq!(taps[2]["data"]["hit"]["id"], "sign_in");
    assert_eq!(env.truth("text")[0]["data"]["target"]["value"], "alice@example.com");
    let state = env.state();
    let app = &state["apps"][0];
    assert_eq!(app["screen"], "welcome");
    let net = &app["capture"]["network"][0];
    assert_eq!((net["method"].as_str(), net["requestBody"].as_str()), (Some("POST"), Some("{\"email\":\"alice@example.com\"}")));
    // BACK returns to the start screen, then to the launcher.
    env.sh("input keyevent KEYCODE_BACK");
    assert_eq!(foreground(&env).2, ".MainActivity");
    env.sh("input keyevent 4");
    assert_eq!(env.state()["foreground"], serde_json::Value::Null);
}

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut r = dec.read_info().expect("a PNG");
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn screencap_returns_a_real_png_of_the_current_screen() {
    let env = Env::start(1);
    let a = env.adb(&["-s", &env.serial(), "exec-out", "screencap -p"]).stdout;
    assert_eq!(&a[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!((u32::from_be_bytes(a[16..20].try_into().unwrap()), u32::from_be_bytes(a[20..24].try_into().unwrap())), (1080, 2400));
    let (w, h, px) = decode_png(&a);
    assert_eq!((w, h), (1080, 2400));
    // The blue "Sign in" button is painted where its bounds are.
    let at = |x: usize, y: usize| &px[(y * w as usize + x) * 3..(y * w as usize + x) * 3 + 3];
    assert_eq!(at(70, 930), &[0x1a, 0x73, 0xe8]);
    env.control(json!({ "op": "launch", "package": "com.example.aab.sample", "activity": ".WelcomeActivity" }));
    env.sh("screencap -p /sdcard/shot.png");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("shot.png");
    assert!(env.adb(&["-s", &env.serial(), "pull", "/sdcard/shot.png", local.to_str().unwrap()]).status.success());
    let (_, _, px2) = decode_png(&std::fs::read(&local).unwrap());
    assert_ne!(px, px2);
}

#[test]
fn logcat_dump_threadtime_clear_and_bounded_follow() {
    let env = Env::start(1);
    let serial = env.serial();
    env.control(json!({ "op": "logcat", "package": "com.example.aab.sample", "level": "W", "tag": "Probe", "message": "first line" }));
    let out = String::from_utf8_lossy(&env.adb(&["-s", &serial, "logcat", "-v", "threadtime", "-d", "-t", "200"]).stdout).into_owned();
    let pid = env.sh("pidof com.example.aab.sample").trim().to_string();
    let line = out.lines().find(|l| l.ends_with("Probe   : first line")).unwrap_or_else(|| panic!("{out}"));
    // MM-DD HH:MM:SS.mmm  PID  TID L TAG: message
    let b = line.as_bytes();
    assert!(b[2] == b'-' && b[5] == b' ' && b[8] == b':' && b[11] == b':' && b[14] == b'.', "{line}");
    assert_eq!(&line[19..32], &format!("{pid:>5} {pid:>5} W"));
    env.sh("logcat -c");
    assert!(!env.sh("logcat -d").contains("first line"));
    // Follow until the line shows up, then the client goes away: nothing stays running on the device.
    let mut child = Command::new("adb")
        .args(["-P", &env.adb_port.to_string(), "-s", &serial, "logcat", "-v", "threadtime"])
        .env("HOME", env.home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    env.control(json!({ "op": "logcat", "tag": "Probe", "message": "followed line" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("followed line arrives");
        if l.ends_with("followed line") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let root = env.sim().devices[0].root.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::support::processes_in(&root) > 0 {
        assert!(Instant::now() < deadline, "device processes left after the follow ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}


#[test]
fn permissions_appops_and_install() {
    let env = Env::start(1);
    let serial = env.serial();
    env.sh("pm grant --user 0 com.example.aab.sample android.permission.CAMERA");
    assert!(env.sh("dumpsys package com.example.aab.sample").contains("android.permission.CAMERA: granted=true"));
    env.sh("pm revoke com.example.aab.sample android.permission.POST_NOTIFICATIONS");
    assert!(env.sh("dumpsys package com.example.aab.sample").contains("android.permission.POST_NOTIFICATIONS: granted=false"));
    let perms = env.truth("permission");
    assert_eq!(perms.len(), 2);
    assert_eq!(perms[0]["data"], json!({ "package": "com.example.aab.sample", "permission": "android.permission.CAMERA", "granted": true }));
    assert_eq!(env.sh("appops get com.example.aab.sample CAMERA"), "CAMERA: ignore\n");
    env.sh("appops set com.example.aab.sample CAMERA allow");
    assert_eq!(env.sh("appops get com.example.aab.sample CAMERA"), "CAMERA: allow\n");
    assert_eq!(env.shell("appops set com.example.aab.sample CAMERA sometimes").2, 255);
    // adb install (abb_exec) and uninstall.
    let dir = tempfile::tempdir().unwrap();
    let apk = dir.path().join("app.apk");
    std::fs::write(&apk, b"PK\x03\x04 fake apk aab-sim-package:com.example.installed\0").unwrap();
    let out = env.adb(&["-s", &serial, "install", apk.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Success"), "{:?}", out);
    assert!(env.sh("pm list packages").contains("package:com.example.installed\n"));
    assert_eq!(env.truth("install")[0]["data"]["package"], "com.example.installed");
    // The session flow the install workflow runs on the device (pm install-create/-write/-commit).
    std::fs::write(&apk, b"PK\x03\x04 aab-sim-package:com.example.session\0").unwrap();
    assert!(env.adb(&["-s", &serial, "push", apk.to_str().unwrap(), "/data/local/tmp/base.apk"]).status.success());
    let created = env.sh("pm install-create -r -S 41");
    let id = created.trim().strip_prefix("Success: created install session [").and_then(|s| s.strip_suffix(']')).expect("session id").to_string();
    assert_eq!(env.sh(&format!("pm install-write -S 41 {id} base.apk /data/local/tmp/base.apk")), "Success: streamed 41 bytes\n");
    assert_eq!(env.sh(&format!("pm install-commit {id}")), "Success\n");
    assert_eq!(env.shell(&format!("pm install-commit {id}")).2, 255);
    assert!(env.sh("pm list packages").contains("package:com.example.session\n"));
    let out = env.adb(&["-s", &serial, "uninstall", "com.example.notes"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Success"), "{:?}", out);
    assert!(!env.sh("pm list packages").contains("com.example.notes"));
}

#[test]
fn a_scenario_file_can_describe_a_500_node_screen() {
    let scenario = aab_android_sim::Scenario::parse(
        r#"{ "foreground": "com.example.big", "apps": [ { "package": "com.example.big", "activities": [".List"], "sdk": true,
             "screens": [ { "name": "list", "root": { "class": "android.widget.ScrollView", "id": "list", "bounds": [0, 0, 1080, 2400], "scrollable": true, "repeat": 500 } } ] } ] }"#,
    )
    .unwrap();
    let env = Env::with_scenario(1, scenario);
    let xml = String::from_utf8_lossy(&env.adb(&["-s", &env.serial(), "exec-out", "uiautomator dump /dev/tty"]).stdout).into_owned();
    assert_eq!(xml.matches("<node ").count(), 501);
    assert!(xml.contains("text=\"Row 499\" resource-id=\"com.example.big:id/row_499\""));
    assert!(env.sh("dumpsys window -a").contains("u0 com.example.big/com.example.big.List}\n"));
    // Unknown fields in a scenario are rejected with the field named.
    let err = aab_android_sim::Scenario::parse(r#"{ "apps": [ { "package": "x", "colour": 1 } ] }"#).unwrap_err();
    assert!(err.contains("colour"), "{err}");
}
