//! One connection to the prepared Runner of one device (protocols §5.2–5.3):
//! select the device with devicectl, require its developer tunnel (unless an
//! explicit `wdaUrl` names a forward), copy and parse the Runner descriptor, and
//! send every request with the identity headers, a body cap and a timeout inside
//! the command deadline. Reads fail `dispatched:false`; the action POST is
//! classified by [`super::execution::classify`] because it may have had an effect.

use std::time::Duration;

use serde_json::{Value, json};

use super::codes::*;
use super::descriptor::{self, Descriptor};
use super::execution::{self, ActionReply, Found};
use super::{EXECUTION_SCHEMA, identity};
use crate::http::{self, Failure, FailureKind};
use crate::ids::query_value;
use crate::{Deadline, DeviceRecord, Devicectl, ProviderError, base_url, require_developer_tunnel, select_device};

pub use super::identity::Target;

/// Cap of one ordinary read (short: the action has its own, longer wait).
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest read reply (a JSON source tree of a busy screen is the big one).
pub const MAX_READ_BODY: usize = http::DEFAULT_MAX_BODY;
/// Largest action, cancel or result reply (results are ≤64 KiB, pages ≤2 MiB).
pub const MAX_EXECUTION_BODY: usize = 4 * 1024 * 1024;
/// How many result pages one lookup reads before giving up (64 records each).
const MAX_RESULT_PAGES: usize = 64;

/// A verified way to the Runner: the device it runs on, its identity, its URL.
#[derive(Clone, Debug)]
pub struct Connection {
    pub device: DeviceRecord,
    pub descriptor: Descriptor,
    /// `http://<tunnel>:<port>` or the explicit `wdaUrl` (no trailing slash).
    pub url: String,
    /// Whether `url` came from an explicit `wdaUrl`.
    pub explicit_url: bool,
}

/// Select `device_id` and open its Runner `runner_bundle_id` (see [`open`]).
pub async fn connect(devicectl: &Devicectl, device_id: &str, runner_bundle_id: &str, wda_url: Option<&str>, deadline: Deadline) -> Result<Connection, ProviderError> {
    // Bad input is refused before any device access.
    wda_url.map(explicit).transpose()?;
    let devices = devicectl.list_devices(crate::devicectl::step(deadline, 30)).await?;
    let device = select_device(&devices, device_id)?;
    open(devicectl, device, runner_bundle_id, wda_url, deadline).await
}

/// The Runner on an already selected device: the tunnel (without `wda_url`), the
/// descriptor copied from its container now, the URL.
pub async fn open(devicectl: &Devicectl, device: DeviceRecord, runner_bundle_id: &str, wda_url: Option<&str>, deadline: Deadline) -> Result<Connection, ProviderError> {
    let tunnel = match wda_url {
        Some(_) => None,
        None => Some(require_developer_tunnel(&device)?),
    };
    let descriptor = descriptor::read(devicectl, &device.identifier, runner_bundle_id, crate::devicectl::step(deadline, 5)).await?;
    let (url, explicit_url) = match (wda_url, tunnel) {
        (Some(u), _) => (explicit(u)?, true),
        (None, Some(ip)) => (base_url(&ip, descriptor.port), false),
        (None, None) => unreachable!("a tunnel is required without wdaUrl"),
    };
    Ok(Connection { device, descriptor, url, explicit_url })
}

/// An explicit `wdaUrl`: plain `http://host[:port][/base]`, kept without a trailing slash.
fn explicit(u: &str) -> Result<String, ProviderError> {
    let ok = u.strip_prefix("http://").is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/') && !rest.chars().any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#'));
    if !ok {
        return Err(ProviderError::new(crate::codes::IOS_URL_UNSUPPORTED, format!("wdaUrl must be http://host[:port][/path] (no query; this build has no TLS), not {u:?}")).with_field("wdaUrl").not_dispatched());
    }
    Ok(u.trim_end_matches('/').to_string())
}

fn step(deadline: Deadline, cap: Duration) -> Duration {
    deadline.remaining().min(cap).max(Duration::from_millis(1))
}

/// A read's transport failure (never an effect).
fn read_failure(f: Failure, what: &str) -> ProviderError {
    let code = match f.kind {
        FailureKind::NotSent => IOS_WDA_UNREACHABLE,
        FailureKind::Lost => IOS_WDA_REPLY_LOST,
        FailureKind::TooLarge => IOS_WDA_RESPONSE_TOO_LARGE,
        FailureKind::NotJson => IOS_WDA_PROTOCOL_ERROR,
    };
    ProviderError::new(code, format!("{what}: {}", f.message)).with_details(json!({"httpStatus": f.status})).not_dispatched()
}

/// `/aab/status` must be ok and advertise `aab.wda-execution/v1`.
pub fn check_status(v: &Value) -> Result<(), ProviderError> {
    if v.get("executionSchema").and_then(Value::as_str) != Some(EXECUTION_SCHEMA) || v.get("ok") != Some(&Value::Bool(true)) {
        return Err(ProviderError::new(IOS_WDA_EXECUTION_UNAVAILABLE, format!("the Runner does not advertise {EXECUTION_SCHEMA}: it is not the prepared WebDriverAgent (run ios-setup)"))
            .with_details(json!({"status": v}))
            .not_dispatched());
    }
    Ok(())
}

impl Connection {
    fn url_of(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The public facts of this connection (for replies and records).
    pub fn facts(&self) -> Value {
        json!({
            "device": {"identifier": self.device.identifier, "udid": self.device.udid, "name": self.device.name},
            "runner": {"bundleId": self.descriptor.bundle_id, "runtimeEpoch": self.descriptor.runtime_epoch, "processId": self.descriptor.process_id, "port": self.descriptor.port},
            "wdaUrl": self.url, "explicitWdaUrl": self.explicit_url,
        })
    }

    /// One read request (GET, or a POST that only reads such as W3C find elements):
    /// the believed `value`; every failure is `dispatched:false`.
    pub async fn read(&self, method: &str, path: &str, target: Option<&Target>, body: Option<&Value>, deadline: Deadline) -> Result<Value, ProviderError> {
        let headers = identity::headers(&self.descriptor, target);
        let what = format!("WDA {method} {path}");
        let reply = http::request(method, &self.url_of(path), &headers, body, MAX_READ_BODY, step(deadline, READ_TIMEOUT)).await.map_err(|f| read_failure(f, &what))?;
        identity::value_of(&self.descriptor, reply.status, &reply.body).map_err(|e| e.not_dispatched())
    }

    pub async fn get(&self, path: &str, target: Option<&Target>, deadline: Deadline) -> Result<Value, ProviderError> {
        self.read("GET", path, target, None, deadline).await
    }

    /// `GET /aab/status`: the preflight every WDA command starts with. The Runner
    /// must be a prepared one (`executionSchema` `aab.wda-execution/v1`): an
    /// unmodified WDA is refused here, before anything is sent to it.
    pub async fn status(&self, deadline: Deadline) -> Result<Value, ProviderError> {
        let v = self.get("/aab/status", None, deadline).await?;
        check_status(&v)?;
        Ok(v)
    }

    /// `GET /aab/session`: the foreground App and the bound session.
    pub async fn session(&self, deadline: Deadline) -> Result<Value, ProviderError> {
        self.get("/aab/session", None, deadline).await
    }

    /// `POST /aab/action` once, waiting at most `wait`, classified (never resent).
    pub async fn action(&self, body: &Value, target: Option<&Target>, action_id: &str, wait: Duration) -> ActionReply {
        let headers = identity::headers(&self.descriptor, target);
        let reply = http::request("POST", &self.url_of("/aab/action"), &headers, Some(body), MAX_EXECUTION_BODY, wait.max(Duration::from_millis(1))).await;
        execution::classify(&self.descriptor, action_id, &self.descriptor.runtime_epoch, reply)
    }

    /// One page of `GET /aab/execution/result` for an action of the Runner epoch
    /// `runtime_epoch` (not necessarily the serving one: the store outlives it).
    pub async fn result_page(&self, action_id: &str, runtime_epoch: &str, cursor: Option<&str>, deadline: Deadline) -> Result<Value, ProviderError> {
        let mut path = format!("/aab/execution/result?actionId={}&runtimeEpoch={}", query_value(action_id), query_value(runtime_epoch));
        if let Some(c) = cursor {
            path.push_str(&format!("&cursor={}", query_value(c)));
        }
        let headers = identity::headers(&self.descriptor, None);
        let reply = http::request("GET", &self.url_of(&path), &headers, None, MAX_EXECUTION_BODY, step(deadline, READ_TIMEOUT)).await.map_err(|f| read_failure(f, "WDA GET /aab/execution/result"))?;
        identity::value_of(&self.descriptor, reply.status, &reply.body).map_err(|e| e.not_dispatched())
    }

    /// Page through the durable store until the completion of exactly this action
    /// is found (`Some`) or the store has no more records (`None`).
    pub async fn find_result(&self, action_id: &str, runtime_epoch: &str, deadline: Deadline) -> Result<Option<Found>, ProviderError> {
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_RESULT_PAGES {
            let page = self.result_page(action_id, runtime_epoch, cursor.as_deref(), deadline).await?;
            match execution::parse_page(&page, action_id, runtime_epoch, &self.descriptor.bundle_id)? {
                execution::Page::Found(found) => return Ok(Some(found)),
                execution::Page::More(next) => {
                    if cursor.as_deref() == Some(next.as_str()) {
                        return Err(ProviderError::new(IOS_WDA_COMPLETION_CURSOR_STALLED, "the Runner's result cursor did not advance").with_details(json!({"cursor": next})).not_dispatched());
                    }
                    cursor = Some(next);
                }
                execution::Page::End => return Ok(None),
            }
            if deadline.is_past() {
                break;
            }
        }
        Err(ProviderError::new(IOS_WDA_COMPLETION_CURSOR_STALLED, "the Runner's completion store did not end within the lookup's page budget or deadline").not_dispatched())
    }

    /// `POST /aab/execution/cancel {actionId, runtimeEpoch}`: stops queued work and
    /// later steps; never a settlement by itself (see [`execution::settle`]).
    pub async fn cancel(&self, action_id: &str, runtime_epoch: &str, deadline: Deadline) -> Result<Value, ProviderError> {
        let headers = identity::headers(&self.descriptor, None);
        let body = json!({"actionId": action_id, "runtimeEpoch": runtime_epoch});
        let reply = http::request("POST", &self.url_of("/aab/execution/cancel"), &headers, Some(&body), MAX_EXECUTION_BODY, step(deadline, READ_TIMEOUT))
            .await
            .map_err(|f| read_failure(f, "WDA POST /aab/execution/cancel"))?;
        identity::value_of(&self.descriptor, reply.status, &reply.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_urls_are_plain_http_without_query() {
        assert_eq!(explicit("http://127.0.0.1:8100/").unwrap(), "http://127.0.0.1:8100");
        assert_eq!(explicit("http://[::1]:8100/wda").unwrap(), "http://[::1]:8100/wda");
        for bad in ["https://h:1", "http://", "http:///x", "http://h:1/?a=1", "http://h 1", "ftp://h"] {
            assert_eq!(explicit(bad).unwrap_err().error, crate::codes::IOS_URL_UNSUPPORTED, "{bad}");
        }
    }

    #[tokio::test]
    async fn a_bad_wda_url_is_refused_before_devicectl_runs() {
        // A devicectl that cannot even start would fail with its own code: the URL is checked first.
        let devicectl = Devicectl::resolve(Some("/nonexistent/devicectl"));
        let e = connect(&devicectl, "phone", "r.xctrunner", Some("http:///no-host"), Deadline::after(Duration::from_secs(5))).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (crate::codes::IOS_URL_UNSUPPORTED, Some("wdaUrl"), Some(false)));
        let e = connect(&devicectl, "phone", "r.xctrunner", Some("http://127.0.0.1:8100"), Deadline::after(Duration::from_secs(5))).await.unwrap_err();
        assert_eq!(e.error, crate::codes::IOS_DEVICECTL_UNAVAILABLE, "a good URL goes on to the device");
    }

    #[test]
    fn an_unprepared_runner_is_refused_at_the_preflight() {
        assert!(check_status(&json!({"ok": true, "executionSchema": EXECUTION_SCHEMA, "ready": true})).is_ok());
        // Upstream WDA's /status-like answer: no managed execution.
        let e = check_status(&json!({"ready": true, "message": "WebDriverAgent is ready to accept commands"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (IOS_WDA_EXECUTION_UNAVAILABLE, Some(false)));
        assert!(check_status(&json!({"ok": false, "executionSchema": EXECUTION_SCHEMA})).is_err());
    }
}
