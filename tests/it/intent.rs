//! Intent engine e2e in real headless Chromium, through the public `aab` CLI: the
//! supervised lifecycle against the sample app, every pre-dispatch rejection
//! (checked over CDP: nothing was clicked), a page that changes between
//! observation and action, evidence export + offline verify, and recovery after
//! `kill -9` of the runtime. Host overhead per step and summary sizes are printed.

use std::time::Duration;

use aab_e2e::web::{SamplePage as Page, SampleWeb};
use aab_e2e::{TestEnv, error_code, error_facts, flags, kebab};
use serde_json::{Value, json};

/// The shared sample-app world plus this suite's Intent helpers.
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

    fn open(&mut self, page: &str) -> Page {
        let opened = self.0.open_connected(page, None);
        // Count every click the page sees (capture phase), independently of the SDK.
        self.chrome.eval(&opened.tab, "window.__clicks = 0; document.addEventListener('click', function () { window.__clicks++; }, true); true");
        opened
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
    // A provider no loaded plugin offers is not in the catalog-built enum.
    let mut d = decision("provider-named", 1, "act", Some(tap_done.clone()));
    d["provider"] = json!("native");
    let f = w.intent_rejected("decide", json!({"operationId": op, "decision": d}), "invalid_argument");
    assert_eq!(f["field"], json!("decision.provider"), "{f}");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("ghost", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Not on this page"}})))}), "intent_target_not_observed");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("ghost-id", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": "e999999"}})))}), "intent_target_not_observed");
    w.intent_rejected("decide", json!({"operationId": op, "decision": decision("many", 1, "act", Some(json!({"action": "tap", "selector": {"text": "Remove"}})))}), "intent_target_ambiguous");
    let (body, _) = w.intent("decide", json!({"operationId": op, "decision": decision("bad", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": done_tab}, "durationMs": 3})))}));
    assert_eq!(error_code(&body), Some("unsupported_argument"), "{body}");
    assert_eq!(body["execution"]["field"], json!("decision.action.durationMs"), "{body}");
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

// ------------------------------------------------------------------ autonomous mode

/// Agent workers (node / python3 children of the runtime) still alive.
fn agent_children(w: &Web) -> Vec<String> {
    let Some(runtime) = w.env.runtime_pid() else { return vec![] };
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:").map(|v| v.trim().parse::<i32>().unwrap_or(0)));
        if ppid != Some(runtime) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).map(|r| String::from_utf8_lossy(&r).replace('\0', " ")).unwrap_or_default();
        if cmdline.contains("node") || cmdline.contains("python") || cmdline.contains("extract-worker") {
            found.push(cmdline);
        }
    }
    found
}

/// Poll `status` until the Intent is terminal (or `limit` passes); returns the snapshot and the wait.
fn wait_terminal(w: &Web, op: &str, limit: Duration) -> (Value, Duration) {
    let t0 = std::time::Instant::now();
    loop {
        let st = w.intent_ok("status", json!({"operationId": op, "limit": 1}));
        let s = st["status"].as_str().unwrap_or_default().to_string();
        if ["completed", "failed", "inconclusive", "cancelled", "timeout", "ambiguous", "blocked_evidence_store", "intervention_required"].contains(&s.as_str()) {
            return (st, t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "Intent {op} not terminal after {limit:?}: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Poll `status` until an event of `kind` shows up.
fn wait_event(w: &Web, op: &str, kind: &str, limit: Duration) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let st = w.intent_ok("status", json!({"operationId": op, "limit": 1}));
        if let Some(e) = st["events"].as_array().and_then(|e| e.iter().find(|e| e["type"] == json!(kind))) {
            return e.clone();
        }
        assert!(t0.elapsed() < limit, "no `{kind}` event in Intent {op} after {limit:?}: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// A module-level counter proves every turn runs in the same (persistent) child.
const GOOD_AGENT: &str = r#"
let calls = 0;
exports.decide = async function (signal) {
  calls += 1;
  const { revision, summary, goal, evidenceId } = signal;
  if (!goal || !evidenceId || !signal.signal) throw new Error('missing inputs');
  if (revision === 1) {
    const tab = summary.nodes.find((n) => n.id === 'tab-done');
    return { decisionId: 'agent-' + revision + '-call' + calls, basedOnRevision: revision, agentDecision: 'act', action: { action: 'tap', selector: { elementId: tab.elementId } }, reason: 'open the done view' };
  }
  return { decisionId: 'agent-' + revision + '-call' + calls, basedOnRevision: revision, agentDecision: 'complete', reason: 'the done view is shown' };
};
"#;

/// An agent that always taps the done tab.
const TAPPER: &str = r#"
def decide(signal):
    rev = signal["revision"]
    tab = [n for n in signal["summary"]["nodes"] if n.get("id") == "tab-done"][0]
    return {"decisionId": "t-%d" % rev, "basedOnRevision": rev, "agentDecision": "act", "action": {"action": "tap", "selector": {"elementId": tab["elementId"]}}}
"#;

/// An agent that thinks for a minute (its turn timeout kills it first).
const THINKER: &str = "import time\ndef decide(signal):\n    time.sleep(60)\n";

/// Wait until the runtime has an agent child (its pid list).
fn wait_agent_child(w: &Web) -> Vec<String> {
    let t0 = std::time::Instant::now();
    loop {
        let found = agent_children(w);
        if !found.is_empty() {
            return found;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no agent child appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn intent_autonomous_agents() {
    let mut w = Web::start();
    let page = w.open("list.html");
    let target = w.target(&page);

    // ---- a good agent (JavaScript, sourcePath) completes the lifecycle
    std::fs::write(w.env.work.join("agent.js"), GOOD_AGENT).unwrap();
    let t0 = std::time::Instant::now();
    let start = w.intent_ok("start", json!({"goal": "Show only the done items", "target": target, "operationId": "auto-good", "mode": "autonomous",
        "agentModule": {"language": "javascript", "sourcePath": "agent.js"}, "budget": {"maxActions": 3, "maxAgentCalls": 4, "maxDurationMs": 30000, "allowlist": ["tap"]}}));
    assert_eq!(start["mode"], json!("autonomous"), "{start}");
    let (done, took) = wait_terminal(&w, "auto-good", Duration::from_secs(30));
    println!("intent autonomous good: status={} agentCalls={} actionSteps={} revision={} in {:?} (start returned after {:?}) timings={}", done["status"], done["agentCalls"], done["actionSteps"], done["revision"], took, t0.elapsed(), done["timings"]);
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!((done["agentCalls"].clone(), done["actionSteps"].clone(), done["revision"].clone()), (json!(2), json!(1), json!(2)), "{done}");
    // Both turns ran in one child: its module state carried the call count over.
    assert_eq!(done["lastDecisionId"], json!("agent-2-call2"), "{done}");
    let pids: Vec<Value> = done["events"].as_array().unwrap().iter().filter(|e| e["type"] == json!("agent_call")).map(|e| e["agentPid"].clone()).collect();
    assert_eq!(pids.len(), 2, "{done}");
    assert!(pids[0].is_i64() && pids[0] == pids[1], "one persistent agent child for both turns: {pids:?}");
    assert_eq!(w.clicks(&page), 1);
    assert_eq!(w.chrome.eval(&page.tab, "location.search"), json!("?view=done"));
    assert!(agent_children(&w).is_empty(), "{:?}", agent_children(&w));
    let verified = export_and_verify(&w, "auto-good", "archive-auto-good");
    assert_eq!(verified["integrity"], json!("verified"));

    // ---- allowlist: an action outside it is rejected before dispatch → intervention_required
    let clicks = w.clicks(&page);
    w.intent_ok("start", json!({"goal": "tap is not allowed", "target": w.target(&page), "operationId": "auto-allow", "mode": "autonomous",
        "agentModule": {"language": "python", "source": TAPPER}, "budget": {"allowlist": ["scroll"], "maxDurationMs": 20000}}));
    let (st, took) = wait_terminal(&w, "auto-allow", Duration::from_secs(20));
    println!("intent autonomous allowlist: status={} error={} in {took:?}", st["status"], st["error"]);
    assert_eq!((st["status"].clone(), st["error"].clone()), (json!("intervention_required"), json!("action_not_allowed")), "{st}");
    assert_eq!(st["actionSteps"], json!(0));
    assert_eq!(w.clicks(&page), clicks, "a disallowed action must not click");
    // An allowlist entry the provider does not offer is a start error.
    let (body, _) = w.intent("start", json!({"goal": "g", "target": w.target(&page), "mode": "autonomous", "agentModule": {"language": "python", "source": TAPPER}, "budget": {"allowlist": ["keyevent"]}}));
    assert_eq!((error_code(&body), body.pointer("/execution/field").cloned()), (Some("invalid_argument"), Some(json!("budget.allowlist"))), "{body}");

    // ---- the action budget: one tap, then the next turn is refused → intervention_required / max_steps
    w.intent_ok("start", json!({"goal": "tap forever", "target": w.target(&page), "operationId": "auto-budget", "mode": "autonomous",
        "agentModule": {"language": "python", "source": TAPPER}, "budget": {"maxActions": 1, "maxDurationMs": 20000}}));
    let (st, took) = wait_terminal(&w, "auto-budget", Duration::from_secs(20));
    println!("intent autonomous budget: status={} error={} agentCalls={} actionSteps={} in {took:?}", st["status"], st["error"], st["agentCalls"], st["actionSteps"]);
    assert_eq!((st["status"].clone(), st["error"].clone(), st["actionSteps"].clone(), st["agentCalls"].clone()), (json!("intervention_required"), json!("max_steps"), json!(1), json!(1)), "{st}");
    assert_eq!(w.clicks(&page), clicks + 1);

    // ---- garbage: the reply is validated like `decide`; waits with the field error, never dispatches
    let clicks = w.clicks(&page);
    let garbage = "def decide(signal):\n    return {\"decisionId\": \"g-1\", \"basedOnRevision\": signal[\"revision\"], \"agentDecision\": \"act\", \"action\": {\"action\": \"tap\", \"durationMs\": 3}}\n";
    w.intent_ok("start", json!({"goal": "garbage", "target": w.target(&page), "operationId": "auto-garbage", "mode": "autonomous",
        "agentModule": {"language": "python", "source": garbage}, "budget": {"maxDurationMs": 3000}}));
    let rejected = wait_event(&w, "auto-garbage", "agent_decision_rejected", Duration::from_secs(10));
    println!("intent autonomous garbage: {rejected}");
    assert_eq!(rejected["error"], json!("unsupported_argument"), "{rejected}");
    assert_eq!(rejected["field"], json!("decision.action.durationMs"), "the same field path as a caller's decide: {rejected}");
    let st = w.intent_ok("status", json!({"operationId": "auto-garbage", "limit": 1}));
    assert_eq!((st["status"].clone(), st["error"].clone(), st["agentCalls"].clone()), (json!("waiting_for_decision"), json!("unsupported_argument"), json!(1)), "no automatic re-ask: {st}");
    let (st, took) = wait_terminal(&w, "auto-garbage", Duration::from_secs(10));
    println!("intent autonomous garbage end: status={} error={} after {took:?}", st["status"], st["error"]);
    assert_eq!((st["status"].clone(), st["error"].clone()), (json!("timeout"), json!("deadline_exceeded")), "{st}");
    assert_eq!(w.clicks(&page), clicks);

    // ---- a looping agent is killed at its per-turn timeout; the Intent ends at its budget
    let t0 = std::time::Instant::now();
    w.intent_ok("start", json!({"goal": "loop", "target": w.target(&page), "operationId": "auto-loop", "mode": "autonomous",
        "agentModule": {"language": "javascript", "source": "function decide(signal) { for (;;) {} }", "timeoutMs": 500}, "budget": {"maxDurationMs": 3000}}));
    let failed = wait_event(&w, "auto-loop", "agent_adapter_failed", Duration::from_secs(10));
    println!("intent autonomous loop: killed after {:?}: {failed}", t0.elapsed());
    assert_eq!(failed["cause"]["error"], json!("agent_timeout"), "{failed}");
    assert!(agent_children(&w).is_empty(), "looping child killed: {:?}", agent_children(&w));
    let (st, took) = wait_terminal(&w, "auto-loop", Duration::from_secs(10));
    println!("intent autonomous loop end: status={} after {:?} total", st["status"], t0.elapsed());
    assert_eq!(st["status"], json!("timeout"), "{st}");
    assert!(t0.elapsed() < Duration::from_secs(8), "ends within its budget: {took:?}");

    // ---- a crashing agent (Python, the process exits) → agent_adapter_failed, then the budget ends it
    w.intent_ok("start", json!({"goal": "crash", "target": w.target(&page), "operationId": "auto-crash", "mode": "autonomous",
        "agentModule": {"language": "python", "source": "import os\ndef decide(signal):\n    os._exit(9)\n"}, "budget": {"maxDurationMs": 3000}}));
    let failed = wait_event(&w, "auto-crash", "agent_adapter_failed", Duration::from_secs(10));
    println!("intent autonomous crash: {failed}");
    assert_eq!(failed["cause"]["error"], json!("agent_exited"), "{failed}");
    let (st, _) = wait_terminal(&w, "auto-crash", Duration::from_secs(10));
    assert_eq!(st["status"], json!("timeout"), "{st}");
    assert!(agent_children(&w).is_empty(), "{:?}", agent_children(&w));

    // ---- a late reply after cancel never dispatches
    let clicks = w.clicks(&page);
    let slow = "import time\ndef decide(signal):\n    time.sleep(1.5)\n    rev = signal['revision']\n    tab = [n for n in signal['summary']['nodes'] if n.get('id') == 'tab-all'][0]\n    return {'decisionId': 's-1', 'basedOnRevision': rev, 'agentDecision': 'act', 'action': {'action': 'tap', 'selector': {'elementId': tab['elementId']}}}\n";
    w.intent_ok("start", json!({"goal": "slow", "target": w.target(&page), "operationId": "auto-late", "mode": "autonomous",
        "agentModule": {"language": "python", "source": slow, "timeoutMs": 5000}, "budget": {"maxDurationMs": 20000}}));
    let cancelled = w.intent_ok("cancel", json!({"operationId": "auto-late"}));
    assert_eq!(cancelled["status"], json!("cancelled"), "{cancelled}");
    let discarded = wait_event(&w, "auto-late", "agent_reply_discarded", Duration::from_secs(10));
    println!("intent autonomous late reply: {discarded}");
    assert_eq!(w.clicks(&page), clicks, "a late reply never dispatches");
    let st = w.intent_ok("status", json!({"operationId": "auto-late", "limit": 1}));
    assert_eq!((st["status"].clone(), st["actionSteps"].clone()), (json!("cancelled"), json!(0)), "{st}");
    assert!(agent_children(&w).is_empty(), "{:?}", agent_children(&w));

    // ---- pause and cancel kill the persistent child (checked in the process table)
    w.intent_ok("start", json!({"goal": "think", "target": w.target(&page), "operationId": "auto-pause", "mode": "autonomous",
        "agentModule": {"language": "python", "source": THINKER, "timeoutMs": 10000}, "budget": {"maxDurationMs": 60000}}));
    let before = wait_agent_child(&w);
    println!("intent autonomous pause: agent child {before:?}");
    let paused = w.intent_ok("pause", json!({"operationId": "auto-pause"}));
    assert_eq!(paused["status"], json!("paused"), "{paused}");
    assert!(agent_children(&w).is_empty(), "pause killed the agent child: {:?}", agent_children(&w));
    let resumed = w.intent_ok("resume", json!({"operationId": "auto-pause"}));
    assert_eq!(resumed["status"], json!("waiting_for_decision"), "{resumed}");
    let after = wait_agent_child(&w);
    println!("intent autonomous resume: new agent child {after:?}");
    let cancelled = w.intent_ok("cancel", json!({"operationId": "auto-pause"}));
    assert_eq!(cancelled["status"], json!("cancelled"), "{cancelled}");
    assert!(agent_children(&w).is_empty(), "cancel killed the agent child: {:?}", agent_children(&w));
    assert_eq!(cancelled["actionSteps"], json!(0));

    // A module without decide(signal) is refused at start; nothing is retained.
    let (body, _) = w.intent("start", json!({"goal": "g", "target": w.target(&page), "operationId": "auto-nodecide", "mode": "autonomous",
        "agentModule": {"language": "javascript", "source": "function main(ctx) { return 1; }"}}));
    assert_eq!((error_code(&body), aab_e2e::error_field(&body)), (Some("agent_adapter_unavailable"), Some("agentModule")), "{body}");
    assert!(agent_children(&w).is_empty(), "{:?}", agent_children(&w));
    let (body, _) = w.intent("status", json!({"operationId": "auto-nodecide"}));
    assert_eq!(error_code(&body), Some("operation_not_found"), "{body}");

    // Autonomous start without an agent module.
    let (body, _) = w.intent("start", json!({"goal": "g", "target": w.target(&page), "mode": "autonomous"}));
    assert_eq!(error_code(&body), Some("agent_adapter_unavailable"), "{body}");
}

// ------------------------------------------------------------------ discovery narrowing

#[test]
fn intent_decide_discovery_narrows_to_a_provider_action() {
    let env = TestEnv::new();
    env.install_plugin("aab_plugin_web", "web");

    // CLI: the decide schema with `decision.action` = h5's declared tap schema.
    let help = env.aab(&["--help", "intent", "--operation", "decide", "--provider", "h5", "--action", "tap"]);
    assert!(help.stdout.len() <= 96 * 1024, "{} bytes", help.stdout.len());
    let body: Value = serde_json::from_str(&help.stdout).unwrap_or_else(|e| panic!("{e}: {}", help.stdout));
    println!("intent discovery (decide, h5 tap): {} bytes, selection {}", help.stdout.len(), body["selection"]);
    let decision = &body["inputSchema"]["properties"]["decision"]["properties"];
    assert!(decision["action"]["properties"]["selector"].is_object(), "narrowed action: {}", decision["action"]);
    assert!(decision["action"].get("anyOf").is_none(), "one variant: {}", decision["action"]);
    assert_eq!(decision["provider"]["const"], json!("h5"), "{}", decision["provider"]);
    assert_eq!(body["selection"]["variants"], json!([{"platform": "web", "provider": "h5", "action": "tap"}]));

    // MCP: the same query; platform only → every web action, one provider pinned.
    let mut mcp = env.mcp();
    let (v, _) = mcp.call_tool("capabilities", json!({"command": "intent", "operation": "decide", "platform": "web", "provider": "h5", "action": "tap"}));
    assert_eq!(v["inputSchema"]["properties"]["decision"]["properties"]["action"], decision["action"], "{v}");
    let (all, _) = mcp.call_tool("capabilities", json!({"command": "intent", "operation": "decide", "platform": "web"}));
    let actions: Vec<&str> = all["selection"]["variants"].as_array().unwrap().iter().map(|v| v["action"].as_str().unwrap()).collect();
    println!("intent discovery (decide, web): {} bytes, actions {actions:?}", all.to_string().len());
    assert!(actions.contains(&"tap") && actions.contains(&"pressKey"), "{actions:?}");
    assert_eq!(all["inputSchema"]["properties"]["decision"]["properties"]["action"]["anyOf"].as_array().map(Vec::len), Some(actions.len()));

    // Unknown platform / provider / action → invalid_argument naming the filter, with details.allowed.
    for (query, field, allowed) in [
        (json!({"command": "intent", "operation": "decide", "platform": "ios"}), "platform", json!(["web"])),
        (json!({"command": "intent", "operation": "decide", "platform": "web", "provider": "native"}), "provider", json!(["h5"])),
        (json!({"command": "intent", "operation": "decide", "provider": "h5", "action": "keyevent"}), "action", Value::Null),
        (json!({"command": "intent", "operation": "start", "action": "tap"}), "operation", json!(["decide"])),
        (json!({"command": "web-session-start", "action": "tap"}), "action", Value::Null),
    ] {
        let (v, _) = mcp.call_tool("capabilities", query.clone());
        assert_eq!((error_code(&v), aab_e2e::error_field(&v)), (Some("invalid_argument"), Some(field)), "{query}: {v}");
        if !allowed.is_null() {
            assert_eq!(v["details"]["allowed"], allowed, "{query}: {v}");
        }
    }
    let (v, _) = mcp.call_tool("capabilities", json!({"command": "intent", "operation": "decide", "action": "keyevent"}));
    assert!(v["details"]["allowed"].as_array().is_some_and(|a| a.contains(&json!("tap"))), "{v}");
    let cli = env.aab(&["--help", "intent", "--operation", "decide", "--action", "keyevent"]);
    assert!(cli.stdout.contains("invalid_argument") && cli.stdout.contains("\"allowed\""), "{}", cli.stdout);
}

// ------------------------------------------------------------------ lifetime expiry and cancel during an action

fn intent_argv(op: &str, args: &Value) -> Vec<String> {
    let mut argv = vec!["intent".to_string(), "--operation".into(), op.into()];
    argv.extend(flags(args));
    argv
}

#[test]
fn intent_lifetime_expiry_and_cancel_in_flight() {
    let mut w = Web::start();
    let page = w.open("list.html");

    // ---- the lifetime deadline ends a waiting Intent with `timeout` / deadline_exceeded
    let t0 = std::time::Instant::now();
    let start = w.intent_ok("start", json!({"goal": "expire", "target": w.target(&page), "operationId": "intent-expire", "timeoutMs": 1500}));
    assert_eq!(start["status"], json!("waiting_for_decision"), "{start}");
    let (st, _) = wait_terminal(&w, "intent-expire", Duration::from_secs(10));
    println!("intent expiry: status={} error={} after {:?} lifetimeMs={}", st["status"], st["error"], t0.elapsed(), st["timings"]["lifetimeMs"]);
    assert_eq!((st["status"].clone(), st["error"].clone()), (json!("timeout"), json!("deadline_exceeded")), "{st}");
    assert!(st["terminalEvidenceId"].is_string(), "{st}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let (body, _) = w.intent("decide", json!({"operationId": "intent-expire", "decision": decision("late", 1, "complete", None)}));
    assert_eq!(error_code(&body), Some("not_waiting_for_decision"), "{body}");
    export_and_verify(&w, "intent-expire", "archive-expire");

    // ---- cancel while an action is in flight: the page blocks its click handler for 3 s
    let start = w.intent_ok("start", json!({"goal": "cancel mid-action", "target": w.target(&page), "operationId": "intent-inflight"}));
    let tab = node(&start, "tab-done")["elementId"].clone();
    w.chrome.eval(&page.tab, "document.getElementById('tab-done').addEventListener('click', function () { var t = Date.now(); while (Date.now() - t < 3000) {} }, true); true");
    let decide = intent_argv("decide", &json!({"operationId": "intent-inflight", "decision": decision("d-1", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": tab}})))}));
    let cancel = intent_argv("cancel", &json!({"operationId": "intent-inflight"}));
    let env = &w.env;
    let (acted, cancelled, cancel_ms) = std::thread::scope(|s| {
        let acting = s.spawn(|| {
            let refs: Vec<&str> = decide.iter().map(String::as_str).collect();
            env.json_of(&env.aab(&refs))
        });
        // Wait until the action is pending (decision committed, marker written).
        let t = std::time::Instant::now();
        loop {
            let st = env.aab_ok(&["intent", "--operation", "status", "--operation-id", "intent-inflight", "--limit", "1"]);
            if st["value"]["pendingOperations"] == json!(1) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "the action never became pending: {st}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let tc = std::time::Instant::now();
        let refs: Vec<&str> = cancel.iter().map(String::as_str).collect();
        let cancelled = env.json_of(&env.aab(&refs));
        let cancel_ms = tc.elapsed();
        (acting.join().unwrap(), cancelled, cancel_ms)
    });
    println!("intent cancel in flight: cancel took {cancel_ms:?}; cancel={} decide={}", cancelled["value"]["status"], acted["execution"]);
    assert_eq!(cancelled["value"]["status"], json!("cancelled"), "{cancelled}");
    assert!(cancelled["value"]["terminalEvidenceId"].is_string(), "{cancelled}");
    assert_eq!(cancelled["value"]["pendingOperations"], json!(0), "cancel drained the action: {cancelled}");
    let last = &cancelled["value"]["lastAction"];
    println!("intent cancel in flight: lastAction={last}");
    assert!(last["receiptId"].is_string(), "the action receipt was written before the terminal checkpoint: {last}");
    assert!(last["dispatched"].is_boolean() || last["dispatched"].is_null(), "{last}");
    let st = w.intent_ok("status", json!({"operationId": "intent-inflight", "limit": 50}));
    let kinds: Vec<&str> = st["history"]["items"].as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap()).collect();
    println!("intent cancel in flight: history {kinds:?}");
    let receipt = kinds.iter().position(|k| *k == "action-receipt").expect("receipt");
    let terminal = kinds.iter().position(|k| *k == "intent-terminal").expect("terminal");
    assert!(receipt < terminal, "{kinds:?}");
    assert_eq!(st["status"], json!("cancelled"));
    assert_eq!(st["revision"], json!(1), "no observation after the stop: {st}");
    export_and_verify(&w, "intent-inflight", "archive-inflight");
}

// ------------------------------------------------------------------ require: window options, explicit provider, capture control

/// The logged messages of one stream read.
fn messages(read: &Value) -> Vec<String> {
    read["records"].as_array().map(|r| r.iter().map(|x| x["item"]["message"].as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

/// The first summary node whose text is `text`.
fn node_by_text<'a>(snapshot: &'a Value, text: &str) -> &'a Value {
    snapshot["summary"]["nodes"].as_array().and_then(|n| n.iter().find(|n| n["text"] == json!(text))).unwrap_or_else(|| panic!("no node {text:?} in {}", snapshot["summary"]))
}

#[test]
fn intent_require_window_options_and_action_provider() {
    let mut w = Web::start();
    let page = w.open("list.html");
    let target = w.target(&page);

    // ---- rejected at start, before anything is retained
    w.intent_rejected("start", json!({"goal": "g", "target": target, "require": {"streams": ["logs"], "runtimeEpoch": "an-earlier-document"}}), "runtime_epoch_stale");
    let f = w.intent_rejected("start", json!({"goal": "g", "target": target, "require": {"streams": ["logs"], "view": "connected-history", "factCursor": "wc1:00000000-0000-4000-8000-000000000000"}}), "invalid_argument");
    assert_eq!(f["field"], json!("require.factCursor"), "{f}");
    let f = w.intent_rejected("start", json!({"goal": "g", "target": target, "require": {"streams": ["logs"], "afterActionId": "x"}}), "missing_argument");
    assert_eq!(f["field"], json!("require.factCursor"), "{f}");
    w.intent_rejected("start", json!({"goal": "g", "target": target, "require": {"streams": ["logs"], "limit": 1001}}), "invalid_argument");

    // ---- afterActionId omitted: after an action, the window holds that action's records only
    let start = w.intent_ok("start", json!({"goal": "remove bread", "target": target, "operationId": "req-current",
        "require": {"streams": ["logs"], "runtimeEpoch": page.runtime_epoch, "timeoutMs": 20000}}));
    let watermark1 = start["capture"]["refs"][0]["watermark"].as_str().expect("watermark").to_string();
    w.chrome.eval(&page.tab, "console.info('unrelated before the action'); true");
    let bread = node_by_text(&start, "Remove")["elementId"].clone();
    // The provider named inside the action (seed 002); a conflicting one is refused before dispatch.
    let mut d = decision("conflict", 1, "act", Some(json!({"provider": "h5", "action": "tap", "selector": {"elementId": bread}})));
    d["provider"] = json!("native");
    // `native` is no loaded provider (the enum comes from the catalog: h5 only).
    let f = w.intent_rejected("decide", json!({"operationId": "req-current", "decision": d}), "invalid_argument");
    assert_eq!((&f["field"], &f["details"]["allowed"]), (&json!("decision.provider"), &json!(["h5"])), "{f}");
    let f = w.intent_rejected("decide", json!({"operationId": "req-current", "decision": decision("wrong", 1, "act", Some(json!({"provider": "native", "action": "tap", "selector": {"elementId": bread}})))}), "invalid_argument");
    assert_eq!(f["field"], json!("decision.action.provider"), "{f}");
    assert_eq!(w.clicks(&page), 0);
    let acted = w.intent_ok("decide", json!({"operationId": "req-current", "decision": decision("d-1", 1, "act", Some(json!({"provider": "h5", "action": "tap", "selector": {"elementId": bread}})))}));
    assert_eq!(acted["revision"], json!(2), "{acted}");
    assert_eq!(w.clicks(&page), 1);
    let host_action = acted["lastAction"]["hostActionId"].as_str().expect("hostActionId").to_string();
    let r = &acted["capture"]["refs"][0];
    println!("intent require current action: {r}");
    assert_eq!(r["afterActionId"], json!(host_action), "{r}");
    assert_eq!(r["factCursor"], json!(watermark1), "the window starts at the observation before the action: {r}");
    let logs = &acted["capture"]["streams"]["logs"];
    assert_eq!(messages(logs), vec!["removed Bread".to_string()], "only the action's own record: {logs}");
    // A re-observation of the same action keeps its lower watermark.
    let again = w.intent_ok("observe", json!({"operationId": "req-current", "basedOnRevision": 2}));
    assert_eq!(again["capture"]["refs"][0]["factCursor"], json!(watermark1), "{}", again["capture"]["refs"][0]);
    assert_eq!(messages(&again["capture"]["streams"]["logs"]), vec!["removed Bread".to_string()]);

    // ---- afterActionId: null keeps every record of the window; limit bounds them
    let start = w.intent_ok("start", json!({"goal": "all records", "target": w.target(&page), "operationId": "req-null", "require": {"streams": ["logs"], "afterActionId": null}}));
    w.chrome.eval(&page.tab, "for (var i = 0; i < 20; i++) console.info('bulk ' + i); true");
    let milk = node_by_text(&start, "Remove")["elementId"].clone();
    let acted = w.intent_ok("decide", json!({"operationId": "req-null", "decision": decision("d-1", 1, "act", Some(json!({"action": "tap", "selector": {"elementId": milk}})))}));
    let got = messages(&acted["capture"]["streams"]["logs"]);
    println!("intent require afterActionId null: {} records, ref {}", got.len(), acted["capture"]["refs"][0]);
    assert_eq!(got.len(), 21, "20 unattributed + the action's own, across pages of 16: {got:?}");
    assert!(got.contains(&"bulk 0".to_string()) && got.iter().any(|m| m.starts_with("removed ")), "{got:?}");
    assert!(acted["capture"]["refs"][0]["pages"].as_u64() >= Some(2), "{}", acted["capture"]["refs"][0]);
    assert_eq!(acted["capture"]["refs"][0]["afterActionId"], Value::Null);

    let limited = w.intent_ok("start", json!({"goal": "limit", "target": w.target(&page), "operationId": "req-limit", "require": {"streams": ["logs"], "limit": 3}}));
    let r = &limited["capture"]["refs"][0];
    assert_eq!((r["records"].clone(), r["truncated"].clone()), (json!(3), json!(true)), "{r}");
    assert_eq!(messages(&limited["capture"]["streams"]["logs"]).len(), 3);

    // ---- factCursor: the first window resumes from it
    let mark = limited["capture"]["refs"][0]["watermark"].as_str().unwrap().to_string();
    w.chrome.eval(&page.tab, "console.info('after the mark'); true");
    let resumed = w.intent_ok("start", json!({"goal": "resume", "target": w.target(&page), "operationId": "req-cursor", "require": {"streams": ["logs"], "factCursor": mark}}));
    assert_eq!(messages(&resumed["capture"]["streams"]["logs"]), vec!["after the mark".to_string()], "{}", resumed["capture"]);
    // ---- timeoutMs bounds the stream reads: a read that cannot finish in 1 ms leaves the
    // stream unavailable, and the observation still commits.
    let hurried = w.intent_ok("start", json!({"goal": "hurry", "target": w.target(&page), "operationId": "req-hurry", "require": {"streams": ["logs"], "timeoutMs": 1}}));
    let r = &hurried["capture"]["refs"][0];
    println!("intent require timeoutMs 1: {r}");
    assert_eq!((hurried["status"].clone(), hurried["revision"].clone()), (json!("waiting_for_decision"), json!(1)), "{hurried}");
    assert_eq!(r["coverage"], json!("unavailable"), "{r}");
    assert!(r["error"].is_string(), "{r}");
    for op in ["req-current", "req-null", "req-limit", "req-cursor", "req-hurry"] {
        w.intent_ok("cancel", json!({"operationId": op}));
    }

    // ---- a capture read whose value an extractor replaced keeps its continuation facts in control
    let extract = json!({"mode": "script", "language": "javascript", "source": "function main(ctx) { return 1; }"}).to_string();
    let run = w.env.aab(&["web-logs", "--session-id", &page.session_id, "--runtime-epoch", &page.runtime_epoch, "--extract", &extract]);
    let body = w.env.expect_ok(&run, "web-logs with an extract");
    println!("web-logs control under extract: {}", body["control"]);
    assert_eq!(body["value"], json!(1), "{body}");
    assert!(body["control"]["watermarkCursor"].as_str().is_some_and(|c| c.starts_with("wc1:")), "{body}");
    assert!(body["control"]["coverage"]["status"].is_string(), "{body}");
    assert_eq!(body["control"]["stream"], json!("logs"), "{body}");
    // Intent replies too.
    let run = w.env.aab(&["intent", "--operation", "status", "--operation-id", "req-cursor", "--extract", &extract]);
    let body = w.env.expect_ok(&run, "intent status with an extract");
    assert_eq!((body["control"]["operationId"].clone(), body["control"]["status"].clone()), (json!("req-cursor"), json!("cancelled")), "{body}");
    assert!(body["control"]["revision"].is_u64() && body["control"]["terminalEvidenceId"].is_string(), "{body}");
}
