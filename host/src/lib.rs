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
pub mod error;
pub mod github_app;
pub mod grants;
pub mod host;
pub mod http;
pub mod ids;
mod inbox;
pub mod mcp;
#[cfg(feature = "pack")]
pub mod pack;
pub mod registry;
mod remote_answer;
pub mod replicas;
pub mod runtime;
pub mod server;
mod startup;
mod state;
pub mod store;
pub mod tool_output;
pub mod webhooks;

pub use error::{ErrorCode, HostError, HostResult};
pub use host::Host;
pub use tool_output::{ContentBlock, ToolOutput};
