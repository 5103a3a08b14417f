//! Android `tree`, `wait-text` and `ui-observation` e2e through the public CLI (and
//! MCP) against the simulated phone behind a real adb server. Ground truth comes
//! from the simulator: its control `state` (current screen, activity, observation
//! lease), its truth log (every SDK request it served) and the stock
//! `uiautomator dump` of the same screen read with the `adb` binary.

use std::time::{Duration, Instant};

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated, simulated_with};

const CATALOG: &str = "com.example.aab.catalog";




/// How many tree reads the app's SDK served since truth record `since`.
fn tree_reads(w: &World, sim: &aab_android_sim::Simulator, since: u64) -> usize {
    let truth = control(w, sim, json!({"op": "truth", "kind": "sdk-request", "since": since}));
    truth["items"].as_array().unwrap().iter().filter(|r| r["data"]["path"] == json!("/v1/view/tree")).count()
}

fn truth_len(w: &World, sim: &aab_android_sim::Simulator) -> u64 {
    control(w, sim, json!({"op": "truth"}))["items"].as_array().unwrap().len() as u64
}

/// Visible nodes of the current screen per the stock `uiautomator dump`, read with adb.
fn uiautomator_nodes(w: &World) -> usize {
    w.adb(&["shell", "uiautomator", "dump", "/sdcard/window_dump.xml"]);
    w.adb(&["shell", "cat", "/sdcard/window_dump.xml"]).matches("<node ").count()
}

fn compact_ids(tree: &Value) -> Vec<String> {
    tree["nodes"].as_array().unwrap().iter().filter_map(|n| n["id"].as_str().map(str::to_string)).collect()
}

#[test]
fn android_tree_follows_the_simulated_screen() {
    let w = World::new();
    let mut sim = simulated(&w);
    let truth = app_state(&w, &sim, SAMPLE);
    assert_eq!(truth["screen"], json!("login"));

    let tree = w.ok("tree", json!({"packageName": SAMPLE, "compact": true}));
    assert_eq!(tree["activity"], truth["activity"], "{tree}");
    assert_eq!(tree["runtimeEpoch"], truth["runtimeEpoch"]);
    assert_eq!(compact_ids(&tree), ["content", "title", "email", "password", "remember", "sign_in", "create_account"]);
    let button = tree["nodes"].as_array().unwrap().iter().find(|n| n["id"] == json!("sign_in")).unwrap();
    assert_eq!(*button, json!({"nodeId": 6, "depth": 1, "parent": 1, "class": "Button", "id": "sign_in", "text": "Sign in", "bounds": [60, 920, 1020, 1060], "clickable": true}));
    assert_eq!(tree["nodeCount"].as_u64().unwrap() as usize, uiautomator_nodes(&w), "every view of the screen, as the stock dump sees it");
    assert_eq!(tree["dropped"], json!({"maxNodes": 0, "maxDepth": 0}));

    // Host-side filters; full nodes keep the SDK's targetRef.
    let found = w.ok("tree", json!({"packageName": SAMPLE, "textFilter": "SIGN IN", "classFilter": "button"}));
    let nodes = found["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{found}");
    assert_eq!((nodes[0]["resourceName"].clone(), nodes[0]["targetRef"]["schemaVersion"].clone()), (json!(format!("{SAMPLE}:id/sign_in")), json!("aab.native-target/v1")));
    let by_id = w.ok("tree", json!({"packageName": SAMPLE, "compact": true, "resourceIdFilter": "pass"}));
    assert_eq!(compact_ids(&by_id), ["password"]);

    // The phone shows another screen: the next read shows it.
    control(&w, &sim, json!({"op": "screen", "package": SAMPLE, "screen": "welcome"}));
    let truth = app_state(&w, &sim, SAMPLE);
    let tree = w.ok("tree", json!({"packageName": SAMPLE, "compact": true, "visibleOnly": true}));
    assert_eq!(tree["activity"], truth["activity"]);
    assert_eq!(truth["activity"], json!(format!("{SAMPLE}.WelcomeActivity")));
    assert_eq!(compact_ids(&tree), ["content", "greeting", "sign_out", "open_web"]);
    assert_eq!(tree["returned"].as_u64().unwrap() as usize, uiautomator_nodes(&w));

    // Not in the foreground: the SDK's own code, nothing dispatched.
    control(&w, &sim, json!({"op": "foreground", "package": null}));
    w.fails("tree", json!({"packageName": SAMPLE}), "no_current_activity");
    sim.shutdown();
}

#[test]
fn android_tree_of_a_604_node_screen_reports_what_its_limits_dropped() {
    let w = World::new();
    let mut sim = simulated_with(&w, aab_android_sim::Scenario::catalog());
    let stock = uiautomator_nodes(&w);
    assert_eq!(stock, 604, "the catalog screen as the stock dump sees it");

    let all = w.ok("tree", json!({"packageName": CATALOG, "compact": true}));
    assert_eq!((all["nodeCount"].clone(), all["returned"].clone(), all["truncated"].clone()), (json!(stock), json!(stock), json!(false)));

    let capped = w.ok("tree", json!({"packageName": CATALOG, "compact": true, "maxNodes": 100}));
    assert_eq!((capped["returned"].clone(), capped["matched"].clone(), capped["truncated"].clone()), (json!(100), json!(604), json!(true)));
    assert_eq!(capped["dropped"], json!({"maxNodes": 504, "maxDepth": 0}));

    // Through MCP: the same command, depth-limited.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "tree", "arguments": {"packageName": CATALOG, "compact": true, "maxDepth": 1}, "extract": null}));
    assert!(!is_error, "{body}");
    let text = body.to_string();
    assert!(text.contains("\\\"maxDepth\\\":600") || text.contains("\"maxDepth\":600"), "600 rows below depth 1 were dropped: {text:.600}");
    assert!(text.contains("refresh") && !text.contains("row_0"), "root, title, refresh and list only: {text:.600}");

    // Out-of-range limits are refused, never clamped.
    w.fails("tree", json!({"packageName": CATALOG, "maxNodes": 1001}), "invalid_argument");
    w.fails("tree", json!({"packageName": CATALOG, "maxDepth": 201}), "invalid_argument");
    sim.shutdown();
}

#[test]
fn android_wait_text_sees_a_timed_transition_and_times_out_with_its_last_check() {
    let w = World::new();
    let mut sim = simulated(&w);
    let welcome = format!("{SAMPLE}.WelcomeActivity");

    // The screen changes 800 ms from now; the wait needs the new screen in full.
    let since = truth_len(&w, &sim);
    control(&w, &sim, json!({"op": "later", "delayMs": 800, "then": {"op": "screen", "package": SAMPLE, "screen": "welcome"}}));
    let done = w.ok("wait-text", json!({"packageName": SAMPLE, "requireText": ["Sign out"], "absentText": ["Sign in"], "requireActivity": welcome, "intervalMs": 100, "timeoutMs": 20000}));
    assert_eq!(done["matched"]["requireText"], json!(["Sign out"]), "{done}");
    assert_eq!(done["activity"], json!(welcome));
    let truth = app_state(&w, &sim, SAMPLE);
    assert_eq!((truth["screen"].clone(), truth["activity"].clone()), (json!("welcome"), json!(welcome)), "ground truth: the phone changed screen");
    assert_eq!(done["polls"].as_u64().unwrap() as usize, tree_reads(&w, &sim, since), "one SDK tree read per reported poll");
    let later = control(&w, &sim, json!({"op": "truth", "kind": "later", "since": since}));
    assert_eq!(later["items"].as_array().unwrap().len(), 1, "the transition fired once: {later}");

    // A label that never shows: deadline_exceeded with the last check, not dispatched.
    let since = truth_len(&w, &sim);
    let (body, run) = w.run("wait-text", json!({"packageName": SAMPLE, "targetText": "Sign out", "requireText": ["Nope"], "intervalMs": 100, "timeoutMs": 1500}));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("deadline_exceeded") && facts["dispatched"] == json!(false), &run, "wait-text timeout");
    let details = &facts["details"];
    assert_eq!(details["lastCheck"]["missing"], json!(["Nope"]), "{facts}");
    assert_eq!(details["lastCheck"]["present"], json!(["Sign out"]), "{facts}");
    // `polls` counts completed reads; one more may have reached the phone as the deadline cut it.
    let (polls, served) = (details["polls"].as_u64().unwrap() as usize, tree_reads(&w, &sim, since));
    assert!(polls >= 1 && (served == polls || served == polls + 1), "{polls} polls, {served} reads served: {facts}");

    // A running wait does not hold up other reads of the same app (its own lane):
    // the phone serves a status read between the wait's tree reads.
    let since = truth_len(&w, &sim);
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| w.run("wait-text", json!({"packageName": SAMPLE, "targetText": "Never", "intervalMs": 100, "timeoutMs": 6000})));
        let until = Instant::now() + Duration::from_secs(20);
        while tree_reads(&w, &sim, since) == 0 {
            assert!(Instant::now() < until, "the wait never read the tree");
            std::thread::sleep(Duration::from_millis(20));
        }
        w.ok("status", json!({"packageName": SAMPLE}));
        let (body, _) = waiting.join().unwrap();
        assert_eq!(error_facts(&body)["error"], json!("deadline_exceeded"), "{body}");
    });
    let served = control(&w, &sim, json!({"op": "truth", "kind": "sdk-request", "since": since}));
    let paths: Vec<&str> = served["items"].as_array().unwrap().iter().map(|r| r["data"]["path"].as_str().unwrap()).collect();
    let status_at = paths.iter().position(|p| *p == "/v1/status").expect("the status read reached the phone");
    assert!(paths[..status_at].contains(&"/v1/view/tree") && paths[status_at..].contains(&"/v1/view/tree"), "status served during the wait: {paths:?}");

    // An unreadable tree is never a successful absence.
    control(&w, &sim, json!({"op": "foreground", "package": null}));
    let facts = w.fails("wait-text", json!({"packageName": SAMPLE, "provider": "native", "absentText": ["Sign out"]}), "observation_unavailable");
    assert_eq!(facts["details"]["cause"]["error"], json!("no_current_activity"), "{facts}");

    // Argument rules: a condition is needed; absence-only waits name the provider;
    // label lists are JSON arrays (a comma string is not split).
    // (the schema says both; the host refuses before any device access)
    let facts = w.fails("wait-text", json!({"packageName": SAMPLE}), "invalid_argument");
    assert!(facts["message"].as_str().is_some_and(|m| m.contains("targetText")), "names a condition: {facts}");
    let facts = w.fails("wait-text", json!({"packageName": SAMPLE, "absentText": ["Loading"]}), "missing_argument");
    assert_eq!(facts["field"], json!("provider"), "{facts}");
    w.fails("wait-text", json!({"packageName": SAMPLE, "requireText": "Sign in,Sign out"}), "invalid_argument");
    w.fails("wait-text", json!({"packageName": SAMPLE, "targetText": "x", "timeoutSec": 1}), "unsupported_argument");
    sim.shutdown();
}

#[test]
fn android_ui_observation_lease_matches_the_simulator() {
    let w = World::new();
    let mut sim = simulated(&w);
    let lease_of = |sim: &aab_android_sim::Simulator| app_state(&w, sim, SAMPLE)["uiObservation"].clone();
    assert_eq!(lease_of(&sim)["state"], json!("idle"));

    let started = w.ok("ui-observation", json!({"packageName": SAMPLE, "operation": "start", "durationMs": 5000}));
    let lease = started["leaseId"].as_str().unwrap().to_string();
    assert_eq!(started["active"], json!(true), "{started}");
    let truth = lease_of(&sim);
    assert_eq!((truth["state"].clone(), truth["leaseId"].clone(), truth["durationMs"].clone()), (json!("active"), json!(lease), json!(5000)));

    // One lease at a time; a stop needs its id; both refusals leave the lease alone.
    let facts = w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "start", "durationMs": 100}), "ui_observation_busy");
    assert_eq!(facts["details"]["body"]["observer"]["leaseId"], json!(lease), "{facts}");
    let facts = w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "stop", "leaseId": "0000"}), "ui_observation_lease_mismatch");
    assert_eq!(facts["field"], json!("leaseId"));
    assert_eq!(lease_of(&sim)["state"], json!("active"));

    let stopped = w.ok("ui-observation", json!({"packageName": SAMPLE, "operation": "stop", "leaseId": lease}));
    assert_eq!((stopped["active"].clone(), stopped["state"].clone()), (json!(false), json!("stopped")), "{stopped}");
    assert_eq!(lease_of(&sim)["state"], json!("stopped"));
    // Status through MCP (after the stop: the 5 s lease must not run out mid-test).
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "ui-observation", "arguments": {"packageName": SAMPLE, "operation": "status"}, "extract": null}));
    assert!(!is_error && body.to_string().contains(&lease) && body.to_string().contains("stopped"), "{body}");

    // A short lease expires on its own; status reports it, the simulator agrees.
    let short = w.ok("ui-observation", json!({"packageName": SAMPLE, "operation": "start", "durationMs": 100}));
    let until = Instant::now() + Duration::from_secs(10);
    while lease_of(&sim)["state"] != json!("expired") {
        assert!(Instant::now() < until, "the 100 ms lease never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = w.ok("ui-observation", json!({"packageName": SAMPLE, "operation": "status"}));
    assert_eq!((status["active"].clone(), status["state"].clone(), status["leaseId"].clone(), status["remainingMs"].clone()), (json!(false), json!("expired"), short["leaseId"].clone(), json!(0)));

    // A restarted process has no lease: the old id no longer stops anything.
    let active = w.ok("ui-observation", json!({"packageName": SAMPLE, "operation": "start", "durationMs": 5000}));
    control(&w, &sim, json!({"op": "restart", "package": SAMPLE}));
    assert_eq!(lease_of(&sim)["state"], json!("idle"));
    w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "stop", "leaseId": active["leaseId"]}), "ui_observation_lease_mismatch");

    // Schema rules per operation; the Flutter provider needs a Flutter runtime.
    w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "start", "durationMs": 99}), "invalid_argument");
    assert_eq!(w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "start"}), "missing_argument")["field"], json!("durationMs"));
    assert_eq!(w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "stop"}), "missing_argument")["field"], json!("leaseId"));
    w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "status", "leaseId": "x"}), "unsupported_argument");
    w.fails("ui-observation", json!({"packageName": SAMPLE, "operation": "status", "provider": "flutter"}), "flutter_channel_failed");
    sim.shutdown();
}

/// Figures for the report (not a check): `cargo test -p aab-e2e --test e2e --
/// --ignored android_tree_figures --nocapture`. Round trips through the CLI
/// (process start included) and reply sizes of the 604-node screen.
#[test]
#[ignore]
fn android_tree_figures() {
    let w = World::new();
    let mut sim = simulated_with(&w, aab_android_sim::Scenario::catalog());
    for (label, args) in [
        ("status (for comparison)", json!({"packageName": CATALOG})),
        ("compact", json!({"packageName": CATALOG, "compact": true})),
        ("full", json!({"packageName": CATALOG})),
        ("compact maxNodes 50", json!({"packageName": CATALOG, "compact": true, "maxNodes": 50})),
    ] {
        // The full tree exceeds the CLI's 96 KiB delivery budget: it is stored and
        // delivered by reference (`delivery.attemptedBytes` is its size).
        let size = |body: &Value| body.pointer("/delivery/attemptedBytes").and_then(Value::as_u64).unwrap_or_else(|| body["value"].to_string().len() as u64);
        let command = if label.starts_with("status") { "status" } else { "tree" };
        let (first, _) = w.run(command, args.clone());
        let mut ms: Vec<u128> = (0..10)
            .map(|_| {
                let t = Instant::now();
                let (body, _) = w.run(command, args.clone());
                assert_eq!(body.pointer("/execution/ok"), Some(&json!(true)), "{body:.400}");
                t.elapsed().as_millis()
            })
            .collect();
        ms.sort();
        println!("tree 604 nodes, {label}: median {} ms, min {} ms, max {} ms, reply {} bytes, delivery {}", ms[5], ms[0], ms[9], size(&first), first["delivery"]["status"]);
    }
    // The SDK read alone, straight through the forward the commands made.
    let port: u16 = w.forwards()[0].split_whitespace().nth(1).unwrap().trim_start_matches("tcp:").parse().unwrap();
    let mut ms: Vec<u128> = (0..10)
        .map(|_| {
            use std::io::{Read, Write};
            let t = Instant::now();
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /v1/view/tree HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).unwrap();
            assert!(buf.len() > 100_000);
            t.elapsed().as_millis()
        })
        .collect();
    ms.sort();
    println!("GET /v1/view/tree through the adb forward: median {} ms, min {} ms, max {} ms", ms[5], ms[0], ms[9]);
    sim.shutdown();
}

/// Script reaches the three commands through `script.target` with their declared
/// permissions: tree (app.read) and ui-observation (capture.read) run; wait-text
/// (app.interact) is refused when the script drops app.interact.
#[test]
fn android_script_calls_tree_and_ui_observation_within_its_permissions() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let source = "exports.main = async (ctx) => {
        const tree = await ctx.call('tree', {compact: true, textFilter: 'sign in'});
        const lease = await ctx.call('ui-observation', {operation: 'start', durationMs: 5000});
        const wait = await ctx.call('wait-text', {targetText: 'Sign in'});
        return {tree: tree.ok && tree.result.nodes.map((n) => n.id), leaseId: lease.ok && lease.result.leaseId, wait: [wait.ok, wait.error && wait.error.code, wait.dispatched]};
    };";
    let script = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": source,
                        "target": {"platform": "android", "serial": serial, "packageName": SAMPLE}, "permissions": ["app.read", "capture.read"]});
    let run = |args: &[&str]| {
        let mut argv = vec!["script"];
        argv.extend_from_slice(args);
        let run = w.env.aab(&argv);
        let body = w.env.json_of(&run);
        w.env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "script operation");
        body["value"].clone()
    };
    run(&["--operation", "start", "--operation-id", "android-tree", "--script", &script.to_string()]);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let v = run(&["--operation", "wait", "--operation-id", "android-tree", "--wait-ms", "5000"]);
        if ["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or("")) {
            assert_eq!(v["status"], json!("completed"), "{v}");
            break;
        }
        assert!(Instant::now() < until, "the script did not finish: {v}");
    }
    let result = run(&["--operation", "result", "--operation-id", "android-tree"])["result"].clone();
    assert_eq!(result["tree"], json!(["title", "sign_in"]), "{result}");
    assert_eq!(result["wait"], json!([false, "permission_not_granted", false]), "{result}");
    let truth = app_state(&w, &sim, SAMPLE)["uiObservation"].clone();
    // Ground truth: the script's lease is the phone's (active, or expired by now on a slow machine).
    assert_eq!(truth["leaseId"], result["leaseId"], "{truth}");
    assert!(truth["state"] == json!("active") || truth["state"] == json!("expired"), "{truth}");
    sim.shutdown();
}
