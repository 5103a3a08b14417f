//! The host side of the SDK's Android H5 (WebView) protocol (aab-protocols §1.8):
//! the snapshot read (`GET /v1/h5/dom[?webViewId=]`) and its checks, the control
//! selector (exactly one of `elementId` | exact `text` | exact `ariaLabel`,
//! optionally `tag`) bound to ONE visible control of a fresh snapshot, the
//! caller's observed binding (`expectedTarget {pageRef, element}` /
//! `expectedPage`), and the managed action `POST /v1/h5/action {payload,
//! actionId, execution}` (`aab.h5-execution/v1`) through [`crate::native_exec`]:
//! foreground proof, status advertising `h5TargetSchema` and `h5ExecutionSchema`,
//! action record (kind `native`: the SDK's one action slot answers
//! `/v1/action/cancel` for H5 actions too), dispatch mark, one POST, never
//! resent. Every refusal here is before dispatch.

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};

use crate::adb::Deadline;
use crate::native_exec::{App, Family, Session, check_status_with, open_for};
use crate::sdk::http;

pub const TARGET_SCHEMA: &str = "aab.android-h5-target/v1";
pub const EXECUTION_SCHEMA: &str = "aab.h5-execution/v1";
/// The status does not advertise the H5 schemas (an SDK without H5): no fallback.
pub const H5_EXECUTION_UNAVAILABLE: &str = "h5_execution_unavailable";
/// The snapshot answer is not the §1.8 shape.
pub const INVALID_H5_SNAPSHOT: &str = "invalid_h5_snapshot";
/// Error prefix of the Android renderer and of the host's own H5 codes.
pub const PREFIX: &str = "android_h5_";
pub const ACTION_ROUTE: &str = "/v1/h5/action";
const PAGE_REF_KEYS: [&str; 9] = ["schemaVersion", "runtimeEpoch", "packageName", "processId", "activity", "windowId", "webViewId", "documentId", "url"];

// ---- schema pieces ----------------------------------------------------------

fn string(max: u64, desc: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "description": desc})
}

/// `webViewId` (`flutter-h5-*` use `adapterId` the same way).
pub fn web_view_id_schema() -> Value {
    string(1024, "The WebView to use (webViewId from h5-dom); default: the single visible WebView of the foreground window")
}

/// Exactly one of `elementId` | `text` | `ariaLabel` (exact match), optionally `tag`.
pub fn selector_schema() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One visible control of a fresh snapshot: exactly one of elementId (from h5-dom), exact text or exact ariaLabel, optionally qualified by tag (lower case). A truncated snapshot (more than 1000 controls) needs elementId.",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[0-9]{1,15}$", "description": "elementId of a control observed with h5-dom"},
            "text": string(500, "Exact text of the control"),
            "ariaLabel": string(1024, "Exact aria-label of the control"),
            "tag": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,63}$", "description": "Lower-case tag name the control must have (a, button, input, …)"}
        },
        "oneOf": SELECTOR_KEYS.iter().map(|k| json!({"required": [k]})).collect::<Vec<_>>()
    })
}

/// The `pageRef` of an earlier `h5-dom` (`aab.android-h5-target/v1`, exactly its 9 fields).
pub fn page_ref_schema() -> Value {
    let text = |desc: &str| json!({"type": "string", "maxLength": 65536, "description": desc});
    json!({
        "type": "object", "additionalProperties": false, "required": PAGE_REF_KEYS,
        "description": "pageRef of an earlier h5-dom, unchanged",
        "properties": {
            "schemaVersion": {"const": TARGET_SCHEMA},
            "runtimeEpoch": text("SDK runtime epoch"), "packageName": text("App package"),
            "processId": {"type": "integer", "minimum": 1, "maximum": 4194304},
            "activity": {"type": ["string", "null"], "maxLength": 65536}, "windowId": text("Window id"), "webViewId": text("WebView id"),
            "documentId": text("Renderer document id"), "url": text("Document URL")
        }
    })
}

/// `expectedTarget`: the page and control an earlier `h5-dom` showed.
pub fn expected_target_schema() -> Value {
    expected_target_with(page_ref_schema(), "The observed binding: pageRef and the control's identity fields (elementId, tag, id, name, type, text, ariaLabel, href) from an earlier h5-dom; the action is refused (reobserve_required / android_h5_target_changed) unless the fresh snapshot still shows them")
}

/// `{pageRef, element}` with this `pageRef` schema (Flutter H5 has its own).
pub fn expected_target_with(page_ref: Value, description: &str) -> Value {
    let field = json!({"type": ["string", "null"], "maxLength": 65536});
    let props: Map<String, Value> = ELEMENT_KEYS.iter().map(|k| (k.to_string(), field.clone())).collect();
    json!({
        "type": "object", "additionalProperties": false, "required": ["pageRef", "element"],
        "description": description,
        "properties": {
            "pageRef": page_ref,
            "element": {"type": "object", "additionalProperties": false, "required": ELEMENT_KEYS, "properties": props}
        }
    })
}

// ---- status, snapshot ---------------------------------------------------------

/// The status must advertise `h5TargetSchema` and `h5ExecutionSchema`; returns the runtime epoch.
pub fn check_status(package: &str, status: &Value) -> Result<String, ProviderError> {
    check_status_with(package, status, &[("h5TargetSchema", TARGET_SCHEMA), ("h5ExecutionSchema", EXECUTION_SCHEMA)], H5_EXECUTION_UNAVAILABLE)
}

/// H5 actions: their own execution schema, but the SDK's one action slot and its
/// cancel route (`/v1/action/cancel` answers with their receipt).
pub const FAMILY: Family = Family { schema: EXECUTION_SCHEMA, cancel: "/v1/action/cancel", kind: "h5", sdk_epoch: true };

/// Device, foreground proof, SDK route and an H5-capable status.
pub async fn open(ctx: &Context<'_>, app: &App) -> Result<Session, ProviderError> {
    open_for(ctx, app, &FAMILY, check_status).await
}

/// Percent-encode a query value (RFC 3986 unreserved characters stay).
fn query_value(v: &str) -> String {
    v.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

pub fn dom_path(web_view_id: Option<&str>) -> String {
    match web_view_id {
        Some(id) => format!("/v1/h5/dom?webViewId={}", query_value(id)),
        None => "/v1/h5/dom".to_string(),
    }
}

/// One snapshot read through the forward on `port` (a read: never dispatched).
pub async fn snapshot(port: u16, web_view_id: Option<&str>, deadline: Deadline) -> Result<Value, ProviderError> {
    let body = http::request(port, "GET", &dom_path(web_view_id), None, deadline).await.map_err(|e| e.not_dispatched())?.body;
    check_snapshot(&body)?;
    Ok(body)
}

/// An `ok:false` answer keeps the SDK's code (`android_h5_webview_not_found`,
/// `android_h5_webview_ambiguous` with the candidate `webViews`, `h5_dom_timeout`);
/// an `ok:true` answer must carry the target schema, a 9-field `pageRef` and the
/// renderer's `dom.controls`.
pub fn check_snapshot(body: &Value) -> Result<(), ProviderError> {
    check_snapshot_as(body, &ANDROID_SNAPSHOT)
}

/// What a snapshot of one H5 dialect must look like (Android H5 here, Flutter H5 in
/// [`crate::flutter_h5`]): its target schema, `pageRef` keys, error prefix, the
/// malformed-snapshot code, and how a refusal names the view and its candidates.
pub struct SnapshotShape {
    pub schema: &'static str,
    pub page_keys: &'static [&'static str],
    pub prefix: &'static str,
    pub invalid: &'static str,
    /// Refusal codes starting with this name the view argument (`id_field`).
    pub view_codes: &'static str,
    pub id_field: &'static str,
    /// The member of a refusal listing the candidate views.
    pub candidates: &'static str,
}

const ANDROID_SNAPSHOT: SnapshotShape = SnapshotShape {
    schema: TARGET_SCHEMA,
    page_keys: &PAGE_REF_KEYS,
    prefix: PREFIX,
    invalid: INVALID_H5_SNAPSHOT,
    view_codes: "android_h5_webview_",
    id_field: "webViewId",
    candidates: "webViews",
};

/// An `ok:false` answer keeps the device's code (with the candidates); an
/// `ok:true` one must carry the target schema, exactly the `pageRef` keys and
/// the renderer's `dom.controls` with unique `elementId`s.
pub fn check_snapshot_as(body: &Value, shape: &SnapshotShape) -> Result<(), ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let code = body.get("error").and_then(Value::as_str).unwrap_or(http::BRIDGE_PROTOCOL_ERROR).to_string();
        let message = body.get("message").and_then(Value::as_str).unwrap_or("the device did not return an H5 snapshot").to_string();
        let mut details = json!({"device": body});
        details[shape.candidates] = body.get(shape.candidates).cloned().unwrap_or(Value::Null);
        let mut e = ProviderError::new(code.clone(), message).with_details(details).not_dispatched();
        if code.starts_with(shape.view_codes) {
            e = e.with_field(shape.id_field);
        }
        return Err(e);
    }
    let bad = |why: String| Err(ProviderError::new(shape.invalid, format!("the H5 snapshot is malformed: {why}")).with_details(json!({"device": body})).not_dispatched());
    if body.get("h5TargetSchema").and_then(Value::as_str) != Some(shape.schema) {
        return Err(ProviderError::new(format!("{}target_schema_unsupported", shape.prefix), format!("the snapshot's h5TargetSchema is {}, not {}", body.get("h5TargetSchema").unwrap_or(&Value::Null), shape.schema))
            .not_dispatched());
    }
    let Some(page) = body.get("pageRef").and_then(Value::as_object) else { return bad("no pageRef".into()) };
    if page.len() != shape.page_keys.len() || !shape.page_keys.iter().all(|k| page.contains_key(*k)) || page.get("schemaVersion") != Some(&json!(shape.schema)) {
        return bad(format!("pageRef must have exactly {}", shape.page_keys.join(", ")));
    }
    let Some(controls) = body.pointer("/dom/controls").and_then(Value::as_array) else { return bad("no dom.controls".into()) };
    let mut ids = std::collections::HashSet::new();
    if !controls.iter().all(|c| c.get("elementId").and_then(Value::as_str).is_some_and(|id| ids.insert(id))) {
        return bad("every control needs a unique elementId".into());
    }
    Ok(())
}

// ---- binding --------------------------------------------------------------------

fn refuse(code: String, message: String) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

pub use aab_plugin_api::h5::{ELEMENT_KEYS, REOBSERVE_REQUIRED, SELECTOR_KEYS, check_element, check_page, element, select, summary};

/// The fresh page must belong to the runtime the status named (a restart between
/// the two reads means the caller's view of the app is stale).
pub fn same_runtime(page: &Value, epoch: &str) -> Result<(), ProviderError> {
    if page.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch) {
        return Ok(());
    }
    Err(refuse(REOBSERVE_REQUIRED.into(), "the H5 page belongs to another SDK runtime than the status: observe again".into())
        .with_details(json!({"statusRuntimeEpoch": epoch, "pageRuntimeEpoch": page.get("runtimeEpoch")})))
}

// ---- actions -------------------------------------------------------------------------

/// What an action aims at: one control (click, input, scroll into view) or the page.
pub enum Aim<'a> {
    Element { selector: &'a Value, expected: Option<&'a Value>, editable: bool },
    Page { expected: Option<&'a Value> },
}

impl Aim<'_> {
    /// The WebView (Flutter H5: the adapter) the caller observed, if it said so.
    pub fn observed_web_view(&self) -> Option<&str> {
        let page = match self {
            Aim::Element { expected, .. } => expected.map(|e| &e["pageRef"]),
            Aim::Page { expected } => *expected,
        };
        page.and_then(|p| p.get("webViewId").or_else(|| p.get("adapterId"))).and_then(Value::as_str)
    }
}

/// The snapshot and what of it an action binds: the page and, for element aims,
/// the control (all checks of §1.8's host side, before any device effect).
pub struct Bound {
    pub snapshot: Value,
    pub page: Value,
    pub control: Option<Value>,
}

pub fn bind(snapshot: Value, epoch: &str, aim: &Aim<'_>) -> Result<Bound, ProviderError> {
    bind_in(snapshot, epoch, aim, PREFIX)
}

/// [`bind`] for a renderer with another error prefix (Flutter H5: `flutter_h5_`).
pub fn bind_in(snapshot: Value, epoch: &str, aim: &Aim<'_>, prefix: &str) -> Result<Bound, ProviderError> {
    let page = snapshot["pageRef"].clone();
    same_runtime(&page, epoch)?;
    let control = match aim {
        Aim::Element { selector, expected, editable } => {
            if let Some(e) = expected {
                check_page(&e["pageRef"], &page, "expectedTarget")?;
            }
            let c = select(&snapshot["dom"], selector, prefix)?;
            if let Some(e) = expected {
                check_element(&e["element"], &c, prefix)?;
            }
            if *editable && c.get("editable") != Some(&Value::Bool(true)) {
                return Err(refuse(format!("{prefix}target_not_editable"), format!("the control {} is not editable", c["elementId"])).with_field("selector").with_details(json!({"control": summary(&c)})));
            }
            Some(c)
        }
        Aim::Page { expected } => {
            if let Some(e) = expected {
                check_page(e, &page, "expectedPage")?;
            }
            None
        }
    };
    Ok(Bound { snapshot, page, control })
}

/// One H5 action: open (foreground, H5 status), a fresh snapshot of the chosen
/// WebView (the explicit id, else the observed one, else the single visible),
/// bind, then the managed POST with `payload` + `pageRef` (+ `element`).
pub async fn act(ctx: &Context<'_>, inv: &Invocation, command: &str, app: &App, web_view_id: Option<&str>, aim: Aim<'_>, mut payload: Map<String, Value>) -> Result<Value, ProviderError> {
    let session = open(ctx, app).await?;
    let which = web_view_id.or(aim.observed_web_view());
    let snap = snapshot(session.route.forward.port, which, session.budget.adb()).await?;
    let bound = bind(snap, &session.epoch, &aim)?;
    payload.insert("pageRef".into(), bound.page.clone());
    if let Some(c) = &bound.control {
        payload.insert("element".into(), element(c));
    }
    let mut body = Map::new();
    body.insert("payload".into(), Value::Object(payload));
    let mut out = session.execute(ctx, inv, command, ACTION_ROUTE, body, 0).await?;
    out["pageRef"] = bound.page;
    out["webView"] = bound.snapshot["webView"].clone();
    if let Some(c) = &bound.control {
        out["bound"] = summary(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: &str = "1764633600000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

    fn control(id: &str, tag: &str, text: &str, visible: bool) -> Value {
        json!({"elementId": id, "tag": tag, "id": null, "name": null, "type": null, "text": text, "ariaLabel": null, "href": null, "value": null,
               "visible": visible, "disabled": false, "editable": tag == "input", "interaction": {"status": "ready"}, "bounds": {"x": 0, "y": 0, "width": 10, "height": 10}})
    }

    fn page() -> Value {
        json!({"schemaVersion": TARGET_SCHEMA, "runtimeEpoch": E, "packageName": "com.x.app", "processId": 42, "activity": "com.x.app.Web",
               "windowId": "w1", "webViewId": "wv1", "documentId": "d1", "url": "http://h5/a.html"})
    }

    fn snap(controls: Vec<Value>, truncated: bool) -> Value {
        json!({"ok": true, "h5TargetSchema": TARGET_SCHEMA, "pageRef": page(), "dom": {"documentId": "d1", "url": "http://h5/a.html", "controlCount": controls.len(), "truncated": truncated, "controls": controls},
               "activity": "com.x.app.Web", "window": {"type": "activity", "id": "w1"}, "webView": {"webViewId": "wv1"}})
    }

    fn codes(r: Result<Value, ProviderError>) -> (String, Option<String>, Option<bool>) {
        let e = r.unwrap_err();
        (e.error, e.field, e.dispatched)
    }

    #[test]
    fn a_selector_binds_exactly_one_visible_control() {
        let dom = snap(vec![control("e1", "button", "Buy", true), control("e2", "a", "Buy", true), control("e3", "button", "Sell", false), control("e4", "input", "", true)], false)["dom"].clone();
        let e = select(&dom, &json!({"text": "Buy"}), PREFIX).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("android_h5_selector_ambiguous", Some("selector"), Some(false)));
        let ids: Vec<&str> = e.details.as_ref().unwrap()["candidates"].as_array().unwrap().iter().map(|c| c["elementId"].as_str().unwrap()).collect();
        assert_eq!(ids, ["e1", "e2"]);
        assert_eq!(select(&dom, &json!({"text": "Buy", "tag": "a"}), PREFIX).unwrap()["elementId"], "e2");
        assert_eq!(select(&dom, &json!({"elementId": "e1"}), PREFIX).unwrap()["elementId"], "e1");
        // Hidden controls never bind, even by id; the refusal counts them.
        let e = select(&dom, &json!({"text": "Sell"}), PREFIX).unwrap_err();
        assert_eq!((e.error.as_str(), &e.details.as_ref().unwrap()["hiddenMatches"]), ("android_h5_selector_not_found", &json!(1)));
        assert_eq!(codes(select(&dom, &json!({"elementId": "e3"}), PREFIX)).0, "android_h5_selector_not_found");
        assert_eq!(codes(select(&dom, &json!({"text": "buy"}), PREFIX)).0, "android_h5_selector_not_found", "exact text only");
        assert_eq!(codes(select(&dom, &json!({"ariaLabel": "Buy"}), PREFIX)).0, "android_h5_selector_not_found", "text is not a label");
    }

    #[test]
    fn a_truncated_snapshot_binds_only_by_element_id() {
        let dom = snap(vec![control("e1", "button", "Buy", true)], true)["dom"].clone();
        assert_eq!(codes(select(&dom, &json!({"text": "Buy"}), PREFIX)), ("android_h5_snapshot_truncated".into(), Some("selector".into()), Some(false)));
        assert_eq!(select(&dom, &json!({"elementId": "e1"}), PREFIX).unwrap()["elementId"], "e1");
        assert_eq!(codes(select(&dom, &json!({"ariaLabel": "x"}), "flutter_h5_")).0, "flutter_h5_snapshot_truncated");
    }

    #[test]
    fn the_observed_page_and_element_must_still_be_there() {
        let s = snap(vec![control("e7", "button", "Buy", true), control("e4", "input", "", true)], false);
        let sel = json!({"text": "Buy"});
        // The element was replaced with identical HTML: a new elementId.
        let observed = json!({"pageRef": page(), "element": element(&control("e1", "button", "Buy", true))});
        let e = bind(s.clone(), E, &Aim::Element { selector: &sel, expected: Some(&observed), editable: false }).err().unwrap();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("android_h5_target_changed", Some("expectedTarget"), Some(false)));
        assert_eq!(e.details.unwrap()["changed"], json!(["elementId"]));
        let same = json!({"pageRef": page(), "element": element(&control("e7", "button", "Buy", true))});
        let b = bind(s.clone(), E, &Aim::Element { selector: &sel, expected: Some(&same), editable: false }).ok().unwrap();
        assert_eq!(b.control.unwrap()["elementId"], "e7");
        // Nulls and absent fields are the empty string on both sides.
        let mut sparse = same.clone();
        sparse["element"] = json!({"elementId": "e7", "tag": "button", "text": "Buy", "id": null});
        assert!(bind(s.clone(), E, &Aim::Element { selector: &sel, expected: Some(&sparse), editable: false }).is_ok());
        // A navigation (new document generation) or a restart: observe again.
        let mut moved = same.clone();
        moved["pageRef"]["documentId"] = json!("d1:1");
        let e = bind(s.clone(), E, &Aim::Element { selector: &sel, expected: Some(&moved), editable: false }).err().unwrap();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (REOBSERVE_REQUIRED, Some("expectedTarget")));
        assert_eq!(e.details.unwrap()["changed"], json!(["documentId"]));
        let e = bind(s.clone(), E, &Aim::Page { expected: Some(&moved["pageRef"]) }).err().unwrap();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (REOBSERVE_REQUIRED, Some("expectedPage")));
        assert!(bind(s.clone(), E, &Aim::Page { expected: Some(&page()) }).is_ok());
        let e = bind(s.clone(), "1764633600001-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30", &Aim::Page { expected: None }).err().unwrap();
        assert_eq!(e.error, REOBSERVE_REQUIRED, "the page of another runtime than the status");
        // Input needs an editable control.
        let e = bind(s.clone(), E, &Aim::Element { selector: &sel, expected: None, editable: true }).err().unwrap();
        assert_eq!(e.error, "android_h5_target_not_editable");
        assert!(bind(s, E, &Aim::Element { selector: &json!({"elementId": "e4"}), expected: None, editable: true }).is_ok());
    }

    #[test]
    fn snapshots_and_status_are_checked() {
        assert!(check_snapshot(&snap(vec![control("e1", "a", "x", true)], false)).is_ok());
        let amb = json!({"ok": false, "error": "android_h5_webview_ambiguous", "message": "m", "webViews": [{"webViewId": "a"}, {"webViewId": "b"}]});
        let e = check_snapshot(&amb).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("android_h5_webview_ambiguous", Some("webViewId"), Some(false)));
        assert_eq!(e.details.unwrap()["webViews"][1]["webViewId"], "b");
        let mut s = snap(vec![control("e1", "a", "x", true), control("e1", "a", "y", true)], false);
        assert_eq!(check_snapshot(&s).unwrap_err().error, INVALID_H5_SNAPSHOT, "duplicate element ids");
        s = snap(vec![], false);
        s["pageRef"]["extra"] = json!(1);
        assert_eq!(check_snapshot(&s).unwrap_err().error, INVALID_H5_SNAPSHOT);
        s = snap(vec![], false);
        s["h5TargetSchema"] = json!("aab.flutter-h5-target/v1");
        assert_eq!(check_snapshot(&s).unwrap_err().error, "android_h5_target_schema_unsupported");
        let mut st = json!({"ok": true, "app": {"packageName": "com.x.app"}, "debugBridge": {"runtimeEpoch": E, "h5TargetSchema": TARGET_SCHEMA, "h5ExecutionSchema": EXECUTION_SCHEMA}});
        assert_eq!(check_status("com.x.app", &st).unwrap(), E);
        st["debugBridge"]["h5ExecutionSchema"] = Value::Null;
        let e = check_status("com.x.app", &st).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (H5_EXECUTION_UNAVAILABLE, Some(false)));
        assert_eq!(dom_path(Some("a b/ü")), "/v1/h5/dom?webViewId=a%20b%2F%C3%BC");
    }
}
