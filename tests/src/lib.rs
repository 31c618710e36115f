//! Shared helpers of the integration tests.

/// Paths of the test guest components, built by `build.rs` (never bundled):
/// `HOSTILE`, `NO_EXPORTS`, and `BAD_MANIFEST_<FEATURE>` for each `bad-manifest` feature.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/test_guests.rs"));
}
pub mod docs;
pub mod fake_api;
pub mod fake_arxiv;
pub mod fake_echo;
pub mod fake_github;
pub mod harness;
pub mod languages;
pub mod large_directory;
pub mod namespaces;
pub mod otlp;
pub mod pg_relay;
pub mod postgres;
pub mod registry;
