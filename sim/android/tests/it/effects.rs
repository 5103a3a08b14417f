//! The mutating tools the shell worker runs (§2.3), each seen once in the control
//! op `effects`, and the `slowTool` fault that lets a test reboot mid-action.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;

const SAMPLE: &str = "com.example.aab.sample";

fn effects(env: &Env) -> Vec<Value> {
    env.control(json!({"op": "effects"}))["items"].as_array().unwrap().iter().map(|i| json!({"kind": i["kind"], "data": i["data"]})).collect()
}

fn app(env: &Env) -> Value {
    env.state()["apps"].as_array().unwrap().iter().find(|a| a["package"] == json!(SAMPLE)).unwrap().clone()
}

#[test]
fn each_mutating_tool_is_one_effect_in_order() {
    let env = Env::start(1);
    let base = effects(&env).len();
    env.sh("input keyevent 66; input swipe 10 20 300 400 50; input text hi");
    let am = env.sh(&format!("am start -W --activity-clear-task -a android.intent.action.VIEW -e k v -n {SAMPLE}/.MainActivity"));
    assert!(am.contains("Status: ok\nLaunchState: WARM\nActivity: com.example.aab.sample/.MainActivity\nTotalTime:"), "{am}");
    assert!(am.ends_with("Complete\n"), "{am}");
    let pid = app(&env)["pid"].as_u64().unwrap();
    env.sh(&format!("run-as {SAMPLE} kill -SIGSTOP {pid}"));
    let stat = env.sh(&format!("cat /proc/{pid}/stat; ps -o PID,S,NAME {SAMPLE}"));
    assert!(stat.split_whitespace().nth(2) == Some("T") && stat.contains(&format!("{pid} T {SAMPLE}")), "{stat}");
    env.sh(&format!("run-as {SAMPLE} kill -SIGCONT {pid}"));
    assert!(env.sh(&format!("ps -o PID,S,NAME {SAMPLE}")).contains(&format!("{pid} S {SAMPLE}")));
    env.sh(&format!("appops set {SAMPLE} CAMERA ignore; logcat -c"));
    let perm = app(&env)["permissions"].as_object().unwrap().keys().next().cloned().unwrap();
    env.sh(&format!("pm revoke --user 0 {SAMPLE} {perm}; pm grant --user 0 {SAMPLE} {perm}"));
    // An install-time permission is not changeable: SecurityException, no effect.
    let (_, err, code) = env.shell(&format!("pm grant --user 0 {SAMPLE} android.permission.INTERNET"));
    assert!(code != 0 && err.contains("java.lang.SecurityException: Permission android.permission.INTERNET requested by com.example.aab.sample is not a changeable permission type"), "{err}");
    assert_eq!(env.sh(&format!("pm clear {SAMPLE}")), "Success\n");
    let kinds: Vec<String> = effects(&env)[base..].iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["keyevent", "swipe", "text", "launch", "signal", "signal", "appops", "logcat-clear", "permission", "permission", "clear-data"]);
    let all = effects(&env);
    assert_eq!(all[base + 4]["data"], json!({"package": SAMPLE, "pid": pid, "signal": "STOP"}));
    assert_eq!(all[base + 6]["data"], json!({"package": SAMPLE, "op": "CAMERA", "mode": "ignore"}));
    let intent = env.truth("intent");
    assert_eq!(intent.last().unwrap()["data"]["extras"], json!([["k", "v"]]));
    assert_eq!(intent.last().unwrap()["data"]["clearTask"], json!(true));
}

#[test]
fn a_slow_tool_can_be_interrupted_by_a_reboot() {
    let env = Env::start(1);
    env.control(json!({"op": "faults", "set": {"slowTool": ["input", "keyevent"], "slowToolMs": 2000}}));
    let boot = env.state()["bootId"].clone();
    // A detached worker runs the slow tool; the reboot kills it before the tool acts.
    env.sh("setsid nohup sh -c 'input keyevent 66; echo done > /data/local/tmp/slow.done' </dev/null >/dev/null 2>&1 &");
    let until = Instant::now() + Duration::from_secs(5);
    while env.truth("fault").iter().all(|f| f["data"]["kind"] != json!("slow-tool")) {
        assert!(Instant::now() < until, "the slow tool never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    env.control(json!({"op": "reboot"}));
    assert_ne!(env.state()["bootId"], boot);
    std::thread::sleep(Duration::from_millis(2500));
    env.connect(&env.serial());
    assert!(env.truth("keyevent").is_empty(), "the killed worker never pressed the key");
    assert_eq!(env.shell("cat /data/local/tmp/slow.done").2, 1);
    assert_ne!(env.sh("cat /proc/sys/kernel/random/boot_id").trim(), boot.as_str().unwrap());
}
