//! Builds the bundled connectors into WebAssembly components and embeds them.
//!
//! Writes `$OUT_DIR/bundled_connectors.rs` with
//! `pub static BUNDLED_COMPONENTS: &[(&str, &[u8], &str)]` (slug-ish name, component
//! bytes, `sha256:<hex>` of those bytes); the host `include!`s it. The digest is taken
//! here, from the file `include_bytes!` embeds, so a host start never hashes them. The guests are compiled by a nested cargo into
//! `target/guests` (see the `connector-guest-build` crate).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use connector_guest_build::{build_components, rust_path_literal, write_if_changed, GuestSpec};
use sha2::{Digest, Sha256};

/// The connectors shipped inside the host binary. Add one line per connector.
fn bundled() -> Vec<GuestSpec> {
    vec![
        GuestSpec::new("acme"),
        GuestSpec::new("github"),
        GuestSpec::new("arxiv"),
    ]
}

/// The interpreter `connector-host pack` writes declarative manifests into. Not a
/// connector by itself, so it is not installed with the bundled ones.
const INTERPRETER: &str = "declarative";

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace_root = manifest_dir
        .parent()
        .ok_or_else(|| anyhow::anyhow!("host crate has no parent directory"))?;
    let mut specs = bundled();
    specs.push(GuestSpec::new(INTERPRETER));
    let mut built = build_components(workspace_root, &specs)?;
    let (_, interpreter) = built
        .pop()
        .ok_or_else(|| anyhow::anyhow!("the interpreter component was not built"))?;

    let mut code = String::from(
        "/// Components bundled into the host: (name, component bytes, `sha256:<hex>`).\n\
         pub static BUNDLED_COMPONENTS: &[(&str, &[u8], &str)] = &[\n",
    );
    for (name, path) in &built {
        let bytes = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        writeln!(
            code,
            "    ({name:?}, include_bytes!({}), {digest:?}),",
            rust_path_literal(path)?
        )?;
    }
    code.push_str("];\n");
    writeln!(
        code,
        "/// The declarative interpreter component, before any manifest is packed into it.\n\
         #[allow(dead_code)]\n\
         pub static DECLARATIVE_INTERPRETER: &[u8] = include_bytes!({});",
        rust_path_literal(&interpreter)?
    )?;

    let out = Path::new(&std::env::var("OUT_DIR")?).join("bundled_connectors.rs");
    write_if_changed(&out, &code)?;
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
