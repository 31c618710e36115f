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
        GuestSpec::new("no-exports"),
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

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or_else(|| anyhow::anyhow!("tests crate has no parent directory"))?;
    let built = build_components(workspace_root, &specs())?;

    let mut code = String::new();
    for (name, path) in &built {
        let constant = name.to_uppercase().replace('-', "_");
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
