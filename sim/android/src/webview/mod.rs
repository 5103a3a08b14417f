//! The simulated apps' WebViews, each a real page in headless Chromium.
//!
//! A WebView (scenario field `webViews` of an app) comes into existence when
//! its app process runs and the screen it lives on has been shown (a WebView
//! without `screen` exists from process start; a Flutter-hosted one also needs
//! its `flutterRoute` shown); it stays until the process
//! dies. The browser is launched on the first WebView of the device; each app
//! process gets its own browser context, each WebView its own page. Relative
//! urls are served by the device's H5 server (`h5server`). The app process
//! exposes `@webview_devtools_remote_<pid>` (`devtools`), relayed to
//! Chromium's real DevTools endpoint for that app's pages only.
//!
//! Public API for the SDK routes: [`list`] and [`evaluate`]; control ops
//! `webviews`, `webview-set`, `webview-eval`, `h5-requests` ([`control`]).

mod chrome;
mod devtools;
mod h5server;
mod http;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, watch};

use crate::device::Device;
use chrome::Chrome;
use h5server::H5Server;

/// How long [`evaluate`] waits for a WebView's page to exist.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`evaluate`] waits for the current document to finish loading
/// before running anyway (a page may never fire `load`).
const LOAD_WAIT: Duration = Duration::from_secs(10);

/// Per-device state, by device root (unique per simulator device).
static HOSTS: OnceLock<Mutex<HashMap<PathBuf, Arc<Host>>>> = OnceLock::new();

fn hosts() -> &'static Mutex<HashMap<PathBuf, Arc<Host>>> {
    HOSTS.get_or_init(Default::default)
}

fn host_of(dev: &Device) -> Option<Arc<Host>> {
    hosts().lock().unwrap().get(&dev.root).cloned()
}

pub struct Host {
    me: Weak<Host>,
    dev: Weak<Device>,
    h5: Mutex<Option<Result<Arc<H5Server>, String>>>,
    chrome: OnceCell<Result<Arc<Chrome>, String>>,
    apps: Mutex<HashMap<String, AppViews>>,
    poll_started: AtomicBool,
}

/// The WebViews of one app process.
struct AppViews {
    pid: u32,
    epoch: String,
    views: Vec<Arc<View>>,
    context: Arc<OnceCell<Result<String, String>>>,
    socket: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Page {
    Pending,
    Open { target: String, session: String },
    Failed(String),
    Closed,
}

pub struct View {
    pub id: String,
    pub package: String,
    pub adapter: String,
    pub class_name: String,
    /// Index of the screen it lives on (None: the app's current screen).
    pub screen: Option<usize>,
    /// Another window of the app (a dialog) instead of the screen's window.
    pub window: Option<String>,
    pub st: Mutex<ViewState>,
    pub page: watch::Sender<Page>,
}

pub struct ViewState {
    pub url: String,
    pub title: String,
    pub progress: u32,
    /// The loader of the main frame's current document (lifecycle events).
    loader: String,
    pub visible: bool,
    pub bounds: [i32; 4],
    pub scale: f64,
    pub transform: String,
    pub obscured: Option<[i32; 4]>,
}

impl View {
    fn page(&self) -> Page {
        self.page.borrow().clone()
    }

    fn closed(&self) -> bool {
        self.page() == Page::Closed
    }

    pub fn target(&self) -> Option<String> {
        match self.page() {
            Page::Open { target, .. } => Some(target),
            _ => None,
        }
    }

    /// Waits until the page exists; its session id.
    async fn session(&self, timeout: Duration) -> Result<String, String> {
        let mut rx = self.page.subscribe();
        let r = tokio::time::timeout(timeout, rx.wait_for(|p| *p != Page::Pending)).await;
        match r.map(|p| p.map(|p| p.clone())) {
            Ok(Ok(Page::Open { session, .. })) => Ok(session),
            Ok(Ok(Page::Failed(e))) => Err(format!("WebView {} has no page: {e}", self.id)),
            Ok(Ok(_)) | Ok(Err(_)) => Err(format!("WebView {} is gone (its process stopped)", self.id)),
            Err(_) => Err(format!("WebView {}: page not ready within {timeout:?}", self.id)),
        }
    }
}

/// Same derivation as the SDK's window ids (sdk.rs), so a WebView's windowId
/// equals the SDK's `windowId` of the screen it lives on.
fn uuid_from(seed: &str) -> String {
    let h = Sha256::digest(seed.as_bytes());
    let x: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-4{}-a{}-{}", &x[0..8], &x[8..12], &x[13..16], &x[17..20], &x[20..32])
}

impl Host {
    async fn chrome(&self) -> Result<Arc<Chrome>, String> {
        let me = self.me.clone();
        self.chrome.get_or_init(|| Chrome::launch(me)).await.clone()
    }

    fn h5(&self) -> Result<Arc<H5Server>, String> {
        let mut h = self.h5.lock().unwrap();
        if h.is_none() {
            *h = Some(H5Server::start().map(Arc::new).map_err(|e| format!("H5 server: {e}")));
        }
        h.clone().unwrap()
    }

    fn all_views(&self) -> Vec<Arc<View>> {
        self.apps.lock().unwrap().values().flat_map(|a| a.views.iter().cloned()).collect()
    }

    fn find(&self, package: &str, id: &str) -> Option<Arc<View>> {
        self.apps.lock().unwrap().get(package)?.views.iter().find(|v| v.id == id).cloned()
    }

    /// Target ids of the pages of `package`'s process `pid`.
    pub fn targets_of(&self, package: &str, pid: u32) -> Vec<String> {
        let apps = self.apps.lock().unwrap();
        apps.get(package).filter(|a| a.pid == pid).map(|a| a.views.iter().filter_map(|v| v.target()).collect()).unwrap_or_default()
    }

    fn on_event(&self, method: &str, params: &Value, session: Option<&str>) {
        match method {
            "Target.targetInfoChanged" => {
                let info = &params["targetInfo"];
                let Some(tid) = info["targetId"].as_str() else { return };
                for v in self.all_views() {
                    if v.target().as_deref() == Some(tid) {
                        let mut st = v.st.lock().unwrap();
                        if let Some(u) = info["url"].as_str().filter(|u| !u.is_empty()) {
                            st.url = u.to_string();
                        }
                        st.title = info["title"].as_str().unwrap_or_default().to_string();
                    }
                }
            }
            "Page.lifecycleEvent" => {
                let Some(session) = session else { return };
                let Some(v) = self.all_views().into_iter().find(|v| matches!(v.page(), Page::Open { session: s, .. } if s == session)) else { return };
                // Only the main frame (its id is the target id) drives progress.
                if v.target().as_deref() != params["frameId"].as_str() {
                    return;
                }
                let loader = params["loaderId"].as_str().unwrap_or_default();
                let mut st = v.st.lock().unwrap();
                match params["name"].as_str().unwrap_or_default() {
                    "init" => {
                        st.loader = loader.to_string();
                        st.progress = 10;
                    }
                    "DOMContentLoaded" if st.loader == loader => st.progress = st.progress.max(70),
                    "load" if st.loader == loader => st.progress = 100,
                    _ => return,
                }
                drop(st);
                // The document's own title is not always announced by targetInfoChanged: read it.
                if let (Some(Ok(chrome)), Some(target)) = (self.chrome.get().cloned(), v.target()) {
                    tokio::spawn(async move {
                        if let Ok(r) = chrome.cdp.call("Target.getTargetInfo", json!({ "targetId": target }), None).await {
                            let mut st = v.st.lock().unwrap();
                            if let Some(u) = r["targetInfo"]["url"].as_str().filter(|u| !u.is_empty()) {
                                st.url = u.to_string();
                            }
                            st.title = r["targetInfo"]["title"].as_str().unwrap_or_default().to_string();
                        }
                    });
                }
            }
            _ => {}
        }
    }

    /// Brings the WebView set in line with the phone: new processes and newly
    /// shown screens create WebViews (pages opened in the background), dead
    /// processes lose theirs.
    fn sync(&self, dev: &Device) {
        let mut fresh = vec![];
        let mut gone = vec![];
        let mut sockets = vec![];
        {
            let ph = dev.phone.lock().unwrap();
            let mut apps = self.apps.lock().unwrap();
            for (idx, app) in ph.apps.iter().enumerate().filter(|(_, a)| !a.spec.web_views.is_empty()) {
                let Some(p) = &app.process else {
                    if let Some(old) = apps.remove(&app.package) {
                        gone.push(old);
                    }
                    continue;
                };
                if apps.get(&app.package).is_some_and(|a| a.pid != p.pid)
                    && let Some(old) = apps.remove(&app.package)
                {
                    gone.push(old);
                }
                let entry = apps.entry(app.package.clone()).or_insert_with(|| AppViews { pid: p.pid, epoch: p.epoch.clone(), views: vec![], context: Arc::new(OnceCell::new()), socket: None });
                for spec in &app.spec.web_views {
                    if entry.views.iter().any(|v| v.id == spec.web_view_id) {
                        continue;
                    }
                    let screen = spec.screen.as_ref().and_then(|n| app.spec.screens.iter().position(|s| &s.name == n));
                    if screen.is_some_and(|s| s != app.screen) {
                        continue;
                    }
                    // A Flutter-hosted WebView is built with the route that shows it.
                    if let Some(route) = &spec.flutter_route
                        && !crate::flutter::with_engine(&ph, idx, |e, _, _| e.route() == route).unwrap_or(false)
                    {
                        continue;
                    }
                    let url = match self.h5() {
                        Ok(h) => h.resolve(&spec.url),
                        Err(_) => spec.url.clone(),
                    };
                    let density = ph.density as f64 / 160.0;
                    let view = Arc::new(View {
                        id: spec.web_view_id.clone(),
                        package: app.package.clone(),
                        adapter: spec.adapter.clone(),
                        class_name: spec.class_name.clone(),
                        screen,
                        window: spec.window.clone(),
                        st: Mutex::new(ViewState {
                            url,
                            title: String::new(),
                            progress: 0,
                            loader: String::new(),
                            visible: spec.visible,
                            bounds: spec.bounds.unwrap_or([0, 0, ph.width as i32, ph.height as i32]),
                            scale: spec.scale.unwrap_or(density),
                            transform: spec.transform.clone(),
                            obscured: spec.obscured,
                        }),
                        page: watch::channel(Page::Pending).0,
                    });
                    entry.views.push(view.clone());
                    fresh.push((view, entry.context.clone()));
                }
                if !entry.views.is_empty() && entry.socket.is_none() {
                    let name = format!("webview_devtools_remote_{}", entry.pid);
                    entry.socket = Some(name.clone());
                    sockets.push((name, app.package.clone(), entry.pid));
                }
            }
        }
        for (name, package, pid) in &sockets {
            let rx = dev.listen(&format!("localabstract:{name}"));
            tokio::spawn(devtools::serve(self.me.clone(), package.clone(), *pid, rx));
        }
        if !sockets.is_empty() {
            crate::lifecycle::write_net_unix(dev);
        }
        for (view, ctx) in fresh {
            let Some(host) = self.me.upgrade() else { break };
            tokio::spawn(open(host, view, ctx));
        }
        let had_gone = !gone.is_empty();
        for old in gone {
            self.close_app(dev, old);
        }
        if had_gone {
            crate::lifecycle::write_net_unix(dev);
        }
    }

    fn close_app(&self, dev: &Device, old: AppViews) {
        if let Some(s) = &old.socket {
            dev.unlisten(&format!("localabstract:{s}"));
        }
        for v in &old.views {
            v.page.send_replace(Page::Closed);
        }
        let Some(host) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            // A context still being created is disposed by its `open` task.
            if let (Some(Ok(ctx)), Some(Ok(chrome))) = (old.context.get(), host.chrome.get()) {
                chrome.dispose_context(ctx).await;
            }
        });
    }
}

/// Opens a WebView's page (launching the browser and the app's context on first need) and loads its url.
async fn open(host: Arc<Host>, view: Arc<View>, ctx: Arc<OnceCell<Result<String, String>>>) {
    let r: Result<(), String> = async {
        let chrome = host.chrome().await?;
        let context = ctx.get_or_init(|| async { chrome.create_context().await.map_err(|e| e.to_string()) }).await.clone()?;
        let give_up = |chrome: Arc<Chrome>, context: String| async move { chrome.dispose_context(&context).await };
        if view.closed() {
            give_up(chrome, context).await;
            return Err("closed".into());
        }
        let (target, session) = chrome.open_page(&context, &view).await.map_err(|e| e.to_string())?;
        if view.closed() {
            give_up(chrome, context).await;
            return Err("closed".into());
        }
        view.page.send_replace(Page::Open { target, session: session.clone() });
        let url = view.st.lock().unwrap().url.clone();
        // A failed load shows Chromium's error page, as a WebView shows its own.
        let _ = chrome.navigate(&session, &url).await;
        Ok(())
    }
    .await;
    if let Err(e) = r
        && !view.closed()
    {
        view.page.send_replace(Page::Failed(e));
    }
}

/// Hook: an app process started (lifecycle). Creates the device's state on
/// first use and keeps it in line with the phone while it runs.
pub fn process_started(dev: &Arc<Device>) {
    if !dev.scenario.apps.iter().any(|a| !a.web_views.is_empty()) {
        return;
    }
    let host = {
        let mut hs = hosts().lock().unwrap();
        hs.entry(dev.root.clone())
            .or_insert_with(|| {
                Arc::new_cyclic(|me| Host { me: me.clone(), dev: Arc::downgrade(dev), h5: Mutex::new(None), chrome: OnceCell::new(), apps: Mutex::new(HashMap::new()), poll_started: AtomicBool::new(false) })
            })
            .clone()
    };
    host.sync(dev);
    if !host.poll_started.swap(true, Ordering::SeqCst) {
        let (weak_host, weak_dev) = (Arc::downgrade(&host), host.dev.clone());
        tokio::spawn(async move {
            // Screens change through taps, control ops and launches: notice new WebViews promptly.
            let mut t = tokio::time::interval(Duration::from_millis(50));
            loop {
                t.tick().await;
                let (Some(h), Some(d)) = (weak_host.upgrade(), weak_dev.upgrade()) else { return };
                h.sync(&d);
            }
        });
    }
}

/// Hook: an app process stopped (lifecycle; before /proc/net/unix is rewritten).
pub fn process_stopped(dev: &Device, package: &str) {
    let Some(host) = host_of(dev) else { return };
    let old = host.apps.lock().unwrap().remove(package);
    if let Some(old) = old {
        host.close_app(dev, old);
    }
}

/// Hook: simulator shutdown — the browser is killed now.
pub fn shutdown(dev: &Device) {
    let Some(host) = hosts().lock().unwrap().remove(&dev.root) else { return };
    for (_, a) in host.apps.lock().unwrap().drain() {
        for v in &a.views {
            v.page.send_replace(Page::Closed);
        }
    }
    if let Some(Ok(c)) = host.chrome.get() {
        c.kill();
    }
    host.h5.lock().unwrap().take();
}

fn entry(v: &View, current_screen: usize, fg: bool, epoch: &str) -> Value {
    let st = v.st.lock().unwrap();
    let on_screen = v.window.is_some() || v.screen.is_none_or(|s| s == current_screen);
    let visible = st.visible && on_screen;
    let window = match (&v.window, v.screen) {
        (Some(w), _) => w.clone(),
        (None, Some(s)) => s.to_string(),
        (None, None) => current_screen.to_string(),
    };
    json!({
        "webViewId": v.id,
        "adapter": v.adapter,
        "className": v.class_name,
        "url": st.url,
        "title": st.title,
        "progress": st.progress,
        "visible": visible,
        "foreground": visible && fg && v.window.is_none(),
        "windowId": uuid_from(&format!("{epoch}/window/{window}")),
        "bounds": st.bounds,
        "scale": st.scale,
        "transform": st.transform,
        "obscured": st.obscured,
    })
}

/// The WebViews of `package`'s running process: `{webViewId, adapter,
/// className, url, title, progress, visible, foreground, windowId, bounds,
/// scale, transform, obscured}`; url and title are the real page's.
/// `visible` = the view's visibility and it is on the app's current screen;
/// `foreground` = visible in the foreground app's activity window.
pub fn list(dev: &Device, package: &str) -> Vec<Value> {
    let Some(host) = host_of(dev) else { return vec![] };
    host.sync(dev);
    let (screen, fg) = {
        let ph = dev.phone.lock().unwrap();
        let Some(i) = ph.app_index(package) else { return vec![] };
        (ph.apps[i].screen, ph.foreground == Some(i))
    };
    let apps = host.apps.lock().unwrap();
    let Some(a) = apps.get(package) else { return vec![] };
    a.views.iter().map(|v| entry(v, screen, fg, &a.epoch)).collect()
}

/// Runtime.evaluate (returnByValue, awaitPromise) in the WebView's real page,
/// after its current document has loaded (or [`LOAD_WAIT`] passed).
pub async fn evaluate(dev: &Arc<Device>, package: &str, web_view_id: &str, expression: &str) -> Result<Value, String> {
    let host = host_of(dev).ok_or("this device has no WebViews")?;
    host.sync(dev);
    let view = host.find(package, web_view_id).ok_or_else(|| format!("no WebView {web_view_id:?} in a running {package}"))?;
    let session = view.session(OPEN_TIMEOUT).await?;
    let deadline = tokio::time::Instant::now() + LOAD_WAIT;
    while view.st.lock().unwrap().progress < 100 && tokio::time::Instant::now() < deadline && !view.closed() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let chrome = host.chrome().await?;
    let r = chrome.cdp.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }), Some(&session)).await.map_err(|e| e.to_string())?;
    aab_cdp::evaluate_value(&r)
}

fn err(code: &str, message: impl Into<String>) -> Value {
    json!({ "ok": false, "error": code, "message": message.into() })
}

/// Control ops: `webviews`, `webview-set`, `webview-eval`, `h5-requests`.
pub async fn control(dev: &Arc<Device>, req: &Value) -> Value {
    let op = req["op"].as_str().unwrap_or_default();
    let pkg = req["package"].as_str();
    let Some(host) = host_of(dev) else {
        return match op {
            "webviews" => json!({ "ok": true, "webViews": [] }),
            _ => err("no_webviews", "no app with WebViews has run on this device"),
        };
    };
    host.sync(dev);
    match op {
        "webviews" => {
            let browser_pid = host.chrome.get().and_then(|c| c.as_ref().ok()).map(|c| c.pid());
            let ph = dev.phone.lock().unwrap();
            let apps = host.apps.lock().unwrap();
            let mut out = vec![];
            for (package, a) in apps.iter().filter(|(p, _)| pkg.is_none_or(|x| x == p.as_str())) {
                let Some(i) = ph.app_index(package) else { continue };
                for v in &a.views {
                    let mut e = entry(v, ph.apps[i].screen, ph.foreground == Some(i), &a.epoch);
                    e["package"] = json!(package);
                    e["pid"] = json!(a.pid);
                    e["socket"] = json!(a.socket);
                    e["targetId"] = json!(v.target());
                    e["page"] = json!(match v.page() {
                        Page::Pending => "pending".to_string(),
                        Page::Open { .. } => "open".into(),
                        Page::Failed(e) => format!("failed: {e}"),
                        Page::Closed => "closed".into(),
                    });
                    out.push(e);
                }
            }
            let devtools_port = host.chrome.get().and_then(|c| c.as_ref().ok()).map(|c| c.port);
            json!({ "ok": true, "webViews": out, "browserPid": browser_pid, "devtoolsPort": devtools_port, "h5": host.h5().ok().map(|h| h.base()) })
        }
        "webview-set" | "webview-eval" => {
            let (Some(p), Some(id)) = (pkg, req["webViewId"].as_str()) else { return err("missing_argument", "package, webViewId") };
            let Some(view) = host.find(p, id) else { return err("not_found", format!("no WebView {id:?} in a running {p}")) };
            if op == "webview-eval" {
                let Some(expr) = req["expression"].as_str() else { return err("missing_argument", "expression") };
                return match evaluate(dev, p, id, expr).await {
                    Ok(v) => json!({ "ok": true, "value": v }),
                    Err(e) => err("eval_failed", e),
                };
            }
            set(dev, &host, &view, req).await
        }
        "h5-requests" => match host.h5() {
            Ok(h) => json!({ "ok": true, "base": h.base(), "requests": h.requests(req["since"].as_u64().unwrap_or(0)) }),
            Err(e) => err("h5_unavailable", e),
        },
        _ => err("unknown_op", op),
    }
}

async fn set(dev: &Arc<Device>, host: &Arc<Host>, view: &Arc<View>, req: &Value) -> Value {
    let mut viewport = false;
    {
        let mut st = view.st.lock().unwrap();
        if let Some(b) = req.get("visible").and_then(Value::as_bool) {
            st.visible = b;
        }
        if let Some(b) = req.get("bounds") {
            match serde_json::from_value::<[i32; 4]>(b.clone()) {
                Ok(b) if b[2] > b[0] && b[3] > b[1] => st.bounds = b,
                _ => return err("invalid_argument", "bounds must be [l,t,r,b] with r>l, b>t"),
            }
            viewport = true;
        }
        if let Some(s) = req.get("scale") {
            match s.as_f64() {
                Some(s) if s > 0.0 => st.scale = s,
                _ => return err("invalid_argument", "scale must be > 0"),
            }
            viewport = true;
        }
        if let Some(t) = req.get("transform") {
            st.transform = match t {
                Value::String(s) => s.clone(),
                Value::Null => "identity".into(),
                other => other.to_string(),
            };
        }
        if let Some(o) = req.get("obscured") {
            st.obscured = match serde_json::from_value::<Option<[i32; 4]>>(o.clone()) {
                Ok(o) => o,
                Err(_) => return err("invalid_argument", "obscured must be [l,t,r,b] or null"),
            };
        }
    }
    let url = match req.get("url").and_then(Value::as_str) {
        Some(u) => match host.h5() {
            Ok(h) => Some(h.resolve(u)),
            Err(_) => Some(u.to_string()),
        },
        None => None,
    };
    if viewport || url.is_some() {
        let session = match view.session(OPEN_TIMEOUT).await {
            Ok(s) => s,
            Err(e) => return err("no_page", e),
        };
        let chrome = match host.chrome().await {
            Ok(c) => c,
            Err(e) => return err("no_browser", e),
        };
        if viewport && let Err(e) = chrome.apply_viewport(&session, view).await {
            return err("cdp_failed", e.to_string());
        }
        if let Some(u) = url {
            view.st.lock().unwrap().url = u.clone();
            if let Err(e) = chrome.navigate(&session, &u).await {
                return err("navigate_failed", e.to_string());
            }
        }
    }
    let entries = list(dev, &view.package);
    json!({ "ok": true, "webView": entries.into_iter().find(|e| e["webViewId"] == json!(view.id)) })
}
