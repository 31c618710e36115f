//! The one error type every host operation returns, shaped like the contract's error body.
//!
//! An error is an [`ErrorCode`] (every code the contract knows, listed once, here), a
//! sentence for a human and optional JSON details. What a code means on the wire (an HTTP
//! status, a JSON-RPC error) is decided at those edges (`http::error`, `mcp`), not here.
//! Messages never contain secrets.

use serde_json::Value;

/// Every error code of the contract (`{"error": {"code": ...}}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A malformed request: bad id, bad JSON, unknown field, missing header.
    InvalidRequest,
    /// No valid token (or a webhook without a valid signature, see [`Self::InvalidSignature`]).
    Unauthenticated,
    /// A valid token of another agent.
    Forbidden,
    /// The thing named does not exist.
    NotFound,
    /// A request body over its limit.
    PayloadTooLarge,
    /// A request body that is not JSON where JSON is expected.
    UnsupportedMediaType,
    /// A component that breaks the manifest rules (CONTRACT §1).
    InvalidComponent,
    /// A binding config the connector's schema or its `bind` rejects.
    InvalidConfig,
    /// A binding names a GitHub App installation on a host without a GitHub App.
    GithubAppNotConfigured,
    /// Tool arguments that do not match the tool's input schema.
    InvalidArguments,
    /// A unit parent that would make a cycle.
    Cycle,
    /// Deleting a unit that has child units.
    HasChildren,
    /// Removing a connector that is still bound.
    ConnectorInUse,
    /// A rotation whose new version rejects existing bindings.
    RotationBreaksBindings,
    /// A slug that shares its env spelling or context prefix with an installed one.
    SlugConflict,
    /// A write that raced another replica's: nothing was written.
    StateChanged,
    /// A component without any signature where the operator requires one.
    SignatureRequired,
    /// A component whose signatures verify with none of the trusted keys.
    SignatureInvalid,
    /// A rotation that changes tool definitions pinned by the operator.
    ToolDefinitionsChanged,
    /// An OCI registry could not be reached, refused, or does not have the component.
    RegistryFailed,
    /// The tool exists but is not granted to the caller.
    ToolNotGranted,
    /// No such tool.
    UnknownTool,
    /// The connector reported a failure of the tool.
    ToolFailed,
    /// The guest trapped, ran out of memory or returned something invalid.
    ConnectorTrapped,
    /// The guest ran past its deadline.
    ConnectorTimeout,
    /// A webhook signature is missing, malformed or wrong.
    InvalidSignature,
    /// A retried webhook delivery failed again.
    DeliveryFailed,
    /// An image's tool list could not be fetched or read.
    IntrospectionFailed,
    /// Two connectors wrote the same runtime-context entry, or one wrote outside its own.
    ContextConflict,
    /// A connector's runtime-context export failed.
    ContextFailed,
    /// A connector wrote a runtime-context entry that cannot be used safely (a control
    /// character, a malformed path, a file that is another file's folder).
    ContextInvalid,
    /// The shared database does not answer.
    StoreUnavailable,
    /// The host is at one of its bounds (connections, guest memory, the instance pool)
    /// and the request could not wait longer.
    HostBusy,
    /// The client stopped sending its request.
    RequestTimeout,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// A fault of the host itself.
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order (what a test that must cover each code iterates).
    pub const ALL: [ErrorCode; 36] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::InvalidComponent,
        ErrorCode::InvalidConfig,
        ErrorCode::GithubAppNotConfigured,
        ErrorCode::InvalidArguments,
        ErrorCode::Cycle,
        ErrorCode::HasChildren,
        ErrorCode::ConnectorInUse,
        ErrorCode::RotationBreaksBindings,
        ErrorCode::SlugConflict,
        ErrorCode::StateChanged,
        ErrorCode::SignatureRequired,
        ErrorCode::SignatureInvalid,
        ErrorCode::ToolDefinitionsChanged,
        ErrorCode::RegistryFailed,
        ErrorCode::ToolNotGranted,
        ErrorCode::UnknownTool,
        ErrorCode::ToolFailed,
        ErrorCode::ConnectorTrapped,
        ErrorCode::ConnectorTimeout,
        ErrorCode::InvalidSignature,
        ErrorCode::DeliveryFailed,
        ErrorCode::IntrospectionFailed,
        ErrorCode::ContextConflict,
        ErrorCode::ContextFailed,
        ErrorCode::ContextInvalid,
        ErrorCode::StoreUnavailable,
        ErrorCode::HostBusy,
        ErrorCode::RequestTimeout,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Internal,
    ];

    /// The contract's snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::HostBusy => "host_busy",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::InvalidComponent => "invalid_component",
            ErrorCode::InvalidConfig => "invalid_config",
            ErrorCode::GithubAppNotConfigured => "github_app_not_configured",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::Cycle => "cycle",
            ErrorCode::HasChildren => "has_children",
            ErrorCode::ConnectorInUse => "connector_in_use",
            ErrorCode::RotationBreaksBindings => "rotation_breaks_bindings",
            ErrorCode::SlugConflict => "slug_conflict",
            ErrorCode::StateChanged => "state_changed",
            ErrorCode::SignatureRequired => "signature_required",
            ErrorCode::SignatureInvalid => "signature_invalid",
            ErrorCode::ToolDefinitionsChanged => "tool_definitions_changed",
            ErrorCode::RegistryFailed => "registry_failed",
            ErrorCode::ToolNotGranted => "tool_not_granted",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::ConnectorTrapped => "connector_trapped",
            ErrorCode::ConnectorTimeout => "connector_timeout",
            ErrorCode::InvalidSignature => "invalid_signature",
            ErrorCode::DeliveryFailed => "delivery_failed",
            ErrorCode::IntrospectionFailed => "introspection_failed",
            ErrorCode::ContextConflict => "context_conflict",
            ErrorCode::ContextFailed => "context_failed",
            ErrorCode::ContextInvalid => "context_invalid",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Internal => "internal",
        }
    }

    /// Whether the error is the caller's to fix (a rejected request) rather than a failure
    /// of a connector, the host or its database.
    pub fn is_rejection(self) -> bool {
        // Every code is named: a new one must be placed on one side or the other.
        match self {
            ErrorCode::InvalidRequest
            | ErrorCode::Unauthenticated
            | ErrorCode::Forbidden
            | ErrorCode::NotFound
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::InvalidComponent
            | ErrorCode::InvalidConfig
            | ErrorCode::GithubAppNotConfigured
            | ErrorCode::InvalidArguments
            | ErrorCode::Cycle
            | ErrorCode::HasChildren
            | ErrorCode::ConnectorInUse
            | ErrorCode::RotationBreaksBindings
            | ErrorCode::SlugConflict
            | ErrorCode::StateChanged
            | ErrorCode::ToolNotGranted
            | ErrorCode::UnknownTool
            | ErrorCode::InvalidSignature
            | ErrorCode::RequestTimeout
            | ErrorCode::MethodNotAllowed
            | ErrorCode::SignatureRequired
            | ErrorCode::SignatureInvalid
            | ErrorCode::ToolDefinitionsChanged => true,
            ErrorCode::ToolFailed
            | ErrorCode::ConnectorTrapped
            | ErrorCode::ConnectorTimeout
            | ErrorCode::DeliveryFailed
            | ErrorCode::IntrospectionFailed
            | ErrorCode::RegistryFailed
            | ErrorCode::ContextConflict
            | ErrorCode::ContextInvalid
            | ErrorCode::ContextFailed
            | ErrorCode::StoreUnavailable
            | ErrorCode::HostBusy
            | ErrorCode::Internal => false,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed host operation.
///
/// `code`, `message` and `details` are what callers are told (the API's error body); the
/// failure underneath, when there is one, is [`std::error::Error::source`]: kept for logs
/// and for an embedder that wants to look at it, never sent to a client.
#[derive(Debug, Clone)]
pub struct HostError {
    /// What kind of failure it is.
    pub code: ErrorCode,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// Machine-readable details (`error.details`), when there are any.
    pub details: Option<Value>,
    /// The failure this one reports, if any.
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Two errors are equal when they tell callers the same (their causes are not compared).
impl PartialEq for HostError {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message && self.details == other.details
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl HostError {
    /// An error with `code` and `message` and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
            source: None,
        }
    }

    /// The error with the failure it reports kept as its [`std::error::Error::source`].
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// The error with `details` attached.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `400 invalid_request`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// `404 not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `500 internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// What host operations return.
pub type HostResult<T> = Result<T, HostError>;

/// A failure reported by code an embedder gives the host (a platform tool's handler,
/// the source of GitHub installation tokens). Its message is what the host passes on (to
/// the calling agent, to the guest that asked); the failure underneath, if any, is its
/// [`std::error::Error::source`], for logs.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl HandlerError {
    /// A failure told as `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A failure told as `source`'s message, and keeping it.
    pub fn from_source(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::new(source.to_string()).with_source(source)
    }

    /// The failure with `source` kept underneath.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What the host passes on.
    pub fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_kept_but_not_told() {
        let cause = std::io::Error::new(std::io::ErrorKind::TimedOut, "the disk did not answer");
        let error = HostError::internal("saving failed; retry").with_source(cause);
        assert_eq!(error.to_string(), "internal: saving failed; retry");
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("the disk did not answer"));
        // Callers see the same error with or without its cause.
        assert_eq!(error, HostError::internal("saving failed; retry"));
        assert!(std::error::Error::source(&HostError::internal("x")).is_none());
    }

    #[test]
    fn all_lists_every_code_once() {
        // A new variant breaks this exhaustive match until it has its place here, and
        // then the assertions below until it has it in `ALL` too.
        fn place(code: ErrorCode) -> usize {
            match code {
                ErrorCode::InvalidRequest => 0,
                ErrorCode::Unauthenticated => 1,
                ErrorCode::Forbidden => 2,
                ErrorCode::NotFound => 3,
                ErrorCode::PayloadTooLarge => 4,
                ErrorCode::UnsupportedMediaType => 5,
                ErrorCode::InvalidComponent => 6,
                ErrorCode::InvalidConfig => 7,
                ErrorCode::GithubAppNotConfigured => 8,
                ErrorCode::InvalidArguments => 9,
                ErrorCode::Cycle => 10,
                ErrorCode::HasChildren => 11,
                ErrorCode::ConnectorInUse => 12,
                ErrorCode::RotationBreaksBindings => 13,
                ErrorCode::SlugConflict => 14,
                ErrorCode::StateChanged => 15,
                ErrorCode::SignatureRequired => 16,
                ErrorCode::SignatureInvalid => 17,
                ErrorCode::ToolDefinitionsChanged => 18,
                ErrorCode::RegistryFailed => 19,
                ErrorCode::ToolNotGranted => 20,
                ErrorCode::UnknownTool => 21,
                ErrorCode::ToolFailed => 22,
                ErrorCode::ConnectorTrapped => 23,
                ErrorCode::ConnectorTimeout => 24,
                ErrorCode::InvalidSignature => 25,
                ErrorCode::DeliveryFailed => 26,
                ErrorCode::IntrospectionFailed => 27,
                ErrorCode::ContextConflict => 28,
                ErrorCode::ContextFailed => 29,
                ErrorCode::ContextInvalid => 30,
                ErrorCode::StoreUnavailable => 31,
                ErrorCode::HostBusy => 32,
                ErrorCode::RequestTimeout => 33,
                ErrorCode::MethodNotAllowed => 34,
                ErrorCode::Internal => 35,
            }
        }
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(
                place(*code),
                i,
                "{code:?} is out of place in ErrorCode::ALL"
            );
        }
        assert_eq!(ErrorCode::ALL.len(), 36);
    }
}
