//! The HTTP edge shared by the operator API ([`crate::api`]) and MCP ([`crate::mcp`]):
//! authentication as axum extractors, bounded body reading, JSON bodies, and the mapping
//! of [`ErrorCode`](connector_model::error::ErrorCode)s to HTTP statuses.
//!
//! Both front ends depend on this module and on [`Host`](crate::Host), never on each
//! other; the server ([`crate::server`]) mounts them side by side.

pub mod auth;
pub mod body;
mod error;
pub mod json;
pub mod peer;

pub(crate) use auth::bearer;
pub use auth::{authorize, Access, AgentOfPath, Operator};
pub use body::{discard, read_limited, read_limited_counted, BodyError, BodyStalled};
pub use error::{status_of, ApiError};
pub use json::ApiJson;
pub use peer::{Peer, PeerOf};
