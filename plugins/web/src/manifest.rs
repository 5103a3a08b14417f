//! The `web` plugin manifest: every command this provider executes, with the
//! metadata the host needs (role, target kind, mutation, admission key and lane,
//! timeouts, Script permission) and a precise JSON Schema per command. The host
//! validates every argument against these schemas before the provider runs, so the
//! provider itself never re-checks public arguments.

use aab_plugin_api::protocol::Mutation;
use aab_plugin_api::{CommandSpec, Manifest};
use serde_json::{Value, json};

use crate::wire::{DOM_TARGET_SCHEMA, EXECUTION_SCHEMA};

/// Web commands share one deadline policy (reference §1.4).
const DEFAULT_TIMEOUT_MS: u64 = 5_000;
const MAX_TIMEOUT_MS: u64 = 30_000;

/// Largest safe JSON integer; bounds millisecond filters.
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

pub fn manifest() -> Manifest {
    let mut m = Manifest::new("web", env!("CARGO_PKG_VERSION"));
    m.platforms = vec!["web".to_string()];
    m.features = vec!["web-sdk-v2".to_string(), "managed-execution".to_string(), "capture-barrier".to_string(), "runtime.stop-hook".to_string()];
    // web-executor's default WebDriver endpoint: runtimes started with different ones are not shared.
    m.environment = vec![crate::executor::ENV_WEBDRIVER_URL.to_string()];
    m.intent_providers = vec![h5_intent_provider()];
    // `script.target` of a page: its identity defaults `sessionId`/`runtimeEpoch` of every ctx.call.
    m.targets = vec![aab_plugin_api::protocol::ExecutionTarget::new("web", ["sessionId", "runtimeEpoch"]).connection(
        "targetId",
        json!({"type": "string", "minLength": 1, "maxLength": 4096, "description": "connection option of this platform"}),
    )];
    m
}

/// The Web `h5` Intent provider: observe with `web-dom`, act with the managed
/// actions. Every action is bound to the committed observation: the selector is
/// resolved by the host against that observation and the dispatched command carries
/// the element's id and `expectedTarget` (pageRef + element identity) from it.
fn h5_intent_provider() -> aab_plugin_api::protocol::IntentProvider {
    use aab_plugin_api::protocol::{IntentAction, IntentCall, IntentProvider, IntentStream, IntentSummarize};
    let identity = ["elementId", "tag", "id", "name", "type", "role", "ariaLabel", "placeholder", "href", "text"];
    let page = |extra: Value| {
        let mut a = json!({"sessionId": "${target.sessionId}", "runtimeEpoch": "${target.runtimeEpoch}"});
        if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
            a.extend(extra);
        }
        a
    };
    let bound = |extra: Value| {
        page(json!({"selector": {"elementId": "${element.elementId}"},
                    "expectedTarget": {"pageRef": "${observation.pageRef}", "element": "${element.identity}"}}))
        .as_object()
        .cloned()
        .map(|mut m| {
            if let Value::Object(extra) = extra {
                m.extend(extra);
            }
            Value::Object(m)
        })
        .unwrap_or(Value::Null)
    };
    let intent_selector = json!({
        "type": "object", "additionalProperties": false,
        "description": "One element of the committed observation: its elementId, or its exact text or aria-label, optionally narrowed by tag/role",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$"},
            "text": {"type": "string", "minLength": 1, "maxLength": 300},
            "ariaLabel": {"type": "string", "minLength": 1, "maxLength": 1024},
            "tag": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9-]{0,63}$"},
            "role": {"type": "string", "pattern": "^[a-z][a-z-]{0,63}$"}
        },
        "oneOf": [{"required": ["elementId"]}, {"required": ["text"]}, {"required": ["ariaLabel"]}]
    });
    let action_schema = |name: &str, extra: Value, required: &[&str]| {
        let mut properties = json!({"action": {"const": name}, "selector": intent_selector.clone()});
        if let (Value::Object(p), Value::Object(extra)) = (&mut properties, extra) {
            p.extend(extra);
        }
        let mut req = vec!["action"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": properties, "required": req})
    };
    let delta = |axis: &str| json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": format!("CSS pixels along {axis}")});
    let stream = |name: &str| {
        IntentStream::new(
            name,
            format!("web-{name}"),
            page(json!({"view": "${require.view}", "sinceMs": "${require.sinceMs}", "factCursor": "${window.factCursor}",
                        "afterActionId": "${window.afterActionId}", "runtimeEpoch": "${require.runtimeEpoch|target.runtimeEpoch}"})),
        )
        .watermark("/watermarkCursor")
        .coverage("/coverage/status")
        .records("/records")
        .next(json!({"cursor": "${page.nextCursor}", "throughCursor": "${page.throughCursor}"}))
    };
    let summarize = IntentSummarize::new("/dom/controls", "elementId")
        .identity_fields(identity)
        .node_fields(["elementId", "tag", "role", "type", "id", "name", "text", "ariaLabel", "placeholder", "href", "value", "checked", "disabled", "visible", "editable", "interaction", "bounds"])
        .selector_fields([("elementId", "elementId"), ("text", "text"), ("ariaLabel", "ariaLabel"), ("tag", "tag"), ("role", "role")])
        .page([("pageRef", "/pageRef"), ("title", "/dom/title"), ("url", "/dom/url"), ("readyState", "/dom/readyState"), ("viewport", "/dom/viewport")])
        .body_text("/dom/bodyText")
        .source_truncated("/dom/truncated");
    let target_schema = json!({
        "type": "object", "additionalProperties": false,
        "required": ["platform", "sessionId", "runtimeEpoch"],
        "properties": {"platform": {"const": "web"}, "sessionId": session_id(), "runtimeEpoch": runtime_epoch(), "targetId": target_id()}
    });
    let mut provider = IntentProvider::new("web", "h5", target_schema, IntentCall::new("web-dom", page(json!({"maxControls": 500}))), summarize)
        .default_for_platform()
        .action(IntentAction::new("tap", "web-click", bound(json!({})), action_schema("tap", json!({}), &["selector"])))
        .action(IntentAction::new(
            "inputText",
            "web-input",
            bound(json!({"value": "${action.value}"})),
            action_schema("inputText", json!({"value": {"type": "string", "maxLength": 16384}}), &["selector", "value"]),
        ))
        .action(IntentAction::new(
            "pressKey",
            "web-key",
            bound(json!({"key": "${action.key}"})),
            action_schema("pressKey", json!({"key": {"type": "string", "enum": ["Enter", "Escape"]}}), &["selector", "key"]),
        ))
        .action(IntentAction::new("scroll", "web-scroll", bound(json!({"mode": "into-view"})), action_schema("scroll", json!({}), &["selector"])))
        .action(IntentAction::new(
            "scrollBy",
            "web-scroll",
            bound(json!({"mode": "by", "deltaX": "${action.deltaX}", "deltaY": "${action.deltaY}"})),
            extend(action_schema("scrollBy", json!({"deltaX": delta("x"), "deltaY": delta("y")}), &[]), json!({"anyOf": [{"required": ["deltaX"]}, {"required": ["deltaY"]}]})),
        ));
    for s in ["logs", "network", "state", "events"] {
        provider = provider.stream(stream(s));
    }
    provider
}

/// Shared metadata of one command; callers adjust what differs.
fn spec(name: &str, summary: &str, mutation: Mutation, target_kind: &str, input_schema: Value) -> CommandSpec {
    let base = match mutation {
        Mutation::None => CommandSpec::query(name),
        _ => CommandSpec::mutation(name),
    };
    base.summary(summary).platform("web").target_kind(target_kind).timeouts(DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS).input_schema(input_schema)
}

/// A command bound to one connected page (`sessionId` is the admission key).
fn target_spec(name: &str, summary: &str, mutation: Mutation, input_schema: Value) -> CommandSpec {
    spec(name, summary, mutation, "web-target", input_schema).target_key("sessionId")
}

fn with_permission(s: CommandSpec, permission: &str) -> CommandSpec {
    s.permission(permission)
}

fn with_lane(s: CommandSpec, lane: &str) -> CommandSpec {
    s.lane(lane)
}

fn managed(s: CommandSpec) -> CommandSpec {
    s.execution_schema(EXECUTION_SCHEMA)
}

/// An object schema: the given properties, nothing else.
fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
}

/// Add keywords (oneOf, allOf, dependentRequired, ...) to an object schema.
fn extend(mut schema: Value, extra: Value) -> Value {
    if let (Value::Object(target), Value::Object(extra)) = (&mut schema, extra) {
        target.extend(extra);
    }
    schema
}

fn session_id() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024,
           "description": "Web SDK session id of the page, as listed by `web-sessions`"})
}

fn runtime_epoch() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 1024,
           "description": "The page document's runtimeEpoch from `web-sessions`; a reloaded page has a new one"})
}

fn target_id() -> Value {
    json!({"type": "string", "enum": ["main"], "default": "main", "description": "Target within the session (only `main`)"})
}

/// `sessionId`, `runtimeEpoch` and `targetId`: the properties of every page-bound command.
fn target_properties() -> serde_json::Map<String, Value> {
    let mut p = serde_json::Map::new();
    p.insert("sessionId".into(), session_id());
    p.insert("runtimeEpoch".into(), runtime_epoch());
    p.insert("targetId".into(), target_id());
    p
}

fn props(extra: Value) -> Value {
    let mut p = target_properties();
    if let Value::Object(extra) = extra {
        p.extend(extra);
    }
    Value::Object(p)
}

/// Typed action selector: exactly one identity field, optionally narrowed by tag/role.
fn selector() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "description": "Typed selector with exactly one identity field (elementId, text, ariaLabel or css), optionally narrowed by tag and role; it must match exactly one visible element",
        "properties": {
            "elementId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$", "description": "elementId from a `web-dom` observation of the same document"},
            "text": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Visible text of a control (exact match first, then case-insensitive containment)"},
            "ariaLabel": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Exact aria-label"},
            "css": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "CSS selector"},
            "tag": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9-]{0,63}$", "description": "Restrict to this tag name"},
            "role": {"type": "string", "pattern": "^[a-z][a-z-]{0,63}$", "description": "Restrict to this (explicit or implicit) ARIA role"}
        },
        "oneOf": [
            {"required": ["elementId"]},
            {"required": ["text"]},
            {"required": ["ariaLabel"]},
            {"required": ["css"]}
        ]
    })
}

/// `{pageRef, element}` copied from a `web-dom` observation.
fn expected_target() -> Value {
    let nullable = |max: u64, what: &str| json!({"type": ["string", "null"], "maxLength": max, "description": what});
    json!({
        "type": "object",
        "additionalProperties": false,
        "description": "Binds the action to an earlier observation: the page must still be that document and navigation, and the element must be the same node with the same identity fields",
        "required": ["pageRef", "element"],
        "properties": {
            "pageRef": {
                "type": "object",
                "additionalProperties": false,
                "required": ["schemaVersion", "sessionId", "runtimeEpoch", "targetId", "navigationId", "url"],
                "properties": {
                    "schemaVersion": {"const": DOM_TARGET_SCHEMA},
                    "sessionId": {"type": "string", "minLength": 1, "maxLength": 1024},
                    "runtimeEpoch": {"type": "string", "minLength": 1, "maxLength": 1024},
                    "targetId": {"type": "string", "enum": ["main"]},
                    "navigationId": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                    "url": {"type": "string", "maxLength": 8192}
                }
            },
            "element": {
                "type": "object",
                "additionalProperties": false,
                "required": ["elementId", "tag", "id", "name", "type", "role", "ariaLabel", "placeholder", "href", "text"],
                "properties": {
                    "elementId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$"},
                    "tag": {"type": "string", "minLength": 1, "maxLength": 64},
                    "id": nullable(1024, "id attribute"),
                    "name": nullable(1024, "name attribute"),
                    "type": nullable(64, "type attribute"),
                    "role": nullable(64, "ARIA role"),
                    "ariaLabel": nullable(1024, "aria-label"),
                    "placeholder": nullable(1024, "placeholder"),
                    "href": nullable(500, "href (first 500 characters)"),
                    "text": nullable(300, "observed text (first 300 characters)")
                }
            }
        }
    })
}

/// Optional properties shared by the four capture reads (reference §6.6).
fn capture_read_schema() -> Value {
    let properties = props(json!({
        "view": {"type": "string", "enum": ["decision-window", "connected-history"], "default": "decision-window",
                 "description": "decision-window: SDK capture barrier on the connected document, committed records up to it; connected-history: retained host records (also offline)"},
        "factCursor": {"type": "string", "pattern": "^wc1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                       "description": "Lower bound: a `watermarkCursor` returned by an earlier read (observe, act, then read with it)"},
        "afterActionId": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Only records associated with this action; requires factCursor"},
        "history": {"type": "boolean", "description": "Read retained host records (same as view connected-history)"},
        "cursor": {"type": "string", "pattern": "^[0-9]{1,16}$", "description": "Continuation: `nextCursor` of the previous page"},
        "throughCursor": {"type": "string", "pattern": "^wc1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                          "description": "Continuation of a decision window: the `throughCursor` of its first page (keeps the upper bound fixed)"},
        "sinceMs": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Only records captured at or after this Unix time (ms)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 16, "default": 16, "description": "Records scanned per page"}
    }));
    let history_on = json!({"anyOf": [
        {"required": ["history"], "properties": {"history": {"const": true}}},
        {"required": ["view"], "properties": {"view": {"const": "connected-history"}}}
    ]});
    extend(
        object(properties, &["sessionId", "runtimeEpoch"]),
        json!({
            "dependentRequired": {"afterActionId": ["factCursor"], "throughCursor": ["cursor"]},
            "allOf": [
                // History reads retained records: no barrier window bounds apply.
                {"if": history_on.clone(), "then": {"properties": {"factCursor": false, "afterActionId": false, "throughCursor": false}}},
                // `history: true` contradicts an explicit decision window.
                {"if": {"required": ["history"], "properties": {"history": {"const": true}}},
                 "then": {"properties": {"view": {"enum": ["connected-history"], "description": "with history:true the view is connected-history (or omitted)"}}}},
                // A decision-window continuation keeps its fixed upper bound.
                {"if": {"required": ["cursor"], "not": history_on}, "then": {"required": ["throughCursor"]}}
            ]
        }),
    )
}

// One function per command spec; `commands::list` pairs each with its handler,
// so a command name appears only here.

pub(crate) fn session_start() -> CommandSpec {
    spec(
        "web-session-start",
        "Start the aab.web/v2 WebSocket endpoint pages connect to (and optionally serve the bundled sample app).",
        Mutation::Always,
        "host",
        object(
            json!({
                "host": {"type": "string", "pattern": "^[A-Za-z0-9.:-]{1,253}$", "default": "127.0.0.1", "description": "Listen address (default 127.0.0.1)"},
                "webPort": {"type": "integer", "minimum": 0, "maximum": 65535, "default": 18180, "description": "Listen port (default 18180; 0 = any free port)"},
                "path": {"type": "string", "pattern": "^/[A-Za-z0-9/_-]+$", "maxLength": 256, "default": "/ai-app-bridge-web", "description": "WebSocket path such as /ai-app-bridge-web (letters, digits, /, _ and -)"},
                "token": {"type": "string", "pattern": "^[A-Za-z0-9_-]{16,256}$", "description": "Connection token (default: 24 random bytes, base64url)"},
                "sampleApp": {"type": "boolean", "default": false, "description": "Also serve the bundled sample app under /sample/ (used by `aab demo`)"},
                "allowedOrigins": {"type": "array", "maxItems": 64, "uniqueItems": true,
                                   "items": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": "^(\\*|null|https?://[^/?#@\\s]+)$"},
                                   "description": "Browser origins allowed besides the default (no Origin header, loopback http(s)://localhost|127.0.0.1|[::1] on any port, the endpoint's own origin); exact scheme://host[:port], `null`, or `*` for any. Also read from AI_APP_BRIDGE_WEB_ALLOWED_ORIGINS (comma-separated)"},
                "pingIntervalMs": {"type": "integer", "minimum": 500, "maximum": 60000, "default": 20000, "description": "WebSocket ping interval"},
                "idleTimeoutMs": {"type": "integer", "minimum": 1000, "maximum": 600000, "default": 60000, "description": "A page socket with no traffic (not even a pong) for this long is closed"},
                "handshakeTimeoutMs": {"type": "integer", "minimum": 500, "maximum": 60000, "default": 5000, "description": "Time a new socket has to send its hello"},
                "headerTimeoutMs": {"type": "integer", "minimum": 500, "maximum": 60000, "default": 10000, "description": "Time an HTTP request head may take to arrive; also ends idle keep-alive connections"}
            }),
            &[],
        ),
    )
}

pub(crate) fn session_stop() -> CommandSpec {
    spec(
        "web-session-stop",
        "Stop the Web endpoint and disconnect every page (unresolved actions stay recorded).",
        Mutation::Always,
        "host",
        object(json!({}), &[]),
    )
}

pub(crate) fn connect_info() -> CommandSpec {
    spec(
        "web-connect-info",
        "Endpoint URL, token and protocol a page needs to connect with the Web SDK.",
        Mutation::None,
        "host",
        object(json!({}), &[]),
    )
}

pub(crate) fn provider_status() -> CommandSpec {
    spec(
        "web-provider-status",
        "State of the Web provider: endpoint, sessions, limits, persistence and FactStore availability.",
        Mutation::None,
        "host",
        object(json!({}), &[]),
    )
}

pub(crate) fn sessions() -> CommandSpec {
    spec(
        "web-sessions",
        "Connected and recently disconnected pages with the sessionId/runtimeEpoch/targetId that address them.",
        Mutation::None,
        "host",
        object(json!({}), &[]),
    )
}

pub(crate) fn status() -> CommandSpec {
    with_lane(
        with_permission(
            target_spec(
                "web-status",
                "Connection state, page URL/route, capture counters and outstanding actions of one session.",
                Mutation::None,
                object(props(json!({})), &["sessionId"]),
            ),
            "app.read",
        ),
        "observation",
    )
}

pub(crate) fn dom() -> CommandSpec {
    let dom_properties = props(json!({
        "selector": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "CSS selector whose matches are reported instead of the default control query (a bounded read)"},
        "maxControls": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 150, "description": "Controls to describe (the rest are counted)"},
        "history": {"type": "boolean", "description": "Read retained observation summaries instead of observing the page"},
        "cursor": {"type": "string", "pattern": "^[0-9]{1,16}$", "description": "History continuation: `nextCursor` of the previous page"},
        "throughCursor": {"type": "string", "pattern": "^[0-9]{1,16}$", "description": "History continuation: the fixed upper bound returned with the first page"},
        "sinceMs": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "History: only observations at or after this Unix time (ms)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 16, "default": 16, "description": "History: records per page"}
    }));
    with_lane(
        with_permission(
            target_spec(
                "web-dom",
                "Observe the page: pageRef (document + navigation identity), body text and controls with identity, state and interaction readiness.",
                Mutation::None,
                extend(
                    object(dom_properties, &["sessionId", "runtimeEpoch"]),
                    json!({
                        "dependentRequired": {"cursor": ["history"], "throughCursor": ["history", "cursor"], "sinceMs": ["history"], "limit": ["history"]},
                        "if": {"required": ["history"], "properties": {"history": {"const": true}}},
                        "then": {"properties": {"selector": false, "maxControls": false}}
                    }),
                ),
            ),
            "app.read",
        ),
        "observation",
    )
}

fn action(name: &str, summary: &str, extra: Value, required: &[&str], keywords: Value) -> CommandSpec {
        let mut req = vec!["sessionId", "runtimeEpoch"];
        req.extend_from_slice(required);
        managed(with_permission(target_spec(name, summary, Mutation::Always, extend(object(props(extra), &req), keywords)), "app.interact"))
    }

pub(crate) fn click() -> CommandSpec {
    action(
        "web-click",
        "One semantic DOM click on the unique visible, enabled, unobscured control (managed execution; observe the business result afterwards).",
        json!({"selector": selector(), "expectedTarget": expected_target()}),
        &["selector"],
        json!({}),
    )
}

pub(crate) fn input() -> CommandSpec {
    action(
        "web-input",
        "Replace the value of a text input, textarea or contenteditable (framework input/change events fire; password values never leave the page).",
        json!({"selector": selector(), "expectedTarget": expected_target(),
               "value": {"type": "string", "maxLength": 16384, "description": "New value (may be empty)"}}),
        &["selector", "value"],
        json!({}),
    )
}

pub(crate) fn key() -> CommandSpec {
    action(
        "web-key",
        "Deliver one bubbling, cancellable keydown (Enter or Escape) to a control; reports defaultPrevented, trusted:false.",
        json!({"selector": selector(), "expectedTarget": expected_target(),
               "key": {"type": "string", "enum": ["Enter", "Escape"], "description": "Key to deliver"}}),
        &["selector", "key"],
        json!({}),
    )
}

pub(crate) fn wait() -> CommandSpec {
    action(
        "web-wait",
        "Wait within the command deadline until exactly one of: a typed selector matches a visible element, or the body text contains targetText.",
        json!({"selector": selector(), "targetText": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Text the page body must contain"}}),
        &[],
        json!({"oneOf": [{"required": ["selector"]}, {"required": ["targetText"]}]}),
    )
}

pub(crate) fn scroll() -> CommandSpec {
    let delta = |axis: &str| json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": format!("Scroll by this many CSS pixels along {axis}")});
    action(
        "web-scroll",
        "Scroll an element into view (mode into-view) or scroll the page/an element by deltas (mode by).",
        json!({"mode": {"type": "string", "enum": ["into-view", "by"], "description": "into-view needs a selector and no deltas; by needs deltaX and/or deltaY"},
               "selector": selector(), "expectedTarget": expected_target(), "deltaX": delta("x"), "deltaY": delta("y")}),
        &["mode"],
        json!({
            "dependentRequired": {"expectedTarget": ["selector"]},
            "oneOf": [
                {"properties": {"mode": {"const": "into-view"}, "deltaX": false, "deltaY": false}, "required": ["selector"]},
                {"properties": {"mode": {"const": "by"}}, "anyOf": [{"required": ["deltaX"]}, {"required": ["deltaY"]}]}
            ]
        }),
    )
}

/// `web-<stream>` for one capture stream (logs | network | state | events).
pub(crate) fn capture(stream: &str) -> CommandSpec {
    let what = match stream {
        "logs" => "console output, errors and app log records",
        "network" => "fetch/XHR records and app network records",
        "state" => "app state records",
        _ => "UI event batches (clicks, input, route changes, DOM mutations) and app events",
    };
    with_lane(
        with_permission(
            target_spec(
                &format!("web-{stream}"),
                &format!("Committed {what} from the host FactStore: a decision window through a fresh SDK capture barrier (wc1: watermark, honest coverage) or retained history."),
                Mutation::None,
                capture_read_schema(),
            ),
            "capture.read",
        ),
        "observation",
    )
}

pub(crate) fn ui_observation() -> CommandSpec {
    let mut observation = target_spec(
        "web-ui-observation",
        "On-demand UI observation lease (100..5000 ms): the page samples title, URL, navigation, control count, focus, viewport and DOM mutations every 200 ms into the events stream (`observation.sample` records, read with web-events).",
        Mutation::Conditional,
        extend(
            object(
                props(json!({
                    "operation": {"type": "string", "enum": ["start", "status", "stop"], "description": "start a lease, report it, or stop it early"},
                    "durationMs": {"type": "integer", "minimum": 100, "maximum": 5000, "description": "Lease length (start)"},
                    "leaseId": {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": "The lease to stop (the `leaseId` of start)"}
                })),
                &["operation", "sessionId", "runtimeEpoch"],
            ),
            json!({"oneOf": [
                {"properties": {"operation": {"const": "start"}, "leaseId": false}, "required": ["durationMs"]},
                {"properties": {"operation": {"const": "status"}, "durationMs": false, "leaseId": false}},
                {"properties": {"operation": {"const": "stop"}, "durationMs": false}, "required": ["leaseId"]}
            ]}),
        ),
    );
    observation.mutating_operations = vec!["start".to_string(), "stop".to_string()];
    observation.script_permission = Some("capture.read".to_string());
    observation.lane = Some("observation".to_string());
    observation
}

pub(crate) fn execution() -> CommandSpec {
    let mut execution = target_spec(
        "web-execution",
        "Managed Web actions of a session: status, terminal result, cancel, and reconcile of actions whose completion was lost.",
        Mutation::Conditional,
        extend(
            object(
                props(json!({
                    "operation": {"type": "string", "enum": ["status", "result", "cancel", "reconcile"], "description": "What to do"},
                    "actionId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The action (the `actionId` of its reply)"}
                })),
                &["operation", "sessionId", "runtimeEpoch"],
            ),
            json!({"oneOf": [
                {"properties": {"operation": {"const": "status"}}},
                {"properties": {"operation": {"const": "result"}}, "required": ["actionId"]},
                {"properties": {"operation": {"const": "cancel"}}, "required": ["actionId"]},
                {"properties": {"operation": {"const": "reconcile"}}}
            ]}),
        ),
    );
    execution.mutating_operations = vec!["cancel".to_string()];
    execution.lane = Some("control".to_string());
    execution.execution_schemas = vec![EXECUTION_SCHEMA.to_string()];
    execution
}

pub(crate) fn raw_command() -> CommandSpec {
    let mut command = managed(target_spec(
        "web-command",
        "Expert: send one raw page command (click, input, key, waitFor, scroll, state, action) or the domSnapshot read; the page validates its arguments.",
        Mutation::Always,
        object(
            props(json!({
                "name": {"type": "string", "enum": ["click", "input", "key", "waitFor", "scroll", "state", "action", "domSnapshot"], "description": "Page command name"},
                "arguments": {"type": "object", "maxProperties": 64, "description": "Page command arguments, passed through unchanged"}
            })),
            &["name", "sessionId", "runtimeEpoch"],
        ),
    ));
    command.role = "expert".to_string();
    command
}

/// `web-executor` (reference §1.4): one conditional mutation with eleven
/// operations; every executor session is its own admission lane and ownership
/// journal (`sessionId` is both keys).
pub(crate) fn web_executor() -> CommandSpec {
    use crate::executor::schema;
    CommandSpec::conditional("web-executor", schema::MUTATING_OPERATIONS)
        .platform("web")
        .domain("web")
        .summary(
            "Drive any web page without an SDK: a local headless Chromium (engine cdp) or any W3C WebDriver endpoint (engine webdriver: chromedriver, Selenium Grid 4, Appium). \
             Operations: status, prepare (is the engine/browser usable), open (a leased session), observe (controls with identity, snapshotId), act (click/input/key/scroll with real input events, \
             bound to the observation; settled only on the page's proof of delivery), navigate, wait, screenshot, events, receipt (an action's durable outcome), close.",
        )
        .role("capability")
        .target_kind("web-executor")
        .target_key("sessionId")
        .device_key("sessionId")
        .permission("app.test")
        .timeouts(30_000, 300_000)
        // prepare may start a browser or a trial remote session: reference §10 gives it 300 s.
        .operation_timeout("prepare", 300_000)
        .input_schema(schema::input_schema())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_well_formed() {
        let mut m = manifest();
        m.commands.extend(crate::command_list::list().specs().cloned());
        assert_eq!(m.commands.len(), 20);
        for c in m.commands.iter().filter(|c| c.command != "web-executor") {
            assert_eq!(c.domain, "web");
            assert_eq!(c.platform, "web");
            assert_eq!(c.default_timeout_ms, 5000);
            assert_eq!(c.max_timeout_ms, 30000);
            assert_eq!(c.input_schema["additionalProperties"], json!(false), "{}", c.command);
            if c.target_kind == "web-target" {
                assert_eq!(c.target_key, vec!["sessionId".to_string()], "{}", c.command);
                assert_eq!(c.input_schema["properties"]["targetId"]["enum"], json!(["main"]));
            }
        }
        let by_name = |n: &str| m.commands.iter().find(|c| c.command == n).unwrap();
        assert_eq!(by_name("web-execution").lane.as_deref(), Some("control"));
        assert_eq!(by_name("web-dom").lane.as_deref(), Some("observation"));
        assert_eq!(by_name("web-command").script_permission, None);
        assert_eq!(by_name("web-command").role, "expert");
        assert_eq!(by_name("web-click").script_permission.as_deref(), Some("app.interact"));
        assert_eq!(by_name("web-logs").script_permission.as_deref(), Some("capture.read"));
        let obs = by_name("web-ui-observation");
        assert_eq!(obs.script_permission.as_deref(), Some("capture.read"));
        assert_eq!(obs.mutating_operations, vec!["start".to_string(), "stop".to_string()]);
    }
}
