//! A W3C WebDriver client over plain HTTP/1.1: the endpoint, the session
//! commands aab's executors need, and one failure taxonomy that tells a caller
//! whether the remote end may have acted (`WdError::ambiguous`).
//!
//! Rules every call follows: it takes the caller's remaining budget and never
//! outlives it; it is sent at most once (no retries, no redirects, no proxies
//! from the environment); every reply body is read in chunks up to a cap; every
//! request carries `Content-Type: application/json; charset=utf-8` (Selenium
//! Grid refuses a bare `application/json`).
//!
//! Behind the `servers` feature, [`servers`] starts real chromedriver, Selenium
//! Grid 4 and Appium 3 processes for tests and benches.

mod error;
mod transport;

#[cfg(feature = "servers")]
pub mod servers;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

pub use error::WdError;
use transport::Transport;

/// Reply cap for every command but screenshots.
pub const DEFAULT_BODY_LIMIT: usize = 8 * 1024 * 1024;
/// Reply cap for screenshots (base64 of a large PNG).
pub const SCREENSHOT_BODY_LIMIT: usize = 64 * 1024 * 1024;

/// The W3C key under which an element reference travels.
pub const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A parsed `http://` base URL, e.g. `http://127.0.0.1:4444` or
/// `http://127.0.0.1:4444/wd/hub`, kept without a trailing slash so command
/// paths append to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    base: String,
}

impl Endpoint {
    /// Accepts `http://host[:port][/prefix]` only: no TLS stack is built, and a
    /// query, fragment or credentials would silently change every command URL.
    pub fn parse(url: &str) -> Result<Endpoint, WdError> {
        let invalid = |why: &str| WdError::InvalidEndpoint(format!("{url:?}: {why}"));
        let parsed = reqwest::Url::parse(url.trim()).map_err(|e| invalid(&e.to_string()))?;
        if parsed.scheme() != "http" {
            return Err(invalid("only http:// endpoints are supported"));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host"));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid("a query or fragment is not allowed"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(invalid("credentials in the URL are not supported"));
        }
        let mut base = parsed.as_str().to_string();
        while base.ends_with('/') {
            base.pop();
        }
        Ok(Endpoint { base })
    }

    pub fn as_str(&self) -> &str {
        &self.base
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

/// One HTTP client bound to one endpoint; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    transport: Arc<Transport>,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Client {
        Client {
            transport: Arc::new(Transport::new(endpoint)),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.transport.endpoint
    }

    /// `GET /status` → its `value` (`ready`, `message`, Grid's `nodes`…).
    pub async fn status(&self, budget: Duration) -> Result<Value, WdError> {
        self.transport
            .call(Method::GET, "/status", None, DEFAULT_BODY_LIMIT, budget)
            .await
    }

    /// `POST /session` with `{"capabilities":{"alwaysMatch":capabilities}}`.
    /// A `Lost` here may have left a session behind on the remote end.
    pub async fn new_session(
        &self,
        capabilities: Value,
        budget: Duration,
    ) -> Result<Session, WdError> {
        let body = json!({ "capabilities": { "alwaysMatch": capabilities } });
        let value = self
            .transport
            .call(
                Method::POST,
                "/session",
                Some(&body),
                DEFAULT_BODY_LIMIT,
                budget,
            )
            .await?;
        let Some(id) = value
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
        else {
            return Err(WdError::NotJson {
                status: 200,
                message: "new session reply has no sessionId".into(),
            });
        };
        let capabilities = value.get("capabilities").cloned().unwrap_or(Value::Null);
        Ok(self.session(id, capabilities))
    }

    /// A handle on an existing session (e.g. after our own restart); sends nothing.
    pub fn attach(&self, session_id: &str) -> Session {
        self.session(session_id, Value::Null)
    }

    fn session(&self, id: &str, capabilities: Value) -> Session {
        Session {
            transport: self.transport.clone(),
            id: Arc::from(id),
            prefix: Arc::from(format!("/session/{}", transport::segment(id))),
            capabilities: Arc::new(capabilities),
        }
    }
}

/// One remote session; clones address the same session.
#[derive(Clone)]
pub struct Session {
    transport: Arc<Transport>,
    id: Arc<str>,
    /// `/session/{percent-encoded id}`.
    prefix: Arc<str>,
    capabilities: Arc<Value>,
}

/// A W3C element id as the remote end issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementRef(pub String);

impl ElementRef {
    /// Reads `{"element-6066-11e4-a52e-4f735466cecf": id}` (or the legacy
    /// `{"ELEMENT": id}` some Appium drivers still add).
    pub fn from_value(value: &Value) -> Option<ElementRef> {
        [ELEMENT_KEY, "ELEMENT"]
            .iter()
            .find_map(|key| value.get(*key).and_then(Value::as_str))
            .filter(|id| !id.is_empty())
            .map(|id| ElementRef(id.to_string()))
    }

    /// The reference as a script argument or frame id.
    pub fn to_value(&self) -> Value {
        json!({ ELEMENT_KEY: self.0 })
    }
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The capabilities the remote end matched; `Null` after [`Client::attach`].
    pub fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    async fn command(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        budget: Duration,
    ) -> Result<Value, WdError> {
        let path = format!("{}{path}", self.prefix);
        self.transport
            .call(method, &path, body, DEFAULT_BODY_LIMIT, budget)
            .await
    }

    fn element_path(el: &ElementRef, tail: &str) -> String {
        format!("/element/{}{tail}", transport::segment(&el.0))
    }

    pub async fn navigate(&self, url: &str, budget: Duration) -> Result<(), WdError> {
        self.command(Method::POST, "/url", Some(&json!({ "url": url })), budget)
            .await
            .map(drop)
    }

    pub async fn url(&self, budget: Duration) -> Result<String, WdError> {
        string_value(
            self.command(Method::GET, "/url", None, budget).await?,
            "url",
        )
    }

    pub async fn title(&self, budget: Duration) -> Result<String, WdError> {
        string_value(
            self.command(Method::GET, "/title", None, budget).await?,
            "title",
        )
    }

    /// `POST execute/sync`: the script's return value.
    pub async fn execute(
        &self,
        script: &str,
        args: Vec<Value>,
        budget: Duration,
    ) -> Result<Value, WdError> {
        self.command(
            Method::POST,
            "/execute/sync",
            Some(&json!({ "script": script, "args": args })),
            budget,
        )
        .await
    }

    /// The first element matching a CSS selector.
    pub async fn find_element(&self, css: &str, budget: Duration) -> Result<ElementRef, WdError> {
        self.find_element_using("css selector", css, budget).await
    }

    /// The first element by any locator strategy the remote end knows
    /// (`xpath`, `id`, `accessibility id` on Appium…).
    pub async fn find_element_using(
        &self,
        using: &str,
        selector: &str,
        budget: Duration,
    ) -> Result<ElementRef, WdError> {
        let value = self
            .command(
                Method::POST,
                "/element",
                Some(&json!({ "using": using, "value": selector })),
                budget,
            )
            .await?;
        ElementRef::from_value(&value).ok_or_else(|| WdError::NotJson {
            status: 200,
            message: format!(
                "find element reply holds no element reference: {}",
                transport::snippet(value.to_string().as_bytes())
            ),
        })
    }

    pub async fn click(&self, el: &ElementRef, budget: Duration) -> Result<(), WdError> {
        self.command(
            Method::POST,
            &Self::element_path(el, "/click"),
            Some(&json!({})),
            budget,
        )
        .await
        .map(drop)
    }

    pub async fn clear(&self, el: &ElementRef, budget: Duration) -> Result<(), WdError> {
        self.command(
            Method::POST,
            &Self::element_path(el, "/clear"),
            Some(&json!({})),
            budget,
        )
        .await
        .map(drop)
    }

    pub async fn send_keys(
        &self,
        el: &ElementRef,
        text: &str,
        budget: Duration,
    ) -> Result<(), WdError> {
        self.command(
            Method::POST,
            &Self::element_path(el, "/value"),
            Some(&json!({ "text": text })),
            budget,
        )
        .await
        .map(drop)
    }

    /// The element's rendered text.
    pub async fn element_text(&self, el: &ElementRef, budget: Duration) -> Result<String, WdError> {
        string_value(
            self.command(Method::GET, &Self::element_path(el, "/text"), None, budget)
                .await?,
            "element text",
        )
    }

    /// An element attribute; `None` when the remote end reports `null`.
    pub async fn element_attribute(
        &self,
        el: &ElementRef,
        name: &str,
        budget: Duration,
    ) -> Result<Option<String>, WdError> {
        let path = Self::element_path(el, &format!("/attribute/{}", transport::segment(name)));
        match self.command(Method::GET, &path, None, budget).await? {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            other => Ok(Some(other.to_string())),
        }
    }

    /// `POST actions`. Takes either the `actions` array itself or the whole
    /// `{"actions": [...]}` body.
    pub async fn perform_actions(&self, actions: Value, budget: Duration) -> Result<(), WdError> {
        let body = if actions.is_array() {
            json!({ "actions": actions })
        } else {
            actions
        };
        self.command(Method::POST, "/actions", Some(&body), budget)
            .await
            .map(drop)
    }

    /// The page (or app) source.
    pub async fn source(&self, budget: Duration) -> Result<String, WdError> {
        string_value(
            self.command(Method::GET, "/source", None, budget).await?,
            "source",
        )
    }

    /// The viewport screenshot as decoded PNG bytes.
    pub async fn screenshot(&self, budget: Duration) -> Result<Vec<u8>, WdError> {
        let path = format!("{}/screenshot", self.prefix);
        let value = self
            .transport
            .call(Method::GET, &path, None, SCREENSHOT_BODY_LIMIT, budget)
            .await?;
        let encoded = string_value(value, "screenshot")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| WdError::NotJson {
                status: 200,
                message: format!("screenshot is not base64: {e}"),
            })?;
        if !png.starts_with(b"\x89PNG\r\n\x1a\n") {
            return Err(WdError::NotJson {
                status: 200,
                message: "screenshot is not a PNG".into(),
            });
        }
        Ok(png)
    }

    pub async fn set_window_rect(
        &self,
        width: u32,
        height: u32,
        budget: Duration,
    ) -> Result<(), WdError> {
        self.command(
            Method::POST,
            "/window/rect",
            Some(&json!({ "width": width, "height": height })),
            budget,
        )
        .await
        .map(drop)
    }

    /// `POST frame` with `{"id": frame}`: `null` (top level), an index, or an
    /// element reference ([`ElementRef::to_value`]).
    pub async fn switch_to_frame(&self, frame: Value, budget: Duration) -> Result<(), WdError> {
        self.command(
            Method::POST,
            "/frame",
            Some(&json!({ "id": frame })),
            budget,
        )
        .await
        .map(drop)
    }

    /// `DELETE /session/{id}`: ends the session (the browser quits).
    pub async fn delete(&self, budget: Duration) -> Result<(), WdError> {
        self.command(Method::DELETE, "", None, budget)
            .await
            .map(drop)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.transport.endpoint.as_str())
            .finish()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("endpoint", &self.transport.endpoint.as_str())
            .field("id", &&*self.id)
            .finish()
    }
}

fn string_value(value: Value, what: &str) -> Result<String, WdError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(WdError::NotJson {
            status: 200,
            message: format!(
                "{what} is not a string: {}",
                transport::snippet(other.to_string().as_bytes())
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_keeps_prefix_and_drops_trailing_slash() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:4444/").unwrap().as_str(),
            "http://127.0.0.1:4444"
        );
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:4444/wd/hub/")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:4444/wd/hub"
        );
        for bad in [
            "https://127.0.0.1:4444",
            "127.0.0.1:4444",
            "http://",
            "http://h/?q=1",
            "http://u:p@h/",
            "file:///x",
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert_eq!(err.code(), "webdriver_invalid_endpoint", "{bad}");
            assert!(!err.ambiguous());
        }
    }

    #[test]
    fn element_ref_reads_w3c_and_legacy_keys() {
        assert_eq!(
            ElementRef::from_value(&json!({ ELEMENT_KEY: "a" })),
            Some(ElementRef("a".into()))
        );
        assert_eq!(
            ElementRef::from_value(&json!({ "ELEMENT": "b" })),
            Some(ElementRef("b".into()))
        );
        assert_eq!(ElementRef::from_value(&json!({ "x": "c" })), None);
        assert_eq!(
            ElementRef::from_value(&ElementRef("d".into()).to_value()),
            Some(ElementRef("d".into()))
        );
    }

    #[test]
    fn session_paths_escape_ids() {
        let client = Client::new(Endpoint::parse("http://127.0.0.1:1/wd/hub").unwrap());
        let session = client.attach("a/b c");
        assert_eq!(&*session.prefix, "/session/a%2Fb%20c");
        assert_eq!(session.capabilities(), &Value::Null);
        assert_eq!(
            Session::element_path(&ElementRef("e?1".into()), "/click"),
            "/element/e%3F1/click"
        );
    }
}
