//! The transport against the simulated phone (`sim/android`, Android's real output
//! formats, a busybox userland) behind the REAL adb server: device services,
//! selection of two devices, foreground identity and its change checks, the SDK
//! sequence with restarts and descriptor faults. Ground truth comes from the
//! simulator's control interface. Needs root (the simulator chroots device shells).

use std::time::{Duration, Instant};

use aab_android_sim::{Options, Simulator};
use serde_json::{Value, json};

use crate::adb::device::Device;
use crate::adb::{codes, select};
use crate::foreground;
use crate::sdk::{SdkTarget, endpoint};
use crate::test_support::{PrivateServer, deadline};

const SAMPLE: &str = "com.example.aab.sample";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn sim(devices: usize) -> Simulator {
    let opts = Options { ports: vec![0; devices], ..Options::default() };
    Simulator::start(opts).await.expect("start the simulator (needs root, adb and busybox-static)")
}

async fn attach(p: &PrivateServer, serial: &str) {
    // Test setup only: a freshly started adb server under load can drop the first
    // `host:connect` without an answer; ask again (the product never does).
    let mut said = p.server.connect_device(serial, deadline()).await;
    for _ in 0..3 {
        match &said {
            Err(e) if e.message.contains("early eof") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                said = p.server.connect_device(serial, deadline()).await;
            }
            _ => break,
        }
    }
    let said = said.unwrap();
    assert!(said.contains("connected to"), "{said}");
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if p.server.devices(deadline()).await.unwrap().iter().any(|d| d.serial == serial && d.state == "device") {
            return;
        }
        assert!(Instant::now() < until, "{serial} never came online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn state(s: &Simulator) -> Value {
    s.control(json!({"op": "state"})).await
}

fn app<'a>(state: &'a Value, package: &str) -> &'a Value {
    state["apps"].as_array().unwrap().iter().find(|a| a["package"] == json!(package)).unwrap()
}

#[test]
fn sim_shell_sync_and_two_devices() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut s = sim(2).await;
        let (a, b) = (s.devices[0].serial.clone(), s.devices[1].serial.clone());
        attach(&p, &a).await;
        attach(&p, &b).await;
        let e = select::select(&p.server, None, deadline()).await.unwrap_err();
        assert_eq!(e.error, codes::SERIAL_REQUIRED);
        let sel = select::select(&p.server, Some(&b), deadline()).await.unwrap();
        assert_eq!(sel.entry.model.as_deref(), Some("AAB_Sim_Phone"));
        let d = Device::new(p.server.clone(), sel.serial);
        let out = d.shell("getprop ro.product.model; echo oops >&2; exit 7", None, deadline()).await.unwrap();
        assert_eq!((out.exit_code, out.stdout_text().trim(), out.stderr_text().trim()), (7, "AAB Sim Phone", "oops"));
        d.push("/data/local/tmp/aab-x", 0o644, b"payload", 1_700_000_000, deadline()).await.unwrap();
        assert_eq!(std::fs::read(s.devices[1].root.join("data/local/tmp/aab-x")).unwrap(), b"payload", "ground truth: the file is in device b's root");
        assert!(!s.devices[0].root.join("data/local/tmp/aab-x").exists());
        assert_eq!(d.pull("/data/local/tmp/aab-x", 1024, deadline()).await.unwrap(), b"payload");
        assert_eq!(d.stat("/data/local/tmp/aab-x", deadline()).await.unwrap().unwrap().size, 7);
        s.shutdown();
    });
}

#[test]
fn sim_foreground_identity_and_changes_during_verification() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut s = sim(1).await;
        let serial = s.devices[0].serial.clone();
        attach(&p, &serial).await;
        let d = Device::new(p.server.clone(), serial);
        let f = foreground::probe(&d, deadline()).await.unwrap().expect("the sample app has focus");
        let truth = state(&s).await;
        assert_eq!(f.window.package, SAMPLE);
        assert_eq!(f.window.pid as u64, app(&truth, SAMPLE)["pid"].as_u64().unwrap(), "ground truth pid");
        assert_eq!(f.uid as u64, app(&truth, SAMPLE)["uid"].as_u64().unwrap());
        assert_eq!(f.process.boot_id, truth["bootId"].as_str().unwrap());
        assert!(f.window.activity.as_deref().unwrap_or("").contains("MainActivity"), "{f:?}");

        s.control(json!({"op": "faults", "set": {"foregroundAfterDumpsys": "com.example.notes"}})).await;
        let e = foreground::probe(&d, deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (foreground::FOREGROUND_CHANGED_DURING_VERIFICATION, Some(false)), "{e:?}");
        s.control(json!({"op": "faults", "reset": true})).await;
        s.control(json!({"op": "foreground", "package": SAMPLE})).await;
        s.control(json!({"op": "faults", "set": {"restartAfterDumpsys": true}})).await;
        let e = foreground::probe(&d, deadline()).await.unwrap_err();
        assert_eq!(e.error, foreground::FOREGROUND_PROCESS_CHANGED_DURING_VERIFICATION, "{e:?}");
        s.control(json!({"op": "faults", "reset": true})).await;
        s.control(json!({"op": "faults", "set": {"dumpsysMalformed": 1}})).await;
        assert_eq!(foreground::probe(&d, deadline()).await.unwrap_err().error, foreground::FOREGROUND_IDENTITY_UNAVAILABLE);
        s.shutdown();
    });
}

#[test]
fn sim_sdk_sequence_restart_and_descriptor_faults() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut s = sim(1).await;
        let serial = s.devices[0].serial.clone();
        attach(&p, &serial).await;
        let device = Device::new(p.server.clone(), serial.clone());
        let target = SdkTarget { device: device.clone(), package: SAMPLE.into(), port: None };

        let (route, r) = target.request("GET", "/v1/status", None, deadline()).await.unwrap();
        let epoch = app(&state(&s).await, SAMPLE)["runtimeEpoch"].as_str().unwrap().to_string();
        assert_eq!((route.descriptor.runtime_epoch.as_str(), r.body["debugBridge"]["runtimeEpoch"].as_str()), (epoch.as_str(), Some(epoch.as_str())));
        assert_eq!(r.body["app"]["packageName"], json!(SAMPLE));
        let (again, _) = target.request("GET", "/v1/status", None, deadline()).await.unwrap();
        assert_eq!((again.forward.reused, again.forward.port), (true, route.forward.port));

        // A restarted process has a new runtimeEpoch and socket: a new forward.
        s.control(json!({"op": "restart", "package": SAMPLE})).await;
        let (after, r) = target.request("GET", "/v1/status", None, deadline()).await.unwrap();
        let new_epoch = app(&state(&s).await, SAMPLE)["runtimeEpoch"].as_str().unwrap().to_string();
        assert_ne!(new_epoch, epoch);
        assert_eq!((after.descriptor.runtime_epoch.as_str(), r.body["debugBridge"]["runtimeEpoch"].as_str()), (new_epoch.as_str(), Some(new_epoch.as_str())));
        assert!(!after.forward.reused);

        // Descriptor faults, each with its code and never dispatched.
        let notes = SdkTarget { device: device.clone(), package: "com.example.notes".into(), port: None };
        let e = notes.request("GET", "/v1/status", None, deadline()).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (endpoint::codes::BRIDGE_ENDPOINT_DISCOVERY_FAILED, Some(false)), "{e:?}");
        s.control(json!({"op": "descriptor", "package": SAMPLE, "raw": "{\"schema\":"})).await;
        assert_eq!(target.request("GET", "/v1/status", None, deadline()).await.unwrap_err().error, endpoint::codes::BRIDGE_ENDPOINT_INVALID);
        s.control(json!({"op": "descriptor", "package": SAMPLE, "remove": true})).await;
        assert_eq!(target.request("GET", "/v1/status", None, deadline()).await.unwrap_err().error, endpoint::codes::BRIDGE_ENDPOINT_DISCOVERY_FAILED);

        // The app crashed: its socket is gone, the (stale) descriptor still names it.
        s.control(json!({"op": "restart", "package": SAMPLE})).await;
        s.control(json!({"op": "crash", "package": SAMPLE})).await;
        let e = target.request("GET", "/v1/status", None, deadline()).await.unwrap_err();
        assert!(e.error == "bridge_not_ready" || e.error == endpoint::codes::BRIDGE_ENDPOINT_DISCOVERY_FAILED, "{e:?}");
        s.shutdown();
    });
}
