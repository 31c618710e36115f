//! Builds the bundled connectors into WebAssembly components and embeds them.
//!
//! Writes `$OUT_DIR/bundled_connectors.rs` with
//! `pub static BUNDLED_COMPONENTS: &[(&str, &[u8], &str)]` (slug-ish name, component
//! bytes, `sha256:<hex>` of those bytes); `src/lib.rs` `include!`s it. The guests are compiled
//! by a nested cargo into `target/guests` (see the `connector-guest-build` crate).
//!
//! Each bundled component is copied into `$OUT_DIR` and embedded from that copy, whose
//! digest is taken here: another build rewriting `target/guests` meanwhile cannot make the
//! embedded bytes and their digest differ. With the digest known, a start that finds the
//! compiled code in its cache does not hash the component.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
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
        .and_then(|host| host.parent())
        .ok_or_else(|| anyhow::anyhow!("host/bundled has no workspace directory above it"))?;
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
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    for (name, path) in &built {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let embedded = out_dir.join(format!("{name}.wasm"));
        std::fs::write(&embedded, &bytes)
            .with_context(|| format!("cannot write {}", embedded.display()))?;
        writeln!(
            code,
            "    ({name:?}, include_bytes!({}), {digest:?}),",
            rust_path_literal(&embedded)?
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

    let out = out_dir.join("bundled_connectors.rs");
    write_if_changed(&out, &code)?;
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
