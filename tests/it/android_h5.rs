//! Android H5 (WebView) commands e2e through the public CLI (and MCP) against the
//! simulated phone, whose WebViews are real Chromium pages. Ground truth is the
//! page itself (control `webview-eval`: JavaScript evaluated in the real page),
//! the H5 server's request log (`h5-requests`), the simulator's effect records
//! (control `actions`, kind `h5`) and the device-ownership journal.

use std::time::{Duration, Instant};

use aab_e2e::error_facts;
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control, simulated_with};

const WEB: &str = "signup-web";
const SAMPLE_SCENARIO: &str = include_str!("../../sim/android/scenarios/sample.json");

/// The sample scenario with `edit` applied to the sample app's spec.
fn scenario(edit: impl FnOnce(&mut Value)) -> aab_android_sim::Scenario {
    let mut s: Value = serde_json::from_str(SAMPLE_SCENARIO).unwrap();
    let app = s["apps"].as_array_mut().unwrap().iter_mut().find(|a| a["package"] == json!(SAMPLE)).unwrap();
    edit(app);
    aab_android_sim::Scenario::parse(&s.to_string()).unwrap()
}

/// The simulator with the sample app on its WebView screen.
fn on_web(w: &World, edit: impl FnOnce(&mut Value)) -> (aab_android_sim::Simulator, String) {
    let sim = simulated_with(w, scenario(edit));
    control(w, &sim, json!({"op": "screen", "package": SAMPLE, "screen": "web"}));
    let serial = sim.devices[0].serial.clone();
    (sim, serial)
}

/// Evaluate `expression` in the real page of WebView `id` (ground truth).
fn page(w: &World, sim: &aab_android_sim::Simulator, id: &str, expression: &str) -> Value {
    control(w, sim, json!({"op": "webview-eval", "package": SAMPLE, "webViewId": id, "expression": expression}))["value"].clone()
}

fn set(w: &World, sim: &aab_android_sim::Simulator, id: &str, fields: Value) {
    let mut req = json!({"op": "webview-set", "package": SAMPLE, "webViewId": id});
    req.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
    control(w, sim, req);
}

/// The phone's H5 effects so far (each with the SDK action id that caused it).
fn h5_effects(w: &World, sim: &aab_android_sim::Simulator) -> Vec<Value> {
    control(w, sim, json!({"op": "actions"}))["actions"].as_array().unwrap().iter().filter(|a| a["kind"] == json!("h5")).cloned().collect()
}

pub(crate) fn phase(w: &World, serial: &str) -> Value {
    let run = w.env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    w.env.expect_ok(&run, "device-ownership status")["value"]["phase"].clone()
}

pub(crate) fn args(serial: &str, extra: Value) -> Value {
    let mut a = json!({"packageName": SAMPLE, "serial": serial});
    a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    a
}

/// The control of a snapshot with this DOM `id`.
pub(crate) fn by_dom_id<'a>(snap: &'a Value, id: &str) -> &'a Value {
    snap["dom"]["controls"].as_array().unwrap().iter().find(|c| c["id"] == json!(id)).unwrap_or_else(|| panic!("no control #{id} in {snap}"))
}

/// `{pageRef, element}` of an observed control.
pub(crate) fn observed(snap: &Value, control: &Value) -> Value {
    let element: serde_json::Map<String, Value> = ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"].iter().map(|k| (k.to_string(), control[*k].clone())).collect();
    json!({"pageRef": snap["pageRef"], "element": element})
}

/// Counts clicks on `#submit` in the page (ground truth for "nothing happened").
const COUNT_CLICKS: &str = "window.__clicks = 0; document.getElementById('submit').addEventListener('click', function (e) { window.__clicks++; e.preventDefault(); }); true";

#[test]
fn android_h5_click_input_scroll_and_eval_take_effect_in_the_real_page() {
    let w = World::new();
    let (mut sim, serial) = on_web(&w, |_| {});
    let snap = w.ok("h5-dom", json!({"packageName": SAMPLE}));
    assert_eq!((snap["h5TargetSchema"].clone(), snap["pageRef"]["webViewId"].clone(), snap["webView"]["className"].clone()), (json!("aab.android-h5-target/v1"), json!(WEB), json!("android.webkit.WebView")), "{snap}");
    assert_eq!(snap["pageRef"]["url"], page(&w, &sim, WEB, "location.href"), "the page's real URL");
    assert_eq!(snap["dom"]["title"], json!("Web sign-up"));
    let name = by_dom_id(&snap, "name").clone();

    // Input by observed elementId, bound to the observation.
    let input = w.ok("h5-input", args(&serial, json!({"selector": {"elementId": name["elementId"]}, "text": "Ada Lovelace", "expectedTarget": observed(&snap, &name)})));
    assert_eq!((input["device"]["ok"].clone(), input["proof"]["execution"]["schemaVersion"].clone(), input["bound"]["elementId"].clone()), (json!(true), json!("aab.h5-execution/v1"), name["elementId"].clone()), "{input}");
    assert_eq!(page(&w, &sim, WEB, "document.getElementById('name').value"), json!("Ada Lovelace"), "ground truth: the page's input holds the text");

    // Input by exact aria-label through MCP.
    let mut mcp = w.env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "h5-input", "arguments": args(&serial, json!({"selector": {"ariaLabel": "Email address"}, "text": "ada@example.com"})), "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(page(&w, &sim, WEB, "document.getElementById('email').value"), json!("ada@example.com"));

    // Click the checkbox (by id) and the submit button (by exact text + tag): the form posts.
    let terms = by_dom_id(&snap, "terms").clone();
    w.ok("h5-click", args(&serial, json!({"selector": {"elementId": terms["elementId"]}})));
    assert_eq!(page(&w, &sim, WEB, "document.getElementById('terms').checked"), json!(true));
    let click = w.ok("h5-click", args(&serial, json!({"selector": {"text": "Create account", "tag": "button"}})));
    assert_eq!(click["device"]["nativeHit"]["ok"], json!(true), "{click}");
    // Figures for the report (no threshold): where an H5 click's time goes.
    eprintln!("h5-click timingsMs {}", click["timingsMs"]);
    // The page's own fetch answers; h5-wait polls until the welcome shows.
    let waited = w.ok("h5-wait", json!({"packageName": SAMPLE, "selector": {"text": "Welcome, Ada Lovelace"}, "intervalMs": 50}));
    assert_eq!((waited["matched"]["id"].clone(), waited["pageRef"]["webViewId"].clone()), (json!("result"), json!(WEB)), "{waited}");
    assert_eq!(page(&w, &sim, WEB, "document.getElementById('result').textContent"), json!("Welcome, Ada Lovelace"));
    let posts: Vec<Value> = control(&w, &sim, json!({"op": "h5-requests"}))["requests"].as_array().unwrap().iter().filter(|r| r["path"] == json!("/api/signup")).cloned().collect();
    assert_eq!(posts.len(), 1, "ground truth: one submission: {posts:?}");
    assert_eq!(serde_json::from_str::<Value>(posts[0]["body"].as_str().unwrap()).unwrap(), json!({"name": "Ada Lovelace", "email": "ada@example.com", "terms": true}));
    // A selector that never matches ends at the deadline, not dispatched.
    w.fails("h5-wait", json!({"packageName": SAMPLE, "selector": {"text": "Never there"}, "timeoutMs": 800, "intervalMs": 50}), "h5_wait_timeout");

    // Page scroll by deltas (a taller page first), bound to the observed page.
    page(&w, &sim, WEB, "document.body.style.height = '6000px'; window.scrollTo(0, 0); true");
    let now = w.ok("h5-dom", json!({"packageName": SAMPLE}));
    let scrolled = w.ok("h5-scroll", args(&serial, json!({"deltaX": 0, "deltaY": 500, "expectedPage": now["pageRef"]})));
    assert_eq!(page(&w, &sim, WEB, "window.scrollY"), json!(500), "{scrolled}");

    // Expert eval in the observed page returns the page's value.
    let eval = w.ok("h5-eval", args(&serial, json!({"script": "document.title + ':' + document.getElementById('name').value", "expectedPage": now["pageRef"]})));
    assert_eq!(eval["device"]["result"], json!("Web sign-up:Ada Lovelace"), "{eval}");

    // Ground truth: one effect per dispatched action, by its action id, and all settled.
    let ids: Vec<Value> = h5_effects(&w, &sim).iter().map(|e| e["actionId"].clone()).collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert_eq!(ids[0], input["actionId"]);
    assert_eq!(ids[3], click["actionId"]);
    assert_eq!(phase(&w, &serial), json!("idle"));
    sim.shutdown();
}

#[test]
fn android_h5_refusals_happen_before_dispatch_and_leave_the_page_alone() {
    let w = World::new();
    let (mut sim, serial) = on_web(&w, |_| {});
    let snap = w.ok("h5-dom", json!({"packageName": SAMPLE}));
    let submit = by_dom_id(&snap, "submit").clone();
    page(&w, &sim, WEB, COUNT_CLICKS);
    let click = |extra: Value| args(&serial, json!({"selector": {"text": "Create account"}})).as_object().unwrap().clone().into_iter().chain(extra.as_object().unwrap().clone()).collect::<serde_json::Map<_, _>>();

    // A replaced element with identical HTML is a new element: refused as changed.
    page(&w, &sim, WEB, "var b = document.getElementById('submit'); b.replaceWith(b.cloneNode(true)); window.__clicks = 0; document.getElementById('submit').addEventListener('click', function (e) { window.__clicks++; e.preventDefault(); }); true");
    let facts = w.fails("h5-click", Value::Object(click(json!({"expectedTarget": observed(&snap, &submit)}))), "android_h5_target_changed");
    assert_eq!(facts["details"]["changed"], json!(["elementId"]), "{facts}");
    w.fails("h5-click", args(&serial, json!({"selector": {"elementId": submit["elementId"]}})), "android_h5_selector_not_found");

    // Native-layer refusals from the SDK's hit check, each before the page acts.
    set(&w, &sim, WEB, json!({"obscured": [0, 200, 1080, 2400]}));
    w.fails("h5-click", Value::Object(click(json!({}))), "android_h5_native_target_obscured");
    set(&w, &sim, WEB, json!({"obscured": null, "transform": "rotate(5deg)"}));
    w.fails("h5-click", Value::Object(click(json!({}))), "android_h5_native_transform_unsupported");
    // The WebView hangs off the bottom of the screen: the button is in the page's
    // viewport but not on the phone's screen.
    set(&w, &sim, WEB, json!({"transform": null, "bounds": [0, 2300, 1080, 4500]}));
    w.fails("h5-click", Value::Object(click(json!({}))), "android_h5_target_outside_native_viewport");
    assert_eq!(page(&w, &sim, WEB, "window.__clicks"), json!(0), "ground truth: the page saw no click");
    assert!(h5_effects(&w, &sim).is_empty(), "ground truth: no H5 effect on the phone");
    assert_eq!(phase(&w, &serial), json!("idle"), "settled as not dispatched");

    // Back on screen, the same click works.
    set(&w, &sim, WEB, json!({"bounds": [0, 200, 1080, 2400]}));
    w.ok("h5-click", Value::Object(click(json!({}))));
    assert_eq!(page(&w, &sim, WEB, "window.__clicks"), json!(1));

    // A truncated snapshot (more than 1000 controls) binds only by elementId.
    let fresh = w.ok("h5-dom", json!({"packageName": SAMPLE}));
    let listed = by_dom_id(&fresh, "submit").clone();
    page(&w, &sim, WEB, "var d = document.createElement('div'); for (var i = 0; i < 1100; i++) { var b = document.createElement('button'); b.textContent = 'Row ' + i; d.appendChild(b); } document.body.appendChild(d); true");
    let facts = w.fails("h5-click", Value::Object(click(json!({}))), "android_h5_snapshot_truncated");
    assert_eq!(facts["details"]["controlCount"].as_u64(), page(&w, &sim, WEB, "document.querySelectorAll('a,button,input,textarea,select,[role],[onclick],[aria-label],[contenteditable=\"true\"]').length").as_u64(), "{facts}");
    w.fails("h5-wait", json!({"packageName": SAMPLE, "selector": {"text": "Row 5"}}), "android_h5_snapshot_truncated");
    w.ok("h5-click", args(&serial, json!({"selector": {"elementId": listed["elementId"]}})));
    assert_eq!(page(&w, &sim, WEB, "window.__clicks"), json!(2));
    sim.shutdown();
}

#[test]
fn android_h5_two_visible_webviews_need_an_id_and_navigation_needs_a_new_observation() {
    let w = World::new();
    let (mut sim, serial) = on_web(&w, |app| {
        let views = app["webViews"].as_array_mut().unwrap();
        views[0]["bounds"] = json!([0, 200, 1080, 1300]);
        views.push(json!({"webViewId": "news-web", "url": "h5/news.html", "screen": "web", "bounds": [0, 1300, 1080, 2400], "scale": 2.625}));
    });
    let facts = w.fails("h5-dom", json!({"packageName": SAMPLE}), "android_h5_webview_ambiguous");
    let mut ids: Vec<&str> = facts["details"]["webViews"].as_array().unwrap().iter().map(|v| v["webViewId"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["news-web", WEB], "{facts}");
    assert_eq!(facts["field"], json!("webViewId"));
    w.fails("h5-click", args(&serial, json!({"selector": {"text": "Load more"}})), "android_h5_webview_ambiguous");
    assert!(h5_effects(&w, &sim).is_empty());

    // With an id: that WebView's page.
    let news = w.ok("h5-dom", json!({"packageName": SAMPLE, "webViewId": "news-web"}));
    assert_eq!(news["dom"]["title"], json!("News"));
    let more = by_dom_id(&news, "more").clone();

    // A navigation between observe and act (history push, even back to the same
    // URL): the observed page is gone.
    page(&w, &sim, "news-web", "history.pushState({}, '', '#top'); history.back(); true");
    std::thread::sleep(Duration::from_millis(200));
    let facts = w.fails("h5-click", args(&serial, json!({"selector": {"text": "Load more"}, "expectedTarget": observed(&news, &more)})), "reobserve_required");
    assert!(facts["details"]["changed"].as_array().unwrap().contains(&json!("documentId")), "{facts}");
    w.fails("h5-scroll", args(&serial, json!({"deltaX": 0, "deltaY": 100, "expectedPage": news["pageRef"]})), "reobserve_required");
    w.fails("h5-eval", args(&serial, json!({"script": "window.__evaluated = true", "expectedPage": news["pageRef"]})), "reobserve_required");
    assert_eq!(page(&w, &sim, "news-web", "window.__evaluated === undefined && window.scrollY === 0"), json!(true), "ground truth: nothing ran in the page");
    assert!(h5_effects(&w, &sim).is_empty());

    // Observed again: the click goes to the named WebView's page (the observed one).
    let again = w.ok("h5-dom", json!({"packageName": SAMPLE, "webViewId": "news-web"}));
    let more = by_dom_id(&again, "more").clone();
    let before = page(&w, &sim, "news-web", "document.querySelectorAll('#items li').length");
    w.ok("h5-click", args(&serial, json!({"selector": {"text": "Load more"}, "expectedTarget": observed(&again, &more)})));
    let until = Instant::now() + Duration::from_secs(10);
    while page(&w, &sim, "news-web", "document.querySelectorAll('#items li').length") == before {
        assert!(Instant::now() < until, "the click never loaded more items");
        std::thread::sleep(Duration::from_millis(50));
    }
    sim.shutdown();
}

#[test]
fn android_h5_lost_completion_is_unresolved_until_reconciled() {
    let w = World::new();
    let (mut sim, serial) = on_web(&w, |_| {});
    // The input takes effect; its reply and the one cancel's reply are lost.
    control(&w, &sim, json!({"op": "faults", "set": {"h5DropActionReplies": 1, "sdkDropActionReplies": 1}}));
    let (body, run) = w.run("h5-input", args(&serial, json!({"selector": {"ariaLabel": "Email address"}, "text": "lost@example.com"})));
    let facts = error_facts(&body).clone();
    w.env.check(run.exit() != 0 && facts["ambiguous"] == json!(true) && facts["dispatched"] != json!(false), &run, "a lost H5 completion is ambiguous");
    assert_eq!(page(&w, &sim, WEB, "document.getElementById('email').value"), json!("lost@example.com"), "ground truth: the input happened");
    let effects = h5_effects(&w, &sim);
    assert_eq!(effects.len(), 1, "once");
    assert_eq!(phase(&w, &serial), json!("unresolved"));

    // Nothing else may touch the device, and nothing is resent.
    w.fails("h5-click", args(&serial, json!({"selector": {"text": "Create account"}})), "device_ownership_unresolved");
    let run = w.env.aab(&["device-ownership", "--operation", "reconcile", "--serial", &serial]);
    let body = w.env.expect_ok(&run, "reconcile");
    let receipt = &body["value"]["executionReceipt"];
    assert_eq!((body["value"]["recovered"].clone(), receipt["device"]["ok"].clone(), receipt["device"]["execution"]["schemaVersion"].clone()), (json!(true), json!(true), json!("aab.h5-execution/v1")), "{body}");
    assert_eq!(receipt["device"]["actionId"], effects[0]["actionId"], "the receipt of the input that happened");
    assert_eq!(phase(&w, &serial), json!("idle"));
    assert_eq!(h5_effects(&w, &sim).len(), 1, "ground truth: reconcile never acts again");
    sim.shutdown();
}

#[test]
fn android_h5_eval_is_denied_inside_a_script_while_h5_dom_runs() {
    let w = World::new();
    let (mut sim, serial) = on_web(&w, |_| {});
    let source = "exports.main = async (ctx) => {
        const dom = await ctx.call('h5-dom', {});
        const ev = await ctx.call('h5-eval', {script: \"document.title = 'owned'\", expectedPage: dom.ok ? dom.result.pageRef : null});
        return {dom: dom.ok && dom.result.dom.title, eval: [ev.ok, ev.error && ev.error.code, ev.dispatched]};
    };";
    let script = json!({"schemaVersion": "aab.code-script/v1", "language": "javascript", "source": source,
                        "target": {"platform": "android", "serial": serial, "packageName": SAMPLE}, "permissions": ["app.read", "app.interact"]});
    let result = crate::android_intent::run_script(&w, "h5-eval-denied", &script);
    assert_eq!(result["dom"], json!("Web sign-up"), "{result}");
    assert_eq!(result["eval"], json!([false, "command_permanently_denied", false]), "{result}");
    assert_eq!(page(&w, &sim, WEB, "document.title"), json!("Web sign-up"), "ground truth: the script never ran in the page");
    sim.shutdown();
}
