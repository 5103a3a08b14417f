//! WebViews backed by real Chromium pages: lazily created with their screen,
//! evaluated in the real page, the H5 server's request log, process death
//! closing the pages, shutdown killing the browser, and the app's DevTools
//! socket through the real adb (`/proc/net/unix`, `adb forward`, `/json`, CDP).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;

const SAMPLE: &str = "com.example.aab.sample";

fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// GET a JSON document over plain HTTP/1.1 (status, body).
fn get_json(port: u16, path: &str) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut resp = vec![];
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0), serde_json::from_str(body).unwrap_or(Value::Null))
}

fn webviews(env: &Env) -> Value {
    env.control(json!({ "op": "webviews" }))
}

fn eval(env: &Env, expr: &str) -> Value {
    let r = env.control(json!({ "op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": expr }));
    assert_eq!(r["ok"], true, "{expr}: {r}");
    r["value"].clone()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Shows the sample app's WebView screen and waits for its page to load.
fn show_web(env: &Env) {
    assert_eq!(env.control(json!({ "op": "screen", "package": SAMPLE, "screen": "web" }))["ok"], true);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = webviews(env);
        if v["webViews"][0]["progress"] == json!(100) && v["webViews"][0]["title"] == json!("Web sign-up") {
            return;
        }
        if Instant::now() > deadline {
            let r = env.control(json!({ "op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": "document.title + '|' + document.documentElement.outerHTML.slice(0, 300)" }));
            panic!("the page did not load: {v} {r}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn webview_is_a_real_page_created_with_its_screen() {
    let env = Env::start(1);
    // The sample app runs, but its WebView screen was never shown: no WebView, no browser.
    let v = webviews(&env);
    assert_eq!(v["webViews"], json!([]), "{v}");
    assert_eq!(v["browserPid"], Value::Null);
    show_web(&env);
    let v = webviews(&env);
    let w = &v["webViews"][0];
    assert_eq!(w["webViewId"], "signup-web");
    assert_eq!(w["adapter"], "standard");
    assert_eq!(w["className"], "android.webkit.WebView");
    assert_eq!(w["visible"], true);
    assert_eq!(w["foreground"], true);
    assert_eq!(w["bounds"], json!([0, 200, 1080, 2400]));
    assert_eq!(w["scale"], json!(2.625));
    assert_eq!(w["transform"], "identity");
    assert_eq!(w["obscured"], Value::Null);
    let h5 = v["h5"].as_str().unwrap().to_string();
    assert_eq!(w["url"], json!(format!("{h5}h5/signup.html")));
    // Ground truth from the real page: its url, title and the viewport = bounds / scale.
    assert_eq!(eval(&env, "location.href"), w["url"]);
    assert_eq!(eval(&env, "document.title"), json!("Web sign-up"));
    assert_eq!(eval(&env, "[innerWidth, innerHeight, devicePixelRatio]"), json!([411, 838, 2.625]));
    assert!(eval(&env, "navigator.userAgent").as_str().unwrap().contains("; wv)"));
    // The WebView lives in the screen's window: the SDK's window id of that screen.
    let status = env.control(json!({ "op": "state" }));
    assert!(status["ok"] == true);
    // Leaving the screen hides it (the WebView still exists).
    env.control(json!({ "op": "screen", "package": SAMPLE, "screen": "welcome" }));
    let w = webviews(&env)["webViews"][0].clone();
    assert_eq!((w["visible"].clone(), w["foreground"].clone()), (json!(false), json!(false)));
}

#[test]
fn page_effects_and_the_h5_request_log() {
    let env = Env::start(1);
    show_web(&env);
    // Fill and submit the form in the real page; the page's fetch reaches the H5 server.
    eval(&env, "document.getElementById('name').value = 'Ann'; document.getElementById('email').value = 'ann@example.com'; document.getElementById('terms').checked = true; document.getElementById('submit').click(); 1");
    wait_until("the page to show the reply", || eval(&env, "document.getElementById('result').textContent") == json!("Welcome, Ann"));
    let log = env.control(json!({ "op": "h5-requests" }));
    let posts: Vec<&Value> = log["requests"].as_array().unwrap().iter().filter(|r| r["path"] == "/api/signup").collect();
    assert_eq!(posts.len(), 1, "{log}");
    assert_eq!(posts[0]["method"], "POST");
    assert_eq!(posts[0]["status"], 201);
    let sent: Value = serde_json::from_str(posts[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent, json!({ "name": "Ann", "email": "ann@example.com", "terms": true }));
    assert!(posts[0]["responseBody"].as_str().unwrap().contains("Welcome, Ann"));
    assert!(posts[0]["userAgent"].as_str().unwrap().contains("; wv)"));
    // `since` pages through the log.
    let last = log["requests"].as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(env.control(json!({ "op": "h5-requests", "since": last }))["requests"], json!([]));

    // webview-set: navigate, resize, hide, transform, obscure — the page follows.
    let r = env.control(json!({ "op": "webview-set", "package": SAMPLE, "webViewId": "signup-web", "url": "h5/news.html", "bounds": [0, 400, 540, 1400], "scale": 2.0, "visible": false, "transform": "rotate(5deg)", "obscured": [0, 400, 540, 600] }));
    assert_eq!(r["ok"], true, "{r}");
    wait_until("news to load", || eval(&env, "document.title") == json!("News"));
    assert_eq!(eval(&env, "[innerWidth, innerHeight, devicePixelRatio]"), json!([270, 500, 2]));
    wait_until("the title in the list", || webviews(&env)["webViews"][0]["title"] == json!("News"));
    let w = webviews(&env)["webViews"][0].clone();
    assert_eq!(w["visible"], false);
    assert_eq!(w["transform"], "rotate(5deg)");
    assert_eq!(w["obscured"], json!([0, 400, 540, 600]));
    assert!(w["url"].as_str().unwrap().ends_with("/h5/news.html"));
    // An expression that throws is an error, not a value.
    let r = env.control(json!({ "op": "webview-eval", "package": SAMPLE, "webViewId": "signup-web", "expression": "throw new Error('nope')" }));
    assert_eq!(r["error"], "eval_failed");
    assert!(r["message"].as_str().unwrap().contains("nope"));
    let r = env.control(json!({ "op": "webview-eval", "package": SAMPLE, "webViewId": "other", "expression": "1" }));
    assert_eq!(r["error"], "not_found");
}

#[test]
fn process_death_closes_pages_and_shutdown_kills_the_browser() {
    let mut env = Env::start(1);
    show_web(&env);
    let v = webviews(&env);
    let (target, port, browser) = (v["webViews"][0]["targetId"].as_str().unwrap().to_string(), v["devtoolsPort"].as_u64().unwrap() as u16, v["browserPid"].as_u64().unwrap());
    let (_, pages) = get_json(port, "/json/list");
    assert!(pages.as_array().unwrap().iter().any(|p| p["id"] == json!(target)), "{pages}");
    assert!(alive(browser));
    // The process dies: its page is closed in the browser.
    assert_eq!(env.control(json!({ "op": "crash", "package": SAMPLE }))["ok"], true);
    wait_until("the page to close", || !get_json(port, "/json/list").1.as_array().unwrap().iter().any(|p| p["id"] == json!(target)));
    assert_eq!(webviews(&env)["webViews"], json!([]));
    // A new process shows the screen again: a new page.
    assert_eq!(env.control(json!({ "op": "launch", "package": SAMPLE }))["ok"], true);
    show_web(&env);
    let t2 = webviews(&env)["webViews"][0]["targetId"].clone();
    assert!(t2.is_string() && t2 != json!(target));
    // Shutdown kills the browser and all its processes.
    env.sim.take().unwrap().shutdown();
    assert!(!alive(browser), "browser {browser} outlived the simulator");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn devtools_socket_relays_only_the_apps_pages() {
    let env = Env::start(1);
    let serial = env.serial();
    show_web(&env);
    let v = webviews(&env);
    let pid = v["webViews"][0]["pid"].as_u64().unwrap();
    let target = v["webViews"][0]["targetId"].as_str().unwrap().to_string();
    let real_port = v["devtoolsPort"].as_u64().unwrap() as u16;
    let socket = format!("webview_devtools_remote_{pid}");
    assert_eq!(v["webViews"][0]["socket"], json!(socket));
    let unix = env.sh("cat /proc/net/unix");
    assert!(unix.contains(&format!("@{socket}\n")), "{unix}");
    // A page the app does not own (opened straight in the browser).
    let mut s = std::net::TcpStream::connect(("127.0.0.1", real_port)).unwrap();
    s.write_all(format!("PUT /json/new?about:blank HTTP/1.1\r\nHost: 127.0.0.1:{real_port}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut resp = vec![];
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let foreign: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    let foreign_id = foreign["id"].as_str().unwrap().to_string();

    let out = env.adb(&["-s", &serial, "forward", "tcp:0", &format!("localabstract:{socket}")]);
    let port: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("forwarded port");
    let (status, pages) = get_json(port, "/json");
    assert_eq!(status, 200);
    let pages = pages.as_array().unwrap().clone();
    assert_eq!(pages.len(), 1, "{pages:?}");
    assert_eq!(pages[0]["id"], json!(target));
    assert_eq!(pages[0]["title"], "Web sign-up");
    let ws = pages[0]["webSocketDebuggerUrl"].as_str().unwrap().to_string();
    assert_eq!(ws, format!("ws://127.0.0.1:{port}/devtools/page/{target}"));
    assert_eq!(get_json(port, "/json/list").1.as_array().unwrap().len(), 1);
    let (status, version) = get_json(port, "/json/version");
    assert_eq!(status, 200);
    assert!(version["Browser"].as_str().unwrap().contains("Chrome"), "{version}");
    assert!(version.get("webSocketDebuggerUrl").is_none());

    // CDP through the forward reaches the real page.
    env.block_on(async {
        let cdp = aab_cdp::Cdp::connect(&ws).await.expect("CDP through the forward");
        let r = cdp.call("Runtime.evaluate", json!({ "expression": "document.getElementById('submit').textContent", "returnByValue": true }), None).await.unwrap();
        assert_eq!(aab_cdp::evaluate_value(&r), Ok(json!("Create account")));
        cdp.close().await;
        // The foreign page is refused.
        let refused = aab_cdp::Cdp::connect(&format!("ws://127.0.0.1:{port}/devtools/page/{foreign_id}")).await;
        assert!(refused.is_err());
    });
    let _ = env.adb(&["-s", &serial, "forward", "--remove", &format!("tcp:{port}")]);
    // The process dies: its socket leaves /proc/net/unix.
    env.control(json!({ "op": "crash", "package": SAMPLE }));
    assert!(!env.sh("cat /proc/net/unix").contains(&socket));
}
