//! `connector-host messages UNIT`: what webhooks became, for one unit.

use clap::Args;

use super::client::Client;
use super::CliError;

/// `messages`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  connector-host messages engineering --limit 20\n  connector-host messages engineering --after <the `next` cursor of the previous page>"
)]
pub struct MessagesArgs {
    /// The unit.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// Only messages after this cursor (the `next` of a previous answer).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// How many messages at most (1 to 500).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: Option<u32>,
}

/// Runs `messages`.
pub fn run(client: &Client, args: MessagesArgs) -> Result<(), CliError> {
    let mut query = Vec::new();
    if let Some(after) = args.after {
        query.push(("after", after));
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    client
        .get(&["units", &args.unit, "messages"], &query)?
        .print("");
    Ok(())
}
