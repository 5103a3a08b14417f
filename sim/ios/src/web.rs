//! The apps' WKWebViews as real pages in headless Chromium. A WebView exists
//! while its screen is an app process's current screen (a WKWebView is torn
//! down with its view controller); Chromium is launched on the first one and
//! killed when the simulator drops. One browser context per app process, one
//! page per WebView, its viewport = the WebView's frame in points (CSS px at
//! page zoom 1). Relative urls are served by the local H5 server, whose
//! request log is ground truth for what a page sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aab_cdp::{Browser, Cdp};
use serde_json::{Value, json};
use tokio::sync::{OnceCell, watch};

use crate::device::Device;
use crate::http;

const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
const LOAD_WAIT: Duration = Duration::from_secs(10);
const CHECKOUT: &str = include_str!("../scenarios/h5/checkout.html");

/// (udid, bundle id, pid, webViewId).
pub type ViewKey = (String, String, u32, String);

#[derive(Clone, Debug, PartialEq)]
pub enum Page {
    Pending,
    Open { session: String },
    Failed(String),
    Closed,
}

pub struct View {
    pub key: ViewKey,
    pub url: String,
    /// Width, height in CSS px (= points at zoom 1).
    pub viewport: Mutex<(f64, f64)>,
    pub page_zoom: Mutex<f64>,
    pub page: watch::Sender<Page>,
}

struct Chrome {
    browser: Mutex<Option<Browser>>,
    cdp: Cdp,
    pid: u32,
}

type Context = Arc<OnceCell<Result<String, String>>>;

pub struct WebHost {
    chrome: OnceCell<Result<Arc<Chrome>, String>>,
    server: Mutex<Option<Result<Arc<H5Server>, String>>>,
    views: Mutex<HashMap<ViewKey, Arc<View>>>,
    /// One browser context per app process (udid, bundle id, pid), created on first need.
    contexts: Mutex<HashMap<(String, String, u32), Context>>,
}

impl WebHost {
    pub fn new() -> Arc<WebHost> {
        Arc::new(WebHost { chrome: OnceCell::new(), server: Mutex::new(None), views: Mutex::new(HashMap::new()), contexts: Mutex::new(HashMap::new()) })
    }

    async fn chrome(&self) -> Result<Arc<Chrome>, String> {
        self.chrome
            .get_or_init(|| async {
                let browser = Browser::launch().await.map_err(|e| e.to_string())?;
                let cdp = browser.connect().await.map_err(|e| e.to_string())?;
                let pid = browser.pid();
                Ok(Arc::new(Chrome { browser: Mutex::new(Some(browser)), cdp, pid }))
            })
            .await
            .clone()
    }

    pub fn browser_pid(&self) -> Option<u32> {
        self.chrome.get().and_then(|c| c.as_ref().ok()).map(|c| c.pid)
    }

    fn server(&self) -> Result<Arc<H5Server>, String> {
        let mut s = self.server.lock().unwrap();
        if s.is_none() {
            *s = Some(H5Server::start().map(Arc::new).map_err(|e| format!("H5 server: {e}")));
        }
        s.clone().unwrap()
    }

    pub fn view(&self, key: &ViewKey) -> Option<Arc<View>> {
        self.views.lock().unwrap().get(key).cloned()
    }

    /// Kills the browser now (simulator drop).
    pub fn shutdown(&self) {
        for (_, v) in self.views.lock().unwrap().drain() {
            v.page.send_replace(Page::Closed);
        }
        if let Some(Ok(c)) = self.chrome.get() {
            drop(c.browser.lock().unwrap().take());
        }
        self.server.lock().unwrap().take();
    }

    pub fn requests(&self, since: u64) -> Value {
        match self.server() {
            Ok(s) => json!({ "ok": true, "base": s.base(), "requests": s.requests(since) }),
            Err(e) => json!({ "ok": false, "error": "h5_unavailable", "message": e }),
        }
    }
}

/// Brings the device's WebViews in line with its processes' current screens:
/// opens pages for newly shown WebViews, resizes on rotation, closes the rest.
pub fn sync(dev: &Arc<Device>) {
    let Some(host) = dev.web() else { return };
    let mut wanted: HashMap<ViewKey, (String, (f64, f64))> = HashMap::new();
    {
        let st = dev.st.lock().unwrap();
        for (bundle, app) in &st.apps {
            let Some(p) = &app.process else { continue };
            let Some(screen) = app.spec.screen(&p.ui.screen) else { continue };
            let Some(wv) = &screen.web_view else { continue };
            let Some((tree, _)) = crate::native::current(dev, &st, bundle, false) else { continue };
            let frame = tree.find(&wv.id).map(|e| e.frame).unwrap_or([0.0; 4]);
            wanted.insert((dev.udid.clone(), bundle.clone(), p.pid, wv.id.clone()), (wv.url.clone(), (frame[2], frame[3])));
        }
    }
    let mut open = vec![];
    let mut resize = vec![];
    let mut closed = vec![];
    {
        let mut views = host.views.lock().unwrap();
        views.retain(|k, v| {
            let keep = k.0 != dev.udid || wanted.contains_key(k);
            if !keep {
                closed.push(v.clone());
            }
            keep
        });
        for (key, (url, size)) in wanted {
            match views.get(&key) {
                Some(v) => {
                    let mut vp = v.viewport.lock().unwrap();
                    if *vp != size {
                        *vp = size;
                        resize.push(v.clone());
                    }
                }
                None => {
                    let url = match host.server() {
                        Ok(s) => s.resolve(&url),
                        Err(_) => url,
                    };
                    let v = Arc::new(View { key: key.clone(), url, viewport: Mutex::new(size), page_zoom: Mutex::new(1.0), page: watch::channel(Page::Pending).0 });
                    views.insert(key, v.clone());
                    open.push(v);
                }
            }
        }
    }
    for v in &closed {
        let was = v.page.send_replace(Page::Closed);
        let host = host.clone();
        tokio::spawn(async move {
            if let (Page::Open { session }, Some(Ok(c))) = (was, host.chrome.get()) {
                let _ = c.cdp.call("Target.closeTarget", json!({ "targetId": session_target(&session) }), None).await;
            }
        });
    }
    // Contexts of processes that have no view left are disposed.
    {
        let alive: Vec<(String, String, u32)> = host.views.lock().unwrap().keys().map(|k| (k.0.clone(), k.1.clone(), k.2)).collect();
        let mut ctxs = host.contexts.lock().unwrap();
        let dead: Vec<_> = ctxs.keys().filter(|k| k.0 == dev.udid && !alive.contains(k)).cloned().collect();
        for k in dead {
            if let Some(cell) = ctxs.remove(&k) {
                let host = host.clone();
                tokio::spawn(async move {
                    if let (Some(Ok(ctx)), Some(Ok(c))) = (cell.get(), host.chrome.get()) {
                        let _ = c.cdp.call("Target.disposeBrowserContext", json!({ "browserContextId": ctx }), None).await;
                    }
                });
            }
        }
    }
    for v in open {
        dev.record("webview", json!({ "bundleId": v.key.1, "pid": v.key.2, "webViewId": v.key.3, "url": v.url, "event": "created" }));
        tokio::spawn(open_page(host.clone(), v));
    }
    for v in resize {
        let host = host.clone();
        tokio::spawn(async move {
            let page = v.page.borrow().clone();
            if let (Page::Open { session }, Ok(c)) = (page, host.chrome().await) {
                let _ = apply_viewport(&c, &session, &v).await;
            }
        });
    }
}

/// The session ids we hand out are `<targetId>|<sessionId>`.
fn session_target(s: &str) -> &str {
    s.split('|').next().unwrap_or("")
}

fn session_id(s: &str) -> &str {
    s.split('|').nth(1).unwrap_or("")
}

async fn apply_viewport(c: &Chrome, session: &str, v: &View) -> Result<Value, String> {
    let (w, h) = *v.viewport.lock().unwrap();
    c.cdp
        .call("Emulation.setDeviceMetricsOverride", json!({ "width": w.round().max(1.0) as i64, "height": h.round().max(1.0) as i64, "deviceScaleFactor": 3, "mobile": true }), Some(session_id(session)))
        .await
        .map_err(|e| e.to_string())
}

async fn open_page(host: Arc<WebHost>, v: Arc<View>) {
    let r: Result<String, String> = async {
        let c = host.chrome().await?;
        let cell = host.contexts.lock().unwrap().entry((v.key.0.clone(), v.key.1.clone(), v.key.2)).or_insert_with(|| Arc::new(OnceCell::new())).clone();
        let ctx = cell.get_or_init(|| async { c.cdp.call("Target.createBrowserContext", json!({}), None).await.map(|r| r["browserContextId"].as_str().unwrap_or_default().to_string()).map_err(|e| e.to_string()) }).await.clone()?;
        let t = c.cdp.call("Target.createTarget", json!({ "url": "about:blank", "browserContextId": ctx }), None).await.map_err(|e| e.to_string())?;
        let target = t["targetId"].as_str().unwrap_or_default().to_string();
        let a = c.cdp.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }), None).await.map_err(|e| e.to_string())?;
        let session = format!("{target}|{}", a["sessionId"].as_str().unwrap_or_default());
        let ua = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148";
        let sid = session_id(&session).to_string();
        c.cdp.call("Emulation.setUserAgentOverride", json!({ "userAgent": ua }), Some(&sid)).await.map_err(|e| e.to_string())?;
        apply_viewport(&c, &session, &v).await?;
        c.cdp.call("Page.enable", json!({}), Some(&sid)).await.map_err(|e| e.to_string())?;
        c.cdp.call("Page.navigate", json!({ "url": v.url }), Some(&sid)).await.map_err(|e| e.to_string())?;
        Ok(session)
    }
    .await;
    let closed = *v.page.borrow() == Page::Closed;
    match r {
        Ok(session) if closed => {
            if let Some(Ok(c)) = host.chrome.get() {
                let _ = c.cdp.call("Target.closeTarget", json!({ "targetId": session_target(&session) }), None).await;
            }
        }
        Ok(session) => {
            v.page.send_replace(Page::Open { session });
        }
        Err(e) if !closed => {
            v.page.send_replace(Page::Failed(e));
        }
        Err(_) => {}
    }
}

impl View {
    async fn session(&self) -> Result<String, String> {
        let mut rx = self.page.subscribe();
        match tokio::time::timeout(OPEN_TIMEOUT, rx.wait_for(|p| *p != Page::Pending)).await {
            Ok(Ok(p)) => match p.clone() {
                Page::Open { session } => Ok(session),
                Page::Failed(e) => Err(format!("WebView {} has no page: {e}", self.key.3)),
                _ => Err(format!("WebView {} is gone", self.key.3)),
            },
            Ok(Err(_)) => Err("WebView gone".into()),
            Err(_) => Err(format!("WebView {}: page not ready within {OPEN_TIMEOUT:?}", self.key.3)),
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(*self.page.borrow(), Page::Open { .. })
    }
}

/// Runtime.evaluate (returnByValue, awaitPromise) in the WebView's page once its document has loaded.
pub async fn evaluate(host: &WebHost, v: &View, expression: &str) -> Result<Value, String> {
    let session = v.session().await?;
    let c = host.chrome().await?;
    let sid = session_id(&session).to_string();
    let deadline = tokio::time::Instant::now() + LOAD_WAIT;
    loop {
        let r = c.cdp.call("Runtime.evaluate", json!({ "expression": "document.readyState", "returnByValue": true }), Some(&sid)).await.map_err(|e| e.to_string())?;
        if aab_cdp::evaluate_value(&r).ok().as_ref().and_then(Value::as_str) == Some("complete") || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = c.cdp.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }), Some(&sid)).await.map_err(|e| e.to_string())?;
    aab_cdp::evaluate_value(&r)
}

/// A DOM mouse click at a CSS point of the page (a native touch on WKWebView content).
pub async fn click_at(host: &WebHost, v: &View, x: f64, y: f64) -> Result<(), String> {
    let session = v.session().await?;
    let c = host.chrome().await?;
    let sid = session_id(&session).to_string();
    for t in ["mousePressed", "mouseReleased"] {
        c.cdp.call("Input.dispatchMouseEvent", json!({ "type": t, "x": x, "y": y, "button": "left", "clickCount": 1 }), Some(&sid)).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The WebView of a running process's current screen, if any (by id or the only one).
pub fn find(dev: &Device, bundle: &str, pid: u32, web_view_id: Option<&str>) -> Vec<Arc<View>> {
    let Some(host) = dev.web() else { return vec![] };
    host.views.lock().unwrap().values().filter(|v| v.key.0 == dev.udid && v.key.1 == bundle && v.key.2 == pid && web_view_id.is_none_or(|id| v.key.3 == id)).cloned().collect()
}

// ------------------------------------------------------------------ the H5 server

const LOG_CAP: usize = 1000;

pub struct H5Server {
    port: u16,
    log: Arc<Mutex<(u64, Vec<Value>)>>,
    task: tokio::task::JoinHandle<()>,
}

impl H5Server {
    fn start() -> std::io::Result<H5Server> {
        let std_l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_l.set_nonblocking(true)?;
        let port = std_l.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(std_l)?;
        let log = Arc::new(Mutex::new((0u64, vec![])));
        let l2 = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let log = l2.clone();
                tokio::spawn(async move {
                    let Ok(req) = http::read_request(&mut s, 1024 * 1024, Duration::from_secs(10)).await else { return };
                    let (status, ctype, body): (u16, &str, Vec<u8>) = match (req.method.as_str(), req.path.as_str()) {
                        ("GET", "/h5/checkout.html") => (200, "text/html; charset=utf-8", CHECKOUT.as_bytes().to_vec()),
                        ("POST", p) if p.starts_with("/api/") => (200, "application/json", br#"{"ok":true}"#.to_vec()),
                        _ => (404, "text/plain", b"not found".to_vec()),
                    };
                    {
                        let mut l = log.lock().unwrap();
                        l.0 += 1;
                        let seq = l.0;
                        l.1.push(json!({ "seq": seq, "method": req.method, "path": req.path, "status": status, "body": String::from_utf8_lossy(&req.body[..req.body.len().min(4096)]) }));
                        if l.1.len() > LOG_CAP {
                            l.1.remove(0);
                        }
                    }
                    http::respond(&mut s, status, if status == 200 { "OK" } else { "Not Found" }, ctype, &body).await;
                });
            }
        });
        Ok(H5Server { port, log, task })
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    fn resolve(&self, url: &str) -> String {
        if url.contains("://") || url.starts_with("about:") || url.starts_with("data:") { url.to_string() } else { format!("{}{}", self.base(), url.trim_start_matches('/')) }
    }

    fn requests(&self, since: u64) -> Vec<Value> {
        self.log.lock().unwrap().1.iter().filter(|r| r["seq"].as_u64().unwrap_or(0) > since).cloned().collect()
    }
}

impl Drop for H5Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}
