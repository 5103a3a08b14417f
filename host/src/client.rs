//! The runtime client used by both adapters (CLI and MCP). (API stub.)
use std::path::Path;

use serde_json::Value;

use crate::error::CommandError;
use crate::registry::Registry;

/// A public reply ready for an adapter: the compact body and the CLI exit code
/// (0 delivered, 1 validation/execution failure, 2 extraction/delivery failure).
#[derive(Clone, Debug)]
pub struct PublicReply {
    pub body: Value,
    pub exit_code: i32,
}

pub struct Client {
    registry: Registry,
}

impl Client {
    /// Resolve configuration from the environment and build the registry view
    /// (from the manifest cache; plugins are loaded only when a digest changed).
    pub fn from_env() -> Result<Client, CommandError> {
        Ok(Client { registry: Registry::new(Vec::new()) })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// MCP `capabilities` / CLI `--help COMMAND`: never starts the runtime.
    pub fn capabilities(&self, query: &Value) -> Value {
        crate::registry::discovery::capabilities(&self.registry, query)
    }

    /// Execute one public request `{command, arguments, extract, output?}`.
    pub fn run(&mut self, request: &Value, cwd: &Path) -> PublicReply {
        let _ = (request, cwd);
        PublicReply { body: Value::Null, exit_code: 1 }
    }

    /// The reply for a request rejected before it reached the client (argv errors).
    pub fn rejection(command: Option<&str>, error: CommandError) -> PublicReply {
        crate::reply::rejection(command, &error)
    }
}
