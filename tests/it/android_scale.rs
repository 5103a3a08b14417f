//! Android at scale, through the public CLI and MCP against ONE simulator with four
//! phones behind one real adb server: several clients (separate `aab` processes and
//! an MCP session) act on all phones at once, and a second runtime sharing the device
//! ownership directory contends for a phone held mid-action. The simulator's ground
//! truth decides (its `tap` records, per phone, in the order they happened); the
//! control op `hold` keeps one phone's action in hand for as long as a test needs,
//! so "does not wait" is shown by ordering, never by a clock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aab_e2e::{Run, TestEnv, error_facts, flags};
use serde_json::{Value, json};

use crate::android::{SAMPLE, World, control};

/// Taps land here: inside the sample app's window, below its controls, so a tap
/// changes nothing but is recorded with its coordinates.
const TAP_Y: i64 = 1300;

/// The simulator with `n` devices, all connected to this world's adb server.
fn simulated_many(w: &World, n: usize) -> aab_android_sim::Simulator {
    let opts = aab_android_sim::Options { ports: vec![0; n], ..Default::default() };
    let sim = w.rt.block_on(aab_android_sim::Simulator::start(opts)).expect("start the simulator (root, adb, busybox-static)");
    for d in &sim.devices {
        let said = w.adb(&["connect", &d.serial]);
        assert!(said.contains("connected to"), "{said}");
    }
    for d in &sim.devices {
        w.wait_online(&d.serial);
    }
    sim
}

/// An app-scope tap whose x coordinate identifies the action (client and sequence).
fn tap(serial: &str, x: i64) -> Value {
    json!({"serial": serial, "packageName": SAMPLE, "scope": "app", "tapX": x, "tapY": TAP_Y})
}

/// The x coordinates of the taps that really happened on `serial`, in order.
fn taps_on(w: &World, sim: &aab_android_sim::Simulator, serial: &str) -> Vec<i64> {
    let items = control(w, sim, json!({"op": "truth", "serial": serial, "kind": "tap"}))["items"].as_array().cloned().unwrap_or_default();
    items.iter().map(|r| r["data"]["x"].as_i64().unwrap()).collect()
}

fn held_count(w: &World, sim: &aab_android_sim::Simulator, serial: &str) -> usize {
    control(w, sim, json!({"op": "truth", "serial": serial, "kind": "held"}))["items"].as_array().map_or(0, Vec::len)
}

/// Waits until `serial` holds `n` replies in hand (the actions are on the phone).
fn wait_held(w: &World, sim: &aab_android_sim::Simulator, serial: &str, n: usize) {
    let until = Instant::now() + Duration::from_secs(30);
    while held_count(w, sim, serial) < n {
        assert!(Instant::now() < until, "{serial}: the action never reached the phone");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `aab tap …` in its own process.
fn cli(env: &TestEnv, command: &str, args: &Value) -> (Value, Run) {
    let mut argv = vec![command.to_string()];
    argv.extend(flags(args));
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = env.aab(&refs);
    let body = env.json_of(&run);
    (body, run)
}

#[track_caller]
fn cli_ok(env: &TestEnv, command: &str, args: &Value) -> Value {
    let (body, run) = cli(env, command, args);
    env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("{command} {args} should succeed"));
    body
}

/// Clients on parallel lanes: CLI clients 1 and 2 run one `aab` process per action
/// (one thread per phone each), client 3 is one MCP session going round the phones.
/// Client c's k-th tap on a phone is at x = 100 + 100·c + k. Returns what each
/// client issued per phone, in issue order.
fn workload(w: &World, serials: &[String], per_phone: i64) -> BTreeMap<String, Vec<i64>> {
    std::thread::scope(|scope| {
        for c in 1..=2 {
            for s in serials {
                scope.spawn(move || {
                    for k in 0..per_phone {
                        cli_ok(&w.env, "tap", &tap(s, 100 + 100 * c + k));
                    }
                });
            }
        }
        scope.spawn(|| {
            let mut mcp = w.env.mcp();
            for k in 0..per_phone {
                for s in serials {
                    let (body, is_error) = mcp.call_tool("run", json!({"command": "tap", "arguments": tap(s, 400 + k), "extract": null}));
                    assert!(!is_error && body["execution"]["ok"] == json!(true), "MCP tap on {s}: {body}");
                }
            }
        });
    });
    serials.iter().map(|s| (s.clone(), (1..=3).flat_map(|c| (0..per_phone).map(move |k| 100 + 100 * c + k)).collect())).collect()
}

/// Every issued tap happened exactly once on its phone, and each client's taps on a
/// phone happened in the order that client issued them.
fn check_once_in_order(w: &World, sim: &aab_android_sim::Simulator, issued: &BTreeMap<String, Vec<i64>>, before: &BTreeMap<String, usize>) {
    for (serial, want) in issued {
        let seen: Vec<i64> = taps_on(w, sim, serial).into_iter().skip(before.get(serial).copied().unwrap_or(0)).collect();
        let (mut a, mut b) = (seen.clone(), want.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "{serial}: every tap exactly once (seen in order: {seen:?})");
        for c in 1..=3 {
            let mine: Vec<i64> = seen.iter().copied().filter(|x| (x - 100) / 100 == c).collect();
            assert!(mine.windows(2).all(|p| p[0] < p[1]), "{serial}: client {c}'s taps out of order: {mine:?}");
        }
    }
}

/// 4 phones × 3 clients (two CLI clients, one MCP session) on parallel lanes: every
/// tap happens once, in order per phone; and while phone 0 holds an action in hand,
/// the other phones' actions all complete (no phone waits on another).
#[test]
fn android_four_phones_three_clients_every_action_once_in_order_and_no_phone_waits() {
    let w = World::new();
    let mut sim = simulated_many(&w, 4);
    let serials: Vec<String> = sim.devices.iter().map(|d| d.serial.clone()).collect();
    w.env.expect_ok(&w.env.aab(&["runtime", "--operation", "start"]), "runtime start");

    // Phone 0 takes a tap and keeps its reply in hand; everything on phones 1–3 runs.
    control(&w, &sim, json!({"op": "hold", "serial": serials[0], "on": true}));
    std::thread::scope(|scope| {
        let held = scope.spawn(|| cli_ok(&w.env, "tap", &json!({"serial": serials[0], "packageName": SAMPLE, "scope": "app", "tapX": 99, "tapY": TAP_Y, "timeoutMs": 120000})));
        wait_held(&w, &sim, &serials[0], 1);
        let issued = workload(&w, &serials[1..], 3);
        check_once_in_order(&w, &sim, &issued, &BTreeMap::new());
        assert!(!held.is_finished(), "phone 0's tap is still in hand: the other phones did not wait on it");
        assert_eq!(taps_on(&w, &sim, &serials[0]), vec![99], "ground truth: phone 0 saw its one tap");
        control(&w, &sim, json!({"op": "hold", "serial": serials[0], "on": false}));
        held.join().unwrap();
    });

    // All four phones at once.
    let before: BTreeMap<String, usize> = serials.iter().map(|s| (s.clone(), taps_on(&w, &sim, s).len())).collect();
    let issued = workload(&w, &serials, 4);
    check_once_in_order(&w, &sim, &issued, &before);
    for s in &serials {
        let journal: Value = serde_json::from_slice(&std::fs::read(w.env.journal_path(s)).unwrap()).unwrap();
        assert_eq!(journal["phase"], json!("idle"), "{s}: nothing left pending: {journal}");
    }
    sim.shutdown();
}

/// A second runtime (its own runtime home and FactStore, the SAME device-ownership
/// directory) asks for a phone the first runtime holds mid-action: refused
/// `target_busy`, never dispatched, and the phone sees only the first runtime's
/// actions. The first runtime's own later requests for that phone wait their turn
/// and run in arrival order once the first action completes.
#[test]
fn android_a_second_runtime_is_refused_a_phone_held_mid_action_and_the_first_runs_its_queue_in_order() {
    let w = World::new();
    let mut sim = simulated_many(&w, 2);
    let serials: Vec<String> = sim.devices.iter().map(|d| d.serial.clone()).collect();
    let serial = serials[0].clone();
    let other = w.env.sibling_sharing_ownership();
    other.install_plugin("aab_plugin_android", "android");
    other.set_env("ANDROID_ADB_SERVER_PORT", w.port.to_string());
    w.env.expect_ok(&w.env.aab(&["runtime", "--operation", "start"]), "first runtime start");
    other.expect_ok(&other.aab(&["runtime", "--operation", "start"]), "second runtime start");
    assert_ne!(w.env.runtime_pid(), other.runtime_pid(), "two runtimes");

    control(&w, &sim, json!({"op": "hold", "serial": serial, "on": true}));
    let env = &w.env;
    std::thread::scope(|scope| {
        let long = |x: i64| json!({"serial": serial, "packageName": SAMPLE, "scope": "app", "tapX": x, "tapY": TAP_Y, "timeoutMs": 120000});
        let first = scope.spawn(move || cli_ok(env, "tap", &long(101)));
        wait_held(&w, &sim, &serial, 1);
        // The first runtime's next requests for the same phone queue behind it (FIFO):
        // started one after another, each given time to reach the runtime's lane.
        let mut queued = Vec::new();
        for x in [102, 103, 104] {
            queued.push(scope.spawn(move || cli_ok(env, "tap", &long(x))));
            std::thread::sleep(Duration::from_millis(400));
        }

        // The second runtime is refused at once, before anything reaches the phone.
        let (body, run) = cli(&other, "tap", &tap(&serial, 201));
        let facts = error_facts(&body).clone();
        other.check(run.exit() != 0 && facts["error"] == json!("target_busy") && facts["dispatched"] == json!(false), &run, "a phone held by another runtime: target_busy, not dispatched");
        // ...while the other phone is free for it.
        cli_ok(&other, "tap", &tap(&serials[1], 202));
        assert_eq!(taps_on(&w, &sim, &serials[1]), vec![202]);
        assert_eq!(taps_on(&w, &sim, &serial), vec![101], "ground truth: only the first action reached the held phone");
        assert!(!first.is_finished() && queued.iter().all(|q| !q.is_finished()), "the first runtime's requests are still waiting");

        control(&w, &sim, json!({"op": "hold", "serial": serial, "on": false}));
        first.join().unwrap();
        for q in queued {
            q.join().unwrap();
        }
    });
    assert_eq!(taps_on(&w, &sim, &serial), vec![101, 102, 103, 104], "ground truth: the first runtime's taps once each, in arrival order; the refused one never");
    // The refusal left the journal alone: the phone is idle and free for the second runtime now.
    cli_ok(&other, "tap", &tap(&serial, 203));
    assert_eq!(taps_on(&w, &sim, &serial), vec![101, 102, 103, 104, 203]);
    other.aab(&["runtime", "--operation", "stop"]);
    sim.shutdown();
}

/// One runtime, both execution paths on the same phones at once: SDK taps (client 1,
/// CLI) and shell-worker key events (client 2, CLI; keyCode 24 changes no screen) on
/// each of four phones. Every request must be served — queued behind the other path's
/// action on that phone, never refused — and each effect happens once, in order.
/// Ignored until the per-serial admission lane is shared by every mutation of a phone:
/// `tap`/`input-text`/… queue on `android-app:<serial>` and the shell-worker commands on
/// `android-device:<serial>`, so a tap and a key event of the SAME runtime race for the
/// ownership lock and the loser is refused `target_busy` instead of waiting its turn.
#[test]
fn android_sdk_taps_and_shell_keys_on_the_same_phones_queue_behind_each_other() {
    let w = World::new();
    let mut sim = simulated_many(&w, 4);
    let serials: Vec<String> = sim.devices.iter().map(|d| d.serial.clone()).collect();
    w.env.expect_ok(&w.env.aab(&["runtime", "--operation", "start"]), "runtime start");
    let per_phone = 4;
    std::thread::scope(|scope| {
        for s in &serials {
            let w = &w;
            scope.spawn(move || {
                for k in 0..per_phone {
                    cli_ok(&w.env, "tap", &tap(s, 200 + k));
                }
            });
            scope.spawn(move || {
                for _ in 0..per_phone {
                    cli_ok(&w.env, "keyevent", &json!({"serial": s, "keyCode": 24}));
                }
            });
        }
    });
    for s in &serials {
        assert_eq!(taps_on(&w, &sim, s), (0..per_phone).map(|k| 200 + k).collect::<Vec<_>>(), "{s}: every tap once, in order");
        let keys = control(&w, &sim, json!({"op": "truth", "serial": s, "kind": "keyevent"}))["items"].as_array().map_or(0, Vec::len);
        assert_eq!(keys, per_phone as usize, "{s}: every key event once");
    }
    sim.shutdown();
}
