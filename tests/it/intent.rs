//! Intent engine e2e in real headless Chromium, through the public `aab` CLI: the
//! supervised lifecycle against the sample app, every pre-dispatch rejection
//! (checked over CDP: nothing was clicked), a page that changes between
//! observation and action, evidence export + offline verify, and recovery after
//! `kill -9` of the runtime. Host overhead per step and summary sizes are printed.

use std::time::Duration;

use aab_e2e::chromium::{Chromium, Tab};
use aab_e2e::{TestEnv, error_code, error_facts};
use serde_json::{Value, json};

struct Web {
    env: TestEnv,
    chrome: Chromium,
    base: String,
    endpoint: String,
    token: String,
}

struct Page {
    tab: Tab,
    session_id: String,
    runtime_epoch: String,
}

impl Web {
    fn start() -> Web {
        let env = TestEnv::new();
        env.install_plugin("aab_plugin_web", "web");
        let chrome = Chromium::launch();
        let started = env.aab_ok(&["web-session-start", "--web-port", "0", "--sample-app", "true"]);
        let v = &started["value"];
        Web {
            base: format!("http://127.0.0.1:{}", v["port"].as_u64().expect("port")),
            endpoint: v["endpoint"].as_str().expect("endpoint").to_string(),
            token: v["token"].as_str().expect("token").to_string(),
            env,
            chrome,
        }
    }

    fn open(&mut self, page: &str) -> Page {
        let url = format!("{}/sample/{page}#endpoint={}&token={}", self.base, self.endpoint, self.token);
        let tab = self.chrome.open(&url);
        let ids = self.chrome.wait_for(
            &tab,
            "window.sampleApp && sampleApp.bridge.transportStatus().connected && [sampleApp.bridge.sessionId, sampleApp.bridge.runtimeEpoch]",
            Duration::from_secs(20),
        );
        // Count every click the page sees (capture phase), independently of the SDK.
        self.chrome.eval(&tab, "window.__clicks = 0; document.addEventListener('click', function () { window.__clicks++; }, true); true");
        Page { tab, session_id: ids[0].as_str().unwrap().to_string(), runtime_epoch: ids[1].as_str().unwrap().to_string() }
    }

    fn target(&self, p: &Page) -> Value {
        json!({"platform": "web", "sessionId": p.session_id, "runtimeEpoch": p.runtime_epoch})
    }

    fn clicks(&mut self, p: &Page) -> u64 {
        self.chrome.eval(&p.tab, "window.__clicks").as_u64().unwrap_or(u64::MAX)
    }

    /// `aab intent --operation OP --flags…` → (body, exit).
    fn intent(&self, op: &str, args: Value) -> (Value, i32) {
        let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
        for (k, v) in args.as_object().unwrap() {
            argv.push(format!("--{}", kebab(k)));
            argv.push(match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        }
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = self.env.aab(&refs);
        let body = self.env.json_of(&run);
        (body, run.exit())
    }

    #[track_caller]
    fn intent_ok(&self, op: &str, args: Value) -> Value {
        let (body, exit) = self.intent(op, args);
        assert!(exit == 0 && body.pointer("/execution/ok") == Some(&json!(true)), "intent {op} should succeed: {body}\n{}", self.env.report(None));
        body["value"].clone()
    }

    /// Rejected before dispatch with `code`.
    #[track_caller]
    fn intent_rejected(&self, op: &str, args: Value, code: &str) -> Value {
        let (body, exit) = self.intent(op, args);
        assert_eq!(error_code(&body), Some(code), "intent {op}: expected {code}: {body}");
        assert_eq!(exit, 1);
        let facts = error_facts(&body);
        assert_eq!((facts["dispatched"].clone(), facts["ambiguous"].clone()), (json!(false), json!(false)), "{body}");
        facts.clone()
    }
}

fn kebab(name: &str) -> String {
    name.chars().fold(String::new(), |mut out, c| {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
        out
    })
}

/// The summary node whose `id` attribute is `id`.
fn node<'a>(snapshot: &'a Value, id: &str) -> &'a Value {
    snapshot["summary"]["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == json!(id))).unwrap_or_else(|| panic!("no node #{id} in {}", snapshot["summary"]))
}

fn decision(id: &str, revision: u64, agent: &str, action: Option<Value>) -> Value {
    let mut d = json!({"decisionId": id, "basedOnRevision": revision, "agentDecision": agent});
    if let Some(a) = action {
        d["action"] = a;
    }
    d
}

fn print_step(label: &str, snap: &Value) {
    let t = &snap["timings"];
    println!(
        "intent {label}: status={} revision={} summaryBytes={} nodes={} truncated={} actionMs={} providerAcquireMs={} evidenceCommitMs={} receiptCommitMs={} decisionCommitMs={} summaryMs={} totalMs={} hostOverheadMs={}",
        snap["status"], snap["revision"], t["summaryBytes"], snap["summary"]["nodes"].as_array().map_or(0, Vec::len), snap["summary"]["truncated"],
        t["actionMs"], t["providerAcquireMs"], t["evidenceCommitMs"], t["receiptCommitMs"], t["decisionCommitMs"], t["summaryMs"], t["totalMs"], t["workerOverheadMs"]
    );
}

fn export_and_verify(w: &Web, op_id: &str, name: &str) -> Value {
    let out = w.env.work.join(name);
    let exported = w.env.aab_ok(&["evidence", "--operation", "export", "--namespace", "intent", "--operation-id", op_id, "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().unwrap_or_else(|| panic!("manifestSha256 in {exported}")).to_string();
    let verified = w.env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
    println!("intent archive {op_id}: {}", verified["value"]);
    verified["value"].clone()
}

#[test]
fn intent_supervised_lifecycle_on_the_sample_app() {
    let mut w = Web::start();

    // Discovery: decide narrows to its own fields, within 96 KiB.
    let help = w.env.aab(&["--help", "intent", "--operation", "decide"]);
    assert!(help.stdout.len() <= 96 * 1024, "discovery payload {} bytes", help.stdout.len());
    assert!(help.stdout.contains("decisionId"), "{}", help.stdout);
    println!("intent discovery (decide): {} bytes", help.stdout.len());
    // Each operation accepts only its own fields.
    let (body, _) = w.intent("status", json!({"operationId": "x", "goal": "g"}));
    assert_eq!(error_code(&body), Some("unsupported_argument"), "{body}");

    let page = w.open("list.html");
    let target = w.target(&page);
    let start = w.intent_ok("start", json!({"goal": "Show only the done items", "target": target, "require": {"streams": ["logs"]}}));
    print_step("start", &start);
    let op = start["operationId"].as_str().unwrap().to_string();
    assert_eq!(start["status"], json!("waiting_for_decision"), "{start}");
    assert_eq!(start["revision"], json!(1));
    assert_eq!(start["provider"], json!("h5"));
    assert!(start["summary"]["truncated"].is_boolean());
    assert!(start["capture"]["refs"][0]["watermark"].is_string(), "logs watermark: {}", start["capture"]);
    let done_tab = node(&start, "tab-done")["elementId"].clone();

    // ---- rejections before dispatch (nothing clicked)
    let tap_done = json!({"action": "tap", "selector": {"elementId": done_tab}});
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("old", 2, "act", Some(tap_done.clone()))}), "reobserve_required");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("other-provider", 1, "act", Some(json!({"action": "keyevent", "keyCode": 4})))}), "intent_action_unsupported");
    let mut d = decision("provider-named", 1, "act", Some(tap_done.clone()));
    d["provider"] = json!("native");
    w.intent_rejected("decide", json!({"operationId": op, "decision": d}), "intent_provider_mismatch");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("ghost", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Not on this page"}})))}), "intent_target_not_observed");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("ghost-id", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": "e999999"}})))}), "intent_target_not_observed");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("many", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Remove"}})))}), "intent_target_ambiguous");
    let (body, _) = w.intent("decide", json!({"operationId": op, "decision": decision("bad", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": done_tab}, "durationMs": 3})))}));
    assert_eq!(error_code(&body), Some("unsupported_argument"), "{body}");
    assert_eq!(w.clicks(&page), 0, "a rejected decision must not click");

    // ---- the lifecycle: tap → status pages → complete
    let acted = w.intent_ok("decide", json!({"operationId": op, "decision": decision("d-1", 1, "act", Some(tap_done.clone()))}));
    print_step("decide tap", &acted);
    assert_eq!(acted["status"], json!("waiting_for_decision"), "{acted}");
    assert_eq!(acted["revision"], json!(2));
    assert_eq!(acted["lastAction"]["mechanicalStatus"], json!("succeeded"));
    assert_eq!(w.clicks(&page), 1);
    assert_eq!(w.chrome.eval(&page.tab, "location.search"), json!("?view=done"));

    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("d-1", 2, "act", Some(tap_done.clone()))}), "duplicate_decision");
    assert_eq!(w.clicks(&page), 1);

    let page1 = w.intent_ok("status", json!({"operationId": op, "limit": 3}));
    let h1 = &page1["history"];
    assert_eq!(h1["items"].as_array().unwrap().len(), 3);
    assert_eq!(h1["hasMore"], json!(true));
    let page2 = w.intent_ok("status", json!({"operationId": op, "limit": 20, "afterSequence": h1["lastSequence"].to_string()}));
    let kinds: Vec<&str> = page2["history"]["items"].as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap()).collect();
    println!("intent history page 2: {kinds:?}");
    assert!(page2["history"]["items"][0]["sequence"].as_u64() > h1["lastSequence"].as_u64());
    assert!(kinds.contains(&"dispatch-marker") && kinds.contains(&"action-receipt"), "{kinds:?}");

    // ---- the page changes between observation and action: never a click on the replacement
    let all_tab = node(&acted, "tab-all")["elementId"].clone();
    w.chrome.eval(
        &page.tab,
        "(function(){var o=document.getElementById('tab-all');var n=o.cloneNode(true);n.addEventListener('click',function(){window.__replacementClicked=true;});o.replaceWith(n);return true;})()",
    );
    let before = w.clicks(&page);
    let (body, _) = w.intent("decide", json!({"operationId": op, "decision": decision("d-2", 2, "act", Some(json!({"action": "tap", "selector": {"elementId": all_tab}})))}));
    println!("intent stale element: {}", body["execution"]);
    assert_eq!(body["execution"]["ok"], json!(false), "{body}");
    assert_eq!(body["execution"]["dispatched"], json!(false), "{body}");
    assert_eq!(w.chrome.eval(&page.tab, "window.__replacementClicked === true"), json!(false));
    assert_eq!(w.clicks(&page), before);
    assert_eq!(w.chrome.eval(&page.tab, "location.search"), json!("?view=done"));
    let after = w.intent_ok("status", json!({"operationId": op, "limit": 1}));
    assert_eq!(after["status"], json!("waiting_for_decision"), "{after}");

    // Re-observe, then complete on the current revision.
    let observed = w.intent_ok("observe", json!({"operationId": op, "basedOnRevision": 2}));
    assert_eq!(observed["revision"], json!(3));
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("d-3", 2, "complete", None)}), "reobserve_required");
    let done = w.intent_ok("decide", json!({"operationId": op, "decision": decision("d-3", 3, "complete", None)}));
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert!(done["terminalEvidenceId"].is_string());
    let (body, _) = w.intent("cancel", json!({"operationId": op}));
    assert_eq!(body["value"]["status"], json!("completed"), "cancel never rewrites a settled outcome: {body}");

    let verified = export_and_verify(&w, &op, "archive-lifecycle");
    assert_eq!(verified["integrity"], json!("verified"), "{verified}");
    assert!(verified["recordCount"].as_u64() >= Some(12), "{verified}");

    // Cancel of another Intent passes through cancelling to a durable checkpoint.
    let second = w.intent_ok("start", json!({"goal": "cancel me", "target": w.target(&page), "operationId": "intent-cancel-me"}));
    assert_eq!(second["status"], json!("waiting_for_decision"));
    w.intent_rejected("start", json!({"goal": "again", "target": w.target(&page), "operationId": "intent-cancel-me"}), "operation_exists");
    let cancelled = w.intent_ok("cancel", json!({"operationId": "intent-cancel-me"}));
    assert_eq!(cancelled["status"], json!("cancelled"));
    assert!(cancelled["terminalEvidenceId"].is_string());
    export_and_verify(&w, "intent-cancel-me", "archive-cancel");
}

#[test]
fn intent_recovery_after_runtime_kill() {
    let mut w = Web::start();
    let page = w.open("list.html");
    // A completed Intent and an open one with an action behind it.
    let done = w.intent_ok("start", json!({"goal": "finished before the crash", "target": w.target(&page), "operationId": "intent-done"}));
    w.intent_ok("decide", json!({"operationId": "intent-done", "decision": decision("c", done["revision"].as_u64().unwrap(), "complete", None)}));
    let open = w.intent_ok("start", json!({"goal": "interrupted", "target": w.target(&page), "operationId": "intent-open"}));
    let tab = node(&open, "tab-done")["elementId"].clone();
    w.intent_ok("decide", json!({"operationId": "intent-open", "decision": decision("d-1", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": tab}})))}));
    assert_eq!(w.clicks(&page), 1);

    let pid = w.env.runtime_pid().expect("runtime pid");
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(aab_e2e::wait_for_exit(pid, Duration::from_secs(10)));

    let saved = w.intent_ok("status", json!({"operationId": "intent-done"}));
    assert_eq!((saved["status"].clone(), saved["live"].clone(), saved["recovered"].clone()), (json!("completed"), json!(false), json!(true)), "{saved}");
    assert!(saved["terminalEvidenceId"].is_string());
    let st = w.intent_ok("status", json!({"operationId": "intent-open", "limit": 50}));
    println!("intent recovered: status={} error={} unmatched={}", st["status"], st["error"], st["unmatchedActionIds"]);
    assert_eq!(st["status"], json!("interrupted"), "{st}");
    assert_eq!(st["error"], json!("runtime_restarted"));
    assert_eq!(st["restartPolicy"], json!("none"));
    assert_eq!(st["unmatchedActionIds"], json!([]));
    // Not resumable, ids never reused, nothing replayed.
    let (body, _) = w.intent("decide", json!({"operationId": "intent-open", "decision": decision("d-2", 2, "complete", None)}));
    assert_eq!(error_code(&body), Some("operation_not_live"), "{body}");
    let (body, _) = w.intent("start", json!({"goal": "reuse", "target": w.target(&page), "operationId": "intent-open"}));
    assert_eq!(error_code(&body), Some("operation_exists"), "{body}");
    assert_eq!(w.clicks(&page), 1, "nothing dispatched twice");
    export_and_verify(&w, "intent-open", "archive-interrupted");
    export_and_verify(&w, "intent-done", "archive-done");
}
