//! `connector-host inspect FILE.wasm`, and what it shares with a local `call`: loading a
//! component in a throw-away runtime, exactly as the host would before installing it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::output::OutputArgs;
use super::CliError;
use connector_core::registry::{ConnectorRegistry, InstallError, InstalledConnector};
use connector_runtime::{ConnectorRuntime, GuestLimits, RuntimeOptions};

pub(crate) const HELP: &str = "\
Runs the same checks as installing into a host (component world, naming rules, schemas),
without a host. On success prints the connector as `connectors get` does (slug, namespace,
world, version, digest, webhook scheme, allowed hosts, config fields, its tools); --json
prints the `Connector` JSON. On failure prints the error, the rule it broke and the
offending id, and exits with 1.

Example (FILE.wasm stands for your component file):
  connector-host inspect FILE.wasm";

/// `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The component to inspect.
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
}

/// Runs `inspect`.
pub async fn run(args: InspectArgs, out: OutputArgs) -> Result<(), CliError> {
    let bytes = read_component(&args.file)?;
    let registry = local_registry()?;
    let connector = prepare(&registry, &bytes).await?;
    let unrenderable = |e: serde_json::Error| {
        CliError::failed(format!("could not render the connector description: {e}"))
    };
    if out.json {
        // Serialised straight from the struct: fields in the contract's order.
        let json = serde_json::to_string_pretty(connector.info()).map_err(unrenderable)?;
        super::print_out(&format!("{}\n", super::json_for_terminals(&json)));
    } else {
        let info = serde_json::to_value(connector.info()).map_err(unrenderable)?;
        super::print_out(&super::connectors::describe(&info));
    }
    Ok(())
}

/// Reads a component file (exit code 2 when it cannot be read).
pub(crate) fn read_component(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path)
        .map_err(|e| CliError::usage(format!("could not read {}: {e}", path.display())))
}

/// A registry over a small runtime of its own (no GitHub App), compiling through the
/// local cache ([`super::local_cache`]).
pub(crate) fn local_registry() -> Result<ConnectorRegistry, CliError> {
    let options = |cache_dir| RuntimeOptions {
        limits: GuestLimits {
            // One command runs one guest at a time: keep the instance pool small.
            max_concurrent_instances: 4,
            ..GuestLimits::default()
        },
        cache_dir,
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    };
    let cache_dir = super::local_cache::local_cache_dir();
    let runtime = match ConnectorRuntime::new(options(cache_dir.clone())) {
        Ok(runtime) => runtime,
        // An unwritable cache directory costs time, not the command.
        Err(e) if cache_dir.is_some() => {
            tracing::warn!(
                "compiling without a cache ({e:#}); set {} to a writable directory, or to `off`",
                connector_core::config::ENV_CACHE_DIR
            );
            ConnectorRuntime::new(options(None)).map_err(|e| CliError::failed(format!("{e:#}")))?
        }
        Err(e) => return Err(CliError::failed(format!("{e:#}"))),
    };
    Ok(ConnectorRegistry::new(Arc::new(runtime)))
}

/// Loads, describes and validates a component; a rejection names the rule and the id.
pub(crate) async fn prepare(
    registry: &ConnectorRegistry,
    bytes: &[u8],
) -> Result<InstalledConnector, CliError> {
    registry
        .prepare(bytes)
        .await
        .map_err(|e| CliError::failed(install_error_message(&e)))
}

/// `<message>`, then `rule: <rule>` and `offending id: <id>` lines.
pub(crate) fn install_error_message(e: &InstallError) -> String {
    let mut message = format!("{e}\nrule: {}", e.rule());
    if let Some(id) = e.offending_id() {
        message.push_str(&format!("\noffending id: {id}"));
    }
    message
}
