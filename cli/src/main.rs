//! The `aab` binary: the CLI adapter. It routes the invocation [`argv`] parsed to
//! the runtime client, the plugin reports, the MCP adapter ([`mcp`]) or the hidden
//! runtime daemon, prints exactly one compact JSON line per command (help text
//! for `aab help`) and exits with the reply's code: 0 delivered, 1 validation or
//! execution failure, 2 extraction or delivery failure.

// `CommandError` (the contract envelope) is large, and every argv path returns it
// at most once per process: boxing it would only add noise.
#![allow(clippy::result_large_err)]

mod argv;
mod completions;
mod demo;
mod demo_android;
mod demo_ios;
mod demo_sim;
mod mcp;
mod mcp_wire;

use std::io::{self, Write};

use aab_host::CommandError;
use aab_host::client::{Client, PublicReply};
use aab_host::registry::discovery;
use serde_json::Value;

use crate::argv::{Invocation, Rejection};

fn main() {
    // `args_os`: `std::env::args` panics on an argument that is not UTF-8.
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Hidden: the child process that serves one isolated plugin for the runtime
    // (`aab plugin-host <private copy> <sha256>`); it speaks frames, not replies.
    if args.len() == 3 && args[0] == "plugin-host" {
        std::process::exit(aab_host::plugins::isolation::serve_child(std::path::Path::new(&args[1]), &args[2].to_string_lossy()));
    }
    let code = match try_main(&args) {
        Ok(code) => code,
        Err(rejection) => emit_reply(Client::rejection(rejection.command.as_deref(), rejection.error)),
    };
    std::process::exit(code);
}

fn try_main(args: &[std::ffi::OsString]) -> Result<i32, Rejection> {
    let invocation = argv::parse_os(args)?;
    match invocation {
        Invocation::Version => Ok(print_text(&format!("aab {}\n", env!("CARGO_PKG_VERSION")))),
        Invocation::Help => {
            let client = client(None)?;
            Ok(print_text(&discovery::help_text(client.registry())))
        }
        Invocation::McpUsage => Ok(print_text(mcp::USAGE)),
        Invocation::Completions { shell } => {
            let client = client(Some("completions"))?;
            let script = completions::script(client.registry(), &shell).unwrap_or_default();
            let mut stdout = io::stdout().lock();
            let _ = stdout.write_all(&script);
            let _ = stdout.flush();
            Ok(0)
        }
        Invocation::Mcp => Ok(mcp::serve(Client::from_env())),
        Invocation::RuntimeDaemon => Ok(aab_host::runtime::run_daemon()),
        Invocation::Demo { browser } => Ok(demo::run(browser.as_deref())),
        Invocation::DemoUsage => Ok(print_text(demo::USAGE)),
        Invocation::DemoAndroid { record } => Ok(demo_android::run(record.as_deref())),
        Invocation::DemoAndroidUsage => Ok(print_text(demo_android::USAGE)),
        Invocation::DemoIos => Ok(demo_ios::run()),
        Invocation::DemoIosUsage => Ok(print_text(demo_ios::USAGE)),
        Invocation::PluginsList => Ok(emit_reply(aab_host::plugins::list_report())),
        Invocation::PluginsBundle(options) => Ok(emit_reply(aab_host::plugins::bundle_report(&options))),
        Invocation::PluginsVerify { dir } => Ok(emit_reply(aab_host::plugins::verify_report(&dir))),
        Invocation::PluginsInstall { bundle } => Ok(emit_reply(aab_host::plugins::install_report(&bundle))),
        Invocation::PluginsRemove { name } => Ok(emit_reply(aab_host::plugins::remove_report(&name))),
        Invocation::CommandHelp { command, query } => {
            let client = client(Some(&command))?;
            let payload = client.capabilities(&query);
            emit(&payload);
            Ok(if payload.get("ok") == Some(&Value::Bool(false)) { 1 } else { 0 })
        }
        Invocation::Command(arguments) => {
            let command = arguments.command().to_string();
            let client = client(Some(&command))?;
            let cwd = std::env::current_dir().map_err(|error| Rejection {
                command: Some(command.clone()),
                error: CommandError::new("invalid_request_directory", format!("cannot read the working directory: {error}")),
            })?;
            let schema = client.registry().get(&command).map(|c| &c.input_schema);
            let request = arguments.into_request(schema)?;
            let code = emit_reply(client.run(&request, &cwd));
            // The process exits right after this: freeing the catalog (thousands of
            // small schema values) would cost more CPU than the runtime's whole reply,
            // and the kernel closes the client's sockets and files anyway.
            std::mem::forget(client);
            Ok(code)
        }
    }
}

fn client(command: Option<&str>) -> Result<Client, Rejection> {
    Client::from_env().map_err(|error| Rejection { command: command.map(str::to_string), error })
}

/// Prints the reply body as one line and returns its exit code.
fn emit_reply(reply: PublicReply) -> i32 {
    emit(&reply.body);
    reply.exit_code
}

fn emit(body: &Value) {
    print_text(&format!("{body}\n"));
}

/// Writes to stdout, ignoring a closed pipe (`aab ... | head` must not panic).
fn print_text(text: &str) -> i32 {
    let mut stdout = io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
    let _ = stdout.flush();
    0
}
