//! The `web-executor` spec and schema as the host applies them: metadata, and
//! the host validator's refusals (before the plugin is ever called).

use serde_json::json;

use crate::plugin;

#[test]
fn the_spec_is_the_contracts() {
    let p = plugin();
    let spec = p.manifest.commands.iter().find(|c| c.command == "web-executor").expect("web-executor is listed");
    assert_eq!((spec.domain.as_str(), spec.platform.as_str(), spec.role.as_str(), spec.target_kind.as_str()), ("web", "web", "capability", "web-executor"));
    assert_eq!(spec.target_key, vec!["sessionId"]);
    assert_eq!(spec.device_key, vec!["sessionId"]);
    assert_eq!(spec.script_permission.as_deref(), Some("app.test"));
    assert_eq!(spec.mutating_operations, vec!["prepare", "open", "act", "navigate", "close"]);
    assert_eq!((spec.default_timeout_ms, spec.max_timeout_ms), (30_000, 300_000));
    assert_eq!(spec.default_timeout_for(&json!({"operation": "prepare"})), 300_000);
    assert_eq!(spec.default_timeout_for(&json!({"operation": "act"})), 30_000);
    assert!(p.manifest.features.iter().any(|f| f == "runtime.stop-hook"));
    assert!(p.manifest.environment.iter().any(|e| e == "AI_APP_BRIDGE_WEBDRIVER_URL"));
    for v in spec.input_schema["oneOf"].as_array().unwrap() {
        assert_eq!(v["additionalProperties"], json!(false), "{v}");
    }
}

#[test]
fn every_operation_accepts_its_arguments_and_nothing_else() {
    let p = plugin();
    let ok = [
        json!({"operation": "status"}),
        json!({"operation": "status", "sessionId": "s1", "timeoutMs": 1000, "requestId": "r", "feedback": "off"}),
        json!({"operation": "prepare", "engine": "webdriver", "endpoint": "http://127.0.0.1:4444", "browser": "firefox"}),
        json!({"operation": "open", "sessionId": "grid-1", "engine": "cdp", "url": "https://example.test/", "headless": true, "viewport": {"width": 1024, "height": 768}, "leaseMs": 60000}),
        json!({"operation": "open", "endpoint": "http://127.0.0.1:4723", "capabilities": {"platformName": "Fake", "appium:automationName": "Fake"}}),
        json!({"operation": "observe", "sessionId": "s1", "maxControls": 10, "includeBodyText": false, "frameId": "main"}),
        json!({"operation": "act", "sessionId": "s1", "action": {"type": "click"}, "selector": {"by": "elementId", "value": "e12"}, "snapshotId": "s3-abcdef01", "documentId": "0123abcd:1"}),
        json!({"operation": "act", "sessionId": "s1", "action": {"type": "input", "text": ""}, "selector": {"by": "css", "value": "input[name=q]"}}),
        json!({"operation": "act", "sessionId": "s1", "action": {"type": "key", "key": "Enter"}}),
        json!({"operation": "act", "sessionId": "s1", "action": {"type": "scroll", "deltaY": 400}}),
        json!({"operation": "act", "sessionId": "s1", "action": {"type": "scroll"}, "selector": {"by": "text", "value": "Far", "name": "x"}}),
        json!({"operation": "navigate", "sessionId": "s1", "url": "about:blank"}),
        json!({"operation": "wait", "sessionId": "s1", "text": "Done"}),
        json!({"operation": "wait", "sessionId": "s1", "selector": {"by": "ariaLabel", "value": "Close"}}),
        json!({"operation": "screenshot", "sessionId": "s1", "outFile": "/tmp/x.png"}),
        json!({"operation": "events", "sessionId": "s1", "afterSequence": 10, "limit": 500}),
        json!({"operation": "receipt", "sessionId": "s1", "actionId": "host-action-1"}),
        json!({"operation": "close", "sessionId": "s1"}),
    ];
    for args in ok {
        p.validate("web-executor", &args).unwrap_or_else(|e| panic!("{args} refused: {e:?}"));
    }
    let refused = [
        (json!({}), "missing_argument", "operation"),
        (json!({"operation": "fly"}), "invalid_argument", "operation"),
        (json!({"operation": "observe"}), "missing_argument", "sessionId"),
        (json!({"operation": "observe", "sessionId": "bad id"}), "invalid_argument", "sessionId"),
        (json!({"operation": "observe", "sessionId": "x".repeat(65)}), "invalid_argument", "sessionId"),
        (json!({"operation": "close", "sessionId": "s1", "url": "about:blank"}), "unsupported_argument", "url"),
        (json!({"operation": "open", "leaseMs": 10}), "invalid_argument", "leaseMs"),
        (json!({"operation": "open", "browser": "ie"}), "invalid_argument", "browser"),
        (json!({"operation": "open", "endpoint": "https://grid.example"}), "invalid_argument", "endpoint"),
        (json!({"operation": "open", "url": "javascript:alert(1)"}), "invalid_argument", "url"),
        (json!({"operation": "open", "viewport": {"width": 10, "height": 800}}), "invalid_argument", "viewport.width"),
        (json!({"operation": "act", "sessionId": "s1"}), "missing_argument", "action"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "click"}}), "missing_argument", "selector"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "input"}, "selector": {"by": "css", "value": "#q"}}), "missing_argument", "action.text"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "key", "key": "F13"}}), "invalid_argument", "action.key"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "scroll"}}), "missing_argument", "selector"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "click", "text": "x"}, "selector": {"by": "css", "value": "#q"}}), "unsupported_argument", "action.text"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "click"}, "selector": {"by": "elementId", "value": "button"}}), "invalid_argument", "selector.value"),
        (json!({"operation": "act", "sessionId": "s1", "action": {"type": "click"}, "selector": {"by": "xpath", "value": "//a"}}), "invalid_argument", "selector.by"),
        (json!({"operation": "wait", "sessionId": "s1"}), "invalid_argument", "arguments"),
        (json!({"operation": "screenshot", "sessionId": "s1", "outFile": "a.png", "artifactDir": "d"}), "invalid_argument", ""),
        (json!({"operation": "events", "sessionId": "s1", "limit": 501}), "invalid_argument", "limit"),
        (json!({"operation": "receipt", "sessionId": "s1"}), "missing_argument", "actionId"),
    ];
    for (args, code, field) in refused {
        let e = p.validate("web-executor", &args).expect_err(&format!("{args} accepted"));
        assert_eq!(e.error, code, "{args}: {e:?}");
        if !field.is_empty() {
            assert_eq!(e.field.as_deref(), Some(field), "{args}: {e:?}");
        }
        assert_eq!(e.dispatched, Some(false));
    }
}

#[test]
fn refusals_before_any_browser_are_not_dispatched() {
    let p = plugin();
    let c = p.call(json!({"operation": "observe", "sessionId": "never-opened"}));
    assert_eq!((c.err().error.as_str(), c.err().field.as_deref()), ("web_executor_session_not_found", Some("sessionId")));
    assert_eq!((c.dispatch(), c.outcome.dispatch_marked), ((Some(false), false), false));
    let c = p.call(json!({"operation": "open", "engine": "cdp", "browser": "firefox"}));
    assert_eq!(c.err().error, "web_executor_browser_unsupported");
    assert!(!c.outcome.dispatch_marked);
    let c = p.call(json!({"operation": "open", "engine": "cdp", "headless": false}));
    assert_eq!(c.err().error, "web_executor_headed_unsupported");
    let c = p.call(json!({"operation": "open", "engine": "cdp", "capabilities": {"a": 1}}));
    assert_eq!((c.err().error.as_str(), c.err().field.as_deref()), ("web_executor_engine_mismatch", Some("capabilities")));
    if std::env::var_os("AI_APP_BRIDGE_WEBDRIVER_URL").is_none() {
        let c = p.call(json!({"operation": "open", "engine": "webdriver"}));
        assert_eq!((c.err().error.as_str(), c.err().field.as_deref()), ("web_executor_endpoint_required", Some("endpoint")));
    }
    // Nothing listens on this port: the endpoint is unreachable, nothing was sent.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let c = p.call(json!({"operation": "open", "endpoint": format!("http://127.0.0.1:{port}")}));
    assert_eq!((c.err().error.as_str(), c.dispatch()), ("web_executor_endpoint_unreachable", (Some(false), false)));
    let c = p.call(json!({"operation": "prepare", "endpoint": format!("http://127.0.0.1:{port}")}));
    assert_eq!(c.err().error, "web_executor_endpoint_unreachable");
    let c = p.call(json!({"operation": "receipt", "sessionId": "never-opened", "actionId": "nope"}));
    assert_eq!((c.ok()["status"].as_str(), c.ok()["receipt"].is_null()), (Some("unknown"), true));
    let c = p.call(json!({"operation": "status"}));
    let v = c.ok();
    assert_eq!(v["engines"]["cdp"]["available"], json!(aab_cdp::find_chromium().is_some()));
}
