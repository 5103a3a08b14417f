//! The SDK dialect against raw HTTP: descriptor, identity headers and every
//! 409 code, `runtimeBinding` on every body, the secure view tree, capture
//! query rules and paging, response faults.

use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn descriptor_identity_headers_and_runtime_binding() {
    let sim = sim().await;
    let app = app(&sim, APP).await;
    // The descriptor: sorted keys, ready, the bound port.
    let d = sim.control(json!({ "op": "descriptor", "bundleId": APP })).await;
    let text = d["text"].as_str().unwrap();
    let keys: Vec<&str> = d["descriptor"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["bundleId", "error", "ok", "port", "processId", "runtimeEpoch", "schemaVersion", "sdkVersion", "updatedAtMs"]);
    assert!(text.starts_with("{\"bundleId\":"), "{text}");
    assert_eq!(d["descriptor"]["ok"], true);
    assert_eq!(d["descriptor"]["port"], app.port);

    let ok = app.get("/v1/status").await;
    assert_eq!(ok.status, 200);
    app.assert_binding(&ok);
    assert_eq!(ok.body["debugBridge"]["runtimeEpoch"], json!(app.epoch));
    assert_eq!(ok.body["debugBridge"]["h5TargetSchema"], "aab.ios-h5-target/v1");
    assert_eq!(ok.body["app"]["bundleId"], APP);
    assert_eq!(ok.body["activity"]["current"], "LoginViewController");

    // Missing, mismatched and duplicated headers.
    let none = http(app.port, "GET", "/v1/view/tree", &[], None).await.unwrap();
    assert_eq!((none.status, none.body["error"].as_str()), (409, Some("ios_runtime_binding_required")));
    assert_eq!(none.body["dispatched"], false);
    app.assert_binding(&none);
    let mut partial = app.headers();
    partial.pop();
    let r = http(app.port, "GET", "/v1/status", &partial, None).await.unwrap();
    assert_eq!((r.status, r.body["error"].as_str()), (409, Some("ios_runtime_binding_required")));
    let mut wrong = app.headers();
    wrong[2].1 = "0F0F0F0F-0000-4000-8000-000000000000".into();
    let r = http(app.port, "GET", "/v1/status", &wrong, None).await.unwrap();
    assert_eq!((r.status, r.body["error"].as_str()), (409, Some("ios_runtime_binding_mismatch")));
    app.assert_binding(&r);
    let mut dup = app.headers();
    dup.push(dup[3].clone());
    let r = http(app.port, "GET", "/v1/status", &dup, None).await.unwrap();
    assert_eq!((r.status, r.body["error"].as_str()), (409, Some("ios_runtime_binding_mismatch")));
    // Mutations are identity-checked too; capture inputs are not.
    let r = http(app.port, "POST", "/v1/h5/action", &[], Some(b"{}")).await.unwrap();
    assert_eq!(r.body["error"], "ios_runtime_binding_required");
    let r = http(app.port, "POST", "/v1/logs", &[], Some(json!({ "message": "hello", "tag": "T" }).to_string().as_bytes())).await.unwrap();
    assert_eq!((r.status, r.body["accepted"].as_bool()), (200, Some(true)), "{:?}", r.body);
    app.assert_binding(&r);
    // Unknown route, unsupported native actions, oversized request: all bound.
    let r = app.get("/v1/nope").await;
    assert_eq!((r.status, r.body["error"].as_str()), (404, Some("not_found")));
    app.assert_binding(&r);
    let r = app.post("/v1/action/tap", &json!({ "x": 1, "y": 2 })).await;
    assert_eq!(r.body["error"], "ios_runtime_action_unsupported");
    let head = format!("POST /v1/logs HTTP/1.1\r\nHost: device\r\nContent-Length: {}\r\n\r\n", 9 * 1024 * 1024);
    let r = raw(app.port, head.as_bytes()).await.unwrap();
    assert_eq!(r.status, 413);
    app.assert_binding(&r);

    // Descriptor not ready: the file says so and identity-checked routes refuse.
    sim.control(json!({ "op": "faults", "set": { "descriptorNotReady": true } })).await;
    let d = sim.control(json!({ "op": "descriptor", "bundleId": APP })).await;
    assert_eq!((d["descriptor"]["ok"].as_bool(), d["descriptor"]["port"].as_u64(), d["descriptor"]["error"].as_str()), (Some(false), Some(0), Some("listener_waiting")));
    let r = app.get("/v1/status").await;
    assert_eq!((r.status, r.body["error"].as_str()), (409, Some("ios_runtime_descriptor_unavailable")));
    // A stale descriptor names the previous process after a relaunch.
    sim.control(json!({ "op": "faults", "clear": true })).await;
    sim.control(json!({ "op": "launch", "bundleId": APP })).await;
    let fresh = app_after_relaunch(&sim).await;
    assert_ne!(fresh.epoch, app.epoch);
    sim.control(json!({ "op": "faults", "set": { "descriptorStale": true } })).await;
    let d = sim.control(json!({ "op": "descriptor", "bundleId": APP })).await;
    assert_eq!(d["descriptor"]["runtimeEpoch"], json!(app.epoch), "the previous process's epoch");
    sim.control(json!({ "op": "faults", "set": { "descriptorStale": false, "descriptorInvalid": true } })).await;
    let d = sim.control(json!({ "op": "descriptor", "bundleId": APP })).await;
    assert!(d["descriptor"].is_null() && d["text"].is_string(), "not JSON: {d}");
    sim.control(json!({ "op": "faults", "set": { "descriptorInvalid": false, "descriptorAbsent": true } })).await;
    assert_eq!(sim.control(json!({ "op": "descriptor", "bundleId": APP })).await["error"], "not_found");
    sim.control(json!({ "op": "faults", "clear": true })).await;
    // The old process's port no longer answers as that runtime.
    assert!(http(app.port, "GET", "/v1/status", &app.headers(), None).await.is_none_or(|r| r.body["runtimeBinding"]["runtimeEpoch"] != json!(app.epoch)));
    // Response faults: another binding, a missing ok.
    sim.control(json!({ "op": "faults", "set": { "responseBindingMismatch": true, "responseOkMissing": true } })).await;
    let r = fresh.get("/v1/status").await;
    assert_ne!(r.body["runtimeBinding"]["runtimeEpoch"], json!(fresh.epoch));
    assert!(r.body.get("ok").is_none());
}

async fn app_after_relaunch(sim: &aab_ios_sim::Simulator) -> App {
    app(sim, APP).await
}

#[tokio::test]
async fn the_tree_hides_the_password_and_sign_in_captures_are_queryable() {
    let sim = sim().await;
    let app = app(&sim, APP).await;
    for (id, text) in [("username", "alice"), ("password", "s3cret!")] {
        assert_eq!(sim.control(json!({ "op": "input", "bundleId": APP, "id": id, "text": text })).await["ok"], true);
    }
    tap_id(&sim, APP, "signIn").await;
    let native = sim.control(json!({ "op": "native", "bundleId": APP })).await;
    assert_eq!(native["ui"]["texts"]["status"], "Signed in as alice");

    let tree = app.get("/v1/view/tree").await;
    app.assert_binding(&tree);
    let text = tree.body.to_string();
    assert!(!text.contains("s3cret"), "the password never leaves the SDK");
    let mut nodes = vec![];
    fn walk<'a>(n: &'a Value, out: &mut Vec<&'a Value>) {
        out.push(n);
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, out);
        }
    }
    walk(&tree.body["root"], &mut nodes);
    let by_id = |id: &str| nodes.iter().find(|n| n["accessibilityIdentifier"] == id).copied().unwrap_or_else(|| panic!("{id}"));
    assert_eq!(by_id("password")["input"], json!({ "secure": true, "textLength": 7, "rawTextCaptured": false }));
    assert!(by_id("password")["text"].is_null());
    assert_eq!(by_id("username")["text"], "alice");
    assert_eq!(by_id("status")["text"], "Signed in as alice");
    assert_eq!(tree.body["nodeCount"].as_u64().unwrap() as usize, nodes.len());
    let shot = app.get("/v1/screenshot").await;
    let png = aab_ios_sim::util::unb64(shot.body["base64"].as_str().unwrap()).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!((shot.body["width"].as_u64(), shot.body["scale"].as_f64()), (Some(1170), Some(3.0)));

    // Captures: the sign-in wrote one record per stream; state has its stateKey.
    let events = app.get("/v1/events?view=decision-window&sinceId=0").await;
    assert!(events.body["items"].as_array().unwrap().iter().any(|i| i["name"] == "signIn.succeeded"), "{:?}", events.body);
    assert_eq!(events.body["coverage"]["committed"], true);
    let state = app.get("/v1/state").await;
    assert_eq!(state.body["values"]["session:user"], "alice");
    assert_eq!(state.body["items"][0]["stateKey"], "session:user");
    // Query rules.
    for (q, detail) in [
        ("bogus=1", "unknown_parameter: bogus"),
        ("limit=0", "limit_out_of_range"),
        ("limit=1001", "limit_out_of_range"),
        ("sinceId=-1", "invalid_number: sinceId"),
        ("sinceId=1e3", "invalid_number: sinceId"),
        ("view=everything", "unknown_view: everything"),
        ("view=connected-history&sinceId=1", "capture_id_filter_requires_runtime_epoch"),
        ("view=decision-window&afterActionId=a1", "action_filter_requires_bound"),
        ("factCursor=garbage", "invalid_fact_cursor"),
    ] {
        let r = app.get(&format!("/v1/logs?{q}")).await;
        assert_eq!((r.body["ok"].as_bool(), r.body["error"].as_str(), r.body["detail"].as_str()), (Some(false), Some("invalid_argument"), Some(detail)), "{q}: {:?}", r.body);
        app.assert_binding(&r);
    }
    let long = "x".repeat(1025);
    let r = app.get(&format!("/v1/logs?targetKey={long}")).await;
    assert_eq!(r.body["detail"], "invalid_string_length: targetKey");
    // Paging: three posted logs, one per page, cursors keep the upper bound.
    for i in 0..3 {
        app.post("/v1/logs", &json!({ "message": format!("m{i}"), "tag": "Page", "actionId": "act-1" })).await;
    }
    let mut seen = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("/v1/logs?view=decision-window&limit=1&factCursor={}", aab_ios_sim::util::url_encode(c)),
            None => "/v1/logs?view=decision-window&limit=1&sinceId=0".into(),
        };
        let r = app.get(&q).await;
        assert_eq!(r.body["ok"], true, "{:?}", r.body);
        seen.extend(r.body["items"].as_array().unwrap().iter().map(|i| i["message"].as_str().unwrap().to_string()));
        if r.body["hasMore"] != true {
            assert_eq!(r.body["throughWatermark"], true);
            break;
        }
        assert_eq!(r.body["coverage"]["status"], "partial");
        cursor = r.body["nextCursor"].as_str().map(str::to_string);
        assert!(seen.len() < 10);
    }
    assert_eq!(seen, ["sign in succeeded", "m0", "m1", "m2"]);
    // An exact reference in connected history.
    let first = app.get("/v1/logs?view=connected-history").await;
    let mfid = first.body["refs"][1]["mobileFactId"].as_str().unwrap().to_string();
    let r = app.get(&format!("/v1/logs?view=connected-history&runtimeEpoch={}&mobileFactId={}", app.epoch, aab_ios_sim::util::url_encode(&mfid))).await;
    assert_eq!((r.body["count"].as_u64(), r.body["items"][0]["message"].as_str()), (Some(1), Some("m0")));
    // The on-demand UI observer: one lease.
    let r = app.post("/v1/ui/observation", &json!({ "operation": "start", "durationMs": 5000 })).await;
    assert_eq!((r.body["active"].as_bool(), r.body["mode"].as_str(), r.body["maxDurationMs"].as_u64()), (Some(true), Some("on-demand"), Some(5000)));
    let lease = r.body["leaseId"].as_str().unwrap().to_string();
    assert_eq!(app.post("/v1/ui/observation", &json!({ "operation": "start", "durationMs": 100 })).await.body["error"], "ui_observation_busy");
    assert_eq!(app.post("/v1/ui/observation", &json!({ "operation": "status", "leaseId": "other" })).await.body["error"], "ui_observation_lease_mismatch");
    assert_eq!(app.post("/v1/ui/observation", &json!({ "operation": "status", "leaseId": lease })).await.body["sampleCount"], 1);
    assert_eq!(app.post("/v1/ui/observation", &json!({ "operation": "stop", "leaseId": lease })).await.body["active"], false);
    assert_eq!(app.post("/v1/ui/observation", &json!({ "operation": "start", "durationMs": 5001 })).await.body["error"], "invalid_ui_observation_duration");
    // clear-data empties the captures only (the UI keeps its state).
    let r = app.post("/v1/app/clear-data", &json!({})).await;
    assert_eq!(r.body["ok"], true);
    assert_eq!(app.get("/v1/logs").await.body["count"], 0);
    assert_eq!(sim.control(json!({ "op": "native", "bundleId": APP })).await["ui"]["texts"]["status"], "Signed in as alice");
}
