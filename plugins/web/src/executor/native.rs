//! Sessions without page scripts (a WebDriver endpoint whose driver does not run
//! JavaScript, such as an Appium driver): observation is the endpoint's page
//! source, selectors are WebDriver locators (`css` → `css selector`, `ariaLabel`
//! → `accessibility id`, `text` → an XPath on the element's text), and actions
//! are WebDriver's element commands. With no page to prove a delivery, the
//! endpoint's complete success reply settles the action (`delivery.source:
//! "endpoint-reply"`); a lost reply stays unresolved.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aab_plugin_api::{Context, Invocation, ProviderError};
use serde_json::{Value, json};

use super::args::{ActArgs, ActionType, Selector, SelectorBy, WaitArgs};
use super::engine::{Armed, Engine, EngineError, key_def};
use super::ops::engine_error;
use super::receipts::RECEIPT_SCHEMA;
use super::session::{Session, lock};
use super::webdriver::WdPage;
use super::{Executor, budget, margin, not_dispatched};
use crate::ids::now_ms;

/// Page source returned by observe, at most.
pub const MAX_SOURCE: usize = 256 * 1024;

fn page(s: &Session) -> Result<&Arc<WdPage>, ProviderError> {
    match &s.engine {
        Engine::WebDriver(p) => Ok(p),
        Engine::Cdp(_) => Err(not_dispatched("web_executor_script_unsupported", "this session runs no page scripts")),
    }
}

/// An XPath string literal for any text (quotes of both kinds through concat()).
pub fn xpath_literal(s: &str) -> String {
    if !s.contains('\'') {
        return format!("'{s}'");
    }
    if !s.contains('"') {
        return format!("\"{s}\"");
    }
    let parts: Vec<String> = s.split('\'').map(|p| format!("'{p}'")).collect();
    format!("concat({})", parts.join(", \"'\", "))
}

/// The WebDriver locator of a selector.
pub fn locator(sel: &Selector) -> Result<(&'static str, String), ProviderError> {
    if sel.name.is_some() {
        return Err(not_dispatched("web_executor_selector_unsupported", "`selector.name` needs page scripts; this session has none: use a css selector such as [name=...]").with_field("selector.name"));
    }
    match sel.by {
        SelectorBy::Css => Ok(("css selector", sel.value.clone())),
        SelectorBy::AriaLabel => Ok(("accessibility id", sel.value.clone())),
        SelectorBy::Text => Ok(("xpath", format!("//*[normalize-space(.)={}]", xpath_literal(&sel.value)))),
        SelectorBy::ElementId => Err(not_dispatched("web_executor_selector_unsupported", "elementIds come from a DOM observation, which this session cannot make: select by css, ariaLabel or text").with_field("selector.by")),
    }
}

fn clip(s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_string(), true)
}

pub async fn observe(s: &Session, ctx: &Context<'_>) -> Result<Value, ProviderError> {
    let p = page(s)?;
    let source = p.source(budget(ctx)).await.map_err(|e| engine_error(&e, "reading the page source", false))?;
    let bytes = source.len();
    let (source, truncated) = clip(source, MAX_SOURCE);
    let url = p.probe(budget(ctx)).await.ok();
    Ok(json!({"ok": true, "operation": "observe", "sessionId": s.session_id, "runtimeEpoch": lock(&s.state).runtime_epoch, "scripting": false,
              "snapshotId": null, "frameId": super::MAIN_FRAME, "documentId": null, "url": url, "controls": [], "controlCount": null,
              "source": source, "sourceBytes": bytes, "sourceTruncated": truncated, "observedAtMs": now_ms()}))
}

pub async fn act(ex: &Executor, ctx: &Context<'_>, inv: &Invocation, s: &Session, a: &ActArgs) -> Result<Value, ProviderError> {
    let p = page(s)?;
    if a.snapshot_id.is_some() || a.document_id.is_some() {
        return Err(not_dispatched(aab_plugin_api::h5::REOBSERVE_REQUIRED, "this session makes no DOM observations: act without snapshotId/documentId").with_field("snapshotId"));
    }
    let element = match &a.selector {
        Some(sel) => {
            let (using, value) = locator(sel)?;
            Some(p.find(using, &value, budget(ctx)).await.map_err(|e| match e {
                EngineError::Refused { error, .. } if error == "no such element" => {
                    not_dispatched("web_executor_selector_not_found", format!("no element matches {} {:?}", sel.by.as_str(), sel.value)).with_field("selector")
                }
                other => engine_error(&other, "finding the element", false),
            })?)
        }
        None => None,
    };
    let armed = Armed { x: 0.0, y: 0.0, element_ref: element.clone() };
    let mut record = json!({"schemaVersion": RECEIPT_SCHEMA, "actionId": inv.action_id, "runtimeEpoch": inv.runtime_epoch, "sessionId": s.session_id,
                            "operation": "act", "status": "pending", "engine": "webdriver", "endpoint": s.endpoint, "webdriverSessionId": s.webdriver_session_id,
                            "action": {"type": a.action.kind.as_str()}, "selector": a.selector.as_ref().map(|x| json!({"by": x.by.as_str(), "value": x.value})),
                            "element": element, "scripting": false, "atMs": now_ms()});
    ex.records.put(ctx, &s.session_id, &record).map_err(ProviderError::not_dispatched)?;
    lock(&s.state).actions += 1;
    ctx.mark_dispatched();
    let result = match a.action.kind {
        ActionType::Click => s.engine.click(&armed, budget(ctx)).await,
        ActionType::Input => s.engine.type_text(&armed, a.action.text.as_deref().unwrap_or_default(), budget(ctx)).await,
        ActionType::Key => s.engine.key(&key_def(a.action.key.as_deref().unwrap_or_default()).expect("the schema lists the keys"), budget(ctx)).await,
        ActionType::Scroll => s.engine.wheel(&armed, a.action.delta_x.unwrap_or(0.0), a.action.delta_y.unwrap_or(0.0), budget(ctx)).await,
    };
    match result {
        Ok(()) => {
            record["status"] = json!("settled");
            record["delivery"] = json!({"delivered": true, "source": "endpoint-reply", "trusted": null});
            record["atMs"] = json!(now_ms());
            ex.records.put(ctx, &s.session_id, &record)?;
            ex.records.event(Some(ctx), &s.session_id, "action-settled", json!({"actionId": inv.action_id, "by": "endpoint-reply"}));
            Ok(json!({"ok": true, "operation": "act", "sessionId": s.session_id, "actionId": inv.action_id, "status": "settled", "receipt": record}))
        }
        Err(e) => {
            let ambiguous = e.effect_may_have_acted();
            record["status"] = json!(if ambiguous { "unresolved" } else { "refused" });
            record["error"] = json!(e.message());
            let _ = ex.records.put(ctx, &s.session_id, &record);
            let mut err = engine_error(&e, "the element command", true);
            if ambiguous {
                err.dispatched = None;
                err = err.with_details(json!({"actionId": inv.action_id, "receipt": record}));
            } else {
                if let EngineError::Refused { error, .. } = &e {
                    err.error = format!("web_executor_{}", error.replace(' ', "_"));
                }
                err = err.not_dispatched();
            }
            Err(err)
        }
    }
}

pub async fn wait(s: &Session, ctx: &Context<'_>, a: &WaitArgs) -> Result<Value, ProviderError> {
    let p = page(s)?;
    let started = Instant::now();
    let remaining = ctx.remaining();
    let deadline = started + remaining.saturating_sub(margin(remaining));
    let target = match &a.selector {
        Some(sel) => Some(locator(sel)?),
        None => None,
    };
    let mut polls = 0u64;
    loop {
        if ctx.is_cancelled() {
            return Err(not_dispatched("cancelled", "wait was cancelled"));
        }
        polls += 1;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let found = match (&target, &a.text) {
            (Some((using, value)), _) => match p.find(using, value, left).await {
                Ok(el) => Some(el),
                Err(EngineError::Refused { error, .. }) if error == "no such element" => None,
                Err(e) => return Err(engine_error(&e, "waiting", false)),
            },
            (None, Some(text)) => match p.source(left).await {
                Ok(src) if src.contains(text.as_str()) => Some(Value::Null),
                Ok(_) => None,
                Err(e) => return Err(engine_error(&e, "waiting", false)),
            },
            (None, None) => return Err(not_dispatched("missing_argument", "wait needs `selector` or `text`").with_field("selector")),
        };
        if let Some(el) = found {
            return Ok(json!({"ok": true, "operation": "wait", "sessionId": s.session_id, "matched": true, "polls": polls, "waitedMs": started.elapsed().as_millis() as u64, "element": el, "scripting": false}));
        }
        if Instant::now() + Duration::from_millis(100) >= deadline {
            return Err(not_dispatched("web_executor_wait_timeout", format!("the condition did not hold within {} ms", started.elapsed().as_millis())).with_details(json!({"polls": polls})));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Note that a session runs no page scripts (its driver said so).
pub fn no_scripts(s: &Session) {
    s.scripting.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xpath_literals_quote_any_text() {
        assert_eq!(xpath_literal("Log in"), "'Log in'");
        assert_eq!(xpath_literal("it's"), "\"it's\"");
        assert_eq!(xpath_literal("a'b\"c"), "concat('a', \"'\", 'b\"c')");
        let sel = |by, name: Option<&str>| Selector { by, value: "x".into(), name: name.map(str::to_string) };
        assert_eq!(locator(&sel(SelectorBy::Css, None)).unwrap().0, "css selector");
        assert_eq!(locator(&sel(SelectorBy::AriaLabel, None)).unwrap().0, "accessibility id");
        assert_eq!(locator(&sel(SelectorBy::ElementId, None)).unwrap_err().error, "web_executor_selector_unsupported");
        assert_eq!(locator(&sel(SelectorBy::Css, Some("n"))).unwrap_err().field.as_deref(), Some("selector.name"));
    }
}
