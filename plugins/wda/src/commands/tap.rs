//! `ios-tap` and `ios-swipe`: coordinate gestures (screen points) in the session's
//! foreground App, as managed `tap` / `swipe` actions. They are not semantic
//! element actions: the Runner checks the App, process and session before the
//! event, not what lies under the point.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::json;

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{APP_REQUIRED, app_props, coordinate, object, wda_mutation};

const DEFAULT_SWIPE_MS: u64 = 300;

super::app_args!(TapArgs {
    tap_x: f64,
    tap_y: f64,
});

pub struct Tap;
impl Command for Tap {
    type Provider = WdaProvider;
    type Args = TapArgs;
    fn spec() -> CommandSpec {
        let mut required = APP_REQUIRED.to_vec();
        required.extend(["tapX", "tapY"]);
        wda_mutation("ios-tap", "Tap screen point (tapX, tapY) in the session's foreground App through the prepared WDA Runner: one managed tap action, settled by the Runner's receipt, never retried.")
            .input_schema(object(app_props(json!({"tapX": coordinate("X in screen points"), "tapY": coordinate("Y in screen points")})), &required))
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: TapArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (wda, target) = crate::runner::open_session(ctx, &reach!(args), &args.bundle_id, &args.wda_session_id).await?;
            let settled = wda.execute(ctx, inv, "ios-tap", "tap", &target, json!({"x": args.tap_x, "y": args.tap_y})).await?;
            Ok(Reply::Json(wda.action_reply(inv, &target, "tap", &settled)))
        })
        .await
    }
}

super::app_args!(SwipeArgs {
    start_x: f64,
    start_y: f64,
    end_x: f64,
    end_y: f64,
    duration_ms: Option<u64>,
});

pub struct Swipe;
impl Command for Swipe {
    type Provider = WdaProvider;
    type Args = SwipeArgs;
    fn spec() -> CommandSpec {
        let mut required = APP_REQUIRED.to_vec();
        required.extend(["startX", "startY", "endX", "endY"]);
        wda_mutation("ios-swipe", "Swipe from (startX, startY) to (endX, endY) in screen points in the session's foreground App through the prepared WDA Runner (durationMs, default 300): one managed swipe action with a receipt.").input_schema(object(
            app_props(json!({
                "startX": coordinate("Start X in screen points"), "startY": coordinate("Start Y in screen points"),
                "endX": coordinate("End X in screen points"), "endY": coordinate("End Y in screen points"),
                "durationMs": {"type": "integer", "minimum": 1, "maximum": 120000, "description": "Gesture length (default 300)"}
            })),
            &required,
        ))
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: SwipeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (wda, target) = crate::runner::open_session(ctx, &reach!(args), &args.bundle_id, &args.wda_session_id).await?;
            let payload = json!({"startX": args.start_x, "startY": args.start_y, "endX": args.end_x, "endY": args.end_y, "durationMs": args.duration_ms.unwrap_or(DEFAULT_SWIPE_MS)});
            let settled = wda.execute(ctx, inv, "ios-swipe", "swipe", &target, payload).await?;
            Ok(Reply::Json(wda.action_reply(inv, &target, "swipe", &settled)))
        })
        .await
    }
}
