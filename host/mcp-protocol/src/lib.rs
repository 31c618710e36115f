//! MCP without I/O: what the server, the stdio bridge, `pack`'s discovery and the
//! declarative interpreter's MCP calls share, so the protocol is written once.
//!
//! - [`jsonrpc`]: classifying a message, writing answers, the error codes;
//! - [`revision`]: the protocol revisions, which one a session gets, the HTTP headers;
//! - [`sse`]: reading a `text/event-stream` incrementally, with a bound;
//! - [`client`]: a client's side of a session (ids, headers, finding the response).
//!
//! Nothing here reads a socket or spawns anything: callers feed bytes in and send what
//! comes out, so the crate compiles for `wasm32-wasip2` as well as for the host.
#![deny(missing_docs)]

pub mod client;
pub mod jsonrpc;
pub mod revision;
pub mod sse;
