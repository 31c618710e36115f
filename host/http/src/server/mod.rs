//! The host as an HTTP server: [`router`] mounts the operator API (`/api/v1`), MCP
//! (`/mcp/agents/{agentId}`), health and metrics side by side, and [`router_with`] adds a
//! front end of the caller's (the `connector-host` binary adds the console at `/console`)
//! inside the same host-name check and replica catch-up; [`serve_on`] serves a router on
//! a listener under the `server.*` bounds ([`connections`]).

pub mod connections;

use crate::ApiError;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use connector_trace::InSpan;
use serde_json::{json, Value};

use connector_core::host::Host;
use connector_model::error::HostError;

/// Every HTTP route of the host, ready to serve or to nest in a platform's router.
pub fn router(host: Host) -> Router {
    router_with(host, Router::new())
}

/// [`router`] with `more` routes (e.g. the console's) mounted beside the API and MCP,
/// under the same host-name check, replica catch-up and error shape.
pub fn router_with(host: Host, more: Router<Host>) -> Router {
    // Everything that reads or writes state first catches up with other replicas;
    // liveness and metrics do not. The layer is there only when other processes write
    // the database: otherwise the catch-up has nothing to do, and a layer costs every
    // request a turn through it.
    let mut stateful = Router::new()
        .merge(crate::api::routes())
        .merge(more)
        .merge(crate::mcp::router(host.clone()));
    if host.follows_other_writers() {
        stateful = stateful.route_layer(axum::middleware::from_fn_with_state(
            host.clone(),
            refresh_first,
        ));
    }
    // The request spans' layers only where spans are traced (`connector_trace::is_tracing`,
    // decided before the router is built).
    let tracing = connector_trace::is_tracing();
    if tracing {
        stateful = stateful.route_layer(axum::middleware::from_fn(record_traced_route));
    }
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/metrics", get(metrics))
        .merge(stateful)
        .fallback(not_found)
        .with_state(host.clone());
    // What every request passes through wraps the routes once, as one service: a layer
    // of the router itself would wrap each route apart, and each wrapping is one more
    // boxed service that every request clones and calls through.
    let edge = tower::Layer::layer(&axum::middleware::from_fn_with_state(host, edge), routes);
    let router = Router::new().fallback_service(edge);
    if tracing {
        router.layer(axum::middleware::from_fn(traced))
    } else {
        router
    }
}

/// The host-name check ([`refused_host_name`]) and the contract's error shape
/// ([`json_errors`]), for every request.
async fn edge(
    State(host): State<Host>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = match refused_host_name(&host, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    json_errors(response).await
}

/// Each request is a span (CONTRACT §11), a child of the caller's when it sends a W3C
/// `traceparent`; nothing is done when no trace is exported.
async fn traced(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let headers = request.headers();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let span = connector_trace::span("HTTP request")
        .named(|| request.method().to_string())
        .kind(connector_trace::Kind::Server)
        .attr("http.request.method", request.method().as_str())
        .attr("url.path", request.uri().path())
        .remote_parent(
            header(connector_trace::TRACEPARENT),
            header(connector_trace::TRACESTATE),
        )
        .start();
    let response = next.run(request).in_span(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// Records the route the request matched (`/api/v1/agents/{agentId}/tool-calls`) on its
/// span, so that spans of one route group together whatever the ids in the path.
async fn record_traced_route(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(route) = request.extensions().get::<axum::extract::MatchedPath>() {
        connector_trace::Span::current().record("http.route", route.as_str());
    }
    next.run(request).await
}

/// Puts the errors axum answers by itself (a method the route does not take, a path
/// parameter that is not valid UTF-8, an extractor's rejection) in the contract's JSON
/// shape, keeping their status and their text as the message. Errors already in JSON
/// (ours, and MCP's JSON-RPC errors) pass as they are.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.contains("json"));
    // The console answers its errors as pages of its own (text/html).
    let is_page = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    if is_json || is_page {
        return response;
    }
    use connector_model::error::ErrorCode;
    let code = match status.as_u16() {
        401 => ErrorCode::Unauthenticated,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        405 => ErrorCode::MethodNotAllowed,
        408 => ErrorCode::RequestTimeout,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        503 => ErrorCode::HostBusy,
        400..=499 => ErrorCode::InvalidRequest,
        _ => ErrorCode::Internal,
    };
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let message = match text.trim() {
        "" if status == axum::http::StatusCode::METHOD_NOT_ALLOWED => {
            "this route does not take this method".to_string()
        }
        "" => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
        text => connector_model::ids::escape_controls(&connector_model::ids::truncate(text, 300)),
    };
    // The original headers stay (Allow, CORS, Retry-After, ...); only the body and what
    // describes it change.
    let (json_parts, json_body) = ApiError(HostError::new(code, message))
        .into_response()
        .into_parts();
    let mut answer = Response::from_parts(parts, json_body);
    let headers = answer.headers_mut();
    headers.remove(axum::http::header::CONTENT_LENGTH);
    for name in [
        axum::http::header::CONTENT_TYPE,
        axum::http::header::CONTENT_LENGTH,
    ] {
        if let Some(value) = json_parts.headers.get(&name) {
            headers.insert(name, value.clone());
        }
    }
    answer
}

/// The answer to a request for a host name `server.allowed_host_names` does not allow:
/// a page that rebinds its own DNS name to 127.0.0.1 reaches the server with its own
/// name in `Host`. `None` for a request the server answers.
fn refused_host_name(host: &Host, request: &axum::extract::Request) -> Option<Response> {
    let host_header = request.headers().get(axum::http::header::HOST);
    if host_header.is_some_and(|v| v.to_str().is_err()) {
        return Some(
            ApiError(HostError::invalid_request("the Host header is not ASCII")).into_response(),
        );
    }
    let named = host_header
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    match named {
        Some(name) if !host.config().allows_host_name(name) => Some(ApiError(HostError::new(
            connector_model::error::ErrorCode::Forbidden,
            format!(
                "this server does not answer for host `{}`; an operator can allow it in server.allowed_host_names",
                connector_model::ids::truncate(name, 100)
            ),
        ))
        .into_response()),
        _ => None,
    }
}

/// Refreshes this replica's state before the request is handled; `503` if the shared
/// database cannot be asked.
async fn refresh_first(
    State(host): State<Host>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match host.refresh().await {
        Ok(()) => next.run(request).await,
        Err(e) => ApiError(e).into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError(HostError::not_found(
        "no such route; the API lives under /api/v1 (see CONTRACT.md §3)",
    ))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(host): State<Host>) -> Response {
    let m = host.metrics();
    let commits = host.commit_counts();
    let body = format!(
        "# HELP connector_host_tool_calls_total Tool calls by outcome.\n\
         # TYPE connector_host_tool_calls_total counter\n\
         connector_host_tool_calls_total{{outcome=\"ok\"}} {}\n\
         connector_host_tool_calls_total{{outcome=\"failed\"}} {}\n\
         connector_host_tool_calls_total{{outcome=\"rejected\"}} {}\n\
         # HELP connector_host_connectors Installed connectors.\n\
         # TYPE connector_host_connectors gauge\n\
         connector_host_connectors {}\n\
         # HELP connector_host_store_commits_total Database commits of grouped writes.\n\
         # TYPE connector_host_store_commits_total counter\n\
         connector_host_store_commits_total {}\n\
         # HELP connector_host_store_writes_total Writes those commits held.\n\
         # TYPE connector_host_store_writes_total counter\n\
         connector_host_store_writes_total {}\n\
         # HELP connector_host_trace_spans_dropped_total Spans dropped because the trace export queue was full.\n\
         # TYPE connector_host_trace_spans_dropped_total counter\n\
         connector_host_trace_spans_dropped_total {}\n\
         # HELP connector_host_trace_spans_not_delivered_total Spans the trace collector did not take.\n\
         # TYPE connector_host_trace_spans_not_delivered_total counter\n\
         connector_host_trace_spans_not_delivered_total {}\n",
        m.tool_calls_ok.load(Ordering::Relaxed),
        m.tool_calls_failed.load(Ordering::Relaxed),
        m.tool_calls_rejected.load(Ordering::Relaxed),
        host.list_connectors().len(),
        commits.commits,
        commits.writes,
        connector_trace::spans_dropped(),
        connector_trace::spans_not_delivered(),
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}

/// Serves `host` on `listener` under its `server.*` bounds until `stop` resolves, then
/// lets open requests finish (a platform embedding the host can nest [`router`] in its
/// own server instead).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    host: Host,
    stop: impl std::future::Future<Output = ()>,
) {
    serve_router_on(listener, host.config().server, router(host), stop).await;
}

/// Serves `router` (e.g. from [`router_with`]) on `listener` under `limits` until `stop`
/// resolves, then lets open requests finish.
pub async fn serve_router_on(
    listener: tokio::net::TcpListener,
    limits: connector_core::config::ServerLimits,
    router: Router,
    stop: impl std::future::Future<Output = ()>,
) {
    connections::serve(listener, router, limits, stop).await;
}
