//! JSON shapes that cross the plugin boundary. Each carries a schema id; a change
//! to the bytes of any of them is a protocol change (see docs/PLUGIN_AUTHORING.md).
//!
//! Evolution rule: fields are only ever *added*, optional and safe to ignore, and
//! readers ignore fields they do not know — so a plugin built against a newer SDK
//! still loads in an older host. Behaviour a host must understand to load a plugin
//! correctly is negotiated by name in `features`, never by a new mandatory field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const MANIFEST_SCHEMA: &str = "aab.plugin-manifest/v1";
pub const INVOCATION_SCHEMA: &str = "aab.plugin-invocation/v1";
pub const OUTCOME_SCHEMA: &str = "aab.plugin-outcome/v1";

/// Plugin API version this crate implements; a manifest's `pluginApi` requirement
/// must accept it.
pub const PLUGIN_API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `pluginApi` requirement [`Manifest::new`] writes: every 1.x host accepts it.
/// Deliberately not `^` + this crate's version: a plugin built against SDK 1.4 would
/// then be refused by a 1.0 host although the protocol only ever grows optional
/// fields. Behaviour a plugin needs from a newer host is negotiated by name
/// (`host.info` → `services`/`features`), not by raising this floor.
pub const PLUGIN_API_BASELINE: &str = "^1.0";

/// What a plugin advertises. Built by [`crate::sdk::Provider::manifest`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Manifest {
    pub schema: String,
    pub name: String,
    pub version: String,
    /// semver requirement on the plugin API, e.g. `^1.0`.
    pub plugin_api: String,
    pub platforms: Vec<String>,
    /// Optional behaviour negotiated by name rather than by version bumps.
    #[serde(default)]
    pub features: Vec<String>,
    pub commands: Vec<CommandSpec>,
    /// Intent providers this plugin offers (observe → summarize → act), as data:
    /// the host's Intent engine never branches on a platform or provider name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intent_providers: Vec<IntentProvider>,
    /// Managed Intent workflows (e.g. `install-apk`): a public command of this
    /// plugin that starts an Intent with a fixed provider, whose end is decided
    /// by the plugin's verification, not by the agent (see [`IntentWorkflow`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intent_workflows: Vec<IntentWorkflow>,
    /// Domains this plugin declares for its own commands, in addition to the
    /// built-in [`crate::check::DOMAINS`] (a private provider's commands get their
    /// own heading in `capabilities` instead of another platform's). Rules in
    /// [`Manifest::check`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<DomainSpec>,
    /// Execution targets this plugin serves (`script.target`), as data: the host
    /// builds the Script target schema from them and names no platform itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<ExecutionTarget>,
    /// Environment variables that change what this plugin does (e.g. which adb
    /// server it talks to). The runtime inherits the environment of the client that
    /// started it, so the host makes these part of the runtime's configuration
    /// fingerprint: a client with other values gets its own runtime rather than one
    /// that silently acts on another setup. Names as in [`Manifest::check`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<String>,
}

/// A domain declared by a plugin: a heading in `capabilities` and `--help` that
/// groups its commands, listed after the built-in domains.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DomainSpec {
    /// Lower-case kebab-case, like a command name; not a built-in domain.
    pub name: String,
    /// What the domain groups (one line, shown in `capabilities`' `commandDomains`).
    pub description: String,
}

impl DomainSpec {
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        DomainSpec { name: name.into(), description: description.into() }
    }
}

/// One execution target of a platform (docs/PLUGIN_AUTHORING.md, "Execution
/// targets"): `script.target` is `{platform, <identity fields>, <connection
/// fields>?}` and nothing else. Identity fields are required, non-blank strings and
/// default the same-named arguments of every `ctx.call`; connection fields are
/// optional, each with its own JSON Schema.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExecutionTarget {
    /// One of the manifest's `platforms`.
    pub platform: String,
    /// Required fields that identify the target (e.g. a device serial and an app id).
    pub identity: Vec<String>,
    /// Optional connection fields → their JSON Schema.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub connection: std::collections::BTreeMap<String, Value>,
}

impl ExecutionTarget {
    /// A target of `platform` identified by `identity` fields.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(platform: impl Into<String>, identity: I) -> Self {
        ExecutionTarget { platform: platform.into(), identity: strings(identity), connection: Default::default() }
    }

    /// An optional connection field with its JSON Schema.
    pub fn connection(mut self, field: impl Into<String>, schema: Value) -> Self {
        self.connection.insert(field.into(), schema);
        self
    }
}

/// One Intent provider (docs/PLUGIN_AUTHORING.md, "Intent providers").
///
/// Templates are JSON values in which a string that is exactly `"${source.path}"`
/// is replaced by the value found there (any JSON type). Sources: `target` (the
/// Intent's start target), `action` (the agent's validated action), `element` (the
/// element of the committed observation the action's selector resolved to, plus
/// `element.identity` = its `identityFields`), `observation` (the committed
/// observation value), `require` (the Intent's `require` object) and `watermark`
/// (the previous read's watermark of the same stream). When a placeholder has no
/// value, the top-level argument that contains it is left out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentProvider {
    /// Platform of the Intent target (`target.platform`), e.g. `web`.
    pub platform: String,
    /// Public provider name, e.g. `h5`.
    pub provider: String,
    /// Whether this provider is chosen when `start` names none for its platform.
    #[serde(default)]
    pub default: bool,
    /// JSON Schema of the start `target` (including `platform`).
    pub target_schema: Value,
    /// How to observe the target.
    pub observe: IntentCall,
    /// How to turn the observation value into the Intent summary.
    pub summarize: IntentSummarize,
    /// The public action vocabulary of this provider.
    pub actions: Vec<IntentAction>,
    /// Capture streams readable per observation (`require.streams`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<IntentStream>,
    /// JSON Schema of the Intent's `observationTarget` (e.g. one WebView inside the
    /// app). Absent: the provider takes none and a non-null `observationTarget` is
    /// refused with `observation_target_unsupported`. The host validates it with its
    /// own validator (codes and dotted fields as for `target`); templates read it as
    /// `${observationTarget.…}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation_target_schema: Option<Value>,
}

/// A managed Intent workflow (docs/PLUGIN_AUTHORING.md, "Managed Intent
/// workflows"). A public call of `command` does not reach the plugin directly:
/// the host starts an Intent with the fixed `provider`, first calling `command`
/// itself once (the *begin* call: the plugin's own work, e.g. staging and
/// submitting an install), then after every observation, action and `status` the
/// read-only `settle` command. Settle answers `{settled, succeeded, error?, …}`
/// (its own `ok` is the read's); only a settled answer ends the Intent
/// (`completed` when `succeeded`, else `failed`, or `ambiguous` when it says
/// `ambiguous:true`), and an agent's `complete`
/// decision cannot override it. Templates read `${workflow.args.…}` (the public
/// arguments), `${workflow.begin.…}` (the begin result) and
/// `${workflow.actions}` (how many actions the Intent dispatched).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentWorkflow {
    /// The public command (one of this plugin's commands).
    pub command: String,
    /// The Intent provider the workflow observes and acts through (fixed).
    pub provider: String,
    /// The key under which every reply of the Intent carries the latest settle
    /// answer (e.g. `installation`, `permissionDialog`).
    pub status_key: String,
    /// The Intent goal (a template string over `${workflow.args.…}` parts).
    pub goal: String,
    /// The Intent target (template over `workflow.args` / `workflow.begin`),
    /// validated against the provider's target schema.
    pub target: Value,
    /// The read-only verification call.
    pub settle: IntentCall,
}

impl IntentWorkflow {
    pub fn new(command: impl Into<String>, provider: impl Into<String>, status_key: impl Into<String>, goal: impl Into<String>, target: Value, settle: IntentCall) -> Self {
        IntentWorkflow { command: command.into(), provider: provider.into(), status_key: status_key.into(), goal: goal.into(), target, settle }
    }
}

/// A command call with an arguments template.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentCall {
    pub command: String,
    pub arguments: Value,
}

/// Where the summary's parts are found in the observation value (JSON Pointers).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentSummarize {
    /// Pointer to the array of actionable elements.
    pub elements: String,
    /// The element field that identifies an element within one observation.
    pub element_id: String,
    /// Element fields that make up `${element.identity}` (the binding an action
    /// carries back to the provider).
    pub identity_fields: Vec<String>,
    /// Element fields copied into summary nodes.
    pub node_fields: Vec<String>,
    /// Selector key → element field, for resolving an action's `selector` against
    /// the committed observation (every given key must match).
    pub selector_fields: std::collections::BTreeMap<String, String>,
    /// Summary `page` field → pointer into the observation.
    #[serde(default)]
    pub page: std::collections::BTreeMap<String, String>,
    /// Pointer to the page's body text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_text: Option<String>,
    /// Pointer to a boolean that says the provider itself cut the element list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_truncated: Option<String>,
}

/// One public Intent action and the command that performs it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentAction {
    /// Public action name (`decision.action.action`), e.g. `tap`.
    pub action: String,
    pub command: String,
    pub arguments_template: Value,
    /// JSON Schema of `decision.action` for this action.
    pub schema: Value,
}

/// One capture stream of `require.streams`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct IntentStream {
    /// Public stream name: logs | network | state | events.
    pub stream: String,
    pub command: String,
    pub arguments: Value,
    /// Pointer to the read's watermark, carried to the next read as `${watermark}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<String>,
    /// Pointer to the read's coverage status (complete | partial | unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<String>,
    /// Pointer to the read's record array (the engine keeps at most `require.limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<String>,
    /// Continuation: extra arguments for the next page, rendered against the
    /// previous page (`${page.…}`); the read ends when a placeholder has no value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Value>,
}

impl Manifest {
    /// A manifest for this crate's plugin API with no commands yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Manifest {
            schema: MANIFEST_SCHEMA.to_string(),
            name: name.into(),
            version: version.into(),
            plugin_api: PLUGIN_API_BASELINE.to_string(),
            platforms: Vec::new(),
            features: Vec::new(),
            commands: Vec::new(),
            intent_providers: Vec::new(),
            intent_workflows: Vec::new(),
            domains: Vec::new(),
            targets: Vec::new(),
            environment: Vec::new(),
        }
    }

    /// Declare environment variables this plugin reads ([`Manifest::environment`]).
    pub fn environment<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.environment.extend(names.into_iter().map(Into::into));
        self
    }

    /// Add the platforms this plugin serves.
    pub fn platforms<I: IntoIterator<Item = S>, S: Into<String>>(mut self, platforms: I) -> Self {
        self.platforms.extend(platforms.into_iter().map(Into::into));
        self
    }

    /// Add optional behaviour names (`features`).
    pub fn features<I: IntoIterator<Item = S>, S: Into<String>>(mut self, features: I) -> Self {
        self.features.extend(features.into_iter().map(Into::into));
        self
    }

    /// Add commands.
    pub fn commands(mut self, commands: impl IntoIterator<Item = CommandSpec>) -> Self {
        self.commands.extend(commands);
        self
    }

    /// Declare private domains (see [`DomainSpec`]).
    pub fn domains(mut self, domains: impl IntoIterator<Item = DomainSpec>) -> Self {
        self.domains.extend(domains);
        self
    }

    /// Add an Intent provider.
    pub fn intent_provider(mut self, provider: IntentProvider) -> Self {
        self.intent_providers.push(provider);
        self
    }

    /// Add a managed Intent workflow (see [`IntentWorkflow`]).
    pub fn intent_workflow(mut self, workflow: IntentWorkflow) -> Self {
        self.intent_workflows.push(workflow);
        self
    }

    /// Add an execution target (`script.target`) of one of this plugin's platforms.
    pub fn target(mut self, target: ExecutionTarget) -> Self {
        self.targets.push(target);
        self
    }
}

impl IntentProvider {
    /// An Intent provider with no actions or streams yet.
    pub fn new(platform: impl Into<String>, provider: impl Into<String>, target_schema: Value, observe: IntentCall, summarize: IntentSummarize) -> Self {
        IntentProvider { platform: platform.into(), provider: provider.into(), default: false, target_schema, observe, summarize, actions: Vec::new(), streams: Vec::new(), observation_target_schema: None }
    }

    /// Accept an `observationTarget` described by `schema` (JSON Schema).
    pub fn observation_target(mut self, schema: Value) -> Self {
        self.observation_target_schema = Some(schema);
        self
    }

    /// Chosen when `start` names no provider for its platform.
    pub fn default_for_platform(mut self) -> Self {
        self.default = true;
        self
    }

    pub fn action(mut self, action: IntentAction) -> Self {
        self.actions.push(action);
        self
    }

    pub fn stream(mut self, stream: IntentStream) -> Self {
        self.streams.push(stream);
        self
    }
}

impl IntentCall {
    pub fn new(command: impl Into<String>, arguments: Value) -> Self {
        IntentCall { command: command.into(), arguments }
    }
}

fn strings<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> Vec<String> {
    items.into_iter().map(Into::into).collect()
}

fn pairs<I: IntoIterator<Item = (A, B)>, A: Into<String>, B: Into<String>>(items: I) -> std::collections::BTreeMap<String, String> {
    items.into_iter().map(|(a, b)| (a.into(), b.into())).collect()
}

impl IntentSummarize {
    /// Elements at pointer `elements`, identified within one observation by `element_id`.
    pub fn new(elements: impl Into<String>, element_id: impl Into<String>) -> Self {
        IntentSummarize {
            elements: elements.into(),
            element_id: element_id.into(),
            identity_fields: Vec::new(),
            node_fields: Vec::new(),
            selector_fields: Default::default(),
            page: Default::default(),
            body_text: None,
            source_truncated: None,
        }
    }
    pub fn identity_fields<I: IntoIterator<Item = S>, S: Into<String>>(mut self, fields: I) -> Self {
        self.identity_fields = strings(fields);
        self
    }
    pub fn node_fields<I: IntoIterator<Item = S>, S: Into<String>>(mut self, fields: I) -> Self {
        self.node_fields = strings(fields);
        self
    }
    /// Selector key → element field.
    pub fn selector_fields<I: IntoIterator<Item = (A, B)>, A: Into<String>, B: Into<String>>(mut self, fields: I) -> Self {
        self.selector_fields = pairs(fields);
        self
    }
    /// Summary `page` field → pointer into the observation.
    pub fn page<I: IntoIterator<Item = (A, B)>, A: Into<String>, B: Into<String>>(mut self, fields: I) -> Self {
        self.page = pairs(fields);
        self
    }
    pub fn body_text(mut self, pointer: impl Into<String>) -> Self {
        self.body_text = Some(pointer.into());
        self
    }
    pub fn source_truncated(mut self, pointer: impl Into<String>) -> Self {
        self.source_truncated = Some(pointer.into());
        self
    }
}

impl IntentAction {
    pub fn new(action: impl Into<String>, command: impl Into<String>, arguments_template: Value, schema: Value) -> Self {
        IntentAction { action: action.into(), command: command.into(), arguments_template, schema }
    }
}

impl IntentStream {
    pub fn new(stream: impl Into<String>, command: impl Into<String>, arguments: Value) -> Self {
        IntentStream { stream: stream.into(), command: command.into(), arguments, watermark: None, coverage: None, records: None, next: None }
    }
    pub fn records(mut self, pointer: impl Into<String>) -> Self {
        self.records = Some(pointer.into());
        self
    }
    pub fn next(mut self, continuation: Value) -> Self {
        self.next = Some(continuation);
        self
    }
    pub fn watermark(mut self, pointer: impl Into<String>) -> Self {
        self.watermark = Some(pointer.into());
        self
    }
    pub fn coverage(mut self, pointer: impl Into<String>) -> Self {
        self.coverage = Some(pointer.into());
        self
    }
}

/// Whether a command changes the target.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mutation {
    None,
    Always,
    /// Mutating only for the operations in `mutatingOperations`.
    Conditional,
}

/// One command as advertised in a manifest (and by host built-ins).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CommandSpec {
    pub command: String,
    pub domain: String,
    pub summary: String,
    /// android | ios | web | host | multi
    pub platform: String,
    /// capability | expert | execution | evidence
    pub role: String,
    /// host | host-runtime | android-app | android-device | ios-app | ios-device | web-target | ...
    pub target_kind: String,
    /// Script permission that allows calling this command from Script, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_permission: Option<String>,
    pub mutation: Mutation,
    /// For `conditional` mutations: the `operation` values that mutate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutating_operations: Vec<String>,
    /// For `conditional` mutations: boolean arguments that make a call a mutation
    /// when `true` (e.g. `logcat`'s `clear`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutating_flags: Vec<String>,
    /// Schema ids of execution records this command produces (e.g. `aab.web-execution/v1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub execution_schemas: Vec<String>,
    /// Argument names whose values form the admission key (commands on the same key
    /// run one at a time). Empty = the command's own name (host-wide lane).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_key: Vec<String>,
    /// Optional lane suffix of the admission key, for commands that must not queue
    /// behind mutations on the same target (e.g. `observation`, `control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// Argument names identifying the physical device whose ownership journal guards
    /// this command's mutations. Empty = no device ownership.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_key: Vec<String>,
    /// Default and maximum of `timeoutMs`; the host owns the deadline.
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    /// Per-`operation` defaults of `timeoutMs` that differ from `default_timeout_ms`
    /// (e.g. a browser `prepare` that may download for minutes while every other
    /// operation answers in seconds). Each is within `1..=max_timeout_ms`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty", rename = "operationTimeoutsMs")]
    pub operation_timeouts: std::collections::BTreeMap<String, u64>,
    /// JSON Schema (2020-12 subset) of the command's own arguments, an object schema
    /// with `additionalProperties:false`. The host adds `requestId`, `feedback` and
    /// `timeoutMs` itself.
    pub input_schema: Value,
}

/// Default `timeoutMs` of a [`CommandSpec`] built with [`CommandSpec::query`] or
/// [`CommandSpec::mutation`], and its default maximum.
pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_MAX_TIMEOUT_MS: u64 = 30_000;

/// Builder. A provider usually writes
/// `CommandSpec::mutation("tap").platform("android").target_key("serial").permission("app.interact")`;
/// what is not set keeps the default: role `capability`, domain = platform, target
/// kind `host`, timeouts 5 s / 30 s, an empty closed object schema.
impl CommandSpec {
    fn base(command: impl Into<String>, mutation: Mutation) -> Self {
        CommandSpec {
            command: command.into(),
            domain: String::new(),
            summary: String::new(),
            platform: String::new(),
            role: "capability".to_string(),
            target_kind: "host".to_string(),
            script_permission: None,
            mutation,
            mutating_operations: Vec::new(),
            mutating_flags: Vec::new(),
            execution_schemas: Vec::new(),
            target_key: Vec::new(),
            lane: None,
            device_key: Vec::new(),
            default_timeout_ms: DEFAULT_TIMEOUT_MS,
            max_timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            operation_timeouts: std::collections::BTreeMap::new(),
            input_schema: serde_json::json!({"type": "object", "additionalProperties": false, "properties": {}}),
        }
    }

    /// A command that never changes the target (`mutation: none`).
    pub fn query(command: impl Into<String>) -> Self {
        Self::base(command, Mutation::None)
    }

    /// A command that always changes the target (`mutation: always`).
    pub fn mutation(command: impl Into<String>) -> Self {
        Self::base(command, Mutation::Always)
    }

    /// A command that mutates only for the given `operation` values.
    pub fn conditional<I: IntoIterator<Item = S>, S: Into<String>>(command: impl Into<String>, mutating_operations: I) -> Self {
        let mut s = Self::base(command, Mutation::Conditional);
        s.mutating_operations = strings(mutating_operations);
        s
    }

    /// Make a `conditional` command a mutation whenever the boolean argument
    /// `argument` is `true` (besides its mutating operations, if any).
    pub fn mutating_flag(mut self, argument: impl Into<String>) -> Self {
        self.mutation = Mutation::Conditional;
        self.mutating_flags.push(argument.into());
        self
    }

    pub fn summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    /// The platform; also the domain unless [`CommandSpec::domain`] sets another.
    pub fn platform(mut self, platform: impl Into<String>) -> Self {
        self.platform = platform.into();
        if self.domain.is_empty() {
            self.domain = self.platform.clone();
        }
        self
    }

    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }

    /// capability | expert | execution | evidence
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.role = role.into();
        self
    }

    pub fn target_kind(mut self, target_kind: impl Into<String>) -> Self {
        self.target_kind = target_kind.into();
        self
    }

    /// The Script permission that allows calling this command from Script.
    pub fn permission(mut self, permission: impl Into<String>) -> Self {
        self.script_permission = Some(permission.into());
        self
    }

    /// Add an argument whose value is part of the admission key.
    pub fn target_key(mut self, argument: impl Into<String>) -> Self {
        self.target_key.push(argument.into());
        self
    }

    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.lane = Some(lane.into());
        self
    }

    /// Add an argument naming the physical device whose ownership journal guards
    /// this command's mutations.
    pub fn device_key(mut self, argument: impl Into<String>) -> Self {
        self.device_key.push(argument.into());
        self
    }

    /// Add the schema id of an execution record this command produces.
    pub fn execution_schema(mut self, schema: impl Into<String>) -> Self {
        self.execution_schemas.push(schema.into());
        self
    }

    /// Default and maximum `timeoutMs`.
    pub fn timeouts(mut self, default_ms: u64, max_ms: u64) -> Self {
        self.default_timeout_ms = default_ms;
        self.max_timeout_ms = max_ms;
        self
    }

    /// The default `timeoutMs` of one `operation` (the caller's `timeoutMs` still wins).
    pub fn operation_timeout(mut self, operation: impl Into<String>, default_ms: u64) -> Self {
        self.operation_timeouts.insert(operation.into(), default_ms);
        self
    }

    /// The default deadline of a call with these arguments: its `operation`'s own
    /// default, else the command's.
    pub fn default_timeout_for(&self, arguments: &Value) -> u64 {
        arguments.get("operation").and_then(Value::as_str).and_then(|op| self.operation_timeouts.get(op).copied()).unwrap_or(self.default_timeout_ms)
    }

    /// JSON Schema of the command's own arguments (a closed object schema).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }
}

/// One call of a command, as the plugin receives it (arguments already validated).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Invocation {
    pub schema: String,
    pub command: String,
    pub arguments: Value,
    /// Host-issued action id (unique per runtime).
    pub action_id: String,
    /// The runtime epoch (runtime id) that issued the action id.
    pub runtime_epoch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The caller's working directory (absolute).
    pub cwd: String,
    pub timeout_ms: u64,
    /// The caller's `feedback` execution option, if given. Host execution options
    /// (`requestId`, `feedback`, `timeoutMs`) travel here, never inside `arguments`,
    /// so a provider's argument type can `deny_unknown_fields`. Hosts before this
    /// field left them in `arguments`; [`Invocation::lift_host_options`] moves them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Value>,
}

/// Execution options the host adds to every command's schema; they are the host's,
/// never a command's own arguments.
pub const HOST_OPTIONS: [&str; 3] = ["requestId", "feedback", "timeoutMs"];

impl Invocation {
    /// An invocation of `command` (tests and hosts; plugins receive them).
    pub fn new(command: impl Into<String>, arguments: Value, action_id: impl Into<String>, runtime_epoch: impl Into<String>, cwd: impl Into<String>, timeout_ms: u64) -> Self {
        Invocation {
            schema: INVOCATION_SCHEMA.to_string(),
            command: command.into(),
            arguments,
            action_id: action_id.into(),
            runtime_epoch: runtime_epoch.into(),
            request_id: None,
            cwd: cwd.into(),
            timeout_ms,
            feedback: None,
        }
    }

    pub fn with_request_id(mut self, request_id: Option<String>) -> Self {
        self.request_id = request_id;
        self
    }

    pub fn with_feedback(mut self, feedback: Option<Value>) -> Self {
        self.feedback = feedback;
        self
    }

    /// Move host execution options out of `arguments` into their invocation fields
    /// (a field already set wins). The host does this before sending; the SDK does it
    /// again on receipt so invocations from older hosts look the same.
    pub fn lift_host_options(&mut self) {
        let Some(args) = self.arguments.as_object_mut() else { return };
        // Removed either way: a host option never reaches the typed arguments.
        if let Some(v) = args.remove("requestId")
            && self.request_id.is_none()
        {
            self.request_id = v.as_str().map(str::to_string);
        }
        if let Some(v) = args.remove("feedback")
            && self.feedback.is_none()
        {
            self.feedback = Some(v);
        }
        // The host already turned `timeoutMs` into `timeout_ms` (the deadline).
        args.remove("timeoutMs");
    }
}

/// What a provider returns on success.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Json(Value),
    Text(String),
    Bytes(Vec<u8>),
}

/// A provider failure with a stable code. `ambiguous` is decided by the host from
/// the dispatch mark unless the provider sets `dispatched` explicitly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ProviderError {
    pub error: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Explicit dispatch fact; `None` = derive from the dispatch mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched: Option<bool>,
    /// `Some(false)` with `dispatched: Some(true)`: the effect happened and the
    /// device's own receipt settled the outcome (a known failure, e.g. a focus
    /// the app rejected). `None` = a failure after the mark is ambiguous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambiguous: Option<bool>,
}

impl ProviderError {
    pub fn new(error: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError { error: error.into(), message: message.into(), field: None, details: None, dispatched: None, ambiguous: None }
    }
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
    /// Declare that the effect certainly did not happen (e.g. refused by the device).
    pub fn not_dispatched(mut self) -> Self {
        self.dispatched = Some(false);
        self
    }
    /// Declare a known failure after dispatch: the device's own settled receipt
    /// says the effect was attempted and failed. The host settles the device's
    /// ownership journal instead of leaving it unresolved.
    pub fn settled_after_dispatch(mut self) -> Self {
        self.dispatched = Some(true);
        self.ambiguous = Some(false);
        self
    }
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error, self.message)
    }
}
impl std::error::Error for ProviderError {}

/// The JSON a plugin call returns (`aab.plugin-outcome/v1`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub schema: String,
    pub ok: bool,
    /// json | text | bytes (bytes: base64-free byte array is not JSON-friendly, so
    /// bytes travel as a JSON array of numbers only inside the process boundary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ProviderError>,
    /// Whether the plugin marked dispatch during this call (filled by the host).
    #[serde(default)]
    pub dispatch_marked: bool,
}

impl Outcome {
    pub fn from_result(result: Result<Reply, ProviderError>) -> Self {
        match result {
            Ok(reply) => {
                let (kind, value) = match reply {
                    Reply::Json(v) => ("json", v),
                    Reply::Text(t) => ("text", Value::String(t)),
                    Reply::Bytes(b) => ("bytes", Value::Array(b.into_iter().map(Value::from).collect())),
                };
                Outcome { schema: OUTCOME_SCHEMA.into(), ok: true, kind: Some(kind.into()), value: Some(value), error: None, dispatch_marked: false }
            }
            Err(e) => Outcome { schema: OUTCOME_SCHEMA.into(), ok: false, kind: None, value: None, error: Some(e), dispatch_marked: false },
        }
    }

    pub fn failure(error: &str, message: impl Into<String>) -> Self {
        Self::from_result(Err(ProviderError::new(error, message)))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            format!(r#"{{"schema":"{OUTCOME_SCHEMA}","ok":false,"error":{{"error":"plugin_output_invalid","message":"outcome could not be serialised"}}}}"#)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_new_requires_only_what_every_1x_host_provides() {
        let req = semver::VersionReq::parse(&Manifest::new("p", "1.0.0").plugin_api).unwrap();
        // The oldest host of this major, and this crate.
        assert!(req.matches(&semver::Version::new(1, 0, 0)));
        assert!(req.matches(&semver::Version::parse(PLUGIN_API_VERSION).unwrap()));
        assert!(!req.matches(&semver::Version::new(2, 0, 0)));
    }

    #[test]
    fn command_spec_builder_fills_the_shared_defaults() {
        let s = CommandSpec::mutation("tap").platform("android").target_key("serial").device_key("serial").permission("app.interact").summary("Tap");
        assert_eq!((s.domain.as_str(), s.role.as_str(), s.mutation), ("android", "capability", Mutation::Always));
        assert_eq!((s.target_key.clone(), s.device_key.clone(), s.script_permission.as_deref()), (vec!["serial".to_string()], vec!["serial".to_string()], Some("app.interact")));
        assert_eq!((s.default_timeout_ms, s.max_timeout_ms), (DEFAULT_TIMEOUT_MS, DEFAULT_MAX_TIMEOUT_MS));
        assert_eq!(s.input_schema["additionalProperties"], serde_json::json!(false));
        let q = CommandSpec::query("status").domain("diagnostics").platform("fixture");
        assert_eq!((q.domain.as_str(), q.mutation), ("diagnostics", Mutation::None));
        let c = CommandSpec::conditional("runtime", ["stop"]);
        assert_eq!(c.mutating_operations, vec!["stop".to_string()]);
    }

    #[test]
    fn host_options_move_out_of_arguments() {
        let mut inv = Invocation::new("x", serde_json::json!({"a": 1, "requestId": "r1", "feedback": "off", "timeoutMs": 5}), "act", "epoch", "/", 5);
        inv.lift_host_options();
        assert_eq!(inv.arguments, serde_json::json!({"a": 1}));
        assert_eq!((inv.request_id.as_deref(), inv.feedback.clone()), (Some("r1"), Some(serde_json::json!("off"))));
    }
}
