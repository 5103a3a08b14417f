//! The devicectl and xcodebuild doubles as child processes through the
//! wrapper scripts: the `--json-output` documents, container copies, launches
//! (new pid and epoch), installs, screenshots, faults (injected failures,
//! developer mode, tunnel, a hang), and the WDA Runner started by
//! `test-without-building` and stopped when that process is killed.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::*;

/// Runs a double; (exit code, --json-output document if one was written, stdout).
fn run(tool: &Path, args: &[&str], json_out: &Path) -> (i32, Value, String) {
    let _ = std::fs::remove_file(json_out);
    let mut cmd = Command::new(tool);
    cmd.args(args).args(["--timeout", "10", "--json-output"]).arg(json_out);
    let out = cmd.output().expect("the double runs");
    let doc = std::fs::read_to_string(json_out).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), doc, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn devicectl_documents_and_faults() {
    let sim = sim().await;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.json");
    let d = &sim.devices[0];
    let xcrun = sim.devicectl();
    let direct = sim.devicectl_direct();

    let (code, doc, _) = run(&xcrun, &["devicectl", "list", "devices"], &out);
    assert_eq!(code, 0, "{doc}");
    assert_eq!((doc["info"]["commandType"].as_str(), doc["info"]["outcome"].as_str(), doc["info"]["arguments"][0].as_str()), (Some("devicectl.list.devices"), Some("success"), Some("devicectl")));
    assert!(doc["info"]["version"].is_string() && doc["info"]["environment"].is_object());
    let dev = &doc["result"]["devices"][0];
    assert_eq!(dev["identifier"], json!(d.identifier));
    assert_eq!((dev["hardwareProperties"]["udid"].as_str(), dev["hardwareProperties"]["serialNumber"].as_str()), (Some(d.udid.as_str()), Some(d.serial.as_str())));
    assert_eq!((dev["hardwareProperties"]["platform"].as_str(), dev["hardwareProperties"]["productType"].as_str()), (Some("iOS"), Some(d.product_type.as_str())));
    assert_eq!((dev["deviceProperties"]["developerModeStatus"].as_str(), dev["deviceProperties"]["ddiServicesAvailable"].as_bool()), (Some("enabled"), Some(true)));
    assert_eq!((dev["connectionProperties"]["tunnelState"].as_str(), dev["connectionProperties"]["tunnelIPAddress"].as_str()), (Some("connected"), Some("127.0.0.1")));

    // The descriptor copied out of the app's data container is the published one.
    let dest = tmp.path().join("ai_app_bridge_port.json");
    let copy = ["device", "copy", "from", "--device", &d.identifier, "--domain-type", "appDataContainer", "--domain-identifier", APP, "--source", "Documents/ai_app_bridge_port.json", "--destination", dest.to_str().unwrap()];
    let (code, doc, _) = run(&direct, &copy, &out);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["info"]["commandType"], "devicectl.device.copy.from");
    let published = sim.control(json!({ "op": "descriptor", "bundleId": APP })).await;
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), published["text"].as_str().unwrap());
    let (code, doc, _) = run(&direct, &["device", "copy", "from", "--device", &d.udid, "--domain-type", "appDataContainer", "--domain-identifier", APP, "--source", "Documents/nope.json", "--destination", dest.to_str().unwrap()], &out);
    assert_eq!((code, doc["error"]["domain"].as_str(), doc["error"]["code"].as_i64(), doc["info"]["outcome"].as_str()), (1, Some("NSCocoaErrorDomain"), Some(4), Some("failed")));
    let (code, _, _) = run(&direct, &["device", "copy", "from", "--device", &d.udid, "--domain-type", "appDataContainer", "--domain-identifier", APP, "--source", "../../x", "--destination", dest.to_str().unwrap()], &out);
    assert_eq!(code, 1, "no escape from the container");

    // Launch: a new process and runtime epoch, foreground.
    let before = app(&sim, APP).await;
    let (code, doc, _) = run(&xcrun, &["devicectl", "device", "process", "launch", "--device", &d.identifier, "--terminate-existing", APP], &out);
    assert_eq!(code, 0, "{doc}");
    let after = app(&sim, APP).await;
    assert_eq!(doc["result"]["process"]["processIdentifier"].as_u64(), Some(after.pid));
    assert_ne!((after.pid, &after.epoch), (before.pid, &before.epoch));
    assert_eq!(sim.control(json!({ "op": "state" })).await["foreground"], APP);

    // Install an unknown bundle, then launch it: a plain app without the SDK.
    let bundle = tmp.path().join("New.app");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("Info.plist"), json!({ "CFBundleIdentifier": "com.example.aab.new", "CFBundleName": "New", "CFBundleShortVersionString": "3.1", "CFBundleVersion": "31" }).to_string()).unwrap();
    let (code, doc, _) = run(&xcrun, &["devicectl", "device", "install", "app", "--device", &d.udid, bundle.to_str().unwrap()], &out);
    assert_eq!((code, doc["result"]["installedApplications"][0]["bundleID"].as_str()), (0, Some("com.example.aab.new")), "{doc}");
    let (code, _, _) = run(&xcrun, &["devicectl", "device", "process", "launch", "--device", &d.udid, "com.example.aab.new"], &out);
    assert_eq!(code, 0);
    let st = sim.control(json!({ "op": "state" })).await;
    let new = st["apps"].as_array().unwrap().iter().find(|a| a["bundleId"] == "com.example.aab.new").unwrap().clone();
    assert_eq!((new["versionName"].as_str(), new["running"].as_bool(), new["port"].as_u64()), (Some("3.1"), Some(true), Some(0)));
    assert_eq!(st["foreground"], "com.example.aab.new");

    let png = tmp.path().join("shot.png");
    let (code, _, _) = run(&direct, &["device", "capture", "screenshot", "--device", &d.udid, "--destination", png.to_str().unwrap()], &out);
    assert_eq!(code, 0);
    assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");

    // Faults: an injected failure of one command, developer mode, the tunnel.
    sim.control(json!({ "op": "faults", "set": { "devicectlFail": { "command": "launch", "code": 4242 } } })).await;
    let (code, doc, _) = run(&xcrun, &["devicectl", "device", "process", "launch", "--device", &d.udid, APP], &out);
    assert_eq!((code, doc["error"]["code"].as_i64(), doc["error"]["domain"].as_str()), (1, Some(4242), Some("com.apple.dt.CoreDeviceError")));
    assert!(doc["error"]["userInfo"]["NSLocalizedDescription"]["string"].is_string());
    assert_eq!(run(&xcrun, &["devicectl", "list", "devices"], &out).0, 0, "other commands still work");
    sim.control(json!({ "op": "faults", "set": { "devicectlFail": null, "developerModeDisabled": true } })).await;
    let (_, doc, _) = run(&xcrun, &["devicectl", "list", "devices"], &out);
    assert_eq!(doc["result"]["devices"][0]["deviceProperties"]["developerModeStatus"], "disabled");
    let (code, doc, _) = run(&direct, &copy, &out);
    assert_eq!((code, doc["error"]["code"].as_i64()), (1, Some(10002)));
    sim.control(json!({ "op": "faults", "clear": true })).await;
    sim.control(json!({ "op": "tunnel", "connected": false })).await;
    let (_, doc, _) = run(&xcrun, &["devicectl", "list", "devices"], &out);
    let conn = &doc["result"]["devices"][0]["connectionProperties"];
    assert_eq!((conn["tunnelState"].as_str(), conn.get("tunnelIPAddress")), (Some("disconnected"), None));
    assert_eq!(run(&direct, &copy, &out).0, 1);
    sim.control(json!({ "op": "tunnel", "connected": true })).await;
    // Usage errors exit 64 without a document.
    let (code, doc, _) = run(&xcrun, &["devicectl", "list", "devices", "--bogus"], &out);
    assert_eq!((code, doc), (64, Value::Null));

    // A hang: the double never answers until it is killed.
    sim.control(json!({ "op": "faults", "set": { "devicectlHang": "list" } })).await;
    let mut child = Command::new(&xcrun).args(["devicectl", "list", "devices", "--timeout", "1", "--json-output"]).arg(&out).stdout(Stdio::null()).spawn().unwrap();
    until("the hang is recorded", || async { truth(&sim, "devicectl").await.iter().any(|t| t["fault"] == "hang").then_some(()) }).await;
    assert!(child.try_wait().unwrap().is_none(), "still hanging");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn xcodebuild_builds_the_prepared_project_and_runs_the_runner() {
    let sim = sim().await;
    let tmp = tempfile::tempdir().unwrap();
    let udid = sim.devices[0].udid.clone();
    let prepared = tmp.path().join("prepared");
    std::fs::create_dir_all(prepared.join("WebDriverAgent.xcodeproj")).unwrap();
    let derived = tmp.path().join("build");
    let project = prepared.join("WebDriverAgent.xcodeproj");
    let args = |action: &str| -> Vec<String> {
        ["-project", project.to_str().unwrap(), "-scheme", "WebDriverAgentRunner", "-sdk", "iphoneos", "-destination", &format!("id={udid}"), "-derivedDataPath", derived.to_str().unwrap(), "DEVELOPMENT_TEAM=TEAM123", "PRODUCT_BUNDLE_IDENTIFIER=io.github.mobileaidev.aiappbridge.wda", "ENABLE_DEFAULT_HEADER_SEARCH_PATHS=NO", "-allowProvisioningUpdates", action]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    // Without the prepared manifest the build fails like a compile error.
    let out = Command::new(sim.xcodebuild()).args(args("build-for-testing")).output().unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stdout).contains("error:"));
    std::fs::write(prepared.join("aab-wda-project.json"), json!({ "schemaVersion": "aab.ios-wda-project/v1", "files": [] }).to_string()).unwrap();
    let out = Command::new(sim.xcodebuild()).args(args("build-for-testing")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(derived.join("Build/Products/WebDriverAgentRunner_iphoneos-arm64.xctestrun").is_file());

    let runner = "io.github.mobileaidev.aiappbridge.wda.xctrunner";
    let mut child = Command::new(sim.xcodebuild()).args(args("test-without-building")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let state = until("the Runner runs", || async {
        let st = sim.control(json!({ "op": "state" })).await;
        (st["runner"]["running"] == true).then_some(st)
    })
    .await;
    assert_eq!(state["runner"]["xcodebuildPid"].as_u64(), Some(child.id() as u64));
    assert_eq!(state["foreground"], runner, "starting the Runner changes the foreground app");
    // Its descriptor, as the host copies it.
    let out = tmp.path().join("out.json");
    let dest = tmp.path().join("wda.json");
    let (code, _, _) = run(&sim.devicectl_direct(), &["device", "copy", "from", "--device", &udid, "--domain-type", "appDataContainer", "--domain-identifier", runner, "--source", "Documents/ai_app_bridge_wda.json", "--destination", dest.to_str().unwrap()], &out);
    assert_eq!(code, 0);
    let desc: Value = serde_json::from_str(&std::fs::read_to_string(&dest).unwrap()).unwrap();
    assert_eq!((desc["schemaVersion"].as_str(), desc["bundleId"].as_str(), desc["ok"].as_bool()), (Some("aab.ios-wda/v1"), Some(runner), Some(true)));
    assert_eq!(desc["port"], state["runner"]["port"]);
    assert_eq!(desc["runtimeEpoch"], state["runner"]["runtimeEpoch"]);
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", desc["port"].as_u64().unwrap() as u16)).await.is_ok(), "the Runner listens");
    // Killing xcodebuild ends the XCTest session: the Runner stops.
    child.kill().unwrap();
    child.wait().unwrap();
    until("the Runner stops", || async { sim.control(json!({ "op": "state" })).await["runner"].is_null().then_some(()) }).await;
    assert!(truth(&sim, "runner-stop").await.iter().any(|t| t["why"] == "xcodebuild-exited"));
    // The fast path for tests.
    let r = sim.control(json!({ "op": "start-runner" })).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_ne!(r["runtimeEpoch"], desc["runtimeEpoch"]);
    assert_eq!(sim.control(json!({ "op": "stop-runner" })).await["stopped"], true);
}
