//! The Flutter H5 commands (aab-host §1.4 `flutter-h5-*` rows): WebViews that a
//! Flutter app hosts through registered adapters, reached through the Flutter
//! action route ([`crate::flutter_h5`]). `flutter-h5-dom` (one adapter's page),
//! `flutter-h5-wait` (poll the same adapter and document until a selector
//! binds), and the managed mutations `flutter-h5-click`, `flutter-h5-input`,
//! `flutter-h5-scroll` and the expert `flutter-h5-eval` (never callable from a
//! Script). Arguments are those of `h5-*` with `adapterId` for `webViewId`; the
//! argument rules live in the schemas.

use std::time::{Duration, Instant};

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::flutter_h5::{PREFIX, act, adapter_id_schema, dart_epoch, expected_target_schema, page_ref_schema, snapshot};
use crate::h5::{Aim, select, selector_schema};
use crate::manifest::{DEFAULT_ADB_TIMEOUT_MS, MUTATION_REQUIRED, device_mutation, object, package_name, port, props};
use crate::native_exec::App;

pub const WAIT_TIMEOUT: &str = "flutter_h5_wait_timeout";
const DEFAULT_INTERVAL_MS: u64 = 500;

fn base(extra: Value) -> Value {
    let mut p = json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "adapterId": adapter_id_schema()});
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

fn read_spec(command: &str, summary: &str, lane: &str, permission: &str) -> CommandSpec {
    CommandSpec::query(command)
        .platform("android")
        .domain("webview")
        .target_kind("android-app")
        .summary(summary)
        .permission(permission)
        .target_key("serial")
        .target_key("packageName")
        .lane(lane)
}

fn dom_spec() -> CommandSpec {
    read_spec(
        "flutter-h5-dom",
        "The snapshot of one Flutter-hosted WebView page through the Flutter runtime's registered adapter (aab.flutter-h5-target/v1): pageRef (Dart runtime, adapter and its registration, document generation, URL) and the shared renderer's dom (url, title, viewport, bodyText, up to 1000 controls with elementId, identity fields, visibility, interaction and bounds). Without adapterId the single visible adapter.",
        "observation",
        "app.read",
    )
    .timeouts(10_000, 30_000)
    .input_schema(object(base(json!({})), &["packageName"]))
}

fn click_spec() -> CommandSpec {
    device_mutation("flutter-h5-click", "webview", "android-app", "Click the one visible control a selector names in a fresh snapshot of a Flutter-hosted WebView (and, with expectedTarget, the observed element of the observed page) as a managed Flutter action (h5Control); receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(object(base(json!({"selector": selector_schema(), "expectedTarget": expected_target_schema()})), &required(&["selector"])))
}

fn input_spec() -> CommandSpec {
    device_mutation("flutter-h5-input", "webview", "android-app", "Replace the value of the one visible, editable control a selector names in a Flutter-hosted WebView (input and change events; \"\" clears it), bound like flutter-h5-click; receipt and settlement proof, never retried.")
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
    device_mutation("flutter-h5-scroll", "webview", "android-app", "Scroll a Flutter-hosted WebView page: the one visible control a selector names into view (bound like flutter-h5-click), or the page by deltaX/deltaY CSS pixels (not both 0; expectedPage binds the observed page); receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(schema)
}

fn eval_spec() -> CommandSpec {
    device_mutation("flutter-h5-eval", "webview", "android-app", "Expert: evaluate JavaScript in the observed Flutter-hosted WebView page (expectedPage from flutter-h5-dom; refused with reobserve_required once the page, adapter or Dart runtime changed) as a managed Flutter action (h5Eval); returns the value. Never callable from a Script.")
        .role("expert")
        .input_schema(object(
            props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "expectedPage": page_ref_schema(),
                         "script": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript expression or statements; the completion value is returned"}})),
            &required(&["script", "expectedPage"]),
        ))
}

fn wait_spec() -> CommandSpec {
    read_spec(
        "flutter-h5-wait",
        "Wait until a selector binds exactly one visible control of a Flutter-hosted WebView page, polling snapshots of the SAME adapter and document every intervalMs until timeoutMs (flutter_h5_wait_timeout); a navigation or re-registration fails with reobserve_required instead of selecting another document; a missing or ambiguous adapter, an ambiguous selector or a truncated snapshot without elementId fail at once.",
        "wait",
        "app.interact",
    )
    .timeouts(10_000, 60_000)
    .input_schema(object(
        base(json!({"selector": selector_schema(), "intervalMs": {"type": "integer", "minimum": 10, "maximum": 60000, "description": "Pause between snapshots (default 500)"}})),
        &["packageName", "selector"],
    ))
}

/// The arguments of every Flutter H5 command (each command's schema admits its own subset).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FlutterH5Args {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
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

impl FlutterH5Args {
    fn app(&self) -> App {
        App { package: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
    fn app_args(&self) -> AppArgs {
        AppArgs { package_name: self.package_name.clone(), serial: self.serial.clone(), port: self.port, adb: self.adb.clone(), adb_timeout_ms: self.adb_timeout_ms }
    }
}

fn control(operation: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("action".into(), json!("h5Control"));
    m.insert("operation".into(), json!(operation));
    m
}

/// A missing argument the schema requires (defence in depth: never reached).
fn missing(field: &str) -> ProviderError {
    ProviderError::new("missing_argument", format!("`{field}` is required")).with_field(field).not_dispatched()
}

/// One snapshot read: SDK route, the Dart runtime epoch, `h5Dom`.
async fn read(app: &AppArgs, adapter_id: Option<&str>, budget: &Budget) -> Result<(String, Value), ProviderError> {
    let (serial, route) = sdk_route(app, budget).await?;
    let epoch = dart_epoch(route.forward.port, &app.package_name, budget.adb()).await?;
    let snap = snapshot(route.forward.port, &epoch, adapter_id, budget.adb()).await?;
    Ok((serial, snap))
}

pub struct FlutterH5Dom;
impl Command for FlutterH5Dom {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        dom_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let (serial, snap) = read(&args.app_args(), args.adapter_id.as_deref(), &budget).await?;
            Ok(Reply::Json(json!({
                "ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": snap["pageRef"]["runtimeEpoch"],
                "h5TargetSchema": snap["h5TargetSchema"], "pageRef": snap["pageRef"], "dom": snap["dom"], "adapter": snap["adapter"], "updatedAtMs": snap["updatedAtMs"],
            })))
        })
        .await
    }
}

pub struct FlutterH5Click;
impl Command for FlutterH5Click {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        click_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.as_ref().ok_or_else(|| missing("selector"))?;
        let aim = Aim::Element { selector, expected: args.expected_target.as_ref(), editable: false };
        cancellable(ctx, act(ctx, inv, "flutter-h5-click", &args.app(), args.adapter_id.as_deref(), aim, control("click"))).await.map(Reply::Json)
    }
}

pub struct FlutterH5Input;
impl Command for FlutterH5Input {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        input_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.as_ref().ok_or_else(|| missing("selector"))?;
        let text = args.text.as_ref().ok_or_else(|| missing("text"))?;
        let mut p = control("input");
        p.insert("text".into(), json!(text));
        let aim = Aim::Element { selector, expected: args.expected_target.as_ref(), editable: true };
        cancellable(ctx, act(ctx, inv, "flutter-h5-input", &args.app(), args.adapter_id.as_deref(), aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Scroll;
impl Command for FlutterH5Scroll {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        scroll_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let (aim, p) = match (&args.selector, args.delta_x, args.delta_y) {
            (Some(selector), _, _) => (Aim::Element { selector, expected: args.expected_target.as_ref(), editable: false }, control("scroll")),
            (None, Some(x), Some(y)) => {
                let mut p = control("scrollBy");
                p.insert("deltaX".into(), json!(x));
                p.insert("deltaY".into(), json!(y));
                (Aim::Page { expected: args.expected_page.as_ref() }, p)
            }
            _ => return Err(missing("selector")),
        };
        cancellable(ctx, act(ctx, inv, "flutter-h5-scroll", &args.app(), args.adapter_id.as_deref(), aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Eval;
impl Command for FlutterH5Eval {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        eval_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let script = args.script.as_ref().ok_or_else(|| missing("script"))?;
        let expected = args.expected_page.as_ref().ok_or_else(|| missing("expectedPage"))?;
        let mut p = Map::new();
        p.insert("action".into(), json!("h5Eval"));
        p.insert("script".into(), json!(script));
        cancellable(ctx, act(ctx, inv, "flutter-h5-eval", &args.app(), None, Aim::Page { expected: Some(expected) }, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Wait;
impl Command for FlutterH5Wait {
    type Provider = AndroidProvider;
    type Args = FlutterH5Args;
    fn spec() -> CommandSpec {
        wait_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: FlutterH5Args) -> Result<Reply, ProviderError> {
        let selector = args.selector.clone().ok_or_else(|| missing("selector"))?;
        let interval = Duration::from_millis(args.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS));
        // Give up a little before the host's deadline so the reply carries the last look.
        let margin = (ctx.remaining() / 10).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let started = Instant::now();
        let end = Deadline::after(ctx.remaining().saturating_sub(margin));
        let budget = Budget { deadline: end, adb_step: Duration::from_millis(args.adb_timeout_ms.unwrap_or(DEFAULT_ADB_TIMEOUT_MS)) };
        let app = args.app_args();
        cancellable(ctx, async {
            // The first snapshot fixes the adapter, its registration and the document.
            let mut which = args.adapter_id.clone();
            let mut first: Option<Value> = None;
            let mut polls = 0u64;
            let mut last = Value::Null;
            loop {
                let (serial, snap) = match read(&app, which.as_deref(), &budget).await {
                    Ok(r) => r,
                    Err(_) if end.remaining().is_zero() => break,
                    Err(e) => return Err(e),
                };
                polls += 1;
                let page = snap["pageRef"].clone();
                match &first {
                    None => {
                        which = page["adapterId"].as_str().map(str::to_string);
                        first = Some(page.clone());
                    }
                    Some(f) if *f != page => {
                        crate::h5::check_page(f, &page, "selector")?;
                    }
                    Some(_) => {}
                }
                match select(&snap["dom"], &selector, PREFIX) {
                    Ok(control) => {
                        return Ok(json!({
                            "ok": true, "serial": serial, "packageName": args.package_name, "runtimeEpoch": page["runtimeEpoch"],
                            "pageRef": page, "adapter": snap["adapter"], "matched": control, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64,
                        }));
                    }
                    Err(e) if e.error == format!("{PREFIX}selector_not_found") => {
                        last = json!({"url": snap["dom"]["url"], "documentId": page["documentId"], "controlCount": snap["dom"]["controlCount"], "refusal": e.details});
                    }
                    Err(e) => return Err(e),
                }
                if end.remaining() <= interval {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
            Err(ProviderError::new(WAIT_TIMEOUT, format!("no single visible control matched the selector before the deadline ({polls} snapshots)"))
                .with_details(json!({"selector": selector, "adapterId": which, "polls": polls, "elapsedMs": started.elapsed().as_millis() as u64, "last": last}))
                .not_dispatched())
        })
        .await
        .map(Reply::Json)
    }
}
