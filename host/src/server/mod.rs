//! The host as an HTTP server: [`router`] mounts the operator API (`/api/v1`), MCP
//! (`/mcp/agents/{agentId}`), the operator console (`/console`), health and metrics side
//! by side; [`serve_on`] serves it on a listener under the `server.*` bounds
//! ([`connections`]); [`serve`] runs it as `connector-host serve`.

pub mod connections;

use crate::http::ApiError;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::config::HostConfig;
use crate::host::Host;
use connector_model::error::HostError;

/// Every HTTP route of the host, ready to serve or to nest in a platform's router.
pub fn router(host: Host) -> Router {
    // Everything that reads or writes state first catches up with other replicas
    // (a no-op unless the database is shared); liveness and metrics do not.
    let stateful = Router::new()
        .nest("/api/v1", crate::api::routes())
        .nest("/console", crate::console::routes())
        .merge(crate::mcp::router(host.clone()))
        .route_layer(axum::middleware::from_fn_with_state(
            host.clone(),
            refresh_first,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/metrics", get(metrics))
        .merge(stateful)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            host.clone(),
            allowed_host_only,
        ))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(host)
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

/// Answers only requests for a host name `server.allowed_host_names` allows: a page that
/// rebinds its own DNS name to 127.0.0.1 reaches the server with its own name in `Host`.
async fn allowed_host_only(
    State(host): State<Host>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host_header = request.headers().get(axum::http::header::HOST);
    if host_header.is_some_and(|v| v.to_str().is_err()) {
        return ApiError(HostError::invalid_request("the Host header is not ASCII"))
            .into_response();
    }
    let named = host_header
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match named {
        Some(name) if !host.config().allows_host_name(&name) => ApiError(HostError::new(
            connector_model::error::ErrorCode::Forbidden,
            format!(
                "this server does not answer for host `{}`; an operator can allow it in server.allowed_host_names",
                connector_model::ids::truncate(&name, 100)
            ),
        ))
        .into_response(),
        _ => next.run(request).await,
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
    let commits = host.store().commit_counts();
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
         connector_host_store_writes_total {}\n",
        m.tool_calls_ok.load(Ordering::Relaxed),
        m.tool_calls_failed.load(Ordering::Relaxed),
        m.tool_calls_rejected.load(Ordering::Relaxed),
        host.list_connectors().len(),
        commits.commits,
        commits.writes,
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
    let limits = host.config().server;
    connections::serve(listener, router(host), limits, stop).await;
}

/// Opens the host on `config` and serves the API until Ctrl-C or SIGTERM.
pub async fn serve(config: HostConfig) -> anyhow::Result<()> {
    raise_open_files_limit();
    let listen = config.listen;
    let data_dir = config.data_dir.clone();
    let (host, report) = Host::open(config).await?;
    if let Some(token) = &report.generated_operator_token {
        // Printed once, on the run that generated it; it is also in the data directory.
        eprintln!(
            "Generated an operator token (saved to {}):\n  {token}\nUse it as `Authorization: Bearer <token>` or CONNECTOR_HOST_OPERATOR_TOKEN.",
            data_dir.join("operator-token").display()
        );
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e} (is another host running? use --listen to pick another address)"))?;
    let local = listener.local_addr().unwrap_or(listen);
    tracing::info!(address = %local, connectors = host.list_connectors().len(), "connector-host listening");
    eprintln!(
        "connector-host listening on http://{local} (API under /api/v1, operator console at http://{local}/console)"
    );
    // Open requests finish after the signal; a long-lived stream (a unit's message
    // stream, an MCP session) would hold them forever, so they get a bounded grace period.
    let stopping = std::sync::Arc::new(tokio::sync::Notify::new());
    let signalled = stopping.clone();
    let server = serve_on(listener, host.clone(), async move {
        shutdown_signal().await;
        // Open MCP streams would otherwise hold the graceful shutdown open.
        crate::mcp::end_streams();
        signalled.notify_one();
    });
    tokio::select! {
        () = server => {}
        _ = async {
            stopping.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("connections still open {SHUTDOWN_GRACE:?} after the stop signal; closing them"),
    }
    tracing::info!("connector-host stopped");
    Ok(())
}

/// Raises this process's soft open-files limit to its hard limit: every connection is a
/// descriptor, and the server serves no more connections than the limit leaves room for.
fn raise_open_files_limit() {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let limit = getrlimit(Resource::Nofile);
        if limit.current < limit.maximum {
            let raised = rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            };
            if let Err(e) = setrlimit(Resource::Nofile, raised) {
                tracing::debug!(error = %e, "could not raise the open-files limit");
            }
        }
    }
}

/// How long in-flight requests may run on after Ctrl-C or SIGTERM.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
