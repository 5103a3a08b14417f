//! `ios-status` (`GET /v1/status`: SDK, app, device, root view controller,
//! capture counters, the Flutter snapshot) and `ios-tree` (`GET /v1/view/tree`:
//! the UIKit view hierarchy of every window), both read through a verified
//! connection; the replies carry the connection's identity facts.

use aab_ios_transport::sdk;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::json;

use super::{AppArgs, read_with};
use crate::IosProvider;
use crate::manifest::{APP_REQUIRED, app_query, object, props};
use crate::runtime::with_facts;

pub struct Status;
impl Command for Status {
    type Provider = IosProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        app_query("ios-status", "The app SDK's status (debugBridge with its execution and H5 target schemas, app, iOS device, root view controller, capture counters, the Flutter snapshot), read from the listener the container descriptor names and verified by its runtimeBinding.", Some("app.read"))
            .input_schema(object(props(json!({})), &APP_REQUIRED))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: AppArgs) -> Result<Reply, ProviderError> {
        read_with(ctx, args.target(), |conn, deadline| async move {
            let status = sdk::read(&conn.endpoint, "/v1/status", deadline).await?;
            sdk::check_status(&status, &conn.endpoint.identity, None)?;
            Ok(with_facts(status, &conn))
        })
        .await
        .map(Reply::Json)
    }
}

pub struct Tree;
impl Command for Tree {
    type Provider = IosProvider;
    type Args = AppArgs;
    fn spec() -> CommandSpec {
        app_query("ios-tree", "The app's UIKit view tree from the SDK (windows, root view controller, nodes with class, accessibility identifier and label, text, bounds, visibility; secure inputs report only their length).", Some("app.read"))
            .input_schema(object(props(json!({})), &APP_REQUIRED))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: AppArgs) -> Result<Reply, ProviderError> {
        read_with(ctx, args.target(), |conn, deadline| async move { Ok(with_facts(sdk::read(&conn.endpoint, "/v1/view/tree", deadline).await?, &conn)) }).await.map(Reply::Json)
    }
}
