//! Hybrid apps through Intent and Script on the simulated phone: the `flutter`
//! and `h5` Intent providers (observe → decide against a revision → act →
//! receipt) and one JavaScript Script that crosses the sample app's native,
//! WebView and Flutter screens. Ground truth is the simulator's: the Flutter
//! engine's effects and the app's state records (control `flutter`,
//! `app_state`), the real Chromium page behind the WebView (control
//! `webview-eval`) and the H5 server's request log (control `h5-requests`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::android::{SAMPLE, World, app_state, control, simulated};
use crate::android_intent::{decision, export_and_verify, intent_ok, intent_rejected, run_script};

type Sim = aab_android_sim::Simulator;

const WEB_VIEW: &str = "signup-web";

fn target(sim: &Sim) -> Value {
    json!({"platform": "android", "serial": sim.devices[0].serial, "packageName": SAMPLE})
}

fn screen(w: &World, sim: &Sim, name: &str) {
    control(w, sim, json!({"op": "screen", "package": SAMPLE, "screen": name}));
}

/// Flutter effects the engine saw (not its per-action `flutter-action` records),
/// as (kind, the action id that caused it).
fn flutter_effects(w: &World, sim: &Sim) -> Vec<(String, Value)> {
    let f = control(w, sim, json!({"op": "flutter", "package": SAMPLE}));
    f["effects"].as_array().unwrap().iter().filter(|e| e["kind"] != json!("flutter-action")).map(|e| (e["kind"].as_str().unwrap_or_default().to_string(), e["data"]["actionId"].clone())).collect()
}

/// Evaluate `expression` in the real page behind the sample app's WebView.
fn page(w: &World, sim: &Sim, expression: &str) -> Value {
    control(w, sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": WEB_VIEW, "expression": expression}))["value"].clone()
}

/// The H5 server's logged requests to `path`.
fn requests_to(w: &World, sim: &Sim, path: &str) -> Vec<Value> {
    let r = control(w, sim, json!({"op": "h5-requests"}));
    r["requests"].as_array().unwrap().iter().filter(|q| q["path"] == json!(path)).cloned().collect()
}

fn summary_node<'a>(snap: &'a Value, field: &str, value: &str) -> Option<&'a Value> {
    snap["summary"]["nodes"].as_array().and_then(|n| n.iter().find(|n| n[field] == json!(value)))
}

#[test]
fn android_intent_flutter_provider_shops_in_the_engine() {
    let w = World::new();
    let mut sim = simulated(&w);
    screen(&w, &sim, "shop");
    let op = "flutter-shop";
    let started = intent_ok(&w, "start", json!({"goal": "Add a product to the cart", "target": target(&sim), "operationId": op, "provider": "flutter"}));
    assert_eq!((started["status"].clone(), started["provider"].clone()), (json!("waiting_for_decision"), json!("flutter")), "{started}");
    let add = summary_node(&started, "text", "Add to cart").unwrap_or_else(|| panic!("no Add to cart node: {}", started["summary"]));
    let search = summary_node(&started, "label", "Search").unwrap_or_else(|| panic!("no Search field: {}", started["summary"]));
    assert!(add["id"].as_str().is_some_and(|id| id.starts_with('e')), "{add}");

    // A node the agent never saw is refused before anything reaches the engine.
    intent_rejected(&w, "decide", json!({"operationId": op, "decision": decision("ghost", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Checkout now"}})))}), "intent_target_not_observed");
    assert!(flutter_effects(&w, &sim).is_empty(), "nothing reached the engine");

    let s = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("add", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Add to cart"}})))}));
    assert_eq!((s["status"].clone(), s["lastAction"]["dispatched"].clone()), (json!("waiting_for_decision"), json!(true)), "{s}");
    let tap_id = s["lastAction"]["hostActionId"].clone();
    let revision = s["revision"].as_u64().unwrap();
    let s = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("search", revision, "act",
        Some(json!({"action": "inputText", "selector": {"nodeId": search["id"]}, "value": "red shoes"})))}));
    let input_id = s["lastAction"]["hostActionId"].clone();
    assert!(summary_node(&s, "value", "red shoes").is_some(), "the next observation shows the typed value: {}", s["summary"]);
    let revision = s["revision"].as_u64().unwrap();
    intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("done", revision, "complete", None)}));

    // Ground truth: the engine saw exactly these two actions, caused by these decisions.
    let effects = flutter_effects(&w, &sim);
    let kinds: Vec<&str> = effects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["flutter-tap", "flutter-text"], "{effects:?}");
    assert_eq!((effects[0].1.clone(), effects[1].1.clone()), (tap_id, input_id));
    let engine = control(&w, &sim, json!({"op": "flutter", "package": SAMPLE}));
    assert_eq!(engine["engine"]["values"]["search"], json!("red shoes"), "{engine}");
    let state = app_state(&w, &sim, SAMPLE)["capture"]["state"].clone();
    assert!(state.as_array().unwrap().iter().any(|r| r["namespace"] == json!("shop") && r["key"] == json!("cart")), "{state}");
    export_and_verify(&w, "intent", op);
    sim.shutdown();
}

#[test]
fn android_intent_h5_provider_signs_up_in_the_web_view() {
    let w = World::new();
    let mut sim = simulated(&w);
    screen(&w, &sim, "web");
    let op = "h5-signup";
    let started = intent_ok(&w, "start", json!({"goal": "Sign up on the web form", "target": target(&sim), "operationId": op, "provider": "h5",
        "observationTarget": {"webViewId": WEB_VIEW}}));
    assert_eq!((started["status"].clone(), started["provider"].clone()), (json!("waiting_for_decision"), json!("h5")), "{started}");
    assert!(summary_node(&started, "id", "email").is_some(), "{}", started["summary"]);

    let mut revision = 1;
    let mut step = |id: &str, action: Value| -> Value {
        let snap = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision(id, revision, "act", Some(action))}));
        assert_eq!(snap["lastAction"]["dispatched"], json!(true), "{}", snap["lastAction"]);
        revision = snap["revision"].as_u64().unwrap();
        snap
    };
    // Inputs have no text of their own (§8: innerText): the agent names them by
    // the element ids it observed, or by their aria-label.
    let id_of = |dom_id: &str| summary_node(&started, "id", dom_id).unwrap_or_else(|| panic!("no #{dom_id}: {}", started["summary"]))["elementId"].clone();
    let (name, terms) = (id_of("name"), id_of("terms"));
    step("name", json!({"action": "inputText", "selector": {"elementId": name}, "value": "Grace Hopper"}));
    step("email", json!({"action": "inputText", "selector": {"ariaLabel": "Email address"}, "value": "grace@example.org"}));
    step("terms", json!({"action": "tap", "selector": {"elementId": terms}}));
    step("submit", json!({"action": "tap", "selector": {"text": "Create account", "tag": "button"}}));

    // Ground truth: the real page's fields and the server's one sign-up request.
    let until = Instant::now() + Duration::from_secs(20);
    while page(&w, &sim, "document.getElementById('result').textContent") != json!("Welcome, Grace Hopper") {
        assert!(Instant::now() < until, "the page never showed the welcome: {}", page(&w, &sim, "document.body.innerText"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(page(&w, &sim, "[document.getElementById('name').value, document.getElementById('email').value, document.getElementById('terms').checked]"),
        json!(["Grace Hopper", "grace@example.org", true]));
    let signups = requests_to(&w, &sim, "/api/signup");
    assert_eq!(signups.len(), 1, "exactly one submit reached the server: {signups:?}");
    assert_eq!(serde_json::from_str::<Value>(signups[0]["body"].as_str().unwrap()).unwrap(), json!({"name": "Grace Hopper", "email": "grace@example.org", "terms": true}));
    let done = intent_ok(&w, "decide", json!({"operationId": op, "decision": decision("done", revision, "complete", None)}));
    assert_eq!(done["status"], json!("completed"), "{done}");
    export_and_verify(&w, "intent", op);
    sim.shutdown();
}

/// Native → WebView → Flutter in one app, one `ctx.call` at a time.
const HYBRID_SCRIPT: &str = r#"
const R = 'com.example.aab.sample:id/';
async function must(ctx, command, args) {
  const r = await ctx.call(command, args);
  if (!r.ok) throw new Error(command + ': ' + JSON.stringify(r.error));
  return r.result;
}
exports.main = async (ctx) => {
  await must(ctx, 'tap-native', { selector: { resourceName: R + 'open_web' } });
  const dom = await must(ctx, 'h5-wait', { selector: { ariaLabel: 'Email address' } });
  const seen = await must(ctx, 'h5-dom', {});
  const byId = (id) => ({ elementId: seen.dom.controls.find((c) => c.id === id).elementId });
  await must(ctx, 'h5-input', { selector: byId('name'), text: ctx.inputs.name });
  await must(ctx, 'h5-input', { selector: { ariaLabel: 'Email address' }, text: ctx.inputs.email });
  await must(ctx, 'h5-click', { selector: byId('terms') });
  await must(ctx, 'h5-click', { selector: { text: 'Create account', tag: 'button' } });
  const welcome = await must(ctx, 'h5-wait', { selector: { text: 'Welcome, ' + ctx.inputs.name } });
  await must(ctx, 'tap-native', { selector: { resourceName: R + 'web_open_shop' } });
  const nodes = await must(ctx, 'flutter-nodes', { textFilter: 'Add to cart' });
  await must(ctx, 'tap-flutter', { selector: { text: 'Add to cart' } });
  const state = await must(ctx, 'state', { limit: 50 });
  const cart = state.items.filter((r) => r.namespace === 'shop' && r.key === 'cart').pop();
  return { webView: dom.webView.webViewId, welcome: welcome.matched.text, flutterNodes: nodes.returned, cart: cart && cart.value };
};
"#;

#[test]
fn android_script_crosses_native_web_view_and_flutter_screens() {
    let w = World::new();
    let mut sim = simulated(&w);
    screen(&w, &sim, "welcome");
    let id = "hybrid-script";
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": HYBRID_SCRIPT, "target": target(&sim),
                      "inputs": {"name": "Katherine Johnson", "email": "katherine@example.org"}});
    let r = run_script(&w, id, &spec);
    assert_eq!(r, json!({"webView": WEB_VIEW, "welcome": "Welcome, Katherine Johnson", "flutterNodes": 1, "cart": 1}), "{r}");

    // Ground truth on all three layers: the server got one sign-up from the real
    // page, the engine one tap, and the app ended on its Flutter shop screen.
    let signups = requests_to(&w, &sim, "/api/signup");
    assert_eq!(signups.len(), 1, "{signups:?}");
    assert!(signups[0]["body"].as_str().unwrap().contains("katherine@example.org"));
    let effects = flutter_effects(&w, &sim);
    assert_eq!(effects.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["flutter-tap"], "{effects:?}");
    assert_eq!(app_state(&w, &sim, SAMPLE)["screen"], json!("shop"));
    export_and_verify(&w, "script", id);
    sim.shutdown();
}

/// Capture commands that would change what they capture are refused inside a
/// Script before they reach the phone; their read-only forms still work.
const CAPTURE_SCRIPT: &str = r#"
exports.main = async (ctx) => {
  const clear = await ctx.call('logcat', { clear: true });
  const console = await ctx.call('webview-console', { script: 'window.__aabTouched = 1', durationMs: 200 });
  const read = await ctx.call('webview-console', { durationMs: 200 });
  const code = (r) => [r.ok, r.ok ? null : r.error.code, r.ok ? null : r.error.field, r.dispatched];
  return { clear: code(clear), console: code(console), read: read.ok };
};
"#;

#[test]
fn android_script_may_not_mutate_what_it_captures() {
    let w = World::new();
    let mut sim = simulated(&w);
    screen(&w, &sim, "web");
    let id = "capture-script";
    let spec = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": CAPTURE_SCRIPT, "target": target(&sim)});
    let r = run_script(&w, id, &spec);
    assert_eq!(r, json!({"clear": [false, "capture_mutation_not_allowed", "args.clear", false],
                         "console": [false, "capture_mutation_not_allowed", "args.script", false], "read": true}), "{r}");
    // Ground truth: no log clear on the phone, the page never ran the script.
    let effects = control(&w, &sim, json!({"op": "effects"}));
    assert!(!effects.to_string().contains("logcat-clear"), "{effects}");
    assert_eq!(page(&w, &sim, "typeof window.__aabTouched"), json!("undefined"));
    sim.shutdown();
}

/// An autonomous agent on the `h5` provider: it reads only the summary of the
/// WebView's page and fills the form one step per turn.
const H5_AGENT: &str = r#"
let step = 0;
exports.decide = async function ({ revision, summary }) {
  const byId = (id) => summary.nodes.find((n) => n.id === id);
  const act = (action, why) => ({ decisionId: 'agent-' + revision, basedOnRevision: revision, agentDecision: 'act', action, reason: why });
  step += 1;
  if (step === 1) return act({ action: 'inputText', selector: { elementId: byId('name').elementId }, value: 'Mary Jackson' }, 'name');
  if (step === 2) return act({ action: 'inputText', selector: { ariaLabel: 'Email address' }, value: 'mary@example.org' }, 'email');
  if (step === 3) {
    if (byId('email').value !== 'mary@example.org') return { decisionId: 'agent-' + revision, basedOnRevision: revision, agentDecision: 'fail', reason: 'the email did not stick' };
    return act({ action: 'tap', selector: { elementId: byId('terms').elementId } }, 'accept the terms');
  }
  if (step === 4) return act({ action: 'tap', selector: { text: 'Create account', tag: 'button' } }, 'submit');
  return { decisionId: 'agent-' + revision, basedOnRevision: revision, agentDecision: 'complete', reason: 'submitted' };
};
"#;

#[test]
fn android_intent_h5_autonomous_agent_signs_up() {
    let w = World::new();
    let mut sim = simulated(&w);
    screen(&w, &sim, "web");
    let op = "h5-agent";
    intent_ok(&w, "start", json!({"goal": "Sign up on the web form", "target": target(&sim), "operationId": op, "provider": "h5", "mode": "autonomous",
        "observationTarget": {"webViewId": WEB_VIEW},
        "agentModule": {"language": "javascript", "source": H5_AGENT}, "budget": {"maxActions": 6, "maxAgentCalls": 12, "maxDurationMs": 60000, "allowlist": ["tap", "inputText"]}}));
    let done = crate::android_intent::wait_terminal(&w, op);
    assert_eq!((done["status"].clone(), done["actionSteps"].clone()), (json!("completed"), json!(4)), "{done}");
    // Ground truth: the real page and exactly one request to the server.
    let until = Instant::now() + Duration::from_secs(20);
    while page(&w, &sim, "document.getElementById('result').textContent") != json!("Welcome, Mary Jackson") {
        assert!(Instant::now() < until, "the page never showed the welcome: {}", page(&w, &sim, "document.body.innerText"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(page(&w, &sim, "[document.getElementById('name').value, document.getElementById('email').value, document.getElementById('terms').checked]"),
        json!(["Mary Jackson", "mary@example.org", true]));
    let signups = requests_to(&w, &sim, "/api/signup");
    assert_eq!(signups.len(), 1, "{signups:?}");
    export_and_verify(&w, "intent", op);
    sim.shutdown();
}
