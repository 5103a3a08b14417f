//! `web-executor` through the public CLI against real engines on 127.0.0.1: a
//! local headless Chromium over CDP, Debian's chromedriver, a Selenium Grid 4 hub
//! with two nodes, and Appium 3 with its fake driver. No SDK is in any page. Ground
//! truth is what the engines and pages saw: the page server's request log (every
//! click on a test page sends one request), the grid's own slot table, Appium's
//! session list and the host's ownership journals — never aab's reply alone.

use std::sync::Arc;
use std::time::Duration;

use aab_e2e::pages::PageServer;
use aab_e2e::{Run, TestEnv, error_facts, flags};
use aab_webdriver::servers::{self, Appium, Chromedriver, Grid};
use serde_json::{Value, json};

const COMMAND: &str = "web-executor";

struct Exec {
    env: TestEnv,
    pages: PageServer,
}

impl Exec {
    fn new() -> Exec {
        let env = TestEnv::new();
        env.install_plugin("aab_plugin_web", "web");
        Exec { env, pages: PageServer::start() }
    }

    fn run(&self, args: Value) -> (Value, Run) {
        let mut argv = vec![COMMAND.to_string()];
        argv.extend(flags(&args));
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = self.env.aab(&refs);
        (self.env.json_of(&run), run)
    }

    #[track_caller]
    fn ok(&self, args: Value) -> Value {
        let (body, run) = self.run(args.clone());
        self.env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("web-executor {args} should succeed"));
        body["value"].clone()
    }

    /// Fails with `code`; `dispatched` as given. Returns the error facts.
    #[track_caller]
    fn fails(&self, args: Value, code: &str, dispatched: Value) -> Value {
        let (body, run) = self.run(args.clone());
        let facts = error_facts(&body).clone();
        self.env.check(run.exit() != 0 && facts["error"] == json!(code), &run, &format!("web-executor {args} should fail with {code}"));
        self.env.check(facts["dispatched"] == dispatched, &run, &format!("{code}: dispatched must be {dispatched}"));
        facts
    }

    fn click(&self, session: &str, text: &str) -> (Value, Run) {
        self.run(json!({"operation": "act", "sessionId": session, "action": {"type": "click"}, "selector": {"by": "text", "value": text}}))
    }

    /// Waits until the page server saw `n` hits of `tag` (the page's fetch is async).
    #[track_caller]
    fn hits_reach(&self, tag: &str, n: usize) -> Vec<String> {
        self.pages.wait_for(Duration::from_secs(10), |_| self.pages.hits_of(tag).len() >= n);
        self.pages.hits_of(tag)
    }
}

fn go_hits(tag: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("s={tag}&b=go&n={i}")).collect()
}

#[test]
fn web_executor_over_cdp_drives_a_page_without_sdk_against_the_page_servers_log() {
    let x = Exec::new();
    let open = x.ok(json!({"operation": "open", "engine": "cdp", "url": x.pages.url("/form?s=cdp"), "sessionId": "cdp-1"}));
    assert_eq!((open["sessionId"].as_str(), open["engine"].as_str()), (Some("cdp-1"), Some("cdp")), "{open}");
    let seen = x.ok(json!({"operation": "observe", "sessionId": "cdp-1"}));
    let texts: Vec<&str> = seen["controls"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect();
    assert!(texts.contains(&"Go") && texts.contains(&"Send"), "{texts:?}");

    // A click through the snapshot: the page server sees exactly one click.
    let act = x.ok(json!({"operation": "act", "sessionId": "cdp-1", "snapshotId": seen["snapshotId"], "action": {"type": "click"}, "selector": {"by": "text", "value": "Go"}}));
    assert_eq!(act["status"], json!("settled"), "{act}");
    assert_eq!(x.hits_reach("cdp", 1), go_hits("cdp", 1));
    // Typing into the field by its label, then Send: the page sends the typed value.
    x.ok(json!({"operation": "act", "sessionId": "cdp-1", "action": {"type": "input", "text": "Ada Lovelace"}, "selector": {"by": "ariaLabel", "value": "Name"}}));
    let (body, run) = x.click("cdp-1", "Send");
    x.env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "click Send");
    assert_eq!(x.hits_reach("cdp", 2)[1], "s=cdp&b=send&name=Ada%20Lovelace");

    // After a navigation the old snapshot is stale: refused, nothing reaches the page.
    x.ok(json!({"operation": "navigate", "sessionId": "cdp-1", "url": x.pages.url("/form?s=cdp")}));
    x.fails(json!({"operation": "act", "sessionId": "cdp-1", "snapshotId": seen["snapshotId"], "action": {"type": "click"}, "selector": {"by": "text", "value": "Go"}}), "reobserve_required", json!(false));
    // An ambiguous or absent selector is refused before dispatch too.
    x.fails(json!({"operation": "act", "sessionId": "cdp-1", "action": {"type": "click"}, "selector": {"by": "text", "value": "No such button"}}), "web_executor_selector_not_found", json!(false));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(x.pages.hits_of("cdp").len(), 2, "refusals never reached the page: {:?}", x.pages.hits());

    // The durable receipt of the first click, and the session's event log.
    let receipt = x.ok(json!({"operation": "receipt", "sessionId": "cdp-1", "actionId": act["actionId"]}));
    assert_eq!((receipt["status"].as_str(), receipt["settled"].as_bool()), (Some("settled"), Some(true)), "{receipt}");
    let events = x.ok(json!({"operation": "events", "sessionId": "cdp-1"}));
    assert!(events.to_string().contains("action-settled"), "{events}");
    let shot = x.ok(json!({"operation": "screenshot", "sessionId": "cdp-1", "outFile": "shot.png"}));
    let png = std::fs::read(shot["path"].as_str().unwrap()).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    x.ok(json!({"operation": "close", "sessionId": "cdp-1"}));
    x.fails(json!({"operation": "observe", "sessionId": "cdp-1"}), "web_executor_session_closed", json!(false));
}

#[test]
fn web_executor_over_chromedriver_recovers_its_session_after_the_runtime_is_killed() {
    let x = Exec::new();
    let driver = Chromedriver::start();
    let open = x.ok(json!({"operation": "open", "engine": "webdriver", "endpoint": driver.url(), "url": x.pages.url("/form?s=wd"), "sessionId": "wd-1"}));
    let remote = open["webdriverSessionId"].as_str().unwrap().to_string();
    let (body, run) = x.click("wd-1", "Go");
    x.env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "click through chromedriver");
    assert_eq!(x.hits_reach("wd", 1), go_hits("wd", 1));

    // The runtime dies without a stop: a new one recovers the WebDriver session by its id.
    x.env.kill_runtime();
    let status = x.ok(json!({"operation": "status", "sessionId": "wd-1"}));
    assert_eq!(status.to_string().contains("\"recovered\":true"), true, "{status}");
    let (body, run) = x.click("wd-1", "Go");
    x.env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "click after recovery");
    assert_eq!(x.hits_reach("wd", 2), go_hits("wd", 2), "the same browser page, its counter continued");

    x.ok(json!({"operation": "close", "sessionId": "wd-1"}));
    // Ground truth: chromedriver no longer knows the session.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(driver.url()).unwrap());
    let gone = rt.block_on(client.attach(&remote).url(Duration::from_secs(5)));
    assert!(matches!(&gone, Err(aab_webdriver::WdError::Protocol { error, .. }) if error == "invalid session id"), "{gone:?}");
}

/// The grid's slot table: WebDriver session id → node index.
fn placements(grid: &Grid) -> std::collections::HashMap<String, usize> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(grid.url()).unwrap());
    let status = rt.block_on(client.status(Duration::from_secs(10))).expect("grid status");
    let mut map = std::collections::HashMap::new();
    for node in status["nodes"].as_array().into_iter().flatten() {
        let Some(i) = node["uri"].as_str().and_then(|u| grid.node_index(u)) else { continue };
        for slot in node["slots"].as_array().into_iter().flatten() {
            if let Some(id) = slot["session"]["sessionId"].as_str() {
                map.insert(id.to_string(), i);
            }
        }
    }
    map
}

#[test]
fn web_executor_on_a_grid_runs_eight_sessions_and_a_dead_node_loses_only_its_in_flight_actions() {
    const SESSIONS: usize = 8;
    const CLICKS: usize = 6;
    let x = Arc::new(Exec::new());
    let mut grid = Grid::start(2, 4);
    x.env.set_env("AI_APP_BRIDGE_WEBDRIVER_URL", grid.url());

    // Eight opens in parallel (caller-chosen ids: separate admission lanes).
    let opens: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let x = x.clone();
            std::thread::spawn(move || x.ok(json!({"operation": "open", "engine": "webdriver", "url": x.pages.url(&format!("/form?s=g{i}")), "sessionId": format!("g{i}"), "timeoutMs": 120000})))
        })
        .collect();
    let remote: Vec<String> = opens.into_iter().map(|h| h.join().unwrap()["webdriverSessionId"].as_str().unwrap().to_string()).collect();
    let placed = placements(&grid);
    let node_of: Vec<usize> = remote.iter().map(|r| *placed.get(r).unwrap_or_else(|| panic!("{r} not in the grid's slots: {placed:?}"))).collect();
    assert_eq!((node_of.iter().filter(|n| **n == 0).count(), node_of.iter().filter(|n| **n == 1).count()), (4, 4), "eight sessions fill both nodes' four slots: {node_of:?}");

    // Every session clicks in its own thread; one node dies once clicks are under way.
    let workers: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let x = x.clone();
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for _ in 0..CLICKS {
                    let (body, _) = x.click(&format!("g{i}"), "Go");
                    let facts = error_facts(&body).clone();
                    let ok = body.pointer("/execution/ok") == Some(&json!(true));
                    outcomes.push((ok, facts["error"].as_str().unwrap_or_default().to_string(), facts["ambiguous"].clone()));
                    if !ok {
                        break;
                    }
                }
                outcomes
            })
        })
        .collect();
    let victim = node_of[0];
    assert!(x.pages.wait_for(Duration::from_secs(120), |hits| hits.len() >= SESSIONS * 2), "clicks under way: {:?}", x.pages.hits());
    grid.kill_node(victim);
    let outcomes: Vec<Vec<(bool, String, Value)>> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));

    for (i, o) in outcomes.iter().enumerate() {
        let tag = format!("g{i}");
        let hits = x.pages.hits_of(&tag);
        let oks = o.iter().filter(|(ok, ..)| *ok).count();
        if node_of[i] != victim {
            // Survivors: every action completed, each exactly once.
            assert_eq!(oks, CLICKS, "session {tag} on the surviving node: {o:?}");
            assert_eq!(hits, go_hits(&tag, CLICKS), "session {tag}: each click landed once");
        } else {
            // The dead node's sessions: every acknowledged click landed once; the one
            // in flight when the node died is either unresolved (ambiguous) or
            // refused undispatched — never repeated.
            assert!(oks < CLICKS, "session {tag} cannot finish on a dead node: {o:?}");
            let (_, code, ambiguous) = o.last().unwrap();
            assert!(code.starts_with("web_executor_"), "{tag}: {o:?}");
            let extra = if *ambiguous == json!(true) { 1 } else { 0 };
            assert!(hits.len() >= oks && hits.len() <= oks + extra, "session {tag}: {} hits for {oks} acknowledged clicks ({o:?})", hits.len());
            assert_eq!(hits, go_hits(&tag, hits.len()), "no click repeated on {tag}");
        }
        // The host's journal of each session: unresolved exactly when its last action was ambiguous.
        let run = x.env.aab(&["device-ownership", "--operation", "status", "--serial", &tag]);
        let phase = x.env.json_of(&run)["value"]["phase"].clone();
        let ambiguous = o.last().is_some_and(|(ok, _, amb)| !ok && *amb == json!(true));
        x.env.check(phase == json!(if ambiguous { "unresolved" } else { "idle" }), &run, &format!("session {tag}'s journal (last outcome {o:?})"));
    }
    // A lost session blocks only itself: a survivor still acts.
    let survivor = (0..SESSIONS).find(|i| node_of[*i] != victim).unwrap();
    let (body, run) = x.click(&format!("g{survivor}"), "Go");
    x.env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "a surviving session is unaffected");

    // Runtime stop closes what is still open on the grid.
    let stop = x.env.aab(&["runtime", "--operation", "stop"]);
    let pid = x.env.runtime_pid();
    if let Some(pid) = pid {
        x.env.check(aab_e2e::wait_for_exit(pid, Duration::from_secs(30)), &stop, "the runtime exits after stop");
    }
    // (A killed node's slots stay listed until the hub drops the node: only the
    // surviving node's sessions are the ones aab must have closed.)
    let left = placements(&grid);
    let open_left: Vec<&String> = remote.iter().zip(&node_of).filter(|(r, n)| **n != victim && left.contains_key(*r)).map(|(r, _)| r).collect();
    assert!(open_left.is_empty(), "runtime stop closed every surviving grid session: {open_left:?} in {left:?}");
}

#[test]
fn web_executor_reaches_appium_through_the_same_webdriver_engine() {
    let x = Exec::new();
    let appium = Appium::start();
    let app = x.env.root.join("fake-app.xml");
    std::fs::write(&app, "<app><MockWindow><MockButton id=\"go\">Go</MockButton></MockWindow></app>\n").unwrap();
    let caps = servers::fake_app_capabilities(&app);
    let open = x.ok(json!({"operation": "open", "engine": "webdriver", "endpoint": appium.url(), "capabilities": caps, "sessionId": "fake-1"}));
    let remote = open["webdriverSessionId"].as_str().unwrap().to_string();
    assert_eq!(open["scripting"], json!(false), "the fake driver runs no page scripts: {open}");
    // Ground truth: Appium itself answers for the session (outside aab).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = aab_webdriver::Client::new(aab_webdriver::Endpoint::parse(appium.url()).unwrap());
    let alive = || rt.block_on(client.attach(&remote).source(Duration::from_secs(10)));
    assert!(alive().is_ok_and(|src| src.contains("MockButton")), "appium serves {remote}: {:?}", alive());
    // No page scripts there: the observation is the driver's page source.
    let seen = x.ok(json!({"operation": "observe", "sessionId": "fake-1"}));
    assert!(seen.to_string().contains("MockButton"), "{seen}");
    // Acting through WebDriver element commands; the driver's own model counts the click.
    let act = x.ok(json!({"operation": "act", "sessionId": "fake-1", "action": {"type": "click"}, "selector": {"by": "css", "value": "#go"}}));
    assert_eq!(act["status"], json!("settled"), "{act}");
    let clicks = rt.block_on(async {
        let s = client.attach(&remote);
        let go = s.find_element("#go", Duration::from_secs(10)).await.unwrap();
        s.element_attribute(&go, "clicks", Duration::from_secs(10)).await.unwrap()
    });
    assert_eq!(clicks.as_deref(), Some("1"), "the fake driver saw exactly one click");
    let status = x.ok(json!({"operation": "status", "sessionId": "fake-1"}));
    assert!(status.to_string().contains(&remote), "{status}");
    x.ok(json!({"operation": "close", "sessionId": "fake-1"}));
    let gone = alive();
    assert!(matches!(&gone, Err(aab_webdriver::WdError::Protocol { error, .. }) if error == "invalid session id"), "close deleted the Appium session: {gone:?}");
}
