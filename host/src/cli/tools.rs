//! `connector-host tools | grant | revoke`: effective tools and explicit grants.

use clap::Args;
use serde_json::{json, Value};

use super::client::{Body, Client};
use super::output::{self, cell, OutputArgs};
use super::CliError;

pub(crate) const TOOLS_HELP: &str = "\
PROVENANCE is `explicit`, `connector:<slug>`, `platform` or `image:<digest>`; INHERITED FROM
is the unit whose binding the tool came from.

Examples:
  connector-host tools --unit engineering
  connector-host tools --agent ada --json";

pub(crate) const GRANT_HELP: &str = "\
Explicit grants apply to that unit or agent only (they are not inherited).

Examples:
  connector-host grant --agent ada --tool github.get_issue
  connector-host grant --unit engineering --namespace acme
  connector-host revoke --agent ada --tool github.get_issue
  connector-host revoke --unit engineering --namespace acme";

/// Longest description shown in the table.
const DESCRIPTION_WIDTH: usize = 60;

/// A unit or an agent (exactly one).
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct Subject {
    /// A unit.
    #[arg(long, value_name = "UNIT")]
    pub unit: Option<String>,
    /// An agent.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
}

impl Subject {
    /// The route prefix: `("units", id)` or `("agents", id)`.
    pub fn path(&self) -> (&'static str, &str) {
        match (&self.unit, &self.agent) {
            (Some(unit), _) => ("units", unit),
            (None, Some(agent)) => ("agents", agent),
            // clap's group makes one of them required.
            (None, None) => ("units", ""),
        }
    }
}

/// A tool or a namespace (exactly one).
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct GrantTarget {
    /// One tool id, e.g. github.create_issue.
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,
    /// Every tool of a namespace, e.g. acme.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

impl GrantTarget {
    /// The tool id or the namespace.
    pub fn name(&self) -> &str {
        self.tool
            .as_deref()
            .or(self.namespace.as_deref())
            .unwrap_or_default()
    }

    /// The request body.
    pub fn body(&self) -> Value {
        match (&self.tool, &self.namespace) {
            (Some(tool), _) => json!({"tool": tool}),
            (None, Some(namespace)) => json!({"namespace": namespace}),
            (None, None) => json!({}),
        }
    }
}

/// `tools`.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(flatten)]
    pub subject: Subject,
}

/// `grant`.
#[derive(Debug, Args)]
pub struct GrantArgs {
    #[command(flatten)]
    pub subject: Subject,
    #[command(flatten)]
    pub target: GrantTarget,
}

/// `revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub subject: Subject,
    #[command(flatten)]
    pub target: GrantTarget,
}

/// `tools (--unit U | --agent A)`.
pub fn list(client: &Client, args: ToolsArgs, out: OutputArgs) -> Result<(), CliError> {
    let (kind, id) = args.subject.path();
    let reply = client.get(&[kind, id, "tools"], &[])?;
    let body = reply.body.unwrap_or(Value::Null);
    let Some(tools) = body.get("tools").and_then(Value::as_array) else {
        return Err(CliError::failed("the host answered without a `tools` list"));
    };
    output::show(out, &body, || render_tools_table(tools));
    Ok(())
}

/// `unit `x`` or `agent `x``.
fn subject_name(subject: &Subject) -> String {
    let (kind, id) = subject.path();
    format!("{} `{}`", kind.trim_end_matches('s'), cell(id))
}

/// `grant (--unit U | --agent A) (--tool T | --namespace N)`.
pub fn grant(client: &Client, args: GrantArgs, out: OutputArgs) -> Result<(), CliError> {
    let (kind, id) = args.subject.path();
    let grant = client
        .post(&[kind, id, "grants"], Body::Json(args.target.body()))?
        .body
        .unwrap_or(Value::Null);
    output::show(out, &grant, || {
        format!(
            "granted `{}` to {}",
            cell(args.target.name()),
            subject_name(&args.subject)
        )
    });
    Ok(())
}

/// `revoke (--unit U | --agent A) (--tool T | --namespace N)`.
pub fn revoke(client: &Client, args: RevokeArgs, out: OutputArgs) -> Result<(), CliError> {
    let (kind, id) = args.subject.path();
    client.delete(&[kind, id, "grants", args.target.name()], &[])?;
    output::show(out, &Value::Null, || {
        format!(
            "revoked `{}` from {}",
            cell(args.target.name()),
            subject_name(&args.subject)
        )
    });
    Ok(())
}

/// Renders `EffectiveTool`s as an aligned table: NAME, PROVENANCE, INHERITED FROM,
/// DESCRIPTION (first line, truncated). Ends with a newline; an empty list says so.
pub fn render_tools_table(tools: &[Value]) -> String {
    if tools.is_empty() {
        return "(no tools)\n".to_string();
    }
    let field = |tool: &Value, key: &str| {
        tool.get(key)
            .and_then(Value::as_str)
            .map(clean)
            .unwrap_or_default()
    };
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|tool| {
            let inherited = tool
                .get("inheritedFromUnit")
                .and_then(Value::as_str)
                .map(clean)
                .unwrap_or_else(|| "-".to_string());
            let description = tool
                .get("description")
                .and_then(Value::as_str)
                .and_then(|d| d.lines().map(str::trim).find(|l| !l.is_empty()))
                .map(|d| truncate(&clean(d), DESCRIPTION_WIDTH))
                .unwrap_or_default();
            [
                field(tool, "name"),
                field(tool, "provenance"),
                inherited,
                description,
            ]
        })
        .collect();
    let header = ["NAME", "PROVENANCE", "INHERITED FROM", "DESCRIPTION"];
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 4]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(cell);
                text.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
    out
}

/// A table cell: one line, control characters escaped (a hostile description could move
/// the cursor or reorder the row).
fn clean(text: &str) -> String {
    connector_model::ids::escape_controls(text)
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_aligned_and_truncated() {
        let tools = vec![
            json!({
                "name": "acme.echo",
                "namespace": "acme",
                "description": "Echoes its input back.\nSecond line is not shown.",
                "provenance": "connector:acme",
                "inheritedFromUnit": "engineering",
                "inputSchema": {},
                "annotations": {}
            }),
            json!({
                "name": "sv.tools.list",
                "namespace": "sv",
                "description": "x".repeat(100),
                "provenance": "platform",
                "inheritedFromUnit": null
            }),
        ];
        let table = render_tools_table(&tools);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            "NAME           PROVENANCE      INHERITED FROM  DESCRIPTION"
        );
        assert_eq!(
            lines[1],
            "acme.echo      connector:acme  engineering     Echoes its input back."
        );
        let expected = format!(
            "sv.tools.list  platform        -               {}…",
            "x".repeat(DESCRIPTION_WIDTH - 1)
        );
        assert_eq!(lines[2], expected);
        // Every column starts at the same character offset on every line.
        let column = |line: &str, n: usize| line.char_indices().nth(n).map(|(i, _)| i);
        assert_eq!(column(lines[0], 15), column(lines[1], 15));
    }

    #[test]
    fn empty_and_odd_inputs() {
        assert_eq!(render_tools_table(&[]), "(no tools)\n");
        let table = render_tools_table(&[json!({
            "name": "a.b\u{1b}[2J",
            "provenance": "explicit",
            "description": "x\rfake\u{202e}exe.txt",
        })]);
        assert!(
            !table.contains(['\u{1b}', '\r', '\u{202e}']),
            "control characters are neutralised: {table}"
        );
        let row = table.lines().nth(1).expect("row");
        assert!(row.starts_with(r"a.b\u{1b}[2J"), "{row}");
        assert!(row.ends_with(r"x\rfake\u{202e}exe.txt"), "{row}");
    }
}
