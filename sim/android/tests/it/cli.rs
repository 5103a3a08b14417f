//! The `aab-android-sim` binary: the JSON line it prints, the control socket,
//! clean shutdown on SIGTERM, and the clear error without root.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_aab-android-sim");

#[test]
fn binary_prints_where_to_reach_it_and_cleans_up_on_sigterm() {
    let mut child = Command::new(BIN).args(["--devices", "2"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let info: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let devices = info["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0]["serial"].as_str().unwrap(), format!("127.0.0.1:{}", devices[0]["port"]));
    let root = std::path::PathBuf::from(devices[0]["root"].as_str().unwrap());
    assert!(root.join("system/bin/sh").exists());
    let token = std::fs::read_to_string(info["tokenFile"].as_str().unwrap()).unwrap();
    assert_eq!(token, info["token"].as_str().unwrap());
    let s = std::net::TcpStream::connect(info["control"].as_str().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    w.write_all(format!("{}\n", json!({ "op": "state", "token": token, "serial": devices[1]["serial"] })).as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    let st: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!((st["ok"].as_bool(), st["foreground"].as_str()), (Some(true), Some("com.example.aab.sample")));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "simulator ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    assert!(!root.exists(), "temp roots removed");
}

#[test]
fn without_root_the_binary_says_why_it_cannot_start() {
    if Command::new("setpriv").arg("--version").output().is_err() {
        return;
    }
    let out = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs root"), "{err}");
}

#[test]
fn a_bad_scenario_file_is_rejected_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.json");
    std::fs::write(&p, r#"{ "apps": [ { "package": 1 } ] }"#).unwrap();
    let out = Command::new(BIN).arg("--scenario").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json") && err.contains("scenario:"), "{err}");
}
