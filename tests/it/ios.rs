//! The iOS app SDK provider (`plugins/ios`) end to end through the CLI and MCP
//! against the simulated iPhone (`sim/ios`): the devicectl double (real argument
//! shapes, `--json-output` documents), the container descriptor, identity headers
//! and `runtimeBinding`, H5 pages in headless Chromium, the Flutter engine, the
//! shared managed-execution slot and the durable `aab.ios-completion/v1` store.
//! Effects are checked against the simulator's ground truth (`truth`, `state`,
//! `h5`, `flutter`), never against the provider's reply alone.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use aab_e2e::{error_facts, flags};
use serde_json::{Value, json};

use crate::ios_world::{APP, OTHER, World, with};

/// The SDK plugin alone (the ownership test adds `wda`).
fn ios_world() -> World {
    World::new(&[("aab_plugin_ios", "ios")])
}

/// What only the SDK tests ask of the simulator.
impl World {
    fn faults(&self, set: Value) {
        self.control(json!({"op": "faults", "clear": true, "set": set}));
    }

    /// The simulator's own record of an app (pid, runtimeEpoch, port, screen, engine).
    fn app(&self, bundle: &str) -> Value {
        let state = self.state();
        state["apps"].as_array().unwrap().iter().find(|a| a["bundleId"] == json!(bundle)).cloned().unwrap_or_else(|| panic!("no app {bundle} in {state}"))
    }

    /// Ground truth: the effects of `kind` (h5, flutter) caused by `action_id`.
    fn effects(&self, kind: &str, action_id: &str) -> Vec<Value> {
        self.truth(kind).into_iter().filter(|e| e["actionId"] == json!(action_id)).collect()
    }

    /// The real page of the app's WebView: an expression evaluated over CDP.
    fn page(&self, expression: &str) -> Value {
        self.control(json!({"op": "h5", "bundleId": APP, "expression": expression}))["value"].clone()
    }

    fn engine(&self) -> Value {
        self.control(json!({"op": "flutter", "bundleId": APP}))["engine"].clone()
    }

    fn app_args(&self) -> Value {
        json!({"deviceId": self.udid, "bundleId": APP})
    }

    /// Poll the truth log until `pred` holds (bounded; the simulator is asynchronous).
    fn wait_truth(&self, kind: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(v) = self.truth(kind).into_iter().find(|v| pred(v)) {
                return v;
            }
            assert!(Instant::now() < until, "never saw {what} in truth {kind}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One raw HTTP/1.1 exchange (capture POSTs need no identity headers).
fn http_post(port: u64, path: &str, body: &Value) -> Value {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let b = body.to_string();
    write!(s, "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}", b.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or("null")).unwrap()
}

/// A listener that answers every request with `body` (a peer that is not the SDK).
fn impostor(body: &'static str) -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    (port, t)
}

#[test]
fn ios_sdk_reads_devicectl_and_every_connection_error() {
    let w = ios_world();
    let base = w.app_args();
    let truth = w.app(APP);

    // ios-devices / ios-doctor through the xcrun wrapper (devicectl prefixed).
    let devices = w.ok("ios-devices", json!({}));
    assert_eq!((devices["count"].clone(), devices["devices"][0]["udid"].clone(), devices["devices"][0]["ready"].clone(), devices["devicectl"]["prefixed"].clone()), (json!(1), json!(w.udid), json!(true), json!(true)), "{devices}");
    let identifier = devices["devices"][0]["identifier"].as_str().unwrap().to_string();
    let doctor = w.ok("ios-doctor", with(&base, json!({})));
    let names: Vec<&str> = doctor["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!((doctor["healthy"].clone(), names), (json!(true), vec!["devicectl", "device", "tunnel", "sdkDescriptor", "sdkStatus"]), "{doctor}");

    // ios-status: the runtime the device runs, by identifier or UDID alike.
    for id in [w.udid.as_str(), identifier.as_str()] {
        let status = w.ok("ios-status", json!({"deviceId": id, "bundleId": APP}));
        assert_eq!(
            (status["runtimeEpoch"].clone(), status["processId"].clone(), status["runtimeBinding"]["port"].clone(), status["app"]["bundleId"].clone(), status["udid"].clone()),
            (truth["runtimeEpoch"].clone(), truth["pid"].clone(), truth["port"].clone(), json!(APP), json!(w.udid)),
            "{status}"
        );
    }
    let tree = w.ok("ios-tree", base.clone());
    assert!(tree["nodeCount"].as_u64().unwrap() > 3 && tree["windowCount"] == json!(1), "{tree}");
    assert_eq!(tree["activity"], json!("LoginViewController"));

    // ios-screenshot: a real PNG written where asked, its sha256 the file's.
    let out = w.env.work.join("shot.png");
    let shot = w.ok("ios-screenshot", json!({"outFile": out.display().to_string()}));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!((shot["sha256"].clone(), shot["bytes"].clone()), (json!(aab_e2e::sha256_hex(&bytes)), json!(bytes.len())), "{shot}");
    assert!(bytes.starts_with(b"\x89PNG") && shot["width"].as_u64().unwrap() > 0);

    // Capture: a record appended on the device is read back with its id and coverage.
    let port = truth["port"].as_u64().unwrap();
    let receipt = http_post(port, "/v1/logs", &json!({"level": "info", "tag": "e2e", "message": "hello from the test"}));
    assert_eq!(receipt["accepted"], json!(true), "{receipt}");
    let logs = w.ok("ios-logs", with(&base, json!({"limit": 5})));
    let item = logs["items"].as_array().unwrap().iter().find(|i| i["message"] == json!("hello from the test")).cloned().unwrap_or_else(|| panic!("{logs}"));
    assert_eq!((item["mobileFactId"].clone(), logs["coverage"]["status"].clone()), (receipt["mobileFactId"].clone(), json!("complete")));
    let exact = w.ok("ios-logs", with(&base, json!({"history": true, "runtimeEpoch": truth["runtimeEpoch"], "mobileFactId": receipt["mobileFactId"]})));
    assert_eq!((exact["view"].clone(), exact["count"].clone()), (json!("connected-history"), json!(1)), "{exact}");
    let bad = w.refused("ios-logs", with(&base, json!({"view": "decision-window", "afterActionId": "a"})), "invalid_argument");
    assert!(bad["message"].as_str().unwrap_or_default().contains("action_filter_requires_bound") || bad.to_string().contains("action_filter_requires_bound"), "{bad}");
    for stream in ["ios-network", "ios-state", "ios-events"] {
        assert!(w.ok(stream, base.clone())["items"].is_array());
    }

    // ios-ui-observation: a lease on the SDK's observer.
    let lease = w.ok("ios-ui-observation", with(&base, json!({"operation": "start", "durationMs": 5000})));
    let lease_id = lease["leaseId"].as_str().unwrap().to_string();
    w.refused("ios-ui-observation", with(&base, json!({"operation": "stop", "leaseId": "not-the-lease"})), "ui_observation_lease_mismatch");
    assert_eq!(w.ok("ios-ui-observation", with(&base, json!({"operation": "status"})))["active"], json!(true));
    assert_eq!(w.ok("ios-ui-observation", with(&base, json!({"operation": "stop", "leaseId": lease_id})))["ok"], json!(true));

    // Transport overrides move the connection, never the identity.
    let direct = w.ok("ios-status", with(&base, json!({"runtimeUrl": format!("http://127.0.0.1:{port}/")})));
    assert_eq!((direct["endpoint"]["transport"].clone(), direct["runtimeEpoch"].clone()), (json!("runtimeUrl"), truth["runtimeEpoch"].clone()));
    assert_eq!(w.ok("ios-status", with(&base, json!({"iosHost": "127.0.0.1", "iosPort": port})))["endpoint"]["transport"], json!("iosHost/iosPort"));
    w.control(json!({"op": "launch", "bundleId": OTHER}));
    let other_port = w.app(OTHER)["port"].clone();
    let facts = w.refused("ios-status", with(&base, json!({"iosPort": other_port})), "ios_runtime_binding_mismatch");
    assert!(facts["details"]["changed"].as_array().is_some_and(|c| c.contains(&json!("bundleId"))), "another app's listener: {facts}");
    let (imp, t) = impostor(r#"{"ok":true,"debugBridge":{}}"#);
    w.refused("ios-status", with(&base, json!({"iosPort": imp})), "invalid_ios_runtime_binding");
    t.join().unwrap();
    let before = w.truth("devicectl").len();
    w.refused("ios-status", with(&base, json!({"runtimeUrl": "https://127.0.0.1:1"})), "invalid_argument"); // https: refused by the schema (no TLS stack is built)
    w.refused("ios-status", with(&base, json!({"runtimeUrl": "http://127.0.0.1:1/v1/status"})), "invalid_ios_runtime_url");
    w.refused("ios-status", json!({"deviceId": w.udid}), "missing_argument");
    assert_eq!(w.truth("devicectl").len(), before, "bad input never reaches devicectl");
    w.control(json!({"op": "launch", "bundleId": APP}));

    // Each descriptor / binding / device error with its code, before HTTP.
    for (fault, code) in [
        (json!({"descriptorAbsent": true}), "ios_runtime_descriptor_absent"),
        (json!({"descriptorNotReady": true}), "ios_runtime_not_ready"),
        (json!({"descriptorInvalid": true}), "invalid_ios_runtime_descriptor"),
        // The previous process's descriptor: its port is closed now.
        (json!({"descriptorStale": true}), "ios_runtime_unreachable"),
        (json!({"responseBindingMismatch": true}), "ios_runtime_binding_mismatch"),
        (json!({"responseOkMissing": true}), "invalid_ios_runtime_response"),
        (json!({"developerModeDisabled": true}), "ios_developer_mode_disabled"),
        (json!({"ddiUnavailable": true}), "ios_ddi_unavailable"),
        (json!({"devicectlFail": {"command": "copy", "code": 1000}}), "ios_devicectl_failed"),
    ] {
        w.faults(fault.clone());
        let requests = w.truth("sdk-request").len();
        let facts = w.refused("ios-status", base.clone(), code);
        if !["ios_runtime_binding_mismatch", "invalid_ios_runtime_response", "ios_runtime_unreachable"].contains(&code) {
            assert_eq!(w.truth("sdk-request").len(), requests, "{fault}: no SDK request before the descriptor is valid");
        }
        if fault.get("responseBindingMismatch").is_some() {
            assert_eq!(facts["details"]["changed"], json!(["runtimeEpoch"]), "the host rejected the SDK's own answer: {facts}");
        }
    }
    // The stale identity sent to the live listener (a forward): the SDK refuses it.
    w.faults(json!({"descriptorStale": true}));
    let port = w.app(APP)["port"].clone();
    w.refused("ios-status", with(&base, json!({"iosPort": port})), "ios_runtime_binding_mismatch");
    w.faults(json!({}));
    w.control(json!({"op": "tunnel", "connected": false}));
    w.refused("ios-status", base.clone(), "ios_tunnel_unavailable");
    w.control(json!({"op": "tunnel", "connected": true}));
    w.refused("ios-status", json!({"deviceId": "00000000-0000000000000000", "bundleId": APP}), "ios_device_not_found");
    w.refused("ios-status", with(&base, json!({"devicectl": "/nonexistent/xcrun"})), "ios_devicectl_unavailable");

    // Install and launch through devicectl: the device's own record changes.
    let app_dir = w.env.work.join("Other.app");
    std::fs::create_dir_all(&app_dir).unwrap();
    std::fs::write(app_dir.join("Info.plist"), json!({"CFBundleIdentifier": OTHER, "CFBundleShortVersionString": "2.1.0", "CFBundleVersion": "210"}).to_string()).unwrap();
    w.refused("ios-install-app", json!({"deviceId": w.udid, "appPath": "Missing.app"}), "invalid_argument");
    let installed = w.ok("ios-install-app", json!({"deviceId": w.udid, "appPath": "Other.app"}));
    assert_eq!((installed["installed"]["bundleID"].clone(), w.app(OTHER)["versionName"].clone()), (json!(OTHER), json!("2.1.0")), "{installed}");
    let launched = w.ok("ios-launch-app", json!({"deviceId": identifier, "bundleId": OTHER, "terminateExisting": true}));
    let other = w.app(OTHER);
    assert_eq!((launched["processId"].clone(), other["running"].clone(), other["foreground"].clone()), (other["pid"].clone(), json!(true), json!(true)), "{launched}");
    assert_eq!(w.phase(), json!("idle"), "devicectl answered both: settled");

    // MCP: the same command through the run tool.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "ios-status", "arguments": {"deviceId": w.udid, "bundleId": OTHER}, "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(body["value"]["runtimeEpoch"], other["runtimeEpoch"]);
}

#[test]
fn ios_h5_actions_land_in_the_real_page_once_and_stale_runtimes_are_refused() {
    let w = ios_world();
    let base = w.app_args();
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "web"}));
    let dom = w.ok("ios-h5-dom", base.clone());
    let page = dom["pageRef"].clone();
    let first_epoch = w.app(APP)["runtimeEpoch"].clone();
    assert_eq!((page["schemaVersion"].clone(), page["runtimeEpoch"].clone(), page["bundleId"].clone(), page["webViewId"].clone()), (json!("aab.ios-h5-target/v1"), first_epoch.clone(), json!(APP), json!("checkout")), "{dom}");
    let control = |text: &str| dom["dom"]["controls"].as_array().unwrap().iter().find(|c| c["text"] == json!(text) || c["ariaLabel"] == json!(text)).cloned().unwrap_or_else(|| panic!("no {text} in {dom}"));
    let element = |c: &Value| json!({"elementId": c["elementId"], "tag": c["tag"], "id": c["id"], "name": c["name"], "type": c["type"], "text": c["text"], "ariaLabel": c["ariaLabel"], "href": c["href"]});
    let (name, pay) = (control("Full name"), control("Pay now"));

    // Input, then click, each bound to the observed page and element.
    let input = w.ok("ios-h5-input", with(&base, json!({"selector": {"ariaLabel": "Full name"}, "text": "Ada", "expectedTarget": {"pageRef": page, "element": element(&name)}})));
    assert_eq!(w.page("document.getElementById('name').value"), json!("Ada"));
    assert_eq!(w.effects("h5", input["actionId"].as_str().unwrap()).len(), 1);
    let click = w.ok("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}, "expectedTarget": {"pageRef": page, "element": element(&pay)}, "requestId": "script-step-7"})));
    assert_eq!((click["actionId"].clone(), click["proof"]["kind"].clone(), click["device"]["execution"]["schemaVersion"].clone()), (json!("script-step-7"), json!("h5"), json!("aab.h5-execution/v1")), "a Script's requestId is the SDK action id: {click}");
    assert_eq!((w.page("document.getElementById('result').textContent"), w.page("window.aabClicks")), (json!("Paid by Ada"), json!(["pay"])));
    assert_eq!(w.effects("h5", "script-step-7").len(), 1, "one click, by this action");
    let scrolled = w.ok("ios-h5-scroll", with(&base, json!({"selector": {"text": "Last item"}})));
    assert!(w.page("window.scrollY").as_f64().unwrap() > 0.0, "{scrolled}");
    w.refused("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}})), "ios_h5_target_outside_viewport");
    w.ok("ios-h5-scroll", with(&base, json!({"selector": {"text": "Pay now"}})));
    let eval = w.ok("ios-h5-eval", with(&base, json!({"script": "document.title", "expectedPage": page})));
    assert_eq!(eval["value"], json!("Checkout"), "{eval}");
    w.refused("ios-h5-click", with(&base, json!({"selector": {"text": "Nowhere"}})), "ios_h5_selector_not_found");
    assert_eq!(w.page("window.aabClicks"), json!(["pay"]));

    // The durable completion of the click is found by its original identity.
    let found = w.ok("ios-execution", with(&base, json!({"operation": "result", "kind": "h5", "actionId": "script-step-7", "runtimeEpoch": first_epoch})));
    assert_eq!((found["found"].clone(), found["executionResult"]["ok"].clone(), found["completionReceipt"]["committed"].clone()), (json!(true), json!(true), json!(true)), "{found}");
    let missing = w.ok("ios-execution", with(&base, json!({"operation": "result", "kind": "h5", "actionId": "never-sent", "runtimeEpoch": first_epoch})));
    assert_eq!((missing["found"].clone(), missing["settled"].clone()), (json!(false), json!(false)));
    let events = w.ok("ios-events", with(&base, json!({"includeActions": true})));
    assert!(events["items"].as_array().unwrap().iter().any(|e| e["name"] == json!("h5.action.settled") && e["actionId"] == json!("script-step-7")), "{events}");
    assert!(w.ok("ios-events", base.clone())["items"].as_array().unwrap().iter().all(|e| e["name"] != json!("h5.action.settled")));

    // A reply lost after the action ran: recovered from the SDK, never resent.
    w.faults(json!({"dropNextActionReply": true}));
    let recovered = w.ok("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}})));
    assert!(recovered["recoveredBy"].is_object(), "{recovered}");
    assert_eq!((w.effects("h5", recovered["actionId"].as_str().unwrap()).len(), w.page("window.aabClicks")), (1, json!(["pay", "pay"])));

    // The app relaunched: a new process and SDK epoch; the old observation is refused.
    let relaunch = w.ok("ios-launch-app", with(&base, json!({"terminateExisting": true})));
    let second = w.app(APP);
    assert_ne!(second["runtimeEpoch"], first_epoch);
    assert_eq!(relaunch["processId"], second["pid"]);
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "web"}));
    let clicks = w.truth("h5").len();
    let stale = w.refused("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}, "expectedTarget": {"pageRef": page, "element": element(&pay)}})), "reobserve_required");
    assert!(stale["details"]["changed"].as_array().unwrap().contains(&json!("runtimeEpoch")), "{stale}");
    w.refused("ios-h5-eval", with(&base, json!({"script": "1", "expectedPage": page})), "reobserve_required");
    assert_eq!(w.truth("h5").len(), clicks, "nothing ran in the new page");
    // The old runtime's completion is still in the durable store after the relaunch.
    assert_eq!(w.ok("ios-execution", with(&base, json!({"operation": "result", "kind": "h5", "actionId": "script-step-7", "runtimeEpoch": first_epoch})))["found"], json!(true));

    // A reply that never comes within the deadline: unresolved until reconcile.
    w.faults(json!({"actionDelayMs": 6000}));
    let (body, run) = w.run("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}, "timeoutMs": 4000})));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true), &run, "a lost reply is ambiguous");
    assert_eq!(w.phase(), json!("unresolved"));
    w.refused("ios-h5-click", with(&base, json!({"selector": {"text": "Pay now"}})), "device_ownership_unresolved");
    let active = w.ok("ios-execution", with(&base, json!({"operation": "status"})));
    assert_eq!(active["active"]["kind"], json!("h5"), "the SDK still runs it: {active}");
    // Status reports the host's side too: the journal of the phone, unresolved.
    assert_eq!(active["hostOwnership"]["phase"], json!("unresolved"), "{active}");
    assert_eq!(active["hostOwnership"]["serial"], json!(w.device_key()), "{active}");
    w.wait_truth("completion", "the delayed click's completion", |c| c["persisted"] == json!(true) && c["actionId"] == active["active"]["actionId"]);
    w.faults(json!({}));
    let reconciled = w.ok("ios-execution", with(&base, json!({"operation": "reconcile"})));
    assert_eq!((reconciled["recovered"].clone(), reconciled["executionReceipt"]["kind"].clone(), reconciled["executionReceipt"]["sdkActionId"].clone()), (json!(true), json!("h5"), active["active"]["actionId"].clone()), "{reconciled}");
    assert_eq!(w.phase(), json!("idle"));
    assert_eq!(w.effects("h5", active["active"]["actionId"].as_str().unwrap()).len(), 1, "reconcile never resent it");
}

#[test]
fn ios_flutter_actions_bind_fresh_targets_of_the_dart_runtime() {
    let w = ios_world();
    let base = w.app_args();
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "flutter"}));
    let dart = w.engine()["runtimeEpoch"].clone();
    let nodes = w.ok("ios-flutter-nodes", base.clone());
    assert_eq!((nodes["runtimeEpoch"].clone(), nodes["truncated"].clone(), nodes["executionSchema"].clone()), (dart.clone(), json!(false), json!("aab.flutter-execution/v1")), "{nodes}");
    let increment = nodes["nodes"].as_array().unwrap().iter().find(|n| n["text"] == json!("Increment")).cloned().unwrap();

    let tap = w.ok("ios-tap-flutter", with(&base, json!({"selector": {"text": "Increment"}})));
    assert_eq!((tap["bound"]["id"].clone(), tap["executionRuntimeEpoch"].clone(), w.engine()["counters"]["counter"].clone()), (increment["id"].clone(), dart.clone(), json!(1)), "{tap}");
    assert_eq!(w.effects("flutter", tap["actionId"].as_str().unwrap()).len(), 1);
    w.ok("ios-input-flutter-text", with(&base, json!({"selector": {"text": "Note"}, "text": "hello"})));
    assert_eq!(w.engine()["values"]["note"], json!("hello"), "{}", w.engine());
    let list = nodes["nodes"].as_array().unwrap().iter().find(|n| n["actions"].as_array().is_some_and(|a| a.contains(&json!("scroll")))).cloned().unwrap();
    w.ok("ios-scroll-flutter", with(&base, json!({"selector": {"nodeId": list["id"]}, "delta": 120})));
    assert_eq!(w.engine()["scroll"]["list"], json!(120.0), "{}", w.engine());
    w.ok("ios-flutter-hide-keyboard", base.clone());
    assert_eq!(w.engine()["keyboard"], json!(false));
    w.ok("ios-tap-flutter", with(&base, json!({"selector": {"text": "Details"}})));
    assert_eq!(w.engine()["route"], json!("details"));
    w.ok("ios-flutter-back", base.clone());
    assert_eq!(w.engine()["route"], json!("home"));
    w.refused("ios-tap-flutter", with(&base, json!({"selector": {"text": "Count: 1"}})), "flutter_selector_not_found");
    let action = w.ok("ios-flutter-action", with(&base, json!({"payload": {"action": "tapText", "text": "Increment"}})));
    assert_eq!((action["provider"].clone(), w.engine()["counters"]["counter"].clone()), (json!("flutter"), json!(2)));

    // A restarted Dart engine: the old targetRef is refused before admission.
    w.control(json!({"op": "flutter-restart", "bundleId": APP}));
    let flutter_effects = w.truth("flutter").len();
    w.refused("ios-flutter-action", with(&base, json!({"payload": {"action": "tapTarget", "selector": {"text": "Increment"}, "targetRef": increment["targetRef"]}})), "flutter_runtime_changed");
    assert_eq!(w.truth("flutter").len(), flutter_effects);

    // MCP: the tree and the idle slot.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "ios-flutter-tree", "arguments": base.clone(), "extract": null}));
    assert!(!is_error, "{body}");
    assert_ne!(body["value"]["flutterRuntimeEpoch"], dart, "the new engine");
    let (status, is_error) = mcp.call_tool("run", json!({"command": "ios-execution", "arguments": with(&base, json!({"operation": "status"})), "extract": null}));
    assert!(!is_error && status["value"]["idle"] == json!(true), "{status}");
    assert_eq!(w.phase(), json!("idle"), "every action settled from its receipt");
}

fn intent_ok(w: &World, op: &str, args: Value) -> Value {
    let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
    argv.extend(flags(&args));
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = w.env.aab(&refs);
    let body = w.env.json_of(&run);
    w.env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("intent {op} should succeed"));
    body["value"].clone()
}

#[test]
fn ios_h5_intent_checks_out_with_a_verifiable_archive() {
    let w = ios_world();
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "web"}));
    let op = "ios-checkout";
    let target = json!({"platform": "ios", "deviceId": w.udid, "bundleId": APP});
    let started = intent_ok(&w, "start", json!({"goal": "Pay for the order as Ada", "target": target, "provider": "h5", "operationId": op, "require": {"streams": ["events"]}}));
    assert_eq!((started["status"].clone(), started["provider"].clone(), started["summary"]["page"]["pageRef"]["schemaVersion"].clone()), (json!("waiting_for_decision"), json!("h5"), json!("aab.ios-h5-target/v1")), "{started}");
    let decide = |id: &str, revision: &Value, action: Value| {
        let snap = intent_ok(&w, "decide", json!({"operationId": op, "decision": {"decisionId": id, "basedOnRevision": revision, "agentDecision": "act", "action": action}}));
        assert_eq!((snap["status"].clone(), snap["lastAction"]["dispatched"].clone()), (json!("waiting_for_decision"), json!(true)), "{snap}");
        snap
    };
    let s = decide("name", &started["revision"], json!({"action": "inputText", "selector": {"ariaLabel": "Full name"}, "value": "Ada"}));
    let s = decide("pay", &s["revision"], json!({"action": "tap", "selector": {"text": "Pay now"}}));
    assert!(s["summary"]["page"]["bodyText"].as_str().unwrap().contains("Paid by Ada"), "{}", s["summary"]);
    assert!(s["summary"]["nodes"].as_array().unwrap().iter().any(|n| n["ariaLabel"] == json!("Full name") && n["value"] == json!("Ada")));
    // Ground truth: the real page, and one page effect per decision.
    assert_eq!(w.page("document.getElementById('result').textContent"), json!("Paid by Ada"));
    let effects: Vec<String> = w.truth("h5").iter().map(|e| e["action"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(effects, ["input", "click"]);
    let done = intent_ok(&w, "decide", json!({"operationId": op, "decision": {"decisionId": "done", "basedOnRevision": s["revision"], "agentDecision": "complete"}}));
    assert_eq!(done["status"], json!("completed"), "{done}");
    let out = w.env.work.join("archive");
    let exported = w.env.aab_ok(&["evidence", "--operation", "export", "--namespace", "intent", "--operation-id", op, "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().unwrap().to_string();
    let verified = w.env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
    assert_eq!(w.phase(), json!("idle"));
}

#[test]
fn ios_h5_and_wda_mutations_share_one_ownership_journal_across_device_aliases() {
    // Both iOS plugins: the host maps each command's deviceId through its plugin's
    // `device-key` hook, so the CoreDevice identifier and the UDID are one phone.
    let w = World::new(&[("aab_plugin_ios", "ios"), ("aab_plugin_wda", "wda")]);
    let identifier = w.sim.devices[0].identifier.clone();
    assert_ne!(identifier, w.udid, "two different aliases of one phone");
    w.control(json!({"op": "goto", "bundleId": APP, "screen": "web"}));

    // An H5 click named by the CoreDevice identifier whose reply never comes in time.
    w.faults(json!({"actionDelayMs": 6000}));
    let by_identifier = json!({"deviceId": identifier, "bundleId": APP, "selector": {"text": "Pay now"}, "timeoutMs": 4000});
    let (body, run) = w.run("ios-h5-click", by_identifier.clone());
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true), &run, "a lost reply is ambiguous");

    // The journal keyed by the UDID holds it.
    let status = w.ownership();
    assert_eq!(status["phase"], json!("unresolved"), "{status}");
    let pending = status.pointer("/ownership/pending/actionId").cloned().unwrap_or_else(|| panic!("the pending click under {}: {status}", w.device_key()));
    let active = w.ok("ios-execution", with(&w.app_args(), json!({"operation": "status"})));
    assert_eq!((active["active"]["kind"].clone(), active["active"]["actionId"].clone()), (json!("h5"), pending.clone()), "the SDK runs the journal's action: {active}");

    // A WDA mutation named by the UDID is refused by the same journal, before it reaches the Runner.
    let wda_events = w.truth("wda").len();
    let tap = json!({"deviceId": w.udid, "bundleId": APP, "wdaRunnerBundleId": "io.github.mobileaidev.aiappbridge.wda.xctrunner", "wdaSessionId": "S1", "tapX": 195, "tapY": 120});
    w.refused("ios-tap", tap.clone(), "device_ownership_unresolved");
    // And an SDK mutation by the other alias too.
    w.refused("ios-h5-click", with(&by_identifier, json!({"deviceId": w.udid})), "device_ownership_unresolved");
    assert_eq!(w.truth("wda").len(), wda_events, "nothing reached the Runner");

    // Settled from the SDK's durable completion; the phone is free for either plugin.
    w.wait_truth("completion", "the delayed click's completion", |c| c["persisted"] == json!(true) && c["actionId"] == pending);
    w.faults(json!({}));
    let settled = w.ok("device-ownership", json!({"operation": "reconcile", "serial": w.device_key()}));
    assert_eq!((settled["recovered"].clone(), settled["phase"].clone()), (json!(true), json!("idle")), "{settled}");
    assert_eq!(w.effects("h5", pending.as_str().unwrap()).len(), 1, "the click ran once, never resent");
    assert_eq!(w.phase(), json!("idle"));
}
