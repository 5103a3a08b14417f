//! `tap-text`: tap the one view whose text is exactly `targetText`. Provider
//! `native` binds it in the SDK's native view tree, `flutter` in the Flutter
//! view's operable tree (both from a fresh tree, then a managed action);
//! `auto` tries native first and, only when no native view has that text
//! (`native_selector_not_found`, nothing dispatched), the Flutter view;
//! `uia` clicks the node with that exact text in the focused window of the
//! app's package through the UIA runtime (default root; `uia-runtime start` first).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::cancellable;
use super::tap::PROVIDER_UNAVAILABLE;
use super::flutter::tap_flutter_text;
use super::tap_native::tap_selector;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, MUTATION_REQUIRED, object, package_name, port, props};
use crate::native_exec::App;

fn spec() -> CommandSpec {
    let mut required = MUTATION_REQUIRED.to_vec();
    required.push("targetText");
    device_mutation("tap-text", "core", "android-app", "Tap the one view whose text is exactly targetText: provider native (SDK view tree), flutter (Flutter operable tree) auto (native first, then Flutter when no native view has the text), or uia (the node of the app's focused window through the UIA runtime, no SDK needed).")
        .permission("app.interact")
        .input_schema(object(
            props(json!({
                "packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
                "targetText": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Exact text of the view to tap"},
                "provider": {"type": "string", "enum": ["auto", "native", "flutter", "uia"], "description": "auto (default): native first, then Flutter when no native view has the text"}
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
        if !["auto", "native", "flutter", "uia"].contains(&provider) {
            return Err(ProviderError::new(PROVIDER_UNAVAILABLE, format!("the {provider} provider of tap-text is not available in this build")).with_field("provider").not_dispatched());
        }
        if provider == "uia" {
            let budget = super::Budget::new(ctx, args.adb_timeout_ms);
            return cancellable(ctx, async {
                let dev = super::device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
                let rt = crate::uia::connect(&dev, crate::uia::ROOT_V1, budget.deadline).await?;
                let aim = crate::uia::Aim::Selector { kind: "text", value: &args.target_text, exact: true, package: Some(&args.package_name) };
                let mut out = crate::uia::click(ctx, inv, "tap-text", &rt, aim, Some(&args.package_name), "nearest_clickable_ancestor", budget.deadline).await?;
                out["provider"] = json!("uia");
                out["selected"] = json!({"provider": "uia", "requested": provider});
                Ok(Reply::Json(out))
            })
            .await;
        }
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        let selector = json!({"text": args.target_text});
        cancellable(ctx, async {
            let native = if provider == "flutter" {
                None
            } else {
                match tap_selector(ctx, inv, "tap-text", &app, &selector).await {
                    Ok(mut out) => {
                        out["provider"] = json!("native");
                        out["selected"] = json!({"provider": "native", "requested": provider});
                        return Ok(Reply::Json(out));
                    }
                    // auto: no native view has the text and nothing was dispatched → Flutter.
                    Err(e) if provider == "auto" && e.error == "native_selector_not_found" && e.dispatched == Some(false) => Some(e),
                    Err(e) => return Err(e),
                }
            };
            match tap_flutter_text(ctx, inv, "tap-text", &app, &args.target_text).await {
                Ok(mut out) => {
                    out["selected"] = json!({"provider": "flutter", "requested": provider});
                    Ok(Reply::Json(out))
                }
                // auto on an app without a Flutter view: the native answer stands.
                Err(e) if e.error == crate::flutter::FLUTTER_UNAVAILABLE && native.is_some() => Err(native.unwrap()),
                Err(e) => Err(e),
            }
        })
        .await
    }
}
