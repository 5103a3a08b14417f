//! Script engine e2e: real `node` / `python3` children through the public CLI and MCP.
//! Host-only scenarios need no plugin; the business flow runs in real Chromium
//! against the Web sample app.

use std::time::{Duration, Instant};

use aab_e2e::TestEnv;
use aab_e2e::web::SampleWeb;
use serde_json::{Value, json};

fn spec(language: &str, source: &str, extra: Value) -> Value {
    let mut s = json!({"schemaVersion": "aab.code-script/v1", "language": language, "source": source});
    for (k, v) in extra.as_object().expect("object") {
        s[k] = v.clone();
    }
    s
}

fn script(env: &TestEnv, args: &[&str]) -> Value {
    let mut argv = vec!["script"];
    argv.extend_from_slice(args);
    let run = env.aab(&argv);
    env.json_of(&run)
}

#[track_caller]
fn script_ok(env: &TestEnv, args: &[&str]) -> Value {
    let mut argv = vec!["script"];
    argv.extend_from_slice(args);
    let run = env.aab(&argv);
    let body = env.json_of(&run);
    env.check(body.pointer("/execution/ok") == Some(&json!(true)), &run, "script command should succeed");
    body["value"].clone()
}

fn start(env: &TestEnv, id: &str, spec: &Value) -> Value {
    script_ok(env, &["--operation", "start", "--operation-id", id, "--script", &spec.to_string()])
}

/// Wait until the operation is terminal (or `until` status), up to 60 s.
fn wait_status(env: &TestEnv, id: &str, until: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = 0u64;
    loop {
        let v = script_ok(env, &["--operation", "wait", "--operation-id", id, "--after-sequence", &after.to_string(), "--wait-ms", "5000"]);
        let status = v["status"].as_str().unwrap_or_default().to_string();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) || until.contains(&status.as_str()) {
            return v;
        }
        after = v["eventSequence"].as_u64().unwrap_or(after);
        assert!(Instant::now() < deadline, "operation {id} did not reach {until:?}: {v}\n{}", env.report(None));
    }
}

fn no_children(env: &TestEnv) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let runtime = env.runtime_pid();
        let others: Vec<i32> = env.live_processes().into_iter().filter(|p| Some(*p) != runtime).collect();
        if others.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "script processes left behind: {others:?}\n{}", env.report(None));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn script_failures_end_with_their_error_and_leave_no_child() {
    let env = TestEnv::new();
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        ("javascript", "exports.main = async () => { await new Promise(r => setTimeout(r, 30000)); };", json!({"policy": {"timeoutMs": 800}}), "timeout"),
        ("python", "import time\ndef main(ctx):\n    time.sleep(30)\n", json!({"policy": {"timeoutMs": 800}}), "timeout"),
        ("javascript", "exports.main = async (ctx) => { for (let i = 0; i < 200000; i++) ctx.progress({i}); await new Promise(r => setTimeout(r, 5000)); };", json!({}), "channel_backlog"),
        ("javascript", "exports.main = async (ctx) => { ctx.progress({pad: 'x'.repeat(4096)}); };", json!({"policy": {"maxProgressBytes": 1024}}), "progress_too_large"),
        ("python", "def main(ctx):\n    ctx.progress({'pad': 'x' * 4096})\n", json!({"policy": {"maxProgressBytes": 1024}}), "progress_too_large"),
        ("javascript", "exports.main = async () => { process.stdout.write('{\"type\":\"progress\",\"event\":\"' + 'x'.repeat(3 * 1024 * 1024) + '\"}\\n'); await new Promise(r => setTimeout(r, 5000)); };", json!({}), "frame_too_large"),
        ("python", "import sys\ndef main(ctx):\n    sys.__stdout__.write('not json\\n'); sys.__stdout__.flush()\n    import time; time.sleep(5)\n", json!({}), "malformed_frame"),
        ("javascript", "exports.main = async () => { require('fs').closeSync(1); await new Promise(r => setTimeout(r, 5000)); };", json!({}), "channel_closed"),
        ("python", "import os, time\ndef main(ctx):\n    os.close(1)\n    time.sleep(5)\n", json!({}), "channel_closed"),
        ("javascript", "exports.main = async () => { throw new Error('boom'); };", json!({}), "script_failed"),
        ("python", "def other(ctx):\n    return 1\n", json!({}), "unsupported_entrypoint"),
        ("javascript", "exports.main = async () => ({big: 'x'.repeat(5000)});", json!({"policy": {"maxOutputBytes": 1000}}), "output_too_large"),
    ];
    for (i, (language, source, extra, code)) in cases.iter().enumerate() {
        let id = format!("fail-{i}");
        start(&env, &id, &spec(language, source, extra.clone()));
        let v = wait_status(&env, &id, &[]);
        assert_eq!(v["status"], json!("failed"), "case {i} ({language}, expected {code}): {v}\n{}", env.report(None));
        assert_eq!(v["error"], json!(code), "case {i} ({language}): {v}");
        no_children(&env);
        let r = script(&env, &["--operation", "result", "--operation-id", &id]);
        assert_eq!(r.pointer("/execution/error"), Some(&json!("result_unavailable")), "{r}");
    }

    // Forked children die with the script's process group.
    for (language, source) in [
        ("javascript", "exports.main = async (ctx) => { const c = require('child_process').spawn('sleep', ['30']); ctx.progress({pid: c.pid}); return {pid: c.pid}; };"),
        ("python", "import subprocess\ndef main(ctx):\n    p = subprocess.Popen(['sleep', '30'])\n    return {'pid': p.pid}\n"),
    ] {
        let id = format!("fork-{language}");
        start(&env, &id, &spec(language, source, json!({})));
        let v = wait_status(&env, &id, &[]);
        assert_eq!(v["status"], json!("completed"), "{v}");
        no_children(&env);
    }

    // Denied commands: the envelope says why, nothing is dispatched.
    let denied = "exports.main = async (ctx) => { const out = {}; for (const c of ['runtime', 'script', 'intent', 'web-command', 'no-such-command', 'evidence']) { const r = await ctx.call(c, {operation: 'status'}); out[c] = [r.ok, r.error && r.error.code, r.dispatched]; } return out; };";
    start(&env, "denied", &spec("javascript", denied, json!({})));
    let v = wait_status(&env, "denied", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    let r = script_ok(&env, &["--operation", "result", "--operation-id", "denied"]);
    let res = &r["result"];
    assert_eq!(res["runtime"], json!([false, "command_permanently_denied", false]), "{res}");
    assert_eq!(res["script"], json!([false, "command_permanently_denied", false]), "{res}");
    assert_eq!(res["intent"][0], json!(false), "{res}");
    assert_eq!(res["no-such-command"], json!([false, "command_not_in_catalog", false]), "{res}");
    assert_eq!(res["evidence"], json!([false, "command_not_in_catalog", false]), "{res}");
    no_children(&env);
}

#[test]
fn script_ask_decide_pause_cancel_with_cli_and_mcp() {
    let env = TestEnv::new();
    let source = "def main(ctx):\n    a = ctx.ask_agent({'question': 'continue?'})\n    b = ctx.ask_agent({'question': 'and null?'})\n    ctx.checkpoint('after-questions', {'a': a, 'b': b})\n    r = ctx.assert_({'name': 'answered', 'condition': a is False and b is None, 'scope': 'code'})\n    return {'a': a, 'b': b, 'verdict': r['verdict']}\n";
    start(&env, "ask", &spec("python", source, json!({})));
    let v = wait_status(&env, "ask", &["waiting_for_agent"]);
    let q = v["pendingQuestion"].clone();
    assert_eq!(q["request"]["question"], json!("continue?"), "{v}");
    let rid = q["questionId"].as_str().unwrap().to_string();
    let rev = q["revision"].to_string();
    // Stale revision, then the answer via MCP, then the same answer again via CLI (idempotent).
    let stale = script(&env, &["--operation", "decide", "--operation-id", "ask", "--question-id", &rid, "--revision", "99", "--decision", "false"]);
    assert_eq!(stale.pointer("/execution/error"), Some(&json!("stale_decide")), "{stale}");
    let mut mcp = env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "script", "arguments": {"operation": "decide", "operationId": "ask", "questionId": rid, "revision": q["revision"], "decision": false}, "extract": null}));
    assert!(!is_error, "{body}");
    let again = script(&env, &["--operation", "decide", "--operation-id", "ask", "--question-id", &rid, "--revision", &rev, "--decision", "false"]);
    assert_eq!(again.pointer("/execution/ok"), Some(&json!(true)), "{again}");
    let v = wait_status(&env, "ask", &["waiting_for_agent"]);
    let q2 = v["pendingQuestion"].clone();
    assert_eq!(q2["request"]["question"], json!("and null?"), "{v}");
    let (body, is_error) = mcp.call_tool("run", json!({"command": "script", "arguments": {"operation": "decide", "operationId": "ask", "questionId": q2["questionId"], "revision": q2["revision"], "decision": null}, "extract": null}));
    assert!(!is_error, "{body}");
    let v = wait_status(&env, "ask", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    // Both clients see the same result.
    let cli = script_ok(&env, &["--operation", "result", "--operation-id", "ask"]);
    let (body, is_error) = mcp.call_tool("run", json!({"command": "script", "arguments": {"operation": "result", "operationId": "ask"}, "extract": null}));
    assert!(!is_error, "{body}");
    assert_eq!(cli["result"], json!({"a": false, "b": null, "verdict": "passed"}));
    assert_eq!(body["value"]["result"], cli["result"]);
    assert_eq!(body["value"]["resultRef"], cli["resultRef"]);

    // Pause holds calls, resume releases them, cancel ends with a terminal checkpoint.
    let looping = "exports.main = async (ctx) => { for (let i = 0; ; i++) { await ctx.controlPoint(); ctx.progress({i}); await new Promise(r => setTimeout(r, 50)); } };";
    start(&env, "loop", &spec("javascript", looping, json!({})));
    std::thread::sleep(Duration::from_millis(500));
    let p = script_ok(&env, &["--operation", "pause", "--operation-id", "loop"]);
    assert_eq!(p["status"], json!("paused_manual"), "{p}");
    std::thread::sleep(Duration::from_millis(300));
    let s1 = script_ok(&env, &["--operation", "status", "--operation-id", "loop"])["eventSequence"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let s2 = script_ok(&env, &["--operation", "status", "--operation-id", "loop"])["eventSequence"].as_u64().unwrap();
    assert_eq!(s1, s2, "no progress while paused");
    let (body, is_error) = mcp.call_tool("run", json!({"command": "script", "arguments": {"operation": "resume", "operationId": "loop"}, "extract": null}));
    assert!(!is_error && body["value"]["status"] == json!("running"), "{body}");
    drop(mcp); // `aab mcp` runs with this env's runtime home too
    std::thread::sleep(Duration::from_millis(400));
    let c = script_ok(&env, &["--operation", "cancel", "--operation-id", "loop"]);
    assert_eq!(c["status"], json!("cancelled"), "{c}");
    assert_eq!(c["error"], json!("cancelled"), "{c}");
    no_children(&env);
    let out = env.root.join("loop-archive");
    let exported = env.aab_ok(&["evidence", "--operation", "export", "--namespace", "script", "--operation-id", "loop", "--output-dir", out.to_str().unwrap()]);
    let sha = exported["value"]["manifestSha256"].as_str().unwrap().to_string();
    env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
}

#[test]
fn script_runtime_lost_after_kill_9() {
    let env = TestEnv::new();
    start(&env, "lost", &spec("javascript", "exports.main = async () => { await new Promise(r => setTimeout(r, 60000)); };", json!({})));
    std::thread::sleep(Duration::from_millis(500));
    let pid = env.runtime_pid().expect("runtime pid");
    // SAFETY: the test's own runtime daemon.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(300));
    let v = script_ok(&env, &["--operation", "status", "--operation-id", "lost"]);
    assert_eq!(v["status"], json!("failed"), "{v}");
    assert_eq!(v["error"], json!("runtime_lost"), "{v}");
    assert_eq!(v["restored"], json!(true), "{v}");
    // The ledger lived in the lost runtime: the history says so instead of looking empty.
    assert_eq!(v["history"], json!({"items": [], "lastSequence": 0, "hasMore": false, "gap": true}), "{v}");
    no_children(&env);
}

// ------------------------------------------------------------------ Web flow

const JS_FLOW: &str = r#"
function expected(dom, c) {
  const element = {};
  for (const k of ['elementId', 'tag', 'id', 'name', 'type', 'role', 'ariaLabel', 'placeholder', 'href', 'text']) element[k] = c[k] === undefined ? null : c[k];
  return { pageRef: dom.result.pageRef, element };
}
const find = (dom, id) => dom.result.dom.controls.find((c) => c.id === id);
exports.main = async (ctx) => {
  let dom = await ctx.call('web-dom', {});
  if (!dom.ok) throw new Error('web-dom: ' + JSON.stringify(dom.error));
  for (const id of ['name', 'email']) {
    const c = find(dom, id);
    const r = await ctx.call('web-input', { selector: { elementId: c.elementId }, expectedTarget: expected(dom, c), value: ctx.inputs[id] });
    if (!r.ok) throw new Error('web-input: ' + JSON.stringify(r.error));
  }
  dom = await ctx.call('web-dom', {});
  const terms = find(dom, 'terms');
  await ctx.call('web-click', { selector: { elementId: terms.elementId }, expectedTarget: expected(dom, terms) });
  dom = await ctx.call('web-dom', {});
  const save = find(dom, 'save');
  const clicked = await ctx.call('web-click', { selector: { elementId: save.elementId }, expectedTarget: expected(dom, save) });
  ctx.progress({ step: 'saved', ok: clicked.ok });
  await ctx.call('web-wait', { targetText: 'Saved #' });
  const after = await ctx.call('web-dom', {});
  const text = find(after, 'result').text;
  const verdict = await ctx.assert({ name: 'saved', condition: /Saved #/.test(text), evidence: after.evidence });
  const stale = await ctx.assert({ name: 'stale', condition: true, evidence: dom.evidence });
  const edited = await ctx.assert({ name: 'edited', condition: true, evidence: { ...after.evidence, window: 99 } });
  return { saved: /Saved #/.test(text), verdicts: [verdict.verdict, stale.verdict, edited.verdict] };
};
"#;

const PY_FLOW: &str = r#"
import re

def expected(dom, c):
    element = {k: c.get(k) for k in ['elementId', 'tag', 'id', 'name', 'type', 'role', 'ariaLabel', 'placeholder', 'href', 'text']}
    return {'pageRef': dom['result']['pageRef'], 'element': element}

def find(dom, id):
    return next(c for c in dom['result']['dom']['controls'] if c.get('id') == id)

def main(ctx):
    dom = ctx.call('web-dom', {})
    if not dom['ok']:
        raise RuntimeError('web-dom: %s' % dom['error'])
    for id in ['name', 'email']:
        c = find(dom, id)
        r = ctx.call('web-input', {'selector': {'elementId': c['elementId']}, 'expectedTarget': expected(dom, c), 'value': ctx.inputs[id]})
        if not r['ok']:
            raise RuntimeError('web-input: %s' % r['error'])
    dom = ctx.call('web-dom', {})
    terms = find(dom, 'terms')
    ctx.call('web-click', {'selector': {'elementId': terms['elementId']}, 'expectedTarget': expected(dom, terms)})
    dom = ctx.call('web-dom', {})
    save = find(dom, 'save')
    clicked = ctx.call('web-click', {'selector': {'elementId': save['elementId']}, 'expectedTarget': expected(dom, save)})
    ctx.progress({'step': 'saved', 'ok': clicked['ok']})
    ctx.call('web-wait', {'targetText': 'Saved #'})
    after = ctx.call('web-dom', {})
    text = find(after, 'result').get('text') or ''
    verdict = ctx.assert_({'name': 'saved', 'condition': bool(re.search('Saved #', text)), 'evidence': after['evidence']})
    stale = ctx.assert_({'name': 'stale', 'condition': True, 'evidence': dom['evidence']})
    edited_evidence = dict(after['evidence'])
    edited_evidence['window'] = 99
    edited = ctx.assert_({'name': 'edited', 'condition': True, 'evidence': edited_evidence})
    return {'saved': bool(re.search('Saved #', text)), 'verdicts': [verdict['verdict'], stale['verdict'], edited['verdict']]}
"#;

const JS_RATE: &str = "exports.main = async (ctx) => { const t0 = Date.now(); let n = 0; while (Date.now() - t0 < 2000) { const r = await ctx.call('web-status', {}); if (!r.ok) throw new Error(JSON.stringify(r.error)); n++; } return {n, ms: Date.now() - t0}; };";
const PY_RATE: &str = "import time\ndef main(ctx):\n    t0 = time.time(); n = 0\n    while time.time() - t0 < 2:\n        r = ctx.call('web-status', {})\n        if not r['ok']:\n            raise RuntimeError(str(r['error']))\n        n += 1\n    return {'n': n, 'ms': int((time.time() - t0) * 1000)}\n";

#[test]
fn script_web_flow_same_outcome_in_javascript_and_python() {
    let mut web = SampleWeb::start();
    let mut outcomes = Vec::new();
    for (language, source, rate) in [("javascript", JS_FLOW, JS_RATE), ("python", PY_FLOW, PY_RATE)] {
        let page = web.open_connected("form.html", None);
        let (env, chrome, tab) = (&web.env, &mut web.chrome, &page.tab);
        let target = json!({"platform": "web", "sessionId": page.session_id, "runtimeEpoch": page.runtime_epoch});
        let id = format!("flow-{language}");
        let t0 = Instant::now();
        start(env, &id, &spec(language, source, json!({"target": target, "inputs": {"name": "Ada Lovelace", "email": "ada@example.org"}})));
        let v = wait_status(env, &id, &[]);
        assert_eq!(v["status"], json!("completed"), "{language}: {v}\n{}", env.report(None));
        let all = script_ok(env, &["--operation", "status", "--operation-id", &id, "--after-sequence", "0", "--event-limit", "1000"]);
        let first_call = all["events"].as_array().and_then(|e| e.iter().find(|e| e["type"] == json!("call_started"))).and_then(|e| e["atMs"].as_u64());
        let started_at = all["events"].as_array().and_then(|e| e.iter().find(|e| e["type"] == json!("script_started"))).and_then(|e| e["atMs"].as_u64());
        if let (Some(a), Some(b)) = (first_call, started_at) {
            println!("script {language}: start-to-first-call latency {} ms (flow total {} ms)", a.saturating_sub(b), t0.elapsed().as_millis());
        }
        let r = script_ok(env, &["--operation", "result", "--operation-id", &id]);
        outcomes.push(r["result"].clone());
        // The page's server really received the submission.
        let subs = chrome.eval(tab, "fetch('/sample/api/submissions').then(r => r.json())");
        assert!(subs.to_string().contains("ada@example.org"), "{subs}");
        let out = env.root.join(format!("archive-{language}"));
        let exported = env.aab_ok(&["evidence", "--operation", "export", "--namespace", "script", "--operation-id", &id, "--output-dir", out.to_str().unwrap()]);
        let counts = &exported["value"]["recordCount"];
        let sha = exported["value"]["manifestSha256"].as_str().unwrap().to_string();
        let verified = env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
        assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
        println!("script {language}: archive of {counts} records verified");

        let rid = format!("rate-{language}");
        start(env, &rid, &spec(language, rate, json!({"target": target})));
        let v = wait_status(env, &rid, &[]);
        assert_eq!(v["status"], json!("completed"), "{v}");
        let r = script_ok(env, &["--operation", "result", "--operation-id", &rid])["result"].clone();
        let (n, ms) = (r["n"].as_f64().unwrap_or(0.0), r["ms"].as_f64().unwrap_or(1.0));
        println!("script {language}: ctx.call web-status {:.0} calls/s ({n} calls in {ms} ms)", n * 1000.0 / ms);
        chrome.close(tab);
        no_children(env);
    }
    assert_eq!(outcomes[0], outcomes[1], "JavaScript and Python give the same business outcome");
    assert_eq!(outcomes[0], json!({"saved": true, "verdicts": ["passed", "inconclusive", "inconclusive"]}));
}

// ------------------------------------------------------------------ checkpoint resume

/// Records of one exported script operation (exported to `<root>/<dir>` and verified).
fn exported_records(env: &TestEnv, id: &str, dir: &str, payloads: bool) -> (Value, Vec<Value>) {
    let out = env.root.join(dir);
    let mut args = vec!["evidence", "--operation", "export", "--namespace", "script", "--operation-id", id, "--output-dir", out.to_str().unwrap()];
    if payloads {
        args.extend_from_slice(&["--include-recorded-payloads", "true"]);
    }
    let exported = env.aab_ok(&args);
    let sha = exported["value"]["manifestSha256"].as_str().unwrap().to_string();
    let verified = env.aab_ok(&["evidence", "--operation", "verify", "--archive-dir", out.to_str().unwrap(), "--manifest-sha256", &sha]);
    assert_eq!(verified["value"]["integrity"], json!("verified"), "{verified}");
    let records: Value = serde_json::from_slice(&std::fs::read(out.join("records.json")).unwrap()).unwrap();
    let list = records.as_array().cloned().or_else(|| records["records"].as_array().cloned()).unwrap_or_default();
    (exported["value"].clone(), list)
}

fn kind_of(r: &Value) -> &str {
    r["payload"]["kind"].as_str().or_else(|| r["kind"].as_str()).unwrap_or_default()
}

fn count_kind(records: &[Value], kind: &str) -> usize {
    records.iter().filter(|r| kind_of(r) == kind).count()
}

/// Wait until the operation's event log holds an event of type `kind`.
fn wait_event(env: &TestEnv, id: &str, kind: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = script_ok(env, &["--operation", "status", "--operation-id", id, "--after-sequence", "0", "--event-limit", "1000"]);
        if v["events"].as_array().is_some_and(|e| e.iter().any(|e| e["type"] == json!(kind))) {
            return;
        }
        assert!(!["completed", "failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()), "{id} ended before `{kind}`: {v}");
        assert!(Instant::now() < deadline, "{id}: no `{kind}` event: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const RESUME_JS: &str = r#"
exports.main = async (ctx) => {
  const st = ctx.resume();
  if (st) return { resumed: true, state: st };
  const r = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'ckpt-js', tag: 'once' });
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  const k = await ctx.checkpoint('after-mutation', { actionId: r.execution.actionId, laneSeq: r.result.laneSeq });
  if (!k.persisted) throw new Error('checkpoint: ' + JSON.stringify(k));
  await new Promise((res) => setTimeout(res, 60000));
  return { resumed: false };
};
"#;

const RESUME_PY: &str = r#"
import time
def main(ctx):
    st = ctx.resume()
    if st is not None:
        return {'resumed': True, 'state': st}
    r = ctx.call('fixture-sleep', {'durationMs': 0, 'lane': 'ckpt-py', 'tag': 'once'})
    if not r['ok']:
        raise RuntimeError(str(r['error']))
    k = ctx.checkpoint('after-mutation', {'actionId': r['execution']['actionId'], 'laneSeq': r['result']['laneSeq']})
    if not k['persisted']:
        raise RuntimeError('checkpoint: %s' % k)
    time.sleep(60)
    return {'resumed': False}
"#;

/// The mutation comes after the checkpoint: resuming would repeat it.
const AFTER_CHECKPOINT_JS: &str = r#"
exports.main = async (ctx) => {
  if (ctx.resume()) return { resumed: true };
  await ctx.checkpoint('before-mutation', { n: 1 });
  const r = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'ckpt-after', tag: 'after' });
  ctx.progress({ mutated: r.ok });
  await new Promise((res) => setTimeout(res, 60000));
};
"#;

#[test]
fn script_checkpoint_resume_after_kill_9_never_repeats_an_action() {
    let env = TestEnv::new();
    env.install_fixtures();
    let receipts = env.root.join("fixture-receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    env.set_env("AAB_FIXTURE_RECEIPTS", receipts.display().to_string());
    let target = json!({"platform": "fixture", "screen": "ckpt-screen"});
    let policy = json!({"restartPolicy": "checkpoint", "timeoutMs": 120000});
    let extra = json!({"target": target, "policy": policy});
    start(&env, "ckpt-js", &spec("javascript", RESUME_JS, extra.clone()));
    start(&env, "ckpt-py", &spec("python", RESUME_PY, extra.clone()));
    start(&env, "ckpt-after", &spec("javascript", AFTER_CHECKPOINT_JS, extra.clone()));
    start(&env, "ckpt-none", &spec("javascript", "exports.main = async (ctx) => { await ctx.checkpoint('c', {}); await new Promise(r => setTimeout(r, 60000)); };", json!({})));
    for id in ["ckpt-js", "ckpt-py", "ckpt-none"] {
        wait_event(&env, id, "checkpoint");
    }
    wait_event(&env, "ckpt-after", "progress");

    let pid = env.runtime_pid().expect("runtime pid");
    // SAFETY: the test's own runtime daemon.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let gone = Instant::now() + Duration::from_secs(10);
    while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(50));
    }

    // The next runtime reads the durable records.
    for id in ["ckpt-js", "ckpt-py"] {
        let v = script_ok(&env, &["--operation", "status", "--operation-id", id]);
        assert_eq!((&v["status"], &v["error"], &v["restored"]), (&json!("failed"), &json!("runtime_lost"), &json!(true)), "{v}");
        assert_eq!(v["resumable"], json!(true), "{v}");
        assert_eq!(v["resumeMode"], json!("checkpoint"), "{v}");
        assert_eq!(v["checkpoint"]["name"], json!("after-mutation"), "{v}");
        assert_eq!(v["checkpoint"]["actionSequence"], json!(1), "{v}");
    }
    let after = script_ok(&env, &["--operation", "status", "--operation-id", "ckpt-after"]);
    assert_eq!(after["resumable"], json!(false), "{after}");
    assert_eq!(after["ambiguous"], json!(true), "{after}");
    assert_eq!(after["resumeRefusal"]["details"]["reason"], json!("checkpoint_precedes_action"), "{after}");
    let refused = script(&env, &["--operation", "resume", "--operation-id", "ckpt-after"]);
    assert_eq!(refused.pointer("/execution/error"), Some(&json!("ambiguous")), "{refused}");
    let none = script_ok(&env, &["--operation", "status", "--operation-id", "ckpt-none"]);
    assert_eq!((&none["resumable"], &none["resumeMode"]), (&json!(false), &json!("none")), "{none}");
    let refused = script(&env, &["--operation", "resume", "--operation-id", "ckpt-none"]);
    assert_eq!(refused.pointer("/execution/error"), Some(&json!("not_resumable")), "{refused}");

    for id in ["ckpt-js", "ckpt-py"] {
        let t0 = Instant::now();
        let r = script_ok(&env, &["--operation", "resume", "--operation-id", id]);
        assert_eq!(r["status"], json!("running"), "{r}");
        let v = wait_status(&env, id, &[]);
        assert_eq!(v["status"], json!("completed"), "{v}\n{}", env.report(None));
        println!("script {id}: resume-to-completed {} ms", t0.elapsed().as_millis());
        let res = script_ok(&env, &["--operation", "result", "--operation-id", id])["result"].clone();
        assert_eq!(res["resumed"], json!(true), "{res}");
        assert_eq!(res["state"]["actionId"], json!(format!("{id}:action-1")), "{res}");
        // A second resume of a completed operation is refused.
        let again = script(&env, &["--operation", "resume", "--operation-id", id]);
        assert_eq!(again.pointer("/execution/error"), Some(&json!("not_resumable")), "{again}");
        // The mutation before the checkpoint ran exactly once.
        let (_, records) = exported_records(&env, id, &format!("archive-{id}"), false);
        assert_eq!(count_kind(&records, "dispatch-marker"), 1, "{records:?}");
        assert_eq!(count_kind(&records, "action-receipt"), 1, "{records:?}");
        let steps: Vec<String> = records.iter().filter(|r| kind_of(r) == "checkpoint").map(|r| r.to_string()).collect();
        assert!(steps.iter().any(|s| s.contains("\"resume\"")), "a resume checkpoint is recorded: {steps:?}");
    }
    let mut files: Vec<String> = std::fs::read_dir(&receipts).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| !n.starts_with('.')).collect();
    files.sort();
    // Three mutations were dispatched in all (js, py, after): three fixture effects, none repeated by a resume.
    assert_eq!(files.len(), 3, "one fixture effect per mutation: {files:?}");
    no_children(&env);
}

// ------------------------------------------------------------------ recordingDir

const RECORDED_JS: &str = r#"
exports.main = async (ctx) => {
  const first = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'rec', tag: 'one' });
  const verdict = await ctx.assert({ name: 'first', condition: first.ok, evidence: first.evidence });
  if (ctx.inputs.pause) await ctx.askAgent({ question: 'go on?' });
  const second = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'rec', tag: 'two' });
  const third = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'rec', tag: 'three' });
  const code = (r) => [r.ok, r.error && r.error.code, r.dispatched];
  return { first: code(first), verdict: verdict.verdict, second: code(second), third: code(third) };
};
"#;

#[test]
fn script_recording_dir_records_calls_and_latches_failures() {
    let env = TestEnv::new();
    env.install_fixtures();
    let target = json!({"platform": "fixture", "screen": "rec-screen"});
    let work = env.aab_ok(&["runtime", "--operation", "status"]); // starts the runtime
    drop(work);

    // Parent of recordingDir is a regular file: refused at start, nothing runs.
    let file = env.root.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let bad = file.join("rec");
    let run = env.aab(&["script", "--operation", "start", "--operation-id", "rec-bad", "--recording-dir", bad.to_str().unwrap(), "--script", &spec("javascript", RECORDED_JS, json!({"target": target})).to_string()]);
    let body = env.json_of(&run);
    assert_eq!(body.pointer("/execution/ok"), Some(&json!(false)), "{body}");
    println!("recordingDir under a regular file: {}", body.pointer("/execution/error").unwrap_or(&Value::Null));
    // recordingDir with restartPolicy checkpoint is refused.
    let dir = env.root.join("rec-checkpoint");
    let run = env.aab(&["script", "--operation", "start", "--operation-id", "rec-ckpt", "--recording-dir", dir.to_str().unwrap(), "--script", &spec("javascript", RECORDED_JS, json!({"target": target, "policy": {"restartPolicy": "checkpoint"}})).to_string()]);
    assert_eq!(env.json_of(&run).pointer("/execution/error"), Some(&json!("recording_restart_unsupported")), "{}", env.json_of(&run));

    // A complete recording: every call and the assertion are attachments; export with payloads verifies.
    let ok_dir = env.root.join("rec-ok");
    script_ok(&env, &["--operation", "start", "--operation-id", "rec-ok", "--recording-dir", ok_dir.to_str().unwrap(), "--script", &spec("javascript", RECORDED_JS, json!({"target": target})).to_string()]);
    let v = wait_status(&env, "rec-ok", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    assert_eq!(v["recording"]["error"], Value::Null, "{v}");
    let res = script_ok(&env, &["--operation", "result", "--operation-id", "rec-ok"])["result"].clone();
    assert_eq!(res, json!({"first": [true, null, true], "verdict": "passed", "second": [true, null, true], "third": [true, null, true]}));
    let mut files: Vec<String> = std::fs::read_dir(&ok_dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, vec!["1.json", "2.json", "3.json", "4.json"], "3 calls + 1 assertion");
    let doc: Value = serde_json::from_slice(&std::fs::read(ok_dir.join("2.json")).unwrap()).unwrap();
    assert_eq!((&doc["schemaVersion"], &doc["kind"], &doc["operationId"]), (&json!("aab.recorded-payload/v1"), &json!("script-assertion"), &json!("rec-ok")), "{doc}");
    let (manifest, records) = exported_records(&env, "rec-ok", "archive-rec-ok", true);
    assert_eq!(count_kind(&records, "attachment"), 4, "{manifest}");
    println!("recording archive: {} records, recordedPayloads {}", records.len(), manifest["recordedPayloads"]);
    assert!(!manifest["recordedPayloads"].is_null(), "{manifest}");

    // A failure mid-run latches: the failing call reports it, the next is refused before dispatch.
    let fail_dir = env.root.join("rec-fail");
    script_ok(&env, &["--operation", "start", "--operation-id", "rec-fail", "--recording-dir", fail_dir.to_str().unwrap(), "--script", &spec("javascript", RECORDED_JS, json!({"target": target, "inputs": {"pause": true}})).to_string()]);
    let v = wait_status(&env, "rec-fail", &["waiting_for_agent"]);
    let q = v["pendingQuestion"].clone();
    std::fs::remove_dir_all(&fail_dir).unwrap();
    std::fs::write(&fail_dir, b"in the way").unwrap();
    script_ok(&env, &["--operation", "decide", "--operation-id", "rec-fail", "--question-id", q["questionId"].as_str().unwrap(), "--revision", &q["revision"].to_string(), "--decision", "true"]);
    let v = wait_status(&env, "rec-fail", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    let code = v["recording"]["error"]["code"].clone();
    assert!(code.is_string(), "the latched recording error is visible: {v}");
    let res = script_ok(&env, &["--operation", "result", "--operation-id", "rec-fail"])["result"].clone();
    assert_eq!(res["second"], json!([false, code, true]), "the call whose recording failed: {res}");
    assert_eq!(res["third"], json!([false, code, false]), "later calls are refused: {res}");
    let all = script_ok(&env, &["--operation", "status", "--operation-id", "rec-fail", "--event-limit", "1000"]);
    assert!(all["events"].as_array().unwrap().iter().any(|e| e["type"] == json!("recording_failed")), "{all}");
    println!("recording latch: {code}");
    no_children(&env);
}

// ------------------------------------------------------------------ assertions

const ASSERT_JS: &str = r#"
exports.main = async (ctx) => {
  const sleep = (tag, ms = 0) => ctx.call('fixture-sleep', { durationMs: ms, lane: 'assert', tag });
  const v = async (a) => { const r = await ctx.assert(a); return [r.verdict, r.reason]; };
  const one = await sleep('one');
  const two = await sleep('two');
  const e = two.evidence;
  const out = {
    current: await v({ name: 'current', condition: true, evidence: e }),
    currentFalse: await v({ name: 'false', condition: false, evidence: e }),
    required: await v({ name: 'required', condition: true, evidence: e, requiredEvidence: ['fixture-sleep'] }),
    requiredMissing: await v({ name: 'missing', condition: true, evidence: e, requiredEvidence: ['web-dom'] }),
    lowerCoverage: await v({ name: 'partial ok', condition: true, evidence: e, requireCoverage: false }),
    preMutation: await v({ name: 'pre', condition: true, evidence: one.evidence }),
    edited: await v({ name: 'edited', condition: true, evidence: { ...e, resultSha256: '0'.repeat(64) } }),
    extraField: await v({ name: 'extra', condition: true, evidence: { ...e, note: 'x' } }),
    forged: await v({ name: 'forged', condition: true, evidence: { ...e, callId: 'call-999' } }),
    foreign: await v({ name: 'foreign', condition: true, evidence: ctx.inputs.foreign }),
    notObject: await v({ name: 'string', condition: true, evidence: 'trust me' }),
    notBoolean: await v({ name: 'nb', condition: 1, evidence: e }),
    none: await v({ name: 'none', condition: true, scope: 'device' }),
    code: await v({ name: 'code', condition: true }),
  };
  const inflight = sleep('slow', 1500);
  await new Promise((r) => setTimeout(r, 300));
  out.inFlight = await v({ name: 'inflight', condition: true, evidence: e });
  await inflight;
  out.afterInFlight = await v({ name: 'after', condition: true, evidence: e });
  return { evidence: e, verdicts: out };
};
"#;

#[test]
fn script_assertions_accept_only_unchanged_current_host_evidence() {
    let env = TestEnv::new();
    env.install_fixtures();
    let target = json!({"platform": "fixture", "screen": "as-screen"});
    start(&env, "assert-a", &spec("javascript", ASSERT_JS, json!({"target": target, "inputs": {"foreign": null}})));
    assert_eq!(wait_status(&env, "assert-a", &[])["status"], json!("completed"));
    let first = script_ok(&env, &["--operation", "result", "--operation-id", "assert-a"])["result"].clone();
    // The same program in a second operation, given the first one's (unchanged) evidence.
    start(&env, "assert-b", &spec("javascript", ASSERT_JS, json!({"target": target, "inputs": {"foreign": first["evidence"]}})));
    let v = wait_status(&env, "assert-b", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    let r = script_ok(&env, &["--operation", "result", "--operation-id", "assert-b"])["result"]["verdicts"].clone();
    let expect = json!({
        "current": ["passed", null], "currentFalse": ["failed", null],
        "required": ["passed", null], "requiredMissing": ["inconclusive", "required_evidence_missing"],
        "lowerCoverage": ["inconclusive", "coverage_requirement_unsupported"],
        "preMutation": ["inconclusive", "evidence_outside_action_window"],
        "edited": ["inconclusive", "evidence_modified"], "extraField": ["inconclusive", "evidence_modified"],
        "forged": ["inconclusive", "evidence_not_issued"], "foreign": ["inconclusive", "evidence_foreign"],
        "notObject": ["inconclusive", "evidence_not_issued"], "notBoolean": ["inconclusive", "condition_not_boolean"],
        "none": ["inconclusive", "evidence_required"], "code": ["passed", null],
        "inFlight": ["inconclusive", "mutation_in_flight"], "afterInFlight": ["inconclusive", "evidence_outside_action_window"],
    });
    assert_eq!(r, expect);
    no_children(&env);
}

// ------------------------------------------------------------------ device ownership

/// `device-ownership --operation status --serial SERIAL` → its value.
fn device_status(env: &TestEnv, serial: &str) -> Value {
    let run = env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
    env.expect_ok(&run, "device-ownership status")["value"].clone()
}

/// A script-held sleep on `device`; `ctx.call` outcome is returned when the script survives.
fn sleep_script(device: &str, duration_ms: u64, dispatch_first: bool) -> String {
    format!(
        "exports.main = async (ctx) => {{ const r = await ctx.call('fixture-sleep', {{ durationMs: {duration_ms}, dispatchFirst: {dispatch_first}, device: '{device}', tag: '{device}' }}); return [r.ok, r.error && r.error.code, r.dispatched, r.ambiguous]; }};"
    )
}

#[test]
fn script_device_is_released_or_stays_unresolved() {
    let env = TestEnv::new();
    env.install_fixtures();
    let target = json!({"platform": "fixture", "screen": "dev-screen"});

    // (a) A completed mutation releases the device with a settlement.
    start(&env, "dev-a", &spec("javascript", &sleep_script("script-dev-a", 10, false), json!({"target": target})));
    let v = wait_status(&env, "dev-a", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}\n{}", env.report(None));
    let res = script_ok(&env, &["--operation", "result", "--operation-id", "dev-a"])["result"].clone();
    assert_eq!(res, json!([true, null, true, false]), "{res}");
    let st = device_status(&env, "script-dev-a");
    assert_eq!(st["phase"], json!("idle"), "{st}");
    assert!(!st.pointer("/ownership/lastSettlement").unwrap_or(&Value::Null).is_null(), "a settled device keeps its lastSettlement: {st}");
    println!("script-dev-a after a completed call: {st}");
    no_children(&env);

    // (b) The script times out while its mutation is dispatched: the outcome is unknown.
    // (c) The same before the dispatch mark: known not dispatched, the device is released.
    for (id, device, dispatch_first, phase) in [("dev-b", "script-dev-b", true, "unresolved"), ("dev-c", "script-dev-c", false, "idle")] {
        let t0 = Instant::now();
        start(&env, id, &spec("javascript", &sleep_script(device, 600_000, dispatch_first), json!({"target": target, "policy": {"timeoutMs": 1500}})));
        let v = wait_status(&env, id, &[]);
        println!("{id}: ended {} after {} ms: {v}", v["status"], t0.elapsed().as_millis());
        assert_eq!((&v["status"], &v["error"]), (&json!("failed"), &json!("timeout")), "{id}: {v}\n{}", env.report(None));
        assert_eq!(v["ambiguous"], json!(dispatch_first), "{id}: the operation knows whether its mutation is unresolved: {v}");
        no_children(&env);
        // The host's call may settle the journal a moment after the script ended.
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = loop {
            let st = device_status(&env, device);
            if st["phase"] != json!("busy") && st["phase"] != json!("pending") || Instant::now() > deadline {
                break st;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        println!("{device} after the script timeout: {st}");
        assert_eq!(st["phase"], json!(phase), "{id}: {st}\n{}", env.report(None));
        let run = env.aab(&["fixture-sleep", "--duration-ms", "0", "--device", device]);
        let body = env.json_of(&run);
        if phase == "unresolved" {
            assert_eq!(aab_e2e::error_code(&body), Some("device_ownership_unresolved"), "{body}");
        } else {
            assert_eq!(body.pointer("/execution/ok"), Some(&json!(true)), "{body}");
        }
    }
    no_children(&env);
}

// ------------------------------------------------------------------ throughput

const JS_ECHO_RATE: &str = "exports.main = async (ctx) => { const t0 = Date.now(); for (let i = 0; i < 300; i++) { const r = await ctx.call('fixture-echo', {message: 'm' + i}); if (!r.ok) throw new Error(JSON.stringify(r.error)); } return {n: 300, ms: Date.now() - t0}; };";
const PY_ECHO_RATE: &str = "import time\ndef main(ctx):\n    t0 = time.time()\n    for i in range(300):\n        r = ctx.call('fixture-echo', {'message': 'm%d' % i})\n        if not r['ok']:\n            raise RuntimeError(str(r['error']))\n    return {'n': 300, 'ms': int((time.time() - t0) * 1000)}\n";

#[test]
fn script_call_throughput_on_fixture_echo() {
    let env = TestEnv::new();
    env.install_fixtures();
    env.aab_ok(&["runtime", "--operation", "status"]); // starts the runtime
    for (language, source) in [("javascript", JS_ECHO_RATE), ("python", PY_ECHO_RATE)] {
        let id = format!("echo-rate-{language}");
        let t0 = Instant::now();
        start(&env, &id, &spec(language, source, json!({"policy": {"timeoutMs": 120000}})));
        let v = wait_status(&env, &id, &[]);
        let wall = t0.elapsed().as_millis();
        assert_eq!(v["status"], json!("completed"), "{language}: {v}\n{}", env.report(None));
        let r = script_ok(&env, &["--operation", "result", "--operation-id", &id])["result"].clone();
        let (n, ms) = (r["n"].as_f64().unwrap_or(0.0), r["ms"].as_f64().unwrap_or(1.0).max(1.0));
        println!("script {language}: ctx.call fixture-echo {:.0} calls/s ({n} calls in {ms} ms in-script; {wall} ms start-to-terminal wall clock)", n * 1000.0 / ms);
        no_children(&env);
    }
}

// ------------------------------------------------------------------ issue 10: contract fidelity

/// A rejection before anything ran: one JSON reply, exit 1, `failureStage:"validation"`.
#[track_caller]
fn rejected(env: &TestEnv, args: &[&str], code: &str, field: &str) -> Value {
    let mut argv = vec!["script"];
    argv.extend_from_slice(args);
    let run = env.aab(&argv);
    let body = env.json_of(&run);
    env.check(run.exit() == 1, &run, "a rejected script request exits 1");
    env.check(body.get("failureStage") == Some(&json!("validation")), &run, "failureStage must be `validation`");
    env.check(body.pointer("/execution/error") == Some(&json!(code)), &run, &format!("expected error `{code}`"));
    env.check(body.pointer("/execution/field") == Some(&json!(field)), &run, &format!("expected field `{field}`"));
    env.check(body.pointer("/execution/dispatched") == Some(&json!(false)), &run, "nothing dispatched");
    body
}

#[test]
fn script_operations_accept_only_their_own_fields_and_strict_targets() {
    let env = TestEnv::new();
    // The script target schema is built from these plugins' declared targets.
    env.install_fixtures();
    env.install_plugin("aab_plugin_web", "web");
    let js = spec("javascript", "exports.main = async () => 1;", json!({}));
    let js_text = js.to_string();
    // Every operation given a field of another operation is refused, naming the field.
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--operation", "status", "--operation-id", "x", "--script", &js_text], "script"),
        (vec!["--operation", "status", "--operation-id", "x", "--wait-ms", "10"], "waitMs"),
        (vec!["--operation", "wait", "--operation-id", "x", "--recording-dir", "d"], "recordingDir"),
        (vec!["--operation", "result", "--operation-id", "x", "--after-sequence", "0"], "afterSequence"),
        (vec!["--operation", "pause", "--operation-id", "x", "--decision", "true"], "decision"),
        (vec!["--operation", "cancel", "--operation-id", "x", "--python-path", "python3"], "pythonPath"),
        (vec!["--operation", "resume", "--operation-id", "x", "--question-id", "q"], "questionId"),
        (vec!["--operation", "decide", "--operation-id", "x", "--revision", "1", "--decision", "1", "--script", &js_text], "script"),
        (vec!["--operation", "runtime-status", "--operation-id", "x"], "operationId"),
        (vec!["--operation", "start", "--script", &js_text, "--event-limit", "5"], "eventLimit"),
    ];
    for (args, field) in &cases {
        let body = rejected(&env, args, "unsupported_argument", field);
        println!("{:?} → {}", args.iter().take(2).collect::<Vec<_>>(), body["execution"]["message"]);
    }
    // The same through MCP.
    let mut mcp = env.mcp();
    let (body, is_error) = mcp.call_tool("run", json!({"command": "script", "arguments": {"operation": "status", "operationId": "x", "script": js}, "extract": null}));
    assert!(is_error, "{body}");
    assert_eq!((&body["execution"]["error"], &body["execution"]["field"], &body["failureStage"]), (&json!("unsupported_argument"), &json!("script"), &json!("validation")), "{body}");
    drop(mcp);

    // pythonPath on a JavaScript script: rejected at validation, before anything exists.
    rejected(&env, &["--operation", "start", "--operation-id", "py-path", "--python-path", "python3", "--script", &js_text], "unsupported_argument", "pythonPath");

    // Script target fields: only those of the target's platform.
    let web = json!({"platform": "web", "sessionId": "s1", "runtimeEpoch": "e1"});
    let with_target = |extra: Value| {
        let mut t = web.clone();
        for (k, v) in extra.as_object().unwrap() {
            t[k] = v.clone();
        }
        spec("javascript", "exports.main = async () => 1;", json!({"target": t})).to_string()
    };
    rejected(&env, &["--operation", "start", "--operation-id", "t-foo", "--script", &with_target(json!({"foo": 1}))], "unsupported_argument", "script.target.foo");
    rejected(&env, &["--operation", "start", "--operation-id", "t-webview", "--script", &with_target(json!({"webViewId": "w1"}))], "unsupported_argument", "script.target.webViewId");
    rejected(&env, &["--operation", "start", "--operation-id", "t-serial", "--script", &with_target(json!({"serial": "emulator-5554"}))], "unsupported_argument", "script.target.serial");
    rejected(&env, &["--operation", "start", "--operation-id", "t-platform", "--script", &with_target(json!({"platform": "desktop"}))], "invalid_argument", "script.target.platform");
    rejected(&env, &["--operation", "start", "--operation-id", "t-missing", "--script", &spec("javascript", "exports.main = async () => 1;", json!({"target": {"platform": "web", "sessionId": "s1"}})).to_string()], "missing_argument", "script.target.runtimeEpoch");
    // Nothing was created by any of them.
    for id in ["py-path", "t-foo", "t-webview", "t-serial", "t-platform", "t-missing"] {
        let v = script(&env, &["--operation", "status", "--operation-id", id]);
        assert_eq!(v.pointer("/execution/error"), Some(&json!("unknown_operation")), "{id}: {v}");
    }
    // Supported fields still start: a web target with targetId, a fixture target
    // (both declared by their plugins' manifests).
    start(&env, "t-web", &spec("javascript", "exports.main = async () => 1;", json!({"target": {"platform": "web", "sessionId": "s1", "runtimeEpoch": "e1", "targetId": "main"}})));
    start(&env, "t-fixture", &spec("javascript", "exports.main = async () => 1;", json!({"target": {"platform": "fixture", "screen": "s1"}})));
    rejected(&env, &["--operation", "start", "--operation-id", "t-fixture-extra", "--script", &spec("javascript", "exports.main = async () => 1;", json!({"target": {"platform": "fixture", "screen": "s1", "sessionId": "s1"}})).to_string()], "unsupported_argument", "script.target.sessionId");
    for id in ["t-web", "t-fixture"] {
        assert_eq!(wait_status(&env, id, &[])["status"], json!("completed"), "{id}");
    }
    // `resume --script` re-runs only a lost operation: given for a live one it is refused, not ignored.
    let live = script(&env, &["--operation", "resume", "--operation-id", "t-web", "--script", &js_text]);
    assert_eq!((live.pointer("/execution/error"), live.pointer("/execution/field")), (Some(&json!("unsupported_argument")), Some(&json!("script"))), "{live}");
    no_children(&env);
}

#[test]
fn script_checkpoint_that_could_not_be_persisted_leaves_an_event() {
    let env = TestEnv::new();
    // 9 MiB of state fits policy.maxOutputBytes but not one FactStore record (8 MiB):
    // the store refuses the write.
    let source = "exports.main = async (ctx) => { const k = await ctx.checkpoint('big', { pad: 'x'.repeat(9 * 1024 * 1024) }); const ok = await ctx.checkpoint('small', { n: 1 }); return { big: k, small: ok.persisted }; };";
    start(&env, "ckpt-fail", &spec("javascript", source, json!({"policy": {"maxOutputBytes": 16 * 1024 * 1024}})));
    let v = wait_status(&env, "ckpt-fail", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}");
    let res = script_ok(&env, &["--operation", "result", "--operation-id", "ckpt-fail"])["result"].clone();
    assert_eq!(res["big"]["persisted"], json!(false), "{res}");
    assert_eq!(res["small"], json!(true), "{res}");
    let code = res["big"]["error"].clone();
    assert!(code.is_string(), "{res}");
    let all = script_ok(&env, &["--operation", "status", "--operation-id", "ckpt-fail", "--event-limit", "1000"]);
    let events = all["events"].as_array().unwrap();
    let failed: Vec<&Value> = events.iter().filter(|e| e["type"] == json!("checkpoint_failed")).collect();
    assert_eq!(failed.len(), 1, "{all}");
    assert_eq!((&failed[0]["name"], &failed[0]["error"]), (&json!("big"), &code), "{all}");
    assert!(failed[0]["message"].as_str().is_some_and(|m| !m.is_empty()), "{all}");
    println!("checkpoint_failed event: {}", failed[0]);
    // The persisted one has its own event, and the ledger holds both.
    assert!(events.iter().any(|e| e["type"] == json!("checkpoint") && e["name"] == json!("small")), "{all}");
    let kinds: Vec<&Value> = all["history"]["items"].as_array().unwrap().iter().map(|i| &i["kind"]).collect();
    assert!(kinds.contains(&&json!("checkpoint_failed")) && kinds.contains(&&json!("checkpoint")), "{all}");
    no_children(&env);
}

#[test]
fn script_children_exit_when_the_runtime_is_killed() {
    let env = TestEnv::new();
    // Synchronous loops: the programs never yield to their SDK's event loop.
    start(&env, "spin-js", &spec("javascript", "exports.main = () => { while (true) {} };", json!({})));
    start(&env, "spin-py", &spec("python", "def main(ctx):\n    while True:\n        pass\n", json!({})));
    let mut pids = Vec::new();
    for id in ["spin-js", "spin-py"] {
        wait_event(&env, id, "child_started");
        let all = script_ok(&env, &["--operation", "status", "--operation-id", id, "--event-limit", "1000"]);
        let pid = all["events"].as_array().unwrap().iter().find(|e| e["type"] == json!("child_started")).and_then(|e| e["pid"].as_i64()).expect("child pid");
        pids.push(pid as i32);
    }
    // The children are running (and spinning) before the runtime dies.
    assert!(pids.iter().all(|p| env.live_processes().contains(p)), "children should be alive: {pids:?}");
    let runtime = env.runtime_pid().expect("runtime pid");
    // SAFETY: the test's own runtime daemon.
    unsafe {
        libc::kill(runtime, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let live = env.live_processes();
        let left: Vec<&i32> = pids.iter().filter(|p| live.contains(p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "script children outlived the killed runtime: {left:?}\n{}", env.report(None));
        std::thread::sleep(Duration::from_millis(100));
    }
    no_children(&env);
}

const LEDGER_JS: &str = r#"
exports.main = async (ctx) => {
  for (let i = 0; i < 5; i++) {
    const r = await ctx.call('fixture-echo', { message: 'm' + i });
    if (!r.ok) throw new Error(JSON.stringify(r.error));
  }
  const m = await ctx.call('fixture-sleep', { durationMs: 0, lane: 'ledger', tag: 'one' });
  if (!m.ok) throw new Error(JSON.stringify(m.error));
  // A control point per event: the host consumes every frame before the next (no backlog).
  for (let i = 0; i < ctx.inputs.progress; i++) { ctx.progress({ i }); await ctx.controlPoint(); }
  return m.execution.actionId;
};
"#;

/// Every history item after `after`, page by page of `limit`, following `lastSequence`.
fn history_pages(env: &TestEnv, id: &str, limit: usize) -> (Vec<Value>, usize) {
    let (mut items, mut pages, mut after) = (Vec::new(), 0, 0u64);
    loop {
        let v = script_ok(env, &["--operation", "status", "--operation-id", id, "--after-sequence", &after.to_string(), "--limit", &limit.to_string()]);
        let h = &v["history"];
        let page = h["items"].as_array().unwrap();
        assert!(page.len() <= limit, "{h}");
        items.extend(page.iter().cloned());
        pages += 1;
        let last = h["lastSequence"].as_u64().unwrap();
        if h["hasMore"] != json!(true) {
            return (items, pages);
        }
        assert!(last > after, "the cursor moves: {h}");
        after = last;
    }
}

#[test]
fn script_history_pages_the_execution_ledger_with_honest_cursors() {
    let env = TestEnv::new();
    env.install_fixtures();
    let target = json!({"platform": "fixture", "screen": "ledger-screen"});
    start(&env, "ledger", &spec("javascript", LEDGER_JS, json!({"target": target, "inputs": {"progress": 3}})));
    assert_eq!(wait_status(&env, "ledger", &[])["status"], json!("completed"));
    let action_id = script_ok(&env, &["--operation", "result", "--operation-id", "ledger"])["result"].clone();

    // One big page and pages of 2 give the same items, in order, without repeats.
    let all = script_ok(&env, &["--operation", "status", "--operation-id", "ledger", "--limit", "1000", "--event-limit", "1000"]);
    let whole = all["history"]["items"].as_array().unwrap().clone();
    assert_eq!(all["history"]["hasMore"], json!(false), "{all}");
    assert_eq!(all["history"]["gap"], json!(false), "{all}");
    assert_eq!(all["history"]["lastSequence"], whole.last().unwrap()["sequence"], "{all}");
    let (paged, pages) = history_pages(&env, "ledger", 2);
    assert_eq!(paged, whole, "paging by lastSequence loses and repeats nothing");
    assert!(pages >= whole.len() / 2, "{pages} pages");
    let seqs: Vec<u64> = whole.iter().map(|i| i["sequence"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // Items are execution facts; each ctx.call has one completion record.
    for item in &whole {
        assert_eq!((&item["schemaVersion"], &item["executionId"], &item["target"]), (&json!("aab.execution-fact/v1"), &json!("ledger"), &target), "{item}");
    }
    let calls: Vec<&Value> = whole.iter().filter(|i| i["kind"] == json!("call_completed")).collect();
    assert_eq!(calls.len(), 6, "{whole:?}");
    for (n, c) in calls.iter().enumerate() {
        assert_eq!(c["payloadSummary"]["callId"], json!(format!("call-{}", n + 1)), "{c}");
        assert!(c["timings"]["durationMs"].is_u64() && c["timings"]["startedAtMs"].is_u64(), "{c}");
    }
    let mutation = calls[5];
    assert_eq!((&mutation["payloadSummary"]["command"], &mutation["actionId"], &mutation["payloadSummary"]["dispatched"]), (&json!("fixture-sleep"), &action_id, &json!(true)), "{mutation}");
    assert_eq!(mutation["evidenceRefs"].as_array().map(Vec::len), Some(2), "dispatch marker and action receipt: {mutation}");

    // Events: a cut page's eventSequence is its last event, so continuing loses nothing.
    let events_all: Vec<Value> = all["events"].as_array().unwrap().clone();
    let (mut got, mut after) = (Vec::new(), 0u64);
    loop {
        let v = script_ok(&env, &["--operation", "status", "--operation-id", "ledger", "--after-sequence", &after.to_string(), "--event-limit", "3"]);
        let page = v["events"].as_array().unwrap();
        got.extend(page.iter().cloned());
        let cursor = v["eventSequence"].as_u64().unwrap();
        if v["eventsHasMore"] != json!(true) {
            assert_eq!(cursor, v["latestEventSequence"].as_u64().unwrap(), "{v}");
            break;
        }
        assert_eq!(Some(cursor), page.last().and_then(|e| e["sequence"].as_u64()), "{v}");
        after = cursor;
    }
    assert_eq!(got, events_all);

    // More than 256 events: the oldest ledger items are evicted and a page from before them says so.
    start(&env, "ledger-big", &spec("javascript", LEDGER_JS, json!({"target": target, "inputs": {"progress": 300}})));
    assert_eq!(wait_status(&env, "ledger-big", &[])["status"], json!("completed"));
    let v = script_ok(&env, &["--operation", "status", "--operation-id", "ledger-big", "--limit", "1000"]);
    let latest = v["latestEventSequence"].as_u64().unwrap();
    assert_eq!(v["history"]["gap"], json!(true), "{}", v["history"]["lastSequence"]);
    assert_eq!(v["history"]["items"].as_array().unwrap().len(), 256);
    assert_eq!(v["history"]["lastSequence"], json!(latest));
    let recent = script_ok(&env, &["--operation", "status", "--operation-id", "ledger-big", "--after-sequence", &(latest - 10).to_string()]);
    assert_eq!((&recent["history"]["gap"], recent["history"]["items"].as_array().map(Vec::len)), (&json!(false), Some(10)), "{}", recent["history"]);
    // Nothing newer: an empty page whose cursor stays at the latest item.
    let none = script_ok(&env, &["--operation", "status", "--operation-id", "ledger-big", "--after-sequence", &latest.to_string()]);
    assert_eq!(none["history"], json!({"items": [], "lastSequence": latest, "hasMore": false, "gap": false}));
    no_children(&env);
}

const CAPTURE_JS: &str = r#"
function expected(dom, c) {
  const element = {};
  for (const k of ['elementId', 'tag', 'id', 'name', 'type', 'role', 'ariaLabel', 'placeholder', 'href', 'text']) element[k] = c[k] === undefined ? null : c[k];
  return { pageRef: dom.result.pageRef, element };
}
exports.main = async (ctx) => {
  const must = (r, what) => { if (!r.ok) throw new Error(what + ': ' + JSON.stringify(r.error)); return r; };
  const v = async (name, evidence, extra = {}) => { const r = await ctx.assert({ name, condition: true, evidence, ...extra }); return [r.verdict, r.reason]; };
  const before = must(await ctx.call('web-logs', {}), 'before');
  const dom = must(await ctx.call('web-dom', {}), 'dom');
  const terms = dom.result.dom.controls.find((c) => c.id === 'terms');
  must(await ctx.call('web-click', { selector: { elementId: terms.elementId }, expectedTarget: expected(dom, terms) }), 'click');
  const moved = must(await ctx.call('web-logs', {}), 'moved');
  const window = must(await ctx.call('web-logs', { factCursor: before.result.watermarkCursor }), 'window');
  const late = must(await ctx.call('web-logs', { factCursor: moved.result.watermarkCursor }), 'late');
  const history = must(await ctx.call('web-logs', { view: 'connected-history' }), 'history');
  return {
    coverage: [before, moved, window, late, history].map((r) => r.evidence.coverage.status),
    capture: window.evidence.capture,
    verdicts: {
      window: await v('window', window.evidence),
      windowStream: await v('window stream', window.evidence, { requiredEvidence: ['logs'] }),
      windowOtherStream: await v('other stream', window.evidence, { requiredEvidence: ['network'] }),
      noLowerWatermark: await v('no lower', moved.evidence),
      watermarkMoved: await v('moved', late.evidence),
      partialCoverage: await v('history', history.evidence),
      preAction: await v('pre', before.evidence),
    },
  };
};
"#;

#[test]
fn script_capture_assertions_check_watermarks_and_coverage() {
    let mut web = SampleWeb::start();
    let page = web.open_connected("form.html", None);
    let env = &web.env;
    let target = json!({"platform": "web", "sessionId": page.session_id, "runtimeEpoch": page.runtime_epoch});
    start(env, "capture", &spec("javascript", CAPTURE_JS, json!({"target": target})));
    let v = wait_status(env, "capture", &[]);
    assert_eq!(v["status"], json!("completed"), "{v}\n{}", env.report(None));
    let r = script_ok(env, &["--operation", "result", "--operation-id", "capture"])["result"].clone();
    println!("capture evidence: {}", r["capture"]);
    assert_eq!(r["coverage"], json!(["complete", "complete", "complete", "complete", "partial"]), "{r}");
    assert!(r["capture"]["watermarkCursor"].as_str().is_some_and(|w| w.starts_with("wc1:")), "{r}");
    assert_eq!(r["capture"]["stream"], json!("logs"), "{r}");
    assert_eq!(
        r["verdicts"],
        json!({
            "window": ["passed", null],
            "windowStream": ["passed", null],
            "windowOtherStream": ["inconclusive", "required_evidence_missing"],
            "noLowerWatermark": ["inconclusive", "capture_watermark_missing"],
            "watermarkMoved": ["inconclusive", "capture_watermark_not_pre_action"],
            "partialCoverage": ["inconclusive", "coverage_incomplete"],
            "preAction": ["inconclusive", "evidence_outside_action_window"],
        }),
        "{r}"
    );
    web.chrome.close(&page.tab);
    no_children(&web.env);
}
