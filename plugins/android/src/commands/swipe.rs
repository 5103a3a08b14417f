//! `swipe`: `input swipe x1 y1 x2 y2 durationMs` through the managed shell worker
//! (aab-protocols §2.3/§2.4).

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::json;

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{object, pixel, props, device_mutation};

fn spec() -> CommandSpec {
    device_mutation("swipe", "action", "android-device", "Swipe on the device screen (input swipe) through the managed shell worker; the phone's receipt decides the outcome.")
        .permission("app.interact")
        .input_schema(object(
            props(json!({
                "startX": pixel("Start x (px)"), "startY": pixel("Start y (px)"), "endX": pixel("End x (px)"), "endY": pixel("End y (px)"),
                "durationMs": {"type": "integer", "minimum": 0, "maximum": 10000, "description": "Swipe duration (default 300)"},
            })),
            &["startX", "startY", "endX", "endY", "serial"],
        ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SwipeArgs {
    pub serial: String,
    pub start_x: u32,
    pub start_y: u32,
    pub end_x: u32,
    pub end_y: u32,
    pub duration_ms: Option<u32>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
}

pub struct Swipe;
impl Command for Swipe {
    type Provider = AndroidProvider;
    type Args = SwipeArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, a: SwipeArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, a.adb_timeout_ms);
        cancellable(ctx, async {
            let device = device(a.adb.as_deref(), Some(&a.serial), &budget).await?;
            let d = a.duration_ms.unwrap_or(300);
            let nums = [a.start_x, a.start_y, a.end_x, a.end_y, d].map(|n| n.to_string());
            let argv = ["input", "swipe", &nums[0], &nums[1], &nums[2], &nums[3], &nums[4]];
            let run = crate::shell_exec::command_action(ctx, &inv.action_id, &device, &budget, "swipe", None, &argv).await?;
            Ok(json!({"ok": true, "serial": device.serial, "startX": a.start_x, "startY": a.start_y, "endX": a.end_x, "endY": a.end_y, "durationMs": d, "execution": run.execution()}))
        })
        .await
        .map(Reply::Json)
    }
}
