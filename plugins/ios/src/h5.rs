//! The host side of the SDK's iOS H5 (WKWebView) protocol (aab-protocols §4.7,
//! §8): the snapshot (`GET /v1/h5/dom[?webViewId=]`) and its checks, the page
//! reference `aab.ios-h5-target/v1` (exactly `schemaVersion, runtimeEpoch,
//! bundleId, processId, webViewId, documentId, url`), the control selector
//! (exactly one of `elementId` | exact `text` | exact `ariaLabel`, optionally
//! `tag`) bound to ONE visible control of a fresh snapshot, and the caller's
//! observed binding (`expectedTarget {pageRef, element}`, `expectedPage`). Every
//! refusal here happens before dispatch.

use serde_json::{Map, Value, json};

use aab_ios_transport::sdk::{self, H5_TARGET_SCHEMA, query_value};
use aab_plugin_api::ProviderError;

pub use aab_plugin_api::h5::{ELEMENT_KEYS, SELECTOR_KEYS};
/// The snapshot answer is not the §4.7 shape.
pub const INVALID_H5_SNAPSHOT: &str = "invalid_ios_h5_snapshot";
pub const PREFIX: &str = "ios_h5_";
pub const PAGE_REF_KEYS: [&str; 7] = ["schemaVersion", "runtimeEpoch", "bundleId", "processId", "webViewId", "documentId", "url"];

// ---- schema pieces ----------------------------------------------------------

pub fn web_view_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": "The WKWebView to use (a webViewId ios-h5-dom returned); default: the single visible one"})
}

pub fn selector_schema() -> Value {
    let string = |max: u64, d: &str| json!({"type": "string", "minLength": 1, "maxLength": max, "description": d});
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One visible control of a fresh snapshot: exactly one of elementId (from ios-h5-dom), exact text or exact ariaLabel, optionally qualified by tag. A truncated snapshot (more than 1000 controls) needs elementId.",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[0-9]{1,15}$", "description": "elementId of a control observed with ios-h5-dom"},
            "text": string(500, "Exact text of the control"),
            "ariaLabel": string(1024, "Exact aria-label of the control"),
            "tag": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,63}$", "description": "Lower-case tag name the control must have"}
        },
        "oneOf": SELECTOR_KEYS.iter().map(|k| json!({"required": [k]})).collect::<Vec<_>>()
    })
}

/// The `pageRef` of an earlier `ios-h5-dom`, unchanged.
pub fn page_ref_schema() -> Value {
    let text = |d: &str| json!({"type": "string", "minLength": 1, "maxLength": 65536, "description": d});
    json!({
        "type": "object", "additionalProperties": false, "required": PAGE_REF_KEYS,
        "description": "pageRef (aab.ios-h5-target/v1) of an earlier ios-h5-dom, unchanged",
        "properties": {
            "schemaVersion": {"const": H5_TARGET_SCHEMA},
            "runtimeEpoch": text("SDK runtime epoch"), "bundleId": text("App bundle id"),
            "processId": {"type": "integer", "minimum": 1, "maximum": 9007199254740991u64},
            "webViewId": text("WebView id"), "documentId": text("Renderer document id"), "url": text("Document URL")
        }
    })
}

pub fn expected_target_schema() -> Value {
    let field = json!({"type": ["string", "null"], "maxLength": 65536});
    let props: Map<String, Value> = ELEMENT_KEYS.iter().map(|k| (k.to_string(), field.clone())).collect();
    json!({
        "type": "object", "additionalProperties": false, "required": ["pageRef", "element"],
        "description": "The observed binding: pageRef and the control's identity fields from an earlier ios-h5-dom; refused (reobserve_required / ios_h5_target_changed) unless the fresh snapshot still shows them",
        "properties": {
            "pageRef": page_ref_schema(),
            "element": {"type": "object", "additionalProperties": false, "required": ELEMENT_KEYS, "properties": props}
        }
    })
}

// ---- snapshot -----------------------------------------------------------------

pub fn dom_path(web_view_id: Option<&str>) -> String {
    match web_view_id {
        Some(id) => format!("/v1/h5/dom?webViewId={}", query_value(id)),
        None => "/v1/h5/dom".to_string(),
    }
}

/// A snapshot's checks: `ok:false` keeps the SDK's code (with its candidate
/// `webViews`; a WebView choice names `webViewId`); `ok:true` must carry the
/// target schema, a 7-field `pageRef` of this runtime and `dom.controls` with
/// unique element ids. An old SDK without the target schema is
/// `ios_h5_target_schema_required`.
pub fn check_snapshot(body: &Value, identity: &sdk::Identity) -> Result<(), ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let mut e = sdk::refusal(body, "the SDK returned no H5 snapshot");
        if e.error.starts_with("ios_h5_webview_") {
            e = e.with_field("webViewId");
        }
        let mut details = e.details.clone().unwrap_or(json!({}));
        details["webViews"] = body.get("webViews").cloned().unwrap_or(Value::Null);
        return Err(e.with_details(details));
    }
    let bad = |why: String| Err(ProviderError::new(INVALID_H5_SNAPSHOT, format!("the H5 snapshot is malformed: {why}")).not_dispatched());
    if body.get("h5TargetSchema").and_then(Value::as_str) != Some(H5_TARGET_SCHEMA) {
        return Err(ProviderError::new(format!("{PREFIX}target_schema_required"), format!("the SDK's snapshot has h5TargetSchema {}, not {H5_TARGET_SCHEMA} (an old SDK)", body.get("h5TargetSchema").unwrap_or(&Value::Null))).not_dispatched());
    }
    let Some(page) = body.get("pageRef").and_then(Value::as_object) else { return bad("no pageRef".into()) };
    if page.len() != PAGE_REF_KEYS.len() || !PAGE_REF_KEYS.iter().all(|k| page.contains_key(*k)) || page.get("schemaVersion") != Some(&json!(H5_TARGET_SCHEMA)) {
        return bad(format!("pageRef must have exactly {}", PAGE_REF_KEYS.join(", ")));
    }
    if page.get("runtimeEpoch").and_then(Value::as_str) != Some(identity.runtime_epoch.as_str()) || page.get("bundleId").and_then(Value::as_str) != Some(identity.bundle_id.as_str()) || page.get("processId").and_then(Value::as_u64) != Some(identity.process_id) {
        return bad("the pageRef names another runtime than the connection".into());
    }
    let Some(controls) = body.pointer("/dom/controls").and_then(Value::as_array) else { return bad("no dom.controls".into()) };
    let mut ids = std::collections::HashSet::new();
    if !controls.iter().all(|c| c.get("elementId").and_then(Value::as_str).is_some_and(|id| ids.insert(id))) {
        return bad("every control needs a unique elementId".into());
    }
    Ok(())
}

// ---- binding ------------------------------------------------------------------------

fn refuse(code: String, message: String) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

pub use aab_plugin_api::h5::{check_page, element, summary};

/// The control bound now must be the observed element (same id, same identity).
pub fn check_element(expected: &Value, control: &Value) -> Result<(), ProviderError> {
    aab_plugin_api::h5::check_element(expected, control, PREFIX)
}

/// Bind `selector` to exactly one visible control of `dom`; a truncated snapshot
/// binds only by `elementId`.
pub fn select(dom: &Value, selector: &Value) -> Result<Value, ProviderError> {
    aab_plugin_api::h5::select(dom, selector, PREFIX)
}

/// What an action aims at: one control (click, input, scroll into view) or the page (eval).
pub enum Aim<'a> {
    Element { selector: &'a Value, expected: Option<&'a Value>, editable: bool },
    Page { expected: &'a Value },
}

impl Aim<'_> {
    /// The WebView the caller observed, if it said so.
    pub fn observed_web_view(&self) -> Option<&str> {
        let page = match self {
            Aim::Element { expected, .. } => expected.map(|e| &e["pageRef"]),
            Aim::Page { expected } => Some(*expected),
        };
        page.and_then(|p| p.get("webViewId")).and_then(Value::as_str)
    }
}

/// The fresh page and, for element aims, the one control bound (all host-side
/// checks of §4.7, before any effect).
pub fn bind(snapshot: &Value, aim: &Aim<'_>) -> Result<(Value, Option<Value>), ProviderError> {
    let page = snapshot["pageRef"].clone();
    let control = match aim {
        Aim::Element { selector, expected, editable } => {
            if let Some(e) = expected {
                check_page(&e["pageRef"], &page, "expectedTarget")?;
            }
            let c = select(&snapshot["dom"], selector)?;
            if let Some(e) = expected {
                check_element(&e["element"], &c)?;
            }
            if *editable && c.get("editable") != Some(&Value::Bool(true)) {
                return Err(refuse(format!("{PREFIX}target_not_editable"), format!("the control {} is not editable", c["elementId"])).with_field("selector").with_details(json!({"control": summary(&c)})));
            }
            Some(c)
        }
        Aim::Page { expected } => {
            check_page(expected, &page, "expectedPage")?;
            None
        }
    };
    Ok((page, control))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aab_plugin_api::h5::REOBSERVE_REQUIRED;

    const E: &str = "5A0D7C1E-3B1F-4D6A-9E2B-7F8C9D0A1B2C";

    fn identity() -> sdk::Identity {
        sdk::Identity { bundle_id: "com.example.shop".into(), runtime_epoch: E.into(), process_id: 42, port: 49152 }
    }

    fn control(id: &str, tag: &str, text: &str, visible: bool) -> Value {
        json!({"elementId": id, "tag": tag, "id": null, "name": null, "type": null, "text": text, "ariaLabel": null, "href": null, "visible": visible, "editable": tag == "input", "bounds": {"x": 0, "y": 0, "width": 10, "height": 10}})
    }

    fn page() -> Value {
        json!({"schemaVersion": H5_TARGET_SCHEMA, "runtimeEpoch": E, "bundleId": "com.example.shop", "processId": 42, "webViewId": "wv1", "documentId": "d1", "url": "http://h5/a.html"})
    }

    fn snap(controls: Vec<Value>, truncated: bool) -> Value {
        json!({"ok": true, "h5TargetSchema": H5_TARGET_SCHEMA, "pageRef": page(), "dom": {"controlCount": controls.len(), "truncated": truncated, "controls": controls}, "webView": {"webViewId": "wv1"}})
    }

    #[test]
    fn a_selector_binds_exactly_one_visible_control() {
        let dom = snap(vec![control("e1", "button", "Buy", true), control("e2", "a", "Buy", true), control("e3", "button", "Sell", false)], false)["dom"].clone();
        let e = select(&dom, &json!({"text": "Buy"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("ios_h5_selector_ambiguous", Some("selector"), Some(false)));
        assert_eq!(select(&dom, &json!({"text": "Buy", "tag": "a"})).unwrap()["elementId"], "e2");
        assert_eq!(select(&dom, &json!({"elementId": "e3"})).unwrap_err().error, "ios_h5_selector_not_found", "hidden controls never bind");
        assert_eq!(select(&dom, &json!({"text": "buy"})).unwrap_err().error, "ios_h5_selector_not_found", "exact text only");
        let truncated = snap(vec![control("e1", "button", "Buy", true)], true)["dom"].clone();
        assert_eq!(select(&truncated, &json!({"text": "Buy"})).unwrap_err().error, "ios_h5_snapshot_truncated");
        assert!(select(&truncated, &json!({"elementId": "e1"})).is_ok());
    }

    #[test]
    fn the_observed_page_and_element_must_still_be_there() {
        let s = snap(vec![control("e7", "button", "Buy", true), control("e4", "input", "", true)], false);
        let sel = json!({"text": "Buy"});
        let replaced = json!({"pageRef": page(), "element": element(&control("e1", "button", "Buy", true))});
        let e = bind(&s, &Aim::Element { selector: &sel, expected: Some(&replaced), editable: false }).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("ios_h5_target_changed", Some("expectedTarget")));
        let same = json!({"pageRef": page(), "element": element(&control("e7", "button", "Buy", true))});
        assert_eq!(bind(&s, &Aim::Element { selector: &sel, expected: Some(&same), editable: false }).unwrap().1.unwrap()["elementId"], "e7");
        // A relaunched app: another runtime epoch and process in the observed page.
        let mut old = same.clone();
        old["pageRef"]["runtimeEpoch"] = json!("OLD-EPOCH");
        old["pageRef"]["processId"] = json!(41);
        let e = bind(&s, &Aim::Element { selector: &sel, expected: Some(&old), editable: false }).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (REOBSERVE_REQUIRED, Some(false)));
        assert_eq!(e.details.unwrap()["changed"], json!(["runtimeEpoch", "processId"]));
        let e = bind(&s, &Aim::Page { expected: &old["pageRef"] }).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("expectedPage"));
        assert!(bind(&s, &Aim::Page { expected: &page() }).is_ok());
        assert_eq!(bind(&s, &Aim::Element { selector: &sel, expected: None, editable: true }).unwrap_err().error, "ios_h5_target_not_editable");
    }

    #[test]
    fn snapshots_are_checked_against_the_runtime() {
        assert!(check_snapshot(&snap(vec![control("e1", "a", "x", true)], false), &identity()).is_ok());
        let amb = json!({"ok": false, "error": "ios_h5_webview_ambiguous", "message": "m", "webViews": [{"webViewId": "a"}, {"webViewId": "b"}]});
        let e = check_snapshot(&amb, &identity()).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("ios_h5_webview_ambiguous", Some("webViewId"), Some(false)));
        assert_eq!(e.details.unwrap()["webViews"][1]["webViewId"], "b");
        let mut old = snap(vec![], false);
        old.as_object_mut().unwrap().remove("h5TargetSchema");
        assert_eq!(check_snapshot(&old, &identity()).unwrap_err().error, "ios_h5_target_schema_required");
        let mut other = snap(vec![], false);
        other["pageRef"]["processId"] = json!(43);
        assert_eq!(check_snapshot(&other, &identity()).unwrap_err().error, INVALID_H5_SNAPSHOT);
        let dup = snap(vec![control("e1", "a", "x", true), control("e1", "a", "y", true)], false);
        assert_eq!(check_snapshot(&dup, &identity()).unwrap_err().error, INVALID_H5_SNAPSHOT);
        assert_eq!(dom_path(Some("a b")), "/v1/h5/dom?webViewId=a%20b");
    }
}
