//! What the engine command schemas take from the loaded catalog: the platforms and
//! provider names of the declared Intent providers, and the declared execution
//! targets (`script.target`). Built once per catalog load from the registered
//! manifests, so the host itself names no platform; an empty catalog yields schemas
//! that are still valid (no enum, no target but `null`).

use aab_plugin_api::Manifest;
use aab_plugin_api::protocol::ExecutionTarget;
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineCatalog {
    /// Platforms of the declared Intent providers (`intent target.platform`), sorted, unique.
    pub intent_platforms: Vec<String>,
    /// Names of the declared Intent providers, sorted, unique.
    pub intent_providers: Vec<String>,
    /// Execution targets by platform, sorted by platform; the first declaration of a
    /// platform wins (plugins load in file-name order).
    pub targets: Vec<ExecutionTarget>,
}

impl EngineCatalog {
    /// From the manifests of the registered plugins.
    pub fn from_manifests<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> EngineCatalog {
        let mut catalog = EngineCatalog::default();
        for m in manifests {
            for p in &m.intent_providers {
                catalog.intent_platforms.push(p.platform.clone());
                catalog.intent_providers.push(p.provider.clone());
            }
            for t in &m.targets {
                if !catalog.targets.iter().any(|have| have.platform == t.platform) {
                    catalog.targets.push(t.clone());
                }
            }
        }
        for names in [&mut catalog.intent_platforms, &mut catalog.intent_providers] {
            names.sort();
            names.dedup();
        }
        catalog.targets.sort_by(|a, b| a.platform.cmp(&b.platform));
        catalog
    }
}

/// The rules for a manifest's engine data that the generated schemas rely on (a
/// malformed declaration refuses its plugin at load instead of breaking the
/// `script` schema for everyone): each execution target names one of the
/// manifest's platforms, has at least one identity field, valid and distinct field
/// names, object connection schemas, and no platform is declared twice; an
/// `observationTargetSchema` is an object.
pub fn check_manifest(manifest: &Manifest) -> Result<(), String> {
    // One rule set, shared with provider authors' `TestPlugin` through `Manifest::check`.
    aab_plugin_api::check::check_engine_data(manifest)
}

/// `{"type":"string", "enum": names}`, or a plain string when the catalog has no
/// name (an empty `enum` is not a valid schema), plus `extra` members.
pub fn name_schema(names: &[String], extra: Value) -> Value {
    let mut schema = serde_json::Map::new();
    schema.insert("type".into(), "string".into());
    if names.is_empty() {
        schema.insert("minLength".into(), 1.into());
    } else {
        schema.insert("enum".into(), names.iter().map(|n| Value::String(n.clone())).collect());
    }
    if let Value::Object(extra) = extra {
        schema.extend(extra);
    }
    Value::Object(schema)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aab_plugin_api::protocol::{IntentCall, IntentProvider, IntentSummarize};
    use serde_json::json;

    /// A catalog with two Intent platforms and two execution targets (sample names).
    pub(crate) fn sample() -> EngineCatalog {
        let m = Manifest::new("sample", "1.0.0")
            .platforms(["android", "web"])
            .intent_provider(provider("android", "native"))
            .intent_provider(provider("web", "h5"))
            .target(ExecutionTarget::new("android", ["serial", "packageName"]).connection("adb", json!({"type": "string"})).connection("port", json!({"type": "integer", "minimum": 1, "maximum": 65535})))
            .target(ExecutionTarget::new("web", ["sessionId", "runtimeEpoch"]).connection("targetId", json!({"type": "string", "minLength": 1})));
        EngineCatalog::from_manifests([&m])
    }

    fn provider(platform: &str, name: &str) -> IntentProvider {
        IntentProvider::new(platform, name, json!({"type": "object"}), IntentCall::new("obs", json!({})), IntentSummarize::new("/e", "id"))
    }

    #[test]
    fn names_come_from_the_manifests_sorted_and_unique() {
        let a = Manifest::new("a", "1.0.0")
            .platforms(["tv", "car"])
            .intent_provider(provider("tv", "remote"))
            .intent_provider(provider("car", "dash"))
            .target(ExecutionTarget::new("tv", ["screen"]))
            .target(ExecutionTarget::new("car", ["vin"]));
        let b = Manifest::new("b", "1.0.0").platforms(["tv"]).intent_provider(provider("tv", "dash")).target(ExecutionTarget::new("tv", ["other"]));
        let c = EngineCatalog::from_manifests([&a, &b]);
        assert_eq!(c.intent_platforms, ["car", "tv"]);
        assert_eq!(c.intent_providers, ["dash", "remote"]);
        let targets: Vec<(&str, &[String])> = c.targets.iter().map(|t| (t.platform.as_str(), t.identity.as_slice())).collect();
        assert_eq!(targets, [("car", &["vin".to_string()][..]), ("tv", &["screen".to_string()][..])], "first declaration wins");
        assert_eq!(EngineCatalog::from_manifests([]), EngineCatalog::default());
    }

    #[test]
    fn malformed_engine_data_is_refused() {
        let base = || Manifest::new("a", "1.0.0").platforms(["tv"]);
        assert!(check_manifest(&base().target(ExecutionTarget::new("tv", ["screen"]).connection("port", json!({"type": "integer"})))).is_ok());
        let bad = [
            (base().target(ExecutionTarget::new("car", ["vin"])), "not one of the manifest's platforms"),
            (base().target(ExecutionTarget::new("tv", Vec::<String>::new())), "at least one identity field"),
            (base().target(ExecutionTarget::new("tv", ["platform"])), "not a valid field name"),
            (base().target(ExecutionTarget::new("tv", ["a b"])), "not a valid field name"),
            (base().target(ExecutionTarget::new("tv", ["s"]).connection("s", json!({}))), "declared twice"),
            (base().target(ExecutionTarget::new("tv", ["s"])).target(ExecutionTarget::new("tv", ["t"])), "declared twice"),
            (base().target(ExecutionTarget::new("tv", ["s"]).connection("p", json!(true))), "must be a JSON object"),
            (base().intent_provider(provider("tv", "r").observation_target(json!("x"))), "observationTargetSchema"),
        ];
        for (m, why) in bad {
            let e = check_manifest(&m).expect_err(why);
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn an_empty_name_list_gives_a_valid_schema_without_enum() {
        assert_eq!(name_schema(&[], json!({"description": "d"})), json!({"type": "string", "minLength": 1, "description": "d"}));
        assert_eq!(name_schema(&["x".into()], json!({})), json!({"type": "string", "enum": ["x"]}));
    }
}
