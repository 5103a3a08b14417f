//! Owns the command line: it is the only place that knows argv. It turns the
//! process arguments into an [`Invocation`] (a subcommand handled by the binary,
//! a help query, or a public request for the runtime client) following the CLI
//! rules of the command contract. Rejections carry the contract's error codes;
//! the caller wraps them in the public reply envelope.
//!
//! `argv[i]` in error fields counts the arguments after the program name from 0,
//! so `aab devices --Bad` reports `argv[1]`.
//!
//! The process arguments arrive as `OsString`s ([`parse_os`]): an argument that is
//! not UTF-8 is an `invalid_argument` naming it, never a panic.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;

use aab_host::CommandError;
use serde_json::{Map, Value};

/// Flags that may repeat; every occurrence is collected into an array.
const REPEATABLE: [&str; 2] = ["category", "extra"];

/// The only flags `--help COMMAND` accepts besides `--help` itself.
const HELP_FILTERS: [&str; 4] = ["operation", "platform", "provider", "action"];

/// How deep `$ref`/`oneOf` nesting is followed when typing a flag; deeper schemas
/// fall back to strings and the host validator reports any mismatch.
const MAX_SCHEMA_DEPTH: usize = 16;

/// What the process was asked to do.
#[derive(Debug, PartialEq)]
pub enum Invocation {
    /// `--version`, `-V` or `version` as the sole argument.
    Version,
    /// No arguments, or `help`/`--help` alone: the registry's help text.
    Help,
    /// `aab mcp`: the MCP stdio adapter.
    Mcp,
    /// `aab mcp --help` / `aab mcp -h`.
    McpUsage,
    /// Hidden `aab runtime-daemon`. Its configuration comes from the environment,
    /// so anything after the subcommand is ignored.
    RuntimeDaemon,
    PluginsList,
    PluginsBundle(aab_host::plugins::BundleOptions),
    PluginsVerify { dir: PathBuf },
    PluginsInstall { bundle: PathBuf },
    PluginsRemove { name: String },
    /// `aab demo [--browser PATH]`: the Web demo in headless Chromium.
    Demo { browser: Option<PathBuf> },
    /// `aab demo --help`.
    DemoUsage,
    /// `aab demo android [--record FILE]`: the Android demo on the simulated phone.
    DemoAndroid { record: Option<PathBuf> },
    /// `aab demo android --help`.
    DemoAndroidUsage,
    /// `aab demo ios`: the iOS demo on the simulated iPhone.
    DemoIos,
    /// `aab demo ios --help`.
    DemoIosUsage,
    /// `aab completions SHELL`: a shell completion script on stdout.
    Completions { shell: String },
    /// `--help COMMAND` / `COMMAND --help`: a `capabilities` query.
    CommandHelp { command: String, query: Value },
    /// A registry command; typed with the command's schema by [`CommandArgs::into_request`].
    Command(CommandArgs),
}

/// An argv failure, with the command it concerned (for the reply envelope).
#[derive(Debug, PartialEq)]
pub struct Rejection {
    pub command: Option<String>,
    pub error: CommandError,
}

impl Rejection {
    fn new(command: Option<&str>, error: CommandError) -> Self {
        Rejection { command: command.map(str::to_string), error }
    }
}

/// A registry command after the syntactic pass; its flags are still text.
#[derive(Debug, PartialEq)]
pub struct CommandArgs {
    command: String,
    flags: Vec<Flag>,
    extract: Value,
    output: Option<Value>,
}

/// One `--flag [value]` occurrence.
#[derive(Clone, Debug, PartialEq)]
struct Flag {
    /// camelCase argument name.
    name: String,
    /// The flag as typed (kebab-case), for messages.
    kebab: String,
    /// `None` when the flag was followed by nothing or by another flag.
    value: Option<String>,
}

/// Parse the process arguments after the program name. Every argument must be
/// UTF-8 (flag names, values and paths alike): the first one that is not is an
/// `invalid_argument` whose field is the flag it is the value of, else `argv[i]`.
pub fn parse_os(args: &[OsString]) -> Result<Invocation, Rejection> {
    let lossy: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let Some(bad) = args.iter().position(|a| a.to_str().is_none()) else {
        return parse(&lossy);
    };
    // The syntactic pass over the lossy text only names the command and the flag
    // the bad argument belongs to; nothing of it is executed.
    let scanned = scan(&lossy);
    let command = scanned.command.as_ref().filter(|(_, at)| *at != bad).map(|(name, _)| name.clone());
    let command = match lossy[0].as_str() {
        "mcp" | "plugins" | "demo" | "runtime-daemon" if bad != 0 => Some(lossy[0].clone()),
        _ => command,
    };
    let field = scanned.flags.iter().find(|f| f.value_index == Some(bad)).map_or_else(|| argv_field(bad), |f| f.flag.name.clone());
    let error = CommandError::invalid(
        field,
        format!("argument argv[{bad}] is not valid UTF-8 (read as {}); arguments must be UTF-8 text", Value::String(clip(&lossy[bad], 80))),
    )
    .with_details(serde_json::json!({"argv": bad}));
    Err(Rejection { command, error })
}

fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max_chars).collect();
    out.push('…');
    out
}

/// Parse the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Invocation, Rejection> {
    if args.is_empty() {
        return Ok(Invocation::Help);
    }
    if args.len() == 1 {
        match args[0].as_str() {
            "--version" | "-V" | "version" => return Ok(Invocation::Version),
            "help" | "--help" => return Ok(Invocation::Help),
            _ => {}
        }
    }
    match args[0].as_str() {
        "mcp" => return parse_mcp(args),
        "plugins" => return parse_plugins(args),
        "demo" => return parse_demo(args),
        "completions" => return parse_completions(args),
        "runtime-daemon" => return Ok(Invocation::RuntimeDaemon),
        _ => {}
    }

    let scan = scan(args);
    let command = scan.command.as_ref().map(|(name, _)| name.clone());
    if let Some(error) = scan.error {
        return Err(Rejection::new(command.as_deref(), error));
    }
    if let Some(help) = scan.flags.iter().position(|f| f.flag.name == "help") {
        return command_help(scan.command, scan.flags, help);
    }
    // Flags without a command token: no command is guessed (the contract has no
    // hidden command substitution); the missing piece is named, as MCP `run` does.
    let Some(command) = command else {
        let error = CommandError::new(
            "missing_argument",
            "no command given: flags need a command token, like `aab COMMAND --flag value`; `aab --help` lists the commands",
        )
        .with_field("command");
        return Err(Rejection::new(None, error));
    };
    command_args(command, scan.flags.into_iter().map(|f| f.flag).collect())
}

impl CommandArgs {
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The public request `{command, arguments, extract, output?}`, with flag
    /// values typed by the command's input schema (`None` for an unknown command:
    /// everything stays text and the host reports `unknown_command`).
    pub fn into_request(self, input_schema: Option<&Value>) -> Result<Value, Rejection> {
        let mut arguments = Map::new();
        for flag in &self.flags {
            let property = input_schema.and_then(|root| property_schema(root, &flag.name));
            let converted = if REPEATABLE.contains(&flag.name.as_str()) {
                let items = property.map(|(root, p)| (root, items_schema(root, p)));
                let element = convert(flag, items.and_then(|(root, i)| i.map(|i| kind_of(root, i, 0))))
                    .map_err(|e| Rejection::new(Some(&self.command), e))?;
                match arguments.get_mut(&flag.name) {
                    Some(Value::Array(values)) => {
                        values.push(element);
                        continue;
                    }
                    _ => Value::Array(vec![element]),
                }
            } else {
                convert(flag, property.map(|(root, p)| kind_of(root, p, 0)))
                    .map_err(|e| Rejection::new(Some(&self.command), e))?
            };
            arguments.insert(flag.name.clone(), converted);
        }
        let mut request = Map::new();
        request.insert("command".into(), Value::String(self.command));
        request.insert("arguments".into(), Value::Object(arguments));
        request.insert("extract".into(), self.extract);
        if let Some(output) = self.output {
            request.insert("output".into(), output);
        }
        Ok(Value::Object(request))
    }
}

// ---------------------------------------------------------------------------
// Syntactic pass

struct ScannedFlag {
    flag: Flag,
    /// Index of the flag's value token, if it had one.
    value_index: Option<usize>,
}

struct Scan {
    command: Option<(String, usize)>,
    flags: Vec<ScannedFlag>,
    /// The first error in argv order. Scanning goes on after it only to learn the
    /// command name for the reply envelope.
    error: Option<CommandError>,
}

fn scan(args: &[String]) -> Scan {
    let mut out = Scan { command: None, flags: Vec::new(), error: None };
    let mut seen = HashSet::new();
    let mut i = 0;
    while i < args.len() {
        let token = &args[i];
        let Some(kebab) = token.strip_prefix("--") else {
            if out.command.is_none() {
                out.command = Some((token.clone(), i));
            } else if out.error.is_none() {
                out.error = Some(
                    CommandError::new("unexpected_argument", format!("unexpected positional argument `{token}`"))
                        .with_field(argv_field(i)),
                );
            }
            i += 1;
            continue;
        };
        // A flag consumes the next token as its value unless that is a flag too.
        let value_index = (i + 1 < args.len() && !args[i + 1].starts_with("--")).then_some(i + 1);
        if out.error.is_none() {
            if let Err(error) = check_flag_name(kebab, i) {
                out.error = Some(error);
            } else {
                let name = kebab_to_camel(kebab);
                if !REPEATABLE.contains(&name.as_str()) && !seen.insert(name.clone()) {
                    out.error = Some(
                        CommandError::new("duplicate_argument", format!("`--{kebab}` is given more than once"))
                            .with_field(name.clone()),
                    );
                }
                let value = value_index.map(|v| args[v].clone());
                out.flags.push(ScannedFlag { flag: Flag { name, kebab: kebab.to_string(), value }, value_index });
            }
        }
        i = value_index.map_or(i + 1, |v| v + 1);
    }
    out
}

fn check_flag_name(kebab: &str, index: usize) -> Result<(), CommandError> {
    if kebab.is_empty() {
        return Err(CommandError::invalid(argv_field(index), "a bare `--` is not accepted"));
    }
    if !is_kebab_name(kebab) {
        return Err(CommandError::invalid(
            argv_field(index),
            format!("`--{kebab}` is not a flag: flags are lowercase kebab-case, like `--package-name`"),
        ));
    }
    Ok(())
}

/// `[a-z][a-z0-9]*(-[a-z0-9]+)*`
fn is_kebab_name(name: &str) -> bool {
    let mut segments = name.split('-');
    let first_ok = segments
        .next()
        .is_some_and(|s| s.starts_with(|c: char| c.is_ascii_lowercase()) && s.chars().all(is_lower_alnum));
    first_ok && segments.all(|s| !s.is_empty() && s.chars().all(is_lower_alnum))
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `package-name` → `packageName` (input already checked by [`is_kebab_name`]).
fn kebab_to_camel(kebab: &str) -> String {
    let mut out = String::with_capacity(kebab.len());
    let mut upper = false;
    for c in kebab.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn argv_field(index: usize) -> String {
    format!("argv[{index}]")
}

// ---------------------------------------------------------------------------
// Help and command assembly

fn command_help(
    command: Option<(String, usize)>,
    flags: Vec<ScannedFlag>,
    help: usize,
) -> Result<Invocation, Rejection> {
    let help_flag = &flags[help];
    // `--help X` names the command through the flag's value; `X --help` through the
    // command token. Both at once leaves one of them unexplained: reject the later.
    let help_value = help_flag.flag.value.as_ref().zip(help_flag.value_index);
    let target = match (&command, help_value) {
        (Some((name, at)), Some((value, value_at))) => {
            let (extra, index) = if value_at > *at { (value, value_at) } else { (name, *at) };
            let error = CommandError::new("unexpected_argument", format!("unexpected positional argument `{extra}`"))
                .with_field(argv_field(index));
            return Err(Rejection::new(Some(name), error));
        }
        (Some((name, _)), None) => Some(name.clone()),
        (None, Some((value, _))) => Some(value.clone()),
        (None, None) => None,
    };

    let mut query = Map::new();
    if let Some(target) = &target {
        query.insert("command".into(), Value::String(target.clone()));
    }
    for scanned in flags.iter().filter(|f| f.flag.name != "help") {
        let flag = &scanned.flag;
        if !HELP_FILTERS.contains(&flag.name.as_str()) {
            let error = CommandError::new("unsupported_argument", format!("`--{}` is not accepted with `--help`", flag.kebab))
                .with_field(flag.name.clone());
            return Err(Rejection::new(target.as_deref(), error));
        }
        if target.is_none() {
            let error = CommandError::invalid(flag.name.clone(), format!("`--{}` needs a command: `--help COMMAND --{0} ...`", flag.kebab));
            return Err(Rejection::new(None, error));
        }
        // Filter values go to discovery as given; it validates them like MCP input.
        let value = flag.value.clone().map_or(Value::Bool(true), Value::String);
        query.insert(flag.name.clone(), value);
    }
    match target {
        Some(command) => Ok(Invocation::CommandHelp { command, query: Value::Object(query) }),
        None => Ok(Invocation::Help),
    }
}

fn command_args(command: String, mut flags: Vec<Flag>) -> Result<Invocation, Rejection> {
    // `--extract` and `--output` belong to the request, not the command's arguments.
    let extract = take_json_flag(&mut flags, "extract").map_err(|e| Rejection::new(Some(&command), e))?;
    let output = take_json_flag(&mut flags, "output").map_err(|e| Rejection::new(Some(&command), e))?;
    // People rarely want extraction; MCP callers must still say `extract` explicitly.
    let extract = extract.unwrap_or(Value::Null);
    Ok(Invocation::Command(CommandArgs { command, flags, extract, output }))
}

fn take_json_flag(flags: &mut Vec<Flag>, name: &str) -> Result<Option<Value>, CommandError> {
    let Some(position) = flags.iter().position(|f| f.name == name) else {
        return Ok(None);
    };
    let flag = flags.remove(position);
    let Some(text) = flag.value else {
        return Err(CommandError::new("missing_argument", format!("`--{name}` needs a JSON value (use `null` for none)")).with_field(name));
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| CommandError::invalid(name, format!("`--{name}` is not valid JSON: {e}")))
}

// ---------------------------------------------------------------------------
// Subcommands handled by the binary itself

fn parse_mcp(args: &[String]) -> Result<Invocation, Rejection> {
    match args.get(1).map(String::as_str) {
        None => Ok(Invocation::Mcp),
        Some("--help" | "-h") if args.len() == 2 => Ok(Invocation::McpUsage),
        Some(_) => {
            let index = if matches!(args[1].as_str(), "--help" | "-h") { 2 } else { 1 };
            Err(unexpected("mcp", args, index))
        }
    }
}

fn parse_completions(args: &[String]) -> Result<Invocation, Rejection> {
    let shells = crate::completions::SHELLS;
    match args.get(1) {
        None => Err(Rejection::new(Some("completions"), CommandError::new("missing_argument", format!("`aab completions` needs a shell: {}", shells.join(", "))).with_field("shell"))),
        Some(_) if args.len() > 2 => Err(unexpected("completions", args, 2)),
        Some(shell) if shells.contains(&shell.as_str()) => Ok(Invocation::Completions { shell: shell.clone() }),
        Some(shell) => Err(Rejection::new(
            Some("completions"),
            CommandError::invalid("shell", format!("unknown shell `{shell}`: one of {}", shells.join(", "))).with_details(serde_json::json!({"allowed": shells})),
        )),
    }
}

fn parse_demo(args: &[String]) -> Result<Invocation, Rejection> {
    if args.get(1).map(String::as_str) == Some("android") {
        return parse_demo_android(args);
    }
    if args.get(1).map(String::as_str) == Some("ios") {
        return parse_demo_ios(args);
    }
    match (args.get(1).map(String::as_str), args.get(2)) {
        (None, _) => Ok(Invocation::Demo { browser: None }),
        (Some("--help" | "-h"), None) => Ok(Invocation::DemoUsage),
        (Some("--browser"), Some(path)) if !path.starts_with("--") && args.len() == 3 => Ok(Invocation::Demo { browser: Some(PathBuf::from(path)) }),
        (Some("--browser"), None) => Err(Rejection::new(Some("demo"), CommandError::new("missing_argument", "`--browser` needs a path").with_field("browser"))),
        _ => {
            let index = match args.get(1).map(String::as_str) {
                Some("--browser") if args.get(2).is_some_and(|p| p.starts_with("--")) => 2,
                Some("--browser") => 3,
                Some("--help" | "-h") => 2,
                _ => 1,
            };
            Err(unexpected("demo", args, index.min(args.len() - 1)))
        }
    }
}

/// `demo android`, `demo android --help`, `demo android --record FILE`.
fn parse_demo_android(args: &[String]) -> Result<Invocation, Rejection> {
    match (args.get(2).map(String::as_str), args.get(3)) {
        (None, _) => Ok(Invocation::DemoAndroid { record: None }),
        (Some("--help" | "-h"), None) => Ok(Invocation::DemoAndroidUsage),
        (Some("--record"), Some(path)) if !path.starts_with("--") && args.len() == 4 => Ok(Invocation::DemoAndroid { record: Some(PathBuf::from(path)) }),
        (Some("--record"), None) => Err(Rejection::new(Some("demo"), CommandError::new("missing_argument", "`--record` needs a file path").with_field("record"))),
        _ => {
            let index = match args.get(2).map(String::as_str) {
                Some("--record") if args.get(3).is_some_and(|p| p.starts_with("--")) => 3,
                Some("--record") => 4,
                Some("--help" | "-h") => 3,
                _ => 2,
            };
            Err(unexpected("demo", args, index.min(args.len() - 1)))
        }
    }
}

/// `demo ios`, `demo ios --help`.
fn parse_demo_ios(args: &[String]) -> Result<Invocation, Rejection> {
    match (args.get(2).map(String::as_str), args.len()) {
        (None, _) => Ok(Invocation::DemoIos),
        (Some("--help" | "-h"), 3) => Ok(Invocation::DemoIosUsage),
        (Some("--help" | "-h"), _) => Err(unexpected("demo", args, 3)),
        _ => Err(unexpected("demo", args, 2)),
    }
}

fn parse_plugins(args: &[String]) -> Result<Invocation, Rejection> {
    let reject = |error: CommandError| Rejection::new(Some("plugins"), error);
    // `plugins <operation> <one positional>`, e.g. `verify DIR`, `install DIR`, `remove NAME`.
    let positional = |field: &str| match args.get(2) {
        Some(value) if !value.starts_with("--") => match args.len() {
            3 => Ok(value.clone()),
            _ => Err(unexpected("plugins", args, 3)),
        },
        Some(_) => Err(unexpected("plugins", args, 2)),
        None => Err(reject(CommandError::missing(field))),
    };
    match args.get(1).map(String::as_str) {
        None => Err(reject(
            CommandError::new("missing_argument", "`aab plugins` needs `list`, `bundle --out DIR`, `verify DIR`, `install DIR` or `remove NAME`").with_field(argv_field(1)),
        )),
        Some("list") => match args.len() {
            2 => Ok(Invocation::PluginsList),
            _ => Err(unexpected("plugins", args, 2)),
        },
        Some("bundle") => parse_bundle(args),
        Some("verify") => positional("dir").map(|dir| Invocation::PluginsVerify { dir: PathBuf::from(dir) }),
        Some("install") => positional("bundle").map(|dir| Invocation::PluginsInstall { bundle: PathBuf::from(dir) }),
        Some("remove") => positional("name").map(|name| Invocation::PluginsRemove { name }),
        Some(other) => Err(reject(CommandError::invalid(
            argv_field(1),
            format!("unknown `plugins` operation `{other}`; expected list, bundle, verify, install or remove"),
        ))),
    }
}

/// `plugins bundle --out DIR [--from DIR] [--id ID] [--version V]`, flags in any order, each once.
fn parse_bundle(args: &[String]) -> Result<Invocation, Rejection> {
    let reject = |error: CommandError| Rejection::new(Some("plugins"), error);
    let mut options = aab_host::plugins::BundleOptions::default();
    let (mut out, mut from, mut id, mut version) = (None, None, None, None);
    let mut i = 2;
    while i < args.len() {
        let slot = match args[i].as_str() {
            "--out" => &mut out,
            "--from" => &mut from,
            "--id" => &mut id,
            "--version" => &mut version,
            _ => return Err(unexpected("plugins", args, i)),
        };
        let field = &args[i][2..];
        if slot.is_some() {
            return Err(reject(CommandError::invalid(field, format!("`--{field}` is given more than once"))));
        }
        match args.get(i + 1) {
            Some(value) if !value.starts_with("--") && !value.is_empty() => *slot = Some(value.clone()),
            _ => return Err(reject(CommandError::new("missing_argument", format!("`--{field}` needs a value")).with_field(field))),
        }
        i += 2;
    }
    options.out = PathBuf::from(out.ok_or_else(|| reject(CommandError::missing("out")))?);
    options.from = from.map(PathBuf::from);
    options.id = id;
    options.version = version;
    Ok(Invocation::PluginsBundle(options))
}

fn unexpected(command: &str, args: &[String], index: usize) -> Rejection {
    let error = CommandError::new("unexpected_argument", format!("unexpected argument `{}`", args[index])).with_field(argv_field(index));
    Rejection::new(Some(command), error)
}

// ---------------------------------------------------------------------------
// Typed conversion from the command's input schema

/// How a flag's text becomes JSON.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    String,
    Integer,
    Number,
    Boolean,
    /// Objects, arrays, nullable scalars: the text must be JSON.
    Json,
    /// Unions of strings with other types, or no type at all: JSON when the text
    /// parses as JSON, otherwise the text itself (the host validates the result).
    Flexible,
}

fn convert(flag: &Flag, kind: Option<Kind>) -> Result<Value, CommandError> {
    // A bare flag is `true` whatever the schema says; the validator judges it.
    let Some(text) = &flag.value else {
        return Ok(Value::Bool(true));
    };
    let field = || flag.name.clone();
    match kind.unwrap_or(Kind::String) {
        Kind::String => Ok(Value::String(text.clone())),
        Kind::Integer | Kind::Number => {
            let integer = kind == Some(Kind::Integer);
            if !is_numeric_literal(text, integer) {
                let expected = if integer { "an integer" } else { "a number" };
                return Err(CommandError::invalid(field(), format!("`--{}` expects {expected}, got `{text}`", flag.kebab)));
            }
            check_integer_range(flag, text)?;
            serde_json::from_str(text)
                .map_err(|e| CommandError::invalid(field(), format!("`--{}` is not a usable number: {e}", flag.kebab)))
        }
        Kind::Boolean => match text.as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(CommandError::invalid(field(), format!("`--{}` expects true or false, got `{text}`", flag.kebab))),
        },
        Kind::Json => {
            check_integer_range(flag, text)?;
            serde_json::from_str(text).map_err(|e| CommandError::invalid(field(), format!("`--{}` expects JSON: {e}", flag.kebab)))
        }
        Kind::Flexible => {
            check_integer_range(flag, text)?;
            Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())))
        }
    }
}

/// An integer literal must fit a 64-bit integer: beyond that serde_json would
/// silently turn it into an approximate float (`99999999999999999999999` → 1e23),
/// which a schema's `integer` type still accepts and a reader then cannot use.
fn check_integer_range(flag: &Flag, text: &str) -> Result<(), CommandError> {
    if !is_numeric_literal(text, true) || text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok() {
        return Ok(());
    }
    Err(CommandError::invalid(
        flag.name.clone(),
        format!("`--{}` is out of range: `{}` does not fit a 64-bit integer", flag.kebab, clip(text, 40)),
    )
    .with_details(serde_json::json!({"minimum": i64::MIN, "maximum": u64::MAX})))
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`; with `integer_only`, the
/// fraction and exponent parts are not allowed.
fn is_numeric_literal(text: &str, integer_only: bool) -> bool {
    fn digits(s: &[u8]) -> usize {
        s.iter().take_while(|b| b.is_ascii_digit()).count()
    }
    let s = text.as_bytes();
    let mut i = usize::from(s.first() == Some(&b'-'));
    match s.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i += digits(&s[i..]),
        _ => return false,
    }
    if integer_only {
        return i == s.len();
    }
    if s.get(i) == Some(&b'.') {
        let n = digits(&s[i + 1..]);
        if n == 0 {
            return false;
        }
        i += 1 + n;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(&s[i..]);
        if n == 0 {
            return false;
        }
        i += n;
    }
    i == s.len()
}

/// The schema of property `name`: from the top-level `properties`, else from the
/// first `oneOf`/`anyOf`/`allOf` branch declaring it (operation-specific fields
/// live in branches). Returns the root alongside for `$ref` resolution.
fn property_schema<'a>(root: &'a Value, name: &str) -> Option<(&'a Value, &'a Value)> {
    fn find<'a>(root: &'a Value, schema: &'a Value, name: &str, depth: usize) -> Option<&'a Value> {
        if depth > MAX_SCHEMA_DEPTH {
            return None;
        }
        let schema = resolve(root, schema, depth)?;
        if let Some(found) = schema.get("properties").and_then(|p| p.get(name)) {
            return Some(found);
        }
        ["oneOf", "anyOf", "allOf"]
            .iter()
            .filter_map(|key| schema.get(*key).and_then(Value::as_array))
            .flatten()
            .find_map(|branch| find(root, branch, name, depth + 1))
    }
    find(root, root, name, 0).map(|p| (root, p))
}

fn items_schema<'a>(root: &'a Value, property: &'a Value) -> Option<&'a Value> {
    resolve(root, property, 0)?.get("items")
}

/// Follows local `$ref`s (`#/...`) to the schema they name.
fn resolve<'a>(root: &'a Value, schema: &'a Value, depth: usize) -> Option<&'a Value> {
    let mut current = schema;
    for _ in depth..=MAX_SCHEMA_DEPTH {
        match current.get("$ref").and_then(Value::as_str) {
            Some(reference) => current = root.pointer(reference.strip_prefix('#')?)?,
            None => return Some(current),
        }
    }
    None
}

fn kind_of(root: &Value, schema: &Value, depth: usize) -> Kind {
    let Some(schema) = resolve(root, schema, depth).filter(|_| depth <= MAX_SCHEMA_DEPTH) else {
        return Kind::String;
    };
    match schema.get("type") {
        Some(Value::String(t)) => return kind_of_type(t),
        Some(Value::Array(types)) => {
            let types: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            let non_null: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
            let nullable = non_null.len() < types.len();
            return match non_null.as_slice() {
                [only] if !nullable => kind_of_type(only),
                // A nullable string keeps text as text; `null` is not expressible.
                ["string"] => Kind::String,
                // A nullable non-string: `null` and the value are both JSON literals.
                [_] => Kind::Json,
                many if many.contains(&"string") => Kind::Flexible,
                _ => Kind::Json,
            };
        }
        _ => {}
    }
    let literals = schema.get("enum").and_then(Value::as_array).map(|v| v.iter().collect::<Vec<_>>())
        .or_else(|| schema.get("const").map(|c| vec![c]));
    if let Some(literals) = literals {
        return if literals.iter().all(|v| v.is_string()) { Kind::String } else { Kind::Flexible };
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let kinds: Vec<Kind> = branches.iter().map(|b| kind_of(root, b, depth + 1)).collect();
            return match kinds.split_first() {
                Some((first, rest)) if rest.iter().all(|k| k == first) => *first,
                _ if kinds.contains(&Kind::String) => Kind::Flexible,
                _ => Kind::Json,
            };
        }
    }
    if let Some(first) = schema.get("allOf").and_then(Value::as_array).and_then(|a| a.first()) {
        return kind_of(root, first, depth + 1);
    }
    // An unconstrained property accepts any JSON value.
    Kind::Flexible
}

fn kind_of_type(t: &str) -> Kind {
    match t {
        "integer" => Kind::Integer,
        "number" => Kind::Number,
        "boolean" => Kind::Boolean,
        "string" => Kind::String,
        _ => Kind::Json,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn parse_line(line: &str) -> Result<Invocation, Rejection> {
        parse(&args(line))
    }

    fn rejected(line: &str) -> Rejection {
        match parse_line(line) {
            Err(rejection) => rejection,
            Ok(other) => panic!("`{line}` was accepted as {other:?}"),
        }
    }

    fn command(line: &str) -> CommandArgs {
        match parse_line(line) {
            Ok(Invocation::Command(c)) => c,
            other => panic!("`{line}` gave {other:?}"),
        }
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "additionalProperties": false,
            "$defs": { "count": { "type": "integer" } },
            "properties": {
                "serial": { "type": "string" },
                "limit": { "type": "integer" },
                "scale": { "type": "number" },
                "dryRun": { "type": "boolean" },
                "target": { "type": "object" },
                "labels": { "type": "array", "items": { "type": "string" } },
                "maybeCount": { "type": ["integer", "null"] },
                "maybeName": { "type": ["string", "null"] },
                "selector": { "oneOf": [{ "type": "string" }, { "type": "object" }] },
                "mode": { "enum": ["fast", "slow"] },
                "anything": {},
                "refCount": { "$ref": "#/$defs/count" },
                "category": { "type": "array", "items": { "type": "string" } },
                "extra": { "type": "array", "items": { "type": "integer" } }
            },
            "oneOf": [
                { "properties": { "operation": { "const": "start" }, "budget": { "type": "integer" } } }
            ]
        })
    }

    fn request(line: &str) -> Result<Value, Rejection> {
        command(line).into_request(Some(&schema()))
    }

    fn arguments(line: &str) -> Value {
        request(line).unwrap_or_else(|r| panic!("`{line}` rejected: {r:?}"))["arguments"].clone()
    }

    fn request_error(line: &str) -> CommandError {
        match request(line) {
            Err(r) => r.error,
            Ok(v) => panic!("`{line}` converted to {v}"),
        }
    }

    // -- top level ---------------------------------------------------------

    #[test]
    fn no_arguments_and_help_alone_print_help() {
        assert_eq!(parse(&[]), Ok(Invocation::Help));
        assert_eq!(parse_line("help"), Ok(Invocation::Help));
        assert_eq!(parse_line("--help"), Ok(Invocation::Help));
    }

    #[test]
    fn version_only_as_sole_argument() {
        for line in ["--version", "-V", "version"] {
            assert_eq!(parse_line(line), Ok(Invocation::Version), "{line}");
        }
        // Not alone: `version` is an ordinary command token.
        assert_eq!(command("version --serial x").command(), "version");
    }

    #[test]
    fn binary_subcommands() {
        assert_eq!(parse_line("mcp"), Ok(Invocation::Mcp));
        assert_eq!(parse_line("mcp --help"), Ok(Invocation::McpUsage));
        assert_eq!(parse_line("mcp -h"), Ok(Invocation::McpUsage));
        assert_eq!(rejected("mcp extra").error.field.as_deref(), Some("argv[1]"));
        assert_eq!(parse_line("runtime-daemon"), Ok(Invocation::RuntimeDaemon));
        assert_eq!(parse_line("plugins list"), Ok(Invocation::PluginsList));
        let bundle = |out: &str| aab_host::plugins::BundleOptions { out: out.into(), ..Default::default() };
        assert_eq!(parse_line("plugins bundle --out dist/x"), Ok(Invocation::PluginsBundle(bundle("dist/x"))));
        let full = aab_host::plugins::BundleOptions { from: Some("target/release".into()), id: Some("acme".into()), version: Some("1.2.0".into()), ..bundle("d") };
        assert_eq!(parse_line("plugins bundle --from target/release --id acme --out d --version 1.2.0"), Ok(Invocation::PluginsBundle(full)));
        assert_eq!(parse_line("plugins verify dist/x"), Ok(Invocation::PluginsVerify { dir: "dist/x".into() }));
        assert_eq!(parse_line("plugins install dist/x"), Ok(Invocation::PluginsInstall { bundle: "dist/x".into() }));
        assert_eq!(parse_line("plugins remove acme"), Ok(Invocation::PluginsRemove { name: "acme".into() }));
    }

    #[test]
    fn plugins_errors() {
        let r = rejected("plugins");
        assert_eq!((r.command.as_deref(), r.error.code.as_str()), (Some("plugins"), "missing_argument"));
        assert_eq!(rejected("plugins frob").error.code, "invalid_argument");
        assert_eq!(rejected("plugins list x").error.field.as_deref(), Some("argv[2]"));
        let r = rejected("plugins bundle");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("missing_argument", Some("out")));
        assert_eq!(rejected("plugins bundle --out").error.field.as_deref(), Some("out"));
        assert_eq!(rejected("plugins bundle --out d more").error.field.as_deref(), Some("argv[4]"));
        assert_eq!(rejected("plugins verify").error.field.as_deref(), Some("dir"));
        assert_eq!(rejected("plugins verify a b").error.code, "unexpected_argument");
        assert_eq!(rejected("plugins install").error.field.as_deref(), Some("bundle"));
        assert_eq!(rejected("plugins remove").error.field.as_deref(), Some("name"));
        assert_eq!(rejected("plugins remove a b").error.field.as_deref(), Some("argv[3]"));
        assert_eq!(rejected("plugins bundle --out a --out b").error.field.as_deref(), Some("out"));
        assert_eq!(rejected("plugins bundle --id x").error.field.as_deref(), Some("out"));
    }

    // -- flag syntax -------------------------------------------------------

    #[test]
    fn kebab_flags_become_camel_case() {
        assert_eq!(kebab_to_camel("package-name"), "packageName");
        assert_eq!(kebab_to_camel("a-b-c"), "aBC");
        assert_eq!(kebab_to_camel("x2-y3"), "x2Y3");
        assert_eq!(kebab_to_camel("serial"), "serial");
        let c = command("launch --package-name com.example --serial s1");
        assert_eq!(c.flags[0].name, "packageName");
        assert_eq!(c.flags[0].value.as_deref(), Some("com.example"));
    }

    #[test]
    fn flag_names_must_match_the_kebab_pattern() {
        for good in ["a", "a1", "package-name", "a-1", "x-y-z"] {
            assert!(is_kebab_name(good), "{good}");
        }
        for bad in ["", "A", "1a", "packageName", "a--b", "a-", "-a", "a_b", "a-B", "a=b", "é"] {
            assert!(!is_kebab_name(bad), "{bad}");
        }
    }

    #[test]
    fn camel_case_flag_is_invalid_with_argv_field() {
        let r = rejected("devices --serial s --packageName x");
        assert_eq!(r.error.code, "invalid_argument");
        assert_eq!(r.error.field.as_deref(), Some("argv[3]"));
        assert_eq!(r.command.as_deref(), Some("devices"));
        assert_eq!(r.error.dispatched, Some(false));
        assert!(!r.error.ambiguous);
    }

    #[test]
    fn bare_double_dash_is_invalid() {
        let r = rejected("devices --");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("invalid_argument", Some("argv[1]")));
        // Also when it would otherwise be a value position.
        let r = rejected("devices --serial -- x");
        assert_eq!(r.error.field.as_deref(), Some("argv[2]"));
    }

    #[test]
    fn first_positional_is_the_command_and_more_are_unexpected() {
        assert_eq!(command("tap-text --serial s").command(), "tap-text");
        // The command may follow flags.
        let c = command("--serial s tap-text");
        assert_eq!(c.command(), "tap-text");
        assert_eq!(c.flags.len(), 1);
        let r = rejected("tap-text --serial s stray");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("unexpected_argument", Some("argv[3]")));
        assert_eq!(r.command.as_deref(), Some("tap-text"));
        let r = rejected("a b");
        assert_eq!(r.error.field.as_deref(), Some("argv[1]"));
    }

    #[test]
    fn flag_without_value_is_true() {
        let c = command("tap --dry-run --serial s --force");
        let values: Vec<_> = c.flags.iter().map(|f| (f.name.as_str(), f.value.as_deref())).collect();
        assert_eq!(values, [("dryRun", None), ("serial", Some("s")), ("force", None)]);
        let a = arguments("tap --dry-run --serial s --force");
        assert_eq!(a, json!({ "dryRun": true, "serial": "s", "force": true }));
    }

    #[test]
    fn negative_numbers_are_values_not_flags() {
        assert_eq!(arguments("tap --limit -5"), json!({ "limit": -5 }));
    }

    #[test]
    fn repeated_flags_are_duplicates_except_category_and_extra() {
        let r = rejected("tap --serial a --serial b");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("duplicate_argument", Some("serial")));
        // Field is the camel name even when typed kebab.
        assert_eq!(rejected("tap --package-name a --package-name b").error.field.as_deref(), Some("packageName"));
        // Boolean repeats count too.
        assert_eq!(rejected("tap --force --force").error.code, "duplicate_argument");
        assert_eq!(rejected("tap --extract null --extract null").error.field.as_deref(), Some("extract"));
        assert_eq!(arguments("tap --category a --category b"), json!({ "category": ["a", "b"] }));
        assert_eq!(arguments("tap --extra 1 --extra 2"), json!({ "extra": [1, 2] }));
    }

    #[test]
    fn the_first_error_in_argv_order_wins() {
        let r = rejected("tap --Bad x --serial a --serial b");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("invalid_argument", Some("argv[1]")));
        let r = rejected("tap --serial a --serial b --Bad");
        assert_eq!(r.error.code, "duplicate_argument");
    }

    #[test]
    fn flags_without_a_command_name_the_missing_command() {
        for line in ["--serial s", "--operation status"] {
            let r = rejected(line);
            assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("missing_argument", Some("command")), "{line}");
            assert_eq!(r.command, None);
            assert!(!r.error.message.contains("unknown command"), "{}", r.error.message);
        }
        // A syntax error still wins, without inventing a command for the envelope.
        assert_eq!(rejected("--serial a --serial b").command, None);
    }

    // -- non-UTF-8 arguments -------------------------------------------------

    fn os_args(parts: &[&[u8]]) -> Vec<OsString> {
        use std::os::unix::ffi::OsStringExt;
        parts.iter().map(|p| OsString::from_vec(p.to_vec())).collect()
    }

    fn rejected_os(parts: &[&[u8]]) -> Rejection {
        match parse_os(&os_args(parts)) {
            Err(r) => r,
            Ok(other) => panic!("{parts:?} was accepted as {other:?}"),
        }
    }

    #[test]
    fn non_utf8_arguments_are_invalid_and_named() {
        // As a flag value: the flag is the field.
        let r = rejected_os(&[b"runtime", b"--operation", b"\xff"]);
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("invalid_argument", Some("operation")));
        assert_eq!(r.command.as_deref(), Some("runtime"));
        assert_eq!(r.error.dispatched, Some(false));
        // As the command token: no command to name.
        let r = rejected_os(&[b"\xff"]);
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref(), r.command), ("invalid_argument", Some("argv[0]"), None));
        // As a flag name.
        let r = rejected_os(&[b"runtime", b"--op\xfferation", b"status"]);
        assert_eq!((r.error.field.as_deref(), r.command.as_deref()), (Some("argv[1]"), Some("runtime")));
        // In a binary subcommand's path.
        let r = rejected_os(&[b"plugins", b"verify", b"d\xc3"]);
        assert_eq!((r.error.field.as_deref(), r.command.as_deref()), (Some("argv[2]"), Some("plugins")));
        // UTF-8 arguments parse as before.
        assert_eq!(parse_os(&os_args(&[b"--version"])), Ok(Invocation::Version));
    }

    #[test]
    fn integers_beyond_64_bits_are_out_of_range() {
        let e = request_error("tap --limit 99999999999999999999999");
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("limit")));
        assert!(e.message.contains("64-bit"), "{}", e.message);
        assert_eq!(request_error("tap --limit -99999999999999999999").field.as_deref(), Some("limit"));
        // Flexible and JSON kinds too: a bare integer literal is checked.
        assert_eq!(request_error("tap --anything 18446744073709551616").field.as_deref(), Some("anything"));
        assert_eq!(request_error("tap --maybe-count 18446744073709551616").field.as_deref(), Some("maybeCount"));
        // The 64-bit extremes are fine.
        assert_eq!(arguments("tap --limit 18446744073709551615"), json!({ "limit": 18446744073709551615u64 }));
        assert_eq!(arguments("tap --limit -9223372036854775808"), json!({ "limit": i64::MIN }));
        // A number (not integer) field keeps accepting large magnitudes.
        assert_eq!(arguments("tap --scale 1e30"), json!({ "scale": 1e30 }));
    }

    // -- extract and output ------------------------------------------------

    #[test]
    fn extract_defaults_to_null_and_output_is_omitted() {
        let r = request("tap --serial s").unwrap();
        assert_eq!(r, json!({ "command": "tap", "arguments": { "serial": "s" }, "extract": null }));
        assert!(r.get("output").is_none());
    }

    #[test]
    fn extract_and_output_are_json_and_leave_the_arguments() {
        let line = vec![
            "tap".to_string(),
            "--extract".into(),
            r#"{"mode":"regex","pattern":"a+","inputPath":""}"#.into(),
            "--output".into(),
            r#"{"maxBytes":20000}"#.into(),
            "--serial".into(),
            "s".into(),
        ];
        let Ok(Invocation::Command(c)) = parse(&line) else { panic!() };
        let r = c.into_request(Some(&schema())).unwrap();
        assert_eq!(r["extract"], json!({ "mode": "regex", "pattern": "a+", "inputPath": "" }));
        assert_eq!(r["output"], json!({ "maxBytes": 20000 }));
        assert_eq!(r["arguments"], json!({ "serial": "s" }));
        let keys: Vec<_> = r.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["command", "arguments", "extract", "output"]);
    }

    #[test]
    fn extract_null_literal_is_json_null() {
        let c = command("tap --extract null");
        assert_eq!(c.extract, Value::Null);
        // `"null"` is a JSON string, not null.
        let c = parse(&["tap".into(), "--extract".into(), "\"null\"".into()]);
        let Ok(Invocation::Command(c)) = c else { panic!() };
        assert_eq!(c.extract, json!("null"));
    }

    #[test]
    fn extract_or_output_without_value_is_missing() {
        for line in ["tap --extract", "tap --extract --serial s", "tap --output"] {
            let r = rejected(line);
            assert_eq!(r.error.code, "missing_argument", "{line}");
        }
        assert_eq!(rejected("tap --output").error.field.as_deref(), Some("output"));
        assert_eq!(rejected("tap --extract --serial s").error.field.as_deref(), Some("extract"));
    }

    #[test]
    fn extract_or_output_with_bad_json_is_invalid() {
        let r = rejected("tap --extract {mode");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("invalid_argument", Some("extract")));
        assert_eq!(r.command.as_deref(), Some("tap"));
        assert_eq!(rejected("tap --output nope").error.field.as_deref(), Some("output"));
    }

    // -- typed conversion ---------------------------------------------------

    #[test]
    fn strings_stay_text() {
        assert_eq!(arguments("tap --serial 123"), json!({ "serial": "123" }));
        assert_eq!(arguments("tap --serial true"), json!({ "serial": "true" }));
        assert_eq!(arguments("tap --mode fast"), json!({ "mode": "fast" }));
    }

    #[test]
    fn integers_need_an_integer_literal() {
        assert_eq!(arguments("tap --limit 42"), json!({ "limit": 42 }));
        assert_eq!(arguments("tap --limit 0"), json!({ "limit": 0 }));
        for bad in ["1.5", "1e3", "01", "+1", "0x10", "ten", "-", "1_000", "١"] {
            let e = request_error(&format!("tap --limit {bad}"));
            assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("limit")), "{bad}");
        }
    }

    #[test]
    fn numbers_need_a_strict_numeric_literal() {
        assert_eq!(arguments("tap --scale 1.5"), json!({ "scale": 1.5 }));
        assert_eq!(arguments("tap --scale -2e-3"), json!({ "scale": -0.002 }));
        assert_eq!(arguments("tap --scale 7"), json!({ "scale": 7 }));
        for bad in ["1.", ".5", "1e", "1e+", "00.1", "NaN", "Infinity", "1.5x", "--1"] {
            if bad == "--1" {
                // `--1` is a (bad) flag, not a value.
                assert_eq!(rejected("tap --scale --1").error.field.as_deref(), Some("argv[2]"));
                continue;
            }
            let e = request_error(&format!("tap --scale {bad}"));
            assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("scale")), "{bad}");
        }
    }

    #[test]
    fn numeric_literal_matcher() {
        for ok in ["0", "-0", "7", "-12", "3.25", "1e9", "1E+9", "2.5e-10", "-0.0"] {
            assert!(is_numeric_literal(ok, false), "{ok}");
        }
        for ok in ["0", "-0", "123", "-45"] {
            assert!(is_numeric_literal(ok, true), "{ok}");
        }
        for bad in ["", "-", "01", "1.", ".1", "1e", "e1", "1.5.5", " 1", "1 ", "١"] {
            assert!(!is_numeric_literal(bad, false), "{bad}");
        }
        for bad in ["1.0", "1e3", "-", "00"] {
            assert!(!is_numeric_literal(bad, true), "{bad}");
        }
    }

    #[test]
    fn booleans_accept_true_or_false() {
        assert_eq!(arguments("tap --dry-run false"), json!({ "dryRun": false }));
        assert_eq!(arguments("tap --dry-run true"), json!({ "dryRun": true }));
        assert_eq!(arguments("tap --dry-run"), json!({ "dryRun": true }));
        for bad in ["yes", "1", "TRUE", "False"] {
            let e = request_error(&format!("tap --dry-run {bad}"));
            assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("dryRun")), "{bad}");
        }
    }

    #[test]
    fn objects_and_arrays_parse_as_json() {
        let c = parse(&["tap".into(), "--target".into(), r#"{"x":1,"y":[2]}"#.into(), "--labels".into(), r#"["a","b"]"#.into()]);
        let Ok(Invocation::Command(c)) = c else { panic!() };
        let a = c.into_request(Some(&schema())).unwrap()["arguments"].clone();
        assert_eq!(a, json!({ "target": { "x": 1, "y": [2] }, "labels": ["a", "b"] }));
        let e = request_error("tap --target {x:1}");
        assert_eq!((e.code.as_str(), e.field.as_deref()), ("invalid_argument", Some("target")));
        assert_eq!(request_error("tap --labels a,b").field.as_deref(), Some("labels"));
    }

    #[test]
    fn nullable_and_union_types() {
        assert_eq!(arguments("tap --maybe-count 3"), json!({ "maybeCount": 3 }));
        assert_eq!(arguments("tap --maybe-count null"), json!({ "maybeCount": null }));
        assert_eq!(request_error("tap --maybe-count three").field.as_deref(), Some("maybeCount"));
        assert_eq!(arguments("tap --maybe-name null"), json!({ "maybeName": "null" }));
        assert_eq!(arguments("tap --selector Settings"), json!({ "selector": "Settings" }));
        assert_eq!(arguments("tap --selector {\"id\":\"ok\"}"), json!({ "selector": { "id": "ok" } }));
        assert_eq!(arguments("tap --anything 5"), json!({ "anything": 5 }));
        assert_eq!(arguments("tap --anything word"), json!({ "anything": "word" }));
    }

    #[test]
    fn refs_and_branch_properties_are_typed() {
        assert_eq!(arguments("tap --ref-count 9"), json!({ "refCount": 9 }));
        assert_eq!(request_error("tap --ref-count 9.5").field.as_deref(), Some("refCount"));
        // `budget` exists only in a oneOf branch.
        assert_eq!(arguments("tap --operation start --budget 10"), json!({ "operation": "start", "budget": 10 }));
        assert_eq!(request_error("tap --budget lots").field.as_deref(), Some("budget"));
    }

    #[test]
    fn category_and_extra_are_always_arrays() {
        assert_eq!(arguments("tap --category a"), json!({ "category": ["a"] }));
        assert_eq!(arguments("tap --extra 3"), json!({ "extra": [3] }));
        assert_eq!(request_error("tap --extra x").field.as_deref(), Some("extra"));
        // Even without a schema.
        let c = command("tap --category a --category b");
        assert_eq!(c.into_request(None).unwrap()["arguments"], json!({ "category": ["a", "b"] }));
    }

    #[test]
    fn unknown_properties_and_unknown_commands_pass_text() {
        assert_eq!(arguments("tap --not-declared 5"), json!({ "notDeclared": "5" }));
        let c = command("nosuch --limit 5 --flag");
        assert_eq!(c.into_request(None).unwrap()["arguments"], json!({ "limit": "5", "flag": true }));
    }

    // -- help -------------------------------------------------------------

    #[test]
    fn help_before_or_after_the_command() {
        let expected = Invocation::CommandHelp { command: "intent".into(), query: json!({ "command": "intent" }) };
        assert_eq!(parse_line("--help intent"), Ok(expected));
        let expected = Invocation::CommandHelp { command: "intent".into(), query: json!({ "command": "intent" }) };
        assert_eq!(parse_line("intent --help"), Ok(expected));
    }

    #[test]
    fn help_filters_are_passed_to_discovery() {
        let Ok(Invocation::CommandHelp { command, query }) =
            parse_line("--help intent --operation decide --platform android --provider native --action tap")
        else {
            panic!()
        };
        assert_eq!(command, "intent");
        assert_eq!(
            query,
            json!({ "command": "intent", "operation": "decide", "platform": "android", "provider": "native", "action": "tap" })
        );
        let Ok(Invocation::CommandHelp { query, .. }) = parse_line("intent --operation start --help") else { panic!() };
        assert_eq!(query, json!({ "command": "intent", "operation": "start" }));
    }

    #[test]
    fn help_filters_without_a_command_are_invalid() {
        let r = rejected("--help --operation start");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("invalid_argument", Some("operation")));
        assert_eq!(r.command, None);
    }

    #[test]
    fn help_rejects_other_flags_extra_positionals_and_duplicates() {
        let r = rejected("--help intent --serial s");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("unsupported_argument", Some("serial")));
        let r = rejected("intent --help script");
        assert_eq!((r.error.code.as_str(), r.error.field.as_deref()), ("unexpected_argument", Some("argv[2]")));
        let r = rejected("--help intent script");
        assert_eq!(r.error.field.as_deref(), Some("argv[2]"));
        assert_eq!(rejected("--help intent --operation a --operation b").error.code, "duplicate_argument");
    }

    // -- hostile input -------------------------------------------------------

    /// The argv corpus (`tests/corpus/argv`): every case parses without a panic
    /// into one contract rejection (the code is checked end to end, where the
    /// registry's schema is known).
    #[test]
    fn argv_corpus_replays() {
        use std::os::unix::ffi::OsStringExt;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/argv");
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).expect("corpus dir").flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "argv") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("case");
            let args: Vec<OsString> = bytes.split(|b| *b == 0).map(|a| OsString::from_vec(a.to_vec())).collect();
            let outcome = match parse_os(&args) {
                Ok(Invocation::Command(c)) => c.into_request(None).map(|_| ()),
                Ok(_) => Ok(()),
                Err(r) => Err(r),
            };
            if let Err(r) = outcome {
                assert!(!r.error.code.is_empty() && r.error.dispatched == Some(false), "{}: {:?}", path.display(), r);
            }
            replayed += 1;
        }
        assert!(replayed >= 5, "only {replayed} argv corpus cases");
    }

    mod properties {
        use std::os::unix::ffi::OsStringExt;

        use proptest::prelude::*;

        use super::*;

        /// Tokens that reach the parser's branches, and arbitrary bytes.
        fn token() -> impl Strategy<Value = Vec<u8>> {
            let known: Vec<&'static [u8]> = vec![
                b"runtime", b"--operation", b"status", b"--help", b"-h", b"help", b"--version", b"version", b"--extract", b"null",
                b"--output", b"{", b"[1]", b"--", b"-5", b"99999999999999999999999", b"plugins", b"list", b"bundle", b"verify",
                b"--out", b"mcp", b"demo", b"--browser", b"android", b"--record", b"runtime-daemon", b"--category", b"--extra", b"--limit", b"--scale",
                b"--maybe-count", b"--selector", b"--target", b"\xff", b"--\xff", b"\xc3\x28", b"tap", b"--Bad",
            ];
            prop_oneof![
                3 => prop::sample::select(known).prop_map(<[u8]>::to_vec),
                1 => prop::collection::vec(any::<u8>(), 0..12),
                1 => "[a-z0-9-]{0,10}".prop_map(|s| format!("--{s}").into_bytes()),
                1 => "[ -~]{0,12}".prop_map(String::into_bytes),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1024))]

            /// Any argv parses without a panic into an invocation or one contract
            /// rejection; a command's request typing never panics either.
            #[test]
            fn any_argv_gives_an_invocation_or_a_contract_error(tokens in prop::collection::vec(token(), 0..9)) {
                let args: Vec<OsString> = tokens.into_iter().map(OsString::from_vec).collect();
                let rejection = match parse_os(&args) {
                    Ok(Invocation::Command(c)) => c.into_request(Some(&schema())).err(),
                    Ok(_) => None,
                    Err(r) => Some(r),
                };
                if let Some(r) = rejection {
                    prop_assert!(!r.error.code.is_empty());
                    prop_assert!(!r.error.message.is_empty());
                    prop_assert_eq!(r.error.dispatched, Some(false));
                    prop_assert!(!r.error.ambiguous);
                }
            }
        }
    }
}
