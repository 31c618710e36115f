//! The Streamable HTTP endpoint `/mcp/agents/{agentId}`: POST (client messages), GET (the
//! server→client stream), DELETE (end the session).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use connector_trace::InSpan;
use serde::Serialize;
use serde_json::Value;

use super::jsonrpc::{
    self, classify, params_object, Incoming, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, NOT_FOUND, PARSE_ERROR, UNAUTHORIZED,
};
use super::names::Naming;
use super::session::{Session, Sessions};
use super::tools::{self, CallOutcome, ToolsList};
use super::{negotiate, Endpoint, BATCH_VERSION, MAX_BODY_BYTES, SUPPORTED_VERSIONS};
use crate::{authorize, read_limited, Access, BodyError};
use connector_model::error::{ErrorCode, HostError};
use connector_model::records::Subject;

pub use connector_mcp_protocol::revision::{SESSION_HEADER, VERSION_HEADER};
/// Methods this server answers; anything else is `-32601`, with or without a session.
const METHODS: [&str; 9] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The endpoint's query: `?toolNames=flat|canonical`.
#[derive(serde::Deserialize, Default)]
pub struct EndpointQuery {
    #[serde(rename = "toolNames")]
    tool_names: Option<String>,
}

/// The endpoint a request addressed, or `400` for a `toolNames` it does not know.
fn endpoint_of(
    agent: &str,
    namespace: Option<&str>,
    query: &EndpointQuery,
) -> Result<Endpoint, Rejection> {
    let flat = Naming::style(query.tool_names.as_deref()).map_err(|m| {
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            &format!("Bad Request: {m}"),
        ))
    })?;
    Ok(Endpoint {
        agent: agent.into(),
        naming: Naming {
            namespace: namespace.map(Into::into),
            flat,
        },
    })
}

/// On a namespace endpoint: `404` when the agent has no tool of that namespace (checked
/// after authentication, so it tells a stranger nothing).
fn check_namespace(sessions: &Sessions, endpoint: &Endpoint) -> Result<(), Rejection> {
    let Some(namespace) = &endpoint.naming.namespace else {
        return Ok(());
    };
    let subject = Subject::Agent(endpoint.agent.to_string());
    let has = match sessions.host().effective_tools(&subject) {
        Ok(tools) => endpoint.naming.has_tools(&tools),
        // No such agent: answered as such by the request itself.
        Err(_) => return Ok(()),
    };
    if has {
        return Ok(());
    }
    Err(Box::new(rpc_error(
        StatusCode::NOT_FOUND,
        &Value::Null,
        NOT_FOUND,
        &format!(
            "Not found: agent `{}` has no tool in namespace `{}`; its tools are listed at /mcp/agents/{}",
            endpoint.agent,
            connector_model::ids::truncate(namespace, 64),
            endpoint.agent
        ),
    )))
}

/// The endpoint a request's path (`/mcp/agents/{agent}[/namespaces/{namespace}]`) and
/// query (`?toolNames=`) address: one extractor for both route forms.
pub struct Addressed(pub Endpoint);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Addressed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let Path(params) =
            Path::<std::collections::HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
        let Query(query) = Query::<EndpointQuery>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let agent = params.get("agent").map_or("", String::as_str);
        endpoint_of(agent, params.get("namespace").map(String::as_str), &query)
            .map(Addressed)
            .map_err(|r| *r)
    }
}

type McpState = State<Arc<Sessions>>;
/// A request refused before it reaches a method (boxed: a `Response` is large).
pub(super) type Rejection = Box<Response>;

pub(super) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON-RPC error answer with HTTP `status`.
pub fn rpc_error(status: StatusCode, id: &Value, code: i64, message: &str) -> Response {
    json_response(status, jsonrpc::error(id, code, message, None))
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// The agent's own token, or the operator token: else `401` (no or an invalid token) or
/// `403` (another agent's token), with a JSON-RPC error body.
fn authenticate(sessions: &Sessions, headers: &HeaderMap, agent: &str) -> Result<(), Rejection> {
    let Err(e) = authorize(sessions.host(), headers, Access::Agent(agent)) else {
        return Ok(());
    };
    let status = if e.code == ErrorCode::Forbidden {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::UNAUTHORIZED
    };
    let data = serde_json::json!({ "code": e.code.as_str() });
    let mut response = json_response(
        status,
        jsonrpc::error(&Value::Null, UNAUTHORIZED, &e.message, Some(&data)),
    );
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            super::access::www_authenticate(headers, agent),
        );
    }
    Err(Box::new(response))
}

/// The spec asks servers to validate `Origin`: a browser page may only come from this
/// host itself or an origin the operator allows (`server.cors_origins`). (The bearer
/// token is the real guard: a page on another origin never has it.)
fn check_origin(sessions: &Sessions, headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    if origin
        .to_str()
        .is_ok_and(|o| super::access::origin_allowed(sessions.host(), o))
    {
        return Ok(());
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let same = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .zip(host)
        .is_some_and(|((scheme, authority), host)| {
            let strip = |a: &str| {
                let default = if scheme.eq_ignore_ascii_case("https") {
                    ":443"
                } else {
                    ":80"
                };
                a.trim_end_matches('/')
                    .strip_suffix(default)
                    .unwrap_or(a.trim_end_matches('/'))
                    .to_ascii_lowercase()
            };
            strip(authority) == strip(host)
        });
    if same {
        Ok(())
    } else {
        Err(Box::new(rpc_error(
            StatusCode::FORBIDDEN,
            &Value::Null,
            UNAUTHORIZED,
            "Forbidden: the Origin header names another site",
        )))
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let mime = ct.split(';').next().unwrap_or("").trim();
            mime.eq_ignore_ascii_case("application/json") || mime.ends_with("+json")
        })
}

fn too_large() -> Response {
    rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &Value::Null,
        INVALID_REQUEST,
        &format!(
            "Request too large: at most {} MiB per message",
            MAX_BODY_BYTES / (1024 * 1024)
        ),
    )
}

/// Reads the body, at most [`MAX_BODY_BYTES`] (an oversized one is drained before the
/// `413`, see [`read_limited`]).
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    read_limited(headers, body, MAX_BODY_BYTES)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => too_large(),
            BodyError::Stalled => rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                &Value::Null,
                INVALID_REQUEST,
                "the request body stopped arriving before it was complete",
            ),
            BodyError::Unreadable(e) => rpc_error(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                INVALID_REQUEST,
                &format!("could not read the request body: {e}"),
            ),
            // `read_limited` always has room.
            BodyError::NoRoom => rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &Value::Null,
                INVALID_REQUEST,
                "the host has no room to read this request now; retry shortly",
            ),
        })
}

/// The request's session: `400` without `Mcp-Session-Id`, `404` when it is unknown, ended
/// or another agent's, `400` when `MCP-Protocol-Version` names no supported revision.
fn session_of(
    sessions: &Sessions,
    headers: &HeaderMap,
    endpoint: &Endpoint,
    id: &Value,
) -> Result<Arc<Session>, Rejection> {
    let Some(raw) = headers.get(SESSION_HEADER) else {
        return Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            INVALID_REQUEST,
            "Bad Request: the Mcp-Session-Id header is required; send `initialize` first to get one",
        )));
    };
    let session = raw
        .to_str()
        .ok()
        .and_then(|sid| sessions.get(sid, endpoint))
        .ok_or_else(|| {
            Box::new(rpc_error(
                StatusCode::NOT_FOUND,
                id,
                NOT_FOUND,
                "Session not found: it ended or never existed; send `initialize` without Mcp-Session-Id to start a new one",
            ))
        })?;
    if let Some(v) = headers.get(VERSION_HEADER) {
        let v = v.to_str().unwrap_or("");
        if !SUPPORTED_VERSIONS.contains(&v) {
            return Err(Box::new(rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                INVALID_REQUEST,
                &format!(
                    "Bad Request: unsupported MCP-Protocol-Version `{}`; supported: {}",
                    v.chars().take(40).collect::<String>(),
                    SUPPORTED_VERSIONS.join(", ")
                ),
            )));
        }
        // Any supported revision is accepted in a session (CONTRACT §5): clients that
        // send their own preferred revision on every request keep working.
    }
    Ok(session)
}

/// `POST /mcp/agents/{agentId}[/namespaces/{namespace}]`: one JSON-RPC message (or, at
/// `2025-03-26`, a batch).
pub async fn post(
    State(sessions): McpState,
    Addressed(endpoint): Addressed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    post_to(&sessions, &endpoint, headers, body).await
}

/// A POST to `endpoint`.
pub async fn post_to(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let sessions = sessions.clone();
    let agent = &*endpoint.agent;
    if let Err(r) = authenticate(&sessions, &headers, agent)
        .and_then(|()| check_origin(&sessions, &headers))
        .and_then(|()| check_namespace(&sessions, endpoint))
    {
        return *r;
    }
    if !is_json(&headers) {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &Value::Null,
            INVALID_REQUEST,
            "Unsupported Media Type: send JSON-RPC with Content-Type: application/json",
        );
    }
    let bytes = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: {e}"),
            )
        }
    };
    match value {
        Value::Array(items) => batch(&sessions, endpoint, &headers, items).await,
        single if super::stateless::wants(&headers, &single) => {
            super::stateless::serve(&sessions, endpoint, &headers, single).await
        }
        single => one(&sessions, endpoint, &headers, single).await,
    }
}

/// `400` for what is not a JSON-RPC message.
pub(super) fn invalid_request(invalid: &jsonrpc::Invalid) -> Response {
    rpc_error(
        StatusCode::BAD_REQUEST,
        &invalid.id,
        INVALID_REQUEST,
        invalid.message,
    )
}

async fn one(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    value: Value,
) -> Response {
    let message = match classify(value) {
        Ok(m) => m,
        Err(invalid) => return invalid_request(&invalid),
    };
    match message {
        Incoming::Request { id, method, params } => {
            if method == "initialize" {
                let span = super::message_span(&method, params.as_ref());
                let _entered = span.enter();
                return initialize(sessions, endpoint, headers, &id, params);
            }
            if !METHODS.contains(&method.as_str()) && !headers.contains_key(SESSION_HEADER) {
                // No such method in any state: say so (clients probing for newer
                // lifecycles, such as `server/discover`, fall back to `initialize`).
                return json_response(StatusCode::OK, method_not_found(&id, &method));
            }
            let session = match session_of(sessions, headers, endpoint, &id) {
                Ok(s) => s,
                Err(r) => return *r,
            };
            json_response(
                StatusCode::OK,
                request(sessions, &session, &id, &method, params).await,
            )
        }
        Incoming::Notification { .. } | Incoming::Response => {
            match session_of(sessions, headers, endpoint, &Value::Null) {
                // Notifications (`initialized`, `cancelled`, progress, ...) need no action
                // here: a client abandoning a call closes its request, which drops the call.
                Ok(_) => accepted(),
                Err(r) => *r,
            }
        }
    }
}

/// The most messages one batch may hold: a batch runs its calls at once, so its size
/// bounds what one HTTP request can make the host do.
pub const MAX_BATCH: usize = 64;

/// JSON-RPC batches exist only in protocol revision `2025-03-26` (removed in
/// `2025-06-18`): there they are answered (requests concurrently, answers in one array);
/// in a session at any later revision a batch is `400` / `-32600`, as is one of more
/// than [`MAX_BATCH`] messages.
async fn batch(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    items: Vec<Value>,
) -> Response {
    if items.is_empty() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: an empty batch",
        );
    }
    if items.len() > MAX_BATCH {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            &format!(
                "Invalid Request: a batch of {} messages; at most {MAX_BATCH} per request",
                items.len()
            ),
        );
    }
    let session = match session_of(sessions, headers, endpoint, &Value::Null) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if session.version != BATCH_VERSION {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            &format!(
                "Invalid Request: JSON-RPC batches are not supported at protocol revision {} (MCP removed them in 2025-06-18); send one message per POST",
                session.version
            ),
        );
    }
    let answers = futures::future::join_all(items.into_iter().map(|item| {
        let session = session.clone();
        async move {
            match classify(item) {
                Err(invalid) => Some(jsonrpc::error(
                    &invalid.id,
                    INVALID_REQUEST,
                    invalid.message,
                    None,
                )),
                Ok(Incoming::Request { id, method, .. }) if method == "initialize" => {
                    Some(jsonrpc::error(
                        &id,
                        INVALID_REQUEST,
                        "Invalid Request: `initialize` cannot be part of a batch",
                        None,
                    ))
                }
                Ok(Incoming::Request { id, method, params }) => {
                    Some(request(sessions, &session, &id, &method, params).await)
                }
                Ok(_) => None,
            }
        }
    }))
    .await;
    let answers: Vec<Vec<u8>> = answers.into_iter().flatten().collect();
    if answers.is_empty() {
        return accepted();
    }
    let mut body = Vec::with_capacity(answers.iter().map(|a| a.len() + 1).sum::<usize>() + 2);
    body.push(b'[');
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(a);
    }
    body.push(b']');
    json_response(StatusCode::OK, body)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult<'a> {
    protocol_version: &'a str,
    capabilities: Capabilities,
    server_info: ServerInfo,
    instructions: String,
}

#[derive(Serialize)]
struct Capabilities {
    tools: ListChanged,
    resources: ResourceCapabilities,
}

/// `resources: {subscribe: true, listChanged: true}`: the units' inboxes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResourceCapabilities {
    subscribe: bool,
    list_changed: bool,
}

pub(super) const RESOURCES: ResourceCapabilities = ResourceCapabilities {
    subscribe: true,
    list_changed: true,
};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListChanged {
    list_changed: bool,
}

/// The server's name and version (`serverInfo`).
#[derive(Serialize)]
pub(super) struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

/// This server's identity, for `initialize` and every stateless result.
pub(super) const SERVER_INFO: ServerInfo = ServerInfo {
    name: "connector-host",
    version: env!("CARGO_PKG_VERSION"),
};

fn initialize(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    id: &Value,
    params: Option<Value>,
) -> Response {
    let agent = &*endpoint.agent;
    if let Some(sid) = headers.get(SESSION_HEADER) {
        return match sid.to_str().ok().and_then(|s| sessions.get(s, endpoint)) {
            Some(_) => rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                INVALID_REQUEST,
                "Invalid Request: this session is already initialized; send `initialize` without Mcp-Session-Id to start another",
            ),
            None => rpc_error(
                StatusCode::NOT_FOUND,
                id,
                NOT_FOUND,
                "Session not found: send `initialize` without Mcp-Session-Id",
            ),
        };
    }
    let params = match params_object(params) {
        Ok(p) => p,
        Err(m) => return rpc_error(StatusCode::OK, id, INVALID_PARAMS, m),
    };
    let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
        return rpc_error(
            StatusCode::OK,
            id,
            INVALID_PARAMS,
            "`params.protocolVersion` (a string) is required",
        );
    };
    let version = negotiate(requested);
    let actor = crate::auth::caller(sessions.host(), headers);
    let session = match sessions.create(endpoint, version, actor) {
        Ok(s) => s,
        Err(e) if e.code == ErrorCode::InvalidRequest => {
            return rpc_error(StatusCode::BAD_REQUEST, id, INVALID_REQUEST, &e.message)
        }
        Err(e) => return rpc_error(StatusCode::NOT_FOUND, id, NOT_FOUND, &e.message),
    };
    tracing::debug!(agent, version, session = %session.id, "MCP session opened");
    let body = jsonrpc::result(
        id,
        InitializeResult {
            protocol_version: version,
            capabilities: Capabilities {
                tools: ListChanged { list_changed: true },
                resources: RESOURCES,
            },
            server_info: SERVER_INFO,
            instructions: instructions(endpoint),
        },
    );
    let mut response = json_response(StatusCode::OK, body);
    if let Ok(v) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// What the server tells a model about this endpoint (`initialize`, `server/discover`).
pub(super) fn instructions(endpoint: &Endpoint) -> String {
    let agent = &endpoint.agent;
    let tools = match (&endpoint.naming.namespace, endpoint.naming.flat) {
        (Some(ns), _) => {
            format!("the tools of its connector namespace `{ns}`, named without the namespace")
        }
        (None, false) => {
            "its connectors' tools (named <namespace>.<tool>) and the platform's sv.* tools"
                .to_string()
        }
        (None, true) => {
            "its connectors' tools (named <namespace>__<tool>) and the platform's sv__* tools"
                .to_string()
        }
    };
    format!(
        "Agent `{agent}`: {tools}. The set follows what the operator binds and grants; watch for notifications/tools/list_changed. The resources spring://units/<unitId>/messages are the agent's units' inboxes (webhook events): subscribe to hear of new messages, read with ?after=<next> for what came since the last read."
    )
}

fn method_not_found(id: &Value, method: &str) -> Vec<u8> {
    let method: String = method.chars().take(100).collect();
    jsonrpc::error(
        id,
        METHOD_NOT_FOUND,
        &format!(
            "Method not found: `{method}` (this server offers tools/list, tools/call, resources/list, resources/read, resources/subscribe, resources/unsubscribe, ping)"
        ),
        None,
    )
}

#[derive(Serialize)]
struct Empty {}

/// Answers one request of an open session, inside its span.
async fn request(
    sessions: &Sessions,
    session: &Arc<Session>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Vec<u8> {
    let span = super::message_span(method, params.as_ref());
    answer(sessions, session, id, method, params)
        .in_span(span)
        .await
}

async fn answer(
    sessions: &Sessions,
    session: &Arc<Session>,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Vec<u8> {
    let host = sessions.host();
    let refused = |(code, message, data): super::resources::Refusal| {
        jsonrpc::error(id, code, &message, (!data.is_null()).then_some(&data))
    };
    match method {
        "ping" => jsonrpc::result(id, Empty {}),
        "tools/list" => {
            let params = match params_object(params) {
                Ok(p) => Value::Object(p),
                Err(m) => return jsonrpc::error(id, INVALID_PARAMS, m, None),
            };
            if let Some(m) = tools::refused_cursor(Some(&params)) {
                return jsonrpc::error(id, INVALID_PARAMS, m, None);
            }
            match host.effective_tools(&Subject::Agent(session.agent.to_string())) {
                Ok(tools) => jsonrpc::result(id, ToolsList(&tools, &session.naming)),
                Err(e) => host_error(id, e),
            }
        }
        "tools/call" => call(sessions, session, id, params).await,
        "resources/list" => match super::resources::list(host, &session.agent) {
            Ok(list) => jsonrpc::result(id, list),
            Err(e) => host_error(id, e),
        },
        "resources/templates/list" => jsonrpc::result(id, super::resources::templates()),
        "resources/read" => {
            match super::resources::read(host, &session.agent, params.as_ref()).await {
                Ok(contents) => jsonrpc::result(id, contents),
                Err(r) => refused(r),
            }
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            let checked = super::resources::uri_param(params.as_ref())
                .and_then(|uri| super::resources::check(host, &session.agent, uri));
            let unit = match checked {
                Ok(parsed) => parsed.unit,
                Err(r) => return refused(r),
            };
            let done = if method == "resources/subscribe" {
                sessions.subscribe(session, unit).await
            } else {
                sessions.unsubscribe(session, &unit).await
            };
            match done {
                Ok(()) => jsonrpc::result(id, Empty {}),
                Err(e) => host_error(id, e),
            }
        }
        _ => method_not_found(id, method),
    }
}

fn host_error(id: &Value, e: HostError) -> Vec<u8> {
    let code = if e.code == ErrorCode::NotFound {
        NOT_FOUND
    } else {
        INTERNAL_ERROR
    };
    jsonrpc::error(id, code, &e.message, None)
}

async fn call(
    sessions: &Sessions,
    session: &Session,
    id: &Value,
    params: Option<Value>,
) -> Vec<u8> {
    match tools::call(
        &sessions.host().acting_as(session.actor.clone()),
        &session.agent,
        &session.naming,
        session.version,
        params,
    )
    .await
    {
        CallOutcome::Done(result) => jsonrpc::result(id, result),
        CallOutcome::Failed(failure) => jsonrpc::result(id, failure),
        CallOutcome::Rpc(code, message, data) => jsonrpc::error(id, code, &message, data.as_ref()),
    }
}

/// `GET /mcp/agents/{agentId}[/namespaces/{namespace}]`: the session's server→client
/// stream (Server-Sent Events, `event: message`, one JSON-RPC notification per event).
/// Opening a new stream ends the previous one of the same session; [`super::end_streams`]
/// ends them all.
pub async fn get(
    State(sessions): McpState,
    Addressed(endpoint): Addressed,
    headers: HeaderMap,
) -> Response {
    get_from(&sessions, &endpoint, headers).await
}

/// A GET of `endpoint`'s session stream.
pub async fn get_from(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authenticate(sessions, &headers, &endpoint.agent)
        .and_then(|()| check_origin(sessions, &headers))
    {
        return *r;
    }
    let session = match session_of(sessions, &headers, endpoint, &Value::Null) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let rx = session.open_stream();
    let ending = super::streams_ending();
    let revoked = token_revoked(sessions, &headers);
    let events = futures::stream::unfold(
        (rx, ending, revoked),
        |(mut rx, mut ending, mut revoked)| async move {
            let (id, message) = tokio::select! {
                biased;
                _ = ending.wait_for(|end| *end) => return None,
                () = &mut revoked => return None,
                next = rx.recv() => next?,
            };
            let event = Event::default()
                .event("message")
                .id(id.to_string())
                .data(&*message);
            Some((Ok::<_, Infallible>(event), (rx, ending, revoked)))
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// How often an open stream checks that the token it was opened with is still valid.
pub const TOKEN_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Resolves once the agent token the request was made with stops being valid (revoked,
/// expired, its agent deleted), so a stream opened with it ends then; never for the
/// operator token.
pub(super) fn token_revoked(
    sessions: &Sessions,
    headers: &HeaderMap,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    let host = sessions.host().clone();
    let token = crate::bearer(headers)
        .filter(|t| !host.is_operator_token(t))
        .map(str::to_string);
    Box::pin(async move {
        let Some(token) = token else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval(TOKEN_CHECK_INTERVAL);
        loop {
            tick.tick().await;
            if host.agent_of_token(&token).is_none() {
                return;
            }
        }
    })
}

/// `DELETE /mcp/agents/{agentId}[/namespaces/{namespace}]`: ends the session (`204`); its
/// stream closes and later requests with its id get `404`.
pub async fn delete(
    State(sessions): McpState,
    Addressed(endpoint): Addressed,
    headers: HeaderMap,
) -> Response {
    delete_at(&sessions, &endpoint, headers).await
}

/// A DELETE of `endpoint`'s session.
pub async fn delete_at(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authenticate(sessions, &headers, &endpoint.agent)
        .and_then(|()| check_origin(sessions, &headers))
    {
        return *r;
    }
    match session_of(sessions, &headers, endpoint, &Value::Null) {
        Ok(session) => {
            sessions.remove(&session.id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(r) => *r,
    }
}
