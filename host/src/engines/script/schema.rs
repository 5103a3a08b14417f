//! The `script` command spec: one object schema whose `oneOf` is tagged on
//! `operation`; every branch forbids the other operations' fields, so each
//! operation accepts only its own (`unsupported_argument`, before any access).
//! `script.target` is the contract's execution target (seed `execution-target.js`):
//! per platform its identity and connection fields and nothing else, so an
//! unsupported target field is rejected instead of silently dropped. The platforms
//! and their fields come from the loaded plugins' manifests (`targets`).

use aab_plugin_api::CommandSpec;
use serde_json::{Map, Value, json};

use crate::engines::catalog::EngineCatalog;
use crate::registry::schema::tagged_operation_list;

use super::{MIB, PERMISSIONS, SPEC_SCHEMA};

fn text(max: u64, what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max, "description": what})
}

/// `script.target`: one strict object per declared execution target, or null.
pub fn target_schema(catalog: &EngineCatalog) -> Value {
    let mut branches: Vec<Value> = catalog
        .targets
        .iter()
        .map(|t| {
            let mut properties = Map::new();
            properties.insert("platform".into(), json!({"const": t.platform}));
            for k in &t.identity {
                properties.insert(k.clone(), json!({"type": "string", "minLength": 1, "maxLength": 1024, "pattern": "^\\S+$", "description": "target identity (no whitespace)"}));
            }
            for (k, schema) in &t.connection {
                properties.insert(k.clone(), schema.clone());
            }
            let mut required = vec!["platform"];
            required.extend(t.identity.iter().map(String::as_str));
            json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
        })
        .collect();
    branches.push(json!({"type": "null"}));
    let shapes: Vec<String> = catalog
        .targets
        .iter()
        .map(|t| {
            let fields = t.identity.iter().cloned().chain(t.connection.keys().map(|k| format!("{k}?")));
            format!("{{platform:\"{}\", {}}}", t.platform, fields.collect::<Vec<_>>().join(", "))
        })
        .collect();
    let description = match shapes.split_last() {
        None => "execution target: null (no loaded plugin declares an execution target). Other values are rejected.".to_string(),
        Some((last, [])) => format!("execution target or null: {last}; its identity fields are default arguments of ctx.call. Other fields are rejected."),
        Some((last, rest)) => format!("execution target or null: {} or {last}; its identity fields are default arguments of ctx.call. Other fields are rejected.", rest.join(", ")),
    };
    json!({"anyOf": branches, "description": description})
}

fn script_object(catalog: &EngineCatalog) -> Value {
    let size = json!({"type": "integer", "minimum": 1, "maximum": 64 * MIB});
    json!({
        "type": "object",
        "additionalProperties": false,
        "description": "aab.code-script/v1 spec",
        "properties": {
            "schemaVersion": {"const": SPEC_SCHEMA},
            "language": {"type": "string", "enum": ["javascript", "python"]},
            "source": {"type": "string", "minLength": 1, "maxLength": 4 * MIB, "description": "program text (exclusive with sourcePath)"},
            "sourcePath": text(4096, "program file, read once at start; relative to the caller's cwd"),
            "name": {"type": "string", "minLength": 1, "maxLength": 256},
            "cwd": text(4096, "working directory of the program (default the caller's cwd)"),
            "entrypoint": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$", "description": "function called with ctx (default main)"},
            "target": target_schema(catalog),
            "inputs": {"type": "object", "description": "ctx.inputs"},
            "permissions": {"type": "array", "uniqueItems": true, "items": {"type": "string", "enum": PERMISSIONS}, "description": "default app.read, app.interact, capture.read"},
            "policy": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 86_400_000, "description": "whole-script deadline (default 600000)"},
                    "restartPolicy": {"type": "string", "enum": ["none", "checkpoint"]},
                    "maxOutputBytes": size,
                    "maxProgressBytes": size
                }
            }
        },
        "required": ["schemaVersion", "language"],
        "oneOf": [{"required": ["source"]}, {"required": ["sourcePath"]}]
    })
}

/// (operation, description, own properties, required)
fn operations(catalog: &EngineCatalog) -> Vec<crate::registry::schema::OperationSpec> {
    let id = json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", "description": "The operation id (start: optional, default script-<ms>-<n>)"});
    let read = json!({
        "operationId": id,
        "afterSequence": {"type": "integer", "minimum": 0, "maximum": 9007199254740991u64, "description": "Continuation cursor: the previous status/wait response's eventSequence; events and history after it are returned. Not history.lastSequence (that one pages history alone)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "history (execution ledger) items per response (default 20)"},
        "eventLimit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "events per response (default 100)"},
        "includeCatalog": {"type": "boolean", "description": "add the commands this script may call"}
    });
    let with = |extra: Value| {
        let mut props = read.clone();
        if let (Value::Object(p), Value::Object(e)) = (&mut props, extra) {
            p.extend(e);
        }
        props
    };
    let python_path = text(4096, "Python executable (python scripts only)");
    vec![
        ("start", "Start a script (returns at once with its first status)", json!({
            "script": script_object(catalog),
            "operationId": id,
            "recordingDir": text(4096, "new directory for recorded call payloads (parent must exist)"),
            "pythonPath": python_path.clone()
        }), vec!["script"]),
        ("status", "State, one page of events and one page of the execution ledger (history)", read.clone(), vec!["operationId"]),
        ("wait", "Like status, but returns once an event newer than afterSequence exists or the script ended (or waitMs passed)", with(json!({
            "waitMs": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "Upper bound of one wait call in milliseconds (default 30000). To keep waiting, call wait again with afterSequence = the last eventSequence."}
        })), vec!["operationId"]),
        ("result", "The persisted return value of a completed script", json!({"operationId": id}), vec!["operationId"]),
        ("pause", "Pause at the next call or control point (after an in-flight mutation)", read.clone(), vec!["operationId"]),
        ("resume", "Resume a paused script, or re-run a lost checkpoint-policy script from its last checkpoint (optionally with the same script and pythonPath)", with(json!({
            "script": script_object(catalog),
            "pythonPath": python_path
        })), vec!["operationId"]),
        ("decide", "Answer the pending ctx.askAgent question", with(json!({
            "questionId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "pendingQuestion.questionId to answer. `requestId` is also accepted, but it is the host's idempotency key too: a rejected decide then blocks that id for a different answer"},
            "revision": {"type": "integer", "minimum": 0, "maximum": 9007199254740991u64, "description": "the pending question's revision"},
            "decision": {"description": "JSON answer to the pending ctx.askAgent question; any JSON value including null and false"}
        })), vec!["operationId", "revision", "decision"]),
        ("cancel", "Cancel: stop the child, wait for pending calls, persist the terminal checkpoint", read, vec!["operationId"]),
        ("runtime-status", "The JavaScript and Python runtimes and the operation registry", json!({}), vec![]),
    ]
}

/// The `script` command spec.
pub fn spec(catalog: &EngineCatalog) -> CommandSpec {
    let mut schema = tagged_operation_list(
        "start a script; status/wait read its state, events and history; result reads the persisted return value; pause/resume/cancel control it; decide answers ctx.askAgent; runtime-status lists the script runtimes",
        &operations(catalog),
        &[],
    );
    // pythonPath belongs to python scripts only (contract: rejected at validation).
    for branch in schema["oneOf"].as_array_mut().into_iter().flatten() {
        if branch.pointer("/properties/pythonPath").is_none() {
            branch["if"] = json!({"required": ["script"], "properties": {"script": {"required": ["language"], "properties": {"language": {"const": "javascript"}}}}});
            branch["then"] = json!({"properties": {"pythonPath": false}});
        }
    }
    CommandSpec::conditional(crate::builtins::SCRIPT, ["start", "pause", "resume", "decide", "cancel"])
        .summary("Run a JavaScript or Python program against a target with ctx.call, assertions, progress, checkpoints and agent questions; status, wait, pause, resume, decide, cancel and read its persisted result")
        .platform("multi")
        .domain("execution")
        .role("execution")
        .target_kind("platform-target")
        .timeouts(90_000, 600_000)
        .input_schema(schema)
}
