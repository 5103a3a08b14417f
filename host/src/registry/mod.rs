//! The one command registry: host built-ins merged with plugin manifests. It feeds
//! CLI `--help`, MCP `capabilities`, the Script catalog and argument validation, so
//! no adapter keeps its own command list.
//!
//! A plugin's commands are admitted all-or-nothing: a malformed spec or a name that
//! is already taken refuses the whole plugin, because a half-registered provider
//! would advertise a platform it cannot fully serve. Every registered schema gets
//! the host's execution options (`requestId`, `feedback`, `timeoutMs`) injected, and
//! its validator is compiled once and cached.

pub mod discovery;
pub mod extract;
pub mod request;
pub(crate) mod schema;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use aab_plugin_api::{CommandSpec, Manifest};
use jsonschema::Validator;
use serde_json::{Value, json};

use crate::error::CommandError;

// The domain list, naming rules and structural spec checks live in plugin-api so a
// provider's tests apply exactly the host's rules.
pub use aab_plugin_api::check::{DOMAINS, is_valid_command_name};
use aab_plugin_api::check::check_spec;
use aab_plugin_api::validate::edit_distance;

/// Where a command is executed.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandOrigin {
    Host,
    Plugin { name: String, file: PathBuf },
}

impl CommandOrigin {
    /// The provider name shown in discovery: `host` or the plugin's name.
    pub fn provider(&self) -> &str {
        match self {
            CommandOrigin::Host => "host",
            CommandOrigin::Plugin { name, .. } => name,
        }
    }
}

/// A command as registered: the advertised spec plus the full input schema (the
/// spec's schema with the host's execution options injected).
#[derive(Debug)]
pub struct RegisteredCommand {
    pub spec: CommandSpec,
    pub origin: CommandOrigin,
    pub input_schema: Value,
    /// Compiled on first use for built-ins (most CLI calls touch one command) and at
    /// registration for plugins (a schema that does not compile refuses the plugin).
    validator: OnceLock<Result<Validator, String>>,
}

impl RegisteredCommand {
    fn new(spec: CommandSpec, origin: CommandOrigin) -> Self {
        let input_schema = with_execution_options(&spec);
        RegisteredCommand { spec, origin, input_schema, validator: OnceLock::new() }
    }

    /// The cached validator of `input_schema`.
    pub fn validator(&self) -> Result<&Validator, CommandError> {
        self.validator.get_or_init(|| validate::compile(&self.input_schema)).as_ref().map_err(|reason| {
            CommandError::new("internal_error", format!("the input schema of `{}` does not compile: {reason}", self.spec.command))
                .with_details(json!({"command": self.spec.command, "provider": self.origin.provider()}))
        })
    }

    /// Validate already-parsed arguments (object check, depth, schema) with the
    /// validator shared with `TestPlugin`.
    pub fn validate_arguments(&self, arguments: &Value) -> Result<(), CommandError> {
        validate::validate_arguments(&self.spec.command, self.validator()?, &self.input_schema, arguments)
    }

    /// The `operation` values that select variants of this command, if any.
    pub fn operations(&self) -> Vec<String> {
        schema::operations(&self.input_schema).iter().filter_map(|v| v.as_str().map(str::to_string)).collect()
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    commands: BTreeMap<String, RegisteredCommand>,
    /// Platforms declared by loaded plugin manifests.
    platforms: BTreeSet<String>,
    /// Private domains declared by loaded plugin manifests: name → (description,
    /// declaring plugin). Listed after the built-in [`DOMAINS`], by name.
    private_domains: BTreeMap<String, (String, String)>,
    /// Built-in names registered only after the plugins ([`Registry::reserve`]):
    /// a plugin declaring one is refused as if the built-in were already there.
    reserved: BTreeSet<String>,
    /// Host-provided discovery narrowings (at most one per command).
    narrowings: BTreeMap<String, FieldNarrowing>,
    /// Why commands may be missing (the plugin directory could not be read): an
    /// unregistered command then reports this instead of `unknown_command`.
    missing_commands_cause: Option<CommandError>,
}

/// Discovery data, provided by the host, that narrows one field of one
/// operation's schema by the `platform` / `provider` / `action` query filters
/// (Intent `decide` → one provider's declared action schema). The registry only
/// matches selector values and splices schemas; it never interprets a platform.
#[derive(Clone, Debug, Default)]
pub struct FieldNarrowing {
    pub command: String,
    pub operation: String,
    /// JSON Pointer, inside the operation-narrowed input schema, of the field
    /// replaced by the selected variants' schemas.
    pub pointer: String,
    /// JSON Pointer of a field pinned to the provider when one provider remains.
    pub provider_pointer: Option<String>,
    pub variants: Vec<NarrowingVariant>,
}

#[derive(Clone, Debug)]
pub struct NarrowingVariant {
    pub platform: String,
    pub provider: String,
    pub action: String,
    pub schema: Value,
}

impl NarrowingVariant {
    /// The selector value for one filter key (`platform`, `provider`, `action`).
    pub fn selector(&self, key: &str) -> &str {
        match key {
            "platform" => &self.platform,
            "provider" => &self.provider,
            _ => &self.action,
        }
    }
}

impl Registry {
    /// Register the host's built-ins. They are host code, so a malformed built-in is
    /// a bug caught by tests (`debug_assert`, and [`Registry::compile_all`]), not a
    /// runtime condition.
    pub fn new(builtins: Vec<CommandSpec>) -> Registry {
        let mut registry = Registry::default();
        for spec in builtins {
            debug_assert!(check_spec(&spec).is_ok(), "malformed built-in `{}`: {:?}", spec.command, check_spec(&spec));
            debug_assert!(!registry.commands.contains_key(&spec.command), "duplicate built-in `{}`", spec.command);
            registry.commands.entry(spec.command.clone()).or_insert_with(|| RegisteredCommand::new(spec, CommandOrigin::Host));
        }
        registry
    }

    /// Reserve built-in command names that [`Registry::add_host`] registers after
    /// the plugins (their schemas depend on what the plugins declare).
    pub fn reserve<'a>(&mut self, commands: impl IntoIterator<Item = &'a str>) {
        self.reserved.extend(commands.into_iter().map(str::to_string));
    }

    /// Register one built-in (normally a reserved name) after the plugins.
    pub fn add_host(&mut self, spec: CommandSpec) {
        debug_assert!(check_spec(&spec).is_ok(), "malformed built-in `{}`: {:?}", spec.command, check_spec(&spec));
        self.reserved.remove(&spec.command);
        self.commands.insert(spec.command.clone(), RegisteredCommand::new(spec, CommandOrigin::Host));
    }

    /// Register all commands of one plugin, or none of them. Returns how many were
    /// registered.
    pub fn add_plugin(&mut self, name: &str, file: &Path, manifest: &Manifest) -> Result<usize, CommandError> {
        self.add_plugin_checked(name, file, manifest, false)
    }

    /// [`Registry::add_plugin`] for a manifest this host build already checked and
    /// compiled (the same file bytes, the same `aab` executable — the client's
    /// manifest cache records both): the manifest rules are not re-run and validators
    /// are compiled lazily, on first use, so an ordinary CLI call does not check and
    /// compile every schema of every plugin. The runtime always checks in full.
    pub fn add_plugin_checked(&mut self, name: &str, file: &Path, manifest: &Manifest, schemas_known_good: bool) -> Result<usize, CommandError> {
        let origin = CommandOrigin::Plugin { name: name.to_string(), file: file.to_path_buf() };
        // The same rules a provider's own tests apply (`TestPlugin`); skipped only for
        // a manifest this very host build already checked (the client's cache).
        if !schemas_known_good {
            manifest.check().map_err(|p| match p.command {
                Some(command) => manifest_invalid(file, &command, p.reason),
                None => manifest_refused(file, p.reason),
            })?;
        }
        // Two plugins may share a private domain only if they describe it alike:
        // one heading cannot carry two descriptions.
        for domain in &manifest.domains {
            if let Some((description, owner)) = self.private_domains.get(&domain.name)
                && *description != domain.description
            {
                return Err(manifest_refused(file, format!("declared domain `{}` is already declared by plugin `{owner}` with another description", domain.name)));
            }
        }
        let mut staged: Vec<RegisteredCommand> = Vec::with_capacity(manifest.commands.len());
        for spec in &manifest.commands {
            if let Some(owner) = self.commands.get(&spec.command) {
                return Err(conflict(file, &spec.command, &owner.origin));
            }
            if self.reserved.contains(&spec.command) {
                return Err(conflict(file, &spec.command, &CommandOrigin::Host));
            }
            staged.push(RegisteredCommand::new(spec.clone(), origin.clone()));
        }
        // Compile now rather than lazily: a schema that does not compile must refuse
        // the plugin at load time, not fail a user's call later.
        for command in staged.iter().filter(|_| !schemas_known_good) {
            let compiled = validate::compile(&command.input_schema);
            if let Err(reason) = &compiled {
                return Err(manifest_invalid(file, &command.spec.command, format!("its inputSchema does not compile: {reason}")));
            }
            let _ = command.validator.set(compiled);
        }
        let count = staged.len();
        for command in staged {
            self.commands.insert(command.spec.command.clone(), command);
        }
        self.platforms.extend(manifest.platforms.iter().cloned());
        for domain in &manifest.domains {
            self.private_domains.entry(domain.name.clone()).or_insert_with(|| (domain.description.clone(), name.to_string()));
        }
        Ok(count)
    }

    pub fn get(&self, command: &str) -> Option<&RegisteredCommand> {
        self.commands.get(command)
    }

    /// Install (or replace) the discovery narrowing of `narrowing.command`.
    pub fn set_narrowing(&mut self, narrowing: FieldNarrowing) {
        self.narrowings.insert(narrowing.command.clone(), narrowing);
    }

    /// The discovery narrowing of `command`, if the host provided one.
    pub fn narrowing(&self, command: &str) -> Option<&FieldNarrowing> {
        self.narrowings.get(command)
    }

    /// All commands, sorted by command name.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredCommand> {
        self.commands.values()
    }

    pub fn len(&self) -> usize {
        self.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Target platforms served: those declared by plugin manifests plus those of
    /// registered commands, without the pseudo-platforms `host` and `multi`.
    pub fn platforms(&self) -> BTreeSet<String> {
        let mut platforms = self.platforms.clone();
        platforms.extend(self.commands.values().map(|c| c.spec.platform.clone()));
        platforms.retain(|p| p != "host" && p != "multi");
        platforms
    }

    /// Every domain with its description, in presentation order: the built-in
    /// [`DOMAINS`], then the private domains of loaded plugins by name.
    pub fn domains(&self) -> Vec<(&str, &str)> {
        DOMAINS.iter().copied().chain(self.private_domains.iter().map(|(name, (description, _))| (name.as_str(), description.as_str()))).collect()
    }

    /// Compile every validator now; the first failure is returned. Lets tests (and a
    /// runtime at start-up) prove the built-in schemas instead of finding out on a call.
    pub fn compile_all(&self) -> Result<(), CommandError> {
        self.commands.values().try_for_each(|c| c.validator().map(|_| ()))
    }

    /// `unknown_command`, then schema validation with the contract's codes.
    pub fn validate(&self, command: &str, arguments: &Value) -> Result<&RegisteredCommand, CommandError> {
        let Some(registered) = self.commands.get(command) else { return Err(self.unknown_command(command)) };
        registered.validate_arguments(arguments)?;
        Ok(registered)
    }

    /// Record why commands may be missing (see [`Registry::unknown_command`]).
    pub fn set_missing_commands_cause(&mut self, cause: CommandError) {
        self.missing_commands_cause = Some(cause);
    }

    pub fn missing_commands_cause(&self) -> Option<&CommandError> {
        self.missing_commands_cause.as_ref()
    }

    /// The `unknown_command` rejection, with a hint when the name is close to a real
    /// one; the recorded cause instead when commands may be missing for a reason.
    pub fn unknown_command(&self, command: &str) -> CommandError {
        if let Some(cause) = &self.missing_commands_cause
            && command != "capabilities"
        {
            let mut error = cause.clone();
            error.message = format!("`{command}` is not available: {}", cause.message);
            let mut details = cause.details.clone().unwrap_or_else(|| json!({}));
            if let Some(map) = details.as_object_mut() {
                map.insert("command".into(), json!(command));
            }
            return error.with_details(details);
        }
        if command == "capabilities" {
            return CommandError::new(
                "unknown_command",
                "`capabilities` is not a command: use the MCP `capabilities` discovery tool (CLI: `aab --help` or `aab --help COMMAND`)",
            )
            .with_field("command");
        }
        let suggestions: Vec<&str> = self.commands.keys().filter(|name| edit_distance(name, command) <= 2).map(String::as_str).take(5).collect();
        let mut message = format!("unknown command `{command}`");
        if suggestions.is_empty() {
            message.push_str("; `capabilities` lists the available commands");
            CommandError::new("unknown_command", message).with_field("command")
        } else {
            message.push_str(&format!("; did you mean {}?", suggestions.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(" or ")));
            CommandError::new("unknown_command", message).with_field("command").with_details(json!({"suggestions": suggestions}))
        }
    }
}


fn manifest_invalid(file: &Path, command: &str, reason: String) -> CommandError {
    CommandError::new("plugin_manifest_invalid", format!("plugin `{}` was not loaded: command `{command}` is invalid: {reason}", file.display()))
        .with_details(json!({"file": file.display().to_string(), "command": command, "reason": reason}))
}

/// A manifest refused as a whole (not one command's fault).
fn manifest_refused(file: &Path, reason: String) -> CommandError {
    CommandError::new("plugin_manifest_invalid", format!("plugin `{}` was not loaded: {reason}", file.display()))
        .with_details(json!({"file": file.display().to_string(), "reason": reason}))
}

fn conflict(file: &Path, command: &str, owner: &CommandOrigin) -> CommandError {
    let owned_by = match owner {
        CommandOrigin::Host => "the host".to_string(),
        CommandOrigin::Plugin { name, file } => format!("plugin `{name}` ({})", file.display()),
    };
    CommandError::new(
        "plugin_command_conflict",
        format!("plugin `{}` was not loaded: it declares command `{command}`, which is already provided by {owned_by}", file.display()),
    )
    .with_details(json!({"file": file.display().to_string(), "command": command, "owner": owner.provider()}))
}

/// The spec's schema plus `requestId`, `feedback` and `timeoutMs` (plugin-api owns
/// it, so `TestPlugin` validates against the very schema the host does).
fn with_execution_options(spec: &CommandSpec) -> Value {
    aab_plugin_api::validate::input_schema_with_host_options(spec)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    /// A minimal valid spec for tests across the registry modules.
    pub(crate) fn spec(command: &str, domain: &str, platform: &str, input_schema: Value) -> CommandSpec {
        CommandSpec::query(command).summary(format!("{command} summary")).platform(platform).domain(domain).target_kind("android-app").timeouts(5000, 30000).input_schema(input_schema)
    }

    /// `simple("tap")` changed by `f`.
    fn tap_with(f: impl FnOnce(&mut CommandSpec)) -> CommandSpec {
        let mut s = simple("tap");
        f(&mut s);
        s
    }

    pub(crate) fn object_schema(properties: Value, required: &[&str]) -> Value {
        json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
    }

    fn simple(command: &str) -> CommandSpec {
        spec(command, "core", "android", object_schema(json!({"packageName": {"type": "string", "minLength": 1}}), &["packageName"]))
    }

    fn manifest(name: &str, commands: Vec<CommandSpec>) -> Manifest {
        let mut m = Manifest::new(name, "1.0.0");
        m.platforms = vec!["android".into()];
        m.commands = commands;
        m
    }

    #[test]
    fn builtins_then_plugins_sorted_by_name() {
        let mut registry = Registry::new(vec![simple("status"), simple("runtime")]);
        assert_eq!(registry.add_plugin("android", Path::new("/p/libandroid.so"), &manifest("android", vec![simple("tap"), simple("logs")])).unwrap(), 2);
        let names: Vec<&str> = registry.iter().map(|c| c.spec.command.as_str()).collect();
        assert_eq!(names, ["logs", "runtime", "status", "tap"]);
        assert_eq!(registry.get("tap").unwrap().origin.provider(), "android");
        assert_eq!(registry.get("status").unwrap().origin, CommandOrigin::Host);
        assert_eq!(registry.platforms().into_iter().collect::<Vec<_>>(), ["android"]);
        registry.compile_all().unwrap();
    }

    #[test]
    fn conflict_refuses_the_whole_plugin_and_keeps_the_owner() {
        let mut registry = Registry::new(vec![simple("status")]);
        registry.add_plugin("first", Path::new("/p/libfirst.so"), &manifest("first", vec![simple("tap")])).unwrap();
        let refused = manifest("second", vec![simple("swipe"), simple("tap")]);
        let e = registry.add_plugin("second", Path::new("/p/libsecond.so"), &refused).unwrap_err();
        assert_eq!(e.code, "plugin_command_conflict");
        assert!(e.message.contains("/p/libsecond.so") && e.message.contains("`tap`") && e.message.contains("`first`"), "{}", e.message);
        assert_eq!(e.details, Some(json!({"file": "/p/libsecond.so", "command": "tap", "owner": "first"})));
        assert!(registry.get("swipe").is_none(), "nothing of the refused plugin may be registered");
        let tap = registry.get("tap").unwrap();
        assert_eq!(tap.origin, CommandOrigin::Plugin { name: "first".into(), file: "/p/libfirst.so".into() });
        assert_eq!(registry.len(), 2);

        let e = registry.add_plugin("third", Path::new("/p/libthird.so"), &manifest("third", vec![simple("status")])).unwrap_err();
        assert_eq!(e.details.unwrap()["owner"], json!("host"));
        assert!(e.message.contains("the host"), "{}", e.message);
    }

    #[test]
    fn malformed_specs_refuse_the_plugin() {
        let cases: Vec<(CommandSpec, &str)> = vec![
            (simple("Tap"), "name"),
            (simple("tap--x"), "name"),
            (simple("capabilities"), "reserved"),
            (tap_with(|s| s.domain = "android".into()), "domain"),
            (tap_with(|s| s.input_schema = json!({"type": "object"})), "additionalProperties"),
            (tap_with(|s| s.input_schema = json!({"type": "array", "additionalProperties": false})), "\"type\": \"object\""),
            (tap_with(|s| s.default_timeout_ms = 0), "defaultTimeoutMs"),
            (tap_with(|s| s.default_timeout_ms = 40000), "maxTimeoutMs"),
            (
                tap_with(|s| s.input_schema = object_schema(json!({"a": {"$ref": "https://example.com/a.json"}}), &[])),
                "external reference",
            ),
            (tap_with(|s| s.input_schema = object_schema(json!({"a": {"type": "strin"}}), &[])), "does not compile"),
            (tap_with(|s| s.input_schema = object_schema(json!({"a": {"pattern": "(?<=x)y"}}), &[])), "does not compile"),
        ];
        for (bad, needle) in cases {
            let mut registry = Registry::new(Vec::new());
            let command = bad.command.clone();
            let e = registry.add_plugin("p", Path::new("/p/libp.so"), &manifest("p", vec![simple("good"), bad])).unwrap_err();
            assert_eq!(e.code, "plugin_manifest_invalid", "{command}");
            assert!(e.message.contains(needle), "{command}: {}", e.message);
            assert!(registry.is_empty(), "{command}: the valid sibling must not be registered");
        }
        let mut registry = Registry::new(Vec::new());
        let e = registry.add_plugin("p", Path::new("/p/libp.so"), &manifest("p", vec![simple("tap"), simple("tap")])).unwrap_err();
        assert_eq!(e.code, "plugin_manifest_invalid");
    }

    #[test]
    fn private_domains_follow_the_builtin_ones() {
        let acme = |description: &str| {
            let mut m = manifest("acme", vec![spec("acme-ping", "acme-lab", "acme", object_schema(json!({}), &[]))]);
            m.domains = vec![aab_plugin_api::DomainSpec::new("acme-lab", description)];
            m
        };
        let mut registry = Registry::new(vec![simple("status")]);
        registry.add_plugin("acme", Path::new("/p/libacme.so"), &acme("Acme lab devices")).unwrap();
        let domains = registry.domains();
        assert_eq!(domains.len(), DOMAINS.len() + 1);
        assert_eq!(domains[..DOMAINS.len()], DOMAINS[..]);
        assert_eq!(domains.last(), Some(&("acme-lab", "Acme lab devices")));
        assert_eq!(registry.get("acme-ping").unwrap().spec.domain, "acme-lab");

        // Undeclared → refused as a whole with the command named.
        let mut undeclared = acme("x");
        undeclared.domains.clear();
        let e = Registry::new(Vec::new()).add_plugin("acme", Path::new("/p/libacme.so"), &undeclared).unwrap_err();
        assert_eq!((e.code.as_str(), e.details.as_ref().unwrap()["command"].as_str()), ("plugin_manifest_invalid", Some("acme-ping")));
        // A domain-level problem names no command.
        let mut builtin = acme("x");
        builtin.domains = vec![aab_plugin_api::DomainSpec::new("core", "mine")];
        let e = Registry::new(Vec::new()).add_plugin("acme", Path::new("/p/libacme.so"), &builtin).unwrap_err();
        assert_eq!(e.code, "plugin_manifest_invalid");
        assert!(e.message.contains("declared domain `core`") && !e.message.contains("command ``"), "{}", e.message);
        assert!(e.details.unwrap().get("command").is_none());

        // A second plugin may share the domain only with the same description.
        let mut same = acme("Acme lab devices");
        same.commands[0].command = "acme-pong".into();
        registry.add_plugin("acme2", Path::new("/p/libacme2.so"), &same).unwrap();
        let mut other = acme("Something else");
        other.commands[0].command = "acme-other".into();
        let e = registry.add_plugin("acme3", Path::new("/p/libacme3.so"), &other).unwrap_err();
        assert!(e.message.contains("already declared by plugin `acme`"), "{}", e.message);
        assert!(registry.get("acme-other").is_none());
        assert_eq!(registry.domains().len(), DOMAINS.len() + 1);
    }

    #[test]
    fn execution_options_are_injected_unless_defined() {
        let mut own = simple("wait-text");
        own.input_schema["properties"]["timeoutMs"] = json!({"type": "integer", "minimum": 1, "maximum": 10000});
        let registry = Registry::new(vec![simple("status"), own]);
        let status = &registry.get("status").unwrap().input_schema;
        assert_eq!(status["properties"]["requestId"]["maxLength"], json!(256));
        assert_eq!(status["properties"]["feedback"]["enum"], json!(["auto", "off", "full"]));
        assert_eq!(status["properties"]["timeoutMs"]["maximum"], json!(30000));
        let wait = &registry.get("wait-text").unwrap().input_schema;
        assert_eq!(wait["properties"]["timeoutMs"], json!({"type": "integer", "minimum": 1, "maximum": 10000}));

        let e = registry.validate("status", &json!({"packageName": "a", "timeoutMs": "fast"})).unwrap_err();
        assert_eq!(e.message, "`timeoutMs` must be an integer ≥ 1 and ≤ 30000, got \"fast\"");
        let e = registry.validate("status", &json!({"packageName": "a", "requestId": ""})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("requestId"));
        registry.validate("status", &json!({"packageName": "a", "requestId": "r1", "feedback": "off", "timeoutMs": 30000})).unwrap();
    }

    #[test]
    fn validate_rejects_unknown_commands_and_non_objects() {
        let registry = Registry::new(vec![simple("status"), simple("tap-text")]);
        let e = registry.validate("capabilities", &json!({})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("unknown_command", Some("command")));
        assert!(e.message.contains("capabilities` discovery tool"), "{}", e.message);
        let e = registry.validate("tap-txt", &json!({})).unwrap_err();
        assert_eq!(e.code, "unknown_command");
        assert_eq!(e.details, Some(json!({"suggestions": ["tap-text"]})));
        let e = registry.validate("status", &json!(["packageName"])).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("arguments")));
        let e = registry.validate("status", &json!({})).unwrap_err();
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("missing_argument", Some("packageName")));
        assert_eq!(e.to_json()["dispatched"], json!(false));
    }

    #[test]
    fn validate_enforces_depth_before_the_schema() {
        let mut deep = simple("deep");
        deep.input_schema["properties"]["payload"] = json!({"type": "object"});
        let registry = Registry::new(vec![deep]);
        let nest = |levels: usize| {
            // `levels` counts the arguments object itself.
            let mut v = json!({});
            for _ in 2..levels {
                v = json!({"n": v});
            }
            json!({"packageName": "a", "payload": v})
        };
        registry.validate("deep", &nest(64)).unwrap();
        let e = registry.validate("deep", &nest(65)).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert!(e.field.as_deref().unwrap().starts_with("payload.n.n"), "{:?}", e.field);
    }

    #[test]
    fn validators_are_compiled_once_and_shared() {
        fn shared<T: Send + Sync>() {}
        shared::<Registry>();
        let mut registry = Registry::new(vec![simple("status")]);
        registry.add_plugin("p", Path::new("/p/libp.so"), &manifest("p", vec![simple("tap")])).unwrap();
        let status = registry.get("status").unwrap();
        assert!(status.validator.get().is_none(), "built-ins compile lazily");
        registry.validate("status", &json!({"packageName": "a"})).unwrap();
        let first: *const Validator = status.validator().unwrap();
        registry.validate("status", &json!({"packageName": "b"})).unwrap();
        assert!(std::ptr::eq(first, status.validator().unwrap()), "the cached validator is reused");
        assert!(registry.get("tap").unwrap().validator.get().is_some(), "plugins compile at registration");
    }

    #[test]
    fn host_builtins_are_well_formed() {
        // With an empty catalog and with one that names platforms and targets.
        for engines in [crate::engines::catalog::EngineCatalog::default(), crate::engines::catalog::tests::sample()] {
            for spec in crate::builtins::specs(&engines) {
                assert_eq!(check_spec(&spec), Ok(()), "built-in `{}`", spec.command);
            }
            Registry::new(crate::builtins::specs(&engines)).compile_all().unwrap();
        }
    }

    #[test]
    fn engine_builtins_are_reserved_for_the_host() {
        let mut registry = Registry::new(vec![simple("status")]);
        registry.reserve(crate::builtins::ENGINE_COMMANDS);
        let e = registry.add_plugin("p", Path::new("/p/libp.so"), &manifest("p", vec![simple("script")])).unwrap_err();
        assert_eq!((e.code.as_str(), e.details.as_ref().map(|d| d["owner"].clone())), ("plugin_command_conflict", Some(json!("host"))), "{e}");
        assert!(registry.get("script").is_none(), "nothing of the refused plugin is registered");
        for spec in crate::builtins::engine_builtins(&Default::default()).into_iter().map(|b| b.spec) {
            registry.add_host(spec);
        }
        assert_eq!(registry.get("script").map(|c| c.origin.clone()), Some(CommandOrigin::Host));
    }

    #[test]
    fn command_names() {
        for ok in ["a", "tap", "ios-h5-eval", "a1-b2"] {
            assert!(is_valid_command_name(ok), "{ok}");
        }
        for bad in ["", "1a", "-a", "a-", "a--b", "a_b", "aB", "a b"] {
            assert!(!is_valid_command_name(bad), "{bad}");
        }
    }

    #[test]
    fn operations_come_from_the_tagged_union() {
        let mut s = simple("ui-observation");
        s.input_schema["properties"]["operation"] = json!({"type": "string", "enum": ["start", "stop"]});
        s.input_schema["oneOf"] = json!([
            {"properties": {"operation": {"const": "start"}}},
            {"properties": {"operation": {"const": "stop"}}}
        ]);
        let registry = Registry::new(vec![s, simple("status")]);
        assert_eq!(registry.get("ui-observation").unwrap().operations(), ["start", "stop"]);
        assert!(registry.get("status").unwrap().operations().is_empty());
    }
}
