//! The command implementations. Arguments arrive validated by the host; this module
//! maps each command onto provider state and the page protocol, following the
//! managed execution order for mutations: record the pending action (durable when
//! the host gives a dataDir) → `ctx.mark_dispatched()` → send the `command` frame →
//! settle only on the page's persisted `completion`. Waiting honours the call's
//! remaining budget and cancellation; the provider answers a little before the host
//! deadline so its own, more precise error (`web_command_timeout`) reaches the caller.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::capture::{BARRIER_STREAM, CAPTURE_STREAM, DOM_STREAM, capture_key};
use crate::execution::{ActionRecord, State};
use crate::facts::{AppendError, MEMORY_STORE, Mode};
use crate::ids::{now_ms, sha256_hex, uuid_v4};
use crate::server::{self, SDK_PATH, StartConfig};
use crate::state::{Conn, Shared, lock};
pub(crate) use crate::command_list::{CaptureArgs, DomArgs, ExecutionArgs, RawCommandArgs, SessionStartArgs, StatusArgs, Target, UiObservationArgs};
use crate::wire::{self, CAPTURE_SCHEMA, CAPTURE_WINDOW_SCHEMA, DOM_TARGET_SCHEMA, EXECUTION_SCHEMA, PROTOCOL, TARGET_ID};

fn arg_str<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// How long before the host deadline the provider gives up waiting itself.
fn margin(ctx: &Context<'_>) -> Duration {
    (ctx.remaining() / 10).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

pub enum Waited<T> {
    Done(T),
    /// The page's socket closed (or the reply channel was dropped).
    Lost,
    /// The budget (host deadline minus margin) ran out.
    Deadline,
    Cancelled,
}

/// Wait for `fut` while committing captures that arrive meanwhile, honouring the
/// call's deadline and cancellation.
async fn wait_page<T>(shared: &Shared, ctx: &Context<'_>, fut: impl Future<Output = Option<T>>, closed: &mut watch::Receiver<bool>, margin: Duration) -> Waited<T> {
    let deadline = tokio::time::Instant::now() + ctx.remaining().saturating_sub(margin);
    let mut fut = pin!(fut);
    loop {
        tokio::select! {
            biased;
            v = &mut fut => return match v { Some(v) => Waited::Done(v), None => Waited::Lost },
            _ = closed.wait_for(|c| *c) => return Waited::Lost,
            _ = tokio::time::sleep_until(deadline) => return Waited::Deadline,
            _ = shared.captures.ingress_ready() => shared.captures.pump(&shared.facts, &shared.exec, ctx).await,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                if ctx.is_cancelled() {
                    return Waited::Cancelled;
                }
            }
        }
    }
}

/// One-time setup with the first call's context: `host.info` (dataDir), the
/// execution table and the FactStore probe.
pub fn init(shared: &Shared, ctx: &Context<'_>) {
    if lock(&shared.host_info).is_some() {
        return;
    }
    let info = ctx.host();
    let usable = ctx.data_dir().filter(|d| {
        if std::fs::create_dir_all(d).is_err() {
            return false;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700));
        }
        true
    });
    shared.exec.configure(usable.as_deref());
    shared.facts.probe(ctx);
    *lock(&shared.host_info) = Some(serde_json::to_value(&info).unwrap_or(Value::Null));
}

/// Work every command does first: one-time setup and committing captures that
/// arrived since the last call.
pub async fn prologue(shared: &Shared, ctx: &Context<'_>) {
    init(shared, ctx);
    shared.captures.pump(&shared.facts, &shared.exec, ctx).await;
}

// ------------------------------------------------------------------ endpoint

fn connect_json(s: &crate::state::ServerInfo) -> Value {
    let base = s.http_base();
    json!({
        "ok": true,
        "running": true,
        "protocol": PROTOCOL,
        "endpoint": s.endpoint(),
        "token": s.token,
        "host": s.host,
        "port": s.port,
        "path": s.path,
        "providerEpoch": s.provider_epoch,
        "startedAtMs": s.started_at_ms,
        "sdkUrl": format!("{base}{SDK_PATH}"),
        "healthUrl": format!("{base}/health"),
        "sessionsUrl": format!("{base}/sessions"),
        "sampleAppUrl": s.sample_app.then(|| format!("{base}/sample/")),
        "originPolicy": s.origins.to_json(),
        "limits": wire::limits(&s.keep_alive),
    })
}

pub(crate) async fn session_start(shared: &Arc<Shared>, ctx: &Context<'_>, args: SessionStartArgs) -> Result<Value, ProviderError> {
    let host = args.host.unwrap_or_else(|| wire::DEFAULT_HOST.to_string());
    let port = args.web_port.unwrap_or(wire::DEFAULT_PORT);
    let path = args.path.unwrap_or_else(|| wire::DEFAULT_PATH.to_string());
    let sample_app = args.sample_app.unwrap_or(false);
    let allowed_origins: Vec<String> = args.allowed_origins.unwrap_or_default();
    let ms = |v: Option<u64>, default: Duration| v.map(Duration::from_millis).unwrap_or(default);
    let defaults = wire::KeepAlive::default();
    let keep_alive = wire::KeepAlive {
        ping_interval: ms(args.ping_interval_ms, defaults.ping_interval),
        idle_timeout: ms(args.idle_timeout_ms, defaults.idle_timeout),
        handshake_timeout: ms(args.handshake_timeout_ms, defaults.handshake_timeout),
        header_timeout: ms(args.header_timeout_ms, defaults.header_timeout),
    };
    let timers_given = [args.ping_interval_ms, args.idle_timeout_ms, args.handshake_timeout_ms, args.header_timeout_ms].iter().any(Option::is_some);
    {
        let server = lock(&shared.server);
        if let Some(s) = server.as_ref() {
            let same = s.host == host
                && (port == 0 || s.port == port)
                && s.path == path
                && args.token.as_deref().is_none_or(|t| t == s.token)
                && (!sample_app || s.sample_app)
                && allowed_origins.iter().all(|o| o == "*" && s.origins.any || crate::origin::normalise(o).is_some_and(|o| s.origins.allowed.contains(&o)))
                && (!timers_given || s.keep_alive == keep_alive);
            if same {
                let mut v = connect_json(s);
                v["reused"] = json!(true);
                return Ok(v);
            }
            return Err(ProviderError::new("web_provider_running", format!("the Web endpoint already runs at {}; stop it first to change its settings", s.endpoint()))
                .with_details(json!({"endpoint": s.endpoint()}))
                .not_dispatched());
        }
    }
    let token = match args.token {
        Some(t) => t,
        None => crate::ids::token().map_err(|e| ProviderError::new("web_token_unavailable", e).not_dispatched())?,
    };
    ctx.mark_dispatched();
    let env_origins = std::env::var(crate::origin::ENV_ALLOWED_ORIGINS).ok();
    let info = server::start(shared.clone(), StartConfig { host, port, path, token, sample_app, allowed_origins, env_origins, keep_alive }).await?;
    let mut server = lock(&shared.server);
    if let Some(existing) = server.as_ref() {
        // A concurrent start won the race: keep its endpoint, retire this one.
        let _ = info.shutdown.send(true);
        let mut v = connect_json(existing);
        v["reused"] = json!(true);
        return Ok(v);
    }
    let mut v = connect_json(&info);
    v["reused"] = json!(false);
    *server = Some(info);
    Ok(v)
}

pub(crate) fn session_stop(shared: &Shared, ctx: &Context<'_>) -> Value {
    let Some(info) = lock(&shared.server).take() else {
        return json!({"ok": true, "running": false, "stopped": false});
    };
    ctx.mark_dispatched();
    let connected = lock(&shared.sessions).values().filter(|s| s.conn.is_some()).count();
    shared.disconnect_all();
    let _ = info.shutdown.send(true);
    json!({"ok": true, "running": false, "stopped": true, "endpoint": info.endpoint(), "disconnected": connected, "execution": shared.exec.status()})
}

pub(crate) fn connect_info(shared: &Shared) -> Result<Value, ProviderError> {
    match lock(&shared.server).as_ref() {
        Some(s) => Ok(connect_json(s)),
        None => Err(ProviderError::new("web_provider_not_running", "the Web endpoint is not running; start it with `web-session-start`").not_dispatched()),
    }
}

pub(crate) fn provider_status(shared: &Shared) -> Value {
    let server = lock(&shared.server);
    let sessions = lock(&shared.sessions);
    json!({
        "ok": true,
        "running": server.is_some(),
        "protocol": PROTOCOL,
        "endpoint": server.as_ref().map(|s| s.endpoint()),
        "providerEpoch": server.as_ref().map(|s| s.provider_epoch.clone()),
        "startedAtMs": server.as_ref().map(|s| s.started_at_ms),
        "sampleApp": server.as_ref().map(|s| s.sample_app),
        "sockets": shared.socket_count(),
        "sessions": sessions.len(),
        "connected": sessions.values().filter(|s| s.conn.is_some()).count(),
        "limits": wire::limits(&server.as_ref().map(|s| s.keep_alive).unwrap_or_default()),
        "originPolicy": server.as_ref().map(|s| s.origins.to_json()),
        "endpointStats": shared.endpoint_stats.to_json(),
        "execution": shared.exec.status(),
        "facts": shared.facts.status(),
        "ingressQueued": shared.captures.queued(),
        "sampleSubmissions": shared.sample.count(),
        "host": lock(&shared.host_info).clone(),
    })
}

pub(crate) fn sessions(shared: &Shared) -> Value {
    let running = lock(&shared.server).is_some();
    let list = shared.sessions_json();
    json!({"ok": true, "running": running, "count": list.len(), "sessions": list})
}

pub(crate) fn status(shared: &Shared, args: &StatusArgs) -> Result<Value, ProviderError> {
    let session_id = args.target.session_id.as_str();
    let Some(mut session) = shared.session_json(session_id) else {
        return Err(ProviderError::new("web_session_not_found", format!("no page with sessionId {session_id:?} is known")).with_field("sessionId").not_dispatched());
    };
    let open: Vec<Value> = shared
        .exec
        .list(session_id)
        .iter()
        .filter(|r| r.open())
        .map(|r| json!({"actionId": r.action_id, "state": r.state, "command": r.command, "runtimeEpoch": r.runtime_epoch}))
        .collect();
    session["ok"] = json!(true);
    session["openActions"] = json!(open);
    if let Some(epoch) = args.target.runtime_epoch.as_deref() {
        session["targetMatches"] = json!(session.get("runtimeEpoch").and_then(Value::as_str) == Some(epoch) && session["connected"] == json!(true));
    }
    Ok(session)
}

// ------------------------------------------------------------------ reads

/// Send one `read` and wait for its `response` result.
async fn read(shared: &Shared, ctx: &Context<'_>, conn: &Conn, name: &str, args: Value) -> Result<Value, ProviderError> {
    let m = margin(ctx);
    let mut request = conn.request("read", json!({"name": name, "args": args}))?;
    let mut closed = request.closed.clone();
    let reply = &mut request.reply;
    match wait_page(shared, ctx, async move { reply.await.ok() }, &mut closed, m).await {
        Waited::Done(v) => Ok(v),
        Waited::Lost => Err(ProviderError::new("web_connection_lost", format!("the page disconnected before answering `{name}`")).not_dispatched()),
        Waited::Deadline => Err(ProviderError::new("web_command_timeout", format!("the page did not answer `{name}` within the deadline"))
            .with_details(json!({"read": name, "timeoutMs": ctx.remaining().as_millis() as u64}))
            .not_dispatched()),
        Waited::Cancelled => Err(ProviderError::new("cancelled", format!("`{name}` was cancelled")).not_dispatched()),
    }
}

/// A page result `{ok:false, error, ...}` as a provider error.
fn page_error(result: &Value, fallback: &str) -> ProviderError {
    let code = arg_str(result, "error").filter(|c| !c.is_empty()).unwrap_or(fallback).to_string();
    let message = arg_str(result, "message").unwrap_or("the page refused the request").to_string();
    let mut e = ProviderError::new(code, message);
    let mut details = result.get("details").cloned().unwrap_or_else(|| json!({}));
    if let Some(d) = details.as_object_mut() {
        for key in ["candidates", "interaction", "resolved", "expected", "actual"] {
            if let Some(v) = result.get(key) {
                d.entry(key).or_insert(v.clone());
            }
        }
    }
    e.details = Some(details);
    e
}

pub(crate) async fn dom(shared: &Shared, ctx: &Context<'_>, args: &DomArgs) -> Result<Value, ProviderError> {
    let (session_id, runtime_epoch) = args.target.page()?;
    if args.history == Some(true) {
        return dom_history(shared, ctx, args, session_id);
    }
    let conn = shared.target(session_id, runtime_epoch)?;
    let mut read_args = json!({"maxControls": args.max_controls.unwrap_or(150)});
    if let Some(sel) = &args.selector {
        read_args["selector"] = json!(sel);
    }
    let result = read(shared, ctx, &conn, "domSnapshot", read_args).await?;
    if result.get("ok") != Some(&Value::Bool(true)) {
        return Err(page_error(&result, "web_dom_snapshot_failed").not_dispatched());
    }
    let dom = result.get("dom").cloned().unwrap_or(Value::Null);
    crate::dom::check_snapshot(&dom, session_id, runtime_epoch)?;
    let page_ref = dom["pageRef"].clone();
    // A compact observation summary is retained for `web-dom --history`.
    let summary = json!({
        "schemaVersion": "aab.web-dom-observation/v1",
        "sessionId": session_id,
        "runtimeEpoch": runtime_epoch,
        "pageRef": page_ref,
        "title": dom.get("title"),
        "url": dom.get("url"),
        "controlCount": dom.get("controlCount"),
        "truncated": dom.get("truncated"),
        "domSha256": sha256_hex(dom.to_string().as_bytes()),
        "observedAtMs": now_ms(),
    });
    let observation = match shared.facts.append(Some(ctx), DOM_STREAM, session_id, &summary) {
        Ok(r) => json!({"stored": true, "source": shared.facts.store_name(), "sequence": r.sequence}),
        Err(AppendError::Failed(e)) => json!({"stored": false, "error": e.error}),
        Err(AppendError::NeedsContext) => json!({"stored": false}),
    };
    Ok(json!({
        "ok": true,
        "webTargetSchema": DOM_TARGET_SCHEMA,
        "pageRef": page_ref,
        "dom": dom,
        "target": wire::target(session_id, runtime_epoch),
        "observation": observation,
    }))
}

fn history_coverage(shared: &Shared) -> Value {
    let memory = shared.facts.mode() != Mode::Host;
    json!({
        "status": if memory { "unavailable" } else { "partial" },
        "scope": "retained-host-history",
        "committed": !memory,
        "gap": false,
        "store": shared.facts.store_name(),
        "reasons": if memory { json!(["host_fact_store_unavailable", "retained_host_history"]) } else { json!(["retained_host_history"]) },
    })
}

fn dom_history(shared: &Shared, ctx: &Context<'_>, args: &DomArgs, session_id: &str) -> Result<Value, ProviderError> {
    let after: u64 = args.cursor.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
    let through: Option<u64> = args.through_cursor.as_deref().and_then(|c| c.parse().ok());
    let limit = args.limit.unwrap_or(16) as usize;
    let since = args.since_ms.unwrap_or(0);
    let page = shared.facts.read(ctx, DOM_STREAM, session_id, after, limit)?;
    let upper = through.unwrap_or_else(|| page.records.last().map(|r| r.sequence).unwrap_or(after).max(page.next_sequence));
    let records: Vec<Value> = page
        .records
        .iter()
        .filter(|r| r.sequence <= upper)
        .filter(|r| r.record.get("observedAtMs").and_then(Value::as_u64).unwrap_or(0) >= since)
        .map(|r| json!({"factSequence": r.sequence, "committedAtMs": r.committed_at_ms, "observation": r.record}))
        .collect();
    let has_more = page.has_more;
    Ok(json!({
        "ok": true,
        "history": true,
        "webTargetSchema": DOM_TARGET_SCHEMA,
        "records": records,
        "count": records.len(),
        "hasMore": has_more,
        "nextCursor": has_more.then(|| page.next_sequence.to_string()),
        "throughCursor": upper.to_string(),
        "coverage": history_coverage(shared),
    }))
}

// ------------------------------------------------------------------ UI observation

pub const UI_OBSERVATION_SCHEMA: &str = "aab.ui-observation/v1";

/// `web-ui-observation`: an on-demand UI observation lease on the page (reference
/// §4.9 contract shared with Android and iOS). The page samples its UI into the
/// `events` capture stream while the lease runs; read them with `web-events`.
pub(crate) async fn ui_observation(shared: &Shared, ctx: &Context<'_>, args: &UiObservationArgs) -> Result<Value, ProviderError> {
    let (session_id, runtime_epoch) = args.target.page()?;
    let operation = args.operation.as_str();
    let conn = shared.target(session_id, runtime_epoch)?;
    let mut read_args = json!({"operation": operation});
    if let Some(v) = args.duration_ms {
        read_args["durationMs"] = json!(v);
    }
    if let Some(v) = &args.lease_id {
        read_args["leaseId"] = json!(v);
    }
    let mutates = operation != "status";
    if mutates {
        ctx.mark_dispatched();
    }
    let reply = match read(shared, ctx, &conn, "uiObservation", read_args).await {
        Ok(r) => r,
        // The request left: a start or stop may have taken effect on the page.
        Err(mut e) if mutates && e.error != "web_pending_limit" && e.error != "web_transport_capacity" && e.error != "web_target_disconnected" => {
            e.dispatched = None;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if reply.get("ok") != Some(&Value::Bool(true)) {
        let mut e = if arg_str(&reply, "error") == Some("unknown_web_read") {
            ProviderError::new("web_ui_observation_unsupported", "the page's Web SDK has no UI observation; update ai-app-bridge-web.js")
        } else {
            page_error(&reply, "web_ui_observation_failed")
        };
        if e.error == "invalid_ui_observation_duration" {
            e = e.with_field("durationMs");
        } else if e.error == "ui_observation_lease_mismatch" {
            e = e.with_field("leaseId");
        }
        return Err(e.not_dispatched());
    }
    if arg_str(&reply, "schemaVersion") != Some(UI_OBSERVATION_SCHEMA) || reply.get("target") != Some(&wire::target(session_id, runtime_epoch)) {
        return Err(ProviderError::new("invalid_web_ui_observation", "the page's observation reply has the wrong schema or target").not_dispatched());
    }
    let mut value = reply;
    value["operation"] = json!(operation);
    value["stream"] = json!("events");
    Ok(value)
}

// ------------------------------------------------------------------ actions

/// A page completion as the public result (or error).
fn settle(shared: &Shared, completion: Value) -> Result<Value, ProviderError> {
    let action_id = arg_str(&completion, "actionId").unwrap_or_default().to_string();
    let receipt = json!({
        "schemaVersion": EXECUTION_SCHEMA,
        "actionId": action_id,
        "state": "settled",
        "persistence": shared.exec.persistence(),
    });
    if completion.get("ok") == Some(&Value::Bool(true)) {
        let mut v = completion;
        v["executionReceipt"] = receipt;
        v["ambiguous"] = json!(false);
        return Ok(v);
    }
    let mut e = page_error(&completion, "web_action_failed");
    if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut) {
        d.insert("actionId".into(), json!(action_id));
        d.insert("executionReceipt".into(), receipt);
        d.insert("settled".into(), json!(true));
    }
    // The page states whether it issued permission for the effect.
    e.dispatched = Some(completion.get("dispatched").and_then(Value::as_bool).unwrap_or(true));
    Err(e)
}

/// Run one managed action on the page and wait for its terminal result.
///
/// `wait_budget`: the page's `waitFor` lasts the command's whole budget (`web-wait`).
pub(crate) async fn action(shared: &Shared, ctx: &Context<'_>, inv: &Invocation, target: &Target, page_command: &str, mut args: Value, wait_budget: bool) -> Result<Value, ProviderError> {
    let (session_id, runtime_epoch) = target.page()?;
    let conn = shared.target(session_id, runtime_epoch)?;
    if let Some(page_ref) = args.pointer("/expectedTarget/pageRef")
        && (arg_str(page_ref, "sessionId") != Some(session_id) || arg_str(page_ref, "runtimeEpoch") != Some(runtime_epoch))
    {
        return Err(ProviderError::new("web_target_changed", "expectedTarget.pageRef names another session or document than sessionId/runtimeEpoch")
            .with_field("expectedTarget.pageRef")
            .not_dispatched());
    }
    let m = margin(ctx);
    let page_budget = ctx.remaining().saturating_sub(m * 2).max(Duration::from_millis(1));
    let page_timeout_ms = page_budget.as_millis().max(1) as u64;
    if wait_budget {
        // The wait lasts the command's budget; a short poll keeps it responsive.
        args["timeoutMs"] = json!(page_timeout_ms);
        args["intervalMs"] = json!(100);
    }
    let action_id = inv.action_id.clone();
    let record = ActionRecord::new(&action_id, &inv.runtime_epoch, session_id, runtime_epoch, conn.connection_id(), &inv.command, page_command);
    // Pending record first (durable with a dataDir), then the dispatch mark, then the frame.
    let completion = shared.exec.begin(record)?;
    ctx.mark_dispatched();
    let payload = wire::command_payload(page_command, args, session_id, runtime_epoch, &action_id, page_timeout_ms);
    let mut request = match conn.request("command", payload) {
        Ok(r) => r,
        Err(e) => {
            shared.exec.rejected(&action_id, json!({"error": e.error, "message": e.message, "stage": "send"}));
            // The frame never left the provider: certainly not dispatched.
            return Err(e.not_dispatched());
        }
    };
    shared.exec.sent(&action_id);
    let mut closed = request.closed.clone();
    let mut completion = completion;
    // Set once the response channel delivered (or closed): a oneshot must not be
    // polled again after that.
    let mut response_done = false;
    enum Got {
        Completion(Value),
        Rejection(Value),
    }
    loop {
        let next = async {
            loop {
                tokio::select! {
                    c = &mut completion => return c.ok().map(Got::Completion),
                    r = &mut request.reply, if !response_done => match r {
                        Ok(v) => {
                            response_done = true;
                            return Some(Got::Rejection(v));
                        }
                        // Closes with the socket; the closed signal reports that.
                        Err(_) => response_done = true,
                    },
                }
            }
        };
        match wait_page(shared, ctx, next, &mut closed, m).await {
            Waited::Done(Got::Completion(c)) => return settle(shared, c),
            Waited::Done(Got::Rejection(r)) => {
                if r.get("dispatched") == Some(&Value::Bool(false)) && r.get("ok") == Some(&Value::Bool(false)) {
                    shared.exec.rejected(&action_id, r.clone());
                    let mut e = page_error(&r, "web_action_rejected");
                    if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut) {
                        d.insert("actionId".into(), json!(action_id));
                    }
                    return Err(e.not_dispatched());
                }
                // Only non-dispatch refusals may travel as `response`; anything else
                // is ignored and the completion is still awaited.
            }
            Waited::Lost => {
                let r = shared.exec.abandon(&action_id, "web_connection_lost");
                return Err(ProviderError::new(
                    "web_connection_lost",
                    "the page disconnected after the action was sent; its outcome is unknown until the page reports it (`web-execution --operation reconcile`)",
                )
                .with_details(json!({"actionId": action_id, "execution": r.map(|r| r.to_json())})));
            }
            Waited::Deadline | Waited::Cancelled => {
                let cancelled = ctx.is_cancelled();
                // Ask the page to stop; a later completion still settles the record.
                let _ = conn.send(json!({"type": "cancel", "requestId": crate::ids::hex32(), "payload": {"actionId": action_id, "runtimeEpoch": runtime_epoch}}));
                shared.exec.note_cancel(&action_id);
                let r = shared.exec.abandon(&action_id, if cancelled { "cancelled" } else { "web_command_timeout" });
                let (code, message) = if cancelled {
                    ("cancelled", "the call was cancelled after the action was sent; its outcome is unknown")
                } else {
                    ("web_command_timeout", "the page did not complete the action within the deadline; its outcome is unknown until the page reports it")
                };
                return Err(ProviderError::new(code, message).with_details(json!({"actionId": action_id, "pageTimeoutMs": page_timeout_ms, "execution": r.map(|r| r.to_json())})));
            }
        }
    }
}

pub(crate) async fn raw_command(shared: &Shared, ctx: &Context<'_>, inv: &Invocation, args: RawCommandArgs) -> Result<Value, ProviderError> {
    let page_arguments = Value::Object(args.arguments.unwrap_or_default());
    if args.name == "domSnapshot" {
        let (session_id, runtime_epoch) = args.target.page()?;
        let conn = shared.target(session_id, runtime_epoch)?;
        return read(shared, ctx, &conn, "domSnapshot", page_arguments).await;
    }
    action(shared, ctx, inv, &args.target, &args.name, page_arguments, false).await
}

// ------------------------------------------------------------------ web-execution

fn execution_view(r: &ActionRecord) -> Value {
    let mut v = r.to_json();
    v["settled"] = json!(r.state == State::Settled || r.state == State::Rejected);
    v
}

pub(crate) async fn execution(shared: &Shared, ctx: &Context<'_>, args: &ExecutionArgs) -> Result<Value, ProviderError> {
    let (session_id, runtime_epoch) = args.target.page()?;
    let operation = args.operation.as_str();
    let action_id = args.action_id.as_deref();
    let find = |id: &str| {
        shared.exec.get(id).filter(|r| r.session_id == session_id).ok_or_else(|| {
            ProviderError::new("web_execution_not_found", format!("no action {id} is recorded for session {session_id}")).with_field("actionId").not_dispatched()
        })
    };
    match operation {
        "status" => {
            let list: Vec<Value> = match action_id {
                Some(id) => vec![execution_view(&find(id)?)],
                None => shared.exec.list(session_id).iter().rev().take(50).map(execution_view).collect(),
            };
            Ok(json!({"ok": true, "operation": "status", "sessionId": session_id, "runtimeEpoch": runtime_epoch, "actions": list,
                      "persistence": shared.exec.persistence()}))
        }
        "result" => {
            let r = find(action_id.unwrap_or_default())?;
            let settled = r.state == State::Settled || r.state == State::Rejected;
            Ok(json!({
                "ok": true,
                "operation": "result",
                "actionId": r.action_id,
                "state": r.state,
                "settled": settled,
                "result": r.completion.clone().or(r.rejection.clone()),
                "execution": execution_view(&r),
            }))
        }
        "cancel" => {
            let r = find(action_id.unwrap_or_default())?;
            if !r.open() {
                return Ok(json!({"ok": true, "operation": "cancel", "actionId": r.action_id, "cancelRequested": false, "state": r.state, "settled": true}));
            }
            let conn = shared.target(session_id, &r.runtime_epoch)?;
            ctx.mark_dispatched();
            conn.send(json!({"type": "cancel", "requestId": crate::ids::hex32(), "payload": {"actionId": r.action_id, "runtimeEpoch": r.runtime_epoch}}))
                .map_err(ProviderError::not_dispatched)?;
            shared.exec.note_cancel(&r.action_id);
            Ok(json!({"ok": true, "operation": "cancel", "actionId": r.action_id, "cancelRequested": true, "state": r.state, "settled": false}))
        }
        _ => {
            // reconcile: completions are persisted the moment they arrive (also when
            // a page resends them after reconnecting); report where each open action
            // stands now and mirror settled ones into the FactStore.
            shared.captures.pump(&shared.facts, &shared.exec, ctx).await;
            let records: Vec<ActionRecord> = match action_id {
                Some(id) => vec![find(id)?],
                None => shared.exec.list(session_id).into_iter().filter(|r| r.open() || r.unresolved_reason.is_some()).collect(),
            };
            let connected = shared.target(session_id, runtime_epoch).is_ok();
            let actions: Vec<Value> = records.iter().map(execution_view).collect();
            let unresolved = records.iter().filter(|r| r.open()).count();
            Ok(json!({
                "ok": true,
                "operation": "reconcile",
                "sessionId": session_id,
                "connected": connected,
                "resolved": records.len() - unresolved,
                "unresolved": unresolved,
                "settled": unresolved == 0,
                "actions": actions,
                "persistence": shared.exec.persistence(),
            }))
        }
    }
}

// ------------------------------------------------------------------ capture reads

fn parse_barrier_reply(v: &Value, stream: &str, session_id: &str, runtime_epoch: &str) -> Result<(u64, u64, u64), ProviderError> {
    let bad = |why: &str| ProviderError::new("invalid_web_capture_barrier", format!("the page's capture barrier reply is invalid: {why}")).not_dispatched();
    if v.get("ok") != Some(&Value::Bool(true)) {
        return Err(page_error(v, "web_capture_barrier_failed").not_dispatched());
    }
    if arg_str(v, "schemaVersion") != Some(CAPTURE_SCHEMA) || arg_str(v, "stream") != Some(stream) {
        return Err(bad("schemaVersion/stream"));
    }
    if v.get("target") != Some(&wire::target(session_id, runtime_epoch)) {
        return Err(bad("target"));
    }
    let n = |k: &str| v.get(k).and_then(Value::as_u64).ok_or_else(|| bad(k));
    Ok((n("sequence")?, n("losses")?, n("pending")?))
}

fn capture_record(r: &crate::facts::Stored) -> Value {
    let rec = &r.record;
    json!({
        "factSequence": r.sequence,
        "committedAtMs": r.committed_at_ms,
        "captureId": rec.get("captureId"),
        "stream": rec.get("stream"),
        "sequence": rec.get("sequence"),
        "runtimeEpoch": rec.get("runtimeEpoch"),
        "connectionId": rec.get("connectionId"),
        "actionId": rec.get("actionId"),
        "association": rec.get("association"),
        "item": rec.get("item"),
    })
}

pub(crate) async fn capture_read(shared: &Shared, ctx: &Context<'_>, args: &CaptureArgs, stream: &str) -> Result<Value, ProviderError> {
    let (session_id, runtime_epoch) = args.target.page()?;
    let history = args.history == Some(true) || args.view.as_deref() == Some("connected-history");
    let limit = args.limit.unwrap_or(16) as usize;
    let cursor: Option<u64> = args.cursor.as_deref().and_then(|c| c.parse().ok());
    let key = capture_key(session_id, stream);
    if history {
        let since = args.since_ms.unwrap_or(0);
        let page = shared.facts.read(ctx, CAPTURE_STREAM, &key, cursor.unwrap_or(0), limit)?;
        let records: Vec<Value> = page
            .records
            .iter()
            .filter(|r| r.record.pointer("/item/timestampMs").and_then(Value::as_f64).unwrap_or(0.0) >= since as f64)
            .map(capture_record)
            .collect();
        let mut coverage = history_coverage(shared);
        coverage["gap"] = json!(page.gap);
        return Ok(json!({
            "ok": true,
            "schemaVersion": CAPTURE_SCHEMA,
            "stream": stream,
            "view": "connected-history",
            "target": wire::target(session_id, runtime_epoch),
            "records": records,
            "count": records.len(),
            "hasMore": page.has_more,
            "nextCursor": page.has_more.then(|| page.next_sequence.to_string()),
            "coverage": coverage,
        }));
    }

    let conn = shared.target(session_id, runtime_epoch)?;
    // Upper bound: a fresh barrier, or the fixed one of a continuation.
    let upper = match (cursor, args.through_cursor.as_deref()) {
        (Some(_), Some(token)) => {
            let b = shared.captures.barrier(&shared.facts, ctx, token).ok_or_else(|| {
                ProviderError::new("invalid_fact_cursor", format!("unknown watermark {token}")).with_field("throughCursor").not_dispatched()
            })?;
            if arg_str(&b, "sessionId") != Some(session_id) || arg_str(&b, "stream") != Some(stream) {
                return Err(ProviderError::new("invalid_fact_cursor", "throughCursor belongs to another session or stream").with_field("throughCursor").not_dispatched());
            }
            b
        }
        _ => take_barrier(shared, ctx, &conn, stream).await?,
    };
    let lower = match args.fact_cursor.as_deref() {
        Some(token) => {
            let b = shared.captures.barrier(&shared.facts, ctx, token).ok_or_else(|| {
                ProviderError::new("invalid_fact_cursor", format!("unknown watermark {token}")).with_field("factCursor").not_dispatched()
            })?;
            if arg_str(&b, "sessionId") != Some(session_id) {
                return Err(ProviderError::new("invalid_fact_cursor", "factCursor belongs to another session").with_field("factCursor").not_dispatched());
            }
            Some(b)
        }
        None => None,
    };
    let upper_fact = upper.pointer(&format!("/streams/{stream}/factSequence")).and_then(Value::as_u64).unwrap_or(0);
    let same_document = |b: &Value| arg_str(b, "runtimeEpoch") == Some(runtime_epoch);
    let lower_fact = match &lower {
        Some(b) => b.pointer(&format!("/streams/{stream}/factSequence")).and_then(Value::as_u64).unwrap_or(0),
        None => shared.captures.document_first_fact(session_id, runtime_epoch, stream).map(|f| f.saturating_sub(1)).unwrap_or(upper_fact),
    };
    let after = cursor.unwrap_or(lower_fact).max(lower_fact);
    let after_action = args.after_action_id.as_deref();
    let page = if after >= upper_fact { crate::facts::Page { next_sequence: after, ..Default::default() } } else { shared.facts.read(ctx, CAPTURE_STREAM, &key, after, limit)? };
    let mut last_scanned = after;
    let mut records = Vec::new();
    for r in page.records.iter().filter(|r| r.sequence <= upper_fact) {
        last_scanned = r.sequence;
        if r.record.get("runtimeEpoch").and_then(Value::as_str) != Some(runtime_epoch) {
            continue;
        }
        if after_action.is_some() && r.record.get("actionId").and_then(Value::as_str) != after_action {
            continue;
        }
        records.push(capture_record(r));
    }
    let has_more = last_scanned < upper_fact && (page.has_more || page.records.iter().any(|r| r.sequence > upper_fact) || page.records.len() == limit);

    // Coverage of (lower, upper] for this document and stream.
    let mut reasons: Vec<&str> = Vec::new();
    let upper_view = &upper["streams"][stream];
    let upper_seq = upper.get("pageSequence").and_then(Value::as_u64).unwrap_or(0);
    let lower_same = lower.as_ref().is_some_and(same_document);
    let lower_seq = if lower_same { lower.as_ref().and_then(|b| b.pointer(&format!("/streams/{stream}/committedThrough"))).and_then(Value::as_u64).unwrap_or(0) } else { 0 };
    let lower_losses = if lower_same { lower.as_ref().and_then(|b| b.pointer(&format!("/streams/{stream}/losses"))).and_then(Value::as_u64).unwrap_or(0) } else { 0 };
    let connection_changed = match &lower {
        Some(b) => !same_document(b) || arg_str(b, "connectionId") != arg_str(&upper, "connectionId"),
        None => shared.captures.document_connections(session_id, runtime_epoch) > 1,
    };
    if connection_changed {
        reasons.push("web_capture_connection_changed");
    }
    let gap = shared.captures.gap(session_id, runtime_epoch, stream, lower_seq, upper_seq) || page.gap;
    if gap {
        reasons.push("web_capture_sequence_gap");
    }
    if upper.get("losses").and_then(Value::as_u64).unwrap_or(0) > lower_losses {
        reasons.push("web_capture_loss");
    }
    if upper.get("pending").and_then(Value::as_u64).unwrap_or(0) > 0 {
        reasons.push("web_capture_pending");
    }
    let committed = shared.facts.mode() == Mode::Host;
    if !committed {
        reasons.push("host_fact_store_unavailable");
    }
    let status = if !committed {
        "unavailable"
    } else if reasons.is_empty() {
        "complete"
    } else {
        "partial"
    };
    let token = arg_str(&upper, "token").unwrap_or_default().to_string();
    Ok(json!({
        "ok": true,
        "schemaVersion": CAPTURE_SCHEMA,
        "stream": stream,
        "view": "decision-window",
        "target": wire::target(session_id, runtime_epoch),
        "records": records,
        "count": records.len(),
        "hasMore": has_more,
        "nextCursor": has_more.then(|| last_scanned.to_string()),
        "factCursor": lower.as_ref().and_then(|b| b.get("token")).cloned(),
        "afterActionId": after_action,
        "watermarkCursor": token,
        "throughCursor": token,
        "throughWatermark": upper_fact,
        "coverage": {
            "status": status,
            "gap": gap,
            "committed": committed,
            "scope": "sdk-captures-through-barrier",
            "store": shared.facts.store_name(),
            "reasons": reasons,
        },
        "barrier": {
            "schemaVersion": CAPTURE_WINDOW_SCHEMA,
            "lower": lower.as_ref().map(|b| json!({"token": b.get("token"), "runtimeEpoch": b.get("runtimeEpoch"), "connectionId": b.get("connectionId"),
                                                   "factSequence": lower_fact, "pageSequence": lower_seq, "losses": lower_losses}))
                .unwrap_or_else(|| json!({"documentStart": true, "factSequence": lower_fact})),
            "upper": {"token": token, "runtimeEpoch": upper.get("runtimeEpoch"), "connectionId": upper.get("connectionId"), "factSequence": upper_fact,
                      "pageSequence": upper_seq, "losses": upper.get("losses"), "pending": upper.get("pending"), "committedThrough": upper_view.get("committedThrough")},
        },
    }))
}

/// Obtain an SDK capture barrier and freeze the upper FactStore cursor the moment
/// its reply arrives (after committing every frame that preceded it).
async fn take_barrier(shared: &Shared, ctx: &Context<'_>, conn: &Conn, stream: &str) -> Result<Value, ProviderError> {
    let session_id = conn.session_id().to_string();
    let runtime_epoch = conn.runtime_epoch().to_string();
    let reply = read(shared, ctx, conn, "captureBarrier", json!({"stream": stream})).await?;
    let (sequence, losses, pending) = parse_barrier_reply(&reply, stream, &session_id, &runtime_epoch)?;
    // Frames that reached the socket before the reply are queued or committed now.
    shared.captures.pump(&shared.facts, &shared.exec, ctx).await;
    shared.captures.note_losses(&session_id, &runtime_epoch, stream, losses);
    let token = format!("wc1:{}", uuid_v4());
    let barrier = json!({
        "schemaVersion": CAPTURE_WINDOW_SCHEMA,
        "token": token,
        "sessionId": session_id,
        "runtimeEpoch": runtime_epoch,
        "targetId": TARGET_ID,
        "connectionId": conn.connection_id(),
        "stream": stream,
        "pageSequence": sequence,
        "losses": losses,
        "pending": pending,
        "streams": shared.captures.streams_view(&session_id, &runtime_epoch),
        "frozenAtMs": now_ms(),
    });
    match shared.facts.append(Some(ctx), BARRIER_STREAM, &token, &barrier) {
        Ok(_) => {}
        Err(AppendError::Failed(e)) if shared.facts.store_name() != MEMORY_STORE => {
            return Err(ProviderError::new("web_capture_barrier_store_failed", format!("the barrier could not be persisted: {}", e.message)).not_dispatched());
        }
        Err(_) => {}
    }
    shared.captures.remember_barrier(&token, &barrier);
    Ok(barrier)
}
