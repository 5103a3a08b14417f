//! `android-executor` and `flutter-executor` (aab-host §1.4, permission `app.test`):
//! the specs and typed entry points of the instrumentation sessions in
//! [`crate::executor`]. One schema per command, a union tagged by `operation`
//! (status, open, observe, act, receipt, close) whose branches say what each
//! operation takes; `action` is a union tagged by `type` (the native set for
//! android-executor plus the Flutter set, the Flutter set alone for
//! flutter-executor) and every targeted action carries the `targetRef` of a node
//! of the latest snapshot. Mutating operations (open, act, close) need `serial`:
//! it keys the admission lane and the device's ownership journal.

use aab_plugin_api::{Command, CommandSpec, Context, Invocation, ProviderError, Reply};
use serde_json::{Value, json};

use super::{Budget, cancellable};
use crate::AndroidProvider;
use crate::executor::{EXECUTION_SCHEMA, ExecutorArgs, Flavor};
use crate::manifest::{object, package_name, props};

const OPERATIONS: [&str; 6] = ["status", "open", "observe", "act", "receipt", "close"];
/// A lower-case UUID (the runtime epoch open mints).
const UUID_PATTERN: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

fn native_target_ref() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["schemaVersion", "ref", "guard"],
        "description": "targetRef of a node of the latest native snapshot (copy it from observe)",
        "properties": {"schemaVersion": {"const": "aab.executor-target/v1"}, "ref": {"type": "string", "pattern": "^n[0-9]{1,6}$"}, "guard": {"type": "string", "pattern": "^[0-9a-f]{16}$"}}
    })
}

fn flutter_target_ref() -> Value {
    json!({
        "type": "object", "additionalProperties": false, "required": ["schemaVersion", "runtimeEpoch", "elementId", "guard"],
        "description": "targetRef (aab.flutter-target/v1) of a node of the latest Flutter snapshot (copy it from observe)",
        "properties": {
            "schemaVersion": {"const": "aab.flutter-target/v1"},
            "runtimeEpoch": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"},
            "elementId": {"type": "string", "pattern": "^e[1-9][0-9]{0,9}$"},
            "guard": {"type": "string", "pattern": "^g[0-9]{1,20}$"}
        }
    })
}

fn action_branch(kind: &str, target: Option<&str>, extra: Value, required: &[&str], what: &str) -> Value {
    let mut props = json!({"type": {"const": kind}});
    if let Some(t) = target {
        props["targetRef"] = json!({"$ref": format!("#/$defs/{t}")});
    }
    if let (Value::Object(p), Value::Object(e)) = (&mut props, extra) {
        p.extend(e);
    }
    let mut req = vec!["type"];
    if target.is_some() {
        req.push("targetRef");
    }
    req.extend_from_slice(required);
    json!({"type": "object", "additionalProperties": false, "description": what, "properties": props, "required": req})
}

fn text() -> Value {
    json!({"type": "string", "maxLength": 16384, "description": "Text to put into the field (replaces its content)"})
}

fn delta(axis: &str) -> Value {
    json!({"type": "number", "minimum": -100000, "maximum": 100000, "description": format!("Logical pixels the finger travels along {axis}")})
}

fn duration(min: u64, max: u64, what: &str) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max, "description": what})
}

/// The Flutter action set (both commands), bound to Flutter targetRefs.
fn flutter_actions(tap_ref: &str) -> Vec<Value> {
    vec![
        action_branch("tap", Some(tap_ref), json!({}), &[], "Tap the node (its tap target)"),
        action_branch("longPress", Some(tap_ref), json!({"durationMs": duration(500, 10000, "Press length (default 600)")}), &[], "Press and hold the node"),
        action_branch("ensureVisible", Some("flutterTargetRef"), json!({}), &[], "Scroll the node's scrollable ancestors until it is fully in view"),
        action_branch("enterText", Some("flutterTargetRef"), json!({"text": text()}), &["text"], "Replace the text of an editable field"),
        action_branch("drag", Some("flutterTargetRef"), json!({"dx": delta("x"), "dy": delta("y")}), &["dx", "dy"], "Drag from the node's centre by (dx, dy)"),
        action_branch("fling", Some("flutterTargetRef"), json!({"dx": delta("x"), "dy": delta("y")}), &["dx", "dy"], "Fling from the node's centre: a drag of (dx, dy) whose scroll carries on 3× as far"),
        action_branch("pageBack", None, json!({}), &[], "Pop the current route (Android back when it is the first)"),
        action_branch("pump", None, json!({"durationMs": duration(0, 10000, "Frames to pump, in ms (default 0)")}), &[], "Let frames pass; nothing is touched"),
    ]
}

fn action_defs(flavor: Flavor) -> Value {
    let mut defs = json!({"flutterTargetRef": flutter_target_ref()});
    let branches = match flavor {
        Flavor::Flutter => flutter_actions("flutterTargetRef"),
        Flavor::Android => {
            defs["nativeTargetRef"] = native_target_ref();
            // tap and longPress exist in both sets: either targetRef, tagged by its schemaVersion.
            defs["anyTargetRef"] = json!({"oneOf": [{"$ref": "#/$defs/nativeTargetRef"}, {"$ref": "#/$defs/flutterTargetRef"}]});
            let mut b = flutter_actions("anyTargetRef");
            b.extend([
                action_branch("input", Some("nativeTargetRef"), json!({"text": text()}), &["text"], "Replace the text of an editable view (native engine)"),
                action_branch("swipe", Some("nativeTargetRef"), json!({"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}, "durationMs": duration(1, 10000, "Gesture length (default 300)")}), &["direction"], "Swipe over the view (native engine)"),
                action_branch("back", None, json!({}), &[], "Press Android back (native engine)"),
            ]);
            b
        }
    };
    defs["action"] = json!({"oneOf": branches, "description": "One managed action, bound to the latest snapshot"});
    defs
}

fn spec(flavor: Flavor) -> CommandSpec {
    let session_id = json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", "description": "Executor session id (open: optional, default a new UUID)"});
    let mut p = props(json!({
        "operation": {"type": "string", "enum": OPERATIONS, "description": "status | open | observe | act | receipt | close"},
        "packageName": {"type": "string", "pattern": package_name()["pattern"], "maxLength": 255, "description": "Package of the app under test (the instrumentation's target)"},
        "sessionId": session_id,
        "runtimeEpoch": {"type": "string", "pattern": UUID_PATTERN, "description": "The session's runtime epoch (open returns it)"},
        "instrumentation": {"type": "string", "maxLength": 512, "pattern": "^[A-Za-z][A-Za-z0-9_]*(\\.[A-Za-z][A-Za-z0-9_]*)+(/\\.?[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*)?$",
                            "description": "The instrumentation to run: <pkg>/<runner>, or a test package with one runner for packageName (default: the only one targeting packageName)"},
        "testClass": {"type": "string", "maxLength": 512, "pattern": "^[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*(#[A-Za-z_$][A-Za-z0-9_$]*)?$", "description": "Passed as -e class (a test class or class#method)"},
        "activity": {"type": "string", "maxLength": 512, "pattern": "^\\.?[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*$", "description": "Activity the instrumentation launches (.Name is relative to packageName; default the launcher's)"},
        "leaseMs": {"type": "integer", "minimum": 1000, "maximum": 3600000, "description": "Session lease, renewed by every call (default 60000); when it runs out the instrumentation finishes"},
        "snapshotId": {"type": "string", "pattern": "^s[1-9][0-9]{0,9}$", "description": "The latest snapshot (observe returns it); act refuses an older one with reobserve_required"},
        "actionId": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": "^[A-Za-z0-9._:-]+$", "description": "The action whose receipt to read (act's actionId)"},
        "action": {"$ref": "#/$defs/action"}
    }));
    if flavor == Flavor::Android {
        p["engine"] = json!({"type": "string", "enum": ["native", "flutter"], "description": "What the instrumentation drives: the View hierarchy (native, default) or the Flutter engine"});
    }
    let mut schema = object(p, &["operation", "packageName"]);
    schema["$defs"] = action_defs(flavor);
    let identity = ["sessionId", "runtimeEpoch"];
    let forbid = |names: &[&str]| -> Value {
        let mut m = serde_json::Map::new();
        for n in names {
            if *n != "engine" || flavor == Flavor::Android {
                m.insert(n.to_string(), json!(false));
            }
        }
        Value::Object(m)
    };
    let branch = |op: &str, required: Vec<&str>, forbidden: &[&str]| {
        let mut props = forbid(forbidden);
        props["operation"] = json!({"const": op});
        json!({"properties": props, "required": required})
    };
    let open_only = ["instrumentation", "testClass", "activity", "leaseMs", "engine"];
    let act_only = ["snapshotId", "action"];
    fn cat(a: &[&'static str], b: &[&'static str], c: &[&'static str]) -> Vec<&'static str> {
        a.iter().chain(b).chain(c).copied().collect()
    }
    let mut status = branch("status", vec![], &cat(&open_only, &act_only, &["actionId"]));
    // A session's status needs its whole identity.
    status["dependentRequired"] = json!({"sessionId": ["runtimeEpoch"], "runtimeEpoch": ["sessionId"]});
    schema["oneOf"] = json!([
        status,
        branch("open", vec!["serial"], &cat(&act_only, &["runtimeEpoch", "actionId"], &[])),
        branch("observe", identity.to_vec(), &cat(&open_only, &act_only, &["actionId"])),
        branch("act", vec!["serial", "sessionId", "runtimeEpoch", "snapshotId", "action"], &cat(&open_only, &["actionId"], &[])),
        branch("receipt", vec!["sessionId", "runtimeEpoch", "actionId"], &cat(&open_only, &act_only, &[])),
        branch("close", vec!["serial", "sessionId", "runtimeEpoch"], &cat(&open_only, &act_only, &["actionId"]))
    ]);
    let summary = match flavor {
        Flavor::Android => "An instrumentation session on the device (am instrument -w, lease, aab.executor/v1): status, open (the test APK must be installed), observe (a snapshot of the app's View hierarchy or Flutter tree), act (one managed action bound to the latest snapshot; the receipt stays on the device), receipt, close. Never retried; a lost reply is ambiguous until receipt or reconcile settles it.",
        Flavor::Flutter => "An instrumentation session driving the app's Flutter engine: status, open, observe (the operable Flutter tree), act (tap, longPress, ensureVisible, enterText, drag, fling, pageBack, pump bound to the latest snapshot's targetRefs), receipt, close. Never retried; a lost reply is ambiguous until receipt or reconcile settles it.",
    };
    CommandSpec::conditional(flavor.command(), ["open", "act", "close"])
        .platform("android")
        .domain("advanced")
        .target_kind("android-app")
        .summary(summary)
        .permission("app.test")
        .target_key("serial")
        .device_key("serial")
        .execution_schema(EXECUTION_SCHEMA)
        .timeouts(30_000, 120_000)
        .operation_timeout("open", 60_000)
        .input_schema(schema)
}

async fn run(ctx: &Context<'_>, inv: &Invocation, flavor: Flavor, args: ExecutorArgs) -> Result<Reply, ProviderError> {
    let budget = Budget::new(ctx, args.adb_timeout_ms);
    cancellable(ctx, async {
        let device = super::device(args.adb.as_deref(), args.serial.as_deref(), &budget).await?;
        crate::executor::run_on(ctx, inv, flavor, &args, device, &budget).await
    })
    .await
    .map(Reply::Json)
}

pub struct AndroidExecutor;
impl Command for AndroidExecutor {
    type Provider = AndroidProvider;
    type Args = ExecutorArgs;
    fn spec() -> CommandSpec {
        spec(Flavor::Android)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: ExecutorArgs) -> Result<Reply, ProviderError> {
        run(ctx, inv, Flavor::Android, args).await
    }
}

pub struct FlutterExecutor;
impl Command for FlutterExecutor {
    type Provider = AndroidProvider;
    type Args = ExecutorArgs;
    fn spec() -> CommandSpec {
        spec(Flavor::Flutter)
    }
    async fn run(_: &AndroidProvider, ctx: &Context<'_>, inv: &Invocation, args: ExecutorArgs) -> Result<Reply, ProviderError> {
        run(ctx, inv, Flavor::Flutter, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aab_plugin_api::validate::{compile, input_schema_with_host_options, validate_arguments};

    const EPOCH: &str = "0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30";

    fn check(flavor: Flavor, args: Value) -> Result<(), ProviderError> {
        let spec = spec(flavor);
        let schema = input_schema_with_host_options(&spec);
        let v = compile(&schema).unwrap();
        validate_arguments(&spec.command, &v, &schema, &args)
    }

    fn refused(flavor: Flavor, args: Value) -> (String, Option<String>) {
        let e = check(flavor, args.clone()).expect_err(&format!("{args} must be refused"));
        assert_eq!(e.dispatched, Some(false));
        (e.error, e.field)
    }

    fn native_ref() -> Value {
        json!({"schemaVersion": "aab.executor-target/v1", "ref": "n4", "guard": "0123456789abcdef"})
    }

    fn flutter_ref() -> Value {
        json!({"schemaVersion": "aab.flutter-target/v1", "runtimeEpoch": "1764633600000000-a1b2c3d4e5f6", "elementId": "e12", "guard": "g123"})
    }

    fn act(action: Value) -> Value {
        json!({"operation": "act", "packageName": "com.x.app", "serial": "s", "sessionId": "s1", "runtimeEpoch": EPOCH, "snapshotId": "s3", "action": action})
    }

    #[test]
    fn every_operation_takes_its_own_arguments() {
        let a = Flavor::Android;
        check(a, json!({"operation": "status", "packageName": "com.x.app"})).unwrap();
        check(a, json!({"operation": "status", "packageName": "com.x.app", "sessionId": "s1", "runtimeEpoch": EPOCH})).unwrap();
        check(a, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "instrumentation": "com.x.app.test/.Runner", "testClass": "com.x.T#run", "activity": ".Main", "leaseMs": 5000, "engine": "flutter", "sessionId": "mine"})).unwrap();
        check(a, json!({"operation": "observe", "packageName": "com.x.app", "sessionId": "s1", "runtimeEpoch": EPOCH})).unwrap();
        check(a, act(json!({"type": "tap", "targetRef": native_ref()}))).unwrap();
        check(a, act(json!({"type": "tap", "targetRef": flutter_ref()}))).unwrap();
        check(a, act(json!({"type": "input", "targetRef": native_ref(), "text": "hi"}))).unwrap();
        check(a, act(json!({"type": "swipe", "targetRef": native_ref(), "direction": "up"}))).unwrap();
        check(a, act(json!({"type": "back"}))).unwrap();
        check(a, json!({"operation": "receipt", "packageName": "com.x.app", "sessionId": "s1", "runtimeEpoch": EPOCH, "actionId": "0f8e6a52-1c2b-4e8f-9a3d-5b7c9d1e2f30"})).unwrap();
        check(a, json!({"operation": "close", "packageName": "com.x.app", "serial": "s", "sessionId": "s1", "runtimeEpoch": EPOCH})).unwrap();
        let f = Flavor::Flutter;
        for action in [
            json!({"type": "tap", "targetRef": flutter_ref()}),
            json!({"type": "longPress", "targetRef": flutter_ref(), "durationMs": 800}),
            json!({"type": "ensureVisible", "targetRef": flutter_ref()}),
            json!({"type": "enterText", "targetRef": flutter_ref(), "text": "x"}),
            json!({"type": "drag", "targetRef": flutter_ref(), "dx": 0, "dy": -120}),
            json!({"type": "fling", "targetRef": flutter_ref(), "dx": 10, "dy": 0}),
            json!({"type": "pageBack"}),
            json!({"type": "pump", "durationMs": 16}),
        ] {
            check(f, act(action.clone())).unwrap_or_else(|e| panic!("{action}: {e:?}"));
        }
    }

    #[test]
    fn hostile_and_misplaced_arguments_are_refused_before_any_device_access() {
        let a = Flavor::Android;
        // Mutations need the serial (the device journal's key).
        assert_eq!(refused(a, json!({"operation": "open", "packageName": "com.x.app"})), ("missing_argument".into(), Some("serial".into())));
        let mut no_serial = act(json!({"type": "back"}));
        no_serial.as_object_mut().unwrap().remove("serial");
        assert_eq!(refused(a, no_serial).1.as_deref(), Some("serial"));
        // A bad snapshot id, a bad epoch, a shell-hostile instrumentation or activity.
        let mut bad = act(json!({"type": "back"}));
        bad["snapshotId"] = json!("s1; rm -rf /");
        assert_eq!(refused(a, bad).1.as_deref(), Some("snapshotId"));
        let mut bad = act(json!({"type": "back"}));
        bad["runtimeEpoch"] = json!("not-a-uuid");
        assert_eq!(refused(a, bad).1.as_deref(), Some("runtimeEpoch"));
        assert_eq!(refused(a, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "instrumentation": "com.x/.R;reboot"})).1.as_deref(), Some("instrumentation"));
        assert_eq!(refused(a, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "activity": ".Main $(id)"})).1.as_deref(), Some("activity"));
        assert_eq!(refused(a, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "leaseMs": 10})).1.as_deref(), Some("leaseMs"));
        // Oversized text.
        let big = "x".repeat(16385);
        assert_eq!(refused(a, act(json!({"type": "input", "targetRef": native_ref(), "text": big}))).1.as_deref(), Some("action.text"));
        assert_eq!(refused(Flavor::Flutter, act(json!({"type": "enterText", "targetRef": flutter_ref(), "text": "y".repeat(20000)}))).1.as_deref(), Some("action.text"));
        // Forged targetRefs and unknown members.
        let mut forged = native_ref();
        forged["guard"] = json!("../../etc/passwd");
        assert!(refused(a, act(json!({"type": "tap", "targetRef": forged}))).1.unwrap().starts_with("action.targetRef"));
        assert_eq!(refused(a, act(json!({"type": "input", "targetRef": flutter_ref(), "text": "x"}))).1.as_deref().map(|f| f.starts_with("action.targetRef")), Some(true));
        assert_eq!(refused(a, act(json!({"type": "back", "extra": 1}))).1.as_deref(), Some("action.extra"));
        assert_eq!(refused(a, act(json!({"type": "teleport"}))).1.as_deref(), Some("action.type"));
        // Arguments of another operation.
        assert_eq!(refused(a, json!({"operation": "observe", "packageName": "com.x.app", "sessionId": "s1", "runtimeEpoch": EPOCH, "snapshotId": "s1"})).1.as_deref(), Some("snapshotId"));
        assert_eq!(refused(a, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "runtimeEpoch": EPOCH})).1.as_deref(), Some("runtimeEpoch"));
        assert_eq!(refused(a, json!({"operation": "receipt", "packageName": "com.x.app", "sessionId": "s1", "runtimeEpoch": EPOCH})).1.as_deref(), Some("actionId"));
        // flutter-executor has neither the native actions nor an engine choice.
        let f = Flavor::Flutter;
        assert_eq!(refused(f, act(json!({"type": "back"}))).1.as_deref(), Some("action.type"));
        assert_eq!(refused(f, act(json!({"type": "tap", "targetRef": native_ref()}))).1.as_deref().map(|x| x.starts_with("action.targetRef")), Some(true));
        assert_eq!(refused(f, json!({"operation": "open", "packageName": "com.x.app", "serial": "s", "engine": "native"})).1.as_deref(), Some("engine"));
    }

    #[test]
    fn the_specs_carry_the_contract_rows() {
        for (flavor, name) in [(Flavor::Android, "android-executor"), (Flavor::Flutter, "flutter-executor")] {
            let s = spec(flavor);
            assert_eq!((s.command.as_str(), s.domain.as_str(), s.platform.as_str(), s.target_kind.as_str()), (name, "advanced", "android", "android-app"));
            assert_eq!((s.script_permission.as_deref(), s.mutating_operations.clone()), (Some("app.test"), vec!["open".to_string(), "act".into(), "close".into()]));
            assert_eq!((s.target_key.clone(), s.device_key.clone()), (vec!["serial".to_string()], vec!["serial".to_string()]));
            assert_eq!((s.default_timeout_for(&json!({"operation": "open"})), s.default_timeout_for(&json!({"operation": "act"}))), (60_000, 30_000));
        }
    }
}
