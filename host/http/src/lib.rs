//! connector-http: the HTTP edge of connector-host.
//!
//! [`server::router`] mounts the operator API ([`api`], `/api/v1`) and MCP ([`mcp`],
//! `/mcp/agents/{agentId}`) over a [`Host`](connector_core::Host), ready to serve or to
//! nest in a platform's router; [`server::serve_on`] serves it under the `server.*`
//! bounds ([`server::connections`]). Shared by both front ends, which never depend on
//! each other: authentication as axum extractors, bounded body reading, JSON bodies, and
//! the mapping of [`ErrorCode`](connector_model::error::ErrorCode)s to HTTP statuses.

#![deny(missing_docs)]

pub mod api;
pub mod mcp;
pub mod server;

pub mod auth;
pub mod body;
mod error;
pub mod json;
pub mod peer;

pub use auth::bearer;
pub use auth::{authenticate, authorize, caller, Access, AgentOfPath, Caller, Operator};
pub use body::{discard, read_limited, read_limited_counted, BodyError, BodyStalled};
pub use error::{status_of, ApiError};
pub use json::ApiJson;
pub use peer::{Peer, PeerOf};
