//! `forward` and `remove-forward`: the host-side adb forward to an app's SDK socket,
//! made (or reused) and verified, and removed after an ownership check.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::json;

use super::{AppArgs, Budget, RemoveForwardArgs, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::adb::server::AdbServer;
use crate::manifest::{object, package_name, port, props};
use crate::sdk::forward;

fn forward_spec() -> CommandSpec {
    CommandSpec::query("forward")
        .platform("android")
        .domain("advanced")
        .role("expert")
        .target_kind("android-app")
        .summary("Create (or reuse) and verify the adb forward from a host TCP port to the app SDK's socket; reports the host port.")
        .target_key("serial")
        .target_key("packageName")
        .timeouts(15_000, 30_000)
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Wanted host port (default: reuse an exact forward, else let adb allocate one)")})), &["packageName"]))
}

fn remove_forward_spec() -> CommandSpec {
    CommandSpec::query("remove-forward")
        .platform("android")
        .domain("advanced")
        .role("expert")
        .target_kind("android-device")
        .summary("Remove the adb forward on a host port after checking that it belongs to the device.")
        .target_key("serial")
        .timeouts(15_000, 30_000)
        .input_schema(object(props(json!({"port": port("Host port of the forward")})), &["serial", "port"]))
}

pub struct Forward;
impl Command for Forward {
    type Provider = AndroidProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        forward_spec()
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
        remove_forward_spec()
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

