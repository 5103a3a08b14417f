//! Engine cdp against real headless Chromium: the whole session life, with the
//! page's own state read over a CDP connection of the test's and every click
//! checked in the page server's log.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Plugin, Store};
use crate::pages::server;
use crate::{control, plugin, process_alive, scratch, tag};

/// Evaluate `expression` in the session's page through a DevTools connection of
/// our own (ground truth the plugin cannot shape).
pub fn page_eval(details: &Value, expression: &str) -> Value {
    let port = details["devtoolsPort"].as_u64().expect("devtoolsPort") as u16;
    let target = details["targetId"].as_str().expect("targetId").to_string();
    // The page's own DevTools endpoint (no browser-level session needed).
    let ws = format!("ws://127.0.0.1:{port}/devtools/page/{target}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cdp = aab_cdp::Cdp::connect(&ws).await.unwrap_or_else(|e| panic!("{ws}: {e}"));
        let r = cdp.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}), None).await.unwrap();
        let v = aab_cdp::evaluate_value(&r).unwrap();
        cdp.close().await;
        v
    })
}

fn open_cdp(p: &Plugin, session_id: &str, path: &str, extra: Value) -> Value {
    let mut args = json!({"operation": "open", "sessionId": session_id, "engine": "cdp", "url": server().url(path)});
    if let (Value::Object(a), Value::Object(e)) = (&mut args, extra) {
        a.extend(e);
    }
    p.call(args).ok().clone()
}

fn observe(p: &Plugin, session_id: &str) -> Value {
    p.call(json!({"operation": "observe", "sessionId": session_id})).ok().clone()
}

#[test]
fn a_cdp_session_observes_acts_with_real_input_and_settles_every_action() {
    let p = plugin();
    let t = tag("cdpflow");
    let sid = format!("cdp-{t}");
    let opened = open_cdp(p, &sid, &format!("/form?tag={t}"), json!({"viewport": {"width": 800, "height": 600}, "leaseMs": 120000}));
    assert_eq!(opened["engine"], "cdp");
    assert_eq!(opened["runtimeEpoch"], "epoch-A");
    assert_eq!(opened["page"]["title"], "Executor form");
    let document = opened["page"]["documentId"].as_str().expect("a documentId").to_string();
    let details = opened["engineDetails"].clone();
    let pid = details["pid"].as_u64().unwrap();
    assert!(process_alive(pid));
    assert_eq!(page_eval(&details, "[innerWidth, innerHeight]"), json!([800, 600]), "the viewport is what open asked for");

    let seen = observe(p, &sid);
    assert_eq!(seen["documentId"], document.as_str(), "observing does not change the document's identity");
    let snap = seen["snapshotId"].as_str().unwrap().to_string();
    let go = control(&seen, "go")["elementId"].as_str().unwrap().to_string();
    assert_eq!(control(&seen, "name")["editable"], true);

    // input: real typing replaces the field's content.
    let typed = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "input", "text": "Ada Lovelace"}, "selector": {"by": "css", "value": "#name"}}));
    let r = typed.ok();
    assert_eq!(r["status"], "settled");
    assert_eq!(r["receipt"]["delivery"]["trusted"], true);
    assert_eq!(r["receipt"]["result"]["accepted"], true);
    assert!(typed.outcome.dispatch_marked);
    assert_eq!(page_eval(&details, "document.getElementById('name').value"), "Ada Lovelace");
    assert!(!r["receipt"].to_string().contains("Ada Lovelace"), "typed text is not recorded");

    // click by elementId of the observation.
    let clicked = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "documentId": document, "action": {"type": "click"}, "selector": {"by": "elementId", "value": go}}));
    let r = clicked.ok().clone();
    assert_eq!(r["status"], "settled");
    assert_eq!(r["receipt"]["actionId"], clicked.action_id.as_str());
    assert_eq!(r["receipt"]["runtimeEpoch"], "epoch-A");
    assert_eq!(r["receipt"]["before"]["documentId"], document.as_str());
    assert_eq!(server().entries(&t), vec!["click=go&trusted=true&name=Ada%20Lovelace".to_string()], "exactly one real click reached the page");

    // The durable receipt and the reconcile hook agree with the reply.
    let receipt = p.call(json!({"operation": "receipt", "sessionId": sid, "actionId": clicked.action_id}));
    assert_eq!(receipt.ok()["status"], "settled");
    let rec = p.hook("reconcile", json!({"serial": sid, "pending": {"kind": "plugin-action", "plugin": "web", "command": "web-executor", "actionId": clicked.action_id, "runtimeEpoch": "epoch-A", "target": {"serial": sid}}}));
    let v = rec.value.unwrap();
    assert_eq!(v["status"], "settled");
    assert_eq!(v["receipt"]["actionId"], clicked.action_id.as_str());
    let other_epoch = p.hook("reconcile", json!({"serial": sid, "pending": {"command": "web-executor", "actionId": clicked.action_id, "runtimeEpoch": "epoch-Z"}}));
    assert_ne!(other_epoch.value.unwrap()["status"], "settled", "a receipt of another runtime's action settles nothing");

    // key: Enter in the field (focused by the action).
    let key = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "key", "key": "Enter"}, "selector": {"by": "css", "value": "#name"}}));
    assert_eq!(key.ok()["status"], "settled");
    assert!(server().entries(&t).contains(&"enter=Ada%20Lovelace".to_string()));

    // A button far below the fold is brought into view and clicked.
    let far = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "text", "value": "Far"}}));
    assert_eq!(far.ok()["status"], "settled");
    assert!(server().entries(&t).contains(&"click=far".to_string()));
    let wheel = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "scroll", "deltaY": -300}}));
    assert_eq!(wheel.ok()["receipt"]["delivery"]["eventType"], "wheel");

    // wait: the page adds a paragraph after a moment.
    let waited = p.call(json!({"operation": "wait", "sessionId": sid, "text": "Late arrival"}));
    assert_eq!(waited.ok()["matched"], true);
    let miss = p.call_with("web-executor", json!({"operation": "wait", "sessionId": sid, "selector": {"by": "css", "value": "#never"}}), Duration::from_millis(1500));
    assert_eq!((miss.err().error.as_str(), miss.dispatch()), ("web_executor_wait_timeout", (Some(false), false)));

    // screenshot: a PNG of the viewport, written atomically where asked.
    let shot_path = scratch().join(format!("{t}.png"));
    let shot = p.call(json!({"operation": "screenshot", "sessionId": sid, "outFile": shot_path}));
    assert_eq!((shot.ok()["width"].as_u64(), shot.ok()["height"].as_u64()), (Some(800), Some(600)));
    assert!(std::fs::read(&shot_path).unwrap().starts_with(b"\x89PNG\r\n\x1a\n"));

    // navigate: a new document, a new documentId.
    let nav = p.call(json!({"operation": "navigate", "sessionId": sid, "url": server().url(&format!("/other?tag={t}"))}));
    let page = &nav.ok()["page"];
    assert_eq!(page["title"], "Other page");
    assert_ne!(page["documentId"], document.as_str());
    assert_eq!(page_eval(&details, "document.title"), "Other page");
    // The old observation is stale now.
    let stale = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "click"}, "selector": {"by": "elementId", "value": go}}));
    assert_eq!((stale.err().error.as_str(), stale.dispatch()), ("reobserve_required", (Some(false), false)));

    let events = p.call(json!({"operation": "events", "sessionId": sid, "limit": 500}));
    let kinds: Vec<String> = events.ok()["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_string()).collect();
    for k in ["opened", "action-dispatched", "action-settled", "navigated"] {
        assert!(kinds.iter().any(|x| x == k), "{k} missing from {kinds:?}");
    }
    let status = p.call(json!({"operation": "status", "sessionId": sid}));
    assert_eq!(status.ok()["alive"], true);
    assert_eq!(status.ok()["actions"], 5);

    let closed = p.call(json!({"operation": "close", "sessionId": sid}));
    assert_eq!(closed.ok()["closed"], true);
    assert!(!process_alive(pid), "the browser is gone after close");
    let again = p.call(json!({"operation": "close", "sessionId": sid}));
    assert_eq!((again.err().error.as_str(), again.dispatch()), ("web_executor_session_closed", (Some(false), false)));
    let late = p.call(json!({"operation": "observe", "sessionId": sid}));
    assert_eq!(late.err().error, "web_executor_session_closed");
    // Receipts and events outlive the session.
    assert_eq!(p.call(json!({"operation": "receipt", "sessionId": sid, "actionId": clicked.action_id})).ok()["status"], "settled");
    let kinds: Vec<String> = p.call(json!({"operation": "events", "sessionId": sid, "limit": 500})).ok()["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds.last().map(String::as_str), Some("closed"));
}

#[test]
fn a_stale_observation_is_refused_before_anything_reaches_the_page() {
    let p = plugin();
    let t = tag("cdpstale");
    let sid = format!("cdp-{t}");
    open_cdp(p, &sid, &format!("/form?tag={t}"), json!({}));
    let seen = observe(p, &sid);
    let snap = seen["snapshotId"].as_str().unwrap().to_string();
    let target = control(&seen, "target")["elementId"].as_str().unwrap().to_string();
    // The page replaces #target with an identical new node.
    let swap = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#swap"}}));
    assert_eq!(swap.ok()["status"], "settled");
    let refused = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "click"}, "selector": {"by": "elementId", "value": target}}));
    assert_eq!((refused.err().error.as_str(), refused.dispatch()), ("web_executor_target_changed", (Some(false), false)));
    assert!(!refused.outcome.dispatch_marked);
    let unknown = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": "s999-00000000", "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(unknown.err().error, "reobserve_required");
    let wrong_doc = p.call(json!({"operation": "act", "sessionId": sid, "documentId": "0000000000000000", "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!((wrong_doc.err().error.as_str(), wrong_doc.err().field.as_deref()), ("reobserve_required", Some("documentId")));
    let ambiguous = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "button"}}));
    assert_eq!(ambiguous.err().error, "web_executor_selector_ambiguous");
    let bad_css = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "##"}}));
    assert_eq!((bad_css.err().error.as_str(), bad_css.err().field.as_deref()), ("web_executor_invalid_css", Some("selector.value")));
    let not_editable = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "input", "text": "x"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(not_editable.err().error, "web_executor_target_not_editable");
    // Ground truth: only the swap reached the page.
    assert_eq!(server().entries(&t), vec!["click=swap".to_string()]);
    // A button that removes itself when clicked: the delivery is still proven.
    let vanish = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "text", "value": "Vanish"}}));
    assert_eq!(vanish.ok()["status"], "settled");
    // A link: the click's proof survives the navigation it causes.
    let before = vanish.ok()["page"]["documentId"].clone();
    let link = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "text", "value": "Next page"}}));
    let r = link.ok();
    assert_eq!(r["status"], "settled");
    assert_eq!(r["receipt"]["delivery"]["trusted"], true);
    assert!(r["receipt"]["after"]["url"].as_str().unwrap_or_default().contains("/other"), "{r}");
    assert_ne!(r["receipt"]["after"]["documentId"], before);
    p.call(json!({"operation": "close", "sessionId": sid})).ok();
}

#[test]
fn an_expired_lease_closes_the_browser() {
    let p = plugin();
    let t = tag("cdplease");
    let sid = format!("cdp-{t}");
    let opened = open_cdp(p, &sid, &format!("/form?tag={t}"), json!({"leaseMs": 1000}));
    let pid = opened["engineDetails"]["pid"].as_u64().unwrap();
    // The session list (which does not renew leases) loses it once the reaper ran.
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = p.call(json!({"operation": "status"}));
        let live = listed.ok()["sessions"].as_array().unwrap().iter().any(|s| s["sessionId"] == sid.as_str());
        if !live {
            break;
        }
        assert!(Instant::now() < end, "the lease never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!process_alive(pid));
    let late = p.call(json!({"operation": "observe", "sessionId": sid}));
    assert_eq!(late.err().error, "web_executor_lease_expired");
    let kinds: Vec<String> = p.call(json!({"operation": "events", "sessionId": sid})).ok()["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_string()).collect();
    assert!(kinds.contains(&"lease-expired".to_string()), "{kinds:?}");
}

#[test]
fn runtime_stop_closes_every_session() {
    let dir = scratch().join("stop");
    let p = Plugin::load_copy(&dir.join("data"), "epoch-stop", std::sync::Arc::new(Store::default()));
    let t = tag("cdpstop");
    let pids: Vec<u64> = (0..2)
        .map(|i| open_cdp(&p, &format!("stop{i}-{t}"), &format!("/form?tag={t}"), json!({}))["engineDetails"]["pid"].as_u64().unwrap())
        .collect();
    let stopped = p.hook("runtime-stop", json!({}));
    assert!(stopped.ok, "{:?}", stopped.error);
    assert_eq!(stopped.value.unwrap()["closed"], 2);
    for pid in pids {
        assert!(!process_alive(pid), "browser {pid} survived runtime-stop");
    }
    let late = p.call(json!({"operation": "observe", "sessionId": format!("stop0-{t}")}));
    assert_eq!(late.err().error, "web_executor_session_closed");
}
