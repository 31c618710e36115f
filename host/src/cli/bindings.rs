//! `connector-host bind | unbind | bindings`: connectors bound to units.

use clap::Args;
use serde_json::{json, Value};

use super::client::Client;
use super::output::{self, cell, field, OutputArgs};
use super::{read_json_arg, CliError};

pub(crate) const BIND_HELP: &str = "\
Binding writes the binding and a grant of `<namespace>.*` in one step; binding again
replaces the configuration. The config must match the connector's configSchema
(see `connector-host connectors get SLUG`).

Examples (BINDING.json stands for a file holding the config):
  connector-host bind engineering acme
  connector-host bind engineering github --config '{\"repo\": \"octo/hello\"}'
  connector-host bind engineering github --config @BINDING.json";

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

/// The grants of a binding as `a, b`.
fn grants(binding: &Value) -> String {
    let tools: Vec<String> = binding
        .get("grants")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| field(g, "tool"))
        .collect();
    if tools.is_empty() {
        "-".to_string()
    } else {
        tools.join(", ")
    }
}

/// `bind UNIT SLUG`.
pub fn bind(client: &Client, args: BindArgs, out: OutputArgs) -> Result<(), CliError> {
    let config = read_json_arg("--config", &args.config)?;
    let reply = client.put(
        &["units", &args.unit, "connectors", &args.slug],
        json!({"config": config}),
    )?;
    let binding = reply.body.clone().unwrap_or(Value::Null);
    output::show(out, &binding, || {
        let what = if reply.written() == "created" {
            "bound to"
        } else {
            "rebound (config replaced) on"
        };
        format!(
            "`{}` {what} unit `{}`: grants {}",
            cell(&args.slug),
            cell(&args.unit),
            grants(&binding)
        )
    });
    Ok(())
}

/// `unbind UNIT SLUG`.
pub fn unbind(client: &Client, args: UnbindArgs, out: OutputArgs) -> Result<(), CliError> {
    client.delete(&["units", &args.unit, "connectors", &args.slug], &[])?;
    output::show(out, &Value::Null, || {
        format!(
            "`{}` unbound from unit `{}` (its grants revoked)",
            cell(&args.slug),
            cell(&args.unit)
        )
    });
    Ok(())
}

/// `bindings UNIT`.
pub fn list(client: &Client, args: BindingsArgs, out: OutputArgs) -> Result<(), CliError> {
    let body = client
        .get(&["units", &args.unit, "connectors"], &[])?
        .body
        .unwrap_or(Value::Null);
    output::show(out, &body, || {
        let rows: Vec<[String; 4]> = body
            .get("bindings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|b| {
                [
                    field(b, "connector"),
                    field(b, "boundAt"),
                    grants(b),
                    output::cut(
                        &cell(&b.get("config").map(Value::to_string).unwrap_or_default()),
                        60,
                    ),
                ]
            })
            .collect();
        output::table(
            ["CONNECTOR", "BOUND AT", "GRANTS", "CONFIG"],
            &rows,
            "(no bindings)",
        )
    });
    Ok(())
}
