//! Ids and timestamps as the contract spells them.
//!
//! A unit id, an agent id, a connector slug and a canonical tool id each have a type
//! ([`UnitId`], [`AgentId`], [`Slug`], [`ToolId`]) that only checked text becomes: each
//! id is checked once, where it enters the host (a request, the command line, a method of
//! `Host`, the configuration, a stored row), and the parts behind take the type, so none
//! of them checks again. Every timestamp the host writes is RFC 3339, UTC, to the second.

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

/// The rule an id's text follows, and the refusal that names it.
struct IdRule {
    /// The rule as a pattern, for people.
    pattern: &'static str,
    /// What ids of the rule are called, in a refusal (`ids`, `slugs`).
    plural: &'static str,
    matches: fn(&str) -> bool,
}

/// Unit and agent ids: [`matches_id_rule`].
const ID: IdRule = IdRule {
    pattern: "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
    plural: "ids",
    matches: matches_id_rule,
};

/// Connector slugs: [`crate::connector::SLUG_RULE`].
const SLUG: IdRule = IdRule {
    pattern: crate::connector::SLUG_RULE,
    plural: "slugs",
    matches: crate::connector::is_slug,
};

/// Canonical tool ids: [`crate::connector::TOOL_ID_RULE`].
const TOOL_ID: IdRule = IdRule {
    pattern: crate::connector::TOOL_ID_RULE,
    plural: "tool ids",
    matches: crate::connector::is_tool_id,
};

impl IdRule {
    fn matches(&self, text: &str) -> bool {
        (self.matches)(text)
    }

    /// `400 invalid_request`: `what` `text` breaks the rule (text cut to 80 characters).
    fn refusal(&self, what: &str, text: &str) -> HostError {
        HostError::invalid_request(format!(
            "{what} `{}` is invalid: {} match {}",
            truncate(text, 80),
            self.plural,
            self.pattern
        ))
    }
}

/// A value a method takes as an id of type `T`: the id itself, passed on as is, or text,
/// checked (a `&str` names an id as it always did, and a malformed one is refused with
/// the id's own `400 invalid_request`).
pub trait IntoId<T>: AsRef<str> + Sized {
    /// The id, or why the text is none.
    fn into_id(self) -> HostResult<T>;
}

/// Declares a checked id: a `String` known to follow `$rule`, made only by checking text
/// ([`FromStr`], [`TryFrom`], deserializing, [`IntoId`]), read as the `str` it is.
macro_rules! checked_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $rule:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// `text` as this id, or `400 invalid_request` naming the rule it breaks.
            pub fn parse(text: &str) -> HostResult<Self> {
                Self::try_from(text.to_string())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = HostError;

            fn try_from(text: String) -> HostResult<Self> {
                if $rule.matches(&text) {
                    Ok(Self(text))
                } else {
                    Err($rule.refusal($what, &text))
                }
            }
        }

        impl TryFrom<&str> for $name {
            type Error = HostError;

            fn try_from(text: &str) -> HostResult<Self> {
                Self::parse(text)
            }
        }

        impl std::str::FromStr for $name {
            type Err = HostError;

            fn from_str(text: &str) -> HostResult<Self> {
                Self::parse(text)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::try_from(text).map_err(|e| serde::de::Error::custom(e.message))
            }
        }

        impl IntoId<$name> for $name {
            fn into_id(self) -> HostResult<$name> {
                Ok(self)
            }
        }

        impl IntoId<$name> for &$name {
            fn into_id(self) -> HostResult<$name> {
                Ok(self.clone())
            }
        }

        impl IntoId<$name> for &str {
            fn into_id(self) -> HostResult<$name> {
                $name::parse(self)
            }
        }

        impl IntoId<$name> for String {
            fn into_id(self) -> HostResult<$name> {
                $name::try_from(self)
            }
        }

        impl IntoId<$name> for &String {
            fn into_id(self) -> HostResult<$name> {
                $name::parse(self)
            }
        }
    };
}

checked_id!(
    /// A unit's id (the contract's id pattern, `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`).
    UnitId,
    "unit id",
    ID
);

checked_id!(
    /// An agent's id (the contract's id pattern, `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`).
    AgentId,
    "agent id",
    ID
);

checked_id!(
    /// A connector's slug (`^[a-z][a-z0-9_-]{0,62}$`).
    Slug,
    "connector slug",
    SLUG
);

checked_id!(
    /// A canonical tool id, `<namespace>.<name>` (`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`).
    ToolId,
    "tool id",
    TOOL_ID
);

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
            assert_eq!(UnitId::parse(good).map(String::from), Ok(good.to_string()));
            assert_eq!(AgentId::parse(good).map(String::from), Ok(good.to_string()));
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
            let err = UnitId::parse(bad).expect_err(bad);
            assert_eq!(err.code, crate::ErrorCode::InvalidRequest);
            assert!(AgentId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            UnitId::parse("a/b").expect_err("a slash").message,
            "unit id `a/b` is invalid: ids match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
        );
        assert_eq!(
            "a b".parse::<AgentId>().expect_err("a space").message,
            "agent id `a b` is invalid: ids match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
        );
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

    #[test]
    fn slugs_and_tool_ids_follow_the_naming_rules() {
        assert!(Slug::parse("acme-2_x").is_ok());
        for bad in ["", "Acme", "2acme", "a.b", &"a".repeat(64)] {
            assert_eq!(
                Slug::parse(bad).expect_err(bad).code,
                crate::ErrorCode::InvalidRequest
            );
        }
        assert_eq!(
            Slug::parse("A").expect_err("upper case").message,
            "connector slug `A` is invalid: slugs match ^[a-z][a-z0-9_-]{0,62}$"
        );
        assert!(ToolId::parse("github.create_issue").is_ok());
        for bad in ["github", "github.", "GitHub.x", "a.*", "a..b"] {
            assert!(ToolId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_id_reads_as_its_text_and_is_made_only_from_checked_text() {
        let unit = UnitId::parse("team").expect("an id");
        assert_eq!(unit, "team");
        assert_eq!(&*unit, "team");
        assert_eq!(unit.to_string(), "team");
        assert_eq!(format!("{unit:?}"), "\"team\"");
        let mut by_id = std::collections::BTreeMap::new();
        by_id.insert(unit.clone(), 1);
        assert_eq!(by_id.get("team"), Some(&1), "looked up by &str");
        assert_eq!(
            serde_json::to_value(&unit).expect("json"),
            serde_json::json!("team")
        );
        assert_eq!(
            serde_json::from_value::<UnitId>(serde_json::json!("team")).expect("parses"),
            unit
        );
        let refused = serde_json::from_value::<UnitId>(serde_json::json!("a b"))
            .expect_err("checked when deserialized");
        assert!(
            refused.to_string().contains("unit id `a b` is invalid"),
            "{refused}"
        );
        assert_eq!(IntoId::<UnitId>::into_id("team"), Ok(unit.clone()));
        assert_eq!((&unit).into_id(), Ok(unit.clone()));
        assert!(IntoId::<UnitId>::into_id("a/b").is_err());
    }
}
