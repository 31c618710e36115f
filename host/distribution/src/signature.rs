//! Cosign keyed signatures of a manifest digest.
//!
//! Cosign signs a "simple signing" payload naming the manifest digest (the `critical`
//! section of containers' signature format) with ECDSA P-256 over SHA-256, and stores the
//! payload as a layer of media type [`SIMPLE_SIGNING_MEDIA_TYPE`] with the base64 DER
//! signature in the layer's [`SIGNATURE_ANNOTATION`], in a manifest tagged
//! `sha256-<hex>.sig` in the same repository.
//!
//! Why by hand rather than the `sigstore` crate: its `cosign` feature also builds Fulcio,
//! Rekor, OAuth (`openidconnect`, `webbrowser`) and aws-lc: 265 crates against 138 for
//! `oci-client` alone (`cargo tree -e normal`, sigstore 0.15 with `cosign` and
//! `rustls-tls`), and none of it is needed for a keyed signature, which is one ECDSA
//! verification and one JSON field. The format is checked against a signature cosign made
//! (`tests/fixtures/cosign/`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::Signature;
use serde::{Deserialize, Serialize};

use crate::keys::{SignatureKey, TrustedKey};

/// The media type of a cosign signature layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The `critical.type` of a cosign image signature.
const SIGNATURE_TYPE: &str = "cosign container image signature";

/// The payload cosign signs.
#[derive(Debug, Serialize, Deserialize)]
pub struct SimpleSigning {
    /// What the signature is about.
    pub critical: Critical,
    /// Annotations cosign lets signers add (not checked).
    #[serde(default)]
    pub optional: Option<serde_json::Value>,
}

/// The signed claims of a [`SimpleSigning`] payload.
#[derive(Debug, Serialize, Deserialize)]
pub struct Critical {
    /// The repository signed for.
    pub identity: Identity,
    /// The manifest signed.
    pub image: Image,
    /// Always `cosign container image signature`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The repository a signature is for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Identity {
    /// `registry/repository`.
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

/// The manifest a signature covers.
#[derive(Debug, Serialize, Deserialize)]
pub struct Image {
    /// `sha256:<hex>` of the manifest.
    #[serde(rename = "docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

/// The payload for `manifest_digest` in repository `docker_reference`
/// (`registry/repository`), in the byte layout cosign writes.
pub fn payload(docker_reference: &str, manifest_digest: &str) -> Vec<u8> {
    let payload = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: docker_reference.to_string(),
            },
            image: Image {
                docker_manifest_digest: manifest_digest.to_string(),
            },
            kind: SIGNATURE_TYPE.to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&payload).unwrap_or_default()
}

/// The base64 DER signature of `payload`.
pub fn sign(key: &SignatureKey, payload: &[u8]) -> String {
    let signature: Signature = key.signing_key().sign(payload);
    BASE64.encode(signature.to_der().as_bytes())
}

/// Why one signature does not count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// No trusted key verifies it.
    #[error("no trusted key made it")]
    NotByTrustedKey,
    /// It is not a signature.
    #[error("it is not base64 DER ECDSA")]
    Malformed,
    /// What it signs is not cosign's payload.
    #[error("its payload is not a cosign image signature")]
    NotAPayload,
    /// It signs another manifest.
    #[error("it covers {0}, not this manifest")]
    OtherDigest(String),
}

/// Checks one signature (`signature_b64` over `payload`) for `manifest_digest`: the id of
/// the first of `keys` it verifies with.
pub fn verify(
    payload: &[u8],
    signature_b64: &str,
    manifest_digest: &str,
    keys: &[TrustedKey],
) -> Result<String, Rejected> {
    let der = BASE64
        .decode(signature_b64.trim())
        .map_err(|_| Rejected::Malformed)?;
    let signature = Signature::from_der(&der).map_err(|_| Rejected::Malformed)?;
    let key = keys
        .iter()
        .find(|k| k.verifying_key().verify(payload, &signature).is_ok())
        .ok_or(Rejected::NotByTrustedKey)?;
    let parsed: SimpleSigning =
        serde_json::from_slice(payload).map_err(|_| Rejected::NotAPayload)?;
    if parsed.critical.kind != SIGNATURE_TYPE {
        return Err(Rejected::NotAPayload);
    }
    if parsed.critical.image.docker_manifest_digest != manifest_digest {
        return Err(Rejected::OtherDigest(
            parsed.critical.image.docker_manifest_digest,
        ));
    }
    Ok(key.id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::keygen;

    const DIGEST: &str = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";

    #[test]
    fn a_signature_verifies_for_its_digest_and_key_only() {
        let pair = keygen(b"").unwrap();
        let key = SignatureKey::from_encrypted_pem(&pair.private_pem, b"").unwrap();
        let other = keygen(b"").unwrap();
        let trusted = TrustedKey::from_pem(&pair.public_pem).unwrap();
        let foreign = TrustedKey::from_pem(&other.public_pem).unwrap();
        let body = payload("127.0.0.1:5000/acme", DIGEST);
        let sig = sign(&key, &body);
        assert_eq!(
            verify(&body, &sig, DIGEST, &[foreign.clone(), trusted.clone()]),
            Ok(trusted.id().to_string())
        );
        assert_eq!(
            verify(&body, &sig, DIGEST, &[foreign]),
            Err(Rejected::NotByTrustedKey)
        );
        let other_digest = format!("sha256:{}", "0".repeat(64));
        assert_eq!(
            verify(&body, &sig, &other_digest, std::slice::from_ref(&trusted)),
            Err(Rejected::OtherDigest(DIGEST.into()))
        );
        let mut tampered = body.clone();
        tampered[10] ^= 1;
        assert_eq!(
            verify(&tampered, &sig, DIGEST, &[trusted]),
            Err(Rejected::NotByTrustedKey)
        );
    }
}
