//! `webview-pages`, `webview-network`, `webview-console`: an app's WebViews
//! through their DevTools socket (aab-protocols §2.2). The socket is
//! `webview_devtools_remote_<pid>` of the app's process (`pidof`), found in
//! `shell cat /proc/net/unix` (or named by `socketName`); an adb forward
//! (`webviewPort`, else reused or allocated — the SDK forward code) reaches it;
//! `GET /json` lists the pages; network and console capture speak CDP over the
//! page's WebSocket for a bounded window (`durationMs`), optionally running
//! `script` in the page first (a device effect: `mark_dispatched` right before
//! it). A forward this command created is removed afterwards unless `keepForward`.

use std::time::Duration;

use aab_cdp::Cdp;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::adb::Deadline;
use crate::adb::device::{Device, command_line};
use crate::manifest::{object, package_name, port, props};
use crate::sdk::forward;

/// The app process has no WebView DevTools socket in /proc/net/unix.
pub const WEBVIEW_DEVTOOLS_NOT_FOUND: &str = "webview_devtools_not_found";
/// The forwarded socket did not answer `GET /json` as DevTools does.
pub const WEBVIEW_DEVTOOLS_UNREACHABLE: &str = "webview_devtools_unreachable";
/// No page matches `targetId` / `pageUrlFilter`.
pub const WEBVIEW_PAGE_NOT_FOUND: &str = "webview_page_not_found";
/// Several pages match: name one with `targetId` or `pageUrlFilter`.
pub const WEBVIEW_PAGE_AMBIGUOUS: &str = "webview_page_ambiguous";
/// The page's CDP connection failed or a call on it did.
pub const WEBVIEW_CDP_FAILED: &str = "webview_cdp_failed";
/// `script` threw in the page.
pub const WEBVIEW_SCRIPT_FAILED: &str = "webview_script_failed";
/// The app named by `packageName` has no running process.
pub const APP_NOT_RUNNING: &str = super::logcat::APP_NOT_RUNNING;

const SOCKET_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,107}$";
const DEFAULT_DURATION_MS: u64 = 3000;
const MAX_DURATION_MS: u64 = 60_000;
const DEFAULT_MAX_EVENTS: usize = 200;
const DEFAULT_BODY_MAX_BYTES: usize = 64 * 1024;
/// Kept free at the end of the host deadline for bodies, forward removal and the reply.
const REPLY_MARGIN: Duration = Duration::from_millis(1500);
/// /json replies larger than this are refused.
const JSON_LIMIT: usize = 4 * 1024 * 1024;

fn common_props(extra: Value) -> Value {
    let mut p = props(json!({
        "packageName": package_name(),
        "webviewPort": port("Host port for the forward to the WebView DevTools socket (default: reuse an exact forward, else let adb allocate one)"),
        "socketName": {"type": "string", "pattern": SOCKET_PATTERN, "description": "DevTools abstract socket (default webview_devtools_remote_<pid of the app>)"},
        "targetId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "Only the page with this DevTools target id"},
        "pageUrlFilter": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "Only pages whose url contains this text"},
        "keepForward": {"type": "boolean", "description": "Keep a forward this command created (default: removed afterwards; a reused forward is never removed)"},
    }));
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    p
}

fn capture_props(with_body: bool) -> Value {
    let mut extra = json!({
        "durationMs": {"type": "integer", "minimum": 100, "maximum": MAX_DURATION_MS, "description": "Capture window in ms (default 3000; also ends 1.5 s before the command deadline)"},
        "script": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript evaluated in the page after capture starts (promises awaited): changes the page, so a mutation"},
        "maxEvents": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "At most this many records (default 200); `truncated` tells when more came"},
    });
    extra["urlFilter"] = json!({"type": "string", "minLength": 1, "maxLength": 2048, "description": if with_body { "Only requests whose url contains this text" } else { "Only messages whose source url contains this text" }});
    if with_body {
        extra["includeResponseBody"] = json!({"type": "boolean", "description": "Read each finished response's body (Network.getResponseBody)"});
        extra["bodyMaxBytes"] = json!({"type": "integer", "minimum": 0, "maximum": 1048576, "description": "Body bytes kept per response (default 65536)"});
    }
    common_props(extra)
}

/// A capture that runs `script` changes the page: it names its device.
fn script_needs_serial(mut schema: Value) -> Value {
    schema["if"] = json!({"required": ["script"]});
    schema["then"] = json!({"required": ["serial"]});
    schema
}

fn pages_spec() -> CommandSpec {
    CommandSpec::query("webview-pages")
        .platform("android")
        .domain("webview")
        .role("expert")
        .target_kind("android-app")
        .summary("List the app's WebView pages from its DevTools socket (webview_devtools_remote_<pid> in /proc/net/unix, adb forward, GET /json): targetId, type, title, url.")
        .target_key("serial")
        .target_key("packageName")
        .timeouts(15_000, 60_000)
        .input_schema(object(common_props(json!({})), &["packageName"]))
}

fn capture_spec(name: &str, summary: &str, with_body: bool) -> CommandSpec {
    CommandSpec::query(name)
        .platform("android")
        .domain("webview")
        .target_kind("android-app")
        .summary(summary)
        .permission("capture.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        // `script` runs in the page: the command changes its target then.
        .mutating_flag("script")
        .device_key("serial")
        .timeouts(15_000, 120_000)
        .input_schema(script_needs_serial(object(capture_props(with_body), &["packageName"])))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebviewArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub webview_port: Option<u16>,
    pub socket_name: Option<String>,
    pub target_id: Option<String>,
    pub page_url_filter: Option<String>,
    pub keep_forward: Option<bool>,
    pub duration_ms: Option<u64>,
    pub script: Option<String>,
    pub max_events: Option<usize>,
    pub url_filter: Option<String>,
    pub include_response_body: Option<bool>,
    pub body_max_bytes: Option<usize>,
}

fn not_dispatched(code: &str, message: String) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

/// The app's DevTools socket: `socketName`, or the one of its running process.
async fn socket_of(device: &Device, args: &WebviewArgs, deadline: Deadline) -> Result<String, ProviderError> {
    let wanted = match &args.socket_name {
        Some(s) => s.clone(),
        None => {
            let out = device.shell(&command_line(&["pidof", "-s", &args.package_name]), None, deadline).await?;
            match out.stdout_text().split_whitespace().next().and_then(|p| p.parse::<u32>().ok()) {
                Some(pid) if out.exit_code == 0 => format!("webview_devtools_remote_{pid}"),
                _ => return Err(not_dispatched(APP_NOT_RUNNING, format!("{} has no running process (pidof found none)", args.package_name)).with_field("packageName").with_details(json!({"packageName": args.package_name}))),
            }
        }
    };
    let unix = device.shell("cat /proc/net/unix", None, deadline).await?.stdout_text();
    let sockets: Vec<String> = unix.lines().filter_map(|l| l.split_whitespace().last()?.strip_prefix('@')).filter(|n| n.contains("devtools_remote")).map(str::to_string).collect();
    if sockets.contains(&wanted) {
        Ok(wanted)
    } else {
        let field = if args.socket_name.is_some() { "socketName" } else { "packageName" };
        Err(not_dispatched(WEBVIEW_DEVTOOLS_NOT_FOUND, format!("no DevTools socket @{wanted} in /proc/net/unix (is a WebView with debugging enabled running in {}?)", args.package_name)).with_field(field).with_details(json!({"socketName": wanted, "devtoolsSockets": sockets})))
    }
}

/// GET a JSON document from the forwarded DevTools socket.
async fn get_json(port: u16, path: &str, deadline: Deadline) -> Result<Value, String> {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut tmp = [0u8; 8192];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                if !head.starts_with("http/1.1 200") && !head.starts_with("http/1.0 200") {
                    return Err(format!("GET {path}: {}", head.lines().next().unwrap_or_default()));
                }
                let len = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
                if let Some(len) = len
                    && buf.len() >= end + 4 + len
                {
                    return serde_json::from_slice(&buf[end + 4..end + 4 + len]).map_err(|e| format!("GET {path}: {e}"));
                }
            }
            let n = s.read(&mut tmp).await.map_err(|e| e.to_string())?;
            if n == 0 {
                let end = buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("GET {path}: connection closed without a reply"))?;
                return serde_json::from_slice(&buf[end + 4..]).map_err(|e| format!("GET {path}: {e}"));
            }
            if buf.len() > JSON_LIMIT {
                return Err(format!("GET {path}: reply over {JSON_LIMIT} bytes"));
            }
            buf.extend_from_slice(&tmp[..n]);
        }
    };
    tokio::time::timeout(deadline.remaining(), work).await.map_err(|_| format!("GET {path}: no reply in time"))?
}

/// One page of `/json` as reported.
fn page_json(p: &Value, with_ws: bool) -> Value {
    let mut o = json!({
        "targetId": p["id"],
        "type": p["type"],
        "title": p["title"],
        "url": p["url"],
        "description": p.get("description").cloned().unwrap_or(Value::Null),
    });
    if with_ws {
        o["webSocketDebuggerUrl"] = p["webSocketDebuggerUrl"].clone();
    }
    o
}

/// The socket's forwarded port and what was found there, and how to undo it.
struct Session {
    device: Device,
    socket: String,
    port: u16,
    reused: bool,
    pages: Vec<Value>,
}

impl Session {
    async fn open(args: &WebviewArgs, budget: &Budget) -> Result<Session, ProviderError> {
        let device = device(args.adb.as_deref(), args.serial.as_deref(), budget).await?;
        let socket = socket_of(&device, args, budget.adb()).await?;
        let fwd = forward::ensure(&device.server, &device.serial, &socket, args.webview_port, budget.adb()).await?;
        let mut s = Session { device, socket, port: fwd.port, reused: fwd.reused, pages: vec![] };
        match get_json(s.port, "/json", budget.adb()).await {
            Ok(Value::Array(all)) => {
                s.pages = all
                    .into_iter()
                    .filter(|p| p["type"] == json!("page"))
                    .filter(|p| args.target_id.as_ref().is_none_or(|t| p["id"].as_str() == Some(t)))
                    .filter(|p| args.page_url_filter.as_ref().is_none_or(|f| p["url"].as_str().is_some_and(|u| u.contains(f.as_str()))))
                    .collect();
                Ok(s)
            }
            other => {
                let message = match other {
                    Err(e) => e,
                    Ok(v) => format!("GET /json: not a list: {}", v.to_string().chars().take(200).collect::<String>()),
                };
                s.close(false, budget).await;
                Err(not_dispatched(WEBVIEW_DEVTOOLS_UNREACHABLE, message).with_details(json!({"socketName": s.socket})))
            }
        }
    }

    /// Removes the forward this command made unless kept; whether it is still there.
    async fn close(&self, keep: bool, budget: &Budget) -> bool {
        if self.reused || keep {
            return true;
        }
        let _ = self.device.server.kill_forward(&self.device.serial, &format!("tcp:{}", self.port), budget.adb()).await;
        false
    }

    fn head(&self, args: &WebviewArgs, kept: bool) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("ok".into(), json!(true));
        m.insert("serial".into(), json!(self.device.serial));
        m.insert("packageName".into(), json!(args.package_name));
        m.insert("socketName".into(), json!(self.socket));
        m.insert("webviewPort".into(), json!(self.port));
        m.insert("forwardReused".into(), json!(self.reused));
        m.insert("forwardKept".into(), json!(kept));
        m
    }

    /// The one page a capture watches.
    fn one_page(&self) -> Result<Value, ProviderError> {
        match self.pages.as_slice() {
            [p] => Ok(p.clone()),
            [] => Err(not_dispatched(WEBVIEW_PAGE_NOT_FOUND, "no WebView page matches".into()).with_details(json!({"socketName": self.socket}))),
            many => Err(not_dispatched(WEBVIEW_PAGE_AMBIGUOUS, format!("{} pages match; name one with targetId or pageUrlFilter", many.len())).with_field("targetId").with_details(json!({"pages": many.iter().map(|p| page_json(p, false)).collect::<Vec<_>>()}))),
        }
    }
}

pub struct WebviewPages;
impl Command for WebviewPages {
    type Provider = AndroidProvider;
    type Args = WebviewArgs;
    fn spec() -> CommandSpec {
        pages_spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: WebviewArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let s = Session::open(&args, &budget).await?;
            let kept = s.close(args.keep_forward == Some(true), &budget).await;
            let mut out = s.head(&args, kept);
            out.insert("pages".into(), Value::Array(s.pages.iter().map(|p| page_json(p, kept)).collect()));
            Ok(Value::Object(out))
        })
        .await
        .map(Reply::Json)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Network,
    Console,
}

pub struct WebviewNetwork;
impl Command for WebviewNetwork {
    type Provider = AndroidProvider;
    type Args = WebviewArgs;
    fn spec() -> CommandSpec {
        capture_spec("webview-network", "Capture a WebView page's network requests over CDP for a bounded window (Network.enable; optional script run in the page; bodies with includeResponseBody).", true)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: WebviewArgs) -> Result<Reply, ProviderError> {
        capture(ctx, args, Kind::Network).await.map(Reply::Json)
    }
}

pub struct WebviewConsole;
impl Command for WebviewConsole {
    type Provider = AndroidProvider;
    type Args = WebviewArgs;
    fn spec() -> CommandSpec {
        capture_spec("webview-console", "Capture a WebView page's console messages, log entries and exceptions over CDP for a bounded window (Runtime.enable, Log.enable; optional script run in the page).", false)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: WebviewArgs) -> Result<Reply, ProviderError> {
        capture(ctx, args, Kind::Console).await.map(Reply::Json)
    }
}

async fn capture(ctx: &Context<'_>, args: WebviewArgs, kind: Kind) -> Result<Value, ProviderError> {
    let budget = Budget::new(ctx, args.adb_timeout_ms);
    cancellable(ctx, async {
        let s = Session::open(&args, &budget).await?;
        let r = watch(ctx, &s, &args, kind, &budget).await;
        let kept = s.close(args.keep_forward == Some(true), &budget).await;
        let mut out = s.head(&args, kept);
        out.extend(r?);
        Ok(Value::Object(out))
    })
    .await
}

fn cdp_err(e: impl std::fmt::Display, dispatched: bool) -> ProviderError {
    let e = ProviderError::new(WEBVIEW_CDP_FAILED, e.to_string());
    if dispatched { e } else { e.not_dispatched() }
}

/// Connects to the page, enables the domains, runs the script, collects events.
async fn watch(ctx: &Context<'_>, s: &Session, args: &WebviewArgs, kind: Kind, budget: &Budget) -> Result<Map<String, Value>, ProviderError> {
    let page = s.one_page()?;
    let ws = page["webSocketDebuggerUrl"].as_str().map(str::to_string).unwrap_or_else(|| format!("ws://127.0.0.1:{}/devtools/page/{}", s.port, page["id"].as_str().unwrap_or_default()));
    let step = budget.adb_step.min(budget.deadline.remaining());
    let cdp = Cdp::connect_with_timeout(&ws, step).await.map_err(|e| cdp_err(e, false))?;
    let mut events = cdp.events();
    let domains: &[&str] = match kind {
        Kind::Network => &["Network.enable"],
        Kind::Console => &["Runtime.enable", "Log.enable"],
    };
    for d in domains {
        cdp.call(d, json!({}), None).await.map_err(|e| cdp_err(e, false))?;
    }
    let duration = Duration::from_millis(args.duration_ms.unwrap_or(DEFAULT_DURATION_MS).min(MAX_DURATION_MS));
    let window_end = tokio::time::Instant::now() + duration.min(budget.deadline.remaining().saturating_sub(REPLY_MARGIN));
    let mut script_result = Value::Null;
    if let Some(script) = &args.script {
        ctx.mark_dispatched();
        let left = budget.deadline.remaining().saturating_sub(REPLY_MARGIN).max(Duration::from_millis(1));
        let r = cdp
            .call_with_timeout("Runtime.evaluate", json!({"expression": script, "returnByValue": true, "awaitPromise": true, "userGesture": true}), None, left)
            .await
            // The script may or may not have run: the outcome is unknown (no dispatch flag).
            .map_err(|e| ProviderError::new(WEBVIEW_CDP_FAILED, format!("script: {e}")))?;
        match aab_cdp::evaluate_value(&r) {
            Ok(v) => script_result = json!({"value": v}),
            // The page's own answer: the script ran and threw.
            Err(e) => return Err(ProviderError::new(WEBVIEW_SCRIPT_FAILED, format!("script threw: {e}")).with_field("script").settled_after_dispatch()),
        }
    }
    let max = args.max_events.unwrap_or(DEFAULT_MAX_EVENTS);
    let mut net = Network::default();
    let mut messages: Vec<Value> = vec![];
    let mut truncated = false;
    loop {
        let next = tokio::time::timeout_at(window_end, events.next()).await;
        let Ok(Some(ev)) = next else { break };
        match kind {
            Kind::Network => net.on(&ev.method, &ev.params, args.url_filter.as_deref()),
            Kind::Console => {
                if let Some(m) = console_record(&ev.method, &ev.params)
                    && args.url_filter.as_ref().is_none_or(|f| m["url"].as_str().is_some_and(|u| u.contains(f.as_str())))
                {
                    if messages.len() < max {
                        messages.push(m);
                    } else {
                        truncated = true;
                    }
                }
            }
        }
    }
    let mut out = Map::new();
    out.insert("page".into(), page_json(&page, false));
    out.insert("durationMs".into(), json!(duration.as_millis() as u64));
    out.insert("script".into(), script_result);
    match kind {
        Kind::Network => {
            truncated = net.order.len() > max;
            net.order.truncate(max);
            if args.include_response_body == Some(true) {
                let cap = args.body_max_bytes.unwrap_or(DEFAULT_BODY_MAX_BYTES);
                for id in net.order.clone() {
                    // A response that arrived (finished or still streaming); failed ones have no body.
                    let answered = net.by_id.get(&id).is_some_and(|r| !r["status"].is_null() && r["failed"] != json!(true));
                    if !answered || budget.deadline.remaining() < REPLY_MARGIN {
                        continue;
                    }
                    let b = cdp.call_with_timeout("Network.getResponseBody", json!({"requestId": id}), None, step.min(budget.deadline.remaining().saturating_sub(REPLY_MARGIN / 2))).await;
                    let rec = net.by_id.get_mut(&id).expect("recorded");
                    match b {
                        Ok(b) => {
                            let body = b["body"].as_str().unwrap_or_default();
                            let mut end = body.len().min(cap);
                            while !body.is_char_boundary(end) {
                                end -= 1;
                            }
                            rec["responseBody"] = json!(&body[..end]);
                            rec["responseBodyTruncated"] = json!(end < body.len());
                            rec["base64Encoded"] = b["base64Encoded"].clone();
                        }
                        Err(e) => rec["responseBodyError"] = json!(e.to_string()),
                    }
                }
            }
            let requests: Vec<Value> = net.order.iter().filter_map(|id| net.by_id.get(id).cloned()).collect();
            out.insert("count".into(), json!(requests.len()));
            out.insert("requests".into(), Value::Array(requests));
        }
        Kind::Console => {
            out.insert("count".into(), json!(messages.len()));
            out.insert("messages".into(), Value::Array(messages));
        }
    }
    out.insert("truncated".into(), json!(truncated));
    cdp.close().await;
    Ok(out)
}

/// Requests by CDP requestId, in the order they started.
#[derive(Default)]
struct Network {
    order: Vec<String>,
    by_id: std::collections::HashMap<String, Value>,
}

impl Network {
    fn on(&mut self, method: &str, p: &Value, url_filter: Option<&str>) {
        let Some(id) = p["requestId"].as_str() else { return };
        match method {
            "Network.requestWillBeSent" => {
                let url = p["request"]["url"].as_str().unwrap_or_default();
                if url_filter.is_some_and(|f| !url.contains(f)) || url.starts_with("data:") {
                    return;
                }
                if !self.by_id.contains_key(id) {
                    self.order.push(id.to_string());
                }
                self.by_id.insert(
                    id.to_string(),
                    json!({
                        "requestId": id,
                        "url": url,
                        "method": p["request"]["method"],
                        "resourceType": p["type"],
                        "requestBody": p["request"].get("postData").cloned().unwrap_or(Value::Null),
                        "startedAtMs": p["wallTime"].as_f64().map(|t| (t * 1000.0) as u64),
                        "status": null,
                        "mimeType": null,
                        "finished": false,
                        "failed": false,
                    }),
                );
            }
            "Network.responseReceived" => {
                if let Some(r) = self.by_id.get_mut(id) {
                    r["status"] = p["response"]["status"].clone();
                    r["statusText"] = p["response"]["statusText"].clone();
                    r["mimeType"] = p["response"]["mimeType"].clone();
                    r["remoteAddress"] = json!(format!("{}:{}", p["response"]["remoteIPAddress"].as_str().unwrap_or_default(), p["response"]["remotePort"]));
                }
            }
            "Network.loadingFinished" => {
                if let Some(r) = self.by_id.get_mut(id) {
                    r["finished"] = json!(true);
                    r["encodedDataLength"] = p["encodedDataLength"].clone();
                }
            }
            "Network.loadingFailed" => {
                if let Some(r) = self.by_id.get_mut(id) {
                    r["failed"] = json!(true);
                    r["errorText"] = p["errorText"].clone();
                }
            }
            _ => {}
        }
    }
}

fn arg_text(a: &Value) -> String {
    match a.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(v) if !v.is_null() || a["type"] == json!("object") && a["subtype"] == json!("null") => v.to_string(),
        _ => a.get("unserializableValue").or_else(|| a.get("description")).and_then(Value::as_str).unwrap_or(a["type"].as_str().unwrap_or_default()).to_string(),
    }
}

/// A console API call, a log entry or an uncaught exception as one record.
fn console_record(method: &str, p: &Value) -> Option<Value> {
    match method {
        "Runtime.consoleAPICalled" => {
            let args = p["args"].as_array().cloned().unwrap_or_default();
            let frame = &p["stackTrace"]["callFrames"][0];
            Some(json!({
                "source": "console-api",
                "level": p["type"],
                "text": args.iter().map(arg_text).collect::<Vec<_>>().join(" "),
                "url": frame.get("url").cloned().unwrap_or(Value::Null),
                "line": frame.get("lineNumber").cloned().unwrap_or(Value::Null),
                "timestampMs": p["timestamp"].as_f64().map(|t| t as u64),
            }))
        }
        "Log.entryAdded" => {
            let e = &p["entry"];
            Some(json!({"source": e["source"], "level": e["level"], "text": e["text"], "url": e.get("url").cloned().unwrap_or(Value::Null), "line": e.get("lineNumber").cloned().unwrap_or(Value::Null), "timestampMs": e["timestamp"].as_f64().map(|t| t as u64)}))
        }
        "Runtime.exceptionThrown" => {
            let d = &p["exceptionDetails"];
            let text = d["exception"]["description"].as_str().or_else(|| d["text"].as_str()).unwrap_or_default();
            Some(json!({"source": "exception", "level": "error", "text": text, "url": d.get("url").cloned().unwrap_or(Value::Null), "line": d.get("lineNumber").cloned().unwrap_or(Value::Null), "timestampMs": p["timestamp"].as_f64().map(|t| t as u64)}))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_events_make_one_record_per_request_in_start_order() {
        let mut n = Network::default();
        n.on("Network.requestWillBeSent", &json!({"requestId": "2", "request": {"url": "http://h/api/echo", "method": "POST", "postData": "{}"}, "type": "Fetch", "wallTime": 1.5}), None);
        n.on("Network.requestWillBeSent", &json!({"requestId": "3", "request": {"url": "http://h/skip", "method": "GET"}}), Some("/api/"));
        n.on("Network.responseReceived", &json!({"requestId": "2", "response": {"status": 200, "statusText": "OK", "mimeType": "application/json"}}), None);
        n.on("Network.loadingFinished", &json!({"requestId": "2", "encodedDataLength": 10}), None);
        n.on("Network.loadingFailed", &json!({"requestId": "9", "errorText": "x"}), None);
        assert_eq!(n.order, ["2"]);
        let r = &n.by_id["2"];
        assert_eq!((r["method"].clone(), r["status"].clone(), r["finished"].clone(), r["requestBody"].clone(), r["startedAtMs"].clone()), (json!("POST"), json!(200), json!(true), json!("{}"), json!(1500)));
    }

    #[test]
    fn console_records_join_their_arguments() {
        let r = console_record("Runtime.consoleAPICalled", &json!({"type": "log", "args": [{"type": "string", "value": "a"}, {"type": "number", "value": 42}, {"type": "object", "description": "Object"}], "timestamp": 12.9})).unwrap();
        assert_eq!((r["level"].clone(), r["text"].clone(), r["timestampMs"].clone()), (json!("log"), json!("a 42 Object"), json!(12)));
        assert!(console_record("Network.dataReceived", &json!({})).is_none());
    }
}
