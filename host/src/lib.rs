//! connector-host: runs connectors as sandboxed WebAssembly components.
//!
//! See the README for the big picture. The crate is organised by concern: [`runtime`]
//! (the sandbox), [`registry`] (installed connectors and their naming rules).

pub mod api;
pub mod auth;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod context;
pub mod error;
pub mod github_app;
pub mod grants;
pub mod host;
pub mod http;
pub mod mcp;
pub mod registry;
pub mod replicas;
pub mod runtime;
pub mod server;
pub mod store;
pub mod webhooks;
mod writes;

pub use error::{ErrorCode, HostError, HostResult};
pub use host::Host;

impl Host {
    /// The HTTP API as an axum router a platform can serve or nest.
    pub fn router(&self) -> axum::Router {
        server::router(self.clone())
    }
}
