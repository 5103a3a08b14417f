//! `install-apk` and `permission-dialog` e2e through the public CLI on the
//! simulated phone: both are managed Intents on the `uia` provider. APKs are real
//! (packaged by Debian's `aapt`, signed by `apksigner`, `aab_android_sim::test_apk`)
//! and the simulator's package manager verifies them with the same tools. Ground
//! truth is the simulator's: its install sessions and installed apps (control
//! `installs`), the installed bytes on the device filesystem (`sha256sum` through
//! the real adb), what its dialogs were answered with (`system-dialog-answer`) and
//! the permission state `dumpsys package` prints.

use std::path::{Path, PathBuf};

use aab_android_sim::test_apk::{apk, keystore};
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, simulated};
use crate::android_intent::{decision, intent_ok, intent_rejected};
use crate::android_uia::{bundle, sha256_hex, truth};

type Sim = aab_android_sim::Simulator;
const PKG: &str = "com.example.aab.installed";
const CAMERA: &str = "android.permission.CAMERA";

/// A UIA runtime bundle of the test's own, started at the default root.
fn uia_started(w: &World, serial: &str) {
    let (dir, _) = bundle(w, "uia-bundle", false);
    let st = w.ok("uia-runtime", json!({"operation": "start", "serial": serial, "bundleDir": dir}));
    assert_eq!(st["running"], json!(true), "{st}");
}

fn setup(w: &World) -> (Sim, String) {
    let sim = simulated(w);
    let serial = sim.devices[0].serial.clone();
    uia_started(w, &serial);
    (sim, serial)
}

fn faults(w: &World, sim: &Sim, set: Value) {
    control(w, sim, json!({"op": "faults", "set": set}));
}

fn installs(w: &World, sim: &Sim) -> Value {
    control(w, sim, json!({"op": "installs"}))
}

fn installed_app(w: &World, sim: &Sim, package: &str) -> Option<Value> {
    installs(w, sim)["apps"].as_array().unwrap().iter().find(|a| a["package"] == package && a["installed"] == true).cloned()
}

/// The installed base.apk's SHA-256 as the phone computes it (real adb, `pm path` + `sha256sum`).
fn phone_sha(w: &World, serial: &str, package: &str) -> Option<String> {
    let path = w.adb(&["-s", serial, "shell", &format!("pm path {package}")]);
    let base = path.lines().find_map(|l| l.trim().strip_prefix("package:"))?.to_string();
    Some(w.adb(&["-s", serial, "shell", &format!("sha256sum {base}")]).split_whitespace().next()?.to_string())
}

struct Apks {
    dir: PathBuf,
    key: PathBuf,
}

impl Apks {
    fn new(w: &World) -> Apks {
        let dir = w.env.root.join("apks");
        std::fs::create_dir_all(&dir).unwrap();
        let key = keystore(&dir, "release");
        Apks { dir, key }
    }
    fn signed(&self, version: u32) -> PathBuf {
        apk(&self.dir, PKG, version, &[CAMERA], Some(&self.key))
    }
}

fn install(w: &World, serial: &str, apk: &Path, extra: Value) -> (Value, aab_e2e::Run) {
    let mut args = json!({"serial": serial, "apkPath": apk.display().to_string()});
    if let (Value::Object(a), Value::Object(x)) = (&mut args, extra) {
        a.extend(x);
    }
    w.run("install-apk", args)
}

#[test]
fn android_install_apk_installs_verified_bytes_and_refuses_a_downgrade() {
    let w = World::new();
    let (sim, serial) = setup(&w);
    let apks = Apks::new(&w);
    let v2 = apks.signed(2);
    let bytes = std::fs::read(&v2).unwrap();

    // Bad input changes nothing: a missing file, a package that is not the APK's, an unsigned APK.
    let f = w.fails("install-apk", json!({"serial": serial, "apkPath": "no-such.apk"}), "apk_unreadable");
    assert_eq!(f["field"], json!("apkPath"), "{f}");
    let f = w.fails("install-apk", json!({"serial": serial, "apkPath": v2.display().to_string(), "packageName": "com.example.other"}), "apk_package_mismatch");
    assert_eq!(f["details"]["apkPackage"], json!(PKG), "{f}");
    let unsigned = apk(&apks.dir, PKG, 9, &[], None);
    w.fails("install-apk", json!({"serial": serial, "apkPath": unsigned.display().to_string()}), "apk_signature_invalid");
    w.fails("install-apk", json!({"serial": serial, "apkPath": v2.display().to_string(), "aaptPath": "/nonexistent/aapt"}), "android_sdk_tool_unavailable");
    assert_eq!(installs(&w, &sim)["sessions"], json!([]), "nothing reached the package manager");

    // Success: one session, the APK's exact bytes installed, the Intent completed by the verification.
    let (body, run) = install(&w, &serial, &v2, json!({"packageName": PKG}));
    w.env.check(run.exit() == 0 && body["command"] == "intent", &run, "install-apk answers as its Intent");
    let v = &body["value"];
    assert_eq!((v["status"].clone(), v["provider"].clone()), (json!("completed"), json!("uia")), "{v}");
    let inst = &v["installation"];
    assert_eq!((inst["status"].clone(), inst["proof"]["source"].clone(), inst["proof"]["sha256"].clone()), (json!("installed"), json!("package-manager"), json!(sha256_hex(&bytes))), "{inst}");
    let app = installed_app(&w, &sim, PKG).expect("installed");
    assert_eq!((app["versionCode"].clone(), app["sha256"].clone()), (json!(2), json!(sha256_hex(&bytes))), "{app}");
    assert_eq!(phone_sha(&w, &serial, PKG), Some(sha256_hex(&bytes)), "the installed bytes are the APK's");
    let sessions = installs(&w, &sim)["sessions"].as_array().cloned().unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!((sessions[0]["outcome"].clone(), sessions[0]["flags"]["downgrade"].clone()), (json!("success"), json!(false)));
    let staged = w.adb(&["-s", &serial, "shell", "ls /data/local/tmp/ai-app-bridge-install/v1 2>/dev/null | wc -l"]);
    assert_eq!(staged.trim(), "0", "the staging is removed once the outcome is stored");
    // The settled outcome is retained: the status reads it back.
    let again = w.ok("install-apk-status", json!({"serial": serial, "actionId": inst["actionId"]}));
    assert_eq!((again["settled"].clone(), again["status"].clone()), (json!(true), json!("installed")), "{again}");

    // A downgrade without allowDowngrade: the phone refuses it and the Intent fails with its code.
    let v1 = apks.signed(1);
    let (body, _) = install(&w, &serial, &v1, json!({}));
    let v = &body["value"];
    assert_eq!((v["status"].clone(), v["error"].clone()), (json!("failed"), json!("install_failed")), "{body}");
    assert_eq!(v["installation"]["code"], json!("INSTALL_FAILED_VERSION_DOWNGRADE"), "{v}");
    assert_eq!(installed_app(&w, &sim, PKG).unwrap()["versionCode"], json!(2), "still version 2");
    // With allowDowngrade (pm install-create -d) it installs.
    let (body, _) = install(&w, &serial, &v1, json!({"allowDowngrade": true}));
    assert_eq!(body["value"]["status"], json!("completed"), "{body}");
    assert_eq!(installed_app(&w, &sim, PKG).unwrap()["versionCode"], json!(1));
    assert_eq!(phone_sha(&w, &serial, PKG), Some(sha256_hex(&std::fs::read(&v1).unwrap())));
    let flags: Vec<Value> = installs(&w, &sim)["sessions"].as_array().unwrap().iter().map(|s| s["flags"]["downgrade"].clone()).collect();
    assert_eq!(flags, [json!(false), json!(false), json!(true)]);
}

#[test]
fn android_install_apk_catches_corrupted_bytes_and_leaves_an_unrecognised_commit_unresolved() {
    let w = World::new();
    let (sim, serial) = setup(&w);
    let apks = Apks::new(&w);

    // The phone's storage corrupts the installed APK but PackageManager says Success: the
    // independent re-hash (pm path + sha256sum) catches it; the outcome is not success.
    faults(&w, &sim, json!({"installCorruptInstalledBytes": true}));
    let v3 = apks.signed(3);
    let (body, _) = install(&w, &serial, &v3, json!({}));
    let v = &body["value"];
    assert_eq!((v["status"].clone(), v["error"].clone()), (json!("ambiguous"), json!("install_verification_failed")), "{body}");
    let want = sha256_hex(&std::fs::read(&v3).unwrap());
    let got = phone_sha(&w, &serial, PKG).expect("installed");
    assert_ne!(got, want, "the simulator really corrupted the bytes");
    assert_eq!(v["installation"]["installed"]["sha256"], json!(got), "{v}");

    // A commit answer that is neither `Success` nor `Failure [...]`: unresolved, never success.
    faults(&w, &sim, json!({"installCommitText": "Installation in progress, please wait", "installCommitExitCode": 0}));
    let v4 = apks.signed(4);
    let (body, _) = install(&w, &serial, &v4, json!({"timeoutMs": 60000}));
    let v = body["value"].clone();
    assert_eq!((v["status"].clone(), v["installation"]["status"].clone(), v["installation"]["reason"].clone()), (json!("waiting_for_decision"), json!("unresolved"), json!("install_commit_unrecognised")), "{body}");
    let op = v["operationId"].as_str().unwrap().to_string();
    let action_id = v["installation"]["actionId"].as_str().unwrap().to_string();
    // The agent cannot declare it complete.
    let f = intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision("done", v["revision"].as_u64().unwrap(), "complete", None)}), "managed_intent_verification_required");
    assert_eq!(f["field"], json!("decision.agentDecision"), "{f}");
    let st = intent_ok(&w, "cancel", json!({"operationId": op}));
    assert_eq!(st["status"], json!("cancelled"), "{st}");
    let s = w.ok("install-apk-status", json!({"serial": serial, "actionId": action_id}));
    assert_eq!((s["settled"].clone(), s["status"].clone()), (json!(false), json!("unresolved")), "{s}");
    // Reconciled: the retained session is abandoned, never installed twice.
    let c = w.ok("device-ownership", json!({"operation": "cancel-install", "serial": serial, "actionId": action_id}));
    assert_eq!((c["cancelled"].clone(), c["installation"]["status"].clone()), (json!(true), json!("abandoned")), "{c}");
    let s = w.ok("install-apk-status", json!({"serial": serial, "actionId": action_id}));
    assert_eq!((s["settled"].clone(), s["status"].clone(), s["error"].clone()), (json!(true), json!("abandoned"), json!("install_abandoned")), "{s}");
    let sessions = installs(&w, &sim)["sessions"].as_array().cloned().unwrap();
    let last = sessions.iter().max_by_key(|s| s["createdAtMs"].as_u64()).unwrap();
    assert_eq!(last["state"], json!("abandoned"), "{sessions:?}");
    assert_ne!(installed_app(&w, &sim, PKG).unwrap()["versionCode"], json!(4));

    // An OEM text over a real install: the installed bytes (new path, the APK's hash) settle it.
    faults(&w, &sim, json!({"installCommitText": "Installed via vendor installer", "installCommitExitCode": 0, "installCommitTextInstalls": true}));
    let v5 = apks.signed(5);
    let (body, _) = install(&w, &serial, &v5, json!({}));
    let inst = &body["value"]["installation"];
    assert_eq!((body["value"]["status"].clone(), inst["proof"]["source"].clone(), inst["proof"]["commit"].clone()), (json!("completed"), json!("installed-bytes"), json!("Installed via vendor installer")), "{body}");
    assert_eq!(phone_sha(&w, &serial, PKG), Some(sha256_hex(&std::fs::read(&v5).unwrap())));
}

#[test]
fn android_install_apk_answers_the_installer_confirmation_through_the_intent() {
    let w = World::new();
    let (sim, serial) = setup(&w);
    let apks = Apks::new(&w);
    faults(&w, &sim, json!({"installPendingUserAction": 1}));
    let v1 = apks.signed(1);
    let (body, _) = install(&w, &serial, &v1, json!({}));
    let v = body["value"].clone();
    assert_eq!((v["status"].clone(), v["installation"]["status"].clone()), (json!("waiting_for_decision"), json!("unresolved")), "{body}");
    assert!(installed_app(&w, &sim, PKG).is_none(), "nothing installed before the confirmation");
    // The summary is the installer's window, read by the UIA runtime.
    let nodes = v["summary"]["nodes"].as_array().unwrap();
    assert!(nodes.iter().any(|n| n["text"] == "Install" && n["packageName"] == "com.google.android.packageinstaller"), "{nodes:?}");
    let op = v["operationId"].as_str().unwrap();
    let done = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("install", v["revision"].as_u64().unwrap(), "act", Some(json!({"action": "tap", "selector": {"text": "Install"}})))}));
    assert_eq!((done["status"].clone(), done["installation"]["proof"]["source"].clone()), (json!("completed"), json!("installed-bytes")), "{done}");
    let answers = truth(&w, &sim, "system-dialog-answer");
    assert_eq!(answers.len(), 1, "the confirmation was pressed once: {answers:?}");
    assert_eq!(answers[0]["data"]["button"], json!("Install"));
    assert_eq!(phone_sha(&w, &serial, PKG), Some(sha256_hex(&std::fs::read(&v1).unwrap())));
}

fn request(w: &World, sim: &Sim, shown: bool) -> Value {
    let r = control(w, sim, json!({"op": "permission-request", "package": SAMPLE, "permission": CAMERA}));
    assert_eq!(r["shown"], json!(shown), "{r}");
    r
}

/// CAMERA of the sample app as `dumpsys package` prints it: (granted, flags).
fn camera(w: &World, serial: &str) -> (bool, Vec<String>) {
    let d = w.adb(&["-s", serial, "shell", &format!("dumpsys package {SAMPLE}")]);
    let line = d.lines().find(|l| l.trim_start().starts_with(&format!("{CAMERA}: granted="))).unwrap_or_else(|| panic!("{d}")).trim().to_string();
    let granted = line.contains("granted=true");
    let flags = line.split("flags=[").nth(1).unwrap_or("").trim_end_matches(']').trim().split('|').map(str::to_string).collect();
    (granted, flags)
}

/// permission-dialog, then one decision on the dialog's control `action`; the final snapshot.
fn answer(w: &World, serial: &str, outcome: &str, action: Value) -> Value {
    let start = w.ok("permission-dialog", json!({"serial": serial, "packageName": SAMPLE, "permission": CAMERA, "outcome": outcome}));
    assert_eq!((start["status"].clone(), start["permissionDialog"]["status"].clone()), (json!("waiting_for_decision"), json!("dialog_open")), "{start}");
    assert!(start["permissionDialog"]["requester"]["component"].as_str().unwrap().ends_with("GrantPermissionsActivity"), "{start}");
    let op = start["operationId"].as_str().unwrap();
    intent_ok(w, "decide", json!({"operationId": op, "decision": decision(&format!("d-{outcome}"), start["revision"].as_u64().unwrap(), "act", Some(action))}))
}

fn tap(text: &str) -> Value {
    json!({"action": "tap", "selector": {"text": text}})
}

#[test]
fn android_permission_dialog_outcomes_end_in_the_state_dumpsys_package_reports() {
    let w = World::new();
    let (sim, serial) = setup(&w);
    let reset = || {
        w.adb(&["-s", &serial, "shell", &format!("pm clear {SAMPLE}")]);
        w.adb(&["-s", &serial, "shell", &format!("am start -n {SAMPLE}/.MainActivity")]);
    };

    // Dialog never shown: nothing to answer, and the state is reported.
    let f = w.fails("permission-dialog", json!({"serial": serial, "packageName": SAMPLE, "permission": CAMERA, "outcome": "allow"}), "permission_dialog_not_shown");
    assert_eq!((f["details"]["reason"].clone(), f["details"]["state"]["granted"].clone()), (json!("no_request_activity"), json!(false)), "{f}");

    // deny: a tap on the deny control; not granted, USER_SET.
    request(&w, &sim, true);
    let d = answer(&w, &serial, "deny", tap("Don't allow"));
    assert_eq!((d["status"].clone(), d["permissionDialog"]["status"].clone()), (json!("completed"), json!("verified")), "{d}");
    let (g, fl) = camera(&w, &serial);
    assert!(!g && fl.contains(&"USER_SET".to_string()) && !fl.contains(&"USER_FIXED".to_string()), "{fl:?}");
    assert_eq!(d["permissionDialog"]["state"]["granted"], json!(false));

    // deny again = don't ask again on API ≥ 30 (USER_FIXED); deny's check accepts it.
    request(&w, &sim, true);
    let d = answer(&w, &serial, "deny", tap("Don't allow"));
    assert_eq!((d["status"].clone(), d["permissionDialog"]["userFixed"].clone()), (json!("completed"), json!(true)), "{d}");
    assert!(camera(&w, &serial).1.contains(&"USER_FIXED".to_string()));
    // Now Android shows no dialog at all.
    request(&w, &sim, false);
    let f = w.fails("permission-dialog", json!({"serial": serial, "packageName": SAMPLE, "permission": CAMERA, "outcome": "allow"}), "permission_dialog_not_shown");
    assert_eq!(f["details"]["reason"], json!("user_fixed"), "{f}");

    // allow-once: granted with ONE_TIME.
    reset();
    request(&w, &sim, true);
    let d = answer(&w, &serial, "allow-once", tap("Only this time"));
    assert_eq!(d["status"], json!("completed"), "{d}");
    let (g, fl) = camera(&w, &serial);
    assert!(g && fl.contains(&"ONE_TIME".to_string()), "{fl:?}");
    // Already granted: no dialog.
    request(&w, &sim, false);
    let f = w.fails("permission-dialog", json!({"serial": serial, "packageName": SAMPLE, "permission": CAMERA, "outcome": "allow"}), "permission_dialog_not_shown");
    assert_eq!((f["details"]["reason"].clone(), f["details"]["state"]["granted"].clone()), (json!("already_granted"), json!(true)), "{f}");

    // dismiss with Back: the grant and flags stay as they were.
    reset();
    let before = camera(&w, &serial);
    request(&w, &sim, true);
    let d = answer(&w, &serial, "dismiss", json!({"action": "back"}));
    assert_eq!(d["status"], json!("completed"), "{d}");
    assert_eq!(camera(&w, &serial), before);

    // The control chosen does not give the outcome asked for: the Intent fails with the real state.
    request(&w, &sim, true);
    let d = answer(&w, &serial, "allow", tap("Don't allow"));
    assert_eq!((d["status"].clone(), d["error"].clone()), (json!("failed"), json!("permission_outcome_mismatch")), "{d}");
    assert_eq!(d["permissionDialog"]["state"]["granted"], json!(false));
    assert!(!camera(&w, &serial).0);

    // allow: granted, no ONE_TIME.
    request(&w, &sim, true);
    let d = answer(&w, &serial, "allow", tap("Allow"));
    assert_eq!(d["status"], json!("completed"), "{d}");
    let (g, fl) = camera(&w, &serial);
    assert!(g && !fl.contains(&"ONE_TIME".to_string()), "{fl:?}");

    // Every answer was one press (or one Back) on the dialog, made through the UIA runtime.
    let answers = truth(&w, &sim, "system-dialog-answer");
    let how: Vec<(Value, Value)> = answers.iter().map(|a| (a["data"]["button"].clone(), a["data"]["via"].clone())).collect();
    assert_eq!(how.len(), 6, "{how:?}");
    assert_eq!(how[3], (Value::Null, json!("back")));
    assert!(how.iter().enumerate().all(|(i, (_, via))| i == 3 || via == "uia"), "{how:?}");
}
