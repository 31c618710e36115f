//! connector-host: the program. It assembles the crates of the host (the core, the HTTP
//! edge, the console, `pack` and the bundled connectors) into the `connector-host`
//! command: the command line ([`cli`]), config loading from files and the environment,
//! the stdio MCP bridge ([`stdio`]) and `serve`.
//!
//! A platform embedding the host depends on `connector-core` (and `connector-http` for
//! the router) instead. The modules of those crates are re-exported here under their
//! old paths for this repository's tests and benches.

pub mod cli;
pub mod stdio;

pub use connector_console as console;
pub use connector_core::{
    auth, config, context, github_app, grants, host, registry, replicas, sources, trust, webhooks,
};
pub use connector_core::{ContentBlock, ErrorCode, Host, HostError, HostResult, ToolOutput};
pub use connector_http::{api, mcp};
pub use connector_pack as pack;
/// The HTTP edge's shared pieces (extractors, bodies, errors).
pub mod http {
    pub use connector_http::{auth, body, json, peer};
    pub use connector_http::{
        authorize, bearer, discard, read_limited, read_limited_counted, status_of, Access,
        AgentOfPath, ApiError, ApiJson, BodyError, BodyStalled, Operator, Peer, PeerOf,
    };
}
/// The server `connector-host serve` runs: the HTTP edge's with the console mounted.
pub mod server {
    pub use crate::cli::serve::{router, serve_on};
    pub use connector_http::server::{connections, router_with, serve_router_on};
}
