//! The Runner's route table (protocols §5.3) and its connection loop. Every
//! request passes the identity check first; every answer, rejection or not,
//! goes out in the `{wdaBinding, sessionId, value}` envelope. Reads that touch
//! the screen run on a blocking thread (XCTest's main queue), control routes
//! (`/aab/status`, cancel, result) never wait for the action in flight.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::binding::{self, Rejection, TargetHeaders};
use super::http::{self, ReadError, Request};
use super::store::Scope;
use super::{Shared, action, exec, ids, ops};
use crate::screen::Foreground;

const MAX_BODY: usize = 4 * 1024 * 1024;
const MAX_ACTION_BODY: usize = 256 * 1024;
const W3C_ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// Most element refs one find returns.
const MAX_ELEMENTS: usize = 1000;

fn body_limit(_method: &str, path: &str) -> usize {
    if path == "/aab/action" { MAX_ACTION_BODY } else { MAX_BODY }
}

/// One route's answer.
struct Answer {
    status: u16,
    value: Value,
    drop_reply: bool,
}

impl Answer {
    fn ok(value: Value) -> Answer {
        Answer { status: 200, value, drop_reply: false }
    }
}

impl From<Rejection> for Answer {
    fn from(r: Rejection) -> Answer {
        Answer { status: r.status, value: r.value(), drop_reply: false }
    }
}

pub async fn serve_connection(shared: Arc<Shared>, mut socket: TcpStream) {
    let mut carry = Vec::new();
    loop {
        let unread = match http::read_request(&mut socket, &mut carry, body_limit).await {
            Ok(req) => {
                let answer = handle(&shared, &req).await;
                if answer.drop_reply {
                    // The action ran and persisted; the reply is lost with the connection.
                    shared.screen.record(json!({ "source": "wda", "event": "reply-dropped", "actionId": answer.value["actionId"], "runnerEpoch": shared.epoch }));
                    let _ = socket.shutdown().await;
                    return;
                }
                let body = binding::envelope(&shared, shared.session().map(|s| s.session_id).as_deref(), answer.value);
                if http::write_response(&mut socket, answer.status, &body, req.keep_alive).await.is_err() || !req.keep_alive {
                    let _ = socket.shutdown().await;
                    return;
                }
                continue;
            }
            Err(ReadError::Closed) => return,
            Err(ReadError::Malformed(m)) => Rejection { status: 400, code: "invalid_ios_wda_request", message: m },
            Err(ReadError::TooLarge { limit }) => Rejection::new("ios_wda_request_too_large", format!("the request body is larger than {limit} bytes")),
        };
        // The request was not read to its end: answer, then drain what the
        // client is still sending so closing does not reset the reply away.
        let body = binding::envelope(&shared, shared.session().map(|s| s.session_id).as_deref(), unread.value());
        let _ = http::write_response(&mut socket, unread.status, &body, false).await;
        http::close_draining(socket).await;
        return;
    }
}

async fn handle(shared: &Arc<Shared>, req: &Request) -> Answer {
    if let Err(r) = binding::check_identity(shared, req) {
        return r.into();
    }
    let segments: Vec<&str> = req.path.strip_prefix('/').unwrap_or_default().split('/').collect();
    let result = match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["aab", "status"]) => Ok(Answer::ok(aab_status(shared))),
        ("GET", ["aab", "session"]) => aab_session(shared).await.map(Answer::ok),
        ("POST", ["aab", "action"]) => managed_action(shared, req).await,
        ("GET", ["aab", "execution", "result"]) => execution_result(shared, req).await.map(Answer::ok),
        ("POST", ["aab", "execution", "cancel"]) => match json_body(req) {
            Ok(body) => exec::cancel(shared, &body).await.map(Answer::ok),
            Err(r) => Err(r),
        },
        ("GET", ["status"]) => Ok(Answer::ok(w3c_status(shared))),
        ("GET", ["session", id, "source"]) => source(shared, req, id).await.map(Answer::ok),
        ("POST", ["session", id, "elements"]) => elements(shared, req, id).await.map(Answer::ok),
        _ => Err(Rejection::new("ios_wda_route_unsupported", format!("{} {} is not served by the prepared Runner", req.method, req.path))),
    };
    result.unwrap_or_else(Answer::from)
}

fn json_body(req: &Request) -> Result<Value, Rejection> {
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(Rejection::new("invalid_ios_wda_json", "the request body must be a JSON object")),
        Err(e) => Err(Rejection::new("invalid_ios_wda_json", format!("the request body is not JSON: {e}"))),
    }
}

/// Runs screen work on a blocking thread (the screen is synchronous, like XCTest's main queue).
async fn on_main<T: Send + 'static>(shared: &Arc<Shared>, f: impl FnOnce(&Shared) -> T + Send + 'static) -> Result<T, Rejection> {
    let s = shared.clone();
    tokio::task::spawn_blocking(move || f(&s)).await.map_err(|_| Rejection::new("ios_wda_target_changed", "the main queue did not answer"))
}

fn aab_status(shared: &Shared) -> Value {
    let (active, _) = shared.slot.snapshot();
    json!({
        "ok": true,
        "executionSchema": action::EXECUTION_SCHEMA,
        "ready": shared.store.available(),
        "active": active,
        "nativeTargetSchema": "aab.ios-native-target/v1",
        "orientationSchema": "aab.ios-orientation/v1",
    })
}

async fn aab_session(shared: &Arc<Shared>) -> Result<Value, Rejection> {
    let foreground = on_main(shared, |s| s.screen.foreground()).await?;
    Ok(json!({
        "foreground": foreground.map(|f| json!({ "bundleId": f.bundle_id, "processId": f.process_id })),
        "session": shared.session().map(|s| s.to_json()),
    }))
}

async fn managed_action(shared: &Arc<Shared>, req: &Request) -> Result<Answer, Rejection> {
    let body = json_body(req)?;
    let request = action::parse(&body, &shared.epoch)?;
    let submitted = exec::submit(shared, request).await?;
    Ok(Answer { status: 200, value: submitted.value, drop_reply: submitted.drop_reply })
}

async fn execution_result(shared: &Arc<Shared>, req: &Request) -> Result<Value, Rejection> {
    let invalid = |m: String| Rejection::new("invalid_ios_wda_execution", m);
    let (mut action_id, mut epoch, mut cursor) = (None, None, None);
    for (k, v) in &req.query {
        let slot = match k.as_str() {
            "actionId" => &mut action_id,
            "runtimeEpoch" => &mut epoch,
            "cursor" => &mut cursor,
            other => return Err(invalid(format!("unknown query parameter {other:?}"))),
        };
        if slot.replace(v.clone()).is_some() {
            return Err(invalid(format!("query parameter {k:?} given twice")));
        }
    }
    let action_id = action_id.filter(|a| ids::valid_token(a)).ok_or_else(|| invalid("actionId must be an action id".into()))?;
    let epoch = epoch.filter(|e| ids::valid_epoch(e)).ok_or_else(|| invalid("runtimeEpoch must be a runtime epoch".into()))?;
    let s = shared.clone();
    let page = tokio::task::spawn_blocking(move || {
        let scope = Scope { runner_bundle_id: &s.cfg.runner_bundle_id, action_id: &action_id, runtime_epoch: &epoch };
        s.store.page(scope, cursor.as_deref())
    })
    .await
    .map_err(|e| Rejection::new("ios_wda_completion_read_failed", e.to_string()))?;
    page.map_err(|e| Rejection::new(e.code(), e.message().to_string()))
}

fn w3c_status(shared: &Shared) -> Value {
    json!({
        "ready": true,
        "message": "WebDriverAgent is ready to accept commands",
        "state": "success",
        "os": { "name": "iOS", "version": "18.5", "sdkVersion": "18.5" },
        "ios": { "ip": shared.cfg.bind.to_string() },
        "build": { "productBundleIdentifier": shared.cfg.runner_bundle_id, "version": "14.1.1" },
    })
}

/// A targeted read's binding: the headers and the path name the Runner's
/// session, and its App/PID is still foreground.
fn bound_target(shared: &Shared, headers: &TargetHeaders, path_session: &str) -> Result<Foreground, Rejection> {
    let Some(session) = shared.session() else { return Err(Rejection::new("ios_wda_session_required", "the Runner has no session; create one with a session-create action")) };
    if headers.session_id != session.session_id || path_session != session.session_id {
        return Err(Rejection::new("ios_wda_session_changed", format!("the Runner's session is {}", session.session_id)));
    }
    if headers.bundle_id != session.bundle_id || headers.process_id != session.process_id {
        return Err(Rejection::new("ios_wda_target_changed", "the session belongs to another App or process"));
    }
    let fg = Foreground { bundle_id: session.bundle_id, process_id: session.process_id };
    if shared.screen.foreground().as_ref() != Some(&fg) {
        return Err(Rejection::new("ios_wda_target_changed", "the session's App/PID is no longer foreground"));
    }
    Ok(fg)
}

async fn source(shared: &Arc<Shared>, req: &Request, session: &str) -> Result<Value, Rejection> {
    let headers = binding::target_headers(req)?;
    let json_format = req.query.len() == 1 && req.query[0] == ("format".to_string(), "json".to_string());
    if !json_format {
        return Err(Rejection::new("ios_wda_route_unsupported", "the prepared Runner serves the source only as ?format=json"));
    }
    let session = session.to_string();
    on_main(shared, move |s| {
        let fg = bound_target(s, &headers, &session)?;
        s.screen.source(&fg).ok_or_else(|| Rejection::new("ios_wda_target_changed", "the App left the foreground"))
    })
    .await?
}

async fn elements(shared: &Arc<Shared>, req: &Request, session: &str) -> Result<Value, Rejection> {
    let headers = binding::target_headers(req)?;
    let body = json_body(req)?;
    let obj = body.as_object().into_iter().flatten();
    if obj.map(|(k, _)| k.as_str()).any(|k| k != "using" && k != "value") || body.get("using").is_none() || body.get("value").is_none() {
        return Err(Rejection::new("invalid_ios_wda_json", "the find body must be exactly {using, value}"));
    }
    if body["using"] != "accessibility id" {
        return Err(Rejection::new("ios_wda_route_unsupported", "the prepared Runner finds elements only by \"accessibility id\""));
    }
    let wanted = match body["value"].as_str() {
        Some(v) if !v.is_empty() && v.len() <= 1024 => v.to_string(),
        _ => return Err(Rejection::new("invalid_ios_wda_json", "value must be a non-empty accessibility id")),
    };
    let session = session.to_string();
    on_main(shared, move |s| {
        let fg = bound_target(s, &headers, &session)?;
        let tree = s.screen.source(&fg).ok_or_else(|| Rejection::new("ios_wda_target_changed", "the App left the foreground"))?;
        let refs: Vec<Value> = ops::find_nodes(&tree, |n| n["rawIdentifier"] == wanted.as_str(), MAX_ELEMENTS)
            .into_iter()
            .filter_map(|n| n["elementId"].as_str())
            .map(|id| json!({ W3C_ELEMENT_KEY: id }))
            .collect();
        Ok(Value::Array(refs))
    })
    .await?
}
