//! One validator: the same bad arguments sent to the real host (`aab mcp`, `run`)
//! and to the provider's own test harness (`TestPlugin`, the SDK's test support)
//! are refused identically — same code, dotted `field`, message and details — and
//! never dispatched. Nothing here needs a browser: the host refuses before dispatch.

use aab_e2e::{TestEnv, error_facts};
use aab_plugin_api::test_support::{TestPlugin, cdylib_path};
use serde_json::{Value, json};

fn load(crate_underscored: &str) -> TestPlugin {
    let path = cdylib_path(crate_underscored);
    TestPlugin::load(&path).unwrap_or_else(|e| panic!("loading {} failed: {e}; run `cargo build --workspace --all-targets` first", path.display()))
}

/// The refusal facts compared between the host and `TestPlugin`.
fn facts(error: &Value) -> Value {
    json!({"error": error.get("error"), "field": error.get("field"), "message": error.get("message"), "details": error.get("details"), "dispatched": error.get("dispatched")})
}

#[test]
fn test_plugin_refuses_what_the_host_refuses_with_the_same_code_and_field() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_plugin_web", "web");
    let (fixture, web) = (load("aab_fixture_fixture"), load("aab_plugin_web"));
    let page = |extra: Value| {
        let mut v = json!({"sessionId": "s1", "runtimeEpoch": "e1"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    };
    let cases: Vec<(&TestPlugin, &str, Value, &str, &str)> = vec![
        (&fixture, "fixture-echo", json!({}), "missing_argument", "message"),
        (&fixture, "fixture-echo", json!({"message": 5}), "invalid_argument", "message"),
        (&fixture, "fixture-echo", json!({"message": "hi", "colour": "red"}), "unsupported_argument", "colour"),
        (&fixture, "fixture-echo", json!({"message": "hi", "count": 0}), "invalid_argument", "count"),
        (&fixture, "fixture-echo", json!({"message": "hi", "count": "2"}), "invalid_argument", "count"),
        (&fixture, "fixture-echo", json!({"message": "hi", "timeoutMs": 60_001}), "invalid_argument", "timeoutMs"),
        (&fixture, "fixture-echo", json!({"message": "hi", "requestId": ""}), "invalid_argument", "requestId"),
        (&fixture, "fixture-echo", json!({"message": "hi", "feedback": "loud"}), "invalid_argument", "feedback"),
        (&fixture, "fixture-fail", json!({"code": "Not-Snake"}), "invalid_argument", "code"),
        (&web, "web-click", page(json!({"selector": {"elementId": "x1"}})), "invalid_argument", "selector.elementId"),
        (&web, "web-click", page(json!({"selector": {"elementId": "e1", "bogus": 1}})), "unsupported_argument", "selector.bogus"),
        (&web, "web-click", page(json!({"selector": {}})), "invalid_argument", "selector"),
        (&web, "web-ui-observation", page(json!({"operation": "stop"})), "missing_argument", "leaseId"),
        (&web, "web-ui-observation", page(json!({"operation": "status", "durationMs": 100})), "unsupported_argument", "durationMs"),
        (&web, "web-ui-observation", page(json!({"operation": "pause"})), "invalid_argument", "operation"),
    ];
    let mut mcp = env.mcp();
    for (plugin, command, arguments, code, field) in cases {
        let (body, is_error) = mcp.call_tool("run", json!({"command": command, "arguments": arguments, "extract": null}));
        let host = facts(error_facts(&body));
        let outcome = plugin.invoke(command, arguments.clone());
        let sdk = facts(&serde_json::to_value(outcome.error.clone()).unwrap_or(Value::Null));
        if !is_error || host["error"] != json!(code) || host["field"] != json!(field) {
            mcp.fail(&format!("{command} {arguments}: the host should refuse with {code} on `{field}`, got {body}"));
        }
        if outcome.ok || outcome.dispatch_marked || host != sdk {
            mcp.fail(&format!("{command} {arguments}: TestPlugin must refuse exactly like the host\n  host: {host}\n  sdk:  {sdk}"));
        }
    }
    // A command the plugin does not list: `unknown_command` on `command` in both
    // (the host adds "did you mean" suggestions from its whole registry).
    let (body, _) = mcp.call_tool("run", json!({"command": "fixture-nope", "arguments": {}, "extract": null}));
    let outcome = fixture.invoke("fixture-nope", json!({}));
    let sdk = outcome.error.clone().expect("refused");
    let host = error_facts(&body);
    assert_eq!((host["error"].as_str(), host["field"].as_str()), (Some(sdk.error.as_str()), sdk.field.as_deref()), "{body}");
    assert_eq!(sdk.error, "unknown_command");
}
