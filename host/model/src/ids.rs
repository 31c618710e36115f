//! Ids and timestamps as the contract spells them.
//!
//! Every unit and agent id that enters the host is checked here, once, against the
//! contract's pattern; every timestamp the host writes is RFC 3339, UTC, to the second.

use crate::error::{HostError, HostResult};

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, checked byte by byte: it runs on every request
/// that names an agent or unit, where a regex engine was a measurable share of the cost.
fn matches_id_rule(id: &str) -> bool {
    let bytes = id.as_bytes();
    match bytes.split_first() {
        Some((first, rest)) => {
            first.is_ascii_alphanumeric()
                && rest.len() <= 127
                && rest
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => false,
    }
}

/// A SHA-256 written as digests (`sha256:<hex>`) and GitHub signatures (`sha256=<hex>`)
/// spell it: exactly 64 lowercase hex digits.
pub fn is_sha256_hex(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks a unit or agent id against the contract's id pattern.
pub fn check_id(kind: &str, id: &str) -> HostResult<()> {
    if matches_id_rule(id) {
        Ok(())
    } else {
        Err(HostError::invalid_request(format!(
            "{kind} id `{}` is invalid: ids match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$",
            truncate(id, 80)
        )))
    }
}

/// Whether `c` must not reach a terminal or a log raw: a control character (C0, DEL, C1:
/// escape sequences, carriage returns, bells) or a bidirectional embedding, override or
/// isolate (U+202A–U+202E, U+2066–U+2069), which reorders the text shown around it.
pub fn is_terminal_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [`is_terminal_control`] character (newlines, carriage returns,
/// escape sequences, bidi overrides) written as its Rust escape, so it stays on one log
/// line and changes no terminal.
pub fn escape_controls(text: &str) -> String {
    escape(text, false)
}

/// [`escape_controls`], except that newlines and tabs stay: for text whose lines are
/// meant (a table, pretty JSON, a message with details).
pub fn escape_controls_keeping_lines(text: &str) -> String {
    escape(text, true)
}

fn escape(text: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_terminal_control(c) && !(keep_lines && matches!(c, '\n' | '\t')) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `s` cut to `max` characters (with `…`), for echoing untrusted input in an error.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max).collect::<String>() + "…"
    }
}

/// RFC 3339 of now, UTC, second precision.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_contract_pattern() {
        for good in ["a", "A.b-c_d", "0", &"x".repeat(128)] {
            assert!(check_id("unit", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".a",
            "-a",
            "a/b",
            "a b",
            "ü",
            "a\n",
            "é1",
            &"x".repeat(129),
        ] {
            let err = check_id("unit", bad).expect_err(bad);
            assert_eq!(err.code, crate::ErrorCode::InvalidRequest);
        }
        assert_eq!(truncate("abcdef", 3), "abc…");
        let hostile = "a\u{1b}[2J\rb\nc\td\u{7f}\u{9b}e\u{202e}f\u{2066}g\u{200b}";
        assert_eq!(
            escape_controls(hostile),
            r"a\u{1b}[2J\rb\nc\td\u{7f}\u{9b}e\u{202e}f\u{2066}g".to_string() + "\u{200b}"
        );
        assert_eq!(
            escape_controls_keeping_lines(hostile),
            "a\\u{1b}[2J\\rb\nc\td\\u{7f}\\u{9b}e\\u{202e}f\\u{2066}g\u{200b}"
        );
        assert!(now_rfc3339().ends_with('Z'));
    }
}
