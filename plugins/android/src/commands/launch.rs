//! `launch-app` and `launch-activity`: `am start -W [--activity-clear-task] [-a
//! action] [-c category]… [-d data] [-e key value]… -n pkg/activity` through the
//! managed shell worker (aab-protocols §2.3), then the foreground is polled every
//! 200 ms (default 8 s) until the package is in front, else
//! `foreground_package_mismatch`. Without `activity`/`component` the launcher
//! activity comes from `cmd package query-activities`.

use std::time::Duration;

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::device::Device;
use crate::manifest::{object, package_name, props, device_mutation};

/// `am start` refused (error text, or no `Status: ok`).
pub const LAUNCH_FAILED: &str = "launch_failed";
/// No launcher activity for the package.
pub const LAUNCHER_ACTIVITY_NOT_FOUND: &str = "launcher_activity_not_found";

const POLL: Duration = Duration::from_millis(200);
const DEFAULT_FOREGROUND_MS: u64 = 8000;

fn schema(clear_task: bool) -> serde_json::Value {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 512, "pattern": "^[^\\s'\"\\\\]+$"});
    let mut p = json!({
        "packageName": package_name(),
        "activity": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "^\\.?[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*$", "description": "Activity class (`.Main` is relative to the package)"},
        "component": {"type": "string", "maxLength": 1024, "pattern": "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)+/\\.?[A-Za-z_$][A-Za-z0-9_$.]*$", "description": "`pkg/activity`; its package must be packageName"},
        "action": name.clone(),
        "category": {"type": "array", "items": name, "maxItems": 16},
        "data": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Intent data URI (-d)"},
        "extra": {"type": "array", "maxItems": 32, "description": "String extras `key=value` (-e key value)", "items": {"type": "string", "maxLength": 4096, "pattern": "^[^=\\s]+="}},
        "foregroundTimeoutMs": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "How long to poll the foreground (default 8000)"},
    });
    if clear_task {
        p["clearTask"] = json!({"type": "boolean", "description": "--activity-clear-task"});
    }
    let mut s = object(props(p), &["packageName", "serial"]);
    s["not"] = json!({"required": ["activity", "component"]});
    s
}

fn spec(command: &str, clear_task: bool) -> CommandSpec {
    device_mutation(command, "app", "android-app", "Start an activity with `am start -W` through the managed shell worker, then wait until the package is in the foreground (foreground_package_mismatch otherwise).")
        .permission("app.interact")
        .input_schema(schema(clear_task))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LaunchArgs {
    pub serial: String,
    pub package_name: String,
    pub activity: Option<String>,
    pub component: Option<String>,
    pub action: Option<String>,
    #[serde(default)]
    pub category: Vec<String>,
    pub data: Option<String>,
    #[serde(default)]
    pub extra: Vec<String>,
    pub clear_task: Option<bool>,
    pub foreground_timeout_ms: Option<u64>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// `pkg/activity` to start.
async fn component(device: &Device, a: &LaunchArgs, budget: &Budget) -> Result<String, ProviderError> {
    if let Some(c) = &a.component {
        if c.split('/').next() != Some(a.package_name.as_str()) {
            return Err(ProviderError::new(aab_plugin_api::codes::INVALID_ARGUMENT, format!("component {c} is not in package {}", a.package_name)).with_field("component").not_dispatched());
        }
        return Ok(c.clone());
    }
    if let Some(act) = &a.activity {
        return Ok(format!("{}/{act}", a.package_name));
    }
    let cmd = format!("cmd package query-activities --brief -a android.intent.action.MAIN -c android.intent.category.LAUNCHER {}", a.package_name);
    let out = device.shell(&cmd, None, budget.adb()).await?.stdout_text();
    out.lines().map(str::trim).find(|l| l.starts_with(&format!("{}/", a.package_name))).map(str::to_string).ok_or_else(|| {
        ProviderError::new(LAUNCHER_ACTIVITY_NOT_FOUND, format!("{} has no launcher activity", a.package_name)).with_details(json!({"output": out})).not_dispatched()
    })
}

/// `am start -W` lines `Key: value` (Status, LaunchState, Activity, TotalTime, WaitTime).
fn parse_am(out: &str) -> Value {
    let mut v = json!({"complete": out.lines().any(|l| l.trim() == "Complete")});
    for l in out.lines() {
        if let Some((k, val)) = l.split_once(": ") {
            let key = match k.trim() {
                "Status" => "status",
                "LaunchState" => "launchState",
                "Activity" => "activity",
                "TotalTime" => "totalTime",
                "WaitTime" => "waitTime",
                _ => continue,
            };
            v[key] = val.trim().parse::<u64>().map(|n| json!(n)).unwrap_or_else(|_| json!(val.trim()));
        }
    }
    v
}

async fn foreground_package(device: &Device, budget: &Budget) -> Option<String> {
    let out = device.shell("dumpsys window -a", None, budget.adb()).await.ok()?;
    crate::foreground::parse_window_dump(&out.stdout_text()).ok().flatten().map(|w| w.package)
}

async fn launch(ctx: &Context<'_>, inv: &Invocation, command: &str, a: LaunchArgs) -> Result<Value, ProviderError> {
    let budget = Budget::new(ctx, a.adb_timeout_ms);
    let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
    let comp = component(&device, &a, &budget).await?;
    let mut argv: Vec<String> = vec!["am".into(), "start".into(), "-W".into()];
    if a.clear_task == Some(true) {
        argv.push("--activity-clear-task".into());
    }
    if let Some(x) = &a.action {
        argv.extend(["-a".into(), x.clone()]);
    }
    for c in &a.category {
        argv.extend(["-c".into(), c.clone()]);
    }
    if let Some(d) = &a.data {
        argv.extend(["-d".into(), d.clone()]);
    }
    for e in &a.extra {
        let (k, v) = e.split_once('=').unwrap_or((e, ""));
        argv.extend(["-e".into(), k.to_string(), v.to_string()]);
    }
    argv.extend(["-n".into(), comp.clone()]);
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = crate::shell_exec::run_argv(ctx, &device, budget.deadline, budget.adb_step, &crate::shell_exec::Action { action_id: &inv.action_id, host_action_id: &inv.action_id, command, package: Some(&a.package_name) }, &refs).await?;
    let out = run.stdout_text();
    let am = parse_am(&out);
    if run.exit_code != 0 || out.contains("Error") || am["status"] != json!("ok") {
        return Err(ProviderError::new(LAUNCH_FAILED, format!("am start {comp} failed")).with_details(json!({"stdout": out, "stderr": run.stderr_text(), "exitCode": run.exit_code, "execution": run.execution()})).not_dispatched());
    }
    let window = Duration::from_millis(a.foreground_timeout_ms.unwrap_or(DEFAULT_FOREGROUND_MS)).min(budget.deadline.remaining().saturating_sub(Duration::from_millis(500)));
    let until = tokio::time::Instant::now() + window;
    let mut seen;
    loop {
        seen = foreground_package(&device, &budget).await;
        if seen.as_deref() == Some(a.package_name.as_str()) || tokio::time::Instant::now() >= until {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    if seen.as_deref() != Some(a.package_name.as_str()) {
        return Err(ProviderError::new(crate::foreground::FOREGROUND_PACKAGE_MISMATCH, format!("{} is not in the foreground after the launch ({seen:?} is)", a.package_name)).with_details(json!({"packageName": a.package_name, "foregroundPackage": seen, "am": am, "execution": run.execution()})));
    }
    Ok(json!({"ok": true, "serial": device.serial, "packageName": a.package_name, "component": comp, "am": am, "foregroundPackage": seen, "execution": run.execution()}))
}

pub struct LaunchApp;
impl Command for LaunchApp {
    type Provider = AndroidProvider;
    type Args = LaunchArgs;
    fn spec() -> CommandSpec {
        spec("launch-app", true)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: LaunchArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, launch(ctx, inv, "launch-app", a)).await.map(Reply::Json)
    }
}

pub struct LaunchActivity;
impl Command for LaunchActivity {
    type Provider = AndroidProvider;
    type Args = LaunchArgs;
    fn spec() -> CommandSpec {
        spec("launch-activity", false)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: LaunchArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, launch(ctx, inv, "launch-activity", a)).await.map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn am_start_w_output_parses() {
        let v = parse_am("Starting: Intent { cmp=com.example/.Main }\nStatus: ok\nLaunchState: COLD\nActivity: com.example/.Main\nTotalTime: 312\nWaitTime: 318\nComplete\n");
        assert_eq!(v, json!({"complete": true, "status": "ok", "launchState": "COLD", "activity": "com.example/.Main", "totalTime": 312, "waitTime": 318}));
    }
}
