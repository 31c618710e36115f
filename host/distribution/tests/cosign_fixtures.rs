//! Interoperability with cosign itself: a signature cosign made, and a private key file
//! cosign wrote (`tests/fixtures/cosign/`, see its README for where they come from).

use connector_distribution::signature::{self, Rejected};
use connector_distribution::{SignatureKey, TrustedKey};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../tests/fixtures/cosign/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn a_signature_cosign_made_verifies_with_its_key() {
    let key = TrustedKey::from_pem(&fixture("cosign.pub")).unwrap();
    let payload = fixture("payload.json");
    let digest = fixture("manifest-digest.txt");
    let sig = fixture("signature.b64");
    assert_eq!(
        signature::verify(
            payload.as_bytes(),
            &sig,
            digest.trim(),
            std::slice::from_ref(&key)
        ),
        Ok(key.id().to_string())
    );
    // The payload as this crate writes it for that image is byte for byte cosign's.
    assert_eq!(
        signature::payload("registry-testing.svc.lan/busybox", digest.trim()),
        payload.as_bytes()
    );
    // One changed byte of the payload, or another digest, and it no longer counts.
    let edited = payload.replace("busybox", "busyb0x");
    assert_eq!(
        signature::verify(
            edited.as_bytes(),
            &sig,
            digest.trim(),
            std::slice::from_ref(&key)
        ),
        Err(Rejected::NotByTrustedKey)
    );
    let other = format!("sha256:{}", "1".repeat(64));
    assert!(matches!(
        signature::verify(payload.as_bytes(), &sig, &other, &[key]),
        Err(Rejected::OtherDigest(_))
    ));
}

#[test]
fn a_private_key_cosign_wrote_opens_and_signs() {
    let key =
        SignatureKey::from_encrypted_pem(&fixture("cosign-generated-empty-password.key"), b"")
            .unwrap();
    let digest = format!("sha256:{}", "2".repeat(64));
    let payload = signature::payload("127.0.0.1:5000/acme", &digest);
    let sig = signature::sign(&key, &payload);
    assert_eq!(
        signature::verify(&payload, &sig, &digest, &[key.public()]),
        Ok(key.public().id().to_string())
    );
    assert!(SignatureKey::from_encrypted_pem(
        &fixture("cosign-generated-empty-password.key"),
        b"not-empty"
    )
    .is_err());
}
