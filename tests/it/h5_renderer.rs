//! The shared mobile H5 renderer (`AiAppBridgeWeb.h5Render`, protocols §8) in
//! real headless Chromium: the Web SDK file is evaluated in the page exactly as a
//! mobile SDK evaluates it in a WebView, and every outcome is checked against the
//! live DOM over CDP (counters, values, scroll offsets the page itself records),
//! not against the renderer's own reply.

use std::time::Duration;

use aab_e2e::chromium::{Chromium, Tab};
use serde_json::{Value, json};

use crate::web::StaticSite;

const SDK: &str = include_str!("../../plugins/web/sdk/ai-app-bridge-web.js");
const SEED: &str = "6f1c2a52-0d7e-4d0b-9a53-1f0d2f8a9c11";
const PREFIX: &str = "android_h5_";

/// Every path answers the same blank page; the tests fill the body over CDP.
const BLANK: &str = "<!doctype html><html><head><meta charset=utf-8><title>h5 page</title></head><body></body></html>";

/// A browser with one loaded page whose body is `html`.
struct Page {
    chromium: Chromium,
    tab: Tab,
    url: String,
    _site: StaticSite,
}

impl Page {
    fn with_body(html: &str) -> Page {
        let site = StaticSite::serve(BLANK.to_string());
        let url = format!("http://127.0.0.1:{}/app/index.html", site.port);
        let mut chromium = Chromium::launch();
        let tab = chromium.open(&url);
        chromium.wait_for(&tab, "document.readyState === 'complete' && location.href.startsWith('http')", Duration::from_secs(20));
        let mut page = Page { chromium, tab, url, _site: site };
        page.eval(&format!("document.body.innerHTML = {}; true", json!(html)));
        page
    }

    fn eval(&mut self, expression: &str) -> Value {
        self.chromium.eval(&self.tab, expression)
    }

    /// One renderer call, evaluated the way the mobile SDKs do it.
    fn render(&mut self, request: Value) -> Value {
        let expression = format!("(function () {{\n{SDK}\n; return AiAppBridgeWeb.h5Render({request}); }})()");
        self.chromium.eval(&self.tab, &expression)
    }

    fn snapshot(&mut self) -> Value {
        let r = self.render(json!({"operation": "snapshot", "seed": SEED, "errorPrefix": PREFIX}));
        assert_eq!(r["ok"], json!(true), "snapshot: {r}");
        r["dom"].clone()
    }

    fn page_ref(dom: &Value) -> Value {
        json!({"documentId": dom["documentId"], "url": dom["url"]})
    }

    fn act(&mut self, operation: &str, payload: Value, geometry: Option<Value>) -> Value {
        let mut req = json!({"operation": operation, "seed": SEED, "errorPrefix": PREFIX, "payload": payload});
        if let Some(g) = geometry {
            req["geometry"] = g;
        }
        self.render(req)
    }

    /// prepare → (nothing in between) → action, as the native side runs it.
    fn prepare_and_act(&mut self, payload: Value) -> Value {
        let prepared = self.act("prepare", payload.clone(), None);
        if prepared["ok"] != json!(true) {
            return prepared;
        }
        self.act("action", payload, Some(prepared["geometry"].clone()))
    }
}

fn control<'a>(dom: &'a Value, id: &str) -> &'a Value {
    dom["controls"].as_array().expect("controls").iter().find(|c| c["id"] == json!(id)).unwrap_or_else(|| panic!("no control #{id} in {dom}"))
}

/// The §1.8 element reference: exactly the string identity fields.
fn element_ref(c: &Value) -> Value {
    let mut e = serde_json::Map::new();
    for k in ["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href"] {
        e.insert(k.to_string(), c[k].clone());
    }
    Value::Object(e)
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

fn assert_refused(r: &Value, code: &str, dispatched: bool) {
    assert_eq!(r["ok"], json!(false), "{r}");
    assert_eq!(r["error"], json!(code), "{r}");
    assert_eq!(r["message"], json!(format!("WebView execution rejected: {code}")), "{r}");
    assert_eq!(r["dispatched"], json!(dispatched), "{r}");
    assert_eq!(r["ambiguous"], json!(false), "{r}");
}

const FORM: &str = r#"
<h1>Checkout</h1>
<p>Plain paragraph text.</p>
<button id="buy" name="buyName" type="button" onclick="window.clicks = (window.clicks || 0) + 1">Buy now</button>
<a id="help" href="/help?topic=pay">Help</a>
<input id="email" name="email" type="email" value="a@b.example" aria-label="Email">
<input id="secret" name="pw" type="password" value="hunter2-secret">
<textarea id="note"></textarea>
<button id="off" disabled>Disabled</button>
<button id="gone" style="display:none">Hidden</button>
<div id="far" style="height:3000px"></div>
<button id="below" onclick="window.belowClicks = 1">Below the fold</button>
"#;

#[test]
fn h5_renderer_snapshot_has_the_mobile_fields_and_redacts_passwords() {
    let mut p = Page::with_body(FORM);
    let r = p.render(json!({"operation": "snapshot", "seed": SEED, "errorPrefix": PREFIX}));
    assert_eq!(keys(&r), sorted(&["ok", "dom"]), "{r}");
    let dom = &r["dom"];
    assert_eq!(
        keys(dom),
        sorted(&["documentId", "url", "title", "readyState", "viewport", "bodyText", "bodyTextTruncated", "controlCount", "truncated", "controls"])
    );
    assert_eq!(dom["documentId"], json!(SEED));
    assert_eq!(dom["url"], json!(p.url));
    assert_eq!(dom["title"], json!("h5 page"));
    assert_eq!(dom["readyState"], json!("complete"));
    assert_eq!(keys(&dom["viewport"]), sorted(&["width", "height", "scrollX", "scrollY"]));
    assert_eq!(dom["viewport"]["width"], p.eval("innerWidth"));
    assert_eq!(dom["viewport"]["height"], p.eval("innerHeight"));
    assert!(dom["bodyText"].as_str().unwrap().contains("Plain paragraph text."), "{dom}");
    assert_eq!(dom["bodyTextTruncated"], json!(false));
    // Ground truth: the page's own count of the control query.
    let count = p.eval(r#"document.querySelectorAll('a,button,input,textarea,select,[role],[onclick],[aria-label],[contenteditable="true"]').length"#);
    assert_eq!(dom["controlCount"], count);
    assert_eq!(dom["controls"].as_array().unwrap().len() as u64, count.as_u64().unwrap());
    assert_eq!(dom["truncated"], json!(false));

    let buy = control(dom, "buy");
    assert_eq!(
        keys(buy),
        sorted(&["elementId", "tag", "id", "name", "type", "text", "ariaLabel", "href", "value", "visible", "disabled", "editable", "interaction", "bounds"])
    );
    assert_eq!(buy["tag"], json!("button"));
    assert_eq!(buy["name"], json!("buyName"));
    assert_eq!(buy["type"], json!("button"));
    assert_eq!(buy["text"], json!("Buy now"));
    assert_eq!(buy["ariaLabel"], json!(""));
    assert_eq!(buy["href"], json!(""));
    assert_eq!(buy["visible"], json!(true));
    assert_eq!(buy["disabled"], json!(false));
    assert_eq!(buy["editable"], json!(false));
    assert_eq!(buy["interaction"]["status"], json!("ready"));
    let rect = p.eval("(() => { const r = document.getElementById('buy').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()");
    let rect: Vec<f64> = rect.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let b = &buy["bounds"];
    for (got, want) in [(&b["x"], rect[0]), (&b["y"], rect[1]), (&b["width"], rect[2]), (&b["height"], rect[3])] {
        assert!((got.as_f64().unwrap() - want).abs() < 0.11, "bounds {b} vs page {rect:?}");
    }
    assert_eq!(control(dom, "help")["href"], json!("/help?topic=pay"));
    let email = control(dom, "email");
    assert_eq!(email["value"], json!("a@b.example"));
    assert_eq!(email["ariaLabel"], json!("Email"));
    assert_eq!(email["editable"], json!(true));
    assert_eq!(email["text"], json!(""));
    let secret = control(dom, "secret");
    assert_eq!(secret["value"], json!("[REDACTED]"));
    assert_eq!(secret["text"], json!(""));
    assert!(!r.to_string().contains("hunter2"), "a password value left the page: {r}");
    assert_eq!(control(dom, "off")["disabled"], json!(true));
    assert_eq!(control(dom, "off")["interaction"]["status"], json!("disabled"));
    assert_eq!(control(dom, "gone")["visible"], json!(false));
    assert_eq!(control(dom, "gone")["interaction"]["status"], json!("hidden"));
    assert_eq!(control(dom, "below")["interaction"]["status"], json!("outside-viewport"));
    // Element ids are per document and stable across snapshots.
    let again = p.snapshot();
    assert_eq!(control(&again, "buy")["elementId"], buy["elementId"]);
    assert_eq!(again["documentId"], json!(SEED));
    // The hidden state object does not show up among the page's globals.
    assert_eq!(p.eval("Object.keys(window).some(k => k.indexOf('__aab') === 0)"), json!(false));
    assert_eq!(p.eval("typeof window.__aabAndroidH5TargetV1"), json!("object"));
}

#[test]
fn h5_renderer_truncates_at_1000_and_refuses_scans_over_5000() {
    let mut p = Page::with_body("");
    p.eval("for (let i = 0; i < 1200; i++) { const b = document.createElement('button'); b.id = 'b' + i; b.textContent = 'B' + i; document.body.appendChild(b); } true");
    let dom = p.snapshot();
    assert_eq!(dom["controlCount"], json!(1200));
    assert_eq!(dom["truncated"], json!(true));
    assert_eq!(dom["controls"].as_array().unwrap().len(), 1000);
    let first = element_ref(control(&dom, "b0"));
    p.eval("for (let i = 1200; i < 5100; i++) { const b = document.createElement('button'); b.textContent = 'B' + i; document.body.appendChild(b); } true");
    let r = p.act("prepare", json!({"action": "click", "pageRef": Page::page_ref(&dom), "element": first}), None);
    assert_refused(&r, "android_h5_target_scan_truncated", false);
}

#[test]
fn h5_renderer_click_and_input_take_effect_in_the_page() {
    let mut p = Page::with_body(FORM);
    p.eval(
        "window.events = []; const n = document.getElementById('note'); \
         n.addEventListener('input', () => events.push('input:' + n.value)); n.addEventListener('change', () => events.push('change:' + n.value)); \
         const e = document.getElementById('email'); const proto = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value'); \
         Object.defineProperty(e, 'value', { configurable: true, get() { return proto.get.call(this); }, set(v) { window.instanceSetter = true; proto.set.call(this, v); } }); true",
    );
    let dom = p.snapshot();
    let page = Page::page_ref(&dom);

    let r = p.prepare_and_act(json!({"action": "click", "pageRef": page, "element": element_ref(control(&dom, "buy"))}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["dispatched"], json!(true));
    assert_eq!(p.eval("window.clicks"), json!(1));

    let r = p.prepare_and_act(json!({"action": "input", "pageRef": page, "element": element_ref(control(&dom, "note")), "text": "leave at door"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("document.getElementById('note').value"), json!("leave at door"));
    assert_eq!(p.eval("events"), json!(["input:leave at door", "change:leave at door"]));
    assert_eq!(p.eval("document.activeElement.id"), json!("note"));

    // The value goes through the prototype's setter, not the element's own property.
    let r = p.prepare_and_act(json!({"action": "input", "pageRef": page, "element": element_ref(control(&dom, "email")), "text": "c@d.example"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("document.getElementById('email').value"), json!("c@d.example"));
    assert_eq!(p.eval("window.instanceSetter === undefined"), json!(true));

    // A password reaches the page but is never echoed back.
    let r = p.prepare_and_act(json!({"action": "input", "pageRef": page, "element": element_ref(control(&dom, "secret")), "text": "n3w-pass-word"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("document.getElementById('secret').value"), json!("n3w-pass-word"));
    assert!(!r.to_string().contains("n3w-pass-word"), "{r}");
    assert_eq!(r["sensitive"], json!(true));

    // A contenteditable editor gets its text.
    p.eval("const d = document.createElement('div'); d.id = 'ed'; d.setAttribute('contenteditable', 'true'); d.textContent = 'old'; document.body.prepend(d); true");
    let dom2 = p.snapshot();
    let r = p.prepare_and_act(json!({"action": "input", "pageRef": Page::page_ref(&dom2), "element": element_ref(control(&dom2, "ed")), "text": "new text"}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("document.getElementById('ed').innerText"), json!("new text"));

    // Not editable / disabled are refused before anything happens.
    let r = p.act("prepare", json!({"action": "input", "pageRef": Page::page_ref(&dom2), "element": element_ref(control(&dom2, "buy")), "text": "x"}), None);
    assert_refused(&r, "android_h5_target_not_editable", false);
    let r = p.act("prepare", json!({"action": "click", "pageRef": Page::page_ref(&dom2), "element": element_ref(control(&dom2, "off"))}), None);
    assert_refused(&r, "android_h5_target_not_clickable", false);
    let r = p.act("prepare", json!({"action": "click", "pageRef": Page::page_ref(&dom2), "element": element_ref(control(&dom2, "gone"))}), None);
    assert_refused(&r, "android_h5_target_not_clickable", false);
}

#[test]
fn h5_renderer_replaced_element_with_identical_html_is_changed() {
    let mut p = Page::with_body(FORM);
    let dom = p.snapshot();
    let buy = element_ref(control(&dom, "buy"));
    // Same outerHTML, new node.
    p.eval("const b = document.getElementById('buy'); b.outerHTML = b.outerHTML; true");
    assert_eq!(p.eval("document.getElementById('buy').textContent"), json!("Buy now"));
    let r = p.act("prepare", json!({"action": "click", "pageRef": Page::page_ref(&dom), "element": buy.clone()}), None);
    assert_refused(&r, "android_h5_target_changed", false);
    // Same node, changed identity text.
    let dom = p.snapshot();
    let buy = element_ref(control(&dom, "buy"));
    p.eval("document.getElementById('buy').textContent = 'Buy later'; true");
    let r = p.act("prepare", json!({"action": "click", "pageRef": Page::page_ref(&dom), "element": buy}), None);
    assert_refused(&r, "android_h5_target_changed", false);
    assert_eq!(p.eval("window.clicks === undefined"), json!(true));
}

#[test]
fn h5_renderer_obscured_and_off_viewport_targets_are_refused() {
    let mut p = Page::with_body(FORM);
    p.eval("const c = document.createElement('div'); c.id = 'cover'; c.style.cssText = 'position:fixed;inset:0;background:rgba(0,0,0,.3)'; document.body.appendChild(c); true");
    let dom = p.snapshot();
    let page = Page::page_ref(&dom);
    assert_eq!(control(&dom, "buy")["interaction"]["status"], json!("obscured"));
    let r = p.act("prepare", json!({"action": "click", "pageRef": page, "element": element_ref(control(&dom, "buy"))}), None);
    assert_refused(&r, "android_h5_target_obscured", false);
    let r = p.act("prepare", json!({"action": "click", "pageRef": page, "element": element_ref(control(&dom, "below"))}), None);
    assert_refused(&r, "android_h5_target_outside_viewport", false);
    // Even a final turn with a forged geometry does not get past the checks.
    let forged = json!({"x": 10, "y": 10, "width": 1, "height": 1, "scrollX": 0, "scrollY": 0, "bounds": {}});
    let r = p.act("action", json!({"action": "click", "pageRef": page, "element": element_ref(control(&dom, "buy"))}), Some(forged));
    assert_refused(&r, "android_h5_target_obscured", false);
    assert_eq!(p.eval("window.clicks === undefined && window.belowClicks === undefined"), json!(true));

    // scroll brings the off-viewport one into view; then it is clickable.
    p.eval("document.getElementById('cover').remove(); true");
    let below = element_ref(control(&dom, "below"));
    let r = p.act("action", json!({"action": "scroll", "pageRef": page, "element": below}), None);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["interaction"]["status"], json!("ready"), "{r}");
    assert!(p.eval("scrollY").as_f64().unwrap() > 1000.0);
    let r = p.prepare_and_act(json!({"action": "click", "pageRef": page, "element": below}));
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("window.belowClicks"), json!(1));
}

#[test]
fn h5_renderer_action_needs_the_prepared_geometry() {
    let mut p = Page::with_body(FORM);
    let dom = p.snapshot();
    let payload = json!({"action": "click", "pageRef": Page::page_ref(&dom), "element": element_ref(control(&dom, "buy"))});
    let prepared = p.act("prepare", payload.clone(), None);
    assert_eq!(prepared["ok"], json!(true), "{prepared}");
    assert_eq!(prepared["dispatched"], json!(false));
    let g = prepared["geometry"].clone();
    assert_eq!(keys(&g), sorted(&["x", "y", "width", "height", "scrollX", "scrollY", "bounds"]));
    assert_eq!(g["width"], p.eval("innerWidth"));
    // A different geometry is refused.
    let mut other = g.clone();
    other["x"] = json!(g["x"].as_i64().unwrap() + 1);
    let r = p.act("action", payload.clone(), Some(other));
    assert_refused(&r, "android_h5_target_changed", false);
    // The element moves between prepare and action: refused.
    p.eval("const s = document.createElement('div'); s.style.height = '40px'; document.body.prepend(s); true");
    let r = p.act("action", payload.clone(), Some(g.clone()));
    assert_refused(&r, "android_h5_target_changed", false);
    // Missing geometry on the final turn is a malformed request.
    let r = p.act("action", payload.clone(), None);
    assert_refused(&r, "invalid_h5_request", false);
    assert_eq!(p.eval("window.clicks === undefined"), json!(true));
    // A fresh prepare → action pair works.
    let r = p.prepare_and_act(payload);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("window.clicks"), json!(1));
}

#[test]
fn h5_renderer_navigation_requires_a_new_observation() {
    let mut p = Page::with_body(FORM);
    let dom = p.snapshot();
    let buy = element_ref(control(&dom, "buy"));
    let old = Page::page_ref(&dom);
    // Before any snapshot under the Flutter prefix there is no state for it.
    let r = p.render(json!({"operation": "prepare", "seed": SEED, "errorPrefix": "flutter_h5_", "payload": {"action": "click", "pageRef": old, "element": buy}}));
    assert_refused(&r, "reobserve_required", false);

    p.eval("history.pushState({}, '', '/app/next'); true");
    let r = p.act("prepare", json!({"action": "click", "pageRef": old, "element": buy}), None);
    assert_refused(&r, "reobserve_required", false);
    let dom = p.snapshot();
    assert_eq!(dom["documentId"], json!(format!("{SEED}:1")));
    assert!(dom["url"].as_str().unwrap().ends_with("/app/next"));

    // Same URL, new generation (replaceState) is still a different page.
    let page = Page::page_ref(&dom);
    p.eval("history.replaceState({}, '', location.href); true");
    let r = p.act("action", json!({"action": "eval", "pageRef": page, "script": "1"}), None);
    assert_refused(&r, "reobserve_required", false);

    // A hash change.
    let dom = p.snapshot();
    assert_eq!(dom["documentId"], json!(format!("{SEED}:2")));
    let page = Page::page_ref(&dom);
    p.eval("location.hash = '#x'; true");
    p.chromium.wait_for(&p.tab, "location.hash === '#x'", Duration::from_secs(5));
    let r = p.act("action", json!({"action": "scrollBy", "pageRef": page, "deltaX": 0, "deltaY": 100}), None);
    assert_refused(&r, "reobserve_required", false);

    // pageshow counts only for a page back from the back/forward cache;
    // pagehide suspends the state until the next snapshot.
    let dom = p.snapshot();
    p.eval("window.dispatchEvent(new PageTransitionEvent('pageshow', {persisted: false})); true");
    assert_eq!(p.snapshot()["documentId"], dom["documentId"]);
    let generation = |d: &Value| d["documentId"].as_str().unwrap().rsplit(':').next().unwrap().parse::<u64>().unwrap();
    let before = generation(&dom);
    p.eval("window.dispatchEvent(new PageTransitionEvent('pageshow', {persisted: true})); true");
    let dom = p.snapshot();
    assert_eq!(dom["documentId"], json!(format!("{SEED}:{}", before + 1)));
    p.eval("window.dispatchEvent(new PageTransitionEvent('pagehide', {persisted: true})); true");
    let r = p.act("action", json!({"action": "eval", "pageRef": Page::page_ref(&dom), "script": "1"}), None);
    assert_refused(&r, "reobserve_required", false);
    let fresh = p.render(json!({"operation": "snapshot", "seed": "after-hide", "errorPrefix": PREFIX}));
    assert_eq!(fresh["dom"]["documentId"], json!("after-hide"));

    // A real navigation: a new document has no state at all.
    let dom = p.snapshot();
    let page = Page::page_ref(&dom);
    p.eval("location.reload(); true");
    p.chromium.wait_for(&p.tab, "document.readyState === 'complete' && typeof window.__aabAndroidH5TargetV1 === 'undefined'", Duration::from_secs(20));
    let r = p.act("action", json!({"action": "eval", "pageRef": page, "script": "window.ran = 1"}), None);
    assert_refused(&r, "reobserve_required", false);
    assert_eq!(p.eval("window.ran === undefined"), json!(true));
    let fresh = p.render(json!({"operation": "snapshot", "seed": "second-seed", "errorPrefix": PREFIX}));
    assert_eq!(fresh["dom"]["documentId"], json!("second-seed"));
}

#[test]
fn h5_renderer_eval_scroll_by_and_the_flutter_and_ios_prefixes() {
    let mut p = Page::with_body(FORM);
    let dom = p.snapshot();
    let page = Page::page_ref(&dom);
    let r = p.act("action", json!({"action": "eval", "pageRef": page, "script": "window.marker = 41; ({sum: marker + 1, title: document.title})"}), None);
    assert_eq!(r, json!({"ok": true, "result": {"sum": 42, "title": "h5 page"}, "dispatched": true, "ambiguous": false}));
    assert_eq!(p.eval("window.marker"), json!(41));
    let r = p.act("action", json!({"action": "eval", "pageRef": page, "script": "Promise.resolve(7)"}), None);
    assert_eq!(r["result"], json!(7), "{r}");
    let r = p.act("action", json!({"action": "eval", "pageRef": page, "script": "throw new Error('boom')"}), None);
    assert_eq!(r["error"], json!("h5_script_failed"), "{r}");
    assert_eq!(r["dispatched"], json!(true), "{r}");

    let r = p.act("action", json!({"action": "scrollBy", "pageRef": page, "deltaX": 0, "deltaY": 700}), None);
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(p.eval("Math.round(scrollY)"), json!(700));
    assert_eq!(r["scrollY"], json!(700));
    let r = p.act("action", json!({"action": "scrollBy", "pageRef": page, "deltaX": 0, "deltaY": 0}), None);
    assert_refused(&r, "invalid_h5_scroll", false);
    let r = p.act("prepare", json!({"action": "eval", "pageRef": page, "script": "1"}), None);
    assert_refused(&r, "invalid_h5_action", false);

    // The Flutter prefix keeps its own state and names its own codes.
    let f = p.render(json!({"operation": "snapshot", "seed": "flutter-seed", "errorPrefix": "flutter_h5_"}));
    assert_eq!(f["dom"]["documentId"], json!("flutter-seed"));
    let c = control(&f["dom"], "off").clone();
    let r = p.render(json!({"operation": "prepare", "seed": "flutter-seed", "errorPrefix": "flutter_h5_", "payload": {"action": "click", "pageRef": Page::page_ref(&f["dom"]), "element": element_ref(&c)}}));
    assert_refused(&r, "flutter_h5_target_not_clickable", false);
    // The Android state is untouched by it.
    assert_eq!(p.snapshot()["documentId"], json!(SEED));
    // The iOS prefix (WKWebView) has its own state too; an unknown prefix has none.
    let i = p.render(json!({"operation": "snapshot", "seed": "ios-seed", "errorPrefix": "ios_h5_"}));
    assert_eq!(i["dom"]["documentId"], json!("ios-seed"), "{i}");
    assert_eq!(p.eval("typeof window.__aabIOSH5TargetV1"), json!("object"));
    assert_eq!(p.snapshot()["documentId"], json!(SEED));
    let r = p.render(json!({"operation": "snapshot", "seed": SEED, "errorPrefix": "other_h5_"}));
    assert_refused(&r, "invalid_h5_request", false);
}
