//! `aab demo ios` end to end: the demo builds its own world (simulator, Runner,
//! runtime), so the test checks what it says it proved — the sign-in the device
//! itself confirmed (the demo fails unless the simulator's own screen shows it) —
//! and what it leaves behind: the process table and its temp dir.

use std::time::Duration;

use aab_e2e::TestEnv;
use serde_json::json;

#[test]
fn ios_demo_signs_in_on_the_simulated_iphone_and_leaves_nothing_running() {
    let env = TestEnv::new();
    env.install_plugin("aab_plugin_ios", "ios");
    env.install_plugin("aab_plugin_wda", "wda");
    let run = env.aab_with_timeout(&["demo", "ios"], &[], Duration::from_secs(120));
    env.check(run.exit() == 0, &run, "aab demo ios should succeed");
    for step in ["ios-devices", "ios-status", "ios-setup", "ios-wda-session", "ios-uia-tree", "ios-input-native-text", "ios-tap-native", "ios-h5-dom"] {
        assert!(run.stdout.lines().any(|l| l.contains(&format!("{step} ")) && l.contains(" ok ")), "no ok line for {step}:\n{}", run.stdout);
    }
    assert!(run.stdout.contains("the device's username field holds \"alice\""), "{}", run.stdout);
    assert!(run.stdout.contains("status label reads \"Signed in as alice\""), "{}", run.stdout);

    // Nothing left: no process carries this test's environment (simulator, its
    // xcodebuild double and Runner, Chromium, the runtime all inherited it).
    std::thread::sleep(Duration::from_millis(300));
    let left = env.live_processes();
    let described: Vec<String> = left.iter().map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " ")).collect();
    assert!(left.is_empty(), "processes left behind: {described:?}\n{}", run.stdout);
    let home = run.stdout.lines().find_map(|l| l.split(", home ").nth(1)?.split(')').next()).expect("the demo names its simulator home");
    let dir = std::path::Path::new(home).parent().unwrap();
    assert!(!dir.exists(), "the demo's temp dir {} was removed", dir.display());
}

#[test]
fn ios_demo_usage_and_bad_arguments() {
    let env = TestEnv::new();
    let run = env.aab(&["demo", "ios", "--help"]);
    env.check(run.exit() == 0 && run.stdout.contains("aab demo ios\n"), &run, "usage");
    let (body, code) = env.aab_json(&["demo", "ios", "--bogus"]);
    assert_eq!((code, body["execution"]["error"].clone(), body["execution"]["field"].clone()), (1, json!("unexpected_argument"), json!("argv[2]")), "{body}");
}
