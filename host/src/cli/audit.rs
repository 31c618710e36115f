//! `connector-host audit`: the audit log of the running host, as a table (or JSON), once
//! or followed; `connector-host audit verify`: whether its hash chain holds.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::output::OutputArgs;

use super::client::Client;
use super::CliError;

/// How often `--follow` asks for new records.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

pub const HELP: &str = "\
Examples:
  connector-host audit
  connector-host audit --actor-kind agent --actor-id ada --action tool.call
  connector-host audit --target binding:engineering/acme --json
  connector-host audit --since 2026-01-01T00:00:00Z --follow
  connector-host audit verify";

/// `audit`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
    #[command(flatten)]
    pub filters: Filters,
    /// Keep printing new records as they are written (until interrupted; with --json,
    /// one object per line).
    #[arg(long)]
    pub follow: bool,
}

/// `audit` subcommands.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Recompute the hash chain: one line, exit 1 when a record does not hold
    Verify(VerifyArgs),
}

/// `audit verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {}

/// What records to show.
#[derive(Debug, Args, Default)]
pub struct Filters {
    /// Only records after this seq.
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,
    /// How many records at most (1 to 1000; default 100). Ignored by --follow.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,
    /// Only this action (unit.put, binding.put, tool.call, delivery.routed, ...).
    #[arg(long, value_name = "ACTION")]
    pub action: Option<String>,
    /// Only this kind of actor.
    #[arg(long, value_name = "KIND", value_parser = ["operator", "console", "agent", "webhook", "host"])]
    pub actor_kind: Option<String>,
    /// Only this actor (an agent's id, a webhook's connector).
    #[arg(long, value_name = "ID")]
    pub actor_id: Option<String>,
    /// Only this target (unit:ID, agent:ID, binding:UNIT/SLUG, connector:SLUG, tool:ID, ...).
    #[arg(long, value_name = "TARGET")]
    pub target: Option<String>,
    /// Only records at or after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only records before this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

impl Filters {
    fn query(&self, after: u64, limit: Option<u32>) -> Vec<(&'static str, String)> {
        let mut query = vec![("after", after.to_string())];
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        let optional = [
            ("action", &self.action),
            ("actorKind", &self.actor_kind),
            ("actorId", &self.actor_id),
            ("target", &self.target),
            ("since", &self.since),
            ("until", &self.until),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                query.push((name, value.clone()));
            }
        }
        query
    }
}

/// Runs `audit` or `audit verify`.
pub fn run(client: &Client, args: AuditArgs, out: OutputArgs) -> Result<(), CliError> {
    match args.command {
        Some(AuditCommand::Verify(_)) => run_verify(client, out),
        None if args.follow => follow(client, &args, out),
        None => {
            let query = args
                .filters
                .query(args.filters.after.unwrap_or(0), args.filters.limit);
            let body = client.get(&["audit"], &query)?.body.unwrap_or(Value::Null);
            if out.json {
                super::print_json(&body);
                return Ok(());
            }
            let records = records_of(&body)?;
            super::print_out(&render_table(records, true));
            if let Some(next) = body.get("next").and_then(Value::as_i64) {
                super::print_err(&format!("more records: --after {next}"));
            }
            Ok(())
        }
    }
}

fn records_of(body: &Value) -> Result<&Vec<Value>, CliError> {
    body.get("records")
        .and_then(Value::as_array)
        .ok_or_else(|| CliError::failed("the host answered without a `records` list"))
}

/// Prints every record from `--after` on, then each new one as it is written.
fn follow(client: &Client, args: &AuditArgs, out: OutputArgs) -> Result<(), CliError> {
    let mut after = args.filters.after.unwrap_or(0);
    let mut header = !out.json;
    loop {
        let body = client
            .get(&["audit"], &args.filters.query(after, Some(1000)))?
            .body
            .unwrap_or(Value::Null);
        let records = records_of(&body)?;
        if let Some(last) = records.last().and_then(|r| r["seq"].as_u64()) {
            after = last;
        }
        if out.json {
            for record in records {
                super::print_out(&format!(
                    "{}\n",
                    super::json_for_terminals(&record.to_string())
                ));
            }
        } else if !records.is_empty() {
            super::print_out(&render_table(records, header));
            header = false;
        }
        if body.get("next").and_then(Value::as_i64).is_none() {
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
}

fn run_verify(client: &Client, out: OutputArgs) -> Result<(), CliError> {
    let body = client
        .get(&["audit", "verify"], &[])?
        .body
        .unwrap_or(Value::Null);
    let ok = body
        .get("ok")
        .and_then(Value::as_bool)
        .ok_or_else(|| CliError::failed("the host answered without `ok`"))?;
    let checked = body.get("checked").and_then(Value::as_u64).unwrap_or(0);
    if out.json {
        super::print_json(&body);
    } else if ok {
        super::print_out(&format!(
            "ok: the chain holds ({checked} records checked)\n"
        ));
    }
    if ok {
        return Ok(());
    }
    let broken = body
        .get("firstBroken")
        .and_then(Value::as_i64)
        .map_or_else(|| "?".to_string(), |seq| seq.to_string());
    Err(CliError::failed(format!(
        "the chain is broken at record {broken} ({checked} records checked): it or the record before it was edited, removed or reordered in the database"
    )))
}

/// The records as an aligned table: SEQ, AT, ACTOR, ACTION, TARGET, OUTCOME.
pub fn render_table(records: &[Value], header: bool) -> String {
    if records.is_empty() {
        return if header {
            "(no records)\n".to_string()
        } else {
            String::new()
        };
    }
    let text = |r: &Value, key: &str| {
        r.get(key)
            .and_then(Value::as_str)
            .map(connector_model::ids::escape_controls)
            .unwrap_or_default()
    };
    let rows: Vec<[String; 6]> = records
        .iter()
        .map(|r| {
            let actor = &r["actor"];
            let kind = actor["kind"].as_str().unwrap_or("?");
            let actor = match actor["id"].as_str() {
                Some(id) => format!("{kind}:{}", connector_model::ids::escape_controls(id)),
                None => kind.to_string(),
            };
            [
                r["seq"].as_i64().map(|s| s.to_string()).unwrap_or_default(),
                text(r, "at"),
                actor,
                text(r, "action"),
                text(r, "target"),
                text(r, "outcome"),
            ]
        })
        .collect();
    let titles = ["SEQ", "AT", "ACTOR", "ACTION", "TARGET", "OUTCOME"];
    let mut widths = titles.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 6]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            text.push_str(cell);
            if i + 1 < cells.len() {
                text.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    if header {
        line(titles);
    }
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_aligns_columns_and_escapes_what_a_terminal_would_obey() {
        let records = [
            json!({"seq": 1, "at": "2026-01-01T00:00:00.000Z", "actor": {"kind": "operator", "id": null},
                   "action": "unit.put", "target": "unit:eng", "outcome": "ok"}),
            json!({"seq": 12, "at": "2026-01-01T00:00:01.000Z", "actor": {"kind": "agent", "id": "ada"},
                   "action": "tool.call", "target": "tool:acme.\u{1b}[2Jecho", "outcome": "tool_failed"}),
        ];
        let table = render_table(&records, true);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("SEQ  AT"), "{table}");
        assert!(lines[2].contains("agent:ada"), "{table}");
        assert!(!table.contains('\u{1b}'), "{table}");
        let action = lines[0].find("ACTION").expect("ACTION column");
        assert_eq!(&lines[1][action..action + 8], "unit.put");
        assert_eq!(render_table(&[], true), "(no records)\n");
        assert_eq!(render_table(&[], false), "");
    }

    #[test]
    fn filters_become_the_contracts_query() {
        let filters = Filters {
            actor_kind: Some("agent".into()),
            target: Some("unit:eng".into()),
            ..Filters::default()
        };
        assert_eq!(
            filters.query(5, Some(10)),
            vec![
                ("after", "5".to_string()),
                ("limit", "10".to_string()),
                ("actorKind", "agent".to_string()),
                ("target", "unit:eng".to_string()),
            ]
        );
    }
}
