//! Runner identity on the wire (protocols §5.2): the five `X-AAB-WDA-*`
//! identity headers every request must carry exactly once, the target headers
//! of targeted reads, the `{wdaBinding, sessionId, value}` envelope of every
//! response and the HTTP 409 rejection shape the host treats as proof that
//! nothing was dispatched.

use serde_json::{Value, json};

use super::Shared;
use super::http::Request;
use super::ids;

pub const WDA_SCHEMA: &str = "aab.ios-wda/v1";

const SCHEMA_HEADER: &str = "X-AAB-WDA-Schema";
const BUNDLE_HEADER: &str = "X-AAB-WDA-Bundle-Id";
const EPOCH_HEADER: &str = "X-AAB-WDA-Runtime-Epoch";
const PID_HEADER: &str = "X-AAB-WDA-Process-Id";
const PORT_HEADER: &str = "X-AAB-WDA-Port";
const TARGET_BUNDLE_HEADER: &str = "X-AAB-WDA-Target-Bundle-Id";
const TARGET_PID_HEADER: &str = "X-AAB-WDA-Target-Process-Id";
const SESSION_HEADER: &str = "X-AAB-WDA-Session-Id";

/// A request refused before anything was dispatched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl Rejection {
    pub fn new(code: &'static str, message: impl Into<String>) -> Rejection {
        Rejection { status: 409, code, message: message.into() }
    }

    /// The rejection `value`: exactly these four keys.
    pub fn value(&self) -> Value {
        json!({ "error": self.code, "message": self.message, "dispatched": false, "ambiguous": false })
    }
}

/// `wdaBinding` of every response; the `wdaBindingMismatch` fault answers as
/// if another Runner process held the port.
pub fn binding(shared: &Shared) -> Value {
    let epoch = if shared.faults().binding_mismatch { format!("{}-STALE", shared.epoch) } else { shared.epoch.clone() };
    json!({
        "schemaVersion": WDA_SCHEMA,
        "bundleId": shared.cfg.runner_bundle_id,
        "runtimeEpoch": epoch,
        "processId": shared.cfg.process_id,
        "port": shared.port,
    })
}

pub fn envelope(shared: &Shared, session_id: Option<&str>, value: Value) -> Value {
    json!({ "wdaBinding": binding(shared), "sessionId": session_id, "value": value })
}

fn invalid_headers(message: impl Into<String>) -> Rejection {
    Rejection::new("invalid_ios_wda_headers", message)
}

/// The single value of `name`; a missing or repeated header is invalid.
fn single<'a>(req: &'a Request, name: &'a str) -> Result<Option<&'a str>, Rejection> {
    let mut values = req.header_values(name);
    let first = values.next();
    if values.next().is_some() {
        return Err(invalid_headers(format!("{name} given more than once")));
    }
    Ok(first)
}

fn required<'a>(req: &'a Request, name: &'a str) -> Result<&'a str, Rejection> {
    single(req, name)?.ok_or_else(|| invalid_headers(format!("{name} is required")))
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, Rejection> {
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_headers(format!("{name} must be a decimal number")));
    }
    v.parse().map_err(|_| invalid_headers(format!("{name} is out of range")))
}

/// Checks the five identity headers against this Runner process.
pub fn check_identity(shared: &Shared, req: &Request) -> Result<(), Rejection> {
    // Any repeated X-AAB-WDA-* name is refused, even ones this Runner does not read.
    let mut seen: Vec<String> = Vec::new();
    for (k, _) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if lower.starts_with("x-aab-wda-") {
            if seen.contains(&lower) {
                return Err(invalid_headers(format!("{k} given more than once")));
            }
            seen.push(lower);
        }
    }
    let schema = required(req, SCHEMA_HEADER)?;
    let bundle = required(req, BUNDLE_HEADER)?;
    let epoch = required(req, EPOCH_HEADER)?;
    let pid: u32 = number(PID_HEADER, required(req, PID_HEADER)?)?;
    let port: u16 = number(PORT_HEADER, required(req, PORT_HEADER)?)?;
    if !ids::valid_bundle_id(bundle) {
        return Err(invalid_headers(format!("{BUNDLE_HEADER} is not a bundle id")));
    }
    if !ids::valid_epoch(epoch) {
        return Err(invalid_headers(format!("{EPOCH_HEADER} is not a runtime epoch")));
    }
    let mismatch = |what: &str| Rejection::new("ios_wda_binding_mismatch", format!("{what} does not match this Runner process"));
    if schema != WDA_SCHEMA {
        return Err(mismatch(SCHEMA_HEADER));
    }
    if bundle != shared.cfg.runner_bundle_id {
        return Err(mismatch(BUNDLE_HEADER));
    }
    if epoch != shared.epoch {
        return Err(mismatch(EPOCH_HEADER));
    }
    if pid != shared.cfg.process_id {
        return Err(mismatch(PID_HEADER));
    }
    if port != shared.port {
        return Err(mismatch(PORT_HEADER));
    }
    Ok(())
}

/// What a targeted read claims to address: the App, its process and the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetHeaders {
    pub bundle_id: String,
    pub process_id: u32,
    pub session_id: String,
}

pub fn target_headers(req: &Request) -> Result<TargetHeaders, Rejection> {
    let bundle = required(req, TARGET_BUNDLE_HEADER)?;
    let pid: u32 = number(TARGET_PID_HEADER, required(req, TARGET_PID_HEADER)?)?;
    let session = single(req, SESSION_HEADER)?.ok_or_else(|| Rejection::new("ios_wda_session_required", format!("{SESSION_HEADER} is required for a targeted call")))?;
    if !ids::valid_bundle_id(bundle) {
        return Err(invalid_headers(format!("{TARGET_BUNDLE_HEADER} is not a bundle id")));
    }
    if pid == 0 {
        return Err(invalid_headers(format!("{TARGET_PID_HEADER} must be positive")));
    }
    if !ids::valid_token(session) {
        return Err(invalid_headers(format!("{SESSION_HEADER} is not a session id")));
    }
    Ok(TargetHeaders { bundle_id: bundle.to_string(), process_id: pid, session_id: session.to_string() })
}
