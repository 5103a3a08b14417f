//! Trust boundaries of the runtime's loopback listener and its records, tried as a
//! hostile local process and a careless operator would (issue 10, items 1–3, 5, 6
//! and the RPC part of 10). Ground truth is what an impostor listener received,
//! the daemon's own counters and `/proc`, never the client's word alone.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use aab_e2e::runtime_wire::{Conn, PROTOCOL, proof};
use aab_e2e::{TestEnv, error_code, find_key, process_alive, wait_for_exit};
use serde_json::{Value, json};

fn echo(env: &TestEnv, message: &str) -> Value {
    let run = env.aab(&["fixture-echo", "--message", message]);
    let body = env.expect_ok(&run, "fixture-echo");
    env.check(body.pointer("/value/echo") == Some(&json!(message)), &run, &format!("value.echo must be {message:?}"));
    body
}

fn endpoint(env: &TestEnv) -> (u16, String, String, i32) {
    let ep = env.endpoint().unwrap_or_else(|| panic!("no endpoint.json while the runtime should run\n{}", env.report(None)));
    let port = ep["port"].as_u64().and_then(|p| u16::try_from(p).ok()).expect("port");
    let token = ep["token"].as_str().expect("token").to_string();
    let runtime_id = ep["runtimeId"].as_str().expect("runtimeId").to_string();
    let pid = ep["pid"].as_i64().expect("pid") as i32;
    (port, token, runtime_id, pid)
}

fn kill9(env: &TestEnv, pid: i32) {
    // SAFETY: sending a signal to a pid we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_for_exit(pid, Duration::from_secs(15)), "runtime {pid} survived SIGKILL\n{}", env.report(None));
}

fn status(env: &TestEnv) -> Value {
    let run = env.aab(&["runtime", "--operation", "status"]);
    env.expect_ok(&run, "runtime status")
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// A listener squatting on a port: records every byte each connection sent and
/// answers each with a forged success frame (what the old client printed).
struct Impostor {
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Impostor {
    fn bind(port: u16) -> Impostor {
        // The dead runtime's socket may linger for a moment after SIGKILL.
        let deadline = Instant::now() + Duration::from_secs(20);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => panic!("impostor cannot bind {port}: {e}"),
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        };
        listener.set_nonblocking(true).unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (received.clone(), stop.clone());
        let thread = thread::spawn(move || {
            let forged = json!({"protocol": PROTOCOL, "ok": true, "reply": {"body": {"command": "forged", "execution": {"ok": true}, "value": {"forged": true}}, "exitCode": 0}});
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
                        let mut got = Vec::new();
                        let mut buf = [0u8; 65536];
                        while let Ok(n) = c.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            got.extend_from_slice(&buf[..n]);
                            let _ = c.write_all(format!("{forged}\n").as_bytes());
                        }
                        r.lock().unwrap().push(got);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Impostor { received, stop, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

#[test]
fn a_dead_runtimes_port_is_never_trusted_and_learns_nothing() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "first");
    let (port, token, runtime_id, pid) = endpoint(&env);
    kill9(&env, pid);
    let impostor = Impostor::bind(port);

    // Status: the owner lock is free, so the stale record is not even connected to.
    let st = status(&env);
    assert_eq!(st.pointer("/value/status"), Some(&json!("stopped")), "a dead owner's runtime is stopped: {st}\n{}", env.report(None));
    // A command starts a new runtime; the impostor's forged reply is never printed.
    let body = echo(&env, "second");
    assert!(!body.to_string().contains("forged"), "the forged reply must not be trusted: {body}");
    let (_, _, new_id, _) = endpoint(&env);
    assert_ne!(new_id, runtime_id, "a new runtime must serve the command\n{}", env.report(None));

    let received = impostor.finish();
    let cwd = std::env::current_dir().unwrap().display().to_string();
    for bytes in &received {
        let text = String::from_utf8_lossy(bytes);
        for secret in [token.as_str(), "fixture-echo", "second", cwd.as_str()] {
            assert!(!text.contains(secret), "the impostor received {secret:?}: {text:?}\n{}", env.report(None));
        }
    }
}

#[test]
fn an_impostor_answering_under_a_held_lock_gets_only_a_nonce() {
    // The lock is held by a live runtime, but the record names the impostor's port
    // (as if the record were stale during a restart): the client must refuse the
    // impostor after its hello and send it nothing else.
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "first");
    let (_, token, _, pid) = endpoint(&env);
    let squat = TcpListener::bind("127.0.0.1:0").unwrap();
    let squat_port = squat.local_addr().unwrap().port();
    drop(squat);
    let impostor = Impostor::bind(squat_port);
    // Stop the real owner from repairing its record, then point the record elsewhere.
    // SAFETY: pausing a process we started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let path = env.endpoint_files().into_iter().next().expect("endpoint.json");
    let mut record = env.endpoint().unwrap();
    record["port"] = json!(squat_port);
    std::fs::write(&path, record.to_string()).unwrap();
    let run = env.aab(&["fixture-echo", "--message", "secret-payload"]);
    // SAFETY: resuming it.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let body = env.json_of(&run);
    assert!(!body.to_string().contains("forged"), "the forged reply must not be trusted: {body}");
    let received = impostor.finish();
    assert!(!received.is_empty(), "the client should have tried the recorded port\n{}", env.report(Some(&run)));
    for bytes in &received {
        let text = String::from_utf8_lossy(bytes);
        assert!(text.lines().count() <= 1, "only a hello may reach an unproven peer: {text:?}");
        for secret in [token.as_str(), "secret-payload", "fixture-echo"] {
            assert!(!text.contains(secret), "the impostor received {secret:?}: {text:?}");
        }
    }
    // The owner repairs its record after it resumes; the next command works.
    echo(&env, "after");
}

#[test]
fn unauthenticated_peers_learn_nothing_and_run_nothing() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (port, token, runtime_id, _) = endpoint(&env);
    let before = env.runtime_counter("executed");
    let after_status = env.runtime_counter("executed");
    let status_cost = after_status - before;
    let execute = json!({"protocol": PROTOCOL, "method": "execute", "token": token,
        "request": {"command": "fixture-sleep", "arguments": {"durationMs": 1}, "extract": null}, "cwd": "/"});

    // An old-style frame (token inside, no handshake), a wrong client proof, garbage.
    let mut replies = Vec::new();
    let mut c = Conn::connect(port).unwrap();
    c.send_line(&execute.to_string()).unwrap();
    replies.push(c.read_line().unwrap());
    let mut c = Conn::connect(port).unwrap();
    let challenge = c.hello(&"a".repeat(64)).unwrap();
    assert!(challenge.get("runtimeId").is_none() && !challenge.to_string().contains(&runtime_id), "the challenge must not name the runtime: {challenge}");
    c.send_line(&json!({"protocol": PROTOCOL, "proof": "0".repeat(64)}).to_string()).unwrap();
    replies.push(c.read_line().unwrap());
    c.send_line(&execute.to_string()).ok();
    replies.push(c.read_line().unwrap_or_default());
    let mut c = Conn::connect(port).unwrap();
    c.stream.write_all(b"\xff\xfe\xfd\n").unwrap();
    replies.push(c.read_line().unwrap());
    for reply in &replies {
        assert!(!reply.contains(&runtime_id), "a refusal must not disclose the runtimeId: {reply:?}");
        assert!(!reply.contains("sleptMs"), "nothing may execute: {reply:?}");
    }
    assert!(replies[0].contains("runtime_access_denied"), "a frame without the handshake is refused: {:?}", replies[0]);
    assert!(replies[1].contains("runtime_access_denied"), "a wrong proof is refused: {:?}", replies[1]);
    assert!(replies[2].is_empty(), "the connection is closed after a failed proof: {:?}", replies[2]);
    let after = env.runtime_counter("executed");
    assert_eq!(after - after_status, status_cost, "refused peers executed something ({after_status} -> {after})\n{}", env.report(None));

    // Positive control: the right proof executes, and invalid UTF-8 after it is a
    // protocol error, not "message too large".
    let (st, _) = (status(&env), ());
    let identity = find_key(&st, "identity").cloned().expect("identity");
    let mut c = Conn::authenticated(port, &token).unwrap_or_else(|e| panic!("{e}\n{}", env.report(None)));
    let mut frame = execute.clone();
    frame.as_object_mut().unwrap().remove("token");
    frame["identity"] = json!({"code": identity["code"], "config": identity["config"]});
    let reply = c.call(&frame).unwrap();
    assert!(reply.to_string().contains("sleptMs"), "an authenticated execute runs: {reply}");
    assert_eq!(reply["runtimeId"], json!(runtime_id), "authenticated replies name the runtime: {reply}");
    c.stream.write_all(b"{\"protocol\":\"\xff\"}\n").unwrap();
    let bad = c.read_line().unwrap();
    assert!(bad.contains("runtime_protocol_error") && !bad.contains("too_large"), "invalid UTF-8 is a protocol error: {bad:?}");
    // A forged proof from another token never passes.
    assert_ne!(proof(&token, "client", "x", "y"), proof(&"f".repeat(64), "client", "x", "y"));
}

#[test]
fn an_unauthenticated_peer_cannot_make_the_runtime_hold_large_lines() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (port, _, _, pid) = endpoint(&env);
    let rss_before = rss_kib(pid);
    let chunk = vec![b'x'; 1 << 20];
    let mut accepted_bytes = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut sent = 0usize;
        for _ in 0..24 {
            match s.write_all(&chunk) {
                Ok(()) => sent += chunk.len(),
                Err(_) => break,
            }
        }
        accepted_bytes.push(sent);
    }
    let rss_after = rss_kib(pid);
    for sent in &accepted_bytes {
        assert!(*sent < 24 << 20, "the runtime kept reading a 24 MiB unauthenticated line (accepted {sent} bytes)\n{}", env.report(None));
    }
    assert!(
        rss_after < rss_before + 32 * 1024,
        "unauthenticated lines grew the runtime from {rss_before} KiB to {rss_after} KiB\n{}",
        env.report(None)
    );
    echo(&env, "still serving");
}

#[test]
fn silent_connections_are_evicted_and_real_clients_are_served() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (port, _, _, _) = endpoint(&env);
    let mut idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    // Real clients still get through while 300 silent connections are open.
    echo(&env, "through the flood");
    let st = status(&env);
    assert_eq!(st.pointer("/value/status"), Some(&json!("running")), "{st}");
    // Every silent connection is closed by the runtime (evicted or timed out): a read
    // returns EOF (or a reset) instead of blocking forever.
    let deadline = Instant::now() + Duration::from_secs(60);
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 16];
        let r = s.read(&mut buf);
        assert!(matches!(r, Ok(0) | Err(_)) && Instant::now() < deadline, "a silent connection was kept open: {r:?}\n{}", env.report(None));
        if let Err(e) = r {
            assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "a silent connection was kept open past the handshake timeout");
        }
    }
}

#[test]
fn running_out_of_descriptors_backs_off_and_recovers() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (port, _, _, pid) = endpoint(&env);
    // Shrink the runtime's descriptor limit so a few connections exhaust it.
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(32) as u64;
    let lim = libc::rlimit { rlim_cur: open_fds + 8, rlim_max: open_fds + 8 };
    // SAFETY: prlimit on a child process of this test (root in CI).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit failed: {}", std::io::Error::last_os_error());
    let flood: Vec<TcpStream> = (0..64).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    thread::sleep(Duration::from_millis(300));
    let ticks = |pid: i32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0) + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
    };
    let t0 = ticks(pid);
    thread::sleep(Duration::from_secs(1));
    let busy = ticks(pid) - t0;
    drop(flood);
    assert!(process_alive(pid), "the runtime died under descriptor exhaustion\n{}", env.report(None));
    // Restore a sane limit; the runtime serves again once the flood is gone.
    let lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
    // SAFETY: as above.
    unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    echo(&env, "after exhaustion");
    // 100 ticks = one CPU-second at the usual USER_HZ; a spinning accept loop burns
    // nearly all of it, a backing-off one almost none.
    assert!(busy < 50, "the accept loop spun while out of descriptors ({busy} ticks in 1 s)\n{}", env.report(None));
}

#[test]
fn a_deleted_endpoint_record_is_repaired_and_the_runtime_stays_reachable() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (_, _, runtime_id, pid) = endpoint(&env);
    let path = env.endpoint_files().into_iter().next().expect("endpoint.json");
    std::fs::remove_file(&path).unwrap();
    let st = status(&env);
    assert_eq!(st.pointer("/value/status"), Some(&json!("running")), "status of a live runtime without its record: {st}\n{}", env.report(None));
    assert_eq!(st.pointer("/value/runtimeId"), Some(&json!(runtime_id)), "the same runtime must answer: {st}");
    std::fs::remove_file(&path).ok();
    echo(&env, "without record");
    assert_eq!(endpoint(&env).2, runtime_id, "no second runtime may start while the first owns the directory");
    std::fs::remove_file(&path).ok();
    let run = env.aab(&["runtime", "--operation", "stop"]);
    env.expect_ok(&run, "stop without a record");
    assert!(wait_for_exit(pid, Duration::from_secs(20)), "stop must reach the runtime\n{}", env.report(Some(&run)));
}

#[test]
fn fifo_device_or_symlink_as_endpoint_record_never_hangs_a_client() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (_, _, runtime_id, pid) = endpoint(&env);
    let path = env.endpoint_files().into_iter().next().expect("endpoint.json");
    let mkfifo = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    // Live owner: each bad record is replaced and the same runtime keeps serving.
    for bad in ["fifo", "zero", "loop"] {
        std::fs::remove_file(&path).ok();
        match bad {
            "fifo" => mkfifo(&path),
            "zero" => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
            _ => std::os::unix::fs::symlink(&path, &path).unwrap(),
        }
        let body = echo(&env, bad);
        assert!(body.to_string().len() < 1 << 20, "reply size");
        assert_eq!(endpoint(&env).2, runtime_id, "the live owner keeps serving after a {bad} record");
    }
    // No owner: a FIFO left as the record is replaced by the next start.
    env.aab_ok(&["runtime", "--operation", "stop"]);
    assert!(wait_for_exit(pid, Duration::from_secs(20)));
    mkfifo(&path);
    let st = status(&env);
    assert_eq!(st.pointer("/value/status"), Some(&json!("stopped")), "{st}");
    echo(&env, "fresh start over a fifo");
    let run = env.aab(&["runtime", "--operation", "status"]);
    let body = env.json_of(&run);
    assert!(error_code(&body).is_none(), "{body}");
}
