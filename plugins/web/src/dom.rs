//! Host-side checks of a page's DOM snapshot (`aab.web-dom-target/v1`, §6.5): the
//! `pageRef` must have exactly its keys and name the addressed target, `dom.url`
//! must equal `pageRef.url`, element ids must be unique, and every control must
//! carry the observation fields an agent relies on — including `checked`, which is
//! never substituted when missing (`invalid_web_dom_control`).

use std::collections::HashSet;

use aab_plugin_api::ProviderError;
use serde_json::{Value, json};

use crate::wire::{DOM_TARGET_SCHEMA, TARGET_ID};

const PAGE_REF_KEYS: [&str; 6] = ["schemaVersion", "sessionId", "runtimeEpoch", "targetId", "navigationId", "url"];
const INTERACTION: [&str; 5] = ["ready", "obscured", "disabled", "hidden", "outside-viewport"];

fn target_error(message: String) -> ProviderError {
    ProviderError::new("invalid_web_dom_target", message).not_dispatched()
}

fn control_error(index: usize, message: String) -> ProviderError {
    ProviderError::new("invalid_web_dom_control", format!("control {index}: {message}")).with_details(json!({"index": index})).not_dispatched()
}

fn is_hex32(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_element_id(s: &str) -> bool {
    s.len() >= 2 && s.starts_with('e') && s[1..].bytes().all(|b| b.is_ascii_digit()) && !s[1..].starts_with('0')
}

/// Check a `pageRef` against the addressed target.
pub fn check_page_ref(page_ref: &Value, session_id: &str, runtime_epoch: &str) -> Result<(), ProviderError> {
    let Some(map) = page_ref.as_object() else { return Err(target_error("`pageRef` must be an object".into())) };
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = PAGE_REF_KEYS.to_vec();
    expected.sort_unstable();
    if keys != expected {
        return Err(target_error(format!("`pageRef` must have exactly the keys {expected:?}, got {keys:?}")));
    }
    let s = |k: &str| map.get(k).and_then(Value::as_str);
    if s("schemaVersion") != Some(DOM_TARGET_SCHEMA) {
        return Err(target_error(format!("`pageRef.schemaVersion` must be {DOM_TARGET_SCHEMA}")));
    }
    if s("sessionId") != Some(session_id) || s("runtimeEpoch") != Some(runtime_epoch) || s("targetId") != Some(TARGET_ID) {
        return Err(target_error("`pageRef` names a different session, document or target than the one addressed".into()));
    }
    if !s("navigationId").is_some_and(is_hex32) {
        return Err(target_error("`pageRef.navigationId` must be 32 lowercase hex characters".into()));
    }
    if s("url").is_none() {
        return Err(target_error("`pageRef.url` must be a string".into()));
    }
    Ok(())
}

/// Check a whole snapshot.
pub fn check_snapshot(dom: &Value, session_id: &str, runtime_epoch: &str) -> Result<(), ProviderError> {
    if !dom.is_object() {
        return Err(target_error("`dom` must be an object".into()));
    }
    if dom.get("targetSchema").and_then(Value::as_str) != Some(DOM_TARGET_SCHEMA) {
        return Err(target_error(format!("`dom.targetSchema` must be {DOM_TARGET_SCHEMA}")));
    }
    let page_ref = dom.get("pageRef").ok_or_else(|| target_error("`dom.pageRef` is missing".into()))?;
    check_page_ref(page_ref, session_id, runtime_epoch)?;
    if dom.get("url") != page_ref.get("url") {
        return Err(target_error("`dom.url` differs from `pageRef.url`".into()));
    }
    for key in ["truncated", "bodyTextTruncated"] {
        if !dom.get(key).is_some_and(Value::is_boolean) {
            return Err(target_error(format!("`dom.{key}` must be a boolean")));
        }
    }
    if !dom.get("controlCount").is_some_and(Value::is_u64) {
        return Err(target_error("`dom.controlCount` must be a non-negative integer".into()));
    }
    let Some(controls) = dom.get("controls").and_then(Value::as_array) else {
        return Err(target_error("`dom.controls` must be an array".into()));
    };
    let mut ids = HashSet::new();
    for (i, c) in controls.iter().enumerate() {
        let Some(id) = c.get("elementId").and_then(Value::as_str).filter(|s| is_element_id(s)) else {
            return Err(control_error(i, "`elementId` must look like e<n>".into()));
        };
        if !ids.insert(id) {
            return Err(control_error(i, format!("duplicate elementId {id}")));
        }
        for key in ["visible", "disabled", "editable"] {
            if !c.get(key).is_some_and(Value::is_boolean) {
                return Err(control_error(i, format!("`{key}` must be a boolean")));
            }
        }
        match c.get("checked") {
            Some(Value::Bool(_) | Value::Null) => {}
            Some(Value::String(s)) if s == "mixed" => {}
            Some(other) => return Err(control_error(i, format!("`checked` must be true, false, \"mixed\" or null, got {other}"))),
            None => return Err(control_error(i, "`checked` is missing (use a current Web SDK)".into())),
        }
        match c.get("ariaChecked") {
            Some(Value::String(_) | Value::Null) => {}
            _ => return Err(control_error(i, "`ariaChecked` must be a string or null".into())),
        }
        let status = c.pointer("/interaction/status").and_then(Value::as_str);
        if !status.is_some_and(|s| INTERACTION.contains(&s)) {
            return Err(control_error(i, format!("`interaction.status` must be one of {INTERACTION:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_ref() -> Value {
        json!({"schemaVersion": DOM_TARGET_SCHEMA, "sessionId": "s", "runtimeEpoch": "r", "targetId": "main",
               "navigationId": "0123456789abcdef0123456789abcdef", "url": "http://x/"})
    }

    fn dom(controls: Value) -> Value {
        json!({"ok": true, "targetSchema": DOM_TARGET_SCHEMA, "url": "http://x/", "pageRef": page_ref(), "controls": controls,
               "controlCount": 1, "truncated": false, "bodyTextTruncated": false})
    }

    fn control() -> Value {
        json!({"elementId": "e1", "visible": true, "disabled": false, "editable": false, "checked": null, "ariaChecked": null,
               "interaction": {"status": "ready", "point": {"x": 1, "y": 1}}})
    }

    #[test]
    fn accepts_a_valid_snapshot() {
        check_snapshot(&dom(json!([control()])), "s", "r").unwrap();
    }

    #[test]
    fn refuses_missing_checked_and_duplicates() {
        let mut c = control();
        c.as_object_mut().unwrap().remove("checked");
        assert_eq!(check_snapshot(&dom(json!([c])), "s", "r").unwrap_err().error, "invalid_web_dom_control");
        assert_eq!(check_snapshot(&dom(json!([control(), control()])), "s", "r").unwrap_err().error, "invalid_web_dom_control");
        let mut c = control();
        c["checked"] = json!("yes");
        assert!(check_snapshot(&dom(json!([c])), "s", "r").is_err());
    }

    #[test]
    fn refuses_foreign_or_malformed_page_refs() {
        assert_eq!(check_snapshot(&dom(json!([])), "s", "other").unwrap_err().error, "invalid_web_dom_target");
        let mut d = dom(json!([]));
        d["pageRef"]["extra"] = json!(1);
        assert!(check_snapshot(&d, "s", "r").is_err());
        let mut d = dom(json!([]));
        d["url"] = json!("http://y/");
        assert!(check_snapshot(&d, "s", "r").is_err());
    }
}
