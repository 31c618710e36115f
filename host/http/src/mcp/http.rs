//! The Streamable HTTP endpoint `/mcp/agents/{agentId}`: POST (client messages), GET (the
//! server→client stream), DELETE (end the session).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::jsonrpc::{
    self, classify, params_object, Incoming, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, NOT_FOUND, PARSE_ERROR, UNAUTHORIZED,
};
use super::session::{Session, Sessions};
use super::tools::{self, CallOutcome, ToolsList};
use super::{negotiate, BATCH_VERSION, MAX_BODY_BYTES, SUPPORTED_VERSIONS};
use crate::{authorize, read_limited, Access, BodyError};
use connector_model::error::{ErrorCode, HostError};
use connector_model::records::Subject;

/// `Mcp-Session-Id`.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// Methods this server answers; anything else is `-32601`, with or without a session.
const METHODS: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];

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
    agent: &str,
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
        .and_then(|sid| sessions.get(sid, agent))
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

/// `POST /mcp/agents/{agentId}`: one JSON-RPC message (or, at `2025-03-26`, a batch).
pub async fn post(
    State(sessions): McpState,
    Path(agent): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(r) =
        authenticate(&sessions, &headers, &agent).and_then(|()| check_origin(&sessions, &headers))
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
        Value::Array(items) => batch(&sessions, &agent, &headers, items).await,
        single if super::stateless::wants(&headers, &single) => {
            super::stateless::serve(&sessions, &agent, &headers, single).await
        }
        single => one(&sessions, &agent, &headers, single).await,
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

async fn one(sessions: &Arc<Sessions>, agent: &str, headers: &HeaderMap, value: Value) -> Response {
    let message = match classify(value) {
        Ok(m) => m,
        Err(invalid) => return invalid_request(&invalid),
    };
    match message {
        Incoming::Request { id, method, params } => {
            if method == "initialize" {
                return initialize(sessions, agent, headers, &id, params);
            }
            if !METHODS.contains(&method.as_str()) && !headers.contains_key(SESSION_HEADER) {
                // No such method in any state: say so (clients probing for newer
                // lifecycles, such as `server/discover`, fall back to `initialize`).
                return json_response(StatusCode::OK, method_not_found(&id, &method));
            }
            let session = match session_of(sessions, headers, agent, &id) {
                Ok(s) => s,
                Err(r) => return *r,
            };
            json_response(
                StatusCode::OK,
                request(sessions, &session, &id, &method, params).await,
            )
        }
        Incoming::Notification { .. } | Incoming::Response => {
            match session_of(sessions, headers, agent, &Value::Null) {
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
    agent: &str,
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
    let session = match session_of(sessions, headers, agent, &Value::Null) {
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
}

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
    agent: &str,
    headers: &HeaderMap,
    id: &Value,
    params: Option<Value>,
) -> Response {
    if let Some(sid) = headers.get(SESSION_HEADER) {
        return match sid.to_str().ok().and_then(|s| sessions.get(s, agent)) {
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
    let session = match sessions.create(agent, version) {
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
            },
            server_info: SERVER_INFO,
            instructions: instructions(agent),
        },
    );
    let mut response = json_response(StatusCode::OK, body);
    if let Ok(v) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// What the server tells a model about this endpoint (`initialize`, `server/discover`).
pub(super) fn instructions(agent: &str) -> String {
    format!(
        "The tools of agent `{agent}`: its connectors' tools (named <namespace>.<tool>) and the platform's sv.* tools. The set follows what the operator binds and grants; watch for notifications/tools/list_changed."
    )
}

fn method_not_found(id: &Value, method: &str) -> Vec<u8> {
    let method: String = method.chars().take(100).collect();
    jsonrpc::error(
        id,
        METHOD_NOT_FOUND,
        &format!(
            "Method not found: `{method}` (this server offers tools: tools/list, tools/call, ping)"
        ),
        None,
    )
}

#[derive(Serialize)]
struct Empty {}

/// Answers one request of an open session.
async fn request(
    sessions: &Sessions,
    session: &Session,
    id: &Value,
    method: &str,
    params: Option<Value>,
) -> Vec<u8> {
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
            match sessions
                .host()
                .effective_tools(&Subject::Agent(session.agent.to_string()))
            {
                Ok(tools) => jsonrpc::result(id, ToolsList(&tools)),
                Err(e) => host_error(id, e),
            }
        }
        "tools/call" => call(sessions, session, id, params).await,
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
    match tools::call(sessions.host(), &session.agent, session.version, params).await {
        CallOutcome::Done(result) => jsonrpc::result(id, result),
        CallOutcome::Failed(failure) => jsonrpc::result(id, failure),
        CallOutcome::Rpc(code, message, data) => jsonrpc::error(id, code, &message, data.as_ref()),
    }
}

/// `GET /mcp/agents/{agentId}`: the session's server→client stream (Server-Sent Events,
/// `event: message`, one JSON-RPC notification per event). Opening a new stream ends the
/// previous one of the same session; [`super::end_streams`] ends them all.
pub async fn get(
    State(sessions): McpState,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) =
        authenticate(&sessions, &headers, &agent).and_then(|()| check_origin(&sessions, &headers))
    {
        return *r;
    }
    let session = match session_of(&sessions, &headers, &agent, &Value::Null) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let rx = session.open_stream();
    let ending = super::streams_ending();
    let revoked = token_revoked(&sessions, &headers);
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

/// `DELETE /mcp/agents/{agentId}`: ends the session (`204`); its stream closes and later
/// requests with its id get `404`.
pub async fn delete(
    State(sessions): McpState,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) =
        authenticate(&sessions, &headers, &agent).and_then(|()| check_origin(&sessions, &headers))
    {
        return *r;
    }
    match session_of(&sessions, &headers, &agent, &Value::Null) {
        Ok(session) => {
            sessions.remove(&session.id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(r) => *r,
    }
}
