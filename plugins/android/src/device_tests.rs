//! Device services, device selection and the SDK connection sequence end to end:
//! the transport → the REAL adb server (private port and HOME) → `adb connect` →
//! the `aab_e2e::fake_adbd` test double. Ground truth (services opened, HTTP
//! requests seen) comes from the fake phone, not from the transport's own answers.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::adb::device::Device;
use crate::adb::{Deadline, codes, select};
use aab_e2e::fake_adbd::FakeAdbd;
use crate::sdk::{SdkTarget, endpoint, forward, http};
use crate::test_support::{PrivateServer, deadline};

const PKG: &str = "com.example.app";
const EPOCH: &str = "1764633600000-0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Connect a fake phone to the server and wait until it is online.
async fn attach(p: &PrivateServer, fake: &FakeAdbd) {
    let said = p.server.connect_device(&fake.serial(), deadline()).await.unwrap();
    assert!(said.contains("connected to"), "{said}");
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let devices = p.server.devices(deadline()).await.unwrap();
        if devices.iter().any(|d| d.serial == fake.serial() && d.state == "device") {
            return;
        }
        assert!(Instant::now() < until, "device never came online: {devices:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn descriptor() -> String {
    json!({"schema": endpoint::SCHEMA, "ok": true, "packageName": PKG, "runtimeEpoch": EPOCH, "transport": "localabstract",
           "socketName": format!("aab-sdk-{EPOCH}"), "version": "0.4.5", "updatedAtMs": 1764633600123u64, "error": null})
    .to_string()
}

fn install_app(fake: &FakeAdbd) {
    let mut phone = fake.phone.lock().unwrap();
    phone.descriptors.insert(PKG.into(), (0, descriptor(), String::new()));
    phone.sockets.push(format!("aab-sdk-{EPOCH}"));
}

#[test]
fn shell_v2_exec_and_sync_through_the_real_server() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let fake = FakeAdbd::start().await;
        attach(&p, &fake).await;
        let sel = select::select(&p.server, None, deadline()).await.unwrap();
        assert_eq!((sel.serial.as_str(), sel.entry.model.as_deref()), (fake.serial().as_str(), Some("Fake_Phone")));
        let d = Device::new(p.server.clone(), sel.serial);

        let out = d.shell("echo out; echo err >&2; exit 3", None, deadline()).await.unwrap();
        assert_eq!((out.exit_code, out.stdout_text().as_str(), out.stderr_text().as_str()), (3, "out\n", "err\n"));
        let out = d.shell("cat", Some(b"from stdin"), deadline()).await.unwrap();
        assert_eq!((out.exit_code, out.stdout.as_slice()), (0, &b"from stdin"[..]));
        // stdin is closed even when none is given, so `cat` ends.
        assert_eq!(d.shell("cat", None, deadline()).await.unwrap().exit_code, 0);
        assert_eq!(d.exec("printf 'a\\000b'", 1024, deadline()).await.unwrap(), b"a\0b");

        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        d.push("/data/local/tmp/blob", 0o644, &data, 1_700_000_000, deadline()).await.unwrap();
        let st = d.stat("/data/local/tmp/blob", deadline()).await.unwrap().unwrap();
        assert_eq!(st.size as usize, data.len());
        assert_eq!(std::fs::read(fake.root.path().join("data/local/tmp/blob")).unwrap(), data, "ground truth: the file on the phone");
        assert_eq!(d.pull("/data/local/tmp/blob", 1 << 20, deadline()).await.unwrap(), data);
        assert_eq!(d.stat("/nope", deadline()).await.unwrap(), None);
        assert_eq!(d.pull("/nope", 1024, deadline()).await.unwrap_err().error, codes::ADB_COMMAND_FAILED);
        // A device service the phone refuses.
        assert!(d.open("localabstract:nobody", deadline()).await.is_err());
        // The transport id changes only when the device reconnects.
        let (_, id1) = p.server.tport(&fake.serial(), deadline(), "tport").await.unwrap();
        let (_, id2) = p.server.tport(&fake.serial(), deadline(), "tport").await.unwrap();
        assert_eq!(id1, id2);
    });
}

#[test]
fn forward_norebind_list_and_kill() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let fake = FakeAdbd::start().await;
        attach(&p, &fake).await;
        let s = fake.serial();
        let port = p.server.forward(&s, "tcp:0", "localabstract:one", true, deadline()).await.unwrap().unwrap();
        let rules = p.server.list_forwards(deadline()).await.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!((rules[0].serial.as_str(), rules[0].local.clone(), rules[0].remote.as_str()), (s.as_str(), format!("tcp:{port}"), "localabstract:one"));
        // --no-rebind refuses to move an existing local port.
        let e = p.server.forward(&s, &format!("tcp:{port}"), "localabstract:two", true, deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::ADB_COMMAND_FAILED, "{e:?}");
        p.server.kill_forward(&s, &format!("tcp:{port}"), deadline()).await.unwrap();
        assert!(p.server.list_forwards(deadline()).await.unwrap().is_empty());
        let e = p.server.kill_forward(&s, &format!("tcp:{port}"), deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::ADB_COMMAND_FAILED);
    });
}

#[test]
fn two_devices_need_a_serial() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let (a, b) = (FakeAdbd::start().await, FakeAdbd::start().await);
        attach(&p, &a).await;
        attach(&p, &b).await;
        let e = select::select(&p.server, None, deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (codes::SERIAL_REQUIRED, Some("serial"), Some(false)));
        let sel = select::select(&p.server, Some(&b.serial()), deadline()).await.unwrap();
        assert_eq!(sel.serial, b.serial());
        let out = Device::new(p.server.clone(), sel.serial).shell("echo b", None, deadline()).await.unwrap();
        assert_eq!(out.stdout_text(), "b\n");
        assert!(b.phone.lock().unwrap().opened.iter().any(|s| s.ends_with(":echo b")));
        assert!(!a.phone.lock().unwrap().opened.iter().any(|s| s.ends_with(":echo b")), "ground truth: only the named device ran it");
        let e = select::select(&p.server, Some("127.0.0.1:1"), deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::DEVICE_NOT_FOUND);
    });
}

#[test]
fn sdk_sequence_reuses_verifies_and_classifies() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let fake = FakeAdbd::start().await;
        attach(&p, &fake).await;
        install_app(&fake);
        let device = Device::new(p.server.clone(), fake.serial());
        let target = SdkTarget { device: device.clone(), package: PKG.into(), port: None };

        // First request creates the forward, the second reuses it; each is one HTTP request.
        let (route1, r1) = target.request("GET", "/v1/status", None, deadline()).await.unwrap();
        assert!(!route1.forward.reused);
        assert_eq!(r1.body["socket"], format!("localabstract:aab-sdk-{EPOCH}"));
        let (route2, _) = target.request("POST", "/v1/logs", Some(&json!({"m": 1})), deadline()).await.unwrap();
        assert_eq!((route2.forward.reused, route2.forward.port), (true, route1.forward.port));
        assert_eq!(fake.phone.lock().unwrap().http, vec!["GET /v1/status HTTP/1.1", "POST /v1/logs HTTP/1.1"]);
        assert_eq!(p.server.list_forwards(deadline()).await.unwrap().len(), 1, "no second forward");

        // Explicit port already forwarding elsewhere: mismatch, no HTTP.
        let other = p.server.forward(&fake.serial(), "tcp:0", "localabstract:elsewhere", true, deadline()).await.unwrap().unwrap();
        let explicit = SdkTarget { port: Some(other), ..target.clone() };
        let e = explicit.request("GET", "/v1/status", None, deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (forward::BRIDGE_FORWARD_MISMATCH, Some(false)));
        // Explicit free port: created there and verified.
        let free = crate::test_support::free_port();
        let (route3, _) = SdkTarget { port: Some(free), ..target.clone() }.request("GET", "/v1/status", None, deadline()).await.unwrap();
        assert_eq!((route3.forward.port, route3.forward.reused), (free, false));
        assert_eq!(fake.phone.lock().unwrap().http.len(), 3);

        // Descriptor faults: each code, and no HTTP request leaves.
        let faults = [
            ((1u8, String::new(), "run-as: package not debuggable".to_string()), endpoint::codes::BRIDGE_ENDPOINT_DISCOVERY_FAILED),
            ((0, "{not json".to_string(), String::new()), endpoint::codes::BRIDGE_ENDPOINT_INVALID),
            ((0, descriptor().replace(PKG, "com.other"), String::new()), endpoint::codes::BRIDGE_PACKAGE_MISMATCH),
            ((0, json!({"schema": endpoint::SCHEMA, "ok": false, "packageName": PKG, "error": "starting"}).to_string(), String::new()), endpoint::codes::BRIDGE_NOT_READY),
        ];
        for (answer, code) in faults {
            fake.phone.lock().unwrap().descriptors.insert(PKG.into(), answer);
            let e = target.request("GET", "/v1/status", None, deadline()).await.unwrap_err();
            assert_eq!((e.error.as_str(), e.dispatched), (code, Some(false)), "{e:?}");
        }
        assert_eq!(fake.phone.lock().unwrap().http.len(), 3, "ground truth: no request reached the app");

        // The app's socket is gone (process died): adb accepts and closes → bridge_not_ready.
        install_app(&fake);
        fake.phone.lock().unwrap().sockets.clear();
        let e = target.request("POST", "/v1/action/tap", Some(&json!({})), deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (http::BRIDGE_NOT_READY, None));

        // remove-forward checks the serial first.
        let e = forward::remove(&p.server, "127.0.0.1:1", route1.forward.port, deadline()).await.unwrap_err();
        assert_eq!(e.error, forward::BRIDGE_FORWARD_MISMATCH);
        let removed = forward::remove(&p.server, &fake.serial(), route1.forward.port, deadline()).await.unwrap();
        assert_eq!(removed.remote, format!("localabstract:aab-sdk-{EPOCH}"));
        assert!(!p.server.list_forwards(deadline()).await.unwrap().iter().any(|r| r.local == format!("tcp:{}", route1.forward.port)));
        let e = forward::remove(&p.server, &fake.serial(), route1.forward.port, deadline()).await.unwrap_err();
        assert_eq!(e.error, forward::BRIDGE_FORWARD_MISMATCH);
    });
}

/// Not a test: the transport overhead figure for docs/PERFORMANCE.md. Run with
/// `cargo test -p aab-plugin-android --lib bench_ -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_port_protocol_vs_spawning_adb() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let fake = FakeAdbd::start().await;
        attach(&p, &fake).await;
        let d = Device::new(p.server.clone(), fake.serial());
        let n = 200;
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        // A device service the phone answers without a process (refused open):
        // pure transport cost, host:transport + OPEN + reply.
        let mut open = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let _ = d.open("localabstract:nobody", Deadline::after(Duration::from_secs(5))).await;
            open.push(t.elapsed());
        }
        let mut shell = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            d.shell("true", None, deadline()).await.unwrap();
            shell.push(t.elapsed());
        }
        let adb = crate::test_support::adb_path();
        let mut spawn = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            let st = tokio::process::Command::new(&adb).args(["-P", &p.addr().port().to_string(), "-s", &fake.serial(), "shell", "true"]).env("HOME", p.home.path()).status().await.unwrap();
            assert!(st.success());
            spawn.push(t.elapsed());
        }
        let version_spawn = {
            let mut v = Vec::new();
            for _ in 0..50 {
                let t = Instant::now();
                tokio::process::Command::new(&adb).arg("version").stdout(std::process::Stdio::null()).status().await.unwrap();
                v.push(t.elapsed());
            }
            median(v)
        };
        println!("BENCH device service open (port protocol, refused service): median {:?}", median(open));
        println!("BENCH shell,v2 `true` (port protocol; fake phone answers in-process): median {:?}", median(shell));
        println!("BENCH spawn `adb -s S shell true`: median {:?}", median(spawn));
        println!("BENCH spawn `adb version`: median {:?}", version_spawn);
    });
}
