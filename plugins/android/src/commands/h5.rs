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

/// What tells the two H5 command families apart: Android WebViews through the
/// SDK's `/v1/h5/*` routes (`h5-*`, `webViewId`) and Flutter-hosted WebViews
/// through the Flutter action route (`flutter-h5-*`, `adapterId`). Everything
/// else — arguments, binding rules, schemas' shape, the wait loop — is shared.
pub(super) struct Dialect {
    /// Command prefix: `h5` | `flutter-h5`.
    pub commands: &'static str,
    /// The argument naming the WebView: `webViewId` | `adapterId`.
    pub id_field: &'static str,
    pub id_schema: fn() -> Value,
    pub page_ref_schema: fn() -> Value,
    pub expected_target_schema: fn() -> Value,
    /// The renderer's error prefix (`android_h5_` | `flutter_h5_`).
    pub error_prefix: &'static str,
    pub wait_timeout: &'static str,
    /// How the summaries name the page and the route (`a WebView page`, `the SDK's renderer`).
    pub page: &'static str,
    pub through: &'static str,
    /// Where `dom` / `wait` replies name the view (`webView` | `adapter`).
    pub view_member: &'static str,
    /// The device payload of a verb (`click`, `input`, `scroll`, `scrollBy`, `eval`).
    pub payload: fn(&str) -> Map<String, Value>,
}

pub(super) const ANDROID: Dialect = Dialect {
    commands: "h5",
    id_field: "webViewId",
    id_schema: web_view_id_schema,
    page_ref_schema,
    expected_target_schema,
    error_prefix: PREFIX,
    wait_timeout: H5_WAIT_TIMEOUT,
    page: "WebView",
    through: "through the SDK's renderer with the native hit check",
    view_member: "webView",
    payload,
};

/// What a mutation sends: the view it names (None: the observed one), its aim and payload.
pub(super) type Request<'a> = (Option<&'a str>, Aim<'a>, Map<String, Value>);

impl Dialect {
    /// The aim and payload of `click` | `input` | `scroll` | `eval` from the
    /// arguments (their rules are the schema's; a missing one is never reached).
    pub fn request<'a>(&self, verb: &str, args: &'a H5Args) -> Result<Request<'a>, ProviderError> {
        let id = args.web_view_id.as_deref().or(args.adapter_id.as_deref());
        let element = |editable: bool| -> Result<Aim<'a>, ProviderError> {
            let selector = args.selector.as_ref().ok_or_else(|| missing("selector"))?;
            Ok(Aim::Element { selector, expected: args.expected_target.as_ref(), editable })
        };
        match verb {
            "click" => Ok((id, element(false)?, (self.payload)("click"))),
            "input" => {
                let mut p = (self.payload)("input");
                p.insert("text".into(), json!(args.text.as_ref().ok_or_else(|| missing("text"))?));
                Ok((id, element(true)?, p))
            }
            "scroll" => match (&args.selector, args.delta_x, args.delta_y) {
                (Some(_), _, _) => Ok((id, element(false)?, (self.payload)("scroll"))),
                (None, Some(x), Some(y)) => {
                    let mut p = (self.payload)("scrollBy");
                    p.insert("deltaX".into(), json!(x));
                    p.insert("deltaY".into(), json!(y));
                    Ok((id, Aim::Page { expected: args.expected_page.as_ref() }, p))
                }
                _ => Err(missing("selector")),
            },
            _ => {
                let mut p = (self.payload)("eval");
                p.insert("script".into(), json!(args.script.as_ref().ok_or_else(|| missing("script"))?));
                let expected = args.expected_page.as_ref().ok_or_else(|| missing("expectedPage"))?;
                Ok((None, Aim::Page { expected: Some(expected) }, p))
            }
        }
    }

    fn name(&self, verb: &str) -> String {
        format!("{}-{verb}", self.commands)
    }

    fn base(&self, extra: Value) -> Value {
        let mut p = json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket")});
        p[self.id_field] = (self.id_schema)();
        if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
            p.extend(extra);
        }
        props(p)
    }

    pub fn dom_spec(&self, summary: &str) -> CommandSpec {
        CommandSpec::query(self.name("dom"))
            .platform("android")
            .domain("webview")
            .target_kind("android-app")
            .summary(summary)
            .permission("app.read")
            .target_key("serial")
            .target_key("packageName")
            .lane("observation")
            .timeouts(10_000, 30_000)
            .input_schema(object(self.base(json!({})), &["packageName"]))
    }

    pub fn click_spec(&self) -> CommandSpec {
        let summary = format!("Click the one visible {} control a selector names in a fresh snapshot (and, with expectedTarget, the observed element of the observed page), {}; receipt and settlement proof, never retried.", self.page, self.through);
        device_mutation(&self.name("click"), "webview", "android-app", &summary)
            .permission("app.interact")
            .input_schema(object(self.base(json!({"selector": selector_schema(), "expectedTarget": (self.expected_target_schema)()})), &required(&["selector"])))
    }

    pub fn input_spec(&self) -> CommandSpec {
        let summary = format!("Replace the value of the one visible, editable {} control a selector names (input and change events; \"\" clears it), bound like {}; receipt and settlement proof, never retried.", self.page, self.name("click"));
        device_mutation(&self.name("input"), "webview", "android-app", &summary)
            .permission("app.interact")
            .input_schema(object(
                self.base(json!({"selector": selector_schema(), "expectedTarget": (self.expected_target_schema)(), "text": {"type": "string", "maxLength": 16384, "description": "The control's new whole value (\"\" clears it)"}})),
                &required(&["selector", "text"]),
            ))
    }

    pub fn scroll_spec(&self) -> CommandSpec {
        let mut schema = object(
            self.base(json!({"selector": selector_schema(), "expectedTarget": (self.expected_target_schema)(), "expectedPage": (self.page_ref_schema)(), "deltaX": delta("x"), "deltaY": delta("y")})),
            &required(&[]),
        );
        schema["dependentRequired"] = json!({"deltaX": ["deltaY"], "deltaY": ["deltaX"], "expectedTarget": ["selector"], "expectedPage": ["deltaX", "deltaY"]});
        schema["oneOf"] = json!([{"required": ["selector"]}, {"required": ["deltaX"]}]);
        schema["not"] = json!({"required": ["deltaX", "deltaY"], "properties": {"deltaX": {"const": 0}, "deltaY": {"const": 0}}});
        let summary = format!("Scroll a {} page: the one visible control a selector names into view (bound like {}), or the page by deltaX/deltaY CSS pixels (not both 0; expectedPage binds the observed page); receipt and settlement proof, never retried.", self.page, self.name("click"));
        device_mutation(&self.name("scroll"), "webview", "android-app", &summary).permission("app.interact").input_schema(schema)
    }

    pub fn eval_spec(&self) -> CommandSpec {
        let summary = format!("Expert: evaluate JavaScript in the observed {} page (expectedPage from {}; refused with reobserve_required once the page changed); returns the value. Never callable from a Script.", self.page, self.name("dom"));
        device_mutation(&self.name("eval"), "webview", "android-app", &summary)
            .role("expert")
            .input_schema(object(
                props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "expectedPage": (self.page_ref_schema)(),
                             "script": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript expression or statements; the completion value is returned"}})),
                &required(&["script", "expectedPage"]),
            ))
    }

    pub fn wait_spec(&self, summary: &str) -> CommandSpec {
        CommandSpec::query(self.name("wait"))
            .platform("android")
            .domain("webview")
            .target_kind("android-app")
            .summary(summary)
            .permission("app.interact")
            .target_key("serial")
            .target_key("packageName")
            .lane("wait")
            .timeouts(10_000, 60_000)
            .input_schema(object(
                self.base(json!({"selector": selector_schema(), "intervalMs": {"type": "integer", "minimum": 10, "maximum": 60000, "description": "Pause between snapshots (default 500)"}})),
                &["packageName", "selector"],
            ))
    }

    /// Poll snapshots (`read(id)`) until `selector` binds one visible control.
    /// The first snapshot fixes the view (`id_field` of its pageRef); with
    /// `same_document`, also its page: a later snapshot of another page is
    /// `reobserve_required`, never another match.
    pub async fn wait<F, Fut>(&self, ctx: &Context<'_>, args: &H5Args, same_document: bool, read: F) -> Result<Value, ProviderError>
    where
        F: Fn(Option<String>, Budget) -> Fut,
        Fut: std::future::Future<Output = Result<(String, Value), ProviderError>>,
    {
        let selector = args.selector.clone().ok_or_else(|| missing("selector"))?;
        let interval = Duration::from_millis(args.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS));
        let margin = super::wait_margin(ctx.remaining());
        let started = Instant::now();
        let end = Deadline::after(ctx.remaining().saturating_sub(margin));
        let step = Duration::from_millis(args.adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS));
        cancellable(ctx, async {
            let mut which = args.web_view_id.clone().or(args.adapter_id.clone());
            let mut first: Option<Value> = None;
            let mut polls = 0u64;
            let mut last = Value::Null;
            loop {
                let (serial, snap) = match read(which.clone(), Budget { deadline: end, adb_step: step }).await {
                    Ok(r) => r,
                    // The deadline passed during the read: that is the timeout.
                    Err(_) if end.remaining().is_zero() => break,
                    Err(e) => return Err(e),
                };
                polls += 1;
                let page = snap["pageRef"].clone();
                which = page.get(self.id_field).and_then(Value::as_str).map(str::to_string).or(which);
                match &first {
                    Some(f) if same_document && *f != page => crate::h5::check_page(f, &page, "selector")?,
                    None => first = Some(page.clone()),
                    _ => {}
                }
                match select(&snap["dom"], &selector, self.error_prefix) {
                    Ok(control) => {
                        let mut out = json!({"ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": page["runtimeEpoch"], "pageRef": page,
                                             "matched": control, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64});
                        out[self.view_member] = snap[self.view_member].clone();
                        return Ok(out);
                    }
                    Err(e) if e.error == format!("{}selector_not_found", self.error_prefix) => {
                        last = json!({"url": snap["dom"]["url"], "documentId": page["documentId"], "controlCount": snap["dom"]["controlCount"], "refusal": e.details});
                    }
                    Err(e) => return Err(e),
                }
                if end.remaining() <= interval {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
            let mut details = json!({"selector": selector, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64, "last": last});
            details[self.id_field] = json!(which);
            Err(ProviderError::new(self.wait_timeout, format!("no single visible control matched the selector before the deadline ({polls} snapshots)")).with_details(details).not_dispatched())
        })
        .await
    }
}

fn required(extra: &[&'static str]) -> Vec<&'static str> {
    let mut r = MUTATION_REQUIRED.to_vec();
    r.extend_from_slice(extra);
    r
}

fn delta(axis: &str) -> Value {
    json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": format!("CSS pixels to scroll the page along {axis} (with the other delta; not both 0)")})
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
    /// `flutter-h5-*` name the Flutter H5 adapter instead.
    pub adapter_id: Option<String>,
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
    pub(super) fn app(&self) -> App {
        App { package: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
    pub(super) fn app_args(&self) -> AppArgs {
        AppArgs { package_name: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
}

fn payload(action: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("action".into(), json!(action));
    m
}

/// A missing argument the schema requires (defence in depth: never reached).
pub(super) fn missing(field: &str) -> ProviderError {
    ProviderError::new("missing_argument", format!("`{field}` is required")).with_field(field).not_dispatched()
}

pub struct H5Dom;
impl Command for H5Dom {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        ANDROID.dom_spec("The SDK's snapshot of one WebView page (aab.android-h5-target/v1): pageRef (runtime, process, Activity, window, WebView, document generation, URL), and the shared renderer's dom (url, title, viewport, bodyText, up to 1000 controls with elementId, identity fields, visibility, interaction and bounds). Without webViewId the single visible WebView of the foreground window.")
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
        ANDROID.click_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = ANDROID.request("click", &args)?;
        cancellable(ctx, act(ctx, inv, "h5-click", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Input;
impl Command for H5Input {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        ANDROID.input_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = ANDROID.request("input", &args)?;
        cancellable(ctx, act(ctx, inv, "h5-input", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Scroll;
impl Command for H5Scroll {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        ANDROID.scroll_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = ANDROID.request("scroll", &args)?;
        cancellable(ctx, act(ctx, inv, "h5-scroll", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Eval;
impl Command for H5Eval {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        ANDROID.eval_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = ANDROID.request("eval", &args)?;
        cancellable(ctx, act(ctx, inv, "h5-eval", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct H5Wait;
impl Command for H5Wait {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        ANDROID.wait_spec("Wait until a selector binds exactly one visible control of the WebView page (the first snapshot's WebView is kept), polling h5 snapshots every intervalMs until timeoutMs (h5_wait_timeout); a missing or ambiguous WebView, an ambiguous selector or a truncated snapshot without elementId fail at once.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let app = args.app_args();
        let read = |which: Option<String>, budget: Budget| {
            let app = &app;
            async move {
                let (serial, route) = sdk_route(app, &budget).await?;
                Ok((serial, snapshot(route.forward.port, which.as_deref(), budget.deadline).await?))
            }
        };
        ANDROID.wait(ctx, &args, false, read).await.map(Reply::Json)
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
        let click = validator(ANDROID.click_spec());
        assert!(click(json!({"selector": {"text": "Buy"}})).is_ok());
        assert!(click(json!({"selector": {"ariaLabel": "Buy", "tag": "button"}})).is_ok());
        assert!(click(json!({"selector": {"elementId": "e12"}, "webViewId": "wv-1"})).is_ok());
        for bad in [json!({}), json!({"text": "a", "elementId": "e1"}), json!({"tag": "a"}), json!({"css": "#x"}), json!({"elementId": "12"}), json!({"text": ""})] {
            let e = click(json!({"selector": bad})).unwrap_err();
            assert_eq!((e.dispatched, e.field.as_deref().map(|f| f.starts_with("selector"))), (Some(false), Some(true)), "{bad} → {e:?}");
        }
        assert_eq!(click(json!({})).unwrap_err().field.as_deref(), Some("selector"));
        let e = validator(ANDROID.click_spec())(json!({"selector": {"text": "a"}, "serial": null})).unwrap_err();
        assert_eq!(e.dispatched, Some(false));
        // expectedTarget carries the whole observed binding.
        let element = json!({"elementId": "e1", "tag": "a", "id": null, "name": null, "type": null, "text": "x", "ariaLabel": null, "href": "/x"});
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": page(), "element": element}})).is_ok());
        let mut partial = page();
        partial.as_object_mut().unwrap().remove("documentId");
        assert!(click(json!({"selector": {"text": "x"}, "expectedTarget": {"pageRef": partial, "element": element}})).is_err());
        let input = validator(ANDROID.input_spec());
        assert!(input(json!({"selector": {"text": "Name"}, "text": ""})).is_ok(), "\"\" clears");
        assert_eq!(input(json!({"selector": {"text": "Name"}})).unwrap_err().field.as_deref(), Some("text"));
    }

    #[test]
    fn scroll_takes_a_selector_or_two_deltas() {
        let scroll = validator(ANDROID.scroll_spec());
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
        let spec = ANDROID.eval_spec();
        assert_eq!((spec.role.as_str(), spec.script_permission.as_deref()), ("expert", None), "expert, no Script permission: permanently denied to Scripts");
        let eval = validator(spec);
        assert_eq!(eval(json!({"script": "1+1"})).unwrap_err().field.as_deref(), Some("expectedPage"));
        assert!(eval(json!({"script": "1+1", "expectedPage": page()})).is_ok());
        assert!(eval(json!({"script": "1+1", "expectedPage": page(), "webViewId": "v"})).is_err(), "the page names its WebView");
        let wait = ANDROID.wait_spec("");
        assert!(wait.device_key.is_empty() && wait.script_permission.as_deref() == Some("app.interact"));
        let wait = validator(wait);
        assert!(wait(json!({"selector": {"text": "Done"}, "intervalMs": 50})).is_ok());
        assert!(wait(json!({"selector": {"text": "Done"}, "text": "x"})).is_err());
        for s in [ANDROID.click_spec(), ANDROID.input_spec(), ANDROID.scroll_spec()] {
            assert_eq!((s.script_permission.as_deref(), s.device_key.as_slice()), (Some("app.interact"), &["serial".to_string()][..]), "{}", s.command);
        }
        assert_eq!(ANDROID.dom_spec("").script_permission.as_deref(), Some("app.read"));
    }
}
