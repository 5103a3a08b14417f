//! The Web provider's command list: each command's spec (from [`crate::manifest`])
//! paired with its handler (in [`crate::commands`]) and its typed arguments. The SDK
//! derives both the manifest's commands and the dispatch from [`list`].
//!
//! Argument types mirror the schemas; those without a flattened [`Target`] refuse
//! unknown fields (serde cannot combine the two; the host's schema validation
//! already refused them). Host execution options (`requestId`, `feedback`,
//! `timeoutMs`) are invocation fields, never arguments.

use std::marker::PhantomData;

use aab_plugin_api::{Command, CommandSpec, Commands, Context, Invocation, ProviderError, Reply};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::WebProvider;
use crate::commands::{self as run, prologue};
use crate::manifest;

pub fn list() -> Commands<WebProvider> {
    Commands::new()
        .add::<SessionStart>()
        .add::<SessionStop>()
        .add::<ConnectInfo>()
        .add::<ProviderStatus>()
        .add::<Sessions>()
        .add::<Status>()
        .add::<Dom>()
        .add::<PageAction<Click>>()
        .add::<PageAction<Input>>()
        .add::<PageAction<Key>>()
        .add::<PageAction<Scroll>>()
        .add::<PageAction<Wait>>()
        .add::<CaptureRead<Logs>>()
        .add::<CaptureRead<Network>>()
        .add::<CaptureRead<State>>()
        .add::<CaptureRead<Events>>()
        .add::<Execution>()
        .add::<UiObservation>()
        .add::<RawCommand>()
        .add::<WebExecutor>()
}

/// The page a command addresses (`sessionId` is the admission key).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub session_id: String,
    pub runtime_epoch: Option<String>,
    /// Only `main` exists; accepted for forward compatibility.
    #[allow(dead_code)]
    pub target_id: Option<String>,
}

impl Target {
    /// `(sessionId, runtimeEpoch)`; the schema of every page command requires both.
    pub fn page(&self) -> Result<(&str, &str), ProviderError> {
        let epoch = self.runtime_epoch.as_deref().ok_or_else(|| {
            ProviderError::new(aab_plugin_api::codes::PLUGIN_PROTOCOL_ERROR, "the host delivered no `runtimeEpoch`").with_field("runtimeEpoch").not_dispatched()
        })?;
        Ok((&self.session_id, epoch))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionStartArgs {
    pub host: Option<String>,
    pub web_port: Option<u16>,
    pub path: Option<String>,
    pub token: Option<String>,
    pub sample_app: Option<bool>,
    pub allowed_origins: Option<Vec<String>>,
    pub ping_interval_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub handshake_timeout_ms: Option<u64>,
    pub header_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusArgs {
    #[serde(flatten)]
    pub target: Target,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomArgs {
    #[serde(flatten)]
    pub target: Target,
    pub selector: Option<String>,
    pub max_controls: Option<u64>,
    pub history: Option<bool>,
    pub cursor: Option<String>,
    pub through_cursor: Option<String>,
    pub since_ms: Option<u64>,
    pub limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureArgs {
    #[serde(flatten)]
    pub target: Target,
    pub view: Option<String>,
    pub fact_cursor: Option<String>,
    pub after_action_id: Option<String>,
    pub history: Option<bool>,
    pub cursor: Option<String>,
    pub through_cursor: Option<String>,
    pub since_ms: Option<u64>,
    pub limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UiObservationArgs {
    #[serde(flatten)]
    pub target: Target,
    pub operation: String,
    pub duration_ms: Option<u64>,
    pub lease_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionArgs {
    #[serde(flatten)]
    pub target: Target,
    pub operation: String,
    pub action_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawCommandArgs {
    #[serde(flatten)]
    pub target: Target,
    pub name: String,
    pub arguments: Option<Map<String, Value>>,
}

/// The page-side arguments of the managed actions, forwarded to the page as they
/// came (the schemas say which of them each action takes).
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_target: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_x: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_y: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionArgs {
    #[serde(flatten)]
    pub target: Target,
    #[serde(flatten)]
    pub page: PageArgs,
}

fn json(v: Value) -> Result<Reply, ProviderError> {
    Ok(Reply::Json(v))
}

/// A command without arguments of its own.
macro_rules! simple {
    ($name:ident, $spec:path, |$p:ident, $ctx:ident| $body:expr) => {
        pub struct $name;
        impl Command for $name {
            type Provider = WebProvider;
            type Args = NoArgs;
            fn spec() -> CommandSpec {
                $spec()
            }
            async fn run($p: &WebProvider, $ctx: &Context<'_>, _: &Invocation, _: NoArgs) -> Result<Reply, ProviderError> {
                prologue(&$p.shared, $ctx).await;
                $body
            }
        }
    };
}

simple!(SessionStop, manifest::session_stop, |p, ctx| json(run::session_stop(&p.shared, ctx)));
simple!(ConnectInfo, manifest::connect_info, |p, _ctx| json(run::connect_info(&p.shared)?));
simple!(ProviderStatus, manifest::provider_status, |p, _ctx| json(run::provider_status(&p.shared)));
simple!(Sessions, manifest::sessions, |p, _ctx| json(run::sessions(&p.shared)));

pub struct SessionStart;
impl Command for SessionStart {
    type Provider = WebProvider;
    type Args = SessionStartArgs;
    fn spec() -> CommandSpec {
        manifest::session_start()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: SessionStartArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::session_start(&p.shared, ctx, args).await?)
    }
}

pub struct Status;
impl Command for Status {
    type Provider = WebProvider;
    type Args = StatusArgs;
    fn spec() -> CommandSpec {
        manifest::status()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: StatusArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::status(&p.shared, &args)?)
    }
}

pub struct Dom;
impl Command for Dom {
    type Provider = WebProvider;
    type Args = DomArgs;
    fn spec() -> CommandSpec {
        manifest::dom()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: DomArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::dom(&p.shared, ctx, &args).await?)
    }
}

/// One managed page action (`web-click`, …): its spec and the page command it sends.
pub trait ActionKind: Send + Sync + 'static {
    const PAGE_COMMAND: &'static str;
    /// The page's wait lasts the command's budget.
    const WAIT_BUDGET: bool = false;
    fn spec() -> CommandSpec;
}

pub struct Click;
impl ActionKind for Click {
    const PAGE_COMMAND: &'static str = "click";
    fn spec() -> CommandSpec {
        manifest::click()
    }
}
pub struct Input;
impl ActionKind for Input {
    const PAGE_COMMAND: &'static str = "input";
    fn spec() -> CommandSpec {
        manifest::input()
    }
}
pub struct Key;
impl ActionKind for Key {
    const PAGE_COMMAND: &'static str = "key";
    fn spec() -> CommandSpec {
        manifest::key()
    }
}
pub struct Scroll;
impl ActionKind for Scroll {
    const PAGE_COMMAND: &'static str = "scroll";
    fn spec() -> CommandSpec {
        manifest::scroll()
    }
}
pub struct Wait;
impl ActionKind for Wait {
    const PAGE_COMMAND: &'static str = "waitFor";
    const WAIT_BUDGET: bool = true;
    fn spec() -> CommandSpec {
        manifest::wait()
    }
}

pub struct PageAction<K>(PhantomData<K>);
impl<K: ActionKind> Command for PageAction<K> {
    type Provider = WebProvider;
    type Args = ActionArgs;
    fn spec() -> CommandSpec {
        K::spec()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, inv: &Invocation, args: ActionArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        let page = serde_json::to_value(&args.page).unwrap_or_else(|_| Value::Object(Map::new()));
        json(run::action(&p.shared, ctx, inv, &args.target, K::PAGE_COMMAND, page, K::WAIT_BUDGET).await?)
    }
}

/// One capture stream read by `web-<stream>`.
pub trait StreamKind: Send + Sync + 'static {
    const STREAM: &'static str;
}
pub struct Logs;
impl StreamKind for Logs {
    const STREAM: &'static str = "logs";
}
pub struct Network;
impl StreamKind for Network {
    const STREAM: &'static str = "network";
}
pub struct State;
impl StreamKind for State {
    const STREAM: &'static str = "state";
}
pub struct Events;
impl StreamKind for Events {
    const STREAM: &'static str = "events";
}

pub struct CaptureRead<S>(PhantomData<S>);
impl<S: StreamKind> Command for CaptureRead<S> {
    type Provider = WebProvider;
    type Args = CaptureArgs;
    fn spec() -> CommandSpec {
        manifest::capture(S::STREAM)
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: CaptureArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::capture_read(&p.shared, ctx, &args, S::STREAM).await?)
    }
}

pub struct Execution;
impl Command for Execution {
    type Provider = WebProvider;
    type Args = ExecutionArgs;
    fn spec() -> CommandSpec {
        manifest::execution()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: ExecutionArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::execution(&p.shared, ctx, &args).await?)
    }
}

pub struct UiObservation;
impl Command for UiObservation {
    type Provider = WebProvider;
    type Args = UiObservationArgs;
    fn spec() -> CommandSpec {
        manifest::ui_observation()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, _: &Invocation, args: UiObservationArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::ui_observation(&p.shared, ctx, &args).await?)
    }
}

pub struct RawCommand;
impl Command for RawCommand {
    type Provider = WebProvider;
    type Args = RawCommandArgs;
    fn spec() -> CommandSpec {
        manifest::raw_command()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, inv: &Invocation, args: RawCommandArgs) -> Result<Reply, ProviderError> {
        prologue(&p.shared, ctx).await;
        json(run::raw_command(&p.shared, ctx, inv, args).await?)
    }
}

/// `web-executor`: pages without an SDK, over CDP or WebDriver ([`crate::executor`]).
pub struct WebExecutor;
impl Command for WebExecutor {
    type Provider = WebProvider;
    type Args = crate::executor::args::ExecutorArgs;
    fn spec() -> CommandSpec {
        manifest::web_executor()
    }
    async fn run(p: &WebProvider, ctx: &Context<'_>, inv: &Invocation, args: crate::executor::args::ExecutorArgs) -> Result<Reply, ProviderError> {
        json(p.executor.run(ctx, inv, args).await?)
    }
}
