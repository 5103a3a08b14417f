//! The app SDK peer (aab-protocols §4.1, §4.3–4.5, §4.8): what both iOS plugins
//! need to talk to an app's aab SDK listener without believing the wrong process.
//!
//! - The container descriptor `Documents/ai_app_bridge_port.json`
//!   (`aab.ios-runtime/v1`): parsed under the host limits (≤4096 bytes, bundle id
//!   `[A-Za-z0-9_.-]{1,255}`, epoch `[A-Za-z0-9_-]{1,128}`, port 1..65535 when
//!   ready), every failure with its contract code and never dispatched.
//! - The runtime [`Identity`] the descriptor names: the five `X-AAB-*` request
//!   headers and the `runtimeBinding` every response body must repeat. A body
//!   whose binding differs, is malformed, or whose `ok` is not a boolean is
//!   refused before anything in it is believed.
//! - One verified exchange with the listener ([`exchange`], [`read`]): bounded
//!   body (8 MiB), a per-request timeout (5000 ms by default) inside the command
//!   deadline, the transport failure classified by whether the request can have
//!   reached the app.
//! - Managed execution (`aab.h5-execution/v1`, `aab.flutter-execution/v1`): the
//!   exact 4-key `execution` object, the pre-admission rejection shape, settled
//!   receipts of exactly one action, the status preflight before any write, the
//!   cancel and the durable completion pages (`/v1/execution/result`) that are
//!   the only proof an action whose reply was lost has ended.

use std::time::Duration;

use aab_plugin_api::ProviderError;
use serde_json::{Map, Value, json};

use crate::Deadline;
use crate::http;

pub const RUNTIME_SCHEMA: &str = "aab.ios-runtime/v1";
/// Where the SDK publishes its descriptor inside the app's data container.
pub const DESCRIPTOR_PATH: &str = "Documents/ai_app_bridge_port.json";
/// The file name the descriptor is copied to (devicectl's `--destination`).
pub const DESCRIPTOR_FILE: &str = "ai_app_bridge_port.json";
pub const DESCRIPTOR_MAX_BYTES: usize = 4096;
pub const RESPONSE_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Default cap of one HTTP request inside the command deadline.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(5000);
pub const COMPLETION_SCHEMA: &str = "aab.ios-completion/v1";
pub const H5_TARGET_SCHEMA: &str = "aab.ios-h5-target/v1";
/// A result-page cursor is base64 JSON of at most this many characters.
pub const CURSOR_MAX_CHARS: usize = 2048;

/// Stable error codes of the SDK peer (host side).
pub mod codes {
    /// The app's container has no descriptor (not installed, never started, no SDK).
    pub const DESCRIPTOR_ABSENT: &str = "ios_runtime_descriptor_absent";
    /// The descriptor is not a valid `aab.ios-runtime/v1` document (limits, fields).
    pub const INVALID_DESCRIPTOR: &str = "invalid_ios_runtime_descriptor";
    /// A response's `runtimeBinding` is missing or not the five-field shape.
    pub const INVALID_BINDING: &str = "invalid_ios_runtime_binding";
    /// The descriptor says the listener is starting, waiting or failed (`ok:false`).
    pub const NOT_READY: &str = "ios_runtime_not_ready";
    /// The descriptor or a response names another runtime than the one addressed
    /// (another bundle, process, epoch or port).
    pub const BINDING_MISMATCH: &str = "ios_runtime_binding_mismatch";
    /// A response is not a JSON object with a boolean `ok`.
    pub const INVALID_RESPONSE: &str = "invalid_ios_runtime_response";
    /// The request was never delivered (connect refused or failed).
    pub const UNREACHABLE: &str = "ios_runtime_unreachable";
    /// The request may have been delivered but no complete reply arrived.
    pub const RESPONSE_LOST: &str = "ios_runtime_response_lost";
    /// The reply exceeded the 8 MiB limit.
    pub const RESPONSE_TOO_LARGE: &str = "ios_runtime_response_too_large";
    /// The status does not advertise the managed-execution schema a write needs
    /// (an old SDK that could ignore the identity headers).
    pub const EXECUTION_UNAVAILABLE: &str = "ios_execution_unavailable";
    /// `runtimeUrl` / `iosHost` / `iosPort` do not form an `http://host:port` endpoint.
    pub const INVALID_RUNTIME_URL: &str = "invalid_ios_runtime_url";
    /// Paging `/v1/execution/result` made no progress (same cursor twice).
    pub const CURSOR_STALLED: &str = "ios_completion_cursor_stalled";
}

// ---- descriptor and identity ----------------------------------------------------

/// The five fields that name one SDK listener process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub bundle_id: String,
    pub runtime_epoch: String,
    pub process_id: u64,
    /// The SDK's own bound port (even when the host reaches it through another).
    pub port: u16,
}

/// A ready descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub identity: Identity,
    pub sdk_version: Option<String>,
    pub updated_at_ms: Option<u64>,
}

pub use crate::ids::{is_bundle_id, is_runtime_epoch, query_value};

/// JavaScript's largest safe integer: the contract's bound of ids.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

fn invalid(bundle_id: &str, why: impl Into<String>) -> ProviderError {
    let why = why.into();
    ProviderError::new(codes::INVALID_DESCRIPTOR, format!("the aab runtime descriptor of {bundle_id} is invalid: {why}"))
        .with_details(json!({"bundleId": bundle_id, "reason": why, "path": DESCRIPTOR_PATH}))
        .not_dispatched()
}

/// Validate the copied descriptor of `bundle_id` (`None`: the container has none).
pub fn parse_descriptor(bytes: Option<&[u8]>, bundle_id: &str) -> Result<Descriptor, ProviderError> {
    let Some(bytes) = bytes else {
        return Err(ProviderError::new(codes::DESCRIPTOR_ABSENT, format!("{bundle_id} has no {DESCRIPTOR_PATH} in its data container: the app is not running the aab SDK (launch it first)"))
            .with_details(json!({"bundleId": bundle_id, "path": DESCRIPTOR_PATH}))
            .not_dispatched());
    };
    if bytes.len() > DESCRIPTOR_MAX_BYTES {
        return Err(invalid(bundle_id, format!("{} bytes, more than the {DESCRIPTOR_MAX_BYTES}-byte limit", bytes.len())));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| invalid(bundle_id, format!("not JSON ({e})")))?;
    let Some(d) = value.as_object() else { return Err(invalid(bundle_id, "not a JSON object")) };
    if d.get("schemaVersion").and_then(Value::as_str) != Some(RUNTIME_SCHEMA) {
        return Err(invalid(bundle_id, format!("schemaVersion is {}, not {RUNTIME_SCHEMA:?} (an old SDK)", d.get("schemaVersion").unwrap_or(&Value::Null))));
    }
    let found = d.get("bundleId").and_then(Value::as_str).filter(|b| is_bundle_id(b)).ok_or_else(|| invalid(bundle_id, "bundleId is not [A-Za-z0-9_.-]{1,255}"))?;
    if found != bundle_id {
        return Err(ProviderError::new(codes::BINDING_MISMATCH, format!("the descriptor in the container of {bundle_id} names {found:?}")).with_details(json!({"bundleId": bundle_id, "descriptorBundleId": found})).not_dispatched());
    }
    let ok = match d.get("ok") {
        Some(Value::Bool(b)) => *b,
        _ => return Err(invalid(bundle_id, "ok is not a boolean")),
    };
    if !ok {
        let reason = match d.get("error") {
            Some(Value::String(s)) => s.chars().take(512).collect(),
            Some(Value::Null) | None => "unknown".to_string(),
            Some(other) => other.to_string().chars().take(512).collect(),
        };
        return Err(ProviderError::new(codes::NOT_READY, format!("the aab SDK of {bundle_id} is not ready ({reason}): its listener is starting, waiting or failed"))
            .with_details(json!({"bundleId": bundle_id, "reason": reason, "port": d.get("port")}))
            .not_dispatched());
    }
    let epoch = d.get("runtimeEpoch").and_then(Value::as_str).filter(|e| is_runtime_epoch(e)).ok_or_else(|| invalid(bundle_id, "runtimeEpoch is not [A-Za-z0-9_-]{1,128}"))?;
    let process_id = d.get("processId").and_then(Value::as_u64).filter(|p| (1..=MAX_SAFE_INTEGER).contains(p)).ok_or_else(|| invalid(bundle_id, "processId is not a positive integer"))?;
    let port = d.get("port").and_then(Value::as_u64).filter(|p| (1..=65535).contains(p)).ok_or_else(|| invalid(bundle_id, "a ready descriptor's port is not 1..65535"))? as u16;
    if !d.get("error").is_none_or(Value::is_null) {
        return Err(invalid(bundle_id, "a ready descriptor carries an error"));
    }
    let sdk_version = d.get("sdkVersion").and_then(Value::as_str).map(|s| s.chars().take(128).collect());
    let updated_at_ms = d.get("updatedAtMs").and_then(Value::as_u64);
    Ok(Descriptor { identity: Identity { bundle_id: found.to_string(), runtime_epoch: epoch.to_string(), process_id, port }, sdk_version, updated_at_ms })
}

impl Identity {
    /// The identity headers of every request (process-routing credentials, not authentication).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            ("X-AAB-Runtime-Schema", RUNTIME_SCHEMA.to_string()),
            ("X-AAB-Bundle-Id", self.bundle_id.clone()),
            ("X-AAB-Runtime-Epoch", self.runtime_epoch.clone()),
            ("X-AAB-Process-Id", self.process_id.to_string()),
            ("X-AAB-Runtime-Port", self.port.to_string()),
        ]
    }

    /// The `runtimeBinding` a response of this runtime carries.
    pub fn binding(&self) -> Value {
        json!({"schemaVersion": RUNTIME_SCHEMA, "bundleId": self.bundle_id, "runtimeEpoch": self.runtime_epoch, "processId": self.process_id, "port": self.port})
    }
}

const BINDING_KEYS: [&str; 5] = ["schemaVersion", "bundleId", "runtimeEpoch", "processId", "port"];

/// A response body may be believed only when it is an object whose
/// `runtimeBinding` is exactly `identity`'s and whose `ok` is a boolean.
pub fn verify_body(body: &Value, identity: &Identity) -> Result<(), ProviderError> {
    let Some(o) = body.as_object() else {
        return Err(ProviderError::new(codes::INVALID_RESPONSE, "the aab SDK's response is not a JSON object").with_details(json!({"body": truncated(body)})));
    };
    let binding = o.get("runtimeBinding");
    let well_formed = binding.and_then(Value::as_object).is_some_and(|b| {
        b.len() == BINDING_KEYS.len()
            && b.get("schemaVersion").and_then(Value::as_str) == Some(RUNTIME_SCHEMA)
            && b.get("bundleId").and_then(Value::as_str).is_some_and(is_bundle_id)
            && b.get("runtimeEpoch").and_then(Value::as_str).is_some_and(is_runtime_epoch)
            && b.get("processId").and_then(Value::as_u64).is_some_and(|p| p >= 1)
            && b.get("port").and_then(Value::as_u64).is_some_and(|p| (1..=65535).contains(&p))
    });
    if !well_formed {
        return Err(ProviderError::new(codes::INVALID_BINDING, "the aab SDK's response carries no valid runtimeBinding {schemaVersion, bundleId, runtimeEpoch, processId, port}: it cannot be attributed to the addressed runtime")
            .with_details(json!({"runtimeBinding": binding.map(truncated), "expected": identity.binding()})));
    }
    let binding = binding.unwrap_or(&Value::Null);
    let expected = identity.binding();
    if *binding != expected {
        let changed: Vec<&str> = BINDING_KEYS.iter().copied().filter(|k| binding.get(*k) != expected.get(*k)).collect();
        return Err(ProviderError::new(codes::BINDING_MISMATCH, format!("the response came from another runtime ({} differ): it is not believed", changed.join(", ")))
            .with_details(json!({"changed": changed, "runtimeBinding": binding, "expected": expected, "error": o.get("error").map(truncated)})));
    }
    if !o.get("ok").is_some_and(Value::is_boolean) {
        return Err(ProviderError::new(codes::INVALID_RESPONSE, "the aab SDK's response has no boolean ok").with_details(json!({"ok": o.get("ok").map(truncated)})));
    }
    Ok(())
}

/// A value small enough to quote in an error's details.
fn truncated(v: &Value) -> Value {
    let s = v.to_string();
    if s.len() <= 1024 { v.clone() } else { json!(format!("{}…", s.chars().take(1024).collect::<String>())) }
}

// ---- the endpoint -----------------------------------------------------------------

/// Where the listener is reached and which runtime must answer there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://host:port` without a trailing slash.
    pub url: String,
    pub identity: Identity,
}

fn bad_url(field: &str, why: impl Into<String>) -> ProviderError {
    ProviderError::new(codes::INVALID_RUNTIME_URL, why.into()).with_field(field).not_dispatched()
}

/// The transport endpoint of a runtime: `http://<tunnel ip>:<descriptor port>`
/// unless `runtimeUrl` (a bare `http://host[:port]`) or `iosHost`/`iosPort`
/// override it. An override only moves the transport: the identity is still the
/// descriptor's, so a wrong endpoint fails binding verification.
pub fn endpoint_url(runtime_url: Option<&str>, ios_host: Option<&str>, ios_port: Option<u16>, tunnel_ip: &str, descriptor_port: u16) -> Result<String, ProviderError> {
    if let Some(raw) = runtime_url {
        let url = reqwest::Url::parse(raw).map_err(|e| bad_url("runtimeUrl", format!("runtimeUrl is not a URL: {e}")))?;
        if url.scheme() != "http" {
            return Err(ProviderError::new(crate::codes::IOS_URL_UNSUPPORTED, format!("runtimeUrl scheme {:?} is not supported: the SDK listener speaks plain http", url.scheme())).with_field("runtimeUrl").not_dispatched());
        }
        if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() || !matches!(url.path(), "" | "/") {
            return Err(bad_url("runtimeUrl", "runtimeUrl must be http://host[:port] (no credentials, path, query or fragment)"));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad_url("runtimeUrl", "runtimeUrl has no host"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        return Ok(crate::base_url(host, port));
    }
    let host = match ios_host {
        Some(h) => {
            let bare = h.trim_start_matches('[').trim_end_matches(']');
            if bare.is_empty() || !bare.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:%".contains(&b)) {
                return Err(bad_url("iosHost", "iosHost must be a host name or IP address"));
            }
            bare.to_string()
        }
        None => tunnel_ip.to_string(),
    };
    Ok(crate::base_url(&host, ios_port.unwrap_or(descriptor_port)))
}

// ---- one verified exchange ------------------------------------------------------------

/// Why an exchange produced no believable answer, by what it means for a write.
#[derive(Debug)]
pub enum Failure {
    /// The request provably never reached the listener.
    NotSent(ProviderError),
    /// It may have reached it: no complete, believable reply (lost, too large,
    /// not JSON, another runtime's binding).
    MaybeReceived(ProviderError),
}

impl Failure {
    /// The error of a read (nothing a read does is dispatched).
    pub fn read_error(self) -> ProviderError {
        match self {
            Failure::NotSent(e) | Failure::MaybeReceived(e) => e.not_dispatched(),
        }
    }
    pub fn error(&self) -> &ProviderError {
        match self {
            Failure::NotSent(e) | Failure::MaybeReceived(e) => e,
        }
    }
}

/// A believable answer: the HTTP status and the verified body (`ok` may be false).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

/// One request with the identity headers, its timeout `min(timeout, deadline)`,
/// and the binding of the reply verified before it is returned.
pub async fn exchange(endpoint: &Endpoint, method: &str, path: &str, body: Option<&Value>, timeout: Duration, deadline: Deadline) -> Result<Answer, Failure> {
    let timeout = timeout.min(deadline.remaining());
    let url = format!("{}{path}", endpoint.url);
    let headers = endpoint.identity.headers();
    let where_ = json!({"method": method, "path": path, "url": endpoint.url});
    if timeout.is_zero() {
        return Err(Failure::NotSent(ProviderError::new(aab_plugin_api::codes::CANCELLED, "the command deadline passed before the request was sent").with_details(where_)));
    }
    match http::request(method, &url, &headers, body, RESPONSE_MAX_BYTES, timeout).await {
        Ok(reply) => {
            verify_body(&reply.body, &endpoint.identity).map_err(|e| {
                let mut details = e.details.clone().unwrap_or(json!({}));
                details["request"] = where_.clone();
                details["httpStatus"] = json!(reply.status);
                Failure::MaybeReceived(e.with_details(details))
            })?;
            Ok(Answer { status: reply.status, body: reply.body })
        }
        Err(f) => Err(transport_failure(f, where_)),
    }
}

fn transport_failure(f: http::Failure, where_: Value) -> Failure {
    let details = json!({"request": where_, "transport": format!("{:?}", f.kind), "cause": f.message});
    match f.kind {
        http::FailureKind::NotSent => Failure::NotSent(ProviderError::new(codes::UNREACHABLE, format!("the aab SDK listener is not reachable: {}", f.message)).with_details(details)),
        http::FailureKind::Lost => Failure::MaybeReceived(ProviderError::new(codes::RESPONSE_LOST, format!("the aab SDK's reply was lost: {}", f.message)).with_details(details)),
        http::FailureKind::TooLarge => Failure::MaybeReceived(ProviderError::new(codes::RESPONSE_TOO_LARGE, format!("the aab SDK's reply exceeds {RESPONSE_MAX_BYTES} bytes")).with_details(details)),
        http::FailureKind::NotJson => Failure::MaybeReceived(ProviderError::new(codes::INVALID_RESPONSE, format!("the aab SDK's reply is not JSON: {}", f.message)).with_details(details)),
    }
}

/// The SDK's own refusal (`ok:false`) as a not-dispatched error with its code.
pub fn refusal(body: &Value, what: &str) -> ProviderError {
    let code = crate::ids::peer_code(body.get("error")).unwrap_or(codes::INVALID_RESPONSE).to_string();
    let message = crate::ids::peer_message(body.get("message")).map(|m| format!("{what}: {m}")).unwrap_or_else(|| format!("{what}: {code}"));
    let mut e = ProviderError::new(code, message).with_details(json!({"device": truncated(body)})).not_dispatched();
    if let Some(f) = crate::ids::peer_code(body.get("field")) {
        e = e.with_field(f);
    }
    e
}

/// A read (GET): the verified body with `ok:true`; everything else is an error
/// that was not dispatched (the SDK's refusal keeps its code).
pub async fn read(endpoint: &Endpoint, path: &str, deadline: Deadline) -> Result<Value, ProviderError> {
    let answer = exchange(endpoint, "GET", path, None, REQUEST_TIMEOUT, deadline).await.map_err(Failure::read_error)?;
    if answer.body.get("ok") != Some(&Value::Bool(true)) {
        return Err(refusal(&answer.body, &format!("the aab SDK refused GET {}", path.split('?').next().unwrap_or(path))));
    }
    Ok(answer.body)
}

// ---- managed execution ----------------------------------------------------------------

/// The two managed-execution kinds of the SDK's one shared action slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    H5,
    Flutter,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::H5 => "h5",
            Kind::Flutter => "flutter",
        }
    }
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "h5" => Some(Kind::H5),
            "flutter" => Some(Kind::Flutter),
            _ => None,
        }
    }
    pub fn schema(self) -> &'static str {
        match self {
            Kind::H5 => "aab.h5-execution/v1",
            Kind::Flutter => "aab.flutter-execution/v1",
        }
    }
    /// The `debugBridge` field of the status that advertises the schema.
    pub fn status_field(self) -> &'static str {
        match self {
            Kind::H5 => "h5ExecutionSchema",
            Kind::Flutter => "flutterExecutionSchema",
        }
    }
    pub fn action_path(self) -> &'static str {
        match self {
            Kind::H5 => "/v1/h5/action",
            Kind::Flutter => "/v1/flutter/action",
        }
    }
    pub fn cancel_path(self) -> &'static str {
        match self {
            Kind::H5 => "/v1/h5/cancel",
            Kind::Flutter => "/v1/flutter/cancel",
        }
    }
}

/// The request's `execution`: exactly `{schemaVersion, actionId, runtimeEpoch, timeoutMs}`.
pub fn execution(kind: Kind, action_id: &str, runtime_epoch: &str, timeout_ms: u64) -> Value {
    json!({"schemaVersion": kind.schema(), "actionId": action_id, "runtimeEpoch": runtime_epoch, "timeoutMs": timeout_ms.clamp(1, 2_147_483_647)})
}

/// The action body: exactly `{payload, actionId, execution}`.
pub fn action_body(kind: Kind, payload: Map<String, Value>, action_id: &str, runtime_epoch: &str, timeout_ms: u64) -> Value {
    json!({"payload": Value::Object(payload), "actionId": action_id, "execution": execution(kind, action_id, runtime_epoch, timeout_ms)})
}

/// The exact pre-admission rejection `{ok:false, error, message?, dispatched:false,
/// ambiguous:false}` (plus `field`, `runtimeBinding`), with no `execution`: the
/// only shape that proves the action was not dispatched.
pub fn is_rejection(body: &Value) -> bool {
    let Some(o) = body.as_object() else { return false };
    o.keys().all(|k| ["ok", "error", "message", "dispatched", "ambiguous", "field", "runtimeBinding", "details"].contains(&k.as_str()))
        && o.get("ok") == Some(&Value::Bool(false))
        && o.get("error").and_then(Value::as_str).is_some_and(|e| !e.is_empty())
        && o.get("message").is_none_or(Value::is_string)
        && o.get("dispatched") == Some(&Value::Bool(false))
        && o.get("ambiguous") == Some(&Value::Bool(false))
}

/// A terminal result of exactly this action: `settled:true`, its identity at the
/// top and in the 4-key `execution`, boolean `ok/dispatched/ambiguous`, an error
/// when not ok, never ok and ambiguous together.
pub fn is_settled_result(kind: Kind, r: &Value, action_id: &str, runtime_epoch: &str) -> bool {
    aab_plugin_api::execution::is_settled_receipt(kind.schema(), r, action_id, runtime_epoch)
}

/// The terminal result inside a cancel answer `{ok:true, actionId, runtimeEpoch,
/// executionResult}` of exactly this action.
pub fn matching_execution_result(kind: Kind, answer: &Value, action_id: &str, runtime_epoch: &str) -> Option<Value> {
    let r = answer.get("executionResult")?;
    (answer.get("ok") == Some(&Value::Bool(true))
        && answer.get("actionId").and_then(Value::as_str) == Some(action_id)
        && answer.get("runtimeEpoch").and_then(Value::as_str) == Some(runtime_epoch)
        && is_settled_result(kind, r, action_id, runtime_epoch))
    .then(|| r.clone())
}

/// The status preflight every write starts with (§4.8): a verified `GET
/// /v1/status` of this runtime (an old SDK ignoring the headers cannot pass it),
/// `ok:true`, the same SDK epoch as the descriptor, and `kind`'s execution schema
/// advertised. Returns the status body.
pub async fn preflight(endpoint: &Endpoint, kind: Kind, deadline: Deadline) -> Result<Value, ProviderError> {
    let status = read(endpoint, "/v1/status", deadline).await?;
    check_status(&status, &endpoint.identity, Some(kind))?;
    Ok(status)
}

/// The status checks of [`preflight`] (`kind` None: only the runtime identity).
pub fn check_status(status: &Value, identity: &Identity, kind: Option<Kind>) -> Result<(), ProviderError> {
    let epoch = status.pointer("/debugBridge/runtimeEpoch").and_then(Value::as_str);
    if epoch != Some(identity.runtime_epoch.as_str()) {
        return Err(ProviderError::new(codes::BINDING_MISMATCH, "the SDK status names another runtime epoch than its descriptor")
            .with_details(json!({"statusRuntimeEpoch": epoch, "descriptorRuntimeEpoch": identity.runtime_epoch}))
            .not_dispatched());
    }
    if let Some(found) = status.pointer("/app/bundleId").and_then(Value::as_str)
        && found != identity.bundle_id
    {
        return Err(ProviderError::new(codes::BINDING_MISMATCH, format!("the SDK status belongs to {found:?}, not {:?}", identity.bundle_id)).not_dispatched());
    }
    if let Some(kind) = kind {
        let advertised = status.pointer("/debugBridge").and_then(|b| b.get(kind.status_field()));
        if advertised.and_then(Value::as_str) != Some(kind.schema()) {
            return Err(ProviderError::new(codes::EXECUTION_UNAVAILABLE, format!("the aab SDK of {} does not advertise {} {}: managed {} actions are unavailable", identity.bundle_id, kind.status_field(), kind.schema(), kind.name()))
                .with_details(json!({ kind.status_field(): advertised }))
                .not_dispatched());
        }
    }
    Ok(())
}

/// `POST /v1/<kind>/cancel {actionId, runtimeEpoch}`: the verified answer (any `ok`).
pub async fn cancel(endpoint: &Endpoint, kind: Kind, action_id: &str, runtime_epoch: &str, deadline: Deadline) -> Result<Value, Failure> {
    let body = json!({"actionId": action_id, "runtimeEpoch": runtime_epoch});
    exchange(endpoint, "POST", kind.cancel_path(), Some(&body), REQUEST_TIMEOUT, deadline).await.map(|a| a.body)
}

/// The path of one page of the durable completion lookup.
pub fn result_path(kind: Kind, action_id: &str, runtime_epoch: &str, cursor: Option<&str>) -> String {
    let mut p = format!("/v1/execution/result?kind={}&actionId={}&runtimeEpoch={}", kind.name(), query_value(action_id), query_value(runtime_epoch));
    if let Some(c) = cursor {
        p.push_str(&format!("&cursor={}", query_value(c)));
    }
    p
}

/// What the durable store says about one action.
#[derive(Clone, Debug, PartialEq)]
pub enum Completion {
    /// The original completion: its `executionResult` (checked to be exactly this
    /// action's settled result) and the store's `receipt {sequence, sha256, committed}`.
    Found { execution_result: Value, receipt: Value },
    /// Every page was read and none holds it (or the pages stopped: `complete:false`).
    NotFound { pages: u32, complete: bool, last: Value },
}

/// At most this many result pages per lookup (each ≤64 records / 2 MiB).
pub const MAX_RESULT_PAGES: u32 = 64;

/// Page through `/v1/execution/result` until the completion is found, the pages
/// end, or the deadline: only a found record that IS this action's settled
/// result counts. A found record that does not match is refused as
/// `invalid_ios_runtime_response` (never settled from).
pub async fn find_completion(endpoint: &Endpoint, kind: Kind, action_id: &str, runtime_epoch: &str, deadline: Deadline) -> Result<Completion, ProviderError> {
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = read(endpoint, &result_path(kind, action_id, runtime_epoch, cursor.as_deref()), deadline).await?;
        pages += 1;
        if page.get("found") == Some(&Value::Bool(true)) {
            let result = page.get("executionResult").cloned().unwrap_or(Value::Null);
            let receipt = page.get("receipt").cloned().unwrap_or(Value::Null);
            let identity_ok = page.get("actionId").and_then(Value::as_str) == Some(action_id) && page.get("runtimeEpoch").and_then(Value::as_str) == Some(runtime_epoch);
            if !identity_ok || !is_settled_result(kind, &result, action_id, runtime_epoch) || receipt.get("committed") != Some(&Value::Bool(true)) {
                return Err(ProviderError::new(codes::INVALID_RESPONSE, "the completion store answered found with a record that is not this action's committed settled result")
                    .with_details(json!({"page": truncated(&page)}))
                    .not_dispatched());
            }
            return Ok(Completion::Found { execution_result: result, receipt });
        }
        let next = page.get("nextCursor").and_then(Value::as_str).map(str::to_string);
        let more = page.get("hasMore") == Some(&Value::Bool(true));
        match next {
            Some(n) if more => {
                if n.len() > CURSOR_MAX_CHARS || cursor.as_deref() == Some(n.as_str()) {
                    return Err(ProviderError::new(codes::CURSOR_STALLED, "the completion store's cursor did not advance").with_details(json!({"cursor": n.chars().take(64).collect::<String>(), "pages": pages})).not_dispatched());
                }
                if pages >= MAX_RESULT_PAGES || deadline.is_past() {
                    return Ok(Completion::NotFound { pages, complete: false, last: truncated(&page) });
                }
                cursor = Some(n);
            }
            _ => return Ok(Completion::NotFound { pages, complete: true, last: truncated(&page) }),
        }
    }
}

// ---- connection --------------------------------------------------------------------

/// `runtimeUrl` / `iosHost` / `iosPort` of a call: they move the transport only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub runtime_url: Option<String>,
    pub ios_host: Option<String>,
    pub ios_port: Option<u16>,
}

impl Overrides {
    /// Refuse malformed overrides before any device access (placeholders stand in
    /// for the tunnel address and the descriptor's port).
    pub fn check(&self) -> Result<(), ProviderError> {
        endpoint_url(self.runtime_url.as_deref(), self.ios_host.as_deref(), self.ios_port, "127.0.0.1", 1).map(|_| ())
    }

    /// Which transport a connection with these overrides uses (for replies).
    pub fn transport(&self) -> &'static str {
        if self.runtime_url.is_some() {
            "runtimeUrl"
        } else if self.ios_host.is_some() || self.ios_port.is_some() {
            "iosHost/iosPort"
        } else {
            "tunnel"
        }
    }
}

/// A verified route to one SDK listener process on one device.
#[derive(Clone, Debug)]
pub struct Connection {
    pub device: crate::DeviceRecord,
    pub tunnel_ip: String,
    pub descriptor: Descriptor,
    pub endpoint: Endpoint,
    pub transport: &'static str,
}

/// The connection sequence of every SDK request (§4.2, §4.8), with no caching:
/// list and select the device, require its developer tunnel, copy the
/// descriptor out of the app's data container, validate it, address the
/// listener. Every step fails with its own code, before any HTTP access.
pub async fn connect(devicectl: &crate::Devicectl, device_id: &str, bundle_id: &str, overrides: &Overrides, deadline: Deadline) -> Result<Connection, ProviderError> {
    overrides.check()?;
    let devices = devicectl.list_devices(crate::devicectl::step(deadline, 30)).await?;
    let device = crate::select_device(&devices, device_id)?;
    open(devicectl, device, bundle_id, overrides, deadline).await
}

/// [`connect`] on an already selected device.
pub async fn open(devicectl: &crate::Devicectl, device: crate::DeviceRecord, bundle_id: &str, overrides: &Overrides, deadline: Deadline) -> Result<Connection, ProviderError> {
    let tunnel_ip = crate::require_developer_tunnel(&device)?;
    let bytes = devicectl.copy_from_container(&device.identifier, bundle_id, DESCRIPTOR_PATH, DESCRIPTOR_MAX_BYTES as u64, crate::devicectl::step(deadline, 5)).await?;
    let descriptor = parse_descriptor(bytes.as_deref(), bundle_id)?;
    let url = endpoint_url(overrides.runtime_url.as_deref(), overrides.ios_host.as_deref(), overrides.ios_port, &tunnel_ip, descriptor.identity.port)?;
    let endpoint = Endpoint { url, identity: descriptor.identity.clone() };
    Ok(Connection { device, tunnel_ip, descriptor, endpoint, transport: overrides.transport() })
}

impl Connection {
    /// The identity facts a reply about this connection repeats.
    pub fn facts(&self) -> Value {
        let id = &self.endpoint.identity;
        json!({
            "deviceId": self.device.identifier,
            "udid": self.device.udid,
            "bundleId": id.bundle_id,
            "runtimeEpoch": id.runtime_epoch,
            "processId": id.process_id,
            "runtimeBinding": id.binding(),
            "endpoint": {"url": self.endpoint.url, "transport": self.transport, "sdkPort": id.port},
        })
    }
}

// ---- the host-side action record ----------------------------------------------------

/// The record of every managed SDK action: one FactStore record in stream
/// `ios.sdk.actions` keyed by the host action id, appended durably (fsync'd)
/// BEFORE the dispatch mark. The host's ownership journal knows only the host
/// action id and the device key; this says which device (UDID), app, kind, SDK
/// action id and ORIGINAL runtime epoch to ask, so whichever plugin reconciles
/// settles the action from the same facts after any crash.
pub mod record {
    use aab_plugin_api::host::Durability;
    use aab_plugin_api::{Context, ProviderError};
    use serde_json::{Value, json};

    use super::Kind;

    pub const STREAM: &str = "ios.sdk.actions";
    pub const SCHEMA: &str = "aab.ios-sdk-action-record/v1";
    pub const ACTION_RECORD_UNAVAILABLE: &str = "action_record_unavailable";

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ActionRecord {
        /// The host action id (the ownership journal's).
        pub host_action_id: String,
        /// The id the SDK knows the action by (a Script requestId is preserved).
        pub action_id: String,
        pub kind: Kind,
        pub command: String,
        /// The `deviceId` argument (the ownership journal's key).
        pub device_id: String,
        pub device_identifier: String,
        pub udid: String,
        pub bundle_id: String,
        /// The execution's runtime epoch: the SDK's (H5) or the Dart engine's (Flutter).
        pub runtime_epoch: String,
        /// The SDK process the action was sent to.
        pub sdk_runtime_epoch: String,
        pub sdk_process_id: u64,
        /// The explicit `devicectl` of the call, if any.
        pub devicectl: Option<String>,
    }

    impl ActionRecord {
        pub fn to_json(&self) -> Value {
            json!({
                "schemaVersion": SCHEMA, "kind": self.kind.name(), "hostActionId": self.host_action_id, "actionId": self.action_id, "command": self.command,
                "deviceId": self.device_id, "device": {"identifier": self.device_identifier, "udid": self.udid},
                "app": {"bundleId": self.bundle_id, "sdkRuntimeEpoch": self.sdk_runtime_epoch, "processId": self.sdk_process_id},
                "runtimeEpoch": self.runtime_epoch, "devicectl": self.devicectl,
            })
        }

        pub fn from_json(v: &Value) -> Option<ActionRecord> {
            if v.get("schemaVersion").and_then(Value::as_str) != Some(SCHEMA) {
                return None;
            }
            let s = |p: &str| v.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
            Some(ActionRecord {
                host_action_id: s("/hostActionId")?,
                action_id: s("/actionId")?,
                kind: Kind::parse(&s("/kind")?)?,
                command: s("/command")?,
                device_id: s("/deviceId")?,
                device_identifier: s("/device/identifier")?,
                udid: s("/device/udid")?,
                bundle_id: s("/app/bundleId")?,
                runtime_epoch: s("/runtimeEpoch")?,
                sdk_runtime_epoch: s("/app/sdkRuntimeEpoch")?,
                sdk_process_id: v.pointer("/app/processId").and_then(Value::as_u64)?,
                devicectl: s("/devicectl"),
            })
        }
    }

    /// Append durably under the host action id; a failure is never dispatched.
    pub fn append(ctx: &Context<'_>, record: &ActionRecord) -> Result<(), ProviderError> {
        if !ctx.host().supports("facts.append") {
            return Err(ProviderError::new(ACTION_RECORD_UNAVAILABLE, "the host has no FactStore: the action record cannot be written before dispatch").not_dispatched());
        }
        ctx.facts().append(STREAM, &record.host_action_id, &record.to_json(), Durability::Sync).map(|_| ()).map_err(|e| {
            ProviderError::new(ACTION_RECORD_UNAVAILABLE, format!("the action record could not be written before dispatch: {}", e.message)).with_details(json!({"cause": e.error})).not_dispatched()
        })
    }

    /// The newest record of host action `host_action_id`, if any.
    pub fn lookup(ctx: &Context<'_>, host_action_id: &str) -> Result<Option<ActionRecord>, ProviderError> {
        let mut after = 0;
        let mut last = None;
        // Bounded: one action id has one record.
        for _ in 0..64 {
            let page = ctx.facts().read(STREAM, host_action_id, after, 1000)?;
            if let Some(r) = page.records.iter().rev().filter(|r| r.key == host_action_id).find_map(|r| ActionRecord::from_json(&r.record)) {
                last = Some(r);
            }
            if !page.has_more || page.next_sequence <= after {
                break;
            }
            after = page.next_sequence;
        }
        Ok(last)
    }
}

/// The outcome of reconciling one recorded SDK action.
#[derive(Clone, Debug, PartialEq)]
pub enum Settlement {
    /// The SDK's committed completion of exactly this action id and ORIGINAL epoch.
    Settled { execution_result: Value, receipt: Value, serving_runtime_epoch: String },
    /// No proof: why, and what the device said.
    Unsettled { reason: String, answer: Value },
}

/// Ask the app's CURRENT SDK (a restarted process reads the same durable store)
/// for the completion of the recorded action by its original id and epoch. Never
/// sends the action again. When the store has none and the SDK's one slot still
/// holds exactly this action, one cancel asks it to stop and persist its result,
/// then the store is read once more; an idle status or a cancel acknowledgement
/// alone settles nothing.
pub async fn settle(devicectl: &crate::Devicectl, record: &record::ActionRecord, overrides: &Overrides, deadline: Deadline) -> Settlement {
    let unsettled = |reason: &str, answer: Value| Settlement::Unsettled { reason: reason.to_string(), answer };
    let conn = match connect(devicectl, &record.device_identifier, &record.bundle_id, overrides, deadline).await {
        Ok(c) => c,
        Err(e) => return unsettled("sdk_unreachable", json!({"error": e.error, "message": e.message, "details": e.details})),
    };
    if conn.device.udid != record.udid {
        return unsettled("device_changed", json!({"recordedUdid": record.udid, "selectedUdid": conn.device.udid}));
    }
    let serving = conn.endpoint.identity.runtime_epoch.clone();
    let lookup = |deadline| find_completion(&conn.endpoint, record.kind, &record.action_id, &record.runtime_epoch, deadline);
    let not_found = match lookup(deadline).await {
        Ok(Completion::Found { execution_result, receipt }) => return Settlement::Settled { execution_result, receipt, serving_runtime_epoch: serving },
        Ok(Completion::NotFound { pages, complete, last }) => json!({"pages": pages, "complete": complete, "last": last}),
        Err(e) => return unsettled(&e.error, json!({"message": e.message, "details": e.details})),
    };
    let status = match read(&conn.endpoint, "/v1/execution/status", deadline).await {
        Ok(s) => s,
        Err(e) => return unsettled("completion_not_found", json!({"lookup": not_found, "status": {"error": e.error, "message": e.message}})),
    };
    let active = status.get("active").cloned().unwrap_or(Value::Null);
    let ours = active.get("actionId").and_then(Value::as_str) == Some(record.action_id.as_str()) && active.get("runtimeEpoch").and_then(Value::as_str) == Some(record.runtime_epoch.as_str());
    if !ours {
        return unsettled("completion_not_found", json!({"lookup": not_found, "active": active, "servingRuntimeEpoch": serving}));
    }
    let answer = match cancel(&conn.endpoint, record.kind, &record.action_id, &record.runtime_epoch, deadline).await {
        Ok(a) => a,
        Err(f) => return unsettled("action_active", json!({"active": active, "cancel": {"error": f.error().error, "message": f.error().message}})),
    };
    match lookup(deadline).await {
        Ok(Completion::Found { execution_result, receipt }) => Settlement::Settled { execution_result, receipt, serving_runtime_epoch: serving },
        Ok(_) => unsettled("action_active", json!({"active": active, "cancel": truncated(&answer)})),
        Err(e) => unsettled(&e.error, json!({"message": e.message, "details": e.details})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: &str = "5A0D7C1E-3B1F-4D6A-9E2B-7F8C9D0A1B2C";

    fn good() -> Value {
        json!({"schemaVersion": RUNTIME_SCHEMA, "bundleId": "com.example.shop", "runtimeEpoch": EPOCH, "processId": 4242, "port": 49152, "ok": true, "sdkVersion": "0.3.4", "updatedAtMs": 1764633600123u64, "error": null})
    }

    fn parse(v: &Value) -> Result<Descriptor, ProviderError> {
        parse_descriptor(Some(v.to_string().as_bytes()), "com.example.shop")
    }

    fn code(r: Result<Descriptor, ProviderError>) -> (String, Option<bool>) {
        let e = r.unwrap_err();
        (e.error, e.dispatched)
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = good();
        v[key] = value;
        v
    }

    fn identity() -> Identity {
        parse(&good()).unwrap().identity
    }

    #[test]
    fn a_ready_descriptor_names_one_runtime() {
        let d = parse(&good()).unwrap();
        assert_eq!(d.identity, Identity { bundle_id: "com.example.shop".into(), runtime_epoch: EPOCH.into(), process_id: 4242, port: 49152 });
        assert_eq!((d.sdk_version.as_deref(), d.updated_at_ms), (Some("0.3.4"), Some(1764633600123)));
    }

    #[test]
    fn every_descriptor_failure_has_its_code_and_is_not_dispatched() {
        let not = |c: &str| (c.to_string(), Some(false));
        assert_eq!(code(parse_descriptor(None, "com.example.shop")), not(codes::DESCRIPTOR_ABSENT));
        let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(DESCRIPTOR_MAX_BYTES));
        assert_eq!(code(parse_descriptor(Some(big.as_bytes()), "com.example.shop")), not(codes::INVALID_DESCRIPTOR));
        assert_eq!(code(parse_descriptor(Some(b"{not json"), "com.example.shop")), not(codes::INVALID_DESCRIPTOR));
        assert_eq!(code(parse_descriptor(Some(b"[1]"), "com.example.shop")), not(codes::INVALID_DESCRIPTOR));
        for (key, value) in [
            ("schemaVersion", json!("aab.ios-runtime/v0")),
            ("bundleId", json!("com example")),
            ("bundleId", json!("x".repeat(256))),
            ("runtimeEpoch", json!("has.dot")),
            ("runtimeEpoch", json!("e".repeat(129))),
            ("runtimeEpoch", json!("")),
            ("processId", json!(0)),
            ("processId", json!("42")),
            ("port", json!(0)),
            ("port", json!(65536)),
            ("port", json!("49152")),
            ("ok", json!("true")),
            ("ok", Value::Null),
            ("error", json!("stale")),
        ] {
            assert_eq!(code(parse(&with(key, value.clone()))), not(codes::INVALID_DESCRIPTOR), "{key} = {value}");
        }
        assert_eq!(code(parse(&with("bundleId", json!("com.example.other")))), not(codes::BINDING_MISMATCH));
        // Starting / waiting / failed: ok:false, port 0 and the reason.
        let mut starting = with("ok", json!(false));
        starting["port"] = json!(0);
        starting["error"] = json!("listener_starting");
        let e = parse(&starting).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::NOT_READY, Some(false)));
        assert_eq!(e.details.unwrap()["reason"], "listener_starting");
        // Boundaries that are valid.
        assert!(parse(&with("port", json!(65535))).is_ok());
        assert!(parse(&with("runtimeEpoch", json!("a_b-C".repeat(25)))).is_ok());
        let mut exact = good().to_string();
        exact = exact.replacen('{', &format!("{{\"pad\":\"{}\",", "p".repeat(DESCRIPTOR_MAX_BYTES - exact.len() - 9)), 1);
        assert_eq!(exact.len(), DESCRIPTOR_MAX_BYTES);
        assert!(parse_descriptor(Some(exact.as_bytes()), "com.example.shop").is_ok(), "4096 bytes is within the limit");
    }

    #[test]
    fn requests_carry_the_five_identity_headers() {
        let h = identity().headers();
        let names: Vec<&str> = h.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["X-AAB-Runtime-Schema", "X-AAB-Bundle-Id", "X-AAB-Runtime-Epoch", "X-AAB-Process-Id", "X-AAB-Runtime-Port"]);
        let values: Vec<&str> = h.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, [RUNTIME_SCHEMA, "com.example.shop", EPOCH, "4242", "49152"]);
    }

    #[test]
    fn only_a_body_bound_to_the_runtime_with_a_boolean_ok_is_believed() {
        let id = identity();
        let body = |ok: Value, binding: Value| json!({"ok": ok, "runtimeBinding": binding, "data": 1});
        assert!(verify_body(&body(json!(true), id.binding()), &id).is_ok());
        assert!(verify_body(&body(json!(false), id.binding()), &id).is_ok(), "an error body of this runtime is believed");
        // Each field of the binding matters.
        for (k, v) in [("bundleId", json!("com.example.other")), ("runtimeEpoch", json!("OTHER")), ("processId", json!(4243)), ("port", json!(49153))] {
            let mut b = id.binding();
            b[k] = v;
            let e = verify_body(&body(json!(true), b), &id).unwrap_err();
            assert_eq!(e.error, codes::BINDING_MISMATCH, "{k}");
            assert_eq!(e.details.unwrap()["changed"], json!([k]));
        }
        // A mismatch wins over the body's own claims (even a non-boolean ok).
        let mut other = id.binding();
        other["runtimeEpoch"] = json!("OTHER");
        assert_eq!(verify_body(&body(json!("yes"), other), &id).unwrap_err().error, codes::BINDING_MISMATCH);
        for bad in [Value::Null, json!({}), json!({"schemaVersion": RUNTIME_SCHEMA}), json!("binding")] {
            assert_eq!(verify_body(&body(json!(true), bad.clone()), &id).unwrap_err().error, codes::INVALID_BINDING, "{bad}");
        }
        let mut extra = id.binding();
        extra["extra"] = json!(1);
        assert_eq!(verify_body(&body(json!(true), extra), &id).unwrap_err().error, codes::INVALID_BINDING);
        assert_eq!(verify_body(&json!({"ok": true}), &id).unwrap_err().error, codes::INVALID_BINDING);
        for ok in [Value::Null, json!("true"), json!(1)] {
            assert_eq!(verify_body(&body(ok.clone(), id.binding()), &id).unwrap_err().error, codes::INVALID_RESPONSE, "{ok}");
        }
        let mut no_ok = body(json!(true), id.binding());
        no_ok.as_object_mut().unwrap().remove("ok");
        assert_eq!(verify_body(&no_ok, &id).unwrap_err().error, codes::INVALID_RESPONSE);
        assert_eq!(verify_body(&json!([1]), &id).unwrap_err().error, codes::INVALID_RESPONSE);
    }

    #[test]
    fn a_refusal_relays_only_a_code_shaped_error_and_a_bounded_message() {
        let e = refusal(&json!({"ok": false, "error": "ios_action_busy", "message": "busy", "field": "selector"}), "GET /v1/x");
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("ios_action_busy", Some("selector"), Some(false)));
        let hostile = refusal(&json!({"ok": false, "error": "x y\n".repeat(100_000), "message": "m".repeat(100_000), "field": "a b"}), "GET /v1/x");
        assert_eq!((hostile.error.as_str(), hostile.field.as_deref()), (codes::INVALID_RESPONSE, None));
        assert!(hostile.message.len() < 2 * crate::ids::MAX_PEER_MESSAGE, "{}", hostile.message.len());
    }

    #[test]
    fn overrides_move_the_transport_only() {
        assert_eq!(endpoint_url(None, None, None, "fd00::2", 49152).unwrap(), "http://[fd00::2]:49152");
        assert_eq!(endpoint_url(None, Some("127.0.0.1"), Some(9000), "fd00::2", 49152).unwrap(), "http://127.0.0.1:9000");
        assert_eq!(endpoint_url(None, None, Some(9000), "10.0.0.2", 49152).unwrap(), "http://10.0.0.2:9000");
        assert_eq!(endpoint_url(None, Some("::1"), None, "10.0.0.2", 49152).unwrap(), "http://[::1]:49152");
        assert_eq!(endpoint_url(Some("http://127.0.0.1:8123/"), Some("ignored"), None, "x", 1).unwrap(), "http://127.0.0.1:8123");
        assert_eq!(endpoint_url(Some("http://[::1]:8123"), None, None, "x", 1).unwrap(), "http://[::1]:8123");
        assert_eq!(endpoint_url(Some("http://phone.local"), None, None, "x", 1).unwrap(), "http://phone.local:80");
        let e = endpoint_url(Some("https://127.0.0.1:1"), None, None, "x", 1).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (crate::codes::IOS_URL_UNSUPPORTED, Some("runtimeUrl")));
        for bad in ["http://u:p@h:1", "http://h:1/v1", "http://h:1?x=1", "not a url"] {
            let e = endpoint_url(Some(bad), None, None, "x", 1).unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (codes::INVALID_RUNTIME_URL, Some(false)), "{bad}");
        }
        assert_eq!(endpoint_url(None, Some("a b"), None, "x", 1).unwrap_err().field.as_deref(), Some("iosHost"));
    }

    fn settled(kind: Kind) -> Value {
        json!({"ok": true, "dispatched": true, "ambiguous": false, "actionId": "A", "runtimeEpoch": EPOCH, "settled": true,
               "execution": {"schemaVersion": kind.schema(), "actionId": "A", "runtimeEpoch": EPOCH, "settled": true}})
    }

    #[test]
    fn managed_execution_shapes() {
        assert_eq!(execution(Kind::H5, "A", EPOCH, 0), json!({"schemaVersion": "aab.h5-execution/v1", "actionId": "A", "runtimeEpoch": EPOCH, "timeoutMs": 1}));
        let body = action_body(Kind::Flutter, Map::new(), "A", "E", 900);
        assert_eq!(body.as_object().unwrap().keys().collect::<Vec<_>>(), ["payload", "actionId", "execution"]);
        assert_eq!(body["execution"]["schemaVersion"], "aab.flutter-execution/v1");
        let rej = json!({"ok": false, "error": "ios_action_busy", "message": "m", "dispatched": false, "ambiguous": false, "runtimeBinding": {}});
        assert!(is_rejection(&rej));
        let mut pending = rej.clone();
        pending["dispatched"] = Value::Null;
        assert!(!is_rejection(&pending));
        let mut with_exec = rej.clone();
        with_exec["execution"] = json!({});
        assert!(!is_rejection(&with_exec), "a result with an execution is not a pre-admission rejection");
        assert!(is_settled_result(Kind::H5, &settled(Kind::H5), "A", EPOCH));
        assert!(!is_settled_result(Kind::Flutter, &settled(Kind::H5), "A", EPOCH), "the kind's schema");
        assert!(!is_settled_result(Kind::H5, &settled(Kind::H5), "B", EPOCH));
        assert!(!is_settled_result(Kind::H5, &settled(Kind::H5), "A", "OTHER"));
        let mut failed = settled(Kind::H5);
        failed["ok"] = json!(false);
        assert!(!is_settled_result(Kind::H5, &failed, "A", EPOCH), "ok:false needs an error");
        failed["error"] = json!("h5_action_timeout");
        assert!(is_settled_result(Kind::H5, &failed, "A", EPOCH));
        let answer = json!({"ok": true, "actionId": "A", "runtimeEpoch": EPOCH, "executionResult": settled(Kind::H5)});
        assert!(matching_execution_result(Kind::H5, &answer, "A", EPOCH).is_some());
        assert!(matching_execution_result(Kind::H5, &json!({"ok": false, "error": "ios_action_not_active"}), "A", EPOCH).is_none());
        assert_eq!(result_path(Kind::Flutter, "a b", EPOCH, Some("eyJ+/=")), format!("/v1/execution/result?kind=flutter&actionId=a%20b&runtimeEpoch={EPOCH}&cursor=eyJ%2B%2F%3D"));
    }

    #[test]
    fn the_status_must_be_this_runtime_and_advertise_the_kind() {
        let id = identity();
        let mut st = json!({"ok": true, "app": {"bundleId": "com.example.shop"}, "debugBridge": {"runtimeEpoch": EPOCH, "h5ExecutionSchema": "aab.h5-execution/v1", "flutterExecutionSchema": "aab.flutter-execution/v1"}});
        assert!(check_status(&st, &id, Some(Kind::H5)).is_ok());
        assert!(check_status(&st, &id, Some(Kind::Flutter)).is_ok());
        st["debugBridge"]["flutterExecutionSchema"] = Value::Null;
        let e = check_status(&st, &id, Some(Kind::Flutter)).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::EXECUTION_UNAVAILABLE, Some(false)));
        st["debugBridge"]["runtimeEpoch"] = json!("OTHER");
        assert_eq!(check_status(&st, &id, None).unwrap_err().error, codes::BINDING_MISMATCH);
    }
}
