//! Intent and Script engines against the `fixture` plugin's Intent provider and
//! execution target, through the public CLI and MCP, without Chromium: observe →
//! decide → act → receipt, the observation target, pre-dispatch rejections, and
//! engine schemas built from the loaded catalog. Every outcome is checked against
//! the fixture app's own state (`fixture-screen`: counter and every press with its
//! host action id) and its durable receipts, not only against the engine's reply.

use std::time::{Duration, Instant};

use aab_e2e::{TestEnv, error_code, error_facts, kebab};
use serde_json::{Value, json};

/// `aab intent --operation OP --flags…` → (body, exit).
fn intent(env: &TestEnv, op: &str, args: Value) -> (Value, i32) {
    let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
    for (k, v) in args.as_object().expect("object") {
        argv.push(format!("--{}", kebab(k)));
        argv.push(match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = env.aab(&refs);
    (env.json_of(&run), run.exit())
}

#[track_caller]
fn intent_ok(env: &TestEnv, op: &str, args: Value) -> Value {
    let (body, exit) = intent(env, op, args);
    assert!(exit == 0 && body.pointer("/execution/ok") == Some(&json!(true)), "intent {op} should succeed: {body}\n{}", env.report(None));
    body["value"].clone()
}

/// Rejected before dispatch with `code` (and `field`, when given).
#[track_caller]
fn intent_rejected(env: &TestEnv, op: &str, args: Value, code: &str, field: Option<&str>) -> Value {
    let (body, exit) = intent(env, op, args);
    assert_eq!((error_code(&body), exit), (Some(code), 1), "intent {op}: expected {code}: {body}");
    let facts = error_facts(&body).clone();
    assert_eq!((&facts["dispatched"], &facts["ambiguous"]), (&json!(false), &json!(false)), "{body}");
    if let Some(field) = field {
        assert_eq!(facts["field"], json!(field), "{body}");
    }
    facts
}

fn decision(id: &str, revision: u64, agent: &str, action: Option<Value>) -> Value {
    let mut d = json!({"decisionId": id, "basedOnRevision": revision, "agentDecision": agent});
    if let Some(a) = action {
        d["action"] = a;
    }
    d
}

fn press(selector: Value) -> Value {
    json!({"action": "press", "selector": selector})
}

/// The fixture app's own state of `screen` (the device-side truth).
fn screen(env: &TestEnv, screen: &str) -> Value {
    env.aab_ok(&["fixture-screen", "--screen", screen])["value"].clone()
}

fn target(screen: &str) -> Value {
    json!({"platform": "fixture", "screen": screen})
}

fn node_texts(snap: &Value) -> Vec<String> {
    snap["summary"]["nodes"].as_array().into_iter().flatten().filter_map(|n| n["text"].as_str().map(str::to_string)).collect()
}

fn with_receipts(env: &TestEnv) -> std::path::PathBuf {
    let receipts = env.root.join("receipts");
    env.set_env("AAB_FIXTURE_RECEIPTS", receipts.display().to_string());
    env.install_fixtures();
    receipts
}

#[test]
fn intent_fixture_observe_decide_act_receipt_against_ground_truth() {
    let env = TestEnv::new();
    let receipts = with_receipts(&env);

    let start = intent_ok(&env, "start", json!({"goal": "count to one, then dark mode", "target": target("s1"), "operationId": "fx-life"}));
    assert_eq!((&start["status"], &start["revision"], &start["provider"], &start["plugin"]), (&json!("waiting_for_decision"), &json!(1), &json!("fixture"), &json!("fixture")), "{start}");
    assert_eq!(node_texts(&start), ["Increment", "Reset", "Count: 0"], "{start}");
    assert_eq!(start["summary"]["page"]["screenRef"], json!("s1@0"), "{start}");

    // act: press Increment (resolved by text against the committed observation).
    let acted = intent_ok(&env, "decide", json!({"operationId": "fx-life", "decision": decision("d-1", 1, "act", Some(press(json!({"text": "Increment"}))))}));
    assert_eq!((&acted["status"], &acted["revision"]), (&json!("waiting_for_decision"), &json!(2)), "{acted}");
    let last = &acted["lastAction"];
    assert_eq!((&last["dispatched"], &last["mechanicalStatus"], &last["command"], &last["action"]), (&json!(true), &json!("succeeded"), &json!("fixture-press"), &json!("press")), "{acted}");
    let host_action = last["hostActionId"].as_str().expect("hostActionId").to_string();
    assert!(last["receiptId"].as_str().is_some_and(|r| r.contains("action-receipt")), "{acted}");
    // The new observation shows the effect ...
    assert!(node_texts(&acted).contains(&"Count: 1".to_string()), "{acted}");
    // ... and the fixture's own state agrees: one press, by this action.
    let truth = screen(&env, "s1");
    assert_eq!((&truth["count"], &truth["presses"]), (&json!(1), &json!([{"elementId": "e1", "actionId": host_action}])), "{truth}");
    let receipt: Value = serde_json::from_slice(&std::fs::read(receipts.join(format!("{host_action}.json"))).expect("the fixture's durable receipt")).unwrap();
    assert_eq!((&receipt["command"], &receipt["outcome"]["ok"]), (&json!("fixture-press"), &json!(true)), "{receipt}");

    // The observation target (the provider's observationTargetSchema): the settings panel.
    let settings = intent_ok(&env, "observe", json!({"operationId": "fx-life", "basedOnRevision": 2, "observationTarget": {"panel": "settings"}}));
    assert_eq!((&settings["revision"], &settings["observationTarget"]), (&json!(3), &json!({"panel": "settings"})), "{settings}");
    assert_eq!(node_texts(&settings), ["Dark mode: off"], "{settings}");
    let dark = node_texts(&settings);
    assert_eq!(dark.len(), 1);
    let toggled = intent_ok(&env, "decide", json!({"operationId": "fx-life", "decision": decision("d-2", 3, "act", Some(press(json!({"elementId": "e4"}))))}));
    // Later observations keep the observation target until it is changed.
    assert_eq!((&toggled["revision"], node_texts(&toggled)), (&json!(4), vec!["Dark mode: on".to_string()]), "{toggled}");
    let truth = screen(&env, "s1");
    assert_eq!((&truth["count"], &truth["dark"], truth["presses"].as_array().map(Vec::len)), (&json!(1), &json!(true), Some(2)), "{truth}");
    assert_eq!(truth["presses"][1]["actionId"], toggled["lastAction"]["hostActionId"], "{truth}");
    // null: the whole target again.
    let main = intent_ok(&env, "observe", json!({"operationId": "fx-life", "observationTarget": null}));
    assert_eq!((&main["observationTarget"], node_texts(&main).len()), (&Value::Null, 3), "{main}");

    let done = intent_ok(&env, "decide", json!({"operationId": "fx-life", "decision": decision("d-3", 5, "complete", None)}));
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(screen(&env, "s1")["presses"].as_array().map(Vec::len), Some(2), "completing dispatches nothing");

    // The evidence holds the fixture provider's records and verifies offline.
    let out = env.work.join("fx-life-archive");
    let exported = env.aab_ok(&["evidence", "--operation", "export", "--namespace", "intent", "--operation-id", "fx-life", "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().expect("manifestSha256").to_string();
    let verified = env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
    let records = std::fs::read_to_string(out.join("records.json")).expect("records.json");
    assert!(records.contains("\"provider\":\"fixture\"") && records.contains("\"panel\":\"settings\""), "observations of the fixture provider, with their observation target");
}

#[test]
fn intent_fixture_rejections_dispatch_nothing() {
    let env = TestEnv::new();
    with_receipts(&env);
    let t = target("s2");
    // The observation target is checked with the host's validator: codes and dotted fields.
    intent_rejected(&env, "start", json!({"goal": "g", "target": t, "observationTarget": {"panel": "attic"}}), "invalid_argument", Some("observationTarget.panel"));
    intent_rejected(&env, "start", json!({"goal": "g", "target": t, "observationTarget": {"panel": "main", "zoom": 2}}), "unsupported_argument", Some("observationTarget.zoom"));
    intent_rejected(&env, "start", json!({"goal": "g", "target": t, "observationTarget": {}}), "missing_argument", Some("observationTarget.panel"));
    // The provider's target schema.
    intent_rejected(&env, "start", json!({"goal": "g", "target": {"platform": "fixture"}}), "missing_argument", Some("target.screen"));

    let start = intent_ok(&env, "start", json!({"goal": "g", "target": t, "operationId": "fx-rej", "observationTarget": {"panel": "main"}}));
    assert_eq!(start["observationTarget"], json!({"panel": "main"}), "{start}");
    intent_rejected(&env, "observe", json!({"operationId": "fx-rej", "observationTarget": {"panel": 7}}), "invalid_argument", Some("observationTarget.panel"));
    intent_rejected(&env, "decide", json!({"operationId": "fx-rej", "decision": decision("old", 2, "act", Some(press(json!({"elementId": "e1"}))))}), "reobserve_required", None);
    intent_rejected(&env, "decide", json!({"operationId": "fx-rej", "decision": decision("ghost", 1, "act", Some(press(json!({"text": "Not there"}))))}), "intent_target_not_observed", None);
    intent_rejected(&env, "decide", json!({"operationId": "fx-rej", "decision": decision("tap", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": "e1"}})))}), "intent_action_unsupported", None);
    let (body, _) = intent(&env, "decide", json!({"operationId": "fx-rej", "decision": decision("extra", 1, "act", Some(json!({"action": "press", "selector": {"elementId": "e1"}, "force": true})))}));
    assert_eq!((error_code(&body), body["execution"]["field"].as_str()), (Some("unsupported_argument"), Some("decision.action.force")), "{body}");
    let truth = screen(&env, "s2");
    assert_eq!((&truth["count"], &truth["presses"]), (&json!(0), &json!([])), "no rejected decision pressed anything: {truth}");

    // The screen changes between observation and action: the provider refuses the
    // stale action before its effect (the action carries the observed screenRef).
    env.aab_ok(&["fixture-press", "--screen", "s2", "--element-id", "e1"]);
    let f = intent_rejected(&env, "decide", json!({"operationId": "fx-rej", "decision": decision("stale", 1, "act", Some(press(json!({"text": "Increment"}))))}), "stale_target", None);
    assert_eq!(f["details"]["currentRef"], json!("s2@1"), "{f}");
    let truth = screen(&env, "s2");
    assert_eq!((&truth["count"], truth["presses"].as_array().map(Vec::len)), (&json!(1), Some(1)), "only the direct press happened: {truth}");
    intent_ok(&env, "cancel", json!({"operationId": "fx-rej"}));
}

#[test]
fn intent_fixture_schemas_come_from_the_catalog() {
    // No plugin: valid schemas without platform enums; nothing can be targeted.
    let empty = TestEnv::new();
    let schema = |env: &TestEnv, command: &str, op: &str| env.aab_ok(&["--help", command, "--operation", op])["inputSchema"].clone();
    let start = schema(&empty, "intent", "start");
    assert_eq!(start["properties"]["target"]["properties"]["platform"], json!({"type": "string", "minLength": 1}), "{start}");
    assert!(start["properties"]["provider"].get("enum").is_none(), "{start}");
    intent_rejected(&empty, "start", json!({"goal": "g", "target": target("s")}), "intent_provider_unsupported", Some("target.platform"));
    let script = schema(&empty, "script", "start");
    assert_eq!(script["properties"]["script"]["properties"]["target"]["anyOf"], json!([{"type": "null"}]), "{script}");

    // The fixture and the web plugin: both platforms and providers, from their manifests.
    let env = TestEnv::new();
    env.install_fixtures();
    env.install_plugin("aab_plugin_web", "web");
    let start = schema(&env, "intent", "start");
    assert_eq!(start["properties"]["target"]["properties"]["platform"]["enum"], json!(["fixture", "web"]), "{start}");
    assert_eq!(start["properties"]["provider"]["enum"], json!(["fixture", "h5"]), "{start}");
    let targets: Vec<Value> = schema(&env, "script", "start")["properties"]["script"]["properties"]["target"]["anyOf"].as_array().expect("anyOf").iter().map(|b| b["properties"]["platform"].clone()).collect();
    assert_eq!(targets, [json!({"const": "fixture"}), json!({"const": "web"}), Value::Null], "one branch per declared target, then null");
    // Decide discovery narrows by the loaded providers.
    let (v, _) = env.mcp().call_tool("capabilities", json!({"command": "intent", "operation": "decide", "platform": "fixture"}));
    assert_eq!(v["selection"]["variants"], json!([{"platform": "fixture", "provider": "fixture", "action": "press"}]), "{v}");
    let (v, _) = env.mcp().call_tool("capabilities", json!({"command": "intent", "operation": "decide", "provider": "uia"}));
    assert_eq!((v["error"].as_str(), v["details"]["allowed"].clone()), (Some("invalid_argument"), json!(["fixture", "h5"])), "{v}");

    // A provider of another platform is refused for a fixture target; a decision
    // naming a loaded provider other than the observation's is a mismatch.
    intent_rejected(&env, "start", json!({"goal": "g", "target": target("s3"), "provider": "h5"}), "intent_provider_unsupported", Some("provider"));
    intent_ok(&env, "start", json!({"goal": "g", "target": target("s3"), "operationId": "fx-cat"}));
    let mut d = decision("other", 1, "act", Some(press(json!({"elementId": "e1"}))));
    d["provider"] = json!("h5");
    intent_rejected(&env, "decide", json!({"operationId": "fx-cat", "decision": d}), "intent_provider_mismatch", None);
    assert_eq!(screen(&env, "s3")["count"], json!(0));
    intent_ok(&env, "cancel", json!({"operationId": "fx-cat"}));
}

/// Wait until the script is terminal, up to 60 s.
fn script_terminal(env: &TestEnv, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = env.aab_ok(&["script", "--operation", "wait", "--operation-id", id, "--wait-ms", "5000"])["value"].clone();
        if ["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()) {
            return v;
        }
        assert!(Instant::now() < deadline, "script {id} did not end: {v}\n{}", env.report(None));
    }
}

#[test]
fn script_fixture_target_defaults_call_arguments_and_acts() {
    let env = TestEnv::new();
    env.install_fixtures();
    // `screen` comes from the declared target's identity; the press is a mutation
    // under the script target.
    let js = "exports.main = async (ctx) => { const ids = []; for (let i = 0; i < 2; i++) { const r = await ctx.call('fixture-press', {elementId: 'e1'}); if (!r.ok) throw new Error(JSON.stringify(r.error)); ids.push(r.result.actionId); } const s = await ctx.call('fixture-screen', {}); return {count: s.result.count, ids}; };";
    let py = "def main(ctx):\n    ids = []\n    for _ in range(2):\n        r = ctx.call('fixture-press', {'elementId': 'e1'})\n        if not r['ok']:\n            raise RuntimeError(str(r['error']))\n        ids.append(r['result']['actionId'])\n    s = ctx.call('fixture-screen', {})\n    return {'count': s['result']['count'], 'ids': ids}\n";
    for (language, source, screen_id) in [("javascript", js, "js-screen"), ("python", py, "py-screen")] {
        let spec = json!({"schemaVersion": "aab.code-script/v1", "language": language, "source": source, "target": target(screen_id)});
        let id = format!("fx-script-{language}");
        env.aab_ok(&["script", "--operation", "start", "--operation-id", &id, "--script", &spec.to_string()]);
        let end = script_terminal(&env, &id);
        assert_eq!(end["status"], json!("completed"), "{language}: {end}\n{}", env.report(None));
        let result = env.aab_ok(&["script", "--operation", "result", "--operation-id", &id])["value"]["result"].clone();
        assert_eq!(result["count"], json!(2), "{language}: {result}");
        // The fixture's truth: exactly these two presses, on the target's screen.
        let truth = screen(&env, screen_id);
        let pressed: Vec<Value> = truth["presses"].as_array().expect("presses").iter().map(|p| p["actionId"].clone()).collect();
        assert_eq!((json!(pressed), &truth["count"]), (result["ids"].clone(), &json!(2)), "{language}: {truth}");
    }
    // A call argument that contradicts the target is refused before dispatch.
    let js = "exports.main = async (ctx) => { const r = await ctx.call('fixture-press', {screen: 'elsewhere', elementId: 'e1'}); return [r.ok, r.error && r.error.code]; };";
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": js, "target": target("js-screen")});
    env.aab_ok(&["script", "--operation", "start", "--operation-id", "fx-conflict", "--script", &spec.to_string()]);
    assert_eq!(script_terminal(&env, "fx-conflict")["status"], json!("completed"));
    let result = env.aab_ok(&["script", "--operation", "result", "--operation-id", "fx-conflict"])["value"]["result"].clone();
    assert_eq!(result, json!([false, "target_argument_conflict"]));
    assert_eq!(screen(&env, "elsewhere")["count"], json!(0));
}
