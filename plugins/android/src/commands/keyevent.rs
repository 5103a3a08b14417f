//! `keyevent`: `input keyevent <keyCode>` (default 4, BACK) through the managed
//! shell worker (aab-protocols §2.3/§2.4).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, props, device_mutation};

fn spec() -> CommandSpec {
    device_mutation("keyevent", "action", "android-device", "Send one key event (input keyevent; default 4 = BACK) through the managed shell worker; the phone's receipt decides the outcome.")
        .permission("app.interact")
        .input_schema(object(props(json!({"keyCode": {"type": "integer", "minimum": 0, "maximum": 400, "description": "Android KeyEvent code (default 4, BACK)"}})), &["serial"]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyeventArgs {
    pub serial: String,
    pub key_code: Option<u32>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct Keyevent;
impl Command for Keyevent {
    type Provider = AndroidProvider;
    type Args = KeyeventArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: KeyeventArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let code = a.key_code.unwrap_or(4).to_string();
            let run = crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, "keyevent", None, &["input", "keyevent", &code]).await?;
            Ok(json!({"ok": true, "serial": device.serial, "keyCode": a.key_code.unwrap_or(4), "execution": run.execution()}))
        })
        .await
        .map(Reply::Json)
    }
}
