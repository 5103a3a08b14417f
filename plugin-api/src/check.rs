//! The host's rules for a manifest, shared with provider authors: the host's loader
//! and `test_support::TestPlugin` call the same [`Manifest::check`], so a provider's
//! own tests refuse what the host would refuse. Compiling each `inputSchema` is the
//! one check left to the host (and to `TestPlugin`): it needs the JSON Schema engine.

use serde_json::{Map, Value, json};

use crate::protocol::{CommandSpec, DomainSpec, Manifest};

/// The command domains, in presentation order, with what each groups.
pub const DOMAINS: [(&str, &str); 11] = [
    ("execution", "Long-running host operations: runtime control, Intent and Script sessions, device ownership"),
    ("evidence", "Evidence archives and stored response snapshots"),
    ("core", "Read-only app state: status, UI trees, screenshots, logs, network, state and events"),
    ("app", "App lifecycle and permissions: install, launch, clear data, grant and revoke"),
    ("action", "UI input on Android: taps, text input, swipes, key events, waits"),
    ("flutter", "Flutter widget trees and Flutter-specific actions"),
    ("webview", "WebViews and H5 pages embedded in native apps"),
    ("ios", "iOS devices and apps: SDK runtime, WebDriverAgent, setup"),
    ("web", "Web pages driven through the Web SDK and web executors"),
    ("diagnostics", "Device diagnostics such as logcat"),
    ("advanced", "Expert tools: port forwarding, raw runtimes, test executors"),
];

/// Names that plugins may not take: they are adapter tools, not commands, and a
/// command of that name would be unreachable or misleading.
pub const RESERVED_COMMANDS: &[&str] = &["capabilities", "run", "help"];

/// Why a manifest is refused (`plugin_manifest_invalid`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestProblem {
    /// The command at fault, if the problem is one command's.
    pub command: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for ManifestProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.command {
            Some(c) => write!(f, "command `{c}` is invalid: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

impl Manifest {
    /// The host's structural rules: command naming, reserved names, the domain list
    /// (built-in or declared by this manifest), timeouts, a closed object
    /// `inputSchema` without external references, and each command declared once.
    /// (Schema compilation is checked by the host loader and `TestPlugin`.)
    ///
    /// Declared domains ([`Manifest::domains`]): named like commands, not a built-in
    /// domain, with a non-empty description, each declared once, and each used by
    /// at least one of this manifest's commands — an empty private heading would only
    /// be noise in `capabilities`, and an unused declaration is usually a typo in a
    /// command's `domain`.
    ///
    /// Engine data ([`check_engine_data`]): execution `targets` and Intent
    /// providers' observation-target schemas.
    pub fn check(&self) -> Result<(), ManifestProblem> {
        check_domains(&self.domains, &self.commands).map_err(|reason| ManifestProblem { command: None, reason })?;
        check_engine_data(self).map_err(|reason| ManifestProblem { command: None, reason })?;
        check_environment(&self.environment).map_err(|reason| ManifestProblem { command: None, reason })?;
        let mut seen = std::collections::BTreeSet::new();
        for spec in &self.commands {
            check_spec_with(spec, &self.domains).map_err(|reason| ManifestProblem { command: Some(spec.command.clone()), reason })?;
            if !seen.insert(spec.command.as_str()) {
                return Err(ManifestProblem { command: Some(spec.command.clone()), reason: "the manifest declares it more than once".into() });
            }
        }
        Ok(())
    }
}

/// The rules for what a manifest gives the host's engines: each execution target
/// names one of the manifest's platforms, has at least one identity field, valid
/// and distinct field names, object connection schemas, and no platform is
/// declared twice; an Intent provider's `observationTargetSchema` is an object.
pub fn check_engine_data(manifest: &Manifest) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    for t in &manifest.targets {
        let what = format!("target `{}`", t.platform);
        if !manifest.platforms.contains(&t.platform) {
            return Err(format!("{what}: its platform is not one of the manifest's platforms {:?}", manifest.platforms));
        }
        if seen.contains(&t.platform.as_str()) {
            return Err(format!("{what} is declared twice"));
        }
        seen.push(&t.platform);
        if t.identity.is_empty() {
            return Err(format!("{what}: needs at least one identity field"));
        }
        let mut fields: Vec<&str> = t.identity.iter().map(String::as_str).chain(t.connection.keys().map(String::as_str)).collect();
        if let Some(bad) = fields.iter().find(|f| !is_target_field_name(f)) {
            return Err(format!("{what}: `{bad}` is not a valid field name (letters and digits, starting with a letter; not `platform`)"));
        }
        fields.sort_unstable();
        if let Some(w) = fields.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("{what}: field `{}` is declared twice", w[0]));
        }
        if let Some((name, _)) = t.connection.iter().find(|(_, s)| !s.is_object()) {
            return Err(format!("{what}: the schema of connection field `{name}` must be a JSON object"));
        }
    }
    for p in &manifest.intent_providers {
        if p.observation_target_schema.as_ref().is_some_and(|s| !s.is_object()) {
            return Err(format!("Intent provider `{}`: observationTargetSchema must be a JSON object", p.provider));
        }
    }
    for w in &manifest.intent_workflows {
        if !manifest.commands.iter().any(|c| c.command == w.command) {
            return Err(format!("Intent workflow `{}`: not one of this plugin's commands", w.command));
        }
        if !manifest.intent_providers.iter().any(|p| p.provider == w.provider) {
            return Err(format!("Intent workflow `{}`: provider `{}` is not one of this plugin's Intent providers", w.command, w.provider));
        }
        if w.command == w.settle.command || !manifest.commands.iter().any(|c| c.command == w.settle.command) {
            return Err(format!("Intent workflow `{}`: the settle command must be another of this plugin's commands", w.command));
        }
        if !w.target.is_object() {
            return Err(format!("Intent workflow `{}`: target must be a JSON object template", w.command));
        }
    }
    Ok(())
}

fn is_target_field_name(f: &str) -> bool {
    let mut c = f.chars();
    f != "platform" && f.len() <= 64 && c.next().is_some_and(|x| x.is_ascii_alphabetic()) && c.all(|x| x.is_ascii_alphanumeric())
}

/// Whether `name` is one of the built-in [`DOMAINS`].
pub fn is_builtin_domain(name: &str) -> bool {
    DOMAINS.iter().any(|(d, _)| *d == name)
}

/// Most environment variables a manifest may declare.
pub const MAX_ENVIRONMENT_NAMES: usize = 32;

/// The rules for [`Manifest::environment`]: at most [`MAX_ENVIRONMENT_NAMES`]
/// distinct POSIX-style names (`[A-Z_][A-Z0-9_]*`, at most 128 characters).
pub fn check_environment(names: &[String]) -> Result<(), String> {
    if names.len() > MAX_ENVIRONMENT_NAMES {
        return Err(format!("declares {} environment variables; at most {MAX_ENVIRONMENT_NAMES}", names.len()));
    }
    for (i, name) in names.iter().enumerate() {
        let well_formed = !name.is_empty()
            && name.len() <= 128
            && name.bytes().enumerate().all(|(j, b)| b == b'_' || b.is_ascii_uppercase() || (j > 0 && b.is_ascii_digit()));
        if !well_formed {
            return Err(format!("environment variable name {name:?} is not upper-case letters, digits and `_` (not starting with a digit, at most 128)"));
        }
        if names[..i].contains(name) {
            return Err(format!("environment variable `{name}` is declared twice"));
        }
    }
    Ok(())
}

/// The rules for a manifest's own domains (see [`Manifest::check`]).
pub fn check_domains(domains: &[DomainSpec], commands: &[CommandSpec]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for domain in domains {
        let name = domain.name.as_str();
        if !is_valid_command_name(name) {
            return Err(format!("declared domain `{name}` is invalid: the name must match `^[a-z][a-z0-9]*(-[a-z0-9]+)*$` (lower-case kebab-case)"));
        }
        if is_builtin_domain(name) {
            return Err(format!("declared domain `{name}` is invalid: it is a built-in domain; file commands under it without declaring it"));
        }
        if domain.description.trim().is_empty() {
            return Err(format!("declared domain `{name}` is invalid: it needs a non-empty description"));
        }
        if !seen.insert(name) {
            return Err(format!("declared domain `{name}` is invalid: the manifest declares it more than once"));
        }
        if !commands.iter().any(|c| c.domain == name) {
            return Err(format!("declared domain `{name}` is invalid: no command of this manifest is filed under it"));
        }
    }
    Ok(())
}

/// `^[a-z][a-z0-9]*(-[a-z0-9]+)*$`: the names CLI flags and MCP arguments can carry.
pub fn is_valid_command_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.split('-').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

/// Structural checks of one spec (everything except compiling its schema) whose
/// domain must be built-in (the host's own commands).
pub fn check_spec(spec: &CommandSpec) -> Result<(), String> {
    check_spec_with(spec, &[])
}

/// [`check_spec`] where the domain may also be one of `declared` (a plugin's own).
pub fn check_spec_with(spec: &CommandSpec, declared: &[DomainSpec]) -> Result<(), String> {
    if !is_valid_command_name(&spec.command) {
        return Err("the name must match `^[a-z][a-z0-9]*(-[a-z0-9]+)*$` (lower-case kebab-case)".into());
    }
    if RESERVED_COMMANDS.contains(&spec.command.as_str()) {
        return Err(format!("`{}` is reserved for the host's adapters", spec.command));
    }
    if !is_builtin_domain(&spec.domain) && !declared.iter().any(|d| d.name == spec.domain) {
        let domains: Vec<&str> = DOMAINS.iter().map(|(d, _)| *d).chain(declared.iter().map(|d| d.name.as_str())).collect();
        return Err(format!("domain `{}` is not one of {} (a plugin may declare its own in the manifest's `domains`)", spec.domain, domains.join(", ")));
    }
    if spec.default_timeout_ms < 1 || spec.default_timeout_ms > spec.max_timeout_ms {
        return Err(format!("defaultTimeoutMs {} must be between 1 and maxTimeoutMs {}", spec.default_timeout_ms, spec.max_timeout_ms));
    }
    if let Some((op, ms)) = spec.operation_timeouts.iter().find(|(_, ms)| **ms < 1 || **ms > spec.max_timeout_ms) {
        return Err(format!("operationTimeoutsMs.{op} {ms} must be between 1 and maxTimeoutMs {}", spec.max_timeout_ms));
    }
    let schema = &spec.input_schema;
    if schema.get("type") != Some(&json!("object")) {
        return Err("inputSchema must be an object schema with `\"type\": \"object\"`".into());
    }
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err("inputSchema must set `\"additionalProperties\": false` so unknown arguments are refused".into());
    }
    if let Some((at, target)) = first_external_ref(schema) {
        return Err(format!("inputSchema has an external reference `{target}` at `{at}`; only `#...` references within the schema are allowed"));
    }
    Ok(())
}

/// Keywords whose value is a map of name → subschema.
const MAP_KEYWORDS: &[&str] = &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];
/// Keywords whose value is one subschema.
const SINGLE_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas (`items` may be either form).
const ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// Escape one JSON Pointer reference token (RFC 6901).
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Visit every subschema (including `schema` itself) with its JSON Pointer.
/// Only keyword positions are descended: the contents of `const`, `enum`,
/// `default` or `examples` are data, not schemas, and must not be mistaken for one.
pub fn walk(schema: &Value, pointer: &str, visit: &mut dyn FnMut(&str, &Map<String, Value>)) {
    let Value::Object(map) = schema else { return };
    visit(pointer, map);
    for (key, value) in map {
        let here = format!("{pointer}/{}", escape_token(key));
        let key = key.as_str();
        match value {
            Value::Object(children) if MAP_KEYWORDS.contains(&key) => {
                for (name, child) in children {
                    walk(child, &format!("{here}/{}", escape_token(name)), visit);
                }
            }
            Value::Object(_) if SINGLE_KEYWORDS.contains(&key) || key == "items" => walk(value, &here, visit),
            Value::Array(children) if ARRAY_KEYWORDS.contains(&key) || key == "items" => {
                for (i, child) in children.iter().enumerate() {
                    walk(child, &format!("{here}/{i}"), visit);
                }
            }
            _ => {}
        }
    }
}

/// The first `$ref`/`$dynamicRef` that leaves the document, as `(pointer, ref)`.
/// Plugins must be self-contained: the host never fetches schemas, and a reference
/// that resolves only on the author's machine would fail at someone else's.
pub fn first_external_ref(schema: &Value) -> Option<(String, String)> {
    let mut found = None;
    walk(schema, "", &mut |pointer, map| {
        if found.is_some() {
            return;
        }
        for keyword in ["$ref", "$dynamicRef"] {
            if let Some(Value::String(target)) = map.get(keyword)
                && !target.starts_with('#')
            {
                found = Some((format!("{pointer}/{keyword}"), target.clone()));
                return;
            }
        }
    });
    found
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_refs_are_found_but_data_is_not_a_schema() {
        let schema = json!({
            "properties": {"a": {"$ref": "#/$defs/x"}, "b": {"const": {"$ref": "https://x"}}},
            "$defs": {"x": {"type": "string"}}
        });
        assert_eq!(first_external_ref(&schema), None);
        let schema = json!({"properties": {"a": {"items": {"$ref": "other.json"}}}});
        assert_eq!(first_external_ref(&schema), Some(("/properties/a/items/$ref".to_string(), "other.json".to_string())));
    }

    #[test]
    fn manifest_check_applies_the_host_rules() {
        let ok = CommandSpec::query("fixture-echo").platform("fixture").domain("diagnostics");
        let m = Manifest::new("fixture", "1.0.0").commands([ok.clone()]);
        assert_eq!(m.check(), Ok(()));
        let e = Manifest::new("fixture", "1.0.0").commands([ok.clone(), ok.clone()]).check().unwrap_err();
        assert!(e.reason.contains("more than once"), "{e}");
        let e = Manifest::new("fixture", "1.0.0").commands([CommandSpec::query("echo").platform("nowhere")]).check().unwrap_err();
        assert_eq!(e.command.as_deref(), Some("echo"));
        assert!(e.reason.contains("domain `nowhere`"), "{e}");
        let e = Manifest::new("fixture", "1.0.0").commands([CommandSpec::query("Echo").domain("core")]).check().unwrap_err();
        assert!(e.reason.contains("kebab-case"), "{e}");
        let e = Manifest::new("fixture", "1.0.0").commands([CommandSpec::query("echo").domain("core").input_schema(json!({"type": "object"}))]).check().unwrap_err();
        assert!(e.reason.contains("additionalProperties"), "{e}");
    }

    #[test]
    fn environment_names_are_checked() {
        assert!(check_environment(&["ANDROID_ADB_SERVER_PORT".into(), "ADB".into(), "_X1".into()]).is_ok());
        for bad in ["", "adb", "1ADB", "A-B", "A B", "É"] {
            assert!(check_environment(&[bad.to_string()]).is_err(), "{bad:?}");
        }
        assert!(check_environment(&["ADB".into(), "ADB".into()]).unwrap_err().contains("twice"));
        let many: Vec<String> = (0..=MAX_ENVIRONMENT_NAMES).map(|i| format!("V{i}")).collect();
        assert!(check_environment(&many).is_err());
        let m = Manifest::new("p", "1.0.0").environment(["lower"]);
        assert!(m.check().unwrap_err().reason.contains("lower"));
    }

    fn private(domains: Vec<DomainSpec>, command_domains: &[&str]) -> Result<(), ManifestProblem> {
        let commands = command_domains.iter().enumerate().map(|(i, d)| CommandSpec::query(format!("acme-{i}")).platform("acme").domain(*d));
        Manifest::new("acme", "1.0.0").domains(domains).commands(commands).check()
    }

    #[test]
    fn execution_targets_are_checked_by_manifest_check() {
        use crate::protocol::ExecutionTarget;
        let with = |t: ExecutionTarget| Manifest::new("acme", "1.0.0").platforms(["acme"]).target(t).check();
        assert_eq!(with(ExecutionTarget::new("acme", ["panel"]).connection("port", json!({"type": "integer"}))), Ok(()));
        for (target, why) in [
            (ExecutionTarget::new("other", ["panel"]), "not one of the manifest's platforms"),
            (ExecutionTarget::new("acme", Vec::<String>::new()), "at least one identity field"),
            (ExecutionTarget::new("acme", ["platform"]), "not a valid field name"),
            (ExecutionTarget::new("acme", ["panel"]).connection("panel", json!({})), "declared twice"),
            (ExecutionTarget::new("acme", ["panel"]).connection("port", json!(5)), "must be a JSON object"),
        ] {
            let e = with(target).expect_err(why);
            assert!(e.command.is_none() && e.reason.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn private_domains_are_accepted_when_declared_and_used() {
        let acme = DomainSpec::new("acme-lab", "Acme's lab devices");
        assert_eq!(private(vec![acme.clone()], &["acme-lab", "core"]), Ok(()));
        // Undeclared: refused, and the message points at `domains`.
        let e = private(vec![], &["acme-lab"]).unwrap_err();
        assert_eq!(e.command.as_deref(), Some("acme-0"));
        assert!(e.reason.contains("domain `acme-lab` is not one of") && e.reason.contains("`domains`"), "{e}");
        // Round trip: `domains` is in the JSON only when declared.
        let m = Manifest::new("acme", "1.0.0").domains([acme.clone()]);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["domains"], json!([{"name": "acme-lab", "description": "Acme's lab devices"}]));
        assert_eq!(serde_json::from_value::<Manifest>(v).unwrap(), m);
        assert!(serde_json::to_value(Manifest::new("acme", "1.0.0")).unwrap().get("domains").is_none());
    }

    #[test]
    fn private_domain_rules() {
        let cases: Vec<(Vec<DomainSpec>, &[&str], &str)> = vec![
            (vec![DomainSpec::new("Acme", "x")], &["Acme"], "kebab-case"),
            (vec![DomainSpec::new("acme_lab", "x")], &["acme_lab"], "kebab-case"),
            (vec![DomainSpec::new("core", "mine")], &["core"], "built-in domain"),
            (vec![DomainSpec::new("acme", "  ")], &["acme"], "non-empty description"),
            (vec![DomainSpec::new("acme", "a"), DomainSpec::new("acme", "b")], &["acme"], "more than once"),
            (vec![DomainSpec::new("acme", "a"), DomainSpec::new("unused", "b")], &["acme"], "no command"),
        ];
        for (domains, used, needle) in cases {
            let e = private(domains.clone(), used).unwrap_err();
            assert_eq!(e.command, None, "{domains:?}");
            assert!(e.reason.contains(needle), "{domains:?}: {e}");
        }
        // A domain declared by one manifest is not available to the host's own specs.
        assert!(check_spec(&CommandSpec::query("x").domain("acme")).is_err());
    }
}
