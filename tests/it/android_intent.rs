//! The `native` Intent provider and Scripts on the simulated phone, through the
//! public CLI (and MCP for one decision): the sample app's sign-up flow run by a
//! supervised Intent (observe → act with native selectors → … → complete, with
//! `require.streams`), by an autonomous Intent (a JavaScript agent module) and by
//! a JavaScript Script (`ctx.call`). Each exports an evidence archive that
//! verifies offline. Ground truth is the simulator's: the app's screen, typed
//! values and SDK state records (control `state`) and every effect the phone saw
//! with the SDK action that caused it (control `actions`).

use std::time::{Duration, Instant};

use aab_e2e::{error_code, error_facts, flags};
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};

const RID: &str = "com.example.aab.sample:id/";

fn rid(id: &str) -> String {
    format!("{RID}{id}")
}

/// `aab intent --operation OP --flags…` → (body, exit).
pub(crate) fn intent(w: &World, op: &str, args: Value) -> (Value, i32) {
    let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
    argv.extend(flags(&args));
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = w.env.aab(&refs);
    let body = w.env.json_of(&run);
    (body, run.exit())
}

#[track_caller]
pub(crate) fn intent_ok(w: &World, op: &str, args: Value) -> Value {
    let (body, exit) = intent(w, op, args);
    assert!(exit == 0 && body.pointer("/execution/ok") == Some(&json!(true)), "intent {op} should succeed: {body}\n{}", w.env.report(None));
    body["value"].clone()
}

/// Rejected before dispatch with `code`.
#[track_caller]
pub(crate) fn intent_rejected(w: &World, op: &str, args: Value, code: &str) -> Value {
    let (body, exit) = intent(w, op, args);
    assert_eq!((error_code(&body), exit), (Some(code), 1), "intent {op}: expected {code}: {body}");
    let facts = error_facts(&body);
    assert_eq!((facts["dispatched"].clone(), facts["ambiguous"].clone()), (json!(false), json!(false)), "{body}");
    facts.clone()
}

pub(crate) fn decision(id: &str, revision: u64, agent: &str, action: Option<Value>) -> Value {
    let mut d = json!({"decisionId": id, "basedOnRevision": revision, "agentDecision": agent});
    if let Some(a) = action {
        d["action"] = a;
    }
    d
}

fn tap(id: &str) -> Value {
    json!({"action": "tap", "selector": {"resourceName": rid(id)}})
}

fn input(id: &str, value: &str) -> Value {
    json!({"action": "inputText", "selector": {"resourceName": rid(id)}, "value": value})
}

/// The summary node of resource id `id`.
fn node<'a>(snapshot: &'a Value, id: &str) -> Option<&'a Value> {
    snapshot["summary"]["nodes"].as_array().and_then(|n| n.iter().find(|n| n["resourceName"] == json!(rid(id))))
}

fn print_step(label: &str, snap: &Value) {
    let t = &snap["timings"];
    println!(
        "android intent {label}: status={} revision={} summaryBytes={} nodes={} actionMs={} providerAcquireMs={} captureMs={} summaryMs={} evidenceCommitMs={} receiptCommitMs={} totalMs={} hostOverheadMs={}",
        snap["status"], snap["revision"], t["summaryBytes"], snap["summary"]["nodes"].as_array().map_or(0, Vec::len),
        t["actionMs"], t["providerAcquireMs"], t["captureMs"], t["summaryMs"], t["evidenceCommitMs"], t["receiptCommitMs"], t["totalMs"], t["workerOverheadMs"]
    );
}

pub(crate) fn export_and_verify(w: &World, namespace: &str, op_id: &str) -> Value {
    let out = w.env.work.join(format!("archive-{op_id}"));
    let exported = w.env.aab_ok(&["evidence", "--operation", "export", "--namespace", namespace, "--operation-id", op_id, "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().unwrap_or_else(|| panic!("manifestSha256 in {exported}")).to_string();
    let verified = w.env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
    println!("android {namespace} archive {op_id}: {}", verified["value"]);
    verified["value"].clone()
}

/// The sign-up's ground truth: welcome shown, the SDK state says who signed up.
#[track_caller]
fn assert_signed_up(app: &Value, name: &str, email: &str) {
    assert_eq!((app["screen"].clone(), app["activity"].clone()), (json!("welcome"), json!(format!("{SAMPLE}.WelcomeActivity"))), "{app}");
    let state = app["capture"]["state"].as_array().unwrap();
    let last = |key: &str| state.iter().rev().find(|r| r["key"] == json!(key)).map(|r| r["value"].clone());
    assert_eq!(last("signedIn"), Some(json!(true)), "{state:?}");
    assert_eq!(last("user"), Some(json!({"name": name, "email": email})), "{state:?}");
    assert_eq!((app["values"]["name"].clone(), app["values"]["email"].clone()), (json!(name), json!(email)));
}

/// Every effect the phone saw: (kind, the SDK action id that caused it).
pub(crate) fn phone_actions(w: &World, sim: &aab_android_sim::Simulator) -> Vec<(String, Value)> {
    let a = control(w, sim, json!({"op": "actions"}));
    a["actions"].as_array().unwrap().iter().map(|x| (x["kind"].as_str().unwrap().to_string(), x["actionId"].clone())).collect()
}

fn target(sim: &aab_android_sim::Simulator) -> Value {
    json!({"platform": "android", "serial": sim.devices[0].serial, "packageName": SAMPLE})
}

#[test]
fn android_intent_supervised_sign_up_with_capture_streams() {
    let w = World::new();
    let mut sim = simulated(&w);
    let op = "signup-supervised";
    let started = intent_ok(&w, "start", json!({"goal": "Create an account for Ada", "target": target(&sim), "operationId": op,
        "require": {"streams": ["logs", "network", "state", "events"], "limit": 100}}));
    print_step("start", &started);
    assert_eq!((started["status"].clone(), started["provider"].clone(), started["revision"].clone()), (json!("waiting_for_decision"), json!("native"), json!(1)), "{started}");
    assert_eq!(started["summary"]["page"]["activity"], json!(format!("{SAMPLE}.MainActivity")));
    assert!(node(&started, "create_account").is_some_and(|n| n["role"] == json!("button") && n["text"] == json!("Create account")), "{}", started["summary"]);
    assert!(started["capture"]["coverage"] == json!("complete"), "{}", started["capture"]);

    // Refused before anything reaches the phone.
    intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision("ghost", 1, "act", Some(tap("no_such_view")))}), "intent_target_not_observed");
    let f = intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision("two-keys", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Sign in", "resourceName": rid("sign_in")}})))}), "invalid_argument");
    assert!(f["field"].as_str().is_some_and(|s| s.starts_with("decision.action")), "{f}");
    assert!(phone_actions(&w, &sim).is_empty(), "nothing reached the phone");

    let mut revision = 1;
    // (the phone effect each action must cause, the host action id it carries)
    let mut expected: Vec<(String, Value)> = Vec::new();
    let mut step = |id: &str, action: Value| -> Value {
        let kind = if action["action"] == json!("tap") { "tap" } else { "text" };
        let snap = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision(id, revision, "act", Some(action))}));
        print_step(id, &snap);
        assert_eq!(snap["status"], json!("waiting_for_decision"), "{snap}");
        assert_eq!(snap["lastAction"]["dispatched"], json!(true), "{}", snap["lastAction"]);
        revision = snap["revision"].as_u64().unwrap();
        assert_eq!(snap["lastAction"]["actionId"], json!(format!("{op}:{id}")));
        expected.push((kind.to_string(), snap["lastAction"]["hostActionId"].clone()));
        snap
    };
    let s = step("open-signup", tap("create_account"));
    assert_eq!(s["summary"]["page"]["activity"], json!(format!("{SAMPLE}.SignupActivity")));
    // Submitting the empty form is refused by the app (it stays on the form).
    let s = step("early-submit", tap("submit_signup"));
    assert!(node(&s, "submit_signup").is_some(), "still on the form");
    let rejected = s["capture"]["streams"]["events"]["items"].as_array().unwrap();
    assert!(rejected.iter().any(|e| e["name"] == json!("signup_rejected")), "the app's rejection is in this action's event window: {rejected:?}");
    step("name", input("name", "Ada Lovelace"));
    let s = step("email", input("email", "ada@example.org"));
    assert_eq!(node(&s, "email").unwrap()["text"], json!("ada@example.org"));
    step("password", input("new_password", "correct horse"));
    let s = step("terms", tap("terms"));
    assert_eq!(node(&s, "terms").unwrap()["checked"], json!(true));
    let s = step("submit", tap("submit_signup"));
    assert_eq!(s["summary"]["page"]["activity"], json!(format!("{SAMPLE}.WelcomeActivity")));
    assert!(s["summary"]["nodes"].as_array().unwrap().iter().any(|n| n["text"] == json!("Welcome ada@example.org")), "{}", s["summary"]);

    // require.streams: the submit's window holds its records and nothing older.
    let streams = &s["capture"]["streams"];
    let network = streams["network"]["items"].as_array().unwrap();
    assert_eq!(network.len(), 1, "{network:?}");
    assert_eq!((network[0]["url"].clone(), network[0]["statusCode"].clone()), (json!("https://api.example.com/v1/signup"), json!(201)));
    assert!(network[0]["requestBody"].as_str().unwrap().contains("[redacted]") && !network[0]["requestBody"].as_str().unwrap().contains("correct horse"), "{}", network[0]);
    let logs: Vec<&str> = streams["logs"]["items"].as_array().unwrap().iter().map(|l| l["message"].as_str().unwrap()).collect();
    assert_eq!(logs, ["signed up as ada@example.org"]);
    let keys: Vec<&str> = streams["state"]["items"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["user", "signedIn"]);
    assert!(streams["events"]["items"].as_array().unwrap().iter().any(|e| e["name"] == json!("signup")));
    assert_eq!(s["capture"]["coverage"], json!("complete"), "{}", s["capture"]["refs"]);

    // Ground truth: the app state, and exactly one phone effect per action, each
    // caused by this Intent's action id, in order.
    let app = app_state(&w, &sim, SAMPLE);
    assert_signed_up(&app, "Ada Lovelace", "ada@example.org");
    let kinds: Vec<&str> = expected.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["tap", "tap", "text", "text", "text", "tap", "tap"]);
    assert!(expected.iter().all(|(_, id)| id.is_string()), "{expected:?}");
    assert_eq!(phone_actions(&w, &sim), expected, "exactly one phone effect per decision, caused by that decision's action, in order");

    // The terminal decision through MCP.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "intent", "arguments": {"operation": "decide", "operationId": op, "decision": decision("done", revision, "complete", None)}, "extract": null}));
    assert!(!is_error, "{body}");
    let done = intent_ok(&w, "status", json!({"operationId": op}));
    print_step("complete", &done);
    assert_eq!((done["status"].clone(), done["actionSteps"].clone()), (json!("completed"), json!(7)), "{done}");
    let archive = export_and_verify(&w, "intent", op);
    assert!(archive.to_string().contains("verified"));
    sim.shutdown();
}

/// The agent: reads the summary only (what is on screen), one step per turn.
const AGENT: &str = r#"
const R = 'com.example.aab.sample:id/';
let typedPassword = false;
exports.decide = async function ({ revision, summary }) {
  const node = (id) => summary.nodes.find((n) => n.resourceName === R + id);
  const act = (action, why) => ({ decisionId: 'agent-' + revision, basedOnRevision: revision, agentDecision: 'act', action, reason: why });
  const sel = (id) => ({ resourceName: R + id });
  if (String(summary.page.activity).endsWith('.WelcomeActivity')) {
    return { decisionId: 'agent-' + revision, basedOnRevision: revision, agentDecision: 'complete', reason: 'welcome is shown' };
  }
  if (node('create_account')) return act({ action: 'tap', selector: sel('create_account') }, 'open the sign-up form');
  if (!node('name').text) return act({ action: 'inputText', selector: sel('name'), value: 'Grace Hopper' }, 'name');
  if (!node('email').text) return act({ action: 'inputText', selector: sel('email'), value: 'grace@example.org' }, 'email');
  if (!typedPassword) { typedPassword = true; return act({ action: 'inputText', selector: sel('new_password'), value: 'cobol-1959' }, 'password'); }
  if (!node('terms').checked) return act({ action: 'tap', selector: sel('terms') }, 'accept the terms');
  return act({ action: 'tap', selector: sel('submit_signup') }, 'submit');
};
"#;

pub(crate) fn wait_terminal(w: &World, op: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let s = intent_ok(w, "status", json!({"operationId": op}));
        let status = s["status"].as_str().unwrap_or_default().to_string();
        if ["completed", "failed", "inconclusive", "cancelled", "timeout", "ambiguous", "blocked_evidence_store", "intervention_required"].contains(&status.as_str()) {
            return s;
        }
        assert!(Instant::now() < until, "Intent {op} never ended: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn android_intent_autonomous_agent_signs_up() {
    let w = World::new();
    let mut sim = simulated(&w);
    let op = "signup-agent";
    intent_ok(&w, "start", json!({"goal": "Create an account for Grace", "target": target(&sim), "operationId": op, "mode": "autonomous",
        "agentModule": {"language": "javascript", "source": AGENT}, "budget": {"maxActions": 10, "maxAgentCalls": 12, "maxDurationMs": 60000, "allowlist": ["tap", "inputText"]}}));
    let done = wait_terminal(&w, op);
    print_step("autonomous", &done);
    assert_eq!((done["status"].clone(), done["actionSteps"].clone(), done["agentCalls"].clone()), (json!("completed"), json!(6), json!(7)), "{done}");
    assert_signed_up(&app_state(&w, &sim, SAMPLE), "Grace Hopper", "grace@example.org");
    let acts = phone_actions(&w, &sim);
    let kinds: Vec<&str> = acts.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["tap", "text", "text", "text", "tap", "tap"], "each decision reached the phone exactly once");
    assert_eq!(acts.iter().filter_map(|(_, a)| a.as_str()).collect::<std::collections::BTreeSet<_>>().len(), 6, "six distinct SDK actions: {acts:?}");
    assert_eq!(done["lastAction"]["hostActionId"], acts[5].1, "the last effect is the Intent's last action");
    export_and_verify(&w, "intent", op);
    sim.shutdown();
}

const SCRIPT: &str = r#"
const R = 'com.example.aab.sample:id/';
const sel = (id) => ({ resourceName: R + id });
async function must(ctx, command, args) {
  const r = await ctx.call(command, args);
  if (!r.ok) throw new Error(command + ': ' + JSON.stringify(r.error));
  return r.result;
}
exports.main = async (ctx) => {
  const seen = await must(ctx, 'tree', { controls: true });
  if (!seen.controls.some((c) => c.resourceName === R + 'create_account')) throw new Error('no Create account');
  await must(ctx, 'tap-native', { selector: sel('create_account') });
  for (const [id, value] of [['name', ctx.inputs.name], ['email', ctx.inputs.email], ['new_password', ctx.inputs.password]]) {
    await must(ctx, 'input-text', { selector: sel(id), text: value });
  }
  await must(ctx, 'tap-native', { selector: sel('terms') });
  await must(ctx, 'tap-native', { selector: sel('submit_signup') });
  const after = await must(ctx, 'tree', { controls: true });
  const state = await must(ctx, 'state', { limit: 50 });
  const user = state.items.filter((r) => r.key === 'user').pop();
  return { activity: after.activity, user: user && user.value };
};
"#;

/// Start a Script, wait until it ends (it must complete), and return its result.
pub(crate) fn run_script(w: &World, id: &str, spec: &Value) -> Value {
    w.env.aab_ok(&["script", "--operation", "start", "--operation-id", id, "--script", &spec.to_string()]);
    let until = Instant::now() + Duration::from_secs(120);
    let mut after = 0u64;
    let v = loop {
        let v = w.env.aab_ok(&["script", "--operation", "wait", "--operation-id", id, "--after-sequence", &after.to_string(), "--wait-ms", "5000"])["value"].clone();
        if ["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()) {
            break v;
        }
        after = v["eventSequence"].as_u64().unwrap_or(after);
        assert!(Instant::now() < until, "script never ended: {v}");
    };
    assert_eq!(v["status"], json!("completed"), "{v}\n{}", w.env.report(None));
    w.env.aab_ok(&["script", "--operation", "result", "--operation-id", id])["value"]["result"].clone()
}

#[test]
fn android_script_signs_up() {
    let w = World::new();
    let mut sim = simulated(&w);
    let id = "signup-script";
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": SCRIPT, "target": target(&sim),
                      "inputs": {"name": "Alan Turing", "email": "alan@example.org", "password": "enigma-1939"}});
    let r = run_script(&w, id, &spec);
    assert_eq!(r, json!({"activity": format!("{SAMPLE}.WelcomeActivity"), "user": {"name": "Alan Turing", "email": "alan@example.org"}}));
    assert_signed_up(&app_state(&w, &sim, SAMPLE), "Alan Turing", "alan@example.org");
    let acts = phone_actions(&w, &sim);
    let kinds: Vec<&str> = acts.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["tap", "text", "text", "text", "tap", "tap"], "each call reached the phone exactly once");
    assert_eq!(acts.iter().filter_map(|(_, a)| a.as_str()).collect::<std::collections::BTreeSet<_>>().len(), 6, "six distinct SDK actions: {acts:?}");
    export_and_verify(&w, "script", id);
    sim.shutdown();
}

#[test]
fn android_intent_gestures_reach_the_phone_once_with_their_defaults() {
    let w = World::new();
    let mut sim = simulated(&w);
    let op = "gestures";
    let started = intent_ok(&w, "start", json!({"goal": "Exercise gestures", "target": target(&sim), "operationId": op}));
    assert_eq!(started["revision"], json!(1));
    // §8.5 bounds are the action schema's: refused before anything reaches the phone.
    for (id, action, code, field) in [
        ("short", json!({"action": "longPress", "selector": {"text": "Sign in to AAB Sample"}, "durationMs": 100}), "invalid_argument", "decision.action.durationMs"),
        ("sideways", json!({"action": "scroll", "selector": {"text": "Sign in to AAB Sample"}, "direction": "left"}), "invalid_argument", "decision.action.direction"),
        ("no-delta", json!({"action": "swipe", "selector": {"text": "Sign in to AAB Sample"}, "deltaX": 10}), "missing_argument", "decision.action.deltaY"),
    ] {
        let f = intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision(id, 1, "act", Some(action))}), code);
        assert_eq!(f["field"], json!(field), "{id}: {f}");
    }
    assert!(phone_actions(&w, &sim).is_empty());
    let mut revision = 1;
    let mut host_ids = Vec::new();
    for (id, action) in [
        ("press", json!({"action": "longPress", "selector": {"text": "Sign in to AAB Sample"}})),
        ("scroll", json!({"action": "scroll", "selector": {"text": "Remember me"}, "direction": "down"})),
        ("swipe", json!({"action": "swipe", "selector": {"contentDescription": "Email"}, "deltaX": -200, "deltaY": 0, "durationMs": 50})),
    ] {
        let snap = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision(id, revision, "act", Some(action))}));
        print_step(id, &snap);
        assert_eq!((snap["status"].clone(), snap["lastAction"]["command"].clone()), (json!("waiting_for_decision"), json!("native-gesture")), "{snap}");
        revision = snap["revision"].as_u64().unwrap();
        host_ids.push(snap["lastAction"]["hostActionId"].clone());
    }
    let seen = control(&w, &sim, json!({"op": "actions"}));
    let got: Vec<Value> = seen["actions"].as_array().unwrap().iter().map(|a| json!([a["kind"], a["data"]["action"], a["data"]["durationMs"], a["actionId"]])).collect();
    assert_eq!(got, [json!(["gesture", "longPress", 500, host_ids[0]]), json!(["gesture", "scroll", 400, host_ids[1]]), json!(["gesture", "swipe", 50, host_ids[2]])]);
    intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("done", revision, "complete", None)}));
    sim.shutdown();
}

#[test]
fn android_intent_back_and_keyevent_when_the_build_has_keyevent() {
    let w = World::new();
    let mut sim = simulated(&w);
    let op = "keys";
    intent_ok(&w, "start", json!({"goal": "Open sign-up and go back", "target": target(&sim), "operationId": op}));
    let opened = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("open", 1, "act", Some(tap("create_account")))}));
    assert_eq!(opened["summary"]["page"]["activity"], json!(format!("{SAMPLE}.SignupActivity")));
    let taps = phone_actions(&w, &sim).len();
    // `back`/`keyevent` are declared only when the build offers the `keyevent` command.
    let has_keyevent = w.env.aab(&["--help", "keyevent"]).exit() == 0;
    if !has_keyevent {
        let f = intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision("back", 2, "act", Some(json!({"action": "back"})))}), "intent_action_unsupported");
        assert_eq!(f["field"], json!("decision.action.action"), "{f}");
        assert_eq!(phone_actions(&w, &sim).len(), taps, "nothing reached the phone");
        sim.shutdown();
        return;
    }
    let back = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("back", 2, "act", Some(json!({"action": "back"})))}));
    print_step("back", &back);
    assert_eq!((back["lastAction"]["command"].clone(), back["summary"]["page"]["activity"].clone()), (json!("keyevent"), json!(format!("{SAMPLE}.MainActivity"))), "{back}");
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("login"));
    let key = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("enter", 3, "act", Some(json!({"action": "keyevent", "keyCode": 66})))}));
    assert_eq!(key["lastAction"]["dispatched"], json!(true));
    let seen = control(&w, &sim, json!({"op": "actions"}));
    let keys: Vec<Value> = seen["actions"].as_array().unwrap().iter().filter(|a| a["kind"] == json!("keyevent")).map(|a| a["data"]["keyCode"].clone()).collect();
    assert_eq!(keys, [json!(4), json!(66)], "one BACK, one ENTER, nothing resent");
    sim.shutdown();
}
