//! The shared DOM renderer's element contract (protocols §8) as every provider
//! that drives a WebView through it binds actions: a selector binds exactly one
//! visible control, a control's identity is its eight fields, and an action is
//! refused (`reobserve_required`, `<prefix>target_changed`, …) when the page or
//! the element changed since the caller observed it. Android WebViews, Flutter H5
//! adapters and iOS WKWebViews differ only in their error prefix and page
//! reference, so this is one implementation.

use serde_json::{Map, Value, json};

use crate::ProviderError;

/// The caller's view is stale: observe again (never dispatched).
pub const REOBSERVE_REQUIRED: &str = "reobserve_required";
/// A control's identity, in payload order.
pub const ELEMENT_KEYS: [&str; 8] = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"];
/// A selector names exactly one of these (optionally narrowed by `tag`).
pub const SELECTOR_KEYS: [&str; 3] = ["elementId", "text", "ariaLabel"];
/// Candidates listed in an ambiguity refusal.
pub const MAX_CANDIDATES: usize = 20;

fn refuse(code: String, message: String) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

/// The page the caller observed must be the page on screen now (every field of
/// either reference: runtime, process, view, document generation, URL, …).
pub fn check_page(expected: &Value, current: &Value, field: &str) -> Result<(), ProviderError> {
    if expected == current {
        return Ok(());
    }
    // Every field of either reference (both schemas: Android's nine, Flutter H5's six).
    let mut keys: Vec<&str> = current.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    if let Some(o) = expected.as_object() {
        keys.extend(o.keys().map(String::as_str).filter(|k| current.get(*k).is_none()));
    }
    let changed: Vec<&str> = keys.into_iter().filter(|k| expected.get(*k) != current.get(*k)).collect();
    Err(refuse(REOBSERVE_REQUIRED.into(), format!("the page changed since it was observed ({}): observe again", changed.join(", ")))
        .with_field(field)
        .with_details(json!({"changed": changed, "expectedPage": expected, "currentPage": current})))
}

/// A control's identity fields as the action payload carries them: exactly the
/// eight fields, strings (absent or null → "").
pub fn element(control: &Value) -> Value {
    let m: Map<String, Value> = ELEMENT_KEYS.iter().map(|k| (k.to_string(), json!(control.get(*k).and_then(Value::as_str).unwrap_or("")))).collect();
    Value::Object(m)
}

/// The control bound now must be the element the caller observed (same
/// `elementId`, identical identity fields): a replaced node, even with identical
/// HTML, has a new `elementId`.
pub fn check_element(expected: &Value, control: &Value, prefix: &str) -> Result<(), ProviderError> {
    let (want, have) = (element(expected), element(control));
    if want == have {
        return Ok(());
    }
    let changed: Vec<&str> = ELEMENT_KEYS.iter().copied().filter(|k| want[*k] != have[*k]).collect();
    Err(refuse(format!("{prefix}target_changed"), format!("the control the selector binds now is not the observed element ({} differ)", changed.join(", ")))
        .with_field("expectedTarget")
        .with_details(json!({"changed": changed, "expected": want, "current": have})))
}

pub fn summary(c: &Value) -> Value {
    json!({"elementId": c["elementId"], "tag": c["tag"], "id": c["id"], "text": c["text"], "ariaLabel": c["ariaLabel"], "visible": c["visible"], "bounds": c["bounds"]})
}

/// Bind `selector` to exactly one `visible:true` control of `dom`. A truncated
/// snapshot binds only by `elementId` (a text match among the first 1000 controls
/// proves nothing about the rest).
pub fn select(dom: &Value, selector: &Value, prefix: &str) -> Result<Value, ProviderError> {
    let Some((key, want)) = SELECTOR_KEYS.iter().find_map(|k| selector.get(*k).map(|v| (*k, v))) else {
        return Err(refuse("invalid_argument".into(), "the selector names none of elementId, text, ariaLabel".into()).with_field("selector"));
    };
    if dom.get("truncated") == Some(&Value::Bool(true)) && key != "elementId" {
        return Err(refuse(format!("{prefix}snapshot_truncated"), format!("the snapshot is truncated ({} controls, first 1000 listed): select by an observed elementId", dom["controlCount"]))
            .with_field("selector")
            .with_details(json!({"controlCount": dom.get("controlCount"), "truncated": true})));
    }
    let tag = selector.get("tag").and_then(Value::as_str);
    let controls = dom.get("controls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let matches = |c: &&Value| c.get(key) == Some(want) && tag.is_none_or(|t| c.get("tag").and_then(Value::as_str).is_some_and(|ct| ct.eq_ignore_ascii_case(t)));
    let all: Vec<&Value> = controls.iter().filter(matches).collect();
    let visible: Vec<&Value> = all.iter().copied().filter(|c| c.get("visible") == Some(&Value::Bool(true))).collect();
    match visible.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(refuse(format!("{prefix}selector_not_found"), format!("no visible control has {key} = {want}{}", tag.map(|t| format!(" and tag {t}")).unwrap_or_default()))
            .with_field("selector")
            .with_details(json!({"selector": selector, "hiddenMatches": all.len(), "controlCount": dom.get("controlCount")}))),
        many => Err(refuse(format!("{prefix}selector_ambiguous"), format!("{} visible controls have {key} = {want}: select by elementId (or add tag)", many.len()))
            .with_field("selector")
            .with_details(json!({"selector": selector, "matches": many.len(), "candidates": many.iter().take(MAX_CANDIDATES).map(|c| summary(c)).collect::<Vec<_>>()}))),
    }
}
