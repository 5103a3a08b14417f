//! Validation of a managed action body (protocols §5.4) into an [`ActionRequest`].
//! Everything here is pure: a rejected body never reaches the admission slot
//! or the screen, so its 409 reply proves non-dispatch.

use serde_json::{Map, Value, json};

use super::binding::Rejection;
use super::ids;

pub const EXECUTION_SCHEMA: &str = "aab.wda-execution/v1";
const MAX_COORDINATE: f64 = 100_000.0;
const MAX_SWIPE_MS: u64 = 120_000;
const MAX_TEXT_BYTES: usize = 64 * 1024;
const MAX_ELEMENT_ID: usize = 1024;
const ORIENTATIONS: [&str; 4] = ["portrait", "landscapeLeft", "landscapeRight", "portraitUpsideDown"];

/// The element a native action was resolved against (`targetRef`).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetRef {
    pub element_id: String,
    pub element_type: String,
    pub identifier: Option<String>,
    pub label: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    SessionCreate,
    SessionClose,
    Tap { x: f64, y: f64 },
    Swipe { start: (f64, f64), end: (f64, f64), duration_ms: u64 },
    Input { element_id: String, text: String, clear_first: bool },
    NativeTap { target_ref: TargetRef },
    NativeInput { target_ref: TargetRef, text: String, clear_first: bool },
    SetOrientation { orientation: String },
}

impl Operation {
    pub fn name(&self) -> &'static str {
        match self {
            Operation::SessionCreate => "session-create",
            Operation::SessionClose => "session-close",
            Operation::Tap { .. } => "tap",
            Operation::Swipe { .. } => "swipe",
            Operation::Input { .. } => "input",
            Operation::NativeTap { .. } => "native-tap",
            Operation::NativeInput { .. } => "native-input",
            Operation::SetOrientation { .. } => "set-orientation",
        }
    }
}

/// The App (and, except for `session-create`, the session) an action addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub bundle_id: String,
    pub process_id: u32,
    pub session_id: Option<String>,
}

impl Target {
    pub fn to_json(&self) -> Value {
        let mut t = json!({ "bundleId": self.bundle_id, "processId": self.process_id });
        if let Some(s) = &self.session_id {
            t["sessionId"] = json!(s);
        }
        t
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ActionRequest {
    pub action_id: String,
    pub timeout_ms: u64,
    pub target: Target,
    pub operation: Operation,
}

fn reject(code: &'static str, message: impl Into<String>) -> Rejection {
    Rejection::new(code, message)
}

fn exact_keys(obj: &Map<String, Value>, required: &[&str], optional: &[&str], code: &'static str, what: &str) -> Result<(), Rejection> {
    for k in obj.keys() {
        if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
            return Err(reject(code, format!("{what} has unknown key {k:?}")));
        }
    }
    for k in required {
        if !obj.contains_key(*k) {
            return Err(reject(code, format!("{what} requires {k:?}")));
        }
    }
    Ok(())
}

fn object<'a>(v: &'a Value, code: &'static str, what: &str) -> Result<&'a Map<String, Value>, Rejection> {
    v.as_object().ok_or_else(|| reject(code, format!("{what} must be an object")))
}

/// Parses and validates a `POST /aab/action` body for the Runner `epoch`.
pub fn parse(body: &Value, epoch: &str) -> Result<ActionRequest, Rejection> {
    let obj = object(body, "invalid_ios_wda_action", "the action body")?;
    exact_keys(obj, &["operation", "target", "payload", "actionId", "execution"], &[], "invalid_ios_wda_action", "the action body")?;
    let action_id = match &obj["actionId"] {
        Value::String(s) if ids::valid_token(s) => s.clone(),
        _ => return Err(reject("invalid_ios_wda_execution", "actionId must be 1..256 visible ASCII characters")),
    };
    let timeout_ms = parse_execution(&obj["execution"], &action_id, epoch)?;
    let op_name = obj["operation"].as_str().unwrap_or_default();
    let payload = &obj["payload"];
    let operation = parse_operation(op_name, payload)?;
    let target = parse_target(&obj["target"], !matches!(operation, Operation::SessionCreate))?;
    Ok(ActionRequest { action_id, timeout_ms, target, operation })
}

fn parse_execution(v: &Value, action_id: &str, epoch: &str) -> Result<u64, Rejection> {
    let code = "invalid_ios_wda_execution";
    let e = object(v, code, "execution")?;
    exact_keys(e, &["schemaVersion", "actionId", "runtimeEpoch", "timeoutMs"], &[], code, "execution")?;
    if e["schemaVersion"] != EXECUTION_SCHEMA {
        return Err(reject(code, format!("execution.schemaVersion must be {EXECUTION_SCHEMA}")));
    }
    if e["actionId"] != action_id {
        return Err(reject(code, "execution.actionId must equal actionId"));
    }
    let Some(run_epoch) = e["runtimeEpoch"].as_str() else { return Err(reject(code, "execution.runtimeEpoch must be a string")) };
    if !ids::valid_epoch(run_epoch) {
        return Err(reject(code, "execution.runtimeEpoch is not a runtime epoch"));
    }
    if run_epoch != epoch {
        return Err(reject("ios_wda_binding_mismatch", "execution.runtimeEpoch names another Runner process"));
    }
    match e["timeoutMs"].as_u64() {
        Some(t) if (1..=i32::MAX as u64).contains(&t) => Ok(t),
        _ => Err(reject(code, "execution.timeoutMs must be an integer 1..2147483647")),
    }
}

fn parse_target(v: &Value, with_session: bool) -> Result<Target, Rejection> {
    let code = "invalid_ios_wda_action";
    let t = object(v, code, "target")?;
    let keys: &[&str] = if with_session { &["bundleId", "processId", "sessionId"] } else { &["bundleId", "processId"] };
    exact_keys(t, keys, &[], code, "target")?;
    let bundle_id = match t["bundleId"].as_str() {
        Some(b) if ids::valid_bundle_id(b) => b.to_string(),
        _ => return Err(reject(code, "target.bundleId must match [A-Za-z0-9_.-]{1,255}")),
    };
    let process_id = match t["processId"].as_u64() {
        Some(p) if (1..=u32::MAX as u64).contains(&p) => p as u32,
        _ => return Err(reject(code, "target.processId must be a positive integer")),
    };
    let session_id = if with_session {
        match t["sessionId"].as_str() {
            Some(s) if ids::valid_token(s) => Some(s.to_string()),
            _ => return Err(reject(code, "target.sessionId must be a session id")),
        }
    } else {
        None
    };
    Ok(Target { bundle_id, process_id, session_id })
}

fn coordinate(p: &Map<String, Value>, key: &str) -> Result<f64, Rejection> {
    match p[key].as_f64() {
        Some(x) if x.is_finite() && (0.0..=MAX_COORDINATE).contains(&x) => Ok(x),
        _ => Err(reject("invalid_ios_wda_coordinate", format!("payload.{key} must be a number 0..100000"))),
    }
}

fn text(p: &Map<String, Value>) -> Result<String, Rejection> {
    match p["text"].as_str() {
        Some(t) if t.len() <= MAX_TEXT_BYTES => Ok(t.to_string()),
        Some(_) => Err(reject("invalid_ios_wda_input", "payload.text is longer than 64 KiB")),
        None => Err(reject("invalid_ios_wda_input", "payload.text must be a string")),
    }
}

fn clear_first(p: &Map<String, Value>) -> Result<bool, Rejection> {
    match p.get("clearFirst") {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(reject("invalid_ios_wda_input", "payload.clearFirst must be a boolean")),
    }
}

fn element_id(v: &Value, code: &'static str, what: &str) -> Result<String, Rejection> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= MAX_ELEMENT_ID => Ok(s.to_string()),
        _ => Err(reject(code, format!("{what} must be a non-empty string"))),
    }
}

fn nullable_string(v: &Value, what: &str) -> Result<Option<String>, Rejection> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.len() <= MAX_TEXT_BYTES => Ok(Some(s.clone())),
        _ => Err(reject("invalid_ios_native_target", format!("{what} must be a string or null"))),
    }
}

fn target_ref(v: &Value) -> Result<TargetRef, Rejection> {
    let code = "invalid_ios_native_target";
    let t = object(v, code, "payload.targetRef")?;
    exact_keys(t, &["elementId", "type", "identifier", "label"], &[], code, "payload.targetRef")?;
    let element_type = match t["type"].as_str() {
        Some(s) if !s.is_empty() && s.len() <= 256 => s.to_string(),
        _ => return Err(reject(code, "payload.targetRef.type must be a non-empty string")),
    };
    Ok(TargetRef {
        element_id: element_id(&t["elementId"], code, "payload.targetRef.elementId")?,
        element_type,
        identifier: nullable_string(&t["identifier"], "payload.targetRef.identifier")?,
        label: nullable_string(&t["label"], "payload.targetRef.label")?,
    })
}

fn parse_operation(name: &str, payload: &Value) -> Result<Operation, Rejection> {
    let code = "invalid_ios_wda_action";
    let empty = Map::new();
    let p = match payload {
        Value::Null => &empty,
        other => object(other, code, "payload")?,
    };
    let keys = |required: &[&str], optional: &[&str]| exact_keys(p, required, optional, code, "payload");
    Ok(match name {
        "session-create" | "session-close" => {
            keys(&[], &[])?;
            if name == "session-create" { Operation::SessionCreate } else { Operation::SessionClose }
        }
        "tap" => {
            keys(&["x", "y"], &[])?;
            Operation::Tap { x: coordinate(p, "x")?, y: coordinate(p, "y")? }
        }
        "swipe" => {
            keys(&["startX", "startY", "endX", "endY", "durationMs"], &[])?;
            let start = (coordinate(p, "startX")?, coordinate(p, "startY")?);
            let end = (coordinate(p, "endX")?, coordinate(p, "endY")?);
            let duration_ms = match p["durationMs"].as_u64() {
                Some(d) if (1..=MAX_SWIPE_MS).contains(&d) => d,
                _ => return Err(reject("invalid_ios_wda_duration", "payload.durationMs must be an integer 1..120000")),
            };
            Operation::Swipe { start, end, duration_ms }
        }
        "input" => {
            keys(&["elementId", "text"], &["clearFirst"])?;
            Operation::Input { element_id: element_id(&p["elementId"], "invalid_ios_wda_input", "payload.elementId")?, text: text(p)?, clear_first: clear_first(p)? }
        }
        "native-tap" => {
            keys(&["targetRef"], &[])?;
            Operation::NativeTap { target_ref: target_ref(&p["targetRef"])? }
        }
        "native-input" => {
            keys(&["targetRef", "text"], &["clearFirst"])?;
            Operation::NativeInput { target_ref: target_ref(&p["targetRef"])?, text: text(p)?, clear_first: clear_first(p)? }
        }
        "set-orientation" => {
            keys(&["orientation"], &[])?;
            match p["orientation"].as_str() {
                Some(o) if ORIENTATIONS.contains(&o) => Operation::SetOrientation { orientation: o.to_string() },
                _ => return Err(reject("invalid_ios_wda_orientation", "payload.orientation must be portrait, landscapeLeft, landscapeRight or portraitUpsideDown")),
            }
        }
        other => return Err(reject(code, format!("unknown operation {other:?}"))),
    })
}
