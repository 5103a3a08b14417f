//! Step 4: an app embedding the aab SDK, reached like the host does (§2.1):
//! descriptor via run-as, `adb forward` to its localabstract socket, one HTTP
//! request per connection.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Env, http};

const PKG: &str = "com.example.aab.sample";

fn descriptor(env: &Env) -> Value {
    let text = env.sh(&format!("run-as {PKG} cat files/ai_app_bridge_endpoint.json"));
    serde_json::from_str(&text).expect("descriptor JSON")
}

fn is_epoch(e: &str) -> bool {
    let (ms, uuid) = e.split_at(13.min(e.len()));
    ms.len() == 13 && ms.bytes().all(|b| b.is_ascii_digit()) && uuid.len() == 37 && uuid.starts_with('-') && uuid[1..].split('-').map(str::len).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
}

fn forward(env: &Env, socket: &str) -> u16 {
    let out = env.adb(&["-s", &env.serial(), "forward", "--no-rebind", "tcp:0", &format!("localabstract:{socket}")]);
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("allocated port")
}

#[test]
fn descriptor_forward_and_http_dialect() {
    let env = Env::start(1);
    let d = descriptor(&env);
    assert_eq!((d["schema"].as_str(), d["ok"].as_bool(), d["packageName"].as_str(), d["transport"].as_str()), (Some("ai-app-bridge.android-endpoint.v1"), Some(true), Some(PKG), Some("localabstract")));
    let epoch = d["runtimeEpoch"].as_str().unwrap();
    assert!(is_epoch(epoch), "{epoch}");
    assert_eq!(d["socketName"].as_str().unwrap(), format!("aab-sdk-{epoch}"));
    assert!(d["updatedAtMs"].as_u64().unwrap() > 0 && d["version"].is_string() && d["error"].is_null());
    let port = forward(&env, d["socketName"].as_str().unwrap());
    let list = String::from_utf8_lossy(&env.adb(&["-s", &env.serial(), "forward", "--list"]).stdout).into_owned();
    assert!(list.contains(&format!("{} tcp:{port} localabstract:aab-sdk-{epoch}", env.serial())));

    let (code, st) = http(port, "GET", "/v1/status", None);
    assert_eq!(code, 200);
    assert_eq!((st["ok"].as_bool(), st["debugBridge"]["runtimeEpoch"].as_str(), st["app"]["packageName"].as_str()), (Some(true), Some(epoch), Some(PKG)));
    assert_eq!(st["debugBridge"]["nativeExecutionSchema"], "aab.native-execution/v1");
    assert_eq!(st["activity"]["current"], "com.example.aab.sample.MainActivity");
    let (_, tree) = http(port, "GET", "/v1/view/tree", None);
    assert_eq!(tree["ok"], true);
    let kids = tree["root"]["children"].as_array().unwrap();
    let button = kids.iter().find(|n| n["resourceName"] == "com.example.aab.sample:id/sign_in").unwrap();
    assert_eq!((button["text"].as_str(), button["clickable"].as_bool()), (Some("Sign in"), Some(true)));
    assert_eq!(button["bounds"], json!({ "left": 60, "top": 920, "right": 1020, "bottom": 1060, "width": 960, "height": 140 }));
    let tr = &button["targetRef"];
    assert_eq!(tr.as_object().unwrap().len(), 5);
    assert_eq!(tr["runtimeEpoch"], epoch);
    assert_eq!(tr["guard"].as_str().unwrap().len(), 64);
    assert_eq!(tree["nodeCount"], 7, "the login screen: title, two fields, checkbox, sign in, create account under the root");
    let (code, nf) = http(port, "GET", "/v1/nope", None);
    assert_eq!((code, nf), (404, json!({ "ok": false, "error": "not_found" })));
    // Capture streams: POST stores, GET pages with sinceId.
    let (_, posted) = http(port, "POST", "/v1/events", Some(r#"{"category":"test","name":"probe","data":{"n":1}}"#));
    let id = posted["event"]["id"].as_u64().unwrap();
    let (_, page) = http(port, "GET", &format!("/v1/events?sinceId={}&limit=10", id - 1), None);
    assert_eq!(page["items"][0]["name"], "probe");
    assert_eq!(page["count"], 1);
    let (_, state) = http(port, "GET", "/v1/state", None);
    assert_eq!(state["values"]["app.signedIn"], false);
    let (_, shot) = http(port, "GET", "/v1/screenshot", None);
    assert_eq!((shot["width"].as_u64(), shot["height"].as_u64(), shot["mimeType"].as_str()), (Some(1080), Some(2400), Some("image/png")));
    // One request per connection; an incomplete request is dropped after the read timeout.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /v1/status HTTP/1.1\r\n").unwrap();
    let mut buf = vec![];
    assert_eq!(s.read_to_end(&mut buf).unwrap_or(0), 0);
    let reqs: Vec<Value> = env.truth("sdk-request");
    assert!(reqs.iter().any(|r| r["data"]["path"] == "/v1/nope" && r["data"]["status"] == 404));
}

#[test]
fn restarted_process_gets_a_new_runtime_epoch_and_socket() {
    let env = Env::start(1);
    let d1 = descriptor(&env);
    let pid1 = env.sh(&format!("pidof {PKG}")).trim().to_string();
    let old_port = forward(&env, d1["socketName"].as_str().unwrap());
    assert_eq!(http(old_port, "GET", "/v1/status", None).0, 200);
    let r = env.control(json!({ "op": "restart", "package": PKG }));
    assert_eq!(r["ok"], true);
    let d2 = descriptor(&env);
    assert_ne!(d1["runtimeEpoch"], d2["runtimeEpoch"]);
    assert!(is_epoch(d2["runtimeEpoch"].as_str().unwrap()));
    let pid2 = env.sh(&format!("pidof {PKG}")).trim().to_string();
    assert_ne!(pid1, pid2);
    assert_eq!(env.shell(&format!("cat /proc/{pid1}/stat")).2, 1);
    // The old forward reaches nothing any more (accepted, then closed); the new socket answers.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", old_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /v1/status HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    let mut buf = vec![];
    assert_eq!(s.read_to_end(&mut buf).unwrap_or(0), 0);
    let port = forward(&env, d2["socketName"].as_str().unwrap());
    let (_, st) = http(port, "GET", "/v1/status", None);
    assert_eq!(st["debugBridge"]["runtimeEpoch"], d2["runtimeEpoch"]);
    let unix = env.sh("cat /proc/net/unix");
    assert!(unix.contains(d2["socketName"].as_str().unwrap()) && !unix.contains(d1["socketName"].as_str().unwrap()));
}

#[test]
fn reply_lost_after_the_effect_and_slow_sdk() {
    let env = Env::start(1);
    let port = forward(&env, descriptor(&env)["socketName"].as_str().unwrap());
    env.control(json!({ "op": "faults", "set": { "sdkDropReplies": 1 } }));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = r#"{"category":"test","name":"lost-reply"}"#;
    s.write_all(format!("POST /v1/events HTTP/1.1\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
    let mut buf = vec![];
    assert_eq!(s.read_to_end(&mut buf).unwrap_or(0), 0, "no reply");
    // …but the effect happened.
    let (_, page) = http(port, "GET", "/v1/events", None);
    assert!(page["items"].as_array().unwrap().iter().any(|i| i["name"] == "lost-reply"));
    assert!(env.truth("fault").iter().any(|r| r["data"]["kind"] == "sdk-reply-lost"));
    // A slow SDK still answers (the delay is visible in ground truth, not timed here).
    env.control(json!({ "op": "faults", "set": { "sdkDelayMs": 200 } }));
    assert_eq!(http(port, "GET", "/v1/status", None).0, 200);
    assert_eq!(env.state()["faults"]["sdkDelayMs"], 200);
}

fn exec(id: &str, epoch: &str) -> Value {
    json!({ "schemaVersion": "aab.native-execution/v1", "actionId": id, "runtimeEpoch": epoch, "timeoutMs": 10000 })
}

#[test]
fn native_managed_actions_settle_once_and_cancel_recovers_a_lost_receipt() {
    let env = Env::start(1);
    let d = descriptor(&env);
    let epoch = d["runtimeEpoch"].as_str().unwrap().to_string();
    let port = forward(&env, d["socketName"].as_str().unwrap());
    let post = |path: &str, body: Value| http(port, "POST", path, Some(&body.to_string())).1;
    // Input into the email field by selector, then tap "Sign in" by selector.
    let r = post("/v1/action/input-target", json!({ "selector": { "resourceName": "com.example.aab.sample:id/email" }, "text": "bob@example.com", "actionId": "a1", "execution": exec("a1", &epoch) }));
    assert_eq!((r["ok"].as_bool(), r["dispatched"].as_bool(), r["settled"].as_bool(), r["textLength"].as_u64()), (Some(true), Some(true), Some(true), Some(15)), "{r}");
    assert_eq!(r["execution"], json!({ "schemaVersion": "aab.native-execution/v1", "actionId": "a1", "runtimeEpoch": epoch, "settled": true }));
    // The reply of the next action is lost after its effect; one cancel with the same identity returns the receipt.
    env.control(json!({ "op": "faults", "set": { "sdkDropReplies": 1 } }));
    let body = json!({ "selector": { "text": "Sign in" }, "actionId": "a2", "execution": exec("a2", &epoch) }).to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("POST /v1/action/tap-target HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
    let mut buf = vec![];
    assert_eq!(s.read_to_end(&mut buf).unwrap_or(0), 0);
    let c = post("/v1/action/cancel", json!({ "actionId": "a2", "runtimeEpoch": epoch }));
    assert_eq!(c["ok"], true);
    let receipt = &c["executionResult"];
    assert_eq!((receipt["actionId"].as_str(), receipt["ok"].as_bool(), receipt["targetValidation"].as_str()), (Some("a2"), Some(true), Some("aab.native-target/v1")));
    assert_eq!(receipt["target"]["resourceName"], "com.example.aab.sample:id/sign_in");
    let st = env.state();
    assert_eq!(st["apps"][0]["screen"], "welcome");
    assert_eq!(st["apps"][0]["capture"]["network"][0]["requestBody"], "{\"email\":\"bob@example.com\"}");
    // Rejections before admission have no `execution` member.
    let r = post("/v1/action/tap", json!({ "x": 1, "y": 1, "actionId": "a2", "execution": exec("a2", &epoch) }));
    assert_eq!(r, json!({ "ok": false, "error": "native_action_id_reused", "message": "Native execution rejected: native_action_id_reused", "dispatched": false, "ambiguous": false }));
    let r = post("/v1/action/tap", json!({ "x": 1, "y": 1, "actionId": "a3", "execution": exec("a3", "1700000000000-00000000-0000-4000-8000-000000000000") }));
    assert_eq!(r["error"], "native_runtime_changed");
    let mut bad = exec("a4", &epoch);
    bad["extra"] = json!(1);
    assert_eq!(post("/v1/action/tap", json!({ "x": 1, "y": 1, "actionId": "a4", "execution": bad }))["error"], "invalid_native_execution");
    // A target that is not there settles as a failure, not dispatched.
    let r = post("/v1/action/tap-target", json!({ "selector": { "text": "Nope" }, "actionId": "a5", "execution": exec("a5", &epoch) }));
    assert_eq!((r["ok"].as_bool(), r["error"].as_str(), r["dispatched"].as_bool(), r["settled"].as_bool()), (Some(false), Some("native_selector_not_found"), Some(false), Some(true)));
    assert_eq!(post("/v1/action/cancel", json!({ "actionId": "a2", "runtimeEpoch": epoch }))["error"], "native_action_not_active");
    // Coordinate tap through the SDK is a real tap in ground truth.
    let r = post("/v1/action/tap", json!({ "x": 540, "y": 470, "actionId": "a6", "execution": exec("a6", &epoch) }));
    assert_eq!((r["ok"].as_bool(), r["targetValidation"].as_str()), (Some(true), Some("coordinates")));
    assert_eq!(env.truth("tap").last().unwrap()["data"]["hit"]["id"], "sign_out");
    let settled: Vec<Value> = env.state()["apps"][0]["capture"]["events"].as_array().unwrap().iter().filter(|e| e["name"] == "native.action.settled").cloned().collect();
    assert_eq!(settled.len(), 4);
}
