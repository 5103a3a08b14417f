//! Torture e2e: `kill -9` of the runtime at random moments while several CLI clients
//! mutate devices on several lanes, checked against the device side's own ground truth.
//!
//! Each round starts a runtime, lets `CLIENTS` concurrent clients (one long-lived
//! `aab mcp` session, the others `aab` CLI processes) send `fixture-sleep` mutations (unique `requestId`s, some sent twice at once, some
//! repeated after their reply) on `LANES` lanes of `DEVICES_PER_LANE` devices each —
//! with a random wait before the dispatch mark (`markAfterMs`) and after it
//! (`durationMs`), so the SIGKILL lands before a pending record, between the pending
//! record and the mark, after the mark, after the effect and after the reply — then
//! SIGKILLs the runtime after a random delay. Ground truth is the fixture's dispatch
//! log (`AAB_FIXTURE_DISPATCH_LOG`: one fsync'd line per mark, written before the
//! host learns of it) and its receipts (`AAB_FIXTURE_RECEIPTS`: one per completed
//! effect). After the kill it restarts, re-issues every request that got no
//! acknowledged reply with the same `requestId`, reconciles, and asserts:
//!
//! 1. no lost acknowledged record — every reply with `ok:true` (or a certain
//!    `dispatched:false`) has its `control.history` record in the FactStore after all
//!    the restarts, every success has exactly one dispatch and its receipt, and a
//!    certain non-dispatch has none;
//! 2. no double dispatch — an action id is dispatched once; a request id is
//!    dispatched once per runtime, and never again while its outcome is unknown (a
//!    re-issue on an unresolved device is refused before dispatch). The contract's
//!    idempotency is process-local ("not a durable exactly-once guarantee"), so a
//!    request whose first action the host *settled* before it died may run again
//!    after the restart; such re-executions are counted and printed, and each must
//!    follow a settled (never unresolved) first action of an earlier runtime;
//! 3. unresolved exactly where the dispatch mark was passed — after the restart a
//!    device is `unresolved` iff its journal kept a pending action (the host cannot
//!    know how far a dead process got; seed: "an unresolved action survives Host
//!    death"); after `reconcile` it stays unresolved iff that action was dispatched
//!    (logged mark) and its effect left no receipt; a pending action that never
//!    reached its mark and one whose effect completed are released.
//!
//! Reproduce a failure with the printed seed: `AAB_TORTURE_SEED=<n>` (and
//! `AAB_TORTURE_ROUNDS=<n>`, default 6). Timing still varies between runs; the seed
//! fixes every random choice of the test itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use aab_e2e::{Mcp, Run, TestEnv, error_code, error_facts, process_alive};
use serde_json::{Value, json};

const DEFAULT_ROUNDS: u64 = 6;
const CLIENTS: usize = 5;
const LANES: usize = 3;
const DEVICES_PER_LANE: usize = 2;
/// Requests per client per round at most (a kill usually ends the round earlier).
const MAX_PER_CLIENT: usize = 10;

// ------------------------------------------------------------------ seeded randomness

/// xorshift64*: tiny, seedable, good enough to pick delays and lanes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // Never the all-zero state; mix the seed so nearby seeds diverge.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

// ------------------------------------------------------------------ requests and replies

#[derive(Clone, Debug)]
struct Req {
    round: u64,
    rid: String,
    lane: String,
    device: String,
    mark_after_ms: u64,
    duration_ms: u64,
    /// The effect completes (receipt) but the reply never comes: the kill is certain
    /// to land between the effect and the settlement of this action.
    lose_reply: bool,
}

impl Req {
    fn run(&self, env: &TestEnv) -> Run {
        let (mark, duration) = (self.mark_after_ms.to_string(), self.duration_ms.to_string());
        let lose = if self.lose_reply { "true" } else { "false" };
        let timeout = self.timeout_ms().to_string();
        env.aab(&[
            "fixture-sleep",
            "--lose-reply",
            lose,
            "--mark-after-ms",
            &mark,
            "--duration-ms",
            &duration,
            "--lane",
            &self.lane,
            "--device",
            &self.device,
            "--tag",
            &self.rid,
            "--request-id",
            &self.rid,
            "--timeout-ms",
            &timeout,
        ])
    }

    /// A lost reply waits for its deadline; a short one bounds how long it can hold
    /// its lane on a runtime a late client started after the kill.
    fn timeout_ms(&self) -> u64 {
        if self.lose_reply { 1000 } else { 30_000 }
    }
}

/// What a reply tells the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ack {
    /// `ok:true`: the effect happened.
    Success,
    /// `ok:false, dispatched:false`: certainly nothing happened.
    NotDispatched,
    /// Anything else (the runtime died under it): the client cannot know.
    Unknown,
}

#[derive(Clone, Debug)]
struct Sent {
    req: Req,
    /// "round" (while the runtime could be killed) or "reissue" (after the restart).
    phase: &'static str,
    body: Value,
    ack: Ack,
    cmdline: String,
}

fn ack_of(body: &Value) -> Ack {
    let facts = error_facts(body);
    if body.pointer("/execution/ok") == Some(&json!(true)) {
        Ack::Success
    } else if facts.get("dispatched") == Some(&json!(false)) && facts.get("ambiguous") != Some(&json!(true)) {
        Ack::NotDispatched
    } else {
        Ack::Unknown
    }
}

impl Sent {
    fn new(env: &TestEnv, req: &Req, phase: &'static str, run: &Run) -> Sent {
        // Even a client whose runtime died under it answers with exactly one JSON line.
        let body = env.json_of(run);
        let ack = ack_of(&body);
        if (ack == Ack::Success) != (run.exit() == 0) {
            env.fail(run, "exit code 0 iff execution.ok:true");
        }
        Sent { req: req.clone(), phase, body, ack, cmdline: run.cmdline.clone() }
    }

    /// The same request through a long-lived `aab mcp` session (`run` tool), whose
    /// pooled runtime connection dies with the runtime.
    fn via_mcp(mcp: &mut Mcp<'_>, req: &Req) -> Sent {
        let arguments = json!({
            "command": "fixture-sleep",
            "arguments": {
                "loseReply": req.lose_reply, "markAfterMs": req.mark_after_ms, "durationMs": req.duration_ms,
                "lane": req.lane, "device": req.device, "tag": req.rid, "requestId": req.rid, "timeoutMs": req.timeout_ms(),
            },
            "extract": null,
        });
        let (body, is_error) = mcp.call_tool("run", arguments.clone());
        let ack = ack_of(&body);
        if (ack == Ack::Success) == is_error {
            mcp.fail(&format!("isError iff not execution.ok:true: {body}"));
        }
        Sent { req: req.clone(), phase: "round", body, ack, cmdline: format!("mcp tools/call run {arguments}") }
    }

    /// The action id a success reports (the plugin's own, also on a reused reply).
    fn value_action(&self) -> Option<&str> {
        self.body.pointer("/value/actionId").and_then(Value::as_str)
    }

    /// The action id of this reply's own history record (a reused reply has its own).
    fn history_action(&self) -> Option<&str> {
        self.body.pointer("/control/history/actionId").and_then(Value::as_str)
    }

    fn describe(&self) -> String {
        format!("[round {} {}] {}\n  -> {}", self.req.round, self.phase, self.cmdline, self.body)
    }
}

/// One line of the fixture's dispatch log.
#[derive(Clone, Debug)]
struct Dispatch {
    action: String,
    rid: Option<String>,
    epoch: String,
    device: String,
}

fn dispatch_log(path: &Path) -> Vec<Dispatch> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    };
    text.lines()
        .map(|l| {
            // One write(2) per line: a SIGKILL cannot tear a line.
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("dispatch log line {l:?} is not JSON: {e}"));
            let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            Dispatch {
                action: s("actionId").expect("actionId in dispatch log"),
                rid: s("requestId"),
                epoch: s("runtimeEpoch").expect("runtimeEpoch in dispatch log"),
                device: s("device").expect("device in dispatch log"),
            }
        })
        .collect()
}

// ------------------------------------------------------------------ host-side views

fn journal_bytes(env: &TestEnv, serial: &str) -> Option<Vec<u8>> {
    std::fs::read(env.journal_path(serial)).ok()
}

/// The action a journal (read right after the SIGKILL) keeps blocking: a pending
/// action past its dispatch mark. One still before its mark never reached the
/// device; the next runtime reads that device idle and settles the record.
fn pending_of(bytes: &Option<Vec<u8>>) -> Option<String> {
    let j: Value = serde_json::from_slice(bytes.as_deref()?).ok()?;
    if j.pointer("/pending/dispatchMark") == Some(&Value::from("pending")) {
        return None;
    }
    j.pointer("/pending/actionId").and_then(Value::as_str).map(str::to_string)
}

/// `device-ownership status` of every device (concurrently) → (phase, reply).
fn phases(env: &TestEnv, devices: &[(String, String)]) -> Vec<(String, Value)> {
    thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .map(|(_, serial)| {
                s.spawn(move || {
                    let run = env.aab(&["device-ownership", "--operation", "status", "--serial", serial]);
                    let body = env.expect_ok(&run, "device-ownership status");
                    let phase = body.pointer("/value/phase").and_then(Value::as_str).unwrap_or_default().to_string();
                    (phase, body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every `control.history` record in the FactStore, by global sequence. Opened
/// read-only beside the live runtime (it takes no writer lock).
fn history_records(env: &TestEnv) -> BTreeMap<u64, Value> {
    let store = aab_facts::FactStore::open_read_only(&env.facts).unwrap_or_else(|e| panic!("open the FactStore read-only: {e:?}"));
    let mut out = BTreeMap::new();
    let mut cursor = aab_facts::Cursor::Start;
    loop {
        let page = store.read(aab_facts::Stream::Action, &cursor, 1000).unwrap_or_else(|e| panic!("read the action stream: {e:?}"));
        assert!(page.gap.is_none(), "history was evicted (gap {:?}): this test's volume must fit the quota", page.gap);
        for r in page.records {
            out.insert(r.sequence, r.record);
        }
        if !page.has_more {
            return out;
        }
        cursor = aab_facts::Cursor::After(page.next_sequence);
    }
}

// ------------------------------------------------------------------ one round

#[derive(Default)]
struct Tally {
    sent: usize,
    success: usize,
    not_dispatched: usize,
    unknown: usize,
    /// Where the kill landed: queued (no pending record) / pending before the mark /
    /// after the mark, effect incomplete / effect done, not settled. (Settled with
    /// the reply lost is counted over all rounds at the end.)
    before_pending: usize,
    pending_before_mark: usize,
    after_mark: usize,
    effect_done_unsettled: usize,
    /// Runtimes a client started after the kill (it raced the SIGKILL).
    late_runtimes: usize,
    reissued: usize,
    reissue_refused: usize,
    left_unresolved: usize,
    recovered_receipt: usize,
    recovered_never_dispatched: usize,
}

/// Everything the final checks need from one round.
struct RoundFacts {
    killed_epoch: String,
    /// Device → pending action id kept in its journal after the kill.
    pending_at_kill: HashMap<String, String>,
}

fn round(env: &TestEnv, round: u64, rng: &mut Rng, log_path: &Path, receipts: &Path, sent_all: &Mutex<Vec<Sent>>, tally: &mut Tally) -> RoundFacts {
    let devices: Vec<(String, String)> = (0..LANES)
        .flat_map(|l| (0..DEVICES_PER_LANE).map(move |d| (format!("t{round}-lane{l}"), format!("t{round}-lane{l}-dev{d}"))))
        .collect();
    let t0 = Instant::now();
    env.aab_ok(&["runtime", "--operation", "start"]);
    let epoch = env.endpoint().and_then(|e| e.get("runtimeId").and_then(Value::as_str).map(str::to_string)).expect("runtimeId");
    let delay = Duration::from_millis(rng.range(40, 700));
    let client_seeds: Vec<u64> = (0..CLIENTS).map(|_| rng.next()).collect();
    let stop = AtomicBool::new(false);
    let sent_round = Mutex::new(Vec::new());

    thread::scope(|s| {
        for (c, seed) in client_seeds.iter().enumerate() {
            let (stop, devices, sent_round) = (&stop, &devices, &sent_round);
            let mut rng = Rng::new(*seed);
            s.spawn(move || {
                // Client 0 is one long-lived MCP session; the others are CLI processes.
                let mut mcp = (c == 0).then(|| env.mcp());
                for n in 0..MAX_PER_CLIENT {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let (lane, device) = devices[rng.range(0, devices.len() as u64 - 1) as usize].clone();
                    let req = Req {
                        round,
                        rid: format!("t{round}-c{c}-{n}"),
                        lane,
                        device,
                        mark_after_ms: if rng.chance(30) { 0 } else { rng.range(1, 60) },
                        duration_ms: rng.range(0, 60),
                        lose_reply: rng.chance(10),
                    };
                    let twice_at_once = rng.chance(15);
                    let again_after = rng.chance(10);
                    if let Some(mcp) = mcp.as_mut() {
                        let mut got = vec![Sent::via_mcp(mcp, &req)];
                        if again_after && !stop.load(Ordering::SeqCst) {
                            got.push(Sent::via_mcp(mcp, &req));
                        }
                        sent_round.lock().unwrap().extend(got);
                        continue;
                    }
                    let mut got = if twice_at_once {
                        thread::scope(|s2| {
                            let a = s2.spawn(|| req.run(env));
                            let b = req.run(env);
                            vec![a.join().unwrap(), b]
                        })
                    } else {
                        vec![req.run(env)]
                    };
                    if again_after && !stop.load(Ordering::SeqCst) {
                        got.push(req.run(env));
                    }
                    let mut out = sent_round.lock().unwrap();
                    out.extend(got.iter().map(|run| Sent::new(env, &req, "round", run)));
                }
                // The MCP session outlives its runtime: once the kill happened, its next
                // call must reach a new runtime (and be judged like any other).
                if let Some(mcp) = mcp.as_mut() {
                    while !stop.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(10));
                    }
                    let (lane, device) = devices[rng.range(0, devices.len() as u64 - 1) as usize].clone();
                    let req = Req { round, rid: format!("t{round}-c{c}-after-kill"), lane, device, mark_after_ms: 0, duration_ms: 0, lose_reply: false };
                    let sent = Sent::via_mcp(mcp, &req);
                    if sent.ack == Ack::Unknown {
                        mcp.fail(&format!("a call sent after the kill must get a definite answer from a new runtime:\n{}", sent.describe()));
                    }
                    sent_round.lock().unwrap().push(sent);
                }
            });
        }
        /// Clients stop even when the kill fails (the scope joins them before it
        /// re-raises the panic; the MCP client waits for this flag).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop = StopOnDrop(&stop);
        thread::sleep(delay);
        env.kill_runtime();
    });
    let round_sent: Vec<Sent> = sent_round.into_inner().unwrap();
    let t_clients = t0.elapsed();

    // Nothing runs now (every client returned); a client that raced the kill may have
    // started a new runtime, which is idle. The journals as the kill left them:
    let at_kill: HashMap<String, Option<Vec<u8>>> = devices.iter().map(|(_, d)| (d.clone(), journal_bytes(env, d))).collect();
    let pending_at_kill: HashMap<String, String> = at_kill.iter().filter_map(|(d, b)| pending_of(b).map(|a| (d.clone(), a))).collect();
    let log = dispatch_log(log_path);
    let logged: HashSet<&str> = log.iter().map(|d| d.action.as_str()).collect();
    let has_receipt = |action: &str| receipts.join(format!("{action}.json")).is_file();
    let acked: HashSet<&str> = round_sent.iter().filter(|s| s.ack == Ack::Success).filter_map(Sent::value_action).collect();

    // Where the kill landed, for the printed tally.
    tally.sent += round_sent.len();
    for s in &round_sent {
        match s.ack {
            Ack::Success => tally.success += 1,
            Ack::NotDispatched => tally.not_dispatched += 1,
            Ack::Unknown => tally.unknown += 1,
        }
    }
    for action in pending_at_kill.values() {
        match (logged.contains(action.as_str()), has_receipt(action)) {
            (false, _) => tally.pending_before_mark += 1,
            (true, false) => tally.after_mark += 1,
            (true, true) => tally.effect_done_unsettled += 1,
        }
    }
    let dispatched_rids: HashSet<&str> = log.iter().filter(|d| d.epoch == epoch).filter_map(|d| d.rid.as_deref()).collect();
    let unacked: Vec<&Sent> = round_sent.iter().filter(|s| s.ack == Ack::Unknown).collect();
    tally.before_pending += unacked.iter().filter(|s| !dispatched_rids.contains(s.req.rid.as_str())).count();

    // The restart: a client that raced the SIGKILL may already have started a new
    // runtime (as happens in practice); otherwise start one. Either way nothing is
    // replayed and every kept pending action is unresolved.
    if env.runtime_pid().is_some_and(process_alive) {
        tally.late_runtimes += 1;
    }
    env.aab_ok(&["runtime", "--operation", "start"]);
    for ((_, device), (phase, body)) in devices.iter().zip(phases(env, &devices)) {
        let expected = if pending_at_kill.contains_key(device) { "unresolved" } else { "idle" };
        assert_eq!(
            phase,
            expected,
            "round {round}: after the restart device `{device}` must be {expected} (journal at kill: {:?}): {body}\n{}",
            at_kill[device].as_deref().map(String::from_utf8_lossy),
            env.report(None)
        );
    }

    // Re-issue every request that got no acknowledged reply, with the same requestId
    // and arguments, all at once: on an unresolved device it must be refused before
    // dispatch; elsewhere it runs (its first copy never dispatched, or was settled).
    let acked_rids: HashSet<&str> = round_sent.iter().filter(|s| s.ack != Ack::Unknown).map(|s| s.req.rid.as_str()).collect();
    let mut reissue: Vec<Req> = Vec::new();
    for s in &unacked {
        // A lost-reply request that ran now would end ambiguous at its deadline and
        // leave a new unresolved device: it is re-issued only where it must be refused.
        let would_run = !pending_at_kill.contains_key(&s.req.device);
        if s.req.lose_reply && would_run {
            continue;
        }
        if !acked_rids.contains(s.req.rid.as_str()) && !reissue.iter().any(|r| r.rid == s.req.rid) {
            reissue.push(s.req.clone());
        }
    }
    let dispatches_of = |rid: &str| dispatch_log(log_path).iter().filter(|d| d.rid.as_deref() == Some(rid)).count();
    let before: HashMap<String, usize> = reissue.iter().map(|r| (r.rid.clone(), dispatches_of(&r.rid))).collect();
    let reissued: Vec<Sent> = thread::scope(|s| {
        let handles: Vec<_> = reissue.iter().map(|req| s.spawn(move || Sent::new(env, req, "reissue", &req.run(env)))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for s in &reissued {
        tally.reissued += 1;
        if pending_at_kill.contains_key(&s.req.device) {
            tally.reissue_refused += 1;
            // Refused before dispatch — or, on a runtime a late client started, the
            // reuse of that runtime's own unknown outcome for this requestId.
            let refused = s.ack == Ack::NotDispatched && error_code(&s.body) == Some("device_ownership_unresolved");
            let reused_unknown = s.ack == Ack::Unknown && s.body.pointer("/control/idempotency/reused") == Some(&json!(true));
            assert!(
                (refused || reused_unknown) && dispatches_of(&s.req.rid) == before[&s.req.rid],
                "round {round}: a re-issue on an unresolved device must not dispatch:\n{}\n{}",
                s.describe(),
                env.report(None)
            );
        } else {
            assert!(s.ack == Ack::Success, "round {round}: a re-issue on an idle device must run:\n{}\n{}", s.describe(), env.report(None));
        }
    }
    // Nothing rewrote an unresolved journal: no restart, refusal or replay touched it.
    for device in pending_at_kill.keys() {
        assert!(
            journal_bytes(env, device) == at_kill[device],
            "round {round}: the unresolved journal of `{device}` changed after the kill\n{}",
            env.report(None)
        );
    }

    // Reconcile: released iff the pending action never reached its mark or its effect
    // completed; unresolved exactly where the mark was passed and the outcome is unknown.
    for (device, action) in &pending_at_kill {
        let dispatched = logged.contains(action.as_str());
        let receipt = has_receipt(action);
        let run = env.aab(&["device-ownership", "--operation", "reconcile", "--serial", device]);
        let body = env.json_of(&run);
        if dispatched && !receipt {
            tally.left_unresolved += 1;
            env.check(
                error_code(&body) == Some("device_ownership_unresolved"),
                &run,
                &format!("round {round}: `{device}`'s action {action} passed its mark without a receipt: reconcile must keep it unresolved"),
            );
            env.check(!acked.contains(action.as_str()), &run, &format!("round {round}: an unresolved action {action} was acknowledged as a success"));
        } else {
            if receipt {
                tally.recovered_receipt += 1;
            } else {
                tally.recovered_never_dispatched += 1;
            }
            env.check(
                run.exit() == 0 && body.pointer("/value/recovered") == Some(&json!(true)),
                &run,
                &format!("round {round}: `{device}`'s action {action} (dispatched {dispatched}, receipt {receipt}) must be recovered by reconcile"),
            );
        }
    }
    for ((_, device), (phase, body)) in devices.iter().zip(phases(env, &devices)) {
        let expected = match pending_at_kill.get(device) {
            Some(action) if logged.contains(action.as_str()) && !has_receipt(action) => "unresolved",
            _ => "idle",
        };
        assert_eq!(phase, expected, "round {round}: after reconcile device `{device}` must be {expected}: {body}\n{}", env.report(None));
    }

    println!("torture: round {round}: kill after {delay:?}, clients done after {t_clients:?}, round done after {:?}", t0.elapsed());
    let mut all = sent_all.lock().unwrap();
    all.extend(round_sent);
    all.extend(reissued);
    RoundFacts { killed_epoch: epoch, pending_at_kill }
}

// ------------------------------------------------------------------ the test

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_record_and_never_double_dispatches() {
    let seed = env_u64("AAB_TORTURE_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    let rounds = env_u64("AAB_TORTURE_ROUNDS").unwrap_or(DEFAULT_ROUNDS).clamp(1, 1000);
    println!("torture: AAB_TORTURE_SEED={seed} AAB_TORTURE_ROUNDS={rounds}");
    let mut rng = Rng::new(seed);

    let env = TestEnv::new();
    env.install_fixtures();
    let receipts = env.root.join("receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    env.set_env("AAB_FIXTURE_RECEIPTS", receipts.display().to_string());
    let log_path = env.root.join("dispatch.log");
    env.set_env("AAB_FIXTURE_DISPATCH_LOG", log_path.display().to_string());

    let started = Instant::now();
    let sent = Mutex::new(Vec::new());
    let mut tally = Tally::default();
    let mut rounds_facts = Vec::new();
    for r in 0..rounds {
        rounds_facts.push(round(&env, r, &mut rng, &log_path, &receipts, &sent, &mut tally));
    }
    let sent = sent.into_inner().unwrap();
    let log = dispatch_log(&log_path);
    let history = history_records(&env);
    let has_receipt = |action: &str| receipts.join(format!("{action}.json")).is_file();

    // Every dispatch belongs to a request of this test.
    let issued: HashMap<&str, &str> = sent.iter().map(|s| (s.req.rid.as_str(), s.req.device.as_str())).collect();
    for d in &log {
        let device = d.rid.as_deref().and_then(|r| issued.get(r));
        assert!(device == Some(&d.device.as_str()), "a dispatch of an unknown request or on another device: {d:?}");
    }

    // (2) An action id is dispatched once, ever.
    let mut by_action: HashMap<&str, usize> = HashMap::new();
    for d in &log {
        *by_action.entry(d.action.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = by_action.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "actions dispatched more than once: {twice:?}\n{}", env.report(None));

    // (2) A request id: once per runtime; a later runtime may run it again only if the
    // earlier action was settled by the host (never left unresolved) — the contract's
    // process-local idempotency. Counted, not hidden.
    let pending_at_kill: HashSet<&str> = rounds_facts.iter().flat_map(|f| f.pending_at_kill.values().map(String::as_str)).collect();
    let killed_epochs: HashSet<&str> = rounds_facts.iter().map(|f| f.killed_epoch.as_str()).collect();
    let mut by_rid: BTreeMap<&str, Vec<&Dispatch>> = BTreeMap::new();
    for d in &log {
        by_rid.entry(d.rid.as_deref().unwrap_or_default()).or_default().push(d);
    }
    let mut reexecuted = Vec::new();
    for (rid, ds) in &by_rid {
        if ds.len() < 2 {
            continue;
        }
        let epochs: HashSet<&str> = ds.iter().map(|d| d.epoch.as_str()).collect();
        assert_eq!(epochs.len(), ds.len(), "request `{rid}` was dispatched twice by one runtime: {ds:?}\n{}", env.report(None));
        for earlier in &ds[..ds.len() - 1] {
            assert!(
                !pending_at_kill.contains(earlier.action.as_str()),
                "request `{rid}` ran again although its earlier action {} was left unresolved: {ds:?}\n{}",
                earlier.action,
                env.report(None)
            );
            assert!(
                killed_epochs.contains(earlier.epoch.as_str()),
                "request `{rid}` ran again after a runtime that was never killed: {ds:?}"
            );
        }
        reexecuted.push(format!("{rid}: {}", ds.iter().map(|d| d.action.as_str()).collect::<Vec<_>>().join(" then ")));
    }

    // (1) Acknowledged replies.
    let dispatched: HashSet<&str> = log.iter().map(|d| d.action.as_str()).collect();
    for s in sent.iter().filter(|s| s.ack != Ack::Unknown) {
        if s.ack == Ack::Success {
            let action = s.value_action().unwrap_or_else(|| panic!("a success without value.actionId:\n{}", s.describe()));
            assert!(dispatched.contains(action), "an acknowledged success whose action never dispatched:\n{}", s.describe());
            assert!(has_receipt(action), "an acknowledged success without the effect's receipt:\n{}", s.describe());
            assert!(!pending_at_kill.contains(action), "an acknowledged success was still pending after the kill:\n{}", s.describe());
            assert_eq!(
                s.body.pointer("/control/history/status"),
                Some(&json!("stored")),
                "an acknowledged success must report its stored history:\n{}",
                s.describe()
            );
        } else if let Some(action) = s.history_action() {
            assert!(!dispatched.contains(action), "a reply said dispatched:false but the device saw action {action}:\n{}", s.describe());
        }
        // A runtime reply has a history record; it must have survived every kill.
        if s.body.pointer("/control/history/status") == Some(&json!("stored")) {
            let seq = s.body.pointer("/control/history/action/globalSeq").and_then(Value::as_u64);
            let record = seq.and_then(|n| history.get(&n));
            let same = record.and_then(|r| r.get("actionId").and_then(Value::as_str)) == s.history_action();
            assert!(same, "lost acknowledged record: history #{seq:?} is {record:?} after the restarts:\n{}", s.describe());
            if s.ack == Ack::Success && s.body.pointer("/control/idempotency/reused") != Some(&json!(true)) {
                let record = record.unwrap();
                assert_eq!(record.get("status"), Some(&json!("completed")), "history of a success: {record}");
                assert_eq!(record.pointer("/args/requestId"), Some(&json!(s.req.rid)), "history of a success: {record}");
            }
        }
    }

    // Nothing of this test keeps running after its runtime is stopped.
    let stop = env.aab(&["runtime", "--operation", "stop"]);
    env.expect_ok(&stop, "final runtime stop");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !env.live_processes().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(env.live_processes().is_empty(), "processes left behind: {:?}\n{}", env.live_processes(), env.report(None));

    println!(
        "torture: seed {seed}, {rounds} rounds in {:?}: {} replies ({} ok, {} not dispatched, {} unknown), {} dispatches, {} history records",
        started.elapsed(),
        tally.sent + tally.reissued,
        tally.success,
        tally.not_dispatched,
        tally.unknown,
        log.len(),
        history.len()
    );
    // Actions of a killed runtime that the host settled but whose success no client saw.
    let acked_success: HashSet<&str> = sent.iter().filter(|s| s.ack == Ack::Success).filter_map(Sent::value_action).collect();
    let settled_reply_lost: Vec<&str> = log
        .iter()
        .filter(|d| killed_epochs.contains(d.epoch.as_str()) && !pending_at_kill.contains(d.action.as_str()) && !acked_success.contains(d.action.as_str()))
        .map(|d| d.action.as_str())
        .collect();
    let historied: HashSet<&str> = history.values().filter_map(|r| r.get("actionId").and_then(Value::as_str)).collect();
    let lost_after_history = settled_reply_lost.iter().filter(|a| historied.contains(*a)).count();
    println!(
        "torture: kills landed — queued/no pending record: {}, pending before the mark: {}, after the mark: {}, effect done but unsettled: {}, settled but reply lost: {} ({} of them after their history record)",
        tally.before_pending,
        tally.pending_before_mark,
        tally.after_mark,
        tally.effect_done_unsettled,
        settled_reply_lost.len(),
        lost_after_history
    );
    println!(
        "torture: late runtimes started by clients after a kill: {}; re-issued {} (refused on unresolved devices: {}); reconcile: {} left unresolved, {} recovered by receipt, {} recovered as never dispatched",
        tally.late_runtimes, tally.reissued, tally.reissue_refused, tally.left_unresolved, tally.recovered_receipt, tally.recovered_never_dispatched
    );
    println!("torture: contract-permitted re-executions after a restart (process-local idempotency): {reexecuted:?}");
}
