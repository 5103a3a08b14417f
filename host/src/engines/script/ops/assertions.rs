//! Script assertions: host evidence (call results and capture watermarks) a
//! script may assert on, accepted only unchanged and current.

use super::*;

pub(super) fn assertion_verdict(s: &mut State, op_id: &str, a: &Value) -> Value {
    let name = a["name"].as_str().unwrap_or("assertion").to_string();
    let evidence = a.get("evidence").filter(|e| !e.is_null());
    let scope = a["scope"].as_str().map(str::to_string).unwrap_or_else(|| if evidence.is_some() { "device".into() } else { "code".into() });
    let condition = a.get("condition").and_then(Value::as_bool);
    let required: Vec<&str> = match a.get("requiredEvidence") {
        Some(Value::String(r)) => vec![r.as_str()],
        Some(Value::Array(l)) => l.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let (verdict, reason): (&str, Option<&str>) = match (condition, scope.as_str()) {
        (None, _) => ("inconclusive", Some("condition_not_boolean")),
        (Some(c), "code") => (if c { "passed" } else { "failed" }, None),
        (Some(_), _) if !matches!(a.get("requireCoverage"), None | Some(Value::Bool(true))) && a.get("requireCoverage") != Some(&json!("complete")) => {
            // Only complete coverage can decide a device assertion; asking for less does not lower the bar.
            ("inconclusive", Some("coverage_requirement_unsupported"))
        }
        (Some(c), _) => match evidence {
            None => ("inconclusive", Some("evidence_required")),
            Some(e) if !e.is_object() => ("inconclusive", Some("evidence_not_issued")),
            Some(e) => {
                let call_id = e["callId"].as_str().unwrap_or_default();
                let issued = s.issued.get(call_id);
                let covers = |r: &str| e["command"].as_str() == Some(r) || e["coverage"]["scope"].as_str() == Some(r) || e["capture"]["stream"].as_str() == Some(r);
                if e["issuer"] != json!("aab-host") || e["operationId"].as_str() != Some(op_id) {
                    ("inconclusive", Some("evidence_foreign"))
                } else {
                    match issued {
                        None => ("inconclusive", Some("evidence_not_issued")),
                        Some((digest, _)) if *digest != canonical_sha256(e) => ("inconclusive", Some("evidence_modified")),
                        Some((_, window)) if *window != s.window || e["window"].as_u64() != Some(*window) => ("inconclusive", Some("evidence_outside_action_window")),
                        Some(_) if s.inflight_mutations > 0 => ("inconclusive", Some("mutation_in_flight")),
                        Some(_) if s.ambiguous => ("inconclusive", Some("ambiguous_action")),
                        Some(_) if e["coverage"]["status"] != json!("complete") => ("inconclusive", Some("coverage_incomplete")),
                        Some(_) if !required.iter().all(|r| covers(r)) => ("inconclusive", Some("required_evidence_missing")),
                        Some(_) => match e.get("capture").filter(|c| c.is_object()) {
                            Some(capture) => match capture_reason(s, capture) {
                                Some(reason) => ("inconclusive", Some(reason)),
                                None => (if c { "passed" } else { "failed" }, None),
                            },
                            None => (if c { "passed" } else { "failed" }, None),
                        },
                    }
                }
            }
        },
    };
    let v = json!({"verdict": verdict, "name": name, "scope": scope, "reason": reason});
    s.emit(&format!("assertion_{verdict}"), json!({"name": name, "scope": scope, "reason": reason}));
    v
}

/// Why evidence of a capture read cannot decide an assertion, if it cannot: the
/// read must cover its whole window (no continuation page, nothing left), and its
/// lower bound (`factCursor`) must be a watermark this operation was issued by an
/// earlier read of the same stream and target, with complete coverage, before the
/// latest action (a watermark taken after it moved past the action).
pub(super) fn capture_reason(s: &State, capture: &Value) -> Option<&'static str> {
    if capture["continuation"] == json!(true) || capture["hasMore"] == json!(true) {
        return Some("capture_window_incomplete");
    }
    let Some(lower) = capture["factCursor"].as_str() else { return Some("capture_watermark_missing") };
    let Some(w) = s.watermarks.get(lower) else { return Some("capture_watermark_not_issued") };
    if w.stream != capture["stream"] || w.target != capture["target"] {
        return Some("capture_watermark_foreign");
    }
    if w.coverage != json!("complete") {
        return Some("capture_watermark_incomplete");
    }
    if w.window >= s.window {
        return Some("capture_watermark_not_pre_action");
    }
    None
}
