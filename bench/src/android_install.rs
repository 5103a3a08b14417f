//! `aab-bench-android --install`: the managed Intents that drive what the app does
//! not own, against what the peers do for the same job, in one run:
//!   - `install-apk` (freeze + `aapt`/`apksigner` inspection, staging with an
//!     on-phone hash, one shell-worker job running install-create/write/commit,
//!     `pm path` + `sha256sum` of the installed bytes, the Intent's first UIA
//!     observation) vs `adb install -r` (what Appium's `installApp` and
//!     mobile-mcp's `mobile_install_app` run: nothing verified);
//!   - `permission-dialog` + one `intent decide` tapping "Allow" through the UIA
//!     runtime, verified by `dumpsys package`, vs `adb shell input tap` at the
//!     button's centre (mobile-mcp's click: nothing bound, nothing verified).
//!
//! Every call is checked after its clock stopped against the simulator: one new
//! successful install session whose bytes are the APK's, or the permission
//! granted and exactly one new dialog answer.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::Digest;

use super::mcp::run_command as run;
use super::{Mcp, PKG, World, stats};

const INSTALLED: &str = "com.example.aab.benchinstall";
const CAMERA: &str = "android.permission.CAMERA";


fn sha256_hex(b: &[u8]) -> String {
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Successful sessions so far, and the installed app's sha256 (simulator truth).
fn install_truth(w: &World) -> Result<(usize, Option<String>), String> {
    let v = w.control(json!({"op": "installs"}))?;
    let ok = v["sessions"].as_array().map(|a| a.iter().filter(|s| s["outcome"] == "success").count()).unwrap_or(0);
    let sha = v["apps"].as_array().and_then(|a| a.iter().find(|x| x["package"] == INSTALLED && x["installed"] == true)).and_then(|x| x["sha256"].as_str().map(str::to_string));
    Ok((ok, sha))
}

fn dialog_answers(w: &World) -> Result<usize, String> {
    Ok(w.control(json!({"op": "truth", "kind": "system-dialog-answer"}))?["items"].as_array().map(Vec::len).unwrap_or(0))
}

fn camera_granted(w: &World) -> Result<bool, String> {
    let d = w.adb(&["-s", &w.serial, "shell", &format!("dumpsys package {PKG}")])?;
    Ok(d.lines().any(|l| l.trim_start().starts_with(&format!("{CAMERA}: granted=true"))))
}

pub fn run_install(w: &World, calls: usize, rows: &mut Vec<Value>, aab: &mut Mcp) -> Result<(), String> {
    let serial = w.serial.clone();
    let dir = w.dir.path().join("apks");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let key = aab_android_sim::test_apk::keystore(&dir, "bench");
    let apk = aab_android_sim::test_apk::apk(&dir, INSTALLED, 1, &[], Some(&key));
    let want = sha256_hex(&std::fs::read(&apk).map_err(|e| e.to_string())?);
    let apk_path = apk.display().to_string();

    // The UIA runtime (a bundle of the bench's own) for the Intents' observations.
    let bundle = w.dir.path().join("uia-bundle");
    std::fs::create_dir_all(&bundle).map_err(|e| e.to_string())?;
    let jar: Vec<u8> = (0..64u32).flat_map(|i| sha256_hex(format!("aab-bench-uia:{i}").as_bytes()).into_bytes()).collect();
    std::fs::write(bundle.join("ai-app-bridge-uia.jar"), &jar).map_err(|e| e.to_string())?;
    let manifest = json!({"schemaVersion": "aab.uia.bundle.v1", "mainClass": "io.github.mobileaidev.aiappbridge.uia.UiaRuntime", "artifact": "ai-app-bridge-uia.jar", "sha256": sha256_hex(&jar), "minApi": 25});
    std::fs::write(bundle.join("manifest.json"), manifest.to_string()).map_err(|e| e.to_string())?;
    run(aab, "uia-runtime", json!({"operation": "start", "serial": serial, "bundleDir": bundle.display().to_string()}))?;

    // ---- install-apk (managed Intent, verified) vs adb install -r
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (before, _) = install_truth(w)?;
        let t = Instant::now();
        let body = run(aab, "install-apk", json!({"serial": serial, "apkPath": apk_path}))?;
        samples.push(t.elapsed());
        if body["value"]["status"] != "completed" {
            return Err(format!("install-apk did not complete: {body}"));
        }
        let (after, sha) = install_truth(w)?;
        if after != before + 1 || sha.as_deref() != Some(want.as_str()) {
            return Err(format!("install-apk: {before} → {after} successful sessions, installed {sha:?}, want {want}"));
        }
    }
    stats(rows, "install-apk: inspect + stage + one install job + pm path/sha256sum check (MCP)", samples, None);
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (before, _) = install_truth(w)?;
        let t = Instant::now();
        let out = w.adb(&["-s", &serial, "install", "-r", &apk_path])?;
        samples.push(t.elapsed());
        let (after, _) = install_truth(w)?;
        if !out.contains("Success") || after != before + 1 {
            return Err(format!("adb install: {out:?}, {before} → {after} successful sessions"));
        }
    }
    stats(rows, "adb install -r (Appium installApp / mobile-mcp mobile_install_app; unverified)", samples, None);

    // ---- permission-dialog + decide (verified) vs a blind tap
    let reset = || -> Result<(), String> {
        w.adb(&["-s", &serial, "shell", &format!("pm revoke {PKG} {CAMERA}")])?;
        w.control(json!({"op": "permission-request", "package": PKG, "permission": CAMERA}))?;
        Ok(())
    };
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        reset()?;
        let answers = dialog_answers(w)?;
        let t = Instant::now();
        let start = run(aab, "permission-dialog", json!({"serial": serial, "packageName": PKG, "permission": CAMERA, "outcome": "allow"}))?;
        let v = &start["value"];
        let decision = json!({"decisionId": "allow", "basedOnRevision": v["revision"], "agentDecision": "act", "action": {"action": "tap", "selector": {"text": "Allow"}}});
        let done = run(aab, "intent", json!({"operation": "decide", "operationId": v["operationId"], "decision": decision}))?;
        samples.push(t.elapsed());
        if done["value"]["status"] != "completed" || !camera_granted(w)? || dialog_answers(w)? != answers + 1 {
            return Err(format!("permission-dialog did not verify: {done}"));
        }
    }
    stats(rows, "permission-dialog + decide tap Allow (UIA), dumpsys package verified (MCP)", samples, None);
    // The blind tap: the button's centre from a uiautomator dump (untimed), then input tap.
    reset()?;
    let xml = w.adb(&["-s", &serial, "shell", "uiautomator dump /dev/tty"])?;
    let at = xml.split("<node").find(|n| n.contains("text=\"Allow\"")).and_then(|n| n.split("bounds=\"").nth(1)).ok_or("no Allow button in the dump")?;
    let n: Vec<i64> = at.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty()).take(4).filter_map(|p| p.parse().ok()).collect();
    let (x, y) = ((n[0] + n[2]) / 2, (n[1] + n[3]) / 2);
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls {
        if i > 0 {
            reset()?;
        }
        let t = Instant::now();
        w.adb(&["-s", &serial, "shell", &format!("input tap {x} {y}")])?;
        samples.push(t.elapsed());
        let until = Instant::now() + Duration::from_secs(5);
        while !camera_granted(w)? {
            if Instant::now() > until {
                return Err("the blind tap did not grant the permission".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    stats(rows, "adb shell input tap on Allow (mobile-mcp click; unbound, unverified)", samples, None);
    Ok(())
}
