//! `connector-host connectors ...`: the connectors installed in a running host.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use serde_json::Value;

use super::client::{Body, Client};
use super::output::{self, cell, field, OutputArgs};
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
        after_help = "Examples (FILE.wasm, REGISTRY, REPOSITORY and DIGEST are placeholders):\n  connector-host connectors install FILE.wasm\n  connector-host connectors install FILE.wasm --force --raw\n  connector-host connectors install oci://REGISTRY/REPOSITORY:TAG\n  connector-host connectors install oci://REGISTRY/REPOSITORY@sha256:DIGEST --accept-tool-changes\n\nPrints a one-line summary (--json: the connector with the rotation's toolChanges; --raw: its digest).\nCheck a component first, without a host: connector-host inspect FILE.wasm"
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
    /// Print only the installed component's digest.
    #[arg(long, conflicts_with = "json")]
    pub raw: bool,
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
pub fn run(client: &Client, command: ConnectorsCommand, out: OutputArgs) -> Result<(), CliError> {
    match command {
        ConnectorsCommand::List => {
            let body = client
                .get(&["connectors"], &[])?
                .body
                .unwrap_or(Value::Null);
            output::show(out, &body, || {
                let rows: Vec<[String; 6]> = body
                    .get("connectors")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        [
                            field(c, "slug"),
                            field(c, "toolNamespace"),
                            field(c, "version"),
                            tool_count(c).to_string(),
                            webhook(c),
                            output::cut(&field(c, "digest"), 19),
                        ]
                    })
                    .collect();
                output::table(
                    ["SLUG", "NAMESPACE", "VERSION", "TOOLS", "WEBHOOK", "DIGEST"],
                    &rows,
                    "(no connectors)",
                )
            });
        }
        ConnectorsCommand::Get(args) => {
            let c = client
                .get(&["connectors", &args.slug], &[])?
                .body
                .unwrap_or(Value::Null);
            output::show(out, &c, || describe(&c));
        }
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
            let reply = client.send(reqwest::Method::POST, &["connectors"], &query, body)?;
            let c = reply.body.clone().unwrap_or(Value::Null);
            if args.raw {
                super::print_out(&format!("{}\n", field(&c, "digest")));
                return Ok(());
            }
            output::show(out, &c, || {
                let verb = if reply.written() == "created" {
                    "installed"
                } else {
                    "rotated (bindings kept)"
                };
                let changes = c
                    .get("toolChanges")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                // Where it came from, when a registry: the reference pulled.
                let from = c
                    .get("source")
                    .and_then(Value::as_str)
                    .filter(|s| s.starts_with("oci://"))
                    .map(|s| format!(" from {}", cell(s)))
                    .unwrap_or_default();
                format!(
                    "connector `{}` {verb}{from}: version {}, {} tools, {} tool changes, {}",
                    field(&c, "slug"),
                    field(&c, "version"),
                    tool_count(&c),
                    changes,
                    field(&c, "digest")
                )
            });
        }
        ConnectorsCommand::Remove(args) => {
            let query = if args.force {
                vec![("force", "true".to_string())]
            } else {
                Vec::new()
            };
            client.delete(&["connectors", &args.slug], &query)?;
            output::show(out, &Value::Null, || {
                format!("connector `{}` removed", cell(&args.slug))
            });
        }
    }
    Ok(())
}

fn tool_count(c: &Value) -> usize {
    c.get("tools").and_then(Value::as_array).map_or(0, Vec::len)
}

fn webhook(c: &Value) -> String {
    c.get("webhook")
        .and_then(|w| w.get("scheme"))
        .and_then(Value::as_str)
        .map(cell)
        .unwrap_or_else(|| "-".to_string())
}

/// A connector as `connectors get` and `inspect` show it: its fields, then its tools.
pub(crate) fn describe(c: &Value) -> String {
    let hosts: Vec<String> = c
        .get("allowedHosts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(cell)
        .collect();
    let config: Vec<String> = c
        .get("configSchema")
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, _)| cell(k))
        .collect();
    let rows: Vec<[String; 2]> = c
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            [
                field(t, "name"),
                output::first_line(
                    t.get("description").and_then(Value::as_str).unwrap_or(""),
                    70,
                ),
            ]
        })
        .collect();
    let or_dash = |v: Vec<String>| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "connector:     {}\nnamespace:     {}\nname:          {}\nworld:         {}\nversion:       {}\ndigest:        {}\nwebhook:       {}\nallowed hosts: {}\nconfig:        {} (--json for the schema)\n\n{}",
        field(c, "slug"),
        field(c, "toolNamespace"),
        field(c, "displayName"),
        field(c, "world"),
        field(c, "version"),
        field(c, "digest"),
        webhook(c),
        or_dash(hosts),
        or_dash(config),
        output::table(["TOOL", "DESCRIPTION"], &rows, "(no tools)")
    )
}
