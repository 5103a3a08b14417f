//! Runner identity on the wire (protocols §5.2): the `X-AAB-WDA-*` headers every
//! request carries (the Runner refuses a request meant for another process before
//! routing it) and the `wdaBinding` every response must carry. A response is
//! believed only after its binding equals the descriptor's five fields exactly;
//! then `value.error` is a failure whatever the HTTP status says.

use serde_json::{Value, json};

use super::DESCRIPTOR_SCHEMA;
use super::codes::*;
use super::descriptor::Descriptor;
use crate::ProviderError;

/// The App (and session) a targeted request is for: the Runner checks them against
/// its bound session and the foreground App/PID before it serves the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub bundle_id: String,
    pub process_id: u64,
    /// Absent only for `session-create` (no session exists yet).
    pub session_id: Option<String>,
}

impl Target {
    /// The `target` member of a managed action body.
    pub fn to_json(&self) -> Value {
        let mut t = json!({"bundleId": self.bundle_id, "processId": self.process_id});
        if let Some(s) = &self.session_id {
            t["sessionId"] = json!(s);
        }
        t
    }
}

/// The identity headers (each name once), plus the target headers when given.
pub fn headers(d: &Descriptor, target: Option<&Target>) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("X-AAB-WDA-Schema", DESCRIPTOR_SCHEMA.to_string()),
        ("X-AAB-WDA-Bundle-Id", d.bundle_id.clone()),
        ("X-AAB-WDA-Runtime-Epoch", d.runtime_epoch.clone()),
        ("X-AAB-WDA-Process-Id", d.process_id.to_string()),
        // The Runner's own port, even when aab reaches it through a forward (wdaUrl).
        ("X-AAB-WDA-Port", d.port.to_string()),
    ];
    if let Some(t) = target {
        h.push(("X-AAB-WDA-Target-Bundle-Id", t.bundle_id.clone()));
        h.push(("X-AAB-WDA-Target-Process-Id", t.process_id.to_string()));
        if let Some(s) = &t.session_id {
            h.push(("X-AAB-WDA-Session-Id", s.clone()));
        }
    }
    h
}

/// The response's binding must be exactly the descriptor's identity.
pub fn check_binding(d: &Descriptor, body: &Value) -> Result<(), ProviderError> {
    let found = body.get("wdaBinding");
    if found == Some(&d.binding()) {
        return Ok(());
    }
    let why = if found.is_none_or(Value::is_null) { "carries no wdaBinding" } else { "is bound to another Runner process" };
    Err(ProviderError::new(IOS_WDA_BINDING_MISMATCH, format!("the WDA response {why}: it cannot be believed")).with_details(json!({"expected": d.binding(), "received": found})))
}

/// The believed `value` of a response: binding first, then the response shape,
/// then `value.error` (a failure even on HTTP 200, with the Runner's own code).
pub fn value_of(d: &Descriptor, status: u16, body: &Value) -> Result<Value, ProviderError> {
    check_binding(d, body)?;
    let Some(value) = body.get("value") else {
        return Err(ProviderError::new(IOS_WDA_PROTOCOL_ERROR, format!("the WDA response (HTTP {status}) has no value")).with_details(json!({"httpStatus": status})));
    };
    if value.get("error").and_then(Value::as_str).is_some_and(|c| !c.is_empty()) {
        // Any error fails the request; only a code-shaped one is relayed as the code.
        let code = crate::ids::peer_code(value.get("error")).unwrap_or(IOS_WDA_PROTOCOL_ERROR);
        let message = crate::ids::peer_message(value.get("message")).unwrap_or_else(|| "the Runner refused the request".to_string());
        return Err(ProviderError::new(code, message).with_details(json!({"httpStatus": status, "value": value})));
    }
    if !(200..300).contains(&status) {
        return Err(ProviderError::new(IOS_WDA_PROTOCOL_ERROR, format!("the Runner answered HTTP {status} without an error code")).with_details(json!({"httpStatus": status, "value": value})));
    }
    Ok(value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> Descriptor {
        Descriptor { bundle_id: "r.xctrunner".into(), runtime_epoch: "E1".into(), process_id: 7, port: 8100 }
    }

    #[test]
    fn headers_carry_the_identity_once_and_the_target_when_given() {
        let h = headers(&d(), None);
        let names: Vec<_> = h.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["X-AAB-WDA-Schema", "X-AAB-WDA-Bundle-Id", "X-AAB-WDA-Runtime-Epoch", "X-AAB-WDA-Process-Id", "X-AAB-WDA-Port"]);
        assert_eq!(h[4].1, "8100");
        let t = Target { bundle_id: "com.example".into(), process_id: 42, session_id: Some("S1".into()) };
        let h = headers(&d(), Some(&t));
        assert_eq!(h.len(), 8);
        assert!(h.contains(&("X-AAB-WDA-Session-Id", "S1".into())) && h.contains(&("X-AAB-WDA-Target-Process-Id", "42".into())));
        let create = Target { session_id: None, ..t };
        assert_eq!(headers(&d(), Some(&create)).len(), 7);
        assert_eq!(create.to_json(), json!({"bundleId": "com.example", "processId": 42}));
    }

    #[test]
    fn a_body_is_believed_only_with_the_exact_binding() {
        let ok = json!({"wdaBinding": d().binding(), "sessionId": null, "value": {"ready": true}});
        assert_eq!(value_of(&d(), 200, &ok).unwrap(), json!({"ready": true}));
        let mut other = ok.clone();
        other["wdaBinding"]["runtimeEpoch"] = json!("E2");
        assert_eq!(value_of(&d(), 200, &other).unwrap_err().error, IOS_WDA_BINDING_MISMATCH);
        let mut extra = ok.clone();
        extra["wdaBinding"]["extra"] = json!(1);
        assert_eq!(value_of(&d(), 200, &extra).unwrap_err().error, IOS_WDA_BINDING_MISMATCH);
        assert_eq!(value_of(&d(), 200, &json!({"value": {}})).unwrap_err().error, IOS_WDA_BINDING_MISMATCH);
        // A mismatched binding wins over the error the body claims.
        let mut refused = other.clone();
        refused["value"] = json!({"error": "ios_wda_session_changed", "message": "m"});
        assert_eq!(value_of(&d(), 409, &refused).unwrap_err().error, IOS_WDA_BINDING_MISMATCH);
    }

    #[test]
    fn value_error_fails_even_on_http_200() {
        let body = json!({"wdaBinding": d().binding(), "value": {"error": "ios_wda_target_changed", "message": "switched"}});
        let e = value_of(&d(), 200, &body).unwrap_err();
        assert_eq!((e.error.as_str(), e.message.as_str()), ("ios_wda_target_changed", "switched"));
        // A hostile code is never relayed, yet still fails the request.
        let body = json!({"wdaBinding": d().binding(), "value": {"error": "not a code ".repeat(1000), "message": "m".repeat(100_000)}});
        let e = value_of(&d(), 200, &body).unwrap_err();
        assert_eq!((e.error.as_str(), e.message.chars().count()), (IOS_WDA_PROTOCOL_ERROR, crate::ids::MAX_PEER_MESSAGE));
        let e = value_of(&d(), 500, &json!({"wdaBinding": d().binding(), "value": {}})).unwrap_err();
        assert_eq!(e.error, IOS_WDA_PROTOCOL_ERROR);
        assert_eq!(value_of(&d(), 200, &json!({"wdaBinding": d().binding()})).unwrap_err().error, IOS_WDA_PROTOCOL_ERROR);
    }
}
