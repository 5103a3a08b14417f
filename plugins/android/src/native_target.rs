//! Native selectors (aab-protocols §1.7): the schema every selector argument uses
//! and the host-side binding of a selector to ONE node of a fresh SDK view tree,
//! whose `targetRef` (`aab.native-target/v1`) is sent with the action so the SDK
//! revalidates the same View before dispatch. Every failure here is before
//! dispatch.

use aab_plugin_api::ProviderError;
use serde_json::{Value, json};

pub const TARGET_SCHEMA: &str = "aab.native-target/v1";
const KEYS: [&str; 3] = ["text", "resourceName", "contentDescription"];

fn ident(desc: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": desc})
}

fn one_of_keys(keys: &[&str]) -> Value {
    Value::Array(keys.iter().map(|k| json!({"required": [k]})).collect())
}

/// Exactly one identity key (`text` | `resourceName` | `contentDescription`),
/// optionally `within` a semantic ancestor.
pub fn selector_schema() -> Value {
    let level = |parent: Option<Value>| {
        let mut props = json!({"className": ident("Ancestor class name"), "resourceName": ident("Ancestor resource name (pkg:id/name)")});
        if let Some(p) = parent {
            props["parent"] = p;
        }
        json!({"type": "object", "additionalProperties": false, "properties": props, "oneOf": one_of_keys(&["className", "resourceName"])})
    };
    let ancestor = level(Some(level(None)));
    json!({
        "type": "object", "additionalProperties": false,
        "description": "Native selector: exactly one of text, resourceName, contentDescription (exact match), optionally within an ancestor that also contains the node `within` names",
        "properties": {
            "text": ident("Exact text"), "resourceName": ident("Exact resource name (pkg:id/name)"), "contentDescription": ident("Exact content description"),
            "within": {
                "type": "object", "additionalProperties": false,
                "properties": {"text": ident("Exact text of a node inside the ancestor"), "resourceName": ident("Exact resource name of a node inside the ancestor"), "contentDescription": ident("Exact content description of a node inside the ancestor"), "ancestor": ancestor},
                "required": ["ancestor"], "oneOf": one_of_keys(&KEYS)
            }
        },
        "oneOf": one_of_keys(&KEYS)
    })
}

fn fail(code: &str, message: String, field: &str) -> ProviderError {
    ProviderError::new(code, message).with_field(field).not_dispatched()
}

fn key_of(sel: &Value) -> Option<(&'static str, &Value)> {
    KEYS.iter().find_map(|k| sel.get(*k).map(|v| (*k, v)))
}

fn eligible(n: &Value) -> bool {
    n["visible"] != false && n["enabled"] != false && n["bounds"]["width"].as_i64().unwrap_or(1) > 0 && n["bounds"]["height"].as_i64().unwrap_or(1) > 0
}

/// Every node with its ancestor chain (nearest last).
fn walk<'a>(n: &'a Value, chain: &mut Vec<&'a Value>, out: &mut Vec<(&'a Value, Vec<&'a Value>)>) {
    out.push((n, chain.clone()));
    if let Some(kids) = n.get("children").and_then(Value::as_array) {
        chain.push(n);
        for k in kids {
            walk(k, chain, out);
        }
        chain.pop();
    }
}

fn level_matches(node: &Value, spec: &Value) -> bool {
    ["className", "resourceName"].iter().all(|k| spec.get(*k).is_none_or(|v| &node[*k] == v))
}

fn contains(n: &Value, key: &str, want: &Value) -> bool {
    &n[key] == want || n.get("children").and_then(Value::as_array).is_some_and(|kids| kids.iter().any(|k| contains(k, key, want)))
}

fn within_matches(chain: &[&Value], within: &Value) -> bool {
    let Some((key, want)) = key_of(within) else { return false };
    let anc = &within["ancestor"];
    (0..chain.len()).rev().any(|i| {
        level_matches(chain[i], anc)
            && anc.get("parent").is_none_or(|p| i > 0 && level_matches(chain[i - 1], p))
            && contains(chain[i], key, want)
    })
}

/// The roots to search: the foreground window's root (or the activity root).
fn roots(tree: &Value) -> Vec<&Value> {
    let windows = tree.get("windows").and_then(Value::as_array).cloned().unwrap_or_default();
    let fg = tree.get("foregroundWindowId");
    if let Some(i) = windows.iter().position(|w| w.get("windowId") == fg && fg.is_some_and(|f| !f.is_null())) {
        return vec![&tree["windows"][i]["root"]];
    }
    vec![&tree["root"]]
}

/// Bind `selector` to exactly one eligible node; returns the node (with `targetRef`).
pub fn bind(tree: &Value, selector: &Value, editable: bool) -> Result<Value, ProviderError> {
    let Some((key, want)) = key_of(selector) else { return Err(fail("invalid_argument", "the selector names no identity key".into(), "selector")) };
    let mut all = vec![];
    for r in roots(tree) {
        walk(r, &mut vec![], &mut all);
    }
    let hits: Vec<&Value> = all.iter().filter(|(n, chain)| &n[key] == want && eligible(n) && selector.get("within").is_none_or(|w| within_matches(chain, w))).map(|(n, _)| *n).collect();
    let node = match hits.as_slice() {
        [] => return Err(fail("native_selector_not_found", format!("no visible, enabled node has {key} = {want}"), "selector")),
        [one] => *one,
        many => return Err(fail("native_selector_ambiguous", format!("{} nodes match {key} = {want}", many.len()), "selector").with_details(json!({"matches": many.len()}))),
    };
    if node.pointer("/targetRef/schemaVersion").and_then(Value::as_str) != Some(TARGET_SCHEMA) {
        return Err(ProviderError::new("native_atomic_target_unavailable", "the SDK tree gives no aab.native-target/v1 reference for the selected node").not_dispatched());
    }
    if editable && node["editable"] != true {
        return Err(fail("native_target_not_editable", format!("the node with {key} = {want} is not editable"), "selector"));
    }
    Ok(node.clone())
}

/// The target summary a reply carries (what was bound on the host side).
pub fn summary(node: &Value) -> Value {
    json!({"resourceName": node["resourceName"], "text": node["text"], "contentDescription": node["contentDescription"], "className": node["className"], "bounds": node["bounds"], "targetRef": node["targetRef"]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rn: &str, text: &str, kids: Vec<Value>) -> Value {
        json!({"resourceName": rn, "text": text, "className": "android.widget.TextView", "visible": true, "enabled": true, "editable": false,
               "bounds": {"width": 10, "height": 10}, "targetRef": {"schemaVersion": TARGET_SCHEMA}, "children": kids})
    }

    #[test]
    fn within_picks_the_row_whose_sibling_matches() {
        let row = |label: &str| node("p:id/row", "", vec![node("p:id/label", label, vec![]), node("p:id/confirm", "OK", vec![])]);
        let tree = json!({"ok": true, "root": node("p:id/root", "", vec![row("A"), row("B")])});
        let e = bind(&tree, &json!({"resourceName": "p:id/confirm"}), false).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("native_selector_ambiguous", Some("selector"), Some(false)));
        let sel = json!({"resourceName": "p:id/confirm", "within": {"text": "B", "ancestor": {"resourceName": "p:id/row"}}});
        assert!(bind(&tree, &sel, false).is_ok());
        let none = json!({"text": "C"});
        assert_eq!(bind(&tree, &none, false).unwrap_err().error, "native_selector_not_found");
        assert_eq!(bind(&tree, &json!({"text": "A"}), true).unwrap_err().error, "native_target_not_editable");
    }
}
