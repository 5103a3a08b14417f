//! The host side of Flutter through the iOS SDK (aab-protocols §4.4, §7): the
//! Dart runtime's snapshot is the `flutter` member of `GET /v1/status`, its
//! operable tree `flutter.layout.operable` (with the Dart engine's
//! `runtimeEpoch`, the epoch every managed Flutter action runs under). A
//! selector (`{text}` | `{nodeId}`) is bound to the `aab.flutter-target/v1`
//! reference of ONE node of a FRESH, untruncated tree that offers the action
//! (`flutter_observation_incomplete` for a truncated one); the Dart runtime
//! re-validates the reference before it acts.

use aab_ios_transport::sdk;
use aab_plugin_api::ProviderError;
use serde_json::{Value, json};

pub const EXECUTION_SCHEMA: &str = "aab.flutter-execution/v1";
pub const TARGET_SCHEMA: &str = "aab.flutter-target/v1";
pub const FLUTTER_UNAVAILABLE: &str = "flutter_unavailable";
pub const OBSERVATION_INCOMPLETE: &str = "flutter_observation_incomplete";

/// The operable tree of a status, checked: present, `ok`, advertising the
/// execution schema, with a Dart runtime epoch.
pub fn operable(status: &Value) -> Result<&Value, ProviderError> {
    let flutter = status.get("flutter").unwrap_or(&Value::Null);
    let Some(op) = flutter.pointer("/layout/operable").filter(|o| o.get("ok") == Some(&Value::Bool(true))) else {
        return Err(ProviderError::new(FLUTTER_UNAVAILABLE, "the app shows no Flutter view (the Dart runtime returned no operable tree)").with_details(json!({"flutter": flutter.get("ok")})).not_dispatched());
    };
    if op.get("executionSchema").and_then(Value::as_str) != Some(EXECUTION_SCHEMA) {
        return Err(ProviderError::new(sdk::codes::EXECUTION_UNAVAILABLE, format!("the Flutter runtime does not advertise {EXECUTION_SCHEMA}")).with_details(json!({"executionSchema": op.get("executionSchema")})).not_dispatched());
    }
    if !op.get("runtimeEpoch").and_then(Value::as_str).is_some_and(|e| !e.is_empty() && e.len() <= 256) {
        return Err(ProviderError::new(sdk::codes::INVALID_RESPONSE, "the Flutter operable tree has no runtimeEpoch").not_dispatched());
    }
    Ok(op)
}

/// The Dart engine's epoch of a checked operable tree.
pub fn epoch(op: &Value) -> String {
    op["runtimeEpoch"].as_str().unwrap_or_default().to_string()
}

fn fail(code: &str, message: String) -> ProviderError {
    ProviderError::new(code, message).with_field("selector").not_dispatched()
}

fn offers(n: &Value, action: &str) -> bool {
    n.get("actions").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x.as_str() == Some(action)))
}

/// The ONE node `selector` names that offers `action` (tap | input | scroll).
pub fn bind(op: &Value, selector: &Value, action: &str) -> Result<Value, ProviderError> {
    if op.get("truncated") != Some(&Value::Bool(false)) {
        return Err(fail(OBSERVATION_INCOMPLETE, format!("the Flutter operable tree is truncated ({} nodes returned): a selector cannot be bound to one target", op["count"])));
    }
    let nodes = op.get("nodes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let hits: Vec<&Value> = if let Some(t) = selector.get("text").and_then(Value::as_str) {
        nodes.iter().filter(|n| n["visible"] == true && offers(n, action) && (n["text"].as_str() == Some(t) || n["label"].as_str() == Some(t))).collect()
    } else if let Some(id) = selector.get("nodeId").and_then(Value::as_str) {
        let found: Vec<&Value> = nodes.iter().filter(|n| n["id"].as_str() == Some(id)).collect();
        if let [one] = found.as_slice()
            && !offers(one, action)
        {
            return Err(fail("flutter_target_not_operable", format!("the Flutter node {id} does not offer {action}")).with_details(json!({"actions": one.get("actions")})));
        }
        found
    } else {
        return Err(fail("invalid_argument", "the selector names neither text nor nodeId".into()));
    };
    match hits.as_slice() {
        [] => Err(fail("flutter_selector_not_found", format!("no visible Flutter node offering {action} matches {selector}"))),
        [one] => {
            let r = &one["targetRef"];
            if r.get("schemaVersion").and_then(Value::as_str) != Some(TARGET_SCHEMA) || r.get("runtimeEpoch") != op.get("runtimeEpoch") {
                return Err(fail("flutter_target_schema_mismatch", format!("the node's targetRef is not a {TARGET_SCHEMA} of this Dart runtime")));
            }
            Ok((*one).clone())
        }
        many => Err(fail("flutter_selector_not_unique", format!("{} Flutter nodes match {selector}", many.len())).with_details(json!({"matches": many.iter().map(|n| n["id"].clone()).collect::<Vec<_>>()}))),
    }
}

pub fn summary(n: &Value) -> Value {
    json!({"id": n["id"], "widgetType": n["widgetType"], "text": n["text"], "label": n["label"], "role": n["role"], "actions": n["actions"], "targetRef": n["targetRef"]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(truncated: bool) -> Value {
        let r = |id: &str| json!({"schemaVersion": TARGET_SCHEMA, "runtimeEpoch": "1-a", "elementId": id, "guard": "g1"});
        json!({"ok": true, "runtimeEpoch": "1-a", "executionSchema": EXECUTION_SCHEMA, "truncated": truncated, "count": 5, "nodes": [
            {"id": "e1", "text": "Add", "visible": true, "actions": ["tap"], "targetRef": r("e1")},
            {"id": "e2", "text": "Add", "visible": true, "actions": [], "targetRef": r("e2")},
            {"id": "e3", "label": "Search", "visible": true, "actions": ["input", "tap"], "targetRef": r("e3")},
            {"id": "e4", "text": "Row", "visible": true, "actions": ["tap"], "targetRef": r("e4")},
            {"id": "e5", "text": "Row", "visible": true, "actions": ["tap"], "targetRef": r("e5")},
            {"id": "e6", "text": "Gone", "visible": false, "actions": ["tap"], "targetRef": r("e6")}
        ]})
    }

    #[test]
    fn selectors_bind_one_node_offering_the_action() {
        assert_eq!(bind(&tree(false), &json!({"text": "Add"}), "tap").unwrap()["id"], "e1", "the label without the action does not count");
        assert_eq!(bind(&tree(false), &json!({"text": "Search"}), "input").unwrap()["id"], "e3");
        assert_eq!(bind(&tree(false), &json!({"text": "Row"}), "tap").unwrap_err().error, "flutter_selector_not_unique");
        assert_eq!(bind(&tree(false), &json!({"text": "Gone"}), "tap").unwrap_err().error, "flutter_selector_not_found");
        assert_eq!(bind(&tree(false), &json!({"nodeId": "e2"}), "tap").unwrap_err().error, "flutter_target_not_operable");
        assert_eq!(bind(&tree(false), &json!({"nodeId": "e3"}), "scroll").unwrap_err().error, "flutter_target_not_operable");
        let e = bind(&tree(true), &json!({"text": "Add"}), "tap").unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (OBSERVATION_INCOMPLETE, Some(false)));
        let mut other = tree(false);
        other["runtimeEpoch"] = json!("2-b");
        assert_eq!(bind(&other, &json!({"nodeId": "e1"}), "tap").unwrap_err().error, "flutter_target_schema_mismatch", "a reference of another engine");
    }

    #[test]
    fn the_status_must_carry_an_operable_tree_with_the_schema() {
        let mut st = json!({"ok": true, "flutter": null});
        assert_eq!(operable(&st).unwrap_err().error, FLUTTER_UNAVAILABLE);
        st["flutter"] = json!({"layout": {"operable": {"ok": true, "runtimeEpoch": "1-a", "executionSchema": "x"}}});
        assert_eq!(operable(&st).unwrap_err().error, sdk::codes::EXECUTION_UNAVAILABLE);
        st["flutter"]["layout"]["operable"]["executionSchema"] = json!(EXECUTION_SCHEMA);
        assert_eq!(epoch(operable(&st).unwrap()), "1-a");
    }
}
