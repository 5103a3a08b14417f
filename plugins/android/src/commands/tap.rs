//! `tap`: one coordinate tap. Scope `app` (the default when `packageName` is
//! given) goes through the app SDK's managed execution (`POST /v1/action/tap`,
//! [`crate::native_exec`]); scope `device` is `input tap` through the shell
//! worker. Either way the foreground must be the named package.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, json};

use super::cancellable;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, coordinate, object, package_name, port, props};
use crate::native_exec::{App, open};

pub const PROVIDER_UNAVAILABLE: &str = "provider_unavailable";

fn spec() -> CommandSpec {
    let mut schema = object(
        props(json!({
            "packageName": package_name(),
            "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
            "tapX": coordinate("Screen x in pixels"),
            "tapY": coordinate("Screen y in pixels"),
            "scope": {"type": "string", "enum": ["app", "device"], "description": "app: through the app SDK (default when packageName is given); device: `input tap` on the device"}
        })),
        &["tapX", "tapY", "serial"],
    );
    // Scope app needs the app; so does the default scope.
    schema["anyOf"] = json!([{"required": ["packageName"]}, {"required": ["scope"], "properties": {"scope": {"const": "device"}}}]);
    device_mutation("tap", "core", "android-app", "Tap screen coordinates once: through the app SDK's managed execution (scope app, receipt and settlement proof) or `input tap` (scope device); the foreground must be packageName. Never retried; a lost reply leaves the device unresolved.")
        .permission("app.interact")
        .input_schema(schema)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TapArgs {
    pub package_name: Option<String>,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub tap_x: f64,
    pub tap_y: f64,
    pub scope: Option<String>,
}

pub struct Tap;
impl Command for Tap {
    type Provider = AndroidProvider;
    type Args = TapArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: TapArgs) -> Result<Reply, ProviderError> {
        let scope = args.scope.clone().unwrap_or_else(|| if args.package_name.is_some() { "app".into() } else { "device".into() });
        let Some(package) = args.package_name.clone().filter(|_| scope == "app") else {
            return cancellable(ctx, device_tap(ctx, inv, &args)).await.map(Reply::Json);
        };
        let app = App { package, serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async {
            let session = open(ctx, &app).await?;
            let mut body = Map::new();
            body.insert("x".into(), json!(args.tap_x));
            body.insert("y".into(), json!(args.tap_y));
            let mut out = session.execute(ctx, inv, "tap", "/v1/action/tap", body, 0).await?;
            out["scope"] = json!("app");
            Ok(Reply::Json(out))
        })
        .await
    }
}

/// Scope `device`: `input tap X Y` through the managed shell worker, after the
/// foreground check when a package is named (the same proof the SDK path uses).
async fn device_tap(ctx: &Context<'_>, inv: &Invocation, args: &TapArgs) -> Result<serde_json::Value, ProviderError> {
    let budget = super::Budget::new(ctx, args.adb_timeout_ms);
    let device = super::device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
    let foreground = crate::foreground::require(&device, args.package_name.as_deref(), budget.adb()).await?;
    let fg_package = foreground.map(|f| f.window.package);
    // `input tap` takes whole pixels.
    let (x, y) = (args.tap_x.round() as i64, args.tap_y.round() as i64);
    let (xs, ys) = (x.to_string(), y.to_string());
    let run = crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, "tap", args.package_name.as_deref(), &["input", "tap", &xs, &ys]).await?;
    Ok(json!({"ok": true, "serial": device.serial, "scope": "device", "x": x, "y": y, "foreground": fg_package, "actionId": inv.action_id, "execution": run.execution()}))
}
