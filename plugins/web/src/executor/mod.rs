//! `web-executor`: drive any web page without an SDK in it, through a local
//! headless Chromium over CDP (`cdp`) or any W3C WebDriver endpoint
//! (`webdriver`: chromedriver, Selenium Grid 4, Appium). This module owns the
//! executor's state — the live sessions, the persisted session table (recovery
//! after a runtime restart, tombstones of ended sessions), the action records and
//! event log — and the lease reaper; [`ops`] implements the operations, [`hooks`]
//! the host hooks (`reconcile`, `runtime-stop`).
//!
//! Every session is one admission lane and one ownership journal (`sessionId` is
//! both the target key and the device key), so parallel sessions never queue
//! behind each other and a lost action blocks only its own session.

pub mod args;
mod cdp;
mod engine;
pub mod hooks;
mod native;
mod ops;
mod receipts;
mod render;
pub mod schema;
mod session;
mod webdriver;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Value, json};

use crate::ids::now_ms;
use args::{EngineKind, ExecutorArgs};
use engine::{Engine, EngineError};
use receipts::Records;
use session::{EndReason, Row, Session, lock};

/// The only frame addressable so far: the top-level document.
pub const MAIN_FRAME: &str = "main";
/// The default WebDriver endpoint (declared in the manifest's `environment`).
pub const ENV_WEBDRIVER_URL: &str = "AI_APP_BRIDGE_WEBDRIVER_URL";
/// How often the reaper looks for expired leases.
const REAP_EVERY: Duration = Duration::from_millis(250);
/// What asking a former runtime's WebDriver session for its URL may take.
const RECOVERY_PROBE: Duration = Duration::from_secs(10);
/// Lease renewals logged at most this often per session.
const RENEWAL_EVENT_EVERY_MS: u64 = 5_000;
/// What closing one session may take when no caller waits for it (reaper).
const CLOSE_BUDGET: Duration = Duration::from_secs(10);

/// Time kept back from the host deadline so the provider's own, more precise
/// error reaches the caller.
pub fn margin(remaining: Duration) -> Duration {
    (remaining / 10).clamp(Duration::from_millis(50), Duration::from_millis(1000))
}

/// The budget of one step: what is left minus the margin.
pub fn budget(ctx: &Context<'_>) -> Duration {
    let r = ctx.remaining();
    r.saturating_sub(margin(r))
}

pub fn not_dispatched(code: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::new(code, message).not_dispatched()
}

pub struct Executor {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Persisted rows not live here: WebDriver sessions a former runtime left
    /// (recoverable) and tombstones of ended sessions.
    rows: Mutex<HashMap<String, Row>>,
    data_dir: Mutex<Option<PathBuf>>,
    table_note: Mutex<Value>,
    /// Serialises table writes (the file is rewritten whole).
    writing: Mutex<()>,
    records: Records,
    initialised: AtomicBool,
    this: Weak<Executor>,
}

impl Executor {
    pub fn new() -> Arc<Executor> {
        Arc::new_cyclic(|this| Executor {
            sessions: Mutex::new(HashMap::new()),
            rows: Mutex::new(HashMap::new()),
            data_dir: Mutex::new(None),
            table_note: Mutex::new(Value::Null),
            writing: Mutex::new(()),
            records: Records::default(),
            initialised: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    /// First call: the data dir and its table, the FactStore probe, the reaper.
    fn init(&self, ctx: &Context<'_>) {
        if self.initialised.swap(true, Ordering::SeqCst) {
            return;
        }
        self.records.facts.probe(ctx);
        let dir = ctx.data_dir().filter(|d| std::fs::create_dir_all(d).is_ok());
        if let Some(d) = &dir {
            let loaded = session::read_table(d);
            if let Some(p) = &loaded.problem {
                ctx.warn(&format!("web-executor: ignoring the session table: {p}"));
            }
            *lock(&self.table_note) = json!({"path": session::table_path(d), "rows": loaded.rows.len(), "skipped": loaded.skipped, "problem": loaded.problem});
            let mut rows = lock(&self.rows);
            for r in loaded.rows {
                rows.insert(r.session_id.clone(), r);
            }
        } else {
            *lock(&self.table_note) = json!({"path": null, "problem": "the host gave no data dir: sessions are not recoverable after a restart"});
        }
        *lock(&self.data_dir) = dir;
        let weak = self.this.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REAP_EVERY).await;
                let Some(ex) = weak.upgrade() else { return };
                ex.reap().await;
            }
        });
    }

    /// Rewrite the table: live sessions, dormant rows, the newest tombstones.
    fn persist(&self, durable: bool) {
        let Some(dir) = lock(&self.data_dir).clone() else { return };
        let _writing = lock(&self.writing);
        let mut rows: Vec<Row> = lock(&self.sessions).values().map(|s| s.row()).collect();
        let mut others: Vec<Row> = lock(&self.rows).values().cloned().collect();
        // Dormant rows first, then tombstones newest first, within the table's bound.
        others.sort_by_key(|r| (r.ended.is_some(), std::cmp::Reverse(r.ended_at_ms.unwrap_or(0))));
        let tombstones = others.iter().filter(|r| r.ended.is_some()).count();
        let drop_tombstones = tombstones.saturating_sub(session::MAX_TOMBSTONES);
        let keep = others.len() - drop_tombstones;
        rows.extend(others.into_iter().take(keep));
        let _ = session::write_table(&dir, &rows, durable);
    }

    fn live(&self, session_id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(session_id).cloned()
    }

    /// End a session: drop it from the live table, leave a tombstone, log it.
    fn end(&self, ctx: Option<&Context<'_>>, session: &Session, reason: EndReason, detail: Value) {
        lock(&self.sessions).remove(&session.session_id);
        let mut row = session.row();
        row.ended = Some(reason);
        row.ended_at_ms = Some(now_ms());
        lock(&self.rows).insert(row.session_id.clone(), row);
        self.persist(true);
        let kind = match reason {
            EndReason::Expired => "lease-expired",
            EndReason::Lost => "lost",
            _ => "closed",
        };
        self.records.event(ctx, &session.session_id, kind, json!({"reason": reason.as_str(), "detail": detail}));
    }

    /// A tombstone for a dormant row (closed or lost without being recovered).
    fn bury(&self, ctx: Option<&Context<'_>>, session_id: &str, reason: EndReason, detail: Value) {
        {
            let mut rows = lock(&self.rows);
            let Some(row) = rows.get_mut(session_id) else { return };
            row.ended = Some(reason);
            row.ended_at_ms = Some(now_ms());
        }
        self.persist(true);
        let kind = if reason == EndReason::Expired { "lease-expired" } else if reason == EndReason::Lost { "lost" } else { "closed" };
        self.records.event(ctx, session_id, kind, json!({"reason": reason.as_str(), "detail": detail}));
    }

    /// Close sessions whose lease ran out: live ones nobody is using, and dormant
    /// rows of a former runtime that nobody recovered in time.
    async fn reap(&self) {
        let now = now_ms();
        let expired: Vec<Arc<Session>> = lock(&self.sessions)
            .values()
            .filter(|s| s.busy.load(Ordering::SeqCst) == 0)
            .filter(|s| {
                let mut st = lock(&s.state);
                let due = st.ending.is_none() && session::lease_expired(st.lease_expires_at_ms, now);
                if due {
                    st.ending = Some(EndReason::Expired);
                }
                due
            })
            .cloned()
            .collect();
        for s in expired {
            let result = s.engine.close(CLOSE_BUDGET).await;
            self.end(None, &s, EndReason::Expired, json!({"leaseExpiredAtMs": lock(&s.state).lease_expires_at_ms, "close": close_outcome(&result)}));
        }
        let dormant: Vec<Row> = lock(&self.rows).values().filter(|r| r.ended.is_none() && session::lease_expired(r.lease_expires_at_ms, now)).cloned().collect();
        for row in dormant {
            let result = match hooks::attach(&row) {
                Some(page) => page.close(CLOSE_BUDGET).await,
                None => Ok(()),
            };
            self.bury(None, &row.session_id, EndReason::Expired, json!({"leaseExpiredAtMs": row.lease_expires_at_ms, "close": close_outcome(&result), "dormant": true}));
        }
    }

    /// The live session a call names, recovering a former runtime's WebDriver
    /// session from the table; the guard marks it busy and renews its lease.
    async fn acquire(&self, ctx: &Context<'_>, inv: &Invocation, session_id: &str) -> Result<Busy, ProviderError> {
        if let Some(s) = self.live(session_id) {
            {
                let st = lock(&s.state);
                if let Some(reason) = st.ending {
                    return Err(ended_error(session_id, reason, None));
                }
                if session::lease_expired(st.lease_expires_at_ms, now_ms()) {
                    // The reaper runs within a moment; the lease is over either way.
                    return Err(ended_error(session_id, EndReason::Expired, Some(st.lease_expires_at_ms)));
                }
            }
            return Ok(self.busy(ctx, s));
        }
        let row = lock(&self.rows).get(session_id).cloned();
        let Some(row) = row else {
            return Err(not_dispatched("web_executor_session_not_found", format!("no executor session {session_id:?} is known (open one with operation open)")).with_field("sessionId"));
        };
        if let Some(reason) = row.ended {
            return Err(ended_error(session_id, reason, row.ended_at_ms));
        }
        let s = self.recover(ctx, inv, row).await?;
        Ok(self.busy(ctx, s))
    }

    fn busy(&self, ctx: &Context<'_>, s: Arc<Session>) -> Busy {
        s.busy.fetch_add(1, Ordering::SeqCst);
        renew(&s);
        self.persist(false);
        // The log shows renewals, at most one per RENEWAL_EVENT_EVERY_MS.
        let now = now_ms();
        let logged = {
            let mut st = lock(&s.state);
            let due = now.saturating_sub(st.last_renewal_event_ms) >= RENEWAL_EVENT_EVERY_MS;
            if due {
                st.last_renewal_event_ms = now;
            }
            due.then_some(st.lease_expires_at_ms)
        };
        if let Some(expires) = logged {
            self.records.event(Some(ctx), &s.session_id, "lease-renewed", json!({"expiresAtMs": expires}));
        }
        Busy { session: s }
    }

    async fn recover(&self, ctx: &Context<'_>, inv: &Invocation, row: Row) -> Result<Arc<Session>, ProviderError> {
        let id = row.session_id.clone();
        if EngineKind::parse(&row.engine) != Some(EngineKind::Webdriver) {
            self.bury(Some(ctx), &id, EndReason::Lost, json!({"why": "a cdp browser ends with the runtime that started it"}));
            return Err(not_dispatched("web_executor_session_lost", format!("session {id:?} was a local cdp browser of a former runtime ({}); it ended with that runtime", row.runtime_epoch))
                .with_field("sessionId")
                .with_details(json!({"engine": "cdp", "formerRuntimeEpoch": row.runtime_epoch})));
        }
        let Some(page) = hooks::attach(&row) else {
            self.bury(Some(ctx), &id, EndReason::Lost, json!({"why": "the table row has no usable endpoint"}));
            return Err(not_dispatched("web_executor_session_lost", format!("session {id:?} cannot be recovered: its endpoint is unusable")).with_field("sessionId"));
        };
        // A bounded probe: an endpoint that hangs must not eat the caller's whole deadline.
        match page.probe(budget(ctx).min(RECOVERY_PROBE)).await {
            Ok(url) => {
                let now = now_ms();
                let s = Arc::new(Session::new(
                    id.clone(),
                    Engine::WebDriver(Arc::new(page)),
                    row.browser.clone().unwrap_or_else(|| "chromium".into()),
                    row.endpoint.clone(),
                    row.webdriver_session_id.clone(),
                    inv.runtime_epoch.clone(),
                    row.lease_ms,
                    now,
                    Some(row.runtime_epoch.clone()),
                    row.created_at_ms,
                ));
                lock(&s.state).page.url = Some(url.clone());
                lock(&self.rows).remove(&id);
                lock(&self.sessions).insert(id.clone(), s.clone());
                self.persist(true);
                self.records.event(Some(ctx), &id, "recovered", json!({"formerRuntimeEpoch": row.runtime_epoch, "runtimeEpoch": inv.runtime_epoch, "url": url,
                                                                       "webdriverSessionId": row.webdriver_session_id}));
                ctx.info(&format!("web-executor: recovered session {id} (WebDriver {})", row.webdriver_session_id.as_deref().unwrap_or("")));
                Ok(s)
            }
            Err(e @ (EngineError::NotSent(_) | EngineError::Lost(_))) => Err(not_dispatched(
                "web_executor_endpoint_unreachable",
                format!("session {id:?} of a former runtime could not be checked: its endpoint {} did not answer ({})", row.endpoint.as_deref().unwrap_or(""), e.message()),
            )
            .with_details(json!({"endpoint": row.endpoint, "webdriverSessionId": row.webdriver_session_id, "recoverable": true}))),
            Err(e) => {
                self.bury(Some(ctx), &id, EndReason::Lost, json!({"why": e.message()}));
                Err(not_dispatched("web_executor_session_lost", format!("session {id:?} of a former runtime is gone: {}", e.message()))
                    .with_field("sessionId")
                    .with_details(json!({"endpoint": row.endpoint, "webdriverSessionId": row.webdriver_session_id, "formerRuntimeEpoch": row.runtime_epoch})))
            }
        }
    }

    /// Run one validated call.
    pub async fn run(&self, ctx: &Context<'_>, inv: &Invocation, args: ExecutorArgs) -> Result<Value, ProviderError> {
        self.init(ctx);
        ctx.debug(&format!("web-executor {}", args.operation()));
        ops::run(self, ctx, inv, args).await
    }

    /// The `reconcile` hook.
    pub async fn reconcile(&self, ctx: &Context<'_>, request: Value) -> Result<Value, ProviderError> {
        self.init(ctx);
        hooks::reconcile(self, ctx, request).await
    }

    /// The `runtime-stop` hook.
    pub async fn runtime_stop(&self, ctx: &Context<'_>) -> Result<Value, ProviderError> {
        self.init(ctx);
        hooks::runtime_stop(self, ctx).await
    }
}

/// A call in flight on a session; dropping it renews the lease once more (a
/// long call never eats the lease it started with).
pub struct Busy {
    pub session: Arc<Session>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        renew(&self.session);
        self.session.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

fn renew(s: &Session) {
    let mut st = lock(&s.state);
    if st.ending.is_none() {
        st.lease_expires_at_ms = session::lease_expiry(now_ms(), st.lease_ms);
    }
}

fn close_outcome(r: &Result<(), EngineError>) -> Value {
    match r {
        Ok(()) => json!("closed"),
        Err(e) => json!({"error": e.message(), "mayRemain": e.may_have_reached()}),
    }
}

pub fn ended_error(session_id: &str, reason: EndReason, at_ms: Option<u64>) -> ProviderError {
    let what = match reason {
        EndReason::Closed => "was closed",
        EndReason::RuntimeStop => "was closed when the runtime stopped",
        EndReason::Expired => "expired (no call renewed its lease in time) and was closed",
        EndReason::Lost => "was lost (the browser, its node or the remote session went away)",
    };
    not_dispatched(reason.code(), format!("executor session {session_id:?} {what}; open a new one"))
        .with_field("sessionId")
        .with_details(json!({"sessionId": session_id, "reason": reason.as_str(), "endedAtMs": at_ms}))
}
