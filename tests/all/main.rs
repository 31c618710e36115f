//! Every workspace-level integration test, in one binary so the host and wasmtime are
//! linked once. Each module covers one area against the real library or the real
//! `connector-host` binary; shared helpers (hosts, tokens, signed webhooks, HTTP) live in
//! the `integration_tests` library (`tests/src/`).

mod api;
mod arxiv;
mod audit;
mod bounds;
mod cli;
mod console;
mod containment;
mod context;
mod declarative;
mod declarative_guide;
mod fair_share_edge;
mod fair_share_surfaces;
mod fair_share_writes;
mod github;
mod github_app;
mod languages;
mod layout;
mod mcp;
mod mcp_events;
mod mcp_local;
mod mcp_stateless;
mod oci;
mod postgres_cluster;
mod replicas;
mod restart;
mod runtime;
mod scaffold;
mod store_conformance;
mod webhooks;
mod worlds;
