//! The Runner's JSON source tree as aab uses it (protocols §5.5): flattened in
//! pre-order into nodes that carry their `aab.ios-native-target/v1` identity, the
//! session reference of the read, and the host-side binding of a native selector
//! (exactly one of accessibilityId / label / elementId, optional type) to ONE
//! visible, enabled element of a fresh tree. Every failure here is before dispatch;
//! the Runner revalidates the same element before it submits the event.

use aab_ios_transport::wda::{NATIVE_TARGET_SCHEMA, SESSION_SCHEMA, Target};
use aab_plugin_api::ProviderError;
use serde_json::{Value, json};

pub const SELECTOR_NOT_FOUND: &str = "ios_native_selector_not_found";
pub const SELECTOR_AMBIGUOUS: &str = "ios_native_selector_ambiguous";
pub const TARGET_DISABLED: &str = "ios_native_target_disabled";
pub const IDENTITY_REQUIRED: &str = "ios_native_element_identity_required";
pub const TARGET_SCHEMA_REQUIRED: &str = "ios_native_target_schema_required";
pub const TARGET_CHANGED: &str = "ios_native_target_changed";
pub const REOBSERVE_REQUIRED: &str = "reobserve_required";

/// The session a tree was read in: `aab.ios-native-session/v1`.
pub fn session_ref(runner_epoch: &str, target: &Target) -> Value {
    json!({"schemaVersion": SESSION_SCHEMA, "runnerEpoch": runner_epoch, "bundleId": target.bundle_id, "processId": target.process_id, "sessionId": target.session_id})
}

/// WDA flags are `"1"`/`"0"` (booleans accepted too).
fn flag(v: &Value) -> bool {
    matches!(v, Value::Bool(true)) || v.as_str() == Some("1")
}

fn text_or_null(v: &Value) -> Value {
    match v {
        Value::String(s) => json!(s),
        _ => Value::Null,
    }
}

/// One node of the source, projected; `expectedTarget` binds it to this read.
fn project(n: &Value, index: usize, depth: usize, parent: Option<usize>, session: &Value) -> Value {
    let element_id = text_or_null(&n["elementId"]);
    let kind = text_or_null(&n["type"]);
    let identifier = text_or_null(&n["rawIdentifier"]);
    let label = text_or_null(&n["label"]);
    let expected = if element_id.is_string() {
        json!({"schemaVersion": NATIVE_TARGET_SCHEMA, "runnerEpoch": session["runnerEpoch"], "bundleId": session["bundleId"], "processId": session["processId"], "sessionId": session["sessionId"],
               "element": {"elementId": element_id, "type": kind, "identifier": identifier, "label": label}})
    } else {
        Value::Null
    };
    json!({
        "sourceIndex": index, "depth": depth, "parentIndex": parent,
        "elementId": element_id, "type": kind, "rawIdentifier": identifier, "label": label,
        "name": text_or_null(&n["name"]), "value": text_or_null(&n["value"]),
        "visible": flag(&n["isVisible"]), "enabled": flag(&n["isEnabled"]),
        "rect": n.get("rect").cloned().unwrap_or(Value::Null),
        "expectedTarget": expected,
    })
}

/// Every node of the source in pre-order (an explicit stack: a hostile depth
/// cannot overflow ours).
pub fn flatten(root: &Value, session: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Value, usize, Option<usize>)> = vec![(root, 0, None)];
    while let Some((n, depth, parent)) = stack.pop() {
        if !n.is_object() {
            continue;
        }
        let index = out.len();
        out.push(project(n, index, depth, parent, session));
        if let Some(kids) = n.get("children").and_then(Value::as_array) {
            for k in kids.iter().rev() {
                stack.push((k, depth + 1, Some(index)));
            }
        }
    }
    out
}

fn fail(code: &str, message: String, field: &str) -> ProviderError {
    ProviderError::new(code, message).with_field(field).not_dispatched()
}

/// The selector's key, the node field it matches and the wanted value.
fn key_of(selector: &Value) -> Option<(&'static str, &'static str, &str)> {
    [("accessibilityId", "rawIdentifier"), ("label", "label"), ("elementId", "elementId")]
        .into_iter()
        .find_map(|(k, field)| selector.get(k).and_then(Value::as_str).map(|v| (k, field, v)))
}

/// Bind `selector` to exactly one visible node of `nodes`; it must be enabled and
/// carry a WDA element UID.
pub fn resolve(nodes: &[Value], selector: &Value) -> Result<Value, ProviderError> {
    let Some((key, field, want)) = key_of(selector) else { return Err(fail("invalid_argument", "the selector names none of accessibilityId, label, elementId".into(), "selector")) };
    let kind = selector.get("type").and_then(Value::as_str);
    let hits: Vec<&Value> = nodes.iter().filter(|n| n["visible"] == true && n[field].as_str() == Some(want) && kind.is_none_or(|t| n["type"].as_str() == Some(t))).collect();
    let described = match kind {
        Some(t) => format!("{key} = {want:?} and type {t}"),
        None => format!("{key} = {want:?}"),
    };
    let node = match hits.as_slice() {
        [] => return Err(fail(SELECTOR_NOT_FOUND, format!("no visible element has {described}"), "selector")),
        [one] => *one,
        many => {
            let types: Vec<&Value> = many.iter().map(|n| &n["type"]).collect();
            return Err(fail(SELECTOR_AMBIGUOUS, format!("{} visible elements have {described}; narrow it with type or use elementId", many.len()), "selector").with_details(json!({"matches": many.len(), "types": types})));
        }
    };
    if node["enabled"] != true {
        return Err(fail(TARGET_DISABLED, format!("the element with {described} is disabled"), "selector").with_details(json!({"element": summary(node)})));
    }
    if !node["elementId"].is_string() {
        return Err(fail(IDENTITY_REQUIRED, format!("the element with {described} has no WDA element UID (elementId): the Runner is not the prepared one"), "selector"));
    }
    Ok(node.clone())
}

/// The element as the managed action's `targetRef` names it.
pub fn target_ref(node: &Value) -> Value {
    json!({"elementId": node["elementId"], "type": node["type"], "identifier": node["rawIdentifier"], "label": node["label"]})
}

/// What a reply says of the bound element.
pub fn summary(node: &Value) -> Value {
    json!({"elementId": node["elementId"], "type": node["type"], "rawIdentifier": node["rawIdentifier"], "label": node["label"], "rect": node["rect"], "sourceIndex": node["sourceIndex"]})
}

/// An `expectedSession` must be the session of this read (`reobserve_required` otherwise).
pub fn check_session(expected: &Value, current: &Value, field: &str) -> Result<(), ProviderError> {
    let keys = ["runnerEpoch", "bundleId", "processId", "sessionId"];
    let changed: Vec<&str> = keys.iter().copied().filter(|k| expected.get(*k) != current.get(*k)).collect();
    if changed.is_empty() {
        return Ok(());
    }
    Err(fail(REOBSERVE_REQUIRED, format!("the observed {} changed since the observation: read ios-uia-tree again", changed.join(", ")), field).with_details(json!({"expected": expected, "current": current, "changed": changed})))
}

/// An `expectedTarget` must name this read's session and exactly the bound element.
pub fn check_expected_target(expected: &Value, session: &Value, node: &Value) -> Result<(), ProviderError> {
    check_session(expected, session, "expectedTarget")?;
    let current = target_ref(node);
    if expected.get("element") != Some(&current) {
        return Err(fail(TARGET_CHANGED, "the element the selector names now is not the observed one (element UID, type, identifier or label changed)".into(), "expectedTarget")
            .with_details(json!({"expected": expected.get("element"), "current": current})));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Value {
        session_ref("E1", &Target { bundle_id: "com.example".into(), process_id: 4, session_id: Some("S".into()) })
    }

    fn el(kind: &str, id: Option<&str>, label: Option<&str>, uid: &str, visible: &str, enabled: &str) -> Value {
        json!({"type": kind, "rawIdentifier": id, "name": id, "label": label, "elementId": uid, "isVisible": visible, "isEnabled": enabled, "rect": {"x": 0, "y": 0, "width": 10, "height": 10}, "children": []})
    }

    fn tree() -> Value {
        json!({"type": "XCUIElementTypeApplication", "label": "Demo", "elementId": "U0", "isVisible": "1", "isEnabled": "1", "children": [
            el("XCUIElementTypeButton", Some("save"), Some("Save"), "U1", "1", "1"),
            el("XCUIElementTypeStaticText", None, Some("Save"), "U2", "1", "1"),
            el("XCUIElementTypeButton", Some("off"), Some("Off"), "U3", "1", "0"),
            el("XCUIElementTypeButton", Some("hidden"), Some("Hidden"), "U4", "0", "1"),
            {"type": "XCUIElementTypeOther", "label": "Group", "isVisible": "1", "isEnabled": "1", "children": [el("XCUIElementTypeTextField", Some("name"), None, "U5", "1", "1")]}
        ]})
    }

    #[test]
    fn flatten_is_preorder_with_depth_parent_and_identity() {
        let nodes = flatten(&tree(), &session());
        let ids: Vec<_> = nodes.iter().map(|n| n["elementId"].clone()).collect();
        assert_eq!(ids, [json!("U0"), json!("U1"), json!("U2"), json!("U3"), json!("U4"), Value::Null, json!("U5")]);
        assert_eq!((nodes[6]["depth"].clone(), nodes[6]["parentIndex"].clone()), (json!(2), json!(5)));
        assert_eq!(nodes[1]["expectedTarget"]["element"], json!({"elementId": "U1", "type": "XCUIElementTypeButton", "identifier": "save", "label": "Save"}));
        assert_eq!(nodes[1]["expectedTarget"]["sessionId"], "S");
        assert!(nodes[5]["expectedTarget"].is_null(), "no UID, no target");
        assert_eq!((nodes[4]["visible"].clone(), nodes[3]["enabled"].clone()), (json!(false), json!(false)));
    }

    #[test]
    fn a_deep_hostile_tree_does_not_overflow() {
        // Built by hand: `json!` would serialise the nested value recursively.
        let mut t = json!({"type": "XCUIElementTypeOther"});
        for _ in 0..5_000 {
            let mut parent = serde_json::Map::new();
            parent.insert("type".into(), json!("XCUIElementTypeOther"));
            parent.insert("children".into(), Value::Array(vec![t]));
            t = Value::Object(parent);
        }
        let nodes = flatten(&t, &session());
        assert_eq!(nodes.len(), 5_001);
        // serde_json's own drop is recursive; leak the value rather than overflow in the test.
        std::mem::forget(t);
    }

    #[test]
    fn selectors_bind_exactly_one_visible_enabled_element() {
        let nodes = flatten(&tree(), &session());
        let code = |s: Value| resolve(&nodes, &s).unwrap_err().error;
        assert_eq!(resolve(&nodes, &json!({"accessibilityId": "save"})).unwrap()["elementId"], "U1");
        assert_eq!(code(json!({"label": "Save"})), SELECTOR_AMBIGUOUS);
        assert_eq!(resolve(&nodes, &json!({"label": "Save", "type": "XCUIElementTypeStaticText"})).unwrap()["elementId"], "U2");
        assert_eq!(resolve(&nodes, &json!({"elementId": "U5"})).unwrap()["rawIdentifier"], "name");
        assert_eq!(code(json!({"accessibilityId": "off"})), TARGET_DISABLED);
        assert_eq!(code(json!({"accessibilityId": "hidden"})), SELECTOR_NOT_FOUND, "hidden elements never match");
        assert_eq!(code(json!({"label": "Group"})), IDENTITY_REQUIRED);
        assert_eq!(code(json!({"accessibilityId": "save", "type": "XCUIElementTypeCell"})), SELECTOR_NOT_FOUND);
        let e = resolve(&nodes, &json!({"label": "nope"})).unwrap_err();
        assert_eq!((e.field.as_deref(), e.dispatched), (Some("selector"), Some(false)));
    }

    #[test]
    fn expected_targets_and_sessions_must_be_this_read_and_element() {
        let nodes = flatten(&tree(), &session());
        let node = resolve(&nodes, &json!({"accessibilityId": "save"})).unwrap();
        let expected = node["expectedTarget"].clone();
        assert!(check_expected_target(&expected, &session(), &node).is_ok());
        let mut relaunched = session();
        relaunched["processId"] = json!(5);
        assert_eq!(check_expected_target(&expected, &relaunched, &node).unwrap_err().error, REOBSERVE_REQUIRED);
        let other = resolve(&nodes, &json!({"elementId": "U2"})).unwrap();
        assert_eq!(check_expected_target(&expected, &session(), &other).unwrap_err().error, TARGET_CHANGED);
        let mut new_runner = session();
        new_runner["runnerEpoch"] = json!("E2");
        let e = check_session(&session(), &new_runner, "expectedSession").unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (REOBSERVE_REQUIRED, Some("expectedSession")));
        assert!(check_session(&session(), &session(), "expectedSession").is_ok());
        assert_eq!(target_ref(&node), json!({"elementId": "U1", "type": "XCUIElementTypeButton", "identifier": "save", "label": "Save"}));
    }
}
