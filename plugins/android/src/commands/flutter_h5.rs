//! The Flutter H5 commands (aab-host §1.4 `flutter-h5-*` rows): WebViews that a
//! Flutter app hosts through registered adapters, reached through the Flutter
//! action route ([`crate::flutter_h5`]). `flutter-h5-dom` (one adapter's page),
//! `flutter-h5-wait` (poll the same adapter and document until a selector
//! binds), and the managed mutations `flutter-h5-click`, `flutter-h5-input`,
//! `flutter-h5-scroll` and the expert `flutter-h5-eval` (never callable from a
//! Script). Arguments are those of `h5-*` with `adapterId` for `webViewId`; the
//! argument rules live in the schemas.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Map, Value, json};

use super::h5::{Dialect, H5Args};
use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::flutter_h5::{PREFIX, act, adapter_id_schema, dart_epoch, expected_target_schema, page_ref_schema, snapshot};

pub const WAIT_TIMEOUT: &str = "flutter_h5_wait_timeout";

const FLUTTER: Dialect = Dialect {
    commands: "flutter-h5",
    id_field: "adapterId",
    id_schema: adapter_id_schema,
    page_ref_schema,
    expected_target_schema,
    error_prefix: PREFIX,
    wait_timeout: WAIT_TIMEOUT,
    page: "Flutter-hosted WebView",
    through: "as a managed Flutter action (h5Control)",
    view_member: "adapter",
    payload,
};

/// `h5Eval`, or `h5Control` with the verb as its operation.
fn payload(verb: &str) -> Map<String, Value> {
    let mut m = Map::new();
    if verb == "eval" {
        m.insert("action".into(), json!("h5Eval"));
    } else {
        m.insert("action".into(), json!("h5Control"));
        m.insert("operation".into(), json!(verb));
    }
    m
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
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.dom_spec("The snapshot of one Flutter-hosted WebView page through the Flutter runtime's registered adapter (aab.flutter-h5-target/v1): pageRef (Dart runtime, adapter and its registration, document generation, URL) and the shared renderer's dom (url, title, viewport, bodyText, up to 1000 controls with elementId, identity fields, visibility, interaction and bounds). Without adapterId the single visible adapter.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
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
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.click_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = FLUTTER.request("click", &args)?;
        cancellable(ctx, act(ctx, inv, "flutter-h5-click", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Input;
impl Command for FlutterH5Input {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.input_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = FLUTTER.request("input", &args)?;
        cancellable(ctx, act(ctx, inv, "flutter-h5-input", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Scroll;
impl Command for FlutterH5Scroll {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.scroll_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = FLUTTER.request("scroll", &args)?;
        cancellable(ctx, act(ctx, inv, "flutter-h5-scroll", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Eval;
impl Command for FlutterH5Eval {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.eval_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let (id, aim, p) = FLUTTER.request("eval", &args)?;
        cancellable(ctx, act(ctx, inv, "flutter-h5-eval", &args.app(), id, aim, p)).await.map(Reply::Json)
    }
}

pub struct FlutterH5Wait;
impl Command for FlutterH5Wait {
    type Provider = AndroidProvider;
    type Args = H5Args;
    fn spec() -> CommandSpec {
        FLUTTER.wait_spec("Wait until a selector binds exactly one visible control of a Flutter-hosted WebView page, polling snapshots of the SAME adapter and document every intervalMs until timeoutMs (flutter_h5_wait_timeout); a navigation or re-registration fails with reobserve_required instead of selecting another document; a missing or ambiguous adapter, an ambiguous selector or a truncated snapshot without elementId fail at once.")
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: H5Args) -> Result<Reply, ProviderError> {
        let app = args.app_args();
        let read = |which: Option<String>, budget: Budget| {
            let app = &app;
            async move { read(app, which.as_deref(), &budget).await }
        };
        FLUTTER.wait(ctx, &args, true, read).await.map(Reply::Json)
    }
}
