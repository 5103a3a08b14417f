//! The `webdriver` engine: one W3C WebDriver session per executor session, on any
//! endpoint (`aab-webdriver`: chromedriver, a Selenium Grid 4 router, Appium).
//! Scripts run through `execute/sync` in the page's main world; the renderer
//! returns the bound DOM element itself, which WebDriver turns into an element
//! reference for its own input commands (element click, clear + send keys,
//! actions). Also here: what an endpoint offers (its `/status`), the capability
//! set a browser needs, and what a refused new session means.

use std::time::Duration;

use aab_webdriver::{Client, ElementRef, Endpoint, Session, WdError};
use serde_json::{Map, Value, json};

use super::args::{BrowserKind, Viewport};
use super::engine::{Armed, EngineError, KeyDef, Navigated};

/// Chromium switches every WebDriver-driven Chromium gets (the set verified with
/// Debian's chromedriver; a node running as root needs --no-sandbox).
pub const CHROMIUM_ARGS: [&str; 7] =
    ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

pub fn wd_error(e: WdError) -> EngineError {
    match e {
        WdError::InvalidEndpoint(m) => EngineError::NotSent(m),
        WdError::NotSent { message } => EngineError::NotSent(message),
        WdError::Lost { message } => EngineError::Lost(message),
        WdError::Protocol { error, message, .. } if error == "invalid session id" => EngineError::Gone { message: format!("{error}: {message}"), sent: false },
        // A Grid router whose node went away answers for the session it can no
        // longer reach; the command may have run on the node before it died.
        WdError::Protocol { error, message, .. } if error == "unknown error" && node_unreachable(&message) => EngineError::Gone { message: format!("the session's node is unreachable: {message}"), sent: true },
        WdError::Protocol { error, message, .. } if error == "javascript error" => EngineError::Script(message),
        WdError::Protocol { error, message, .. } => EngineError::Refused { error, message },
        e @ (WdError::TooLarge { .. } | WdError::NotJson { .. }) => EngineError::BadReply(e.to_string()),
    }
}

/// Whether a Grid's `unknown error` says the session's node cannot be reached.
fn node_unreachable(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("existing session") && (m.contains("refused") || m.contains("connect") || m.contains("closed") || m.contains("reset") || m.contains("unreachable") || m.contains("eof"))
}

/// A script command the endpoint does not implement in this session.
fn script_error(e: WdError) -> EngineError {
    match wd_error(e) {
        EngineError::Refused { error, message } if matches!(error.as_str(), "unknown command" | "unknown method" | "unsupported operation" | "no such context") => {
            EngineError::ScriptUnsupported(format!("{error}: {message}"))
        }
        other => other,
    }
}

/// Browsers an endpoint says it offers.
#[derive(Clone, Debug, PartialEq)]
pub enum Offered {
    /// A Grid's node stereotypes, or chromedriver's single browser: W3C `browserName`s.
    Known(Vec<String>),
    /// The endpoint does not say (geckodriver, Appium, …).
    Unknown,
}

pub fn offered(status: &Value) -> Offered {
    if let Some(nodes) = status.get("nodes").and_then(Value::as_array) {
        let mut names: Vec<String> = Vec::new();
        for node in nodes.iter().filter(|n| n.get("availability").and_then(Value::as_str).is_none_or(|a| a == "UP")) {
            for slot in node.get("slots").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                if let Some(name) = slot.pointer("/stereotype/browserName").and_then(Value::as_str).filter(|n| !n.is_empty())
                    && !names.iter().any(|n| n == name)
                {
                    names.push(name.to_string());
                }
            }
        }
        return Offered::Known(names);
    }
    if status.get("message").and_then(Value::as_str).is_some_and(|m| m.contains("ChromeDriver")) {
        return Offered::Known(vec!["chrome".into()]);
    }
    Offered::Unknown
}

/// The executor's browser for a W3C browserName.
pub fn browser_of(name: &str) -> Option<BrowserKind> {
    match name.to_ascii_lowercase().as_str() {
        "chrome" | "chromium" | "chrome-headless-shell" => Some(BrowserKind::Chromium),
        "firefox" => Some(BrowserKind::Firefox),
        "safari" | "minibrowser" | "webkit" | "wpewebkit" => Some(BrowserKind::Webkit),
        _ => None,
    }
}

impl Offered {
    /// Whether `browser` is offered: `Some(name)` = the browserName to ask for,
    /// `None` = not offered; unknown endpoints get the usual name.
    pub fn name_for(&self, browser: BrowserKind) -> Option<String> {
        match self {
            Offered::Known(names) => names.iter().find(|n| browser_of(n) == Some(browser)).cloned(),
            Offered::Unknown => Some(default_name(browser).to_string()),
        }
    }

    pub fn browsers(&self) -> Option<Vec<&'static str>> {
        match self {
            Offered::Known(names) => {
                let mut out: Vec<&'static str> = names.iter().filter_map(|n| browser_of(n)).map(BrowserKind::as_str).collect();
                out.dedup();
                Some(out)
            }
            Offered::Unknown => None,
        }
    }
}

fn default_name(browser: BrowserKind) -> &'static str {
    match browser {
        BrowserKind::Chromium => "chrome",
        BrowserKind::Firefox => "firefox",
        BrowserKind::Webkit => "MiniBrowser",
    }
}

/// Merge `extra` over `base`: objects one level deep, `args` arrays appended.
fn merge(base: &mut Map<String, Value>, extra: &Map<String, Value>) {
    for (k, v) in extra {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(e)) => {
                for (ik, iv) in e {
                    match (b.get_mut(ik), iv) {
                        (Some(Value::Array(ba)), Value::Array(ea)) if ik == "args" => ba.extend(ea.iter().cloned()),
                        _ => {
                            b.insert(ik.clone(), iv.clone());
                        }
                    }
                }
            }
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The `alwaysMatch` capabilities of a new session. `browser_name` None = a
/// non-browser session (the caller's capabilities say what, e.g. Appium).
pub fn capabilities(browser: Option<(BrowserKind, &str)>, headless: bool, viewport: Option<Viewport>, extra: Option<&Map<String, Value>>) -> Value {
    let mut caps = Map::new();
    if let Some((kind, name)) = browser {
        caps.insert("browserName".into(), json!(name));
        match kind {
            BrowserKind::Chromium => {
                let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|s| s.to_string()).collect();
                if headless {
                    args.insert(0, "--headless=new".into());
                }
                if let Some(v) = viewport {
                    args.push(format!("--window-size={},{}", v.width, v.height));
                }
                caps.insert("goog:chromeOptions".into(), json!({"args": args}));
            }
            BrowserKind::Firefox => {
                let mut args: Vec<&str> = Vec::new();
                if headless {
                    args.push("-headless");
                }
                caps.insert("moz:firefoxOptions".into(), json!({"args": args}));
            }
            BrowserKind::Webkit => {}
        }
    }
    if let Some(extra) = extra {
        merge(&mut caps, extra);
    }
    Value::Object(caps)
}

/// What a refused `POST /session` means for the caller.
pub fn new_session_refusal(error: &str, message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if error == "session not created" {
        if m.contains("timed out") || m.contains("timeout") || m.contains("queue") || m.contains("no slot") || m.contains("capacity") || m.contains("busy") {
            return "web_executor_capacity_unavailable";
        }
        if m.contains("no nodes support")
            || m.contains("unable to find")
            || m.contains("cannot find")
            || m.contains("no such file")
            || m.contains("binary")
            || m.contains("not supported")
            || m.contains("could not find")
        {
            return "web_executor_browser_unavailable";
        }
        return "web_executor_session_not_created";
    }
    if error == "invalid argument" {
        return "web_executor_capabilities_invalid";
    }
    "web_executor_session_not_created"
}

pub fn endpoint(url: &str) -> Result<Endpoint, WdError> {
    Endpoint::parse(url)
}

pub struct WdPage {
    client: Client,
    session: Session,
    capabilities: Value,
}

impl WdPage {
    pub fn new(client: Client, session: Session) -> WdPage {
        let capabilities = session.capabilities().clone();
        WdPage { client, session, capabilities }
    }

    pub fn session_id(&self) -> &str {
        self.session.id()
    }

    pub fn endpoint(&self) -> &str {
        self.client.endpoint().as_str()
    }

    pub fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    pub async fn call(&self, function: &str, request: &Value, budget: Duration) -> Result<Value, EngineError> {
        // Wrapped: a script value with a top-level `error` member (every renderer
        // refusal has one) would otherwise read as a W3C error reply.
        let script = format!("return {{ aabTurn: ({function})(arguments[0]) }};");
        let mut v = self.session.execute(&script, vec![request.clone()], budget).await.map_err(script_error)?;
        match v.get_mut("aabTurn") {
            Some(turn) => Ok(turn.take()),
            None => Err(EngineError::BadReply(format!("the script's reply lost its wrapper: {}", v.to_string().chars().take(200).collect::<String>()))),
        }
    }

    pub async fn inject(&self, source: &str, budget: Duration) -> Result<(), EngineError> {
        self.session.execute(&format!("{source}\n;return true;"), Vec::new(), budget).await.map(drop).map_err(script_error)
    }

    /// Make the layout viewport `viewport`: set the window, measure what the
    /// browser's frame takes, set it again with that added.
    pub async fn fit_viewport(&self, viewport: Viewport, budget: Duration) -> Result<Value, EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
        self.session.set_window_rect(viewport.width, viewport.height, left()).await.map_err(wd_error)?;
        let measure = "return [window.innerWidth, window.innerHeight, window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight];";
        let m = self.session.execute(measure, Vec::new(), left()).await.map_err(script_error)?;
        let n = |i: usize| m.get(i).and_then(Value::as_f64).unwrap_or(0.0).max(0.0) as u32;
        if (n(0), n(1)) != (viewport.width, viewport.height) {
            self.session.set_window_rect(viewport.width + n(2), viewport.height + n(3), left()).await.map_err(wd_error)?;
        }
        let m = self.session.execute("return {width: window.innerWidth, height: window.innerHeight};", Vec::new(), left()).await.map_err(script_error)?;
        Ok(m)
    }

    pub async fn navigate(&self, url: &str, budget: Duration) -> Result<Navigated, EngineError> {
        match self.session.navigate(url, budget).await {
            Ok(()) => Ok(Navigated { loaded: true }),
            // The page-load timeout: the navigation started, the load did not finish.
            Err(WdError::Protocol { error, .. }) if error == "timeout" => Ok(Navigated { loaded: false }),
            Err(e) => Err(match wd_error(e) {
                EngineError::Refused { message, .. } if message.contains("net::ERR_") => EngineError::Refused { error: "navigation_failed".into(), message },
                other => other,
            }),
        }
    }

    pub async fn screenshot(&self, budget: Duration) -> Result<Vec<u8>, EngineError> {
        self.session.screenshot(budget).await.map_err(wd_error)
    }

    fn element(armed: &Armed) -> Result<ElementRef, EngineError> {
        armed.element_ref.as_ref().and_then(ElementRef::from_value).ok_or_else(|| EngineError::BadReply("the renderer returned no element reference".into()))
    }

    pub async fn click(&self, armed: &Armed, budget: Duration) -> Result<(), EngineError> {
        let el = Self::element(armed)?;
        self.session.click(&el, budget).await.map_err(wd_error)
    }

    pub async fn type_text(&self, armed: &Armed, text: &str, budget: Duration) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + budget;
        let el = Self::element(armed)?;
        self.session.clear(&el, budget).await.map_err(wd_error)?;
        if text.is_empty() {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // After the clear an effect has happened: a failure now is never "did not act".
        self.session.send_keys(&el, text, left).await.map_err(|e| match wd_error(e) {
            EngineError::NotSent(m) => EngineError::Lost(format!("the content was cleared, then typing was not sent: {m}")),
            EngineError::Refused { error, message } => EngineError::Refused { error: format!("after clear: {error}"), message },
            other => other,
        })
    }

    pub async fn key(&self, key: &KeyDef, budget: Duration) -> Result<(), EngineError> {
        let actions = json!([{"type": "key", "id": "aab-keyboard", "actions": [{"type": "keyDown", "value": key.webdriver}, {"type": "keyUp", "value": key.webdriver}]}]);
        self.session.perform_actions(actions, budget).await.map_err(wd_error)
    }

    pub async fn wheel(&self, armed: &Armed, dx: f64, dy: f64, budget: Duration) -> Result<(), EngineError> {
        let (origin, x, y) = match &armed.element_ref {
            Some(el) => (el.clone(), 0, 0),
            None => (json!("viewport"), armed.x.round() as i64, armed.y.round() as i64),
        };
        let actions = json!([{"type": "wheel", "id": "aab-wheel", "actions": [{"type": "scroll", "x": x, "y": y, "deltaX": dx.round() as i64, "deltaY": dy.round() as i64, "origin": origin}]}]);
        self.session.perform_actions(actions, budget).await.map_err(wd_error)
    }

    /// WebDriver's own element lookup (sessions without page scripts, e.g.
    /// Appium): the element reference as the endpoint issued it.
    pub async fn find(&self, using: &str, value: &str, budget: Duration) -> Result<Value, EngineError> {
        self.session.find_element_using(using, value, budget).await.map(|e| e.to_value()).map_err(wd_error)
    }

    /// The page (or app) source.
    pub async fn source(&self, budget: Duration) -> Result<String, EngineError> {
        self.session.source(budget).await.map_err(wd_error)
    }

    pub async fn probe(&self, budget: Duration) -> Result<String, EngineError> {
        self.session.url(budget).await.map_err(wd_error)
    }

    pub async fn close(&self, budget: Duration) -> Result<(), EngineError> {
        self.session.delete(budget).await.map_err(wd_error)
    }

    pub fn describe(&self) -> Value {
        let c = &self.capabilities;
        json!({"endpoint": self.endpoint(), "webdriverSessionId": self.session_id(), "browserName": c.get("browserName"),
               "browserVersion": c.get("browserVersion"), "platformName": c.get("platformName")})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_come_from_grid_stereotypes_or_chromedriver() {
        let grid = json!({"ready": true, "nodes": [
            {"availability": "UP", "slots": [{"stereotype": {"browserName": "chrome"}}, {"stereotype": {"browserName": "chrome"}}]},
            {"availability": "DOWN", "slots": [{"stereotype": {"browserName": "firefox"}}]},
            {"availability": "UP", "slots": [{"stereotype": {"platformName": "Fake", "appium:automationName": "Fake"}}]}
        ]});
        let o = offered(&grid);
        assert_eq!(o, Offered::Known(vec!["chrome".into()]));
        assert_eq!(o.name_for(BrowserKind::Chromium).as_deref(), Some("chrome"));
        assert_eq!(o.name_for(BrowserKind::Firefox), None, "a DOWN node offers nothing");
        assert_eq!(o.browsers(), Some(vec!["chromium"]));
        let cd = json!({"ready": true, "message": "ChromeDriver ready for new sessions.", "build": {"version": "156"}});
        assert_eq!(offered(&cd), Offered::Known(vec!["chrome".into()]));
        let gecko = json!({"ready": true, "message": ""});
        assert_eq!(offered(&gecko), Offered::Unknown);
        assert_eq!(Offered::Unknown.name_for(BrowserKind::Firefox).as_deref(), Some("firefox"));
        assert_eq!(offered(&json!({"nodes": []})).name_for(BrowserKind::Chromium), None, "an empty grid offers nothing");
    }

    #[test]
    fn capabilities_merge_the_callers_over_the_engines() {
        let extra: Map<String, Value> = serde_json::from_value(json!({"goog:chromeOptions": {"args": ["--lang=de"], "prefs": {"a": 1}}, "se:name": "t"})).unwrap();
        let c = capabilities(Some((BrowserKind::Chromium, "chrome")), true, Some(Viewport { width: 800, height: 600 }), Some(&extra));
        let args: Vec<&str> = c["goog:chromeOptions"]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(args[0], "--headless=new");
        assert!(args.contains(&"--window-size=800,600") && args.contains(&"--lang=de") && args.contains(&"--no-sandbox"), "{args:?}");
        assert_eq!(c["goog:chromeOptions"]["prefs"], json!({"a": 1}));
        assert_eq!(c["se:name"], "t");
        let headed = capabilities(Some((BrowserKind::Chromium, "chrome")), false, None, None);
        assert!(!headed.to_string().contains("--headless"));
        let appium: Map<String, Value> = serde_json::from_value(json!({"platformName": "Fake", "appium:automationName": "Fake"})).unwrap();
        assert_eq!(capabilities(None, true, None, Some(&appium)), json!({"platformName": "Fake", "appium:automationName": "Fake"}));
        assert_eq!(capabilities(Some((BrowserKind::Firefox, "firefox")), true, None, None)["moz:firefoxOptions"]["args"], json!(["-headless"]));
    }

    #[test]
    fn refused_new_sessions_name_the_reason() {
        assert_eq!(new_session_refusal("session not created", "Could not start a new session. New session request timed out"), "web_executor_capacity_unavailable");
        assert_eq!(new_session_refusal("session not created", "Could not start a new session. No nodes support the capabilities in the request"), "web_executor_browser_unavailable");
        assert_eq!(new_session_refusal("session not created", "session not created: Chrome failed to start: exited normally"), "web_executor_session_not_created");
        assert_eq!(new_session_refusal("invalid argument", "cannot parse capability"), "web_executor_capabilities_invalid");
    }
}
