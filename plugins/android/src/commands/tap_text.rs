//! `tap-text`: tap the one view whose text is exactly `targetText`. Provider
//! `auto` picks the native SDK (the only provider in this build; the SDK must be
//! present) and `native` pins it; `flutter` and `uia` answer
//! `provider_unavailable` before anything is dispatched.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::cancellable;
use super::tap::PROVIDER_UNAVAILABLE;
use super::tap_native::tap_selector;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, MUTATION_REQUIRED, object, package_name, port, props};
use crate::native_exec::App;

fn spec() -> CommandSpec {
    let mut required = MUTATION_REQUIRED.to_vec();
    required.push("targetText");
    device_mutation("tap-text", "core", "android-app", "Tap the one view whose text is exactly targetText, through the native SDK (provider auto|native); flutter and uia are not available in this build.")
        .permission("app.interact")
        .input_schema(object(
            props(json!({
                "packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
                "targetText": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Exact text of the view to tap"},
                "provider": {"type": "string", "enum": ["auto", "native", "flutter", "uia"], "description": "auto (default): native when the app SDK is present"}
            })),
            &required,
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TapTextArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub target_text: String,
    pub provider: Option<String>,
}

pub struct TapText;
impl Command for TapText {
    type Provider = AndroidProvider;
    type Args = TapTextArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: TapTextArgs) -> Result<Reply, ProviderError> {
        let provider = args.provider.as_deref().unwrap_or("auto");
        if !["auto", "native"].contains(&provider) {
            return Err(ProviderError::new(PROVIDER_UNAVAILABLE, format!("the {provider} provider of tap-text is not available in this build")).with_field("provider").not_dispatched());
        }
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        let selector = json!({"text": args.target_text});
        cancellable(ctx, async {
            // `open` fails before dispatch when the SDK is absent: auto has no other provider yet.
            let mut out = tap_selector(ctx, inv, "tap-text", &app, &selector).await?;
            out["provider"] = json!("native");
            out["selected"] = json!({"provider": "native", "requested": provider});
            Ok(Reply::Json(out))
        })
        .await
    }
}
