//! `aab demo`: the same sample form driven with no SDK in the loop — `web-executor`
//! opens its own headless Chromium over CDP, observes the page through the shared
//! renderer it injects, types and clicks with real input events, and settles each
//! action with a durable receipt. Called once from `demo.rs`, after the SDK part.

use std::time::Instant;

use serde_json::{Value, json};

/// Run the executor part through `call` (the demo's public-client call) on the form
/// at `form_url`; `say` prints one demo line. The session is closed on every path.
pub fn run(call: &mut dyn FnMut(&str, Value) -> Result<Value, Value>, say: &dyn Fn(&str), form_url: &str) -> Result<(), String> {
    let fail = |what: &str, e: Value| format!("web-executor {what} failed: {} — {}", e["error"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""));
    // The cdp engine needs only Chromium; a missing chromedriver (the webdriver engine's
    // local endpoint) is reported, not fatal.
    match call("executor-prepare", json!({"platform": "web"})) {
        Ok(prepared) => say(&format!(
            "executor-prepare: {} with {} (preparation {})",
            prepared["browser"]["version"].as_str().unwrap_or("?"),
            prepared["driver"]["version"].as_str().unwrap_or("?").split(" (").next().unwrap_or(""),
            prepared["preparationId"].as_str().unwrap_or("")
        )),
        Err(e) if e["error"] == json!("executor_toolchain_missing") => {
            let missing: Vec<String> = e["details"]["missing"].as_array().into_iter().flatten().map(|m| format!("{} ({})", m["tool"].as_str().unwrap_or("?"), m["install"].as_str().unwrap_or(""))).collect();
            say(&format!("executor-prepare: missing {} — the cdp engine goes on without it", missing.join(", ")));
        }
        Err(e) => return Err(fail("executor-prepare", e)),
    }
    let session = format!("demo-exec-{}", std::process::id());
    let started = Instant::now();
    let open = call("web-executor", json!({"operation": "open", "engine": "cdp", "url": form_url, "sessionId": session})).map_err(|e| fail("open", e))?;
    say(&format!("web-executor open: session {session} in its own headless Chromium over CDP ({} ms), no SDK needed", started.elapsed().as_millis()));
    let outcome = drive(call, say, &session, &fail);
    match call("web-executor", json!({"operation": "close", "sessionId": session})) {
        Ok(_) => say("web-executor close: the executor's browser is gone"),
        Err(e) => say(&fail("close", e)),
    }
    let _ = open;
    outcome
}

fn drive(call: &mut dyn FnMut(&str, Value) -> Result<Value, Value>, say: &dyn Fn(&str), session: &str, fail: &dyn Fn(&str, Value) -> String) -> Result<(), String> {
    let seen = call("web-executor", json!({"operation": "observe", "sessionId": session})).map_err(|e| fail("observe", e))?;
    say(&format!("web-executor observe: {} controls, snapshot {}, document {}", seen["controlCount"], seen["snapshotId"].as_str().unwrap_or(""), seen["documentId"].as_str().unwrap_or("")));
    let act = |call: &mut dyn FnMut(&str, Value) -> Result<Value, Value>, action: Value, selector: Value| {
        let t = Instant::now();
        call("web-executor", json!({"operation": "act", "sessionId": session, "action": action, "selector": selector})).map(|v| (v, t.elapsed().as_millis()))
    };
    let (r, ms) = act(call, json!({"type": "input", "text": "Grace Hopper"}), json!({"by": "css", "value": "#name"})).map_err(|e| fail("act input", e))?;
    say(&format!("web-executor act input #name: {} in {ms} ms, accepted={}", r["status"].as_str().unwrap_or("?"), r["receipt"]["result"]["accepted"]));
    let (_, ms) = act(call, json!({"type": "click"}), json!({"by": "css", "value": "#terms"})).map_err(|e| fail("act click #terms", e))?;
    say(&format!("web-executor act click #terms: settled in {ms} ms"));
    let (r, ms) = act(call, json!({"type": "click"}), json!({"by": "text", "value": "Save"})).map_err(|e| fail("act click Save", e))?;
    let action_id = r["actionId"].as_str().unwrap_or_default().to_string();
    say(&format!("web-executor act click \"Save\": {} in {ms} ms (trusted input event: {})", r["status"].as_str().unwrap_or("?"), r["receipt"]["delivery"]["trusted"]));
    let waited = call("web-executor", json!({"operation": "wait", "sessionId": session, "text": "Saved #"})).map_err(|e| fail("wait", e))?;
    say(&format!("web-executor wait: the page shows \"Saved #\" after {} ms", waited["waitedMs"]));
    let receipt = call("web-executor", json!({"operation": "receipt", "sessionId": session, "actionId": action_id})).map_err(|e| fail("receipt", e))?;
    say(&format!("web-executor receipt {action_id}: {} (durable, readable after a lost reply or a runtime restart)", receipt["status"].as_str().unwrap_or("?")));
    let events = call("web-executor", json!({"operation": "events", "sessionId": session})).map_err(|e| fail("events", e))?;
    let kinds: Vec<&str> = events["events"].as_array().into_iter().flatten().filter_map(|e| e["type"].as_str()).collect();
    say(&format!("web-executor events: {}", kinds.join(", ")));
    Ok(())
}
