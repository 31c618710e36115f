//! The connectors compiled into the host binary (`acme`, `github`, `arxiv`).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

include!(concat!(env!("OUT_DIR"), "/bundled_connectors.rs"));

/// Every bundled component: (slug, bytes).
pub(crate) fn components() -> &'static [(&'static str, &'static [u8])] {
    BUNDLED_COMPONENTS
}

/// The bytes of a connector bundled into the host binary (`acme`, ...).
pub fn bundled_component(name: &str) -> Option<&'static [u8]> {
    BUNDLED_COMPONENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}

static DIGESTS: LazyLock<BTreeMap<&'static str, String>> = LazyLock::new(|| {
    BUNDLED_COMPONENTS
        .iter()
        .map(|(name, bytes)| {
            (
                *name,
                format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
            )
        })
        .collect()
});

/// Whether `digest` is the bundled component of `slug` (not an operator's own build).
pub(crate) fn is_bundled(slug: &str, digest: &str) -> bool {
    DIGESTS.get(slug).is_some_and(|d| d == digest)
}
