//! The Android H5 (WebView) commands (aab-host §1.4, aab-protocols §1.8):
//! `h5-dom` (the SDK's snapshot of one WebView page), `h5-wait` (poll snapshots
//! until a selector binds), and the managed mutations `h5-click`, `h5-input`,
//! `h5-scroll` and the expert `h5-eval` (never callable from a Script), each
//! bound on the host to a fresh snapshot and the caller's observation
//! ([`crate::h5`]) before the one `POST /v1/h5/action`. The argument rules
//! (selector XOR deltas, what binds with what) are in the schemas.

use std::time::{Duration, Instant};

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::h5::{Aim, PREFIX, act, expected_target_schema, page_ref_schema, select, selector_schema, snapshot, web_view_id_schema};
use crate::manifest::{DEFAULT_ADB_TIMEOUT_MS, MUTATION_REQUIRED, device_mutation, object, package_name, port, props};
use crate::native_exec::App;

pub const H5_WAIT_TIMEOUT: &str = "h5_wait_timeout";
const DEFAULT_INTERVAL_MS: u64 = 500;

fn base(extra: Value) -> Value {
    let mut p = json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "webViewId": web_view_id_schema()});
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    props(p)
}

fn required(extra: &[&'static str]) -> Vec<&'static str> {
    let mut r = MUTATION_REQUIRED.to_vec();
    r.extend_from_slice(extra);
    r
}

fn delta(axis: &str) -> Value {
    json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": format!("CSS pixels to scroll the page along {axis} (with the other delta; not both 0)")})
}

fn dom_spec() -> CommandSpec {
    CommandSpec::query("h5-dom")
        .platform("android")
        .domain("webview")
        .target_kind("android-app")
        .summary("The SDK's snapshot of one WebView page (aab.android-h5-target/v1): pageRef (runtime, process, Activity, window, WebView, document generation, URL), and the shared renderer's dom (url, title, viewport, bodyText, up to 1000 controls with elementId, identity fields, visibility, interaction and bounds). Without webViewId the single visible WebView of the foreground window.")
        .permission("app.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(object(base(json!({})), &["packageName"]))
}

fn click_spec() -> CommandSpec {
    device_mutation("h5-click", "webview", "android-app", "Click the one visible WebView control a selector names in a fresh snapshot (and, with expectedTarget, the observed element of the observed page), through the SDK's renderer with the native hit check; receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(object(base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema()})), &required(&["selector"])))
}

fn input_spec() -> CommandSpec {
    device_mutation("h5-input", "webview", "android-app", "Replace the value of the one visible, editable WebView control a selector names (input and change events; \"\" clears it), bound like h5-click; receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(object(
            base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema(), "text": {"type": "string", "maxLength": 16384, "description": "The control's new whole value (\"\" clears it)"}})),
            &required(&["selector", "text"]),
        ))
}

fn scroll_spec() -> CommandSpec {
    let mut schema = object(
        base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema(), "expectedPage": page_ref_schema(), "deltaX": delta("x"), "deltaY": delta("y")})),
        &required(&[]),
    );
    schema["dependentRequired"] = json!({"deltaX": ["deltaY"], "deltaY": ["deltaX"], "expectedTarget": ["selector"], "expectedPage": ["deltaX", "deltaY"]});
    schema["oneOf"] = json!([{"required": ["selector"]}, {"required": ["deltaX"]}]);
    schema["not"] = json!({"required": ["deltaX", "deltaY"], "properties": {"deltaX": {"const": 0}, "deltaY": {"const": 0}}});
    device_mutation("h5-scroll", "webview", "android-app", "Scroll a WebView page: the one visible control a selector names into view (bound like h5-click), or the page by deltaX/deltaY CSS pixels (not both 0; expectedPage binds the observed page); receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(schema)
}

fn eval_spec() -> CommandSpec {
    device_mutation("h5-eval", "webview", "android-app", "Expert: evaluate synchronous JavaScript in the observed WebView page (expectedPage from h5-dom; refused with reobserve_required once the page changed) through the SDK; returns the value. Never callable from a Script.")
        .role("expert")
        .input_schema(object(
            props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "expectedPage": page_ref_schema(),
                         "script": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript expression or statements; the completion value is returned"}})),
            &required(&["script", "expectedPage"]),
        ))
}

fn wait_spec() -> CommandSpec {
    CommandSpec::query("h5-wait")
        .platform("android")
        .domain("webview")
        .target_kind("android-app")
        .summary("Wait until a selector binds exactly one visible control of the WebView page (the first snapshot's WebView is kept), polling h5 snapshots every intervalMs until timeoutMs (h5_wait_timeout); a missing or ambiguous WebView, an ambiguous selector or a truncated snapshot without elementId fail at once.")
        .permission("app.interact")
        .target_key("serial")
        .target_key("packageName")
        .lane("wait")
        .timeouts(10_000, 60_000)
        .input_schema(object(
            base(json!({"selector": selector_schema(), "intervalMs": {"type": "integer", "minimum": 10, "maximum": 60000, "description": "Pause between snapshots (default 500)"}})),
            &["packageName", "selector"],
        ))
}

/// The arguments of every H5 command (each command's schema admits its own subset).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct H5Args {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub web_view_id: Option<String>,
    pub selector: Option<Value>,
    pub expected_target: Option<Value>,
    pub expected_page: Option<Value>,
    pub text: Option<String>,
    pub delta_x: Option<f64>,
    pub delta_y: Option<f64>,
    pub script: Option<String>,
    pub interval_ms: Option<u64>,
}

impl H5Args {
    fn app(&self) -> App {
        App { package: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
    fn app_args(&self) -> AppArgs {
        AppArgs { package_name: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
}

fn payload(action: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("action".into(), json!(action));
    m
}

/// A missing argument the schema requires (defence in depth: never reached).
fn missing(field: &str) -> ProviderError {
    ProviderError::new("missing_argument", format!("`{field}` is required")).with_field(field).not_dispatched()
}

pub struct H5Dom;
impl Command for H5Dom {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        dom_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let (serial, route) = sdk_route(&args.app_args(), &budget).await?;
            let mut snap = snapshot(route.forward.port, args.web_view_id.as_deref(), budget.adb()).await?;
            snap["serial"] = json!(serial);
            snap["packageName"] = json!(args.package_name);
            snap["runtimeEpoch"] = snap["pageRef"]["runtimeEpoch"].clone();
            Ok(Reply::Json(snap))
        })
        .await
    }
}

pub struct H5Click;
impl Command for H5Click {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        click_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.as_ref().ok_or_else(|| missing("selector"))?;
        let aim = Aim::Element { selector, expected: args.expected_target.as_ref(), editable: false };
        cancellable(ctx, act(ctx, inv, "h5-click", &args.app(), args.web_view_id.as_deref(), aim, payload("click"))).await.map(Reply::Json)
    }
}

pub struct H5Input;
impl Command for H5Input {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        input_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.as_ref().ok_or_else(|| missing("selector"))?;
        let text = args.text.as_ref().ok_or_else(|| missing("text"))?;
        let mut p = payload("input");
        p.insert("text".into(), json!(text));
        let aim = Aim::Element { selector, expected: args.expected_target.as_ref(), editable: true };
        cancellable(ctx, act(ctx, inv, "h5-input", &args.app(), args.web_view_id.as_deref(), aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Scroll;
impl Command for H5Scroll {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        scroll_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (aim, p) = match (&args.selector, args.delta_x, args.delta_y) {
            (Some(selector), _, _) => (Aim::Element { selector, expected: args.expected_target.as_ref(), editable: false }, payload("scroll")),
            (None, Some(x), Some(y)) => {
                let mut p = payload("scrollBy");
                p.insert("deltaX".into(), json!(x));
                p.insert("deltaY".into(), json!(y));
                (Aim::Page { expected: args.expected_page.as_ref() }, p)
            }
            _ => return Err(missing("selector")),
        };
        cancellable(ctx, act(ctx, inv, "h5-scroll", &args.app(), args.web_view_id.as_deref(), aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Eval;
impl Command for H5Eval {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        eval_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let script = args.script.as_ref().ok_or_else(|| missing("script"))?;
        let expected = args.expected_page.as_ref().ok_or_else(|| missing("expectedPage"))?;
        let mut p = payload("eval");
        p.insert("script".into(), json!(script));
        cancellable(ctx, act(ctx, inv, "h5-eval", &args.app(), None, Aim::Page { expected: Some(expected) }, p)).await.map(Reply::Json)
    }
}

pub struct H5Wait;
impl Command for H5Wait {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        wait_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.clone().ok_or_else(|| missing("selector"))?;
        let interval = Duration::from_millis(args.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS));
        // Give up a little before the host's deadline so the reply carries the last look.
        let margin = (ctx.remaining() / 10).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let started = Instant::now();
        let end = Deadline::after(ctx.remaining().saturating_sub(margin));
        let budget = Budget { deadline: end, adb_step: Duration::from_millis(args.adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS)) };
        let app = args.app_args();
        cancellable(ctx, async {
            // The first snapshot fixes the WebView; later polls never select another.
            let mut which = args.web_view_id.clone();
            let mut polls = 0u64;
            let mut last = Value::Null;
            loop {
                let read = async {
                    let (serial, route) = sdk_route(&app, &budget).await?;
                    Ok::<_, ProviderError>((serial, snapshot(route.forward.port, which.as_deref(), budget.deadline).await?))
                };
                let (serial, snap) = match read.await {
                    Ok(r) => r,
                    // The deadline passed during the read: that is the timeout.
                    Err(_) if end.remaining().is_zero() => break,
                    Err(e) => return Err(e),
                };
                polls += 1;
                which = snap.pointer("/pageRef/webViewId").and_then(Value::as_str).map(str::to_string).or(which);
                match select(&snap["dom"], &selector, PREFIX) {
                    Ok(control) => {
                        return Ok(json!({
                            "ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": snap["pageRef"]["runtimeEpoch"],
                            "pageRef": snap["pageRef"], "webView": snap["webView"], "matched": control, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64,
                        }));
                    }
                    Err(e) if e.error == format!("{PREFIX}selector_not_found") => {
                        last = json!({"url": snap["dom"]["url"], "documentId": snap["pageRef"]["documentId"], "controlCount": snap["dom"]["controlCount"], "refusal": e.details});
                    }
                    Err(e) => return Err(e),
                }
                if end.remaining() <= interval {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
            Err(ProviderError::new(H5_WAIT_TIMEOUT, format!("no single visible control matched the selector before the deadline ({polls} snapshots)"))
                .with_details(json!({"selector": selector, "webViewId": which, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64, "last": last}))
                .not_dispatched())
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator(spec: CommandSpec) -> impl Fn(Value) -> Result<(), ProviderError> {
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
        let v = aab_plugin_api::validate::compile(&schema).unwrap();
        let name = spec.command.clone();
        move |extra: Value| {
            let mut a = json!({"packageName": "com.x.app", "serial": "emulator-5554"});
            a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            aab_plugin_api::validate::validate_arguments(&name, &v, &schema, &a)
        }
    }

    fn page() -> Value {
        json!({"schemaVersion": crate::h5::TARGET_SCHEMA, "runtimeEpoch": "r", "packageName": "com.x.app", "processId": 7, "activity": "a.B", "windowId": "w", "webViewId": "v", "documentId": "d", "url": "u"})
    }

    #[test]
    fn selectors_name_exactly_one_identity() {
        let click = validator(click_spec());
        assert!(click(json!({"selector": {"text": "Buy"}})).is_ok());
        assert!(click(json!({"selector": {"ariaLabel": "Buy", "tag": "button"}})).is_ok());
        assert!(click(json!({"selector": {"elementId": "e12"}, "webViewId": "wv-1"})).is_ok());
        for bad in [json!({}), json!({"text": "a", "elementId": "e1"}), json!({"tag": "a"}), json!({"css": "#x"}), json!({"elementId": "12"}), json!({"text": ""})] {
            let e = click(json!({"selector": bad})).unwrap_err();
            assert_eq!((e.dispatched, e.field.as_deref().map(|f| f.starts_with("selector"))), (Some(false), Some(true)), "{bad} → {e:?}");
        }
        assert_eq!(click(json!({})).unwrap_err().field.as_deref(), Some("selector"));
        let e = validator(click_spec())(json!({"selector": {"text": "a"}, "serial": null})).unwrap_err();
        assert_eq!(e.dispatched, Some(false));
        // expectedTarget carries the whole observed binding.
        let element = json!({"elementId": "e1", "tag": "a", "id": null, "name": null, "type": null, "text": "x", "ariaLabel": null, "href": "/x"});
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": page(), "element": element}})).is_ok());
        let mut partial = page();
        partial.as_object_mut().unwrap().remove("documentId");
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": partial, "element": element}})).is_err());
        let input = validator(input_spec());
        assert!(input(json!({"selector": {"text": "Name"}, "text": ""})).is_ok(), "\"\" clears");
        assert_eq!(input(json!({"selector": {"text": "Name"}})).unwrap_err().field.as_deref(), Some("text"));
    }

    #[test]
    fn scroll_takes_a_selector_or_two_deltas() {
        let scroll = validator(scroll_spec());
        assert!(scroll(json!({"selector": {"text": "Terms"}})).is_ok());
        assert!(scroll(json!({"selector": {"text": "Terms"}, "expectedTarget": {"pageRef": page(), "element": {"elementId": "e1", "tag": "a", "id": "", "name": "", "type": "", "text": "", "ariaLabel": "", "href": ""}}})).is_ok());
        assert!(scroll(json!({"deltaX": 0, "deltaY": 400})).is_ok());
        assert!(scroll(json!({"deltaX": 0, "deltaY": -1.5, "expectedPage": page()})).is_ok());
        for bad in [
            json!({}),
            json!({"deltaY": 400}),
            json!({"deltaX": 0, "deltaY": 0}),
            json!({"deltaX": 0.0, "deltaY": 0.0}),
            json!({"selector": {"text": "Terms"}, "deltaX": 1, "deltaY": 1}),
            json!({"selector": {"text": "Terms"}, "expectedPage": page()}),
            json!({"deltaX": 1, "deltaY": 1, "expectedTarget": {"pageRef": page(), "element": {"elementId": "e1"}}}),
        ] {
            assert_eq!(scroll(bad.clone()).unwrap_err().dispatched, Some(false), "{bad}");
        }
    }

    #[test]
    fn eval_is_expert_bound_to_an_observed_page_and_wait_is_a_query() {
        let spec = eval_spec();
        assert_eq!((spec.role.as_str(), spec.script_permission.as_deref()), ("expert", None), "expert, no Script permission: permanently denied to Scripts");
        let eval = validator(spec);
        assert_eq!(eval(json!({"script": "1+1"})).unwrap_err().field.as_deref(), Some("expectedPage"));
        assert!(eval(json!({"script": "1+1", "expectedPage": page()})).is_ok());
        assert!(eval(json!({"script": "1+1", "expectedPage": page(), "webViewId": "v"})).is_err(), "the page names its WebView");
        let wait = wait_spec();
        assert!(wait.device_key.is_empty() && wait.script_permission.as_deref() == Some("app.interact"));
        let wait = validator(wait);
        assert!(wait(json!({"selector": {"text": "Done"}, "intervalMs": 50})).is_ok());
        assert!(wait(json!({"selector": {"text": "Done"}, "text": "x"})).is_err());
        for s in [click_spec(), input_spec(), scroll_spec()] {
            assert_eq!((s.script_permission.as_deref(), s.device_key.as_slice()), (Some("app.interact"), &["serial".to_string()][..]), "{}", s.command);
        }
        assert_eq!(dom_spec().script_permission.as_deref(), Some("app.read"));
    }
}
