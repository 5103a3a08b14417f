//! Step 1: the adbd transport as the real adb server sees it.

use std::io::{Read, Write};

use serde_json::json;

use crate::support::Env;

#[test]
fn connect_lists_device_and_shell_v2_carries_output_and_exit_codes() {
    let env = Env::start(1);
    let serial = env.serial();
    let out = env.adb(&["devices", "-l"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with(&serial)).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" device ") && line.contains("product:aab_sim") && line.contains("model:AAB_Sim_Phone") && line.contains("device:aabsim"), "{line}");

    assert_eq!(env.shell("echo hi"), ("hi\n".to_string(), String::new(), 0));
    assert_eq!(env.shell("exit 3").2, 3);
    let (o, e, c) = env.shell("echo out; echo err >&2; exit 7");
    assert_eq!((o.as_str(), e.as_str(), c), ("out\n", "err\n", 7));
    // stdin EOF travels as shell v2 close-stdin: `cat` ends.
    let out = env.adb_stdin(&["-s", &serial, "shell", "cat"], Some(b"hello\nworld\n"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nworld\n");
    // exec-out is raw (no v2 framing), binary-safe.
    let out = env.adb(&["-s", &serial, "exec-out", "printf '\\001\\002\\377'"]);
    assert_eq!(out.stdout, vec![1, 2, 255]);
    // Ground truth saw the services.
    assert!(env.truth("shell").iter().any(|r| r["data"]["command"] == "echo hi"));
}

#[test]
fn large_output_respects_flow_control() {
    let env = Env::start(1);
    // 4 MiB through one stream: many WRTE/OKAY rounds.
    let out = env.adb(&["-s", &env.serial(), "exec-out", "head -c 4194304 /dev/zero"]);
    assert_eq!(out.stdout.len(), 4 * 1024 * 1024);
    assert!(out.stdout.iter().all(|b| *b == 0));
}

#[test]
fn push_pull_round_trip_and_stat() {
    let env = Env::start(1);
    let serial = env.serial();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("blob.bin");
    let mut data = vec![0u8; 3 * 1024 * 1024 + 17];
    getrandom::fill(&mut data).unwrap();
    std::fs::write(&src, &data).unwrap();
    let out = env.adb(&["-s", &serial, "push", src.to_str().unwrap(), "/data/local/tmp/blob.bin"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The device's own sha256sum agrees.
    use sha2::Digest;
    let want: String = sha2::Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
    assert!(env.sh("sha256sum /data/local/tmp/blob.bin").starts_with(&want));
    let back = dir.path().join("back.bin");
    let out = env.adb(&["-s", &serial, "pull", "/data/local/tmp/blob.bin", back.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&back).unwrap(), data);
    // Push through /sdcard (a symlink) creates missing directories and lands inside the root.
    let small = dir.path().join("note.txt");
    std::fs::write(&small, "note\n").unwrap();
    assert!(env.adb(&["-s", &serial, "push", small.to_str().unwrap(), "/sdcard/notes/new/note.txt"]).status.success());
    assert_eq!(env.sh("cat /storage/emulated/0/notes/new/note.txt"), "note\n");
    // A missing file fails the pull.
    let out = env.adb(&["-s", &serial, "pull", "/data/local/tmp/missing", back.to_str().unwrap()]);
    assert!(!out.status.success());
    // `adb ls` lists the directory (LIS2).
    let ls = String::from_utf8_lossy(&env.adb(&["-s", &serial, "ls", "/data/local/tmp"]).stdout).into_owned();
    assert!(ls.contains("blob.bin"), "{ls}");
}

#[test]
fn forward_reaches_a_simulator_listener() {
    let env = Env::start(1);
    let serial = env.serial();
    assert_eq!(env.control(json!({ "op": "listen", "name": "localabstract:test-sock", "reply": "pong" }))["ok"], true);
    let out = env.adb(&["-s", &serial, "forward", "tcp:0", "localabstract:test-sock"]);
    let port: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("allocated port");
    let list = String::from_utf8_lossy(&env.adb(&["forward", "--list"]).stdout).into_owned();
    assert!(list.contains(&format!("{serial} tcp:{port} localabstract:test-sock")), "{list}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(b"ping").unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert_eq!(got, "pong");
    // The listener shows in /proc/net/unix like an abstract socket.
    assert!(env.sh("cat /proc/net/unix").contains("@test-sock"));
    // An unknown socket: the forward connection is accepted, then closed (CLSE refusal).
    let out = env.adb(&["-s", &serial, "forward", "tcp:0", "localabstract:nobody-here"]);
    let port: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut buf = vec![];
    assert_eq!(s.read_to_end(&mut buf).unwrap_or(0), 0);
}

#[test]
fn two_devices_in_one_process() {
    let env = Env::start(2);
    let serials = env.serials();
    let text = String::from_utf8_lossy(&env.adb(&["devices"]).stdout).into_owned();
    for s in &serials {
        assert!(text.contains(&format!("{s}\tdevice")), "{text}");
    }
    let a = env.shell_on(&serials[0], "getprop ro.serialno").0;
    let b = env.shell_on(&serials[1], "getprop ro.serialno").0;
    assert_ne!(a, b);
    // Separate roots: a file on one device is not on the other.
    env.shell_on(&serials[0], "echo one > /data/local/tmp/which");
    assert_eq!(env.shell_on(&serials[1], "cat /data/local/tmp/which").2, 1);
}

/// One request on the adb server's own port protocol (what the provider speaks).
fn server_request(env: &Env, service: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", env.adb_port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(format!("{:04x}{service}", service.len()).as_bytes()).unwrap();
    let mut okay = [0u8; 4];
    s.read_exact(&mut okay).unwrap();
    assert_eq!(&okay, b"OKAY", "{service}");
    s
}

#[test]
fn raw_shell_and_exec_services_through_the_server_port_protocol() {
    let env = Env::start(1);
    let serial = env.serial();
    for (service, want) in [("shell:echo raw; echo err >&2; exit 3", "raw\nerr\n"), ("exec:echo exec", "exec\n")] {
        let mut s = server_request(&env, &format!("host:transport:{serial}"));
        s.write_all(format!("{:04x}{service}", service.len()).as_bytes()).unwrap();
        let mut okay = [0u8; 4];
        s.read_exact(&mut okay).unwrap();
        assert_eq!(&okay, b"OKAY");
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert_eq!(out, want, "{service}");
    }
    // shell v2 on the same kind of connection: stdout packet, then the exit packet.
    let mut s = server_request(&env, &format!("host:transport:{serial}"));
    let service = "shell,v2,raw:echo v2; exit 4";
    s.write_all(format!("{:04x}{service}", service.len()).as_bytes()).unwrap();
    let mut buf = vec![];
    s.read_to_end(&mut buf).unwrap();
    assert_eq!(&buf[..4], b"OKAY");
    assert_eq!(&buf[4..], [&[1u8, 3, 0, 0, 0][..], b"v2\n", &[3, 1, 0, 0, 0, 4]].concat());
}
