//! `ios-tap-native` and `ios-input-native-text`: act on the ONE element a native
//! selector names. The Runner must advertise `aab.ios-native-target/v1`; the
//! selector is bound in a fresh tree of the session (visible, exactly one match,
//! enabled, with a WDA element UID), an `expectedTarget` from an earlier
//! observation must still name the same Runner, App process, session and element,
//! and the element's `targetRef` travels with the managed `native-tap` /
//! `native-input` action so the Runner revalidates it immediately before the
//! XCTest event. There is no coordinate fallback.

use aab_ios_transport::wda::NATIVE_TARGET_SCHEMA;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::tree::read_tree;
use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{APP_REQUIRED, app_props, expected_target, native_selector, object, text, wda_mutation};
use crate::native_target::{TARGET_SCHEMA_REQUIRED, check_expected_target, resolve, summary, target_ref};
use crate::runner::Wda;

super::app_args!(NativeArgs {
    selector: Value,
    expected_target: Option<Value>,
    text: Option<String>,
});

fn schema(with_text: bool) -> Value {
    let mut required = APP_REQUIRED.to_vec();
    required.push("selector");
    let mut extra = json!({"selector": native_selector(), "expectedTarget": expected_target()});
    if with_text {
        required.push("text");
        extra["text"] = text();
    }
    object(app_props(extra), &required)
}

/// The Runner must speak native targets (an older prepared Runner cannot revalidate).
pub fn require_native_targets(status: &Value) -> Result<(), ProviderError> {
    if status.get("nativeTargetSchema").and_then(Value::as_str) == Some(NATIVE_TARGET_SCHEMA) {
        return Ok(());
    }
    Err(ProviderError::new(TARGET_SCHEMA_REQUIRED, format!("the Runner does not advertise {NATIVE_TARGET_SCHEMA}: native element actions need the current prepared Runner (ios-setup)"))
        .with_details(json!({"nativeTargetSchema": status.get("nativeTargetSchema")}))
        .not_dispatched())
}

/// Bind and act: `operation` `native-tap`, or `native-input` with the text.
async fn act(ctx: &Context<'_>, inv: &Invocation, command: &str, args: &NativeArgs) -> Result<Value, ProviderError> {
    let wda: Wda = crate::runner::open(ctx, &reach!(args)).await?;
    require_native_targets(&wda.status)?;
    let target = wda.bound(&args.bundle_id, &args.wda_session_id).await?;
    let (sref, nodes) = read_tree(&wda, &target).await?;
    let node = resolve(&nodes, &args.selector)?;
    if let Some(expected) = &args.expected_target {
        check_expected_target(expected, &sref, &node)?;
    }
    let (operation, payload) = match &args.text {
        // Input replaces the editor's value: the Runner clears it first and must observe it empty.
        Some(t) => ("native-input", json!({"targetRef": target_ref(&node), "text": t, "clearFirst": true})),
        None => ("native-tap", json!({"targetRef": target_ref(&node)})),
    };
    let settled = wda.execute(ctx, inv, command, operation, &target, payload).await?;
    let mut out = wda.action_reply(inv, &target, operation, &settled);
    out["bound"] = summary(&node);
    out["session"] = sref;
    Ok(out)
}

pub struct TapNative;
impl Command for TapNative {
    type Provider = WdaProvider;
    type Args = NativeArgs;
    fn spec() -> CommandSpec {
        wda_mutation("ios-tap-native", "Tap the one visible, enabled native element a selector names (accessibilityId | label | elementId, optional type) in a fresh WDA tree, bound to an observed expectedTarget when given; the Runner revalidates the element before the XCTest event; receipt, never retried.").input_schema(schema(false))
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: NativeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async { act(ctx, inv, "ios-tap-native", &args).await.map(Reply::Json) }).await
    }
}

pub struct InputNativeText;
impl Command for InputNativeText {
    type Provider = WdaProvider;
    type Args = NativeArgs;
    fn spec() -> CommandSpec {
        wda_mutation("ios-input-native-text", "Replace the value of the one visible, enabled native editor a selector names (accessibilityId | label | elementId, optional type) with text, bound like ios-tap-native; the Runner clears the editor, observes it empty and types; receipt, never retried.").input_schema(schema(true))
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: NativeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async { act(ctx, inv, "ios-input-native-text", &args).await.map(Reply::Json) }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_actions_need_the_advertised_target_schema() {
        assert!(require_native_targets(&json!({"nativeTargetSchema": NATIVE_TARGET_SCHEMA})).is_ok());
        let e = require_native_targets(&json!({"executionSchema": "aab.wda-execution/v1"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), (TARGET_SCHEMA_REQUIRED, Some(false)));
    }
}
