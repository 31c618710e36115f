//! Why a guest call failed, in terms an operator or a caller can act on.

use std::fmt;

/// A failure of one guest call. The host maps these onto the contract's error codes
/// (`connector_timeout`, `connector_trapped`, `tool_failed`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestError {
    /// The call ran past `limits.call_timeout_ms` and was stopped.
    Timeout {
        /// How long it ran.
        after_ms: u64,
    },
    /// The guest tried to grow its memory past `limits.memory_mib`.
    MemoryExceeded {
        /// The limit it hit.
        limit_bytes: usize,
    },
    /// The guest trapped (a panic, `unreachable`, a bad memory access). `message` is the
    /// guest's own panic message where it printed one, else the trap's description.
    Trapped {
        /// The panic message or the trap's description.
        message: String,
    },
    /// The guest answered with more than the host accepts.
    OutputTooLarge {
        /// How much it answered (at least).
        bytes: usize,
        /// How much the host accepts.
        limit: usize,
    },
    /// The guest answered with something that is not what the contract requires
    /// (for example a tool result that is not JSON).
    InvalidOutput {
        /// What is wrong with it.
        message: String,
    },
    /// The component could not be instantiated (a missing import).
    Instantiate {
        /// What wasmtime said.
        message: String,
    },
    /// The call waited for one of its caller's concurrent-call slots until its deadline
    /// and was never started.
    Queued {
        /// How long it waited.
        after_ms: u64,
        /// What it waited for.
        message: String,
    },
    /// The host stayed at one of its bounds (the instance pool, the memory of all
    /// guests) until the call's deadline.
    HostBusy {
        /// Which bound.
        message: String,
    },
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestError::Timeout { after_ms } => write!(
                f,
                "the connector did not finish within {after_ms} ms and was stopped \
                 (raise limits.call_timeout_ms if the work is legitimately slow)"
            ),
            GuestError::MemoryExceeded { limit_bytes } => write!(
                f,
                "the connector exceeded its memory limit of {} MiB and was stopped",
                limit_bytes / (1024 * 1024)
            ),
            GuestError::Trapped { message } => write!(f, "the connector trapped: {message}"),
            GuestError::OutputTooLarge { bytes, limit } => write!(
                f,
                "the connector returned at least {bytes} bytes, more than the {limit}-byte limit"
            ),
            GuestError::InvalidOutput { message } => {
                write!(f, "the connector returned invalid output: {message}")
            }
            GuestError::Instantiate { message } => {
                write!(f, "the connector could not be started: {message}")
            }
            GuestError::Queued { after_ms, message } => write!(
                f,
                "the call was not started within its {after_ms} ms: {message}; the rest wait, and the wait counts toward limits.call_timeout_ms"
            ),
            GuestError::HostBusy { message } => write!(f, "the host is busy: {message}"),
        }
    }
}

impl std::error::Error for GuestError {}

impl GuestError {
    /// The contract's error code: `connector_timeout` for a timeout (also one spent
    /// waiting for the caller's own slots), `host_busy` when the host stayed at a bound,
    /// `connector_trapped` for everything else.
    pub fn code(&self) -> connector_model::error::ErrorCode {
        match self {
            GuestError::Timeout { .. } | GuestError::Queued { .. } => {
                connector_model::error::ErrorCode::ConnectorTimeout
            }
            GuestError::HostBusy { .. } => connector_model::error::ErrorCode::HostBusy,
            _ => connector_model::error::ErrorCode::ConnectorTrapped,
        }
    }
}

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a WebAssembly component (a core module, or not wasm at all).
    #[error(
        "not a WebAssembly component: {0} (build it with `cargo build --target wasm32-wasip2`)"
    )]
    NotAComponent(String),
    /// The component does not implement the `spring:connector/connector` world, or needs
    /// imports the host does not provide.
    #[error("the component implements none of the spring:connector@0.3.0, @0.2.0 and @0.1.0 `connector` worlds: {0}")]
    WrongWorld(String),
    /// The bytes are not the ones the digest recorded with them names: a damaged stored
    /// copy.
    #[error("the component's bytes do not match the digest recorded for them (recorded {expected}, the bytes are {actual}); install the component again")]
    DigestMismatch {
        /// The recorded digest.
        expected: String,
        /// The digest of the bytes.
        actual: String,
    },
    /// The digest recorded with the bytes is not `sha256:` and 64 lowercase hex digits.
    #[error("the digest recorded for the component is not `sha256:` and 64 lowercase hex digits (it is {0:?}); install the component again")]
    MalformedDigest(String),
    /// The on-disk cache could not be used; compiling still works, so this is only raised
    /// when writing is impossible and compiling also failed.
    #[error("component cache error: {0}")]
    Cache(String),
}
