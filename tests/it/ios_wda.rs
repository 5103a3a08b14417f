//! The prepared-WebDriverAgent provider (`plugins/wda`) end to end through the CLI
//! and MCP against the simulated iPhone (`sim/ios`): the real devicectl argument
//! shapes through the double, the Runner's descriptor, identity headers and
//! `wdaBinding`, sessions, the JSON source, managed actions and the durable
//! completion store. Outcomes are checked against the simulator's ground truth
//! (`truth`, `state`, `native`), never against the provider's reply alone.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::ios_world::{APP, OTHER, World, with};

const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";

/// The WDA plugin alone.
fn wda_world() -> World {
    World::new(&[("aab_plugin_wda", "wda")])
}

/// What only the WDA tests ask of the simulator.
impl World {
    /// Ground truth: the Runner's events (`kind:"wda"`) of one action.
    fn wda_events(&self, action_id: &Value) -> Vec<Value> {
        self.truth("wda").into_iter().filter(|i| &i["actionId"] == action_id && i["event"] != "reply-dropped").collect()
    }

    fn wda_event_count(&self) -> usize {
        self.truth("wda").iter().filter(|i| i["event"] != "reply-dropped" && i["event"] != "completion-lost").count()
    }

    /// The App's native screen (field values, focus, last tap).
    fn native(&self, bundle: &str) -> Value {
        self.control(json!({"op": "native", "bundleId": bundle}))
    }

    /// The raw value of a native field (the App's model, not its rendering).
    fn field(&self, bundle: &str, id: &str) -> Value {
        self.native(bundle)["ui"]["values"][id].clone()
    }

    /// A running Runner and the App in the foreground (the Runner takes it when it starts).
    fn runner_with_app(&self) {
        self.control(json!({"op": "start-runner"}));
        self.control(json!({"op": "launch", "bundleId": APP}));
    }

    fn runner(&self) -> Value {
        json!({"deviceId": self.udid, "wdaRunnerBundleId": RUNNER})
    }
}

fn node<'a>(tree: &'a Value, raw_identifier: &str) -> &'a Value {
    tree["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["rawIdentifier"] == raw_identifier)).unwrap_or_else(|| panic!("no node {raw_identifier} in {tree}"))
}

fn centre(n: &Value) -> (f64, f64) {
    let r = &n["rect"];
    (r["x"].as_f64().unwrap() + r["width"].as_f64().unwrap() / 2.0, r["y"].as_f64().unwrap() + r["height"].as_f64().unwrap() / 2.0)
}

#[test]
fn ios_wda_sessions_tree_and_actions_reach_the_device_once_each_and_refusals_reach_nothing() {
    let w = wda_world();
    w.runner_with_app();
    let runner_epoch = w.state()["runner"]["runtimeEpoch"].clone();

    // Status: the descriptor's identity, bound on every response.
    let status = w.ok("ios-wda-status", w.runner());
    assert_eq!((status["runnerEpoch"].clone(), status["ready"].clone(), status["foreground"]["bundleId"].clone()), (runner_epoch.clone(), json!(true), json!(APP)), "{status}");

    // An explicit forward (wdaUrl) still has to answer as the descriptor's Runner.
    let state = w.state();
    let url = format!("http://{}:{}", state["device"]["tunnelIPAddress"].as_str().unwrap(), state["runner"]["port"]);
    let forwarded = w.ok("ios-wda-status", with(&w.runner(), json!({"wdaUrl": url})));
    assert_eq!((forwarded["runnerEpoch"].clone(), forwarded["explicitWdaUrl"].clone()), (runner_epoch.clone(), json!(true)));

    // Without wdaUrl, the developer tunnel is the only way to the Runner.
    w.control(json!({"op": "tunnel", "connected": false}));
    w.refused("ios-wda-status", w.runner(), "ios_tunnel_unavailable");
    w.control(json!({"op": "tunnel", "connected": true}));

    // Sessions: only for the foreground App, never replaced.
    let session_op = |op: &str, extra: Value| with(&with(&w.runner(), json!({"operation": op})), extra);
    assert_eq!(w.ok("ios-wda-session", session_op("status", json!({})))["session"], Value::Null);
    w.refused("ios-wda-session", session_op("create", json!({"bundleId": OTHER})), "ios_wda_app_not_foreground");
    let created = w.ok("ios-wda-session", session_op("create", json!({"bundleId": APP})));
    let sid = created["wdaSessionId"].as_str().expect("a session id").to_string();
    assert_eq!(w.state()["runner"]["session"]["sessionId"], json!(sid), "ground truth: the Runner holds that session");
    assert_eq!(w.wda_events(&created["actionId"]).len(), 1, "one session-create on the device");
    assert_eq!(created["sessionRef"]["schemaVersion"], "aab.ios-native-session/v1");
    w.refused("ios-wda-session", session_op("create", json!({"bundleId": APP})), "ios_wda_session_exists");
    let app = with(&w.runner(), json!({"bundleId": APP, "wdaSessionId": sid}));

    // The tree through MCP: nodes with identity, the session ref of the read.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "ios-uia-tree", "arguments": app, "extract": null}));
    assert!(!is_error, "{body}");
    let tree = body["value"].clone();
    assert_eq!(tree["session"], json!({"schemaVersion": "aab.ios-native-session/v1", "runnerEpoch": runner_epoch, "bundleId": APP, "processId": w.native(APP)["pid"], "sessionId": sid}), "{tree}");
    let sign_in = node(&tree, "signIn").clone();
    assert_eq!((sign_in["label"].clone(), sign_in["type"].clone(), sign_in["visible"].clone()), (json!("Sign in"), json!("XCUIElementTypeButton"), json!(true)), "{sign_in}");
    assert_eq!(sign_in["expectedTarget"]["element"]["elementId"], sign_in["elementId"]);

    // ios-input by accessibility id, ios-input-native-text by selector: the device's fields hold the text.
    let typed = w.ok("ios-input", with(&app, json!({"accessibilityId": "username", "text": "alice", "clearFirst": true})));
    assert_eq!(w.field(APP, "username"), json!("alice"), "ground truth: the username field");
    assert!(!w.wda_events(&typed["actionId"]).is_empty());
    let replaced = w.ok("ios-input-native-text", with(&app, json!({"selector": {"accessibilityId": "password"}, "text": "s3cret"})));
    assert_eq!(replaced["bound"]["rawIdentifier"], "password");
    assert_eq!(w.field(APP, "password"), json!("s3cret"), "ground truth: the password field");

    // ios-tap-native through MCP, bound to the observed element: one event, the App signed in.
    let before = w.wda_event_count();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "ios-tap-native", "arguments": with(&app, json!({"selector": {"label": "Sign in", "type": "XCUIElementTypeButton"}, "expectedTarget": sign_in["expectedTarget"]})), "extract": null}));
    assert!(!is_error, "{body}");
    let tapped = body["value"].clone();
    let events = w.wda_events(&tapped["actionId"]);
    assert_eq!((events.len(), events[0]["event"].clone(), w.wda_event_count()), (1, json!("tap"), before + 1), "exactly one event: {events:?}");
    let signed_in = w.control(json!({"op": "truth", "kind": "sign-in"}))["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(signed_in.last().map(|s| s["user"].clone()), Some(json!("alice")), "{signed_in:?}");
    // An expectedTarget for an element that is not the selected one is refused before dispatch.
    let username = node(&tree, "username");
    w.refused("ios-tap-native", with(&app, json!({"selector": {"accessibilityId": "signIn"}, "expectedTarget": username["expectedTarget"]})), "ios_native_target_changed");
    w.refused("ios-tap-native", with(&app, json!({"selector": {"accessibilityId": "nope"}})), "ios_native_selector_not_found");

    // Coordinate tap and swipe: one event each, on the App's native screen.
    let (x, y) = centre(node(&tree, "title"));
    let tap = w.ok("ios-tap", with(&app, json!({"tapX": x, "tapY": y})));
    assert_eq!(w.wda_events(&tap["actionId"]).len(), 1);
    assert_eq!(tap["result"]["value"]["x"], json!(x), "{tap}");
    // A caller's requestId (a Script step's) is the id the Runner knows the action by.
    let swipe = w.ok("ios-swipe", with(&app, json!({"startX": 195, "startY": 600, "endX": 195, "endY": 300, "durationMs": 50, "requestId": "script-swipe-1"})));
    assert_eq!(swipe["actionId"], json!("script-swipe-1"), "{swipe}");
    assert_eq!(w.wda_events(&json!("script-swipe-1"))[0]["event"], "swipe");

    // Orientation: observed, bound to the observed session; a stale session and an
    // ignored rotation are refused / reported, the latter settled (device stays idle).
    let rotated = w.ok("ios-set-orientation", with(&app, json!({"orientation": "landscapeLeft", "expectedSession": tree["session"]})));
    assert_eq!((rotated["observedInterfaceOrientation"].clone(), w.state()["orientation"].clone()), (json!("landscapeLeft"), json!("landscapeLeft")), "{rotated}");
    let mut stale = tree["session"].clone();
    stale["runnerEpoch"] = json!("0F0F0F0F-0000-4000-8000-000000000000");
    w.refused("ios-set-orientation", with(&app, json!({"orientation": "portrait", "expectedSession": stale})), "reobserve_required");
    w.control(json!({"op": "faults", "set": {"wdaOrientationIgnored": true}}));
    let facts = w.fails_with("ios-set-orientation", with(&app, json!({"orientation": "portrait"})), "ios_wda_orientation_not_observed");
    assert_eq!((facts["dispatched"].clone(), facts["ambiguous"].clone()), (json!(true), json!(false)), "{facts}");
    assert_eq!(w.state()["orientation"], "landscapeLeft", "the App refused the rotation");
    assert_eq!(w.ownership()["phase"], "idle", "a settled failure leaves the device idle");
    w.control(json!({"op": "faults", "clear": true}));

    // A response bound to another Runner process is never believed; nothing reaches the device.
    let before = w.wda_event_count();
    w.control(json!({"op": "faults", "set": {"wdaBindingMismatch": true}}));
    w.refused("ios-uia-tree", app.clone(), "ios_wda_binding_mismatch");
    w.refused("ios-tap", with(&app, json!({"tapX": x, "tapY": y})), "ios_wda_binding_mismatch");
    w.control(json!({"op": "faults", "clear": true}));

    // Another App in front: the session's App is gone, so reads and actions are refused.
    w.control(json!({"op": "launch", "bundleId": OTHER}));
    w.refused("ios-tap", with(&app, json!({"tapX": x, "tapY": y})), "ios_wda_target_changed");
    w.refused("ios-uia-tree", app.clone(), "ios_wda_target_changed");
    assert_eq!(w.wda_event_count(), before, "ground truth: no event reached the device");
    assert_eq!(w.ownership()["phase"], "idle");

    // Close exactly that session (after the foreground changed); reads then need a session.
    let closed = w.ok("ios-wda-session", session_op("close", json!({"bundleId": APP, "wdaSessionId": sid})));
    assert_eq!((closed["closed"].clone(), w.state()["runner"]["session"].clone()), (json!(true), Value::Null));
    w.control(json!({"op": "launch", "bundleId": APP, "terminateExisting": false}));
    w.refused("ios-uia-tree", app, "ios_wda_session_required");
    drop(mcp);
}

#[test]
fn ios_wda_lost_reply_stays_unresolved_until_reconcile_settles_it_from_the_original_epoch() {
    // With the ios plugin too: `ios-execution --operation reconcile` is how an operator
    // settles a WDA action (the host routes it to the journal's owning plugin, wda).
    let w = World::new(&[("aab_plugin_wda", "wda"), ("aab_plugin_ios", "ios")]);
    w.runner_with_app();
    let first_epoch = w.state()["runner"]["runtimeEpoch"].clone();
    let created = w.ok("ios-wda-session", with(&w.runner(), json!({"operation": "create", "bundleId": APP})));
    let app = with(&w.runner(), json!({"bundleId": APP, "wdaSessionId": created["wdaSessionId"]}));
    let tap = with(&app, json!({"tapX": 195, "tapY": 120}));

    // The tap runs and completes on the device; its reply is lost.
    w.control(json!({"op": "faults", "set": {"wdaDropNextActionReply": true}}));
    let facts = w.fails_with("ios-tap", tap.clone(), "ios_wda_action_unresolved");
    assert_eq!((facts["dispatched"].clone(), facts["ambiguous"].clone()), (json!(true), json!(true)), "{facts}");
    let status = w.ownership();
    assert_eq!(status["phase"], "unresolved", "{status}");
    let pending = status.pointer("/ownership/pending/actionId").cloned().expect("the pending tap");
    assert_eq!(w.wda_events(&pending).len(), 1, "ground truth: the tap happened once");

    // Every later mutation on the device is refused, also when it names the phone by
    // its CoreDevice identifier (one journal per physical device); nothing is replayed.
    w.fails_with("ios-tap", tap.clone(), "device_ownership_unresolved");
    let by_identifier = with(&tap, json!({"deviceId": w.sim.devices[0].identifier}));
    w.fails_with("ios-tap", by_identifier, "device_ownership_unresolved");
    assert_eq!(w.wda_events(&pending).len(), 1);

    // A restarted Runner (new epoch) still answers for the original epoch's completion.
    w.control(json!({"op": "stop-runner"}));
    w.control(json!({"op": "start-runner"}));
    let second_epoch = w.state()["runner"]["runtimeEpoch"].clone();
    assert_ne!(first_epoch, second_epoch);
    let settled = w.ok("ios-execution", json!({"operation": "reconcile", "deviceId": w.sim.devices[0].identifier, "bundleId": APP}));
    assert_eq!(settled["deviceKey"], json!(w.device_key()), "reconcile by the CoreDevice identifier settles the UDID's journal: {settled}");
    assert_eq!((settled["recovered"].clone(), settled["phase"].clone()), (json!(true), json!("idle")), "{settled}");
    let receipt = &settled["executionReceipt"];
    assert_eq!((receipt["actionId"].clone(), receipt["runnerEpoch"].clone(), receipt["servingRunnerEpoch"].clone()), (pending.clone(), first_epoch, second_epoch), "{settled}");
    assert_eq!(receipt["executionResult"]["settled"], json!(true));
    assert_eq!(w.wda_events(&pending).len(), 1, "reconcile never repeats the tap");

    // A lost reply whose completion was never stored stays unresolved.
    w.control(json!({"op": "launch", "bundleId": APP}));
    let created = w.ok("ios-wda-session", with(&w.runner(), json!({"operation": "create", "bundleId": APP})));
    let tap = with(&w.runner(), json!({"bundleId": APP, "wdaSessionId": created["wdaSessionId"], "tapX": 195, "tapY": 120}));
    w.control(json!({"op": "faults", "set": {"wdaDropNextActionReply": true, "wdaLoseCompletion": true}}));
    w.fails_with("ios-tap", tap, "ios_wda_action_unresolved");
    let facts = w.fails_with("device-ownership", json!({"operation": "reconcile", "serial": w.device_key()}), "device_ownership_unresolved");
    assert_eq!(w.ownership()["phase"], "unresolved", "no completion, no settlement: {facts}");
}

#[test]
fn ios_setup_builds_the_prepared_copy_and_starts_the_runner_leaving_no_process_behind() {
    let w = wda_world();
    let xcodebuild = w.sim.xcodebuild().display().to_string();
    let setup = json!({"deviceId": w.udid, "teamId": "ABCDE12345", "xcodebuild": xcodebuild});

    // No Runner was ever installed here.
    w.refused("ios-wda-status", w.runner(), "ios_wda_runner_not_installed");
    // No team: a clear error before anything runs. A compile failure: not dispatched.
    w.refused("ios-setup", json!({"deviceId": w.udid, "xcodebuild": xcodebuild}), "ios_wda_team_required");
    let failing = w.env.root.join("failing-xcodebuild");
    std::fs::write(&failing, "#!/bin/sh\necho 'FBWebServer.m:1:1: error: expected expression' >&2\nexit 65\n").unwrap();
    std::fs::set_permissions(&failing, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let facts = w.refused("ios-setup", with(&setup, json!({"xcodebuild": failing.display().to_string()})), "ios_wda_build_failed");
    assert!(facts["details"]["tail"].as_str().unwrap_or("").contains("expected expression"), "{facts}");
    assert_eq!(w.state()["runner"], Value::Null);
    assert_eq!(w.ownership()["phase"], "idle");

    // The real flow against the xcodebuild double; then the App is launched again
    // (the Runner took the foreground) and its fresh SDK answers.
    let done = w.ok("ios-setup", with(&setup, json!({"bundleId": APP, "timeoutMs": 60000})));
    assert_eq!(done["wdaRunnerBundleId"], RUNNER);
    let state = w.state();
    assert_eq!(state["foreground"], APP, "{state}");
    let launched = &done["app"]["launch"];
    assert_eq!((launched["status"]["ok"].clone(), launched["sdk"]["runtimeEpoch"].clone()), (json!(true), w.native(APP)["runtimeEpoch"].clone()), "{done}");
    assert_eq!((done["runner"]["runtimeEpoch"].clone(), done["runner"]["xcodebuildPid"].clone()), (state["runner"]["runtimeEpoch"].clone(), state["runner"]["xcodebuildPid"].clone()), "{done}\n{state}");
    let manifest: Value = serde_json::from_slice(&std::fs::read(done["project"]["manifest"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!((manifest["schemaVersion"].clone(), manifest["upstream"]["version"].clone()), (json!("aab.ios-wda-project/v1"), json!("14.1.1")));
    let builds = w.control(json!({"op": "truth", "kind": "xcodebuild"}))["items"].as_array().cloned().unwrap_or_default();
    assert!(builds.iter().any(|b| b["action"] == "build-for-testing" && b["ok"] == true), "{builds:?}");
    assert_eq!(w.ok("ios-wda-status", w.runner())["runnerEpoch"], state["runner"]["runtimeEpoch"]);

    // Again: the serving Runner is reported, never replaced.
    let again = w.ok("ios-setup", setup);
    assert_eq!((again["runner"]["alreadyRunning"].clone(), again["runner"]["runtimeEpoch"].clone()), (json!(true), state["runner"]["runtimeEpoch"].clone()));

    // Stopping the Runner ends the test run: setup's xcodebuild exits and is reaped.
    let pid = done["runner"]["xcodebuildPid"].as_i64().unwrap() as i32;
    assert!(aab_e2e::process_alive(pid));
    w.control(json!({"op": "stop-runner"}));
    let until = Instant::now() + Duration::from_secs(20);
    while aab_e2e::process_alive(pid) {
        assert!(Instant::now() < until, "setup's xcodebuild {pid} outlived its Runner");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The stopped Runner's descriptor is stale: nobody answers behind it.
    w.refused("ios-wda-status", w.runner(), "ios_wda_unreachable");
}

/// `aab intent --operation OP …` → the reply value (must succeed).
#[track_caller]
fn intent(w: &World, op: &str, args: Value) -> Value {
    w.ok("intent", with(&json!({"operation": op}), args))
}

fn decision(id: &str, revision: &Value, agent: &str, action: Option<Value>) -> Value {
    let mut d = json!({"decisionId": id, "basedOnRevision": revision, "agentDecision": agent});
    if let Some(a) = action {
        d["action"] = a;
    }
    d
}

#[test]
fn ios_native_intent_signs_in_through_the_runner_with_observed_targets_and_a_verifiable_archive() {
    let w = wda_world();
    w.runner_with_app();
    let created = w.ok("ios-wda-session", with(&w.runner(), json!({"operation": "create", "bundleId": APP})));
    let target = json!({"platform": "ios", "deviceId": w.udid, "bundleId": APP, "wdaRunnerBundleId": RUNNER, "wdaSessionId": created["wdaSessionId"]});
    let op = "ios-sign-in";
    let started = intent(&w, "start", json!({"goal": "Sign in as ada", "target": target, "operationId": op}));
    assert_eq!((started["status"].clone(), started["provider"].clone()), (json!("waiting_for_decision"), json!("native")), "{started}");
    assert_eq!(started["summary"]["page"]["session"]["sessionId"], created["wdaSessionId"], "{}", started["summary"]);
    let mut revision = started["revision"].clone();
    let mut host_actions = vec![];
    for (id, action) in [
        ("user", json!({"action": "inputText", "selector": {"accessibilityId": "username"}, "value": "ada"})),
        ("secret", json!({"action": "inputText", "selector": {"accessibilityId": "password"}, "value": "pw"})),
        ("submit", json!({"action": "tap", "selector": {"label": "Sign in", "type": "XCUIElementTypeButton"}})),
        ("rotate", json!({"action": "setOrientation", "orientation": "landscapeRight"})),
    ] {
        let snap = intent(&w, "decide", json!({"operationId": op, "decision": decision(id, &revision, "act", Some(action))}));
        assert_eq!((snap["status"].clone(), snap["lastAction"]["dispatched"].clone()), (json!("waiting_for_decision"), json!(true)), "{id}: {snap}");
        revision = snap["revision"].clone();
        host_actions.push(snap["lastAction"]["hostActionId"].clone());
    }
    intent(&w, "decide", json!({"operationId": op, "decision": decision("done", &revision, "complete", None)}));
    assert_eq!(intent(&w, "status", json!({"operationId": op}))["status"], "completed");

    // Ground truth: the fields, the sign-in, the rotation, one device event per action.
    assert_eq!((w.field(APP, "username"), w.field(APP, "password")), (json!("ada"), json!("pw")));
    let signed_in = w.control(json!({"op": "truth", "kind": "sign-in"}))["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(signed_in.iter().map(|s| s["user"].clone()).collect::<Vec<_>>(), [json!("ada")]);
    assert_eq!(w.state()["orientation"], "landscapeRight");
    for id in &host_actions {
        assert!(!w.wda_events(id).is_empty(), "no device event for {id}");
    }
    assert_eq!(w.wda_events(&host_actions[2]).len(), 1, "the tap happened once");

    let out = w.env.work.join("ios-archive");
    let exported = w.env.aab_ok(&["evidence", "--operation", "export", "--namespace", "intent", "--operation-id", op, "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().expect("manifestSha256").to_string();
    let verified = w.env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], "verified", "{verified}");
}
