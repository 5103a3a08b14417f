//! `ios-wda-session`: the Runner's one App session, explicitly. `status` reads the
//! foreground App and the bound session; `create` binds a new session to the App
//! that is ALREADY in the foreground (its bundle id and pid are frozen into it; it
//! never launches an App and never replaces a session); `close` closes exactly the
//! named session of the named App, without terminating the App, even after the
//! foreground changed. Create and close are managed actions (`session-create` /
//! `session-close`): sessions are never made through W3C `POST /session`.

use aab_ios_transport::wda::Target;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{bundle_id, object, props, session_id, with_action};
use crate::native_target::session_ref;
use crate::runner::{SESSION_CHANGED, SESSION_REQUIRED, Wda, outcome};

pub const SESSION_EXISTS: &str = "ios_wda_session_exists";
pub const APP_NOT_FOREGROUND: &str = "ios_wda_app_not_foreground";

fn spec() -> CommandSpec {
    let mut schema = object(
        props(json!({
            "operation": {"type": "string", "enum": ["status", "create", "close"], "description": "status: foreground App and session; create: a session for the foreground App (bundleId); close: that session (bundleId, wdaSessionId)"},
            "bundleId": bundle_id("The App (create: must be in the foreground; close: the session's App)"),
            "wdaSessionId": session_id()
        })),
        &["operation", "deviceId", "wdaRunnerBundleId"],
    );
    schema["oneOf"] = json!([
        {"properties": {"operation": {"const": "status"}, "bundleId": false, "wdaSessionId": false}},
        {"properties": {"operation": {"const": "create"}, "wdaSessionId": false}, "required": ["bundleId"]},
        {"properties": {"operation": {"const": "close"}}, "required": ["bundleId", "wdaSessionId"]}
    ]);
    with_action(
        CommandSpec::conditional("ios-wda-session", ["create", "close"])
            .platform("ios")
            .domain("ios")
            .target_kind("ios-app")
            .target_key("deviceId")
            .timeouts(30_000, 120_000)
            .summary("The Runner's App session: status (foreground App, session), create (for the App already in the foreground; never launches or replaces), close (exactly that session, the App keeps running); managed actions with a receipt."),
    )
    .input_schema(schema)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionArgs {
    pub operation: String,
    pub device_id: String,
    pub wda_runner_bundle_id: String,
    pub bundle_id: Option<String>,
    pub wda_session_id: Option<String>,
    pub wda_url: Option<String>,
    pub devicectl: Option<String>,
}

/// The App a `create` may bind: the foreground one, when it is `bundle_id` and no
/// session exists.
pub fn create_target(view: &Value, bundle_id: &str) -> Result<Target, ProviderError> {
    if let Some(s) = view.get("session").filter(|s| s.is_object()) {
        return Err(ProviderError::new(SESSION_EXISTS, format!("the Runner already has session {}; close it first (a session is never replaced)", s["sessionId"])).with_details(json!({"session": s})).not_dispatched());
    }
    let fg = view.get("foreground").filter(|f| f.is_object());
    match (fg.and_then(|f| f["bundleId"].as_str()), fg.and_then(|f| f["processId"].as_u64())) {
        (Some(b), Some(pid)) if b == bundle_id => Ok(Target { bundle_id: b.to_string(), process_id: pid, session_id: None }),
        _ => Err(ProviderError::new(APP_NOT_FOREGROUND, format!("{bundle_id} is not the foreground App (launch it first; a session is bound to the App in the foreground)"))
            .with_field("bundleId")
            .with_details(json!({"foreground": fg}))
            .not_dispatched()),
    }
}

/// The session a `close` may close: exactly the named one of the named App (its
/// pid from the Runner; the foreground does not matter).
pub fn close_target(view: &Value, bundle_id: &str, session_id: &str) -> Result<Target, ProviderError> {
    let Some(s) = view.get("session").filter(|s| s.is_object()) else {
        return Err(ProviderError::new(SESSION_REQUIRED, "the Runner has no session to close").with_field("wdaSessionId").not_dispatched());
    };
    if s["sessionId"].as_str() != Some(session_id) || s["bundleId"].as_str() != Some(bundle_id) {
        return Err(ProviderError::new(SESSION_CHANGED, format!("the Runner's session is {} of {}, not {session_id} of {bundle_id}", s["sessionId"], s["bundleId"])).with_field("wdaSessionId").with_details(json!({"session": s})).not_dispatched());
    }
    let Some(pid) = s["processId"].as_u64() else {
        return Err(ProviderError::new(aab_ios_transport::wda::codes::IOS_WDA_PROTOCOL_ERROR, "the Runner's session has no processId").not_dispatched());
    };
    Ok(Target { bundle_id: bundle_id.to_string(), process_id: pid, session_id: Some(session_id.to_string()) })
}

async fn run(ctx: &Context<'_>, inv: &Invocation, args: &SessionArgs) -> Result<Value, ProviderError> {
    let wda: Wda = crate::runner::open(ctx, &reach!(args)).await?;
    let view = wda.conn.session(wda.deadline).await?;
    let bundle = args.bundle_id.as_deref().unwrap_or_default();
    match args.operation.as_str() {
        "create" => {
            let target = create_target(&view, bundle)?;
            let settled = wda.execute(ctx, inv, "ios-wda-session", "session-create", &target, json!({})).await?;
            // The outcome is the settled result's `value` (`{sessionId, bundleId, processId}`).
            let created = outcome(&settled);
            let (Some(sid), Some(pid)) = (created["sessionId"].as_str(), created["processId"].as_u64()) else {
                return Err(ProviderError::new(aab_ios_transport::wda::codes::IOS_WDA_PROTOCOL_ERROR, "the settled session-create names no sessionId/processId").with_details(json!({"runner": settled})).settled_after_dispatch());
            };
            let created = Target { bundle_id: created["bundleId"].as_str().unwrap_or(bundle).to_string(), process_id: pid, session_id: Some(sid.to_string()) };
            let mut out = wda.action_reply(inv, &created, "session-create", &settled);
            out["sessionRef"] = session_ref(wda.runner_epoch(), &created);
            Ok(out)
        }
        "close" => {
            let target = close_target(&view, bundle, args.wda_session_id.as_deref().unwrap_or_default())?;
            let settled = wda.execute(ctx, inv, "ios-wda-session", "session-close", &target, json!({})).await?;
            let mut out = wda.action_reply(inv, &target, "session-close", &settled);
            out["closed"] = json!(true);
            Ok(out)
        }
        _ => {
            let mut out = wda.facts(None);
            out["ok"] = json!(true);
            out["foreground"] = view.get("foreground").cloned().unwrap_or_default();
            out["session"] = view.get("session").cloned().unwrap_or_default();
            if let Some(s) = view.get("session").filter(|s| s.is_object())
                && let (Some(b), Some(p), Some(id)) = (s["bundleId"].as_str(), s["processId"].as_u64(), s["sessionId"].as_str())
            {
                out["sessionRef"] = session_ref(wda.runner_epoch(), &Target { bundle_id: b.into(), process_id: p, session_id: Some(id.into()) });
            }
            Ok(out)
        }
    }
}

pub struct WdaSession;
impl Command for WdaSession {
    type Provider = WdaProvider;
    type Args = SessionArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: SessionArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async { run(ctx, inv, &args).await.map(Reply::Json) }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_binds_only_the_foreground_app_and_never_replaces() {
        let view = json!({"foreground": {"bundleId": "com.example", "processId": 4}, "session": null});
        assert_eq!(create_target(&view, "com.example").unwrap().process_id, 4);
        assert_eq!(create_target(&view, "com.other").unwrap_err().error, APP_NOT_FOREGROUND);
        assert_eq!(create_target(&json!({"foreground": null, "session": null}), "com.example").unwrap_err().error, APP_NOT_FOREGROUND);
        let bound = json!({"foreground": {"bundleId": "com.example", "processId": 4}, "session": {"sessionId": "S", "bundleId": "com.example", "processId": 4}});
        assert_eq!(create_target(&bound, "com.example").unwrap_err().error, SESSION_EXISTS);
    }

    #[test]
    fn close_needs_exactly_that_session_whatever_is_in_front() {
        let moved_on = json!({"foreground": {"bundleId": "com.other", "processId": 9}, "session": {"sessionId": "S", "bundleId": "com.example", "processId": 4}});
        let t = close_target(&moved_on, "com.example", "S").unwrap();
        assert_eq!((t.process_id, t.session_id.as_deref()), (4, Some("S")));
        assert_eq!(close_target(&moved_on, "com.example", "T").unwrap_err().error, SESSION_CHANGED);
        assert_eq!(close_target(&moved_on, "com.other", "S").unwrap_err().error, SESSION_CHANGED);
        assert_eq!(close_target(&json!({"session": null}), "com.example", "S").unwrap_err().error, SESSION_REQUIRED);
    }
}
