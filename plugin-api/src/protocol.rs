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

/// What a plugin advertises. Built by [`crate::sdk::Provider::manifest`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
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
}

/// A command call with an arguments template.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IntentCall {
    pub command: String,
    pub arguments: Value,
}

/// Where the summary's parts are found in the observation value (JSON Pointers).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
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
            plugin_api: format!("^{}", PLUGIN_API_VERSION),
            platforms: Vec::new(),
            features: Vec::new(),
            commands: Vec::new(),
            intent_providers: Vec::new(),
        }
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
    /// JSON Schema (2020-12 subset) of the command's own arguments, an object schema
    /// with `additionalProperties:false`. The host adds `requestId`, `feedback` and
    /// `timeoutMs` itself.
    pub input_schema: Value,
}

/// One call of a command, as the plugin receives it (arguments already validated).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
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
}

impl ProviderError {
    pub fn new(error: impl Into<String>, message: impl Into<String>) -> Self {
        ProviderError { error: error.into(), message: message.into(), field: None, details: None, dispatched: None }
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
