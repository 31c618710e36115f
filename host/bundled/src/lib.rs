//! The connectors shipped with the `connector-host` binary (`acme`, `github`, `arxiv`) and
//! the declarative interpreter `pack` writes manifests into, built from this repository's
//! sources into WebAssembly components by this crate's build script (a nested cargo build
//! into `target/guests`).
//!
//! Their SHA-256 digests are taken by the build script from the very bytes embedded here:
//! a capability check never hashes them, nor does a start that finds their compiled code
//! in its cache. A platform embedding the core passes these (or none, or its own) in
//! `HostConfig::bundled`; only what depends on this crate pays for the guest build.

#![deny(missing_docs)]

use connector_model::bundled::BundledComponent;

include!(concat!(env!("OUT_DIR"), "/bundled_connectors.rs"));

/// Every bundled connector, in the order the host installs them.
pub fn components() -> Vec<BundledComponent> {
    BUNDLED_COMPONENTS
        .iter()
        .map(|&(name, bytes, digest)| BundledComponent {
            name,
            bytes,
            digest,
        })
        .collect()
}

/// The bytes of a bundled connector (`acme`, ...).
pub fn component(name: &str) -> Option<&'static [u8]> {
    BUNDLED_COMPONENTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, bytes, _)| *bytes)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    #[test]
    fn each_digest_is_that_of_the_embedded_bytes() {
        let mut seen = 0;
        for c in super::components() {
            let actual = format!("sha256:{}", hex::encode(Sha256::digest(c.bytes)));
            assert_eq!(c.digest, actual, "{}", c.name);
            seen += 1;
        }
        assert_eq!(seen, 3, "acme, github and arxiv are bundled");
    }
}
