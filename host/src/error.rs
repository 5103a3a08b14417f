//! The contract's error envelope (`ok:false`, stable `error` code, `message`,
//! `field`, `details`, `dispatched`, `ambiguous`). Every failure leaving the host is
//! one of these; an unknown outcome is never reported as success or as failure.

use serde_json::{Map, Value};

/// A command failure with its dispatch facts.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandError {
    pub code: String,
    pub message: String,
    pub field: Option<String>,
    pub details: Option<Value>,
    /// `Some(false)` = certainly not dispatched, `Some(true)` = dispatched,
    /// `None` = unknown.
    pub dispatched: Option<bool>,
    pub ambiguous: bool,
}

impl CommandError {
    /// A rejection before anything was dispatched (`dispatched:false, ambiguous:false`).
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        CommandError { code: code.into(), message: message.into(), field: None, details: None, dispatched: Some(false), ambiguous: false }
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message).with_field(field)
    }

    pub fn missing(field: impl Into<String>) -> Self {
        let field = field.into();
        Self::new("missing_argument", format!("missing required argument `{field}`")).with_field(field)
    }

    pub fn unsupported(field: impl Into<String>) -> Self {
        let field = field.into();
        Self::new("unsupported_argument", format!("unsupported argument `{field}`")).with_field(field)
    }

    /// A failure whose outcome is unknown: maybe dispatched, ambiguous.
    pub fn ambiguous(code: impl Into<String>, message: impl Into<String>) -> Self {
        CommandError { dispatched: None, ambiguous: true, ..Self::new(code, message) }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The envelope as JSON (without `command`; the reply adds it).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("ok".into(), Value::Bool(false));
        m.insert("error".into(), Value::String(self.code.clone()));
        m.insert("message".into(), Value::String(self.message.clone()));
        if let Some(f) = &self.field {
            m.insert("field".into(), Value::String(f.clone()));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("dispatched".into(), self.dispatched.map(Value::Bool).unwrap_or(Value::Null));
        m.insert("ambiguous".into(), Value::Bool(self.ambiguous));
        Value::Object(m)
    }

    /// Parse an envelope back (used by the runtime client for daemon replies).
    pub fn from_json(v: &Value) -> Option<Self> {
        let code = v.get("error")?.as_str()?.to_string();
        Some(CommandError {
            code,
            message: v.get("message").and_then(|m| m.as_str()).unwrap_or("").to_string(),
            field: v.get("field").and_then(|m| m.as_str()).map(str::to_string),
            details: v.get("details").cloned(),
            dispatched: v.get("dispatched").and_then(|d| d.as_bool()),
            ambiguous: v.get("ambiguous").and_then(|d| d.as_bool()).unwrap_or(false),
        })
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for CommandError {}

/// Shorthand used across the host.
pub type CommandResult<T> = Result<T, CommandError>;
