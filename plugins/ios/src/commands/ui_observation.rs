//! `ios-ui-observation` (aab-protocols §4.9): the SDK's on-demand UI observation
//! lease through `POST /v1/ui/observation` — `start` (durationMs 1..5000),
//! `status`, `stop` (by leaseId). A query in the catalog (it observes, it never
//! acts on the app); the SDK's refusals keep their codes and name the argument.

use aab_ios_transport::sdk;
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{app_args, read_with};
use crate::IosProvider;
use crate::manifest::{app_query, object, props, required};
use crate::runtime::with_facts;

pub const ROUTE: &str = "/v1/ui/observation";

app_args!(
    ObservationArgs {
        operation: String,
        duration_ms: Option<u64>,
        lease_id: Option<String>,
        /// Only `native` (the schema's enum): nothing to choose.
        #[allow(dead_code)]
        provider: Option<String>,
    }
);

fn request_body(a: &ObservationArgs) -> Value {
    match a.operation.as_str() {
        "start" => json!({"operation": "start", "durationMs": a.duration_ms}),
        "stop" => json!({"operation": "stop", "leaseId": a.lease_id}),
        op => json!({"operation": op}),
    }
}

/// An `ok:false` answer keeps the SDK's code; duration and lease refusals name their argument.
fn observer_reply(body: Value) -> Result<Value, ProviderError> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        let mut e = sdk::refusal(&body, "the SDK refused the UI observation request");
        match e.error.as_str() {
            "invalid_ui_observation_duration" => e = e.with_field("durationMs"),
            "ui_observation_lease_mismatch" => e = e.with_field("leaseId"),
            _ => {}
        }
        return Err(e);
    }
    Ok(body)
}

pub struct UiObservation;
impl Command for UiObservation {
    type Provider = IosProvider;
    type Args = ObservationArgs;
    fn spec() -> CommandSpec {
        let mut schema = object(
            props(json!({
                "operation": {"type": "string", "enum": ["start", "status", "stop"], "description": "start a lease, report the observer, or stop a lease early"},
                "durationMs": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "Lease length (start)"},
                "leaseId": {"type": "string", "minLength": 1, "maxLength": 128, "description": "The lease to stop (the leaseId start returned)"},
                "provider": {"type": "string", "enum": ["native"], "description": "The observer: the app's native one (the iOS SDK has no separate Flutter observer route)"}
            })),
            &required(&["operation"]),
        );
        schema["oneOf"] = json!([
            {"properties": {"operation": {"const": "start"}, "leaseId": false}, "required": ["durationMs"]},
            {"properties": {"operation": {"const": "status"}, "durationMs": false, "leaseId": false}},
            {"properties": {"operation": {"const": "stop"}, "durationMs": false}, "required": ["leaseId"]}
        ]);
        app_query("ios-ui-observation", "The app SDK's on-demand UI observation lease (aab.ui-observation/v1): start (durationMs 1..5000), status (active, remainingMs, leaseId, sampleCount, maxSampleDurationMs), stop (leaseId).", Some("capture.read")).input_schema(schema)
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: ObservationArgs) -> Result<Reply, ProviderError> {
        let body = request_body(&args);
        let operation = args.operation.clone();
        read_with(ctx, args.target(), |conn, deadline| async move {
            let answer = sdk::exchange(&conn.endpoint, "POST", ROUTE, Some(&body), sdk::REQUEST_TIMEOUT, deadline).await.map_err(sdk::Failure::read_error)?;
            let mut out = with_facts(observer_reply(answer.body)?, &conn);
            out["operation"] = json!(operation);
            out["provider"] = json!("native");
            Ok(out)
        })
        .await
        .map(Reply::Json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> ObservationArgs {
        let mut base = json!({"deviceId": "D", "bundleId": "com.example.shop"});
        base.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn operations_send_only_their_fields_and_refusals_keep_codes() {
        assert_eq!(request_body(&args(json!({"operation": "start", "durationMs": 300}))), json!({"operation": "start", "durationMs": 300}));
        assert_eq!(request_body(&args(json!({"operation": "status"}))), json!({"operation": "status"}));
        let e = observer_reply(json!({"ok": false, "error": "ui_observation_lease_mismatch"})).unwrap_err();
        assert_eq!((e.error.as_str(), e.field.as_deref(), e.dispatched), ("ui_observation_lease_mismatch", Some("leaseId"), Some(false)));
        let spec = UiObservation::spec();
        let v = aab_plugin_api::validate::compile(&spec.input_schema).unwrap();
        let base = json!({"deviceId": "D", "bundleId": "com.example.shop"});
        let with = |x: Value| {
            let mut a = base.clone();
            a.as_object_mut().unwrap().extend(x.as_object().unwrap().clone());
            a
        };
        assert!(v.is_valid(&with(json!({"operation": "start", "durationMs": 5000}))));
        assert!(!v.is_valid(&with(json!({"operation": "start"}))));
        assert!(!v.is_valid(&with(json!({"operation": "start", "durationMs": 5001}))));
        assert!(!v.is_valid(&with(json!({"operation": "stop"}))));
        assert!(!v.is_valid(&with(json!({"operation": "status", "leaseId": "L"}))));
        assert_eq!(spec.mutation, aab_plugin_api::protocol::Mutation::None);
    }
}
