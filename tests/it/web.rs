//! Web provider e2e in real headless Chromium. Every action goes through the public
//! `aab` CLI (or MCP); every outcome is checked independently of the Web SDK's own
//! report — by reading the live DOM over CDP, asking the sample app's server what it
//! received, or speaking raw `aab.web/v2` to the endpoint.
//!
//! Each test has its own runtime (`TestEnv`), its own Web endpoint on an
//! OS-assigned port (`webPort: 0`) and its own browser, so the tests run in
//! parallel; dropping them stops the runtime and kills Chromium.

use std::time::{Duration, Instant};

use aab_e2e::web::{SamplePage as Page, SampleWeb};
use aab_e2e::{Run, TestEnv, error_code, error_facts, flags};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

// ------------------------------------------------------------------ harness

/// The shared sample-app world plus this suite's command helpers.
struct Web(SampleWeb);

impl std::ops::Deref for Web {
    type Target = SampleWeb;
    fn deref(&self) -> &SampleWeb {
        &self.0
    }
}

impl std::ops::DerefMut for Web {
    fn deref_mut(&mut self) -> &mut SampleWeb {
        &mut self.0
    }
}

impl Web {
    fn start() -> Web {
        Web(SampleWeb::start())
    }

    /// `aab COMMAND --flags…`; returns the body and the run.
    fn run(&self, command: &str, args: Value) -> (Value, Run) {
        self.run_with(command, args, &[])
    }

    fn run_with(&self, command: &str, args: Value, extra: &[&str]) -> (Value, Run) {
        run_env(&self.env, command, args, extra)
    }

    /// The command must succeed; returns its `value`.
    #[track_caller]
    fn ok(&self, command: &str, args: Value) -> Value {
        ok_env(&self.env, command, args)
    }

    /// The command must fail with `code` and the given dispatch facts; returns the
    /// error facts.
    #[track_caller]
    fn fails(&self, command: &str, args: Value, code: &str, dispatched: bool) -> Value {
        let (body, run) = self.run(command, args);
        let facts = error_facts(&body).clone();
        self.env.check(error_code(&body) == Some(code), &run, &format!("{command} should fail with {code}"));
        self.env.check(run.exit() == 1, &run, "a failed command exits 1");
        let expected = if dispatched { (json!(true), json!(true)) } else { (json!(false), json!(false)) };
        self.env.check(
            (facts["dispatched"].clone(), facts["ambiguous"].clone()) == expected,
            &run,
            &format!("{command}: expected dispatched/ambiguous {expected:?}"),
        );
        facts
    }

    /// Open a sample page and wait until its SDK is connected (seen from the page
    /// and from `web-sessions`).
    fn open(&mut self, page: &str, session: Option<&str>) -> Page {
        let opened = self.0.open_connected(page, session);
        let (session_id, runtime_epoch) = (opened.session_id.clone(), opened.runtime_epoch.clone());
        let listed = self.ok("web-sessions", json!({}));
        let found = listed["sessions"].as_array().into_iter().flatten().any(|s| {
            s["sessionId"] == json!(session_id) && s["runtimeEpoch"] == json!(runtime_epoch) && s["connected"] == json!(true)
        });
        assert!(found, "web-sessions does not list the connected page {session_id}/{runtime_epoch}: {listed}\n{}", self.env.report(None));
        opened
    }

    fn target(&self, page: &Page) -> Value {
        json!({"sessionId": page.session_id, "runtimeEpoch": page.runtime_epoch})
    }

    /// `target(page)` plus more arguments.
    fn args(&self, page: &Page, more: Value) -> Value {
        let mut a = self.target(page);
        for (k, v) in more.as_object().expect("object") {
            a[k] = v.clone();
        }
        a
    }

    fn dom(&self, page: &Page) -> Value {
        self.ok("web-dom", self.target(page))
    }

    fn eval(&mut self, page: &Page, expression: &str) -> Value {
        self.chrome.eval(&page.tab, expression)
    }

    /// What the sample server received (asked from the page's origin over CDP).
    fn submissions(&mut self, page: &Page) -> Value {
        self.eval(page, "fetch('/sample/api/submissions').then(r => r.json())")
    }
}

/// `aab COMMAND --flags… EXTRA…` in `env`; returns the body and the run.
fn run_env(env: &TestEnv, command: &str, args: Value, extra: &[&str]) -> (Value, Run) {
    let mut argv = vec![command.to_string()];
    argv.extend(flags(&args));
    argv.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = env.aab(&refs);
    let body = env.json_of(&run);
    (body, run)
}

#[track_caller]
fn ok_env(env: &TestEnv, command: &str, args: Value) -> Value {
    let (body, run) = run_env(env, command, args, &[]);
    env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("{command} should succeed"));
    body["value"].clone()
}

/// The control whose `id` attribute is `id`.
#[track_caller]
fn control<'a>(dom: &'a Value, id: &str) -> &'a Value {
    dom["dom"]["controls"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["id"] == json!(id)))
        .unwrap_or_else(|| panic!("no control with id {id} in {}", dom["dom"]["controls"]))
}

/// `expectedTarget` for `control`, copied from the observation.
fn expected(dom: &Value, control: &Value) -> Value {
    let mut element = serde_json::Map::new();
    for k in ["elementId", "tag", "id", "name", "type", "role", "ariaLabel", "placeholder", "href", "text"] {
        element.insert(k.into(), control[k].clone());
    }
    json!({"pageRef": dom["pageRef"], "element": element})
}

fn by_id(control: &Value) -> Value {
    json!({"elementId": control["elementId"]})
}

// ------------------------------------------------------------------ raw aab.web/v2

/// A hand-driven page socket, for the handshake rules.
struct RawSocket {
    rt: tokio::runtime::Runtime,
    ws: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio")
}

impl RawSocket {
    fn connect(url: &str) -> Result<RawSocket, tokio_tungstenite::tungstenite::Error> {
        let rt = runtime();
        let (ws, _) = rt.block_on(tokio_tungstenite::connect_async(url))?;
        Ok(RawSocket { rt, ws })
    }

    fn send(&mut self, v: &Value) {
        let ws = &mut self.ws;
        self.rt.block_on(ws.send(Message::text(v.to_string()))).expect("send");
    }

    /// The next JSON frame, or `Err(close code)` when the socket closes.
    fn recv(&mut self) -> Result<Value, Option<u16>> {
        let ws = &mut self.ws;
        self.rt.block_on(async {
            loop {
                match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                    Ok(Some(Ok(Message::Text(t)))) => return Ok(serde_json::from_str(t.as_str()).expect("JSON frame")),
                    Ok(Some(Ok(Message::Close(frame)))) => return Err(frame.map(|f| u16::from(f.code))),
                    Ok(Some(Ok(_))) => continue,
                    Ok(Some(Err(_)) | None) => return Err(None),
                    Err(_) => panic!("no frame within 10 s"),
                }
            }
        })
    }

    /// Expect `{type:"error", error: code}` followed by a 1008 close.
    #[track_caller]
    fn expect_rejection(&mut self, code: &str) {
        let frame = self.recv().unwrap_or_else(|c| panic!("expected an error frame `{code}`, the socket closed with {c:?}"));
        assert_eq!(frame["type"], json!("error"), "expected an error frame: {frame}");
        assert_eq!(frame["error"], json!(code), "wrong rejection: {frame}");
        match self.recv() {
            Err(Some(1008)) => {}
            other => panic!("after `{code}` the socket must close with 1008, got {other:?}"),
        }
    }
}

fn hello(session_id: &str, origin: &str) -> Value {
    json!({
        "type": "hello", "schemaVersion": "aab.web/v2", "sessionId": session_id,
        "runtimeEpoch": "0123456789abcdef0123456789abcdef", "targetId": "main",
        "executionSchema": "aab.web-execution/v1", "domTargetSchema": "aab.web-dom-target/v1", "captureSchema": "aab.web-capture/v1",
        "appName": "raw", "url": format!("{origin}/raw"), "origin": origin, "route": "/raw"
    })
}

// ------------------------------------------------------------------ scenarios

#[test]
fn web_handshake_rejections() {
    let mut w = Web::start();
    let page = w.open("index.html", None);
    let endpoint = w.endpoint.clone();
    let url = |token: &str| format!("{endpoint}?token={token}");

    // A wrong token never gets a WebSocket: the upgrade answers 403.
    match RawSocket::connect(&url("wrong-token-0000000000")) {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 403),
        Err(e) => panic!("expected HTTP 403 for a wrong token, got {e}"),
        Ok(_) => panic!("a wrong token must not open a socket"),
    }
    // Plain HTTP: /health is open, /sessions needs the token header (asked from the page).
    assert_eq!(w.eval(&page, "fetch('/health').then(r => r.json()).then(b => b.ok)"), json!(true));
    assert_eq!(w.eval(&page, "fetch('/sessions').then(r => r.status)"), json!(401));
    let expr = format!("fetch('/sessions', {{headers: {{'x-ai-app-bridge-token': '{}'}}}}).then(r => r.json()).then(b => b.count)", w.token);
    assert_eq!(w.eval(&page, &expr), json!(1));

    let origin = w.base.clone();
    // A malformed hello.
    let mut raw = RawSocket::connect(&url(&w.token)).expect("connect");
    raw.send(&json!({"type": "hello", "schemaVersion": "aab.web/v2"}));
    raw.expect_rejection("invalid_web_hello");

    // A second socket for a session that is connected.
    let mut raw = RawSocket::connect(&url(&w.token)).expect("connect");
    raw.send(&hello(&page.session_id, &origin));
    raw.expect_rejection("web_session_busy");

    // The binding must be echoed exactly on every frame.
    let mut raw = RawSocket::connect(&url(&w.token)).expect("connect");
    raw.send(&hello("raw-binding-session", &origin));
    let ack = raw.recv().expect("helloAck");
    assert_eq!(ack["type"], json!("helloAck"), "{ack}");
    assert_eq!(ack["binding"]["sessionId"], json!("raw-binding-session"));
    let mut binding = ack["binding"].clone();
    binding["connectionId"] = json!("ffffffffffffffffffffffffffffffff");
    raw.send(&json!({"type": "response", "requestId": "x", "result": {"ok": true}, "binding": binding}));
    raw.expect_rejection("web_binding_mismatch");

    // The real page is unaffected and the raw session is gone.
    let sessions = w.ok("web-sessions", json!({}));
    let raw_session = sessions["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == json!("raw-binding-session")).cloned();
    assert_eq!(raw_session.map(|s| s["connected"].clone()), Some(json!(false)), "{sessions}");
    let dom = w.dom(&page);
    assert_eq!(dom["pageRef"]["sessionId"], json!(page.session_id));

    // A known session cannot come back from another origin.
    let mut raw = RawSocket::connect(&url(&w.token)).expect("connect");
    raw.send(&hello("raw-binding-session", "http://elsewhere.example"));
    raw.expect_rejection("web_session_origin_changed");

    // Stopping the endpoint disconnects the page; commands then say why.
    let stopped = w.ok("web-session-stop", json!({}));
    assert_eq!(stopped["stopped"], json!(true));
    w.chrome.wait_for(&page.tab, "!sampleApp.bridge.transportStatus().connected", Duration::from_secs(10));
    w.fails("web-dom", w.target(&page), "web_provider_not_running", false);
    let status = w.ok("web-provider-status", json!({}));
    assert_eq!(status["running"], json!(false));
}

#[test]
fn web_observe_input_click_business_outcome() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let dom = w.dom(&page);
    assert_eq!(dom["webTargetSchema"], json!("aab.web-dom-target/v1"));
    assert_eq!(dom["pageRef"]["navigationId"].as_str().map(str::len), Some(32));
    let name = control(&dom, "name").clone();
    let password = control(&dom, "password").clone();
    let terms = control(&dom, "terms").clone();
    assert_eq!(terms["checked"], json!(false));
    assert_eq!(control(&dom, "plan-free")["checked"], json!(true));
    assert_eq!(password["sensitive"], json!(true));

    // A watermark before acting bounds the capture window read afterwards.
    let before = w.ok("web-network", w.target(&page));
    let watermark = before["watermarkCursor"].as_str().expect("watermarkCursor").to_string();
    assert!(watermark.starts_with("wc1:"), "{before}");

    let typed = w.ok("web-input", w.args(&page, json!({"selector": by_id(&name), "expectedTarget": expected(&dom, &name), "value": "Ada Lovelace"})));
    assert_eq!(typed["value"], json!("Ada Lovelace"));
    let secret = w.ok("web-input", w.args(&page, json!({"selector": by_id(&password), "value": "s3cret-Pa55"})));
    assert_eq!(secret["sensitive"], json!(true));
    assert_eq!(secret["valueLength"], json!(11));
    w.ok("web-scroll", w.args(&page, json!({"mode": "into-view", "selector": {"css": "#save"}})));
    let dom = w.dom(&page);
    let terms = control(&dom, "terms").clone();
    w.ok("web-click", w.args(&page, json!({"selector": by_id(&terms), "expectedTarget": expected(&dom, &terms)})));
    let dom = w.dom(&page);
    assert_eq!(control(&dom, "terms")["checked"], json!(true), "observation after the click");
    let save = control(&dom, "save").clone();
    let clicked = w.ok("web-click", w.args(&page, json!({"selector": {"text": "Save"}, "expectedTarget": expected(&dom, &save)})));
    let click_action = clicked["actionId"].as_str().expect("actionId").to_string();
    assert_eq!(clicked["executionReceipt"]["state"], json!("settled"));
    let waited = w.ok("web-wait", w.args(&page, json!({"targetText": "Saved #"})));
    assert_eq!(waited["matched"], json!("text"));

    // Independent checks: the server got the submission, the live DOM shows it.
    let received = w.submissions(&page);
    assert_eq!(received["count"], json!(1), "{received}");
    assert_eq!(received["submissions"][0]["payload"]["name"], json!("Ada Lovelace"));
    assert_eq!(received["submissions"][0]["payload"]["passwordLength"], json!(11));
    let shown = w.eval(&page, "document.querySelector('#result').textContent");
    assert_eq!(shown, json!("Saved #1 for Ada Lovelace."));
    assert_eq!(w.eval(&page, "document.querySelector('#terms').checked"), json!(true));

    // The capture window after the action holds the fetch, tied to the click.
    let network = w.ok("web-network", w.args(&page, json!({"factCursor": watermark, "afterActionId": click_action})));
    let records = network["records"].as_array().expect("records");
    assert!(
        records.iter().any(|r| r["item"]["url"].as_str().is_some_and(|u| u.ends_with("/sample/api/submit")) && r["association"] == json!("synchronous")),
        "the submit fetch must be in the window, associated with the click: {network}"
    );
    let coverage = &network["coverage"];
    assert_eq!(coverage["scope"], json!("sdk-captures-through-barrier"));
    assert!(matches!(coverage["status"].as_str(), Some("complete" | "partial" | "unavailable")), "{coverage}");
    let logs = w.ok("web-logs", w.args(&page, json!({"factCursor": watermark})));
    assert!(logs["records"].as_array().unwrap().iter().any(|r| r["item"]["message"] == json!("signup: submitting for Ada Lovelace")), "{logs}");

    // The password value never left the page: no reply of this test contains it.
    let dom = w.dom(&page);
    assert_eq!(control(&dom, "password")["valueLength"], json!(11));
    assert!(control(&dom, "password").get("value").is_none());
    let events = w.ok("web-events", w.target(&page));
    let state = w.ok("web-state", w.target(&page));
    for (what, v) in [("dom", &dom), ("events", &events), ("state", &state), ("network", &network), ("logs", &logs)] {
        assert!(!v.to_string().contains("s3cret-Pa55"), "the password leaked through {what}");
    }
}

#[test]
fn web_replaced_element_with_identical_html_is_changed() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let dom = w.dom(&page);
    let demo = control(&dom, "fill-demo").clone();
    // Same HTML, new node: the observation's identity must not carry over.
    w.eval(&page, "(() => { const b = document.querySelector('#fill-demo'); b.outerHTML = b.outerHTML; return true; })()");
    let facts = w.fails("web-click", w.args(&page, json!({"selector": {"ariaLabel": "Fill with demo data"}, "expectedTarget": expected(&dom, &demo)})), "web_element_changed", false);
    assert!(facts["details"]["actual"]["elementId"] != demo["elementId"], "{facts}");
    w.fails("web-click", w.args(&page, json!({"selector": by_id(&demo), "expectedTarget": expected(&dom, &demo)})), "web_element_changed", false);
    // Nothing happened on the page: the replaced button's handler is gone anyway,
    // and the name field is untouched.
    assert_eq!(w.eval(&page, "document.querySelector('#name').value"), json!(""));
    // A fresh observation works.
    let dom = w.dom(&page);
    let demo2 = control(&dom, "fill-demo").clone();
    assert_ne!(demo2["elementId"], demo["elementId"]);
    w.ok("web-click", w.args(&page, json!({"selector": by_id(&demo2), "expectedTarget": expected(&dom, &demo2)})));
}

#[test]
fn web_unready_controls_are_reported_and_refused() {
    let mut w = Web::start();
    let page = w.open("index.html", None);
    w.eval(
        &page,
        r#"(() => {
            window.__clicks = {};
            const box = document.createElement('div');
            box.innerHTML = `
              <span style="position:relative;display:inline-block">
                <button id="covered">Covered</button>
                <div id="cover" style="position:absolute;inset:0;background:rgba(0,0,0,.1);z-index:10"></div>
              </span>
              <button id="invisible" style="visibility:hidden">Invisible</button>
              <button id="off" disabled>Off</button>
              <button id="far" style="position:absolute;top:5000px">Far</button>`;
            document.querySelector('main').prepend(box);
            for (const b of box.querySelectorAll('button')) b.addEventListener('click', () => { window.__clicks[b.id] = (window.__clicks[b.id] || 0) + 1; });
            return true;
        })()"#,
    );
    let dom = w.dom(&page);
    let status = |id: &str| control(&dom, id)["interaction"]["status"].clone();
    assert_eq!(status("covered"), json!("obscured"));
    assert_eq!(control(&dom, "covered")["interaction"]["hit"]["id"], json!("cover"));
    assert_eq!(status("invisible"), json!("hidden"));
    assert_eq!(control(&dom, "invisible")["visible"], json!(false));
    assert_eq!(status("off"), json!("disabled"));
    assert_eq!(control(&dom, "off")["disabled"], json!(true));
    assert_eq!(status("far"), json!("outside-viewport"));

    let click = |w: &Web, id: &str, code: &str| {
        let c = control(&dom, id).clone();
        w.fails("web-click", w.args(&page, json!({"selector": by_id(&c), "expectedTarget": expected(&dom, &c)})), code, false)
    };
    let f = click(&w, "covered", "web_element_obscured");
    assert_eq!(f["details"]["interaction"]["status"], json!("obscured"));
    let f = click(&w, "invisible", "web_element_not_found");
    assert_eq!(f["details"]["interaction"]["status"], json!("hidden"));
    let f = click(&w, "off", "web_element_disabled");
    assert_eq!(f["details"]["interaction"]["status"], json!("disabled"));
    let f = click(&w, "far", "web_element_outside_viewport");
    assert_eq!(f["details"]["interaction"]["status"], json!("outside-viewport"));
    assert_eq!(w.eval(&page, "JSON.stringify(window.__clicks)"), json!("{}"), "no refused control may have been clicked");

    // Scrolling the far one into view makes it clickable.
    let far = control(&dom, "far").clone();
    w.ok("web-scroll", w.args(&page, json!({"mode": "into-view", "selector": by_id(&far)})));
    w.ok("web-click", w.args(&page, json!({"selector": by_id(&far)})));
    assert_eq!(w.eval(&page, "window.__clicks.far"), json!(1));
}

#[test]
fn web_navigation_invalidates_page_refs() {
    let mut w = Web::start();
    let page = w.open("list.html", None);
    let dom = w.dom(&page);
    let add = control(&dom, "add").clone();
    let done_tab = control(&dom, "tab-done").clone();
    w.ok("web-click", w.args(&page, json!({"selector": by_id(&done_tab), "expectedTarget": expected(&dom, &done_tab)})));
    assert_eq!(w.eval(&page, "location.search"), json!("?view=done"));
    let facts = w.fails("web-click", w.args(&page, json!({"selector": by_id(&add), "expectedTarget": expected(&dom, &add)})), "reobserve_required", false);
    assert_eq!(facts["details"]["expected"]["navigationId"], dom["pageRef"]["navigationId"]);
    let again = w.dom(&page);
    assert_ne!(again["pageRef"]["navigationId"], dom["pageRef"]["navigationId"]);
    assert_eq!(again["pageRef"]["runtimeEpoch"], dom["pageRef"]["runtimeEpoch"], "a route change keeps the document");
    // Back to the same URL: still a new navigation.
    w.eval(&page, "history.back(); true");
    w.chrome.wait_for(&page.tab, "location.search === ''", Duration::from_secs(5));
    let back = w.dom(&page);
    assert_eq!(back["pageRef"]["url"], dom["pageRef"]["url"]);
    assert_ne!(back["pageRef"]["navigationId"], dom["pageRef"]["navigationId"]);
}

#[test]
fn web_ambiguous_text_selector_is_refused_with_candidates() {
    let mut w = Web::start();
    let page = w.open("list.html", None);
    let facts = w.fails("web-click", w.args(&page, json!({"selector": {"text": "Remove"}})), "web_element_ambiguous", false);
    let candidates = facts["details"]["candidates"].as_array().expect("candidates");
    assert_eq!(candidates.len(), 3, "{facts}");
    assert!(candidates.iter().all(|c| c["elementId"].as_str().is_some_and(|id| id.starts_with('e'))));
    assert_eq!(w.eval(&page, "document.querySelectorAll('#items li').length"), json!(3), "nothing was removed");
    // One candidate's elementId is a valid unique selector.
    w.ok("web-click", w.args(&page, json!({"selector": {"elementId": candidates[0]["elementId"]}})));
    assert_eq!(w.eval(&page, "document.querySelectorAll('#items li').length"), json!(2));
}

#[test]
fn web_silent_page_ends_in_command_timeout() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let dom = w.dom(&page);
    let demo = control(&dom, "fill-demo").clone();
    // Keep the page's only thread busy: it cannot answer anything for 6 s.
    w.eval(&page, "setTimeout(() => { const end = Date.now() + 6000; while (Date.now() < end) {} }, 0); true");
    let started = Instant::now();
    let read = w.fails("web-dom", w.args(&page, json!({"timeoutMs": 1000})), "web_command_timeout", false);
    assert_eq!(read["details"]["read"], json!("domSnapshot"));
    let click = w.fails("web-click", w.args(&page, json!({"selector": by_id(&demo), "timeoutMs": 1500})), "web_command_timeout", true);
    let action_id = click["details"]["actionId"].as_str().expect("actionId").to_string();
    assert!(started.elapsed() < Duration::from_secs(6), "both calls must end while the page is still busy");
    let status = w.ok("web-execution", w.args(&page, json!({"operation": "status", "actionId": action_id})));
    assert_eq!(status["actions"][0]["state"], json!("unresolved"), "{status}");
    let blocked = w.fails("web-click", w.args(&page, json!({"selector": by_id(&demo), "timeoutMs": 1500})), "web_execution_unresolved", false);
    assert_eq!(blocked["details"]["actionId"], json!(action_id));

    // Once the page runs again it reports what became of the late command; the
    // record settles either way and agrees with the DOM.
    let deadline = Instant::now() + Duration::from_secs(20);
    let record = loop {
        let r = w.ok("web-execution", w.args(&page, json!({"operation": "result", "actionId": action_id})));
        if r["settled"] == json!(true) {
            break r;
        }
        assert!(Instant::now() < deadline, "the late action never settled: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let name = w.eval(&page, "document.querySelector('#name').value");
    match record["state"].as_str() {
        Some("settled") if record["result"]["ok"] == json!(true) => assert_eq!(name, json!("Grace Hopper")),
        Some("settled" | "rejected") => assert_eq!(name, json!(""), "a refused or cancelled click must not have run: {record}"),
        other => panic!("unexpected state {other:?}: {record}"),
    }
    let reconciled = w.ok("web-execution", w.args(&page, json!({"operation": "reconcile"})));
    assert_eq!(reconciled["unresolved"], json!(0), "{reconciled}");
}

#[test]
fn web_closed_tab_leaves_action_unresolved_until_reconcile() {
    let mut w = Web::start();
    let session = "close-tab-session-0001";
    let page = w.open("form.html", Some(session));
    let args = w.args(&page, json!({"name": "action", "arguments": {"name": "slowSave", "arguments": {"delayMs": 8000}}, "timeoutMs": 20000}));
    let status_args = w.args(&page, json!({"operation": "status"}));
    let (env, chrome) = (&w.0.env, &mut w.0.chrome);
    let (body, run) = std::thread::scope(|scope| {
        let pending = scope.spawn(|| run_env(env, "web-command", args.clone(), &[]));
        // Close the tab while the app action runs.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = ok_env(env, "web-execution", status_args.clone());
            if status["actions"].as_array().is_some_and(|a| a.iter().any(|r| r["state"] == json!("dispatched"))) {
                break;
            }
            assert!(Instant::now() < deadline, "the action was never dispatched: {status}");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300));
        chrome.close(&page.tab);
        pending.join().expect("web-command thread")
    });
    let facts = error_facts(&body).clone();
    w.env.check(error_code(&body) == Some("web_connection_lost"), &run, "closing the tab loses the action's connection");
    w.env.check(facts["ambiguous"] == json!(true) && facts["dispatched"] == json!(true), &run, "the outcome is unknown after dispatch");
    let action_id = facts["details"]["actionId"].as_str().expect("actionId").to_string();
    let status = w.ok("web-execution", w.args(&page, json!({"operation": "status", "actionId": action_id})));
    assert_eq!(status["actions"][0]["state"], json!("unresolved"), "{status}");
    assert_eq!(w.ok("web-execution", w.args(&page, json!({"operation": "reconcile"})))["unresolved"], json!(1));

    // The same session comes back in a new tab (a new document): the SDK reports what
    // its journal knows about the interrupted action, and reconcile settles it.
    let back = w.open("form.html", Some(session));
    assert_eq!(back.session_id, session);
    assert_ne!(back.runtime_epoch, page.runtime_epoch);
    let deadline = Instant::now() + Duration::from_secs(15);
    let reconciled = loop {
        let r = w.ok("web-execution", w.args(&back, json!({"operation": "reconcile", "actionId": action_id})));
        if r["unresolved"] == json!(0) {
            break r;
        }
        assert!(Instant::now() < deadline, "the interrupted action never settled: {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let action = &reconciled["actions"][0];
    assert_eq!(action["state"], json!("settled"), "{reconciled}");
    assert_eq!(action["completion"]["error"], json!("web_action_interrupted"));
    assert_eq!(action["completion"]["ambiguous"], json!(true));
    let result = w.ok("web-execution", w.args(&back, json!({"operation": "result", "actionId": action_id})));
    assert_eq!(result["settled"], json!(true));
}

#[test]
fn web_capture_sequence_gap_makes_coverage_partial() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let first = w.ok("web-logs", w.target(&page));
    let watermark = first["watermarkCursor"].as_str().unwrap().to_string();
    // A record over the page's 124 KiB limit is dropped by the SDK: its sequence
    // number is never delivered.
    w.eval(&page, "sampleApp.bridge.recordLog({message: 'before'}); sampleApp.bridge.recordLog({message: 'x', data: 'y'.repeat(200000)}); sampleApp.bridge.recordLog({message: 'after'}); true");
    let logs = w.ok("web-logs", w.args(&page, json!({"factCursor": watermark})));
    let coverage = &logs["coverage"];
    let reasons: Vec<&str> = coverage["reasons"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(reasons.contains(&"web_capture_sequence_gap"), "{coverage}");
    assert!(reasons.contains(&"web_capture_loss"), "{coverage}");
    assert_eq!(coverage["gap"], json!(true));
    let expected_status = if coverage["committed"] == json!(true) { "partial" } else { "unavailable" };
    assert_eq!(coverage["status"], json!(expected_status), "{coverage}");
    let messages: Vec<&str> = logs["records"].as_array().unwrap().iter().filter_map(|r| r["item"]["message"].as_str()).collect();
    assert_eq!(messages, ["before", "after"], "{logs}");
    // The page's own count agrees.
    assert_eq!(w.eval(&page, "sampleApp.bridge.transportStatus().losses"), json!(1));
}

#[test]
fn web_five_thousand_controls_stay_within_limits() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    w.eval(
        &page,
        "(() => { const box = document.createElement('div'); let h = ''; for (let i = 0; i < 5000; i++) h += `<button id=\"b${i}\">Item ${i}</button>`; box.innerHTML = h; document.body.appendChild(box); return document.querySelectorAll('button').length; })()",
    );
    let dom = w.dom(&page);
    assert!(dom["dom"]["controlCount"].as_u64().unwrap() >= 5000, "{}", dom["dom"]["controlCount"]);
    assert_eq!(dom["dom"]["controls"].as_array().unwrap().len(), 150, "the default maxControls keeps a large page within the 96 KiB reply budget");
    assert_eq!(dom["dom"]["truncated"], json!(true));
    assert!(dom["dom"]["bodyText"].as_str().unwrap().chars().count() <= 20000);
    assert_eq!(dom["dom"]["bodyTextTruncated"], json!(true));
    // The most the page may describe, within one 256 KiB message and the reply budget.
    let (body, run) = w.run_with("web-dom", w.args(&page, json!({"maxControls": 1000})), &["--output", "{\"maxBytes\":262144}"]);
    w.env.check(run.exit() == 0, &run, "web-dom maxControls 1000 must be delivered");
    let controls = body["value"]["dom"]["controls"].as_array().unwrap().len();
    assert!((1..=1000).contains(&controls), "{controls}");
    // A figure for the report (never asserted): what one page message could carry.
    eprintln!(
        "web-dom on {} controls: {controls} described, reply {} bytes, {:?} end to end (CLI), truncatedReason {}",
        body["value"]["dom"]["controlCount"],
        run.stdout.len(),
        run.elapsed,
        body["value"]["dom"]["truncatedReason"]
    );
    assert_eq!(body["value"]["dom"]["truncated"], json!(true));
    assert!(run.stdout.len() <= 262144, "reply of {} bytes", run.stdout.len());
    // A text selector would scan every control: refused instead of guessing.
    w.fails("web-click", w.args(&page, json!({"selector": {"text": "Item 4999"}})), "web_selector_scan_limit", false);
    // An observed elementId still works.
    let c = &body["value"]["dom"]["controls"].as_array().unwrap()[controls - 1];
    assert!(c["elementId"].as_str().is_some());
}

#[test]
fn web_mcp_surface_drives_the_same_page() {
    let mut w = Web::start();
    let page = w.open("list.html", None);
    let target = w.target(&page);
    let mut mcp = w.env.mcp();
    let run = |mcp: &mut aab_e2e::Mcp<'_>, command: &str, arguments: Value| {
        let (body, is_error) = mcp.call_tool("run", json!({"command": command, "arguments": arguments, "extract": null}));
        (body, is_error)
    };
    let mut args = target.clone();
    args["selector"] = json!({"css": "#new-item"});
    args["value"] = json!("Tea");
    let (body, is_error) = run(&mut mcp, "web-input", args);
    assert!(!is_error, "{body}");
    let mut args = target.clone();
    args["selector"] = json!({"text": "Add", "tag": "button"});
    let (body, is_error) = run(&mut mcp, "web-click", args);
    assert!(!is_error, "{body}");
    let (body, is_error) = run(&mut mcp, "web-click", json!({"sessionId": page.session_id, "runtimeEpoch": page.runtime_epoch, "selector": {"text": "Remove"}}));
    assert!(is_error);
    assert_eq!(error_code(&body), Some("web_element_ambiguous"));
    drop(mcp);
    assert_eq!(w.eval(&page, "[...document.querySelectorAll('#items li span')].map(s => s.textContent).join(',')"), json!("Bread,Milk,Coffee,Tea"));
}

#[test]
fn web_demo_drives_the_sample_app_and_stops_what_it_started() {
    if aab_e2e::chromium::find_chromium().is_none() {
        panic!("Chromium is required for `aab demo`; install it with: apt-get install -y chromium");
    }
    let env = TestEnv::new();
    env.install_plugin("aab_plugin_web", "web");
    let run = env.aab_with_timeout(&["demo"], &[], Duration::from_secs(120));
    env.check(run.exit() == 0, &run, "`aab demo` must succeed");
    for expected in ["web-dom:", "web-input #name = \"Ada Lovelace\"", "web-click: pressed Save", "Saved #1 for Ada Lovelace.", "POST /sample/api/submit", "Stopped the runtime."] {
        env.check(run.stdout.contains(expected), &run, &format!("the demo output must mention {expected:?}"));
    }
    env.check(!run.stdout.contains("correct horse"), &run, "the demo must not print the password");
    // The demo stopped the runtime it started: nothing of this test still runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !env.live_processes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    env.check(env.live_processes().is_empty(), &run, "the demo must stop the runtime it started");
}

// ------------------------------------------------------------------ endpoint hardening (issue 10)

/// A Web endpoint without a browser: `web-session-start` with `args`, raw HTTP and
/// raw `aab.web/v2` sockets against it.
struct Endpoint {
    env: TestEnv,
    port: u16,
    endpoint: String,
    token: String,
}

impl Endpoint {
    fn start(args: Value) -> Endpoint {
        Self::start_with_env(args, &[])
    }

    /// The first command starts the runtime, so `vars` reach the runtime's environment.
    fn start_with_env(args: Value, vars: &[(&str, &str)]) -> Endpoint {
        let env = TestEnv::new();
        env.install_plugin("aab_plugin_web", "web");
        let mut argv = vec!["web-session-start".to_string()];
        argv.extend(flags(&args));
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = env.aab_with_env(&refs, vars);
        let body = env.json_of(&run);
        env.check(run.exit() == 0, &run, "web-session-start should succeed");
        let v = &body["value"];
        Endpoint {
            port: v["port"].as_u64().expect("port") as u16,
            endpoint: v["endpoint"].as_str().expect("endpoint").to_string(),
            token: v["token"].as_str().expect("token").to_string(),
            env,
        }
    }

    /// Stop the endpoint and start it again with other settings (same runtime).
    fn restart(&mut self, args: Value) {
        ok_env(&self.env, "web-session-stop", json!({}));
        let v = ok_env(&self.env, "web-session-start", args);
        self.port = v["port"].as_u64().expect("port") as u16;
        self.endpoint = v["endpoint"].as_str().expect("endpoint").to_string();
        self.token = v["token"].as_str().expect("token").to_string();
    }

    fn url(&self) -> String {
        format!("{}?token={}", self.endpoint, self.token)
    }

    fn status(&self) -> Value {
        ok_env(&self.env, "web-provider-status", json!({}))
    }

    /// One HTTP/1.1 request with `Connection: close`; returns (status, body).
    fn http(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            req.push_str(&format!("Host: 127.0.0.1:{}\r\n", self.port));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).expect("write request");
        s.write_all(body).expect("write body");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).to_string();
        let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    /// A WebSocket upgrade carrying `origin`; Err(HTTP status) when refused.
    fn ws(&self, origin: Option<&str>) -> Result<RawSocket, u16> {
        RawSocket::connect_with(&self.url(), origin).map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(resp) => resp.status().as_u16(),
            other => panic!("upgrade failed without an HTTP answer: {other}"),
        })
    }
}

impl RawSocket {
    fn connect_with(url: &str, origin: Option<&str>) -> Result<RawSocket, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.into_client_request()?;
        if let Some(o) = origin {
            request.headers_mut().insert("origin", o.parse().expect("origin header"));
        }
        let rt = runtime();
        let (ws, _) = rt.block_on(tokio_tungstenite::connect_async(request))?;
        Ok(RawSocket { rt, ws })
    }

    /// The next message of any kind (pings included); None when the socket ended.
    fn next_message(&mut self, timeout: Duration) -> Option<Message> {
        let ws = &mut self.ws;
        self.rt.block_on(async {
            match tokio::time::timeout(timeout, ws.next()).await {
                Ok(Some(Ok(m))) => Some(m),
                Ok(_) => None,
                Err(_) => panic!("no message within {timeout:?}"),
            }
        })
    }

    fn send_message(&mut self, m: Message) {
        let ws = &mut self.ws;
        let _ = self.rt.block_on(ws.send(m));
    }

    /// hello for `session_id`; returns the helloAck.
    #[track_caller]
    fn hello(&mut self, session_id: &str) -> Value {
        self.send(&hello(session_id, "http://127.0.0.1"));
        let ack = self.recv().unwrap_or_else(|c| panic!("hello of {session_id} closed with {c:?}"));
        assert_eq!(ack["type"], json!("helloAck"), "{ack}");
        ack
    }
}

#[test]
fn web_origin_policy_and_minimal_health() {
    let ep = Endpoint::start(json!({"webPort": 0, "sampleApp": true}));
    // A foreign page presenting the right token still gets no socket.
    assert_eq!(ep.ws(Some("https://evil.example")).err(), Some(403));
    assert_eq!(ep.ws(Some("null")).err(), Some(403));
    // Loopback pages on any port and clients without Origin are admitted.
    let mut ok = ep.ws(Some("http://localhost:5173")).expect("loopback origin");
    ok.hello("origin-ok");
    let _plain = ep.ws(None).expect("no Origin header");
    // A foreign page cannot change anything through HTTP either.
    let (status, _) = ep.http("POST", "/sample/api/submit", &[("Origin", "https://evil.example"), ("Content-Type", "text/plain")], br#"{"name":"evil"}"#);
    assert_eq!(status, 403);
    let (status, _) = ep.http("GET", "/sessions", &[("Origin", "https://evil.example"), ("x-ai-app-bridge-token", &ep.token)], b"");
    assert_eq!(status, 403);
    // DNS rebinding: a GET without Origin for a foreign Host name.
    let (status, _) = ep.http("GET", "/health", &[("Host", &format!("evil.example:{}", ep.port))], b"");
    assert_eq!(status, 403);
    let status = ep.status();
    assert_eq!(status["sampleSubmissions"], json!(0), "the refused submission must not be recorded: {status}");
    let sessions = ok_env(&ep.env, "web-sessions", json!({}));
    assert_eq!(sessions["count"], json!(1), "only the admitted page has a session: {sessions}");
    assert!(status["endpointStats"]["originRefused"].as_u64().unwrap() >= 5, "{status}");
    assert_eq!(status["originPolicy"]["any"], json!(false));

    // /health: liveness for everyone, epochs and counts only with the token.
    let (code, body) = ep.http("GET", "/health", &[], b"");
    assert_eq!(code, 200);
    let open: Value = serde_json::from_str(&body).expect("health JSON");
    assert_eq!(open, json!({"ok": true, "running": true, "protocol": "aab.web/v2"}), "unauthenticated /health discloses too much");
    let (code, body) = ep.http("GET", "/health", &[("x-ai-app-bridge-token", &ep.token)], b"");
    assert_eq!(code, 200);
    let full: Value = serde_json::from_str(&body).expect("health JSON");
    assert_eq!(full["providerEpoch"], status["providerEpoch"], "{full}");
    assert_eq!(full["sessions"], json!(1), "{full}");
    let (code, body) = ep.http("GET", "/health", &[("x-ai-app-bridge-token", "wrong-token-00000000")], b"");
    assert_eq!((code, serde_json::from_str::<Value>(&body).unwrap().get("providerEpoch").is_none()), (200, true));
}

#[test]
fn web_allowed_origins_are_configurable() {
    // By argument.
    let ep = Endpoint::start(json!({"webPort": 0, "allowedOrigins": ["https://app.example.com"]}));
    ep.ws(Some("https://app.example.com")).expect("configured origin").hello("configured");
    assert_eq!(ep.ws(Some("https://app.example.com:8443")).err(), Some(403), "origins match exactly");
    assert_eq!(ep.ws(Some("https://evil.example")).err(), Some(403));
    let info = ok_env(&ep.env, "web-connect-info", json!({}));
    assert_eq!(info["originPolicy"]["allowed"], json!(["https://app.example.com"]), "{info}");
    // A malformed origin is refused before anything starts.
    let (body, run) = run_env(&ep.env, "web-session-start", json!({"webPort": 0, "allowedOrigins": ["https://a.example/path"]}), &[]);
    ep.env.check(run.exit() == 1 && error_code(&body).is_some(), &run, "a path is not an origin");

    // By environment (read when the endpoint starts, comma-separated).
    let ep = Endpoint::start_with_env(json!({"webPort": 0}), &[("AI_APP_BRIDGE_WEB_ALLOWED_ORIGINS", "https://env.example, http://dev.test:8080")]);
    ep.ws(Some("https://env.example")).expect("env origin").hello("from-env");
    ep.ws(Some("http://dev.test:8080")).expect("env origin 2");
    assert_eq!(ep.ws(Some("https://evil.example")).err(), Some(403));
    // `*` opens the endpoint to every origin (the token still decides).
    let ep = Endpoint::start(json!({"webPort": 0, "allowedOrigins": ["*"]}));
    ep.ws(Some("https://anything.example")).expect("any origin").hello("anything");
}

#[test]
fn web_http_header_timeout_idle_keepalive_and_connection_cap() {
    use std::io::{Read, Write};
    // Connection cap: a generous header timeout keeps idle connections open.
    let mut ep = Endpoint::start(json!({"webPort": 0, "headerTimeoutMs": 60000}));
    let cap = ep.status()["endpointStats"]["maxHttpConnections"].as_u64().expect("maxHttpConnections") as usize;
    let mut held: Vec<std::net::TcpStream> = (0..cap).map(|_| std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect")).collect();
    // The one over the cap is told so and closed, at once.
    let mut extra = std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect");
    extra.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "over the cap: {answer:?}");
    let stats = ep.status()["endpointStats"].clone();
    assert_eq!(stats["httpConnections"], json!(cap), "{stats}");
    assert!(stats["refusedConnections"].as_u64().unwrap() >= 1, "{stats}");
    held.clear();
    // Released connections free their slots: the endpoint serves again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _) = ep.http("GET", "/health", &[], b"");
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the endpoint did not recover after the held connections closed (last status {code})");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Header timeout: a head that never completes, and an idle keep-alive connection.
    ep.restart(json!({"webPort": 0, "headerTimeoutMs": 1000}));
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect");
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").unwrap();
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect");
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect");
    for (what, s) in [("an unfinished request head", &mut slow), ("an idle keep-alive connection", &mut idle), ("a connection that never sends", &mut silent)] {
        // The server must close it; the bound is only there to end a broken test.
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = Vec::new();
        let r = s.read_to_end(&mut buf);
        assert!(r.is_ok(), "{what} was not closed by the server: {r:?}");
        if what.contains("keep-alive") {
            assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"), "the request itself was answered");
        }
    }
    assert_eq!(ep.http("GET", "/health", &[], b"").0, 200);
}

#[test]
fn web_socket_keepalive_idle_and_handshake_timeouts() {
    let ep = Endpoint::start(json!({"webPort": 0, "pingIntervalMs": 500, "idleTimeoutMs": 2000, "handshakeTimeoutMs": 1000}));
    let mut live = ep.ws(None).expect("upgrade");
    let ack = live.hello("keepalive-live");
    assert_eq!(ack["limits"]["pingIntervalMs"], json!(500), "{ack}");
    assert_eq!(ack["limits"]["idleTimeoutMs"], json!(2000), "{ack}");
    let mut silent = ep.ws(None).expect("upgrade");
    silent.hello("keepalive-silent");
    // The live socket answers pings (tungstenite pongs while it is read). Eight pings
    // at 500 ms span more than the 2000 ms idle timeout: it must still be open.
    let mut pings = 0;
    while pings < 8 {
        match live.next_message(Duration::from_secs(30)) {
            Some(Message::Ping(_)) => pings += 1,
            Some(Message::Text(_)) => {}
            other => panic!("the answering socket ended after {pings} pings: {other:?}"),
        }
    }
    // The silent one never read, so never ponged: the host terminated it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let sessions = loop {
        let s = ok_env(&ep.env, "web-sessions", json!({}));
        let connected = |id: &str| s["sessions"].as_array().unwrap().iter().find(|x| x["sessionId"] == json!(id)).map(|x| x["connected"].clone());
        if connected("keepalive-silent") == Some(json!(false)) {
            assert_eq!(connected("keepalive-live"), Some(json!(true)), "{s}");
            break s;
        }
        assert!(Instant::now() < deadline, "the silent socket was never terminated: {s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(sessions["count"], json!(2));
    // A socket that upgrades but never says hello is refused after the handshake timeout.
    let mut mute = ep.ws(None).expect("upgrade");
    mute.expect_rejection("invalid_web_hello");
    // The answering page is still served.
    live.send(&json!({"type": "capture", "binding": ack["binding"], "captureId": "0123456789abcdef0123456789abcdef", "stream": "logs", "sequence": 1, "actionId": null,
                      "item": {"source": "app", "timestampMs": 1, "association": "unattributed", "message": "still here"}}));
    // Captures are committed with the next command's context.
    ep.status();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no captureAck");
        match live.next_message(Duration::from_secs(30)) {
            Some(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["type"] == json!("captureAck") {
                    assert_eq!(v["receipt"]["stored"], json!(true), "{v}");
                    break;
                }
            }
            Some(_) => {}
            None => panic!("the live socket closed"),
        }
    }
}

#[test]
fn web_session_and_socket_limits_hold_and_the_endpoint_recovers() {
    let ep = Endpoint::start(json!({"webPort": 0, "handshakeTimeoutMs": 60000}));
    let limits = ep.status()["limits"].clone();
    let (max_sessions, max_sockets) = (limits["maxSessions"].as_u64().unwrap() as usize, limits["maxSockets"].as_u64().unwrap() as usize);
    assert_eq!((max_sessions, max_sockets), (32, 64), "the contract's limits: {limits}");
    let mut sessions: Vec<RawSocket> = (0..max_sessions)
        .map(|i| {
            let mut s = ep.ws(None).expect("upgrade");
            s.hello(&format!("limit-{i}"));
            s
        })
        .collect();
    // The 33rd session is refused with the protocol's error.
    let mut over = ep.ws(None).expect("upgrade");
    over.send(&hello("limit-over", "http://127.0.0.1"));
    over.expect_rejection("web_session_limit");
    drop(over);
    // Fill the remaining sockets with connections that have not said hello yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ep.status()["sockets"].as_u64().unwrap() as usize != max_sessions {
        assert!(Instant::now() < deadline, "the refused socket was never released");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pending: Vec<RawSocket> = (max_sessions..max_sockets).map(|_| ep.ws(None).expect("upgrade under the socket limit")).collect();
    assert_eq!(ep.status()["sockets"], json!(max_sockets));
    // The 65th upgrade is refused at the HTTP level.
    assert_eq!(ep.ws(None).err(), Some(503), "the socket limit must hold");
    drop(pending);
    // One page leaves; a new page takes its place (the disconnected session makes room).
    let first = sessions.remove(0);
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = ep.status();
        if st["sockets"].as_u64().unwrap() as usize == max_sessions - 1 && st["connected"].as_u64().unwrap() as usize == max_sessions - 1 {
            break;
        }
        assert!(Instant::now() < deadline, "sockets were not released: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut newcomer = ep.ws(None).expect("upgrade after release");
    newcomer.hello("limit-newcomer");
    let listed = ok_env(&ep.env, "web-sessions", json!({}));
    assert_eq!(listed["count"], json!(max_sessions), "{listed}");
    let ids: Vec<&str> = listed["sessions"].as_array().unwrap().iter().filter_map(|s| s["sessionId"].as_str()).collect();
    assert!(ids.contains(&"limit-newcomer") && !ids.contains(&"limit-0"), "{ids:?}");
    assert_eq!(ep.http("GET", "/health", &[], b"").0, 200);
}

// ------------------------------------------------------------------ binary bodies, UI observation

fn b64(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_else(|e| panic!("not base64 ({e}): {text:.80}"))
}

/// The network records of the window after `watermark` whose URL contains `needle`.
fn network_records(w: &Web, page: &Page, watermark: &str, needle: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut args = w.args(page, json!({"factCursor": watermark}));
    loop {
        let v = w.ok("web-network", args.clone());
        out.extend(v["records"].as_array().unwrap().iter().filter(|r| r["item"]["url"].as_str().is_some_and(|u| u.contains(needle))).cloned());
        match v["nextCursor"].as_str() {
            Some(next) => {
                args["cursor"] = json!(next);
                args["throughCursor"] = v["throughCursor"].clone();
            }
            None => return out,
        }
    }
}

#[test]
fn web_binary_network_bodies_are_captured_as_base64() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let watermark = w.ok("web-network", w.target(&page))["watermarkCursor"].as_str().unwrap().to_string();
    // The page fetches binary resources; what it really received is read back over CDP.
    let received = w.eval(
        &page,
        r#"(async () => {
            const small = new Uint8Array(await (await fetch('/sample/api/blob?size=256')).arrayBuffer());
            const large = new Uint8Array(await (await fetch('/sample/api/blob?size=20000')).arrayBuffer());
            const sent = new Uint8Array([0, 255, 1, 254, 128, 127, 0, 0, 10, 13]);
            const echoed = new Uint8Array(await (await fetch('/sample/api/echo', {method: 'POST', body: sent})).arrayBuffer());
            await (await fetch('/sample/api/submissions')).text();
            const xhr = await new Promise(done => { const x = new XMLHttpRequest(); x.open('GET', '/sample/api/blob?size=300'); x.responseType = 'arraybuffer'; x.onload = () => done(new Uint8Array(x.response)); x.send(); });
            return {small: Array.from(small), large: large.length, echoed: Array.from(echoed), xhr: Array.from(xhr)};
        })()"#,
    );
    let small: Vec<u8> = received["small"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
    assert_eq!(small, (0..=255u8).collect::<Vec<_>>(), "the page received the served bytes");
    let echoed: Vec<u8> = received["echoed"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();

    let find = |needle: &str| {
        let list = network_records(&w, &page, &watermark, needle);
        assert_eq!(list.len(), 1, "one record for {needle}: {list:?}");
        list[0]["item"].clone()
    };
    let item = find("blob?size=256");
    assert_eq!((item["source"].as_str(), item["responseBodyState"].as_str(), item["responseBodyEncoding"].as_str()), (Some("fetch-auto"), Some("complete"), Some("base64")), "{item}");
    assert_eq!(b64(item["responseBody"].as_str().unwrap()), small, "the base64 body is the bytes the page received");
    let item = find("blob?size=20000");
    assert_eq!(received["large"], json!(20000));
    assert_eq!((item["responseBodyState"].as_str(), item["responseBodyEncoding"].as_str()), (Some("truncated"), Some("base64")), "{item}");
    let body = item["responseBody"].as_str().unwrap();
    assert!(body.len() <= 12000, "the body stays within 12000 characters");
    let prefix = b64(body);
    assert_eq!(prefix, (0..prefix.len()).map(|i| (i % 256) as u8).collect::<Vec<_>>(), "a truncated body is an exact prefix");
    let item = find("/sample/api/echo");
    assert_eq!((item["requestBodyState"].as_str(), item["requestBodyEncoding"].as_str()), (Some("complete"), Some("base64")), "{item}");
    assert_eq!(b64(item["requestBody"].as_str().unwrap()), vec![0, 255, 1, 254, 128, 127, 0, 0, 10, 13]);
    assert_eq!(b64(item["responseBody"].as_str().unwrap()), echoed, "the server echoed what the request body record says was sent");
    let item = find("blob?size=300");
    assert_eq!((item["source"].as_str(), item["responseBodyEncoding"].as_str()), (Some("xhr-auto"), Some("base64")), "{item}");
    let xhr: Vec<u8> = received["xhr"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
    assert_eq!(b64(item["responseBody"].as_str().unwrap()), xhr);
    // Text stays text.
    let item = find("/sample/api/submissions");
    assert_eq!(item["responseBodyEncoding"], json!("utf8"), "{item}");
}

#[test]
fn web_ui_observation_samples_what_the_page_shows() {
    let mut w = Web::start();
    let page = w.open("form.html", None);
    let watermark = w.ok("web-events", w.target(&page))["watermarkCursor"].as_str().unwrap().to_string();
    let idle = w.ok("web-ui-observation", w.args(&page, json!({"operation": "status"})));
    assert_eq!((idle["schemaVersion"].as_str(), idle["mode"].as_str(), idle["active"].as_bool()), (Some("aab.ui-observation/v1"), Some("on-demand"), Some(false)), "{idle}");
    // Out-of-range durations are refused before reaching the page.
    let (body, run) = w.run("web-ui-observation", w.args(&page, json!({"operation": "start", "durationMs": 50})));
    w.env.check(run.exit() == 1 && error_code(&body) == Some("invalid_argument"), &run, "durationMs below 100");
    let started = w.ok("web-ui-observation", w.args(&page, json!({"operation": "start", "durationMs": 5000})));
    assert_eq!(started["active"], json!(true), "{started}");
    assert_eq!(started["maxDurationMs"], json!(5000));
    let lease = started["leaseId"].as_str().expect("leaseId").to_string();
    w.fails("web-ui-observation", w.args(&page, json!({"operation": "start", "durationMs": 1000})), "ui_observation_busy", false);
    w.fails("web-ui-observation", w.args(&page, json!({"operation": "stop", "leaseId": "0".repeat(32)})), "ui_observation_lease_mismatch", false);
    // Change what the page shows (over CDP, independently of the SDK).
    let before = w.ok("web-ui-observation", w.args(&page, json!({"operation": "status"})))["sampleCount"].as_u64().unwrap();
    w.eval(&page, "(() => { document.title = 'Observed title'; const b = document.createElement('div'); b.innerHTML = '<button>X1</button><button>X2</button><button>X3</button>'; document.body.appendChild(b); return true; })()");
    // Let the observer take two samples after the change.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = w.ok("web-ui-observation", w.args(&page, json!({"operation": "status"})));
        if st["sampleCount"].as_u64().unwrap() >= before + 2 || st["active"] == json!(false) {
            break;
        }
        assert!(Instant::now() < deadline, "the observer stopped sampling: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = w.ok("web-ui-observation", w.args(&page, json!({"operation": "stop", "leaseId": lease})));
    assert_eq!(stopped["active"], json!(false), "{stopped}");
    let sample_count = stopped["sampleCount"].as_u64().unwrap();
    assert!(sample_count >= before + 2, "{stopped}");
    // Ground truth over CDP.
    let truth = w.eval(&page, "({title: document.title, controls: document.querySelectorAll('a,button,input,textarea,select,[contenteditable=\"true\"],[role],[onclick],[aria-label]').length, url: location.href})");
    // The samples are in the events window, exactly as many as the page reports.
    let mut samples = Vec::new();
    let mut ended = Vec::new();
    let mut args = w.args(&page, json!({"factCursor": watermark}));
    loop {
        let v = w.ok("web-events", args.clone());
        for r in v["records"].as_array().unwrap() {
            if r["item"]["leaseId"] == json!(lease) {
                match r["item"]["name"].as_str() {
                    Some("observation.sample") => samples.push(r["item"]["sample"].clone()),
                    Some("observation.end") => ended.push(r["item"].clone()),
                    _ => {}
                }
            }
        }
        match v["nextCursor"].as_str() {
            Some(next) => {
                args["cursor"] = json!(next);
                args["throughCursor"] = v["throughCursor"].clone();
            }
            None => break,
        }
    }
    assert_eq!(samples.len() as u64, sample_count, "every sample is a committed record");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["reason"], json!("stopped"));
    let indexes: Vec<u64> = samples.iter().map(|s| s["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, (1..=sample_count).collect::<Vec<_>>(), "samples in order, none missing");
    let last = samples.last().unwrap();
    assert_eq!(last["title"], truth["title"]);
    assert_eq!(last["controlCount"], truth["controls"]);
    assert_eq!(last["url"], truth["url"]);
    assert_ne!(samples[0]["title"], json!("Observed title"), "the first sample predates the change");
    assert!(samples.iter().any(|s| s["mutations"].as_u64().unwrap_or(0) > 0), "the DOM change shows up as mutations");
    // After the stop a new lease may start.
    w.ok("web-ui-observation", w.args(&page, json!({"operation": "start", "durationMs": 100})));
}

#[test]
fn web_hostile_frames_corpus_is_refused() {
    // The regression corpus (see tests/corpus/web/README.md) against the real runtime.
    let ep = Endpoint::start(json!({"webPort": 0}));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/web");
    let mut entries: Vec<_> = std::fs::read_dir(&dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    entries.sort();
    let mut replayed = 0;
    for (i, path) in entries.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() < 4 {
            continue;
        }
        let bytes = std::fs::read(path).unwrap();
        let frame = match *parts.last().unwrap() {
            "bin" => Message::binary(bytes),
            _ => Message::text(String::from_utf8(bytes).expect("UTF-8 .txt entry")),
        };
        let close = parts[2].strip_prefix("close-").and_then(|c| c.split('-').next()?.parse::<u16>().ok()).unwrap_or(1008);
        let mut ws = ep.ws(None).expect("upgrade");
        if parts[0] == "after" {
            ws.hello(&format!("corpus-{i}"));
        }
        ws.send_message(frame);
        let first = ws.recv();
        assert!(
            matches!(&first, Ok(v) if v["type"] == json!("error") && v["error"] == json!(parts[1])),
            "{name}: expected an error frame `{}`, got {first:?}",
            parts[1]
        );
        assert_eq!(ws.recv().err(), Some(Some(close)), "{name}: close code");
        replayed += 1;
    }
    assert!(replayed >= 8, "the corpus lost entries ({replayed})");
    // Nothing of it stuck: no socket is left and a page still connects.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ep.status()["sockets"] != json!(0) {
        assert!(Instant::now() < deadline, "sockets were left open: {}", ep.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    ep.ws(None).expect("upgrade").hello("corpus-after");
    assert_eq!(ep.http("GET", "/health", &[], b"").0, 200);
}

/// A tiny HTTP server of the test that answers every request with `page`; stops
/// when dropped.
pub(crate) struct StaticSite {
    pub(crate) port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StaticSite {
    pub(crate) fn serve(page: String) -> StaticSite {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                        let mut head = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match s.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        let _ = write!(s, "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}", page.len());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        StaticSite { port, stop, thread: Some(thread) }
    }
}

impl Drop for StaticSite {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn web_foreign_origin_page_in_chromium_is_refused() {
    let ep = Endpoint::start(json!({"webPort": 0, "sampleApp": true}));
    // One page, served by the test under two names: a loopback origin and a foreign
    // one (the browser maps evil.example to 127.0.0.1). It tries the endpoint's
    // WebSocket and a state-changing POST to the sample app.
    let page = format!(
        r#"<!doctype html><title>probe</title><script>
        window.result = {{}};
        const ws = new WebSocket('{endpoint}?token={token}');
        ws.onopen = () => {{ window.result.ws = 'open'; ws.close(); }};
        ws.onerror = () => {{ window.result.ws = window.result.ws || 'error'; }};
        fetch('http://127.0.0.1:{port}/sample/api/submit', {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: JSON.stringify({{from: location.host}})}})
          .then(() => {{ window.result.post = 'sent'; }}, () => {{ window.result.post = 'failed'; }});
        </script>"#,
        endpoint = ep.endpoint,
        token = ep.token,
        port = ep.port
    );
    let site = StaticSite::serve(page);
    let mut chrome = aab_e2e::chromium::Chromium::launch_with(&["--host-resolver-rules=MAP evil.example 127.0.0.1"]);
    let foreign = chrome.open(&format!("http://evil.example:{}/", site.port));
    let local = chrome.open(&format!("http://localhost:{}/", site.port));
    for tab in [&foreign, &local] {
        chrome.wait_for(tab, "window.result && window.result.ws && window.result.post", Duration::from_secs(20));
    }
    assert_eq!(chrome.eval(&foreign, "location.origin"), json!(format!("http://evil.example:{}", site.port)));
    assert_eq!(chrome.eval(&foreign, "window.result.ws"), json!("error"), "the foreign page must not get a socket");
    assert_eq!(chrome.eval(&local, "window.result.ws"), json!("open"), "the loopback page is admitted");
    // Ground truth on the server side: only the loopback page's POST was recorded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let submissions = loop {
        let v = ep.http("GET", "/sample/api/submissions", &[], b"").1;
        let v: Value = serde_json::from_str(&v).expect("submissions JSON");
        if v["count"].as_u64().unwrap_or(0) >= 1 || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(submissions["count"], json!(1), "{submissions}");
    assert_eq!(submissions["submissions"][0]["payload"]["from"], json!(format!("localhost:{}", site.port)), "{submissions}");
    let status = ep.status();
    assert!(status["endpointStats"]["originRefused"].as_u64().unwrap() >= 2, "{status}");
    drop(chrome);
}

/// Open file descriptors of `pid`.
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn web_accept_backs_off_when_out_of_file_handles_and_recovers() {
    let ep = Endpoint::start(json!({"webPort": 0, "headerTimeoutMs": 60000}));
    let pid = ep.env.runtime_pid().expect("runtime pid");
    // Give the runtime only a few spare file handles.
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: prlimit on a process of this test's own user, with valid pointers.
    assert_eq!(unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) }, 0, "read the runtime's limit");
    let limit = open_fds(pid) as u64 + 6;
    let low = libc::rlimit { rlim_cur: limit, rlim_max: old.rlim_max };
    assert_eq!(unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &low, std::ptr::null_mut()) }, 0, "lower the runtime's limit");
    // More connections than handles: the kernel completes them, accept() fails with EMFILE.
    let held: Vec<std::net::TcpStream> = (0..24).map(|_| std::net::TcpStream::connect(("127.0.0.1", ep.port)).expect("connect")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (open_fds(pid) as u64) < limit {
        assert!(Instant::now() < deadline, "the runtime never reached its file-handle limit ({} of {limit})", open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the accept loop meet EMFILE for a while; a spinning loop would burn a core
    // here (measured below as CPU time, reported, never asserted).
    let cpu = |pid: i32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
        fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0) + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
    };
    let (cpu_before, at) = (cpu(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (cpu_ticks, window) = (cpu(pid) - cpu_before, at.elapsed());
    // Release everything and restore the limit.
    drop(held);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &old, std::ptr::null_mut()) }, 0, "restore the runtime's limit");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _) = ep.http("GET", "/health", &[], b"");
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the endpoint did not recover (last {code})");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = ep.status()["endpointStats"].clone();
    let errors = stats["acceptErrors"].as_u64().unwrap();
    assert!(errors >= 1, "accept failures are counted: {stats}");
    assert!(stats["lastAcceptError"].as_str().is_some_and(|e| e.contains("Too many open files") || e.contains("os error 24")), "{stats}");
    eprintln!("EMFILE hold: {errors} accept errors, runtime CPU {cpu_ticks} ticks in {window:?} (a spinning loop uses ~100 ticks/s)");
    // Back-off allows at most one attempt per 10 ms (~200 in the 2 s hold, ~10 in
    // practice); a loop retrying at once fails hundreds of thousands of times.
    assert!(errors < 1000, "the accept loop spun on EMFILE: {errors} failures");
    assert_eq!(ep.ws(None).expect("upgrade after recovery").hello("after-emfile")["type"], json!("helloAck"));
}
