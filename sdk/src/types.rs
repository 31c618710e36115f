//! Plain Rust mirrors of the WIT records a connector sees.
//!
//! They exist so that connector code never touches wit-bindgen's generated types: JSON
//! documents arrive as `serde_json::Value` instead of strings, and the SDK can change how
//! it talks to the host without breaking connectors.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A connector bound to one unit, with that binding's validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The unit the connector is bound to.
    pub unit: String,
    /// The binding's configuration (valid against the manifest's config schema).
    pub config: Value,
}

impl Binding {
    /// The configuration deserialized into the connector's config type.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, String> {
        T::deserialize(&self.config).map_err(|e| format!("invalid binding configuration: {e}"))
    }
}

/// Who is calling a tool, through which binding.
#[derive(Debug, Clone, PartialEq)]
pub struct CallContext {
    /// The binding that granted the tool to the caller (the closest one).
    pub binding: Binding,
    /// The calling agent, when a tool is called on behalf of an agent.
    pub agent: Option<String>,
    /// A unique id of this call, for logs and idempotency keys.
    pub call_id: String,
}

/// Why a tool call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments passed the schema but are still unusable; the text says why.
    InvalidArguments(String),
    /// The tool ran and failed; the text is passed to the caller as is.
    Failed(String),
    /// The external system refused the binding's credentials.
    Unauthorized(String),
}

impl ToolError {
    /// [`ToolError::InvalidArguments`] from anything printable.
    pub fn invalid_arguments(message: impl fmt::Display) -> Self {
        ToolError::InvalidArguments(message.to_string())
    }

    /// [`ToolError::Failed`] from anything printable.
    pub fn failed(message: impl fmt::Display) -> Self {
        ToolError::Failed(message.to_string())
    }

    /// [`ToolError::Unauthorized`] from anything printable.
    pub fn unauthorized(message: impl fmt::Display) -> Self {
        ToolError::Unauthorized(message.to_string())
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::InvalidArguments(m) => write!(f, "invalid arguments: {m}"),
            ToolError::Failed(m) => write!(f, "tool failed: {m}"),
            ToolError::Unauthorized(m) => write!(f, "unauthorized: {m}"),
        }
    }
}

impl std::error::Error for ToolError {}

impl From<crate::http::HttpError> for ToolError {
    fn from(e: crate::http::HttpError) -> Self {
        ToolError::Failed(e.to_string())
    }
}

/// An inbound webhook whose signature the host has already verified.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Webhook {
    /// Request headers, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The raw body bytes, exactly as signed.
    pub body: Vec<u8>,
}

impl Webhook {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_slice(&self.body)
            .map_err(|e| format!("the webhook body is not the expected JSON: {e}"))
    }
}

/// One message a webhook becomes, before the host routes it to units.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The routing key this message is for (for example `repo:octo/hello`); it reaches
    /// every binding whose `bind` returned the same key.
    pub route: String,
    /// What happened, for example `issues.opened`.
    pub kind: String,
    /// Groups messages about the same thing (an issue, a pull request).
    pub thread_key: Option<String>,
    /// A compact JSON payload a model can read.
    pub payload: Value,
}

impl Message {
    /// A message with no thread key.
    pub fn new(route: impl Into<String>, kind: impl Into<String>, payload: Value) -> Self {
        Message {
            route: route.into(),
            kind: kind.into(),
            thread_key: None,
            payload,
        }
    }

    /// Sets the thread key.
    pub fn thread_key(mut self, key: impl Into<String>) -> Self {
        self.thread_key = Some(key.into());
        self
    }
}

/// What an agent's container gets from one binding.
///
/// Env var names must start with `SPRING_CONNECTOR_<SLUG>_` and file paths must lie under
/// `.spring/connectors/<slug>/`; the host rejects anything else.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentContext {
    /// Environment variables.
    pub env: Vec<(String, String)>,
    /// Files as (path, content).
    pub files: Vec<(String, String)>,
}

impl AgentContext {
    /// Adds an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Adds a file.
    pub fn file(mut self, path: impl Into<String>, content: impl Into<String>) -> Self {
        self.files.push((path.into(), content.into()));
        self
    }
}
