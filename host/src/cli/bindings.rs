//! `connector-host bind | unbind | bindings`: connectors bound to units.

use clap::Args;
use serde_json::json;

use super::client::Client;
use super::{read_json_arg, CliError};

pub(crate) const BIND_HELP: &str = "\
Binding writes the binding and a grant of `<namespace>.*` in one step; binding again
replaces the configuration. The config must match the connector's configSchema
(see `connector-host connectors get SLUG`).

Examples:
  connector-host bind engineering github --config '{\"repo\": \"octo/hello\", \"installationId\": 42}'
  connector-host bind engineering github --config @github-binding.json";

/// `bind`.
#[derive(Debug, Args)]
pub struct BindArgs {
    /// The unit to bind to.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// The connector's slug.
    #[arg(value_name = "SLUG")]
    pub slug: String,
    /// The binding configuration: inline JSON, @FILE, or @- for stdin.
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    pub config: String,
}

/// `unbind`.
#[derive(Debug, Args)]
pub struct UnbindArgs {
    /// The unit.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// The connector's slug.
    #[arg(value_name = "SLUG")]
    pub slug: String,
}

/// `bindings`.
#[derive(Debug, Args)]
pub struct BindingsArgs {
    /// The unit.
    #[arg(value_name = "UNIT")]
    pub unit: String,
}

/// `bind UNIT SLUG`.
pub fn bind(client: &Client, args: BindArgs) -> Result<(), CliError> {
    let config = read_json_arg("--config", &args.config)?;
    client
        .put(
            &["units", &args.unit, "connectors", &args.slug],
            json!({"config": config}),
        )?
        .print("");
    Ok(())
}

/// `unbind UNIT SLUG`.
pub fn unbind(client: &Client, args: UnbindArgs) -> Result<(), CliError> {
    client
        .delete(&["units", &args.unit, "connectors", &args.slug], &[])?
        .print(&format!(
            "`{}` unbound from unit `{}`",
            args.slug, args.unit
        ));
    Ok(())
}

/// `bindings UNIT`.
pub fn list(client: &Client, args: BindingsArgs) -> Result<(), CliError> {
    client
        .get(&["units", &args.unit, "connectors"], &[])?
        .print("");
    Ok(())
}
