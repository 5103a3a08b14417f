//! `aab-bench-android --h5`: the Android H5 path against the Web provider on the
//! same page, in one run. The bench app's `web` screen hosts a WebView that the
//! simulator backs with a real headless Chromium page (`controls.html?n=999`: 999
//! controls plus the status line = 1000 controls); the same page is opened in a
//! second Chromium with the Web SDK connected to the Web provider. Figures:
//!   - `h5-dom` (adb forward → SDK → the shared renderer in the page) vs `web-dom`
//!     (the page's own SDK over the Web provider's WebSocket), 1000 controls;
//!   - `h5-click` (foreground proof, fresh snapshot, prepare → native hit check →
//!     action, receipt) vs `web-click` on "Button 0";
//!   - `flutter-h5-dom` / `flutter-h5-click` on the same page hosted by a Flutter
//!     screen's H5 adapter (the Flutter action route instead of `/v1/h5/*`).
//!
//! Each click is verified after the clock stopped against the real page (the
//! button writes `clicked b0` into `#last`, reset before every call): through the
//! simulator's `webview-eval` for H5 and over CDP for the Web page. The gap between
//! the two is the adb + SDK hop plus the native hit check.

use std::time::{Duration, Instant};

use aab_cdp::{Cdp, evaluate_value};
use serde_json::{Value, json};

use super::mcp::run_command as run;
use super::{Mcp, PKG, World, stats};

const WEB_VIEW: &str = "bench-web";
/// The same page in a WebView the bench app's Flutter screen hosts (adapter `flutter`).
const FLUTTER_WEB_VIEW: &str = "bench-flutter-web";
const SDK: &str = include_str!("../../plugins/web/sdk/ai-app-bridge-web.js");


fn timed(calls: usize, mut act: impl FnMut() -> Result<(), String>, mut verify: impl FnMut() -> Result<(), String>) -> Result<Vec<Duration>, String> {
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        act()?;
        samples.push(t.elapsed());
        verify()?;
    }
    Ok(samples)
}

/// The Web side: a Chromium of its own with the page's SDK connected.
struct WebPage {
    rt: tokio::runtime::Runtime,
    _browser: aab_cdp::Browser,
    cdp: Cdp,
    session: String,
}

impl WebPage {
    fn open(url: &str, endpoint: &str, token: &str) -> Result<WebPage, String> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().map_err(|e| e.to_string())?;
        let (browser, cdp, session) = rt.block_on(async {
            let browser = aab_cdp::Browser::launch().await.map_err(|e| format!("chromium: {e}"))?;
            let cdp = browser.connect().await.map_err(|e| e.to_string())?;
            let target = cdp.call("Target.createTarget", json!({"url": url}), None).await.map_err(|e| e.to_string())?;
            let attached = cdp.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}), None).await.map_err(|e| e.to_string())?;
            let session = attached["sessionId"].as_str().ok_or("no CDP session")?.to_string();
            Ok::<_, String>((browser, cdp, session))
        })?;
        let page = WebPage { rt, _browser: browser, cdp, session };
        let until = Instant::now() + Duration::from_secs(20);
        // A new target starts on about:blank (already "complete"): wait for the page itself.
        let loaded = format!("location.href === {} && document.readyState === 'complete'", json!(url));
        while page.eval(&loaded)? != json!(true) {
            if Instant::now() > until {
                return Err("the Web page never loaded".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        page.eval(&format!("{SDK}\n;window.__bench = AiAppBridgeWeb.createAiAppBridge({{endpoint: {}, token: {}, appName: 'bench'}}); __bench.start(); true", json!(endpoint), json!(token)))?;
        Ok(page)
    }

    fn eval(&self, expression: &str) -> Result<Value, String> {
        self.rt.block_on(async {
            let r = self.cdp.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}), Some(&self.session)).await.map_err(|e| e.to_string())?;
            evaluate_value(&r)
        })
    }
}

pub fn run_h5(w: &World, calls: usize, rows: &mut Vec<Value>, aab: &mut Mcp) -> Result<(), String> {
    let serial = w.serial.clone();
    w.control(json!({"op": "screen", "package": PKG, "screen": "web"}))?;
    let in_view = |expression: &str| -> Result<Value, String> {
        Ok(w.control(json!({"op": "webview-eval", "package": PKG, "webViewId": WEB_VIEW, "expression": expression}))?["value"].clone())
    };
    let until = Instant::now() + Duration::from_secs(30);
    while in_view("document.readyState").ok() != Some(json!("complete")) {
        if Instant::now() > until {
            return Err("the WebView's page never loaded".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let app = json!({"packageName": PKG, "serial": serial});
    let dom = run(aab, "h5-dom", app.clone())?;
    println!("h5-dom reply: delivery {} ({} bytes attempted)", dom["delivery"]["status"], dom["delivery"]["attemptedBytes"]);
    let controls = in_view("document.querySelectorAll('a,button,input,textarea,select,[role],[onclick],[aria-label],[contenteditable=\"true\"]').length")?;

    // ---- the same page on the Web provider
    let started = run(aab, "web-session-start", json!({"webPort": 0}))?;
    let v = &started["value"];
    let (endpoint, token) = (v["endpoint"].as_str().ok_or("no endpoint")?.to_string(), v["token"].as_str().ok_or("no token")?.to_string());
    let base = w.control(json!({"op": "h5-requests"}))?["base"].as_str().ok_or("no H5 base")?.trim_end_matches('/').to_string();
    let page = WebPage::open(&format!("{base}/h5/controls.html?n=999"), &endpoint, &token)?;
    let until = Instant::now() + Duration::from_secs(20);
    let ids = loop {
        let ids = page.eval("__bench.transportStatus().connected && [__bench.sessionId, __bench.runtimeEpoch]")?;
        if ids.is_array() {
            break ids;
        }
        if Instant::now() > until {
            return Err("the Web page's SDK never connected".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let web = json!({"sessionId": ids[0], "runtimeEpoch": ids[1]});

    // ---- snapshots of the 1000-control page
    let samples = timed(calls, || run(aab, "h5-dom", app.clone()).map(drop), || Ok(()))?;
    stats(rows, &format!("aab h5-dom, {controls} controls (adb + SDK + renderer) via MCP"), samples, None);
    let mut web_dom = web.clone();
    web_dom["maxControls"] = json!(1000);
    let samples = timed(calls, || run(aab, "web-dom", web_dom.clone()).map(drop), || Ok(()))?;
    stats(rows, &format!("aab web-dom, same page ({controls} controls) via MCP"), samples, None);

    // ---- a verified click on the same button
    let button = json!({"text": "Button 0", "tag": "button"});
    let mut click = app.clone();
    click["selector"] = button.clone();
    let mut h5_samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        in_view("last.textContent = ''")?;
        let t = Instant::now();
        run(aab, "h5-click", click.clone())?;
        h5_samples.push(t.elapsed());
        let seen = in_view("last.textContent")?;
        if seen != json!("clicked b0") {
            return Err(format!("h5-click: the page shows {seen}, not the click"));
        }
    }
    stats(rows, "aab h5-click (foreground, snapshot, hit check, receipt) via MCP", h5_samples, None);
    let mut web_click = web.clone();
    web_click["selector"] = button;
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        page.eval("last.textContent = ''")?;
        let t = Instant::now();
        run(aab, "web-click", web_click.clone())?;
        out.push(t.elapsed());
        let seen = page.eval("last.textContent")?;
        if seen != json!("clicked b0") {
            return Err(format!("web-click: the page shows {seen}, not the click"));
        }
    }
    stats(rows, "aab web-click, same page and button via MCP", out, None);

    // ---- the same page in a WebView a Flutter screen hosts (Flutter H5 adapter)
    w.control(json!({"op": "screen", "package": PKG, "screen": "flutter-web"}))?;
    let in_flutter_view = |expression: &str| -> Result<Value, String> {
        Ok(w.control(json!({"op": "webview-eval", "package": PKG, "webViewId": FLUTTER_WEB_VIEW, "expression": expression}))?["value"].clone())
    };
    let until = Instant::now() + Duration::from_secs(30);
    while in_flutter_view("document.readyState").ok() != Some(json!("complete")) {
        if Instant::now() > until {
            return Err("the Flutter-hosted WebView's page never loaded".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let samples = timed(calls, || run(aab, "flutter-h5-dom", app.clone()).map(drop), || Ok(()))?;
    stats(rows, &format!("aab flutter-h5-dom, same page ({controls} controls, Flutter action route) via MCP"), samples, None);
    let mut fl_samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        in_flutter_view("last.textContent = ''")?;
        let t = Instant::now();
        run(aab, "flutter-h5-click", click.clone())?;
        fl_samples.push(t.elapsed());
        let seen = in_flutter_view("last.textContent")?;
        if seen != json!("clicked b0") {
            return Err(format!("flutter-h5-click: the page shows {seen}, not the click"));
        }
    }
    stats(rows, "aab flutter-h5-click (foreground, status, h5Dom bind, managed h5Control) via MCP", fl_samples, None);
    Ok(())
}
