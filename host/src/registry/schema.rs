//! Structural knowledge about command input schemas that jsonschema does not expose:
//! which subschemas exist (to refuse external `$ref`s), how internal `$ref`s resolve,
//! which `oneOf`/`anyOf` is a tagged union and how to narrow a schema to one
//! `operation`. Shared by validation (error selection) and discovery (`operation`
//! filter), so both agree on what a "variant" is.

use serde_json::{Map, Value};

// The subschema walk and the external-`$ref` rule moved to plugin-api
// (`Manifest::check`), and `$ref` resolution and tagged-union recognition moved with
// the argument validator (`aab_plugin_api::validate`), so the host and provider
// tests refuse the same schemas and name the same variants.
pub(crate) use aab_plugin_api::validate::{TaggedUnion, json_type, pinned_values, resolve, tagged_union};

/// One operation of a command tagged on `operation`: its own fields (beyond the
/// command's common ones) and which of them it requires.
pub struct OperationFields<'a> {
    pub operation: &'a str,
    pub description: &'a str,
    pub own: &'a [&'a str],
    pub required: &'a [&'a str],
}

/// An object schema tagged on `operation` in which each operation accepts only its
/// own fields (the contract's "each operation accepts only its own fields"): every
/// `oneOf` branch pins `operation` and sets every field of the other operations to
/// `false`, so a foreign field is `unsupported_argument` naming it. `properties`
/// holds every field (operation included); `common` are accepted by every
/// operation and `common_required` required by all. The host execution options are
/// injected later and stay allowed.
pub fn tagged_operations(properties: Value, common: &[&str], common_required: &[&str], operations: &[OperationFields<'_>]) -> Value {
    let Value::Object(all) = properties else { return properties };
    let branches: Vec<Value> = operations
        .iter()
        .map(|op| {
            let mut branch_properties = Map::new();
            branch_properties.insert("operation".into(), serde_json::json!({"const": op.operation}));
            for name in all.keys() {
                if name != "operation" && !common.contains(&name.as_str()) && !op.own.contains(&name.as_str()) {
                    branch_properties.insert(name.clone(), Value::Bool(false));
                }
            }
            let mut required = vec!["operation"];
            required.extend(op.required.iter());
            serde_json::json!({"description": op.description, "properties": branch_properties, "required": required})
        })
        .collect();
    let mut required = vec!["operation"];
    required.extend(common_required.iter());
    serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "properties": Value::Object(all),
        "required": required,
        "oneOf": branches
    })
}

/// One operation of an engine command: name, description, its own fields (a JSON
/// object of property schemas) and its required fields.
pub type OperationSpec = (&'static str, &'static str, Value, Vec<&'static str>);

/// [`tagged_operations`] for a list of operations that carry their own property
/// schemas (the `intent` and `script` engines): the `operation` enum and the union
/// of every operation's fields are derived from the list (the first schema given
/// for a field wins), `common` fields are accepted by every operation.
pub fn tagged_operation_list(operation_description: &str, ops: &[OperationSpec], common: &[(&str, Value)]) -> Value {
    let mut all = Map::new();
    all.insert("operation".into(), serde_json::json!({"type": "string", "enum": ops.iter().map(|o| o.0).collect::<Vec<_>>(), "description": operation_description}));
    for (_, _, props, _) in ops {
        for (k, v) in props.as_object().into_iter().flatten() {
            all.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    for (k, v) in common {
        all.entry(k.to_string()).or_insert_with(|| v.clone());
    }
    let own: Vec<Vec<&str>> = ops.iter().map(|(_, _, props, _)| props.as_object().into_iter().flatten().map(|(k, _)| k.as_str()).collect()).collect();
    let fields: Vec<OperationFields<'_>> =
        ops.iter().zip(&own).map(|((operation, description, _, required), own)| OperationFields { operation, description, own, required }).collect();
    let common_names: Vec<&str> = common.iter().map(|(k, _)| *k).collect();
    tagged_operations(Value::Object(all), &common_names, &[], &fields)
}

/// Outcome of narrowing a schema to one `operation`.
pub(crate) enum Narrowed {
    Schema(Value),
    /// The command has operations, but not this one.
    UnknownOperation(Vec<Value>),
    /// The command's schema has no `operation` variants at all.
    NoOperations,
}

/// Narrow a command schema to the variant for `operation`: the top-level
/// `oneOf`/`anyOf` tagged on `operation` is replaced by the selected branch merged
/// into the root, so an agent sees one flat object schema. A plain `operation` enum
/// (no union) narrows to a `const`.
pub(crate) fn narrow_to_operation(schema: &Value, operation: &str) -> Narrowed {
    let wanted = Value::String(operation.to_string());
    if let Some((keyword, tagged)) = operation_union(schema) {
        let Some(index) = tagged.branch_for(&wanted) else { return Narrowed::UnknownOperation(tagged.allowed()) };
        let branch = schema.get(keyword).and_then(|b| b.get(index)).map(|b| resolve(schema, b));
        let mut narrowed = schema.clone();
        if let (Value::Object(root), Some(branch)) = (&mut narrowed, branch) {
            root.remove(keyword);
            merge_branch(root, branch);
            pin_operation(root, &wanted);
        }
        return Narrowed::Schema(narrowed);
    }
    match operation_enum(schema) {
        Some(values) if values.contains(&wanted) => {
            let mut narrowed = schema.clone();
            if let Value::Object(root) = &mut narrowed {
                pin_operation(root, &wanted);
            }
            Narrowed::Schema(narrowed)
        }
        Some(values) => Narrowed::UnknownOperation(values),
        None => Narrowed::NoOperations,
    }
}

/// The `operation` values a command schema distinguishes (empty if none).
pub(crate) fn operations(schema: &Value) -> Vec<Value> {
    match operation_union(schema) {
        Some((_, tagged)) => tagged.allowed(),
        None => operation_enum(schema).unwrap_or_default(),
    }
}

/// The top-level `oneOf`/`anyOf` tagged on `operation`, with its keyword.
fn operation_union(schema: &Value) -> Option<(&'static str, TaggedUnion)> {
    ["oneOf", "anyOf"].into_iter().find_map(|keyword| {
        let branches = schema.get(keyword)?.as_array()?;
        let all: Vec<usize> = (0..branches.len()).collect();
        let tagged = tagged_union(schema, branches, &all, Some("operation"))?;
        (tagged.property == "operation").then_some((keyword, tagged))
    })
}

/// The values pinned by a plain top-level `operation` property.
fn operation_enum(schema: &Value) -> Option<Vec<Value>> {
    schema.get("properties").and_then(|p| p.get("operation")).map(|p| resolve(schema, p)).and_then(pinned_values)
}

/// Replace `properties.operation` by a `const` (keeping its description).
fn pin_operation(root: &mut Map<String, Value>, operation: &Value) {
    let properties = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties {
        let mut pinned = Map::new();
        if let Some(description) = properties.get("operation").and_then(|p| p.get("description")) {
            pinned.insert("description".into(), description.clone());
        }
        pinned.insert("const".into(), operation.clone());
        properties.insert("operation".into(), Value::Object(pinned));
    }
}

/// Shallow-merge a union branch into the root schema: property schemas merge key by
/// key (the branch is more specific), `required` lists are united, and any other
/// keyword the root already has goes under `allOf` so no constraint is lost.
fn merge_branch(root: &mut Map<String, Value>, branch: &Value) {
    let Value::Object(branch) = branch else { return };
    for (key, value) in branch {
        match key.as_str() {
            "properties" => {
                let Value::Object(branch_props) = value else { continue };
                let props = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(props) = props else { continue };
                for (name, prop) in branch_props {
                    match (props.get_mut(name), prop) {
                        // `true`/`{}` in a branch only marks the property as allowed.
                        (Some(_), Value::Bool(true)) => {}
                        (Some(Value::Object(existing)), Value::Object(specific)) => {
                            for (k, v) in specific {
                                existing.insert(k.clone(), v.clone());
                            }
                        }
                        _ => {
                            props.insert(name.clone(), prop.clone());
                        }
                    }
                }
            }
            "required" => {
                let Value::Array(extra) = value else { continue };
                let required = root.entry("required").or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(required) = required {
                    for name in extra {
                        if !required.contains(name) {
                            required.push(name.clone());
                        }
                    }
                }
            }
            "type" | "description" | "title" => {
                root.entry(key.clone()).or_insert_with(|| value.clone());
            }
            _ if !root.contains_key(key) => {
                root.insert(key.clone(), value.clone());
            }
            _ => {
                let all = root.entry("allOf").or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(all) = all {
                    let mut single = Map::new();
                    single.insert(key.clone(), value.clone());
                    all.push(Value::Object(single));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn observation_schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "operation": {"type": "string", "enum": ["start", "status", "stop"], "description": "what to do"},
                "durationMs": {"type": "integer"},
                "leaseId": {"type": "string"}
            },
            "required": ["operation"],
            "oneOf": [
                {"properties": {"operation": {"const": "start"}, "durationMs": {"minimum": 100}}, "required": ["durationMs"]},
                {"properties": {"operation": {"enum": ["status"]}}},
                {"$ref": "#/$defs/stop"}
            ],
            "$defs": {"stop": {"properties": {"operation": {"const": "stop"}}, "required": ["leaseId"]}}
        })
    }

    #[test]
    fn tagged_union_accepts_const_enum_and_refs() {
        let schema = observation_schema();
        let branches = schema["oneOf"].as_array().unwrap();
        let tagged = tagged_union(&schema, branches, &[0, 1, 2], None).unwrap();
        assert_eq!(tagged.property, "operation");
        assert_eq!(tagged.allowed(), vec![json!("start"), json!("status"), json!("stop")]);
        assert_eq!(tagged.branch_for(&json!("stop")), Some(2));
        assert_eq!(tagged.branch_for(&json!("nope")), None);
    }

    #[test]
    fn overlapping_values_are_not_a_tagged_union() {
        let schema = json!({"oneOf": [
            {"properties": {"kind": {"enum": ["a", "b"]}}},
            {"properties": {"kind": {"const": "b"}}}
        ]});
        let branches = schema["oneOf"].as_array().unwrap();
        assert!(tagged_union(&schema, branches, &[0, 1], None).is_none());
    }

    #[test]
    fn narrowing_merges_the_selected_branch() {
        let schema = observation_schema();
        let Narrowed::Schema(start) = narrow_to_operation(&schema, "start") else { panic!("start should narrow") };
        assert!(start.get("oneOf").is_none());
        assert_eq!(start["properties"]["operation"], json!({"description": "what to do", "const": "start"}));
        assert_eq!(start["properties"]["durationMs"], json!({"type": "integer", "minimum": 100}));
        assert_eq!(start["required"], json!(["operation", "durationMs"]));
        let Narrowed::Schema(stop) = narrow_to_operation(&schema, "stop") else { panic!("stop should narrow") };
        assert_eq!(stop["required"], json!(["operation", "leaseId"]));
        match narrow_to_operation(&schema, "pause") {
            Narrowed::UnknownOperation(allowed) => assert_eq!(allowed, vec![json!("start"), json!("status"), json!("stop")]),
            _ => panic!("pause is not an operation"),
        }
        assert!(matches!(narrow_to_operation(&json!({"type": "object"}), "x"), Narrowed::NoOperations));
        let plain = json!({"properties": {"operation": {"enum": ["start", "stop"]}}});
        let Narrowed::Schema(plain) = narrow_to_operation(&plain, "stop") else { panic!("enum should narrow") };
        assert_eq!(plain["properties"]["operation"], json!({"const": "stop"}));
    }
}
