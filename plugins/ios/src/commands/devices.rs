//! `ios-devices` (devicectl `list devices`, optionally narrowed to the one
//! `deviceId` names) and `ios-doctor` (each step of the connection sequence as a
//! check: devicectl, device selection, developer tunnel, the SDK descriptor and a
//! verified status, the WDA Runner descriptor). Both are reads; doctor reports a
//! failed step as a failed check instead of failing the command.

use aab_ios_transport::devicectl::{Devicectl, require_developer_tunnel, select_device, step};
use aab_ios_transport::sdk::{self, Overrides};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, deadline};
use crate::IosProvider;
use crate::manifest::{PLATFORM, SDK_TIMEOUTS, bundle_id, object, props};

fn device_query(command: &str, summary: &str) -> CommandSpec {
    CommandSpec::query(command).platform(PLATFORM).domain("ios").target_kind("ios-device").summary(summary).lane("observation").timeouts(SDK_TIMEOUTS.0, SDK_TIMEOUTS.1)
}

super::ios_args!(
    /// Device-level commands: every field of the bundle optional.
    DeviceArgs(device_id: Option<String>, bundle_id: Option<String>) {
        wda_runner_bundle_id: Option<String>,
    }
);

impl DeviceArgs {
    fn overrides(&self) -> Overrides {
        Overrides { runtime_url: self.runtime_url.clone(), ios_host: self.ios_host.clone(), ios_port: self.ios_port }
    }
}

pub struct Devices;
impl Command for Devices {
    type Provider = IosProvider;
    type Args = DeviceArgs;
    fn spec() -> CommandSpec {
        device_query("ios-devices", "The iOS devices devicectl lists (identifier, UDID, name, model, OS, developer mode, DDI services, pairing, tunnel state and address); with deviceId only the one it names.")
            .target_key("deviceId")
            .input_schema(object(props(json!({})), &[]))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: DeviceArgs) -> Result<Reply, ProviderError> {
        let deadline = deadline(ctx);
        cancellable(ctx, async {
            let dc = Devicectl::resolve(args.devicectl.as_deref());
            let devices = dc.list_devices(step(deadline, 30)).await?;
            let listed = match &args.device_id {
                Some(id) => vec![select_device(&devices, id)?],
                None => devices,
            };
            let rows: Vec<Value> = listed
                .iter()
                .map(|d| {
                    let mut s = d.summary();
                    s["ready"] = json!(require_developer_tunnel(d).is_ok());
                    s
                })
                .collect();
            Ok(Reply::Json(json!({"ok": true, "count": rows.len(), "devices": rows, "devicectl": {"program": dc.program, "prefixed": dc.prefixed}})))
        })
        .await
    }
}

pub struct Doctor;
impl Command for Doctor {
    type Provider = IosProvider;
    type Args = DeviceArgs;
    fn spec() -> CommandSpec {
        device_query(
            "ios-doctor",
            "Diagnose the iOS connection step by step: devicectl, the device (deviceId, or the only one), developer mode / DDI / tunnel, and with bundleId the SDK descriptor and a binding-verified status; with wdaRunnerBundleId the Runner's descriptor. Failed steps are reported as checks.",
        )
        .target_key("deviceId")
        .input_schema(object(props(json!({"wdaRunnerBundleId": bundle_id()})), &[]))
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, _: &Invocation, args: DeviceArgs) -> Result<Reply, ProviderError> {
        let deadline = deadline(ctx);
        args.overrides().check()?;
        cancellable(ctx, async { Ok(Reply::Json(doctor(&args, deadline).await)) }).await
    }
}

fn check(name: &str, r: Result<Value, ProviderError>) -> Value {
    match r {
        Ok(mut v) => {
            if !v.is_object() {
                v = json!({"value": v});
            }
            v["name"] = json!(name);
            v["ok"] = json!(true);
            v
        }
        Err(e) => json!({"name": name, "ok": false, "error": e.error, "message": e.message, "details": e.details}),
    }
}

async fn doctor(args: &DeviceArgs, deadline: aab_ios_transport::Deadline) -> Value {
    let dc = Devicectl::resolve(args.devicectl.as_deref());
    let mut checks = vec![];
    let finish = |checks: Vec<Value>| {
        let healthy = checks.iter().all(|c| c["ok"] == true);
        json!({"ok": true, "healthy": healthy, "checks": checks, "devicectl": {"program": dc.program, "prefixed": dc.prefixed}})
    };
    let devices = match dc.list_devices(step(deadline, 30)).await {
        Ok(d) => {
            checks.push(check("devicectl", Ok(json!({"devices": d.len()}))));
            d
        }
        Err(e) => {
            checks.push(check("devicectl", Err(e)));
            return finish(checks);
        }
    };
    let selected = match (&args.device_id, devices.as_slice()) {
        (Some(id), _) => select_device(&devices, id),
        (None, [one]) => Ok(one.clone()),
        (None, []) => Err(ProviderError::new(aab_ios_transport::codes::IOS_DEVICE_NOT_FOUND, "devicectl lists no device")),
        (None, many) => Err(ProviderError::new(aab_ios_transport::codes::IOS_DEVICE_AMBIGUOUS, format!("devicectl lists {} devices: name one with deviceId", many.len()))
            .with_details(json!({"devices": many.iter().map(|d| d.summary()).collect::<Vec<_>>()}))),
    };
    let device = match selected {
        Ok(d) => {
            checks.push(check("device", Ok(d.summary())));
            d
        }
        Err(e) => {
            checks.push(check("device", Err(e)));
            return finish(checks);
        }
    };
    match require_developer_tunnel(&device) {
        Ok(ip) => checks.push(check("tunnel", Ok(json!({"tunnelIPAddress": ip})))),
        Err(e) => {
            checks.push(check("tunnel", Err(e)));
            return finish(checks);
        }
    }
    if let Some(bundle) = &args.bundle_id {
        match sdk::open(&dc, device.clone(), bundle, &args.overrides(), deadline).await {
            Ok(conn) => {
                checks.push(check("sdkDescriptor", Ok(json!({"sdkVersion": conn.descriptor.sdk_version, "runtimeBinding": conn.endpoint.identity.binding(), "endpoint": conn.endpoint.url}))));
                let status = sdk::read(&conn.endpoint, "/v1/status", deadline).await.and_then(|s| {
                    sdk::check_status(&s, &conn.endpoint.identity, None)?;
                    let schemas = |k: &str| s.pointer(&format!("/debugBridge/{k}")).cloned().unwrap_or(Value::Null);
                    Ok(json!({"sdkVersion": s.pointer("/debugBridge/version"), "h5ExecutionSchema": schemas("h5ExecutionSchema"), "flutterExecutionSchema": schemas("flutterExecutionSchema"),
                              "h5TargetSchema": schemas("h5TargetSchema"), "applicationState": s.pointer("/app/applicationState"), "flutter": s.pointer("/flutter/ok")}))
                });
                checks.push(check("sdkStatus", status));
            }
            Err(e) => checks.push(check("sdkDescriptor", Err(e))),
        }
    }
    if let Some(runner) = &args.wda_runner_bundle_id {
        let r = aab_ios_transport::wda::descriptor::read(&dc, &device.identifier, runner, step(deadline, 5)).await.map(|d| json!({"runnerBinding": d.binding(), "wdaUrl": args.wda_url}));
        checks.push(check("wdaDescriptor", r));
    }
    finish(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_commands_need_no_device_but_take_the_bundle() {
        for spec in [Devices::spec(), Doctor::spec()] {
            let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
            let v = aab_plugin_api::validate::compile(&schema).unwrap();
            let ok = |a: Value| aab_plugin_api::validate::validate_arguments(&spec.command, &v, &schema, &a);
            assert!(ok(json!({})).is_ok());
            assert!(ok(json!({"deviceId": "00008110-000A1C2E3F4B5D6E", "devicectl": "/x/xcrun", "timeoutMs": 1000})).is_ok());
            // Names are aliases too (spaces allowed); control characters are not.
            assert!(ok(json!({"deviceId": "AAB iPhone"})).is_ok());
            assert_eq!(ok(json!({"deviceId": "bad\u{7}id"})).unwrap_err().field.as_deref(), Some("deviceId"));
            assert!(spec.script_permission.is_none() && spec.mutation == aab_plugin_api::protocol::Mutation::None, "{}", spec.command);
        }
        let doctor = Doctor::spec();
        assert!(doctor.input_schema["properties"].get("wdaRunnerBundleId").is_some());
        assert!(Devices::spec().input_schema["properties"].get("wdaRunnerBundleId").is_none());
    }
}
