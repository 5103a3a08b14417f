//! The host side of Flutter through the Android SDK routes (aab-protocols §7):
//! read the Dart runtime's operable tree (`GET /v1/flutter/snapshot`, the
//! status with `flutter.layout`), bind a selector (`{text}` | `{nodeId}`) to a
//! `aab.flutter-target/v1` reference from a FRESH, untruncated tree
//! (`flutter_observation_incomplete` otherwise), and run one managed action
//! (`aab.flutter-execution/v1`) through [`crate::native_exec::Session::execute_as`]
//! with the Flutter family: the action record (kind `flutter`) before the
//! dispatch mark, one POST to `/v1/flutter/action`, one cancel to
//! `/v1/flutter/cancel` after a lost reply, never a resend.

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Map, Value, json};

use crate::native_exec::{App, Family, Session};
use crate::sdk::http;

pub const EXECUTION_SCHEMA: &str = "aab.flutter-execution/v1";
pub const TARGET_SCHEMA: &str = "aab.flutter-target/v1";
pub const FAMILY: Family = Family { schema: EXECUTION_SCHEMA, cancel: "/v1/flutter/cancel", kind: "flutter", sdk_epoch: false };
pub const FLUTTER_UNAVAILABLE: &str = "flutter_unavailable";
pub const FLUTTER_EXECUTION_UNAVAILABLE: &str = "flutter_execution_unavailable";
pub const OBSERVATION_INCOMPLETE: &str = "flutter_observation_incomplete";

/// The Flutter member of a snapshot reply: it must be present with an operable tree.
pub fn check_snapshot(package: &str, status: &Value) -> Result<Value, ProviderError> {
    if status.get("ok") != Some(&Value::Bool(true)) {
        let code = status.get("error").and_then(Value::as_str).unwrap_or(http::BRIDGE_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("the SDK of {package} refused the Flutter snapshot")).with_details(json!({"body": status})).not_dispatched());
    }
    if let Some(found) = status.pointer("/app/packageName").and_then(Value::as_str)
        && found != package
    {
        return Err(ProviderError::new(crate::sdk::endpoint::codes::BRIDGE_PACKAGE_MISMATCH, format!("the SDK status belongs to {found:?}, not {package:?}")).not_dispatched());
    }
    let flutter = status.get("flutter").cloned().unwrap_or(Value::Null);
    let Some(operable) = flutter.pointer("/layout/operable").filter(|o| o.get("ok") == Some(&Value::Bool(true))) else {
        return Err(ProviderError::new(FLUTTER_UNAVAILABLE, format!("{package} shows no Flutter view (the Dart runtime returned no operable tree)")).with_details(json!({"flutter": flutter})).not_dispatched());
    };
    if operable.get("executionSchema").and_then(Value::as_str) != Some(EXECUTION_SCHEMA) {
        return Err(ProviderError::new(FLUTTER_EXECUTION_UNAVAILABLE, format!("the Flutter runtime of {package} does not advertise {EXECUTION_SCHEMA}")).with_details(json!({"executionSchema": operable.get("executionSchema")})).not_dispatched());
    }
    if !operable.get("runtimeEpoch").and_then(Value::as_str).is_some_and(|e| !e.is_empty() && e.len() <= 256) {
        return Err(ProviderError::new(http::BRIDGE_PROTOCOL_ERROR, "the Flutter operable tree has no runtimeEpoch").not_dispatched());
    }
    Ok(flutter)
}

/// Device, foreground proof (the app must own it), SDK route and a fresh snapshot;
/// the session's epoch is the Dart runtime epoch of that snapshot.
pub async fn open(ctx: &Context<'_>, app: &App) -> Result<(Session, Value), ProviderError> {
    let epoch_of = |package: &str, body: &Value| {
        let flutter = check_snapshot(package, body)?;
        Ok(flutter.pointer("/layout/operable/runtimeEpoch").and_then(Value::as_str).unwrap_or_default().to_string())
    };
    let (session, body) = crate::native_exec::open_with(ctx, app, &FAMILY, "/v1/flutter/snapshot", epoch_of).await?;
    let flutter = check_snapshot(&app.package, &body)?;
    Ok((session, flutter))
}

fn fail(code: &str, message: String) -> ProviderError {
    ProviderError::new(code, message).with_field("selector").not_dispatched()
}

/// The ONE node a selector names in a fresh operable tree (truncated → refused).
pub fn bind(operable: &Value, selector: &Value) -> Result<Value, ProviderError> {
    if operable.get("truncated") != Some(&Value::Bool(false)) {
        return Err(fail(OBSERVATION_INCOMPLETE, format!("the Flutter operable tree is truncated ({} of its nodes were returned): a selector cannot be bound to one target", operable["count"])));
    }
    let nodes = operable.get("nodes").and_then(Value::as_array).cloned().unwrap_or_default();
    let hits: Vec<&Value> = if let Some(t) = selector.get("text").and_then(Value::as_str) {
        nodes.iter().filter(|n| n["visible"] == true && (n["text"].as_str() == Some(t) || (n["text"].is_null() && n["label"].as_str() == Some(t)))).collect()
    } else if let Some(id) = selector.get("nodeId").and_then(Value::as_str) {
        nodes.iter().filter(|n| n["id"].as_str() == Some(id)).collect()
    } else {
        return Err(fail("invalid_argument", "the selector names neither text nor nodeId".into()));
    };
    match hits.as_slice() {
        [] => Err(fail("flutter_selector_not_found", format!("no visible Flutter node matches {selector}"))),
        [one] => {
            let r = &one["targetRef"];
            if r.get("schemaVersion").and_then(Value::as_str) != Some(TARGET_SCHEMA) {
                return Err(fail("flutter_target_schema_mismatch", format!("the node's targetRef is not {TARGET_SCHEMA}")));
            }
            Ok((*one).clone())
        }
        many => Err(fail("flutter_selector_not_unique", format!("{} Flutter nodes match {selector}", many.len())).with_details(json!({"matches": many.len()}))),
    }
}

/// A bound node's summary in replies.
pub fn summary(n: &Value) -> Value {
    json!({"id": n["id"], "widgetType": n["widgetType"], "text": n["text"], "label": n["label"], "role": n["role"], "bounds": n["bounds"], "targetRef": n["targetRef"]})
}

/// Adds `selector` + `targetRef` of a fresh binding to a payload; returns the bound node.
pub fn bind_into(flutter: &Value, selector: &Value, payload: &mut Map<String, Value>) -> Result<Value, ProviderError> {
    let node = bind(&flutter["layout"]["operable"], selector)?;
    payload.insert("selector".into(), selector.clone());
    payload.insert("targetRef".into(), node["targetRef"].clone());
    Ok(node)
}

/// Run one Flutter action payload (`action` + its fields) as a managed action.
pub async fn act(ctx: &Context<'_>, inv: &Invocation, command: &str, session: &Session, payload: Map<String, Value>) -> Result<Value, ProviderError> {
    session.execute_as(&FAMILY, ctx, inv, command, "/v1/flutter/action", payload, 0).await
}

/// Open, optionally bind `selector`, and run `payload`; the reply names the bound node.
pub async fn run(ctx: &Context<'_>, inv: &Invocation, command: &str, app: &App, selector: Option<&Value>, mut payload: Map<String, Value>) -> Result<Value, ProviderError> {
    let (session, flutter) = open(ctx, app).await?;
    let bound = match selector {
        Some(sel) => Some(bind_into(&flutter, sel, &mut payload)?),
        None => None,
    };
    let mut out = act(ctx, inv, command, &session, payload).await?;
    if let Some(b) = bound {
        out["bound"] = summary(&b);
    }
    out["provider"] = json!("flutter");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(truncated: bool) -> Value {
        let r = |id: &str| json!({"schemaVersion": TARGET_SCHEMA, "runtimeEpoch": "1-a", "elementId": id, "guard": "g1"});
        json!({"ok": true, "truncated": truncated, "count": 3, "nodes": [
            {"id": "e1", "text": "Add", "visible": true, "targetRef": r("e1")},
            {"id": "e2", "text": null, "label": "Search", "visible": true, "targetRef": r("e2")},
            {"id": "e3", "text": "Row", "visible": true, "targetRef": r("e3")},
            {"id": "e4", "text": "Row", "visible": true, "targetRef": r("e4")},
            {"id": "e5", "text": "Gone", "visible": false, "targetRef": r("e5")}
        ]})
    }

    #[test]
    fn selectors_bind_one_visible_node_of_an_untruncated_tree() {
        assert_eq!(bind(&tree(false), &json!({"text": "Add"})).unwrap()["id"], json!("e1"));
        assert_eq!(bind(&tree(false), &json!({"text": "Search"})).unwrap()["id"], json!("e2"));
        assert_eq!(bind(&tree(false), &json!({"nodeId": "e5"})).unwrap()["id"], json!("e5"));
        assert_eq!(bind(&tree(false), &json!({"text": "Row"})).unwrap_err().error, "flutter_selector_not_unique");
        assert_eq!(bind(&tree(false), &json!({"text": "Gone"})).unwrap_err().error, "flutter_selector_not_found");
        let e = bind(&tree(true), &json!({"text": "Add"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (OBSERVATION_INCOMPLETE, Some(false)));
    }

    #[test]
    fn the_snapshot_must_carry_an_operable_tree_with_the_schema() {
        let mut st = json!({"ok": true, "app": {"packageName": "a.b"}, "flutter": null});
        assert_eq!(check_snapshot("a.b", &st).unwrap_err().error, FLUTTER_UNAVAILABLE);
        st["flutter"] = json!({"layout": {"operable": {"ok": true, "runtimeEpoch": "1-a", "executionSchema": "x"}}});
        assert_eq!(check_snapshot("a.b", &st).unwrap_err().error, FLUTTER_EXECUTION_UNAVAILABLE);
        st["flutter"]["layout"]["operable"]["executionSchema"] = json!(EXECUTION_SCHEMA);
        assert!(check_snapshot("a.b", &st).is_ok());
        assert_eq!(check_snapshot("c.d", &st).unwrap_err().error, "bridge_package_mismatch");
    }
}
