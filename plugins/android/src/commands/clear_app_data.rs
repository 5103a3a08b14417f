//! `clear-app-data`: `pm clear <pkg>` through the managed shell worker (method
//! `pm-clear`, default; success iff the output starts with `Success`), or the app
//! SDK's `POST /v1/app/clear-data` (method `runtime`: the app clears its own runtime
//! data and keeps running).

use aab_plugin_api::host::Durability;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::{AppArgs, Budget, cancellable, device, sdk_route};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, port, props, device_mutation};

/// `pm clear` did not answer `Success`, or the SDK refused.
pub const CLEAR_APP_DATA_FAILED: &str = "clear_app_data_failed";

fn spec() -> CommandSpec {
    device_mutation("clear-app-data", "app", "android-app", "Clear an app's data: `pm clear` through the managed shell worker (method pm-clear, default), or the app SDK's /v1/app/clear-data (method runtime).")
        .permission("app.lifecycle")
        .input_schema(object(
            props(json!({"packageName": package_name(), "method": {"type": "string", "enum": ["pm-clear", "runtime"], "description": "pm-clear (default) or runtime (through the SDK)"}, "port": port("Host port of the SDK forward (method runtime)")})),
            &["packageName", "serial"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClearArgs {
    pub serial: String,
    pub package_name: String,
    pub method: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct ClearAppData;
impl Command for ClearAppData {
    type Provider = AndroidProvider;
    type Args = ClearArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: ClearArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            if a.method.as_deref() == Some("runtime") {
                let app = AppArgs { package_name: a.package_name.clone(), serial: Some(a.serial.clone()), port: a.port, adb: a.adb.clone(), adb_timeout_ms: a.adb_timeout_ms };
                let (serial, route) = sdk_route(&app, &budget).await?;
                let record = json!({"schemaVersion": crate::shell_exec::RECORD_SCHEMA, "kind": "native", "command": "clear-app-data", "serial": serial, "packageName": a.package_name,
                    "device": {"actionId": inv.action_id, "runtimeEpoch": route.descriptor.runtime_epoch, "route": "/v1/app/clear-data", "port": route.forward.port}});
                ctx.facts().append(crate::shell_exec::RECORD_STREAM, &inv.action_id, &record, Durability::Sync).map_err(|e| e.not_dispatched())?;
                ctx.mark_dispatched();
                let r = crate::sdk::http::request(route.forward.port, "POST", "/v1/app/clear-data", Some(&json!({})), budget.deadline).await?;
                if r.body["ok"] != json!(true) {
                    let code = r.body["error"].as_str().unwrap_or(CLEAR_APP_DATA_FAILED).to_string();
                    return Err(ProviderError::new(code, format!("the SDK of {} refused to clear its data", a.package_name)).with_details(json!({"body": r.body})).not_dispatched());
                }
                return Ok(json!({"ok": true, "serial": serial, "packageName": a.package_name, "method": "runtime", "cleared": r.body["cleared"], "failures": r.body["failures"], "runtimeEpoch": route.descriptor.runtime_epoch}));
            }
            let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let run = crate::shell_exec::run_argv(ctx, &device, budget.deadline, budget.adb_step, &crate::shell_exec::Action { action_id: &inv.action_id, host_action_id: &inv.action_id, command: "clear-app-data", package: Some(&a.package_name) }, &["pm", "clear", &a.package_name]).await?;
            if !run.stdout_text().starts_with("Success") {
                return Err(ProviderError::new(CLEAR_APP_DATA_FAILED, format!("pm clear {} did not succeed", a.package_name)).with_details(json!({"stdout": run.stdout_text(), "stderr": run.stderr_text(), "exitCode": run.exit_code, "execution": run.execution()})).not_dispatched());
            }
            Ok(json!({"ok": true, "serial": device.serial, "packageName": a.package_name, "method": "pm-clear", "output": run.stdout_text().trim(), "execution": run.execution()}))
        })
        .await
        .map(Reply::Json)
    }
}
