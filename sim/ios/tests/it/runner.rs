//! The WDA Runner on a simulated device: it becomes the foreground app, and
//! its managed actions drive the sample app's native screen — typed fields,
//! a tap on Sign in, a rotation — visible in the SDK's view tree and in truth.

use serde_json::{Value, json};

use crate::common::*;

struct Wda {
    port: u16,
    identity: Vec<(String, String)>,
    epoch: String,
}

impl Wda {
    async fn call(&self, method: &str, path: &str, extra: &[(String, String)], body: Option<&Value>) -> Value {
        let mut h = self.identity.clone();
        h.extend(extra.iter().cloned());
        let r = http(self.port, method, path, &h, body.map(|b| b.to_string()).as_deref().map(str::as_bytes)).await.expect("a WDA reply");
        assert_eq!(r.body["wdaBinding"]["runtimeEpoch"], json!(self.epoch), "{:?}", r.body);
        r.body
    }

    async fn act(&self, id: &str, operation: &str, target: &Value, payload: Value) -> Value {
        let body = json!({ "operation": operation, "target": target, "payload": payload, "actionId": id, "execution": { "schemaVersion": "aab.wda-execution/v1", "actionId": id, "runtimeEpoch": self.epoch, "timeoutMs": 10000 } });
        self.call("POST", "/aab/action", &[], Some(&body)).await["value"].clone()
    }
}

fn find<'a>(n: &'a Value, id: &str) -> Option<&'a Value> {
    if n["rawIdentifier"] == id {
        return Some(n);
    }
    n["children"].as_array()?.iter().find_map(|c| find(c, id))
}

#[tokio::test]
async fn wda_actions_drive_the_native_screen() {
    let sim = sim().await;
    let before = app(&sim, APP).await;
    let started = sim.control(json!({ "op": "start-runner" })).await;
    assert_eq!(started["ok"], true, "{started}");
    assert_eq!(sim.control(json!({ "op": "state" })).await["foreground"], "io.github.mobileaidev.aiappbridge.wda.xctrunner");
    let d = &started["descriptor"];
    let wda = Wda {
        port: d["port"].as_u64().unwrap() as u16,
        epoch: d["runtimeEpoch"].as_str().unwrap().into(),
        identity: vec![
            ("X-AAB-WDA-Schema".into(), "aab.ios-wda/v1".into()),
            ("X-AAB-WDA-Bundle-Id".into(), d["bundleId"].as_str().unwrap().into()),
            ("X-AAB-WDA-Runtime-Epoch".into(), d["runtimeEpoch"].as_str().unwrap().into()),
            ("X-AAB-WDA-Process-Id".into(), d["processId"].to_string()),
            ("X-AAB-WDA-Port".into(), d["port"].to_string()),
        ],
    };
    // The app under test is not foreground: no session for it yet.
    let target = json!({ "bundleId": APP, "processId": before.pid });
    let r = wda.act("s0", "session-create", &target, json!({})).await;
    assert_eq!(r["ok"], false, "{r}");
    // Bring it forward (same process), then a session.
    let l = sim.control(json!({ "op": "launch", "bundleId": APP, "terminateExisting": false })).await;
    assert_eq!(l["pid"].as_u64(), Some(before.pid));
    let r = wda.act("s1", "session-create", &target, json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    let sid = r["value"]["sessionId"].as_str().unwrap().to_string();
    let target = json!({ "bundleId": APP, "processId": before.pid, "sessionId": sid });
    let th = vec![
        ("X-AAB-WDA-Target-Bundle-Id".to_string(), APP.to_string()),
        ("X-AAB-WDA-Target-Process-Id".to_string(), before.pid.to_string()),
        ("X-AAB-WDA-Session-Id".to_string(), sid.clone()),
    ];
    let source = wda.call("GET", &format!("/session/{sid}/source?format=json"), &th, None).await["value"].clone();
    assert_eq!(source["type"], "XCUIElementTypeApplication");
    let user = find(&source, "username").unwrap()["elementId"].as_str().unwrap().to_string();
    let pass = find(&source, "password").unwrap()["elementId"].as_str().unwrap().to_string();
    assert_eq!(wda.act("i1", "input", &target, json!({ "elementId": user, "text": "bob", "clearFirst": true })).await["ok"], true);
    assert_eq!(wda.act("i2", "input", &target, json!({ "elementId": pass, "text": "hunter2", "clearFirst": false })).await["ok"], true);
    let source = wda.call("GET", &format!("/session/{sid}/source?format=json"), &th, None).await["value"].clone();
    assert_eq!(find(&source, "password").unwrap()["value"], "•••••••", "XCTest shows bullets");
    let rect = find(&source, "signIn").unwrap()["rect"].clone();
    let (x, y) = (rect["x"].as_f64().unwrap() + rect["width"].as_f64().unwrap() / 2.0, rect["y"].as_f64().unwrap() + rect["height"].as_f64().unwrap() / 2.0);
    let r = wda.act("t1", "tap", &target, json!({ "x": x, "y": y })).await;
    assert_eq!(r["ok"], true, "{r}");
    // The effect, seen by the SDK and by ground truth.
    let tree = before.get("/v1/view/tree").await.body.to_string();
    assert!(tree.contains("Signed in as bob") && !tree.contains("hunter2"));
    let taps = truth(&sim, "native-tap").await;
    assert!(taps.iter().any(|t| t["by"] == "wda" && t["element"] == "signIn"), "{taps:?}");
    let typed = truth(&sim, "native-type").await;
    assert!(typed.iter().any(|t| t["text"] == "bob") && typed.iter().all(|t| t["text"] != "hunter2"));
    // Rotation: observed, and the SDK tree is laid out for it.
    let r = wda.act("o1", "set-orientation", &target, json!({ "orientation": "landscapeLeft" })).await;
    assert_eq!(r["value"]["observedInterfaceOrientation"], "landscapeLeft", "{r}");
    let tree = before.get("/v1/view/tree").await;
    assert_eq!(tree.body["root"]["bounds"]["width"], 844.0);
    let r = wda.act("o2", "set-orientation", &target, json!({ "orientation": "portraitUpsideDown" })).await;
    assert_eq!(r["error"], "ios_wda_orientation_not_observed", "the app does not support it: {r}");
    // Another app in front: the session's app is no longer foreground.
    sim.control(json!({ "op": "launch", "bundleId": OTHER })).await;
    let st = before.get("/v1/status").await;
    assert_eq!(st.body["app"]["applicationState"], "background");
    let r = wda.act("t2", "tap", &target, json!({ "x": x, "y": y })).await;
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(truth(&sim, "native-tap").await.len(), taps.len(), "no second tap landed");
}
