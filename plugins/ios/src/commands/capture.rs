//! `ios-logs`, `ios-network`, `ios-state`, `ios-events`: one page of the SDK's
//! capture store (aab-protocols §4.6, `GET /v1/<stream>?…`). The query carries
//! only the names the SDK allows (`view, sinceId, sinceMs, limit, runtimeEpoch,
//! afterActionId, factCursor, mobileFactId, targetKey`, numbers as plain digits);
//! the history options map onto them (`history:true` = the `connected-history`
//! view, `cursor` = an earlier page's `nextCursor`, sent as `factCursor`). The
//! SDK's envelope (coverage, refs, cursors, watermark) is returned as is;
//! `ios-events` hides the SDK's own managed-action settlement records unless
//! `includeActions`.

use aab_ios_transport::sdk::{self, query_value};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{app_args, read_with};
use crate::IosProvider;
use crate::manifest::{APP_REQUIRED, app_query, object, props};
use crate::runtime::with_facts;

const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Logs,
    Network,
    State,
    Events,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Logs => "logs",
            Stream::Network => "network",
            Stream::State => "state",
            Stream::Events => "events",
        }
    }
}

pub fn capture_props(events: bool) -> Value {
    let text = |what: &str| json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": what});
    let mut p = props(json!({
        "sinceId": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Only records with a larger capture id (ids are per app process; in connected-history needs runtimeEpoch)"},
        "sinceMs": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Only records captured at or after this epoch millisecond"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Most records of this page (default 200)"},
        "view": {"type": "string", "enum": ["legacy-live", "decision-window", "connected-history"], "description": "legacy-live (default: the current runtime), decision-window (current runtime, bounded for one decision), connected-history (retained records across runtimes)"},
        "runtimeEpoch": text("Only records of this SDK runtime"),
        "afterActionId": text("Only records from this action on (decision-window needs a bound: sinceId, sinceMs or factCursor)"),
        "mobileFactId": text("Exactly this record (connected-history needs runtimeEpoch)"),
        "targetKey": text("The store's target key (the bundle id)"),
        "factCursor": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "A cursor of an earlier page (nextCursor or watermarkCursor): continue after it"},
        "history": {"type": "boolean", "description": "Read retained records across runtimes (the connected-history view)"},
        "cursor": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "An earlier page's nextCursor (the same as factCursor)"}
    }));
    if events {
        p["includeActions"] = json!({"type": "boolean", "description": "Keep the SDK's managed-action settlement events (hidden by default)"});
    }
    p
}

fn spec(stream: Stream, summary: &str) -> CommandSpec {
    let mut schema = object(capture_props(stream == Stream::Events), &APP_REQUIRED);
    // `cursor` is factCursor under its history name: one of them; history is one view.
    schema["not"] = json!({"required": ["cursor", "factCursor"]});
    schema["dependentSchemas"] = json!({"history": {"properties": {"view": {"const": "connected-history"}}}});
    app_query(&format!("ios-{}", stream.name()), summary, Some("capture.read")).input_schema(schema)
}

app_args!(
    CaptureArgs {
        since_id: Option<u64>,
        since_ms: Option<u64>,
        limit: Option<u64>,
        view: Option<String>,
        runtime_epoch: Option<String>,
        after_action_id: Option<String>,
        mobile_fact_id: Option<String>,
        target_key: Option<String>,
        fact_cursor: Option<String>,
        history: Option<bool>,
        cursor: Option<String>,
        include_actions: Option<bool>,
    }
);

/// The SDK query of these arguments (allowed names only, values percent-encoded).
pub fn query(stream: Stream, a: &CaptureArgs) -> String {
    let mut q: Vec<(&str, String)> = vec![];
    let view = match (&a.view, a.history) {
        (Some(v), _) => Some(v.clone()),
        (None, Some(true)) => Some("connected-history".to_string()),
        _ => None,
    };
    let pairs: [(&str, Option<String>); 9] = [
        ("view", view),
        ("sinceId", a.since_id.map(|n| n.to_string())),
        ("sinceMs", a.since_ms.map(|n| n.to_string())),
        ("limit", a.limit.map(|n| n.to_string())),
        ("runtimeEpoch", a.runtime_epoch.clone()),
        ("afterActionId", a.after_action_id.clone()),
        ("factCursor", a.fact_cursor.clone().or(a.cursor.clone())),
        ("mobileFactId", a.mobile_fact_id.clone()),
        ("targetKey", a.target_key.clone()),
    ];
    for (k, v) in pairs {
        if let Some(v) = v {
            q.push((k, v));
        }
    }
    let mut path = format!("/v1/{}", stream.name());
    for (i, (k, v)) in q.iter().enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(&format!("{k}={}", query_value(v)));
    }
    path
}

/// The SDK's own settlement event of a managed action (`<kind>.action.settled`).
fn is_action_record(item: &Value) -> bool {
    item.get("category").and_then(Value::as_str) == Some("interaction") && item.get("name").and_then(Value::as_str).is_some_and(|n| n.ends_with(".action.settled"))
}

/// Events without the managed-action records (counted), unless asked for.
fn shape(stream: Stream, a: &CaptureArgs, mut page: Value) -> Value {
    if stream == Stream::Events && a.include_actions != Some(true)
        && let Some(items) = page.get_mut("items").and_then(Value::as_array_mut)
    {
        let before = items.len();
        items.retain(|i| !is_action_record(i));
        let hidden = before - items.len();
        let count = items.len();
        page["count"] = json!(count);
        page["hiddenActionRecords"] = json!(hidden);
    }
    page
}

async fn run(ctx: &Context<'_>, stream: Stream, args: CaptureArgs) -> Result<Reply, ProviderError> {
    let path = query(stream, &args);
    let target = args.target();
    read_with(ctx, target, |conn, deadline| async move {
        let page = sdk::read(&conn.endpoint, &path, deadline).await?;
        if !page.get("items").is_some_and(Value::is_array) {
            return Err(ProviderError::new(sdk::codes::INVALID_RESPONSE, format!("the SDK's {} page has no items array", stream.name())).not_dispatched());
        }
        // The page's own runtimeEpoch is its scope (null across runtimes): keep it.
        let scope = page.get("runtimeEpoch").cloned().unwrap_or(Value::Null);
        let mut out = with_facts(shape(stream, &args, page), &conn);
        out["sdkRuntimeEpoch"] = out["runtimeEpoch"].take();
        out["runtimeEpoch"] = scope;
        Ok(out)
    })
    .await
    .map(Reply::Json)
}

macro_rules! capture_command {
    ($name:ident, $stream:expr, $summary:expr) => {
        pub struct $name;
        impl Command for $name {
            type Provider = IosProvider;
            type Args = CaptureArgs;
            fn spec() -> CommandSpec {
                spec($stream, $summary)
            }
            async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: CaptureArgs) -> Result<Reply, ProviderError> {
                run(ctx, $stream, args).await
            }
        }
    };
}

capture_command!(Logs, Stream::Logs, "One page of the app SDK's log capture (app-log partition): items, coverage, refs with mobileFactIds, nextCursor / watermarkCursor; views legacy-live, decision-window, connected-history.");
capture_command!(Network, Stream::Network, "One page of the app SDK's network capture (redacted by the SDK), with coverage, refs and cursors; views legacy-live, decision-window, connected-history.");
capture_command!(State, Stream::State, "One page of the app SDK's state capture (items keyed namespace:key, plus the current values), with coverage, refs and cursors.");
capture_command!(Events, Stream::Events, "One page of the app SDK's event capture, with coverage, refs and cursors; the SDK's managed-action settlement events only with includeActions.");

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> CaptureArgs {
        let mut base = json!({"deviceId": "D", "bundleId": "com.example.shop"});
        base.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn the_query_uses_only_the_sdk_names() {
        assert_eq!(query(Stream::Logs, &args(json!({}))), "/v1/logs");
        assert_eq!(query(Stream::Network, &args(json!({"sinceId": 5, "limit": 10, "afterActionId": "a b"}))), "/v1/network?sinceId=5&limit=10&afterActionId=a%20b");
        assert_eq!(query(Stream::State, &args(json!({"history": true, "runtimeEpoch": "E", "cursor": "eyJ9+"}))), "/v1/state?view=connected-history&runtimeEpoch=E&factCursor=eyJ9%2B");
        assert_eq!(query(Stream::Events, &args(json!({"view": "decision-window", "factCursor": "c", "includeActions": true}))), "/v1/events?view=decision-window&factCursor=c");
    }

    #[test]
    fn the_schema_keeps_the_sdk_limits() {
        let spec = Events::spec();
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
        let v = aab_plugin_api::validate::compile(&schema).unwrap();
        let check = |extra: Value| {
            let mut a = json!({"deviceId": "D", "bundleId": "com.example.shop"});
            a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            aab_plugin_api::validate::validate_arguments(&spec.command, &v, &schema, &a)
        };
        assert!(check(json!({"limit": 1000, "includeActions": true})).is_ok());
        assert_eq!(check(json!({"limit": 1001})).unwrap_err().field.as_deref(), Some("limit"));
        assert!(check(json!({"limit": 0})).is_err());
        assert!(check(json!({"view": "all"})).is_err());
        assert!(check(json!({"cursor": "a", "factCursor": "b"})).is_err(), "one cursor");
        assert!(check(json!({"history": true, "view": "legacy-live"})).is_err(), "history is connected-history");
        assert!(check(json!({"afterActionId": "x".repeat(1025)})).is_err());
        assert!(check(json!({})).is_ok());
        let e = check(json!({"bundleId": null})).unwrap_err();
        assert_eq!(e.dispatched, Some(false));
        assert!(Logs::spec().input_schema["properties"].get("includeActions").is_none());
        assert_eq!(Logs::spec().script_permission.as_deref(), Some("capture.read"));
    }

    #[test]
    fn action_settlements_are_hidden_unless_asked() {
        let page = json!({"ok": true, "count": 2, "items": [{"category": "interaction", "name": "h5.action.settled"}, {"category": "app", "name": "cart"}]});
        let hidden = shape(Stream::Events, &args(json!({})), page.clone());
        assert_eq!((hidden["count"].clone(), hidden["hiddenActionRecords"].clone()), (json!(1), json!(1)));
        assert_eq!(shape(Stream::Events, &args(json!({"includeActions": true})), page.clone())["count"], 2);
        assert_eq!(shape(Stream::Logs, &args(json!({})), page)["count"], 2);
    }
}
