//! Host built-in commands. They are registered exactly like plugin commands (same
//! spec shape, same validation); only their execution lives in the host. Only
//! commands that can execute are listed.

use aab_plugin_api::CommandSpec;
use aab_plugin_api::protocol::Mutation;
use serde_json::json;

pub const RUNTIME: &str = "runtime";

pub fn specs() -> Vec<CommandSpec> {
    vec![CommandSpec {
        command: RUNTIME.into(),
        domain: "execution".into(),
        summary: "Start, inspect or stop the shared local runtime".into(),
        platform: "host".into(),
        role: "execution".into(),
        target_kind: "host-runtime".into(),
        script_permission: None,
        mutation: Mutation::Conditional,
        mutating_operations: vec!["start".into(), "stop".into()],
        execution_schemas: vec![],
        target_key: vec![],
        device_key: vec![],
        default_timeout_ms: 10_000,
        max_timeout_ms: 60_000,
        input_schema: json!({
            "type": "object",
            "properties": {
                "operation": {"enum": ["start", "status", "stop"], "description": "start: ensure running; status: inspect without starting; stop: drain active work and release ownership"}
            },
            "required": ["operation"],
            "additionalProperties": false
        }),
    }]
}
