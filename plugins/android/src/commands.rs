//! The Android commands: each spec (from [`crate::manifest`]) paired with its typed
//! arguments and its implementation over the transport ([`crate::adb`],
//! [`crate::sdk`]). Every command runs against the host's deadline and races the
//! host's cancellation; dropping the work closes its adb sockets.

use std::future::Future;
use std::time::Duration;

use aab_plugin_api::{Command, CommandSpec, Commands, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AndroidProvider;
use crate::adb::device::Device;
use crate::adb::server::AdbServer;
use crate::adb::{Deadline, select};
use crate::manifest::{self, DEFAULT_ADB_TIMEOUT_MS};
use crate::sdk::{SdkTarget, endpoint, forward};

pub fn list() -> Commands<AndroidProvider> {
    Commands::new().add::<Status>().add::<Forward>().add::<RemoveForward>()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveForwardArgs {
    pub serial: String,
    pub port: u16,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

/// The command's deadline and the per-adb-step cap inside it.
struct Budget {
    deadline: Deadline,
    adb_step: Duration,
}

impl Budget {
    fn new(ctx: &Context<'_>, adb_timeout_ms: Option<u64>) -> Self {
        Budget { deadline: Deadline::after(ctx.remaining()), adb_step: Duration::from_millis(adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS)) }
    }
    fn adb(&self) -> Deadline {
        self.deadline.capped(self.adb_step)
    }
}

/// Run `work` unless the host cancels first (then the work is dropped).
async fn cancellable<T>(ctx: &Context<'_>, work: impl Future<Output = Result<T, ProviderError>>) -> Result<T, ProviderError> {
    tokio::select! {
        r = work => r,
        _ = ctx.cancelled() => Err(ProviderError::new(aab_plugin_api::codes::CANCELLED, "the command was cancelled or its deadline passed")),
    }
}

/// The adb server of this call and the selected device.
async fn device(adb: Option<&str>, serial: Option<&str>, budget: &Budget) -> Result<Device, ProviderError> {
    let server = AdbServer::from_process_env(adb.map(str::to_string))?;
    let selected = select::select(&server, serial, budget.adb()).await?;
    Ok(Device::new(server, selected.serial))
}

/// The step every app command starts with: select the device, then find (or make)
/// the verified forward to the app's SDK (§2.1). Returns the selected serial too.
async fn sdk_route(args: &AppArgs, budget: &Budget) -> Result<(String, crate::sdk::Route), ProviderError> {
    let device = device(args.adb.as_deref(), args.serial.as_deref(), budget).await?;
    let serial = device.serial.clone();
    let target = SdkTarget { device, package: args.package_name.clone(), port: args.port };
    Ok((serial, target.route(budget.adb()).await?))
}

pub struct Status;
impl Command for Status {
    type Provider = AndroidProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        manifest::status()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: AppArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let (_, route) = sdk_route(&args, &budget).await?;
            let response = crate::sdk::http::request(route.forward.port, "GET", "/v1/status", None, budget.deadline).await?;
            status_reply(&args.package_name, response.body)
        })
        .await
        .map(Reply::Json)
    }
}

/// The SDK's status object, checked: an `ok:false` answer keeps the SDK's code; a
/// status of another package is `bridge_package_mismatch`.
fn status_reply(package: &str, body: Value) -> Result<Value, ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let code = body.get("error").and_then(Value::as_str).unwrap_or("bridge_protocol_error").to_string();
        return Err(ProviderError::new(code, format!("the SDK of {package} refused the status read")).with_details(json!({"body": body})).not_dispatched());
    }
    if let Some(found) = body.pointer("/app/packageName").and_then(Value::as_str)
        && found != package
    {
        return Err(ProviderError::new(endpoint::codes::BRIDGE_PACKAGE_MISMATCH, format!("the SDK status belongs to {found:?}, not {package:?}")).with_details(json!({"packageName": package, "statusPackageName": found})).not_dispatched());
    }
    Ok(body)
}

pub struct Forward;
impl Command for Forward {
    type Provider = AndroidProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        manifest::forward()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: AppArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let (serial, route) = sdk_route(&args, &budget).await?;
            Ok(json!({
                "ok": true,
                "serial": serial,
                "packageName": args.package_name,
                "port": route.forward.port,
                "local": format!("tcp:{}", route.forward.port),
                "remote": format!("localabstract:{}", route.descriptor.socket_name),
                "reused": route.forward.reused,
                "runtimeEpoch": route.descriptor.runtime_epoch,
                "sdkVersion": route.descriptor.version,
            }))
        })
        .await
        .map(Reply::Json)
    }
}

pub struct RemoveForward;
impl Command for RemoveForward {
    type Provider = AndroidProvider;
    type Args = RemoveForwardArgs;
    fn spec() -> CommandSpec {
        manifest::remove_forward()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: RemoveForwardArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            // The device need not be online to drop a host-side listener, so no selection.
            let server = AdbServer::from_process_env(args.adb.clone())?;
            let removed = forward::remove(&server, &args.serial, args.port, budget.adb()).await?;
            Ok(json!({"ok": true, "serial": args.serial, "port": args.port, "removed": {"local": removed.local, "remote": removed.remote}}))
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reply_checks_ok_and_package() {
        let ok = json!({"ok": true, "app": {"packageName": "com.example.app"}});
        assert_eq!(status_reply("com.example.app", ok.clone()).unwrap(), ok);
        let e = status_reply("com.example.app", json!({"ok": true, "app": {"packageName": "com.other"}})).unwrap_err();
        assert_eq!(e.error, endpoint::codes::BRIDGE_PACKAGE_MISMATCH);
        let e = status_reply("com.example.app", json!({"ok": false, "error": "main_thread_timeout"})).unwrap_err();
        assert_eq!(e.error, "main_thread_timeout");
    }

    #[test]
    fn the_manifest_passes_the_sdk_checks() {
        let specs: Vec<CommandSpec> = list().specs().cloned().collect();
        let names: Vec<&str> = specs.iter().map(|c| c.command.as_str()).collect();
        assert_eq!(names, ["status", "forward", "remove-forward"]);
        manifest::manifest().commands(specs).check().unwrap();
    }
}
