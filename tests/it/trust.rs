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
    let (port, token, runtime_id, _) = endpoint(&env);
    env.kill_runtime();
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

fn history_status(body: &Value) -> (Option<String>, Option<String>) {
    let h = body.pointer("/control/history");
    let status = h.and_then(|h| h.get("status")).and_then(Value::as_str).map(str::to_string);
    let error = h.and_then(|h| h.pointer("/action/error")).and_then(Value::as_str).map(str::to_string);
    (status, error)
}

/// Wait until an `aab fixture-echo` reports its history stored (the runtime retries
/// a failed store at most once a second, when a command needs it).
fn echo_until_stored(env: &TestEnv, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = echo(env, what);
        if history_status(&body).0.as_deref() == Some("stored") {
            return body;
        }
        assert!(Instant::now() < deadline, "the FactStore never came back: {body}\n{}", env.report(None));
        thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_factstore_held_by_a_foreign_writer_is_reopened_once_it_is_released() {
    let env = TestEnv::new();
    env.install_fixtures();
    std::fs::set_permissions(&env.facts, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let lock = env.facts.join("writer.lock");
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect({:?},isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('held',flush=True)\nsys.stdin.read()\n",
        lock.display().to_string()
    );
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "held");

    let body = echo(&env, "while held");
    let (status, error) = history_status(&body);
    assert_eq!(status.as_deref(), Some("unavailable"), "history while a foreign writer holds the store: {body}");
    assert_eq!(error.as_deref(), Some("fact_store_writer_busy"), "{body}");
    let pid = endpoint(&env).3;

    drop(holder.stdin.take());
    holder.wait().unwrap();
    let body = echo_until_stored(&env, "after release");
    assert!(body.pointer("/control/history/action/globalSeq").and_then(Value::as_u64).is_some(), "a stored record has a sequence: {body}");
    assert_eq!(endpoint(&env).3, pid, "the same runtime recovered its store (no restart)\n{}", env.report(None));
}

#[test]
fn read_only_wal_files_never_crash_the_runtime_and_the_store_recovers() {
    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "create the store");
    env.kill_runtime();
    let sidecars: Vec<_> = ["facts.sqlite-wal", "facts.sqlite-shm"].iter().map(|n| env.facts.join(n)).filter(|p| p.exists()).collect();
    assert!(!sidecars.is_empty(), "a killed writer leaves its WAL files\n{}", env.report(None));
    // Truncate the shared-memory file and make both immutable (read-only even for
    // root): the layout that made SQLite fault when it mapped the file read-only.
    let shm = env.facts.join("facts.sqlite-shm");
    if shm.exists() {
        std::fs::OpenOptions::new().write(true).open(&shm).unwrap().set_len(100).unwrap();
    }
    let chattr = |flag: &str| std::process::Command::new("chattr").arg(flag).args(&sidecars).status().map(|s| s.success()).unwrap_or(false);
    if !chattr("+i") {
        eprintln!("chattr +i is not available on this filesystem; checking recovery only");
    }
    let body = echo(&env, "read-only wal");
    let new_pid = endpoint(&env).3;
    let (status, _) = history_status(&body);
    chattr("-i");
    assert!(process_alive(new_pid), "the runtime must survive read-only WAL files\n{}", env.report(None));
    assert!(status.is_some(), "history must report a status: {body}");
    echo_until_stored(&env, "writable again");
    assert_eq!(endpoint(&env).3, new_pid, "the same runtime recovered its store\n{}", env.report(None));
}

// ------------------------------------------------------------ hostile frames

/// Every reply line a peer got, until the runtime closed the connection (or a
/// bounded wait ran out, which the caller treats as a failure).
fn replies_until_close(conn: &mut Conn) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    loop {
        match conn.read_line() {
            Ok(l) if l.is_empty() => return Ok(lines),
            Ok(l) => lines.push(l),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(lines),
            Err(e) => return Err(format!("connection neither answered nor closed: {e}; got {lines:?}")),
        }
        if lines.len() > 4 {
            return Err(format!("too many replies to one hostile input: {lines:?}"));
        }
    }
}

/// Pre-authentication: arbitrary bytes get at most a refusal (or a challenge that
/// names nothing), never the runtime's identity, and the connection is closed.
fn check_unauthenticated(port: u16, runtime_id: &str, bytes: &[u8]) -> Result<(), String> {
    let mut conn = Conn::connect(port).map_err(|e| e.to_string())?;
    let _ = conn.stream.write_all(bytes);
    let _ = conn.stream.shutdown(std::net::Shutdown::Write);
    let lines = replies_until_close(&mut conn)?;
    for l in &lines {
        if l.contains(runtime_id) || l.contains("runtimeId") {
            return Err(format!("an unauthenticated peer learned the runtime identity: {l:?}"));
        }
        let v: Value = serde_json::from_str(l.trim()).map_err(|e| format!("reply is not JSON ({e}): {l:?}"))?;
        let known = v.get("challenge").is_some() || matches!(v.pointer("/error/error").and_then(Value::as_str), Some("runtime_access_denied" | "runtime_protocol_error"));
        if !known {
            return Err(format!("unexpected reply to an unauthenticated peer: {v}"));
        }
    }
    Ok(())
}

/// After authentication: every line gets one contract error frame (or a reply),
/// never a crash; refusals close the connection.
fn check_authenticated(port: u16, token: &str, line: &[u8]) -> Result<(), String> {
    let mut conn = Conn::authenticated(port, token)?;
    let _ = conn.stream.write_all(line);
    if !line.ends_with(b"\n") {
        let _ = conn.stream.write_all(b"\n");
    }
    let _ = conn.stream.shutdown(std::net::Shutdown::Write);
    let lines = replies_until_close(&mut conn)?;
    for l in &lines {
        let v: Value = serde_json::from_str(l.trim()).map_err(|e| format!("reply is not JSON ({e}): {l:?}"))?;
        if v.get("ok") == Some(&json!(false)) {
            let code = v.pointer("/error/error").and_then(Value::as_str).unwrap_or("");
            if !code.starts_with("runtime_") && !code.starts_with("invalid_") {
                return Err(format!("unexpected error code for a malformed frame: {v}"));
            }
            if v.pointer("/error/dispatched") == Some(&json!(true)) {
                return Err(format!("a malformed frame was dispatched: {v}"));
            }
        }
    }
    Ok(())
}

fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-z\\-]{0,12}".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn hostile_runtime_frames_are_refused_without_harm() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let env = TestEnv::new();
    env.install_fixtures();
    echo(&env, "start");
    let (port, token, runtime_id, pid) = endpoint(&env);
    let executed_before = env.runtime_counter("executed");

    // The regression corpus: inputs that once broke (or could break) the listener.
    let corpus_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/runtime-frames");
    let mut corpus: Vec<_> = std::fs::read_dir(&corpus_dir).expect("corpus dir").flatten().map(|e| e.path()).collect();
    corpus.sort();
    assert!(corpus.len() >= 8, "the runtime-frame corpus is missing files in {}", corpus_dir.display());
    for path in &corpus {
        let bytes = std::fs::read(path).unwrap();
        check_unauthenticated(port, &runtime_id, &bytes).unwrap_or_else(|e| panic!("{} (unauthenticated): {e}\n{}", path.display(), env.report(None)));
        check_authenticated(port, &token, &bytes).unwrap_or_else(|e| panic!("{} (authenticated): {e}\n{}", path.display(), env.report(None)));
    }

    let cases: u32 = std::env::var("AAB_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let raw = proptest::collection::vec(any::<u8>(), 0..6000);
    runner
        .run(&raw, |bytes| {
            check_unauthenticated(port, &runtime_id, &bytes).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("unauthenticated raw bytes: {e}\n{}", env.report(None)));
    let hello_then = ("[0-9a-f]{64}", proptest::collection::vec(any::<u8>(), 0..300));
    runner
        .run(&hello_then, |(nonce, tail)| {
            let mut bytes = json!({"protocol": PROTOCOL, "hello": nonce}).to_string().into_bytes();
            bytes.push(b'\n');
            bytes.extend_from_slice(&tail);
            check_unauthenticated(port, &runtime_id, &bytes).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("hello then garbage: {e}\n{}", env.report(None)));
    let frames = (prop_oneof![Just("status".to_string()), Just("execute".to_string()), "[a-z]{0,8}".prop_filter("never stop", |m| m != "stop")], json_value(), json_value());
    runner
        .run(&frames, |(method, request, cwd)| {
            // Never `stop`: the runtime must keep serving the rest of the run.
            let frame = json!({"protocol": PROTOCOL, "method": method, "request": request, "cwd": cwd, "identity": {"code": "x", "config": "y"}});
            check_authenticated(port, &token, frame.to_string().as_bytes()).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("authenticated frames: {e}\n{}", env.report(None)));
    runner
        .run(&json_value(), |value| {
            check_authenticated(port, &token, value.to_string().as_bytes()).map_err(TestCaseError::fail)?;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("authenticated JSON values: {e}\n{}", env.report(None)));

    assert!(process_alive(pid), "the runtime died under hostile frames\n{}", env.report(None));
    assert_eq!(endpoint(&env).3, pid, "the same runtime must still serve\n{}", env.report(None));
    // Only the status probes of this test ran; no hostile frame executed a command.
    let executed_after = env.runtime_counter("executed");
    assert!(executed_after <= executed_before + 2, "hostile frames executed commands ({executed_before} -> {executed_after})\n{}", env.report(None));
    echo(&env, "after the storm");
}
