//! The one output rule of the command line (CONTRACT §13): a table or a one-line summary
//! by default, the full JSON with `--json`, only the value with `--raw` where one value
//! is the point (a token, a digest).
//!
//! Commands build their tables and summaries here so that every table is aligned the
//! same way and every cell is one line with control characters escaped (much of what is
//! shown was written by a connector).

use clap::Args;
use serde_json::Value;

/// The output flags every command has.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputArgs {
    /// Print the full JSON answer instead of a table or a summary.
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
}

/// A string member of `value`, or `-` when absent or null (one line, escaped).
pub fn field(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(s)) => cell(s),
        Some(Value::Null) | None => "-".to_string(),
        Some(other) => cell(&other.to_string()),
    }
}

/// A list of strings as `a, b` (`-` when empty).
pub fn list(value: &Value, key: &str) -> String {
    let items: Vec<String> = value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().map(cell).unwrap_or_else(|| cell(&v.to_string())))
        .collect();
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(", ")
    }
}

/// A table cell: one line, control characters escaped.
pub fn cell(text: &str) -> String {
    connector_model::ids::escape_controls(text)
}

/// The first non-empty line of `text`, cut to `width` characters (`…` marks a cut).
pub fn first_line(text: &str, width: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    cut(&cell(line), width)
}

/// `text` cut to `width` characters, `…` marking the cut.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// An aligned table: `header`, then one line per row, columns two spaces apart, trailing
/// blanks trimmed; `empty` (e.g. `(no units)`) when there are no rows. Ends with a newline.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]], empty: &str) -> String {
    if rows.is_empty() {
        return format!("{empty}\n");
    }
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, c) in widths.iter_mut().zip(row) {
            *width = (*width).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut text = String::new();
        for (i, c) in cells.iter().enumerate() {
            text.push_str(c);
            if i + 1 < N {
                text.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

/// Prints `json` with `--json`, else `summary` (a table or a line) to stdout.
pub fn show(output: OutputArgs, json: &Value, summary: impl FnOnce() -> String) {
    if output.json {
        super::print_json(json);
    } else {
        let mut text = summary();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        super::print_out(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_escape() {
        let rows = vec![
            [
                "eng".to_string(),
                "-".to_string(),
                "acme, arxiv".to_string(),
            ],
            [
                "eng-backend".to_string(),
                "eng".to_string(),
                cell("x\u{1b}[2J"),
            ],
        ];
        let t = table(["ID", "PARENT", "BINDINGS"], &rows, "(none)");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ID           PARENT  BINDINGS");
        assert_eq!(lines[1], "eng          -       acme, arxiv");
        assert_eq!(lines[2], r"eng-backend  eng     x\u{1b}[2J");
        assert_eq!(table(["ID"], &[], "(no units)"), "(no units)\n");
    }

    #[test]
    fn fields_and_lists() {
        let v = json!({"a": "x", "b": null, "c": ["p", "q"], "d": [], "n": 3});
        assert_eq!(field(&v, "a"), "x");
        assert_eq!(field(&v, "b"), "-");
        assert_eq!(field(&v, "missing"), "-");
        assert_eq!(field(&v, "n"), "3");
        assert_eq!(list(&v, "c"), "p, q");
        assert_eq!(list(&v, "d"), "-");
        assert_eq!(first_line("\n  one\ntwo", 10), "one");
        assert_eq!(cut("abcdefgh", 4), "abc…");
    }
}
