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
    /// Install a component (a file or an OCI reference), or rotate the one with the same
    /// slug (bindings stay)
    #[command(
        after_help = "Examples:\n  connector-host connectors install target/wasm32-wasip2/release/acme.wasm\n  connector-host connectors install oci://127.0.0.1:5000/acme/echo:v1\n  connector-host connectors install oci://REGISTRY/REPOSITORY@sha256:DIGEST --accept-tool-changes\n\nThe answer lists the rotation's toolChanges. Check a component first, without a host: connector-host inspect FILE.wasm"
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
    /// The component: a `.wasm` file, or oci://<registry>/<repository>:<tag> (or
    /// @sha256:<digest>) for the host to pull.
    #[arg(value_name = "FILE.wasm|oci://…")]
    pub file: PathBuf,
    /// Accept changed tool definitions (where the host pins them).
    #[arg(long)]
    pub accept_tool_changes: bool,
    /// Unbind the bindings the new version rejects instead of refusing the rotation.
    #[arg(long)]
    pub force: bool,
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
            let body = match args.file.to_str().filter(|f| f.starts_with("oci://")) {
                Some(reference) => Body::Json(serde_json::json!({"source": reference})),
                None => Body::Wasm(std::fs::read(&args.file).map_err(|e| {
                    CliError::usage(format!("could not read {}: {e}", args.file.display()))
                })?),
            };
            let mut query = Vec::new();
            if args.accept_tool_changes {
                query.push(("acceptToolChanges", "true".to_string()));
            }
            if args.force {
                query.push(("force", "true".to_string()));
            }
            client
                .send(reqwest::Method::POST, &["connectors"], &query, body)?
                .print("");
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
