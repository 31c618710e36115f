//! Every workspace-level integration test, in one binary so the host and wasmtime are
//! linked once. Each module covers one area against the real library or the real
//! `connector-host` binary; shared helpers (hosts, tokens, signed webhooks, HTTP) live in
//! the `integration_tests` library (`tests/src/`).

mod api;
mod arxiv;
mod audit;
mod bounds;
mod cli;
mod cli_output;
mod console;
mod console_actions;
mod console_edits;
mod console_reads;
mod containment;
mod context;
mod declarative;
mod declarative_guide;
mod examples;
mod fair_share_edge;
mod fair_share_surfaces;
mod fair_share_writes;
mod github;
mod github_app;
mod guide_examples;
mod interop;
mod languages;
mod layout;
mod lists;
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
mod traces;
mod webhooks;
mod worlds;
