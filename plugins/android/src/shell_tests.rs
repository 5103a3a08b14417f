//! The shell worker (`aab.android-shell-execution/v1`) in the simulated phone's real
//! shell, behind the real adb server: each step's guard, the store cap, reuse,
//! reboot and reconcile, checked against the simulator's ground truth (`effects`).

use std::time::{Duration, Instant};

use aab_android_sim::{Options, Simulator};
use aab_plugin_api::ProviderError;
use serde_json::{Value, json};

use crate::adb::device::Device;
use crate::adb::Deadline;
use crate::shell_exec::{self, Job, codes, scripts};
use crate::test_support::{PrivateServer, deadline};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

struct Phone {
    _p: PrivateServer,
    sim: Simulator,
    device: Device,
}

async fn phone(p: PrivateServer) -> Phone {
    let sim = Simulator::start(Options { ports: vec![0], ..Options::default() }).await.expect("start the simulator (needs root, adb and busybox-static)");
    let serial = sim.devices[0].serial.clone();
    attach(&p, &serial).await;
    let device = Device::new(p.server.clone(), serial);
    Phone { _p: p, sim, device }
}

async fn attach(p: &PrivateServer, serial: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let _ = p.server.connect_device(serial, deadline()).await;
        if p.server.devices(deadline()).await.map(|d| d.iter().any(|d| d.serial == serial && d.state == "device")).unwrap_or(false) {
            return;
        }
        assert!(Instant::now() < until, "{serial} never came online");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn effects(ph: &Phone, kind: &str) -> Vec<Value> {
    let r = ph.sim.control(json!({"op": "effects"})).await;
    r["items"].as_array().unwrap().iter().filter(|i| i["kind"] == json!(kind)).cloned().collect()
}

async fn sh(ph: &Phone, cmd: &str) -> String {
    ph.device.shell(cmd, None, deadline()).await.unwrap().stdout_text()
}

const STEP: Duration = Duration::from_secs(15);

async fn run(ph: &Phone, job: &Job, within: Duration) -> Result<shell_exec::ShellRun, ProviderError> {
    shell_exec::run_job(&ph.device, Deadline::after(within), STEP, job, |_| Ok(())).await
}

fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

#[test]
fn shell_worker_runs_once_and_acknowledges() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut ph = phone(p).await;
        let job = Job::new(&uuid(1), &["input", "keyevent", "66"]).unwrap();
        let r = run(&ph, &job, Duration::from_secs(20)).await.unwrap();
        assert_eq!((r.exit_code, r.acknowledged), (0, true), "{:?}", r.receipt);
        assert_eq!(r.receipt["schemaVersion"], json!(shell_exec::SCHEMA));
        assert_eq!(r.receipt["dispatched"], json!(true));
        assert_eq!(effects(&ph, "keyevent").await.iter().map(|e| e["data"]["keyCode"].clone()).collect::<Vec<_>>(), vec![json!(66)]);
        let dir = format!("{}/{}", shell_exec::ROOT, job.job_id);
        // The phone's files: identity, command, receipt, acknowledged = sha256(receipt).
        let ack = sh(&ph, &format!("cat {dir}/acknowledged; echo; sha256sum {dir}/receipt.json; cat {dir}/command.sh; stat -c %a {dir}")).await;
        let lines: Vec<&str> = ack.lines().collect();
        assert_eq!(lines[0], lines[1].split_whitespace().next().unwrap(), "{ack}");
        assert_eq!(lines[2], "exec 'input' 'keyevent' '66'");
        assert_eq!(lines[3], "700", "umask 077");
        println!("shell keyevent round trips: {}", json!(r.round_trips));
        // stdout/stderr come back (base64 on the wire).
        let job2 = Job::new(&uuid(2), &["sh", "-c", "echo out; echo err >&2; exit 3"]).unwrap();
        let r2 = run(&ph, &job2, Duration::from_secs(20)).await.unwrap();
        assert_eq!((r2.exit_code, r2.stdout_text(), r2.stderr_text()), (3, "out\n".to_string(), "err\n".to_string()));
        // Measured: keyevent through the worker, 10 times.
        let mut totals = vec![];
        for i in 0..10 {
            let job = Job::new(&uuid(100 + i), &["input", "keyevent", "0"]).unwrap_or_else(|e| panic!("{e}"));
            let t = Instant::now();
            let r = run(&ph, &job, Duration::from_secs(20)).await;
            totals.push(t.elapsed().as_secs_f64() * 1000.0);
            let r = r.unwrap_or_else(|e| panic!("{e:?}"));
            if i == 9 {
                println!("last keyevent round trips: {}", json!(r.round_trips));
            }
        }
        totals.sort_by(f64::total_cmp);
        println!("keyevent through the shell worker: median {:.1} ms, min {:.1} ms, max {:.1} ms (10 runs)", totals[5], totals[0], totals[9]);
        ph.sim.shutdown();
    });
}

#[test]
fn shell_worker_refuses_reuse_and_a_full_store() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut ph = phone(p).await;
        // Prepared but never started (the dispatch step refused): the directory stays.
        let job = Job::new(&uuid(7), &["input", "keyevent", "66"]).unwrap();
        let e = shell_exec::run_job(&ph.device, Deadline::after(Duration::from_secs(20)), STEP, &job, |_| Err(ProviderError::new("refused", "test").not_dispatched())).await.unwrap_err();
        assert_eq!(e.error, "refused");
        let e = run(&ph, &job, Duration::from_secs(20)).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::SHELL_ACTION_ID_REUSED, Some(false)));
        // 512 unacknowledged jobs: the next is refused; acknowledged ones are deleted.
        sh(&ph, &format!("cd {}; i=1; while [ $i -lt 512 ]; do mkdir full-$i; i=$((i+1)); done; mkdir acked; : > acked/acknowledged", shell_exec::ROOT)).await;
        let e = run(&ph, &Job::new(&uuid(8), &["input", "keyevent", "66"]).unwrap(), Duration::from_secs(20)).await.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (codes::SHELL_EXECUTION_STORE_FULL, Some(false)), "{e:?}");
        assert_eq!(sh(&ph, &format!("ls -d {}/acked 2>/dev/null | wc -l", shell_exec::ROOT)).await.trim(), "0", "the acknowledged job was deleted");
        sh(&ph, &format!("rmdir {}/full-1", shell_exec::ROOT)).await;
        run(&ph, &Job::new(&uuid(9), &["input", "keyevent", "66"]).unwrap(), Duration::from_secs(20)).await.unwrap();
        assert_eq!(effects(&ph, "keyevent").await.len(), 1, "only the admitted job ran");
        ph.sim.shutdown();
    });
}

#[test]
fn shell_worker_reboot_mid_action_is_runtime_changed_and_reconcile_stays_unsettled() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut ph = phone(p).await;
        ph.sim.control(json!({"op": "faults", "set": {"slowTool": ["input", "keyevent"], "slowToolMs": 3000}})).await;
        ph.sim.control(json!({"op": "later", "delayMs": 800, "then": {"op": "reboot", "offlineMs": 300}})).await;
        let job = Job::new(&uuid(11), &["input", "keyevent", "66"]).unwrap();
        let e = run(&ph, &job, Duration::from_secs(8)).await.unwrap_err();
        assert_eq!(e.error, codes::SHELL_RUNTIME_CHANGED, "{e:?}");
        assert_eq!(e.dispatched, None, "admitted before the reboot: unknown, left to the dispatch mark (ambiguous)");
        // Past the slow tool's delay: the killed worker's key was never pressed.
        tokio::time::sleep(Duration::from_millis(3000)).await;
        assert!(effects(&ph, "keyevent").await.is_empty(), "the reboot killed the worker before the tool acted");
        let epoch = e.details.as_ref().unwrap()["runtimeEpoch"].as_str().unwrap().to_string();
        let r = shell_exec::reconcile_job(&ph.device, Deadline::after(Duration::from_secs(10)), STEP, &job, &epoch).await.unwrap();
        assert_eq!(r["status"], json!("unsettled"));
        assert_eq!(r["reason"], json!(codes::SHELL_RUNTIME_CHANGED));
        ph.sim.shutdown();
    });
}

#[test]
fn shell_reconcile_settles_from_the_receipt_and_cancels_an_unstarted_job() {
    let p = PrivateServer::new();
    rt().block_on(async {
        let mut ph = phone(p).await;
        // Started, then the host "died" (nothing waited for the receipt).
        let job = Job::new(&uuid(21), &["input", "keyevent", "66"]).unwrap();
        let prepared = crate::shell_exec::client::run(&ph.device, &scripts::prepare(&job, 20_000), deadline()).await.unwrap();
        let epoch = prepared.str("runtimeEpoch").to_string();
        let identity = scripts::identity_text(&job, &epoch, prepared.0["deadlineUptimeMs"].as_u64().unwrap());
        let started = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, &epoch, &identity, 0), deadline()).await.unwrap();
        assert_eq!(started.0["ok"], json!(true), "{:?}", started.0);
        // A second start is refused: a job launches once.
        let again = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, &epoch, &identity, 0), deadline()).await.unwrap();
        assert_eq!(again.str("error"), "shell_already_launched");
        let until = Instant::now() + Duration::from_secs(10);
        let r = loop {
            let r = shell_exec::reconcile_job(&ph.device, Deadline::after(Duration::from_secs(10)), STEP, &job, &epoch).await.unwrap();
            if r["status"] == json!("settled") || Instant::now() > until {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!((r["status"].clone(), r["receipt"]["dispatched"].clone(), r["receipt"]["exitCode"].clone()), (json!("settled"), json!(true), json!(0)), "{r}");
        assert_eq!(effects(&ph, "keyevent").await.len(), 1);
        // Reconcile again: the same receipt, nothing re-run.
        let r2 = shell_exec::reconcile_job(&ph.device, Deadline::after(Duration::from_secs(10)), STEP, &job, &epoch).await.unwrap();
        assert_eq!(r2["receipt"]["shell"], r["receipt"]["shell"]);
        assert_eq!(effects(&ph, "keyevent").await.len(), 1);

        // Prepared, never started: reconcile cancels it (settled, not dispatched) and it never runs.
        let job = Job::new(&uuid(22), &["input", "keyevent", "66"]).unwrap();
        let prepared = crate::shell_exec::client::run(&ph.device, &scripts::prepare(&job, 20_000), deadline()).await.unwrap();
        let epoch = prepared.str("runtimeEpoch").to_string();
        let identity = scripts::identity_text(&job, &epoch, prepared.0["deadlineUptimeMs"].as_u64().unwrap());
        let r = shell_exec::reconcile_job(&ph.device, Deadline::after(Duration::from_secs(10)), STEP, &job, &epoch).await.unwrap();
        assert_eq!((r["status"].clone(), r["receipt"]["dispatched"].clone(), r["receipt"]["error"].clone()), (json!("settled"), json!(false), json!(codes::SHELL_ACTION_CANCELLED)), "{r}");
        // A late start finds admission taken: the worker exits without running.
        let late = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, &epoch, &identity, 300), deadline()).await.unwrap();
        assert_eq!(late.0["settled"], json!(true));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(effects(&ph, "keyevent").await.len(), 1, "the cancelled job never ran");

        // A deadline already passed on the phone: the worker writes the timeout receipt.
        let job = Job::new(&uuid(23), &["input", "keyevent", "66"]).unwrap();
        let prepared = crate::shell_exec::client::run(&ph.device, &scripts::prepare(&job, 0), deadline()).await.unwrap();
        let epoch = prepared.str("runtimeEpoch").to_string();
        let identity = scripts::identity_text(&job, &epoch, prepared.0["deadlineUptimeMs"].as_u64().unwrap());
        let r = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, &epoch, &identity, 2000), deadline()).await.unwrap();
        let receipt: Value = serde_json::from_slice(&r.b64("receipt").unwrap()).unwrap();
        assert_eq!((receipt["error"].clone(), receipt["dispatched"].clone()), (json!(codes::SHELL_ACTION_TIMEOUT), json!(false)));
        // A wrong identity is not started.
        let job = Job::new(&uuid(24), &["input", "keyevent", "66"]).unwrap();
        let prepared = crate::shell_exec::client::run(&ph.device, &scripts::prepare(&job, 20_000), deadline()).await.unwrap();
        let epoch = prepared.str("runtimeEpoch").to_string();
        let r = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, &epoch, "{}", 0), deadline()).await.unwrap();
        assert_eq!(r.str("error"), codes::SHELL_EXECUTION_NOT_FOUND);
        let r = crate::shell_exec::client::run(&ph.device, &scripts::start(&job, "other-boot", "{}", 0), deadline()).await.unwrap();
        assert_eq!(r.str("error"), codes::SHELL_RUNTIME_CHANGED);
        assert_eq!(effects(&ph, "keyevent").await.len(), 1);
        ph.sim.shutdown();
    });
}
