//! connector-core: the embeddable core of connector-host.
//!
//! Everything a platform needs to run connectors for its units and agents, without an
//! HTTP server, a console, a command line or a database driver beyond SQLite: the state
//! and its one write path ([`host::Host`] is the facade), the directory of units and
//! agents, grants and the effective-tool resolver, the catalog of installed connectors,
//! capabilities, tool dispatch into fresh sandboxes, webhooks and inboxes, replica
//! catch-up, authentication of agents, the GitHub App, and agent containers' context.
//! Connectors shipped with a program are passed in ([`config::HostConfig::bundled`]).

#![deny(missing_docs)]

pub mod audit;
pub mod auth;
mod capabilities;
mod catalog;
pub mod config;
pub mod context;
mod directory;
mod dispatch;
pub mod github_app;
pub mod grants;
pub mod host;
mod inbox;
pub mod listing;
pub mod registry;
pub mod replicas;
pub mod sources;
mod startup;
mod state;
pub mod trust;
pub mod webhooks;

pub use connector_model::error::{ErrorCode, HostError, HostResult};
pub use connector_model::ids::{AgentId, IntoId, Slug, ToolId, UnitId};
pub use connector_model::tool_output::{ContentBlock, ToolOutput};
pub use directory::{is_secret_schema, mask_secrets};
pub use host::Host;
