//! Executor instrumentation sessions through the real adb: a real test APK (aapt +
//! apksigner) declaring an `<instrumentation>` is installed, `pm list
//! instrumentation` lists it as Android prints it, `am instrument -w -r` runs it
//! as a long-lived shell, and the `aab.executor/v1` server on
//! `localabstract:aab-executor-<target>` answers through `adb forward`. Ground
//! truth: control `executors` (sessions, action records), truth `executor-action`
//! (each applied action once), control `actions`/`flutter` (the effects with the
//! action id), the app state, and the session journal in the target's files dir.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;

const TARGET: &str = "com.example.aab.sample";
const TEST_PKG: &str = "com.example.aab.sample.test";
const RUNNER: &str = "io.github.aab.executor.ExecutorRunner";

/// The test APK's bytes, built once per test binary (a keystore costs seconds).
fn test_apk() -> &'static [u8] {
    static APK: OnceLock<Vec<u8>> = OnceLock::new();
    APK.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ks = aab_android_sim::test_apk::keystore(dir.path(), "exec");
        let apk = aab_android_sim::test_apk::instrumentation_apk(dir.path(), TEST_PKG, &[(RUNNER, TARGET), (".Smoke", TARGET)], &ks);
        std::fs::read(apk).unwrap()
    })
}

fn install(env: &Env) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exec-test.apk");
    std::fs::write(&path, test_apk()).unwrap();
    let out = env.adb(&["-s", &env.serial(), "install", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Success"), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn uuid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A running `adb shell am instrument -w -r …` and the lines it printed; killed on drop.
struct Instrument {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Instrument {
    fn start(env: &Env, extras: &[(&str, &str)]) -> Instrument {
        let mut cmd = vec!["am".to_string(), "instrument".into(), "-w".into(), "-r".into()];
        for (k, v) in extras {
            cmd.extend(["-e".to_string(), k.to_string(), v.to_string()]);
        }
        cmd.push(format!("{TEST_PKG}/{RUNNER}"));
        let mut child = Command::new("adb")
            .arg("-P")
            .arg(env.adb_port.to_string())
            .args(["-s", &env.serial(), "shell"])
            .arg(cmd.join(" "))
            .env("HOME", env.home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(vec![]));
        let out = child.stdout.take().unwrap();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let i = Instrument { child, lines };
        i.wait_for("INSTRUMENTATION_STATUS_CODE: 1");
        i
    }

    fn wait_for(&self, line: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.lines.lock().unwrap().iter().any(|l| l == line) {
            assert!(Instant::now() < until, "never printed {line:?}: {:?}", self.lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn text(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Instrument {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The forward to the executor socket of the target.
fn forward(env: &Env) -> u16 {
    let out = env.adb(&["-s", &env.serial(), "forward", "tcp:0", &format!("localabstract:aab-executor-{TARGET}")]);
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// One request with the identity headers; None = the connection closed without a reply.
fn call(port: u16, id: Option<(&str, &str)>, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Value)> {
    raw(port, id, method, path, body.map(|b| b.to_string()).unwrap_or_default().as_bytes(), "")
}

fn raw(port: u16, id: Option<(&str, &str)>, method: &str, path: &str, body: &[u8], extra_head: &str) -> Option<(u16, Value)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n{extra_head}", body.len());
    if let Some((sid, ep)) = id {
        head.push_str(&format!("X-AAB-Executor-Session: {sid}\r\nX-AAB-Executor-Epoch: {ep}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
    let mut buf = vec![];
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

fn executors(env: &Env) -> Value {
    env.control(json!({ "op": "executors" }))
}

fn session<'a>(all: &'a Value, id: &str) -> &'a Value {
    all["sessions"].as_array().unwrap().iter().rev().find(|s| s["sessionId"] == json!(id)).unwrap_or_else(|| panic!("session {id} in {all}"))
}

/// The truth records of executor actions with this id (each applied action once).
fn applied(env: &Env, action_id: &str) -> usize {
    executors(env)["applied"].as_array().unwrap().iter().filter(|a| a["data"]["actionId"] == json!(action_id)).count()
}

fn node<'a>(snapshot: &'a Value, key: &str, value: &str) -> &'a Value {
    snapshot["nodes"].as_array().unwrap().iter().find(|n| n[key] == json!(value)).unwrap_or_else(|| panic!("no node {key}={value} in {snapshot}"))
}

fn app<'a>(state: &'a Value, package: &str) -> &'a Value {
    state["apps"].as_array().unwrap().iter().find(|a| a["package"] == json!(package)).unwrap()
}

fn journal(env: &Env, sid: &str, action_id: &str) -> Option<Value> {
    let out = env.sh(&format!("run-as {TARGET} sh -c 'cat files/aab-executor/{sid}/actions/$(printf %s {action_id} | sha256sum | cut -d\" \" -f1).json 2>/dev/null || true'"));
    serde_json::from_str(&out).ok()
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn native_session_observe_act_receipt_close_against_ground_truth() {
    let env = Env::start(1);
    install(&env);
    // Listed as PackageManagerShellCommand prints it (a relative name resolved against the package).
    let list = env.sh(&format!("pm list instrumentation {TARGET}"));
    assert_eq!(list, format!("instrumentation:{TEST_PKG}/.Smoke (target={TARGET})\ninstrumentation:{TEST_PKG}/{RUNNER} (target={TARGET})\n"));
    assert_eq!(env.sh("pm list instrumentation com.example.notes"), "");
    // A component that is not installed fails like AMS.
    let (out, err, code) = env.shell(&format!("am instrument -w -r {TEST_PKG}/.Missing"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("Error=Unable to find instrumentation info for: ComponentInfo{{{TEST_PKG}/{TEST_PKG}.Missing}}")), "{out}");
    assert!(err.contains("INSTRUMENTATION_FAILED"), "{err}");
    // Without executor extras the runner runs zero tests and finishes.
    let (out, _, code) = env.shell(&format!("am instrument -w -r {TEST_PKG}/.Smoke"));
    assert_eq!((code, out.contains("OK (0 tests)"), out.ends_with("INSTRUMENTATION_CODE: -1\n")), (0, true, true), "{out}");

    let (sid, epoch) = ("native-1", uuid());
    let pid_before = app(&env.state(), TARGET)["pid"].clone();
    let am = Instrument::start(&env, &[("aab.executor.session", sid), ("aab.executor.epoch", &epoch), ("activity", ".MainActivity")]);
    assert!(am.text().contains(&format!("INSTRUMENTATION_STATUS: aab.executor.socket=aab-executor-{TARGET}")), "{:?}", am.text());
    let st = env.state();
    assert_ne!(app(&st, TARGET)["pid"], pid_before, "AMS restarted the target for the instrumentation");
    assert_eq!((st["foreground"].clone(), app(&st, TARGET)["screen"].clone()), (json!(TARGET), json!("login")));
    let port = forward(&env);
    let id = Some((sid, epoch.as_str()));

    // Identity binding.
    let (code, public) = call(port, None, "GET", "/v1/executor/status", None).unwrap();
    assert_eq!((code, public["active"].clone(), public.get("sessionId")), (200, json!(true), None), "{public}");
    assert_eq!(call(port, Some((sid, &uuid())), "GET", "/v1/executor/observe", None).unwrap().1["error"], json!("android_executor_identity_mismatch"));
    let (code, _) = raw(port, None, "GET", "/v1/executor/observe", b"", "").unwrap();
    assert_eq!(code, 401);
    let (_, status) = call(port, id, "GET", "/v1/executor/status", None).unwrap();
    assert_eq!((status["sessionId"].as_str(), status["engine"].as_str(), status["leaseMs"].as_u64()), (Some(sid), Some("native"), Some(60_000)), "{status}");

    // Limits: an oversized body and an oversized head are refused unread; bad JSON is a rejection.
    let big = vec![b'x'; 300 * 1024];
    assert_eq!(raw(port, id, "POST", "/v1/executor/act", &big, "").unwrap().0, 413);
    assert_eq!(raw(port, id, "GET", "/v1/executor/status", b"", &format!("X-Pad: {}\r\n", "p".repeat(20 * 1024))).unwrap().0, 431);
    let (_, bad) = raw(port, id, "POST", "/v1/executor/act", b"{nope", "").unwrap();
    assert_eq!((bad["error"].clone(), bad["dispatched"].clone()), (json!("invalid_json"), json!(false)));

    // observe → input → (stale) → tap.
    let (_, s1) = call(port, id, "GET", "/v1/executor/observe", None).unwrap();
    assert_eq!((s1["snapshotId"].as_str(), s1["screen"].as_str()), (Some("s1"), Some("login")), "{s1}");
    let email = node(&s1, "resourceName", &format!("{TARGET}:id/email"));
    let typed = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-input", "snapshotId": "s1", "action": {"type": "input", "targetRef": email["targetRef"], "text": "ann@example.com"}}))).unwrap().1;
    assert_eq!((typed["ok"].clone(), typed["settled"].clone(), typed["execution"]["schemaVersion"].clone()), (json!(true), json!(true), json!("aab.executor-execution/v1")), "{typed}");
    assert_eq!(app(&env.state(), TARGET)["values"]["email"], json!("ann@example.com"), "ground truth: the value is typed");
    // The input focused the field and showed the keyboard: the snapshot no longer matches.
    let sign_in = node(&s1, "text", "Sign in")["targetRef"].clone();
    let refused = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-stale", "snapshotId": "s1", "action": {"type": "tap", "targetRef": sign_in}}))).unwrap().1;
    assert_eq!(refused, json!({"ok": false, "error": "reobserve_required", "message": refused["message"], "dispatched": false, "ambiguous": false, "field": "snapshotId"}));
    assert_eq!(applied(&env, "a-stale"), 0);
    let (_, s2) = call(port, id, "GET", "/v1/executor/observe", None).unwrap();
    let older = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-old", "snapshotId": "s1", "action": {"type": "back"}}))).unwrap().1;
    assert_eq!(older["error"], json!("reobserve_required"), "only the latest snapshot binds");
    let create = node(&s2, "text", "Create account")["targetRef"].clone();
    let tap = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-tap", "snapshotId": s2["snapshotId"], "action": {"type": "tap", "targetRef": create}}))).unwrap().1;
    assert_eq!((tap["ok"].clone(), tap["actionId"].clone(), tap["runtimeEpoch"].clone()), (json!(true), json!("a-tap"), json!(epoch)), "{tap}");
    assert_eq!(app(&env.state(), TARGET)["screen"], json!("signup"), "ground truth: the tap opened sign-up");
    let taps: Vec<Value> = env.control(json!({"op": "actions"}))["actions"].as_array().unwrap().iter().filter(|a| a["actionId"] == json!("a-tap")).cloned().collect();
    assert_eq!((taps.len(), taps[0]["kind"].clone()), (1, json!("tap")), "{taps:?}");
    assert_eq!((applied(&env, "a-input"), applied(&env, "a-tap")), (1, 1));
    // The same id again is refused; the receipt stays readable.
    let (_, s3) = call(port, id, "GET", "/v1/executor/observe", None).unwrap();
    let again = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-tap", "snapshotId": s3["snapshotId"], "action": {"type": "back"}}))).unwrap().1;
    assert_eq!((again["error"].clone(), again["dispatched"].clone()), (json!("android_executor_action_id_reused"), json!(false)));
    let (_, r) = call(port, id, "GET", "/v1/executor/receipt?actionId=a-tap", None).unwrap();
    assert_eq!((r["settled"].clone(), r["receipt"]["ok"].clone()), (json!(true), json!(true)), "{r}");

    // A lost reply: the effect happened once, the journal and the receipt route settle it.
    env.control(json!({"op": "faults", "set": {"executorDropReplies": 1}}));
    let back_snapshot = s3["snapshotId"].clone();
    assert!(call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-lost", "snapshotId": back_snapshot, "action": {"type": "back"}}))).is_none(), "the reply is lost");
    assert_eq!(applied(&env, "a-lost"), 1);
    assert_eq!(app(&env.state(), TARGET)["screen"], json!("login"), "ground truth: back happened");
    let (_, r) = call(port, id, "GET", "/v1/executor/receipt?actionId=a-lost", None).unwrap();
    assert_eq!((r["settled"].clone(), r["receipt"]["type"].clone()), (json!(true), json!("back")), "{r}");
    let j = journal(&env, sid, "a-lost").expect("the journal record");
    assert_eq!((j["schemaVersion"].clone(), j["phase"].clone(), j["receipt"]["ok"].clone()), (json!("aab.executor.record/v1"), json!("settled"), json!(true)));

    // Busy: a slow action holds the one slot.
    env.control(json!({"op": "faults", "set": {"executorActionDelayMs": 1500}}));
    let (_, s4) = call(port, id, "GET", "/v1/executor/observe", None).unwrap();
    let title = node(&s4, "text", "Create account")["targetRef"].clone();
    let snap = s4["snapshotId"].clone();
    let slow = {
        let (sid, epoch, snap, title) = (sid.to_string(), epoch.clone(), snap.clone(), title.clone());
        std::thread::spawn(move || call(port, Some((&sid, &epoch)), "POST", "/v1/executor/act", Some(&json!({"actionId": "a-slow", "snapshotId": snap, "action": {"type": "longPress", "targetRef": title}}))))
    };
    until("the slow action to hold the slot", || session(&executors(&env), sid)["activeActionId"] == json!("a-slow"));
    let busy = call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "a-busy", "snapshotId": snap, "action": {"type": "back"}}))).unwrap().1;
    assert_eq!((busy["error"].clone(), busy["dispatched"].clone()), (json!("android_executor_action_busy"), json!(false)));
    let closing = call(port, id, "POST", "/v1/executor/close", Some(&json!({}))).unwrap().1;
    assert_eq!(closing["error"], json!("android_executor_action_busy"), "close waits for no action");
    assert_eq!(slow.join().unwrap().unwrap().1["ok"], json!(true));
    assert_eq!((applied(&env, "a-slow"), applied(&env, "a-busy")), (1, 0));
    env.control(json!({"op": "faults", "reset": true}));

    // Close: the instrumentation finishes, AMS kills its target.
    let closed = call(port, id, "POST", "/v1/executor/close", Some(&json!({}))).unwrap().1;
    assert_eq!(closed["closed"], json!(true), "{closed}");
    am.wait_for("INSTRUMENTATION_CODE: -1");
    assert!(am.text().contains(&"INSTRUMENTATION_RESULT: aab.executor.end=closed".to_string()), "{:?}", am.text());
    let all = executors(&env);
    assert_eq!((session(&all, sid)["state"].clone(), session(&all, sid)["endReason"].clone()), (json!("ended"), json!("closed")));
    assert_eq!(app(&env.state(), TARGET)["pid"], Value::Null, "finished inst: the target process is gone");
    assert!(call(port, id, "GET", "/v1/executor/status", None).is_none(), "the socket is gone");
    let file = env.sh(&format!("run-as {TARGET} cat files/aab-executor/{sid}/session.json"));
    assert_eq!(serde_json::from_str::<Value>(&file).unwrap()["state"], json!("closed"));
}

#[test]
fn a_death_mid_action_stays_unresolved_and_a_lease_expires() {
    let env = Env::start(1);
    install(&env);
    let (sid, epoch) = ("crash-1", uuid());
    let am = Instrument::start(&env, &[("aab.executor.session", sid), ("aab.executor.epoch", &epoch)]);
    let port = forward(&env);
    let id = Some((sid, epoch.as_str()));
    let (_, s1) = call(port, id, "GET", "/v1/executor/observe", None).unwrap();
    let create = node(&s1, "text", "Create account")["targetRef"].clone();
    env.control(json!({"op": "faults", "set": {"executorCrashMidAction": 1}}));
    assert!(call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": "c-1", "snapshotId": "s1", "action": {"type": "tap", "targetRef": create}}))).is_none(), "no reply from a dead process");
    am.wait_for("INSTRUMENTATION_CODE: 0");
    assert!(am.text().contains(&"INSTRUMENTATION_RESULT: shortMsg=Process crashed.".to_string()), "{:?}", am.text());
    assert_eq!(applied(&env, "c-1"), 0, "ground truth: never applied");
    let all = executors(&env);
    assert_eq!(session(&all, sid)["endReason"], json!("process_died"));
    assert_eq!(session(&all, sid)["actions"][0]["phase"], json!("admitted"), "unresolved, never retried");
    assert_eq!(journal(&env, sid, "c-1").unwrap()["phase"], json!("admitted"));
    assert_eq!(app(&env.state(), TARGET)["pid"], Value::Null, "the process is gone");

    // A 1 s lease with no call ends the session.
    let (sid, epoch) = ("lease-1", uuid());
    let am = Instrument::start(&env, &[("aab.executor.session", sid), ("aab.executor.epoch", &epoch), ("aab.executor.leaseMs", "1000")]);
    am.wait_for("INSTRUMENTATION_RESULT: aab.executor.end=lease_expired");
    assert_eq!(session(&executors(&env), sid)["endReason"], json!("lease_expired"));
    let port = forward(&env);
    assert!(call(port, Some((sid, &epoch)), "GET", "/v1/executor/status", None).is_none());
    let file = env.sh(&format!("run-as {TARGET} cat files/aab-executor/{sid}/session.json"));
    assert_eq!(serde_json::from_str::<Value>(&file).unwrap()["state"], json!("expired"));
}

#[test]
fn a_flutter_session_runs_the_flutter_action_set() {
    let env = Env::start(1);
    install(&env);
    let (sid, epoch) = ("flutter-1", uuid());
    let _am = Instrument::start(&env, &[("aab.executor.session", sid), ("aab.executor.epoch", &epoch), ("aab.executor.engine", "flutter"), ("activity", "io.flutter.embedding.android.FlutterActivity")]);
    let port = forward(&env);
    let id = Some((sid, epoch.as_str()));
    let observe = || call(port, id, "GET", "/v1/executor/observe", None).unwrap().1;
    let act = |action_id: &str, snap: &Value, action: Value| call(port, id, "POST", "/v1/executor/act", Some(&json!({"actionId": action_id, "snapshotId": snap["snapshotId"], "action": action}))).unwrap().1;
    let flutter = || env.control(json!({"op": "flutter", "package": TARGET}));
    let effects = |kind: &str, action_id: &str| flutter()["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == json!(kind) && e["data"]["actionId"] == json!(action_id)).count();

    let s = observe();
    assert_eq!((s["engine"].clone(), s["flutter"]["route"].clone()), (json!("flutter"), json!("/")), "{s}");
    let native = act("f-native", &s, json!({"type": "back"}));
    assert_eq!((native["error"].clone(), native["field"].clone()), (json!("android_executor_action_unsupported"), json!("action.type")));
    let r = act("f-tap", &s, json!({"type": "tap", "targetRef": node(&s, "text", "Add to cart")["targetRef"]}));
    assert_eq!((r["ok"].clone(), r["type"].clone()), (json!(true), json!("tap")), "{r}");
    assert_eq!(effects("flutter-tap", "f-tap"), 1);
    let s = observe();
    let coupon = act("f-coupon", &s, json!({"type": "enterText", "targetRef": node(&s, "label", "Coupon")["targetRef"], "text": "X"}));
    assert_eq!((coupon["error"].clone(), coupon["dispatched"].clone()), (json!("flutter_input_not_editable"), json!(false)), "the Dart side refuses before admission");
    let r = act("f-text", &s, json!({"type": "enterText", "targetRef": node(&s, "label", "Search")["targetRef"], "text": "red shoes"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(flutter()["engine"]["values"]["search"], json!("red shoes"));
    let s = observe();
    let r = act("f-press", &s, json!({"type": "longPress", "targetRef": node(&s, "text", "Product 1")["targetRef"]}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(effects("flutter-long-press", "f-press"), 1);
    let s = observe();
    let r = act("f-drag", &s, json!({"type": "drag", "targetRef": node(&s, "text", "Product 2")["targetRef"], "dx": 0, "dy": -100}));
    assert_eq!(flutter()["engine"]["scroll"]["products"], json!(100.0), "{r}");
    let s = observe();
    let r = act("f-fling", &s, json!({"type": "fling", "targetRef": node(&s, "text", "Product 3")["targetRef"], "dx": 0, "dy": -100}));
    assert_eq!(flutter()["engine"]["scroll"]["products"], json!(400.0), "{r}");
    let s = observe();
    let far = node(&s, "text", "Product 35");
    assert_eq!(far["visible"], json!(false));
    let r = act("f-visible", &s, json!({"type": "ensureVisible", "targetRef": far["targetRef"]}));
    assert_eq!((r["ok"].clone(), r["alreadyVisible"].clone()), (json!(true), json!(false)), "{r}");
    assert_eq!(node(&observe(), "text", "Product 35")["visible"], json!(true), "ground truth: in view");
    let s = observe();
    let r = act("f-pump", &s, json!({"type": "pump", "durationMs": 20}));
    assert_eq!(r["pumpedMs"], json!(20));
    let r = act("f-browse", &s, json!({"type": "tap", "targetRef": node(&s, "text", "Browse catalog")["targetRef"]}));
    assert_eq!(r["ok"], json!(true), "the pump changed nothing: the snapshot still binds");
    assert_eq!(flutter()["engine"]["route"], json!("catalog"));
    let s = observe();
    let r = act("f-back", &s, json!({"type": "pageBack"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(flutter()["engine"]["route"], json!("/"));
    for a in ["f-tap", "f-text", "f-press", "f-drag", "f-fling", "f-visible", "f-pump", "f-browse", "f-back"] {
        assert_eq!(applied(&env, a), 1, "{a} applied once");
    }
    assert_eq!((applied(&env, "f-native"), applied(&env, "f-coupon")), (0, 0));
}
