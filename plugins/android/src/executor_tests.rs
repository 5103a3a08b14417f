//! `android-executor` / `flutter-executor` against the simulated phone behind the
//! REAL adb server: a real test APK (aapt + apksigner) declaring an
//! `<instrumentation>` is installed, the plugin runs its operations with a real
//! Context (deadline, dispatch mark, an in-memory FactStore for the action
//! records), arguments validated by the host's validator first. Ground truth is
//! the simulator's: control `executors` (sessions, the device's action records),
//! truth `executor-action` (each applied action once, with its action id), the
//! app state and the Flutter engine. Needs root.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aab_android_sim::{Options, Simulator};
use aab_plugin_api::loader::{CallState, host_callbacks};
use aab_plugin_api::{Command, Context, Invocation, ProviderError};
use serde_json::{Value, json};

use crate::adb::device::Device;
use crate::commands::Budget;
use crate::executor::{ExecutorArgs, Flavor, codes, run_on};
use crate::test_support::{PrivateServer, deadline};

const TARGET: &str = "com.example.aab.sample";
const TEST_PKG: &str = "com.example.aab.sample.test";
const RUNNER: &str = "io.github.aab.executor.ExecutorRunner";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The test APK's bytes, built once per test process (a keystore costs seconds).
fn test_apk() -> &'static [u8] {
    static APK: OnceLock<Vec<u8>> = OnceLock::new();
    APK.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ks = aab_android_sim::test_apk::keystore(dir.path(), "exec");
        std::fs::read(aab_android_sim::test_apk::instrumentation_apk(dir.path(), TEST_PKG, &[(RUNNER, TARGET)], &ks)).unwrap()
    })
}

/// The FactStore of the fake host: (stream, key, record).
type Facts = Arc<Mutex<Vec<(String, String, Value)>>>;

struct World {
    sim: Simulator,
    _adb: PrivateServer,
    device: Device,
    facts: Facts,
    next: std::sync::atomic::AtomicU64,
}

async fn world() -> World {
    let p = PrivateServer::new();
    let sim = Simulator::start(Options::default()).await.expect("start the simulator (needs root, adb and busybox-static)");
    let serial = sim.devices[0].serial.clone();
    let mut said = p.server.connect_device(&serial, deadline()).await;
    for _ in 0..3 {
        match &said {
            Err(e) if e.message.contains("early eof") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                said = p.server.connect_device(&serial, deadline()).await;
            }
            _ => break,
        }
    }
    assert!(said.unwrap().contains("connected to"));
    let until = Instant::now() + Duration::from_secs(15);
    while !p.server.devices(deadline()).await.unwrap().iter().any(|d| d.serial == serial && d.state == "device") {
        assert!(Instant::now() < until, "{serial} never came online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let device = Device::new(p.server.clone(), serial);
    World { sim, _adb: p, device, facts: Arc::default(), next: 1.into() }
}

impl World {
    async fn install(&self) {
        self.device.push("/data/local/tmp/exec-test.apk", 0o644, test_apk(), 1_700_000_000, deadline()).await.unwrap();
        let out = self.device.shell("pm install /data/local/tmp/exec-test.apk", None, deadline()).await.unwrap();
        assert!(out.stdout_text().contains("Success"), "{}{}", out.stdout_text(), out.stderr_text());
    }

    async fn control(&self, req: Value) -> Value {
        self.sim.control(req).await
    }

    fn host(&self, dispatched: Arc<AtomicBool>) -> aab_plugin_api::abi::HostCallbacksRef {
        let store = self.facts.clone();
        host_callbacks(CallState {
            deadline: Instant::now() + Duration::from_secs(30),
            cancelled: Arc::new(AtomicBool::new(false)),
            dispatched,
            on_dispatch: None,
            logger: Box::new(|_, _| {}),
            service: Box::new(move |method, params| {
                let p: Value = serde_json::from_str(params).unwrap();
                let mut s = store.lock().unwrap();
                match method {
                    "host.info" => Ok(json!({"hostVersion": "test", "pluginApi": aab_plugin_api::protocol::PLUGIN_API_VERSION, "runtimeId": "test", "plugin": "android", "dataDir": null, "services": ["host.info", "facts.append", "facts.read"], "features": []}).to_string()),
                    "facts.append" => {
                        s.push((p["stream"].as_str().unwrap().into(), p["key"].as_str().unwrap_or("").into(), p["record"].clone()));
                        Ok(json!({"sequence": s.len(), "receiptId": format!("r{}", s.len()), "committedAtMs": 1}).to_string())
                    }
                    "facts.read" => {
                        let after = p["afterSequence"].as_u64().unwrap_or(0) as usize;
                        let records: Vec<Value> = s
                            .iter()
                            .enumerate()
                            .filter(|(i, (st, k, _))| i + 1 > after && st == p["stream"].as_str().unwrap() && p.get("key").is_none_or(|want| want == k))
                            .map(|(i, (_, k, r))| json!({"sequence": i + 1, "key": k, "record": r, "committedAtMs": 1}))
                            .collect();
                        Ok(json!({"records": records, "nextSequence": s.len(), "hasMore": false, "gap": null, "expired": false}).to_string())
                    }
                    other => Err(json!({"error": "unsupported_host_service", "message": other}).to_string()),
                }
            }),
        })
    }

    /// One call as the host makes it: validated against the command's schema first
    /// (a refusal never reaches the device), then run with a fresh action id.
    /// Returns the result, whether the call marked dispatch, and its action id.
    async fn call(&self, flavor: Flavor, args: Value) -> (Result<Value, ProviderError>, bool, String) {
        let spec = match flavor {
            Flavor::Android => crate::commands::executor::AndroidExecutor::spec(),
            Flavor::Flutter => crate::commands::executor::FlutterExecutor::spec(),
        };
        let action_id = format!("host-action-test-{}", self.next.fetch_add(1, Ordering::SeqCst));
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
        let v = aab_plugin_api::validate::compile(&schema).unwrap();
        if let Err(e) = aab_plugin_api::validate::validate_arguments(&spec.command, &v, &schema, &args) {
            return (Err(e), false, action_id);
        }
        let dispatched = Arc::new(AtomicBool::new(false));
        let host = self.host(dispatched.clone());
        let ctx = Context::new(&host);
        let inv = Invocation::new(flavor.command(), args.clone(), action_id.clone(), "test-epoch", "/", 30_000);
        let a: ExecutorArgs = serde_json::from_value(args).unwrap();
        let budget = Budget::new(&ctx, None);
        let r = run_on(&ctx, &inv, flavor, &a, self.device.clone(), &budget).await;
        (r, dispatched.load(Ordering::SeqCst), action_id)
    }

    async fn ok(&self, flavor: Flavor, args: Value) -> (Value, String) {
        let (r, _, id) = self.call(flavor, args.clone()).await;
        (r.unwrap_or_else(|e| panic!("{args} failed: {e:?}")), id)
    }

    async fn fails(&self, flavor: Flavor, args: Value, code: &str) -> (ProviderError, bool) {
        let (r, marked, _) = self.call(flavor, args.clone()).await;
        let e = r.expect_err(&format!("{args} must fail with {code}"));
        assert_eq!(e.error, code, "{e:?}");
        (e, marked)
    }

    async fn executors(&self) -> Value {
        self.control(json!({"op": "executors"})).await
    }

    /// Truth `executor-action` records of `action_id` (each applied action once).
    async fn applied(&self, action_id: &str) -> usize {
        self.executors().await["applied"].as_array().unwrap().iter().filter(|a| a["data"]["actionId"] == json!(action_id)).count()
    }

    async fn app(&self) -> Value {
        let st = self.control(json!({"op": "state"})).await;
        st["apps"].as_array().unwrap().iter().find(|a| a["package"] == json!(TARGET)).cloned().unwrap()
    }

    async fn until(&self, what: &str, f: impl Fn(&Value) -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !f(&self.executors().await) {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn base(w: &World, op: &str) -> Value {
    json!({"operation": op, "packageName": TARGET, "serial": w.device.serial})
}

fn with(mut a: Value, extra: Value) -> Value {
    a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    a
}

fn ident(open: &Value) -> Value {
    json!({"sessionId": open["sessionId"], "runtimeEpoch": open["runtimeEpoch"]})
}

fn node<'a>(observed: &'a Value, key: &str, value: &str) -> &'a Value {
    observed["snapshot"]["nodes"].as_array().unwrap().iter().find(|n| n[key] == json!(value)).unwrap_or_else(|| panic!("no node {key}={value}"))
}

#[test]
fn not_prepared_then_open_observe_act_receipt_close_against_ground_truth() {
    rt().block_on(async {
        let w = world().await;
        let a = Flavor::Android;
        // Not prepared: refused before anything runs on the phone.
        let (e, marked) = w.fails(a, with(base(&w, "open"), json!({"activity": ".MainActivity"})), codes::NOT_PREPARED).await;
        assert_eq!((e.dispatched, marked), (Some(false), false));
        assert!(e.message.contains("executor-prepare") && e.message.contains("install-apk"), "{}", e.message);
        assert!(w.control(json!({"op": "truth", "kind": "instrumentation"})).await["items"].as_array().unwrap().is_empty(), "ground truth: am instrument never ran");
        w.install().await;
        let (st, _) = w.ok(a, json!({"operation": "status", "packageName": TARGET})).await;
        assert_eq!((st["prepared"].clone(), st["instrumentations"][0]["component"].clone(), st["session"].clone()), (json!(true), json!(format!("{TEST_PKG}/{RUNNER}")), Value::Null), "{st}");

        // Hostile input is refused by the schema before any device access.
        let before = w.device_truth_len();
        let (e, marked) = w.fails(a, with(base(&w, "act"), json!({"sessionId": "x", "runtimeEpoch": "0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30", "snapshotId": "s1 && reboot", "action": {"type": "back"}})), "invalid_argument").await;
        assert_eq!((e.field.as_deref(), e.dispatched, marked), (Some("snapshotId"), Some(false), false));
        let huge = "z".repeat(16385);
        let (e, _) = w.fails(a, with(base(&w, "act"), json!({"sessionId": "x", "runtimeEpoch": "0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30", "snapshotId": "s1", "action": {"type": "input", "targetRef": {"schemaVersion": "aab.executor-target/v1", "ref": "n1", "guard": "0123456789abcdef"}, "text": huge}})), "invalid_argument").await;
        assert_eq!(e.field.as_deref(), Some("action.text"));
        assert_eq!(w.device_truth_len(), before, "ground truth: the phone saw nothing");

        let (open, open_id) = w.ok(a, with(base(&w, "open"), json!({"activity": ".MainActivity", "sessionId": "plugin-native"}))).await;
        assert_eq!((open["sessionId"].as_str(), open["engine"].as_str(), open["leaseMs"].as_u64()), (Some("plugin-native"), Some("native"), Some(60_000)), "{open}");
        let sessions = w.executors().await;
        let truth = sessions["sessions"].as_array().unwrap().last().unwrap().clone();
        assert_eq!((truth["sessionId"].clone(), truth["runtimeEpoch"].clone(), truth["state"].clone()), (open["sessionId"].clone(), open["runtimeEpoch"].clone(), json!("running")), "ground truth: the session runs");
        assert!(w.facts.lock().unwrap().iter().any(|(s, k, r)| s == "android.actions" && *k == open_id && r["kind"] == "executor" && r["device"]["operation"] == "open"), "the action record precedes the dispatch");
        let (e, _) = w.fails(a, with(base(&w, "open"), json!({})), codes::SESSION_ACTIVE).await;
        assert_eq!(e.dispatched, Some(false));
        let id = ident(&open);

        // observe → input; the same snapshot then is stale.
        let (s1, _) = w.ok(a, with(base(&w, "observe"), id.clone())).await;
        let email = node(&s1, "resourceName", &format!("{TARGET}:id/email"))["targetRef"].clone();
        let (typed, typed_id) = w.ok(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "input", "targetRef": email, "text": "ann@example.com"}})))).await;
        assert_eq!((typed["receipt"]["actionId"].as_str(), typed["proof"]["kind"].as_str()), (Some(typed_id.as_str()), Some("executor")), "{typed}");
        assert_eq!(w.app().await["values"]["email"], json!("ann@example.com"));
        let sign_in = node(&s1, "text", "Sign in")["targetRef"].clone();
        let (e, marked) = w.fails(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "tap", "targetRef": sign_in}}))), "reobserve_required").await;
        assert_eq!((e.dispatched, marked, e.field.as_deref()), (Some(false), true, Some("snapshotId")));
        let (s2, _) = w.ok(a, with(base(&w, "observe"), id.clone())).await;
        let sign_in = node(&s2, "text", "Sign in")["targetRef"].clone();
        let (tap, tap_id) = w.ok(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s2["snapshotId"], "action": {"type": "tap", "targetRef": sign_in}})))).await;
        assert_eq!(tap["receipt"]["ok"], json!(true));
        assert_eq!(w.app().await["screen"], json!("welcome"), "ground truth: signed in");
        assert_eq!((w.applied(&typed_id).await, w.applied(&tap_id).await), (1, 1), "each action applied exactly once");
        let (r, _) = w.ok(a, with(base(&w, "receipt"), with(id.clone(), json!({"actionId": tap_id})))).await;
        assert_eq!((r["settled"].clone(), r["source"].clone(), r["receipt"]["type"].clone()), (json!(true), json!("executor"), json!("tap")), "{r}");

        // A lost reply: ambiguous, never resent; the device's record settles it.
        w.control(json!({"op": "faults", "set": {"executorDropReplies": 1}})).await;
        let (s3, _) = w.ok(a, with(base(&w, "observe"), id.clone())).await;
        let (r, marked, lost_id) = w.call(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s3["snapshotId"], "action": {"type": "back"}})))).await;
        let e = r.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched, e.ambiguous, marked), (codes::REPLY_LOST, None, None, true), "{e:?}");
        assert_eq!(w.applied(&lost_id).await, 1, "ground truth: applied once, not retried");
        let (r, _) = w.ok(a, with(base(&w, "receipt"), with(id.clone(), json!({"actionId": lost_id})))).await;
        assert_eq!((r["settled"].clone(), r["receipt"]["ok"].clone()), (json!(true), json!(true)), "{r}");
        let record = w.facts.lock().unwrap().iter().rev().find(|(_, k, _)| *k == lost_id).map(|x| x.2.clone()).unwrap();
        let host = w.host(Arc::default());
        let ctx = Context::new(&host);
        let (receipt, proof) = crate::executor::reconcile_on(&ctx, &record, w.device.clone()).await.expect("reconcile settles from the device's record");
        assert_eq!((receipt["actionId"].as_str(), proof["settled"].clone()), (Some(lost_id.as_str()), json!(true)));

        // close: the instrumentation finishes; later calls say closed.
        let (closed, _) = w.ok(a, with(base(&w, "close"), id.clone())).await;
        assert_eq!((closed["closed"].clone(), closed["instrumentation"]["endReason"].clone(), closed["instrumentation"]["code"].clone()), (json!(true), json!("closed"), json!(-1)), "{closed}");
        let last = w.executors().await["sessions"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["endReason"], json!("closed"), "ground truth");
        let (e, _) = w.fails(a, with(base(&w, "observe"), id.clone()), codes::SESSION_CLOSED).await;
        assert_eq!(e.dispatched, Some(false));
    });
}

impl World {
    fn device_truth_len(&self) -> u64 {
        self.sim.devices[0].truth_len()
    }
}

#[test]
fn lease_expiry_busy_and_a_death_mid_action() {
    rt().block_on(async {
        let w = world().await;
        let a = Flavor::Android;
        w.install().await;
        // A 1 s lease that nobody renews.
        let (open, _) = w.ok(a, with(base(&w, "open"), json!({"leaseMs": 1000}))).await;
        let sid = open["sessionId"].clone();
        w.until("the lease to expire", |x| x["sessions"].as_array().unwrap().iter().any(|s| s["sessionId"] == sid && s["endReason"] == "lease_expired")).await;
        let (e, _) = w.fails(a, with(base(&w, "observe"), ident(&open)), codes::SESSION_EXPIRED).await;
        assert_eq!(e.dispatched, Some(false));

        // Busy: a slow action holds the device's one slot; a second act is refused undispatched.
        let (open, _) = w.ok(a, with(base(&w, "open"), json!({}))).await;
        let id = ident(&open);
        let (s1, _) = w.ok(a, with(base(&w, "observe"), id.clone())).await;
        let create = node(&s1, "text", "Create account")["targetRef"].clone();
        w.control(json!({"op": "faults", "set": {"executorActionDelayMs": 1500}})).await;
        let slow = w.call(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "tap", "targetRef": create}}))));
        let second = async {
            w.until("the slow action to hold the slot", |x| x["sessions"].as_array().unwrap().last().unwrap()["activeActionId"].is_string()).await;
            w.call(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s1["snapshotId"], "action": {"type": "back"}})))).await
        };
        let ((slow, _, slow_id), (busy, _, busy_id)) = tokio::join!(slow, second);
        assert_eq!(slow.unwrap()["receipt"]["ok"], json!(true));
        let e = busy.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), ("android_executor_action_busy", Some(false)));
        assert_eq!((w.applied(&slow_id).await, w.applied(&busy_id).await), (1, 0));
        w.control(json!({"op": "faults", "reset": true})).await;

        // The instrumentation's process dies mid-action: unresolved, never retried.
        let (s2, _) = w.ok(a, with(base(&w, "observe"), id.clone())).await;
        w.control(json!({"op": "faults", "set": {"executorCrashMidAction": 1}})).await;
        let (r, marked, dead_id) = w.call(a, with(base(&w, "act"), with(id.clone(), json!({"snapshotId": s2["snapshotId"], "action": {"type": "back"}})))).await;
        let e = r.unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched, marked), (codes::REPLY_LOST, None, true), "ambiguous: {e:?}");
        assert_eq!(w.applied(&dead_id).await, 0, "ground truth: never applied");
        let (r, _) = w.ok(a, with(base(&w, "receipt"), with(id.clone(), json!({"actionId": dead_id})))).await;
        assert_eq!((r["source"].clone(), r["phase"].clone(), r["settled"].clone(), r["outcome"].clone()), (json!("journal"), json!("admitted"), json!(false), json!("unknown")), "{r}");
        let record = w.facts.lock().unwrap().iter().rev().find(|(_, k, _)| *k == dead_id).map(|x| x.2.clone()).unwrap();
        let host = w.host(Arc::default());
        let ctx = Context::new(&host);
        let unsettled = crate::executor::reconcile_on(&ctx, &record, w.device.clone()).await.expect_err("an admitted action of a dead session stays unresolved");
        assert_eq!(unsettled["reason"], json!(codes::ACTION_UNRESOLVED));
        let (e, _) = w.fails(a, with(base(&w, "observe"), id.clone()), codes::SESSION_LOST).await;
        assert_eq!(e.dispatched, Some(false));
        let trace = w.executors().await;
        let dead = trace["sessions"].as_array().unwrap().iter().find(|s| s["sessionId"] == open["sessionId"]).unwrap().clone();
        assert_eq!((dead["endReason"].clone(), dead["actions"].as_array().unwrap().iter().find(|x| x["actionId"] == json!(dead_id)).unwrap()["phase"].clone()), (json!("process_died"), json!("admitted")));
    });
}

#[test]
fn flutter_executor_runs_the_flutter_action_set_on_the_shop() {
    rt().block_on(async {
        let w = &world().await;
        let f = Flavor::Flutter;
        w.install().await;
        let (open, _) = w.ok(f, with(base(w, "open"), json!({"activity": "io.flutter.embedding.android.FlutterActivity"}))).await;
        assert_eq!(open["engine"], json!("flutter"));
        let id = ident(&open);
        let flutter = || async { w.control(json!({"op": "flutter", "package": TARGET})).await };
        let effects = |all: Value, kind: &str, action_id: &str| all["effects"].as_array().unwrap().iter().filter(|e| e["kind"] == json!(kind) && e["data"]["actionId"] == json!(action_id)).count();
        let observe = || async { w.ok(f, with(base(w, "observe"), id.clone())).await.0 };
        let act = |s: Value, action: Value| {
            let args = with(base(w, "act"), with(id.clone(), json!({"snapshotId": s["snapshotId"], "action": action})));
            async move { w.ok(f, args).await }
        };

        let s = observe().await;
        assert_eq!(s["snapshot"]["flutter"]["route"], json!("/"));
        let (r, tap_id) = act(s.clone(), json!({"type": "tap", "targetRef": node(&s, "text", "Add to cart")["targetRef"]})).await;
        assert_eq!(r["receipt"]["type"], json!("tap"));
        assert_eq!(effects(flutter().await, "flutter-tap", &tap_id), 1, "ground truth: one Flutter tap by this action");
        let s = observe().await;
        let (_, text_id) = act(s.clone(), json!({"type": "enterText", "targetRef": node(&s, "label", "Search")["targetRef"], "text": "red shoes"})).await;
        let engine = flutter().await;
        assert_eq!((engine["engine"]["values"]["search"].clone(), effects(engine, "flutter-text", &text_id)), (json!("red shoes"), 1));
        let s = observe().await;
        let far = node(&s, "text", "Product 30")["targetRef"].clone();
        let (r, _) = act(s, json!({"type": "ensureVisible", "targetRef": far})).await;
        assert_eq!(r["receipt"]["alreadyVisible"], json!(false), "{r}");
        assert!(flutter().await["engine"]["scroll"]["products"].as_f64().unwrap() > 0.0, "ground truth: the list scrolled");
        let s = observe().await;
        let (_, drag_id) = act(s.clone(), json!({"type": "drag", "targetRef": node(&s, "text", "Product 30")["targetRef"], "dx": 0, "dy": 80})).await;
        assert_eq!(effects(flutter().await, "flutter-scroll", &drag_id), 1);
        let s = observe().await;
        let (r, _) = act(s, json!({"type": "pump", "durationMs": 16})).await;
        assert_eq!(r["receipt"]["pumpedMs"], json!(16));
        // flutter-executor refuses a native session; android-executor drives either.
        let (closed, _) = w.ok(f, with(base(w, "close"), id.clone())).await;
        assert_eq!(closed["closed"], json!(true));
        let (native, _) = w.ok(Flavor::Android, with(base(w, "open"), json!({}))).await;
        let (e, _) = w.fails(f, with(base(w, "observe"), ident(&native)), codes::ENGINE_MISMATCH).await;
        assert_eq!(e.dispatched, Some(false));
        let (st, _) = w.ok(Flavor::Android, with(base(w, "status"), ident(&native))).await;
        assert_eq!(st["session"]["engine"], json!("native"));
    });
}
