//! `status`: the app SDK's status object, read through the verified SDK forward.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, port, props};
use crate::sdk::endpoint;

fn spec() -> CommandSpec {
    CommandSpec::query("status")
        .platform("android")
        .domain("core")
        .target_kind("android-app")
        .summary("The app SDK's status (runtimeEpoch, app, device, foreground activity, capture counters), read through the SDK endpoint on the device.")
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket")})), &["packageName"]))
}


pub struct Status;
impl Command for Status {
    type Provider = AndroidProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        spec()
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
}
