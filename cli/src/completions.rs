//! `aab completions bash|zsh|fish|powershell`: shell completion scripts generated
//! by `clap_complete` from a clap command tree built out of the registry, so every
//! registry command completes with its own flags (kebab-case, as the CLI takes
//! them) and the values of its enums (e.g. `--operation`). The tree only describes
//! the CLI for completion; parsing stays in [`crate::argv`], which owns the
//! contract's argv rules and error codes.

use std::collections::BTreeMap;

use aab_host::registry::Registry;
use clap::{Arg, ArgAction, Command};
use clap_complete::Shell;
use serde_json::Value;

pub const SHELLS: [&str; 4] = ["bash", "zsh", "fish", "powershell"];

/// camelCase → kebab-case, the CLI's flag spelling.
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every property of a schema, including those of its top-level `oneOf`/`anyOf`
/// variants (operations), with the union of their enum values.
fn properties(schema: &Value) -> BTreeMap<String, (String, Vec<String>)> {
    let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut add = |s: &Value| {
        for (name, p) in s.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let entry = out.entry(name.clone()).or_insert_with(|| (p.get("description").and_then(Value::as_str).unwrap_or_default().to_string(), Vec::new()));
            let values = p.get("enum").and_then(Value::as_array).cloned().or_else(|| p.get("const").map(|c| vec![c.clone()])).unwrap_or_default();
            for v in values.iter().filter_map(Value::as_str) {
                if !entry.1.iter().any(|e| e == v) {
                    entry.1.push(v.to_string());
                }
            }
        }
    };
    add(schema);
    for key in ["oneOf", "anyOf", "allOf"] {
        for variant in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            add(variant);
        }
    }
    out
}

/// The clap tree the completion scripts are generated from.
pub fn command_tree(registry: &Registry) -> Command {
    let mut root = Command::new("aab").about("aab: observe and drive Android, iOS and Web apps").disable_help_subcommand(true);
    for command in registry.iter() {
        let name = command.spec.command.clone();
        let mut sub = Command::new(name).about(command.spec.summary.clone());
        for (prop, (help, values)) in properties(&command.input_schema) {
            let flag = kebab(&prop);
            let mut arg = Arg::new(prop).long(flag).action(ArgAction::Set).help(help.chars().take(120).collect::<String>());
            if !values.is_empty() {
                arg = arg.value_parser(clap::builder::PossibleValuesParser::new(values));
            }
            sub = sub.arg(arg);
        }
        root = root.subcommand(sub);
    }
    let shells = clap::builder::PossibleValuesParser::new(SHELLS);
    root.subcommand(Command::new("completions").about("Print a shell completion script").arg(Arg::new("shell").required(true).value_parser(shells)))
        .subcommand(Command::new("mcp").about("MCP stdio server: tools `capabilities` and `run`"))
        .subcommand(
            Command::new("plugins")
                .about("List, bundle, verify, install or remove plugins")
                .subcommands(["list", "bundle", "verify", "install", "remove"].map(Command::new)),
        )
        .subcommand(Command::new("demo").about("The demos").subcommands(["android", "ios"].map(Command::new)))
}

/// The completion script for `shell` (one of [`SHELLS`]).
pub fn script(registry: &Registry, shell: &str) -> Option<Vec<u8>> {
    let shell: Shell = shell.parse().ok()?;
    let mut tree = command_tree(registry);
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut tree, "aab", &mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_and_operation_values_come_from_the_schema_and_its_variants() {
        let schema = json!({"type": "object", "properties": {"sessionId": {"type": "string"}},
            "oneOf": [{"properties": {"operation": {"const": "open"}, "leaseMs": {"type": "integer"}}}, {"properties": {"operation": {"const": "close"}}}]});
        let p = properties(&schema);
        assert_eq!(p.keys().map(String::as_str).collect::<Vec<_>>(), ["leaseMs", "operation", "sessionId"]);
        assert_eq!(p["operation"].1, ["open", "close"]);
        assert_eq!(kebab("leaseMs"), "lease-ms");
    }
}
