//! Flutter actions through `/v1/flutter/action` under the managed envelope:
//! the Dart epoch, a tap that changes the counter, id reuse, the slot shared
//! with H5 (busy), the ambiguous pending reply after a timeout, lost replies
//! and lost completions, and durable result lookup across a relaunch.

use serde_json::{Value, json};

use crate::common::*;

async fn open_flutter(sim: &aab_ios_sim::Simulator, app: &App) -> (String, Value) {
    tap_id(sim, APP, "openFlutter").await;
    let st = app.get("/v1/status").await;
    let op = st.body["flutter"]["layout"]["operable"].clone();
    assert_eq!(op["ok"], true, "{:?}", st.body["flutter"]);
    (op["runtimeEpoch"].as_str().unwrap().to_string(), op)
}

fn node<'a>(op: &'a Value, text: &str) -> &'a Value {
    op["nodes"].as_array().unwrap().iter().find(|n| n["text"] == text).unwrap_or_else(|| panic!("{text} in {op}"))
}

async fn counter(sim: &aab_ios_sim::Simulator) -> i64 {
    let f = sim.control(json!({ "op": "flutter", "bundleId": APP })).await;
    f["engine"]["counters"]["counter"].as_i64().unwrap_or(0)
}

fn tap(id: &str, epoch: &str, timeout_ms: u64) -> Value {
    json!({ "action": "tapText", "text": "Increment", "actionId": id, "execution": execution("flutter", id, epoch, timeout_ms) })
}

#[tokio::test]
async fn a_flutter_tap_changes_the_counter_and_the_slot_is_shared() {
    let sim = sim().await;
    let app = app(&sim, APP).await;
    let (dart, op) = open_flutter(&sim, &app).await;
    assert_ne!(dart, app.epoch, "the Dart engine has its own epoch");
    let inc = node(&op, "Increment");
    let body = json!({ "action": "tapTarget", "selector": { "text": "Increment" }, "targetRef": inc["targetRef"], "actionId": "f1", "execution": execution("flutter", "f1", &dart, 5000) });
    let r = app.post("/v1/flutter/action", &body).await;
    app.assert_binding(&r);
    assert_eq!((r.body["ok"].as_bool(), r.body["settled"].as_bool(), r.body["dispatched"].as_bool()), (Some(true), Some(true), Some(true)), "{:?}", r.body);
    assert_eq!(r.body["execution"], json!({ "schemaVersion": "aab.flutter-execution/v1", "actionId": "f1", "runtimeEpoch": dart, "settled": true }));
    assert_eq!(counter(&sim).await, 1);
    assert!(truth(&sim, "flutter").await.iter().any(|t| t["actionId"] == "f1" && t["counter"]["counter"] == 1));
    let st = app.get("/v1/status").await;
    assert_eq!(node(&st.body["flutter"]["layout"]["operable"], "Count: 1")["widgetType"], "Text");
    // The old targetRef's guard still matches (the button did not change); the text did.
    let r = app.post("/v1/flutter/action", &body).await;
    assert_eq!(r.body["error"], "ios_action_id_reused");
    assert!(r.body.get("execution").is_none(), "a rejection before admission has no execution member");
    let r = app.post("/v1/flutter/action", &tap("f1b", &app.epoch, 5000)).await;
    assert_eq!(r.body["error"], "flutter_runtime_changed");
    let r = app.post("/v1/flutter/action", &json!({ "action": "tapText", "text": "Increment", "actionId": "f1c", "execution": { "schemaVersion": "aab.flutter-execution/v1", "actionId": "f1c", "runtimeEpoch": dart } })).await;
    assert_eq!(r.body["error"], "invalid_flutter_execution");
    assert_eq!(counter(&sim).await, 1, "rejections change nothing");

    // Busy: a queued action holds the one slot; a second Flutter or an H5 action is refused.
    sim.control(json!({ "op": "faults", "set": { "actionQueueMs": 600000 } })).await;
    let queued = {
        let app = app.clone();
        let dart = dart.clone();
        tokio::spawn(async move { app.post("/v1/flutter/action", &tap("f2", &dart, 600000)).await })
    };
    let active = until("f2 active", || async {
        let r = app.get("/v1/execution/status").await;
        (r.body["active"]["actionId"] == "f2").then_some(r.body["active"].clone())
    })
    .await;
    assert_eq!((active["kind"].as_str(), active["permissionIssued"].as_bool()), (Some("flutter"), Some(false)));
    let r = app.post("/v1/flutter/action", &tap("f3", &dart, 5000)).await;
    assert_eq!(r.body["error"], "ios_action_busy");
    let page_ref = json!({ "schemaVersion": "aab.ios-h5-target/v1", "runtimeEpoch": app.epoch, "bundleId": APP, "processId": app.pid, "webViewId": "checkout", "documentId": "d", "url": "http://x/" });
    let h5 = json!({ "payload": { "action": "eval", "pageRef": page_ref, "script": "1" }, "actionId": "h1", "execution": execution("h5", "h1", &app.epoch, 5000) });
    let r = app.post("/v1/h5/action", &h5).await;
    assert_eq!(r.body["error"], "ios_action_busy", "{:?}", r.body);
    // Cancelling the queued action ends it before its permission: not dispatched.
    let c = app.post("/v1/flutter/cancel", &json!({ "actionId": "f2", "runtimeEpoch": dart })).await;
    assert_eq!((c.body["ok"].as_bool(), c.body["executionResult"]["error"].as_str(), c.body["executionResult"]["dispatched"].as_bool()), (Some(true), Some("flutter_action_cancelled"), Some(false)), "{:?}", c.body);
    let r = queued.await.unwrap();
    assert_eq!(r.body["error"], "flutter_action_cancelled");
    assert_eq!(counter(&sim).await, 1, "the cancelled action never ran");
    sim.control(json!({ "op": "faults", "clear": true })).await;
    assert_eq!(app.post("/v1/flutter/action", &tap("f3", &dart, 5000)).await.body["ok"], true);
    assert_eq!(counter(&sim).await, 2);

    // A timeout while running: the pending ambiguous reply, then the real completion.
    sim.control(json!({ "op": "faults", "set": { "actionDelayMs": 3000 } })).await;
    let r = app.post("/v1/flutter/action", &tap("f4", &dart, 100)).await;
    assert_eq!((r.body["settled"].as_bool(), r.body["ambiguous"].as_bool(), r.body["error"].as_str()), (Some(false), Some(true), Some("flutter_action_timeout")), "{:?}", r.body);
    assert!(r.body["dispatched"].is_null());
    let done = until("f4 settles", || async {
        let q = format!("/v1/execution/result?kind=flutter&actionId=f4&runtimeEpoch={dart}");
        let r = app.get(&q).await;
        (r.body["found"] == true).then_some(r.body)
    })
    .await;
    assert_eq!((done["executionResult"]["ok"].as_bool(), done["executionResult"]["error"].as_str(), done["executionResult"]["dispatched"].as_bool()), (Some(false), Some("flutter_action_timeout"), Some(true)));
    assert_eq!(counter(&sim).await, 3, "the effect happened even though the reply was a timeout");
    sim.control(json!({ "op": "faults", "clear": true })).await;

    // Routes: push and back.
    let r = app.post("/v1/flutter/action", &json!({ "action": "tapText", "text": "Details", "actionId": "f5", "execution": execution("flutter", "f5", &dart, 5000) })).await;
    assert_eq!(r.body["ok"], true);
    let r = app.post("/v1/flutter/action", &json!({ "action": "back", "actionId": "f6", "execution": execution("flutter", "f6", &dart, 5000) })).await;
    assert_eq!((r.body["popped"].as_bool(), r.body["route"].as_str()), (Some(true), Some("home")));
}

#[tokio::test]
async fn lost_replies_and_completions_and_lookup_after_a_relaunch() {
    let sim = sim().await;
    let app = app(&sim, APP).await;
    let (dart, _) = open_flutter(&sim, &app).await;
    assert_eq!(app.post("/v1/flutter/action", &tap("a1", &dart, 5000)).await.body["ok"], true);
    // The reply is lost but the completion is durable: cancel proves it.
    sim.control(json!({ "op": "faults", "set": { "dropNextActionReply": true } })).await;
    assert!(http(app.port, "POST", "/v1/flutter/action", &app.headers(), Some(tap("a2", &dart, 5000).to_string().as_bytes())).await.is_none(), "no reply");
    assert_eq!(counter(&sim).await, 2, "the action ran");
    let r = app.post("/v1/flutter/cancel", &json!({ "actionId": "a2", "runtimeEpoch": dart })).await;
    assert_eq!((r.body["ok"].as_bool(), r.body["executionResult"]["actionId"].as_str(), r.body["executionResult"]["ok"].as_bool()), (Some(true), Some("a2"), Some(true)), "{:?}", r.body);
    // Lost reply AND lost completion: nothing can prove it.
    sim.control(json!({ "op": "faults", "set": { "dropNextActionReply": true, "loseCompletion": true } })).await;
    assert!(http(app.port, "POST", "/v1/flutter/action", &app.headers(), Some(tap("a3", &dart, 5000).to_string().as_bytes())).await.is_none());
    assert_eq!(counter(&sim).await, 3);
    let r = app.post("/v1/flutter/cancel", &json!({ "actionId": "a3", "runtimeEpoch": dart })).await;
    assert_eq!((r.body["ok"].as_bool(), r.body["error"].as_str(), r.body["ambiguous"].as_bool()), (Some(false), Some("ios_action_not_active"), Some(true)));
    let r = app.get(&format!("/v1/execution/result?kind=flutter&actionId=a3&runtimeEpoch={dart}")).await;
    assert_eq!((r.body["found"].as_bool(), r.body["hasMore"].as_bool()), (Some(false), Some(false)));
    let r = app.post("/v1/flutter/cancel", &json!({ "actionId": "a3" })).await;
    assert_eq!(r.body["error"], "invalid_ios_execution");

    // A relaunch: a new runtime; the old completions are still on disk, paged.
    let l = sim.control(json!({ "op": "launch", "bundleId": APP })).await;
    assert_ne!(l["runtimeEpoch"], json!(app.epoch));
    let fresh = crate::common::app(&sim, APP).await;
    sim.control(json!({ "op": "faults", "set": { "completionPageRecords": 1 } })).await;
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let found = loop {
        let mut q = format!("/v1/execution/result?kind=flutter&actionId=a2&runtimeEpoch={dart}");
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={}", aab_ios_sim::util::url_encode(c)));
        }
        let r = fresh.get(&q).await;
        fresh.assert_binding(&r);
        pages += 1;
        if r.body["found"] == true {
            break r.body;
        }
        assert_eq!(r.body["hasMore"], true, "{:?}", r.body);
        cursor = r.body["nextCursor"].as_str().map(str::to_string);
        assert!(pages < 10);
    };
    assert_eq!(pages, 2, "a1 is the first record, a2 the second");
    assert_eq!((found["receipt"]["sequence"].as_u64(), found["receipt"]["committed"].as_bool()), (Some(2), Some(true)));
    assert_eq!(found["executionResult"]["execution"]["runtimeEpoch"], json!(dart));
    let r = fresh.get(&format!("/v1/execution/result?kind=flutter&actionId=a2&runtimeEpoch={dart}&cursor=bm90LWEtY3Vyc29y")).await;
    assert_eq!(r.body["error"], "invalid_ios_completion_cursor");
    let r = fresh.get(&format!("/v1/execution/result?kind=flutter&actionId=a2&runtimeEpoch={dart}&extra=1")).await;
    assert_eq!(r.body["ok"], false);
    // The new process has no Flutter engine until its Flutter screen shows.
    let r = fresh.post("/v1/flutter/action", &tap("b1", &dart, 5000)).await;
    assert_eq!(r.body["error"], "flutter_action_handler_absent");
}
