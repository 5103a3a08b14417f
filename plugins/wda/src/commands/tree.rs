//! `ios-uia-tree`: the App's accessibility tree through the prepared Runner
//! (`GET /session/<id>/source?format=json` with the target headers, so the Runner
//! serves it only for that session's App in the foreground). Nodes are flattened
//! in pre-order; each carries its `expectedTarget` (`aab.ios-native-target/v1`) and
//! the reply carries the read's session ref (`aab.ios-native-session/v1`) for the
//! actions that follow. A read never creates a session.

use aab_ios_transport::wda::Target;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, reach};
use crate::WdaProvider;
use crate::manifest::{APP_REQUIRED, app_props, object, wda_query};
use crate::native_target::{flatten, session_ref};
use crate::runner::Wda;

const DEFAULT_MAX_NODES: usize = 1000;

fn spec() -> CommandSpec {
    wda_query("ios-uia-tree", "The App's native accessibility tree through the prepared WDA Runner (the session's App must be in the foreground): pre-order nodes with elementId, type, rawIdentifier, label, value, visible, enabled, rect and each node's expectedTarget, plus the session ref; maxNodes bounds the list.")
        .input_schema(object(
            app_props(json!({"maxNodes": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Return at most this many nodes in pre-order (default 1000); nodeCount counts them all"}})),
            &APP_REQUIRED,
        ))
}

super::app_args!(TreeArgs {
    max_nodes: Option<usize>,
});

/// The source path of a session (the id is a path segment of safe characters).
pub fn source_path(session_id: &str) -> String {
    format!("/session/{session_id}/source?format=json")
}

/// A fresh tree of the bound session: `(session ref, every node)`.
pub async fn read_tree(wda: &Wda, target: &Target) -> Result<(Value, Vec<Value>), ProviderError> {
    let session = target.session_id.as_deref().unwrap_or_default();
    let root = wda.conn.get(&source_path(session), Some(target), wda.deadline).await?;
    let sref = session_ref(wda.runner_epoch(), target);
    if !root.is_object() {
        return Err(ProviderError::new(aab_ios_transport::wda::codes::IOS_WDA_PROTOCOL_ERROR, "the Runner's JSON source is not an element object").not_dispatched());
    }
    let nodes = flatten(&root, &sref);
    Ok((sref, nodes))
}

pub struct UiaTree;
impl Command for UiaTree {
    type Provider = WdaProvider;
    type Args = TreeArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &WdaProvider, ctx: &Context<'_>, _: &Invocation, args: TreeArgs) -> Result<Reply, ProviderError> {
        cancellable(ctx, async {
            let (wda, target) = crate::runner::open_session(ctx, &reach!(args), &args.bundle_id, &args.wda_session_id).await?;
            let (sref, mut nodes) = read_tree(&wda, &target).await?;
            let count = nodes.len();
            let max = args.max_nodes.unwrap_or(DEFAULT_MAX_NODES);
            nodes.truncate(max);
            let mut out = wda.facts(Some(&target));
            out["ok"] = json!(true);
            out["session"] = sref;
            out["orientation"] = wda.status.get("orientation").cloned().unwrap_or(Value::Null);
            out["nodeCount"] = json!(count);
            out["returned"] = json!(nodes.len());
            out["truncated"] = json!(count > nodes.len());
            out["nodes"] = Value::Array(nodes);
            Ok(Reply::Json(out))
        })
        .await
    }
}
