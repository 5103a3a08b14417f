//! The package installer and runtime permission dialogs through the real adb.
//! APKs are real: packaged by Debian's `aapt` from a manifest written here
//! (against `android-framework-res`'s framework-res.apk) and signed by
//! `apksigner` with keystores made by the JDK's `keytool`.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use sha2::Digest;

use crate::support::Env;

use aab_android_sim::test_apk::{apk, keystore};

fn sha(b: &[u8]) -> String {
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// The session id of `Success: created install session [N]`.
fn session_id(created: &str) -> String {
    created.strip_prefix("Success: created install session [").and_then(|s| s.strip_suffix("]\n")).unwrap_or_else(|| panic!("create answer: {created:?}")).to_string()
}

/// push + install-create/-write/-commit as the host's install script does; returns (session, commit stdout, stderr, exit).
fn install(env: &Env, apk: &Path, create_flags: &str) -> (String, String, String, i32) {
    let bytes = std::fs::read(apk).unwrap();
    let n = bytes.len();
    assert!(env.adb(&["-s", &env.serial(), "push", apk.to_str().unwrap(), "/data/local/tmp/aab-install/base.apk"]).status.success());
    let id = session_id(&env.sh(&format!("pm install-create {create_flags} -S {n}")));
    assert_eq!(env.sh(&format!("pm install-write -S {n} {id} base.apk /data/local/tmp/aab-install/base.apk")), format!("Success: streamed {n} bytes\n"));
    let (o, e, c) = env.shell(&format!("pm install-commit {id}"));
    (id, o, e, c)
}

fn dumpsys_package(env: &Env, pkg: &str) -> String {
    env.sh(&format!("dumpsys package {pkg}"))
}

fn installs(env: &Env) -> Vec<Value> {
    env.control(json!({ "op": "installs" }))["sessions"].as_array().cloned().unwrap()
}

fn session<'a>(all: &'a [Value], id: &str) -> &'a Value {
    all.iter().find(|s| s["sessionId"].as_u64().map(|n| n.to_string()).as_deref() == Some(id)).unwrap_or_else(|| panic!("session {id} in {all:?}"))
}

/// The center of the node whose text is `text` in a `uiautomator dump`.
fn center_of(xml: &str, text: &str) -> Option<(i32, i32)> {
    let text = text.replace('&', "&amp;").replace('\'', "&apos;");
    let node = xml.split("<node ").find(|n| n.contains(&format!("text=\"{text}\"")))?;
    let b = node.split("bounds=\"").nth(1)?.split('"').next()?;
    let v: Vec<i32> = b.replace("][", ",").trim_matches(|c| c == '[' || c == ']').split(',').map(|x| x.parse().unwrap()).collect();
    Some(((v[0] + v[2]) / 2, (v[1] + v[3]) / 2))
}

fn dump(env: &Env) -> String {
    env.sh("uiautomator dump /dev/tty")
}

fn tap_text(env: &Env, text: &str) {
    let xml = dump(env);
    let (x, y) = center_of(&xml, text).unwrap_or_else(|| panic!("no {text:?} in {xml}"));
    env.sh(&format!("input tap {x} {y}"));
}

fn installed_path(env: &Env, pkg: &str) -> String {
    let out = env.sh(&format!("pm path {pkg}"));
    out.strip_prefix("package:").and_then(|s| s.strip_suffix('\n')).unwrap_or_else(|| panic!("pm path: {out:?}")).to_string()
}

#[test]
fn sessions_install_real_apks_with_the_update_rules() {
    let env = Env::start(1);
    let dir = tempfile::tempdir().unwrap();
    let (k1, k2) = (keystore(dir.path(), "k1"), keystore(dir.path(), "k2"));
    let pkg = "com.example.installed.t1";
    let v3 = apk(dir.path(), pkg, 3, &["android.permission.CAMERA", "android.permission.INTERNET"], Some(&k1));
    let v3_bytes = std::fs::read(&v3).unwrap();

    // A new app: exact texts, the phone model, the bytes at `pm path`.
    let (id, out, err, code) = install(&env, &v3, "-r");
    assert_eq!((out.as_str(), err.as_str(), code), ("Success\n", "", 0));
    assert!(env.sh("pm list packages").contains(&format!("package:{pkg}\n")));
    let path = installed_path(&env, pkg);
    assert!(path.starts_with("/data/app/~~") && path.ends_with(&format!("/{pkg}-{}==/base.apk", path.split(&format!("/{pkg}-")).nth(1).unwrap().trim_end_matches("==/base.apk"))), "{path}");
    assert_eq!(env.sh(&format!("sha256sum {path}")), format!("{}  {path}\n", sha(&v3_bytes)));
    let d = dumpsys_package(&env, pkg);
    assert!(d.contains("versionCode=3 ") && d.contains("versionName=1.3\n"), "{d}");
    assert!(d.contains("android.permission.CAMERA: granted=false"), "{d}");
    assert!(d.contains("android.permission.INTERNET: granted=true"), "{d}");
    let t = env.truth("package-install");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["data"]["package"], pkg);
    assert_eq!(t[0]["data"]["versionCode"], 3);
    assert_eq!(t[0]["data"]["sha256"], sha(&v3_bytes));
    assert_eq!(t[0]["data"]["outcome"], "success");
    assert_eq!(t[0]["data"]["sessionId"].to_string(), id);
    assert_eq!(session(&installs(&env), &id)["state"], "committed");

    // A lower version without -d is refused; with -d it replaces the app (new path, old one gone).
    let v2 = apk(dir.path(), pkg, 2, &["android.permission.CAMERA"], Some(&k1));
    let (_, out, _, code) = install(&env, &v2, "-r");
    assert_eq!((out.as_str(), code), ("Failure [INSTALL_FAILED_VERSION_DOWNGRADE: Downgrade detected: Update version code 2 is older than current 3]\n", 4));
    assert!(dumpsys_package(&env, pkg).contains("versionCode=3 "));
    assert_eq!(installed_path(&env, pkg), path);
    let (_, out, _, code) = install(&env, &v2, "-r -d");
    assert_eq!((out.as_str(), code), ("Success\n", 0));
    let path2 = installed_path(&env, pkg);
    assert_ne!(path2, path);
    assert_eq!(env.sh(&format!("sha256sum {path2}")), format!("{}  {path2}\n", sha(&std::fs::read(&v2).unwrap())));
    assert_ne!(env.shell(&format!("sha256sum {path}")).2, 0, "the old version's file is gone");
    let d = dumpsys_package(&env, pkg);
    assert!(d.contains("versionCode=2 ") && d.contains("versionName=1.2\n"), "{d}");

    // Another signing key, an unsigned APK, a corrupted APK, a text file: refused, nothing changes.
    let v4_other = apk(dir.path(), pkg, 4, &[], Some(&k2));
    let (_, out, _, code) = install(&env, &v4_other, "-r");
    assert_eq!((out.as_str(), code), (format!("Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: Package {pkg} signatures do not match previously installed version; ignoring!]\n").as_str(), 5));
    let unsigned = apk(dir.path(), pkg, 5, &[], None);
    let (_, out, _, code) = install(&env, &unsigned, "-r");
    assert!(out.starts_with("Failure [INSTALL_PARSE_FAILED_NO_CERTIFICATES: Failed to collect certificates from /data/app/vmdl") && out.ends_with("]\n"), "{out}");
    assert_eq!(code, 4);
    let corrupt = dir.path().join("corrupt.apk");
    std::fs::write(&corrupt, &v3_bytes[..v3_bytes.len() / 2]).unwrap();
    let (_, out, _, code) = install(&env, &corrupt, "-r");
    assert!(out.starts_with("Failure [INSTALL_PARSE_FAILED_NOT_APK: Failed to parse /data/app/vmdl"), "{out}");
    assert_eq!(code, 4);
    let text = dir.path().join("text.apk");
    std::fs::write(&text, b"this is not a zip file at all\n").unwrap();
    assert!(install(&env, &text, "").1.starts_with("Failure [INSTALL_PARSE_FAILED_NOT_APK: "));
    let d = dumpsys_package(&env, pkg);
    assert!(d.contains("versionCode=2 "), "{d}");
    assert_eq!(installed_path(&env, pkg), path2);
    let outcomes: Vec<String> = env.truth("package-install").iter().map(|t| t["data"]["outcome"].as_str().unwrap().to_string()).collect();
    assert_eq!(outcomes, ["success", "INSTALL_FAILED_VERSION_DOWNGRADE", "success", "INSTALL_FAILED_UPDATE_INCOMPATIBLE", "INSTALL_PARSE_FAILED_NO_CERTIFICATES", "INSTALL_PARSE_FAILED_NOT_APK", "INSTALL_PARSE_FAILED_NOT_APK"]);

    // -g grants the requested runtime permissions of a new app; the new app launches.
    let other = apk(dir.path(), "com.example.installed.t2", 1, &["android.permission.RECORD_AUDIO"], Some(&k2));
    assert_eq!(install(&env, &other, "-r -g").1, "Success\n");
    assert!(dumpsys_package(&env, "com.example.installed.t2").contains("android.permission.RECORD_AUDIO: granted=true"));

    // `adb install` (abb_exec `package install`) goes through the same verification.
    let out = env.adb(&["-s", &env.serial(), "install", "-r", v3.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Success"), "{out:?}");
    assert!(dumpsys_package(&env, pkg).contains("versionCode=3 "));
    let out = env.adb(&["-s", &env.serial(), "install", "-r", v4_other.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: ") || String::from_utf8_lossy(&out.stderr).contains("Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: "), "{out:?}");

    // A committed session is gone; abandon; usage errors.
    let (o, e, c) = env.shell(&format!("pm install-commit {id}"));
    assert_eq!((o.as_str(), c), ("", 255));
    assert!(e.starts_with(&format!("Exception occurred while executing 'install-commit':\njava.lang.SecurityException: Caller has no access to session {id}\n")), "{e}");
    let n = v3_bytes.len();
    let aid = session_id(&env.sh(&format!("pm install-create -r -S {n}")));
    env.adb(&["-s", &env.serial(), "push", v3.to_str().unwrap(), "/data/local/tmp/aab-install/base.apk"]);
    env.sh(&format!("pm install-write -S {n} {aid} base.apk /data/local/tmp/aab-install/base.apk"));
    assert_eq!(env.sh(&format!("pm install-abandon {aid}")), "Success\n");
    assert_eq!(env.shell(&format!("pm install-commit {aid}")).2, 255);
    assert_eq!(env.shell(&format!("pm install-abandon {aid}")).2, 255);
    assert_eq!(session(&installs(&env), &aid)["state"], "abandoned");
    assert_eq!(installs(&env).iter().filter(|s| s["outcome"] == "success").count(), 4, "abandoning installs nothing");
    let (_, e, c) = env.shell("pm install-commit");
    assert_eq!(c, 255);
    assert!(e.contains("java.lang.NumberFormatException: null"), "{e}");
    let (_, e, c) = env.shell("pm install-commit abc");
    assert_eq!(c, 255);
    assert!(e.contains("java.lang.NumberFormatException: For input string: \"abc\""), "{e}");
    let (_, e, c) = env.shell("pm install-commit 424242");
    assert_eq!(c, 255);
    assert!(e.contains("java.lang.SecurityException: Caller has no access to session 424242"), "{e}");
    let (_, e, c) = env.shell("pm install-create -x");
    assert_eq!(c, 255);
    assert!(e.contains("java.lang.IllegalArgumentException: Unknown option -x"), "{e}");
    let wid = session_id(&env.sh("pm install-create -r"));
    let (_, e, c) = env.shell(&format!("pm install-write -S {} {wid} base.apk /data/local/tmp/aab-install/base.apk", n + 1));
    assert_eq!(c, 1);
    assert!(e.starts_with(&format!("Error: -S {} does not match the size of /data/local/tmp/aab-install/base.apk ({n} bytes)", n + 1)), "{e}");
    let (_, e, c) = env.shell(&format!("pm install-write {wid} base.apk /data/local/tmp/missing.apk"));
    assert_eq!((e.as_str(), c), ("Error: Unable to open file: /data/local/tmp/missing.apk\nConsider using a file under /data/local/tmp/\n", 1));
    let (o, _, c) = env.shell(&format!("pm install-commit {wid}"));
    assert_eq!((o.as_str(), c), (format!("Failure [INSTALL_FAILED_INVALID_APK: Session: {wid}. No packages staged]\n").as_str(), 4));
}

#[test]
fn installer_faults_fail_leave_pending_or_ask_for_confirmation() {
    let env = Env::start(1);
    let dir = tempfile::tempdir().unwrap();
    let k1 = keystore(dir.path(), "k1");
    let pkg = "com.example.installed.faults";
    let v1 = apk(dir.path(), pkg, 1, &[], Some(&k1));
    let not_installed = |env: &Env| !env.sh("pm list packages").contains(&format!("package:{pkg}\n"));

    // A failure code.
    env.control(json!({ "op": "faults", "set": { "installFailNext": "INSTALL_FAILED_INSUFFICIENT_STORAGE" } }));
    let (id, out, _, code) = install(&env, &v1, "-r");
    assert_eq!((out.as_str(), code), ("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE: simulated by aab-android-sim]\n", 6));
    assert!(not_installed(&env));
    assert_eq!(session(&installs(&env), &id)["outcome"], "INSTALL_FAILED_INSUFFICIENT_STORAGE");

    // An odd (OEM) text with exit 0: nothing installed, the outcome stays pending.
    env.control(json!({ "op": "faults", "set": { "installCommitText": "Success: waiting for the vendor's security check" } }));
    let (id, out, _, code) = install(&env, &v1, "-r");
    assert_eq!((out.as_str(), code), ("Success: waiting for the vendor's security check\n", 0));
    assert!(not_installed(&env));
    let s = installs(&env);
    assert_eq!((session(&s, &id)["state"].clone(), session(&s, &id)["outcome"].clone()), (json!("pending"), json!("pending")));

    // The installer confirmation: pending until Install is tapped.
    env.control(json!({ "op": "faults", "set": { "installPendingUserAction": 1 } }));
    let (id, out, _, code) = install(&env, &v1, "-r");
    assert_eq!((out.as_str(), code), ("Failure [null]\n", 255));
    assert!(not_installed(&env));
    assert_eq!(session(&installs(&env), &id)["state"], "pending-user-action");
    let acts = env.sh("dumpsys activity activities");
    assert!(acts.contains("ResumedActivity: ActivityRecord{") && acts.contains(" u0 com.google.android.packageinstaller/com.android.packageinstaller.PackageInstallerActivity t"), "{acts}");
    let xml = dump(&env);
    assert!(xml.contains("text=\"Do you want to install this app?\"") && xml.contains("package=\"com.google.android.packageinstaller\""), "{xml}");
    tap_text(&env, "Install");
    assert!(!not_installed(&env), "installed once Install is pressed");
    assert_eq!(env.sh(&format!("sha256sum {}", installed_path(&env, pkg))).split(' ').next().unwrap(), sha(&std::fs::read(&v1).unwrap()));
    assert_eq!(session(&installs(&env), &id)["outcome"], "success");
    let ans = env.truth("system-dialog-answer");
    assert_eq!(ans.last().unwrap()["data"]["button"], "Install");
    assert_eq!(ans.last().unwrap()["data"]["result"]["outcome"], "success");
    assert!(!env.sh("dumpsys activity activities").contains("packageinstaller"));

    // An update confirmed by Cancel: aborted, the installed version stays.
    let v2 = apk(dir.path(), pkg, 2, &[], Some(&k1));
    env.control(json!({ "op": "faults", "set": { "installPendingUserAction": 1 } }));
    let (id, out, _, _) = install(&env, &v2, "-r");
    assert_eq!(out, "Failure [null]\n");
    assert!(dump(&env).contains("text=\"Do you want to update this app?\""));
    tap_text(&env, "Cancel");
    assert_eq!(session(&installs(&env), &id)["outcome"], "INSTALL_FAILED_ABORTED");
    assert!(dumpsys_package(&env, pkg).contains("versionCode=1 "));
    // Faults are one-shot: the next commit installs; an update kills the app's running process.
    assert!(env.sh(&format!("am start -W -n {pkg}/.Main")).contains("Status: ok"));
    let pid = env.sh(&format!("pidof {pkg}")).trim().to_string();
    assert_eq!(install(&env, &v2, "-r").1, "Success\n");
    assert!(dumpsys_package(&env, pkg).contains("versionCode=2 "));
    let stops = env.truth("process-stop");
    assert_eq!((stops.len(), stops[0]["data"]["pid"].to_string(), stops[0]["data"]["reason"].clone()), (1, pid, json!("installPackageLI")));
    // …also when the update is confirmed in the dialog.
    env.sh(&format!("am start -W -n {pkg}/.Main"));
    let v3 = apk(dir.path(), pkg, 3, &[], Some(&k1));
    env.control(json!({ "op": "faults", "set": { "installPendingUserAction": 1 } }));
    assert_eq!(install(&env, &v3, "-r").1, "Failure [null]\n");
    tap_text(&env, "Update");
    assert!(dumpsys_package(&env, pkg).contains("versionCode=3 "));
    let mut n = 0;
    while env.truth("process-stop").len() < 2 && n < 200 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        n += 1;
    }
    assert_eq!(env.truth("process-stop").len(), 2, "the running app was stopped by the confirmed update");
    let outcomes: Vec<String> = env.truth("package-install").iter().map(|t| t["data"]["outcome"].as_str().unwrap().to_string()).collect();
    assert_eq!(outcomes, ["INSTALL_FAILED_INSUFFICIENT_STORAGE", "pending", "pending-user-action", "success", "pending-user-action", "INSTALL_FAILED_ABORTED", "success", "pending-user-action", "success"]);
}

const SAMPLE: &str = "com.example.aab.sample";
const CAMERA: &str = "android.permission.CAMERA";
const GRANT: &str = "com.android.permissioncontroller/.permission.ui.GrantPermissionsActivity";

fn request(env: &Env, perm: &str) -> Value {
    let v = env.control(json!({ "op": "permission-request", "package": SAMPLE, "permission": perm }));
    assert_eq!(v["ok"], true, "{v}");
    v
}

fn perm_line(env: &Env, perm: &str) -> String {
    let d = dumpsys_package(env, SAMPLE);
    d.lines().find(|l| l.trim_start().starts_with(&format!("{perm}: granted="))).unwrap_or_else(|| panic!("{perm} in {d}")).trim().to_string()
}

#[test]
fn permission_dialog_outcomes_allow_deny_dont_ask_again_and_already_granted() {
    let env = Env::start(1);
    // Deny once: the dialog is the resumed activity while it shows.
    let v = request(&env, CAMERA);
    assert_eq!((v["shown"].clone(), v["buttons"].clone()), (json!(true), json!(["Allow", "Only this time", "Don't allow"])));
    let acts = env.sh("dumpsys activity activities");
    let resumed = acts.lines().find(|l| l.trim_start().starts_with("ResumedActivity: ")).unwrap().trim().to_string();
    assert!(resumed.starts_with("ResumedActivity: ActivityRecord{") && resumed.contains(&format!(" u0 {GRANT} t")), "{acts}");
    assert!(acts.contains(&format!("topResumedActivity={}", resumed.trim_start_matches("ResumedActivity: "))), "{acts}");
    assert!(acts.contains("state=PAUSED") && acts.contains(&format!("packageName={SAMPLE}")), "{acts}");
    let win = env.sh("dumpsys window");
    assert!(win.contains("mCurrentFocus=Window{") && win.contains("com.android.permissioncontroller/com.android.permissioncontroller.permission.ui.GrantPermissionsActivity}"), "{win}");
    let xml = dump(&env);
    assert!(xml.contains("text=\"Allow Sample to take pictures and record video?\"") && xml.contains("resource-id=\"com.android.permissioncontroller:id/permission_deny_button\""), "{xml}");
    tap_text(&env, "Don't allow");
    assert_eq!(perm_line(&env, CAMERA), format!("{CAMERA}: granted=false, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED|USER_SET]"));
    let acts = env.sh("dumpsys activity activities");
    assert!(!acts.contains("permissioncontroller") && acts.contains("ResumedActivity: ActivityRecord{") && acts.contains(&format!(" u0 {SAMPLE}/")), "{acts}");

    // Deny twice: don't ask again (USER_FIXED); the next request shows nothing and stays denied.
    assert_eq!(request(&env, CAMERA)["shown"], true);
    tap_text(&env, "Don't allow");
    assert_eq!(perm_line(&env, CAMERA), format!("{CAMERA}: granted=false, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED|USER_SET|USER_FIXED]"));
    let v = request(&env, CAMERA);
    assert_eq!((v["shown"].clone(), v["result"].clone(), v["reason"].clone()), (json!(false), json!("denied"), json!("user_fixed")));
    assert!(!env.sh("dumpsys activity activities").contains("GrantPermissionsActivity"));
    assert!(!dump(&env).contains("permissioncontroller"));

    // Already granted: no dialog.
    let v = request(&env, "android.permission.POST_NOTIFICATIONS");
    assert_eq!((v["shown"].clone(), v["result"].clone(), v["reason"].clone()), (json!(false), json!("granted"), json!("already_granted")));
    assert!(env.control(json!({ "op": "system-dialog" }))["dialog"].is_null());

    // `pm clear` resets the permission and its flags; Allow grants.
    env.sh(&format!("pm clear {SAMPLE}"));
    env.sh(&format!("am start -n {SAMPLE}/.MainActivity"));
    assert_eq!(request(&env, CAMERA)["shown"], true);
    tap_text(&env, "Allow");
    assert_eq!(perm_line(&env, CAMERA), format!("{CAMERA}: granted=true, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED|USER_SET]"));
    let results: Vec<Value> = env.truth("permission-request-result").iter().map(|t| t["data"]["result"].clone()).collect();
    assert_eq!(results, [json!("denied"), json!("denied_dont_ask_again"), json!("granted")]);
    let shown: Vec<Value> = env.truth("permission-request").iter().map(|t| t["data"]["shown"].clone()).collect();
    assert_eq!(shown, [json!(true), json!(true), json!(false), json!(false), json!(true)]);
    // A request of a permission the app never asked for: denied without a dialog.
    let v = request(&env, "android.permission.READ_SMS");
    assert_eq!((v["shown"].clone(), v["reason"].clone()), (json!(false), json!("not_requested")));
}

#[test]
fn permission_dialog_below_api_30_offers_deny_and_dont_ask_again() {
    let mut scenario = aab_android_sim::Scenario::sample();
    scenario.device.sdk_int = 29;
    let env = Env::with_scenario(1, scenario);
    assert_eq!(request(&env, CAMERA)["buttons"], json!(["Allow", "Deny"]));
    tap_text(&env, "Deny");
    assert_eq!(perm_line(&env, CAMERA), format!("{CAMERA}: granted=false, flags=[ USER_SENSITIVE_WHEN_GRANTED|USER_SENSITIVE_WHEN_DENIED|USER_SET]"));
    // API 29: a second plain denial does not fix it; the dialog then offers "Deny & don't ask again".
    assert_eq!(request(&env, CAMERA)["buttons"], json!(["Allow", "Deny", "Deny & don't ask again"]));
    tap_text(&env, "Deny & don't ask again");
    assert!(perm_line(&env, CAMERA).ends_with("|USER_SET|USER_FIXED]"));
    assert_eq!(request(&env, CAMERA)["shown"], false);
}

#[test]
fn missing_verification_tools_are_a_clear_simulator_error() {
    use std::io::BufRead;
    let bin = env!("CARGO_BIN_EXE_aab-android-sim");
    let mut child = Command::new(bin).args(["--devices", "1"]).env("AAB_SIM_AAPT", "/nonexistent/aapt").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    let serial = info["devices"][0]["serial"].as_str().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let adb = |args: &[&str]| Command::new("adb").arg("-P").arg(&port).args(args).env("HOME", home.path()).env_remove("ANDROID_SERIAL").stdin(std::process::Stdio::null()).output().unwrap();
    assert!(adb(&["start-server"]).status.success());
    assert!(String::from_utf8_lossy(&adb(&["connect", &serial]).stdout).contains("connected"));
    let mut ok = false;
    for _ in 0..200 {
        if String::from_utf8_lossy(&adb(&["-s", &serial, "get-state"]).stdout).trim() == "device" {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(ok, "device online");
    let out = adb(&["-s", &serial, "shell", "echo not-an-apk > /data/local/tmp/x.apk; id=$(pm install-create -r | sed 's/.*\\[\\(.*\\)\\]/\\1/'); pm install-write $id base.apk /data/local/tmp/x.apk >/dev/null; pm install-commit $id"]);
    let _ = adb(&["kill-server"]);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let (o, e) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
    assert_eq!(out.status.code(), Some(1), "{o}{e}");
    assert_eq!(o, "");
    assert!(e.starts_with("aab-android-sim: cannot verify the APK: cannot run aapt (/nonexistent/aapt; set AAB_SIM_AAPT): "), "{e}");
}
