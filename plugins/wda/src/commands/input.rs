//! `ios-input`: type into one editor named by `elementId` (a UID from the current
//! tree) or `accessibilityId` (resolved now through W3C find elements: exactly one
//! element, zero or several fail before dispatch), as ONE managed `input` action.
//! The Runner taps the editor, with `clearFirst` sends one keyboard-clear event and
//! must observe the empty value, then types; every step rechecks the App, session
//! and editor focus. No coordinate or global-key fallback, no retries.

use aab_ios_transport::wda::Target;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{APP_REQUIRED, app_props, object, text, wda_mutation};
use crate::native_target::{SELECTOR_AMBIGUOUS, SELECTOR_NOT_FOUND};
use crate::runner::Wda;

/// The W3C element reference key.
pub const W3C_ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn spec() -> CommandSpec {
    let mut required = APP_REQUIRED.to_vec();
    required.push("text");
    let mut schema = object(
        app_props(json!({
            "text": text(),
            "elementId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "WDA element UID of the editor (from the current ios-uia-tree)"},
            "accessibilityId": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Accessibility id of the editor; must name exactly one element"},
            "clearFirst": {"type": "boolean", "description": "Clear the editor first (one keyboard-clear event; its empty value must be observed). Default false"}
        })),
        &required,
    );
    schema["oneOf"] = json!([{"required": ["elementId"]}, {"required": ["accessibilityId"]}]);
    wda_mutation("ios-input", "Type text into one editor of the session's App (exactly one of elementId or accessibilityId, resolved to exactly one W3C element), optionally clearing it first (clearFirst); one managed input action with a receipt, never retried.").input_schema(schema)
}

super::app_args!(InputArgs {
    text: String,
    element_id: Option<String>,
    accessibility_id: Option<String>,
    clear_first: Option<bool>,
});

/// The one element UID of a W3C find-elements answer.
pub fn single_element(found: &Value, accessibility_id: &str) -> Result<String, ProviderError> {
    let Some(list) = found.as_array() else {
        return Err(ProviderError::new(aab_ios_transport::wda::codes::IOS_WDA_PROTOCOL_ERROR, "find elements did not answer an array").with_details(json!({"value": found})).not_dispatched());
    };
    let ids: Vec<&str> = list.iter().filter_map(|e| e.get(W3C_ELEMENT).or_else(|| e.get("ELEMENT")).and_then(Value::as_str)).collect();
    if ids.len() != list.len() {
        return Err(ProviderError::new(aab_ios_transport::wda::codes::IOS_WDA_PROTOCOL_ERROR, "find elements answered something that is not a W3C element reference").with_details(json!({"value": found})).not_dispatched());
    }
    match ids.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(ProviderError::new(SELECTOR_NOT_FOUND, format!("no element has accessibility id {accessibility_id:?}")).with_field("accessibilityId").not_dispatched()),
        many => Err(ProviderError::new(SELECTOR_AMBIGUOUS, format!("{} elements have accessibility id {accessibility_id:?}; use elementId", many.len())).with_field("accessibilityId").with_details(json!({"matches": many.len()})).not_dispatched()),
    }
}

async fn resolve(wda: &Wda, target: &Target, accessibility_id: &str) -> Result<String, ProviderError> {
    let path = format!("/session/{}/elements", target.session_id.as_deref().unwrap_or_default());
    let found = wda.conn.read("POST", &path, Some(target), Some(&json!({"using": "accessibility id", "value": accessibility_id})), wda.deadline).await?;
    single_element(&found, accessibility_id)
}

pub struct Input;
impl Command for Input {
    type Provider = WdaProvider;
    type Args = InputArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, inv: &Invocation, args: InputArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (wda, target) = crate::runner::open_session(ctx, &reach!(args), &args.bundle_id, &args.wda_session_id).await?;
            let element = match (&args.element_id, &args.accessibility_id) {
                (Some(e), _) => e.clone(),
                (None, Some(a)) => resolve(&wda, &target, a).await?,
                (None, None) => return Err(ProviderError::new("invalid_argument", "exactly one of elementId or accessibilityId").with_field("elementId").not_dispatched()),
            };
            let payload = json!({"elementId": element, "text": args.text, "clearFirst": args.clear_first.unwrap_or(false)});
            let settled = wda.execute(ctx, inv, "ios-input", "input", &target, payload).await?;
            let mut out = wda.action_reply(inv, &target, "input", &settled);
            out["elementId"] = json!(element);
            Ok(Reply::Json(out))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accessibility_id_must_name_exactly_one_element() {
        assert_eq!(single_element(&json!([{W3C_ELEMENT: "U5"}]), "name").unwrap(), "U5");
        assert_eq!(single_element(&json!([]), "name").unwrap_err().error, SELECTOR_NOT_FOUND);
        let e = single_element(&json!([{W3C_ELEMENT: "U5"}, {W3C_ELEMENT: "U6"}]), "name").unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), (SELECTOR_AMBIGUOUS, Some("accessibilityId")));
        assert!(single_element(&json!([{"other": 1}]), "name").is_err());
        assert!(single_element(&json!({"value": []}), "name").is_err());
    }
}
