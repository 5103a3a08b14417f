//! The `intent` command spec: one object schema whose `oneOf` is tagged on
//! `operation`; every branch forbids the other operations' fields, so each
//! operation accepts only its own (`unsupported_argument` otherwise).

use aab_plugin_api::CommandSpec;
use serde_json::{Value, json};

use crate::engines::catalog::{EngineCatalog, name_schema};
use crate::registry::schema::tagged_operation_list;

pub const DEFAULT_LIFETIME_MS: u64 = 300_000;
pub const MAX_LIFETIME_MS: u64 = 3_600_000;
pub const DEFAULT_MAX_ACTIONS: u64 = 30;
pub const DEFAULT_MAX_AGENT_CALLS: u64 = 30;
pub const DEFAULT_MAX_DURATION_MS: u64 = 120_000;
pub const DEFAULT_AGENT_TURN_MS: u64 = 5000;
pub const DEFAULT_REQUIRE_LIMIT: u64 = 200;

fn agent_module() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["language"],
        "description": "Autonomous agent module exporting `decide(signal)` (JavaScript: `exports.decide`, `module.exports = fn` or a top-level `function decide`; Python: a top-level `def decide`). One persistent node/python3 child per Intent loads it at start and is called once per decision turn with {goal, revision, summary, evidenceId, capture?, signal}; it returns a decision object (the `decide` shape). The child is killed on pause, cancel and at the end (resume starts a new one).",
        "properties": {
            "language": {"type": "string", "enum": ["javascript", "python"]},
            "source": {"type": "string", "minLength": 1, "maxLength": 65536},
            "sourcePath": text(4096, "Agent source file (resolved against the caller's cwd, read at start)"),
            "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 10000, "default": DEFAULT_AGENT_TURN_MS, "description": "Per-turn timeout; the agent child is killed at it (the next turn starts a new one)"}
        },
        "oneOf": [{"required": ["source"]}, {"required": ["sourcePath"]}]
    })
}

fn text(max: u64, what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "description": what})
}

fn operation_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", "description": "The Intent's operation id (returned by start)"})
}

fn revision() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 9007199254740991u64, "description": "The committed revision this request is based on"})
}

pub(super) fn decision(catalog: &EngineCatalog) -> Value {
    let provider = name_schema(&catalog.intent_providers, json!({"description": "Optional: must equal the committed observation's provider"}));
    let action_provider = name_schema(&catalog.intent_providers, json!({}));
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One decision against the committed revision. `act` needs an `action` of the observation's provider (its schema: `capabilities {command:\"intent\",operation:\"decide\",platform?,provider?,action?}` returns the provider's declared action schema; the engine validates the action against the provider of the committed observation); complete/fail/inconclusive forbid one.",
        "required": ["decisionId", "basedOnRevision", "agentDecision"],
        "properties": {
            "decisionId": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", "description": "Unique within the Intent"},
            "basedOnRevision": revision(),
            "agentDecision": {"type": "string", "enum": ["act", "complete", "fail", "inconclusive"]},
            "provider": provider,
            "action": {
                "type": "object", "required": ["action"],
                "description": "Provider action, e.g. {action:\"tap\", selector:{elementId:\"e3\"}} (the provider's declared actions: `capabilities` with operation decide). The target element must be one of the committed observation. `provider` may be named here (or on the decision); it must be the committed observation's provider.",
                "properties": {"action": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]{0,63}$"}, "provider": action_provider}
            },
            "reason": text(4096, "Why (recorded with the decision)")
        },
        "if": {"properties": {"agentDecision": {"const": "act"}}},
        "then": {"required": ["action"]},
        "else": {"properties": {"action": false}}
    })
}

fn require() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["streams"],
        "description": "Capture streams read with every observation (watermarks carried forward)",
        "properties": {
            "streams": {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"type": "string", "enum": ["logs", "network", "state", "events"]}},
            "view": {"type": "string", "enum": ["decision-window", "connected-history"], "default": "decision-window"},
            "sinceMs": {"type": "integer", "minimum": 0, "maximum": 9007199254740991u64, "description": "Only records captured at or after this Unix time (ms)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": DEFAULT_REQUIRE_LIMIT, "description": "Records kept per stream per observation (pages are read until it is reached)"},
            "timeoutMs": {"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_MS, "description": "Bound on each stream's reads per observation (never past the Intent lifetime); a stream not read in time has coverage unavailable"},
            "runtimeEpoch": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The app runtime the decision window reads; one that is not the target's current runtime is rejected (runtime_epoch_stale)"},
            "afterActionId": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 1024}, {"type": "null"}],
                              "description": "Omitted selects the current action; explicit null retains all records in the observed window without claiming causal attribution; a string selects that action (an Intent actionId or a host action id; needs factCursor)"},
            "factCursor": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Lower watermark of the first window (a watermarkCursor returned earlier); later windows continue from the committed watermarks"}
        }
    })
}

fn budget() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "properties": {
            "maxActions": {"type": "integer", "minimum": 1, "maximum": 10000, "default": DEFAULT_MAX_ACTIONS, "description": "Dispatched actions (alias maxSteps)"},
            "maxSteps": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Alias of maxActions"},
            "maxAgentCalls": {"type": "integer", "minimum": 1, "maximum": 10000, "default": DEFAULT_MAX_AGENT_CALLS},
            "maxDurationMs": {"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_MS, "default": DEFAULT_MAX_DURATION_MS, "description": "Shortens the lifetime: min(timeoutMs, maxDurationMs)"},
            "allowlist": {"type": "array", "uniqueItems": true, "items": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]{0,63}$"}, "description": "Public action names the agent may dispatch (default [\"tap\"])"}
        }
    })
}

/// (operation, description, own properties, required)
fn operations(catalog: &EngineCatalog) -> Vec<crate::registry::schema::OperationSpec> {
    let target = json!({
        "type": "object", "required": ["platform"],
        "description": "The app target; its fields are those of the chosen provider's targetSchema (the plugin manifest's intentProviders)",
        "properties": {"platform": name_schema(&catalog.intent_platforms, json!({}))}
    });
    let provider = name_schema(&catalog.intent_providers, json!({"description": "Intent provider (default: the platform's default provider)"}));
    // Its fields are the chosen provider's `observationTargetSchema` (checked by the engine).
    let observation_target = json!({"type": ["object", "null"], "description": "What to observe inside the target (e.g. one WebView), as the chosen provider's observationTargetSchema; null or omitted: the whole target"});
    vec![
        ("start", "Start an Intent (supervised; or autonomous with agentModule + budget): persist intent-started, observe, commit revision 1", json!({
            "goal": text(4096, "What the Intent should achieve"),
            "target": target,
            "provider": provider.clone(),
            "observationTarget": observation_target.clone(),
            "operationId": operation_id(),
            "timeoutMs": {"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_MS, "default": DEFAULT_LIFETIME_MS, "description": "Total Intent lifetime (ms) from start, covering waits, pauses and actions"},
            "require": require(),
            "recordingDir": text(4096, "Recording directory (not supported by this build)"),
            "mode": {"type": "string", "enum": ["supervised", "autonomous"], "default": "supervised"},
            "agentModule": agent_module(),
            "budget": budget()
        }), vec!["goal", "target"]),
        ("status", "State, committed summary and one history page (afterSequence = history.lastSequence of the previous page)", json!({
            "operationId": operation_id(),
            "afterSequence": {"type": ["integer", "string"], "pattern": "^[0-9]{1,16}$", "minimum": 0, "maximum": 9007199254740991u64, "description": "history.lastSequence of the previous page"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20, "description": "History entries per page"}
        }), vec!["operationId"]),
        ("observe", "Observe again (waiting_for_decision / waiting_for_observation); commits a new revision", json!({
            "operationId": operation_id(),
            "basedOnRevision": revision(),
            "provider": provider,
            "observationTarget": observation_target
        }), vec!["operationId"]),
        ("decide", "Decide against the committed revision: act (one provider action) or complete / fail / inconclusive", json!({
            "operationId": operation_id(),
            "decision": decision(catalog)
        }), vec!["operationId", "decision"]),
        ("pause", "Pause a waiting Intent (its lifetime keeps running)", json!({"operationId": operation_id()}), vec!["operationId"]),
        ("resume", "Resume a paused Intent", json!({"operationId": operation_id()}), vec!["operationId"]),
        ("cancel", "Cancel: drain owned work, persist the terminal checkpoint", json!({"operationId": operation_id()}), vec!["operationId"]),
        ("intervene", "Stop for human intervention (intervention_required)", json!({
            "operationId": operation_id(),
            "reason": text(4096, "Why a human must intervene")
        }), vec!["operationId", "reason"]),
    ]
}

pub fn spec(catalog: &EngineCatalog) -> CommandSpec {
    // `timeoutMs` is the lifetime on start and this call's deadline elsewhere; the
    // idempotency key and feedback are host options every operation accepts.
    let common = [
        ("requestId", json!({"type": "string", "minLength": 1, "maxLength": 256, "description": "Idempotency key"})),
        ("feedback", json!({"type": "string", "enum": ["auto", "off", "full"]})),
        ("timeoutMs", json!({"type": "integer", "minimum": 1, "maximum": MAX_LIFETIME_MS, "description": "start: the Intent's lifetime; other operations: this call's deadline"})),
    ];
    let schema = tagged_operation_list("start / status / observe / decide / pause / resume / cancel / intervene", &operations(catalog), &common);
    CommandSpec::conditional("intent", ["start", "decide"])
        .summary("Supervised observe → decide → act against a committed revision, with durable evidence (start/status/observe/decide/pause/resume/cancel/intervene)")
        .platform("multi")
        .domain("execution")
        .role("execution")
        .target_kind("platform-target")
        .timeouts(DEFAULT_LIFETIME_MS, MAX_LIFETIME_MS)
        .input_schema(schema)
}
