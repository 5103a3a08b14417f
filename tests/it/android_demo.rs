//! `aab demo android` end to end: the demo builds its own world (adb server,
//! simulator, runtime), so the test checks what it leaves behind — the simulator's
//! ground-truth log (`--record`) for what the phone saw, the adb port and the
//! process table for what is still running.

use std::net::TcpStream;
use std::time::Duration;

use aab_e2e::TestEnv;
use serde_json::{Value, json};

#[test]
fn android_demo_walks_the_flow_on_the_simulator_and_leaves_nothing_running() {
    let env = TestEnv::new();
    env.install_plugin("aab_plugin_android", "android");
    let record = env.root.join("demo-truth.json");
    let run = env.aab_with_timeout(&["demo", "android", "--record", record.to_str().unwrap()], &[], Duration::from_secs(120));
    env.check(run.exit() == 0, &run, "aab demo android should succeed");

    // Ground truth (the simulator's own log, not the demo's narration): status reads of
    // the first app process (the status command and one per sign-up action), a restart,
    // then one read of the new process; the six sign-up actions each settled once.
    let truth: Value = serde_json::from_slice(&std::fs::read(&record).expect("the demo wrote the simulator's log")).unwrap();
    let items = truth["items"].as_array().unwrap();
    let restart_at = items.iter().position(|r| r["kind"] == json!("process-stop")).expect("the app was restarted");
    let is_status = |r: &&Value| r["kind"] == json!("sdk-request") && r["data"]["path"] == json!("/v1/status");
    let before: Vec<&Value> = items[..restart_at].iter().filter(is_status).collect();
    let after: Vec<&Value> = items[restart_at..].iter().filter(is_status).collect();
    assert_eq!((before.len(), after.len()), (7, 1), "{before:?} / {after:?}");
    let statuses: Vec<&Value> = before.iter().chain(after.iter()).copied().collect();
    assert!(statuses.iter().all(|r| r["data"]["status"] == json!(200)), "{statuses:?}");
    assert!(before.iter().all(|r| r["data"]["runtimeEpoch"] == before[0]["data"]["runtimeEpoch"]), "{before:?}");
    assert_ne!(before[0]["data"]["runtimeEpoch"], after[0]["data"]["runtimeEpoch"], "the last read reached the restarted process");
    let actions: Vec<&Value> = items.iter().filter(|r| r["kind"] == json!("sdk-action")).collect();
    assert_eq!(actions.len(), 6, "{actions:?}");
    assert!(actions.iter().all(|r| r["data"]["ok"] == json!(true)), "{actions:?}");
    assert!(run.stdout.contains("welcome screen"), "{}", run.stdout);
    // What the demo says it did matches: the epochs it printed are the phone's.
    for r in &statuses {
        assert!(run.stdout.contains(r["data"]["runtimeEpoch"].as_str().unwrap()), "{}", run.stdout);
    }

    // Nothing left: the adb server port is closed, and no process carries this
    // test's environment (simulator, adb server, runtime all inherited it).
    let port: u16 = run.stdout.lines().find_map(|l| l.split("Stopped the adb server on port ").nth(1)?.trim_end_matches('.').parse().ok()).expect("the demo names its adb port");
    assert!(TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_err(), "adb server on {port} still listens");
    std::thread::sleep(Duration::from_millis(300));
    let left = env.live_processes();
    let described: Vec<String> = left.iter().map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " ")).collect();
    assert!(left.is_empty(), "processes left behind: {described:?}\n{}", run.stdout);
    let home = run.stdout.lines().find_map(|l| l.split(" (HOME ").nth(1)?.split(')').next()).expect("the demo names its adb HOME");
    let dir = std::path::Path::new(home).parent().unwrap();
    assert!(!dir.exists(), "the demo's temp dir {} was removed", dir.display());
}

#[test]
fn android_demo_usage_and_bad_arguments() {
    let env = TestEnv::new();
    let run = env.aab(&["demo", "android", "--help"]);
    env.check(run.exit() == 0 && run.stdout.contains("aab demo android [--record FILE]"), &run, "usage");
    let (body, code) = env.aab_json(&["demo", "android", "--bogus"]);
    assert_eq!((code, body["execution"]["error"].clone(), body["execution"]["field"].clone()), (1, json!("unexpected_argument"), json!("argv[2]")), "{body}");
    let (body, code) = env.aab_json(&["demo", "android", "--record"]);
    assert_eq!((code, body["execution"]["error"].clone()), (1, json!("missing_argument")), "{body}");
}
