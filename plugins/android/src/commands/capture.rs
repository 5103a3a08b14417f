//! `logs`, `state`, `network`, `events`: pages of the app SDK's capture streams
//! (aab-protocols §1.10, `GET /v1/<stream>?sinceId&sinceMs&limit`) read through the
//! verified SDK forward. Redaction is the SDK's (it stores records redacted); the
//! host applies what the SDK's legacy-live view does not: `network` filters
//! (`urlFilter`, `method`, `statusCode`) and shaping (`compact`, `noBodies`,
//! `bodyMaxBytes`), and `events`' hiding of managed-action records. So that a
//! filter never hides matches behind a page boundary — and a `limit` above the
//! SDK's 500 clamp still means what it says — the host pages through the stream
//! with the `sinceId` cursor until it has `limit` items or the stream ends.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, port, props};
use crate::sdk::http::BRIDGE_PROTOCOL_ERROR;

/// The SDK's own default page size and its clamp (Android: 1..500).
const DEFAULT_LIMIT: u64 = 200;
const SDK_MAX_LIMIT: u64 = 500;
/// At most this many SDK pages per command (the SDK keeps ≤300 records per
/// stream in memory; a persistent store can hold more — then `hasMore`).
const MAX_PAGES: usize = 20;
/// JavaScript's largest safe integer: the contract's bound of ids and times.
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Logs,
    Network,
    State,
    Events,
}

impl Stream {
    fn path(self) -> &'static str {
        match self {
            Stream::Logs => "/v1/logs",
            Stream::Network => "/v1/network",
            Stream::State => "/v1/state",
            Stream::Events => "/v1/events",
        }
    }
    fn item_type(self) -> &'static str {
        match self {
            Stream::Logs => "log",
            Stream::Network => "network",
            Stream::State => "state",
            Stream::Events => "event",
        }
    }
}

fn window_props() -> Value {
    json!({
        "packageName": package_name(),
        "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
        "sinceId": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Only records with a larger id (exclusive). Ids are per app process: they restart with a new runtimeEpoch"},
        "sinceMs": {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": "Only records captured at or after this epoch millisecond (inclusive)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 2147483647, "description": "Most records returned (default 200); the host pages past the SDK's 500 clamp"},
    })
}

fn spec(command: &str, summary: &str, extra: Value) -> CommandSpec {
    let mut p = window_props();
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    CommandSpec::query(command)
        .platform("android")
        .domain("core")
        .target_kind("android-app")
        .summary(summary)
        .permission("capture.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(object(props(p), &["packageName"]))
}

/// `logs` and `state`: the window arguments only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StreamArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub since_id: Option<u64>,
    pub since_ms: Option<u64>,
    pub limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub since_id: Option<u64>,
    pub since_ms: Option<u64>,
    pub limit: Option<u64>,
    #[serde(default)]
    pub compact: bool,
    pub url_filter: Option<String>,
    pub method: Option<String>,
    pub status_code: Option<u16>,
    #[serde(default)]
    pub no_bodies: bool,
    pub body_max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventsArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub since_id: Option<u64>,
    pub since_ms: Option<u64>,
    pub limit: Option<u64>,
    #[serde(default)]
    pub include_actions: bool,
}

/// What every capture read shares: the app and the window over its stream.
struct Window {
    app: AppArgs,
    since_id: Option<u64>,
    since_ms: Option<u64>,
    limit: u64,
}

macro_rules! window_of {
    ($a:expr) => {
        Window {
            app: AppArgs { package_name: $a.package_name.clone(), serial: $a.serial.clone(), port: $a.port, adb: $a.adb.clone(), adb_timeout_ms: $a.adb_timeout_ms },
            since_id: $a.since_id,
            since_ms: $a.since_ms,
            limit: $a.limit.unwrap_or(DEFAULT_LIMIT).max(1),
        }
    };
}

/// What the host does to each record the SDK returned: `None` drops it.
trait Shape {
    fn shape(&mut self, item: Value) -> Option<Value>;
    /// Whether `shape` may drop records.
    fn filters(&self) -> bool {
        false
    }
    /// Fields added to the reply (the filters that were applied, counts of hidden records).
    fn report(&self, _reply: &mut Map<String, Value>) {}
}

struct Keep;
impl Shape for Keep {
    fn shape(&mut self, item: Value) -> Option<Value> {
        Some(item)
    }
}

/// The pages read from the SDK, merged.
#[derive(Debug, Default, PartialEq)]
struct Collected {
    items: Vec<Value>,
    /// Records the SDK returned (before host-side filters).
    scanned: u64,
    /// The id of the last record scanned: the `sinceId` that continues the read.
    next_since_id: Option<u64>,
    has_more: bool,
    /// The first page's envelope (for `updatedAtMs`, state `values`).
    first: Option<Value>,
}

fn page_query(path: &str, since_id: Option<u64>, since_ms: Option<u64>, limit: u64) -> String {
    let mut q = format!("{path}?limit={limit}");
    if let Some(id) = since_id {
        q.push_str(&format!("&sinceId={id}"));
    }
    if let Some(ms) = since_ms {
        q.push_str(&format!("&sinceMs={ms}"));
    }
    q
}

/// Checks one SDK page and returns its items.
fn page_items(stream: Stream, package: &str, body: &Value) -> Result<Vec<Value>, ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let code = body.get("error").or_else(|| body.get("reason")).and_then(Value::as_str).unwrap_or(BRIDGE_PROTOCOL_ERROR).to_string();
        return Err(ProviderError::new(code, format!("the SDK of {package} refused the {} read", stream.item_type())).with_details(json!({"body": body})).not_dispatched());
    }
    match body.get("items") {
        Some(Value::Array(items)) => Ok(items.clone()),
        _ => Err(ProviderError::new(BRIDGE_PROTOCOL_ERROR, format!("the SDK's {} page has no items array", stream.item_type())).with_details(json!({"body": body})).not_dispatched()),
    }
}

/// The paging loop, over any page source (the SDK in production, a list in tests).
async fn collect<F, Fut>(stream: Stream, package: &str, w: &Window, shape: &mut dyn Shape, mut fetch: F) -> Result<Collected, ProviderError>
where
    F: FnMut(String, u64) -> Fut,
    Fut: std::future::Future<Output = Result<Value, ProviderError>>,
{
    let mut out = Collected { next_since_id: w.since_id, ..Collected::default() };
    for _ in 0..MAX_PAGES {
        // With host-side filters a page may yield fewer matches than it holds: then
        // ask for full pages; without, for exactly what is still missing.
        let missing = w.limit - out.items.len() as u64;
        let ask = if shape.filters() { SDK_MAX_LIMIT } else { SDK_MAX_LIMIT.min(missing) };
        let body = fetch(page_query(stream.path(), out.next_since_id, w.since_ms, ask), ask).await?;
        let items = page_items(stream, package, &body)?;
        if out.first.is_none() {
            out.first = Some(body.clone());
        }
        let full = items.len() as u64 >= ask;
        let n = items.len();
        for (i, item) in items.into_iter().enumerate() {
            let id = item.get("id").and_then(Value::as_u64);
            out.scanned += 1;
            if let Some(id) = id {
                out.next_since_id = Some(id);
            }
            if let Some(kept) = shape.shape(item) {
                out.items.push(kept);
            }
            if out.items.len() as u64 >= w.limit {
                out.has_more = i + 1 < n || full;
                return Ok(out);
            }
            if id.is_none() {
                // Without ids the stream cannot be continued: this page is all there is.
                return Ok(out);
            }
        }
        if !full {
            return Ok(out);
        }
    }
    out.has_more = true;
    Ok(out)
}

async fn read(ctx: &Context<'_>, stream: Stream, w: Window, mut shape: impl Shape) -> Result<Reply, ProviderError> {
    let budget = Budget::new(ctx, w.app.adb_timeout_ms);
    cancellable(ctx, async {
        let (serial, route) = sdk_route(&w.app, &budget).await?;
        let port = route.forward.port;
        let deadline = budget.deadline;
        let collected = collect(stream, &w.app.package_name, &w, &mut shape, |path, _| async move { Ok(crate::sdk::http::request(port, "GET", &path, None, deadline).await?.body) }).await?;
        Ok(reply(stream, &w, serial, route.descriptor.runtime_epoch.clone(), collected, &shape))
    })
    .await
    .map(Reply::Json)
}

fn reply(stream: Stream, w: &Window, serial: String, runtime_epoch: String, c: Collected, shape: &dyn Shape) -> Value {
    let first = c.first.unwrap_or(Value::Null);
    let mut r = Map::new();
    r.insert("ok".into(), json!(true));
    r.insert("type".into(), json!(stream.item_type()));
    r.insert("serial".into(), json!(serial));
    r.insert("packageName".into(), json!(w.app.package_name));
    r.insert("runtimeEpoch".into(), json!(runtime_epoch));
    r.insert("count".into(), json!(c.items.len()));
    r.insert("items".into(), Value::Array(c.items));
    r.insert("sinceId".into(), json!(w.since_id));
    r.insert("sinceMs".into(), json!(w.since_ms));
    r.insert("limit".into(), json!(w.limit));
    r.insert("nextSinceId".into(), json!(c.next_since_id));
    r.insert("hasMore".into(), json!(c.has_more));
    // Whether this read holds every record of its window (the Intent engine's coverage).
    r.insert("coverage".into(), json!({"status": if c.has_more { "partial" } else { "complete" }}));
    r.insert("scanned".into(), json!(c.scanned));
    if stream == Stream::State {
        r.insert("values".into(), first.get("values").cloned().unwrap_or_else(|| json!({})));
    }
    shape.report(&mut r);
    r.insert("updatedAtMs".into(), first.get("updatedAtMs").cloned().unwrap_or(Value::Null));
    Value::Object(r)
}

// ------------------------------------------------------------------ network shaping

/// `network`'s host-side filters and shaping.
#[derive(Debug, Default)]
struct NetworkShape {
    url_filter: Option<String>,
    method: Option<String>,
    status_code: Option<u16>,
    compact: bool,
    no_bodies: bool,
    body_max_bytes: Option<u64>,
}

/// Fields of a compact network record.
const COMPACT_FIELDS: [&str; 9] = ["id", "type", "timestampMs", "method", "url", "statusCode", "durationMs", "error", "actionId"];

impl NetworkShape {
    fn of(a: &NetworkArgs) -> Self {
        NetworkShape { url_filter: a.url_filter.clone(), method: a.method.clone(), status_code: a.status_code, compact: a.compact, no_bodies: a.no_bodies, body_max_bytes: a.body_max_bytes }
    }

    fn matches(&self, item: &Value) -> bool {
        let url = item.get("url").and_then(Value::as_str).unwrap_or("");
        self.url_filter.as_ref().is_none_or(|f| url.to_lowercase().contains(&f.to_lowercase()))
            && self.method.as_ref().is_none_or(|m| item.get("method").and_then(Value::as_str).is_some_and(|x| x.eq_ignore_ascii_case(m)))
            && self.status_code.is_none_or(|s| item.get("statusCode").and_then(Value::as_u64) == Some(s as u64))
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn utf8_prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Shape for NetworkShape {
    fn filters(&self) -> bool {
        self.url_filter.is_some() || self.method.is_some() || self.status_code.is_some()
    }
    fn shape(&mut self, item: Value) -> Option<Value> {
        if !self.matches(&item) {
            return None;
        }
        let Value::Object(mut o) = item else { return Some(item) };
        if self.compact {
            o.retain(|k, _| COMPACT_FIELDS.contains(&k.as_str()));
        }
        if self.no_bodies {
            o.remove("requestBody");
            o.remove("responseBody");
        }
        if let Some(max) = self.body_max_bytes {
            for b in ["requestBody", "responseBody"] {
                let Some(Value::String(body)) = o.get(b) else { continue };
                if body.len() as u64 > max {
                    let bytes = body.len();
                    let cut = utf8_prefix(body, max as usize).to_string();
                    o.insert(b.into(), Value::String(cut));
                    o.insert(format!("{b}Truncated"), json!(true));
                    o.insert(format!("{b}Bytes"), json!(bytes));
                }
            }
        }
        Some(Value::Object(o))
    }

    fn report(&self, reply: &mut Map<String, Value>) {
        reply.insert(
            "filters".into(),
            json!({"urlFilter": self.url_filter, "method": self.method, "statusCode": self.status_code, "compact": self.compact, "noBodies": self.no_bodies, "bodyMaxBytes": self.body_max_bytes}),
        );
    }
}

// ------------------------------------------------------------------- events shaping

/// `events` without `includeActions` hides the records of managed actions: events
/// that carry an `actionId` (the SDK's `native.action.settled`, started/terminal
/// `ui.interaction`, captures posted for an action). `hiddenActions` counts them.
#[derive(Debug, Default)]
struct EventsShape {
    include_actions: bool,
    hidden: u64,
}

fn is_action_event(item: &Value) -> bool {
    item.get("actionId").is_some_and(|a| a.as_str().is_some_and(|s| !s.is_empty()))
}

impl Shape for EventsShape {
    fn filters(&self) -> bool {
        !self.include_actions
    }
    fn shape(&mut self, item: Value) -> Option<Value> {
        if !self.include_actions && is_action_event(&item) {
            self.hidden += 1;
            return None;
        }
        Some(item)
    }
    fn report(&self, reply: &mut Map<String, Value>) {
        reply.insert("includeActions".into(), json!(self.include_actions));
        reply.insert("hiddenActions".into(), json!(self.hidden));
    }
}

// ------------------------------------------------------------------------ commands

pub struct Logs;
impl Command for Logs {
    type Provider = AndroidProvider;
    type Args = StreamArgs;
    fn spec() -> CommandSpec {
        spec("logs", "The app SDK's log captures (sdk, http, logcat follower, console, …), oldest first after sinceId/sinceMs.", json!({}))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: StreamArgs) -> Result<Reply, ProviderError> {
        read(ctx, Stream::Logs, window_of!(args), Keep).await
    }
}

pub struct State;
impl Command for State {
    type Provider = AndroidProvider;
    type Args = StreamArgs;
    fn spec() -> CommandSpec {
        spec("state", "The app SDK's state captures (namespace, key, value) after sinceId/sinceMs, plus the latest value of every namespace.key.", json!({}))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: StreamArgs) -> Result<Reply, ProviderError> {
        read(ctx, Stream::State, window_of!(args), Keep).await
    }
}

pub struct Network;
impl Command for Network {
    type Provider = AndroidProvider;
    type Args = NetworkArgs;
    fn spec() -> CommandSpec {
        spec(
            "network",
            "The app SDK's network captures (redacted by the SDK), filtered by URL substring, method and status code; compact or without bodies on request.",
            json!({
                "compact": {"type": "boolean", "description": "Only id, type, timestampMs, method, url, statusCode, durationMs, error, actionId"},
                "urlFilter": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "Keep records whose URL contains this text (case-insensitive)"},
                "method": {"type": "string", "minLength": 1, "maxLength": 32, "description": "Keep records with this HTTP method (case-insensitive)"},
                "statusCode": {"type": "integer", "minimum": 100, "maximum": 599, "description": "Keep records with this HTTP status"},
                "noBodies": {"type": "boolean", "description": "Drop requestBody and responseBody"},
                "bodyMaxBytes": {"type": "integer", "minimum": 0, "maximum": 2147483647, "description": "Cut each body to at most this many UTF-8 bytes (marks <body>Truncated and <body>Bytes)"},
            }),
        )
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: NetworkArgs) -> Result<Reply, ProviderError> {
        read(ctx, Stream::Network, window_of!(args), NetworkShape::of(&args)).await
    }
}

pub struct Events;
impl Command for Events {
    type Provider = AndroidProvider;
    type Args = EventsArgs;
    fn spec() -> CommandSpec {
        spec(
            "events",
            "The app SDK's event captures (category, name, data); managed-action records only with includeActions.",
            json!({"includeActions": {"type": "boolean", "description": "Also return events recorded for managed actions (those carrying an actionId); default false"}}),
        )
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: EventsArgs) -> Result<Reply, ProviderError> {
        read(ctx, Stream::Events, window_of!(args), EventsShape { include_actions: args.include_actions, hidden: 0 }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(since_id: Option<u64>, limit: u64) -> Window {
        Window { app: AppArgs { package_name: "com.example.app".into(), serial: None, port: None, adb: None, adb_timeout_ms: None }, since_id, since_ms: None, limit }
    }

    /// A stream of `n` network records held like the SDK holds them, served with
    /// its page rules (sinceId exclusive, limit clamped to 1..500).
    fn sdk(records: &[Value]) -> impl FnMut(String, u64) -> std::future::Ready<Result<Value, ProviderError>> + '_ {
        move |path: String, _| {
            let q: std::collections::HashMap<&str, u64> = path.split_once('?').unwrap().1.split('&').map(|kv| kv.split_once('=').unwrap()).map(|(k, v)| (k, v.parse().unwrap())).collect();
            let since = q.get("sinceId").copied().unwrap_or(0);
            let limit = q["limit"].clamp(1, 500) as usize;
            let items: Vec<Value> = records.iter().filter(|r| r["id"].as_u64().unwrap() > since).take(limit).cloned().collect();
            std::future::ready(Ok(json!({"ok": true, "items": items, "updatedAtMs": 5})))
        }
    }

    fn net(id: u64, method: &str, url: &str, status: u64) -> Value {
        json!({"id": id, "type": "network", "source": "sdk", "timestampMs": 1000 + id, "method": method, "url": url, "statusCode": status, "durationMs": 3, "requestBody": "{\"q\":\"Grüße\"}", "responseBody": "ok", "requestHeaders": {"Accept": "*/*"}, "redacted": true})
    }

    fn run<S: Shape>(records: &[Value], w: &Window, mut shape: S) -> (Collected, S) {
        let c = futures_block(collect(Stream::Network, "com.example.app", w, &mut shape, sdk(records))).unwrap();
        (c, shape)
    }

    fn futures_block<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn filters_page_past_records_that_do_not_match() {
        // 1200 records; only every 300th is a POST: a single SDK page (≤500) cannot find them all.
        let records: Vec<Value> = (1..=1200).map(|i| net(i, if i % 300 == 0 { "POST" } else { "GET" }, "https://api.test/x", 200)).collect();
        let shape = NetworkShape { method: Some("post".into()), ..Default::default() };
        let (c, _) = run(&records, &window(None, 10), shape);
        let ids: Vec<u64> = c.items.iter().map(|i| i["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [300, 600, 900, 1200]);
        assert_eq!((c.scanned, c.next_since_id, c.has_more), (1200, Some(1200), false));
    }

    #[test]
    fn limit_stops_early_and_the_cursor_continues() {
        let records: Vec<Value> = (1..=50).map(|i| net(i, "GET", &format!("https://api.test/{}", if i % 2 == 0 { "even" } else { "odd" }), 200)).collect();
        let shape = NetworkShape { url_filter: Some("EVEN".into()), ..Default::default() };
        let (c, _) = run(&records, &window(Some(10), 3), shape);
        let ids: Vec<u64> = c.items.iter().map(|i| i["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [12, 14, 16]);
        assert_eq!((c.next_since_id, c.has_more), (Some(16), true));
        // A limit above the SDK's clamp is honoured by paging.
        let many: Vec<Value> = (1..=1100).map(|i| net(i, "GET", "https://a.test/", 200)).collect();
        let (c, _) = run(&many, &window(None, 1000), Keep);
        assert_eq!((c.items.len(), c.next_since_id, c.has_more), (1000, Some(1000), true));
        let (c, _) = run(&many, &window(Some(1000), 1000), Keep);
        assert_eq!((c.items.len(), c.has_more), (100, false));
    }

    #[test]
    fn status_code_compact_no_bodies_and_body_cut() {
        let records = vec![net(1, "GET", "https://a.test/ok", 200), net(2, "GET", "https://a.test/fail", 500)];
        let (c, _) = run(&records, &window(None, 200), NetworkShape { status_code: Some(500), compact: true, ..Default::default() });
        assert_eq!(c.items, vec![json!({"id": 2, "type": "network", "timestampMs": 1002, "method": "GET", "url": "https://a.test/fail", "statusCode": 500, "durationMs": 3})]);
        let (c, _) = run(&records, &window(None, 200), NetworkShape { no_bodies: true, ..Default::default() });
        assert!(c.items.iter().all(|i| i.get("requestBody").is_none() && i.get("responseBody").is_none() && i.get("requestHeaders").is_some()));
        // `{"q":"Grüße"}`: 9 bytes cut inside `ü` (bytes 8..10) keep 8 bytes on a char boundary.
        let (c, _) = run(&records, &window(None, 1), NetworkShape { body_max_bytes: Some(9), ..Default::default() });
        let i = &c.items[0];
        assert_eq!((i["requestBody"].as_str(), i["requestBodyTruncated"].as_bool(), i["requestBodyBytes"].as_u64()), (Some("{\"q\":\"Gr"), Some(true), Some(15)));
        assert_eq!((i["responseBody"].as_str(), i.get("responseBodyTruncated")), (Some("ok"), None));
    }

    #[test]
    fn events_hide_action_records_unless_asked() {
        let records = vec![json!({"id": 1, "category": "app", "name": "login"}), json!({"id": 2, "category": "interaction", "name": "native.action.settled", "actionId": "a-1"}), json!({"id": 3, "category": "app", "name": "x", "actionId": null})];
        let (c, shape) = run(&records, &window(None, 200), EventsShape::default());
        assert_eq!(c.items.iter().map(|i| i["id"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(shape.hidden, 1);
        let (c, shape) = run(&records, &window(None, 200), EventsShape { include_actions: true, hidden: 0 });
        assert_eq!((c.items.len(), shape.hidden), (3, 0));
    }

    #[test]
    fn an_sdk_refusal_keeps_its_code() {
        let mut refuse = |_: String, _: u64| std::future::ready(Ok(json!({"ok": false, "error": "capture_store_opening"})));
        let e = futures_block(collect(Stream::Logs, "com.example.app", &window(None, 5), &mut Keep, &mut refuse)).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), ("capture_store_opening", Some(false)));
        let mut broken = |_: String, _: u64| std::future::ready(Ok(json!({"ok": true})));
        let e = futures_block(collect(Stream::Logs, "com.example.app", &window(None, 5), &mut Keep, &mut broken)).unwrap_err();
        assert_eq!(e.error, BRIDGE_PROTOCOL_ERROR);
    }

    #[test]
    fn page_queries_carry_the_window() {
        assert_eq!(page_query("/v1/logs", None, None, 200), "/v1/logs?limit=200");
        assert_eq!(page_query("/v1/state", Some(7), Some(1700000000000), 5), "/v1/state?limit=5&sinceId=7&sinceMs=1700000000000");
    }
}
