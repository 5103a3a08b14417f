//! The simulated WDA Runner over real sockets: identity headers and every 409
//! code, sessions, targeted reads, a tap settled exactly once, a lost reply
//! recovered from the durable store (also by a restarted Runner with a new
//! epoch), the busy slot and a queued cancel, orientation, input clearFirst.
//! Ground truth is the fake screen's effect log and the facts the Runner recorded.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aab_ios_sim::screen::{EventError, Foreground, NativeScreen};
use aab_ios_sim::wda::{Runner, RunnerConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[allow(dead_code)]
#[path = "../../src/wda/fake_screen.rs"]
mod fake_screen;

use fake_screen::{APP, APP_PID, FakeScreen};

const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";
const IO_TIMEOUT: Duration = Duration::from_secs(15);

async fn start(screen: &Arc<FakeScreen>, store: &Path) -> Runner {
    let cfg = RunnerConfig { runner_bundle_id: RUNNER.into(), bind: "127.0.0.1".parse().unwrap(), process_id: 901, store_dir: store.to_path_buf() };
    Runner::start(cfg, screen.clone() as Arc<dyn NativeScreen>).await.unwrap()
}

#[derive(Debug)]
struct Reply {
    status: u16,
    body: Value,
}

/// One raw HTTP/1.1 exchange; `None` when the connection closed without a reply.
async fn exchange(stream: &mut TcpStream, raw: &[u8]) -> Option<Reply> {
    stream.write_all(raw).await.ok()?;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = tokio::time::timeout(IO_TIMEOUT, stream.read(&mut tmp)).await.expect("reply timed out").ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head[9..12].parse().unwrap();
    let len: usize = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())).unwrap();
    while buf.len() < head_end + len {
        let n = tokio::time::timeout(IO_TIMEOUT, stream.read(&mut tmp)).await.expect("body timed out").unwrap();
        assert!(n > 0, "closed mid-body");
        buf.extend_from_slice(&tmp[..n]);
    }
    Some(Reply { status, body: serde_json::from_slice(&buf[head_end..head_end + len]).unwrap() })
}

fn raw_request(method: &str, path: &str, headers: &[(String, String)], body: Option<&[u8]>, close: bool) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: device\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        out.push_str("Connection: close\r\n");
    }
    let body = body.unwrap_or_default();
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A host-side view of one Runner: its address and identity headers.
struct Host {
    addr: SocketAddr,
    identity: Vec<(String, String)>,
    descriptor: Value,
}

impl Host {
    fn of(runner: &Runner) -> Host {
        let d = runner.descriptor();
        let identity = vec![
            ("X-AAB-WDA-Schema".into(), d["schemaVersion"].as_str().unwrap().into()),
            ("X-AAB-WDA-Bundle-Id".into(), d["bundleId"].as_str().unwrap().into()),
            ("X-AAB-WDA-Runtime-Epoch".into(), d["runtimeEpoch"].as_str().unwrap().into()),
            ("X-AAB-WDA-Process-Id".into(), d["processId"].to_string()),
            ("X-AAB-WDA-Port".into(), d["port"].to_string()),
        ];
        Host { addr: SocketAddr::from(([127, 0, 0, 1], runner.port())), identity, descriptor: d }
    }

    fn epoch(&self) -> &str {
        self.descriptor["runtimeEpoch"].as_str().unwrap()
    }

    async fn send(&self, method: &str, path: &str, headers: Vec<(String, String)>, body: Option<&[u8]>) -> Option<Reply> {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        exchange(&mut stream, &raw_request(method, path, &headers, body, true)).await
    }

    /// A request with the identity headers plus `extra`; the reply's binding must be this Runner's.
    async fn call(&self, method: &str, path: &str, extra: &[(&str, &str)], body: Option<&Value>) -> Reply {
        let mut headers = self.identity.clone();
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let bytes = body.map(|b| b.to_string().into_bytes());
        let reply = self.send(method, path, headers, bytes.as_deref()).await.expect("the Runner closed without a reply");
        self.assert_binding(&reply);
        reply
    }

    fn assert_binding(&self, reply: &Reply) {
        let d = &self.descriptor;
        let expected = json!({ "schemaVersion": d["schemaVersion"], "bundleId": d["bundleId"], "runtimeEpoch": d["runtimeEpoch"], "processId": d["processId"], "port": d["port"] });
        assert_eq!(reply.body["wdaBinding"], expected, "{:?}", reply.body);
        assert!(reply.body.get("sessionId").is_some() && reply.body.get("value").is_some(), "{:?}", reply.body);
    }

    fn action(&self, id: &str, operation: &str, target: &Value, payload: Value, timeout_ms: u64) -> Value {
        json!({
            "operation": operation, "target": target, "payload": payload, "actionId": id,
            "execution": { "schemaVersion": "aab.wda-execution/v1", "actionId": id, "runtimeEpoch": self.epoch(), "timeoutMs": timeout_ms },
        })
    }

    async fn act(&self, id: &str, operation: &str, target: &Value, payload: Value) -> Reply {
        self.call("POST", "/aab/action", &[], Some(&self.action(id, operation, target, payload, 5000))).await
    }

    /// Creates a session on the fake App; returns the targeted-action target.
    async fn open_session(&self) -> Value {
        let r = self.act("create", "session-create", &json!({ "bundleId": APP, "processId": APP_PID }), json!({})).await;
        assert_eq!((r.status, r.body["value"]["ok"].clone()), (200, json!(true)), "{:?}", r.body);
        let sid = r.body["value"]["value"]["sessionId"].as_str().unwrap().to_string();
        assert_eq!(r.body["sessionId"], sid.as_str());
        json!({ "bundleId": APP, "processId": APP_PID, "sessionId": sid })
    }

    async fn result(&self, id: &str, epoch: &str) -> Value {
        let r = self.call("GET", &format!("/aab/execution/result?actionId={id}&runtimeEpoch={epoch}"), &[], None).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["value"].clone()
    }
}

fn assert_rejected(reply: &Reply, code: &str) {
    assert_eq!(reply.status, 409, "{:?}", reply.body);
    let v = &reply.body["value"];
    assert_eq!(v, &json!({ "error": code, "message": v["message"], "dispatched": false, "ambiguous": false }));
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
}

fn targeted(target: &Value) -> Vec<(&'static str, String)> {
    vec![
        ("X-AAB-WDA-Target-Bundle-Id", target["bundleId"].as_str().unwrap().to_string()),
        ("X-AAB-WDA-Target-Process-Id", target["processId"].to_string()),
        ("X-AAB-WDA-Session-Id", target["sessionId"].as_str().unwrap().to_string()),
    ]
}

fn refs<'a>(h: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    h.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn identity_headers_and_rejections() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    let d = runner.descriptor();
    let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["bundleId", "ok", "port", "processId", "runtimeEpoch", "schemaVersion"]);
    assert_eq!((d["schemaVersion"].clone(), d["bundleId"].clone(), d["ok"].clone(), d["processId"].clone(), d["port"].clone()), (json!("aab.ios-wda/v1"), json!(RUNNER), json!(true), json!(901), json!(runner.port())));
    assert_eq!(d["runtimeEpoch"], runner.epoch());

    let status = host.call("GET", "/aab/status", &[], None).await;
    assert_eq!(status.status, 200);
    let v = &status.body["value"];
    assert_eq!((v["ok"].clone(), v["executionSchema"].clone(), v["ready"].clone(), v["active"].clone()), (json!(true), json!("aab.wda-execution/v1"), json!(true), Value::Null));
    assert_eq!((v["nativeTargetSchema"].clone(), v["orientationSchema"].clone()), (json!("aab.ios-native-target/v1"), json!("aab.ios-orientation/v1")));
    assert_eq!(host.call("GET", "/status", &[], None).await.body["value"]["ready"], true);

    // Identity headers: missing, repeated, malformed, mismatched.
    let without = |name: &str| host.identity.iter().filter(|(k, _)| k != name).cloned().collect::<Vec<_>>();
    let with = |name: &str, value: &str| host.identity.iter().map(|(k, v)| if k == name { (k.clone(), value.to_string()) } else { (k.clone(), v.clone()) }).collect::<Vec<_>>();
    for (headers, code) in [
        (without("X-AAB-WDA-Runtime-Epoch"), "invalid_ios_wda_headers"),
        ([host.identity.clone(), vec![("x-aab-wda-port".into(), host.descriptor["port"].to_string())]].concat(), "invalid_ios_wda_headers"),
        (with("X-AAB-WDA-Process-Id", "12a"), "invalid_ios_wda_headers"),
        (with("X-AAB-WDA-Runtime-Epoch", "0F8B1E2C-0000-4000-8000-000000000000"), "ios_wda_binding_mismatch"),
        (with("X-AAB-WDA-Port", "1"), "ios_wda_binding_mismatch"),
        (with("X-AAB-WDA-Bundle-Id", "com.other.xctrunner"), "ios_wda_binding_mismatch"),
        (with("X-AAB-WDA-Schema", "aab.ios-wda/v2"), "ios_wda_binding_mismatch"),
    ] {
        let r = host.send("GET", "/aab/status", headers, None).await.unwrap();
        host.assert_binding(&r);
        assert_rejected(&r, code);
    }

    // Routes and bodies.
    assert_rejected(&host.call("POST", "/session", &[], Some(&json!({ "capabilities": {} }))).await, "ios_wda_route_unsupported");
    assert_rejected(&host.call("DELETE", "/session/abc", &[], None).await, "ios_wda_route_unsupported");
    assert_rejected(&host.call("POST", "/wda/shutdown", &[], None).await, "ios_wda_route_unsupported");
    let mut headers = host.identity.clone();
    let r = host.send("POST", "/aab/action", std::mem::take(&mut headers), Some(b"{not json")).await.unwrap();
    assert_rejected(&r, "invalid_ios_wda_json");
    let big = vec![b' '; 256 * 1024 + 1];
    let r = host.send("POST", "/aab/action", host.identity.clone(), Some(&big)).await.unwrap();
    assert_rejected(&r, "ios_wda_request_too_large");
    let huge = format!("POST /aab/execution/cancel HTTP/1.1\r\nContent-Length: {}\r\n\r\n", 4 * 1024 * 1024 + 1);
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    assert_rejected(&exchange(&mut stream, huge.as_bytes()).await.unwrap(), "ios_wda_request_too_large");

    // Action validation and the execution epoch.
    let app = json!({ "bundleId": APP, "processId": APP_PID });
    let mut stale = host.action("a1", "session-create", &app, json!({}), 1000);
    stale["execution"]["runtimeEpoch"] = json!("0F8B1E2C-0000-4000-8000-000000000000");
    assert_rejected(&host.call("POST", "/aab/action", &[], Some(&stale)).await, "ios_wda_binding_mismatch");
    let mut extra = host.action("a2", "session-create", &app, json!({}), 1000);
    extra["bundleId"] = json!(APP);
    assert_rejected(&host.call("POST", "/aab/action", &[], Some(&extra)).await, "invalid_ios_wda_action");
    let t = json!({ "bundleId": APP, "processId": APP_PID, "sessionId": "S" });
    assert_rejected(&host.call("POST", "/aab/action", &[], Some(&host.action("a3", "tap", &t, json!({ "x": 1e9, "y": 1 }), 1000))).await, "invalid_ios_wda_coordinate");
    assert_rejected(&host.call("GET", "/aab/execution/result?actionId=a&runtimeEpoch=E&limit=3", &[], None).await, "invalid_ios_wda_execution");
    assert_rejected(&host.call("GET", "/aab/execution/result?actionId=a&runtimeEpoch=E&cursor=eyJ2IjoxfQ==", &[], None).await, "invalid_ios_wda_completion_cursor");
    assert_rejected(&host.call("POST", "/aab/execution/cancel", &[], Some(&json!({ "actionId": "a" }))).await, "invalid_ios_wda_execution");

    // Targeted reads need a bound session and the target headers.
    let th = targeted(&t);
    assert_rejected(&host.call("GET", "/session/S/source?format=json", &refs(&th), None).await, "ios_wda_session_required");
    assert_rejected(&host.call("GET", "/session/S/source?format=json", &refs(&th[..2]), None).await, "ios_wda_session_required");
    assert_rejected(&host.call("GET", "/session/S/source?format=json", &refs(&th[1..]), None).await, "invalid_ios_wda_headers");

    // Keep-alive: two requests on one connection.
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    for _ in 0..2 {
        let r = exchange(&mut stream, &raw_request("GET", "/aab/session", &host.identity, None, false)).await.unwrap();
        assert_eq!((r.status, r.body["value"]["session"].clone()), (200, Value::Null));
        assert_eq!(r.body["value"]["foreground"], json!({ "bundleId": APP, "processId": APP_PID }));
    }

    // `Expect: 100-continue` (curl's habit for larger bodies) gets the interim reply first.
    let body = json!({ "actionId": "none", "runtimeEpoch": host.epoch() }).to_string();
    let mut head = format!("POST /aab/execution/cancel HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in &host.identity {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = TcpStream::connect(host.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(IO_TIMEOUT, stream.read_exact(&mut interim)).await.unwrap().unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    let r = exchange(&mut stream, body.as_bytes()).await.unwrap();
    assert_eq!(r.body["value"]["error"], "ios_wda_action_not_active");

    // No rejection reached the device.
    assert!(screen.all_effects().is_empty(), "{:?}", screen.all_effects());
    assert!(screen.facts.lock().unwrap().is_empty());
    assert_eq!(runner.state()["completions"], 0);
    runner.stop().await;
    assert!(TcpStream::connect(host.addr).await.is_err(), "the listener is closed after stop");
}

#[tokio::test]
async fn session_reads_and_a_tap_settled_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    let target = host.open_session().await;
    let sid = target["sessionId"].as_str().unwrap();
    assert_eq!(runner.state()["session"], json!({ "sessionId": sid, "bundleId": APP, "processId": APP_PID }));
    assert_eq!(screen.facts("session-create").len(), 1);
    // A second session is never created over the first.
    let r = host.act("create2", "session-create", &json!({ "bundleId": APP, "processId": APP_PID }), json!({})).await;
    assert_eq!((r.body["value"]["ok"].clone(), r.body["value"]["error"].clone()), (json!(false), json!("ios_wda_session_exists")));
    assert_eq!(runner.state()["session"]["sessionId"], sid);

    let th = targeted(&target);
    let source = host.call("GET", &format!("/session/{sid}/source?format=json"), &refs(&th), None).await;
    assert_eq!(source.status, 200);
    assert_eq!(source.body["sessionId"], sid);
    assert_eq!(source.body["value"]["children"][0]["elementId"], "E-ok");
    let found = host.call("POST", &format!("/session/{sid}/elements"), &refs(&th), Some(&json!({ "using": "accessibility id", "value": "okButton" }))).await;
    assert_eq!(found.body["value"], json!([{ "element-6066-11e4-a52e-4f735466cecf": "E-ok" }]));
    let mut wrong = th.clone();
    wrong[2].1 = "OTHER-SESSION".into();
    assert_rejected(&host.call("GET", &format!("/session/{sid}/source?format=json"), &refs(&wrong), None).await, "ios_wda_session_changed");
    let mut wrong = th.clone();
    wrong[1].1 = (APP_PID + 1).to_string();
    assert_rejected(&host.call("GET", &format!("/session/{sid}/source?format=json"), &refs(&wrong), None).await, "ios_wda_target_changed");

    let tap = host.act("tap-1", "tap", &target, json!({ "x": 30, "y": 20 })).await;
    assert_eq!(tap.status, 200);
    let result = tap.body["value"].clone();
    assert_eq!((result["ok"].clone(), result["dispatched"].clone(), result["ambiguous"].clone(), result["settled"].clone()), (json!(true), json!(true), json!(false), json!(true)));
    assert_eq!((result["actionId"].clone(), result["runtimeEpoch"].clone()), (json!("tap-1"), json!(host.epoch())));
    assert_eq!(
        result["execution"],
        json!({ "schemaVersion": "aab.wda-execution/v1", "actionId": "tap-1", "runtimeEpoch": host.epoch(), "settled": true,
                "target": { "bundleId": APP, "processId": APP_PID, "sessionId": sid, "runnerBundleId": RUNNER, "operation": "tap" } })
    );
    // Exactly one event reached the screen, and the Runner recorded exactly that one.
    assert_eq!(screen.effects("tap"), vec![json!({ "kind": "tap", "x": 30.0, "y": 20.0, "hit": "E-ok" })]);
    let facts = screen.facts("tap");
    assert_eq!(facts.len(), 1);
    assert_eq!((facts[0]["actionId"].clone(), facts[0]["operation"].clone(), facts[0]["runnerEpoch"].clone()), (json!("tap-1"), json!("tap"), json!(host.epoch())));
    // The same id is never admitted twice, and the store holds the same result.
    assert_rejected(&host.act("tap-1", "tap", &target, json!({ "x": 30, "y": 20 })).await, "ios_wda_action_id_reused");
    assert_eq!(screen.effects("tap").len(), 1);
    let page = host.result("tap-1", host.epoch()).await;
    assert_eq!((page["ok"].clone(), page["found"].clone(), page["executionResult"].clone()), (json!(true), json!(true), result));
    assert_eq!(page["receipt"]["committed"], true);

    let swipe = host.act("swipe-1", "swipe", &target, json!({ "startX": 10, "startY": 300, "endX": 10, "endY": 100, "durationMs": 5 })).await;
    assert_eq!(swipe.body["value"]["ok"], true);
    assert_eq!(screen.effects("swipe").len(), 1);

    let close = host.act("close", "session-close", &target, json!({})).await;
    assert_eq!(close.body["value"]["ok"], true, "{:?}", close.body);
    assert_eq!(close.body["sessionId"], Value::Null);
    assert_eq!(runner.state()["session"], Value::Null);
    assert_rejected(&host.call("GET", &format!("/session/{sid}/source?format=json"), &refs(&th), None).await, "ios_wda_session_required");
    let after = host.act("tap-2", "tap", &target, json!({ "x": 30, "y": 20 })).await;
    assert_eq!((after.body["value"]["error"].clone(), after.body["value"]["dispatched"].clone()), (json!("ios_wda_session_required"), json!(false)));
    assert_eq!(screen.effects("tap").len(), 1);
    runner.stop().await;
}

#[tokio::test]
async fn a_lost_reply_is_recovered_from_the_store_even_by_a_restarted_runner() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    let target = host.open_session().await;
    let old_epoch = host.epoch().to_string();

    runner.set_faults(&json!({ "wdaDropNextActionReply": true }));
    let body = host.action("lost-1", "tap", &target, json!({ "x": 30, "y": 20 }), 5000);
    let mut headers = host.identity.clone();
    headers.push(("Content-Type".into(), "application/json".into()));
    assert!(host.send("POST", "/aab/action", headers, Some(body.to_string().as_bytes())).await.is_none(), "the reply is dropped");
    assert_eq!(screen.effects("tap").len(), 1, "the action ran once");
    assert_eq!(runner.state()["faults"]["wdaDropNextActionReply"], 0, "the drop was consumed");
    let page = host.result("lost-1", &old_epoch).await;
    assert_eq!((page["found"].clone(), page["executionResult"]["ok"].clone(), page["executionResult"]["dispatched"].clone()), (json!(true), json!(true), json!(true)));
    let receipt = page["receipt"].clone();

    // A completion the fault loses is not found, even though the event happened.
    runner.set_faults(&json!({ "wdaLoseCompletion": true }));
    assert_eq!(host.act("lost-2", "tap", &target, json!({ "x": 30, "y": 20 })).await.body["value"]["ok"], true);
    assert_eq!(screen.effects("tap").len(), 2);
    let missing = host.result("lost-2", &old_epoch).await;
    assert_eq!((missing["found"].clone(), missing["settled"].clone(), missing["hasMore"].clone(), missing["nextCursor"].clone()), (json!(false), json!(false), json!(false), Value::Null));
    runner.stop().await;

    // A new Runner process: new epoch, same store.
    let runner = start(&screen, dir.path()).await;
    let host2 = Host::of(&runner);
    assert_ne!(host2.epoch(), old_epoch);
    assert_eq!(runner.state()["session"], Value::Null, "sessions die with their Runner");
    let again = host2.result("lost-1", &old_epoch).await;
    assert_eq!((again["found"].clone(), again["executionResult"].clone(), again["receipt"].clone()), (json!(true), page["executionResult"].clone(), receipt.clone()));
    assert_eq!(host2.result("lost-1", host2.epoch()).await["found"], false, "the new epoch does not replace the original one");
    let cancel = host2.call("POST", "/aab/execution/cancel", &[], Some(&json!({ "actionId": "lost-1", "runtimeEpoch": old_epoch }))).await;
    assert_eq!((cancel.body["value"]["ok"].clone(), cancel.body["value"]["executionResult"].clone()), (json!(true), page["executionResult"].clone()));
    let unknown = host2.call("POST", "/aab/execution/cancel", &[], Some(&json!({ "actionId": "lost-2", "runtimeEpoch": old_epoch }))).await;
    assert_eq!(unknown.body["value"]["error"], "ios_wda_action_not_active");
    // The old session cannot drive the new Runner.
    assert_eq!(host2.act("t3", "tap", &target, json!({ "x": 30, "y": 20 })).await.body["value"]["error"], "ios_wda_session_required");
    assert_eq!(screen.effects("tap").len(), 2, "nothing was replayed");
    runner.stop().await;
}

#[tokio::test]
async fn the_busy_slot_and_a_cancelled_queued_action() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Arc::new(Host::of(&runner));
    let target = host.open_session().await;
    runner.set_faults(&json!({ "wdaSlowActionMs": 30_000 }));
    let slow = {
        let (host, target) = (host.clone(), target.clone());
        tokio::spawn(async move { host.act("slow", "tap", &target, json!({ "x": 30, "y": 20 })).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let active = loop {
        let s = host.call("GET", "/aab/status", &[], None).await;
        if !s.body["value"]["active"].is_null() {
            break s.body["value"]["active"].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "never admitted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(active["identity"], json!({ "schemaVersion": "aab.wda-execution/v1", "actionId": "slow", "runtimeEpoch": host.epoch() }));
    assert_eq!((active["permissionIssued"].clone(), active["stopReason"].clone(), active["target"]["operation"].clone()), (json!(false), Value::Null, json!("tap")));
    assert_rejected(&host.act("second", "tap", &target, json!({ "x": 30, "y": 20 })).await, "ios_wda_action_busy");

    let cancel = host.call("POST", "/aab/execution/cancel", &[], Some(&json!({ "actionId": "slow", "runtimeEpoch": host.epoch() }))).await;
    let v = &cancel.body["value"];
    assert_eq!((v["ok"].clone(), v["executionResult"]["error"].clone(), v["executionResult"]["dispatched"].clone()), (json!(true), json!("ios_wda_action_cancelled"), json!(false)));
    let own = slow.await.unwrap();
    assert_eq!(own.body["value"], v["executionResult"]);
    assert!(screen.effects("tap").is_empty(), "a queued cancel ends without an event");
    assert_eq!(runner.state()["active"], Value::Null);
    runner.stop().await;
}

#[tokio::test]
async fn orientation_observed_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    let target = host.open_session().await;
    let r = host.act("o1", "set-orientation", &target, json!({ "orientation": "landscapeLeft" })).await;
    assert_eq!(r.body["value"]["ok"], true, "{:?}", r.body);
    assert_eq!(r.body["value"]["value"], json!({ "requestedOrientation": "landscapeLeft", "observedInterfaceOrientation": "landscapeLeft" }));
    assert_eq!(screen.orientation(), "landscapeLeft");
    assert_eq!(screen.facts("orientation")[0]["detail"]["deviceOrientation"], "landscapeRight");

    runner.set_faults(&json!({ "wdaOrientationIgnored": true }));
    let r = host.act("o2", "set-orientation", &target, json!({ "orientation": "portrait" })).await;
    let v = &r.body["value"];
    assert_eq!((v["ok"].clone(), v["error"].clone(), v["dispatched"].clone()), (json!(false), json!("ios_wda_orientation_not_observed"), json!(true)));
    assert_eq!(v["value"], json!({ "requestedOrientation": "portrait", "observedInterfaceOrientation": "landscapeLeft" }));
    assert_eq!(screen.orientation(), "landscapeLeft");

    // The App itself refusing a direction is reported the same way.
    runner.set_faults(&json!({ "wdaOrientationIgnored": false }));
    screen.with(|s| s.portrait_only = true);
    let r = host.act("o3", "set-orientation", &target, json!({ "orientation": "landscapeRight" })).await;
    assert_eq!(r.body["value"]["error"], "ios_wda_orientation_not_observed");
    assert_rejected(&host.act("o4", "set-orientation", &target, json!({ "orientation": "upsideDown" })).await, "invalid_ios_wda_orientation");
    assert_eq!(screen.effects("orientation").len(), 2, "the ignored request never reached the screen; the refused one did");
    runner.stop().await;
}

#[tokio::test]
async fn input_clear_first_and_native_input_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    let target = host.open_session().await;
    let r = host.act("i1", "input", &target, json!({ "elementId": "E-name", "text": "Ada", "clearFirst": true })).await;
    assert_eq!(r.body["value"]["ok"], true, "{:?}", r.body);
    assert_eq!(r.body["value"]["value"], json!({ "elementId": "E-name", "clearFirst": true, "textLength": 3 }));
    assert_eq!(screen.value_of("E-name").as_deref(), Some("Ada"));
    let order: Vec<Value> = screen.all_effects().iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(order, [json!("focus"), json!("clear"), json!("type")]);
    assert_eq!(screen.effects("clear").len(), 1, "exactly one HID clear");

    // Without clearFirst the text is appended by XCTest input.
    let tref = json!({ "elementId": "E-name", "type": "XCUIElementTypeTextField", "identifier": "nameField", "label": null });
    let r = host.act("i2", "native-input", &target, json!({ "targetRef": tref, "text": "!" })).await;
    assert_eq!(r.body["value"]["ok"], true, "{:?}", r.body);
    assert_eq!(screen.value_of("E-name").as_deref(), Some("Ada!"));
    assert_eq!(screen.effects("clear").len(), 1);

    // A stale element id never gets keyboard events.
    let r = host.act("i3", "input", &target, json!({ "elementId": "E-gone", "text": "x", "clearFirst": true })).await;
    assert_eq!((r.body["value"]["error"].clone(), r.body["value"]["dispatched"].clone()), (json!("ios_wda_input_target_changed"), json!(false)));
    assert_eq!((screen.effects("clear").len(), screen.effects("type").len()), (1, 2));
    runner.stop().await;
}

#[tokio::test]
async fn the_binding_mismatch_fault_answers_as_another_runner() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let runner = start(&screen, dir.path()).await;
    let host = Host::of(&runner);
    runner.set_faults(&json!({ "wdaBindingMismatch": true }));
    let r = host.send("GET", "/aab/status", host.identity.clone(), None).await.unwrap();
    assert_eq!(r.status, 200);
    assert_ne!(r.body["wdaBinding"]["runtimeEpoch"], host.epoch());
    assert_eq!(r.body["wdaBinding"]["bundleId"], RUNNER);
    runner.set_faults(&json!({ "wdaBindingMismatch": false }));
    host.call("GET", "/aab/status", &[], None).await;
    runner.stop().await;
}

/// The fake screen must be the `NativeScreen` the crate defines (a compile-time check).
#[allow(dead_code)]
fn fake_is_a_native_screen(e: EventError, f: Foreground) -> (EventError, Foreground) {
    (e, f)
}
