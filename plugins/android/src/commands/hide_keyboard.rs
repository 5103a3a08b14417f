//! `hide-keyboard`: reads the keyboard state (dumpsys input_method), then presses
//! ESCAPE (111) and, if the keyboard is still shown after `intervalMs`, BACK (4) —
//! each key one shell-worker job (the second under `<actionId>:2`). Already hidden
//! and not `force`: nothing is pressed.

use std::time::Duration;

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::keyboard_state::parse_input_method;
use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::device::Device;
use crate::manifest::{object, props, device_mutation};

/// The keyboard is still shown after both keys.
pub const KEYBOARD_STILL_SHOWN: &str = "keyboard_still_shown";

fn spec() -> CommandSpec {
    device_mutation("hide-keyboard", "action", "android-device", "Hide the soft keyboard: ESCAPE (111), then BACK (4) if it is still shown, through the managed shell worker; the keyboard state is read before and after.")
        .permission("app.interact")
        .input_schema(object(
            props(json!({
                "force": {"type": "boolean", "description": "Press the keys even when the keyboard reads as hidden"},
                "intervalMs": {"type": "integer", "minimum": 0, "maximum": 5000, "description": "Wait after a key before re-reading the keyboard (default 300)"},
            })),
            &["serial"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HideKeyboardArgs {
    pub serial: String,
    pub force: Option<bool>,
    pub interval_ms: Option<u64>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

async fn shown(device: &Device, budget: &Budget) -> Result<bool, ProviderError> {
    let out = device.shell("dumpsys input_method", None, budget.adb()).await?;
    Ok(parse_input_method(&out.stdout_text())?["shown"] == json!(true))
}

pub struct HideKeyboard;
impl Command for HideKeyboard {
    type Provider = AndroidProvider;
    type Args = HideKeyboardArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: HideKeyboardArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let before = shown(&device, &budget).await?;
            let mut keys: Vec<Value> = vec![];
            let mut now = before;
            if before || a.force == Some(true) {
                for (n, key) in [(1, "111"), (2, "4")] {
                    let id = if n == 1 { inv.action_id.clone() } else { format!("{}:{n}", inv.action_id) };
                    let run = crate::shell_exec::command_action(ctx, &id, &device, &budget, "hide-keyboard", None, &["input", "keyevent", key]).await?;
                    keys.push(json!({"keyCode": key.parse::<u32>().unwrap_or(0), "execution": run.execution()}));
                    tokio::time::sleep(Duration::from_millis(a.interval_ms.unwrap_or(300))).await;
                    now = shown(&device, &budget).await?;
                    if !now {
                        break;
                    }
                }
            }
            if now {
                return Err(ProviderError::new(KEYBOARD_STILL_SHOWN, "the keyboard is still shown after ESCAPE and BACK").with_details(json!({"keys": keys})));
            }
            Ok(json!({"ok": true, "serial": device.serial, "shownBefore": before, "shown": now, "keys": keys}))
        })
        .await
        .map(Reply::Json)
    }
}
