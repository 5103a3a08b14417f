//! The shared renderer in a page without an SDK: each turn calls
//! `AiAppBridgeWeb.h5Render` (error prefix `web_executor_`) through the engine;
//! when the page does not carry this build of the Web SDK file (a new document,
//! or a page with an older copy), the file is injected once and the turn runs
//! again. Every turn passes a fresh seed, so a document first seen by this turn
//! gets a documentId no earlier document had.

use std::time::Duration;

use serde_json::{Value, json};

use super::engine::{Engine, EngineError};

/// The Web SDK file; its `h5Render` is the renderer.
pub const SDK_JS: &str = include_str!("../../sdk/ai-app-bridge-web.js");
pub const PREFIX: &str = "web_executor_";
/// The executor turns the injected file must offer (`executorRevision` in the SDK).
const REVISION: u32 = 1;

fn call_function() -> String {
    format!(
        "function (request) {{ var A = globalThis.AiAppBridgeWeb; if (!A || A.executorRevision !== {REVISION} || typeof A.h5Render !== 'function') return {{ __aabAbsent: true }}; return A.h5Render(request); }}"
    )
}

fn seed() -> String {
    crate::ids::hex32()[..16].to_string()
}

/// One turn's reply and whether the SDK file was injected for it.
pub struct Turn {
    pub reply: Value,
    pub injected: bool,
}

/// Run one renderer turn: `{operation, seed, errorPrefix, payload?, geometry?, returnElement?}`.
pub async fn turn(engine: &Engine, operation: &str, payload: Option<Value>, extra: Value, budget: Duration) -> Result<Turn, EngineError> {
    let deadline = tokio::time::Instant::now() + budget;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut request = json!({"operation": operation, "seed": seed(), "errorPrefix": PREFIX});
    if let Some(p) = payload {
        request["payload"] = p;
    }
    if let (Value::Object(r), Value::Object(e)) = (&mut request, extra) {
        r.extend(e);
    }
    let function = call_function();
    let mut reply = engine.call(&function, &request, left()).await?;
    let mut injected = false;
    if reply.get("__aabAbsent") == Some(&Value::Bool(true)) {
        engine.inject(SDK_JS, left()).await?;
        injected = true;
        reply = engine.call(&function, &request, left()).await?;
    }
    if !reply.is_object() || !reply.get("ok").is_some_and(Value::is_boolean) {
        let text: String = reply.to_string().chars().take(300).collect();
        return Err(EngineError::BadReply(format!("unexpected renderer reply: {text}")));
    }
    Ok(Turn { reply, injected })
}

/// A renderer refusal `{ok:false, error, message, …}` → (code, message, details).
pub fn refusal(reply: &Value) -> (String, String, Value) {
    let code = reply.get("error").and_then(Value::as_str).filter(|c| !c.is_empty()).unwrap_or("web_executor_renderer_failed").to_string();
    let message = reply.get("message").and_then(Value::as_str).unwrap_or("the renderer refused").to_string();
    let mut details = serde_json::Map::new();
    for key in ["interaction", "geometry", "preparedGeometry", "field", "controlCount", "scriptError", "refocused"] {
        if let Some(v) = reply.get(key) {
            details.insert(key.to_string(), v.clone());
        }
    }
    (code, message, Value::Object(details))
}

/// Whether a failed read may succeed a moment later (the document changed under
/// the evaluation, e.g. while a navigation commits).
pub fn transient(e: &EngineError) -> bool {
    match e {
        EngineError::Refused { message, .. } | EngineError::Script(message) => {
            let m = message.to_ascii_lowercase();
            m.contains("context was destroyed") || m.contains("cannot find context") || m.contains("navigated or closed") || m.contains("no such execution context")
                || m.contains("document unloaded") || m.contains("detached")
        }
        _ => false,
    }
}
