//! `connector-host units ...`: the unit tree.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::Client;
use super::CliError;

/// `units` subcommands.
#[derive(Debug, Subcommand)]
pub enum UnitsCommand {
    /// Create or update a unit (PUT replaces it: without --parent it becomes a root)
    #[command(
        after_help = "Examples:\n  connector-host units put acme-corp --display-name 'ACME Corp'\n  connector-host units put engineering --parent acme-corp"
    )]
    Put(PutUnitArgs),
    /// Show a unit with its bindings and effective tools
    Get(UnitArg),
    /// Delete a unit (unbinds its connectors; refused while it has children)
    Delete(UnitArg),
}

/// `units put`.
#[derive(Debug, Args)]
pub struct PutUnitArgs {
    /// The unit id (letters, digits, `.`, `_`, `-`; up to 128 characters).
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// The parent unit (must exist); omit for a root unit.
    #[arg(long, value_name = "UNIT")]
    pub parent: Option<String>,
    /// A human name.
    #[arg(long, value_name = "NAME")]
    pub display_name: Option<String>,
}

/// A unit id.
#[derive(Debug, Args)]
pub struct UnitArg {
    /// The unit id.
    #[arg(value_name = "UNIT")]
    pub unit: String,
}

/// Runs a `units` subcommand.
pub fn run(client: &Client, command: UnitsCommand) -> Result<(), CliError> {
    match command {
        UnitsCommand::Put(args) => {
            let mut body = Map::new();
            body.insert(
                "parent".into(),
                args.parent.map(Value::String).unwrap_or(Value::Null),
            );
            if let Some(name) = args.display_name {
                body.insert("displayName".into(), json!(name));
            }
            client
                .put(&["units", &args.unit], Value::Object(body))?
                .print("");
        }
        UnitsCommand::Get(args) => client.get(&["units", &args.unit], &[])?.print(""),
        UnitsCommand::Delete(args) => client
            .delete(&["units", &args.unit], &[])?
            .print(&format!("unit `{}` deleted", args.unit)),
    }
    Ok(())
}
