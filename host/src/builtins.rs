//! Host built-in commands, each registered as one (spec, handler) value
//! ([`Builtin`]). The spec is registered exactly like a plugin command's (same
//! shape, same validation); the handler is how the pipeline executes it. Only
//! commands that can execute are listed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use aab_plugin_api::CommandSpec;
use aab_plugin_api::protocol::Mutation;
use serde_json::{Value, json};

use crate::pipeline::{ExecutionHost, RuntimeControl};
use crate::reply::ExecOutcome;

use crate::engines::catalog::EngineCatalog;
use crate::registry::schema::{OperationFields, tagged_operations};

pub const RUNTIME: &str = "runtime";
pub const DEVICE_OWNERSHIP: &str = "device-ownership";
pub const EVIDENCE: &str = "evidence";
pub const RESPONSE: &str = "response";
pub const INTENT: &str = "intent";
pub const SCRIPT: &str = "script";
pub const EXECUTOR_PREPARE: &str = "executor-prepare";

fn spec(command: &str, summary: &str, mutation: Mutation, mutating: &[&str], input_schema: Value) -> CommandSpec {
    let base = match mutation {
        Mutation::None => CommandSpec::query(command),
        Mutation::Always => CommandSpec::mutation(command),
        Mutation::Conditional => CommandSpec::conditional(command, mutating.iter().copied()),
    };
    base.summary(summary).platform("host").domain("execution").role("execution").target_kind("host-runtime").timeouts(10_000, 60_000).input_schema(input_schema)
}

fn op<'a>(operation: &'a str, description: &'a str, own: &'a [&'a str], required: &'a [&'a str]) -> OperationFields<'a> {
    OperationFields { operation, description, own, required }
}

/// The built-in command specs. `evidence`, `runtime` and `device-ownership` are
/// tagged on `operation` with [`tagged_operations`]: each operation accepts only its
/// own fields, like `intent` and `script`.
/// What a built-in's handler gets besides the host.
pub struct BuiltinCall<'a> {
    pub arguments: &'a Value,
    /// The caller's working directory (absolute).
    pub cwd: &'a str,
    pub deadline: Instant,
    /// Present only on the public request path (the `runtime` built-in needs it).
    pub control: Option<&'a dyn RuntimeControl>,
}

pub type BuiltinFuture<'a> = Pin<Box<dyn Future<Output = ExecOutcome> + Send + 'a>>;

/// How the pipeline executes one built-in.
pub type Handler = for<'a> fn(&'a Arc<ExecutionHost>, BuiltinCall<'a>) -> BuiltinFuture<'a>;

/// A built-in command: its spec and its handler, registered together.
pub struct Builtin {
    pub spec: CommandSpec,
    pub handler: Handler,
}

/// The specs of every built-in (tests, discovery without a runtime).
pub fn specs(engines: &EngineCatalog) -> Vec<CommandSpec> {
    host_builtins().into_iter().chain(engine_builtins(engines)).map(|b| b.spec).collect()
}

/// The engine commands: registered after the plugins, since their schemas name
/// what the loaded plugins declare ([`EngineCatalog`]).
pub const ENGINE_COMMANDS: [&str; 2] = [INTENT, SCRIPT];

/// The specs of the built-ins that do not depend on the catalog (a registry that
/// checks a plugin before the catalog is loaded, e.g. `aab plugins install`).
pub fn host_specs() -> Vec<CommandSpec> {
    host_builtins().into_iter().map(|b| b.spec).collect()
}

/// The engine built-ins for `engines`. Engines register their command only once
/// they can execute it.
pub fn engine_builtins(engines: &EngineCatalog) -> Vec<Builtin> {
    let mut all = Vec::new();
    all.extend(crate::engines::intent::spec(engines).map(|spec| Builtin { spec, handler: ExecutionHost::run_intent }));
    all.extend(crate::engines::script::spec(engines).map(|spec| Builtin { spec, handler: ExecutionHost::run_script }));
    all
}

/// The built-ins that do not depend on the catalog.
pub fn host_builtins() -> Vec<Builtin> {
    let uuid = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
    let mut ownership = spec(
        DEVICE_OWNERSHIP,
        "Inspect a device's ownership journal, reconcile an action whose outcome is unknown, read a retained settlement, or abandon a retained install",
        Mutation::Conditional,
        &["reconcile", "cancel-install"],
        tagged_operations(
            json!({
                "operation": {"type": "string", "enum": ["status", "reconcile", "receipt", "cancel-install"], "description": "status: journal and phase; reconcile: ask the owning provider for the original action's durable receipt (never replays it); receipt: the retained settlement of one action; cancel-install: abandon a retained install-apk's PackageInstaller session (or cancel its job before admission)"},
                "serial": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "the physical device identifier (the value of the command's device key)"},
                "runtimeEpoch": {"type": "string", "pattern": uuid, "description": "runtime id that issued the action (receipt)"},
                "actionId": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "the original action id (receipt; cancel-install: installation.actionId)"}
            }),
            &["serial"],
            &["serial"],
            &[
                op("status", "The device's ownership journal and phase", &[], &[]),
                op("reconcile", "Settle an unresolved action from the owning provider's durable receipt", &[], &[]),
                op("receipt", "The retained settlement of one action", &["runtimeEpoch", "actionId"], &["runtimeEpoch", "actionId"]),
                op("cancel-install", "Abandon a retained install's PackageInstaller session; never installs", &["actionId"], &["actionId"]),
            ],
        ),
    );
    ownership.role = "capability".into();
    ownership.target_kind = "device".into();
    ownership.max_timeout_ms = 30_000;
    let mut evidence = spec(
        EVIDENCE,
        "Export an operation's execution evidence as a verifiable archive, verify an archive offline, or render it as one self-contained HTML report",
        Mutation::None,
        &[],
        tagged_operations(
            json!({
                "operation": {"type": "string", "enum": ["export", "verify", "render"], "description": "export: write records.json + manifest.json for one operation; verify: recompute an archive offline (no runtime, no store); render: verify offline and write one self-contained HTML report marking what fails"},
                "namespace": {"type": "string", "enum": ["intent", "script", "response"], "description": "evidence namespace (export)"},
                "operationId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "the operation whose evidence to export"},
                "outputDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "new directory to create (its parent must exist); relative to the caller's cwd"},
                "includeRecordedPayloads": {"type": "boolean", "description": "also copy recorded payload files (archive v2)"},
                "archiveDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "archive to verify or render; relative to the caller's cwd"},
                "manifestSha256": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "sha256 of manifest.json as reported by export (optional for render: without it the report says the manifest was not checked against a known hash)"},
                "outputFile": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "new HTML file to write (render; must not exist, its parent must); relative to the caller's cwd"}
            }),
            &[],
            &[],
            &[
                op(
                    "export",
                    "Write one operation's evidence as a verifiable archive",
                    &["namespace", "operationId", "outputDir", "includeRecordedPayloads"],
                    &["namespace", "operationId", "outputDir"],
                ),
                op("verify", "Verify an archive offline", &["archiveDir", "manifestSha256"], &["archiveDir", "manifestSha256"]),
                op(
                    "render",
                    "Verify an archive offline and write it as one self-contained HTML report (timeline, screenshots, marked failures)",
                    &["archiveDir", "outputFile", "manifestSha256"],
                    &["archiveDir", "outputFile"],
                ),
            ],
        ),
    );
    evidence.domain = "evidence".into();
    evidence.role = "evidence".into();
    evidence.target_kind = "operation".into();
    evidence.max_timeout_ms = 600_000;
    evidence.default_timeout_ms = 120_000;
    let mut response = spec(
        RESPONSE,
        "Re-extract a stored response snapshot by its unchanged ref, without touching a device",
        Mutation::None,
        &[],
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "operation": {"type": "string", "enum": ["read"]},
                "ref": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "namespace": {"const": "response"},
                        "evidenceId": {"type": "string", "minLength": 1, "maxLength": 512},
                        "checksum": {"type": "string", "minLength": 1, "maxLength": 128},
                        "operationId": {"type": "string", "minLength": 1, "maxLength": 256}
                    },
                    "required": ["namespace", "evidenceId", "checksum", "operationId"],
                    "description": "control.source.ref of the original reply, unchanged"
                }
            },
            "required": ["operation", "ref"]
        }),
    );
    response.domain = "evidence".into();
    response.role = "evidence".into();
    response.target_kind = "operation".into();
    let runtime = spec(
        RUNTIME,
        "Start, inspect or stop the shared local runtime, or cancel a queued or running request",
        Mutation::Conditional,
        &["start", "stop", "cancel"],
        tagged_operations(
            json!({
                "operation": {"type": "string", "enum": ["start", "status", "stop", "cancel"], "description": "start: ensure running; status: inspect without starting; stop: drain active work and release ownership; cancel: cancel the requests sent with `cancelRequestId`"},
                "cancelRequestId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "the requestId of the request(s) to cancel (cancel)"}
            }),
            &[],
            &[],
            &[
                op("start", "Ensure the runtime is running", &[], &[]),
                op("status", "Inspect the runtime without starting it", &[], &[]),
                op("stop", "Drain active work and release ownership", &[], &[]),
                op("cancel", "Cancel the queued or running requests sent with `cancelRequestId`", &["cancelRequestId"], &["cancelRequestId"]),
            ],
        ),
    );
    // Host work on behalf of the executors: keyed by what it prepares, so two
    // preparations of one project queue while other projects prepare in parallel.
    let prepare = CommandSpec::mutation(EXECUTOR_PREPARE)
        .summary("Prepare what an executor needs on this host (an instrumentation package, a local browser); names any missing toolchain; never half-prepares")
        .platform("host")
        .domain("advanced")
        .target_kind("host")
        .target_key("platform")
        .target_key("projectDir")
        .permission("app.test")
        .timeouts(600_000, 600_000)
        .input_schema(crate::executors::input_schema());
    vec![
        Builtin { spec: prepare, handler: ExecutionHost::run_executor_prepare },
        Builtin { spec: evidence, handler: ExecutionHost::run_evidence },
        Builtin { spec: response, handler: ExecutionHost::run_response },
        Builtin { spec: runtime, handler: ExecutionHost::run_runtime },
        Builtin { spec: ownership, handler: ExecutionHost::run_device_ownership },
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::registry::Registry;

    fn rejected(command: &str, arguments: serde_json::Value) -> (String, Option<String>) {
        let registry = Registry::new(super::specs(&Default::default()));
        let e = registry.validate(command, &arguments).expect_err("must be rejected");
        (e.code, e.field)
    }

    fn accepted(command: &str, arguments: serde_json::Value) {
        let registry = Registry::new(super::specs(&Default::default()));
        if let Err(e) = registry.validate(command, &arguments) {
            panic!("{command} {arguments} was rejected: {e}");
        }
    }

    #[test]
    fn each_operation_accepts_only_its_own_fields() {
        let sha = "a".repeat(64);
        let unsupported = |field: &str| ("unsupported_argument".to_string(), Some(field.to_string()));
        assert_eq!(
            rejected("evidence", json!({"operation": "verify", "archiveDir": "a", "manifestSha256": sha, "namespace": "intent"})),
            unsupported("namespace")
        );
        assert_eq!(
            rejected("evidence", json!({"operation": "export", "namespace": "intent", "operationId": "o", "outputDir": "d", "archiveDir": "a"})),
            unsupported("archiveDir")
        );
        assert_eq!(rejected("runtime", json!({"operation": "status", "cancelRequestId": "x"})), unsupported("cancelRequestId"));
        assert_eq!(rejected("runtime", json!({"operation": "stop", "cancelRequestId": "x"})), unsupported("cancelRequestId"));
        assert_eq!(rejected("device-ownership", json!({"operation": "status", "serial": "s", "actionId": "a"})), unsupported("actionId"));
        assert_eq!(
            rejected("device-ownership", json!({"operation": "reconcile", "serial": "s", "runtimeEpoch": "00000000-0000-0000-0000-000000000000"})),
            unsupported("runtimeEpoch")
        );
        // The message names the operation that does not accept the field.
        let registry = Registry::new(super::specs(&Default::default()));
        let e = registry.validate("runtime", &json!({"operation": "status", "cancelRequestId": "x"})).unwrap_err();
        assert!(e.message.contains("operation `status`"), "{}", e.message);
        assert_eq!(e.details, Some(json!({"operation": "status"})));
        // Still required where they belong.
        assert_eq!(rejected("runtime", json!({"operation": "cancel"})), ("missing_argument".to_string(), Some("cancelRequestId".to_string())));
        assert_eq!(rejected("device-ownership", json!({"operation": "status"})), ("missing_argument".to_string(), Some("serial".to_string())));
        // Own fields and the host execution options are accepted.
        accepted("evidence", json!({"operation": "verify", "archiveDir": "a", "manifestSha256": sha, "timeoutMs": 1000}));
        accepted("evidence", json!({"operation": "export", "namespace": "script", "operationId": "o", "outputDir": "d", "includeRecordedPayloads": true}));
        accepted("evidence", json!({"operation": "render", "archiveDir": "a", "outputFile": "r.html"}));
        accepted("evidence", json!({"operation": "render", "archiveDir": "a", "outputFile": "r.html", "manifestSha256": sha}));
        assert_eq!(rejected("evidence", json!({"operation": "render", "archiveDir": "a"})), ("missing_argument".to_string(), Some("outputFile".to_string())));
        assert_eq!(rejected("evidence", json!({"operation": "verify", "archiveDir": "a", "manifestSha256": sha, "outputFile": "r"})), unsupported("outputFile"));
        accepted("runtime", json!({"operation": "status", "requestId": "r1", "feedback": "off"}));
        accepted("runtime", json!({"operation": "cancel", "cancelRequestId": "x"}));
        accepted("device-ownership", json!({"operation": "receipt", "serial": "s", "runtimeEpoch": "00000000-0000-0000-0000-000000000000", "actionId": "a"}));
    }

    #[test]
    fn every_builtin_is_registered_with_its_handler() {
        let all: Vec<super::Builtin> = super::host_builtins().into_iter().chain(super::engine_builtins(&Default::default())).collect();
        let mut names: Vec<&str> = all.iter().map(|b| b.spec.command.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, [super::DEVICE_OWNERSHIP, super::EVIDENCE, super::EXECUTOR_PREPARE, super::INTENT, super::RESPONSE, super::RUNTIME, super::SCRIPT]);
        // The engine commands are the reserved ones, registered after the plugins.
        let engines: Vec<String> = super::engine_builtins(&Default::default()).into_iter().map(|b| b.spec.command).collect();
        assert_eq!(engines, super::ENGINE_COMMANDS);
    }

    #[test]
    fn operation_discovery_narrows_the_builtins() {
        let registry = Registry::new(super::specs(&Default::default()));
        let ops = registry.get("runtime").expect("runtime").operations();
        assert_eq!(ops, ["start", "status", "stop", "cancel"]);
        let payload = crate::registry::discovery::capabilities(&registry, &json!({"command": "runtime", "operation": "cancel"}));
        assert_eq!(payload["ok"], json!(true), "{payload}");
        let payload = crate::registry::discovery::capabilities(&registry, &json!({"command": "evidence", "operation": "verify"}));
        let text = payload["inputSchema"].to_string();
        assert!(text.contains("archiveDir") && text.contains("manifestSha256"), "{text}");
    }

    /// The request corpus (`tests/corpus/request`): inputs that once got through or
    /// broke validation, with the error each must get.
    #[test]
    fn request_corpus_replays() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/request");
        let expected: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).expect("expected.json")).expect("expected.json parses");
        assert!(!expected.is_empty());
        let registry = Registry::new(super::specs(&Default::default()));
        for (name, want) in expected {
            let request: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).expect("case")).expect("case parses");
            let command = request["command"].as_str().expect("command");
            let e = registry.validate(command, &request["arguments"]).expect_err(&name);
            assert_eq!(Some(e.code.as_str()), want["error"].as_str(), "{name}: {e}");
            if let Some(field) = want.get("field") {
                assert_eq!(e.field.as_deref(), field.as_str(), "{name}: {e}");
            }
        }
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use crate::registry::Registry;

        /// Field names the built-ins know (so generated objects reach their
        /// branches) plus arbitrary ones.
        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::sample::select(vec![
                    "operation", "serial", "actionId", "runtimeEpoch", "namespace", "operationId", "outputDir", "archiveDir",
                    "manifestSha256", "includeRecordedPayloads", "outputFile", "cancelRequestId", "requestId", "timeoutMs", "feedback", "ref",
                    "goal", "target", "decision", "afterSequence", "limit", "require", "budget", "source", "language",
                ])
                .prop_map(str::to_string),
                ".{0,6}",
            ]
        }

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                any::<u64>().prop_map(|n| json!(n)),
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
                prop::sample::select(vec!["status", "start", "stop", "cancel", "verify", "export", "receipt", "reconcile", "read", "decide", "intent"])
                    .prop_map(|s| json!(s)),
                ".{0,12}".prop_map(Value::String),
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(8, 96, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::vec((key(), inner), 0..6).prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Validation of arbitrary JSON never panics, and every rejection is a
            /// contract error: a known code, dispatched:false, a field to point at.
            #[test]
            fn validation_of_arbitrary_arguments_never_panics(arguments in value(), pick in any::<prop::sample::Index>()) {
                let registry = Registry::new(super::super::specs(&Default::default()));
                let names: Vec<String> = registry.iter().map(|c| c.spec.command.clone()).collect();
                let command = &names[pick.index(names.len())];
                if let Err(e) = registry.validate(command, &arguments) {
                    prop_assert!(["invalid_argument", "missing_argument", "unsupported_argument"].contains(&e.code.as_str()), "{e}");
                    prop_assert_eq!(e.dispatched, Some(false));
                    // The field names the offending key (which may itself be `""`).
                    prop_assert!(e.field.is_some(), "{e}");
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }
}
