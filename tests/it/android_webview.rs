//! `webview-pages`, `webview-network`, `webview-console` through the public CLI
//! (and MCP) against the simulated phone, whose WebViews are real pages in
//! headless Chromium behind `@webview_devtools_remote_<pid>`. Ground truth: the
//! simulator's own view of its pages (targetId, url, title), its H5 server's
//! request log, the real page evaluated over CDP, and `adb forward --list`.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, simulated, simulated_with};

/// The simulator's WebViews (ground truth).
fn webviews(w: &World, sim: &aab_android_sim::Simulator) -> Value {
    control(w, sim, json!({"op": "webviews"}))
}

/// Shows the sample app's WebView screen and waits for its page to load; (pid, targetId).
fn show_web(w: &World, sim: &aab_android_sim::Simulator) -> (u64, String) {
    control(w, sim, json!({"op": "screen", "package": SAMPLE, "screen": "web"}));
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v = webviews(w, sim);
        let wv = v["webViews"].as_array().unwrap().iter().find(|x| x["webViewId"] == json!("signup-web")).cloned().unwrap_or(Value::Null);
        if wv["progress"] == json!(100) && wv["title"] == json!("Web sign-up") {
            return (wv["pid"].as_u64().unwrap(), wv["targetId"].as_str().unwrap().to_string());
        }
        assert!(Instant::now() < until, "the WebView never loaded: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn forwards(w: &World) -> String {
    w.adb(&["forward", "--list"])
}

#[test]
fn android_webview_pages_lists_exactly_the_apps_real_pages() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    // The WebView screen was never shown: the app has no DevTools socket yet.
    let facts = w.fails("webview-pages", json!({"packageName": SAMPLE, "serial": serial}), "webview_devtools_not_found");
    assert_eq!(facts["field"], json!("packageName"), "{facts}");
    let (pid, target) = show_web(&w, &sim);
    // A page in the same browser that is not the app's (opened on Chromium's real endpoint).
    let real = webviews(&w, &sim)["devtoolsPort"].as_u64().unwrap() as u16;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", real)).unwrap();
    s.write_all(format!("PUT /json/new?about:blank HTTP/1.1\r\nHost: 127.0.0.1:{real}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![];
    let _ = s.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"), "a foreign page was opened");

    let out = w.ok("webview-pages", json!({"packageName": SAMPLE, "serial": serial}));
    let socket = format!("webview_devtools_remote_{pid}");
    assert_eq!(out["socketName"], json!(socket), "{out}");
    let truth = &webviews(&w, &sim)["webViews"][0];
    eprintln!("webview-pages figures: {}", w.run("webview-pages", json!({"packageName": SAMPLE, "serial": serial})).0["value"]["_feedback"]["timings"]);
    let pages = out["pages"].as_array().unwrap();
    assert_eq!(pages.len(), 1, "only the app's page: {out}");
    assert_eq!(pages[0]["targetId"], json!(target));
    assert_eq!(pages[0]["url"], truth["url"]);
    assert_eq!(pages[0]["title"], json!("Web sign-up"));
    assert_eq!(pages[0]["type"], json!("page"));
    assert_eq!(out["forwardKept"], json!(false));
    assert!(!forwards(&w).contains(&socket), "ground truth: the forward was removed: {}", forwards(&w));

    // keepForward leaves it (with the page's WebSocket URL on it); pageUrlFilter narrows.
    let kept = w.ok("webview-pages", json!({"packageName": SAMPLE, "serial": serial, "keepForward": true, "pageUrlFilter": "signup"}));
    let port = kept["webviewPort"].as_u64().unwrap();
    assert!(forwards(&w).contains(&format!("{serial} tcp:{port} localabstract:{socket}")), "{}", forwards(&w));
    assert_eq!(kept["pages"][0]["webSocketDebuggerUrl"], json!(format!("ws://127.0.0.1:{port}/devtools/page/{target}")));
    // The next call reuses that exact forward and leaves it alone.
    let again = w.ok("webview-pages", json!({"packageName": SAMPLE, "serial": serial, "pageUrlFilter": "no-such-page"}));
    assert_eq!((again["webviewPort"].as_u64(), again["forwardReused"].clone(), again["pages"].clone()), (Some(port), json!(true), json!([])));
    assert!(forwards(&w).contains(&format!("tcp:{port}")));
    w.adb(&["forward", "--remove", &format!("tcp:{port}")]);
}

#[test]
fn android_webview_network_captures_a_real_fetch_with_its_body() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    show_web(&w, &sim);
    let before = control(&w, &sim, json!({"op": "h5-requests"}))["requests"].as_array().unwrap().len();
    let script = "fetch('/api/echo?from=aab', {method: 'POST', headers: {'content-type': 'text/plain'}, body: 'ping-123'}).then(r => r.text())";
    let out = w.ok("webview-network", json!({"packageName": SAMPLE, "serial": serial, "script": script, "includeResponseBody": true, "urlFilter": "/api/", "durationMs": 1500}));
    let reqs = out["requests"].as_array().unwrap();
    assert_eq!(reqs.len(), 1, "{out}");
    let r = &reqs[0];
    assert_eq!((r["method"].clone(), r["status"].clone(), r["finished"].clone(), r["requestBody"].clone()), (json!("POST"), json!(200), json!(true), json!("ping-123")), "{out}");
    assert!(r["url"].as_str().unwrap().ends_with("/api/echo?from=aab"));
    // Ground truth: the H5 server saw exactly this request and sent exactly this body.
    let log = control(&w, &sim, json!({"op": "h5-requests"}))["requests"].as_array().unwrap().clone();
    let new: Vec<&Value> = log[before..].iter().filter(|q| q["path"] == json!("/api/echo")).collect();
    assert_eq!(new.len(), 1, "{log:?}");
    assert_eq!((new[0]["method"].clone(), new[0]["body"].clone()), (json!("POST"), json!("ping-123")));
    assert_eq!(r["responseBody"], new[0]["responseBody"], "the captured body is what the server sent");
    assert_eq!(out["script"]["value"], new[0]["responseBody"], "the script's own result");
    let echoed: Value = serde_json::from_str(r["responseBody"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["body"], json!("ping-123"));
    assert_eq!(out["forwardKept"], json!(false));
    assert!(!forwards(&w).contains("webview_devtools_remote"), "{}", forwards(&w));

    // bodyMaxBytes cuts the body and says so.
    let cut = w.ok("webview-network", json!({"packageName": SAMPLE, "serial": serial, "script": "fetch('/api/items?n=50').then(r => r.text()).then(t => t.length)", "includeResponseBody": true, "bodyMaxBytes": 16, "urlFilter": "/api/items", "durationMs": 1000}));
    let r = &cut["requests"][0];
    assert_eq!((r["responseBody"].as_str().map(str::len), r["responseBodyTruncated"].clone()), (Some(16), json!(true)), "{cut}");
    // A script that throws is reported as such.
    let (body, run) = w.run("webview-network", json!({"packageName": SAMPLE, "serial": serial, "script": "throw new Error('boom')", "durationMs": 200}));
    let facts = aab_e2e::error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["error"] == json!("webview_script_failed") && facts["message"].as_str().is_some_and(|m| m.contains("boom")), &run, "a throwing script is webview_script_failed");
}

#[test]
fn android_webview_console_captures_console_log_via_mcp() {
    let w = World::new();
    let sim = simulated(&w);
    let serial = sim.devices[0].serial.clone();
    show_web(&w, &sim);
    let mut mcp = w.env.mcp();
    let script = "window.__aabMark = 'seen'; console.log('aab-console', 7); console.warn('careful'); 1";
    let (body, is_error) = mcp.call_tool("run", json!({"command": "webview-console", "arguments": {"packageName": SAMPLE, "serial": serial, "script": script, "durationMs": 1000}, "extract": null}));
    assert!(!is_error, "{body}");
    let out = &body["value"];
    let msgs = out["messages"].as_array().unwrap();
    let log = msgs.iter().find(|m| m["text"] == json!("aab-console 7")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!((log["source"].clone(), log["level"].clone()), (json!("console-api"), json!("log")));
    assert!(msgs.iter().any(|m| m["text"] == json!("careful") && m["level"] == json!("warning")), "{out}");
    assert_eq!(out["script"]["value"], json!(1));
    // Ground truth: the script really ran in the app's page.
    assert_eq!(control(&w, &sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": "window.__aabMark"}))["value"], json!("seen"));
    // Through the CLI: the page's own console output from its form submit.
    control(&w, &sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": "document.getElementById('email').value = 'ann@example.com'; 1"}));
    let out = w.ok("webview-console", json!({"packageName": SAMPLE, "serial": serial, "script": "console.log('from the script'); document.getElementById('terms').checked = true; document.getElementById('submit').click(); 1", "urlFilter": "/h5/signup.html", "durationMs": 1500}));
    let texts: Vec<&str> = out["messages"].as_array().unwrap().iter().filter_map(|m| m["text"].as_str()).collect();
    // urlFilter keeps the page's own messages, not the evaluated script's (it has no url).
    assert!(!texts.contains(&"from the script"), "{out}");
    assert!(texts.contains(&"signup submit ann@example.com") && texts.contains(&"signup result 201"), "{out}");
}

#[test]
fn android_webview_capture_needs_exactly_one_page() {
    let w = World::new();
    // A second WebView, in a dialog window, present from process start.
    let mut scenario = aab_android_sim::Scenario::sample();
    scenario.apps[0].web_views.push(aab_android_sim::scenario::WebViewSpec { web_view_id: "news-web".into(), url: "h5/news.html".into(), window: Some("dialog".into()), bounds: Some([100, 600, 980, 1800]), ..Default::default() });
    let sim = simulated_with(&w, scenario);
    let serial = sim.devices[0].serial.clone();
    let (_, signup) = show_web(&w, &sim);
    // The dialog's page opens in the background as well: wait for it too.
    let t0 = Instant::now();
    let until = Instant::now() + Duration::from_secs(30);
    let v = loop {
        let v = webviews(&w, &sim);
        if v["webViews"].as_array().unwrap().iter().any(|x| x["webViewId"] == json!("news-web") && x["targetId"].is_string()) {
            break v;
        }
        assert!(Instant::now() < until, "the dialog's WebView never opened: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("news-web opened {:?} after signup-web", t0.elapsed());
    let news = v["webViews"].as_array().unwrap().iter().find(|x| x["webViewId"] == json!("news-web")).unwrap()["targetId"].as_str().unwrap_or_else(|| panic!("{v}")).to_string();
    let pages = w.ok("webview-pages", json!({"packageName": SAMPLE, "serial": serial}));
    let mut ids: Vec<&str> = pages["pages"].as_array().unwrap().iter().map(|p| p["targetId"].as_str().unwrap()).collect();
    ids.sort();
    let mut want = vec![signup.as_str(), news.as_str()];
    want.sort();
    assert_eq!(ids, want, "{pages}");
    // Two pages and no choice: refused before the script runs.
    let facts = w.fails("webview-console", json!({"packageName": SAMPLE, "serial": serial, "script": "window.__ran = true; 1", "durationMs": 200}), "webview_page_ambiguous");
    assert_eq!(facts["details"]["pages"].as_array().map(Vec::len), Some(2), "{facts}");
    for id in ["signup-web", "news-web"] {
        let ran = control(&w, &sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": id, "expression": "typeof window.__ran"}));
        assert_eq!(ran["value"], json!("undefined"), "ground truth: the script ran nowhere");
    }
    w.fails("webview-console", json!({"packageName": SAMPLE, "serial": serial, "pageUrlFilter": "no-such-page", "durationMs": 200}), "webview_page_not_found");
    // targetId picks one; the script runs in that page only.
    let out = w.ok("webview-console", json!({"packageName": SAMPLE, "serial": serial, "targetId": news, "script": "window.__ran = true; console.log('in news'); 1", "durationMs": 500}));
    assert!(out["page"]["url"].as_str().unwrap().ends_with("/h5/news.html"), "{out}");
    assert!(out["messages"].as_array().unwrap().iter().any(|m| m["text"] == json!("in news")), "{out}");
    eprintln!("webview-console figures: {}", out["_feedback"]["timings"]);
    assert_eq!(control(&w, &sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": "news-web", "expression": "window.__ran === true"}))["value"], json!(true));
    assert_eq!(control(&w, &sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": "typeof window.__ran"}))["value"], json!("undefined"));
}
