//! `connector-host serve`: the HTTP API, MCP and the console on one listener.

use anyhow::Context as _;
use axum::Router;
use connector_core::config::HostConfig;
use connector_core::Host;

/// Every route `serve` answers: the HTTP edge's (API, MCP, health, metrics) and the
/// console at `/console`.
pub fn router(host: Host) -> Router {
    let console = Router::new().nest("/console", connector_console::routes());
    connector_http::server::router_with(host, console)
}

/// Serves [`router`] on `listener` under the `server.*` bounds until `stop` resolves,
/// then lets open requests finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    host: Host,
    stop: impl std::future::Future<Output = ()>,
) {
    let limits = host.config().server;
    connector_http::server::serve_router_on(listener, limits, router(host), stop).await;
}

/// Opens the host on `config` and serves the API until Ctrl-C or SIGTERM.
pub async fn run(mut config: HostConfig) -> anyhow::Result<()> {
    raise_open_files_limit();
    let listen = config.listen;
    let data_dir = config.data_dir.clone();
    config.bundled = connector_bundled::components();
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
        .with_context(|| format!("cannot listen on {listen} (is another host running? use --listen to pick another address)"))?;
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
        connector_http::mcp::end_streams();
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
