//! The `cdp` engine: one local headless Chromium per session (`aab-cdp`'s
//! `Browser`: own process group, fresh profile, killed with its owner), one
//! browser-level DevTools connection with the session's page attached (flattened
//! session). Scripts run in the page's main world (`Runtime.evaluate`); input is
//! real browser input (`Input.dispatchMouseEvent`, `Input.insertText`,
//! `Input.dispatchKeyEvent`), so the page sees trusted events. A binding
//! (`Runtime.addBinding`) lets the renderer's delivery listener report to this
//! process directly; an event task records those reports and notices a crashed or
//! detached page.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aab_cdp::{Browser, Cdp, CdpError};
use base64::Engine as _;
use serde_json::{Value, json};

use super::args::Viewport;
use super::engine::{Armed, EngineError, KeyDef, Navigated};

/// The binding the renderer's delivery listener calls (`EXEC_BINDING` in the SDK).
pub const BINDING: &str = "__aabWebExecutorDelivered";
/// Deliveries remembered per session.
const MAX_DELIVERIES: usize = 64;
/// How long one DevTools call may take at most (each is bounded by the caller's budget too).
const MAX_CALL: Duration = Duration::from_secs(30);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Deliveries {
    by_action: HashMap<String, Value>,
    order: VecDeque<String>,
}

pub struct CdpPage {
    /// Taken (and the browser killed) on close.
    browser: Mutex<Option<Browser>>,
    cdp: Cdp,
    session: String,
    target_id: String,
    frame_id: String,
    pid: u32,
    port: u16,
    executable: String,
    product: String,
    deliveries: Arc<Mutex<Deliveries>>,
    /// The page crashed or detached, or the connection closed.
    gone: Arc<AtomicBool>,
    events: tokio::task::JoinHandle<()>,
}

impl Drop for CdpPage {
    fn drop(&mut self) {
        self.events.abort();
        drop(lock(&self.browser).take());
    }
}

fn cdp_error(e: CdpError, sent: bool) -> EngineError {
    match e {
        CdpError::Connect { message, .. } => EngineError::NotSent(message),
        CdpError::Timeout { method, timeout } => EngineError::Lost(format!("{method}: no DevTools reply within {timeout:?}")),
        CdpError::Closed { method } => EngineError::Gone { message: format!("{method}: the browser's DevTools connection closed (the browser exited)"), sent },
        CdpError::Protocol { method, code, message } => EngineError::Refused { error: format!("cdp_{}", code.unsigned_abs()), message: format!("{method}: {message}") },
        CdpError::Launch(m) => EngineError::NotSent(m),
    }
}

/// The Chromium executable `cdp` would use, if any.
pub fn chromium() -> Option<std::path::PathBuf> {
    aab_cdp::find_chromium()
}

impl CdpPage {
    /// Start a browser and attach to its page. The launch runs on the plugin
    /// runtime's worker thread: the browser's parent-death signal follows the
    /// thread that spawned it, and a host call thread may end before the session.
    pub async fn launch(viewport: Option<Viewport>, budget: Duration) -> Result<CdpPage, EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        let executable = chromium().map(|p| p.display().to_string()).unwrap_or_default();
        let launching = tokio::spawn(async { Browser::launch().await });
        let browser = match tokio::time::timeout(left(), launching).await {
            // The task finishes on its own and drops (kills) the browser it started.
            Err(_) => return Err(EngineError::NotSent(format!("Chromium did not start within {budget:?}"))),
            Ok(Err(e)) => return Err(EngineError::NotSent(format!("the launch task failed: {e}"))),
            Ok(Ok(Err(e))) => return Err(cdp_error(e, false)),
            Ok(Ok(Ok(b))) => b,
        };
        let cdp = Cdp::connect_with_timeout(&browser.ws_url(), left().min(MAX_CALL)).await.map_err(|e| cdp_error(e, false))?;
        let call = |method: &'static str, params: Value, session: Option<String>| {
            let cdp = &cdp;
            let timeout = left().min(MAX_CALL);
            async move { cdp.call_with_timeout(method, params, session.as_deref(), timeout).await.map_err(|e| cdp_error(e, false)) }
        };
        let targets = call("Target.getTargets", json!({}), None).await?;
        let target_id = match targets["targetInfos"].as_array().and_then(|l| l.iter().find(|t| t["type"] == "page")).and_then(|t| t["targetId"].as_str()) {
            Some(id) => id.to_string(),
            None => call("Target.createTarget", json!({"url": "about:blank"}), None).await?["targetId"].as_str().unwrap_or_default().to_string(),
        };
        // Subscribe before attaching, so no event of the session is missed.
        let mut stream = cdp.events();
        let attached = call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).await?;
        let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
        if session.is_empty() {
            return Err(EngineError::BadReply("Target.attachToTarget returned no sessionId".into()));
        }
        let deliveries = Arc::new(Mutex::new(Deliveries::default()));
        let gone = Arc::new(AtomicBool::new(false));
        let events = {
            let (deliveries, gone, session) = (deliveries.clone(), gone.clone(), session.clone());
            tokio::spawn(async move {
                while let Some(ev) = stream.next().await {
                    let ours = ev.session_id.as_deref() == Some(session.as_str());
                    match ev.method.as_str() {
                        "Runtime.bindingCalled" if ours && ev.params["name"] == BINDING => {
                            let Some(payload) = ev.params["payload"].as_str().and_then(|p| serde_json::from_str::<Value>(p).ok()) else { continue };
                            let Some(id) = payload["actionId"].as_str().map(str::to_string) else { continue };
                            let mut d = lock(&deliveries);
                            if !d.by_action.contains_key(&id) {
                                d.order.push_back(id.clone());
                            }
                            d.by_action.insert(id, payload);
                            while d.order.len() > MAX_DELIVERIES {
                                if let Some(old) = d.order.pop_front() {
                                    d.by_action.remove(&old);
                                }
                            }
                        }
                        "Inspector.targetCrashed" if ours => gone.store(true, Ordering::SeqCst),
                        "Target.detachedFromTarget" if ev.params["sessionId"].as_str() == Some(session.as_str()) => gone.store(true, Ordering::SeqCst),
                        _ => {}
                    }
                }
                gone.store(true, Ordering::SeqCst);
            })
        };
        let s = Some(session.clone());
        call("Page.enable", json!({}), s.clone()).await?;
        call("Runtime.enable", json!({}), s.clone()).await?;
        call("Page.setLifecycleEventsEnabled", json!({"enabled": true}), s.clone()).await?;
        call("Runtime.addBinding", json!({"name": BINDING}), s.clone()).await?;
        if let Some(v) = viewport {
            call("Emulation.setDeviceMetricsOverride", json!({"width": v.width, "height": v.height, "deviceScaleFactor": 1, "mobile": false}), s.clone()).await?;
        }
        let tree = call("Page.getFrameTree", json!({}), s.clone()).await?;
        let frame_id = tree.pointer("/frameTree/frame/id").and_then(Value::as_str).unwrap_or(&target_id).to_string();
        let version = call("Browser.getVersion", json!({}), None).await?;
        let product = version["product"].as_str().unwrap_or_default().to_string();
        let (pid, port) = (browser.pid(), browser.port());
        Ok(CdpPage { browser: Mutex::new(Some(browser)), cdp, session, target_id, frame_id, pid, port, executable, product, deliveries, gone, events })
    }

    /// Start, identify and close a browser: what `prepare` checks.
    pub async fn check(budget: Duration) -> Result<Value, EngineError> {
        let page = CdpPage::launch(None, budget).await?;
        let v = json!({"executable": page.executable, "product": page.product, "pid": page.pid});
        page.close(Duration::from_secs(2)).await?;
        Ok(v)
    }

    fn alive(&self) -> Result<(), EngineError> {
        if self.gone.load(Ordering::SeqCst) || !self.cdp.is_open() {
            return Err(EngineError::Gone { message: "the browser page is gone (crashed, closed or the browser exited)".into(), sent: false });
        }
        Ok(())
    }

    async fn page_call(&self, method: &str, params: Value, budget: Duration) -> Result<Value, EngineError> {
        self.alive()?;
        self.cdp.call_with_timeout(method, params, Some(&self.session), budget.min(MAX_CALL)).await.map_err(|e| cdp_error(e, true))
    }

    async fn evaluate(&self, expression: &str, budget: Duration) -> Result<Value, EngineError> {
        let r = self.page_call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": false}), budget).await?;
        aab_cdp::evaluate_value(&r).map_err(EngineError::Script)
    }

    pub async fn call(&self, function: &str, request: &Value, budget: Duration) -> Result<Value, EngineError> {
        self.evaluate(&format!("({function})({request})"), budget).await
    }

    pub async fn inject(&self, source: &str, budget: Duration) -> Result<(), EngineError> {
        self.evaluate(&format!("{source}\n;true"), budget).await.map(drop)
    }

    pub async fn navigate(&self, url: &str, budget: Duration) -> Result<Navigated, EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut events = self.cdp.events();
        let r = self.page_call("Page.navigate", json!({"url": url}), budget).await?;
        if let Some(text) = r["errorText"].as_str().filter(|t| !t.is_empty()) {
            return Err(EngineError::Refused { error: "navigation_failed".into(), message: text.to_string() });
        }
        let Some(loader) = r["loaderId"].as_str().map(str::to_string) else {
            // A same-document navigation (fragment): nothing to load.
            return Ok(Navigated { loaded: true });
        };
        let loaded = tokio::time::timeout_at(deadline, async {
            while let Some(ev) = events.next().await {
                if ev.session_id.as_deref() == Some(self.session.as_str()) && ev.method == "Page.lifecycleEvent" && ev.params["loaderId"] == loader.as_str() && ev.params["name"] == "load" {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        Ok(Navigated { loaded })
    }

    pub async fn screenshot(&self, budget: Duration) -> Result<Vec<u8>, EngineError> {
        let r = self.page_call("Page.captureScreenshot", json!({"format": "png"}), budget).await?;
        let data = r["data"].as_str().ok_or_else(|| EngineError::BadReply("Page.captureScreenshot returned no data".into()))?;
        base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| EngineError::BadReply(format!("the screenshot is not base64: {e}")))
    }

    async fn input(&self, method: &str, params: Value, deadline: tokio::time::Instant) -> Result<(), EngineError> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.page_call(method, params, left).await.map(drop)
    }

    pub async fn click(&self, armed: &Armed, budget: Duration) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let (x, y) = (armed.x, armed.y);
        self.input("Input.dispatchMouseEvent", json!({"type": "mouseMoved", "x": x, "y": y, "button": "none"}), deadline).await?;
        self.input("Input.dispatchMouseEvent", json!({"type": "mousePressed", "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1}), deadline).await?;
        self.input("Input.dispatchMouseEvent", json!({"type": "mouseReleased", "x": x, "y": y, "button": "left", "buttons": 0, "clickCount": 1}), deadline).await
    }

    /// The renderer focused the element and selected its content: typing
    /// replaces the selection; an empty text deletes it.
    pub async fn type_text(&self, text: &str, budget: Duration) -> Result<(), EngineError> {
        if text.is_empty() {
            let backspace = super::engine::key_def("Backspace").expect("Backspace is a known key");
            return self.key(&backspace, budget).await;
        }
        let deadline = tokio::time::Instant::now() + budget;
        self.input("Input.insertText", json!({"text": text}), deadline).await
    }

    pub async fn key(&self, key: &KeyDef, budget: Duration) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut down = json!({"type": if key.text.is_some() { "keyDown" } else { "rawKeyDown" }, "key": key.key, "code": key.code,
                              "windowsVirtualKeyCode": key.vk, "nativeVirtualKeyCode": key.vk});
        if let Some(t) = key.text {
            down["text"] = json!(t);
            down["unmodifiedText"] = json!(t);
        }
        self.input("Input.dispatchKeyEvent", down, deadline).await?;
        self.input("Input.dispatchKeyEvent", json!({"type": "keyUp", "key": key.key, "code": key.code, "windowsVirtualKeyCode": key.vk, "nativeVirtualKeyCode": key.vk}), deadline).await
    }

    pub async fn wheel(&self, armed: &Armed, dx: f64, dy: f64, budget: Duration) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        self.input("Input.dispatchMouseEvent", json!({"type": "mouseWheel", "x": armed.x, "y": armed.y, "deltaX": dx, "deltaY": dy}), deadline).await
    }

    pub fn delivery(&self, action_id: &str) -> Option<Value> {
        lock(&self.deliveries).by_action.get(action_id).cloned()
    }

    pub async fn probe(&self, budget: Duration) -> Result<String, EngineError> {
        self.alive()?;
        let r = self.cdp.call_with_timeout("Target.getTargetInfo", json!({"targetId": self.target_id}), None, budget.min(MAX_CALL)).await.map_err(|e| cdp_error(e, true))?;
        Ok(r.pointer("/targetInfo/url").and_then(Value::as_str).unwrap_or_default().to_string())
    }

    /// Ask the browser to close, then kill its process group whatever it answered.
    pub async fn close(&self, budget: Duration) -> Result<(), EngineError> {
        if self.cdp.is_open() {
            let _ = self.cdp.call_with_timeout("Browser.close", json!({}), None, budget.min(Duration::from_secs(2))).await;
        }
        self.gone.store(true, Ordering::SeqCst);
        drop(lock(&self.browser).take());
        Ok(())
    }

    /// Whether the browser process still runs (false after close).
    pub fn running(&self) -> bool {
        lock(&self.browser).as_mut().is_some_and(Browser::is_running)
    }

    pub fn describe(&self) -> Value {
        json!({"pid": self.pid, "devtoolsPort": self.port, "executable": self.executable, "product": self.product,
               "targetId": self.target_id, "engineFrameId": self.frame_id, "running": self.running()})
    }
}
