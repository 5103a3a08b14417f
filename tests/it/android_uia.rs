//! The UIA runtime e2e through the public CLI against the simulated phone: a
//! runtime bundle made by the test, deployment through the real adb
//! (`uia-runtime`), the focused window read by the runtime (`uia-tree`) — a
//! system permission dialog the app does not own — and managed clicks
//! (`tap-uia`, `tap-uia-text`). Ground truth is the simulator: its UIA
//! runtimes (control `uia`), its truth records (`uia-tap`,
//! `system-dialog-answer`, `uia-runtime-start`), the app's permissions.

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};
use crate::android_h5::phase;

type Sim = aab_android_sim::Simulator;
const ROOT: &str = "/data/local/tmp/ai-app-bridge-uia-test-e2e";
const CONTROLLER: &str = "com.android.permissioncontroller";
const CAMERA: &str = "android.permission.CAMERA";

pub(crate) fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// A runtime bundle of its own: random jar bytes and a manifest with their hash
/// (`lie` puts another hash in the manifest).
pub(crate) fn bundle(w: &World, name: &str, lie: bool) -> (String, String) {
    let dir = w.env.root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    // Bytes no other run has: the hash of this directory and the clock, repeated.
    let seed = format!("{}:{:?}", dir.display(), std::time::SystemTime::now());
    let jar: Vec<u8> = (0..128u32).flat_map(|i| { use sha2::Digest; sha2::Sha256::digest(format!("{seed}:{i}").as_bytes()).to_vec() }).collect();
    std::fs::write(dir.join("ai-app-bridge-uia.jar"), &jar).unwrap();
    let sha = sha256_hex(&jar);
    let said = if lie { "0".repeat(64) } else { sha.clone() };
    let manifest = json!({"schemaVersion": "aab.uia.bundle.v1", "mainClass": "io.github.mobileaidev.aiappbridge.uia.UiaRuntime", "artifact": "ai-app-bridge-uia.jar", "sha256": said, "minApi": 25});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    (dir.display().to_string(), sha)
}

pub(crate) fn truth(w: &World, sim: &Sim, kind: &str) -> Vec<Value> {
    control(w, sim, json!({"op": "truth", "kind": kind}))["items"].as_array().cloned().unwrap_or_default()
}

fn camera_dialog(w: &World, sim: &Sim) {
    control(w, sim, json!({"op": "system-dialog", "package": CONTROLLER, "title": "Allow AAB Sample to take pictures and record video?", "buttons": [
        {"text": "While using the app", "resourceId": "permission_allow_foreground_only_button", "permission": {"package": SAMPLE, "permission": CAMERA, "granted": true}},
        {"text": "Don't allow", "resourceId": "permission_deny_button", "permission": {"package": SAMPLE, "permission": CAMERA, "granted": false}}
    ]}));
}

/// The simulator with the runtime of a fresh bundle started through `uia-runtime`.
fn started(w: &World) -> (Sim, String, Value) {
    let sim = simulated(w);
    let serial = sim.devices[0].serial.clone();
    let (dir, sha) = bundle(w, "bundle", false);
    let st = w.ok("uia-runtime", json!({"operation": "start", "serial": serial, "root": ROOT, "bundleDir": dir}));
    assert_eq!((st["started"].clone(), st["pushed"].clone(), st["bundle"]["sha256"].clone()), (json!(true), json!(true), json!(sha)), "{st}");
    (sim, serial, st)
}

#[test]
fn android_uia_deploys_the_runtime_and_answers_a_system_dialog_once() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let status = w.ok("uia-runtime", json!({"operation": "status", "serial": serial, "root": ROOT}));
    assert_eq!((status["running"].clone(), status["descriptor"].clone()), (json!(false), Value::Null), "{status}");
    let none = w.fails("uia-tree", json!({"serial": serial, "root": ROOT}), "uia_runtime_not_running");
    assert_eq!(none["dispatched"], json!(false));

    // A bundle whose jar is not the manifest's is refused before the phone is touched.
    let (bad, _) = bundle(&w, "tampered", true);
    let facts = w.fails("uia-runtime", json!({"operation": "start", "serial": serial, "root": ROOT, "bundleDir": bad}), "uia_runtime_bundle_invalid");
    assert_eq!((facts["dispatched"].clone(), facts["field"].clone()), (json!(false), json!("bundleDir")), "{facts}");
    assert!(truth(&w, &sim, "uia-runtime-start").is_empty(), "ground truth: nothing started");
    assert_eq!(w.adb(&["-s", &serial, "shell", &format!("ls {ROOT} 2>/dev/null | wc -l")]).trim(), "0", "ground truth: nothing pushed");

    // Start: pushed content-addressed, verified, started; the reply never carries the token.
    let (dir, sha) = bundle(&w, "bundle", false);
    let st = w.ok("uia-runtime", json!({"operation": "start", "serial": serial, "root": ROOT, "bundleDir": dir}));
    let epoch = st["descriptor"]["runtimeEpoch"].clone();
    assert_eq!((st["started"].clone(), st["jar"].clone(), st["status"]["runtimeEpoch"].clone()), (json!(true), json!(format!("{ROOT}/runtime-{sha}.jar")), epoch.clone()), "{st}");
    assert!(st["descriptor"].get("token").is_none() && !st.to_string().contains(&sim_token(&w, &sim)), "the bearer token stays in the plugin");
    let runtimes = control(&w, &sim, json!({"op": "uia", "root": ROOT}))["runtimes"].clone();
    let running: Vec<&Value> = runtimes.as_array().unwrap().iter().filter(|r| r["running"] == json!(true)).collect();
    assert_eq!((running.len(), running[0]["runtimeEpoch"].clone(), running[0]["dexSha256"].clone()), (1, epoch.clone(), json!(sha)), "{runtimes}");
    assert_eq!(w.adb(&["-s", &serial, "shell", &format!("sha256sum {ROOT}/runtime-{sha}.jar")]).split_whitespace().next(), Some(sha.as_str()), "ground truth: the jar on the phone");
    // A second start of a running runtime starts nothing.
    let again = w.ok("uia-runtime", json!({"operation": "start", "serial": serial, "root": ROOT, "bundleDir": dir}));
    assert_eq!((again["started"].clone(), again["descriptor"]["runtimeEpoch"].clone()), (json!(false), epoch.clone()));
    assert_eq!(truth(&w, &sim, "uia-runtime-start").len(), 1);
    // Another runtime jar while this one runs: the phone's owner lock refuses it.
    let (other, _) = bundle(&w, "other", false);
    let (body, run) = w.run("uia-runtime", json!({"operation": "start", "serial": serial, "root": ROOT, "bundleDir": other}));
    let facts = error_facts(&body).clone();
    w.env.check(facts["error"] == json!("uia_runtime_already_running") && facts["ambiguous"] == json!(false), &run, "the owner lock refuses a second runtime: a known outcome");
    let runtimes = control(&w, &sim, json!({"op": "uia", "root": ROOT}))["runtimes"].clone();
    let running: Vec<&Value> = runtimes.as_array().unwrap().iter().filter(|r| r["running"] == json!(true)).collect();
    assert_eq!((running.len(), running[0]["runtimeEpoch"].clone()), (1, epoch.clone()), "ground truth: still the one runtime {runtimes}");

    // The permission dialog the app did not draw: the runtime sees it, tap-uia answers it once.
    camera_dialog(&w, &sim);
    let tree = w.ok("uia-tree", json!({"serial": serial, "root": ROOT, "clickableOnly": true}));
    assert_eq!((tree["window"]["type"].clone(), tree["runtimeEpoch"].clone()), (json!("system"), epoch.clone()), "{tree}");
    let allow = tree["nodes"].as_array().unwrap().iter().find(|n| n["text"] == json!("While using the app")).unwrap_or_else(|| panic!("{tree}")).clone();
    assert_eq!((allow["packageName"].clone(), allow["targetRef"]["schemaVersion"].clone()), (json!(CONTROLLER), json!("aab.uia.target/v1")));
    let tap = w.ok("tap-uia", json!({"serial": serial, "root": ROOT, "packageName": CONTROLLER, "targetRef": allow["targetRef"]}));
    assert_eq!((tap["receipt"]["completion"].clone(), tap["receipt"]["dispatched"].clone(), tap["acknowledged"].clone(), tap["proof"]["kind"].clone()), (json!("original_callback"), json!(true), json!(true), json!("uia")), "{tap}");
    let taps = truth(&w, &sim, "uia-tap");
    assert_eq!(taps.len(), 1, "ground truth: one click");
    assert_eq!((taps[0]["data"]["actionId"].clone(), taps[0]["data"]["ref"].clone()), (tap["actionId"].clone(), allow["targetRef"]["nodeRef"].clone()));
    let answers = truth(&w, &sim, "system-dialog-answer");
    assert_eq!((answers.len(), answers[0]["data"]["button"].clone(), answers[0]["data"]["via"].clone()), (1, json!("While using the app"), json!("uia")));
    assert_eq!(app_state(&w, &sim, SAMPLE)["permissions"][CAMERA], json!(true), "ground truth: the permission was granted");
    assert_eq!(phase(&w, &serial), json!("idle"));
    // The observed node is gone with its dialog: its reference is refused, nothing clicked.
    let gone = w.fails("tap-uia", json!({"serial": serial, "root": ROOT, "packageName": CONTROLLER, "targetRef": allow["targetRef"]}), "uia_window_changed");
    assert_eq!(gone["dispatched"], json!(false), "{gone}");
    assert_eq!(truth(&w, &sim, "uia-tap").len(), 1);

    // tap-uia-text on the app itself (no SDK involved): the login's Create account.
    let t = w.ok("tap-uia-text", json!({"serial": serial, "root": ROOT, "targetText": "Create account", "packageName": SAMPLE}));
    assert_eq!(t["bound"]["text"], json!("Create account"), "{t}");
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("signup"), "ground truth: the tap reached the app");
    w.fails("tap-uia-text", json!({"serial": serial, "root": ROOT, "targetText": "No such button"}), "uia_selector_not_found");
    assert_eq!(truth(&w, &sim, "uia-tap").len(), 2);

    // Stop: the runtime is gone; status says so.
    let stopped = w.ok("uia-runtime", json!({"operation": "stop", "serial": serial, "root": ROOT}));
    assert_eq!(stopped["stopped"], json!(true), "{stopped}");
    assert_eq!(w.ok("uia-runtime", json!({"operation": "status", "serial": serial, "root": ROOT}))["running"], json!(false));
    let mut sim = sim;
    sim.shutdown();
}

/// The token of the running runtime (ground truth), to prove no reply leaks it.
fn sim_token(w: &World, sim: &Sim) -> String {
    let serial = sim.devices[0].serial.clone();
    let text = w.adb(&["-s", &serial, "shell", &format!("cat {ROOT}/runtime.json")]);
    serde_json::from_str::<Value>(&text).unwrap()["token"].as_str().unwrap().to_string()
}

#[test]
fn android_uia_runtime_restarted_between_prepare_and_start_is_recovered_never_doubled() {
    let w = World::new();
    let (mut sim, serial, st) = started(&w);
    let old_epoch = st["descriptor"]["runtimeEpoch"].clone();
    camera_dialog(&w, &sim);
    // The runtime process dies right after answering prepare; the same jar starts again.
    control(&w, &sim, json!({"op": "faults", "set": {"uiaRestartAfterPrepare": true}}));
    let f = w.fails("tap-uia", json!({"serial": serial, "root": ROOT, "packageName": CONTROLLER, "selector": {"text": "Don't allow"}}), "uia_runtime_restarted");
    assert_eq!(f["details"]["receipt"]["completion"], json!("recovered_before_admission"), "{f}");
    assert_eq!(f["details"]["proof"]["acknowledged"], json!(true), "the new runtime acknowledged the old epoch's record: {f}");
    assert!(truth(&w, &sim, "uia-tap").is_empty(), "ground truth: nothing was clicked");
    assert_eq!(phase(&w, &serial), json!("idle"), "a known outcome leaves the device idle");
    let runtimes = control(&w, &sim, json!({"op": "uia", "root": ROOT}))["runtimes"].clone();
    let old = runtimes.as_array().unwrap().iter().find(|r| r["runtimeEpoch"] == old_epoch).unwrap().clone();
    assert_eq!((old["running"].clone(), old["journal"][0]["phase"].clone(), old["journal"][0]["acknowledged"].clone()), (json!(false), json!("terminal"), json!(true)), "{old}");
    // The dialog is still there; a new click through the new runtime happens once.
    let t = w.ok("tap-uia", json!({"serial": serial, "root": ROOT, "packageName": CONTROLLER, "selector": {"text": "Don't allow"}}));
    assert_ne!(t["runtimeEpoch"], old_epoch, "{t}");
    assert_eq!(truth(&w, &sim, "uia-tap").len(), 1, "ground truth: one click in all");
    assert_eq!(app_state(&w, &sim, SAMPLE)["permissions"][CAMERA], json!(false));
    sim.shutdown();
}

#[test]
fn android_uia_click_pending_at_the_deadline_is_unresolved_until_reconciled() {
    let w = World::new();
    let (mut sim, serial, _) = started(&w);
    camera_dialog(&w, &sim);
    // The admitted click waits on the phone longer than the command's deadline.
    control(&w, &sim, json!({"op": "faults", "set": {"uiaClickDelayMs": 4000}}));
    let (body, run) = w.run("tap-uia", json!({"serial": serial, "root": ROOT, "packageName": CONTROLLER, "selector": {"text": "Don't allow"}, "timeoutMs": 3000}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true) && facts["dispatched"] != json!(false), &run, "an unsettled UIA click is ambiguous");
    assert_eq!(phase(&w, &serial), json!("unresolved"));
    w.fails("tap-uia-text", json!({"serial": serial, "root": ROOT, "targetText": "Don't allow"}), "device_ownership_unresolved");
    // The phone finishes the click on its own; reconcile settles from the runtime's receipt.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while truth(&w, &sim, "uia-tap").is_empty() {
        assert!(std::time::Instant::now() < until, "the delayed click never happened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.expect_ok(&run, "reconcile");
    let receipt = &body["value"]["executionReceipt"];
    assert_eq!((body["value"]["recovered"].clone(), receipt["kind"].clone(), receipt["device"]["completion"].clone()), (json!(true), json!("uia"), json!("original_callback")), "{body}");
    assert_eq!(phase(&w, &serial), json!("idle"));
    assert_eq!(truth(&w, &sim, "uia-tap").len(), 1, "ground truth: never clicked twice");
    assert_eq!(app_state(&w, &sim, SAMPLE)["permissions"][CAMERA], json!(false), "ground truth: denied once");
    sim.shutdown();
}

#[test]
fn android_tap_text_with_the_uia_provider_needs_no_sdk_view() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let (dir, _) = bundle(&w, "bundle", false);
    // The default root (the release layout).
    let st = w.ok("uia-runtime", json!({"operation": "start", "serial": serial, "bundleDir": dir}));
    assert_eq!(st["root"], json!("/data/local/tmp/ai-app-bridge-uia/v1"), "{st}");
    let tap = w.ok("tap-text", json!({"serial": serial, "packageName": SAMPLE, "targetText": "Create account", "provider": "uia"}));
    assert_eq!((tap["provider"].clone(), tap["proof"]["kind"].clone(), tap["receipt"]["completion"].clone()), (json!("uia"), json!("uia"), json!("original_callback")), "{tap}");
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("signup"), "ground truth: the tap reached the app");
    let taps = truth(&w, &sim, "uia-tap");
    assert_eq!((taps.len(), taps[0]["data"]["actionId"].clone()), (1, tap["actionId"].clone()));
    // Another package's text is not this app's: nothing clicked.
    w.fails("tap-text", json!({"serial": serial, "packageName": "com.example.notes", "targetText": "Sign up", "provider": "uia"}), "uia_selector_not_found");
    assert_eq!(truth(&w, &sim, "uia-tap").len(), 1);
    sim.shutdown();
}
