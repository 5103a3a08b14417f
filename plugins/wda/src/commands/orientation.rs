//! `ios-set-orientation`: the App's interface orientation through the managed
//! `set-orientation` action. The Runner must advertise `aab.ios-orientation/v1`;
//! an `expectedSession` from the preceding `ios-uia-tree` must still be the bound
//! session (`reobserve_required` otherwise, before dispatch). The settled result
//! reports `requestedOrientation` and `observedInterfaceOrientation`; a different
//! observed direction is the Runner's `ios_wda_orientation_not_observed`.

use aab_ios_transport::wda::ORIENTATION_SCHEMA;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{APP_REQUIRED, app_props, expected_session, object, orientation, wda_mutation};
use crate::native_target::{check_session, session_ref};
use crate::runner::outcome;

pub const ORIENTATION_UNSUPPORTED: &str = "ios_wda_orientation_unsupported";

super::app_args!(OrientationArgs {
    orientation: String,
    expected_session: Option<Value>,
});

/// The Runner must advertise the orientation contract.
pub fn require_orientation(status: &Value) -> Result<(), ProviderError> {
    if status.get("orientationSchema").and_then(Value::as_str) == Some(ORIENTATION_SCHEMA) {
        return Ok(());
    }
    Err(ProviderError::new(ORIENTATION_UNSUPPORTED, format!("the Runner does not advertise {ORIENTATION_SCHEMA}")).with_details(json!({"orientationSchema": status.get("orientationSchema")})).not_dispatched())
}

pub struct SetOrientation;
impl Command for SetOrientation {
    type Provider = WdaProvider;
    type Args = OrientationArgs;
    fn spec() -> CommandSpec {
        let mut required = APP_REQUIRED.to_vec();
        required.push("orientation");
        wda_mutation("ios-set-orientation", "Set the App's interface orientation (portrait | landscapeLeft | landscapeRight | portraitUpsideDown) through the prepared WDA Runner, bound to an observed expectedSession when given; reports requestedOrientation and observedInterfaceOrientation (a different observed direction fails).")
            .input_schema(object(app_props(json!({"orientation": orientation(), "expectedSession": expected_session()})), &required))
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: OrientationArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let wda = crate::runner::open(ctx, &reach!(args)).await?;
            require_orientation(&wda.status)?;
            let target = wda.bound(&args.bundle_id, &args.wda_session_id).await?;
            let sref = session_ref(wda.runner_epoch(), &target);
            if let Some(expected) = &args.expected_session {
                check_session(expected, &sref, "expectedSession")?;
            }
            let settled = wda.execute(ctx, inv, "ios-set-orientation", "set-orientation", &target, json!({"orientation": args.orientation})).await?;
            let mut out = wda.action_reply(inv, &target, "set-orientation", &settled);
            let observed = outcome(&settled);
            out["requestedOrientation"] = observed.get("requestedOrientation").cloned().unwrap_or(json!(args.orientation));
            out["observedInterfaceOrientation"] = observed.get("observedInterfaceOrientation").cloned().unwrap_or(Value::Null);
            out["session"] = sref;
            Ok(Reply::Json(out))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orientation_needs_the_advertised_schema() {
        assert!(require_orientation(&json!({"orientationSchema": ORIENTATION_SCHEMA})).is_ok());
        assert_eq!(require_orientation(&json!({})).unwrap_err().error, ORIENTATION_UNSUPPORTED);
    }
}
