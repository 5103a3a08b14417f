//! Engine webdriver against a real chromedriver: the session life through the
//! W3C protocol, a reply lost on the way back (a relay that drops it: the page
//! ledger settles the click), and chromedriver killed while a click is being
//! delivered (ambiguous, never retried). Ground truth: the page server's log
//! and the endpoint itself.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aab_webdriver::servers::Chromedriver;
use serde_json::{Value, json};

use crate::pages::server;
use crate::{control, plugin, scratch, tag};

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap()
}

/// Ask the endpoint directly whether a session still exists.
pub fn remote_session_exists(endpoint: &str, session_id: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(endpoint).unwrap());
        match client.attach(session_id).url(Duration::from_secs(10)).await {
            Ok(_) => true,
            Err(aab_webdriver::WdError::Protocol { error, .. }) if error == "invalid session id" => false,
            Err(e) => panic!("unexpected answer from {endpoint}: {e}"),
        }
    })
}

fn read_message(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) | Err(_) => return None,
            Ok(_) => buf.push(byte[0]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    buf.extend_from_slice(&body);
    Some(buf)
}

/// An HTTP relay in front of `upstream` that forwards everything, except that
/// the reply to the first request whose request line satisfies `drop` is read
/// from upstream and then thrown away (the client's connection is closed).
pub struct DropProxy {
    pub port: u16,
    pub dropped: Arc<AtomicBool>,
}

impl DropProxy {
    pub fn start(upstream: u16, drop: fn(&str) -> bool) -> DropProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let flag = flag.clone();
                std::thread::spawn(move || {
                    let mut client = client;
                    let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
                    while let Some(request) = read_message(&mut client) {
                        let line = String::from_utf8_lossy(&request).lines().next().unwrap_or_default().to_string();
                        if up.write_all(&request).is_err() {
                            return;
                        }
                        let Some(reply) = read_message(&mut up) else { return };
                        if drop(&line) && !flag.swap(true, Ordering::SeqCst) {
                            let _ = client.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if client.write_all(&reply).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        DropProxy { port, dropped }
    }
}

fn open_wd(endpoint: &str, sid: &str, path: &str) -> Value {
    plugin().call(json!({"operation": "open", "sessionId": sid, "endpoint": endpoint, "url": server().url(path), "viewport": {"width": 900, "height": 700}})).ok().clone()
}

#[test]
fn a_webdriver_session_through_chromedriver() {
    let cd = Chromedriver::start();
    let p = plugin();
    let t = tag("wdflow");
    let sid = format!("wd-{t}");
    let prepared = p.call(json!({"operation": "prepare", "endpoint": cd.url()}));
    assert_eq!((prepared.ok()["ready"].as_bool(), prepared.ok()["offered"].clone()), (Some(true), json!(["chromium"])));
    let firefox = p.call(json!({"operation": "prepare", "endpoint": cd.url(), "browser": "firefox"}));
    assert_eq!((firefox.err().error.as_str(), firefox.dispatch()), ("web_executor_browser_unavailable", (Some(false), false)));
    let refused = p.call(json!({"operation": "open", "endpoint": cd.url(), "browser": "webkit"}));
    assert_eq!(refused.err().error, "web_executor_browser_unavailable");

    let opened = open_wd(cd.url(), &sid, &format!("/form?tag={t}"));
    assert_eq!((opened["engine"].as_str(), opened["browser"].as_str()), (Some("webdriver"), Some("chromium")));
    assert_eq!(opened["capabilities"]["browserName"], "chrome");
    assert_eq!(opened["viewport"], json!({"width": 900, "height": 700}));
    let remote = opened["webdriverSessionId"].as_str().unwrap().to_string();
    assert!(remote_session_exists(cd.url(), &remote));

    let seen = p.call(json!({"operation": "observe", "sessionId": sid})).ok().clone();
    assert_eq!(seen["viewport"]["width"], 900);
    let snap = seen["snapshotId"].as_str().unwrap().to_string();
    let name = control(&seen, "name")["elementId"].as_str().unwrap().to_string();
    let typed = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "input", "text": "Grace Hopper"}, "selector": {"by": "elementId", "value": name}}));
    assert_eq!(typed.ok()["receipt"]["result"]["accepted"], true);
    let clicked = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "click"}, "selector": {"by": "text", "value": "Send"}}));
    assert_eq!(clicked.ok()["status"], "settled");
    assert_eq!(clicked.ok()["receipt"]["delivery"]["trusted"], true);
    assert_eq!(server().entries(&t), vec!["click=go&trusted=true&name=Grace%20Hopper".to_string()]);
    let receipt = p.call(json!({"operation": "receipt", "sessionId": sid, "actionId": clicked.action_id}));
    assert_eq!(receipt.ok()["status"], "settled");
    let key = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "key", "key": "Enter"}, "selector": {"by": "css", "value": "#name"}}));
    assert_eq!(key.ok()["status"], "settled");
    assert!(server().entries(&t).contains(&"enter=Grace%20Hopper".to_string()));
    let far = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#far"}}));
    assert_eq!(far.ok()["status"], "settled");
    assert!(server().entries(&t).contains(&"click=far".to_string()));
    let wheel = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "scroll", "deltaY": -200}}));
    assert_eq!(wheel.ok()["receipt"]["delivery"]["eventType"], "wheel");

    // A stale element is refused without any WebDriver input.
    p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#swap"}})).ok();
    let target = control(&seen, "target")["elementId"].as_str().unwrap().to_string();
    let stale = p.call(json!({"operation": "act", "sessionId": sid, "snapshotId": snap, "action": {"type": "click"}, "selector": {"by": "elementId", "value": target}}));
    assert_eq!((stale.err().error.as_str(), stale.dispatch()), ("web_executor_target_changed", (Some(false), false)));
    assert!(!server().entries(&t).iter().any(|e| e.starts_with("click=target")));

    let link = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "text", "value": "Next page"}}));
    assert_eq!(link.ok()["status"], "settled", "the click's proof survives the navigation it caused");
    assert!(link.ok()["page"]["url"].as_str().unwrap_or_default().contains("/other"), "{}", link.ok());

    let shot_path = scratch().join(format!("{t}.png"));
    let shot = p.call(json!({"operation": "screenshot", "sessionId": sid, "outFile": shot_path}));
    assert_eq!(shot.ok()["width"], 900);
    let nav = p.call(json!({"operation": "navigate", "sessionId": sid, "url": server().url(&format!("/form?tag={t}"))}));
    assert_eq!(nav.ok()["page"]["title"], "Executor form");
    assert_ne!(nav.ok()["page"]["documentId"], seen["documentId"]);

    let closed = p.call(json!({"operation": "close", "sessionId": sid}));
    assert_eq!(closed.ok()["remote"], "deleted");
    assert!(!remote_session_exists(cd.url(), &remote), "close deleted the WebDriver session");
}

#[test]
fn a_lost_click_reply_is_settled_from_the_page_ledger() {
    let cd = Chromedriver::start();
    let proxy = DropProxy::start(port_of(cd.url()), |line| line.starts_with("POST ") && line.contains("/element/") && line.contains("/click "));
    let endpoint = format!("http://127.0.0.1:{}", proxy.port);
    let p = plugin();
    let t = tag("wdlost");
    let sid = format!("wd-{t}");
    open_wd(&endpoint, &sid, &format!("/form?tag={t}"));
    let clicked = p.call(json!({"operation": "act", "sessionId": sid, "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert!(proxy.dropped.load(Ordering::SeqCst), "the relay dropped the click's reply");
    // The reply never came, but the page proves the click: settled, not repeated.
    let r = clicked.ok();
    assert_eq!(r["status"], "settled");
    assert!(r["receipt"]["delivery"]["replyError"].is_string(), "{r}");
    assert_eq!(server().entries(&t), vec!["click=go&trusted=true&name=".to_string()], "exactly one click, never retried");
    p.call(json!({"operation": "close", "sessionId": sid})).ok();
}

#[test]
fn a_chromedriver_killed_mid_click_leaves_the_action_ambiguous() {
    let cd = Chromedriver::start();
    let endpoint = cd.url().to_string();
    let p = plugin();
    let t = tag("wdkill");
    let sid = format!("wd-{t}");
    open_wd(&endpoint, &sid, &format!("/form?tag={t}"));
    let sid2 = sid.clone();
    // The page's click handler blocks on /block until released: the click is in flight.
    let acting = std::thread::spawn(move || plugin().call(json!({"operation": "act", "sessionId": sid2, "action": {"type": "click"}, "selector": {"by": "css", "value": "#slow"}})));
    assert!(server().wait_for(&t, |e| e == "click=slow"), "the click reached the page");
    drop(cd);
    server().release(&t);
    let clicked = acting.join().unwrap();
    let e = clicked.err();
    assert_eq!(clicked.dispatch(), (Some(true), true), "{e:?}");
    assert!(matches!(e.error.as_str(), "web_executor_action_lost" | "web_executor_session_lost"), "{e:?}");
    assert_eq!(e.details.as_ref().unwrap()["receipt"]["status"], "unresolved");
    // Nobody can prove it now: the receipt stays unresolved, reconcile says unknown.
    let receipt = p.call(json!({"operation": "receipt", "sessionId": sid, "actionId": clicked.action_id}));
    assert_eq!(receipt.ok()["status"], "unresolved");
    let rec = p.hook("reconcile", json!({"serial": sid, "pending": {"command": "web-executor", "actionId": clicked.action_id, "runtimeEpoch": "epoch-A"}}));
    assert_eq!(rec.value.unwrap()["status"], "unknown");
    assert_eq!(server().entries(&t), vec!["click=slow".to_string()]);
    // Closing a session whose endpoint is gone still ends it here.
    let _ = p.call(json!({"operation": "close", "sessionId": sid}));
    assert!(p.call(json!({"operation": "observe", "sessionId": sid})).err().error.starts_with("web_executor_session_"));
}
