//! `connector-host agents ...`: agents, their units and their tokens.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::{Body, Client};
use super::output::{self, cell, field, list, OutputArgs};
use super::CliError;

/// `agents` subcommands.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List agents: every one, or the members of a unit (--unit)
    #[command(
        after_help = "Examples:\n  connector-host agents list\n  connector-host agents list --unit engineering --json"
    )]
    List(ListAgentsArgs),
    /// Create or update an agent and the units it belongs to (the first is its primary unit)
    #[command(
        after_help = "Examples:\n  connector-host agents put ada --unit engineering\n  connector-host agents put ada --unit engineering --unit research --display-name 'Ada'"
    )]
    Put(PutAgentArgs),
    /// Show an agent with its effective tools
    Get(AgentArg),
    /// Delete an agent
    Delete(AgentArg),
    /// Mint a token the agent uses for its own routes and the MCP endpoint
    #[command(
        after_help = "Prints the token and when it expires; --raw prints only the token, for a shell:\n  connector-host call ada acme.echo '{\"message\": \"hi\"}' --token \"$(connector-host agents token ada --raw)\"\n\nExamples:\n  connector-host agents token ada --ttl 3600\n  connector-host agents token ada --raw"
    )]
    Token(TokenArgs),
}

/// `agents list`.
#[derive(Debug, Args)]
pub struct ListAgentsArgs {
    /// Only the agents that belong to this unit.
    #[arg(long, value_name = "UNIT")]
    pub unit: Option<String>,
}

/// `agents put`.
#[derive(Debug, Args)]
pub struct PutAgentArgs {
    /// The agent id.
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// A unit the agent belongs to; repeat for several (the first is the primary unit).
    #[arg(long = "unit", value_name = "UNIT", required = true)]
    pub units: Vec<String>,
    /// A human name.
    #[arg(long, value_name = "NAME")]
    pub display_name: Option<String>,
}

/// An agent id.
#[derive(Debug, Args)]
pub struct AgentArg {
    /// The agent id.
    #[arg(value_name = "AGENT")]
    pub agent: String,
}

/// `agents token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The agent id.
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// Lifetime of the token in seconds (default: the host's).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub ttl: Option<u64>,
    /// Print only the token.
    #[arg(long, conflicts_with = "json")]
    pub raw: bool,
}

/// Runs an `agents` subcommand.
pub fn run(client: &Client, command: AgentsCommand, out: OutputArgs) -> Result<(), CliError> {
    match command {
        AgentsCommand::List(args) => {
            let query: Vec<(&str, String)> = args.unit.map(|u| ("unit", u)).into_iter().collect();
            let agents = client.get_all(&["agents"], &query, "agents")?;
            output::show(out, &json!({ "agents": agents }), || {
                let rows: Vec<[String; 3]> = agents
                    .iter()
                    .map(|a| [field(a, "id"), list(a, "units"), field(a, "displayName")])
                    .collect();
                output::table(["ID", "UNITS", "DISPLAY NAME"], &rows, "(no agents)")
            });
        }
        AgentsCommand::Put(args) => {
            let mut body = Map::new();
            body.insert("units".into(), json!(args.units));
            if let Some(name) = args.display_name {
                body.insert("displayName".into(), json!(name));
            }
            let reply = client.put(&["agents", &args.agent], Value::Object(body))?;
            let agent = reply.body.clone().unwrap_or(Value::Null);
            output::show(out, &agent, || {
                format!(
                    "agent `{}` {} (units {})",
                    cell(&args.agent),
                    reply.written(),
                    list(&agent, "units")
                )
            });
        }
        AgentsCommand::Get(args) => {
            let agent = client
                .get(&["agents", &args.agent], &[])?
                .body
                .unwrap_or(Value::Null);
            output::show(out, &agent, || {
                let tools = agent
                    .get("effectiveTools")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                format!(
                    "agent:         {}\nunits:         {}\ndisplay name:  {}\n\n{}",
                    field(&agent, "id"),
                    list(&agent, "units"),
                    field(&agent, "displayName"),
                    super::tools::render_tools_table(&tools)
                )
            });
        }
        AgentsCommand::Delete(args) => {
            client.delete(&["agents", &args.agent], &[])?;
            output::show(out, &Value::Null, || {
                format!("agent `{}` deleted", cell(&args.agent))
            });
        }
        AgentsCommand::Token(args) => {
            let body = match args.ttl {
                Some(ttl) => json!({"ttlSeconds": ttl}),
                None => json!({}),
            };
            let issued = client
                .post(&["agents", &args.agent, "tokens"], Body::Json(body))?
                .body
                .unwrap_or(Value::Null);
            let Some(token) = issued.get("token").and_then(Value::as_str) else {
                return Err(CliError::failed(
                    "the host answered without a `token`; check that --url names a connector host",
                ));
            };
            if args.raw {
                super::print_out(&format!("{token}\n"));
            } else {
                output::show(out, &issued, || {
                    format!("{token}  (expires {})", field(&issued, "expiresAt"))
                });
            }
        }
    }
    Ok(())
}
