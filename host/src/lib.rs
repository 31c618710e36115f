//! connector-host: runs connectors as sandboxed WebAssembly components.
//!
//! See the README for the big picture. The crate is organised by concern: [`runtime`]
//! (the sandbox), [`registry`] (installed connectors and their naming rules).

pub mod api;
pub mod auth;
mod bundled;
mod capabilities;
mod catalog;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod console;
pub mod context;
mod directory;
mod dispatch;
pub mod github_app;
pub mod grants;
pub mod host;
pub mod http;
mod inbox;
pub mod mcp;
#[cfg(feature = "pack")]
pub mod pack;
pub mod registry;
mod remote_answer;
pub mod replicas;
pub mod server;
pub mod sources;
mod startup;
mod state;
pub mod trust;
pub mod webhooks;

pub use connector_model::error::{ErrorCode, HostError, HostResult};
pub use connector_model::tool_output::{ContentBlock, ToolOutput};
pub use host::Host;
