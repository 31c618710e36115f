//! `connector-host serve`: the host as a standalone HTTP server.

use crate::config::HostConfig;
use crate::host::Host;

/// Opens the host on `config` and serves the API until Ctrl-C or SIGTERM.
pub async fn serve(config: HostConfig) -> anyhow::Result<()> {
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
    eprintln!("connector-host listening on http://{local} (API under /api/v1)");
    // Graceful shutdown waits for open connections; a long-lived stream (a unit's message
    // stream, an MCP session) would hold it forever, so in-flight requests get a bounded
    // grace period after the signal.
    let stopping = std::sync::Arc::new(tokio::sync::Notify::new());
    let signalled = stopping.clone();
    let server = axum::serve(listener, host.router()).with_graceful_shutdown(async move {
        shutdown_signal().await;
        signalled.notify_one();
    });
    tokio::select! {
        result = server => result.map_err(|e| anyhow::anyhow!("server error: {e}"))?,
        _ = async {
            stopping.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("connections still open {SHUTDOWN_GRACE:?} after the stop signal; closing them"),
    }
    tracing::info!("connector-host stopped");
    Ok(())
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
