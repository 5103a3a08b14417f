//! The one interface both engines implement: run a renderer script in the page,
//! navigate, screenshot, deliver real input (click at a point or on an element
//! reference, type, press a key, wheel), probe liveness and close. Each engine
//! reports failures in one taxonomy ([`EngineError`]) that keeps what matters for
//! dispatch facts: whether the request can have reached the browser.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::args::EngineKind;
use super::cdp::CdpPage;
use super::webdriver::WdPage;

/// Why an engine call gave no value.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineError {
    /// Nothing reached the browser: nothing happened.
    NotSent(String),
    /// The request was (or may have been) sent and no complete reply came.
    Lost(String),
    /// The browser, its node or the remote session is gone. `sent`: the request
    /// may have reached it before it went.
    Gone { message: String, sent: bool },
    /// The engine answered with an error (W3C error code or CDP protocol error).
    Refused { error: String, message: String },
    /// The endpoint cannot run scripts in this session (e.g. an Appium driver).
    ScriptUnsupported(String),
    /// The script threw.
    Script(String),
    /// A reply outgrew its cap, or had a shape the engine cannot read.
    BadReply(String),
}

impl EngineError {
    pub fn message(&self) -> String {
        match self {
            EngineError::NotSent(m) | EngineError::Lost(m) | EngineError::ScriptUnsupported(m) | EngineError::Script(m) | EngineError::BadReply(m) => m.clone(),
            EngineError::Gone { message, .. } => message.clone(),
            EngineError::Refused { error, message } => format!("{error}: {message}"),
        }
    }

    /// Whether an input command that failed this way may still have acted on the
    /// page. A complete refusal says it did not — CDP's errors, and WebDriver's
    /// checks that run before any input ([`REFUSED_BEFORE_INPUT`]); anything else
    /// the remote end answered (`unknown error` from a Grid whose node died
    /// mid-command, a script fault) leaves the outcome open.
    pub fn effect_may_have_acted(&self) -> bool {
        match self {
            EngineError::NotSent(_) => false,
            EngineError::Gone { sent, .. } => *sent,
            EngineError::Lost(_) => true,
            EngineError::Refused { error, .. } => !(error.starts_with("cdp_") || REFUSED_BEFORE_INPUT.contains(&error.as_str())),
            EngineError::ScriptUnsupported(_) => false,
            EngineError::Script(_) | EngineError::BadReply(_) => true,
        }
    }

    /// Whether the request can have reached the browser (a failure after the
    /// dispatch mark is then ambiguous).
    pub fn may_have_reached(&self) -> bool {
        match self {
            EngineError::NotSent(_) => false,
            EngineError::Gone { sent, .. } => *sent,
            EngineError::Lost(_) => true,
            // A complete reply: the engine says what happened.
            EngineError::Refused { .. } | EngineError::ScriptUnsupported(_) | EngineError::Script(_) | EngineError::BadReply(_) => false,
        }
    }
}

/// W3C errors a remote end reports before it dispatches an element command's
/// input (the command did not act).
pub const REFUSED_BEFORE_INPUT: [&str; 8] =
    ["no such element", "stale element reference", "element not interactable", "element click intercepted", "invalid element state", "invalid argument", "no such window", "move target out of bounds"];

/// What `arm` prepared for the engine's input: where to point, and (WebDriver)
/// the element reference the renderer returned.
#[derive(Clone, Debug, Default)]
pub struct Armed {
    pub x: f64,
    pub y: f64,
    pub element_ref: Option<Value>,
}

/// One key: its W3C/DOM name, DOM code, Windows virtual key code, the text it
/// types, and its WebDriver code point.
#[derive(Clone, Copy, Debug)]
pub struct KeyDef {
    pub key: &'static str,
    pub code: &'static str,
    pub vk: u32,
    pub text: Option<&'static str>,
    pub webdriver: &'static str,
}

pub fn key_def(name: &str) -> Option<KeyDef> {
    let k = |key, code, vk, text, webdriver| Some(KeyDef { key, code, vk, text, webdriver });
    match name {
        "Enter" => k("Enter", "Enter", 13, Some("\r"), "\u{E007}"),
        "Escape" => k("Escape", "Escape", 27, None, "\u{E00C}"),
        "Tab" => k("Tab", "Tab", 9, None, "\u{E004}"),
        "Backspace" => k("Backspace", "Backspace", 8, None, "\u{E003}"),
        "Delete" => k("Delete", "Delete", 46, None, "\u{E017}"),
        "Space" => k(" ", "Space", 32, Some(" "), " "),
        "ArrowUp" => k("ArrowUp", "ArrowUp", 38, None, "\u{E013}"),
        "ArrowDown" => k("ArrowDown", "ArrowDown", 40, None, "\u{E015}"),
        "ArrowLeft" => k("ArrowLeft", "ArrowLeft", 37, None, "\u{E012}"),
        "ArrowRight" => k("ArrowRight", "ArrowRight", 39, None, "\u{E014}"),
        "Home" => k("Home", "Home", 36, None, "\u{E011}"),
        "End" => k("End", "End", 35, None, "\u{E010}"),
        "PageUp" => k("PageUp", "PageUp", 33, None, "\u{E00E}"),
        "PageDown" => k("PageDown", "PageDown", 34, None, "\u{E00F}"),
        "Insert" => k("Insert", "Insert", 45, None, "\u{E016}"),
        _ => None,
    }
}

/// The engine of one session.
#[derive(Clone)]
pub enum Engine {
    Cdp(Arc<CdpPage>),
    WebDriver(Arc<WdPage>),
}

/// What a navigation reported.
#[derive(Clone, Debug, Default)]
pub struct Navigated {
    /// The new document finished loading within the budget.
    pub loaded: bool,
}

impl Engine {
    pub fn kind(&self) -> EngineKind {
        match self {
            Engine::Cdp(_) => EngineKind::Cdp,
            Engine::WebDriver(_) => EngineKind::Webdriver,
        }
    }

    /// Run `function(request) {…}` source `call` with `request` in the page's main
    /// world; `None` when the script says the renderer is absent.
    pub async fn call(&self, function: &str, request: &Value, budget: Duration) -> Result<Value, EngineError> {
        match self {
            Engine::Cdp(p) => p.call(function, request, budget).await,
            Engine::WebDriver(p) => p.call(function, request, budget).await,
        }
    }

    /// Evaluate a whole script (the SDK file) in the page's main world.
    pub async fn inject(&self, source: &str, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.inject(source, budget).await,
            Engine::WebDriver(p) => p.inject(source, budget).await,
        }
    }

    pub async fn navigate(&self, url: &str, budget: Duration) -> Result<Navigated, EngineError> {
        match self {
            Engine::Cdp(p) => p.navigate(url, budget).await,
            Engine::WebDriver(p) => p.navigate(url, budget).await,
        }
    }

    pub async fn screenshot(&self, budget: Duration) -> Result<Vec<u8>, EngineError> {
        match self {
            Engine::Cdp(p) => p.screenshot(budget).await,
            Engine::WebDriver(p) => p.screenshot(budget).await,
        }
    }

    pub async fn click(&self, armed: &Armed, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.click(armed, budget).await,
            Engine::WebDriver(p) => p.click(armed, budget).await,
        }
    }

    /// Replace the (selected) content of the armed element by typing `text`;
    /// empty text clears it.
    pub async fn type_text(&self, armed: &Armed, text: &str, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.type_text(text, budget).await,
            Engine::WebDriver(p) => p.type_text(armed, text, budget).await,
        }
    }

    pub async fn key(&self, key: &KeyDef, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.key(key, budget).await,
            Engine::WebDriver(p) => p.key(key, budget).await,
        }
    }

    pub async fn wheel(&self, armed: &Armed, dx: f64, dy: f64, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.wheel(armed, dx, dy, budget).await,
            Engine::WebDriver(p) => p.wheel(armed, dx, dy, budget).await,
        }
    }

    /// A delivery the engine learnt of by itself (CDP's binding), by action id.
    pub fn delivery(&self, action_id: &str) -> Option<Value> {
        match self {
            Engine::Cdp(p) => p.delivery(action_id),
            Engine::WebDriver(_) => None,
        }
    }

    /// The page's URL, proving the session still answers.
    pub async fn probe(&self, budget: Duration) -> Result<String, EngineError> {
        match self {
            Engine::Cdp(p) => p.probe(budget).await,
            Engine::WebDriver(p) => p.probe(budget).await,
        }
    }

    /// End the session (WebDriver DELETE; CDP: the browser is killed).
    pub async fn close(&self, budget: Duration) -> Result<(), EngineError> {
        match self {
            Engine::Cdp(p) => p.close(budget).await,
            Engine::WebDriver(p) => p.close(budget).await,
        }
    }

    /// Engine specifics for status replies.
    pub fn describe(&self) -> Value {
        match self {
            Engine::Cdp(p) => p.describe(),
            Engine::WebDriver(p) => p.describe(),
        }
    }
}
