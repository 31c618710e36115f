//! The one error type every host operation returns, shaped like the contract's error body.
//!
//! Each error carries the HTTP status class, a stable snake_case code and a sentence for
//! a human; the API layer only serialises it. Messages never contain secrets.

use serde_json::Value;

/// The status class of an error (the HTTP status the API answers with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Unauthenticated,
    Forbidden,
    NotFound,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unprocessable,
    Internal,
    BadGateway,
    Unavailable,
    GatewayTimeout,
}

impl ErrorKind {
    /// The HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Unauthenticated => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::Unprocessable => 422,
            ErrorKind::Internal => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::Unavailable => 503,
            ErrorKind::GatewayTimeout => 504,
        }
    }
}

/// A failed host operation.
#[derive(Debug, Clone, PartialEq)]
pub struct HostError {
    pub kind: ErrorKind,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {}

impl HostError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, "not_found", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, "internal", message)
    }
}

impl From<crate::store::StoreError> for HostError {
    fn from(err: crate::store::StoreError) -> Self {
        match err {
            crate::store::StoreError::Unavailable(_) => HostError::new(
                ErrorKind::Unavailable,
                "store_unavailable",
                format!("{err}; retry shortly"),
            ),
            crate::store::StoreError::Conflict(_) => HostError::new(
                ErrorKind::Conflict,
                "state_changed",
                format!("{err}; nothing was changed: retry the request"),
            ),
            other => HostError::internal(other.to_string()),
        }
    }
}

pub type HostResult<T> = Result<T, HostError>;
