//! `native-gesture`: one SDK gesture on the view a native selector names
//! (`POST /v1/action/gesture-target`, §1.7): `longPress` (durationMs 500..10000,
//! default 500), `swipe` (deltaX/deltaY from the node's centre, durationMs
//! 1..10000, default 400) or `scroll` (direction up|down, default 400 ms). The
//! payload variants are in the schema; callers never supply targetRef/actionId.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::cancellable;
use crate::AndroidProvider;
use crate::manifest::{device_mutation, MUTATION_REQUIRED, object, package_name, port, props};
use crate::native_exec::{App, open};
use crate::native_target::{bind, selector_schema, summary};

fn duration(min: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": 10000, "description": "Gesture duration in ms"})
}

fn delta(what: &str) -> Value {
    json!({"type": "number", "minimum": -2147483647, "maximum": 2147483647, "description": what})
}

fn payload_schema() -> Value {
    let variant = |action: &str, extra: Value, required: &[&str]| {
        let mut props = json!({"action": {"const": action}, "selector": selector_schema()});
        props.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let mut req = vec!["action", "selector"];
        req.extend_from_slice(required);
        json!({"type": "object", "additionalProperties": false, "properties": props, "required": req})
    };
    json!({
        "description": "The gesture: longPress | swipe | scroll on the view the selector names",
        "oneOf": [
            variant("longPress", json!({"durationMs": duration(500)}), &[]),
            variant("swipe", json!({"durationMs": duration(1), "deltaX": delta("x movement from the node's centre"), "deltaY": delta("y movement from the node's centre")}), &["deltaX", "deltaY"]),
            variant("scroll", json!({"durationMs": duration(1), "direction": {"type": "string", "enum": ["up", "down"]}}), &["direction"]),
        ]
    })
}

fn spec() -> CommandSpec {
    let mut required = MUTATION_REQUIRED.to_vec();
    required.push("payload");
    device_mutation("native-gesture", "core", "android-app", "One SDK gesture (longPress, swipe, scroll) on the native view a selector names, revalidated by the SDK; receipt and settlement proof, never retried.")
        .permission("app.interact")
        .input_schema(object(props(json!({"packageName": package_name(), "port": port("Host port of an existing or wanted adb forward to the SDK socket"), "payload": payload_schema()})), &required))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NativeGestureArgs {
    pub package_name: String,
    pub serial: Option<String>,
    pub port: Option<u16>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub payload: Map<String, Value>,
}

pub struct NativeGesture;
impl Command for NativeGesture {
    type Provider = AndroidProvider;
    type Args = NativeGestureArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: NativeGestureArgs) -> Result<Reply, ProviderError> {
        let app = App { package: args.package_name, serial: args.serial, port: args.port, adb: args.adb, adb_timeout_ms: args.adb_timeout_ms };
        let mut body = args.payload;
        let default = if body["action"] == "longPress" { 500 } else { 400 };
        let duration = body.get("durationMs").and_then(Value::as_u64).unwrap_or(default);
        body.insert("durationMs".into(), json!(duration));
        cancellable(ctx, async {
            let session = open(ctx, &app).await?;
            let node = bind(&session.tree().await?, &body["selector"], false)?;
            body.insert("targetRef".into(), node["targetRef"].clone());
            // The SDK holds the reply for the gesture's duration.
            let mut out = session.execute(ctx, inv, "native-gesture", "/v1/action/gesture-target", body, duration + 3500).await?;
            out["bound"] = summary(&node);
            Ok(Reply::Json(out))
        })
        .await
    }
}
