//! Connector components in OCI registries, and cosign keyed signatures of them.
//!
//! A separate crate so that a platform embedding the host compiles no registry client and
//! no signature code unless it wants them (the host's `oci` feature). The interface is
//! small and typed:
//!
//! - [`pull`] a component by `oci://registry/repository:tag` (or `@sha256:…`): one
//!   manifest, one `application/wasm` layer, its size bounded before reading and its
//!   digest checked after; with trusted keys, what its signatures say ([`SignatureCheck`]).
//! - [`push`] a component in the layout `wkg` publishes, optionally with a cosign
//!   signature.
//! - [`keygen`] an ECDSA P-256 key pair in cosign's files; [`TrustedKey`] and
//!   [`SignatureKey`] read them.
//!
//! A pull reads every answer with a size limit (manifests, the token service's answer,
//! the layer: see `pull_session`); the registry client of pushes is `oci-client` (the
//! successor of `oci-distribution`, used by wassette and the sigstore crates). Signatures are cosign's keyed format, checked here
//! with RustCrypto's `p256` (see [`signature`] for why not the `sigstore` crate).

#![deny(missing_docs)]

pub mod keys;
mod pull_session;
pub mod registry;
pub mod signature;

pub use keys::{keygen, KeyError, KeyPair, SignatureKey, TrustedKey};
pub use registry::{
    pull, push, sha256, DistributionError, OciReference, PullLimits, PulledComponent, Pushed,
    RegistryAccess, SignatureCheck, SCHEME, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
};
