//! Process isolation e2e: the `crashing` fixture plugin runs in an `aab plugin-host`
//! child (chosen by `aab-plugins.json` or `AI_APP_BRIDGE_PLUGIN_ISOLATION`); its
//! segfaults, aborts, exits and hangs end only the call in flight (`plugin_crashed` /
//! `deadline_exceeded`, dispatch facts from its mark, a marked device left
//! `unresolved`), the runtime keeps its pid and serves the other plugins, the child
//! is started again for the next call, and no child outlives `runtime stop`.

use std::time::Duration;

use aab_e2e::{Run, TestEnv, error_code, error_facts, process_alive, wait_for_exit};
use serde_json::{Value, json};

/// An env with `fixture`, `misbehaving` and `crashing`, the last one isolated by the
/// plugin directory's configuration file.
fn isolated_env() -> TestEnv {
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_fixture_crashing", "crashing");
    std::fs::write(env.plugins.join("aab-plugins.json"), r#"{"isolation": {"crashing": "process"}}"#).expect("write aab-plugins.json");
    env
}

/// `runtime --operation status` → (runtime pid, the crashing plugin's `process` facts).
#[track_caller]
fn status(env: &TestEnv) -> (u64, Value) {
    env.aab_ok(&["runtime", "--operation", "start"]);
    let body = env.aab_ok(&["runtime", "--operation", "status"]);
    let value = body.get("value").cloned().unwrap_or(Value::Null);
    let pid = value.get("pid").and_then(Value::as_u64).unwrap_or_else(|| panic!("status has a pid: {body}"));
    let plugins = value.get("plugins").and_then(Value::as_array).cloned().unwrap_or_default();
    let crashing = plugins.iter().find(|p| p.get("name") == Some(&json!("crashing"))).unwrap_or_else(|| panic!("crashing is loaded: {body}"));
    assert_eq!(crashing.get("status"), Some(&json!("loaded")), "{body}");
    (pid, crashing.get("process").cloned().unwrap_or(Value::Null))
}

fn child_pid(process: &Value) -> Option<i32> {
    process.get("childPid").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok())
}

/// `crash --mode ok` answers from the child: returns the serving pid.
#[track_caller]
fn crash_ok(env: &TestEnv, device: &str) -> i32 {
    let run = env.aab(&["crash", "--mode", "ok", "--device", device]);
    let body = env.expect_ok(&run, "crash --mode ok");
    body.pointer("/value/pid").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok()).unwrap_or_else(|| env.fail(&run, "crash ok reports the pid"))
}

#[track_caller]
fn expect_failure(env: &TestEnv, run: &Run, code: &str, ambiguous: bool, what: &str) -> Value {
    let body = env.json_of(run);
    let facts = error_facts(&body);
    env.check(error_code(&body) == Some(code), run, &format!("{what}: expected `{code}`"));
    env.check(run.exit() != 0, run, &format!("{what}: a failure must not exit 0"));
    if ambiguous {
        env.check(
            facts.get("ambiguous") == Some(&json!(true)) && matches!(facts.get("dispatched"), Some(Value::Bool(true) | Value::Null)),
            run,
            &format!("{what}: after the mark: ambiguous:true, dispatched true or null"),
        );
    } else {
        env.check(facts.get("dispatched") == Some(&json!(false)) && facts.get("ambiguous") == Some(&json!(false)), run, &format!("{what}: before the mark: dispatched:false, ambiguous:false"));
    }
    body
}

#[test]
fn a_crashing_isolated_plugin_ends_only_its_call_and_is_restarted() {
    let env = isolated_env();
    let (runtime_pid, process) = status(&env);
    assert_eq!(process.get("isolation"), Some(&json!("process")), "{process}");
    let first_child = child_pid(&process).expect("the isolated plugin has a child");
    assert_ne!(first_child as u64, runtime_pid, "the plugin runs in its own process");
    assert_eq!(crash_ok(&env, "dev-a"), first_child, "calls are served by the child");

    let mut previous = first_child;
    for mode in ["segfault", "abort", "exit"] {
        let run = env.aab(&["crash", "--mode", mode, "--device", "dev-a"]);
        let body = expect_failure(&env, &run, "plugin_crashed", false, &format!("crash --mode {mode}"));
        let message = error_facts(&body).get("message").and_then(Value::as_str).unwrap_or_default().to_string();
        env.check(message.contains(&previous.to_string()), &run, "the error names the crashed child");

        // The runtime itself survived and still serves the other plugins.
        let (pid, _) = status(&env);
        assert_eq!(pid, runtime_pid, "the runtime survives a crash in mode {mode}\n{}", env.report(Some(&run)));
        env.aab_ok(&["fixture-text", "--text", "still here"]);
        assert!(!process_alive(previous), "the crashed child is gone");

        // The next call starts a new child.
        let next = crash_ok(&env, "dev-a");
        assert_ne!(next, previous, "a new child serves the call after the crash in mode {mode}");
        previous = next;
    }
    let (_, process) = status(&env);
    assert_eq!(process.get("restarts"), Some(&json!(3)), "{process}");
    assert_eq!(child_pid(&process), Some(previous), "{process}");

    // No child outlives the runtime.
    env.aab_ok(&["runtime", "--operation", "stop"]);
    assert!(wait_for_exit(runtime_pid as i32, Duration::from_secs(30)), "the runtime stopped");
    assert!(wait_for_exit(previous, Duration::from_secs(30)), "the plugin child ended with the runtime\n{}", env.report(None));
}

#[test]
fn a_segfault_after_the_dispatch_mark_is_ambiguous_and_leaves_the_device_unresolved() {
    let env = isolated_env();
    let serial = "dev-marked";
    crash_ok(&env, serial);
    let run = env.aab(&["crash", "--mode", "segfault-after-mark", "--device", serial]);
    expect_failure(&env, &run, "plugin_crashed", true, "a segfault after the mark");
    let status_run = env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    let body = env.expect_ok(&status_run, "device-ownership status");
    env.check(body.pointer("/value/phase") == Some(&json!("unresolved")), &status_run, "the device is unresolved after an unknown outcome");
    // A mutation on it is refused before dispatch; other devices keep working.
    let refused = env.aab(&["crash", "--mode", "ok", "--device", serial]);
    expect_failure(&env, &refused, "device_ownership_unresolved", false, "a mutation on the unresolved device");
    crash_ok(&env, "dev-other");
}

#[test]
fn a_hang_past_the_deadline_kills_the_child() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_fixture_crashing", "crashing");
    // The environment override chooses the mode here.
    env.set_env("AI_APP_BRIDGE_PLUGIN_ISOLATION", "crashing=process");
    let (runtime_pid, process) = status(&env);
    let child = child_pid(&process).expect("the isolated plugin has a child");
    let run = env.aab(&["crash", "--mode", "hang", "--device", "dev-hang", "--timeout-ms", "300"]);
    expect_failure(&env, &run, "deadline_exceeded", false, "a hang before the mark");
    assert!(wait_for_exit(child, Duration::from_secs(30)), "the hung child was killed\n{}", env.report(Some(&run)));
    assert_eq!(status(&env).0, runtime_pid, "the runtime survives");
    assert_ne!(crash_ok(&env, "dev-hang"), child, "a new child serves the next call");
    env.aab_ok(&["fixture-text", "--text", "still here"]);
}

#[test]
fn in_process_stays_the_default() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_fixture_crashing", "crashing");
    let (runtime_pid, process) = status(&env);
    assert_eq!(process.get("isolation"), Some(&json!("in-process")), "{process}");
    assert_eq!(crash_ok(&env, "dev-x") as u64, runtime_pid, "an in-process plugin runs in the runtime");
}

/// A running call's cancellation is relayed to the child: the isolated `fixture-sleep`
/// stops at the flag (without the relay it would sleep its 20 s out and succeed
/// within its 60 s deadline), before its mark, so the device is left idle.
#[test]
fn cancellation_reaches_an_isolated_plugin() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AI_APP_BRIDGE_PLUGIN_ISOLATION", "fixture=process");
    env.aab_ok(&["runtime", "--operation", "start"]);
    let serial = "iso-cancel";
    let run = std::thread::scope(|s| {
        let h = s.spawn(|| {
            env.aab(&["fixture-sleep", "--duration-ms", "20000", "--device", serial, "--lane", serial, "--request-id", "iso-1", "--timeout-ms", "60000"])
        });
        // The pending action is durable before the plugin is called.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(env.journal_path(serial)).is_ok_and(|j| j.contains("\"actionId\"")) {
            assert!(std::time::Instant::now() < deadline, "no pending action\n{}", env.report(None));
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        let cancel = env.aab(&["runtime", "--operation", "cancel", "--cancel-request-id", "iso-1"]);
        let body = env.expect_ok(&cancel, "runtime cancel");
        env.check(body.pointer("/value/cancelled") == Some(&json!(1)), &cancel, "one request cancelled");
        h.join().unwrap()
    });
    expect_failure(&env, &run, "cancelled", false, "an isolated call cancelled before its mark");
    let (_, process) = {
        let body = env.aab_ok(&["runtime", "--operation", "status"]);
        let plugins = body.pointer("/value/plugins").and_then(Value::as_array).cloned().unwrap_or_default();
        let fixture = plugins.iter().find(|p| p.get("name") == Some(&json!("fixture"))).cloned().unwrap_or(Value::Null);
        ((), fixture.get("process").cloned().unwrap_or(Value::Null))
    };
    assert_eq!(process.get("isolation"), Some(&json!("process")), "{process}");
    assert_eq!(process.get("restarts"), Some(&json!(0)), "a cancelled call does not cost the child: {process}");
}

/// Host services, outcome kinds and provider errors travel through the relay
/// unchanged: an isolated plugin answers like an in-process one.
#[test]
fn an_isolated_plugin_answers_like_an_in_process_one() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.set_env("AI_APP_BRIDGE_PLUGIN_ISOLATION", "process");
    let echo = env.aab_ok(&["fixture-host", "--method", "host.echo", "--params", r#"{"x": 1}"#]);
    assert_eq!(echo.pointer("/value/result/params/x"), Some(&json!(1)), "{echo}");
    let info = env.aab_ok(&["fixture-host", "--method", "host.info"]);
    assert_eq!(info.pointer("/value/result/plugin"), Some(&json!("fixture")), "{info}");
    assert!(info.pointer("/value/result/dataDir").and_then(Value::as_str).is_some_and(|d| d.ends_with("fixture")), "{info}");
    let run = env.aab(&["fixture-host", "--method", "fixture.nothing"]);
    expect_failure(&env, &run, "unsupported_host_service", false, "an unknown host service through the relay");
    let text = env.aab_ok(&["fixture-text", "--text", "hello"]);
    assert_eq!(text.get("kind"), Some(&json!("text")), "{text}");
    let body = env.aab_ok(&["runtime", "--operation", "status"]);
    let plugins = body.pointer("/value/plugins").and_then(Value::as_array).cloned().unwrap_or_default();
    assert!(plugins.iter().filter(|p| p.get("status") == Some(&json!("loaded"))).all(|p| p.pointer("/process/isolation") == Some(&json!("process"))), "{body}");
}
