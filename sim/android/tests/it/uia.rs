//! The on-device UIA runtime (aab-protocols §3) deployed and driven the way
//! the host does it: `adb push` of a jar, `setsid nohup app_process …` through
//! `adb shell`, the descriptor read with `adb shell cat`, `adb forward` to its
//! localabstract socket, raw HTTP requests; effects checked against the truth.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::Env;

const ROOT: &str = "/data/local/tmp/ai-app-bridge-uia-test-it";
const MAIN: &str = "io.github.mobileaidev.aiappbridge.uia.UiaRuntime";
const PKG: &str = "com.example.aab.sample";

fn sha(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Pushes a generated jar to `<root>/runtime-<sha>.jar`; returns (device path, sha256).
fn push_jar(env: &Env) -> (String, String) {
    let mut bytes = vec![0u8; 4096];
    getrandom::fill(&mut bytes).unwrap();
    let digest = sha(&bytes);
    let local = env.home.path().join("uia.jar");
    std::fs::write(&local, &bytes).unwrap();
    env.sh(&format!("mkdir -p {ROOT} && chmod 700 {ROOT}"));
    let remote = format!("{ROOT}/runtime-{digest}.jar");
    let out = env.adb(&["-s", &env.serial(), "push", local.to_str().unwrap(), &remote]);
    assert!(out.status.success(), "push: {}", String::from_utf8_lossy(&out.stderr));
    (remote, digest)
}

/// The one-shot / foreground form: (stdout, stderr, exit code).
fn app_process(env: &Env, jar: &str, args: &str) -> (String, String, i32) {
    env.shell(&format!("CLASSPATH={jar} app_process /system/bin {args}"))
}

fn descriptor_text(env: &Env) -> String {
    env.sh(&format!("sh -c 'if [ -f {ROOT}/runtime.json ]; then cat {ROOT}/runtime.json; else printf %s null; fi'"))
}

/// Starts the runtime like the host (background, log in startup.log) and waits for a descriptor of a new epoch.
fn start(env: &Env, jar: &str, digest: &str, old_epoch: Option<&str>) -> Value {
    env.sh(&format!("CLASSPATH={jar} setsid nohup app_process /system/bin {MAIN} {ROOT} {digest} > {ROOT}/startup.log 2>&1 </dev/null &"));
    wait_descriptor(env, old_epoch)
}

fn wait_descriptor(env: &Env, old_epoch: Option<&str>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d: Value = serde_json::from_str(&descriptor_text(env)).unwrap_or(Value::Null);
        if d["running"] == true && d["runtimeEpoch"].as_str() != old_epoch {
            return d;
        }
        assert!(Instant::now() < deadline, "no runtime descriptor: {d}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn forward(env: &Env, d: &Value) -> u16 {
    let out = env.adb(&["-s", &env.serial(), "forward", "tcp:0", &format!("localabstract:{}", d["socketName"].as_str().unwrap())]);
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("allocated port")
}

/// Raw bytes to the forwarded port: (status, JSON body), status 0 when no reply came.
fn raw(port: u16, bytes: &[u8]) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = vec![];
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return (0, Value::Null) };
    assert!(head.contains("Content-Type: application/json; charset=utf-8"), "{head}");
    (head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(port: u16, token: Option<&str>, body: &str) -> (u16, Value) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw(port, format!("POST /v1 HTTP/1.1\r\nHost: localhost\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes())
}

struct Rt {
    d: Value,
    port: u16,
}

impl Rt {
    fn op(&self, body: Value) -> Value {
        let (status, v) = post(self.port, self.d["token"].as_str(), &body.to_string());
        assert_eq!(status, 200, "{body} → {v}");
        v
    }
    fn epoch(&self) -> &str {
        self.d["runtimeEpoch"].as_str().unwrap()
    }
    fn observe(&self) -> Value {
        let v = self.op(json!({ "op": "observe" }));
        assert_eq!(v["ok"], true, "{v}");
        v
    }
    fn request(&self, action_id: &str, snap: &Value, node_ref: &str, selector: Value, policy: &str) -> (String, String) {
        let r = json!({ "schemaVersion": "aab.uia.execution.v1", "bootId": self.d["bootId"], "runtimeEpoch": self.d["runtimeEpoch"], "actionId": action_id, "timeoutMs": 10000,
            "target": { "snapshotId": snap["snapshotId"], "ref": node_ref, "selector": selector }, "clickPolicy": policy })
        .to_string();
        let s = sha(r.as_bytes());
        (r, s)
    }
    fn act(&self, op: &str, req: &(String, String)) -> Value {
        self.op(json!({ "op": op, "requestJson": req.0, "requestSha256": req.1 }))
    }
    /// Polls `query` every 25 ms until the action is terminal.
    fn settle(&self, req: &(String, String)) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.act("query", req);
            if v["phase"] == "terminal" {
                return v;
            }
            assert_eq!((v["ok"].as_bool(), v["error"].as_str(), v["ambiguous"].as_bool()), (Some(false), Some("uia_action_pending"), Some(true)), "{v}");
            assert!(Instant::now() < deadline, "never settled: {v}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

fn launch(env: &Env) -> (String, String, Rt) {
    let (jar, digest) = push_jar(env);
    let d = start(env, &jar, &digest, None);
    let port = forward(env, &d);
    (jar, digest, Rt { d, port })
}

/// The `aab-ref` of the first node whose attribute `attr` is `value` in a snapshot's XML.
fn ref_of(xml: &str, attr: &str, value: &str) -> String {
    let needle = format!("{attr}=\"{value}\"");
    let node = xml.split("<node ").find(|n| n.split('>').next().unwrap_or("").contains(&needle)).unwrap_or_else(|| panic!("no node with {needle} in {xml}"));
    node.split("aab-ref=\"").nth(1).unwrap().split('"').next().unwrap().to_string()
}

fn receipt(v: &Value) -> Value {
    let t = v["receiptJson"].as_str().expect("terminal envelope has receiptJson");
    assert_eq!(v["receiptSha256"].as_str().unwrap(), sha(t.as_bytes()), "receiptSha256 is the sha256 of receiptJson");
    serde_json::from_str(t).unwrap()
}

fn journal(env: &Env, epoch: &str, action_id: &str) -> Value {
    serde_json::from_str(&env.sh(&format!("cat {ROOT}/sessions/{epoch}/actions/{}.json", sha(action_id.as_bytes())))).unwrap()
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && s.split('-').map(str::len).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
}

fn show_dialog(env: &Env) {
    let v = env.control(json!({ "op": "system-dialog", "package": "com.android.permissioncontroller", "title": "Allow AAB Sample to access this device's location?",
        "buttons": [
            { "text": "While using the app", "resourceId": "permission_allow_foreground_only_button", "permission": { "package": PKG, "permission": "android.permission.ACCESS_FINE_LOCATION", "granted": true } },
            { "text": "Don't allow", "resourceId": "permission_deny_button" }
        ] }));
    assert_eq!(v["ok"], true, "{v}");
}

#[test]
fn deploy_hash_check_owner_lock_and_transport() {
    let env = Env::start(1);
    let (jar, digest) = push_jar(&env);
    // A wrong hash: refused, nothing starts.
    let (_, err, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {}", "0".repeat(64)));
    assert_eq!(code, 2, "{err}");
    let e: Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!((e["ok"].as_bool(), e["error"].as_str()), (Some(false), Some("uia_runtime_artifact_mismatch")));
    assert_eq!(descriptor_text(&env), "null");
    assert!(env.truth("uia-runtime-start").is_empty());
    // Unknown main class: a Java-like error, exit 1.
    let (_, err, code) = app_process(&env, &jar, &format!("com.example.Nope {ROOT} {digest}"));
    assert_eq!(code, 1);
    assert!(err.contains("java.lang.ClassNotFoundException") && err.contains("com.example.Nope"), "{err}");
    let (out, _, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} owner-status"));
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap(), json!({ "ok": true, "schemaVersion": "aab.uia.owner.v1", "root": ROOT, "dexSha256": digest, "owned": false }));

    let d = start(&env, &jar, &digest, None);
    let epoch = d["runtimeEpoch"].as_str().unwrap().to_string();
    assert!(is_uuid(&epoch) && is_uuid(d["bootId"].as_str().unwrap()), "{d}");
    assert_eq!(d["bootId"], env.state()["bootId"]);
    assert_eq!((d["schemaVersion"].as_str(), d["dexSha256"].as_str()), (Some("aab.uia.runtime.v1"), Some(digest.as_str())));
    assert_eq!(d["apiLevel"].to_string(), env.sh("getprop ro.build.version.sdk").trim());
    assert_eq!(d["socketName"].as_str().unwrap(), format!("aab-uia-{epoch}"));
    let token = d["token"].as_str().unwrap();
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(d["sessionPath"].as_str().unwrap(), format!("{ROOT}/sessions/{epoch}"));
    let session: Value = serde_json::from_str(&env.sh(&format!("cat {ROOT}/sessions/{epoch}/runtime.json"))).unwrap();
    assert_eq!(session, d);
    let pid = d["pid"].as_u64().unwrap();
    assert!(env.sh("ps -A").lines().any(|l| l.contains("app_process") && l.split_whitespace().nth(1) == Some(pid.to_string().as_str())));
    assert!(env.sh("cat /proc/net/unix").contains(&format!("@aab-uia-{epoch}")));
    assert!(env.sh(&format!("cat {ROOT}/startup.log")).contains("uia_runtime_started"));
    env.sh(&format!("test -f {ROOT}/owner.lock"));
    let (out, _, _) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} owner-status"));
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap()["owned"], true);
    // A second start while one runs: the owner lock refuses it.
    let (_, err, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest}"));
    assert_eq!(code, 2);
    assert_eq!(serde_json::from_str::<Value>(err.trim()).unwrap()["error"], "uia_runtime_already_running");
    assert_eq!(wait_descriptor(&env, None)["runtimeEpoch"], epoch.as_str());
    assert_eq!(env.truth("uia-runtime-start").len(), 1);

    let port = forward(&env, &d);
    let list = String::from_utf8_lossy(&env.adb(&["-s", &env.serial(), "forward", "--list"]).stdout).into_owned();
    assert!(list.contains(&format!("tcp:{port} localabstract:aab-uia-{epoch}")), "{list}");
    let status = r#"{"op":"status"}"#;
    assert_eq!(post(port, None, status), (401, json!({ "ok": false, "error": "uia_unauthorized", "message": "missing or wrong bearer token" })));
    assert_eq!(post(port, Some(&"0".repeat(64)), status).0, 401);
    let auth = format!("Authorization: Bearer {token}\r\n");
    for bad in [
        format!("GET /v1 HTTP/1.1\r\n{auth}Content-Length: 15\r\n\r\n{status}"),
        format!("POST /v1/ HTTP/1.1\r\n{auth}Content-Length: 15\r\n\r\n{status}"),
        format!("POST /v1 HTTP/1.0\r\n{auth}Content-Length: 15\r\n\r\n{status}"),
        format!("POST /v1 HTTP/1.1\r\n{auth}\r\n{status}"),
        format!("POST /v1 HTTP/1.1\r\n{auth}Content-Length: 0\r\n\r\n"),
        format!("POST /v1 HTTP/1.1\r\n{auth}Content-Length: 15\r\nTransfer-Encoding: chunked\r\n\r\n{status}"),
        format!("POST /v1 HTTP/1.1\r\n{auth}Content-Length: 15\r\nExpect: 100-continue\r\n\r\n{status}"),
        format!("POST /v1 HTTP/1.1\r\n{auth}Content-Length: 15\r\nContent-Length: 15\r\n\r\n{status}"),
        format!("POST /v1 HTTP/1.1\r\n{auth}Content-Length: 8\r\n\r\nnot json"),
    ] {
        let (code, v) = raw(port, bad.as_bytes());
        assert_eq!((code, v["error"].as_str()), (400, Some("uia_protocol_error")), "{bad:?} → {v}");
    }
    let (code, v) = raw(port, format!("POST /v1 HTTP/1.1\r\n{auth}X-Big: {}\r\nContent-Length: 15\r\n\r\n{status}", "a".repeat(20000)).as_bytes());
    assert_eq!((code, v["error"].as_str()), (400, Some("uia_protocol_error")));
    let rt = Rt { d: d.clone(), port };
    assert_eq!(post(port, Some(token), r#"{"op":"nope"}"#).1["error"], "uia_unknown_op");
    let st = rt.op(json!({ "op": "status" }));
    assert_eq!(st, json!({ "ok": true, "schemaVersion": "aab.uia.execution.v1", "bootId": d["bootId"], "runtimeEpoch": epoch, "dexSha256": digest, "capacity": 256, "count": 0, "pending": 0, "acknowledged": 0, "closing": false, "activeActionId": null }));
    // Fault: the next reply is lost after the op ran.
    env.control(json!({ "op": "faults", "set": { "uiaDropReplies": 1 } }));
    assert_eq!(post(port, Some(token), status).0, 0);
    assert_eq!(rt.op(json!({ "op": "status" }))["ok"], true);

    // Stop: the descriptor says running:false, the lock and the socket are gone, a new start gets a new epoch.
    assert_eq!(rt.op(json!({ "op": "stop" })), json!({ "ok": true, "runtimeEpoch": epoch, "stopping": true }));
    let after: Value = serde_json::from_str(&descriptor_text(&env)).unwrap();
    assert_eq!((after["running"].as_bool(), after["runtimeEpoch"].as_str()), (Some(false), Some(epoch.as_str())));
    assert!(!env.sh("cat /proc/net/unix").contains(&format!("@aab-uia-{epoch}")));
    assert_eq!(post(port, Some(token), status).0, 0, "nothing listens on the old socket");
    let (out, _, _) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} owner-status"));
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap()["owned"], false);
    let d2 = start(&env, &jar, &digest, Some(&epoch));
    assert_ne!(d2["runtimeEpoch"], epoch.as_str());
    assert_eq!(env.truth("uia-runtime-stop")[0]["data"]["reason"], "stop");
}

#[test]
fn system_dialog_click_prepare_start_query_acknowledge() {
    let env = Env::start(1);
    let (_jar, _digest, rt) = launch(&env);
    show_dialog(&env);
    let (dump, _, _) = env.shell("uiautomator dump /dev/tty");
    assert!(dump.contains("com.android.permissioncontroller:id/permission_allow_foreground_only_button") && !dump.contains("Sign in"), "{dump}");

    let snap = rt.observe();
    assert_eq!((snap["schemaVersion"].as_str(), snap["runtimeEpoch"].as_str(), snap["bootId"].clone()), (Some("aab.uia.snapshot.v1"), Some(rt.epoch()), rt.d["bootId"].clone()));
    assert_eq!(snap["window"]["type"], "system");
    assert_eq!((snap["window"]["focused"].as_bool(), snap["window"]["displayId"].as_i64()), (Some(true), Some(0)));
    assert_eq!(snap["window"]["title"], "Allow AAB Sample to access this device's location?");
    assert_eq!(snap["expiresAtElapsedMs"].as_u64().unwrap() - snap["createdAtElapsedMs"].as_u64().unwrap(), 60000);
    let xml = snap["xml"].as_str().unwrap();
    assert!(xml.contains(&format!("<hierarchy aab-schema=\"aab.uia.snapshot.v1\" aab-boot-id=\"{}\" aab-runtime-epoch=\"{}\" aab-snapshot-id=\"{}\">", rt.d["bootId"].as_str().unwrap(), rt.epoch(), snap["snapshotId"].as_str().unwrap())), "{xml}");
    assert_eq!(snap["nodeCount"], 4, "frame, title, two buttons: {xml}");
    assert!(!xml.contains("com.example.aab.sample"), "only the focused window is read: {xml}");
    let allow = ref_of(xml, "resource-id", "com.android.permissioncontroller:id/permission_allow_foreground_only_button");
    assert!(is_uuid(&allow));
    assert!(xml.contains(&format!("aab-ref=\"{allow}\" package=\"com.android.permissioncontroller\" class=\"android.widget.Button\" text=\"While using the app\" content-desc=\"\" resource-id=\"com.android.permissioncontroller:id/permission_allow_foreground_only_button\"")), "{xml}");

    // The click is slow after admission: query sees `admitted` first.
    env.control(json!({ "op": "faults", "set": { "uiaClickDelayMs": 400 } }));
    let req = rt.request("act-allow-1", &snap, &allow, json!({ "kind": "text", "value": "While using the app", "exact": true, "packageName": "com.android.permissioncontroller" }), "exact_node");
    let p = rt.act("prepare", &req);
    assert_eq!((p["phase"].as_str(), p["settled"].as_bool(), p["ok"].as_bool(), p["error"].as_str(), p["ambiguous"].as_bool()), (Some("prepared"), Some(false), Some(false), Some("uia_action_pending"), Some(true)), "{p}");
    assert!(p["dispatched"].is_null() && p["requestSha256"] == req.1.as_str());
    let j = journal(&env, rt.epoch(), "act-allow-1");
    assert_eq!((j["schemaVersion"].as_str(), j["phase"].as_str(), j["requestJson"].as_str(), j["acknowledged"].as_bool()), (Some("aab.uia.record.v2"), Some("prepared"), Some(req.0.as_str()), Some(false)));
    assert!(env.truth("uia-tap").is_empty(), "prepare does not click");
    let s = rt.act("start", &req);
    assert_eq!(s["phase"], "admitted", "{s}");
    assert_eq!(rt.act("query", &req)["phase"], "admitted");
    assert_eq!(rt.op(json!({ "op": "status" }))["activeActionId"], "act-allow-1");
    assert_eq!(rt.op(json!({ "op": "stop" }))["error"], "uia_runtime_has_pending_actions");
    assert_eq!(rt.act("cancel", &req)["phase"], "admitted", "an admitted click is not cancelled");
    let t = rt.settle(&req);
    let r = receipt(&t);
    assert_eq!((t["ok"].as_bool(), t["dispatched"].as_bool(), t["ambiguous"].as_bool(), t["settled"].as_bool(), t["acknowledged"].as_bool()), (Some(true), Some(true), Some(false), Some(true), Some(false)));
    assert_eq!((r["completion"].as_str(), r["ok"].as_bool(), r["dispatched"].as_bool(), r["settled"].as_bool(), r["ambiguous"].as_bool()), (Some("original_callback"), Some(true), Some(true), Some(true), Some(false)));
    assert_eq!((r["actionId"].as_str(), r["requestSha256"].as_str(), r["runtimeEpoch"].as_str()), (Some("act-allow-1"), Some(req.1.as_str()), Some(rt.epoch())));
    assert_eq!(r["callback"]["handled"], true);
    assert_eq!(r["callback"]["interactionId"], j["interactionId"]);
    let b = &r["binding"];
    assert_eq!((b["ref"].as_str(), b["clickPolicy"].as_str(), b["identityStrength"].as_str()), (Some(allow.as_str()), Some("exact_node"), Some("same_connection_node_and_reobserved_attributes")));
    assert_eq!(b["window"], snap["window"]);
    assert_eq!(b["actionTarget"]["resourceName"], "com.android.permissioncontroller:id/permission_allow_foreground_only_button");
    assert_eq!(b["target"], b["actionTarget"]);
    // Ground truth: one click, the dialog answered, the permission granted.
    let taps = env.truth("uia-tap");
    assert_eq!(taps.len(), 1);
    assert_eq!((taps[0]["data"]["actionId"].as_str(), taps[0]["data"]["package"].as_str(), taps[0]["data"]["text"].as_str(), taps[0]["data"]["ref"].as_str()), (Some("act-allow-1"), Some("com.android.permissioncontroller"), Some("While using the app"), Some(allow.as_str())));
    let answers = env.truth("system-dialog-answer");
    assert_eq!(answers.len(), 1);
    assert_eq!((answers[0]["data"]["package"].as_str(), answers[0]["data"]["button"].as_str(), answers[0]["data"]["via"].as_str()), (Some("com.android.permissioncontroller"), Some("While using the app"), Some("uia")));
    let state = env.state();
    let app = state["apps"].as_array().unwrap().iter().find(|a| a["package"] == PKG).unwrap();
    assert_eq!(app["permissions"]["android.permission.ACCESS_FINE_LOCATION"], true);
    assert!(env.control(json!({ "op": "system-dialog" }))["dialog"].is_null());
    assert!(!env.sh("uiautomator dump /dev/tty").contains("permissioncontroller"));

    // Acknowledge: a wrong receipt hash is refused; after it, stop is allowed.
    let bad = rt.op(json!({ "op": "acknowledge", "requestJson": req.0, "requestSha256": req.1, "receiptSha256": "0".repeat(64) }));
    assert_eq!(bad["error"], "uia_receipt_sha256_mismatch");
    let ack = rt.op(json!({ "op": "acknowledge", "requestJson": req.0, "requestSha256": req.1, "receiptSha256": t["receiptSha256"] }));
    assert_eq!((ack["acknowledged"].as_bool(), ack["phase"].as_str(), ack["receiptJson"].as_str()), (Some(true), Some("terminal"), t["receiptJson"].as_str()));
    let j = journal(&env, rt.epoch(), "act-allow-1");
    assert_eq!((j["phase"].as_str(), j["acknowledged"].as_bool(), j["receiptSha256"].as_str()), (Some("terminal"), Some(true), t["receiptSha256"].as_str()));
    // Retries of prepare/start return the same terminal envelope and never click again.
    assert_eq!(rt.act("prepare", &req)["receiptJson"], t["receiptJson"]);
    assert_eq!(rt.act("start", &req)["receiptJson"], t["receiptJson"]);
    env.control(json!({ "op": "faults", "reset": true }));

    // Now the app's window is focused: a click on "Create account" opens the sign-up screen.
    let snap = rt.observe();
    assert_eq!((snap["window"]["type"].as_str(), snap["window"]["title"].as_str()), (Some("application"), Some("com.example.aab.sample/com.example.aab.sample.MainActivity")));
    let create = ref_of(snap["xml"].as_str().unwrap(), "text", "Create account");
    let req2 = rt.request("act-create", &snap, &create, json!({ "kind": "resourceName", "value": "com.example.aab.sample:id/create_account", "exact": true, "packageName": PKG }), "nearest_clickable_ancestor");
    rt.act("prepare", &req2);
    rt.act("start", &req2);
    let t2 = rt.settle(&req2);
    assert_eq!(receipt(&t2)["completion"], "original_callback");
    let state = env.state();
    let app = state["apps"].as_array().unwrap().iter().find(|a| a["package"] == PKG).unwrap();
    assert_eq!(app["screen"], "signup");
    assert_eq!(env.truth("uia-tap").len(), 2);
    assert_eq!(env.truth("uia-tap")[1]["data"]["resourceName"], "com.example.aab.sample:id/create_account");
    assert_eq!(rt.op(json!({ "op": "stop" }))["error"], "uia_runtime_has_pending_actions", "act-create is not acknowledged");
    // acknowledge-record (op) acknowledges it; then stop succeeds.
    let ident = json!({ "bootId": rt.d["bootId"], "runtimeEpoch": rt.epoch(), "actionId": "act-create", "requestSha256": req2.1, "receiptSha256": t2["receiptSha256"] });
    let ar = rt.op(json!({ "op": "acknowledge-record", "identity": ident }));
    assert_eq!((ar["schemaVersion"].as_str(), ar["disposition"].as_str()), (Some("aab.uia.ack.v1"), Some("acknowledged")), "{ar}");
    let missing = rt.op(json!({ "op": "acknowledge-record", "identity": { "bootId": rt.d["bootId"], "runtimeEpoch": rt.epoch(), "actionId": "never", "requestSha256": req2.1, "receiptSha256": t2["receiptSha256"] } }));
    assert_eq!(missing["disposition"], "not_retained");
    assert_eq!(rt.op(json!({ "op": "stop" }))["stopping"], true);
}

#[test]
fn restart_between_prepare_and_start_never_clicks() {
    let env = Env::start(1);
    let (jar, digest, rt) = launch(&env);
    show_dialog(&env);
    let snap = rt.observe();
    let allow = ref_of(snap["xml"].as_str().unwrap(), "text", "While using the app");
    let req = rt.request("act-restart", &snap, &allow, json!({ "kind": "nodeRef", "value": allow, "exact": true, "packageName": null }), "exact_node");
    assert_eq!(rt.act("prepare", &req)["phase"], "prepared");

    let r = env.control(json!({ "op": "uia-restart" }));
    assert_eq!((r["ok"].as_bool(), r["oldRuntimeEpoch"].as_str()), (Some(true), Some(rt.epoch())), "{r}");
    let d2 = wait_descriptor(&env, Some(rt.epoch()));
    assert_eq!(d2["runtimeEpoch"], r["runtimeEpoch"]);
    // The old socket is gone: start on it gets no reply, and nothing is clicked.
    let (code, _) = post(rt.port, rt.d["token"].as_str(), &json!({ "op": "start", "requestJson": req.0, "requestSha256": req.1 }).to_string());
    assert_eq!(code, 0);
    let rt2 = Rt { port: forward(&env, &d2), d: d2 };
    // The new runtime refuses the old epoch's request.
    assert_eq!(rt2.act("start", &req)["error"], "uia_runtime_epoch_mismatch");
    let uia = env.control(json!({ "op": "uia" }));
    let old = uia["runtimes"].as_array().unwrap().iter().find(|x| x["runtimeEpoch"] == rt.epoch()).unwrap();
    assert_eq!((old["running"].as_bool(), old["pendingActions"].as_u64()), (Some(false), Some(1)));
    assert_eq!(old["journal"][0]["phase"], "prepared");
    assert!(env.truth("uia-tap").is_empty());
    assert!(env.truth("system-dialog-answer").is_empty());
    assert!(!env.control(json!({ "op": "system-dialog" }))["dialog"].is_null(), "the dialog is still shown");

    // recover-record settles the old record as recovered_before_admission (never dispatched).
    let ident = json!({ "bootId": rt.d["bootId"], "runtimeEpoch": rt.epoch(), "actionId": "act-restart", "requestSha256": req.1 });
    let (out, err, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} recover-record '{ident}'"));
    assert_eq!(code, 0, "{err}");
    let rec: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((rec["schemaVersion"].as_str(), rec["disposition"].as_str()), (Some("aab.uia.recover.v1"), Some("recovered_before_admission")), "{rec}");
    let receipt_v: Value = serde_json::from_str(rec["receiptJson"].as_str().unwrap()).unwrap();
    assert_eq!((receipt_v["completion"].as_str(), receipt_v["ok"].as_bool(), receipt_v["dispatched"].as_bool(), receipt_v["ambiguous"].as_bool()), (Some("recovered_before_admission"), Some(false), Some(false), Some(false)));
    assert_eq!(rec["receiptSha256"].as_str().unwrap(), sha(rec["receiptJson"].as_str().unwrap().as_bytes()));
    assert_eq!(journal(&env, rt.epoch(), "act-restart")["phase"], "terminal");
    let (out, _, _) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} recover-record '{ident}'"));
    let again: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((again["disposition"].as_str(), again["receiptJson"].as_str()), (Some("terminal"), rec["receiptJson"].as_str()));
    // The live epoch is not recovered through the journal.
    let live = json!({ "bootId": rt.d["bootId"], "runtimeEpoch": rt2.epoch(), "actionId": "x", "requestSha256": req.1 });
    let (_, err, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} recover-record '{live}'"));
    assert_eq!((code, serde_json::from_str::<Value>(err.trim()).unwrap()["error"].as_str()), (2, Some("uia_runtime_epoch_live")));
    // acknowledge-record (one-shot): acknowledged; an unknown action is not retained.
    let mut ack = ident.clone();
    ack["receiptSha256"] = rec["receiptSha256"].clone();
    let (out, err, code) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} acknowledge-record '{ack}'"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap()["disposition"], "acknowledged");
    assert_eq!(journal(&env, rt.epoch(), "act-restart")["acknowledged"], true);
    ack["actionId"] = json!("never-prepared");
    let (out, _, _) = app_process(&env, &jar, &format!("{MAIN} {ROOT} {digest} acknowledge-record '{ack}'"));
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap()["disposition"], "not_retained");
    assert!(env.truth("uia-tap").is_empty(), "the old epoch's action never ran");
    assert!(!env.control(json!({ "op": "system-dialog" }))["dialog"].is_null());
}

#[test]
fn admission_rejections_snapshot_retention_and_capacity() {
    let env = Env::start(1);
    let (_jar, _digest, rt) = launch(&env);
    let sel = |v: &str| json!({ "kind": "text", "value": v, "exact": true, "packageName": PKG });
    let first = rt.observe();
    let sign_in = ref_of(first["xml"].as_str().unwrap(), "text", "Sign in");
    // Request checks.
    let req = rt.request("a-sha", &first, &sign_in, sel("Sign in"), "exact_node");
    assert_eq!(rt.op(json!({ "op": "prepare", "requestJson": req.0, "requestSha256": "0".repeat(64) }))["error"], "uia_request_sha256_mismatch");
    let mut extra: Value = serde_json::from_str(&req.0).unwrap();
    extra["x"] = json!(1);
    let extra = extra.to_string();
    assert_eq!(rt.act("prepare", &(extra.clone(), sha(extra.as_bytes())))["error"], "uia_invalid_request");
    let mut other: Value = serde_json::from_str(&req.0).unwrap();
    other["runtimeEpoch"] = json!("00000000-0000-4000-8000-000000000000");
    let other = other.to_string();
    assert_eq!(rt.act("prepare", &(other.clone(), sha(other.as_bytes())))["error"], "uia_runtime_epoch_mismatch");
    assert_eq!(rt.act("query", &req)["error"], "uia_action_not_found");

    let rejected = |id: &str, snap: &Value, r: &str, selector: Value, policy: &str| -> Value {
        let q = rt.request(id, snap, r, selector, policy);
        assert_eq!(rt.act("prepare", &q)["phase"], "prepared");
        let t = rt.act("start", &q);
        assert_eq!(t["phase"], "terminal", "{t}");
        let rc = receipt(&t);
        assert_eq!((rc["completion"].as_str(), rc["ok"].as_bool(), rc["dispatched"].as_bool()), (Some("admission_rejected"), Some(false), Some(false)), "{rc}");
        rc
    };
    assert_eq!(rejected("a-sel", &first, &sign_in, sel("Create account"), "exact_node")["error"], "uia_selector_mismatch");
    let title = ref_of(first["xml"].as_str().unwrap(), "text", "Sign in to AAB Sample");
    assert_eq!(rejected("a-title", &first, &title, sel("Sign in to AAB Sample"), "exact_node")["error"], "uia_target_not_clickable");
    assert_eq!(rejected("a-ref", &first, "00000000-0000-4000-8000-000000000000", json!({ "kind": "nodeRef", "value": "x", "exact": true, "packageName": null }), "exact_node")["error"], "uia_target_not_found");
    // Cancel before start: settled before admission.
    let q = rt.request("a-cancel", &first, &sign_in, sel("Sign in"), "exact_node");
    rt.act("prepare", &q);
    let c = rt.act("cancel", &q);
    let rc = receipt(&c);
    assert_eq!((rc["completion"].as_str(), rc["error"].as_str(), rc["dispatched"].as_bool()), (Some("before_admission"), Some("uia_action_cancelled"), Some(false)));
    assert_eq!(rt.act("start", &q)["receiptJson"], c["receiptJson"], "a cancelled action never starts");
    // Eight snapshots are retained: the ninth observation evicts the first.
    for _ in 0..8 {
        rt.observe();
    }
    assert_eq!(rejected("a-evicted", &first, &sign_in, sel("Sign in"), "exact_node")["error"], "uia_snapshot_evicted");
    // A short snapshot lifetime (fault) makes it expire before admission.
    env.control(json!({ "op": "faults", "set": { "uiaSnapshotTtlMs": 1 } }));
    let short = rt.observe();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(rejected("a-expired", &short, &ref_of(short["xml"].as_str().unwrap(), "text", "Sign in"), sel("Sign in"), "exact_node")["error"], "uia_snapshot_expired");
    env.control(json!({ "op": "faults", "reset": true }));
    // The screen changed since the snapshot: the node is re-observed and refused.
    let snap = rt.observe();
    let create = ref_of(snap["xml"].as_str().unwrap(), "text", "Create account");
    env.control(json!({ "op": "screen", "package": PKG, "screen": "welcome" }));
    let rc = rejected("a-changed", &snap, &create, sel("Create account"), "exact_node");
    assert_eq!(rc["error"], "uia_target_changed");
    assert_eq!(rc["binding"]["target"]["text"], "Create account");
    assert!(env.truth("uia-tap").is_empty(), "no rejected action clicked");
    // Capacity: 256 actions per epoch (the rejected/cancelled ones above count).
    let st = rt.op(json!({ "op": "status" }));
    let used = st["count"].as_u64().unwrap();
    assert_eq!(used, 7);
    for i in used..256 {
        let q = rt.request(&format!("cap-{i}"), &snap, &create, sel("Create account"), "exact_node");
        assert_eq!(rt.act("prepare", &q)["phase"], "prepared");
    }
    let q = rt.request("cap-over", &snap, &create, sel("Create account"), "exact_node");
    assert_eq!(rt.act("prepare", &q)["error"], "uia_action_capacity_exhausted");
    let st = rt.op(json!({ "op": "status" }));
    assert_eq!((st["count"].as_u64(), st["pending"].as_u64()), (Some(256), Some(249)));
}
