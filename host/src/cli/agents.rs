//! `connector-host agents ...`: agents, their units and their tokens.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::{Body, Client};
use super::CliError;

/// `agents` subcommands.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
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
    #[command(after_help = "Example:\n  connector-host agents token ada --ttl 3600")]
    Token(TokenArgs),
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
}

/// Runs an `agents` subcommand.
pub fn run(client: &Client, command: AgentsCommand) -> Result<(), CliError> {
    match command {
        AgentsCommand::Put(args) => {
            let mut body = Map::new();
            body.insert("units".into(), json!(args.units));
            if let Some(name) = args.display_name {
                body.insert("displayName".into(), json!(name));
            }
            client
                .put(&["agents", &args.agent], Value::Object(body))?
                .print("");
        }
        AgentsCommand::Get(args) => client.get(&["agents", &args.agent], &[])?.print(""),
        AgentsCommand::Delete(args) => client
            .delete(&["agents", &args.agent], &[])?
            .print(&format!("agent `{}` deleted", args.agent)),
        AgentsCommand::Token(args) => {
            let body = match args.ttl {
                Some(ttl) => json!({"ttlSeconds": ttl}),
                None => json!({}),
            };
            client
                .post(&["agents", &args.agent, "tokens"], Body::Json(body))?
                .print("");
        }
    }
    Ok(())
}
