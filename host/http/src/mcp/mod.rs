//! MCP (CONTRACT.md §5): each agent's effective tools as an MCP server, over Streamable
//! HTTP at `/mcp/agents/{agentId}` ([`router`]), and over stdio through `connector-host
//! mcp` (the binary's `stdio` module): bridged to a running host, or answered in its own
//! process by these same handlers on the host's data (`stdio::local`), at the stateless
//! revision `2026-07-28` and the session revisions before it.
//!
//! # Two eras on one endpoint
//!
//! - **Stateless, `2026-07-28`** ([`stateless`]): a request whose `params._meta` names a
//!   protocol revision (or that carries no session and `MCP-Protocol-Version: 2026-07-28`)
//!   is answered on its own, by any replica: `server/discover`, `tools/list`, `tools/call`,
//!   `subscriptions/listen`. Its headers must match its body (`HeaderMismatch` `-32020`),
//!   its revision must be `2026-07-28` (`-32022` naming it), unknown methods are `404` /
//!   `-32601`.
//! - **Sessions, `2025-11-25`, `2025-06-18`, `2025-03-26`** ([`http`]): `initialize` opens
//!   a session (answered with `Mcp-Session-Id`, at the client's revision when it is one of
//!   these, else the newest); every later message carries that id (`400` without it, `404`
//!   when it is unknown, ended, or another agent's). `MCP-Protocol-Version`, when sent,
//!   must name a supported revision (`400` otherwise). `GET` opens the session's
//!   server→client SSE stream; `DELETE` ends the session (`204`). Methods: `initialize`,
//!   `ping`, `tools/list`, `tools/call`, `resources/list`, `resources/templates/list`,
//!   `resources/read`, `resources/subscribe`, `resources/unsubscribe`; anything else is
//!   `-32601`.
//!
//! # Three endpoint forms ([`Endpoint`], [`names`])
//!
//! `/mcp/agents/{agentId}` names tools by canonical id; `?toolNames=flat` writes each `.`
//! as `__` (the model APIs' function names refuse dots); `/namespaces/{ns}` serves one
//! namespace's tools by bare name. A session belongs to the endpoint that opened it. The
//! mapping happens at the edge: `tools/list` shows presented names, `tools/call` maps the
//! name back among the agent's effective tools, errors quote the presented name.
//!
//! # Events ([`resources`])
//!
//! The agent's units' inboxes are the resources `spring://units/{unitId}/messages`:
//! listed, read by cursor, and subscribed to (sessions: `resources/subscribe`, pushed on
//! the GET stream; 2026-07-28: `resourceSubscriptions` of `subscriptions/listen`), pushed
//! from the inbox's commit signal ([`Host::watch_messages`]).
//!
//! # What both do
//!
//! - Authentication: the agent's own token or the operator token (`401` without or with
//!   an invalid one, pointing to the RFC 9728 metadata; `403` with another agent's), then
//!   an `Origin` check (`403` for a page of another site). Error bodies are JSON-RPC error
//!   objects (`id: null` when the request was not read), so MCP clients can show them.
//! - `tools/list`: the agent's effective tools (`Host::effective_tools`) as MCP tools
//!   (`name`, `description`, `inputSchema`, `annotations` = MCP `ToolAnnotations`), in one
//!   page, every tier included (image-tier tools run in the agent's own container; a call
//!   of one through the host is answered with an error saying so).
//! - `tools/call` runs `Host::call_tool` (the same grant and schema checks as
//!   `POST /agents/{id}/tool-calls`): a result becomes `content` (its JSON text) plus
//!   `structuredContent` (the result when it is an object, else `{"result": value}`);
//!   `tool_not_granted` → `-32002` (`-32602` with `data.code` at 2026-07-28, which
//!   retired `-32002`); `unknown_tool` → `-32602`; `invalid_arguments` → a
//!   result with `isError: true` naming each violation from `2025-11-25` on (SEP-1303),
//!   `-32602` with `data.violations` before; the connector's own failure (`tool_failed`,
//!   `connector_trapped`, `connector_timeout`) → a result with `isError: true`.
//! - Bad input: malformed JSON → `400` / `-32700`; not a JSON-RPC message → `400` /
//!   `-32600`; a body over 4 MiB → `413`; a body that is not `application/json` → `415`.
//!   Batches (JSON arrays): answered in sessions at `2025-03-26`, the one revision that
//!   had them; otherwise `400` / `-32600`.
//! - Change notifications are pushed, not polled: every write that may change effective
//!   tools (a bind, a grant, a rotation, a reload after another replica wrote) signals
//!   [`Host::watch_tools`]; each listener then compares a fingerprint of the agent's
//!   `tools/list` (a hash of exactly what it would show, computed once per new tool set)
//!   with what it last told, and sends `notifications/tools/list_changed` when they
//!   differ: on a `subscriptions/listen` stream (stateless) or on the session's GET
//!   stream (kept pending until one opens).
//! - Session lifetime: ended by `DELETE`, after 30 idle minutes without an open stream,
//!   when the agent is deleted, or (past 256 sessions of one agent) by evicting that
//!   agent's least recently used session. Streams of either era end when the token they
//!   were opened with stops being valid. On shutdown, [`end_streams`] ends every stream
//!   (a `subscriptions/listen` stream with its final result), since a graceful HTTP
//!   shutdown would otherwise wait on them forever; `connector-host serve` calls it on
//!   Ctrl-C / SIGTERM.
//!
//! Why the protocol is written here rather than on the official Rust SDK (`rmcp`), with
//! the measurements: `docs/decisions/2026-11-22-mcp-server-hand-written.md`.

mod access;
pub mod http;
pub mod names;
pub mod resources;
pub mod session;
pub mod stateless;
pub mod tools;

use std::sync::Arc;

use axum::routing::post;
use axum::Router;

use connector_core::host::Host;

pub use connector_mcp_protocol::jsonrpc;
pub use connector_mcp_protocol::revision::{
    negotiate, BATCH_VERSION, SESSION_HEADER, SESSION_VERSIONS, STATELESS_VERSION,
    SUPPORTED_VERSIONS, VERSION_HEADER,
};
pub use names::Naming;

/// What one endpoint URL serves: an agent's tools, named as [`Naming`] says
/// (`/mcp/agents/{agentId}[/namespaces/{namespace}][?toolNames=flat]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The agent whose tools it serves.
    pub agent: Arc<str>,
    /// Which tools, under which names.
    pub naming: Naming,
}

impl Endpoint {
    /// All of `agent`'s tools by canonical id.
    pub fn canonical(agent: &str) -> Endpoint {
        Endpoint {
            agent: agent.into(),
            naming: Naming::default(),
        }
    }
}

/// Largest POST body.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

static STREAMS_END: std::sync::LazyLock<tokio::sync::watch::Sender<bool>> =
    std::sync::LazyLock::new(|| tokio::sync::watch::channel(false).0);

/// The span of one MCP request (CONTRACT §11): a child of the `traceparent` in its
/// `params._meta` (SEP-414) when there is one, else of the HTTP request carrying it.
fn message_span(method: &str, params: Option<&serde_json::Value>) -> connector_trace::Span {
    let method = || connector_model::ids::truncate(method, 64);
    let meta = params.and_then(|p| p.get("_meta"));
    let key = |name: &str| meta.and_then(|m| m.get(name)).and_then(|v| v.as_str());
    connector_trace::span("MCP message")
        .named(|| format!("MCP {}", method()))
        .attr_with("mcp.method.name", method)
        .remote_parent(
            key(connector_trace::TRACEPARENT),
            key(connector_trace::TRACESTATE),
        )
        .start()
}

/// Ends every open MCP stream of this process, GET and `subscriptions/listen` (and makes
/// new ones end at once).
/// A graceful HTTP shutdown waits for responses in flight, and a stream never finishes
/// on its own: call this when shutting down (clients reconnect to the next server).
pub fn end_streams() {
    STREAMS_END.send_replace(true);
}

fn streams_ending() -> tokio::sync::watch::Receiver<bool> {
    STREAMS_END.subscribe()
}

/// The MCP routes (`/mcp/agents/{agentId}` and the RFC 9728 metadata of each), for
/// merging into the API router.
pub fn router<S: Clone + Send + Sync + 'static>(host: Host) -> Router<S> {
    let sessions = Arc::new(session::Sessions::new(host.clone()));
    Router::new()
        .route(
            "/mcp/agents/{agent}",
            post(http::post).get(http::get).delete(http::delete),
        )
        .route(
            "/mcp/agents/{agent}/namespaces/{namespace}",
            post(http::post).get(http::get).delete(http::delete),
        )
        .with_state(sessions)
        .route(
            &format!("{}/mcp/agents/{{agent}}", access::METADATA_PREFIX),
            axum::routing::get(access::metadata),
        )
        .layer(axum::middleware::from_fn_with_state(host, access::cors))
}
