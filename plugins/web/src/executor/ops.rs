//! The operations of `web-executor`. Order for every mutation: everything that
//! can be refused without touching a browser first (`dispatched:false`), then the
//! pending record (fsync'd), `ctx.mark_dispatched()` right before the engine's
//! effect, the effect, and the terminal record (fsync'd) before the reply. An
//! action is settled only when the page proves the event reached the bound
//! element (the renderer's ledger, or CDP's binding); anything less is reported
//! ambiguous, with an `unresolved` record that `receipt` and `reconcile` can
//! settle later from the same proof. Nothing is ever sent twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aab_plugin_api::h5;
use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Value, json};

use super::args::*;
use super::cdp::{self, CdpPage};
use super::engine::{Armed, Engine, EngineError, key_def};
use super::receipts::RECEIPT_SCHEMA;
use super::render::{self, PREFIX, refusal, turn};
use super::schema::{DEFAULT_EVENTS_LIMIT, DEFAULT_LEASE_MS, DEFAULT_MAX_CONTROLS};
use super::session::{EndReason, PageInfo, Session, lock};
use super::webdriver::{self, Offered, WdPage};
use super::{ENV_WEBDRIVER_URL, Executor, MAIN_FRAME, budget, margin, not_dispatched};
use crate::ids::{now_ms, sha256_hex, uuid_v4};

/// How long an action's settlement may look for the delivery proof.
const SETTLE_WINDOW: Duration = Duration::from_millis(2000);
const SETTLE_POLL: Duration = Duration::from_millis(25);
const WAIT_POLL: Duration = Duration::from_millis(100);

pub async fn run(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, args: ExecutorArgs) -> Result<Value, ProviderError> {
    match args {
        ExecutorArgs::Status(a) => status(ex, ctx, inv, a).await,
        ExecutorArgs::Prepare(a) => prepare(ctx, a).await,
        ExecutorArgs::Open(a) => open(ex, ctx, inv, a).await,
        ExecutorArgs::Observe(a) => observe(ex, ctx, inv, a).await,
        ExecutorArgs::Act(a) => act(ex, ctx, inv, a).await,
        ExecutorArgs::Navigate(a) => navigate(ex, ctx, inv, a).await,
        ExecutorArgs::Wait(a) => wait(ex, ctx, inv, a).await,
        ExecutorArgs::Screenshot(a) => screenshot(ex, ctx, inv, a).await,
        ExecutorArgs::Events(a) => events(ex, ctx, a),
        ExecutorArgs::Receipt(a) => receipt(ex, ctx, a).await,
        ExecutorArgs::Close(a) => close(ex, ctx, inv, a).await,
    }
}

// ------------------------------------------------------------------ errors

/// An engine failure as the caller sees it. `marked`: the dispatch mark was
/// set; then a request that may have reached the browser is ambiguous.
pub fn engine_error(e: &EngineError, what: &str, marked: bool) -> ProviderError {
    let (code, message) = match e {
        EngineError::NotSent(m) => ("web_executor_engine_unreachable", format!("{what}: the browser could not be reached: {m}")),
        EngineError::Lost(m) => (if marked { "web_executor_action_lost" } else { "web_executor_engine_timeout" }, format!("{what}: no reply from the browser: {m}")),
        EngineError::Gone { message, .. } => ("web_executor_session_lost", format!("{what}: {message}")),
        EngineError::Refused { error, message } if error == "navigation_failed" => ("web_executor_navigation_failed", format!("{what}: {message}")),
        EngineError::Refused { error, message } => ("web_executor_engine_error", format!("{what}: the engine answered {error}: {message}")),
        EngineError::ScriptUnsupported(m) => ("web_executor_script_unsupported", format!("{what}: this session cannot run page scripts (no DOM observation or actions): {m}")),
        EngineError::Script(m) => ("web_executor_script_failed", format!("{what}: the page script failed: {m}")),
        EngineError::BadReply(m) => ("web_executor_engine_reply_invalid", format!("{what}: {m}")),
    };
    let mut err = ProviderError::new(code, message).with_details(json!({"engineError": e.message()}));
    if !marked || !e.may_have_reached() {
        err = err.not_dispatched();
    }
    err
}

fn renderer_error(reply: &Value) -> ProviderError {
    let (code, message, details) = refusal(reply);
    let mut e = ProviderError::new(code, message).with_details(details).not_dispatched();
    if e.error == h5::REOBSERVE_REQUIRED {
        e = e.with_field("snapshotId");
    }
    e
}

/// A session whose browser went away is ended here (the next call says so).
fn note_gone(ex: &Executor, ctx: &Context<'_>, s: &Session, e: &EngineError) {
    if matches!(e, EngineError::Gone { .. }) {
        lock(&s.state).ending = Some(EndReason::Lost);
        ex.end(Some(ctx), s, EndReason::Lost, json!({"why": e.message()}));
    }
}

fn check_frame(frame: Option<&str>) -> Result<(), ProviderError> {
    match frame {
        None | Some(MAIN_FRAME) => Ok(()),
        Some(f) => Err(not_dispatched("web_executor_frame_not_found", format!("frame {f:?} is not addressable: only the top-level frame `main` is")).with_field("frameId")),
    }
}

async fn document(engine: &Engine, budget: Duration) -> Result<PageInfo, EngineError> {
    let t = turn(engine, "document", None, json!({}), budget).await?;
    if t.reply["ok"] != true {
        return Err(EngineError::BadReply(format!("document turn refused: {}", t.reply)));
    }
    Ok(PageInfo::from_document(&t.reply))
}

/// The page identity after a change, also from endpoints without scripting.
async fn page_after(engine: &Engine, budget: Duration) -> (PageInfo, bool) {
    match document(engine, budget).await {
        Ok(p) => (p, true),
        Err(EngineError::ScriptUnsupported(_)) => (PageInfo { url: engine.probe(budget).await.ok(), ..PageInfo::default() }, false),
        Err(_) => (PageInfo { url: engine.probe(budget).await.ok(), ..PageInfo::default() }, true),
    }
}

fn base_record(inv: &Invocation, s: &Session, operation: &str, status: &str) -> Value {
    json!({"schemaVersion": RECEIPT_SCHEMA, "actionId": inv.action_id, "runtimeEpoch": inv.runtime_epoch, "sessionId": s.session_id,
           "operation": operation, "status": status, "engine": s.engine.kind().as_str(), "endpoint": s.endpoint,
           "webdriverSessionId": s.webdriver_session_id, "atMs": now_ms()})
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
}

// ------------------------------------------------------------------ status, prepare

fn env_endpoint() -> Option<String> {
    std::env::var(ENV_WEBDRIVER_URL).ok().filter(|v| !v.trim().is_empty())
}

fn on_path(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).map(|p| p.display().to_string())
}

async fn status(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: StatusArgs) -> Result<Value, ProviderError> {
    let now = now_ms();
    if let Some(id) = a.session_id {
        let busy = ex.acquire(ctx, inv, &id).await?;
        let s = &busy.session;
        let alive = match s.engine.probe(budget(ctx)).await {
            Ok(url) => {
                lock(&s.state).page.url = Some(url);
                json!(true)
            }
            Err(e) => {
                note_gone(ex, ctx, s, &e);
                json!({"alive": false, "error": e.message()})
            }
        };
        let mut v = s.status_json(now);
        v["ok"] = json!(true);
        v["operation"] = json!("status");
        v["alive"] = alive;
        return Ok(v);
    }
    let chromium = cdp::chromium().map(|p| p.display().to_string());
    let sessions: Vec<Value> = lock(&ex.sessions).values().map(|s| s.status_json(now)).collect();
    let rows: Vec<Value> = lock(&ex.rows)
        .values()
        .map(|r| json!({"sessionId": r.session_id, "engine": r.engine, "endpoint": r.endpoint, "webdriverSessionId": r.webdriver_session_id,
                        "runtimeEpoch": r.runtime_epoch, "leaseExpiresAtMs": r.lease_expires_at_ms, "ended": r.ended.map(EndReason::as_str), "endedAtMs": r.ended_at_ms}))
        .collect();
    Ok(json!({
        "ok": true,
        "operation": "status",
        "engines": {
            "cdp": {"available": chromium.is_some(), "chromium": chromium, "browsers": ["chromium"], "headless": true},
            "webdriver": {"configuredEndpoint": env_endpoint(), "environment": ENV_WEBDRIVER_URL, "chromedriver": on_path("chromedriver"),
                          "available": env_endpoint().is_some() || on_path("chromedriver").is_some()}
        },
        "sessions": sessions,
        "count": sessions.len(),
        "persisted": rows,
        "table": lock(&ex.table_note).clone(),
        "store": ex.records.facts.store_name(),
        "runtimeEpoch": inv.runtime_epoch,
    }))
}

/// engine, endpoint: what the caller chose, else the environment, else cdp.
fn choose_engine(engine: Option<EngineKind>, endpoint: Option<&str>, capabilities: bool) -> Result<(EngineKind, Option<String>), ProviderError> {
    let endpoint = endpoint.map(str::to_string);
    match engine {
        Some(EngineKind::Cdp) => {
            if endpoint.is_some() {
                return Err(not_dispatched("web_executor_engine_mismatch", "`endpoint` is a WebDriver endpoint: the cdp engine launches a local browser").with_field("endpoint"));
            }
            if capabilities {
                return Err(not_dispatched("web_executor_engine_mismatch", "`capabilities` are WebDriver capabilities: the cdp engine does not take them").with_field("capabilities"));
            }
            Ok((EngineKind::Cdp, None))
        }
        Some(EngineKind::Webdriver) => match endpoint.or_else(env_endpoint) {
            Some(e) => Ok((EngineKind::Webdriver, Some(e))),
            None => Err(not_dispatched("web_executor_endpoint_required", format!("the webdriver engine needs `endpoint` or {ENV_WEBDRIVER_URL} (a chromedriver, Selenium Grid or Appium URL)")).with_field("endpoint")),
        },
        None => match endpoint.or_else(env_endpoint) {
            Some(e) => Ok((EngineKind::Webdriver, Some(e))),
            None if capabilities => Err(not_dispatched("web_executor_endpoint_required", format!("`capabilities` need a WebDriver endpoint: give `endpoint` or set {ENV_WEBDRIVER_URL}")).with_field("endpoint")),
            None => Ok((EngineKind::Cdp, None)),
        },
    }
}

fn chromium_missing() -> ProviderError {
    not_dispatched("web_executor_browser_unavailable", "the cdp engine needs Chromium on this host: install it (Debian/Ubuntu: apt-get install -y chromium) or set AAB_CHROMIUM to its executable")
        .with_field("browser")
        .with_details(json!({"engine": "cdp", "browser": "chromium", "install": "apt-get install -y chromium", "environment": "AAB_CHROMIUM"}))
}

fn cdp_only_chromium(browser: BrowserKind) -> ProviderError {
    not_dispatched("web_executor_browser_unsupported", format!("the cdp engine drives Chromium only; for {} use engine webdriver with an endpoint that offers it (e.g. a Selenium Grid node)", browser.as_str()))
        .with_field("browser")
        .with_details(json!({"engine": "cdp", "browser": browser.as_str(), "offered": ["chromium"]}))
}

fn parse_endpoint(url: &str) -> Result<aab_webdriver::Client, ProviderError> {
    let ep = webdriver::endpoint(url).map_err(|e| not_dispatched(aab_plugin_api::codes::INVALID_ARGUMENT, format!("`endpoint` is not usable: {e}")).with_field("endpoint"))?;
    Ok(aab_webdriver::Client::new(ep))
}

/// `GET /status` of an endpoint: its `value`, refusals named.
async fn endpoint_status(client: &aab_webdriver::Client, budget: Duration) -> Result<Value, ProviderError> {
    client.status(budget).await.map_err(|e| {
        let unreachable = matches!(e, aab_webdriver::WdError::NotSent { .. } | aab_webdriver::WdError::Lost { .. });
        let code = if unreachable { "web_executor_endpoint_unreachable" } else { "web_executor_endpoint_invalid" };
        not_dispatched(code, format!("the WebDriver endpoint {} did not answer /status: {e}", client.endpoint())).with_field("endpoint").with_details(json!({"endpoint": client.endpoint().as_str()}))
    })
}

fn browser_unavailable(browser: BrowserKind, endpoint: &str, offered: &Offered) -> ProviderError {
    let list = offered.browsers();
    not_dispatched(
        "web_executor_browser_unavailable",
        format!("the WebDriver endpoint {endpoint} offers no {} (it offers {}); add a node with that browser and its driver, or choose another browser",
                browser.as_str(), list.as_ref().map(|l| if l.is_empty() { "nothing right now".to_string() } else { l.join(", ") }).unwrap_or_else(|| "an unknown set".into())),
    )
    .with_field("browser")
    .with_details(json!({"engine": "webdriver", "endpoint": endpoint, "browser": browser.as_str(), "offered": list}))
}

/// Which browser a WebDriver session asks for: `None` = a non-browser session
/// (capabilities name a platform and no browser, e.g. Appium).
fn webdriver_browser(a_browser: Option<BrowserKind>, caps: Option<&serde_json::Map<String, Value>>) -> Option<BrowserKind> {
    match a_browser {
        Some(b) => Some(b),
        None if caps.is_some_and(|c| c.contains_key("platformName") && !c.contains_key("browserName")) => None,
        None => Some(BrowserKind::Chromium),
    }
}

async fn prepare(ctx: &Context<'_>, a: PrepareArgs) -> Result<Value, ProviderError> {
    let (engine, endpoint) = choose_engine(a.engine, a.endpoint.as_deref(), a.capabilities.is_some())?;
    let started = Instant::now();
    match engine {
        EngineKind::Cdp => {
            let browser = a.browser.unwrap_or(BrowserKind::Chromium);
            if browser != BrowserKind::Chromium {
                return Err(cdp_only_chromium(browser));
            }
            let Some(exe) = cdp::chromium() else { return Err(chromium_missing()) };
            // A trial browser: started, identified, killed. Nothing stays.
            ctx.mark_dispatched();
            let v = CdpPage::check(budget(ctx)).await.map_err(|e| {
                not_dispatched("web_executor_browser_unavailable", format!("Chromium at {} did not start: {}", exe.display(), e.message()))
                    .with_field("browser")
                    .with_details(json!({"engine": "cdp", "executable": exe.display().to_string(), "install": "apt-get install -y chromium", "error": e.message()}))
            })?;
            Ok(json!({"ok": true, "operation": "prepare", "ready": true, "engine": "cdp", "browser": "chromium", "executable": exe.display().to_string(),
                      "product": v["product"], "checkedMs": started.elapsed().as_millis() as u64, "verified": "launched"}))
        }
        EngineKind::Webdriver => {
            let endpoint = endpoint.unwrap_or_default();
            let client = parse_endpoint(&endpoint)?;
            let status = endpoint_status(&client, budget(ctx)).await?;
            if status.get("ready") != Some(&Value::Bool(true)) {
                return Err(not_dispatched("web_executor_endpoint_not_ready", format!("the WebDriver endpoint {endpoint} is not ready for new sessions: {}", status.get("message").and_then(Value::as_str).unwrap_or("")))
                    .with_field("endpoint")
                    .with_details(json!({"endpoint": endpoint, "status": status})));
            }
            let offered = webdriver::offered(&status);
            let browser = webdriver_browser(a.browser, a.capabilities.as_ref());
            // A listed browser is not yet a startable one (a Grid lists what its
            // nodes detected): a trial session, deleted at once, proves it.
            let wanted = match browser {
                Some(b) => match offered.name_for(b) {
                    Some(name) => Some((b, name)),
                    None => return Err(browser_unavailable(b, &endpoint, &offered)),
                },
                None => None,
            };
            let caps = webdriver::capabilities(wanted.as_ref().map(|(b, n)| (*b, n.as_str())), true, None, a.capabilities.as_ref());
            trial_session(ctx, &client, caps, &endpoint).await.map_err(|e| match browser {
                Some(b) if e.error == "web_executor_session_not_created" => ProviderError::new("web_executor_browser_unavailable", format!("{} cannot start {}: {}", endpoint, b.as_str(), e.message))
                    .with_field("browser")
                    .with_details(json!({"endpoint": endpoint, "browser": b.as_str(), "offered": offered.browsers(), "cause": e.details}))
                    .not_dispatched(),
                _ => e,
            })?;
            let verified = "session";
            Ok(json!({"ok": true, "operation": "prepare", "ready": true, "engine": "webdriver", "endpoint": client.endpoint().as_str(),
                      "browser": browser.map(BrowserKind::as_str), "offered": offered.browsers(), "verified": verified,
                      "message": status.get("message"), "checkedMs": started.elapsed().as_millis() as u64}))
        }
    }
}

/// Open and delete one session: proves the endpoint can start what was asked.
async fn trial_session(ctx: &Context<'_>, client: &aab_webdriver::Client, caps: Value, endpoint: &str) -> Result<(), ProviderError> {
    ctx.mark_dispatched();
    let s = client.new_session(caps, budget(ctx)).await.map_err(|e| new_session_error(e, endpoint))?;
    s.delete(budget(ctx)).await.map_err(|e| {
        ProviderError::new("web_executor_prepare_cleanup_failed", format!("the trial session {} could not be deleted: {e}; it ends by the endpoint's own idle timeout", s.id()))
            .with_details(json!({"webdriverSessionId": s.id(), "endpoint": endpoint}))
    })
}

fn new_session_error(e: aab_webdriver::WdError, endpoint: &str) -> ProviderError {
    use aab_webdriver::WdError;
    match e {
        WdError::Protocol { error, message, status } => {
            let code = webdriver::new_session_refusal(&error, &message);
            not_dispatched(code, format!("the WebDriver endpoint {endpoint} did not create a session: {error}: {message}"))
                .with_details(json!({"endpoint": endpoint, "webdriverError": error, "httpStatus": status}))
        }
        WdError::NotSent { message } | WdError::InvalidEndpoint(message) => {
            not_dispatched("web_executor_endpoint_unreachable", format!("the WebDriver endpoint {endpoint} could not be reached: {message}")).with_field("endpoint")
        }
        other => ProviderError::new(
            "web_executor_open_lost",
            format!("no complete answer from {endpoint} to the new-session request ({other}); the endpoint may still create the session later — a Grid then ends it by its own session timeout (--session-timeout, default 300 s)"),
        )
        .with_details(json!({"endpoint": endpoint, "mayRemain": true})),
    }
}

// ------------------------------------------------------------------ open

async fn open(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: OpenArgs) -> Result<Value, ProviderError> {
    // A caller's id already matched the schema's pattern (the host validated it).
    let session_id = a.session_id.clone().unwrap_or_else(|| format!("wx-{}", uuid_v4()));
    if ex.live(&session_id).is_some() || lock(&ex.rows).get(&session_id).is_some_and(|r| r.ended.is_none()) {
        return Err(not_dispatched("web_executor_session_exists", format!("executor session {session_id:?} is already open; close it first or choose another sessionId")).with_field("sessionId"));
    }
    let (engine_kind, endpoint) = choose_engine(a.engine, a.endpoint.as_deref(), a.capabilities.is_some())?;
    let lease_ms = a.lease_ms.unwrap_or(DEFAULT_LEASE_MS);
    let headless = a.headless.unwrap_or(true);
    let started = Instant::now();
    let (engine, browser, remote_id, viewport) = match engine_kind {
        EngineKind::Cdp => {
            let browser = a.browser.unwrap_or(BrowserKind::Chromium);
            if browser != BrowserKind::Chromium {
                return Err(cdp_only_chromium(browser));
            }
            if !headless {
                return Err(not_dispatched("web_executor_headed_unsupported", "the cdp engine runs Chromium headless only; for a visible browser use engine webdriver with an endpoint on a display")
                    .with_field("headless"));
            }
            if cdp::chromium().is_none() {
                return Err(chromium_missing());
            }
            ex.records.put(ctx, &session_id, &json!({"schemaVersion": RECEIPT_SCHEMA, "actionId": inv.action_id, "runtimeEpoch": inv.runtime_epoch, "sessionId": session_id,
                                                      "operation": "open", "status": "pending", "engine": "cdp", "atMs": now_ms()}))
                .map_err(ProviderError::not_dispatched)?;
            ctx.mark_dispatched();
            // Every failure below leaves nothing behind: the browser is ours and dies with its handle.
            let page = CdpPage::launch(a.viewport, budget(ctx)).await.map_err(|e| engine_error(&e, "starting Chromium", false))?;
            let engine = Engine::Cdp(Arc::new(page));
            if let Some(url) = &a.url {
                engine.navigate(url, budget(ctx)).await.map_err(|e| engine_error(&e, &format!("opening {url}"), false))?;
            }
            (engine, "chromium".to_string(), None, a.viewport.map(|v| json!({"width": v.width, "height": v.height})))
        }
        EngineKind::Webdriver => {
            let endpoint_url = endpoint.clone().unwrap_or_default();
            let client = parse_endpoint(&endpoint_url)?;
            let browser = webdriver_browser(a.browser, a.capabilities.as_ref());
            let wanted = match browser {
                Some(b) => {
                    let status = endpoint_status(&client, budget(ctx).min(Duration::from_secs(10))).await?;
                    let offered = webdriver::offered(&status);
                    let Some(name) = offered.name_for(b) else { return Err(browser_unavailable(b, &endpoint_url, &offered)) };
                    Some((b, name))
                }
                None => None,
            };
            let caps = webdriver::capabilities(wanted.as_ref().map(|(b, n)| (*b, n.as_str())), headless, a.viewport, a.capabilities.as_ref());
            ex.records.put(ctx, &session_id, &json!({"schemaVersion": RECEIPT_SCHEMA, "actionId": inv.action_id, "runtimeEpoch": inv.runtime_epoch, "sessionId": session_id,
                                                      "operation": "open", "status": "pending", "engine": "webdriver", "endpoint": client.endpoint().as_str(), "atMs": now_ms()}))
                .map_err(ProviderError::not_dispatched)?;
            ctx.mark_dispatched();
            // The whole remaining deadline is the new-session budget: a full Grid queues the request that long.
            let remote = client.new_session(caps, budget(ctx)).await.map_err(|e| new_session_error(e, client.endpoint().as_str()))?;
            let remote_id = remote.id().to_string();
            let page = WdPage::new(client.clone(), remote);
            let engine = Engine::WebDriver(Arc::new(page));
            let mut viewport = None;
            let setup: Result<(), ProviderError> = async {
                if let (Some(v), Engine::WebDriver(p)) = (a.viewport, &engine) {
                    viewport = Some(p.fit_viewport(v, budget(ctx)).await.map_err(|e| engine_error(&e, "setting the viewport", false))?);
                }
                if let Some(url) = &a.url {
                    engine.navigate(url, budget(ctx)).await.map_err(|e| engine_error(&e, &format!("opening {url}"), false))?;
                }
                Ok(())
            }
            .await;
            if let Err(e) = setup {
                // Never half-open: the remote session goes again.
                return Err(match engine.close(budget(ctx).max(Duration::from_secs(1))).await {
                    Ok(()) => e,
                    Err(c) => ProviderError::new(e.error.clone(), format!("{}; deleting the new session {remote_id} then failed too ({}): it ends by the endpoint's own idle timeout", e.message, c.message()))
                        .with_details(json!({"webdriverSessionId": remote_id, "mayRemain": true})),
                });
            }
            (engine, browser.map(|b| b.as_str().to_string()).unwrap_or_else(|| "none".into()), Some(remote_id), viewport)
        }
    };
    let (page, scripting) = page_after(&engine, budget(ctx)).await;
    let now = now_ms();
    let endpoint_str = match &engine {
        Engine::WebDriver(p) => Some(p.endpoint().to_string()),
        Engine::Cdp(_) => None,
    };
    let capabilities = match &engine {
        Engine::WebDriver(p) => json!({"browserName": p.capabilities().get("browserName"), "browserVersion": p.capabilities().get("browserVersion"), "platformName": p.capabilities().get("platformName")}),
        Engine::Cdp(_) => Value::Null,
    };
    let s = Arc::new(Session::new(session_id.clone(), engine, browser.clone(), endpoint_str.clone(), remote_id.clone(), inv.runtime_epoch.clone(), lease_ms, now, None, now));
    if !scripting {
        super::native::no_scripts(&s);
    }
    {
        let mut st = lock(&s.state);
        st.page = page.clone();
        st.viewport = viewport.clone();
    }
    lock(&ex.rows).remove(&session_id);
    lock(&ex.sessions).insert(session_id.clone(), s.clone());
    ex.persist(true);
    let record = merge(base_record(inv, &s, "open", "settled"), json!({"page": page.to_json(), "browser": browser, "leaseMs": lease_ms}));
    ex.records.put(ctx, &session_id, &record).map_err(|e| e.with_details(json!({"sessionId": session_id, "opened": true})))?;
    ex.records.event(Some(ctx), &session_id, "opened", json!({"engine": engine_kind.as_str(), "endpoint": endpoint_str, "webdriverSessionId": remote_id, "browser": browser,
                                                             "url": page.url, "documentId": page.document_id, "runtimeEpoch": inv.runtime_epoch}));
    ctx.info(&format!("web-executor: opened {session_id} ({} {browser})", engine_kind.as_str()));
    let expires = lock(&s.state).lease_expires_at_ms;
    Ok(json!({
        "ok": true,
        "operation": "open",
        "sessionId": session_id,
        "runtimeEpoch": inv.runtime_epoch,
        "actionId": inv.action_id,
        "engine": engine_kind.as_str(),
        "browser": browser,
        "headless": headless,
        "endpoint": endpoint_str,
        "webdriverSessionId": remote_id,
        "capabilities": capabilities,
        "lease": {"leaseMs": lease_ms, "expiresAtMs": expires},
        "page": page.to_json(),
        "viewport": viewport,
        "scripting": scripting,
        "openedMs": started.elapsed().as_millis() as u64,
        "engineDetails": s.engine.describe(),
    }))
}

// ------------------------------------------------------------------ observe

async fn observe(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: ObserveArgs) -> Result<Value, ProviderError> {
    check_frame(a.frame_id.as_deref())?;
    let busy = ex.acquire(ctx, inv, &a.session_id).await?;
    let s = &busy.session;
    if !s.scripting.load(Ordering::SeqCst) {
        return super::native::observe(s, ctx).await;
    }
    let mut t = match turn(&s.engine, "snapshot", None, json!({}), budget(ctx)).await {
        Ok(t) => t,
        Err(EngineError::ScriptUnsupported(_)) => {
            super::native::no_scripts(s);
            return super::native::observe(s, ctx).await;
        }
        Err(e) => {
            note_gone(ex, ctx, s, &e);
            return Err(engine_error(&e, "observing the page", false));
        }
    };
    if t.reply["ok"] != true {
        return Err(renderer_error(&t.reply));
    }
    let mut dom = t.reply["dom"].take();
    let max = a.max_controls.unwrap_or(DEFAULT_MAX_CONTROLS) as usize;
    if let Some(list) = dom.get_mut("controls").and_then(Value::as_array_mut)
        && list.len() > max
    {
        list.truncate(max);
        dom["truncated"] = json!(true);
    }
    let document_id = dom["documentId"].as_str().unwrap_or_default().to_string();
    let url = dom["url"].as_str().unwrap_or_default().to_string();
    let kept = json!({"controls": dom["controls"], "truncated": dom["truncated"], "controlCount": dom["controlCount"]});
    let snapshot_id = s.keep_snapshot(&document_id, &url, kept);
    {
        let mut st = lock(&s.state);
        st.page = PageInfo { document_id: Some(document_id.clone()), url: Some(url.clone()), title: dom["title"].as_str().map(str::to_string) };
        st.viewport = Some(dom["viewport"].clone());
    }
    let mut out = json!({
        "ok": true,
        "operation": "observe",
        "sessionId": s.session_id,
        "runtimeEpoch": lock(&s.state).runtime_epoch,
        "snapshotId": snapshot_id,
        "frameId": MAIN_FRAME,
        "documentId": document_id,
        "url": url,
        "title": dom["title"],
        "readyState": dom["readyState"],
        "viewport": dom["viewport"],
        "controlCount": dom["controlCount"],
        "truncated": dom["truncated"],
        "controls": dom["controls"],
        "injected": t.injected,
        "observedAtMs": now_ms(),
    });
    if a.include_body_text != Some(false) {
        out["bodyText"] = dom["bodyText"].take();
        out["bodyTextTruncated"] = dom["bodyTextTruncated"].take();
    }
    Ok(out)
}

// ------------------------------------------------------------------ act

/// The h5 selector object of a typed selector (`elementId` | `text` | `ariaLabel`).
fn h5_selector(sel: &Selector) -> Value {
    json!({sel.by.as_str(): sel.value})
}

/// Narrow a snapshot's controls by the selector's `name`.
fn narrowed(dom: &Value, name: Option<&str>) -> Value {
    let Some(name) = name else { return dom.clone() };
    let mut d = dom.clone();
    if let Some(list) = d.get_mut("controls").and_then(Value::as_array_mut) {
        list.retain(|c| c.get("name").and_then(Value::as_str) == Some(name));
    }
    d
}

/// The element a selector binds in `dom` (a snapshot's controls), as the h5
/// contract binds: exactly one visible match.
pub fn bind_in_snapshot(dom: &Value, sel: &Selector) -> Result<Value, ProviderError> {
    h5::select(&narrowed(dom, sel.name.as_deref()), &h5_selector(sel), PREFIX)
}

/// The one visible element a CSS query matched.
pub fn bind_css_matches(matches: &[Value], count: u64, sel: &Selector) -> Result<Value, ProviderError> {
    let visible: Vec<&Value> = matches.iter().filter(|c| c.get("visible") == Some(&Value::Bool(true))).collect();
    match visible.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(not_dispatched(&format!("{PREFIX}selector_not_found"), format!("no visible element matches the CSS selector {:?}", sel.value))
            .with_field("selector")
            .with_details(json!({"matches": count, "hiddenMatches": matches.len()}))),
        many => Err(not_dispatched(&format!("{PREFIX}selector_ambiguous"), format!("{} visible elements match the CSS selector {:?}: select by elementId", many.len(), sel.value))
            .with_field("selector")
            .with_details(json!({"matches": count, "candidates": many.iter().take(h5::MAX_CANDIDATES).map(|c| h5::summary(c)).collect::<Vec<_>>()}))),
    }
}

/// What `act` will do in the page.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Effect {
    Click,
    Input,
    Key,
    /// Scroll the element into view (the renderer's own effect).
    IntoView,
    Wheel,
}

impl Effect {
    fn arm_action(self) -> &'static str {
        match self {
            Effect::Click => "click",
            Effect::Input => "input",
            Effect::Key => "key",
            Effect::IntoView => "scrollIntoView",
            Effect::Wheel => "wheel",
        }
    }

    /// Effects whose preparation (focus, scrolling) already changes the page:
    /// the dispatch mark comes before `arm`.
    fn mark_before_arm(self) -> bool {
        matches!(self, Effect::Input | Effect::Key | Effect::IntoView)
    }
}

fn effect_of(a: &Action, has_selector: bool) -> Effect {
    match a.kind {
        ActionType::Click => Effect::Click,
        ActionType::Input => Effect::Input,
        ActionType::Key => Effect::Key,
        ActionType::Scroll if a.delta_x.is_none() && a.delta_y.is_none() && has_selector => Effect::IntoView,
        ActionType::Scroll => Effect::Wheel,
    }
}

/// The action as recorded (typed text is never stored, only its length and digest).
fn action_record(a: &Action) -> Value {
    let mut v = json!({"type": a.kind.as_str()});
    if let Some(t) = &a.text {
        v["textLength"] = json!(t.chars().count());
        v["textSha256"] = json!(sha256_hex(t.as_bytes()));
    }
    if let Some(k) = &a.key {
        v["key"] = json!(k);
    }
    if let Some(x) = a.delta_x {
        v["deltaX"] = json!(x);
    }
    if let Some(y) = a.delta_y {
        v["deltaY"] = json!(y);
    }
    v
}

async fn act(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: ActArgs) -> Result<Value, ProviderError> {
    check_frame(a.frame_id.as_deref())?;
    let busy = ex.acquire(ctx, inv, &a.session_id).await?;
    let s = busy.session.clone();
    if !s.scripting.load(Ordering::SeqCst) {
        return super::native::act(ex, ctx, inv, &s, &a).await;
    }
    let engine = s.engine.clone();
    let read_error = |e: EngineError, what: &str| {
        note_gone(ex, ctx, &s, &e);
        engine_error(&e, what, false)
    };

    // 1. The view the action is bound to: a retained observation, or a fresh one.
    let (base_document, base_url, base_dom) = match &a.snapshot_id {
        Some(id) => {
            let snap = s.snapshot(id).ok_or_else(|| {
                not_dispatched(h5::REOBSERVE_REQUIRED, format!("snapshot {id:?} is not one of this session's last observations: observe again")).with_field("snapshotId")
            })?;
            (snap.document_id, snap.url, snap.dom)
        }
        None => {
            let t = turn(&engine, "snapshot", None, json!({}), budget(ctx)).await.map_err(|e| read_error(e, "observing the page"))?;
            if t.reply["ok"] != true {
                return Err(renderer_error(&t.reply));
            }
            let dom = &t.reply["dom"];
            (dom["documentId"].as_str().unwrap_or_default().to_string(), dom["url"].as_str().unwrap_or_default().to_string(), dom.clone())
        }
    };
    if let Some(expected) = &a.document_id {
        h5::check_page(&json!({"documentId": expected}), &json!({"documentId": base_document}), "documentId")?;
    }
    let page_ref = json!({"documentId": base_document, "url": base_url});

    // 2. The element (if any).
    let control = match &a.selector {
        None => None,
        Some(sel) if sel.by == SelectorBy::Css => {
            let payload = json!({"pageRef": page_ref, "css": sel.value, "name": sel.name});
            let t = turn(&engine, "query", Some(payload), json!({}), budget(ctx)).await.map_err(|e| read_error(e, "resolving the CSS selector"))?;
            if t.reply["ok"] != true {
                let mut e = renderer_error(&t.reply);
                if e.error.ends_with("invalid_css") {
                    e = e.with_field("selector.value");
                }
                return Err(e);
            }
            let matches = t.reply["matches"].as_array().cloned().unwrap_or_default();
            Some(bind_css_matches(&matches, t.reply["count"].as_u64().unwrap_or(0), sel)?)
        }
        Some(sel) => Some(bind_in_snapshot(&base_dom, sel)?),
    };
    let element = control.as_ref().map(h5::element);
    let effect = effect_of(&a.action, control.is_some());
    let key = match &a.action.key {
        Some(k) => Some(key_def(k).ok_or_else(|| not_dispatched(aab_plugin_api::codes::INVALID_ARGUMENT, format!("unknown key {k:?}")).with_field("action.key"))?),
        None => None,
    };
    let text = a.action.text.clone().unwrap_or_default();

    // 3. Preparation in the page: the element must be usable right now.
    let mut geometry = Value::Null;
    if matches!(effect, Effect::Click | Effect::Input) {
        let payload = json!({"action": effect.arm_action(), "pageRef": page_ref, "element": element, "text": text});
        let mut t = turn(&engine, "prepare", Some(payload.clone()), json!({}), budget(ctx)).await.map_err(|e| read_error(e, "preparing the action"))?;
        if t.reply["ok"] != true && t.reply["error"] == format!("{PREFIX}target_outside_viewport") {
            // Like WebDriver's own element commands: bring the element into view first.
            let scroll = json!({"action": "scrollIntoView", "pageRef": page_ref, "element": element, "actionId": format!("{}:into-view", inv.action_id)});
            let st = turn(&engine, "arm", Some(scroll), json!({}), budget(ctx)).await.map_err(|e| read_error(e, "scrolling the element into view"))?;
            if st.reply["ok"] != true {
                return Err(renderer_error(&st.reply));
            }
            t = turn(&engine, "prepare", Some(payload), json!({}), budget(ctx)).await.map_err(|e| read_error(e, "preparing the action"))?;
        }
        if t.reply["ok"] != true {
            return Err(renderer_error(&t.reply));
        }
        geometry = t.reply["geometry"].clone();
    }

    // 4. The pending record, durable before anything is dispatched.
    let before = json!({"documentId": base_document, "url": base_url});
    let mut record = merge(
        base_record(inv, &s, "act", "pending"),
        json!({"action": action_record(&a.action), "selector": a.selector.as_ref().map(|sel| json!({"by": sel.by.as_str(), "value": sel.value, "name": sel.name})),
               "element": element, "snapshotId": a.snapshot_id, "before": before}),
    );
    ex.records.put(ctx, &s.session_id, &record).map_err(ProviderError::not_dispatched)?;
    lock(&s.state).actions += 1;

    // 5. Arm (the last check, the ledger entry, the delivery listener), mark, effect.
    let want_element = matches!(engine, Engine::WebDriver(_));
    let arm_payload = json!({"action": effect.arm_action(), "pageRef": page_ref, "element": element, "actionId": inv.action_id, "text": a.action.text});
    let arm_extra = json!({"geometry": if geometry.is_null() { Value::Null } else { geometry.clone() }, "returnElement": want_element});
    let mut marked = false;
    if effect.mark_before_arm() {
        ctx.mark_dispatched();
        marked = true;
    }
    let armed = match turn(&engine, "arm", Some(arm_payload), arm_extra, budget(ctx)).await {
        Ok(t) if t.reply["ok"] == true => t.reply,
        Ok(t) => {
            // The renderer refused before any effect of its own (focus aside).
            let e = renderer_error(&t.reply);
            let unresolved = merge(record.clone(), json!({"status": "refused", "error": e.error, "atMs": now_ms()}));
            let _ = ex.records.put(ctx, &s.session_id, &unresolved);
            return Err(e);
        }
        Err(e) => {
            note_gone(ex, ctx, &s, &e);
            return Err(finish_unproven(ex, ctx, &s, &mut record, &e, marked, "arming the action").await);
        }
    };
    let target = Armed {
        x: armed.pointer("/geometry/x").and_then(Value::as_f64).unwrap_or(0.0),
        y: armed.pointer("/geometry/y").and_then(Value::as_f64).unwrap_or(0.0),
        element_ref: armed.get("elementRef").cloned().filter(|v| v.is_object()),
    };
    let skip = effect == Effect::Input && text.is_empty() && armed["currentLength"] == 0;
    if !marked && !skip {
        ctx.mark_dispatched();
        marked = true;
    }
    ex.records.event(Some(ctx), &s.session_id, "action-dispatched", json!({"actionId": inv.action_id, "action": a.action.kind.as_str(), "elementId": element.as_ref().map(|e| e["elementId"].clone())}));
    let effect_result = if skip {
        Ok(())
    } else {
        match effect {
            Effect::Click => engine.click(&target, budget(ctx)).await,
            Effect::Input => engine.type_text(&target, &text, budget(ctx)).await,
            Effect::Key => engine.key(&key.expect("the schema requires a key"), budget(ctx)).await,
            Effect::IntoView => Ok(()),
            Effect::Wheel => engine.wheel(&target, a.action.delta_x.unwrap_or(0.0), a.action.delta_y.unwrap_or(0.0), budget(ctx)).await,
        }
    };

    // 6. Settle from the page's proof.
    if let Err(e) = &effect_result {
        note_gone(ex, ctx, &s, e);
        // A complete refusal before input (e.g. WebDriver's `element click
        // intercepted`) did not act: if the ledger agrees, nothing was dispatched.
        let refused_before = !e.effect_may_have_acted();
        if !matches!(e, EngineError::Gone { .. }) {
            // One look suffices after a refusal; a lost reply gets the settle window.
            let window = if refused_before { Duration::ZERO } else { settle_window(ctx) };
            let proof = delivery_proof(&engine, &inv.action_id, a.action.text.as_deref(), window).await;
            if let Some(p) = proof.as_ref().filter(|p| super::hooks::proven(p, a.action.kind.as_str())) {
                return settled(ex, ctx, &s, record, p.clone(), effect, Some(e.message())).await;
            }
            if refused_before {
                let refused = merge(record.clone(), json!({"status": "refused", "error": e.message(), "atMs": now_ms()}));
                let _ = ex.records.put(ctx, &s.session_id, &refused);
                let mut err = engine_error(e, "the engine refused the input", false);
                if let EngineError::Refused { error, .. } = e {
                    err.error = format!("{PREFIX}{}", error.replace(' ', "_"));
                }
                return Err(err.not_dispatched());
            }
        }
        return Err(finish_unproven(ex, ctx, &s, &mut record, e, marked, "delivering the input").await);
    }
    let proof = if skip {
        Some(Proof { delivered: true, trusted: None, source: "no-op", event_type: None, ledger: json!({"unchanged": true}) })
    } else if effect == Effect::IntoView {
        Some(Proof { delivered: true, trusted: Some(false), source: "renderer", event_type: Some("scrollIntoView".into()), ledger: armed.clone() })
    } else {
        delivery_proof(&engine, &inv.action_id, a.action.text.as_deref(), settle_window(ctx)).await
    };
    match proof {
        Some(p) if super::hooks::proven(&p, a.action.kind.as_str()) => settled(ex, ctx, &s, record, p, effect, None).await,
        other => {
            record["status"] = json!("unresolved");
            record["delivery"] = json!({"delivered": false, "ledger": other.as_ref().map(|p| p.ledger.clone())});
            record["atMs"] = json!(now_ms());
            let _ = ex.records.put(ctx, &s.session_id, &record);
            ex.records.event(Some(ctx), &s.session_id, "action-unresolved", json!({"actionId": inv.action_id, "why": "delivery not proven"}));
            Err(ProviderError::new(
                "web_executor_delivery_unproven",
                "the input was sent but the page did not show it reaching the bound element (it may have landed elsewhere or the page replaced it); the action is unresolved: ask `receipt` or reconcile, never repeat it blindly",
            )
            .with_details(json!({"actionId": inv.action_id, "receipt": record})))
        }
    }
}

fn settle_window(ctx: &Context<'_>) -> Duration {
    budget(ctx).min(SETTLE_WINDOW)
}

#[derive(Clone, Debug)]
pub struct Proof {
    pub delivered: bool,
    pub trusted: Option<bool>,
    pub source: &'static str,
    pub event_type: Option<String>,
    /// The ledger reply (entry, input value report) or the binding payload.
    pub ledger: Value,
}

/// Ask for the delivery of `action_id`: the engine's own channel (CDP binding),
/// else the page ledger, polled within `window` while the page settles. `None`
/// = the page could not be asked at all.
pub async fn delivery_proof(engine: &Engine, action_id: &str, text: Option<&str>, window: Duration) -> Option<Proof> {
    let deadline = Instant::now() + window;
    let mut last: Option<Proof> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ledger = turn(engine, "ledger", Some(json!({"actionId": action_id, "text": text})), json!({}), left.max(Duration::from_millis(200))).await;
        let binding = engine.delivery(action_id);
        match ledger {
            Ok(t) if t.reply["ok"] == true => {
                let entry = &t.reply["entry"];
                if entry["status"] == "delivered" {
                    return Some(Proof { delivered: true, trusted: entry["trusted"].as_bool(), source: "page-ledger", event_type: entry["eventType"].as_str().map(str::to_string), ledger: t.reply });
                }
                if let Some(b) = binding {
                    return Some(Proof { delivered: true, trusted: b["trusted"].as_bool(), source: "cdp-binding", event_type: b["eventType"].as_str().map(str::to_string), ledger: merge(t.reply, json!({"binding": b})) });
                }
                last = Some(Proof { delivered: false, trusted: None, source: "page-ledger", event_type: None, ledger: t.reply });
            }
            other => {
                if let Some(b) = binding {
                    return Some(Proof { delivered: true, trusted: b["trusted"].as_bool(), source: "cdp-binding", event_type: b["eventType"].as_str().map(str::to_string), ledger: json!({"binding": b}) });
                }
                // A read that failed for good (session gone, no reply): stop asking.
                if let Err(e) = &other
                    && !render::transient(e)
                    && !matches!(e, EngineError::BadReply(_))
                {
                    return last;
                }
            }
        }
        if Instant::now() + SETTLE_POLL >= deadline {
            return last;
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

async fn settled(ex: &Executor, ctx: &Context<'_>, s: &Session, mut record: Value, proof: Proof, effect: Effect, reply_error: Option<String>) -> Result<Value, ProviderError> {
    let (after, _) = page_after(&s.engine, settle_window(ctx)).await;
    {
        let mut st = lock(&s.state);
        if after.document_id.is_some() {
            st.page = after.clone();
        }
    }
    record["status"] = json!("settled");
    record["atMs"] = json!(now_ms());
    record["after"] = json!({"documentId": after.document_id, "url": after.url});
    record["delivery"] = json!({"delivered": true, "trusted": proof.trusted, "eventType": proof.event_type, "source": proof.source, "replyError": reply_error});
    if effect == Effect::Input {
        let l = &proof.ledger;
        // Whether the field now holds exactly the text; the text itself stays out of the record.
        record["result"] = json!({"accepted": l.get("accepted"), "valueLength": l.get("valueLength"), "sensitive": l.get("sensitive")});
    }
    ex.records.put(ctx, &s.session_id, &record)?;
    let action_id = record["actionId"].clone();
    ex.records.event(Some(ctx), &s.session_id, "action-settled", json!({"actionId": action_id, "documentIdAfter": after.document_id, "url": after.url}));
    Ok(json!({
        "ok": true,
        "operation": "act",
        "sessionId": s.session_id,
        "actionId": action_id,
        "status": "settled",
        "receipt": record,
        "page": after.to_json(),
    }))
}

/// A failure after (or instead of) the effect without proof of delivery: keep
/// an `unresolved` record and report the outcome as ambiguous when the input may
/// have reached the page, else as not dispatched.
async fn finish_unproven(ex: &Executor, ctx: &Context<'_>, s: &Session, record: &mut Value, e: &EngineError, marked: bool, what: &str) -> ProviderError {
    let ambiguous = marked && e.effect_may_have_acted();
    record["status"] = json!(if ambiguous { "unresolved" } else { "refused" });
    record["error"] = json!(e.message());
    record["atMs"] = json!(now_ms());
    let _ = ex.records.put(ctx, &s.session_id, record);
    ex.records.event(Some(ctx), &s.session_id, if ambiguous { "action-unresolved" } else { "action-refused" }, json!({"actionId": record["actionId"], "error": e.message()}));
    let mut err = engine_error(e, what, marked);
    if !ambiguous {
        err = err.not_dispatched();
    } else {
        err.dispatched = None;
        err = err.with_details(json!({"actionId": record["actionId"], "receipt": record.clone(), "engineError": e.message(),
                                      "recovery": "the input may have reached the page: ask operation receipt (or device-ownership reconcile) for its outcome; never repeat it blindly"}));
    }
    err
}

// ------------------------------------------------------------------ navigate, wait, screenshot

async fn navigate(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: NavigateArgs) -> Result<Value, ProviderError> {
    let busy = ex.acquire(ctx, inv, &a.session_id).await?;
    let s = busy.session.clone();
    let before = lock(&s.state).page.clone();
    let mut record = merge(base_record(inv, &s, "navigate", "pending"), json!({"targetUrl": a.url, "before": {"documentId": before.document_id, "url": before.url}}));
    ex.records.put(ctx, &s.session_id, &record).map_err(ProviderError::not_dispatched)?;
    ctx.mark_dispatched();
    let nav = s.engine.navigate(&a.url, budget(ctx)).await;
    let nav = match nav {
        Ok(n) => n,
        Err(e @ EngineError::Refused { .. }) if matches!(&e, EngineError::Refused { error, .. } if error == "navigation_failed") => {
            // The browser answered: the navigation failed (an error page may show).
            let (after, _) = page_after(&s.engine, settle_window(ctx)).await;
            record["status"] = json!("settled");
            record["navigated"] = json!(false);
            record["error"] = json!(e.message());
            record["after"] = json!({"documentId": after.document_id, "url": after.url});
            record["atMs"] = json!(now_ms());
            let _ = ex.records.put(ctx, &s.session_id, &record);
            ex.records.event(Some(ctx), &s.session_id, "navigation-failed", json!({"actionId": inv.action_id, "url": a.url, "error": e.message()}));
            return Err(engine_error(&e, &format!("navigating to {}", a.url), true).settled_after_dispatch().with_details(json!({"receipt": record})));
        }
        Err(e) => {
            note_gone(ex, ctx, &s, &e);
            return Err(finish_unproven(ex, ctx, &s, &mut record, &e, true, &format!("navigating to {}", a.url)).await);
        }
    };
    let (after, _) = page_after(&s.engine, budget(ctx)).await;
    lock(&s.state).page = after.clone();
    record["status"] = json!("settled");
    record["navigated"] = json!(true);
    record["loaded"] = json!(nav.loaded);
    record["after"] = json!({"documentId": after.document_id, "url": after.url});
    record["atMs"] = json!(now_ms());
    ex.records.put(ctx, &s.session_id, &record)?;
    ex.records.event(Some(ctx), &s.session_id, "navigated", json!({"actionId": inv.action_id, "url": after.url, "documentId": after.document_id, "loaded": nav.loaded}));
    Ok(json!({"ok": true, "operation": "navigate", "sessionId": s.session_id, "actionId": inv.action_id, "loaded": nav.loaded, "page": after.to_json(), "receipt": record}))
}

async fn wait(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: WaitArgs) -> Result<Value, ProviderError> {
    check_frame(a.frame_id.as_deref())?;
    let busy = ex.acquire(ctx, inv, &a.session_id).await?;
    let s = &busy.session;
    if !s.scripting.load(Ordering::SeqCst) {
        return super::native::wait(s, ctx, &a).await;
    }
    let started = Instant::now();
    let remaining = ctx.remaining();
    let deadline = started + remaining.saturating_sub(margin(remaining));
    let payload = match (&a.selector, &a.text) {
        (Some(sel), _) => json!({"by": sel.by.as_str(), "value": sel.value, "name": sel.name}),
        (None, Some(t)) => json!({"text": t}),
        (None, None) => return Err(not_dispatched("missing_argument", "wait needs `selector` or `text`").with_field("selector")),
    };
    let mut polls = 0u64;
    let mut last;
    loop {
        if ctx.is_cancelled() {
            return Err(not_dispatched("cancelled", "wait was cancelled"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        polls += 1;
        match turn(&s.engine, "match", Some(payload.clone()), json!({}), left.max(Duration::from_millis(100))).await {
            Ok(t) if t.reply["ok"] == true => {
                let r = t.reply;
                let done = if a.text.is_some() && a.selector.is_none() { r["textFound"] == true } else { r["visible"] == 1 };
                if done {
                    let element = r["matches"].as_array().and_then(|m| m.iter().find(|c| c["visible"] == true)).cloned();
                    lock(&s.state).page = PageInfo::from_document(&r);
                    return Ok(json!({"ok": true, "operation": "wait", "sessionId": s.session_id, "matched": true, "polls": polls, "waitedMs": started.elapsed().as_millis() as u64,
                                     "element": element, "page": PageInfo::from_document(&r).to_json()}));
                }
                last = json!({"count": r.get("count"), "visible": r.get("visible"), "textFound": r.get("textFound"), "url": r.get("url")});
            }
            Ok(t) => {
                let e = renderer_error(&t.reply);
                if e.error.ends_with("invalid_css") {
                    return Err(e.with_field("selector.value"));
                }
                last = t.reply;
            }
            Err(e) if render::transient(&e) || matches!(e, EngineError::Lost(_)) => last = json!({"error": e.message()}),
            Err(e) => {
                note_gone(ex, ctx, s, &e);
                return Err(engine_error(&e, "waiting", false));
            }
        }
        if Instant::now() + WAIT_POLL >= deadline {
            return Err(not_dispatched("web_executor_wait_timeout", format!("the condition did not hold within {} ms", started.elapsed().as_millis()))
                .with_details(json!({"polls": polls, "waitedMs": started.elapsed().as_millis() as u64, "last": last, "condition": payload})));
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
}

async fn screenshot(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: ScreenshotArgs) -> Result<Value, ProviderError> {
    let target = aab_plugin_api::screenshot::Target::of(a.out_file.as_deref(), a.artifact_dir.as_deref(), std::path::Path::new(&inv.cwd))?;
    let busy = ex.acquire(ctx, inv, &a.session_id).await?;
    let s = &busy.session;
    let png = match s.engine.screenshot(budget(ctx)).await {
        Ok(p) => p,
        Err(e) => {
            note_gone(ex, ctx, s, &e);
            return Err(engine_error(&e, "taking the screenshot", false));
        }
    };
    let (width, height) = aab_plugin_api::screenshot::png_size(&png, "the browser")?;
    let path = target.write(&s.session_id, &png)?;
    Ok(json!({"ok": true, "operation": "screenshot", "sessionId": s.session_id, "path": path, "width": width, "height": height, "bytes": png.len(),
              "sha256": sha256_hex(&png), "page": lock(&s.state).page.to_json()}))
}

// ------------------------------------------------------------------ events, receipt, close

fn events(ex: &Executor, ctx: &Context<'_>, a: EventsArgs) -> Result<Value, ProviderError> {
    if let Some(s) = ex.live(&a.session_id) {
        super::renew(&s);
    }
    let limit = a.limit.unwrap_or(DEFAULT_EVENTS_LIMIT) as usize;
    let mut v = ex.records.events(ctx, &a.session_id, a.after_sequence.unwrap_or(0), limit)?;
    v["ok"] = json!(true);
    v["operation"] = json!("events");
    v["sessionId"] = json!(a.session_id);
    v["live"] = json!(ex.live(&a.session_id).is_some());
    Ok(v)
}

async fn receipt(ex: &Executor, ctx: &Context<'_>, a: ReceiptArgs) -> Result<Value, ProviderError> {
    if let Some(s) = ex.live(&a.session_id) {
        super::renew(&s);
    }
    let record = ex.records.find(ctx, &a.session_id, &a.action_id)?;
    let record = match record {
        Some(r) if r["status"] == "pending" || r["status"] == "unresolved" => Some(super::hooks::settle_from_page(ex, ctx, &a.session_id, r).await),
        other => other,
    };
    let status = record.as_ref().and_then(|r| r["status"].as_str()).unwrap_or("unknown").to_string();
    Ok(json!({"ok": true, "operation": "receipt", "sessionId": a.session_id, "actionId": a.action_id, "status": status, "settled": status == "settled", "receipt": record}))
}

async fn close(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, a: CloseArgs) -> Result<Value, ProviderError> {
    let id = a.session_id.as_str();
    let Some(s) = ex.live(id) else {
        let row = lock(&ex.rows).get(id).cloned();
        return match row {
            Some(r) if r.ended.is_some() => Err(super::ended_error(id, r.ended.unwrap_or(EndReason::Closed), r.ended_at_ms)),
            // A former runtime's session nobody recovered: close it where it is.
            Some(r) => {
                ctx.mark_dispatched();
                let outcome = match super::hooks::attach(&r) {
                    Some(page) => page.close(budget(ctx)).await,
                    None => Ok(()),
                };
                if let Err(e) = &outcome
                    && e.may_have_reached()
                {
                    ex.bury(Some(ctx), id, EndReason::Closed, json!({"close": e.message(), "mayRemain": true}));
                    return Err(engine_error(e, "deleting the remote session", true));
                }
                ex.bury(Some(ctx), id, EndReason::Closed, json!({"dormant": true}));
                Ok(json!({"ok": true, "operation": "close", "sessionId": id, "closed": true, "remote": if outcome.is_ok() { "deleted" } else { "already-gone" }, "recovered": false}))
            }
            None => Err(not_dispatched("web_executor_session_not_found", format!("no executor session {id:?} is known")).with_field("sessionId")),
        };
    };
    {
        let mut st = lock(&s.state);
        if let Some(reason) = st.ending {
            return Err(super::ended_error(id, reason, None));
        }
        st.ending = Some(EndReason::Closed);
    }
    // Wait for nothing else: admission already serialises calls on this session.
    let mut record = base_record(inv, &s, "close", "pending");
    if let Err(e) = ex.records.put(ctx, id, &record) {
        lock(&s.state).ending = None;
        return Err(e.not_dispatched());
    }
    ctx.mark_dispatched();
    let result = s.engine.close(budget(ctx)).await;
    let remote = match &result {
        Ok(()) => "deleted",
        Err(EngineError::Gone { .. }) | Err(EngineError::Refused { .. }) => "already-gone",
        Err(_) => "unknown",
    };
    ex.end(Some(ctx), &s, EndReason::Closed, json!({"remote": remote}));
    match result {
        Err(e) if e.may_have_reached() => {
            record["status"] = json!("unresolved");
            record["error"] = json!(e.message());
            let _ = ex.records.put(ctx, id, &record);
            Err(ProviderError::new("web_executor_close_lost", format!("no complete answer to deleting the remote session ({}); it may still exist until the endpoint's own idle timeout", e.message()))
                .with_details(json!({"webdriverSessionId": s.webdriver_session_id, "endpoint": s.endpoint, "receipt": record})))
        }
        _ => {
            record["status"] = json!("settled");
            record["closed"] = json!(true);
            record["remote"] = json!(remote);
            record["atMs"] = json!(now_ms());
            ex.records.put(ctx, id, &record)?;
            Ok(json!({"ok": true, "operation": "close", "sessionId": id, "actionId": inv.action_id, "closed": true, "remote": remote, "receipt": record}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dom(controls: Value, truncated: bool) -> Value {
        json!({"controls": controls, "truncated": truncated, "controlCount": 3})
    }

    fn sel(by: SelectorBy, value: &str, name: Option<&str>) -> Selector {
        Selector { by, value: value.into(), name: name.map(str::to_string) }
    }

    #[test]
    fn selectors_bind_exactly_one_visible_control() {
        let d = dom(
            json!([
                {"elementId": "e1", "tag": "button", "text": "Save", "ariaLabel": "", "name": "", "visible": true},
                {"elementId": "e2", "tag": "button", "text": "Save", "ariaLabel": "", "name": "draft", "visible": true},
                {"elementId": "e3", "tag": "input", "text": "", "ariaLabel": "Email", "name": "email", "visible": false}
            ]),
            false,
        );
        assert_eq!(bind_in_snapshot(&d, &sel(SelectorBy::ElementId, "e2", None)).unwrap()["elementId"], "e2");
        let e = bind_in_snapshot(&d, &sel(SelectorBy::Text, "Save", None)).unwrap_err();
        assert_eq!((e.error.as_str(), e.dispatched), ("web_executor_selector_ambiguous", Some(false)));
        assert_eq!(bind_in_snapshot(&d, &sel(SelectorBy::Text, "Save", Some("draft"))).unwrap()["elementId"], "e2", "name narrows");
        let e = bind_in_snapshot(&d, &sel(SelectorBy::AriaLabel, "Email", None)).unwrap_err();
        assert_eq!(e.error, "web_executor_selector_not_found", "hidden controls never bind");
        // A truncated snapshot binds by elementId only.
        let t = dom(json!([{"elementId": "e1", "tag": "a", "text": "x", "visible": true}]), true);
        assert_eq!(bind_in_snapshot(&t, &sel(SelectorBy::Text, "x", None)).unwrap_err().error, "web_executor_snapshot_truncated");
        assert!(bind_in_snapshot(&t, &sel(SelectorBy::ElementId, "e1", None)).is_ok());
        // CSS matches: the one visible.
        let m = vec![json!({"elementId": "e7", "visible": true}), json!({"elementId": "e8", "visible": false})];
        assert_eq!(bind_css_matches(&m, 2, &sel(SelectorBy::Css, ".x", None)).unwrap()["elementId"], "e7");
        assert_eq!(bind_css_matches(&m[1..], 1, &sel(SelectorBy::Css, ".x", None)).unwrap_err().error, "web_executor_selector_not_found");
        let two = vec![json!({"elementId": "e7", "visible": true}), json!({"elementId": "e9", "visible": true})];
        assert_eq!(bind_css_matches(&two, 2, &sel(SelectorBy::Css, ".x", None)).unwrap_err().error, "web_executor_selector_ambiguous");
    }

    #[test]
    fn effects_follow_the_action() {
        let act = |v: Value| serde_json::from_value::<Action>(v).unwrap();
        assert_eq!(effect_of(&act(json!({"type": "scroll"})), true), Effect::IntoView);
        assert_eq!(effect_of(&act(json!({"type": "scroll", "deltaY": 300})), true), Effect::Wheel);
        assert_eq!(effect_of(&act(json!({"type": "scroll", "deltaY": 300})), false), Effect::Wheel);
        assert!(Effect::Input.mark_before_arm() && !Effect::Click.mark_before_arm());
        let r = action_record(&act(json!({"type": "input", "text": "secret"})));
        assert_eq!(r["textLength"], 6);
        assert!(!r.to_string().contains("secret"), "typed text is never recorded");
    }

    #[test]
    fn engine_errors_keep_the_dispatch_facts() {
        let lost = EngineError::Lost("timeout".into());
        let e = engine_error(&lost, "click", true);
        assert_eq!((e.error.as_str(), e.dispatched), ("web_executor_action_lost", None), "after the mark a lost reply is ambiguous");
        assert_eq!(engine_error(&lost, "observe", false).dispatched, Some(false));
        let gone = EngineError::Gone { message: "invalid session id".into(), sent: false };
        assert_eq!(engine_error(&gone, "click", true).dispatched, Some(false), "a session that was already gone did nothing");
        let gone_sent = EngineError::Gone { message: "closed".into(), sent: true };
        assert_eq!((engine_error(&gone_sent, "click", true).error.as_str(), engine_error(&gone_sent, "click", true).dispatched), ("web_executor_session_lost", None));
        assert_eq!(engine_error(&EngineError::NotSent("refused".into()), "click", true).dispatched, Some(false));
    }

    #[test]
    fn engine_choice_follows_endpoint_and_capabilities() {
        assert_eq!(choose_engine(None, None, false).unwrap(), (EngineKind::Cdp, None));
        assert_eq!(choose_engine(None, Some("http://127.0.0.1:1"), false).unwrap(), (EngineKind::Webdriver, Some("http://127.0.0.1:1".into())));
        assert_eq!(choose_engine(Some(EngineKind::Cdp), Some("http://127.0.0.1:1"), false).unwrap_err().field.as_deref(), Some("endpoint"));
        assert_eq!(choose_engine(Some(EngineKind::Cdp), None, true).unwrap_err().error, "web_executor_engine_mismatch");
        if std::env::var_os(ENV_WEBDRIVER_URL).is_none() {
            assert_eq!(choose_engine(Some(EngineKind::Webdriver), None, false).unwrap_err().error, "web_executor_endpoint_required");
            assert_eq!(choose_engine(None, None, true).unwrap_err().error, "web_executor_endpoint_required");
        }
        let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({"platformName": "Fake"})).unwrap();
        assert_eq!(webdriver_browser(None, Some(&caps)), None, "platformName without browserName: no browser");
        assert_eq!(webdriver_browser(None, None), Some(BrowserKind::Chromium));
    }
}
