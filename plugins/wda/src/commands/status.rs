//! `ios-wda-status`: the prepared Runner of a device, verified end to end — the
//! descriptor copied from its container, `/aab/status` bound to it (it must
//! advertise `aab.wda-execution/v1`) and `/aab/session` (foreground App, bound
//! session). A read: every failure is `dispatched:false`.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{object, props, wda_query};

fn spec() -> CommandSpec {
    wda_query("ios-wda-status", "The device's prepared WebDriverAgent Runner: descriptor identity (epoch, pid, port), /aab/status (ready, execution/native-target/orientation schemas, active action) and /aab/session (foreground App, session), every response bound to the descriptor.")
        .target_kind("ios-device")
        .input_schema(object(props(json!({})), &["deviceId", "wdaRunnerBundleId"]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusArgs {
    pub device_id: String,
    pub wda_runner_bundle_id: String,
    pub wda_url: Option<String>,
    pub devicectl: Option<String>,
}

pub struct WdaStatus;
impl Command for WdaStatus {
    type Provider = WdaProvider;
    type Args = StatusArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, _: &Invocation, args: StatusArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let wda = crate::runner::open(ctx, &reach!(args)).await?;
            let session = wda.conn.session(wda.deadline).await?;
            let mut out = wda.facts(None);
            out["ok"] = json!(true);
            out["ready"] = wda.status.get("ready").cloned().unwrap_or(json!(false));
            out["status"] = wda.status.clone();
            out["foreground"] = session.get("foreground").cloned().unwrap_or_default();
            out["session"] = session.get("session").cloned().unwrap_or_default();
            out["explicitWdaUrl"] = json!(wda.conn.explicit_url);
            Ok(Reply::Json(out))
        })
        .await
    }
}
