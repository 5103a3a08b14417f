//! The device's headless Chromium: launched on first need, one browser-level
//! CDP connection (flattened sessions), one browser context per app process,
//! one page per WebView (viewport = the WebView's bounds in CSS px at its
//! scale, an Android WebView user agent). An event task keeps each WebView's
//! url, title and load progress from the real page.

use std::sync::{Arc, Mutex, Weak};

use aab_cdp::{Browser, Cdp, CdpError};
use serde_json::{Value, json};

use super::{Host, View};

pub struct Chrome {
    /// Taken (and the browser killed) at shutdown.
    browser: Mutex<Option<Browser>>,
    pub cdp: Cdp,
    pub port: u16,
    pid: u32,
}

impl Chrome {
    pub async fn launch(host: Weak<Host>) -> Result<Arc<Chrome>, String> {
        let browser = Browser::launch().await.map_err(|e| e.to_string())?;
        let cdp = browser.connect().await.map_err(|e| e.to_string())?;
        let (port, pid) = (browser.port(), browser.pid());
        let mut events = cdp.events();
        let chrome = Arc::new(Chrome { browser: Mutex::new(Some(browser)), cdp, port, pid });
        tokio::spawn(async move {
            while let Some(ev) = events.next().await {
                let Some(host) = host.upgrade() else { return };
                host.on_event(&ev.method, &ev.params, ev.session_id.as_deref());
            }
        });
        chrome.cdp.call("Target.setDiscoverTargets", json!({ "discover": true }), None).await.map_err(|e| e.to_string())?;
        Ok(chrome)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills the browser now (sim shutdown).
    pub fn kill(&self) {
        drop(self.browser.lock().unwrap().take());
    }

    pub async fn create_context(&self) -> Result<String, CdpError> {
        let r = self.cdp.call("Target.createBrowserContext", json!({}), None).await?;
        Ok(r["browserContextId"].as_str().unwrap_or_default().to_string())
    }

    pub async fn dispose_context(&self, id: &str) {
        let _ = self.cdp.call("Target.disposeBrowserContext", json!({ "browserContextId": id }), None).await;
    }

    /// A new page in `context`, attached, with lifecycle events on and the
    /// WebView's viewport applied; returns (targetId, sessionId). Navigation is separate.
    pub async fn open_page(&self, context: &str, view: &View) -> Result<(String, String), CdpError> {
        let t = self.cdp.call("Target.createTarget", json!({ "url": "about:blank", "browserContextId": context }), None).await?;
        let target = t["targetId"].as_str().unwrap_or_default().to_string();
        let a = self.cdp.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true }), None).await?;
        let session = a["sessionId"].as_str().unwrap_or_default().to_string();
        self.cdp.call("Page.enable", json!({}), Some(&session)).await?;
        self.cdp.call("Page.setLifecycleEventsEnabled", json!({ "enabled": true }), Some(&session)).await?;
        let ua = "Mozilla/5.0 (Linux; Android 14; AAB Sim Phone; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/120.0.0.0 Mobile Safari/537.36";
        self.cdp.call("Emulation.setUserAgentOverride", json!({ "userAgent": ua }), Some(&session)).await?;
        self.apply_viewport(&session, view).await?;
        Ok((target, session))
    }

    /// The WebView's size in CSS px at its scale (device px per CSS px).
    pub async fn apply_viewport(&self, session: &str, view: &View) -> Result<Value, CdpError> {
        let (bounds, scale) = {
            let st = view.st.lock().unwrap();
            (st.bounds, st.scale)
        };
        let w = (((bounds[2] - bounds[0]).max(1) as f64) / scale).round().max(1.0);
        let h = (((bounds[3] - bounds[1]).max(1) as f64) / scale).round().max(1.0);
        self.cdp
            .call("Emulation.setDeviceMetricsOverride", json!({ "width": w as i64, "height": h as i64, "deviceScaleFactor": scale, "mobile": true }), Some(session))
            .await
    }

    pub async fn navigate(&self, session: &str, url: &str) -> Result<Value, CdpError> {
        let r = self.cdp.call("Page.navigate", json!({ "url": url }), Some(session)).await?;
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            return Err(CdpError::Protocol { method: "Page.navigate".into(), code: 0, message: e.to_string() });
        }
        Ok(r)
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        self.kill();
    }
}
