//! `connector-host serve`.

/// Runs the server on `config` until Ctrl-C or SIGTERM.
pub async fn run(config: crate::config::HostConfig) -> anyhow::Result<()> {
    crate::server::serve(config).await
}
