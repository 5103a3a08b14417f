//! The Android commands that read the device over adb — `logcat`,
//! `keyboard-state`, `permission-state` — end to end through the CLI (and MCP)
//! against the simulated phone behind a real adb server. Every answer is checked
//! against the simulator's ground truth: its log ring (`log-ring`), and `state`
//! (keyboard, per-app pid, permissions, app-ops).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};



/// The ring's lines as logcat would print them: one record per message line.
fn ring(w: &World, sim: &aab_android_sim::Simulator) -> Vec<Value> {
    let lines = control(w, sim, json!({"op": "log-ring"}))["lines"].as_array().unwrap().clone();
    lines
        .iter()
        .flat_map(|l| l["message"].as_str().unwrap().split('\n').map(|m| json!({"pid": l["pid"], "tid": l["tid"], "level": l["level"], "tag": l["tag"], "message": m})).collect::<Vec<_>>())
        .collect()
}

fn strip(records: &Value) -> Vec<Value> {
    records.as_array().unwrap().iter().map(|r| json!({"pid": r["pid"], "tid": r["tid"], "level": r["level"], "tag": r["tag"], "message": r["message"]})).collect()
}

#[test]
fn android_logcat_dump_filters_match_the_log_ring() {
    let w = World::new();
    let mut sim = simulated(&w);
    let pid = app_state(&w, &sim, SAMPLE)["pid"].as_u64().unwrap();
    control(&w, &sim, json!({"op": "logcat", "package": SAMPLE, "level": "W", "tag": "Probe", "message": "marker one"}));
    control(&w, &sim, json!({"op": "logcat", "package": SAMPLE, "level": "D", "tag": "Probe", "message": "quiet detail"}));
    control(&w, &sim, json!({"op": "logcat", "level": "E", "tag": "SystemProbe", "message": "from system_server"}));
    // The app writes too: tapping "Sign in" logs its Login line under the app's pid.
    control(&w, &sim, json!({"op": "tap", "x": 500, "y": 990}));
    let truth = ring(&w, &sim);
    assert!(truth.iter().any(|l| l["tag"] == json!("Login") && l["pid"] == json!(pid)), "{truth:?}");

    // The whole device log (default scope), most recent 200: exactly the ring.
    let all = w.ok("logcat", json!({}));
    assert_eq!(all["scope"], json!("device"));
    assert_eq!(strip(&all["records"]), truth, "{all}");
    assert_eq!(all["text"].as_str().unwrap().lines().count(), truth.len());
    assert!(all["records"][0]["time"].as_str().unwrap().len() == 18, "{all}");

    // lines: the most recent N.
    let last = w.ok("logcat", json!({"lines": 3}));
    assert_eq!(strip(&last["records"]), truth[truth.len() - 3..].to_vec());

    // The app's log: its pid from pidof (ground truth: the simulator's process table).
    let app = w.ok("logcat", json!({"packageName": SAMPLE}));
    assert_eq!(app["pid"], json!(pid));
    let want: Vec<Value> = truth.iter().filter(|l| l["pid"] == json!(pid)).cloned().collect();
    assert_eq!(strip(&app["records"]), want);

    // Tag and level filter on the device; grep here (case-insensitive by default).
    let tagged = w.ok("logcat", json!({"packageName": SAMPLE, "tag": "Probe", "level": "W"}));
    assert_eq!(strip(&tagged["records"]), vec![json!({"pid": pid, "tid": pid, "level": "W", "tag": "Probe", "message": "marker one"})]);
    let errors = w.ok("logcat", json!({"level": "error"}));
    let want: Vec<Value> = truth.iter().filter(|l| ["E", "F"].contains(&l["level"].as_str().unwrap())).cloned().collect();
    assert_eq!(strip(&errors["records"]), want);
    assert_eq!(w.ok("logcat", json!({"grep": "MARKER ONE"}))["count"], json!(1));
    assert_eq!(w.ok("logcat", json!({"grep": "MARKER ONE", "grepCaseSensitive": true}))["count"], json!(0));

    // Buffers: system_server's line is in `system`, the app's in `main`.
    let system = w.ok("logcat", json!({"deviceLogBuffers": "system"}));
    let want: Vec<Value> = truth.iter().filter(|l| l["pid"] == json!(1000)).cloned().collect();
    assert_eq!(strip(&system["records"]), want);
    let both = w.ok("logcat", json!({"deviceLogBuffers": ["system", "crash"]}));
    assert_eq!((strip(&both["records"]), both["buffers"].clone()), (want, json!(["system", "crash"])), "an array of buffers (JSON on the CLI)");

    // since: the device's own time of a record; everything at or after it.
    let since = app["records"].as_array().unwrap().last().unwrap()["time"].as_str().unwrap().to_string();
    let after = w.ok("logcat", json!({"since": since}));
    assert!(!after["records"].as_array().unwrap().is_empty());
    assert!(after["records"].as_array().unwrap().iter().all(|r| r["time"].as_str().unwrap() >= since.as_str()), "{after}");

    // Contradictions and a stopped app are refused before any read.
    let facts = w.fails("logcat", json!({"packageName": SAMPLE, "deviceLogScope": "device"}), "invalid_argument");
    assert_eq!(facts["field"], json!("deviceLogScope"));
    control(&w, &sim, json!({"op": "crash", "package": SAMPLE}));
    let facts = w.fails("logcat", json!({"packageName": SAMPLE}), "app_not_running");
    assert_eq!(facts["field"], json!("packageName"));
    // Without the pid filter the crash is in the device log (crash buffer, one record per line).
    let crash = w.ok("logcat", json!({"deviceLogBuffers": "crash"}));
    assert_eq!(crash["records"][0]["message"], json!("FATAL EXCEPTION: main"), "{crash}");
    assert_eq!(crash["records"][0]["pid"], json!(pid));
    sim.shutdown();
}

#[test]
fn android_logcat_follow_is_bounded_and_sees_new_lines() {
    let w = World::new();
    let mut sim = simulated(&w);
    control(&w, &sim, json!({"op": "logcat", "package": SAMPLE, "tag": "Before", "message": "old line"}));
    let seq = control(&w, &sim, json!({"op": "truth"}))["items"].as_array().and_then(|r| r.last()).map(|r| r["seq"].as_u64().unwrap()).unwrap_or(0);
    std::thread::scope(|s| {
        let follower = s.spawn(|| w.ok("logcat", json!({"follow": true, "durationSec": 4, "tag": "Probe"})));
        // Write the line once the device runs the follower's logcat (ground truth: the tool call).
        wait_for_follower(&w, &sim, seq);
        control(&w, &sim, json!({"op": "logcat", "package": SAMPLE, "tag": "Probe", "message": "during follow"}));
        let got = follower.join().unwrap();
        let messages: Vec<&str> = got["records"].as_array().unwrap().iter().map(|r| r["message"].as_str().unwrap()).collect();
        assert_eq!(messages, ["during follow"], "{got}");
        assert_eq!(got["follow"]["endedBy"], json!("window"), "{got}");
        assert_eq!(got["follow"]["requestedMs"], json!(4000));
    });
    // The window closed the stream: no logcat is left running on the device.
    let root = sim.devices[0].root.clone();
    let until = Instant::now() + Duration::from_secs(10);
    while logcats_in(&root) > 0 {
        assert!(Instant::now() < until, "a logcat outlived its follow window");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A window longer than the command's deadline ends before it, with time to reply.
    let got = w.ok("logcat", json!({"follow": true, "durationSec": 30, "timeoutMs": 2500, "lines": 1}));
    assert!(got["follow"]["windowMs"].as_u64().unwrap() <= 1500, "{got}");

    // The phone reboots during a follow: the stream breaks and the read fails (no
    // partial answer passes for a complete window), never dispatched.
    let seq = control(&w, &sim, json!({"op": "truth"}))["items"].as_array().and_then(|r| r.last()).map(|r| r["seq"].as_u64().unwrap()).unwrap_or(0);
    std::thread::scope(|s| {
        let follower = s.spawn(|| w.run("logcat", json!({"follow": true, "durationSec": 20})));
        wait_for_follower(&w, &sim, seq);
        control(&w, &sim, json!({"op": "reboot", "offlineMs": 1000}));
        let (body, run) = follower.join().unwrap();
        let facts = aab_e2e::error_facts(&body).clone();
        w.env.check(run.exit() != 0 && facts["error"] == json!("adb_command_failed") && facts["dispatched"] == json!(false), &run, "a reboot mid-follow fails the read");
    });
    sim.shutdown();
}

/// Wait until the device runs a following logcat (ground truth: the tool call after `seq`).
fn wait_for_follower(w: &World, sim: &aab_android_sim::Simulator, seq: u64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let truth = control(w, sim, json!({"op": "truth", "kind": "tool", "since": seq}));
        let started = truth["items"].as_array().unwrap().iter().any(|r| r["data"]["argv"][0] == json!("logcat") && !r["data"]["argv"].as_array().unwrap().contains(&json!("-d")));
        if started {
            return;
        }
        assert!(Instant::now() < until, "the follower never started logcat on the device");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes running the simulator's tool shim for `logcat` inside the device root.
fn logcats_in(root: &std::path::Path) -> usize {
    let root = std::fs::canonicalize(root).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| std::fs::read_link(e.path().join("root")).is_ok_and(|r| r == root))
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("logcat")))
        .count()
}

#[test]
fn android_keyboard_state_follows_focus_through_cli_and_mcp() {
    let w = World::new();
    let mut sim = simulated(&w);
    let hidden = w.ok("keyboard-state", json!({}));
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["keyboard"], json!(false));
    assert_eq!(hidden["shown"], json!(false), "{hidden}");
    assert_eq!(hidden["editor"], Value::Null);
    assert_eq!(hidden["inputMethodId"], json!("com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME"));

    // Focus the email field: the keyboard comes up for the app's editor.
    control(&w, &sim, json!({"op": "tap", "x": 500, "y": 470}));
    let app = app_state(&w, &sim, SAMPLE);
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["keyboard"], json!(true));
    assert_eq!(app["focused"], json!("email"));
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "keyboard-state", "arguments": {"serial": sim.devices[0].serial}, "extract": null}));
    assert!(!is_error, "{body}");
    let shown = &body["value"];
    assert_eq!(shown["shown"], json!(true), "{body}");
    assert_eq!(shown["client"]["pid"], app["pid"]);
    assert_eq!(shown["editor"]["packageName"], json!(SAMPLE));
    assert_eq!(shown["editor"]["hintText"], json!("Email"));
    assert_eq!((shown["editor"]["inputClass"].clone(), shown["editor"]["password"].clone()), (json!("text"), json!(false)));

    // The password field is a password editor; BACK hides the keyboard.
    control(&w, &sim, json!({"op": "tap", "x": 500, "y": 650}));
    let pw = w.ok("keyboard-state", json!({}));
    assert_eq!((pw["shown"].clone(), pw["editor"]["password"].clone(), pw["editor"]["hintText"].clone()), (json!(true), json!(true), json!("Password")), "{pw}");
    control(&w, &sim, json!({"op": "keyevent", "keyCode": 4}));
    assert_eq!(control(&w, &sim, json!({"op": "state"}))["keyboard"], json!(false));
    assert_eq!(w.ok("keyboard-state", json!({}))["shown"], json!(false));
    // A cut dump (simulator fault) is unavailable, never "hidden".
    control(&w, &sim, json!({"op": "faults", "set": {"dumpsysMalformed": 1}}));
    control(&w, &sim, json!({"op": "tap", "x": 500, "y": 470}));
    w.fails("keyboard-state", json!({}), "keyboard_state_unavailable");
    assert_eq!(w.ok("keyboard-state", json!({}))["shown"], json!(true));
    sim.shutdown();
}

#[test]
fn android_permission_state_reads_grants_and_app_ops() {
    let w = World::new();
    let mut sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    let perm = |p: &str| json!({"serial": serial, "packageName": SAMPLE, "permission": p});
    let truth = app_state(&w, &sim, SAMPLE);

    let camera = w.ok("permission-state", perm("android.permission.CAMERA"));
    assert_eq!((camera["kind"].clone(), camera["granted"].clone()), (json!("runtime"), truth["permissions"]["android.permission.CAMERA"].clone()), "{camera}");
    assert_eq!(camera["granted"], json!(false));
    assert_eq!((camera["userId"].clone(), camera["userIdSource"].clone()), (json!(0), json!("current-user")));
    assert_eq!(camera["appOp"]["mode"], truth["appops"]["CAMERA"], "{camera}");

    // A grant on the phone shows up on the next read (no cache).
    control(&w, &sim, json!({"op": "permission", "package": SAMPLE, "permission": "android.permission.CAMERA", "granted": true}));
    assert_eq!(app_state(&w, &sim, SAMPLE)["permissions"]["android.permission.CAMERA"], json!(true));
    let camera = w.ok("permission-state", perm("android.permission.CAMERA"));
    assert_eq!(camera["granted"], json!(true));
    assert!(camera["flags"].as_array().unwrap().contains(&json!("USER_SET")), "{camera}");

    let notif = w.ok("permission-state", perm("android.permission.POST_NOTIFICATIONS"));
    assert_eq!((notif["granted"].clone(), notif["appOp"]["op"].clone()), (json!(true), json!("POST_NOTIFICATION")));
    let internet = w.ok("permission-state", perm("android.permission.INTERNET"));
    assert_eq!((internet["kind"].clone(), internet["granted"].clone(), internet["appOp"].clone()), (json!("install"), json!(true), Value::Null));

    // Stable codes, each naming its argument.
    let facts = w.fails("permission-state", perm("android.permission.RECORD_AUDIO"), "permission_not_requested");
    assert_eq!(facts["field"], json!("permission"));
    let facts = w.fails("permission-state", json!({"serial": serial, "packageName": "com.nope.app", "permission": "android.permission.CAMERA"}), "package_not_found");
    assert_eq!(facts["field"], json!("packageName"));
    let mut other_user = perm("android.permission.CAMERA");
    other_user["userId"] = json!(7);
    let facts = w.fails("permission-state", other_user, "user_not_found");
    assert_eq!(facts["field"], json!("userId"));
    control(&w, &sim, json!({"op": "faults", "set": {"dumpsysMalformed": 1}}));
    w.fails("permission-state", perm("android.permission.CAMERA"), "permission_state_unavailable");
    sim.shutdown();
}

const PY_READS: &str = "def main(ctx):\n    p = ctx.call('permission-state', {'permission': 'android.permission.CAMERA'})\n    k = ctx.call('keyboard-state', {})\n    l = ctx.call('logcat', {'tag': 'Probe'})\n    for r in (p, k, l):\n        if not r['ok']:\n            raise RuntimeError(str(r['error']))\n    return {'granted': p['result']['granted'], 'shown': k['result']['shown'], 'pid': l['result']['pid'], 'messages': [x['message'] for x in l['result']['records']]}\n";

/// The three reads from a Script (Python) bound to the app: `app.read` and
/// `capture.read` are default permissions; without `capture.read` logcat is refused.
#[test]
fn android_device_reads_from_a_script() {
    let w = World::new();
    let mut sim = simulated(&w);
    control(&w, &sim, json!({"op": "logcat", "package": SAMPLE, "level": "I", "tag": "Probe", "message": "seen by the script"}));
    let truth = app_state(&w, &sim, SAMPLE);
    let target = json!({"platform": "android", "serial": sim.devices[0].serial, "packageName": SAMPLE});
    let run_script = |id: &str, extra: Value| {
        let mut spec = json!({"schemaVersion": "aab.code-script/v1", "language": "python", "source": PY_READS, "target": target});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        w.ok("script", json!({"operation": "start", "operationId": id, "script": spec.to_string()}));
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let v = w.ok("script", json!({"operation": "wait", "operationId": id, "waitMs": 5000}));
            if ["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()) {
                return v;
            }
            assert!(Instant::now() < until, "script {id} never ended: {v}");
        }
    };
    let v = run_script("reads", json!({}));
    assert_eq!(v["status"], json!("completed"), "{v}");
    let result = w.ok("script", json!({"operation": "result", "operationId": "reads"}))["result"].clone();
    assert_eq!(result, json!({"granted": truth["permissions"]["android.permission.CAMERA"], "shown": false, "pid": truth["pid"], "messages": ["seen by the script"]}));

    let v = run_script("no-capture", json!({"permissions": ["app.read"]}));
    assert_eq!(v["status"], json!("failed"), "{v}");
    assert!(v.to_string().contains("permission_not_granted"), "{v}");
    sim.shutdown();
}
