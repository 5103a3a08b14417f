//! `freeze-app` / `thaw-app`: `run-as <pkg> kill -SIGSTOP|-SIGCONT <pid>` through the
//! managed shell worker (pid default: the app's current pid from `pidof`); the
//! process state is read back from `/proc/<pid>/stat` (T stopped, else running).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, props, device_mutation};

fn spec(command: &str, what: &str) -> CommandSpec {
    device_mutation(command, "app", "android-app", what)
        .role("expert")
        .input_schema(object(props(json!({"packageName": package_name(), "pid": {"type": "integer", "minimum": 1, "maximum": 4194304, "description": "Process id (default: the app's current pid)"}})), &["packageName", "serial"]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FreezeArgs {
    pub serial: String,
    pub package_name: String,
    pub pid: Option<u32>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

async fn signal(ctx: &Context<'_>, inv: &Invocation, command: &str, sig: &str, a: FreezeArgs) -> Result<Value, ProviderError> {
    let budget = Budget::new(ctx, a.adb_timeout_ms);
    let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
    let pid = match a.pid {
        Some(p) => p,
        None => {
            let out = device.shell(&format!("pidof {}", a.package_name), None, budget.adb()).await?.stdout_text();
            out.split_whitespace().next().and_then(|p| p.parse().ok()).ok_or_else(|| ProviderError::new(super::logcat::APP_NOT_RUNNING, format!("{} has no running process", a.package_name)).with_field("packageName").not_dispatched())?
        }
    };
    let pid_s = pid.to_string();
    let run = crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, command, Some(&a.package_name), &["run-as", &a.package_name, "kill", sig, &pid_s]).await?;
    // The state after: field 3 of /proc/<pid>/stat (after the parenthesised name).
    let stat = device.shell(&format!("cat /proc/{pid}/stat"), None, budget.adb()).await.map(|o| o.stdout_text()).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().next()).map(str::to_string);
    Ok(json!({"ok": true, "serial": device.serial, "packageName": a.package_name, "pid": pid, "signal": sig, "processState": state, "stopped": state.as_deref() == Some("T"), "execution": run.execution()}))
}

pub struct FreezeApp;
impl Command for FreezeApp {
    type Provider = AndroidProvider;
    type Args = FreezeArgs;
    fn spec() -> CommandSpec {
        spec("freeze-app", "Stop (freeze) the app's process: run-as <pkg> kill -SIGSTOP <pid> through the managed shell worker; reports the process state after.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: FreezeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, signal(ctx, inv, "freeze-app", "-SIGSTOP", a)).await.map(Reply::Json)
    }
}

pub struct ThawApp;
impl Command for ThawApp {
    type Provider = AndroidProvider;
    type Args = FreezeArgs;
    fn spec() -> CommandSpec {
        spec("thaw-app", "Continue (thaw) the app's process: run-as <pkg> kill -SIGCONT <pid> through the managed shell worker; reports the process state after.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: FreezeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, signal(ctx, inv, "thaw-app", "-SIGCONT", a)).await.map(Reply::Json)
    }
}
