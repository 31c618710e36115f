//! The connectors compiled into the host binary (`acme`, `github`, `arxiv`).
//!
//! Their SHA-256 digests are taken by the build script from the very bytes embedded here:
//! a capability check never hashes them, nor does a start that finds their compiled code
//! in its cache.

include!(concat!(env!("OUT_DIR"), "/bundled_connectors.rs"));

/// A connector bundled into the host binary.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bundled {
    /// The slug it installs under.
    pub name: &'static str,
    /// The component's bytes.
    pub bytes: &'static [u8],
    /// `sha256:<hex>` of `bytes`.
    pub digest: &'static str,
}

/// Every bundled component.
pub(crate) fn components() -> impl Iterator<Item = Bundled> {
    BUNDLED_COMPONENTS
        .iter()
        .map(|&(name, bytes, digest)| Bundled {
            name,
            bytes,
            digest,
        })
}

/// The bytes of a connector bundled into the host binary (`acme`, ...).
pub fn bundled_component(name: &str) -> Option<&'static [u8]> {
    components().find(|c| c.name == name).map(|c| c.bytes)
}

/// Whether `digest` is the bundled component of `slug` (not an operator's own build).
pub(crate) fn is_bundled(slug: &str, digest: &str) -> bool {
    components().any(|c| c.name == slug && c.digest == digest)
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
