//! The one command registry: host built-ins merged with plugin manifests. It feeds
//! CLI `--help`, MCP `capabilities`, the Script catalog and argument validation.
//! (API stub — to be completed by the registry work.)

pub mod discovery;
pub mod extract;
pub mod request;
pub mod validate;

use std::path::{Path, PathBuf};

use aab_plugin_api::{CommandSpec, Manifest};
use serde_json::Value;

use crate::error::CommandError;

/// Where a command is executed.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandOrigin {
    Host,
    Plugin { name: String, file: PathBuf },
}

/// A command as registered: the advertised spec plus the full input schema (the
/// spec's schema with the host's execution options injected).
#[derive(Debug)]
pub struct RegisteredCommand {
    pub spec: CommandSpec,
    pub origin: CommandOrigin,
    pub input_schema: Value,
}

#[derive(Debug, Default)]
pub struct Registry {}

impl Registry {
    pub fn new(_builtins: Vec<CommandSpec>) -> Registry {
        Registry {}
    }

    /// Register all commands of one plugin, or none of them.
    pub fn add_plugin(&mut self, _name: &str, _file: &Path, _manifest: &Manifest) -> Result<usize, CommandError> {
        Ok(0)
    }

    pub fn get(&self, _command: &str) -> Option<&RegisteredCommand> {
        None
    }

    pub fn iter(&self) -> impl Iterator<Item = &RegisteredCommand> {
        std::iter::empty()
    }

    /// `unknown_command`, then schema validation with the contract's codes.
    pub fn validate(&self, command: &str, _arguments: &Value) -> Result<&RegisteredCommand, CommandError> {
        Err(CommandError::new("unknown_command", format!("unknown command `{command}`")).with_field("command"))
    }
}
