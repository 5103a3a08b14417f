//! `appops-set`: `appops set <pkg> <op> <mode>` through the managed shell worker,
//! then `appops get <pkg> <op>` reads the mode back.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::permission_state::parse_app_op;
use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, props, device_mutation};

fn spec() -> CommandSpec {
    device_mutation("appops-set", "app", "android-app", "Set an app-op mode (appops set) through the managed shell worker, then read it back.")
        .role("expert")
        .permission("app.permissions")
        .input_schema(object(
            props(json!({
                "packageName": package_name(),
                "op": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^([A-Z][A-Z0-9_]*|android:[a-z][a-z0-9_]*|[0-9]{1,3})$", "description": "App-op name (CAMERA, android:camera) or number"},
                "mode": {"type": "string", "enum": ["allow", "ignore", "deny", "default", "foreground"]},
            })),
            &["packageName", "op", "mode", "serial"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppopsArgs {
    pub serial: String,
    pub package_name: String,
    pub op: String,
    pub mode: String,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct AppopsSet;
impl Command for AppopsSet {
    type Provider = AndroidProvider;
    type Args = AppopsArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: AppopsArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let run = crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, "appops-set", Some(&a.package_name), &["appops", "set", &a.package_name, &a.op, &a.mode]).await?;
            let now = device.shell(&format!("appops get {} {}", a.package_name, a.op), None, budget.adb()).await?.stdout_text();
            Ok(json!({"ok": true, "serial": device.serial, "packageName": a.package_name, "op": a.op, "mode": a.mode, "state": parse_app_op(&now, &a.op), "execution": run.execution()}))
        })
        .await
        .map(Reply::Json)
    }
}
