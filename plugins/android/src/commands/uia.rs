//! The UIA commands (aab-host §1.4 `uia-*` rows, aab-protocols §3) over
//! [`crate::uia`]: `uia-runtime` (expert: status, and start/stop which change
//! the phone), `uia-tree` (the focused window — system dialogs included — as
//! compact nodes with `aab.uia.target/v1` references), `tap-uia` (a selector or
//! an observed targetRef, as one managed UIA click) and `tap-uia-text`.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Budget, cancellable, device};
use crate::AndroidProvider;
use crate::manifest::{device_mutation, object, props};
use crate::uia::{Aim, ROOT_V1, TARGET_SCHEMA, codes, connect, deploy_and_start, descriptor, load_bundle, observe, public, root_schema};

fn serial() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 256, "description": "adb serial of the device"})
}

fn base(extra: Value) -> Value {
    let mut p = json!({"serial": serial(), "root": root_schema()});
    if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
        p.extend(extra);
    }
    props(p)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UiaArgs {
    pub operation: Option<String>,
    pub serial: Option<String>,
    pub root: Option<String>,
    pub bundle_dir: Option<String>,
    pub adb: Option<String>,
    pub adb_timeout_ms: Option<u64>,
    pub package_name: Option<String>,
    pub selector: Option<Value>,
    pub target_ref: Option<Value>,
    pub click_policy: Option<String>,
    pub target_text: Option<String>,
    /// `tap-uia-text`: only `true` (the schema's const); matching is exact either way.
    #[allow(dead_code)]
    pub exact: Option<bool>,
    pub max_nodes: Option<usize>,
    pub clickable_only: Option<bool>,
}

impl UiaArgs {
    fn root(&self) -> &str {
        self.root.as_deref().unwrap_or(ROOT_V1)
    }
}

pub struct UiaRuntime;
impl Command for UiaRuntime {
    type Provider = AndroidProvider;
    type Args = UiaArgs;
    fn spec() -> CommandSpec {
        CommandSpec::conditional("uia-runtime", ["start", "stop"])
            .platform("android")
            .domain("advanced")
            .target_kind("android-device")
            .role("expert")
            .summary("Expert: the phone's UIA runtime (aab.uia.runtime.v1). status reads its descriptor and asks it; start verifies the runtime bundle (bundleDir or AI_APP_BRIDGE_UIA_BUNDLE_DIR: aab.uia.bundle.v1 manifest + jar, sha256 checked), checks API ≥ 25, pushes the jar content-addressed into the phone root (verified on the phone, mv -n) and starts it with app_process; stop stops it (refused while actions are unacknowledged).")
            .target_key("serial")
            .device_key("serial")
            .timeouts(20_000, 30_000)
            .input_schema(object(
                base(json!({"operation": {"enum": ["status", "start", "stop"], "description": "status | start | stop"},
                            "bundleDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Directory of the UIA runtime bundle (manifest.json + jar); default $AI_APP_BRIDGE_UIA_BUNDLE_DIR"}})),
                &["operation", "serial"],
            ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: UiaArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        let op = args.operation.clone().unwrap_or_default();
        // The bundle is checked before any device access.
        let bundle = if op == "start" { Some(load_bundle(args.bundle_dir.as_deref())?) } else { None };
        cancellable(ctx, async {
            let dev = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let root = args.root().to_string();
            let current = descriptor(&dev, &root, budget.deadline).await?;
            let reachable = match &current {
                Some(d) if d["running"] == true => connect(&dev, &root, budget.deadline).await.ok(),
                _ => None,
            };
            let status = match &reachable {
                Some(rt) => rt.op(json!({"op": "status"}), budget.deadline).await.ok(),
                None => None,
            };
            match op.as_str() {
                "status" => Ok(Reply::Json(json!({"ok": true, "serial": dev.serial, "root": root, "running": status.is_some(), "descriptor": current.as_ref().map(public), "status": status}))),
                "start" => {
                    let bundle = bundle.expect("loaded above");
                    if let (Some(rt), Some(st)) = (&reachable, &status)
                        && rt.descriptor["dexSha256"] == bundle.sha256.as_str()
                    {
                        return Ok(Reply::Json(json!({"ok": true, "serial": dev.serial, "root": root, "started": false, "running": true, "descriptor": public(&rt.descriptor), "status": st})));
                    }
                    let api = crate::uia::api_level(&dev, budget.adb()).await?;
                    if api < bundle.min_api {
                        return Err(ProviderError::new(codes::API_REQUIRED, format!("the UIA runtime needs Android API {} or later; {} reports {api}", bundle.min_api, dev.serial)).with_details(json!({"apiLevel": api})).not_dispatched());
                    }
                    ctx.mark_dispatched();
                    let previous = current.as_ref().and_then(|d| d["runtimeEpoch"].as_str().map(str::to_string));
                    let started = deploy_and_start(&dev, &root, &bundle, previous.as_deref(), budget.deadline).await?;
                    let rt = connect(&dev, &root, budget.deadline).await?;
                    let st = rt.op(json!({"op": "status"}), budget.deadline).await?;
                    Ok(Reply::Json(json!({"ok": true, "serial": dev.serial, "root": root, "started": true, "running": true, "jar": started.jar, "pushed": started.pushed,
                                          "bundle": {"dir": bundle.dir, "sha256": bundle.sha256}, "descriptor": public(&started.descriptor), "status": st})))
                }
                _ => {
                    let Some(rt) = reachable else {
                        return Ok(Reply::Json(json!({"ok": true, "serial": dev.serial, "root": root, "stopped": false, "running": false, "descriptor": current.as_ref().map(public)})));
                    };
                    ctx.mark_dispatched();
                    let r = rt.op(json!({"op": "stop"}), budget.deadline).await?;
                    if r["ok"] != true {
                        let code = r["error"].as_str().unwrap_or(codes::PROTOCOL).to_string();
                        return Err(ProviderError::new(code, format!("the UIA runtime refused to stop: {}", r["message"].as_str().unwrap_or(""))).with_details(json!({"device": r, "status": status})).settled_after_dispatch());
                    }
                    Ok(Reply::Json(json!({"ok": true, "serial": dev.serial, "root": root, "stopped": true, "runtimeEpoch": rt.epoch(), "device": r})))
                }
            }
        })
        .await
    }
}

pub struct UiaTree;
impl Command for UiaTree {
    type Provider = AndroidProvider;
    type Args = UiaArgs;
    fn spec() -> CommandSpec {
        CommandSpec::query("uia-tree")
            .platform("android")
            .domain("core")
            .target_kind("android-device")
            .summary("The focused window as the UIA runtime sees it (system dialogs, installers and apps without the SDK included): window, snapshotId, and compact nodes (text, contentDescription, resourceName, className, packageName, bounds, flags) each with an aab.uia.target/v1 targetRef for tap-uia.")
            .permission("app.read")
            .target_key("serial")
            .lane("observation")
            .timeouts(10_000, 30_000)
            .input_schema(object(
                base(json!({"maxNodes": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Return at most this many nodes (default 300)"},
                            "clickableOnly": {"type": "boolean", "description": "Only clickable nodes (default false)"}})),
                &[],
            ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, _: &Invocation, args: UiaArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let dev = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let rt = connect(&dev, args.root(), budget.deadline).await?;
            let (snap, nodes) = observe(&rt, budget.deadline).await?;
            let kept: Vec<Value> = nodes.into_iter().filter(|n| args.clickable_only != Some(true) || n["clickable"] == true).collect();
            let max = args.max_nodes.unwrap_or(300);
            Ok(Reply::Json(json!({
                "ok": true, "serial": dev.serial, "runtimeEpoch": rt.epoch(), "bootId": rt.boot_id(), "snapshotId": snap["snapshotId"], "window": snap["window"],
                "expiresAtElapsedMs": snap["expiresAtElapsedMs"], "nodeCount": snap["nodeCount"], "returned": kept.len().min(max), "truncated": kept.len() > max,
                "nodes": kept.into_iter().take(max).collect::<Vec<_>>(),
            })))
        })
        .await
    }
}

fn selector_schema() -> Value {
    let text = |d: &str| json!({"type": "string", "minLength": 1, "maxLength": 1024, "description": d});
    json!({
        "type": "object", "additionalProperties": false,
        "description": "One visible node of a fresh snapshot of the focused window: exactly one of text, contentDescription, resourceName; exact (default true) or case-insensitive containment",
        "properties": {"text": text("Node text"), "contentDescription": text("Content description"), "resourceName": text("Resource id (pkg:id/name)"), "exact": {"type": "boolean"}},
        "oneOf": [{"required": ["text"]}, {"required": ["contentDescription"]}, {"required": ["resourceName"]}]
    })
}

fn target_ref_schema() -> Value {
    let uuid = json!({"type": "string", "minLength": 1, "maxLength": 64});
    json!({
        "type": "object", "additionalProperties": false, "required": ["schemaVersion", "bootId", "runtimeEpoch", "snapshotId", "nodeRef"],
        "description": "targetRef of a node from uia-tree (its snapshot must still be retained: 8 for 60 s)",
        "properties": {"schemaVersion": {"const": TARGET_SCHEMA}, "bootId": uuid, "runtimeEpoch": uuid, "snapshotId": uuid, "nodeRef": uuid}
    })
}

fn click_policy() -> Value {
    json!({"enum": ["exact_node", "nearest_clickable_ancestor"], "description": "Click the node itself, or its nearest clickable ancestor (default)"})
}

pub struct TapUia;
impl Command for TapUia {
    type Provider = AndroidProvider;
    type Args = UiaArgs;
    fn spec() -> CommandSpec {
        let mut schema = object(
            base(json!({"packageName": {"type": "string", "minLength": 1, "maxLength": 256, "description": "Package of the window the node belongs to (a system dialog's too)"},
                        "selector": selector_schema(), "targetRef": target_ref_schema(), "clickPolicy": click_policy()})),
            &["packageName", "serial"],
        );
        schema["oneOf"] = json!([{"required": ["selector"], "not": {"required": ["targetRef"]}}, {"required": ["targetRef"], "not": {"required": ["selector"]}}]);
        device_mutation("tap-uia", "action", "android-device", "Click one node of the focused window through the UIA runtime (aab.uia.execution.v1): a selector bound in a fresh snapshot, or an observed targetRef; prepare → start → query → receipt (verified by its sha256, stored by the host, then acknowledged). Never retried.")
            .permission("app.interact")
            .input_schema(schema)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: UiaArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        let package = args.package_name.clone();
        cancellable(ctx, async {
            let dev = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let rt = connect(&dev, args.root(), budget.deadline).await?;
            let aim = match (&args.selector, &args.target_ref) {
                (Some(sel), None) => {
                    let (kind, value) = ["text", "contentDescription", "resourceName"].iter().find_map(|k| sel.get(*k).and_then(Value::as_str).map(|v| (*k, v))).unwrap_or(("text", ""));
                    Aim::Selector { kind, value, exact: sel.get("exact").and_then(Value::as_bool).unwrap_or(true), package: package.as_deref() }
                }
                (None, Some(r)) => Aim::Ref(r),
                _ => return Err(ProviderError::new("invalid_argument", "exactly one of selector or targetRef").with_field("selector").not_dispatched()),
            };
            let policy = args.click_policy.as_deref().unwrap_or("nearest_clickable_ancestor");
            crate::uia::click(ctx, inv, "tap-uia", &rt, aim, package.as_deref(), policy, budget.deadline).await.map(Reply::Json)
        })
        .await
    }
}

pub struct TapUiaText;
impl Command for TapUiaText {
    type Provider = AndroidProvider;
    type Args = UiaArgs;
    fn spec() -> CommandSpec {
        device_mutation("tap-uia-text", "action", "android-device", "Click the one visible node of the focused window whose text is exactly targetText, through the UIA runtime (as tap-uia with a text selector).")
            .permission("app.interact")
            .input_schema(object(
                base(json!({"targetText": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Exact text of the node"}, "exact": {"const": true},
                            "packageName": {"type": "string", "minLength": 1, "maxLength": 256, "description": "Only nodes of this package"}, "clickPolicy": click_policy()})),
                &["targetText", "serial"],
            ))
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: UiaArgs) -> Result<Reply, ProviderError> {
        let budget = Budget::new(ctx, args.adb_timeout_ms);
        cancellable(ctx, async {
            let dev = device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
            let rt = connect(&dev, args.root(), budget.deadline).await?;
            let text = args.target_text.clone().unwrap_or_default();
            let aim = Aim::Selector { kind: "text", value: &text, exact: true, package: args.package_name.as_deref() };
            let policy = args.click_policy.as_deref().unwrap_or("nearest_clickable_ancestor");
            crate::uia::click(ctx, inv, "tap-uia-text", &rt, aim, args.package_name.as_deref(), policy, budget.deadline).await.map(Reply::Json)
        })
        .await
    }
}
