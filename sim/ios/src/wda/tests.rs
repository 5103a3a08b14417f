//! Unit tests of the Runner below HTTP: body validation, the completion store
//! and its cursors, faults, and the admission slot driven against the fake
//! screen (whose effect log is the ground truth).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::fake_screen::{APP, APP_PID, FakeScreen};
use super::store::{Scope, Store};
use super::*;

const RUNNER: &str = "io.github.mobileaidev.aiappbridge.wda.xctrunner";

fn shared(screen: Arc<FakeScreen>, dir: &Path) -> Arc<Shared> {
    Arc::new(Shared {
        cfg: RunnerConfig { runner_bundle_id: RUNNER.into(), bind: "127.0.0.1".parse().unwrap(), process_id: 77, store_dir: dir.into() },
        epoch: ids::uuid_v4(),
        port: 1,
        screen,
        faults: Mutex::default(),
        session: Mutex::new(None),
        slot: exec::Slot::default(),
        store: Store::open(dir),
    })
}

fn body(epoch: &str, id: &str, operation: &str, target: Value, payload: Value, timeout_ms: u64) -> Value {
    json!({
        "operation": operation, "target": target, "payload": payload, "actionId": id,
        "execution": { "schemaVersion": "aab.wda-execution/v1", "actionId": id, "runtimeEpoch": epoch, "timeoutMs": timeout_ms },
    })
}

async fn act(s: &Arc<Shared>, b: Value) -> Result<Value, binding::Rejection> {
    let req = action::parse(&b, &s.epoch)?;
    Ok(exec::submit(s, req).await?.value)
}

/// Opens a session on the fake App; returns the session target.
async fn open_session(s: &Arc<Shared>) -> Value {
    let r = act(s, body(&s.epoch, "open", "session-create", json!({ "bundleId": APP, "processId": APP_PID }), json!({}), 5000)).await.unwrap();
    assert_eq!(r["ok"], true, "{r}");
    json!({ "bundleId": APP, "processId": APP_PID, "sessionId": r["value"]["sessionId"] })
}

#[test]
fn action_bodies_are_validated_before_admission() {
    let epoch = "EPOCH-1";
    let t = json!({ "bundleId": APP, "processId": 1, "sessionId": "S" });
    let tref = json!({ "elementId": "E", "type": "XCUIElementTypeButton", "identifier": null, "label": "OK" });
    let cases: Vec<(Value, &str)> = vec![
        (json!([1]), "invalid_ios_wda_action"),
        ({ let mut b = body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 10); b["extra"] = json!(1); b }, "invalid_ios_wda_action"),
        ({ let mut b = body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 10); b["execution"]["actionId"] = json!("b"); b }, "invalid_ios_wda_execution"),
        ({ let mut b = body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 10); b["execution"]["schemaVersion"] = json!("aab.wda-execution/v2"); b }, "invalid_ios_wda_execution"),
        (body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 0), "invalid_ios_wda_execution"),
        (body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 2_147_483_648), "invalid_ios_wda_execution"),
        (body("OTHER", "a", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 10), "ios_wda_binding_mismatch"),
        (body(epoch, "a b", "tap", t.clone(), json!({ "x": 1, "y": 2 }), 10), "invalid_ios_wda_execution"),
        (body(epoch, "a", "press", t.clone(), json!({}), 10), "invalid_ios_wda_action"),
        (body(epoch, "a", "tap", json!({ "bundleId": APP, "processId": 1 }), json!({ "x": 1, "y": 2 }), 10), "invalid_ios_wda_action"),
        (body(epoch, "a", "session-create", t.clone(), json!({}), 10), "invalid_ios_wda_action"),
        (body(epoch, "a", "session-close", t.clone(), json!({ "force": true }), 10), "invalid_ios_wda_action"),
        (body(epoch, "a", "tap", t.clone(), json!({ "x": -1, "y": 2 }), 10), "invalid_ios_wda_coordinate"),
        (body(epoch, "a", "tap", t.clone(), json!({ "x": 1, "y": 100001 }), 10), "invalid_ios_wda_coordinate"),
        (body(epoch, "a", "swipe", t.clone(), json!({ "startX": 1, "startY": 2, "endX": 3, "endY": 4, "durationMs": 0 }), 10), "invalid_ios_wda_duration"),
        (body(epoch, "a", "swipe", t.clone(), json!({ "startX": 1, "startY": 2, "endX": 3, "endY": 4, "durationMs": 120001 }), 10), "invalid_ios_wda_duration"),
        (body(epoch, "a", "input", t.clone(), json!({ "elementId": "", "text": "x" }), 10), "invalid_ios_wda_input"),
        (body(epoch, "a", "input", t.clone(), json!({ "elementId": "E", "text": "x".repeat(64 * 1024 + 1) }), 10), "invalid_ios_wda_input"),
        (body(epoch, "a", "input", t.clone(), json!({ "elementId": "E", "text": "x", "clearFirst": "yes" }), 10), "invalid_ios_wda_input"),
        (body(epoch, "a", "native-tap", t.clone(), json!({ "targetRef": { "elementId": "E" } }), 10), "invalid_ios_native_target"),
        (body(epoch, "a", "native-tap", t.clone(), json!({ "targetRef": { "elementId": "E", "type": "B", "identifier": 3, "label": null } }), 10), "invalid_ios_native_target"),
        (body(epoch, "a", "native-input", t.clone(), json!({ "targetRef": tref.clone() }), 10), "invalid_ios_wda_action"),
        (body(epoch, "a", "set-orientation", t.clone(), json!({ "orientation": "landscape" }), 10), "invalid_ios_wda_orientation"),
    ];
    for (b, code) in cases {
        let err = action::parse(&b, epoch).expect_err(&b.to_string());
        assert_eq!(err.code, code, "{b}: {}", err.message);
        assert_eq!(err.value(), json!({ "error": code, "message": err.message, "dispatched": false, "ambiguous": false }));
    }
    let ok = action::parse(&body(epoch, "a", "native-input", t.clone(), json!({ "targetRef": tref, "text": "hi", "clearFirst": true }), 10), epoch).unwrap();
    assert_eq!(ok.operation.name(), "native-input");
    assert_eq!(ok.target.session_id.as_deref(), Some("S"));
}

fn completion(id: &str, epoch: &str) -> Value {
    json!({ "schemaVersion": "aab.wda-completion/v1", "runnerBundleId": RUNNER, "executionResult": { "ok": true, "actionId": id, "runtimeEpoch": epoch, "pad": "x".repeat(100) } })
}

fn scope<'a>(id: &'a str, epoch: &'a str) -> Scope<'a> {
    Scope { runner_bundle_id: RUNNER, action_id: id, runtime_epoch: epoch }
}

#[test]
fn store_pages_through_cursors_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path());
    for i in 0..150 {
        let r = store.append(&completion(&format!("a{i}"), "E1")).unwrap();
        assert_eq!(r.sequence, i + 1);
    }
    // The first page sees 64 records and hands back a cursor bound to its lookup.
    let p1 = store.page(scope("a140", "E1"), None).unwrap();
    assert_eq!((p1["found"].clone(), p1["hasMore"].clone(), p1["nextSequence"].clone(), p1["throughSequence"].clone()), (json!(false), json!(true), json!(65), json!(150)));
    let c1 = p1["nextCursor"].as_str().unwrap().to_string();
    assert!(c1.len() <= 2048);
    assert_eq!(store.page(scope("a1", "E1"), Some(&c1)).unwrap_err().code(), "invalid_ios_wda_completion_cursor");
    assert_eq!(store.page(scope("a140", "E1"), Some("not base64!")).unwrap_err().code(), "invalid_ios_wda_completion_cursor");
    // Records appended after the first page are beyond its fixed bound.
    store.append(&completion("late", "E1")).unwrap();
    let p2 = store.page(scope("a140", "E1"), Some(&c1)).unwrap();
    assert_eq!(p2["found"], false);
    let p3 = store.page(scope("a140", "E1"), p2["nextCursor"].as_str()).unwrap();
    assert_eq!(p3["found"], true, "{p3}");
    assert_eq!(p3["receipt"]["sequence"], 141);
    assert_eq!(p3["receipt"]["committed"], true);
    assert_eq!(p3["executionResult"]["actionId"], "a140");
    // A lookup that ends without a match says so and offers no cursor.
    let mut page = store.page(scope("absent", "E1"), None).unwrap();
    while page["hasMore"] == true {
        page = store.page(scope("absent", "E1"), page["nextCursor"].as_str()).unwrap();
    }
    assert_eq!((page["found"].clone(), page["nextCursor"].clone(), page["settled"].clone()), (json!(false), Value::Null, json!(false)));
    drop(store);
    // Another process opening the same directory sees every committed record and continues the sequence.
    let reopened = Store::open(dir.path());
    assert_eq!(reopened.len(), 151);
    assert_eq!(reopened.find(scope("late", "E1")).unwrap().unwrap().1.sequence, 151);
    assert_eq!(reopened.append(&completion("next", "E2")).unwrap().sequence, 152);
}

#[test]
fn store_cuts_a_torn_tail_and_skips_damaged_records() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path());
    store.append(&completion("a", "E")).unwrap();
    store.append(&completion("b", "E")).unwrap();
    drop(store);
    let path = dir.path().join("aab-wda-completions.log");
    let text = std::fs::read_to_string(&path).unwrap();
    // Damage record 1's JSON (its digest no longer verifies) and leave a torn append behind.
    let damaged = text.replacen("\"a\"", "\"z\"", 1);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(damaged.as_bytes()).unwrap();
    f.write_all(b"3 abc {\"half").unwrap();
    drop(f);
    let store = Store::open(dir.path());
    assert_eq!(store.len(), 1);
    assert!(store.find(scope("a", "E")).unwrap().is_none());
    assert!(store.find(scope("z", "E")).unwrap().is_none());
    assert_eq!(store.append(&completion("c", "E")).unwrap().sequence, 3);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("half"), "the torn tail was cut: {text}");
    assert_eq!(Store::open(dir.path()).find(scope("c", "E")).unwrap().unwrap().1.sequence, 3);
}

#[test]
fn faults_apply_only_the_keys_present() {
    let mut f = faults::Faults::default();
    f.apply(&json!({ "set": { "wdaSlowActionMs": 50, "wdaDropNextActionReply": true }, "loseCompletion": true }));
    assert_eq!((f.slow_action_ms, f.drop_action_replies, f.lose_completion), (50, 1, false));
    f.apply(&json!({ "wdaOrientationIgnored": true }));
    assert!(f.orientation_ignored && f.slow_action_ms == 50);
    assert!(f.take_drop_reply());
    assert!(!f.take_drop_reply());
    f.apply(&json!({ "clear": true }));
    assert_eq!(f, faults::Faults::default());
}

#[tokio::test]
async fn busy_slot_reused_ids_and_cancel_of_a_queued_action() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    s.faults.lock().unwrap().apply(&json!({ "wdaSlowActionMs": 30_000 }));
    let queued = {
        let (s, b) = (s.clone(), body(&s.epoch, "slow", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 60_000));
        tokio::spawn(async move { act(&s, b).await })
    };
    // Wait until the slow action holds the slot.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.slot.active().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the action was never admitted");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let busy = act(&s, body(&s.epoch, "second", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 1000)).await.unwrap_err();
    assert_eq!(busy.code, "ios_wda_action_busy");
    let reused = act(&s, body(&s.epoch, "open", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 1000)).await.unwrap_err();
    assert_eq!(reused.code, "ios_wda_action_id_reused");
    assert_eq!(s.slot.snapshot().0["permissionIssued"], false);

    let cancelled = exec::cancel(&s, &json!({ "actionId": "slow", "runtimeEpoch": s.epoch })).await.unwrap();
    assert_eq!(cancelled["ok"], true, "{cancelled}");
    let result = &cancelled["executionResult"];
    assert_eq!((result["ok"].clone(), result["error"].clone(), result["dispatched"].clone()), (json!(false), json!("ios_wda_action_cancelled"), json!(false)));
    assert_eq!(queued.await.unwrap().unwrap(), *result, "the action's own reply is the same settled result");
    assert!(screen.effects("tap").is_empty(), "a queued cancel submits no event");
    assert!(screen.facts("tap").is_empty());
    // The cancelled result is durable and the slot is free again.
    assert!(s.store.find(scope("slow", &s.epoch)).unwrap().is_some());
    s.faults.lock().unwrap().apply(&json!({ "wdaSlowActionMs": 0 }));
    let tap = act(&s, body(&s.epoch, "third", "tap", target, json!({ "x": 20, "y": 20 }), 1000)).await.unwrap();
    assert_eq!(tap["ok"], true, "{tap}");
    assert_eq!(screen.effects("tap").len(), 1);
}

#[tokio::test]
async fn a_deadline_while_queued_ends_undispatched() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    s.faults.lock().unwrap().apply(&json!({ "wdaSlowActionMs": 30_000 }));
    let r = act(&s, body(&s.epoch, "late", "swipe", target, json!({ "startX": 1, "startY": 2, "endX": 3, "endY": 4, "durationMs": 5 }), 20)).await.unwrap();
    assert_eq!((r["ok"].clone(), r["error"].clone(), r["dispatched"].clone(), r["settled"].clone()), (json!(false), json!("ios_wda_action_timeout"), json!(false), json!(true)));
    assert!(screen.effects("swipe").is_empty());
}

#[tokio::test]
async fn an_event_outliving_its_deadline_answers_pending_and_keeps_the_slot() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    screen.with(|st| st.event_delay = Duration::from_millis(1900));
    let r = act(&s, body(&s.epoch, "stuck", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 1)).await.unwrap();
    assert_eq!(
        r,
        json!({ "schemaVersion": "aab.wda-execution/v1", "actionId": "stuck", "runtimeEpoch": s.epoch, "ok": false, "error": "ios_wda_action_timeout", "settled": false, "dispatched": null, "ambiguous": true })
    );
    // The XCTest event is still in flight: the slot stays closed.
    assert_eq!(act(&s, body(&s.epoch, "next", "tap", target, json!({ "x": 20, "y": 20 }), 1000)).await.unwrap_err().code, "ios_wda_action_busy");
    // Its completion eventually lands in the store: dispatched, and failed by the deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let result = loop {
        if let Some((r, _)) = s.store.find(scope("stuck", &s.epoch)).unwrap() {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline, "never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((result["ok"].clone(), result["error"].clone(), result["dispatched"].clone()), (json!(false), json!("ios_wda_action_timeout"), json!(true)));
    assert_eq!(screen.effects("tap").len(), 1);
    assert!(s.slot.active().is_none());
}

#[tokio::test]
async fn input_clears_once_and_requires_the_empty_value() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    let r = act(&s, body(&s.epoch, "in1", "input", target.clone(), json!({ "elementId": "E-name", "text": "new", "clearFirst": true }), 1000)).await.unwrap();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(screen.value_of("E-name").as_deref(), Some("new"));
    let kinds: Vec<Value> = screen.all_effects().iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(kinds, vec![json!("focus"), json!("clear"), json!("type")]);

    // A clear that leaves text behind fails after exactly one clear event, with no text typed.
    screen.with(|st| st.clear_leaves = Some("stuck".into()));
    let r = act(&s, body(&s.epoch, "in2", "input", target.clone(), json!({ "elementId": "E-name", "text": "more", "clearFirst": true }), 1000)).await.unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("ios_wda_clear_not_observed"), json!(true)));
    assert_eq!(screen.effects("clear").len(), 2);
    assert_eq!(screen.effects("type").len(), 1);

    // A button is not an editor: nothing is typed into it.
    let r = act(&s, body(&s.epoch, "in3", "input", target, json!({ "elementId": "E-ok", "text": "x" }), 1000)).await.unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("ios_wda_input_target_changed"), json!(false)));
    assert_eq!(screen.effects("type").len(), 1);
}

#[tokio::test]
async fn native_tap_revalidates_its_target_immediately_before_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    let tref = json!({ "elementId": "E-ok", "type": "XCUIElementTypeButton", "identifier": "okButton", "label": "OK" });
    let r = act(&s, body(&s.epoch, "n1", "native-tap", target.clone(), json!({ "targetRef": tref }), 1000)).await.unwrap();
    assert_eq!((r["ok"].clone(), r["value"]["hitElementId"].clone()), (json!(true), json!("E-ok")), "{r}");
    assert_eq!(r["execution"]["target"], json!({ "bundleId": APP, "processId": APP_PID, "sessionId": target["sessionId"], "runnerBundleId": RUNNER, "operation": "native-tap" }));

    // The label changed since the observation: no tap.
    screen.with(|st| st.elements[0].label = Some("Cancel".into()));
    let r = act(&s, body(&s.epoch, "n2", "native-tap", target.clone(), json!({ "targetRef": tref }), 1000)).await.unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("ios_native_target_changed"), json!(false)));
    let off = json!({ "elementId": "E-off", "type": "XCUIElementTypeButton", "identifier": "offButton", "label": "Off" });
    let r = act(&s, body(&s.epoch, "n3", "native-tap", target.clone(), json!({ "targetRef": off }), 1000)).await.unwrap();
    assert_eq!(r["error"], "ios_native_target_changed", "a disabled control is refused");

    // Another process of the App came forward: the session's App/PID is gone.
    screen.with(|st| st.foreground = Some(Foreground { bundle_id: APP.into(), process_id: APP_PID + 1 }));
    let r = act(&s, body(&s.epoch, "n4", "tap", target, json!({ "x": 20, "y": 20 }), 1000)).await.unwrap();
    assert_eq!((r["error"].clone(), r["dispatched"].clone()), (json!("ios_wda_target_changed"), json!(false)));
    assert_eq!(screen.effects("tap").len(), 1);
    assert_eq!(screen.facts("tap").len(), 1);
}

#[tokio::test]
async fn a_failed_store_write_keeps_admission_closed_until_a_cancel_stores_the_same_result() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let screen = FakeScreen::new();
    let s = shared(screen.clone(), dir.path());
    let target = open_session(&s).await;
    s.store.fail_appends.store(2, Ordering::SeqCst);
    let r = act(&s, body(&s.epoch, "p1", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 1000)).await.unwrap();
    assert_eq!((r["settled"].clone(), r["error"].clone(), r["ambiguous"].clone()), (json!(false), json!("ios_wda_completion_store_unavailable"), json!(true)));
    assert_eq!(s.slot.snapshot().0["persistencePending"], true);
    assert_eq!(act(&s, body(&s.epoch, "p2", "tap", target.clone(), json!({ "x": 20, "y": 20 }), 1000)).await.unwrap_err().code, "ios_wda_action_busy");
    // The first retry fails too; the second stores the finished result without replaying the tap.
    let c = exec::cancel(&s, &json!({ "actionId": "p1", "runtimeEpoch": s.epoch })).await.unwrap();
    assert_eq!(c["error"], "ios_wda_completion_store_unavailable");
    let c = exec::cancel(&s, &json!({ "actionId": "p1", "runtimeEpoch": s.epoch })).await.unwrap();
    assert_eq!((c["ok"].clone(), c["executionResult"]["ok"].clone(), c["executionResult"]["dispatched"].clone()), (json!(true), json!(true), json!(true)), "{c}");
    assert_eq!(s.store.find(scope("p1", &s.epoch)).unwrap().unwrap().0, c["executionResult"]);
    assert_eq!(screen.effects("tap").len(), 1);
    assert!(s.slot.active().is_none());
}
