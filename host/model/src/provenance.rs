//! Why a subject has a tool: the four tiers of the effective tool set, and how grants
//! record where they came from.

use std::fmt;

use crate::ids::Slug;

/// Why a subject has a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provenance {
    /// An operator granted it to this subject.
    Explicit,
    /// A binding of this connector (slug) on one of the subject's units granted it.
    Connector(String),
    /// A platform tool; every subject has them.
    Platform,
    /// The agent's container image declares it (image digest).
    Image(String),
}

impl Provenance {
    /// Its precedence: a tool a subject has several ways is shown at its highest.
    pub fn rank(&self) -> u8 {
        match self {
            Provenance::Explicit => 3,
            Provenance::Connector(_) => 2,
            Provenance::Platform => 1,
            Provenance::Image(_) => 0,
        }
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provenance::Explicit => f.write_str("explicit"),
            Provenance::Connector(slug) => write!(f, "connector:{slug}"),
            Provenance::Platform => f.write_str("platform"),
            Provenance::Image(digest) => write!(f, "image:{digest}"),
        }
    }
}

/// Where a grant came from: the two [`Provenance`]s a stored grant can have. Stored and
/// shown as text (`explicit`, `connector:<slug>`, its [`Display`](fmt::Display)), read
/// back once, where a row is read ([`str::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GrantProvenance {
    /// An operator granted it.
    Explicit,
    /// A binding of this connector wrote it.
    Connector(Slug),
}

/// What the provenance of a grant a binding wrote starts with.
const CONNECTOR_PREFIX: &str = "connector:";

impl GrantProvenance {
    /// The stored text of the grants the bindings of connector `slug` wrote (what
    /// `GrantProvenance::Connector(slug)` displays as), for a store that selects them by
    /// the slug a record holds.
    pub fn connector_text(slug: &str) -> String {
        format!("{CONNECTOR_PREFIX}{slug}")
    }

    /// The connector whose binding wrote the grant, if one did.
    pub fn connector(&self) -> Option<&str> {
        match self {
            GrantProvenance::Explicit => None,
            GrantProvenance::Connector(slug) => Some(slug.as_str()),
        }
    }
}

impl fmt::Display for GrantProvenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantProvenance::Explicit => f.write_str("explicit"),
            GrantProvenance::Connector(slug) => write!(f, "{CONNECTOR_PREFIX}{slug}"),
        }
    }
}

/// Text that is no grant provenance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a grant provenance (`explicit` or `connector:<slug>`)")]
pub struct UnknownProvenance(String);

impl std::str::FromStr for GrantProvenance {
    type Err = UnknownProvenance;

    fn from_str(text: &str) -> Result<Self, UnknownProvenance> {
        match text.strip_prefix(CONNECTOR_PREFIX) {
            _ if text == "explicit" => Ok(GrantProvenance::Explicit),
            Some(slug) => Slug::parse(slug)
                .map(GrantProvenance::Connector)
                .map_err(|_| UnknownProvenance(crate::ids::truncate(text, 80))),
            None => Err(UnknownProvenance(crate::ids::truncate(text, 80))),
        }
    }
}

impl From<&GrantProvenance> for Provenance {
    fn from(provenance: &GrantProvenance) -> Self {
        match provenance {
            GrantProvenance::Explicit => Provenance::Explicit,
            GrantProvenance::Connector(slug) => Provenance::Connector(slug.to_string()),
        }
    }
}

impl serde::Serialize for GrantProvenance {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GrantProvenance {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_provenance_reads_back_what_it_writes() {
        for (text, provenance) in [
            ("explicit", GrantProvenance::Explicit),
            (
                "connector:acme",
                GrantProvenance::Connector(Slug::parse("acme").expect("a slug")),
            ),
        ] {
            assert_eq!(text.parse::<GrantProvenance>(), Ok(provenance.clone()));
            assert_eq!(provenance.to_string(), text);
            let json = serde_json::to_value(&provenance).expect("serializes");
            assert_eq!(json, serde_json::json!(text));
            assert_eq!(
                serde_json::from_value::<GrantProvenance>(json).expect("parses"),
                provenance
            );
        }
        for bad in [
            "",
            "connector:",
            "connector:Not A Slug",
            "platform",
            "Explicit",
            "image:sha256:aa",
        ] {
            assert!(bad.parse::<GrantProvenance>().is_err(), "{bad:?}");
        }
    }
}
