//! The client's failure taxonomy. The split that matters to callers is
//! whether the remote end may have acted: `NotSent` means it cannot have,
//! `Lost` means it may have (ambiguous, never to be retried blindly), and the
//! others are complete replies that say what happened.

/// Why a WebDriver call did not yield a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WdError {
    /// The endpoint URL was refused before any I/O.
    #[error("invalid WebDriver endpoint {0}")]
    InvalidEndpoint(String),
    /// Nothing reached the remote end (connection refused, DNS failure, no
    /// budget left): safe, nothing happened.
    #[error("WebDriver request not sent: {message}")]
    NotSent { message: String },
    /// The request was (or may have been) written, then no complete reply came
    /// (reset, timeout, truncated body): the remote end may have acted.
    #[error("WebDriver reply lost after the request may have been sent: {message}")]
    Lost { message: String },
    /// A W3C error reply `{"value":{"error","message"}}`; `error` is the W3C
    /// code, e.g. "no such element", "invalid session id".
    #[error("WebDriver error {error:?} (HTTP {status}): {message}")]
    Protocol {
        status: u16,
        error: String,
        message: String,
    },
    /// The reply body outgrew the cap; reading stopped there.
    #[error("WebDriver reply larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// A complete reply that is not the WebDriver JSON shape expected.
    #[error("WebDriver reply is not the expected JSON (HTTP {status}): {message}")]
    NotJson { status: u16, message: String },
}

impl WdError {
    /// A stable snake_case code for the contract's error envelope.
    pub fn code(&self) -> &'static str {
        match self {
            WdError::InvalidEndpoint(_) => "webdriver_invalid_endpoint",
            WdError::NotSent { .. } => "webdriver_not_sent",
            WdError::Lost { .. } => "webdriver_response_lost",
            WdError::Protocol { .. } => "webdriver_protocol_error",
            WdError::TooLarge { .. } => "webdriver_response_too_large",
            WdError::NotJson { .. } => "webdriver_response_not_json",
        }
    }

    /// Whether the remote end may have carried the command out without us
    /// learning so. Only a lost reply is ambiguous: every other variant either
    /// never left this process or is a reply the remote end finished.
    pub fn ambiguous(&self) -> bool {
        matches!(self, WdError::Lost { .. })
    }

    /// The W3C error code of a protocol error (e.g. "no such element").
    pub fn w3c_error(&self) -> Option<&str> {
        match self {
            WdError::Protocol { error, .. } => Some(error),
            _ => None,
        }
    }
}
