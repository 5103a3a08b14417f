//! `tap-native`: tap the ONE view a native selector names (§1.7): bind it in a
//! fresh SDK view tree, then `POST /v1/action/tap-target` with the selector and
//! its `targetRef` so the SDK revalidates the same View before the tap.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::cancellable;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, MUTATION_REQUIRED, object, package_name, port, props};
use crate::native_exec::{App, open};
use crate::native_target::{bind, selector_schema, summary};

fn spec() -> CommandSpec {
    let mut required = MUTATION_REQUIRED.to_vec();
    required.push("selector");
    device_mutation("tap-native", "core", "android-app", "Tap the one native view a selector names (text | resourceName | contentDescription, optionally within an ancestor), revalidated by the SDK against the reference from a fresh tree; receipt and settlement proof.")
        .permission("app.interact")
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "selector": selector_schema()})), &required))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TapNativeArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub selector: Value,
}

/// Bind and tap (shared with `tap-text`'s native branch).
pub async fn tap_selector(ctx: &Context<'_>, inv: &Invocation, command: &str, app: &App, selector: &Value) -> Result<Value, ProviderError> {
    let session = open(ctx, app).await?;
    let node = bind(&session.tree().await?, selector, false)?;
    let mut body = Map::new();
    body.insert("selector".into(), selector.clone());
    body.insert("targetRef".into(), node["targetRef"].clone());
    let mut out = session.execute(ctx, inv, command, "/v1/action/tap-target", body, 0).await?;
    out["bound"] = summary(&node);
    Ok(out)
}

pub struct TapNative;
impl Command for TapNative {
    type Provider = AndroidProvider;
    type Args = TapNativeArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: TapNativeArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        cancellable(ctx, async { tap_selector(ctx, inv, "tap-native", &app, &args.selector).await.map(Reply::Json) }).await
    }
}
