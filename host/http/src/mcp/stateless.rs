//! The stateless revision `2026-07-28` on `/mcp/agents/{agentId}`.
//!
//! There is no `initialize` and no session: every request carries its revision and the
//! client's capabilities in `params._meta`, and mirrors its method (and a tool call's
//! name) in the `Mcp-Method` / `Mcp-Name` headers, which must match the body (else `400`
//! with `HeaderMismatch`, so a gateway that routes on headers cannot be steered by a body
//! that says something else). Nothing is kept between requests, so any replica answers
//! any request.
//!
//! Methods: `server/discover`, `tools/list`, `tools/call`, `subscriptions/listen`. Results
//! carry `resultType` and the server's identity in `_meta`; list and discover results
//! carry caching hints (`ttlMs`, `cacheScope: "private"`: the list is this agent's).
//! `subscriptions/listen` is the one long request: its response is an SSE stream that
//! acknowledges the filter, then carries `notifications/tools/list_changed` each time the
//! agent's effective tools change. It is pushed from the change itself
//! ([`Host::watch_tools`](connector_core::host::Host::watch_tools)): a bind, a grant, a rotation,
//! or a change another replica made (seen by that replica's background refresh).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use connector_trace::InSpan;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::http::{
    invalid_request, json_response, rpc_error, token_revoked, Rejection, ServerInfo, SERVER_INFO,
    VERSION_HEADER,
};
use super::jsonrpc::{
    self, classify, Incoming, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
    UNSUPPORTED_VERSION,
};
use super::session::{Listener, Sessions, MAX_LISTENERS_PER_AGENT};
use super::tools::{self, CallOutcome, ToolsList};
use super::{Endpoint, SESSION_HEADER, STATELESS_VERSION};
use connector_model::error::ErrorCode;
use connector_model::ids::UnitId;
use connector_model::records::Subject;

/// `_meta` key: the request's protocol revision.
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the `subscriptions/listen` request a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `Mcp-Method`.
pub const METHOD_HEADER: &str = "mcp-method";
/// `Mcp-Name`.
pub const NAME_HEADER: &str = "mcp-name";
/// How long a client may use a `tools/list` result without asking again. Changes are
/// also pushed on `subscriptions/listen`, and a call of a tool no longer granted is
/// answered `-32002`, which tells a client to list again.
pub const TOOLS_TTL_MS: u64 = 60_000;
/// How long a `server/discover` result stays fresh (it changes only with the host).
pub const DISCOVER_TTL_MS: u64 = 3_600_000;

/// Whether a POST speaks the stateless revision: its `_meta` names a protocol revision
/// (then even `initialize`, which that revision answers `404` / `-32601`), or it is not
/// `initialize`, carries no session and its `MCP-Protocol-Version` is the stateless
/// revision. (A session id, a plain `initialize`, or neither mark the session revisions.)
pub fn wants(headers: &HeaderMap, message: &Value) -> bool {
    let names_version = message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(PROTOCOL_VERSION))
        .is_some();
    let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
    names_version
        || (!initialize
            && !headers.contains_key(SESSION_HEADER)
            && headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) == Some(STATELESS_VERSION))
}

/// The server's identity, in every result's `_meta`
/// (`io.modelcontextprotocol/serverInfo`).
#[derive(Serialize)]
struct ServerMeta {
    #[serde(rename = "io.modelcontextprotocol/serverInfo")]
    server_info: ServerInfo,
}

const SERVER: ServerMeta = ServerMeta {
    server_info: SERVER_INFO,
};

/// A complete result: `body`'s fields, `resultType`, the server's identity and, for
/// cacheable results, the caching hints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Complete<T: Serialize> {
    #[serde(flatten)]
    body: T,
    result_type: &'static str,
    #[serde(rename = "_meta")]
    meta: &'static ServerMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_scope: Option<&'static str>,
}

fn complete<T: Serialize>(id: &Value, body: T, ttl_ms: Option<u64>) -> Response {
    let result = Complete {
        body,
        result_type: "complete",
        meta: &SERVER,
        ttl_ms,
        cache_scope: ttl_ms.map(|_| "private"),
    };
    json_response(StatusCode::OK, jsonrpc::result(id, result))
}

/// `400` with `HeaderMismatch`.
fn mismatch(id: &Value, message: &str) -> Rejection {
    Box::new(rpc_error(
        StatusCode::BAD_REQUEST,
        id,
        HEADER_MISMATCH,
        &format!("Header mismatch: {message}"),
    ))
}

/// A header's value, `Err` (answered `HeaderMismatch`) when it is not visible ASCII.
fn header_text<'h>(
    headers: &'h HeaderMap,
    name: &str,
    id: &Value,
) -> Result<Option<&'h str>, Rejection> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            mismatch(
                id,
                &format!("the {name} header holds characters a header may not"),
            )
        }),
    }
}

/// `Mcp-Name` as sent: plain, or `=?base64?…?=` for names that are not plain ASCII.
fn decode_name(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(raw.to_string()),
    }
}

/// What a client sent, cut to a length an error message can quote.
fn shorten(s: &str) -> String {
    connector_model::ids::truncate(s, 100)
}

/// Checks what every stateless request must carry: `MCP-Protocol-Version` equal to
/// `_meta`'s revision, which must be the stateless one; `_meta`'s client capabilities;
/// `Mcp-Method` equal to the method; for `tools/call`, `Mcp-Name` equal to the tool name.
fn check(
    headers: &HeaderMap,
    id: &Value,
    method: &str,
    params: Option<&Value>,
) -> Result<(), Rejection> {
    let Some(header_version) = header_text(headers, VERSION_HEADER, id)? else {
        return Err(mismatch(id, "the MCP-Protocol-Version header is required"));
    };
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    let Some(version) = meta
        .and_then(|m| m.get(PROTOCOL_VERSION))
        .and_then(Value::as_str)
    else {
        return Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            INVALID_PARAMS,
            &format!(
                "Invalid params: `params._meta[\"{PROTOCOL_VERSION}\"]` (a string) is required"
            ),
        )));
    };
    if header_version != version {
        return Err(mismatch(
            id,
            &format!(
                "MCP-Protocol-Version header `{}` does not match `_meta` `{}`",
                shorten(header_version),
                shorten(version)
            ),
        ));
    }
    if version != STATELESS_VERSION {
        let data = json!({ "supported": [STATELESS_VERSION], "requested": shorten(version) });
        let message = format!(
            "Unsupported protocol version `{}`: per-request `_meta` is served at {STATELESS_VERSION}; 2025-11-25, 2025-06-18 and 2025-03-26 are served through `initialize` sessions",
            shorten(version)
        );
        return Err(Box::new(json_response(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(id, UNSUPPORTED_VERSION, &message, Some(&data)),
        )));
    }
    if !meta
        .and_then(|m| m.get(CLIENT_CAPABILITIES))
        .is_some_and(Value::is_object)
    {
        return Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            INVALID_PARAMS,
            &format!(
                "Invalid params: `params._meta[\"{CLIENT_CAPABILITIES}\"]` (an object) is required"
            ),
        )));
    }
    match header_text(headers, METHOD_HEADER, id)? {
        None => return Err(mismatch(id, "the Mcp-Method header is required")),
        Some(m) if m != method => {
            return Err(mismatch(
                id,
                &format!(
                    "Mcp-Method header `{}` does not match the method `{}`",
                    shorten(m),
                    shorten(method)
                ),
            ))
        }
        Some(_) => {}
    }
    // `Mcp-Name` mirrors the tool's name, or the resource's URI.
    let named = match method {
        "tools/call" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(field) = named {
        let name = params.and_then(|p| p.get(field)).and_then(Value::as_str);
        let header = header_text(headers, NAME_HEADER, id)?;
        match (header, name) {
            (None, Some(_)) => {
                return Err(mismatch(
                    id,
                    &format!("the Mcp-Name header is required for {method}"),
                ))
            }
            (Some(raw), name) => {
                let decoded = decode_name(raw);
                if decoded.as_deref() != name {
                    return Err(mismatch(
                        id,
                        &format!(
                            "Mcp-Name header `{}` does not match the {} `{}`",
                            shorten(raw),
                            if field == "uri" {
                                "resource URI"
                            } else {
                                "tool name"
                            },
                            shorten(name.unwrap_or(""))
                        ),
                    ));
                }
            }
            // No name at all: the method answers that itself.
            (None, None) => {}
        }
    }
    Ok(())
}

/// The arguments a tool's input schema marks with `x-mcp-header`, reached from the root
/// through `properties` only: (the property path, the header's name part).
pub fn mirrored_params(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header").and_then(Value::as_str) {
            out.push((path.clone(), name.to_string()));
        }
        mirrored_params(property, path, out);
        path.pop();
    }
}

/// The value at `path` (property names from the root) in a call's arguments.
pub fn argument_at<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(arguments, |v, key| v.map(|v| v.get(key)))
        .flatten()
}

/// `Mcp-Param-{Name}` headers: each argument the tool's input schema marks `x-mcp-header`
/// that has a value must come with its header, equal to it once the `=?base64?…?=` form
/// is decoded (integers compared as numbers, booleans as `true`/`false`); else `400`
/// `HeaderMismatch`, and the tool does not run. An argument without a value needs none.
fn check_mirrored_params(
    schema: &Value,
    arguments: Option<&Value>,
    headers: &HeaderMap,
    id: &Value,
) -> Result<(), Rejection> {
    let mut marked = Vec::new();
    mirrored_params(schema, &mut Vec::new(), &mut marked);
    for (path, name) in marked {
        let Some(value) = argument_at(arguments, &path).filter(|v| !v.is_null()) else {
            continue;
        };
        let header = format!("mcp-param-{name}");
        let Some(raw) = header_text(headers, &header, id)? else {
            return Err(mismatch(
                id,
                &format!(
                    "the Mcp-Param-{} header is required: argument `{}` has a value",
                    shorten(&name),
                    shorten(&path.join("."))
                ),
            ));
        };
        let Some(sent) = decode_name(raw) else {
            return Err(mismatch(
                id,
                &format!(
                    "the Mcp-Param-{} header is not valid base64",
                    shorten(&name)
                ),
            ));
        };
        let equal = match value {
            Value::String(s) => sent == *s,
            Value::Bool(b) => sent == b.to_string(),
            Value::Number(n) => sent.trim().parse::<f64>().ok() == n.as_f64(),
            // Objects and arrays cannot be mirrored: such an annotation is invalid and
            // clients drop the tool, so there is nothing to compare.
            _ => true,
        };
        if !equal {
            return Err(mismatch(
                id,
                &format!(
                    "Mcp-Param-{} header `{}` does not match argument `{}`",
                    shorten(&name),
                    shorten(raw),
                    shorten(&path.join("."))
                ),
            ));
        }
    }
    Ok(())
}

/// Answers one stateless POST (`message`, already parsed) to `endpoint`.
pub async fn serve(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    message: Value,
) -> Response {
    let (id, method, params) =
        match classify(message) {
            Ok(Incoming::Request { id, method, params }) => (id, method, params),
            // No client notification is defined at this revision; accepting one costs nothing.
            Ok(Incoming::Notification { .. }) => return StatusCode::ACCEPTED.into_response(),
            Ok(Incoming::Response) => return rpc_error(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: this server sends no requests, so there is nothing to respond to",
            ),
            Err(invalid) => return invalid_request(&invalid),
        };
    if let Err(refused) = check(headers, &id, &method, params.as_ref()) {
        return *refused;
    }
    let span = super::message_span(&method, params.as_ref());
    answer(sessions, endpoint, headers, id, method, params)
        .in_span(span)
        .await
}

/// Answers one checked request.
async fn answer(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    id: Value,
    method: String,
    params: Option<Value>,
) -> Response {
    let agent = &*endpoint.agent;
    let host = sessions.host();
    match method.as_str() {
        "server/discover" => complete(
            &id,
            json!({
                "supportedVersions": [STATELESS_VERSION],
                "capabilities": {
                    "tools": { "listChanged": true },
                    "resources": super::http::RESOURCES,
                },
                "instructions": super::http::instructions(endpoint),
            }),
            Some(DISCOVER_TTL_MS),
        ),
        "tools/list" => {
            if let Some(m) = tools::refused_cursor(params.as_ref()) {
                return rpc_error(StatusCode::OK, &id, INVALID_PARAMS, m);
            }
            match host.effective_tools(&Subject::Agent(agent.to_string())) {
                Ok(list) => {
                    if !endpoint.naming.is_canonical() {
                        // Logs what this naming leaves out, once per tool set.
                        let _ = sessions.fingerprint(endpoint);
                    }
                    complete(&id, ToolsList(&list, &endpoint.naming), Some(TOOLS_TTL_MS))
                }
                Err(e) => not_found_or_internal(&id, e),
            }
        }
        "resources/list" => {
            if let Some(m) = tools::refused_cursor(params.as_ref()) {
                return rpc_error(StatusCode::OK, &id, INVALID_PARAMS, m);
            }
            match super::resources::list(host, agent) {
                Ok(list) => complete(&id, list, Some(TOOLS_TTL_MS)),
                Err(e) => not_found_or_internal(&id, e),
            }
        }
        "resources/templates/list" => {
            complete(&id, super::resources::templates(), Some(DISCOVER_TTL_MS))
        }
        // A unit's inbox grows at any time: not to be reused (`ttlMs: 0`), and the
        // agent's own (`private`).
        "resources/read" => match super::resources::read(host, agent, params.as_ref()).await {
            Ok(contents) => complete(&id, contents, Some(0)),
            Err((code, message, data)) => json_response(
                StatusCode::OK,
                jsonrpc::error(&id, code, &message, (!data.is_null()).then_some(&data)),
            ),
        },
        "tools/call" => {
            let tool = params
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            // An ambiguous name has no schema to check here: `tools/call` refuses it.
            let tool =
                tools::canonical_id(host, agent, &endpoint.naming, tool).unwrap_or_default();
            if let Ok(list) = host.effective_tools(&Subject::Agent(agent.to_string())) {
                if let Some(tool) = list.get(&tool) {
                    let arguments = params.as_ref().and_then(|p| p.get("arguments"));
                    if let Err(refused) =
                        check_mirrored_params(&tool.info.input_schema, arguments, headers, &id)
                    {
                        return *refused;
                    }
                }
            }
            let acting = host.acting_as(crate::auth::caller(host, headers));
            call(&acting, endpoint, &id, params).await
        }
        "subscriptions/listen" => listen(sessions, endpoint, headers, id, params).await,
        _ => rpc_error(
            StatusCode::NOT_FOUND,
            &id,
            METHOD_NOT_FOUND,
            &format!(
                "Method not found: `{}` (at {STATELESS_VERSION} this server offers server/discover, tools/list, tools/call, resources/list, resources/templates/list, resources/read, subscriptions/listen)",
                shorten(&method)
            ),
        ),
    }
}

/// `tools/call` at this revision.
async fn call(
    host: &connector_core::host::Host,
    endpoint: &Endpoint,
    id: &Value,
    params: Option<Value>,
) -> Response {
    match tools::call(
        host,
        &endpoint.agent,
        &endpoint.naming,
        STATELESS_VERSION,
        params,
    )
    .await
    {
        CallOutcome::Done(result) => complete(id, result, None),
        CallOutcome::Failed(failure) => complete(id, failure, None),
        CallOutcome::Rpc(code, message, data) => json_response(
            StatusCode::OK,
            jsonrpc::error(id, code, &message, data.as_ref()),
        ),
    }
}

/// Not found is `-32602` at this revision (the agent was deleted meanwhile).
fn not_found_or_internal(id: &Value, e: connector_model::error::HostError) -> Response {
    let code = if e.code == ErrorCode::NotFound {
        INVALID_PARAMS
    } else {
        jsonrpc::INTERNAL_ERROR
    };
    rpc_error(StatusCode::OK, id, code, &e.message)
}

/// A notification of subscription `id` as the text of one SSE event.
fn notification(method: &str, id: &Value, extra: Option<(&str, Value)>) -> String {
    let mut params = Map::new();
    params.insert("_meta".into(), json!({ SUBSCRIPTION_ID: id }));
    if let Some((k, v)) = extra {
        params.insert(k.into(), v);
    }
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// `subscriptions/listen`: an SSE stream that first acknowledges the filter (what of it
/// this server offers: `toolsListChanged`, `resourcesListChanged`, and
/// `resourceSubscriptions` naming the agent's units' inboxes; a URI the agent may not
/// read refuses the whole request, `-32602`), then carries
/// `notifications/tools/list_changed` each time the endpoint's tool list changes,
/// `notifications/resources/list_changed` when the agent's units change, and
/// `notifications/resources/updated` for each subscribed inbox that received messages.
/// It ends with a final result when the server shuts down, and without one when the
/// token it was opened with stops being valid or the agent is deleted.
async fn listen(
    sessions: &Arc<Sessions>,
    endpoint: &Endpoint,
    headers: &HeaderMap,
    id: Value,
    params: Option<Value>,
) -> Response {
    let agent = &*endpoint.agent;
    let filter = params.as_ref().and_then(|p| p.get("notifications"));
    let wants = |key: &str| filter.and_then(|n| n.get(key)).and_then(Value::as_bool) == Some(true);
    let tools_wanted = wants("toolsListChanged");
    let resources_wanted = wants("resourcesListChanged");
    let mut uris: Vec<String> = Vec::new();
    let mut units: Vec<UnitId> = Vec::new();
    match filter.and_then(|n| n.get("resourceSubscriptions")) {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for uri in list {
                let Some(uri) = uri.as_str() else {
                    return rpc_error(
                        StatusCode::OK,
                        &id,
                        INVALID_PARAMS,
                        "Invalid params: `resourceSubscriptions` holds URIs (strings)",
                    );
                };
                match super::resources::check(sessions.host(), agent, uri) {
                    Ok(parsed) => {
                        let base = super::resources::uri_of(&parsed.unit);
                        if !units.contains(&parsed.unit) {
                            units.push(parsed.unit);
                            uris.push(base);
                        }
                    }
                    Err((code, message, data)) => {
                        return json_response(
                            StatusCode::OK,
                            jsonrpc::error(&id, code, &message, Some(&data)),
                        )
                    }
                }
            }
        }
        Some(_) => {
            return rpc_error(
                StatusCode::OK,
                &id,
                INVALID_PARAMS,
                "Invalid params: `resourceSubscriptions` is a list of resource URIs",
            )
        }
    }
    let Some(listener) = sessions.listen(agent) else {
        return rpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            &id,
            INVALID_REQUEST,
            &format!(
                "Too many subscriptions: agent `{agent}` already has {MAX_LISTENERS_PER_AGENT} open; close one first"
            ),
        );
    };
    // Watch first, then take the baselines: a change between the two is not missed.
    let changes = sessions.host().watch_tools();
    let messages = match sessions.host().watch_messages(units).await {
        Ok(watch) => watch,
        Err(e) => return not_found_or_internal(&id, e),
    };
    let baseline = match sessions.fingerprint(endpoint) {
        Ok(print) => print,
        Err(e) => return not_found_or_internal(&id, e),
    };
    let resources_baseline = super::resources::fingerprint(sessions.host(), agent).unwrap_or(0);
    let mut acknowledged = Map::new();
    if tools_wanted {
        acknowledged.insert("toolsListChanged".into(), Value::Bool(true));
    }
    if resources_wanted {
        acknowledged.insert("resourcesListChanged".into(), Value::Bool(true));
    }
    if !uris.is_empty() {
        acknowledged.insert("resourceSubscriptions".into(), json!(uris));
    }
    let ack = notification(
        "notifications/subscriptions/acknowledged",
        &id,
        Some(("notifications", Value::Object(acknowledged))),
    );
    struct Listening {
        sessions: Arc<Sessions>,
        endpoint: Endpoint,
        id: Value,
        tools_wanted: bool,
        resources_wanted: bool,
        known: u64,
        known_resources: u64,
        changes: tokio::sync::watch::Receiver<u64>,
        messages: connector_core::host::MessageWatch,
        ending: tokio::sync::watch::Receiver<bool>,
        revoked: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        /// Notifications to send before waiting again (the acknowledgement first).
        queue: std::collections::VecDeque<String>,
        done: bool,
        /// Counts this stream against the agent until it ends.
        _listener: Listener,
    }
    let state = Listening {
        sessions: sessions.clone(),
        endpoint: endpoint.clone(),
        id,
        tools_wanted,
        resources_wanted,
        known: baseline,
        known_resources: resources_baseline,
        changes,
        messages,
        ending: super::streams_ending(),
        revoked: token_revoked(sessions, headers),
        queue: [ack].into(),
        done: false,
        _listener: listener,
    };
    let events = futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(note) = s.queue.pop_front() {
                return Some((Ok::<_, Infallible>(Event::default().data(note)), s));
            }
            if s.done {
                return None;
            }
            enum Woken {
                Ending,
                Revoked,
                Changed(bool),
                Messages(Vec<String>),
            }
            let woken = tokio::select! {
                biased;
                _ = s.ending.wait_for(|end| *end) => Woken::Ending,
                () = &mut s.revoked => Woken::Revoked,
                changed = s.changes.changed() => Woken::Changed(changed.is_ok()),
                units = s.messages.next() => Woken::Messages(units),
            };
            match woken {
                Woken::Ending => {
                    // Ended by the server: say so with the request's final result.
                    s.done = true;
                    let end = json!({
                        "jsonrpc": "2.0",
                        "id": s.id,
                        "result": {"resultType": "complete", "_meta": { SUBSCRIPTION_ID: s.id }},
                    });
                    return Some((Ok(Event::default().data(end.to_string())), s));
                }
                Woken::Revoked | Woken::Changed(false) => return None,
                Woken::Changed(true) => {
                    // The agent is gone: nothing left to listen to.
                    let print = s.sessions.fingerprint(&s.endpoint).ok()?;
                    if print != s.known {
                        s.known = print;
                        if s.tools_wanted {
                            let note =
                                notification("notifications/tools/list_changed", &s.id, None);
                            s.queue.push_back(note);
                        }
                    }
                    let host = s.sessions.host();
                    let units = super::resources::fingerprint(host, &s.endpoint.agent)?;
                    if units != s.known_resources {
                        s.known_resources = units;
                        if s.resources_wanted {
                            let note =
                                notification("notifications/resources/list_changed", &s.id, None);
                            s.queue.push_back(note);
                        }
                    }
                }
                Woken::Messages(units) => {
                    let host = s.sessions.host();
                    for unit in units {
                        let uri = super::resources::uri_of(&unit);
                        // An agent that left the unit hears no more of it.
                        if super::resources::check(host, &s.endpoint.agent, &uri).is_ok() {
                            let note = notification(
                                "notifications/resources/updated",
                                &s.id,
                                Some(("uri", Value::String(uri))),
                            );
                            s.queue.push_back(note);
                        }
                    }
                }
            }
        }
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_decode_from_the_base64_sentinel() {
        assert_eq!(decode_name("acme.echo").as_deref(), Some("acme.echo"));
        assert_eq!(
            decode_name("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_name("=?base64?not base64?="), None);
    }

    #[test]
    fn mirrored_arguments_are_found_through_properties_only() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "filter": {"type": "object", "properties": {
                "team": {"type": "string", "x-mcp-header": "Team"}}},
            "tags": {"type": "array", "items": {"type": "string", "x-mcp-header": "Tag"}},
            "plain": {"type": "string"}}});
        let mut found = Vec::new();
        mirrored_params(&schema, &mut Vec::new(), &mut found);
        found.sort();
        assert_eq!(
            found,
            [
                (
                    vec!["filter".to_string(), "team".to_string()],
                    "Team".to_string()
                ),
                (vec!["region".to_string()], "Region".to_string()),
            ]
        );
        let mut headers = HeaderMap::new();
        headers.insert("mcp-param-region", HeaderValue::from_static("eu"));
        headers.insert(
            "mcp-param-team",
            HeaderValue::from_static("=?base64?Y29yZQ==?="),
        );
        let args = json!({"region": "eu", "filter": {"team": "core"}, "tags": ["x"]});
        assert!(check_mirrored_params(&schema, Some(&args), &headers, &json!(1)).is_ok());
        let args = json!({"region": "eu", "filter": {"team": "edge"}});
        assert!(check_mirrored_params(&schema, Some(&args), &headers, &json!(1)).is_err());
    }

    #[test]
    fn the_revision_is_read_from_meta_or_a_sessionless_header() {
        let modern = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        let plain = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        let none = HeaderMap::new();
        let mut header = HeaderMap::new();
        header.insert(VERSION_HEADER, HeaderValue::from_static("2026-07-28"));
        let mut in_session = header.clone();
        in_session.insert(SESSION_HEADER, HeaderValue::from_static("s"));
        assert!(wants(&none, &modern));
        assert!(wants(&in_session, &modern));
        assert!(wants(&header, &plain));
        assert!(
            !wants(&in_session, &plain),
            "a session's request at any revision"
        );
        assert!(!wants(&none, &plain));
        let plain_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25"}});
        assert!(
            wants(&none, &init),
            "2026-07-28 answers its own `initialize`: 404"
        );
        assert!(!wants(&header, &plain_init));
        assert!(!wants(&none, &plain_init));
    }
}
