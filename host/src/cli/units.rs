//! `connector-host units ...`: the unit tree.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::Client;
use super::output::{self, field, list, OutputArgs};
use super::CliError;

/// `units` subcommands.
#[derive(Debug, Subcommand)]
pub enum UnitsCommand {
    /// List units: every one, the roots (--roots) or one unit's children (--parent)
    #[command(
        after_help = "Examples:\n  connector-host units list\n  connector-host units list --parent acme-corp\n  connector-host units list --roots --json"
    )]
    List(ListUnitsArgs),
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

/// `units list`.
#[derive(Debug, Args)]
pub struct ListUnitsArgs {
    /// Only the children of this unit.
    #[arg(long, value_name = "UNIT", conflicts_with = "roots")]
    pub parent: Option<String>,
    /// Only units without a parent.
    #[arg(long)]
    pub roots: bool,
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
pub fn run(client: &Client, command: UnitsCommand, out: OutputArgs) -> Result<(), CliError> {
    match command {
        UnitsCommand::List(args) => {
            let mut query = Vec::new();
            if let Some(parent) = args.parent {
                query.push(("parent", parent));
            } else if args.roots {
                query.push(("parent", String::new()));
            }
            let units = client.get_all(&["units"], &query, "units")?;
            output::show(out, &json!({ "units": units }), || units_table(&units));
        }
        UnitsCommand::Put(args) => {
            let mut body = Map::new();
            body.insert(
                "parent".into(),
                args.parent.map(Value::String).unwrap_or(Value::Null),
            );
            if let Some(name) = args.display_name {
                body.insert("displayName".into(), json!(name));
            }
            let reply = client.put(&["units", &args.unit], Value::Object(body))?;
            let unit = reply.body.clone().unwrap_or(Value::Null);
            output::show(out, &unit, || {
                format!(
                    "unit `{}` {} (parent {})",
                    output::cell(&args.unit),
                    reply.written(),
                    field(&unit, "parent")
                )
            });
        }
        UnitsCommand::Get(args) => {
            let unit = client
                .get(&["units", &args.unit], &[])?
                .body
                .unwrap_or(Value::Null);
            output::show(out, &unit, || describe(&unit));
        }
        UnitsCommand::Delete(args) => {
            client.delete(&["units", &args.unit], &[])?;
            output::show(out, &Value::Null, || {
                format!("unit `{}` deleted", output::cell(&args.unit))
            });
        }
    }
    Ok(())
}

/// The `units list` table.
fn units_table(units: &[Value]) -> String {
    let rows: Vec<[String; 5]> = units
        .iter()
        .map(|u| {
            [
                field(u, "id"),
                field(u, "parent"),
                field(u, "displayName"),
                list(u, "bindings"),
                u.get("agents").map(Value::to_string).unwrap_or_default(),
            ]
        })
        .collect();
    output::table(
        ["ID", "PARENT", "DISPLAY NAME", "BINDINGS", "AGENTS"],
        &rows,
        "(no units)",
    )
}

/// A unit as `units get` shows it: its fields, its bindings, its effective tools.
fn describe(unit: &Value) -> String {
    let bindings: Vec<String> = unit
        .get("bindings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|b| field(b, "connector"))
        .collect();
    let tools = unit
        .get("effectiveTools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    format!(
        "unit:          {}\nparent:        {}\ndisplay name:  {}\nbindings:      {}\n\n{}",
        field(unit, "id"),
        field(unit, "parent"),
        field(unit, "displayName"),
        if bindings.is_empty() {
            "-".to_string()
        } else {
            bindings.join(", ")
        },
        super::tools::render_tools_table(&tools)
    )
}
