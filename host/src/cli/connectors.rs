//! `connector-host connectors ...`: the connectors installed in a running host.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::client::{Body, Client};
use super::CliError;

/// `connectors` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConnectorsCommand {
    /// List the installed connectors
    List,
    /// Show one connector: tools, config schema, webhook scheme, allowed hosts
    Get(SlugArg),
    /// Install a component, or rotate the one with the same slug (bindings stay)
    #[command(
        after_help = "Example:\n  connector-host connectors install target/wasm32-wasip2/release/acme.wasm\n\nCheck a component first, without a host: connector-host inspect FILE.wasm"
    )]
    Install(InstallArgs),
    /// Remove a connector (refused while bound, unless --force)
    Remove(RemoveArgs),
}

/// A connector slug.
#[derive(Debug, Args)]
pub struct SlugArg {
    /// The connector's slug.
    #[arg(value_name = "SLUG")]
    pub slug: String,
}

/// `connectors install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The component (`.wasm`).
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
}

/// `connectors remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The connector's slug.
    #[arg(value_name = "SLUG")]
    pub slug: String,
    /// Unbind it everywhere first (revoking the grants of those bindings).
    #[arg(long)]
    pub force: bool,
}

/// Runs a `connectors` subcommand.
pub fn run(client: &Client, command: ConnectorsCommand) -> Result<(), CliError> {
    match command {
        ConnectorsCommand::List => client.get(&["connectors"], &[])?.print(""),
        ConnectorsCommand::Get(args) => client.get(&["connectors", &args.slug], &[])?.print(""),
        ConnectorsCommand::Install(args) => {
            let bytes = std::fs::read(&args.file).map_err(|e| {
                CliError::usage(format!("could not read {}: {e}", args.file.display()))
            })?;
            client.post(&["connectors"], Body::Wasm(bytes))?.print("");
        }
        ConnectorsCommand::Remove(args) => {
            let query = if args.force {
                vec![("force", "true".to_string())]
            } else {
                Vec::new()
            };
            client
                .delete(&["connectors", &args.slug], &query)?
                .print(&format!("connector `{}` removed", args.slug));
        }
    }
    Ok(())
}
