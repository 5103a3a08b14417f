//! The iOS H5 commands (aab-host §1.4, seed "iOS WKWebView targets"):
//! `ios-h5-dom` (the SDK's snapshot of one WKWebView page with its
//! `aab.ios-h5-target/v1` pageRef), the managed mutations `ios-h5-click`,
//! `ios-h5-input`, `ios-h5-scroll` (bring into view) and the expert
//! `ios-h5-eval` (bound to an observed `expectedPage`; never callable from a
//! Script). Every mutation binds its selector in a fresh snapshot (and, with
//! `expectedTarget`, to the observed page and element) before the one
//! `POST /v1/h5/action` of [`crate::managed`].

use aab_ios_transport::Deadline;
use aab_ios_transport::sdk::{self, Connection, Kind};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Map, Value, json};

use super::{app_args, cancellable, deadline, read_with};
use crate::IosProvider;
use crate::h5::{Aim, bind, check_snapshot, dom_path, element, expected_target_schema, page_ref_schema, selector_schema, summary, web_view_id_schema};
use crate::manifest::{app_query, device_mutation, object, props, required};
use crate::runtime::with_facts;

app_args!(
    /// The arguments of every H5 command (each schema admits its own subset).
    H5Args {
        web_view_id: Option<String>,
        selector: Option<Value>,
        expected_target: Option<Value>,
        expected_page: Option<Value>,
        text: Option<String>,
        script: Option<String>,
    }
);

/// One snapshot of the chosen WebView, checked against the connection's runtime.
async fn snapshot(conn: &Connection, web_view_id: Option<&str>, deadline: Deadline) -> Result<Value, ProviderError> {
    let answer = sdk::exchange(&conn.endpoint, "GET", &dom_path(web_view_id), None, sdk::REQUEST_TIMEOUT, deadline).await.map_err(sdk::Failure::read_error)?;
    check_snapshot(&answer.body, &conn.endpoint.identity)?;
    Ok(answer.body)
}

fn missing(field: &str) -> ProviderError {
    ProviderError::new("missing_argument", format!("`{field}` is required")).with_field(field).not_dispatched()
}

fn payload(action: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("action".into(), json!(action));
    m
}

/// One H5 action: preflight, a fresh snapshot (the explicit WebView, else the
/// observed one, else the single visible), bind, then the managed POST.
async fn act(ctx: &Context<'_>, inv: &Invocation, command: &str, args: &H5Args, verb: &str) -> Result<Value, ProviderError> {
    let aim = match verb {
        "eval" => Aim::Page { expected: args.expected_page.as_ref().ok_or_else(|| missing("expectedPage"))? },
        _ => Aim::Element { selector: args.selector.as_ref().ok_or_else(|| missing("selector"))?, expected: args.expected_target.as_ref(), editable: verb == "input" },
    };
    let deadline = deadline(ctx);
    let target = args.target();
    target.check()?;
    cancellable(ctx, async {
        let session = crate::managed::open(&target, Kind::H5, deadline).await?;
        let which = args.web_view_id.as_deref().or(aim.observed_web_view());
        let snap = snapshot(&session.conn, which, deadline).await?;
        let (page, control) = bind(&snap, &aim)?;
        let mut p = payload(verb);
        p.insert("pageRef".into(), page.clone());
        if let Some(c) = &control {
            p.insert("element".into(), element(c));
        }
        match verb {
            "input" => {
                p.insert("text".into(), json!(args.text.as_ref().ok_or_else(|| missing("text"))?));
            }
            "eval" => {
                p.insert("script".into(), json!(args.script.as_ref().ok_or_else(|| missing("script"))?));
            }
            _ => {}
        }
        let epoch = session.conn.endpoint.identity.runtime_epoch.clone();
        let mut out = session.execute(ctx, inv, command, &epoch, p).await?;
        out["pageRef"] = page;
        out["webView"] = snap["webView"].clone();
        if let Some(c) = &control {
            out["bound"] = summary(c);
        }
        if verb == "eval" {
            // The renderer's completion value (`result`; older renderers said `value`).
            out["value"] = out["device"].get("result").or_else(|| out["device"].get("value")).cloned().unwrap_or(Value::Null);
        }
        Ok(out)
    })
    .await
}

fn base(extra: Value) -> Value {
    let mut p = props(json!({"webViewId": web_view_id_schema()}));
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    p
}

pub struct Dom;
impl Command for Dom {
    type Provider = IosProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        app_query("ios-h5-dom", "The SDK's snapshot of one WKWebView page: pageRef (aab.ios-h5-target/v1: SDK epoch, bundle, process, WebView, document, URL) and the shared renderer's dom (url, title, viewport, bodyText, up to 1000 controls with elementId, identity, visibility, bounds; passwords redacted). Without webViewId the single visible WebView.", Some("app.read"))
            .input_schema(object(base(json!({})), &required(&[])))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let web_view_id = args.web_view_id.clone();
        read_with(ctx, args.target(), |conn, deadline| async move {
            let snap = snapshot(&conn, web_view_id.as_deref(), deadline).await?;
            let epoch = conn.endpoint.identity.runtime_epoch.clone();
            let mut out = with_facts(snap, &conn);
            out["runtimeEpoch"] = json!(epoch);
            Ok(out)
        })
        .await
        .map(Reply::Json)
    }
}

pub fn click_spec() -> CommandSpec {
    device_mutation("ios-h5-click", "ios-app", "Click the one visible WKWebView control a selector names in a fresh snapshot (and, with expectedTarget, the observed element of the observed page) through the SDK's renderer and native hit check; a managed aab.h5-execution/v1 action with its settlement proof, never resent.")
        .permission("app.interact")
        .input_schema(object(base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema()})), &required(&["selector"])))
}

pub fn input_spec() -> CommandSpec {
    device_mutation("ios-h5-input", "ios-app", "Replace the value of the one visible, editable WKWebView control a selector names (\"\" clears it), bound like ios-h5-click; a managed action with its settlement proof, never resent.")
        .permission("app.interact")
        .input_schema(object(
            base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema(), "text": {"type": "string", "maxLength": 16384, "description": "The control's new whole value (\"\" clears it)"}})),
            &required(&["selector", "text"]),
        ))
}

pub fn scroll_spec() -> CommandSpec {
    device_mutation("ios-h5-scroll", "ios-app", "Scroll the one visible WKWebView control a selector names into view, bound like ios-h5-click; a managed action with its settlement proof, never resent.")
        .permission("app.interact")
        .input_schema(object(base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema()})), &required(&["selector"])))
}

pub fn eval_spec() -> CommandSpec {
    device_mutation("ios-h5-eval", "ios-app", "Expert: evaluate JavaScript in the observed WKWebView page (expectedPage from ios-h5-dom; reobserve_required once the page changed); returns the value. Never callable from a Script.")
        .role("expert")
        .input_schema(object(
            props(json!({"expectedPage": page_ref_schema(), "script": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript expression or statements; the completion value is returned"}})),
            &required(&["script", "expectedPage"]),
        ))
}

macro_rules! h5_mutation {
    ($name:ident, $spec:ident, $command:literal, $verb:literal) => {
        pub struct $name;
        impl Command for $name {
            type Provider = IosProvider;
            type Args = H5Args;
            fn spec() -> CommandSpec {
                $spec()
            }
            async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
                act(ctx, inv, $command, &args, $verb).await.map(Reply::Json)
            }
        }
    };
}

h5_mutation!(Click, click_spec, "ios-h5-click", "click");
h5_mutation!(Input, input_spec, "ios-h5-input", "input");
h5_mutation!(Scroll, scroll_spec, "ios-h5-scroll", "scroll");
h5_mutation!(Eval, eval_spec, "ios-h5-eval", "eval");

#[cfg(test)]
mod tests {
    use super::*;

    fn validator(spec: CommandSpec) -> impl Fn(Value) -> Result<(), ProviderError> {
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
        let v = aab_plugin_api::validate::compile(&schema).unwrap();
        let name = spec.command.clone();
        move |extra: Value| {
            let mut a = json!({"deviceId": "00008110-000A1C2E3F4B5D6E", "bundleId": "com.example.shop"});
            a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            aab_plugin_api::validate::validate_arguments(&name, &v, &schema, &a)
        }
    }

    fn page() -> Value {
        json!({"schemaVersion": sdk::H5_TARGET_SCHEMA, "runtimeEpoch": "E", "bundleId": "com.example.shop", "processId": 7, "webViewId": "v", "documentId": "d", "url": "u"})
    }

    #[test]
    fn selectors_and_bindings_are_in_the_schemas() {
        let click = validator(click_spec());
        assert!(click(json!({"selector": {"text": "Buy"}})).is_ok());
        assert!(click(json!({"selector": {"elementId": "e12"}, "webViewId": "wv-1", "runtimeUrl": "http://127.0.0.1:9000"})).is_ok());
        for bad in [json!({}), json!({"text": "a", "elementId": "e1"}), json!({"css": "#x"}), json!({"elementId": "12"})] {
            let e = click(json!({"selector": bad})).unwrap_err();
            assert_eq!(e.dispatched, Some(false), "{bad}");
        }
        assert_eq!(click(json!({})).unwrap_err().field.as_deref(), Some("selector"));
        assert_eq!(click(json!({"selector": {"text": "a"}, "deviceId": null})).unwrap_err().dispatched, Some(false));
        let element = json!({"elementId": "e1", "tag": "a", "id": null, "name": null, "type": null, "text": "x", "ariaLabel": null, "href": "/x"});
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": page(), "element": element}})).is_ok());
        let mut android = page();
        android["schemaVersion"] = json!("aab.android-h5-target/v1");
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": android, "element": element}})).is_err());
        let input = validator(input_spec());
        assert!(input(json!({"selector": {"text": "Name"}, "text": ""})).is_ok(), "\"\" clears");
        assert_eq!(input(json!({"selector": {"text": "Name"}})).unwrap_err().field.as_deref(), Some("text"));
        let scroll = validator(scroll_spec());
        assert!(scroll(json!({"selector": {"ariaLabel": "Terms"}})).is_ok());
        assert!(scroll(json!({"deltaY": 100})).is_err());
        let eval = validator(eval_spec());
        assert_eq!(eval(json!({"script": "1+1"})).unwrap_err().field.as_deref(), Some("expectedPage"));
        assert!(eval(json!({"script": "1+1", "expectedPage": page()})).is_ok());
        assert!(eval(json!({"script": "1+1", "expectedPage": page(), "webViewId": "v"})).is_err(), "the page names its WebView");
    }

    #[test]
    fn eval_is_expert_and_the_rest_need_app_interact() {
        let e = eval_spec();
        assert_eq!((e.role.as_str(), e.script_permission.as_deref()), ("expert", None));
        for s in [click_spec(), input_spec(), scroll_spec(), eval_spec()] {
            assert_eq!(s.device_key, ["deviceId".to_string()], "{}", s.command);
        }
        assert_eq!(Dom::spec().script_permission.as_deref(), Some("app.read"));
    }
}
