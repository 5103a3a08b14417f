//! `ui-observation`: the SDK's on-demand UI observation lease (`POST
//! /v1/ui/observation`, or `/v1/flutter/observation` for the Flutter runtime):
//! `start` (100..5000 ms) and `stop` (by leaseId) change the observer, `status`
//! reads it. The SDK's refusals keep their codes and were not dispatched.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppArgs, Budget, cancellable, sdk_route};
use crate::AndroidProvider;
use crate::manifest::{object, package_name, port, props};

fn spec() -> CommandSpec {
    let mut schema = object(
        props(json!({
            "packageName": package_name(),
            "port": port("Host port of an existing or wanted adb forward to the SDK socket"),
            "operation": {"type": "string", "enum": ["start", "status", "stop"], "description": "start a lease, report the observer, or stop a lease early"},
            "durationMs": {"type": "integer", "minimum": 100, "maximum": 5000, "description": "Lease length (start)"},
            "leaseId": {"type": "string", "minLength": 1, "maxLength": 128, "description": "The lease to stop (the leaseId start returned)"},
            "provider": {"type": "string", "enum": ["native", "flutter"], "description": "The app's native observer (default) or its Flutter runtime's"}
        })),
        &["operation", "packageName"],
    );
    schema["oneOf"] = json!([
        {"properties": {"operation": {"const": "start"}, "leaseId": false}, "required": ["durationMs"]},
        {"properties": {"operation": {"const": "status"}, "durationMs": false, "leaseId": false}},
        {"properties": {"operation": {"const": "stop"}, "durationMs": false}, "required": ["leaseId"]}
    ]);
    CommandSpec::conditional("ui-observation", ["start", "stop"])
        .platform("android")
        .domain("core")
        .target_kind("android-app")
        .summary("The app SDK's on-demand UI observation lease: start (durationMs 100..5000), status (active, remainingMs, leaseId, sampleCount), stop (leaseId); provider native or flutter.")
        .permission("capture.read")
        .target_key("serial")
        .target_key("packageName")
        .lane("observation")
        .timeouts(10_000, 30_000)
        .input_schema(schema)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UiObservationArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub operation: String,
    pub duration_ms: Option<u64>,
    pub lease_id: Option<String>,
    pub provider: Option<String>,
}

/// The SDK request body of an operation.
fn request_body(args: &UiObservationArgs) -> Value {
    match args.operation.as_str() {
        "start" => json!({"operation": "start", "durationMs": args.duration_ms}),
        "stop" => json!({"operation": "stop", "leaseId": args.lease_id}),
        op => json!({"operation": op}),
    }
}

/// The SDK's answer, checked: `ok:false` keeps the SDK's code (busy, lease
/// mismatch, invalid duration, no Flutter channel), refused = not dispatched.
fn observer_reply(package: &str, operation: &str, body: Value) -> Result<Value, ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let code = body.get("error").and_then(Value::as_str).unwrap_or(crate::sdk::http::BRIDGE_PROTOCOL_ERROR).to_string();
        let field = match code.as_str() {
            "invalid_ui_observation_duration" => Some("durationMs"),
            "ui_observation_lease_mismatch" => Some("leaseId"),
            _ => None,
        };
        let mut e = ProviderError::new(code, format!("the SDK of {package} refused ui-observation {operation}")).with_details(json!({"body": body})).not_dispatched();
        if let Some(f) = field {
            e = e.with_field(f);
        }
        return Err(e);
    }
    Ok(body)
}

pub struct UiObservation;
impl Command for UiObservation {
    type Provider = AndroidProvider;
    type Args = UiObservationArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: UiObservationArgs) -> Result<Reply, ProviderError> {
        let app = AppArgs { package_name: args.package_name.clone(), serial: args.serial.clone(), port: args.port, adb: args.adb.clone(), adb_timeout_ms: args.adb_timeout_ms };
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        let provider = args.provider.clone().unwrap_or_else(|| "native".to_string());
        let path = if provider == "flutter" { "/v1/flutter/observation" } else { "/v1/ui/observation" };
        cancellable(ctx, async {
            let (serial, route) = sdk_route(&app, &budget).await?;
            if args.operation != "status" {
                ctx.mark_dispatched();
            }
            let response = crate::sdk::http::request(route.forward.port, "POST", path, Some(&request_body(&args)), budget.deadline).await?;
            let mut reply = observer_reply(&args.package_name, &args.operation, response.body)?;
            for (k, v) in [("operation", json!(args.operation)), ("provider", json!(provider)), ("serial", json!(serial)), ("packageName", json!(args.package_name)), ("runtimeEpoch", json!(route.descriptor.runtime_epoch))] {
                reply[k] = v;
            }
            Ok(reply)
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> UiObservationArgs {
        let mut base = json!({"packageName": "com.x.app"});
        base.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn each_operation_sends_only_its_own_fields() {
        assert_eq!(request_body(&args(json!({"operation": "start", "durationMs": 300}))), json!({"operation": "start", "durationMs": 300}));
        assert_eq!(request_body(&args(json!({"operation": "stop", "leaseId": "L"}))), json!({"operation": "stop", "leaseId": "L"}));
        assert_eq!(request_body(&args(json!({"operation": "status", "provider": "flutter"}))), json!({"operation": "status"}));
    }

    #[test]
    fn sdk_refusals_keep_their_codes_and_name_the_argument() {
        let e = observer_reply("com.x.app", "stop", json!({"ok": false, "error": "ui_observation_lease_mismatch"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("ui_observation_lease_mismatch", Some("leaseId"), Some(false)));
        let e = observer_reply("com.x.app", "start", json!({"ok": false, "error": "ui_observation_busy"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref()), ("ui_observation_busy", None));
        assert_eq!(observer_reply("com.x.app", "start", json!({"ok": "yes"})).unwrap_err().error, "bridge_protocol_error");
        assert!(observer_reply("com.x.app", "status", json!({"ok": true, "active": false})).is_ok());
    }
}
