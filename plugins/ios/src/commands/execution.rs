//! `ios-execution` (aab-protocols §4.5, §4.8, seed "iOS SDK execution and
//! recovery"): what an action's original identity says on the device.
//! - `status`: the SDK's one shared action slot (`GET /v1/execution/status`), or
//!   with `kind:"wda"` the Runner's `/aab/status`.
//! - `result`: the ORIGINAL completion of `{kind, actionId, runtimeEpoch}` from
//!   the durable store, paged (`found:false` when no page holds it).
//! - `cancel`: ask the SDK (or Runner) to stop that action; reports its original
//!   completion when one exists, else the unresolved answer. A cancel
//!   acknowledgement alone proves nothing.
//! - `reconcile`: the host routes it to the plugin's reconcile hook with the
//!   device's pending action; called here directly with an `actionId` (a host
//!   action id) it reports what the hook would decide, without touching the
//!   host's ownership journal.
//!
//! Queries, in their own `control` lane: they must work while the device is
//! unresolved. Every refusal is before device access; nothing is ever resent.

use aab_ios_transport::sdk::{self, Completion, Kind};
use aab_ios_transport::{Deadline, Devicectl, wda};
use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{cancellable, deadline};
use crate::IosProvider;
use crate::manifest::{PLATFORM, SDK_TIMEOUTS, bundle_id, object, props};
use crate::runtime::{Target, with_facts};

super::ios_args!(
    ExecutionArgs(device_id: String, bundle_id: Option<String>) {
        operation: String,
        kind: Option<String>,
        action_id: Option<String>,
        runtime_epoch: Option<String>,
        wda_runner_bundle_id: Option<String>,
        setup_result_path: Option<String>,
    }
);

fn spec() -> CommandSpec {
    let identity = json!({"required": ["kind", "actionId", "runtimeEpoch"]});
    let mut schema = object(
        props(json!({
            "operation": {"type": "string", "enum": ["status", "result", "cancel", "reconcile"], "description": "status of the action slot, the original completion (result), cancel, or reconcile a pending host action"},
            "kind": {"type": "string", "enum": ["h5", "flutter", "wda"], "description": "The action's execution kind (default for status: the SDK's shared H5/Flutter slot)"},
            "actionId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The action id the SDK/Runner knows (result, cancel), or the host action id (reconcile)"},
            "runtimeEpoch": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The ORIGINAL execution epoch of the action (H5: the SDK's, Flutter: the Dart engine's, WDA: the Runner's)"},
            "wdaRunnerBundleId": bundle_id(),
            "setupResultPath": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "An ios-setup result file naming wdaRunnerBundleId (kind wda)"}
        })),
        &["operation", "deviceId"],
    );
    let app = json!({"anyOf": [{"required": ["bundleId"]}, {"properties": {"kind": {"const": "wda"}}, "required": ["kind"]}]});
    let runner = json!({"if": {"properties": {"kind": {"const": "wda"}}, "required": ["kind"]}, "then": {"anyOf": [{"required": ["wdaRunnerBundleId"]}, {"required": ["setupResultPath"]}]}});
    schema["allOf"] = json!([runner]);
    schema["oneOf"] = json!([
        {"properties": {"operation": {"const": "status"}, "actionId": false, "runtimeEpoch": false}, "allOf": [app]},
        {"properties": {"operation": {"const": "result"}}, "allOf": [identity, app]},
        {"properties": {"operation": {"const": "cancel"}}, "allOf": [identity, app]},
        {"properties": {"operation": {"const": "reconcile"}, "kind": false, "runtimeEpoch": false}, "required": ["bundleId"]}
    ]);
    CommandSpec::query("ios-execution")
        .platform(PLATFORM)
        .domain("ios")
        .target_kind("ios-device")
        .summary("Managed iOS actions by their original identity: status (the SDK's shared H5/Flutter slot or the WDA Runner), result (the durable aab.ios-completion/v1 or WDA completion, paged), cancel (reports the original completion or the unresolved answer), reconcile (a pending host action, only from its durable completion).")
        .target_key("deviceId")
        // Never a journal (a query); it names the device whose journal
        // `operation:"reconcile"` settles (the host runs that one).
        .device_key("deviceId")
        .lane("control")
        .timeouts(SDK_TIMEOUTS.0, SDK_TIMEOUTS.1)
        .input_schema(schema)
}

fn target(a: &ExecutionArgs) -> Target {
    Target {
        device_id: a.device_id.clone(),
        bundle_id: a.bundle_id.clone().unwrap_or_default(),
        overrides: sdk::Overrides { runtime_url: a.runtime_url.clone(), ios_host: a.ios_host.clone(), ios_port: a.ios_port },
        devicectl: a.devicectl.clone(),
    }
}

/// The Runner bundle id: explicit, else from the ios-setup result file.
fn runner_bundle(a: &ExecutionArgs, cwd: &std::path::Path) -> Result<String, ProviderError> {
    if let Some(r) = &a.wda_runner_bundle_id {
        return Ok(r.clone());
    }
    let bad = |why: String| ProviderError::new("invalid_argument", why).with_field("setupResultPath").not_dispatched();
    let Some(p) = &a.setup_result_path else { return Err(bad("kind wda needs wdaRunnerBundleId or setupResultPath".into())) };
    let path = if std::path::Path::new(p).is_absolute() { std::path::PathBuf::from(p) } else { cwd.join(p) };
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(&path).and_then(|f| f.take(1024 * 1024 + 1).read_to_end(&mut bytes)).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if bytes.len() > 1024 * 1024 {
        return Err(bad(format!("{} is larger than 1 MiB", path.display())));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("{} is not JSON: {e}", path.display())))?;
    ["/wdaRunnerBundleId", "/wda/runnerBundleId", "/runnerBundleId", "/result/wdaRunnerBundleId"]
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str))
        .filter(|r| sdk::is_bundle_id(r))
        .map(str::to_string)
        .ok_or_else(|| bad(format!("{} names no wdaRunnerBundleId", path.display())))
}

pub struct Execution;
impl Command for Execution {
    type Provider = IosProvider;
    type Args = ExecutionArgs;
    fn spec() -> CommandSpec {
        spec()
    }
    async fn run(_: &IosProvider, ctx: &Context<'_>, inv: &Invocation, args: ExecutionArgs) -> Result<Reply, ProviderError> {
        let deadline = deadline(ctx);
        let t = target(&args);
        t.check()?;
        let kind = args.kind.clone();
        if args.operation == "reconcile" {
            let action_id = args.action_id.clone().ok_or_else(|| {
                ProviderError::new("ios_execution_reconcile_host_routed", "reconcile of the device's pending action is routed by the host (device-ownership reconcile); here it needs the host actionId to look up").with_field("actionId").not_dispatched()
            })?;
            let request = json!({"pending": {"actionId": action_id, "runtimeEpoch": inv.runtime_epoch}, "runtimeUrl": args.runtime_url, "iosHost": args.ios_host, "iosPort": args.ios_port, "devicectl": args.devicectl, "wdaUrl": args.wda_url});
            let answer = crate::reconcile::reconcile(ctx, request).await?;
            return Ok(Reply::Json(json!({"ok": true, "operation": "reconcile", "deviceId": args.device_id, "ownershipChanged": false, "reconcile": answer})));
        }
        if kind.as_deref() == Some("wda") {
            let runner = runner_bundle(&args, std::path::Path::new(&inv.cwd))?;
            return cancellable(ctx, wda_operation(&args, &runner, deadline)).await.map(Reply::Json);
        }
        cancellable(ctx, sdk_operation(&args, t, kind.as_deref().and_then(Kind::parse), deadline)).await.map(Reply::Json)
    }
}

async fn sdk_operation(args: &ExecutionArgs, t: Target, kind: Option<Kind>, deadline: Deadline) -> Result<Value, ProviderError> {
    let conn = t.connect(deadline).await?;
    let base = |op: &str| with_facts(json!({"ok": true, "operation": op}), &conn);
    let identity = || -> Result<(Kind, &str, &str), ProviderError> {
        let k = kind.ok_or_else(|| ProviderError::new("missing_argument", "kind is required").with_field("kind").not_dispatched())?;
        let a = args.action_id.as_deref().ok_or_else(|| ProviderError::new("missing_argument", "actionId is required").with_field("actionId").not_dispatched())?;
        let e = args.runtime_epoch.as_deref().ok_or_else(|| ProviderError::new("missing_argument", "runtimeEpoch is required").with_field("runtimeEpoch").not_dispatched())?;
        Ok((k, a, e))
    };
    match args.operation.as_str() {
        "status" => {
            let st = sdk::read(&conn.endpoint, "/v1/execution/status", deadline).await?;
            let mut out = base("status");
            out["active"] = st.get("active").cloned().unwrap_or(Value::Null);
            out["idle"] = json!(out["active"].is_null());
            Ok(out)
        }
        "result" => {
            let (k, a, e) = identity()?;
            let mut out = base("result");
            out["kind"] = json!(k.name());
            out["actionId"] = json!(a);
            out["executionRuntimeEpoch"] = json!(e);
            completion_into(&mut out, sdk::find_completion(&conn.endpoint, k, a, e, deadline).await?);
            Ok(out)
        }
        _ => {
            let (k, a, e) = identity()?;
            let mut out = base("cancel");
            out["kind"] = json!(k.name());
            out["actionId"] = json!(a);
            out["executionRuntimeEpoch"] = json!(e);
            let answer = sdk::cancel(&conn.endpoint, k, a, e, deadline.capped(std::time::Duration::from_secs(4))).await.map_err(sdk::Failure::read_error)?;
            match sdk::matching_execution_result(k, &answer, a, e) {
                Some(result) => {
                    out["found"] = json!(true);
                    out["settled"] = json!(true);
                    out["executionResult"] = result;
                }
                None => completion_into(&mut out, sdk::find_completion(&conn.endpoint, k, a, e, deadline).await?),
            }
            out["cancel"] = answer;
            Ok(out)
        }
    }
}

fn completion_into(out: &mut Value, c: Completion) {
    match c {
        Completion::Found { execution_result, receipt } => {
            out["found"] = json!(true);
            out["settled"] = json!(true);
            out["executionResult"] = execution_result;
            out["completionReceipt"] = receipt;
        }
        Completion::NotFound { pages, complete, .. } => {
            out["found"] = json!(false);
            out["settled"] = json!(false);
            out["pages"] = json!(pages);
            out["complete"] = json!(complete);
        }
    }
}

async fn wda_operation(args: &ExecutionArgs, runner: &str, deadline: Deadline) -> Result<Value, ProviderError> {
    let dc = Devicectl::resolve(args.devicectl.as_deref());
    let conn = wda::connect(&dc, &args.device_id, runner, args.wda_url.as_deref(), deadline).await?;
    let mut out = json!({"ok": true, "operation": args.operation, "kind": "wda", "deviceId": conn.device.identifier, "udid": conn.device.udid, "runner": conn.facts()["runner"], "wdaUrl": conn.url});
    let (a, e) = (args.action_id.as_deref().unwrap_or_default(), args.runtime_epoch.as_deref().unwrap_or_default());
    match args.operation.as_str() {
        "status" => {
            out["status"] = conn.status(deadline).await?;
        }
        "result" | "cancel" => {
            out["actionId"] = json!(a);
            out["runnerEpoch"] = json!(e);
            if args.operation == "cancel" {
                out["cancel"] = conn.cancel(a, e, deadline).await?;
            }
            match conn.find_result(a, e, deadline).await? {
                Some(found) => {
                    out["found"] = json!(true);
                    out["settled"] = json!(true);
                    out["executionResult"] = found.execution_result;
                    out["completionReceipt"] = found.receipt;
                }
                None => {
                    out["found"] = json!(false);
                    out["settled"] = json!(false);
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(extra: Value) -> Result<(), ProviderError> {
        let spec = spec();
        let schema = aab_plugin_api::validate::input_schema_with_host_options(&spec);
        let v = aab_plugin_api::validate::compile(&schema).unwrap();
        let mut a = json!({"deviceId": "00008110-000A1C2E3F4B5D6E"});
        a.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        aab_plugin_api::validate::validate_arguments("ios-execution", &v, &schema, &a)
    }

    #[test]
    fn each_operation_takes_its_identity() {
        assert!(check(json!({"operation": "status", "bundleId": "com.example.shop"})).is_ok());
        assert!(check(json!({"operation": "status"})).is_err(), "the SDK's slot needs the app");
        assert!(check(json!({"operation": "status", "kind": "wda", "wdaRunnerBundleId": "r.xctrunner"})).is_ok());
        assert!(check(json!({"operation": "status", "kind": "wda"})).is_err(), "the Runner needs its bundle id");
        let full = json!({"operation": "result", "bundleId": "com.example.shop", "kind": "h5", "actionId": "A", "runtimeEpoch": "E"});
        assert!(check(full.clone()).is_ok());
        for missing in ["kind", "actionId", "runtimeEpoch", "bundleId"] {
            let mut a = full.clone();
            a.as_object_mut().unwrap().remove(missing);
            assert!(check(a).is_err(), "result without {missing}");
        }
        assert!(check(json!({"operation": "cancel", "kind": "wda", "actionId": "A", "runtimeEpoch": "E", "setupResultPath": "setup.json"})).is_ok());
        assert!(check(json!({"operation": "result", "bundleId": "b", "kind": "h5", "actionId": "x".repeat(257), "runtimeEpoch": "E"})).is_err());
        assert!(check(json!({"operation": "reconcile", "bundleId": "com.example.shop"})).is_ok());
        assert!(check(json!({"operation": "reconcile"})).is_err(), "reconcile needs the original bundleId");
        assert!(check(json!({"operation": "replay", "bundleId": "b"})).is_err());
        let s = spec();
        assert_eq!((s.mutation, s.script_permission.as_deref(), s.lane.as_deref()), (aab_plugin_api::protocol::Mutation::None, None, Some("control")));
        assert_eq!((s.default_timeout_ms, s.device_key.as_slice()), (30_000, &["deviceId".to_string()][..]));
    }

    #[test]
    fn the_runner_comes_from_the_setup_result() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("setup.json"), json!({"ok": true, "wdaRunnerBundleId": "io.x.wda.xctrunner"}).to_string()).unwrap();
        std::fs::write(dir.path().join("other.json"), "{}").unwrap();
        let a = |p: &str| ExecutionArgs {
            operation: "status".into(), device_id: "D".into(), kind: Some("wda".into()), action_id: None, runtime_epoch: None, bundle_id: None, wda_runner_bundle_id: None, wda_url: None,
            runtime_url: None, ios_host: None, ios_port: None, devicectl: None, setup_result_path: Some(p.into()), wda_session_id: None, xcodebuild: None,
        };
        assert_eq!(runner_bundle(&a("setup.json"), dir.path()).unwrap(), "io.x.wda.xctrunner");
        assert_eq!(runner_bundle(&a("other.json"), dir.path()).unwrap_err().field.as_deref(), Some("setupResultPath"));
        assert!(runner_bundle(&a("missing.json"), dir.path()).is_err());
    }
}
