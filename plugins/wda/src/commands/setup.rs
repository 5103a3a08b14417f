//! `ios-setup` (expert, denied to Scripts by default): prepare the WebDriverAgent
//! copy ([`crate::prepared`]), build it on the host with `xcodebuild
//! build-for-testing` and, with `startWda` (default), start it on the device with
//! `test-without-building` in its own process group, polling the Runner container
//! until a NEW ready descriptor answers `/aab/status` bound to it. Returns
//! `wdaRunnerBundleId` (`<wdaTestBundleId>.xctrunner`).
//!
//! Dispatch: everything up to and including the build is host-local — a compile
//! failure is `ios_wda_build_failed`, not dispatched. The mark comes right before
//! the first device effect (`appPath` install, then the test run). A Runner that
//! already serves the device is reported and left alone (`alreadyRunning`): setup
//! never kills a process group it did not start. A setup that fails after starting
//! its xcodebuild stops that group and waits for it; the device outcome then needs
//! the reconcile proof (a Runner that came up, or the test run's end).
//! With `bundleId`, the App is launched after the Runner is ready (starting the
//! Runner takes the foreground) and a fresh SDK status is read through a newly
//! copied descriptor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aab_ios_transport::wda::{DEFAULT_TEST_BUNDLE_ID, descriptor};
use aab_ios_transport::devicectl::mutation_failure;
use aab_ios_transport::{Deadline, DeviceRecord, Devicectl, require_developer_tunnel, select_device};
use aab_plugin_api::host::Durability;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::cancellable;
use crate::WdaProvider;
use crate::manifest::{bundle_id, device_id, object};
use crate::prepared::{SETUP_UNAVAILABLE, prepare};
use crate::xcodebuild::{self, GroupGuard, Invocation as Build};

pub const BUILD_FAILED: &str = "ios_wda_build_failed";
pub const TEAM_REQUIRED: &str = "ios_wda_team_required";
pub const START_FAILED: &str = "ios_wda_start_failed";
pub const RUNNER_NOT_READY: &str = "ios_wda_runner_not_ready";
pub const APP_NOT_READY: &str = "ios_wda_app_not_ready";
const SETUP_STREAM: &str = "ios.wda.setup";
const SETUP_SCHEMA: &str = "aab.ios-wda-setup-record/v1";
const POLL: Duration = Duration::from_millis(100);

fn spec() -> CommandSpec {
    CommandSpec::mutation("ios-setup")
        .platform("ios")
        .domain("ios")
        .role("expert")
        .target_kind("ios-device")
        .target_key("deviceId")
        .device_key("deviceId")
        .timeouts(300_000, 600_000)
        .summary("Prepare the WebDriverAgent copy (manifest aab-wda-project.json with before/after hashes), xcodebuild build-for-testing on the host and, with startWda (default true), test-without-building on the device until the Runner's descriptor is ready; returns wdaRunnerBundleId. teamId signs the build.")
        .input_schema(object(
            json!({
                "deviceId": device_id(),
                "teamId": {"type": "string", "pattern": "^[A-Z0-9]{10}$", "description": "Apple development team (DEVELOPMENT_TEAM) that signs the Runner; required"},
                "wdaTestBundleId": bundle_id("XCTest bundle id of the Runner (default io.github.mobileaidev.aiappbridge.wda)"),
                "wdaRunnerBundleId": bundle_id("Expected Runner app id; must be <wdaTestBundleId>.xctrunner"),
                "startWda": {"type": "boolean", "description": "Start the Runner on the device after the build (default true)"},
                "appPath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "An .app/.ipa to install first (relative to the caller's directory)"},
                "bundleId": bundle_id("The App to launch once the Runner is ready (its fresh SDK status is checked)"),
                "devicectl": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "devicectl program (default: $AI_APP_BRIDGE_DEVICECTL, then xcrun devicectl)"},
                "xcodebuild": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "xcodebuild program (default: $AI_APP_BRIDGE_XCODEBUILD, then xcodebuild)"}
            }),
            &["deviceId"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetupArgs {
    pub device_id: String,
    pub team_id: Option<String>,
    pub wda_test_bundle_id: Option<String>,
    pub wda_runner_bundle_id: Option<String>,
    pub start_wda: Option<bool>,
    pub app_path: Option<String>,
    pub bundle_id: Option<String>,
    pub devicectl: Option<String>,
    pub xcodebuild: Option<String>,
}

/// The checked plan of a setup (no device or file access yet).
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub team_id: String,
    pub test_bundle_id: String,
    pub runner_bundle_id: String,
    pub app_path: Option<PathBuf>,
}

pub fn plan(args: &SetupArgs, cwd: &str) -> Result<Plan, ProviderError> {
    let Some(team_id) = args.team_id.clone() else {
        return Err(ProviderError::new(TEAM_REQUIRED, "signing the Runner needs teamId (the Apple development team, DEVELOPMENT_TEAM)").with_field("teamId").not_dispatched());
    };
    let test_bundle_id = args.wda_test_bundle_id.clone().unwrap_or_else(|| DEFAULT_TEST_BUNDLE_ID.to_string());
    let runner_bundle_id = format!("{test_bundle_id}.xctrunner");
    if !descriptor::is_bundle_id(&runner_bundle_id) {
        return Err(ProviderError::new("invalid_argument", "wdaTestBundleId + .xctrunner is longer than a bundle id may be").with_field("wdaTestBundleId").not_dispatched());
    }
    if let Some(r) = &args.wda_runner_bundle_id
        && *r != runner_bundle_id
    {
        return Err(ProviderError::new("invalid_argument", format!("the Runner of test bundle {test_bundle_id} is {runner_bundle_id}, not {r}")).with_field("wdaRunnerBundleId").not_dispatched());
    }
    let app_path = match &args.app_path {
        None => None,
        Some(p) => {
            let path = Path::new(cwd).join(p);
            if !path.exists() {
                return Err(ProviderError::new("invalid_argument", format!("appPath {} does not exist", path.display())).with_field("appPath").not_dispatched());
            }
            Some(path)
        }
    };
    Ok(Plan { team_id, test_bundle_id, runner_bundle_id, app_path })
}

/// A path component from a UDID (hex and dashes in practice).
fn safe_component(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

fn unavailable(what: &str, e: std::io::Error) -> ProviderError {
    ProviderError::new(SETUP_UNAVAILABLE, format!("{what}: {e}")).not_dispatched()
}

/// The ready Runner of the device, if one answers right now (any epoch).
async fn serving(devicectl: &Devicectl, device: &DeviceRecord, runner: &str, deadline: Deadline) -> Option<aab_ios_transport::wda::Connection> {
    let conn = aab_ios_transport::wda::connection::open(devicectl, device.clone(), runner, None, deadline).await.ok()?;
    conn.status(deadline).await.ok()?;
    Some(conn)
}

fn runner_facts(conn: &aab_ios_transport::wda::Connection) -> Value {
    json!({"runtimeEpoch": conn.descriptor.runtime_epoch, "processId": conn.descriptor.process_id, "port": conn.descriptor.port, "wdaUrl": conn.url})
}

async fn run(ctx: &Context<'_>, inv: &Invocation, args: &SetupArgs) -> Result<Value, ProviderError> {
    let deadline = Deadline::after(ctx.remaining());
    let plan = plan(args, &inv.cwd)?;
    let Some(data) = ctx.data_dir() else {
        return Err(ProviderError::new(SETUP_UNAVAILABLE, "the host gives this plugin no data directory: the prepared project has nowhere to live").not_dispatched());
    };
    let devicectl = Devicectl::resolve(args.devicectl.as_deref());
    let devices = devicectl.list_devices(aab_ios_transport::devicectl::step(deadline, 30)).await?;
    let device = select_device(&devices, &args.device_id)?;
    let start = args.start_wda.unwrap_or(true);
    if start {
        // The Runner is reached over the tunnel: refuse before building when it is down.
        require_developer_tunnel(&device)?;
    }
    let root = data.join("wda");
    let prepared = prepare(&root)?;
    let device_dir = root.join("devices").join(safe_component(&device.udid));
    std::fs::create_dir_all(&device_dir).map_err(|e| unavailable("cannot create the device build directory", e))?;
    let program = xcodebuild::resolve(args.xcodebuild.as_deref());
    let derived = device_dir.join("build");
    let build = Build { program: &program, project_dir: &prepared.dir, udid: &device.udid, derived_data: &derived, team_id: &plan.team_id, test_bundle_id: &plan.test_bundle_id };
    let build_log = device_dir.join("build-for-testing.log");
    let started = std::time::Instant::now();
    let built = xcodebuild::build_for_testing(&build, &build_log, deadline).await?;
    let build_facts = json!({"exitCode": built.exit_code, "log": built.log, "durationMs": started.elapsed().as_millis() as u64, "arguments": build.args("build-for-testing")});
    if !built.success {
        return Err(ProviderError::new(BUILD_FAILED, format!("xcodebuild build-for-testing failed (exit {:?}); nothing was sent to the device", built.exit_code))
            .with_details(json!({"build": build_facts, "tail": xcodebuild::tail(&build_log)}))
            .not_dispatched());
    }
    let mut out = json!({
        "ok": true, "deviceId": args.device_id, "udid": device.udid, "device": device.identifier,
        "teamId": plan.team_id, "wdaTestBundleId": plan.test_bundle_id, "wdaRunnerBundleId": plan.runner_bundle_id,
        "project": {"path": prepared.dir, "manifest": prepared.dir.join(crate::prepared::MANIFEST_FILE), "manifestSha256": prepared.manifest_sha256, "reused": prepared.reused, "upstream": prepared.manifest["upstream"]},
        "build": build_facts, "runner": null,
    });
    if !start {
        return Ok(out);
    }
    if let Some(conn) = serving(&devicectl, &device, &plan.runner_bundle_id, deadline).await {
        // Someone's Runner already serves: never replaced, never killed.
        let mut r = runner_facts(&conn);
        r["alreadyRunning"] = json!(true);
        out["runner"] = r;
        return Ok(out);
    }
    let previous_epoch = match descriptor::copy(&devicectl, &device.identifier, &plan.runner_bundle_id, aab_ios_transport::devicectl::step(deadline, 5)).await {
        Ok(Some(bytes)) => descriptor::parse(&bytes, &plan.runner_bundle_id).ok().map(|d| d.runtime_epoch),
        _ => None,
    };
    let test_log = device_dir.join("test-without-building.log");
    let mut record = json!({"schemaVersion": SETUP_SCHEMA, "actionId": inv.action_id, "deviceId": args.device_id, "udid": device.udid, "device": device.identifier,
                            "runnerBundleId": plan.runner_bundle_id, "previousEpoch": previous_epoch, "devicectl": args.devicectl, "xcodebuildPid": null, "log": test_log});
    append_record(ctx, &inv.action_id, &record)?;
    ctx.mark_dispatched();
    if let Some(app) = &plan.app_path {
        let installed = devicectl.install_app(&device.identifier, app, deadline).await.map_err(mutation_failure)?;
        out["app"] = json!({"installed": installed, "appPath": app});
    }
    let mut child = xcodebuild::start_test(&build, &test_log).map_err(|e| after_install(e, plan.app_path.is_some()))?;
    let pid = child.id();
    let mut guard = GroupGuard::new(pid);
    record["xcodebuildPid"] = json!(pid);
    // Best effort: the pid helps reconcile tell a finished test run from a running one.
    let _ = append_record(ctx, &inv.action_id, &record);
    let conn = loop {
        if let Ok(Some(status)) = child.try_wait() {
            guard.disarm();
            return Err(ProviderError::new(START_FAILED, format!("xcodebuild test-without-building ended (exit {:?}) before the Runner was ready", status.code()))
                .with_details(json!({"log": test_log, "tail": xcodebuild::tail(&test_log), "exitCode": status.code()}))
                .settled_after_dispatch());
        }
        if let Some(conn) = serving(&devicectl, &device, &plan.runner_bundle_id, deadline.capped(Duration::from_secs(10))).await
            && Some(&conn.descriptor.runtime_epoch) != previous_epoch.as_ref()
        {
            break conn;
        }
        if deadline.remaining() < Duration::from_secs(3) {
            // Our own run only: stop its group and wait for it.
            xcodebuild::stop_group(&mut child).await;
            guard.disarm();
            return Err(ProviderError::new(RUNNER_NOT_READY, "the Runner did not publish a new ready descriptor within the setup deadline; this setup's xcodebuild was stopped")
                .with_details(json!({"log": test_log, "tail": xcodebuild::tail(&test_log), "xcodebuildPid": pid})));
        }
        tokio::time::sleep(POLL).await;
    };
    guard.disarm();
    xcodebuild::reap(child, || {});
    let mut r = runner_facts(&conn);
    r["alreadyRunning"] = json!(false);
    r["xcodebuildPid"] = json!(pid);
    r["log"] = json!(test_log);
    out["runner"] = r;
    if let Some(bundle) = &args.bundle_id {
        out["app"]["launch"] = launch_and_check(&devicectl, &device, bundle, deadline).await?;
    }
    Ok(out)
}

/// Launch (activate) the App — starting the Runner took the foreground — and read
/// a fresh SDK status through a newly copied descriptor (its process may be the
/// one from before: devicectl only activates a running App).
async fn launch_and_check(devicectl: &Devicectl, device: &DeviceRecord, bundle: &str, deadline: Deadline) -> Result<Value, ProviderError> {
    use aab_ios_transport::sdk;
    let overrides = sdk::Overrides::default();
    let launched = devicectl.launch(&device.identifier, bundle, false, deadline).await.map_err(mutation_failure)?;
    loop {
        let last = match sdk::open(devicectl, device.clone(), bundle, &overrides, deadline.capped(Duration::from_secs(10))).await {
            Ok(conn) => match sdk::read(&conn.endpoint, "/v1/status", deadline).await {
                Ok(status) => return Ok(json!({"launched": launched, "sdk": conn.facts(), "status": {"ok": status["ok"], "app": status["app"]}})),
                Err(e) => json!({"error": e.error, "message": e.message}),
            },
            Err(e) => json!({"error": e.error, "message": e.message}),
        };
        if deadline.remaining() < Duration::from_secs(1) {
            return Err(ProviderError::new(APP_NOT_READY, format!("{bundle} was launched but its SDK did not answer within the setup deadline")).with_details(json!({"launched": launched, "last": last})).settled_after_dispatch());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A failure to start the test run: nothing happened when setup installed nothing
/// before it, but an installed app is an effect the device already has.
fn after_install(e: ProviderError, installed: bool) -> ProviderError {
    if installed { e.settled_after_dispatch() } else { e }
}

fn append_record(ctx: &Context<'_>, action_id: &str, record: &Value) -> Result<(), ProviderError> {
    if !ctx.host().supports("facts.append") {
        return Err(ProviderError::new(aab_ios_transport::wda::record::ACTION_RECORD_UNAVAILABLE, "the host has no FactStore: the setup record cannot be written before dispatch").not_dispatched());
    }
    ctx.facts().append(SETUP_STREAM, action_id, record, Durability::Sync).map(|_| ()).map_err(|e| ProviderError::new(aab_ios_transport::wda::record::ACTION_RECORD_UNAVAILABLE, format!("the setup record could not be written: {}", e.message)).not_dispatched())
}

fn lookup_record(ctx: &Context<'_>, action_id: &str) -> Result<Option<Value>, ProviderError> {
    let page = ctx.facts().read(SETUP_STREAM, action_id, 0, 100)?;
    Ok(page.records.iter().rev().find(|r| r.key == action_id && r.record["schemaVersion"] == SETUP_SCHEMA).map(|r| r.record.clone()))
}

/// Reconcile an unresolved setup: settled by a Runner that came up with a new
/// epoch, or by the end of the setup's own test run with no new Runner.
pub async fn reconcile(ctx: &Context<'_>, pending: &Value, action_id: &str) -> Result<Value, ProviderError> {
    let unsettled = |reason: &str, answer: Value| json!({"status": "unsettled", "reason": reason, "answer": answer});
    let Some(rec) = lookup_record(ctx, action_id)? else { return Ok(unsettled("no_setup_record", Value::Null)) };
    let (Some(device_id), Some(runner)) = (rec["deviceId"].as_str(), rec["runnerBundleId"].as_str()) else { return Ok(unsettled("setup_record_invalid", rec)) };
    let deadline = Deadline::after(ctx.remaining());
    let devicectl = Devicectl::resolve(rec["devicectl"].as_str());
    let receipt = |extra: Value| {
        let mut r = json!({"actionId": action_id, "runtimeEpoch": pending["runtimeEpoch"], "kind": "ios-setup", "udid": rec["udid"], "runnerBundleId": runner});
        if let (Value::Object(r), Value::Object(e)) = (&mut r, extra) {
            r.extend(e);
        }
        json!({"status": "settled", "receipt": r})
    };
    let conn = match aab_ios_transport::wda::connect(&devicectl, device_id, runner, None, deadline).await {
        Ok(c) => c.status(deadline).await.ok().map(|_| c),
        Err(_) => None,
    };
    if let Some(c) = conn
        && Some(c.descriptor.runtime_epoch.as_str()) != rec["previousEpoch"].as_str()
        && c.device.udid == rec["udid"].as_str().unwrap_or_default()
    {
        return Ok(receipt(json!({"runnerStarted": true, "runner": runner_facts(&c)})));
    }
    match rec["xcodebuildPid"].as_i64() {
        Some(pid) if !xcodebuild::alive(pid as i32) => Ok(receipt(json!({"runnerStarted": false, "xcodebuildPid": pid, "tail": rec["log"].as_str().map(|l| xcodebuild::tail(Path::new(l)))}))),
        Some(pid) => Ok(unsettled("test_run_still_running", json!({"xcodebuildPid": pid}))),
        None => Ok(unsettled("test_run_unknown", rec)),
    }
}

pub struct Setup;
impl Command for Setup {
    type Provider = WdaProvider;
    type Args = SetupArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: SetupArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async { run(ctx, inv, &args).await.map(Reply::Json) }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> SetupArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_test_run_that_cannot_start_after_an_install_is_still_dispatched() {
        let spawn = || ProviderError::new(xcodebuild::XCODEBUILD_UNAVAILABLE, "cannot run xcodebuild").not_dispatched();
        assert_eq!(after_install(spawn(), false).dispatched, Some(false), "nothing ran before it");
        let e = after_install(spawn(), true);
        assert_eq!((e.dispatched, e.ambiguous), (Some(true), Some(false)), "the install happened");
    }

    #[test]
    fn the_plan_needs_a_team_and_the_runner_id_follows_the_test_bundle() {
        let p = plan(&args(json!({"deviceId": "d", "teamId": "ABCDE12345"})), "/").unwrap();
        assert_eq!(p.runner_bundle_id, "io.github.mobileaidev.aiappbridge.wda.xctrunner");
        let e = plan(&args(json!({"deviceId": "d"})), "/").unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), (TEAM_REQUIRED, Some("teamId"), Some(false)));
        let e = plan(&args(json!({"deviceId": "d", "teamId": "ABCDE12345", "wdaTestBundleId": "com.acme.wda", "wdaRunnerBundleId": "io.github.mobileaidev.aiappbridge.wda.xctrunner"})), "/").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("wdaRunnerBundleId"));
        let p = plan(&args(json!({"deviceId": "d", "teamId": "ABCDE12345", "wdaTestBundleId": "com.acme.wda", "wdaRunnerBundleId": "com.acme.wda.xctrunner"})), "/").unwrap();
        assert_eq!(p.test_bundle_id, "com.acme.wda");
        let e = plan(&args(json!({"deviceId": "d", "teamId": "ABCDE12345", "appPath": "no/such/App.app"})), "/").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("appPath"));
    }
}
