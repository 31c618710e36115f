//! Why a subject has a tool: the four tiers of the effective tool set, and how grants
//! record where they came from.

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

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provenance::Explicit => f.write_str("explicit"),
            Provenance::Connector(slug) => write!(f, "connector:{slug}"),
            Provenance::Platform => f.write_str("platform"),
            Provenance::Image(digest) => write!(f, "image:{digest}"),
        }
    }
}

/// Provenance of a grant written by a binding.
pub fn connector_provenance(slug: &str) -> String {
    format!("connector:{slug}")
}

/// Provenance of a grant an operator made.
pub const EXPLICIT: &str = "explicit";
