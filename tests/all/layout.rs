//! The crate map's promise to an embedder: the core compiles no HTTP server, console,
//! command line, declarative packer, PostgreSQL driver or nested guest build, and the
//! HTTP edge adds only the server. Cargo enforces the layering between the crates; this
//! checks what each one pulls in.

use std::collections::BTreeSet;
use std::path::Path;

/// The crates `cargo tree` lists for `package` with `args` (normal dependencies).
fn dependency_names(package: &str, args: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .arg("--manifest-path")
        .arg(manifest)
        .args(args)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// What only the `connector-host` binary (or one of the edges) may compile.
const NOT_IN_THE_CORE: [&str; 15] = [
    "clap",
    "tracing-subscriber",
    "tokio-postgres",
    "axum",
    "maud",
    "cel",
    "saphyr-parser",
    "connector-bundled",
    "connector-guest-build",
    "connector-console",
    "connector-distribution",
    "oci-client",
    "scrypt",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
];

#[test]
fn the_core_compiles_no_edge_cli_postgres_or_guest_build() {
    let full = dependency_names("connector-host", &[]);
    for name in NOT_IN_THE_CORE {
        assert!(full.contains(name), "the full binary should use {name}");
    }
    let core = dependency_names("connector-core", &[]);
    for name in NOT_IN_THE_CORE {
        assert!(!core.contains(name), "the core pulls in {name}");
    }
    assert!(core.contains("wasmtime") && core.contains("rusqlite"));
    assert!(core.len() < full.len(), "{} vs {}", core.len(), full.len());
    // PostgreSQL and registries are the core's optional parts.
    let shared = dependency_names("connector-core", &["--features", "postgres"]);
    assert!(shared.contains("tokio-postgres"));
    let registries = dependency_names("connector-core", &["--features", "oci"]);
    assert!(registries.contains("oci-client"));
}

#[test]
fn the_http_edge_adds_the_server_and_nothing_of_the_binary() {
    let edge = dependency_names("connector-http", &[]);
    assert!(edge.contains("axum") && edge.contains("connector-core"));
    for name in NOT_IN_THE_CORE.iter().filter(|n| **n != "axum") {
        assert!(!edge.contains(*name), "the HTTP edge pulls in {name}");
    }
}
