//! Host built-in commands. They are registered exactly like plugin commands (same
//! spec shape, same validation); only their execution lives in the host. Only
//! commands that can execute are listed.

use aab_plugin_api::CommandSpec;
use aab_plugin_api::protocol::Mutation;
use serde_json::{Value, json};

pub const RUNTIME: &str = "runtime";
pub const DEVICE_OWNERSHIP: &str = "device-ownership";
pub const EVIDENCE: &str = "evidence";
pub const RESPONSE: &str = "response";
pub const INTENT: &str = "intent";
pub const SCRIPT: &str = "script";

fn spec(command: &str, summary: &str, mutation: Mutation, mutating: &[&str], input_schema: Value) -> CommandSpec {
    CommandSpec {
        command: command.into(),
        domain: "execution".into(),
        summary: summary.into(),
        platform: "host".into(),
        role: "execution".into(),
        target_kind: "host-runtime".into(),
        script_permission: None,
        mutation,
        mutating_operations: mutating.iter().map(|s| s.to_string()).collect(),
        execution_schemas: vec![],
        target_key: vec![],
        lane: None,
        device_key: vec![],
        default_timeout_ms: 10_000,
        max_timeout_ms: 60_000,
        input_schema,
    }
}

pub fn specs() -> Vec<CommandSpec> {
    let uuid = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
    let mut ownership = spec(
        DEVICE_OWNERSHIP,
        "Inspect a device's ownership journal, reconcile an action whose outcome is unknown, or read a retained settlement",
        Mutation::Conditional,
        &["reconcile"],
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "operation": {"type": "string", "enum": ["status", "reconcile", "receipt"], "description": "status: journal and phase; reconcile: ask the owning provider for the original action's durable receipt (never replays it); receipt: the retained settlement of one action"},
                "serial": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "the physical device identifier (the value of the command's device key)"},
                "runtimeEpoch": {"type": "string", "pattern": uuid, "description": "runtime id that issued the action (receipt)"},
                "actionId": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "the original action id (receipt)"}
            },
            "required": ["operation", "serial"],
            "oneOf": [
                {"properties": {"operation": {"const": "status"}}},
                {"properties": {"operation": {"const": "reconcile"}}},
                {"properties": {"operation": {"const": "receipt"}}, "required": ["runtimeEpoch", "actionId"]}
            ]
        }),
    );
    ownership.role = "capability".into();
    ownership.target_kind = "device".into();
    ownership.max_timeout_ms = 30_000;
    let mut evidence = spec(
        EVIDENCE,
        "Export an operation's execution evidence as a verifiable archive, or verify an archive offline",
        Mutation::None,
        &[],
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "operation": {"type": "string", "enum": ["export", "verify"], "description": "export: write records.json + manifest.json for one operation; verify: recompute an archive offline (no runtime, no store)"},
                "namespace": {"type": "string", "enum": ["intent", "script", "response"], "description": "evidence namespace (export)"},
                "operationId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "the operation whose evidence to export"},
                "outputDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "new directory to create (its parent must exist); relative to the caller's cwd"},
                "includeRecordedPayloads": {"type": "boolean", "description": "also copy recorded payload files (archive v2)"},
                "archiveDir": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "archive to verify; relative to the caller's cwd"},
                "manifestSha256": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "sha256 of manifest.json as reported by export"}
            },
            "required": ["operation"],
            "oneOf": [
                {"properties": {"operation": {"const": "export"}}, "required": ["namespace", "operationId", "outputDir"]},
                {"properties": {"operation": {"const": "verify"}}, "required": ["archiveDir", "manifestSha256"]}
            ]
        }),
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
    let mut all = vec![
        evidence,
        response,
        spec(
            RUNTIME,
            "Start, inspect or stop the shared local runtime, or cancel a queued or running request",
            Mutation::Conditional,
            &["start", "stop", "cancel"],
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "operation": {"type": "string", "enum": ["start", "status", "stop", "cancel"], "description": "start: ensure running; status: inspect without starting; stop: drain active work and release ownership; cancel: cancel the requests sent with `cancelRequestId`"},
                    "cancelRequestId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "the requestId of the request(s) to cancel (cancel)"}
                },
                "required": ["operation"],
                "oneOf": [
                    {"properties": {"operation": {"const": "start"}}},
                    {"properties": {"operation": {"const": "status"}}},
                    {"properties": {"operation": {"const": "stop"}}},
                    {"properties": {"operation": {"const": "cancel"}}, "required": ["cancelRequestId"]}
                ]
            }),
        ),
        ownership,
    ];
    // Engines register their command only once they can execute it.
    all.extend(crate::engines::intent::spec());
    all.extend(crate::engines::script::spec());
    all
}
