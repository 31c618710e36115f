//! Builds the test guests into WebAssembly components and writes
//! `$OUT_DIR/test_guests.rs` with one `pub const <NAME>: &str = "<path>.wasm";` per guest
//! (exposed as `integration_tests::guests`). Test guests are never bundled into the host.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use connector_guest_build::{build_components, rust_path_literal, write_if_changed, GuestSpec};

/// Features of the `bad-manifest` guest; each becomes `bad-manifest-<feature>.wasm`.
const BAD_MANIFEST_FEATURES: &[&str] = &[
    "outside-namespace",
    "sv-namespace",
    "duplicate-ids",
    "uppercase-id",
    "slash-id",
    "no-namespace-id",
    "empty-tools",
    "bad-slug",
];

fn specs() -> Vec<GuestSpec> {
    let mut specs = vec![
        GuestSpec::new("hostile"),
        GuestSpec::new("hostile")
            .features(&["v2"])
            .output_name("hostile-v2"),
        GuestSpec::new("hostile")
            .features(&["lookalike"])
            .output_name("hostile-lookalike"),
        GuestSpec::new("hostile")
            .features(&["prefix-lookalike"])
            .output_name("hostile-prefix-lookalike"),
        GuestSpec::new("no-exports"),
        GuestSpec::new("rich"),
        GuestSpec::new("conformance"),
        GuestSpec::new("native-http"),
    ];
    for feature in BAD_MANIFEST_FEATURES {
        specs.push(
            GuestSpec::new("bad-manifest")
                .features(&[feature])
                .output_name(&format!("bad-manifest-{feature}")),
        );
    }
    specs
}

/// The Rust constant a test names a guest by (`bad-manifest-bad-slug` → `BAD_MANIFEST_BAD_SLUG`).
fn constant_of(output_name: &str) -> String {
    output_name.to_uppercase().replace('-', "_")
}

/// Every `.rs` file's text under `dir` (recursively).
fn sources_under(dir: &Path, out: &mut String) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sources_under(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// A guest that no test names is dead weight in every build: refuse it, so each guest
/// under `guests/` is there because a test (or bench) uses it.
fn refuse_unused(manifest_dir: &Path, specs: &[GuestSpec]) -> anyhow::Result<()> {
    let mut sources = String::new();
    for dir in ["all", "src", "benches"] {
        let dir = manifest_dir.join(dir);
        sources_under(&dir, &mut sources)?;
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let unused: Vec<String> = specs
        .iter()
        .map(|s| constant_of(&s.output_name))
        .filter(|c| !sources.contains(&format!("guests::{c}")))
        .collect();
    if !unused.is_empty() {
        anyhow::bail!(
            "test guests no test uses: {} (name each as `integration_tests::guests::<NAME>` in a test, or remove it from tests/build.rs)",
            unused.join(", ")
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or_else(|| anyhow::anyhow!("tests crate has no parent directory"))?;
    let specs = specs();
    refuse_unused(&manifest_dir, &specs)?;
    let built = build_components(workspace_root, &specs)?;

    let mut code = String::new();
    for (name, path) in &built {
        let constant = constant_of(name);
        writeln!(code, "/// Path of the `{name}` test component.")?;
        writeln!(
            code,
            "pub const {constant}: &str = {};",
            rust_path_literal(path)?
        )?;
    }
    let out = Path::new(&std::env::var("OUT_DIR")?).join("test_guests.rs");
    write_if_changed(&out, &code)?;
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
