//! The world both iOS e2e files (`ios`, `ios_wda`) run in: a test environment with
//! the named iOS plugins installed, one simulated iPhone reached through its
//! devicectl double, and the CLI helpers that assert a command's outcome. Kept in
//! one place so both providers are driven, and their failures judged, the same way.

use aab_e2e::{Run, TestEnv, error_facts, flags};
use serde_json::{Value, json};

/// The app the simulated iPhone runs with the SDK.
pub const APP: &str = "com.example.aab.ios";
/// A second installed app (another listener, another bundle).
pub const OTHER: &str = "com.example.aab.other";

/// aab with iOS plugins, pointed at one simulated iPhone through its devicectl double.
pub struct World {
    pub env: TestEnv,
    pub sim: aab_ios_sim::Simulator,
    pub rt: tokio::runtime::Runtime,
    pub udid: String,
}

impl World {
    /// `plugins`: `(cdylib name, plugin name)` pairs, e.g. `("aab_plugin_ios", "ios")`.
    pub fn new(plugins: &[(&str, &str)]) -> World {
        let env = TestEnv::new();
        for (library, name) in plugins {
            env.install_plugin(library, name);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let sim = rt.block_on(aab_ios_sim::Simulator::start(aab_ios_sim::Options::default())).expect("start the iOS simulator (cargo build -p aab-ios-sim)");
        env.set_env("AI_APP_BRIDGE_DEVICECTL", sim.devicectl().display().to_string());
        let udid = sim.devices[0].udid.clone();
        World { env, sim, rt, udid }
    }

    pub fn control(&self, req: Value) -> Value {
        let v = self.rt.block_on(self.sim.control(req.clone()));
        assert_eq!(v["ok"], json!(true), "control {req}: {v}");
        v
    }

    pub fn state(&self) -> Value {
        self.control(json!({"op": "state"}))
    }

    /// Ground truth log `kind` (h5, flutter, wda, devicectl, sdk-request, completion…).
    pub fn truth(&self, kind: &str) -> Vec<Value> {
        self.control(json!({"op": "truth", "kind": kind}))["items"].as_array().cloned().unwrap_or_default()
    }

    pub fn run(&self, command: &str, args: Value) -> (Value, Run) {
        let mut argv = vec![command.to_string()];
        argv.extend(flags(&args));
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = self.env.aab(&refs);
        let body = self.env.json_of(&run);
        (body, run)
    }

    #[track_caller]
    pub fn ok(&self, command: &str, args: Value) -> Value {
        let (body, run) = self.run(command, args);
        self.env.check(run.exit() == 0 && body.pointer("/execution/ok") == Some(&json!(true)), &run, &format!("{command} should succeed"));
        body["value"].clone()
    }

    /// The command fails with `code`; returns the error facts.
    #[track_caller]
    pub fn fails_with(&self, command: &str, args: Value, code: &str) -> Value {
        let (body, run) = self.run(command, args);
        let facts = error_facts(&body).clone();
        self.env.check(run.exit() != 0 && facts["error"] == json!(code), &run, &format!("{command} should fail with {code}"));
        facts
    }

    /// The command fails with `code`, never dispatched.
    #[track_caller]
    pub fn refused(&self, command: &str, args: Value, code: &str) -> Value {
        let facts = self.fails_with(command, args, code);
        assert_eq!((facts["dispatched"].clone(), facts["ambiguous"].clone()), (json!(false), json!(false)), "{command}: {facts}");
        facts
    }

    /// The ownership key of the phone: its UDID, whatever alias a command used.
    pub fn device_key(&self) -> String {
        format!("ios:{}", self.udid)
    }

    /// `device-ownership status` of the phone's one journal.
    pub fn ownership(&self) -> Value {
        self.ok("device-ownership", json!({"operation": "status", "serial": self.device_key()}))
    }

    pub fn phase(&self) -> Value {
        self.ownership()["phase"].clone()
    }
}

/// `base` with `extra`'s keys added or replaced.
pub fn with(base: &Value, extra: Value) -> Value {
    let mut a = base.clone();
    if let (Value::Object(a), Value::Object(e)) = (&mut a, extra) {
        a.extend(e);
    }
    a
}
