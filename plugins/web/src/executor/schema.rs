//! The argument schema of `web-executor`: a closed object whose `oneOf` is tagged
//! on `operation`, one closed variant per operation (each also admits the host's
//! execution options `requestId`, `feedback`, `timeoutMs`, which the host adds to
//! the top level). Every limit a caller can hit is here, so the host refuses bad
//! input before the provider runs.

use aab_plugin_api::protocol::HOST_OPTIONS;
use serde_json::{Map, Value, json};

/// Caller-chosen session ids: one admission lane and one ownership journal each.
pub const SESSION_ID_PATTERN: &str = "^[A-Za-z0-9._-]{1,64}$";
pub const DEFAULT_LEASE_MS: u64 = 300_000;
pub const MIN_LEASE_MS: u64 = 1_000;
pub const MAX_LEASE_MS: u64 = 3_600_000;
pub const DEFAULT_MAX_CONTROLS: u64 = 300;
pub const MAX_CONTROLS: u64 = 1_000;
pub const MAX_TEXT: u64 = 16_384;
pub const DEFAULT_EVENTS_LIMIT: u64 = 50;
pub const MAX_EVENTS_LIMIT: u64 = 500;
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Keys `action.key` accepts (W3C key names).
pub const KEYS: [&str; 15] = ["Enter", "Escape", "Tab", "Backspace", "Delete", "Space", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown", "Insert"];

pub const OPERATIONS: [&str; 11] = ["status", "prepare", "open", "observe", "act", "navigate", "wait", "screenshot", "events", "receipt", "close"];
pub const MUTATING_OPERATIONS: [&str; 5] = ["prepare", "open", "act", "navigate", "close"];

fn session_id(required_for: &str) -> Value {
    json!({"type": "string", "pattern": SESSION_ID_PATTERN,
           "description": format!("The executor session ({required_for}): letters, digits, `.`, `_`, `-`, at most 64")})
}

fn engine() -> Value {
    json!({"type": "string", "enum": ["cdp", "webdriver"],
           "description": "cdp: a local headless Chromium driven over the DevTools protocol; webdriver: a W3C WebDriver endpoint (chromedriver, Selenium Grid 4, Appium). Default: webdriver when `endpoint` is given or AI_APP_BRIDGE_WEBDRIVER_URL is set, else cdp"})
}

fn endpoint() -> Value {
    json!({"type": "string", "pattern": "^http://[^\\s/?#]+(/[^\\s?#]*)?$", "maxLength": 2048,
           "description": "WebDriver base URL (plain http://), e.g. http://127.0.0.1:4444 for a Grid or http://127.0.0.1:9515 for chromedriver; default AI_APP_BRIDGE_WEBDRIVER_URL. Implies engine webdriver"})
}

fn browser() -> Value {
    json!({"type": "string", "enum": ["chromium", "firefox", "webkit"], "default": "chromium",
           "description": "cdp offers chromium only; webdriver offers what the endpoint offers (a Grid lists its nodes' browsers in /status)"})
}

fn capabilities() -> Value {
    json!({"type": "object", "maxProperties": 64,
           "description": "webdriver only: extra W3C capabilities merged over the engine's own into `alwaysMatch` (e.g. `platformName`, `appium:*` for an Appium server, `se:*` for a Grid). Without `browser`, a capability set naming `platformName` and no `browserName` opens a non-browser session (Appium)"})
}

fn url() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 65536, "pattern": "^((https?|file)://|about:|data:)",
           "description": "http(s)://, file://, about: or data: URL"})
}

fn frame_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$", "default": "main",
           "description": "The frame to work in: `main` (the top-level document; the frameId observe reports). Child frames are not addressable yet"})
}

fn selector() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["by", "value"],
        "description": "One element: by elementId (from observe), exact visible text, exact aria-label, or a CSS selector; `name` narrows to elements whose name attribute equals it. It must bind exactly one visible element",
        "properties": {
            "by": {"type": "string", "enum": ["elementId", "text", "ariaLabel", "css"]},
            "value": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "The elementId (e<digits>), text, aria-label or CSS selector"},
            "name": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Also require this name attribute"}
        },
        "allOf": [{"if": {"properties": {"by": {"const": "elementId"}}}, "then": {"properties": {"value": {"pattern": "^e[0-9]{1,15}$"}}}}]
    })
}

fn action() -> Value {
    let delta = |axis: &str| json!({"type": "number", "minimum": -100000, "maximum": 100000, "description": format!("Wheel delta along {axis} in CSS pixels")});
    json!({
        "type": "object", "additionalProperties": false, "required": ["type"],
        "description": "click: a real pointer click at the element's centre; input: replace the element's content by typing `text` (real input events; empty text clears); key: press one key (on the selected element, else the focused one); scroll: with deltas a real wheel over the element (else the viewport centre), without deltas scroll the selected element into view",
        "properties": {
            "type": {"type": "string", "enum": ["click", "input", "key", "scroll"]},
            "text": {"type": "string", "maxLength": MAX_TEXT, "description": "input: the new content (may be empty)"},
            "key": {"type": "string", "enum": KEYS, "description": "key: the key to press"},
            "deltaX": delta("x"),
            "deltaY": delta("y")
        },
        "oneOf": [
            {"properties": {"type": {"const": "click"}, "text": false, "key": false, "deltaX": false, "deltaY": false}},
            {"properties": {"type": {"const": "input"}, "key": false, "deltaX": false, "deltaY": false}, "required": ["text"]},
            {"properties": {"type": {"const": "key"}, "text": false, "deltaX": false, "deltaY": false}, "required": ["key"]},
            {"properties": {"type": {"const": "scroll"}, "text": false, "key": false}}
        ]
    })
}

/// A closed variant: `operation` pinned, these properties, the host options.
fn variant(operation: &str, properties: Value, required: &[&str], extra: Value) -> Value {
    let mut p = Map::new();
    p.insert("operation".into(), json!({"const": operation}));
    if let Value::Object(props) = properties {
        p.extend(props);
    }
    for option in HOST_OPTIONS {
        p.insert(option.into(), Value::Bool(true));
    }
    let mut req = vec!["operation"];
    req.extend_from_slice(required);
    let mut v = json!({"type": "object", "additionalProperties": false, "properties": p, "required": req});
    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
        v.extend(extra);
    }
    v
}

pub fn variants() -> Vec<Value> {
    vec![
        variant("status", json!({"sessionId": session_id("optional: without it, which engines are available and the open sessions")}), &[], json!({})),
        variant("prepare", json!({"engine": engine(), "endpoint": endpoint(), "browser": browser(), "capabilities": capabilities()}), &[], json!({})),
        variant(
            "open",
            json!({
                "sessionId": session_id("optional: default a generated `wx-<uuid>`; choose one so parallel opens get separate admission lanes"),
                "engine": engine(), "endpoint": endpoint(), "browser": browser(), "capabilities": capabilities(),
                "url": url(),
                "headless": {"type": "boolean", "default": true, "description": "Headless browser (cdp: only true; webdriver: false needs a display on the node)"},
                "viewport": {"type": "object", "additionalProperties": false, "required": ["width", "height"], "description": "Viewport (layout) size in CSS pixels",
                             "properties": {"width": {"type": "integer", "minimum": 100, "maximum": 7680}, "height": {"type": "integer", "minimum": 100, "maximum": 4320}}},
                "leaseMs": {"type": "integer", "minimum": MIN_LEASE_MS, "maximum": MAX_LEASE_MS, "default": DEFAULT_LEASE_MS,
                            "description": "The session is closed when no call renews it for this long (every call renews)"}
            }),
            &[],
            json!({}),
        ),
        variant(
            "observe",
            json!({"sessionId": session_id("required"), "frameId": frame_id(),
                   "maxControls": {"type": "integer", "minimum": 1, "maximum": MAX_CONTROLS, "default": DEFAULT_MAX_CONTROLS, "description": "Controls listed (the rest are counted; a truncated snapshot binds only by elementId)"},
                   "includeBodyText": {"type": "boolean", "default": true, "description": "Include the body text (at most 20000 characters)"}}),
            &["sessionId"],
            json!({}),
        ),
        variant(
            "act",
            json!({"sessionId": session_id("required"), "action": action(), "selector": selector(), "frameId": frame_id(),
                   "snapshotId": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$", "description": "Bind to this observation: the selector is resolved in it and the page must still be its document"},
                   "documentId": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$", "description": "The page must still be this document (from observe/open/navigate)"}}),
            &["sessionId", "action"],
            json!({"allOf": [
                {"if": {"properties": {"action": {"properties": {"type": {"enum": ["click", "input"]}}}}}, "then": {"required": ["selector"]}},
                {"if": {"properties": {"action": {"properties": {"type": {"const": "scroll"}}, "not": {"anyOf": [{"required": ["deltaX"]}, {"required": ["deltaY"]}]}}}},
                 "then": {"required": ["selector"]}}
            ]}),
        ),
        variant("navigate", json!({"sessionId": session_id("required"), "url": url()}), &["sessionId", "url"], json!({})),
        variant(
            "wait",
            json!({"sessionId": session_id("required"), "selector": selector(), "frameId": frame_id(),
                   "text": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Text the page body must contain"}}),
            &["sessionId"],
            json!({"oneOf": [{"required": ["selector"]}, {"required": ["text"]}]}),
        ),
        variant(
            "screenshot",
            json!({"sessionId": session_id("required"),
                   "outFile": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Write the PNG to this file (replaced atomically; relative to the caller's cwd)"},
                   "artifactDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Write the PNG as a new file in this directory (created)"}}),
            &["sessionId"],
            json!({"not": {"required": ["outFile", "artifactDir"]}}),
        ),
        variant(
            "events",
            json!({"sessionId": session_id("required; also after close"),
                   "afterSequence": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "default": 0, "description": "Continuation: `nextSequence` of the previous page"},
                   "limit": {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS_LIMIT, "default": DEFAULT_EVENTS_LIMIT}}),
            &["sessionId"],
            json!({}),
        ),
        variant(
            "receipt",
            json!({"sessionId": session_id("required; also after close"), "actionId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The action (the `actionId` of its reply)"}}),
            &["sessionId", "actionId"],
            json!({}),
        ),
        variant("close", json!({"sessionId": session_id("required")}), &["sessionId"], json!({})),
    ]
}

/// The whole schema: every property of every variant at the top level (so
/// discovery lists them), closed, and the tagged `oneOf`.
pub fn input_schema() -> Value {
    let variants = variants();
    let mut all = Map::new();
    for v in &variants {
        if let Some(p) = v["properties"].as_object() {
            for (k, s) in p {
                if k == "operation" || HOST_OPTIONS.contains(&k.as_str()) {
                    continue;
                }
                all.entry(k.clone()).or_insert_with(|| s.clone());
            }
        }
    }
    let mut properties = Map::new();
    properties.insert(
        "operation".into(),
        json!({"type": "string", "enum": OPERATIONS, "description": "status | prepare | open | observe | act | navigate | wait | screenshot | events | receipt | close"}),
    );
    properties.extend(all);
    json!({"type": "object", "additionalProperties": false, "properties": properties, "required": ["operation"], "oneOf": variants})
}
