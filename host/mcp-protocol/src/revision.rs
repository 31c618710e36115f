//! The protocol revisions this host speaks, and the HTTP headers that carry a session
//! and its revision.

/// The stateless revision: no sessions, each request carries its version in `_meta`.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// Revisions served through `initialize` sessions, newest first.
pub const SESSION_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Every revision the server speaks, newest first.
pub const SUPPORTED_VERSIONS: [&str; 4] =
    [STATELESS_VERSION, "2025-11-25", "2025-06-18", "2025-03-26"];
/// The one revision with JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";
/// The revision this host's own clients (`pack`'s discovery, the declarative
/// interpreter) ask a remote server for; they use whichever the server answers.
pub const CLIENT_VERSION: &str = "2025-06-18";

/// The session header (lower case, as HTTP/2 writes it; header names are
/// case-insensitive).
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol revision header.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The revision a server answers `initialize` with: the client's when it is a session
/// revision, else the newest session revision.
pub fn negotiate(requested: &str) -> &'static str {
    SESSION_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(SESSION_VERSIONS[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_prefers_the_clients_revision() {
        for v in SESSION_VERSIONS {
            assert_eq!(negotiate(v), v);
        }
        // The stateless revision has no `initialize`: a session gets the newest that has.
        assert_eq!(negotiate(STATELESS_VERSION), "2025-11-25");
        assert_eq!(negotiate("2024-11-05"), "2025-11-25");
        assert_eq!(negotiate("2099-01-01"), "2025-11-25");
        assert_eq!(negotiate(""), "2025-11-25");
    }
}
