//! aab-cdp against a real headless Chromium: calls, sessions, events, errors,
//! timeouts, close, and that no browser process outlives its `Browser`.

use std::time::Duration;

use aab_cdp::{Browser, CdpError, evaluate_value};
use serde_json::json;

fn alive(pid: u32) -> bool {
    // A zombie counts as gone: only a running process matters.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sessions_events_and_errors_against_real_chromium() {
    let browser = Browser::launch().await.expect("launch");
    let cdp = browser.connect().await.expect("connect");
    let version = cdp.call("Browser.getVersion", json!({}), None).await.unwrap();
    assert!(version["product"].as_str().unwrap().contains("Chrome"), "{version}");

    let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None).await.unwrap();
    let target_id = target["targetId"].as_str().unwrap();
    let attached = cdp.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).await.unwrap();
    let session = attached["sessionId"].as_str().unwrap();

    // Events carry their session.
    let mut events = cdp.events();
    cdp.call("Runtime.enable", json!({}), Some(session)).await.unwrap();
    let r = cdp.call("Runtime.evaluate", json!({"expression": "console.log('hello', 6*7); 6*7", "returnByValue": true}), Some(session)).await.unwrap();
    assert_eq!(evaluate_value(&r), Ok(json!(42)));
    let ev = loop {
        let e = tokio::time::timeout(Duration::from_secs(30), events.next()).await.expect("event").expect("open");
        if e.method == "Runtime.consoleAPICalled" {
            break e;
        }
    };
    assert_eq!(ev.session_id.as_deref(), Some(session));
    assert_eq!(ev.params["args"][1]["value"], json!(42));

    // Awaited promises; exceptions come back as values of the call, not errors.
    let r = cdp.call("Runtime.evaluate", json!({"expression": "new Promise(r => setTimeout(() => r('late'), 10))", "awaitPromise": true, "returnByValue": true}), Some(session)).await.unwrap();
    assert_eq!(evaluate_value(&r), Ok(json!("late")));
    let r = cdp.call("Runtime.evaluate", json!({"expression": "throw new Error('boom')"}), Some(session)).await.unwrap();
    assert!(evaluate_value(&r).unwrap_err().contains("boom"));

    // A protocol error names the method and code.
    match cdp.call("No.suchMethod", json!({}), None).await {
        Err(CdpError::Protocol { method, code, .. }) => {
            assert_eq!(method, "No.suchMethod");
            assert_eq!(code, -32601);
        }
        other => panic!("{other:?}"),
    }

    // A call that never answers times out, and the connection stays usable.
    let never = cdp.call_with_timeout("Runtime.evaluate", json!({"expression": "new Promise(() => {})", "awaitPromise": true}), Some(session), Duration::from_millis(300)).await;
    assert!(matches!(never, Err(CdpError::Timeout { .. })), "{never:?}");
    let r = cdp.call("Runtime.evaluate", json!({"expression": "1+1", "returnByValue": true}), Some(session)).await.unwrap();
    assert_eq!(evaluate_value(&r), Ok(json!(2)));

    // A second connection sees the same page.
    let other = browser.connect().await.unwrap();
    let targets = other.call("Target.getTargets", json!({}), None).await.unwrap();
    assert!(targets["targetInfos"].as_array().unwrap().iter().any(|t| t["targetId"] == json!(target_id)));
    other.close().await;

    cdp.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_connection_refuses_calls_and_ends_event_stream() {
    let mut browser = Browser::launch().await.expect("launch");
    let cdp = browser.connect().await.unwrap();
    let mut events = cdp.events();
    // The browser closes the socket itself.
    let _ = cdp.call("Browser.close", json!({}), None).await;
    assert!(tokio::time::timeout(Duration::from_secs(30), events.next()).await.expect("stream ends").is_none());
    let r = cdp.call("Browser.getVersion", json!({}), None).await;
    assert!(matches!(r, Err(CdpError::Closed { .. })), "{r:?}");
    assert!(!cdp.is_open());
    for _ in 0..300 {
        if !browser.is_running() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!browser.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_browser_leaves_no_process() {
    let browser = Browser::launch().await.expect("launch");
    let pid = browser.pid();
    let port = browser.port();
    // The renderer processes of a page are in the browser's process group.
    let cdp = browser.connect().await.unwrap();
    cdp.call("Target.createTarget", json!({"url": "about:blank"}), None).await.unwrap();
    let group: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok().and_then(|s| s.rsplit(") ").next().map(|r| r.split(' ').nth(2) == Some(&pid.to_string()))).unwrap_or(false))
        .collect();
    assert!(group.len() > 1, "browser and helpers share a process group: {group:?}");
    drop(cdp);
    drop(browser);
    for p in &group {
        assert!(!alive(*p), "process {p} of the browser's group survived the drop");
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "DevTools port still answers");
}

#[tokio::test]
async fn connect_to_nothing_is_a_connect_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let r = aab_cdp::Cdp::connect(&format!("ws://127.0.0.1:{port}/devtools/browser/x")).await;
    assert!(matches!(r, Err(CdpError::Connect { .. })), "{:?}", r.err());
}
