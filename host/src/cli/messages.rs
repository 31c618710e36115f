//! `connector-host messages UNIT`: what webhooks became, for one unit; `--follow` keeps
//! reading them as they arrive (the unit's Server-Sent Events stream).

use std::io::{BufRead, Read as _};
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::client::Client;
use super::output::{self, field, OutputArgs};
use super::CliError;

/// The longest wait between two attempts to reconnect a followed stream.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);
/// The longest SSE line read (a message is at most what the host stores of a payload).
const MAX_EVENT_LINE: usize = 64 * 1024 * 1024;

/// `messages`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples (--after takes the `next` a previous page printed; 0 is the start):\n  connector-host messages engineering --limit 20\n  connector-host messages engineering --after 0\n  connector-host messages engineering --follow\n\nWith --follow, every stored message after --after (all when absent) is printed, then each new\none as it arrives, until interrupted; --json prints one JSON object per line."
)]
pub struct MessagesArgs {
    /// The unit.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// Only messages after this cursor (the `next` of a previous answer).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// How many messages at most (1 to 500).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500), conflicts_with = "follow")]
    pub limit: Option<u32>,
    /// Keep printing messages as they arrive.
    #[arg(long)]
    pub follow: bool,
}

/// Runs `messages`.
pub fn run(client: &Client, args: MessagesArgs, out: OutputArgs) -> Result<(), CliError> {
    if args.follow {
        return follow(client, &args.unit, args.after, out);
    }
    let mut query = Vec::new();
    if let Some(after) = args.after {
        query.push(("after", after));
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    let body = client
        .get(&["units", &args.unit, "messages"], &query)?
        .body
        .unwrap_or(Value::Null);
    output::show(out, &body, || {
        let rows: Vec<[String; 5]> = body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(row)
            .collect();
        let mut text = output::table(
            ["RECEIVED AT", "CONNECTOR", "KIND", "THREAD", "TEXT"],
            &rows,
            "(no messages)",
        );
        text.push_str(&format!("next: {}\n", field(&body, "next")));
        text
    });
    Ok(())
}

fn row(m: &Value) -> [String; 5] {
    let text = m
        .get("payload")
        .and_then(|p| p.get("text").and_then(Value::as_str).map(str::to_string))
        .or_else(|| m.get("payload").map(Value::to_string))
        .unwrap_or_default();
    [
        field(m, "receivedAt"),
        field(m, "connector"),
        field(m, "kind"),
        field(m, "threadKey"),
        output::first_line(&text, 60),
    ]
}

/// Follows the unit's stream, reconnecting (from the last message seen) when the
/// connection drops, with a bounded backoff.
fn follow(
    client: &Client,
    unit: &str,
    mut last: Option<String>,
    out: OutputArgs,
) -> Result<(), CliError> {
    let mut wait = Duration::from_millis(250);
    let mut connected_once = false;
    loop {
        match client.open_stream(&["units", unit, "messages", "stream"], last.as_deref()) {
            Ok(response) => {
                connected_once = true;
                wait = Duration::from_millis(250);
                read_events(response, &mut last, out);
                super::print_err("the stream ended; reconnecting");
            }
            // Refusals (unknown unit, a bad token) stop at once; a host that went away
            // after answering once is waited for.
            Err(e) if !connected_once || !super::client::is_unreachable(&e) => return Err(e),
            Err(_) => super::print_err(&format!(
                "waiting for the host (next attempt in {} ms)",
                wait.as_millis()
            )),
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(MAX_RECONNECT_WAIT);
    }
}

/// Prints every event of one connection; `last` follows the last event id.
fn read_events(response: reqwest::blocking::Response, last: &mut Option<String>, out: OutputArgs) {
    let mut reader = std::io::BufReader::new(response);
    let mut data = String::new();
    let mut id: Option<String> = None;
    let mut line = String::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_EVENT_LINE as u64)
            .read_line(&mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            if !data.is_empty() {
                print_message(&data, out);
                if id.is_some() {
                    *last = id.take();
                }
            }
            data.clear();
            continue;
        }
        if let Some(d) = text.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        } else if let Some(i) = text.strip_prefix("id:") {
            id = Some(i.trim().to_string());
        }
    }
}

fn print_message(data: &str, out: OutputArgs) {
    let message: Value = serde_json::from_str(data).unwrap_or_else(|_| json!(data));
    if out.json {
        let line = serde_json::to_string(&message).unwrap_or_default();
        super::print_out(&format!("{}\n", super::json_for_terminals(&line)));
    } else {
        super::print_out(&format!("{}\n", row(&message).join("  ")));
    }
}
