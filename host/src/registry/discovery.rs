//! `capabilities` discovery payloads (MCP tool and CLI `--help COMMAND`) and the CLI
//! help text, all generated from the registry so no adapter keeps its own list.
//!
//! Every payload is measured as compact UTF-8 JSON against a byte budget. Over the
//! budget the answer is an error naming a narrower query, never a truncated schema:
//! an agent acting on half a schema would send arguments it cannot see are wrong.

use std::fmt::Write as _;
use std::sync::OnceLock;

use aab_plugin_api::protocol::Mutation;
use jsonschema::Validator;
use serde_json::{Map, Value, json};

use super::schema::{self, Narrowed};
use super::{DOMAINS, RegisteredCommand, Registry, validate};
use crate::error::CommandError;

pub const DEFAULT_OUTPUT_BYTES: usize = 96 * 1024;
/// Version of the per-command detail shape.
pub const CONTRACT_VERSION: &str = "aab.command/v1";
/// The query keys that narrow a discovery payload, in the order they are suggested.
const FILTERS: [&str; 6] = ["domain", "command", "operation", "platform", "provider", "action"];

/// Answer a discovery query within [`DEFAULT_OUTPUT_BYTES`].
pub fn capabilities(registry: &Registry, query: &Value) -> Value {
    capabilities_with_limit(registry, query, DEFAULT_OUTPUT_BYTES)
}

/// Answer a discovery query within `limit_bytes` of compact JSON.
pub fn capabilities_with_limit(registry: &Registry, query: &Value, limit_bytes: usize) -> Value {
    let answer = match answer(registry, query) {
        Ok(answer) => answer,
        Err(error) => return error.to_json(),
    };
    let attempted = compact_len(&answer.payload);
    if attempted <= limit_bytes {
        return answer.payload;
    }
    json!({
        "ok": false,
        "error": "discovery_output_too_large",
        "attemptedBytes": attempted,
        "limitBytes": limit_bytes,
        "message": format!(
            "the discovery payload would be {attempted} bytes, over the {limit_bytes}-byte limit; nothing was truncated. \
             Narrow the query with one of {}, for example {}",
            FILTERS.join(", "),
            answer.example
        ),
        "filters": FILTERS,
        "example": answer.example,
        "dispatched": false,
        "ambiguous": false,
    })
}

/// A successful payload and a narrower query to suggest if it is too large.
struct Answer {
    payload: Value,
    example: Value,
}

fn answer(registry: &Registry, query: &Value) -> Result<Answer, CommandError> {
    let empty = Value::Object(Map::new());
    // MCP clients may send no arguments at all for the default directory.
    let query = if query.is_null() { &empty } else { query };
    if !query.is_object() {
        return Err(CommandError::invalid("query", format!("the capabilities query must be a JSON object, got {}", validate::preview(query))));
    }
    validate::validate_instance(query_validator(), query_schema(), query, "query")?;
    let text = |key: &str| query.get(key).and_then(Value::as_str);

    if let Some(domain) = text("domain")
        && !registry.domains().iter().any(|(d, _)| *d == domain)
    {
        return Err(unknown_domain(registry, domain));
    }
    let command = text("command");
    if command.is_some() && text("domain").is_some() {
        return Err(CommandError::invalid("domain", "`domain` and `command` cannot be combined: a command already belongs to one domain; drop `domain`"));
    }
    if command.is_none()
        && let Some(filter) = ["operation", "platform", "provider", "action"].into_iter().find(|f| query.get(*f).is_some())
    {
        return Err(CommandError::invalid(filter, format!("`{filter}` narrows one command's schema and needs `command` as well")));
    }
    if let Some(filter) = ["platform", "provider", "action"].into_iter().find(|f| query.get(*f).is_some()) {
        let name = command.unwrap_or_default();
        let Some(narrowing) = registry.narrowing(name).filter(|_| registry.get(name).is_some()) else {
            return Err(CommandError::invalid(filter, format!("`{filter}` narrows a command's field schema, and `{name}` declares no such narrowing")));
        };
        if text("operation") != Some(narrowing.operation.as_str()) {
            return Err(CommandError::invalid(
                "operation",
                format!("`{filter}` narrows `{name}` operation `{}`; add `\"operation\":\"{}\"`", narrowing.operation, narrowing.operation),
            )
            .with_details(json!({"allowed": [narrowing.operation]})));
        }
        let mut answer = command_answer(registry, name, Some(&narrowing.operation))?;
        narrow_field(&mut answer.payload, narrowing, [("platform", text("platform")), ("provider", text("provider")), ("action", text("action"))])?;
        answer.example = json!({"command": name, "operation": narrowing.operation, "action": narrowing.variants.first().map(|v| v.action.clone())});
        return Ok(answer);
    }
    let include_options = query.get("includeOptions") == Some(&Value::Bool(true));
    match command {
        Some(name) => command_answer(registry, name, text("operation")),
        None => Ok(directory(registry, text("domain"), include_options)),
    }
}

/// Keep the narrowing variants the filters select (each filter in turn; an
/// unknown value → `invalid_argument` on that filter with `details.allowed`) and
/// splice their schemas in at the narrowing's pointer.
fn narrow_field(payload: &mut Value, narrowing: &super::FieldNarrowing, filters: [(&str, Option<&str>); 3]) -> Result<(), CommandError> {
    let mut kept: Vec<&super::NarrowingVariant> = narrowing.variants.iter().collect();
    let mut selection = Map::new();
    selection.insert("operation".into(), json!(narrowing.operation));
    for (key, wanted) in filters {
        let Some(wanted) = wanted else { continue };
        let mut allowed: Vec<&str> = kept.iter().map(|v| v.selector(key)).collect();
        allowed.sort_unstable();
        allowed.dedup();
        if !allowed.contains(&wanted) {
            let scope = if selection.len() > 1 { format!(" with {}", Value::Object(selection.clone())) } else { String::new() };
            return Err(CommandError::invalid(key, format!("no loaded plugin offers {key} `{wanted}` for `{}` operation `{}`{scope}; allowed: {allowed:?}", narrowing.command, narrowing.operation))
                .with_details(json!({"allowed": allowed})));
        }
        kept.retain(|v| v.selector(key) == wanted);
        selection.insert(key.into(), json!(wanted));
    }
    let schemas: Vec<Value> = kept.iter().map(|v| v.schema.clone()).collect();
    let spliced = if schemas.len() == 1 { schemas[0].clone() } else { json!({"anyOf": schemas}) };
    let mut providers: Vec<&str> = kept.iter().map(|v| v.provider.as_str()).collect();
    providers.sort_unstable();
    providers.dedup();
    let schema = &mut payload["inputSchema"];
    if let Some(slot) = schema.pointer_mut(&narrowing.pointer) {
        *slot = spliced;
    }
    if let (Some(pointer), [only]) = (&narrowing.provider_pointer, providers.as_slice())
        && let Some(slot) = schema.pointer_mut(pointer)
    {
        *slot = json!({"type": "string", "const": only});
    }
    selection.insert("variants".into(), kept.iter().map(|v| json!({"platform": v.platform, "provider": v.provider, "action": v.action})).collect());
    payload["selection"] = Value::Object(selection);
    Ok(())
}

fn unknown_domain(registry: &Registry, domain: &str) -> CommandError {
    let domains: Vec<&str> = registry.domains().into_iter().map(|(d, _)| d).collect();
    let mut message = format!("unknown domain `{domain}`; domains are {}", domains.join(", "));
    // A loaded platform's name is a common mistake: say where its commands are.
    if registry.platforms().contains(domain) {
        let mut spread: Vec<&str> = domains.iter().copied().filter(|d| registry.iter().any(|c| c.spec.platform == domain && c.spec.domain == *d)).collect();
        spread.dedup();
        let _ = write!(message, ". Note: {domain} is a platform, not a domain");
        if !spread.is_empty() {
            let _ = write!(message, " (its commands are in {})", spread.join(", "));
        }
    }
    CommandError::new("unknown_domain", message).with_field("domain").with_details(json!({"allowed": domains}))
}

/// The light directory (or, with `includeOptions`, every entry in full detail).
fn directory(registry: &Registry, only: Option<&str>, include_options: bool) -> Answer {
    let mut domains = Map::new();
    let mut largest: Option<(usize, &str)> = None;
    let all_domains = registry.domains();
    for (domain, _) in all_domains.iter().filter(|(d, _)| only.is_none_or(|o| o == *d)) {
        let entries: Vec<Value> = registry
            .iter()
            .filter(|c| c.spec.domain == *domain)
            .map(|c| {
                let size = compact_len(&c.input_schema);
                if largest.is_none_or(|(s, _)| size > s) {
                    largest = Some((size, &c.spec.command));
                }
                if include_options {
                    let mut full = detail(c, c.input_schema.clone());
                    full.remove("ok");
                    Value::Object(full)
                } else {
                    json!({"command": c.spec.command, "summary": c.spec.summary})
                }
            })
            .collect();
        // The default directory shows only populated domains; an explicit domain
        // query answers even when that domain is empty.
        if !entries.is_empty() || only.is_some() {
            domains.insert(domain.to_string(), Value::Array(entries));
        }
    }
    let command_domains: Map<String, Value> = all_domains.iter().map(|(d, text)| (d.to_string(), json!(text))).collect();
    let payload = json!({
        "ok": true,
        "surface": "compact",
        "supportedTargets": registry.platforms(),
        "commandDomains": command_domains,
        "usage": "Call `run` with {command, arguments, extract}. `capabilities {command}` returns one command's inputSchema; \
                  `{domain}` lists one domain; `{command, operation}` narrows a command with operations to one of them.",
        "domains": domains,
    });
    let example = match largest {
        Some((_, name)) => json!({"command": name}),
        None => json!({"domain": DOMAINS[0].0}),
    };
    Answer { payload, example }
}

fn command_answer(registry: &Registry, name: &str, operation: Option<&str>) -> Result<Answer, CommandError> {
    let Some(command) = registry.get(name) else {
        // `unknown_command`, or why the command may be missing (plugin directory).
        let unknown = registry.unknown_command(name);
        let mut payload = json!({
            "ok": false,
            "command": name,
            "error": unknown.code,
            "message": unknown.message,
            "dispatched": false,
            "ambiguous": false,
        });
        if unknown.code != "unknown_command" {
            payload["field"] = json!(unknown.field);
            payload["details"] = json!(unknown.details);
        }
        return Ok(Answer { payload, example: json!({}) });
    };
    let (schema, selection) = match operation {
        None => (command.input_schema.clone(), None),
        Some(op) => match schema::narrow_to_operation(&command.input_schema, op) {
            Narrowed::Schema(narrowed) => (narrowed, Some(json!({"operation": op}))),
            Narrowed::UnknownOperation(allowed) => {
                let listed = allowed.iter().map(Value::to_string).collect::<Vec<_>>().join(", ");
                return Err(CommandError::invalid("operation", format!("`{name}` has no operation `{op}`; its operations are {listed}"))
                    .with_details(json!({"allowed": allowed})));
            }
            Narrowed::NoOperations => {
                return Err(CommandError::invalid("operation", format!("`{name}` has no operations to select; query `{{\"command\":\"{name}\"}}` without `operation`"))
                    .with_details(json!({"allowed": []})));
            }
        },
    };
    let mut payload = detail(command, schema);
    if let Some(selection) = selection {
        payload.insert("selection".into(), selection);
    }
    // The only narrower query for one command is one of its operations.
    let example = match (operation, command.operations().first()) {
        (None, Some(first)) => json!({"command": name, "operation": first}),
        _ => json!({"command": name}),
    };
    Ok(Answer { payload: Value::Object(payload), example })
}

/// The full discovery shape of one command.
fn detail(command: &RegisteredCommand, input_schema: Value) -> Map<String, Value> {
    let spec = &command.spec;
    let kind = if spec.role == "execution" {
        "operation"
    } else if spec.mutation == Mutation::None {
        "query"
    } else {
        "mutation"
    };
    let value = json!({
        "ok": true,
        "command": spec.command,
        "summary": spec.summary,
        "role": spec.role,
        "platform": spec.platform,
        "targetKind": spec.target_kind,
        "domain": spec.domain,
        "entrypoints": {"mcp": true, "cli": true, "script": spec.script_permission.is_some()},
        "script": spec.script_permission,
        "execution": {
            "kind": kind,
            "mutation": spec.mutation,
            "mutatingOperations": spec.mutating_operations,
            "executionSchemas": spec.execution_schemas,
        },
        "provider": command.origin.provider(),
        "inputSchema": input_schema,
        "contractVersion": CONTRACT_VERSION,
    });
    match value {
        Value::Object(mut map) => {
            // Only commands that have them list their mutating flags.
            if !spec.mutating_flags.is_empty()
                && let Some(Value::Object(execution)) = map.get_mut("execution")
            {
                execution.insert("mutatingFlags".into(), json!(spec.mutating_flags));
            }
            map
        }
        _ => Map::new(),
    }
}

fn compact_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len())
}

/// Plain-text CLI help: usage lines, then every command grouped by domain.
pub fn help_text(registry: &Registry) -> String {
    let mut out = String::new();
    let platforms = registry.platforms();
    if platforms.is_empty() {
        out.push_str("aab — observe and drive apps through provider plugins (CLI and MCP)\n\n");
    } else {
        let _ = write!(out, "aab — observe and drive apps through provider plugins (CLI and MCP); platforms: {}\n\n", platforms.into_iter().collect::<Vec<_>>().join(", "));
    }
    out.push_str("Usage:\n");
    out.push_str("  aab <command> [--kebab-case-flag value ...] --extract null   run a command (flags are its arguments)\n");
    out.push_str("  aab --help COMMAND                                          show a command's JSON input schema\n");
    out.push_str("  aab mcp                                                     serve the MCP tools `capabilities` and `run` on stdio\n");
    out.push_str("  aab plugins list|bundle|verify|install|remove               manage provider plugins\n");
    let width = registry.iter().map(|c| c.spec.command.len()).max().unwrap_or(0);
    for (domain, description) in registry.domains() {
        let commands: Vec<&RegisteredCommand> = registry.iter().filter(|c| c.spec.domain == domain).collect();
        if commands.is_empty() {
            continue;
        }
        let _ = write!(out, "\n{domain} — {description}\n");
        for command in commands {
            let _ = writeln!(out, "  {:width$}  {}", command.spec.command, command.spec.summary);
        }
    }
    if registry.is_empty() {
        out.push_str("\nNo commands are registered: no plugins were found.\n");
    }
    out
}

/// Input schema of the MCP `capabilities` tool, for the built-in domains.
pub fn capabilities_input_schema() -> Value {
    capabilities_input_schema_with(&Registry::default())
}

/// Input schema of the MCP `capabilities` tool: `domain` lists the registry's
/// domains (built-in, then the loaded plugins' private ones).
pub fn capabilities_input_schema_with(registry: &Registry) -> Value {
    let domains: Vec<&str> = registry.domains().into_iter().map(|(d, _)| d).collect();
    let mut schema = query_schema().clone();
    schema["properties"]["domain"]["enum"] = json!(domains);
    schema
}

/// The query schema used for validation. `domain` has no `enum` here so that an
/// unknown domain gets the dedicated `unknown_domain` answer; the advertised schema
/// ([`capabilities_input_schema`]) lists the domains.
fn query_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "domain": {"type": "string", "description": "List the commands of one domain"},
                "command": {"type": "string", "minLength": 1, "description": "Return one command's full contract and inputSchema"},
                "includeOptions": {"type": "boolean", "description": "Expand every directory entry to its full contract (large)"},
                "operation": {"type": "string", "minLength": 1, "description": "With `command`: narrow the schema to one operation"},
                "platform": {"type": "string", "minLength": 1, "description": "With command intent, operation decide: one platform of the loaded Intent providers (an unknown one is answered with the allowed values)"},
                "provider": {"type": "string", "minLength": 1, "description": "With command intent, operation decide: one loaded Intent provider (an unknown one is answered with the allowed values)"},
                "action": {"type": "string", "minLength": 1, "description": "With command intent, operation decide: one action"}
            }
        })
    })
}

fn query_validator() -> &'static Validator {
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    // A constant of this module; a failure is a bug caught by tests.
    VALIDATOR.get_or_init(|| validate::compile(query_schema()).expect("the capabilities query schema compiles"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::{object_schema, spec};
    use std::path::Path;

    fn registry() -> Registry {
        let mut observation = spec(
            "ui-observation",
            "core",
            "android",
            object_schema(
                json!({
                    "operation": {"type": "string", "enum": ["start", "status", "stop"]},
                    "durationMs": {"type": "integer", "minimum": 100, "maximum": 5000},
                    "leaseId": {"type": "string"}
                }),
                &["operation"],
            ),
        );
        observation.input_schema["oneOf"] = json!([
            {"properties": {"operation": {"const": "start"}}, "required": ["durationMs"]},
            {"properties": {"operation": {"const": "status"}}},
            {"properties": {"operation": {"const": "stop"}}, "required": ["leaseId"]}
        ]);
        observation.mutation = Mutation::Conditional;
        observation.mutating_operations = vec!["start".into(), "stop".into()];
        observation.script_permission = Some("capture.read".into());
        let mut runtime = spec("runtime", "execution", "host", object_schema(json!({"operation": {"enum": ["start", "status", "stop"]}}), &["operation"]));
        runtime.role = "execution".into();
        let mut registry = Registry::new(vec![runtime]);
        let mut manifest = aab_plugin_api::Manifest::new("android", "1.0.0");
        manifest.platforms = vec!["android".into()];
        let mut tap = spec("tap", "action", "android", object_schema(json!({"tapX": {"type": "number"}}), &["tapX"]));
        tap.mutation = Mutation::Always;
        manifest.commands = vec![observation, tap, spec("status", "core", "android", object_schema(json!({}), &[]))];
        registry.add_plugin("android", Path::new("/p/libandroid.so"), &manifest).unwrap();
        let mut web = aab_plugin_api::Manifest::new("web", "1.0.0");
        web.platforms = vec!["web".into()];
        web.commands = vec![spec("web-status", "web", "web", object_schema(json!({}), &[]))];
        registry.add_plugin("web", Path::new("/p/libweb.so"), &web).unwrap();
        registry
    }

    fn error_of(query: Value) -> (String, Option<String>) {
        let v = capabilities(&registry(), &query);
        assert_eq!(v["ok"], json!(false), "{v}");
        (v["error"].as_str().unwrap().to_string(), v["field"].as_str().map(str::to_string))
    }

    #[test]
    fn default_directory_is_light() {
        let v = capabilities(&registry(), &json!({}));
        assert_eq!(v["ok"], json!(true));
        assert_eq!(v["surface"], json!("compact"));
        assert_eq!(v["supportedTargets"], json!(["android", "web"]));
        assert_eq!(v["commandDomains"].as_object().unwrap().len(), 11);
        let domains: Vec<&String> = v["domains"].as_object().unwrap().keys().collect();
        assert_eq!(domains, ["execution", "core", "action", "web"], "canonical domain order, populated only");
        assert_eq!(v["domains"]["core"], json!([{"command": "status", "summary": "status summary"}, {"command": "ui-observation", "summary": "ui-observation summary"}]));
        assert!(!v["domains"].to_string().contains("inputSchema"), "entries carry no schema");
        assert_eq!(capabilities(&registry(), &Value::Null), v, "no arguments = default query");
    }

    #[test]
    fn domain_query_and_unknown_domain() {
        let v = capabilities(&registry(), &json!({"domain": "action"}));
        assert_eq!(v["domains"], json!({"action": [{"command": "tap", "summary": "tap summary"}]}));
        let v = capabilities(&registry(), &json!({"domain": "flutter"}));
        assert_eq!(v["domains"], json!({"flutter": []}));
        let v = capabilities(&registry(), &json!({"domain": "android"}));
        assert_eq!((v["error"].as_str(), v["field"].as_str()), (Some("unknown_domain"), Some("domain")));
        let message = v["message"].as_str().unwrap();
        // The note names a loaded platform and where its commands are (from the catalog).
        assert!(message.contains("android is a platform, not a domain (its commands are in core, action)"), "{message}");
        let v = capabilities(&registry(), &json!({"domain": "tv"}));
        assert!(!v["message"].as_str().unwrap().contains("platform"), "tv is not loaded: {v}");
    }

    #[test]
    fn private_domains_are_listed_after_the_builtin_ones() {
        let mut registry = registry();
        let mut acme = aab_plugin_api::Manifest::new("acme", "1.0.0");
        acme.platforms = vec!["acme".into()];
        acme.domains = vec![aab_plugin_api::DomainSpec::new("acme-lab", "Acme lab devices")];
        acme.commands = vec![spec("acme-ping", "acme-lab", "acme", object_schema(json!({}), &[]))];
        registry.add_plugin("acme", Path::new("/p/libacme.so"), &acme).unwrap();
        let v = capabilities(&registry, &json!({}));
        let domains: Vec<&String> = v["domains"].as_object().unwrap().keys().collect();
        assert_eq!(domains, ["execution", "core", "action", "web", "acme-lab"], "private domains after the canonical order");
        assert_eq!(v["commandDomains"]["acme-lab"], json!("Acme lab devices"));
        assert_eq!(v["commandDomains"].as_object().unwrap().keys().next_back().map(String::as_str), Some("acme-lab"));
        let v = capabilities(&registry, &json!({"domain": "acme-lab"}));
        assert_eq!(v["domains"], json!({"acme-lab": [{"command": "acme-ping", "summary": "acme-ping summary"}]}));
        assert_eq!(capabilities(&registry, &json!({"command": "acme-ping"}))["domain"], json!("acme-lab"));
        let v = capabilities(&registry, &json!({"domain": "acme"}));
        assert_eq!(v["error"], json!("unknown_domain"));
        assert_eq!(v["details"]["allowed"].as_array().unwrap().last(), Some(&json!("acme-lab")));
        let text = help_text(&registry);
        assert!(text.contains("\nacme-lab — Acme lab devices\n  acme-ping"), "{text}");
        assert!(text.find("\nweb — ").unwrap() < text.find("\nacme-lab — ").unwrap());
        let schema = capabilities_input_schema_with(&registry);
        assert_eq!(schema["properties"]["domain"]["enum"].as_array().unwrap().last(), Some(&json!("acme-lab")));
    }

    #[test]
    fn include_options_expands_entries() {
        let v = capabilities(&registry(), &json!({"includeOptions": true}));
        let tap = &v["domains"]["action"][0];
        assert_eq!(tap["command"], json!("tap"));
        assert_eq!(tap["inputSchema"]["properties"]["tapX"], json!({"type": "number"}));
        assert!(tap.get("ok").is_none());
    }

    #[test]
    fn command_detail() {
        let v = capabilities(&registry(), &json!({"command": "ui-observation"}));
        assert_eq!(v["ok"], json!(true));
        assert_eq!(v["provider"], json!("android"));
        assert_eq!(v["platform"], json!("android"));
        assert_eq!(v["entrypoints"], json!({"mcp": true, "cli": true, "script": true}));
        assert_eq!(v["script"], json!("capture.read"));
        assert_eq!(v["execution"], json!({"kind": "mutation", "mutation": "conditional", "mutatingOperations": ["start", "stop"], "executionSchemas": []}));
        assert_eq!(v["contractVersion"], json!("aab.command/v1"));
        assert!(v["inputSchema"]["properties"]["requestId"].is_object(), "injected options are advertised");
        let runtime = capabilities(&registry(), &json!({"command": "runtime"}));
        assert_eq!((runtime["provider"].as_str(), runtime["execution"]["kind"].as_str(), runtime["script"].is_null()), (Some("host"), Some("operation"), true));
        assert_eq!(capabilities(&registry(), &json!({"command": "tap"}))["execution"]["kind"], json!("mutation"));
        assert_eq!(capabilities(&registry(), &json!({"command": "status"}))["execution"]["kind"], json!("query"));
    }

    #[test]
    fn unknown_command_detail() {
        let v = capabilities(&registry(), &json!({"command": "swipe"}));
        assert_eq!(
            (&v["ok"], &v["command"], &v["error"], &v["dispatched"], &v["ambiguous"]),
            (&json!(false), &json!("swipe"), &json!("unknown_command"), &json!(false), &json!(false))
        );
    }

    #[test]
    fn operation_filter_narrows() {
        let v = capabilities(&registry(), &json!({"command": "ui-observation", "operation": "stop"}));
        assert_eq!(v["selection"], json!({"operation": "stop"}));
        assert!(v["inputSchema"].get("oneOf").is_none());
        assert_eq!(v["inputSchema"]["required"], json!(["operation", "leaseId"]));
        assert_eq!(v["inputSchema"]["properties"]["operation"], json!({"const": "stop"}));
        let v = capabilities(&registry(), &json!({"command": "ui-observation", "operation": "pause"}));
        assert_eq!((v["error"].as_str(), v["field"].as_str()), (Some("invalid_argument"), Some("operation")));
        assert_eq!(v["details"]["allowed"], json!(["start", "status", "stop"]));
        let v = capabilities(&registry(), &json!({"command": "tap", "operation": "start"}));
        assert_eq!(v["field"], json!("operation"));
        let v = capabilities(&registry(), &json!({"command": "runtime", "operation": "stop"}));
        assert_eq!(v["inputSchema"]["properties"]["operation"], json!({"const": "stop"}));
    }

    #[test]
    fn invalid_queries() {
        assert_eq!(error_of(json!({"operation": "start"})), ("invalid_argument".into(), Some("operation".into())));
        assert_eq!(error_of(json!({"platform": "ios"})), ("invalid_argument".into(), Some("platform".into())));
        assert_eq!(error_of(json!({"command": "tap", "provider": "uia"})), ("invalid_argument".into(), Some("provider".into())));
        assert_eq!(error_of(json!({"command": "intent", "operation": "decide", "action": "tap"})), ("invalid_argument".into(), Some("action".into())));
        assert_eq!(error_of(json!({"command": "tap", "domain": "action"})), ("invalid_argument".into(), Some("domain".into())));
        assert_eq!(error_of(json!({"commands": "tap"})), ("unsupported_argument".into(), Some("commands".into())));
        assert_eq!(error_of(json!({"includeOptions": "yes"})), ("invalid_argument".into(), Some("includeOptions".into())));
        assert_eq!(error_of(json!({"command": 5})), ("invalid_argument".into(), Some("command".into())));
        assert_eq!(error_of(json!({"command": "tap", "platform": "android2"})), ("invalid_argument".into(), Some("platform".into())));
        assert_eq!(error_of(json!(["tap"])), ("invalid_argument".into(), Some("query".into())));
        let v = capabilities(&registry(), &json!({"platform": "ios"}));
        assert_eq!(v["dispatched"], json!(false));
    }

    #[test]
    fn budget_is_enforced_without_truncation() {
        let registry = registry();
        let full = capabilities(&registry, &json!({"command": "ui-observation"}));
        let size = serde_json::to_vec(&full).unwrap().len();
        assert_eq!(capabilities_with_limit(&registry, &json!({"command": "ui-observation"}), size), full, "exactly at the limit fits");
        let v = capabilities_with_limit(&registry, &json!({"command": "ui-observation"}), size - 1);
        assert_eq!(v["error"], json!("discovery_output_too_large"));
        assert_eq!((v["attemptedBytes"].as_u64(), v["limitBytes"].as_u64()), (Some(size as u64), Some(size as u64 - 1)));
        assert_eq!(v["example"], json!({"command": "ui-observation", "operation": "start"}));

        let v = capabilities_with_limit(&registry, &json!({"includeOptions": true}), 200);
        assert_eq!(v["ok"], json!(false));
        assert_eq!(v["error"], json!("discovery_output_too_large"));
        assert!(v["attemptedBytes"].as_u64().unwrap() > 200);
        assert_eq!(v["limitBytes"], json!(200));
        assert_eq!(v["filters"], json!(["domain", "command", "operation", "platform", "provider", "action"]));
        assert_eq!(v["example"], json!({"command": "ui-observation"}), "the largest command");
        assert_eq!((&v["dispatched"], &v["ambiguous"]), (&json!(false), &json!(false)));
        assert!(!v.to_string().contains("inputSchema"));
        assert!(v["message"].as_str().unwrap().contains("200-byte limit"));
    }

    #[test]
    fn help_text_lists_commands_by_domain() {
        let text = help_text(&registry());
        for needle in ["aab --help COMMAND", "aab mcp", "aab plugins list|bundle|verify|install|remove", "--kebab-case-flag", "\naction — ", "  tap ", "tap summary"] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert!(text.find("\nexecution — ").unwrap() < text.find("\ncore — ").unwrap());
        assert!(!text.contains("\nflutter — "), "empty domains are omitted");
        assert!(text.starts_with("aab — observe and drive apps through provider plugins (CLI and MCP); platforms: android, web\n"), "{text}");
        assert!(help_text(&Registry::new(Vec::new())).starts_with("aab — observe and drive apps through provider plugins (CLI and MCP)\n\n"));
    }

    #[test]
    fn advertised_schema_lists_domains() {
        let schema = capabilities_input_schema();
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["domain"]["enum"].as_array().unwrap().len(), 11);
        assert_eq!(schema["properties"]["includeOptions"]["type"], json!("boolean"));
        // Platform and provider names come from the catalog, not from this constant
        // schema: unknown values are answered by the narrowing with `allowed`.
        for key in ["platform", "provider"] {
            assert_eq!((schema["properties"][key]["type"].as_str(), schema["properties"][key].get("enum")), (Some("string"), None), "{key}");
        }
    }
}
