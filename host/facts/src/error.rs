//! The crate's single error type. Every failure carries a stable snake_case code
//! (the contract's error vocabulary, so the host can put it straight into the
//! public envelope), a human message and optional structured details.

use serde_json::Value;

/// A FactStore, evidence or archive failure.
///
/// `code` is part of the public contract and never changes meaning; `message`
/// is for people and may change; `details` carries machine-readable context
/// (the offending field, sequence, file …).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct FactError {
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl FactError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        FactError { code, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// An argument rejection naming the offending field (`details.field`).
    pub(crate) fn invalid_argument(field: &str, message: impl Into<String>) -> Self {
        FactError::new("invalid_argument", message).with_details(serde_json::json!({ "field": field }))
    }

    /// A SQLite failure while using the store. Corruption is reported as
    /// `fact_store_corrupt` so it can never be mistaken for an empty history.
    pub(crate) fn sqlite(context: &str, err: rusqlite::Error) -> Self {
        let code = match sqlite_code(&err) {
            Some(rusqlite::ErrorCode::DatabaseCorrupt) | Some(rusqlite::ErrorCode::NotADatabase) => "fact_store_corrupt",
            _ => "fact_store_unavailable",
        };
        FactError::new(code, format!("{context}: {err}"))
    }

    pub(crate) fn io(code: &'static str, context: &str, err: std::io::Error) -> Self {
        FactError::new(code, format!("{context}: {err}"))
    }
}

pub(crate) fn sqlite_code(err: &rusqlite::Error) -> Option<rusqlite::ErrorCode> {
    match err {
        rusqlite::Error::SqliteFailure(e, _) => Some(e.code),
        _ => None,
    }
}
