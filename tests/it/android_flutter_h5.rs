//! Flutter-hosted WebViews (`flutter-h5-*`) e2e through the public CLI against
//! the sample app's Flutter shop, whose Help route hosts a real Chromium page
//! through a registered Flutter H5 adapter. Ground truth is the page itself
//! (control `webview-eval`), the H5 server's request log (`h5-requests`), the
//! simulator's effect records (truth kind `flutter-h5`) and the device journal.

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, simulated};
use crate::android_h5::{args, by_dom_id, observed, phase};

type Sim = aab_android_sim::Simulator;
const ADAPTER: &str = "shop-help";

fn page(w: &World, sim: &Sim, expression: &str) -> Value {
    control(w, sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": ADAPTER, "expression": expression}))["value"].clone()
}

fn effects(w: &World, sim: &Sim) -> Vec<Value> {
    control(w, sim, json!({"op": "truth", "kind": "flutter-h5"}))["items"].as_array().cloned().unwrap_or_default()
}

/// The simulator with the sample app on the shop's Help route (the adapter visible).
fn on_help(w: &World) -> (Sim, String) {
    let sim = simulated(w);
    control(w, &sim, json!({"op": "screen", "package": SAMPLE, "screen": "shop"}));
    let serial = sim.devices[0].serial.clone();
    w.ok("tap-flutter", args(&serial, json!({"selector": {"text": "Help"}})));
    (sim, serial)
}

#[test]
fn android_flutter_h5_commands_take_effect_in_the_real_page_once() {
    let w = World::new();
    let (mut sim, serial) = on_help(&w);
    let snap = w.ok("flutter-h5-dom", json!({"packageName": SAMPLE}));
    assert_eq!((snap["h5TargetSchema"].clone(), snap["pageRef"]["adapterId"].clone(), snap["pageRef"]["adapterGeneration"].clone()), (json!("aab.flutter-h5-target/v1"), json!(ADAPTER), json!(1)), "{snap}");
    assert_eq!(snap["pageRef"]["url"], page(&w, &sim, "location.href"), "the page's real URL");
    let engine = control(&w, &sim, json!({"op": "flutter", "package": SAMPLE}))["engine"].clone();
    assert_eq!((snap["runtimeEpoch"].clone(), engine["route"].clone()), (engine["runtimeEpoch"].clone(), json!("help")), "the Dart runtime's epoch binds the page");

    // input by aria-label, input bound to the observed element, click; each once, in the page.
    let q = w.ok("flutter-h5-input", args(&serial, json!({"selector": {"ariaLabel": "Your question"}, "text": "Where is my parcel?"})));
    assert_eq!((q["proof"]["kind"].clone(), q["device"]["accepted"].clone(), q["provider"].clone()), (json!("flutter"), json!(true), json!("flutter-h5")), "{q}");
    let topic = by_dom_id(&snap, "topic");
    let t = w.ok("flutter-h5-input", args(&serial, json!({"selector": {"elementId": topic["elementId"]}, "expectedTarget": observed(&snap, topic), "text": "A-1009"})));
    assert_eq!(page(&w, &sim, "document.getElementById('question').value + '|' + document.getElementById('topic').value"), json!("Where is my parcel?|A-1009"));
    let send = w.ok("flutter-h5-click", args(&serial, json!({"selector": {"text": "Send question", "tag": "button"}})));
    let ids: Vec<Value> = effects(&w, &sim).iter().map(|e| e["data"]["actionId"].clone()).collect();
    assert_eq!(ids, [q["actionId"].clone(), t["actionId"].clone(), send["actionId"].clone()], "ground truth: three effects, one per action");
    // The page's fetch reached the server with what was typed; the page shows the answer.
    let waited = w.ok("flutter-h5-wait", json!({"packageName": SAMPLE, "selector": {"text": "Ask another question"}, "intervalMs": 50}));
    assert_eq!((waited["pageRef"].clone(), waited["matched"]["id"].clone()), (snap["pageRef"].clone(), json!("again")), "{waited}");
    let log = control(&w, &sim, json!({"op": "h5-requests"}));
    let sent: Vec<&Value> = log["requests"].as_array().unwrap().iter().filter(|r| r["path"] == json!("/api/support")).collect();
    assert_eq!(sent.len(), 1, "{log}");
    assert_eq!(serde_json::from_str::<Value>(sent[0]["body"].as_str().unwrap()).unwrap(), json!({"topic": "A-1009", "question": "Where is my parcel?"}));
    assert!(page(&w, &sim, "document.getElementById('answer').textContent").as_str().unwrap().starts_with("Ticket T-"));

    // Scroll a control into view, then the page by a delta bound to the observed page; eval.
    w.ok("flutter-h5-scroll", args(&serial, json!({"selector": {"text": "Back to top"}})));
    let y = page(&w, &sim, "Math.round(window.scrollY)").as_i64().unwrap();
    assert!(y > 500, "scrolled into view: {y}");
    let now = w.ok("flutter-h5-dom", json!({"packageName": SAMPLE, "adapterId": ADAPTER}));
    w.ok("flutter-h5-scroll", args(&serial, json!({"deltaX": 0, "deltaY": -200, "expectedPage": now["pageRef"]})));
    assert_eq!(page(&w, &sim, "Math.round(window.scrollY)").as_i64().unwrap(), y - 200);
    let eval = w.ok("flutter-h5-eval", args(&serial, json!({"script": "document.title + ':' + document.getElementById('topic').value", "expectedPage": now["pageRef"]})));
    assert_eq!(eval["device"]["result"], json!("Shop help:A-1009"), "{eval}");
    assert_eq!(effects(&w, &sim).len(), 6);
    assert_eq!(phase(&w, &serial), json!("idle"));

    // Refusals change nothing in the page.
    let clicks = "window.__clicks = 0; document.getElementById('send').addEventListener('click', function (e) { window.__clicks++; e.preventDefault(); }, true); true";
    page(&w, &sim, clicks);
    let before = w.ok("flutter-h5-dom", json!({"packageName": SAMPLE}));
    let send_seen = observed(&before, by_dom_id(&before, "send"));
    // A replaced element with identical HTML is another element.
    page(&w, &sim, "var b = document.getElementById('send'); var c = b.cloneNode(true); b.replaceWith(c); c.addEventListener('click', function (e) { window.__clicks++; e.preventDefault(); }, true); true");
    let facts = w.fails("flutter-h5-click", args(&serial, json!({"selector": {"text": "Send question"}, "expectedTarget": send_seen})), "flutter_h5_target_changed");
    assert_eq!((facts["dispatched"].clone(), facts["field"].clone(), facts["details"]["changed"].clone()), (json!(false), json!("expectedTarget"), json!(["elementId"])), "{facts}");
    // The adapter registered again: the observed page is void.
    control(&w, &sim, json!({"op": "flutter-h5-reregister", "package": SAMPLE, "adapterId": ADAPTER}));
    let facts = w.fails("flutter-h5-eval", args(&serial, json!({"script": "window.__evaluated = 1", "expectedPage": before["pageRef"]})), "reobserve_required");
    assert_eq!((facts["dispatched"].clone(), facts["details"]["changed"].clone()), (json!(false), json!(["adapterGeneration"])), "{facts}");
    // A truncated-free page but a selector that names two controls.
    page(&w, &sim, "var x = document.createElement('button'); x.textContent = 'Send question'; document.body.appendChild(x); true");
    let facts = w.fails("flutter-h5-click", args(&serial, json!({"selector": {"text": "Send question"}})), "flutter_h5_selector_ambiguous");
    assert_eq!(facts["details"]["candidates"].as_array().unwrap().len(), 2, "{facts}");
    assert_eq!((page(&w, &sim, "window.__clicks"), page(&w, &sim, "window.__evaluated === undefined")), (json!(0), json!(true)), "ground truth: nothing reached the page");
    assert_eq!(effects(&w, &sim).len(), 6);

    // Back in the shop's first route the adapter is registered but not shown.
    w.ok("tap-flutter", args(&serial, json!({"selector": {"text": "Back"}})));
    let facts = w.fails("flutter-h5-dom", json!({"packageName": SAMPLE}), "flutter_h5_adapter_not_found");
    assert_eq!((facts["field"].clone(), facts["details"]["adapters"][0]["adapterId"].clone(), facts["details"]["adapters"][0]["visible"].clone()), (json!("adapterId"), json!(ADAPTER), json!(false)), "{facts}");
    w.fails("flutter-h5-click", args(&serial, json!({"adapterId": ADAPTER, "selector": {"text": "Send question", "tag": "button"}})), "flutter_h5_adapter_not_visible");
    sim.shutdown();
}

#[test]
fn android_flutter_h5_lost_completion_is_unresolved_until_reconciled_and_eval_is_denied_to_scripts() {
    let w = World::new();
    let (mut sim, serial) = on_help(&w);
    // The input takes effect; its reply and the one cancel's reply are lost.
    control(&w, &sim, json!({"op": "faults", "set": {"flutterDropReplies": 2}}));
    let (body, run) = w.run("flutter-h5-input", args(&serial, json!({"selector": {"ariaLabel": "Your question"}, "text": "lost?"})));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true) && facts["dispatched"] != json!(false), &run, "a lost completion is ambiguous");
    assert_eq!(effects(&w, &sim).len(), 1, "ground truth: the input happened once");
    assert_eq!(page(&w, &sim, "document.getElementById('question').value"), json!("lost?"));
    assert_eq!(phase(&w, &serial), json!("unresolved"));
    w.fails("flutter-h5-click", args(&serial, json!({"selector": {"text": "Send question", "tag": "button"}})), "device_ownership_unresolved");
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.expect_ok(&run, "reconcile");
    let receipt = &body["value"]["executionReceipt"];
    assert_eq!((body["value"]["recovered"].clone(), receipt["kind"].clone(), receipt["device"]["ok"].clone()), (json!(true), json!("flutter"), json!(true)), "{body}");
    assert_eq!(receipt["device"]["actionId"], effects(&w, &sim)[0]["data"]["actionId"]);
    assert_eq!(phase(&w, &serial), json!("idle"));
    assert_eq!(effects(&w, &sim).len(), 1, "ground truth: never resent");

    // A Script may read and act on the page, but flutter-h5-eval is permanently denied.
    let source = "exports.main = async (ctx) => {
        const dom = await ctx.call('flutter-h5-dom', {});
        const ev = await ctx.call('flutter-h5-eval', {script: \"document.title = 'owned'\", expectedPage: dom.ok ? dom.result.pageRef : null});
        const typed = await ctx.call('flutter-h5-input', {selector: {elementId: dom.result.dom.controls.find(c => c.id === 'topic').elementId}, text: 'S-1'});
        return {title: dom.ok && dom.result.dom.title, eval: [ev.ok, ev.error && ev.error.code, ev.dispatched], typed: typed.ok};
    };";
    let script = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": source,
                        "target": {"platform": "android", "serial": serial, "packageName": SAMPLE}, "permissions": ["app.read", "app.interact"]});
    let result = crate::android_intent::run_script(&w, "flutter-h5-eval-denied", &script);
    assert_eq!(result, json!({"title": "Shop help", "eval": [false, "command_permanently_denied", false], "typed": true}), "{result}");
    assert_eq!(page(&w, &sim, "document.title + '|' + document.getElementById('topic').value"), json!("Shop help|S-1"), "ground truth: the eval never ran, the input did");
    sim.shutdown();
}
