//! Dispatch of one validated command to its plugin: builds the invocation, runs
//! the blocking plugin call off the async workers, enforces the single deadline,
//! and turns the plugin's outcome into dispatch facts. A failure before the
//! plugin's dispatch mark is `dispatched:false, ambiguous:false`; after it the
//! outcome is ambiguous. Nothing here ever retries a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aab_plugin_api::loader::{self, CallState, LoadedModule};
use aab_plugin_api::protocol::{INVOCATION_SCHEMA, Invocation, Outcome};
use serde_json::{Value, json};

use crate::error::CommandError;
use crate::registry::RegisteredCommand;
use crate::reply::ExecOutcome;

/// Everything one plugin call needs from the runtime.
pub struct PluginCall<'a> {
    pub module: LoadedModule,
    pub plugin: &'a str,
    pub command: &'a RegisteredCommand,
    pub arguments: Value,
    pub cwd: String,
    pub runtime_id: &'a str,
    pub request_id: Option<String>,
    pub timeout: Duration,
    pub cancelled: Arc<AtomicBool>,
}

/// The effective timeout: `timeoutMs` argument (already validated against the
/// command's maximum) or the command's default.
pub fn timeout_of(command: &RegisteredCommand, arguments: &Value) -> Duration {
    let ms = arguments.get("timeoutMs").and_then(Value::as_u64).unwrap_or(command.spec.default_timeout_ms);
    Duration::from_millis(ms.clamp(1, command.spec.max_timeout_ms.max(1)))
}

/// JSON services a plugin may call through `Context::host_call`.
fn host_service(plugin: String, runtime_id: String) -> impl Fn(&str, &str) -> Result<String, String> + Send + Sync {
    move |method, params| match method {
        "host.info" => Ok(json!({
            "hostVersion": crate::HOST_VERSION,
            "pluginApi": aab_plugin_api::protocol::PLUGIN_API_VERSION,
            "runtimeId": runtime_id,
            "plugin": plugin,
        })
        .to_string()),
        "host.echo" => serde_json::from_str::<Value>(params)
            .map(|v| json!({"params": v}).to_string())
            .map_err(|e| json!({"error": "invalid_argument", "message": format!("params are not JSON: {e}")}).to_string()),
        "host.time" => Ok(json!({"unixMs": crate::ids::now_ms()}).to_string()),
        other => Err(json!({"error": "unsupported_host_service", "message": format!("the host offers no service `{other}`")}).to_string()),
    }
}

pub async fn invoke_plugin(call: PluginCall<'_>) -> ExecOutcome {
    let deadline = Instant::now() + call.timeout;
    let dispatched = Arc::new(AtomicBool::new(false));
    let plugin_name = call.plugin.to_string();
    let log_name = plugin_name.clone();
    let callbacks = loader::host_callbacks(CallState {
        deadline,
        cancelled: call.cancelled.clone(),
        dispatched: dispatched.clone(),
        logger: Box::new(move |level, message| tracing::info!(plugin = %log_name, level, "{message}")),
        service: Box::new(host_service(plugin_name, call.runtime_id.to_string())),
    });
    let invocation = Invocation {
        schema: INVOCATION_SCHEMA.into(),
        command: call.command.spec.command.clone(),
        arguments: call.arguments,
        action_id: crate::ids::uuid_v4(),
        runtime_epoch: call.runtime_id.to_string(),
        request_id: call.request_id,
        cwd: call.cwd,
        timeout_ms: call.timeout.as_millis() as u64,
    };
    let request = serde_json::to_string(&invocation).expect("invocation serialises");
    let module = call.module;
    let handle = tokio::task::spawn_blocking(move || module.call("invoke", &request, &callbacks));
    let raw = match tokio::time::timeout_at(deadline.into(), handle).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(join)) => {
            // The SDK contains panics, so this is a host-side failure of the call thread.
            return ExecOutcome::Failed(after_mark(&dispatched, "plugin_call_failed", format!("plugin call did not complete: {join}")));
        }
        Err(_) => {
            call.cancelled.store(true, Ordering::SeqCst);
            return ExecOutcome::Failed(after_mark(
                &dispatched,
                "deadline_exceeded",
                format!("`{}` did not finish within {} ms", invocation.command, call.timeout.as_millis()),
            ));
        }
    };
    let marked = dispatched.load(Ordering::SeqCst);
    let outcome: Outcome = match serde_json::from_str(&raw) {
        Ok(o) => o,
        Err(e) => return ExecOutcome::Failed(after_mark(&dispatched, "plugin_output_invalid", format!("plugin returned an invalid outcome: {e}"))),
    };
    if outcome.ok {
        return match (outcome.kind.as_deref(), outcome.value) {
            (Some("text"), Some(Value::String(t))) => ExecOutcome::Text(t),
            (Some("bytes"), Some(Value::Array(items))) => {
                let bytes: Option<Vec<u8>> = items.iter().map(|v| v.as_u64().and_then(|n| u8::try_from(n).ok())).collect();
                match bytes {
                    Some(b) => ExecOutcome::Bytes(b),
                    None => ExecOutcome::Failed(after_mark(&dispatched, "plugin_output_invalid", "bytes outcome is not a byte array".into())),
                }
            }
            (Some("json") | None, v) => ExecOutcome::Json(v.unwrap_or(Value::Null)),
            (kind, _) => ExecOutcome::Failed(after_mark(&dispatched, "plugin_output_invalid", format!("unsupported outcome kind {kind:?}"))),
        };
    }
    let e = outcome.error.unwrap_or_else(|| aab_plugin_api::ProviderError::new("plugin_output_invalid", "failed outcome without an error"));
    let dispatched_fact = match (e.dispatched, marked) {
        (Some(d), _) => Some(d),
        (None, true) => Some(true),
        (None, false) => Some(false),
    };
    ExecOutcome::Failed(CommandError {
        code: e.error,
        message: e.message,
        field: e.field,
        details: e.details,
        dispatched: dispatched_fact,
        ambiguous: dispatched_fact != Some(false),
    })
}

/// An error whose dispatch fact comes from the mark: before it nothing happened;
/// after it the effect may or may not have happened (unknown, ambiguous).
fn after_mark(dispatched: &AtomicBool, code: &str, message: String) -> CommandError {
    if dispatched.load(Ordering::SeqCst) { CommandError::ambiguous(code, message) } else { CommandError::new(code, message) }
}
