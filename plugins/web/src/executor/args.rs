//! The typed arguments of `web-executor`, one struct per operation, mirroring the
//! `oneOf` variants of [`super::schema`]. The host validated the call against
//! that schema; these types only give the fields names (a disagreement between
//! the two is a provider bug: `plugin_arguments_mismatch`).

use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize, Debug)]
#[serde(tag = "operation", rename_all = "lowercase")]
pub enum ExecutorArgs {
    Status(StatusArgs),
    Prepare(PrepareArgs),
    Open(OpenArgs),
    Observe(ObserveArgs),
    Act(ActArgs),
    Navigate(NavigateArgs),
    Wait(WaitArgs),
    Screenshot(ScreenshotArgs),
    Events(EventsArgs),
    Receipt(ReceiptArgs),
    Close(CloseArgs),
}

impl ExecutorArgs {
    pub fn operation(&self) -> &'static str {
        match self {
            ExecutorArgs::Status(_) => "status",
            ExecutorArgs::Prepare(_) => "prepare",
            ExecutorArgs::Open(_) => "open",
            ExecutorArgs::Observe(_) => "observe",
            ExecutorArgs::Act(_) => "act",
            ExecutorArgs::Navigate(_) => "navigate",
            ExecutorArgs::Wait(_) => "wait",
            ExecutorArgs::Screenshot(_) => "screenshot",
            ExecutorArgs::Events(_) => "events",
            ExecutorArgs::Receipt(_) => "receipt",
            ExecutorArgs::Close(_) => "close",
        }
    }
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Cdp,
    Webdriver,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Cdp => "cdp",
            EngineKind::Webdriver => "webdriver",
        }
    }

    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "cdp" => Some(EngineKind::Cdp),
            "webdriver" => Some(EngineKind::Webdriver),
            _ => None,
        }
    }
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BrowserKind {
    Chromium,
    Firefox,
    Webkit,
}

impl BrowserKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BrowserKind::Chromium => "chromium",
            BrowserKind::Firefox => "firefox",
            BrowserKind::Webkit => "webkit",
        }
    }
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusArgs {
    pub session_id: Option<String>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PrepareArgs {
    pub engine: Option<EngineKind>,
    pub endpoint: Option<String>,
    pub browser: Option<BrowserKind>,
    pub capabilities: Option<Map<String, Value>>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenArgs {
    pub session_id: Option<String>,
    pub engine: Option<EngineKind>,
    pub endpoint: Option<String>,
    pub browser: Option<BrowserKind>,
    pub url: Option<String>,
    pub headless: Option<bool>,
    pub viewport: Option<Viewport>,
    pub lease_ms: Option<u64>,
    pub capabilities: Option<Map<String, Value>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObserveArgs {
    pub session_id: String,
    pub frame_id: Option<String>,
    pub max_controls: Option<u64>,
    pub include_body_text: Option<bool>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum SelectorBy {
    ElementId,
    Text,
    AriaLabel,
    Css,
}

impl SelectorBy {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectorBy::ElementId => "elementId",
            SelectorBy::Text => "text",
            SelectorBy::AriaLabel => "ariaLabel",
            SelectorBy::Css => "css",
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    pub by: SelectorBy,
    pub value: String,
    pub name: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ActionType {
    Click,
    Input,
    Key,
    Scroll,
}

impl ActionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Click => "click",
            ActionType::Input => "input",
            ActionType::Key => "key",
            ActionType::Scroll => "scroll",
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Action {
    #[serde(rename = "type")]
    pub kind: ActionType,
    pub text: Option<String>,
    pub key: Option<String>,
    pub delta_x: Option<f64>,
    pub delta_y: Option<f64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActArgs {
    pub session_id: String,
    pub action: Action,
    pub selector: Option<Selector>,
    pub snapshot_id: Option<String>,
    pub document_id: Option<String>,
    pub frame_id: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NavigateArgs {
    pub session_id: String,
    pub url: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WaitArgs {
    pub session_id: String,
    pub selector: Option<Selector>,
    pub text: Option<String>,
    pub frame_id: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScreenshotArgs {
    pub session_id: String,
    pub out_file: Option<String>,
    pub artifact_dir: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventsArgs {
    pub session_id: String,
    pub after_sequence: Option<u64>,
    pub limit: Option<u64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReceiptArgs {
    pub session_id: String,
    pub action_id: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloseArgs {
    pub session_id: String,
}
