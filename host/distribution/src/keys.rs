//! Cosign's key formats: an ECDSA P-256 public key as PEM `PUBLIC KEY`
//! (SubjectPublicKeyInfo), and the private key as cosign writes it, PEM `ENCRYPTED
//! SIGSTORE PRIVATE KEY` (older cosign: `ENCRYPTED COSIGN PRIVATE KEY`) around a JSON
//! envelope: the PKCS#8 key sealed with NaCl secretbox (XSalsa20-Poly1305) under a key
//! derived from the password with scrypt (N = 65536, r = 8, p = 1, as cosign does).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::XSalsa20Poly1305;
use p256::ecdsa::{SigningKey, VerifyingKey};
use p256::pkcs8::der::pem::{self, LineEnding};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The PEM label cosign writes its encrypted private keys under.
pub const PRIVATE_KEY_LABEL: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
/// The label older cosign releases wrote.
const LEGACY_PRIVATE_KEY_LABEL: &str = "ENCRYPTED COSIGN PRIVATE KEY";
/// scrypt's cost (log2 N), block size and parallelism, as cosign writes them.
const SCRYPT_LOG_N: u8 = 16;
const SCRYPT_R: u32 = 8;
const SCRYPT_P: u32 = 1;
/// Highest scrypt cost a key file may ask for (log2 N): a file asking more would make
/// reading it take minutes and gigabytes.
const MAX_SCRYPT_LOG_N: u8 = 20;

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The public key file is not one.
    #[error("not a PEM `PUBLIC KEY` holding an ECDSA P-256 key ({0}); cosign keys made by `connector-host keygen` or `cosign generate-key-pair` are")]
    PublicKey(String),
    /// The private key file is not one.
    #[error("not a cosign private key ({0}); expected PEM `{PRIVATE_KEY_LABEL}` as `connector-host keygen` or `cosign generate-key-pair` write it")]
    PrivateKey(String),
    /// The password does not open the private key.
    #[error("the private key does not open with this password (COSIGN_PASSWORD)")]
    WrongPassword,
}

/// A public key whose signatures the host accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedKey {
    key: VerifyingKey,
    id: String,
}

impl std::fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TrustedKey").field(&self.id).finish()
    }
}

impl TrustedKey {
    /// Reads a PEM `PUBLIC KEY` (cosign's `cosign.pub`).
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let key = VerifyingKey::from_public_key_pem(text.trim())
            .map_err(|e| KeyError::PublicKey(e.to_string()))?;
        Ok(Self::from_key(key))
    }

    fn from_key(key: VerifyingKey) -> Self {
        let der = key
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .unwrap_or_default();
        let id = format!("sha256:{}", hex::encode(Sha256::digest(der)));
        Self { key, id }
    }

    /// `sha256:<hex>` of the key's DER SubjectPublicKeyInfo: how the host names it.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }
}

/// A private key that signs components.
pub struct SignatureKey {
    key: SigningKey,
}

impl std::fmt::Debug for SignatureKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignatureKey({})", self.public().id())
    }
}

impl SignatureKey {
    /// Opens a cosign private key file with `password` (empty when none was set).
    pub fn from_encrypted_pem(text: &str, password: &[u8]) -> Result<Self, KeyError> {
        let (label, body) = pem::decode_vec(text.trim().as_bytes())
            .map_err(|e| KeyError::PrivateKey(e.to_string()))?;
        if label != PRIVATE_KEY_LABEL && label != LEGACY_PRIVATE_KEY_LABEL {
            return Err(KeyError::PrivateKey(format!("its PEM label is `{label}`")));
        }
        let sealed: Sealed =
            serde_json::from_slice(&body).map_err(|e| KeyError::PrivateKey(e.to_string()))?;
        if sealed.kdf.name != "scrypt" || sealed.cipher.name != "nacl/secretbox" {
            return Err(KeyError::PrivateKey(format!(
                "it uses {} and {}, not scrypt and nacl/secretbox",
                sealed.kdf.name, sealed.cipher.name
            )));
        }
        let n = sealed.kdf.params.n;
        if !n.is_power_of_two() || n < 2 {
            return Err(KeyError::PrivateKey(format!(
                "scrypt N = {n} is not a power of two"
            )));
        }
        let log_n = n.trailing_zeros() as u8;
        if log_n > MAX_SCRYPT_LOG_N || sealed.kdf.params.r > 32 || sealed.kdf.params.p > 16 {
            return Err(KeyError::PrivateKey(
                "its scrypt parameters are beyond what cosign writes".into(),
            ));
        }
        let salt = decode(&sealed.kdf.salt, "salt")?;
        let nonce = decode(&sealed.cipher.nonce, "nonce")?;
        let ciphertext = decode(&sealed.ciphertext, "ciphertext")?;
        let key = derive(
            password,
            &salt,
            log_n,
            sealed.kdf.params.r,
            sealed.kdf.params.p,
        )?;
        let nonce: [u8; 24] = nonce
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::PrivateKey("its nonce is not 24 bytes".into()))?;
        let cipher = XSalsa20Poly1305::new(&(*key).into());
        let der = Zeroizing::new(
            cipher
                .decrypt(&nonce.into(), ciphertext.as_slice())
                .map_err(|_| KeyError::WrongPassword)?,
        );
        let key = SigningKey::from_pkcs8_der(&der).map_err(|e| {
            KeyError::PrivateKey(format!("the sealed key is not a P-256 PKCS#8 key: {e}"))
        })?;
        Ok(Self { key })
    }

    /// The public half.
    pub fn public(&self) -> TrustedKey {
        TrustedKey::from_key(*self.key.verifying_key())
    }

    pub(crate) fn signing_key(&self) -> &SigningKey {
        &self.key
    }
}

/// A new key pair in cosign's files.
pub struct KeyPair {
    /// `cosign.key`: PEM `ENCRYPTED SIGSTORE PRIVATE KEY`.
    pub private_pem: Zeroizing<String>,
    /// `cosign.pub`: PEM `PUBLIC KEY`.
    pub public_pem: String,
    /// The public key's id (`sha256:<hex>` of its DER SubjectPublicKeyInfo).
    pub key_id: String,
}

/// Makes an ECDSA P-256 key pair in cosign's formats, the private key sealed with
/// `password` (empty is allowed, as with cosign).
pub fn keygen(password: &[u8]) -> Result<KeyPair, KeyError> {
    let key = SigningKey::random(&mut OsRng);
    let der = key
        .to_pkcs8_der()
        .map_err(|e| KeyError::PrivateKey(e.to_string()))?;
    let mut salt = [0u8; 32];
    let mut nonce = [0u8; 24];
    OsRng.fill_bytes(&mut salt);
    OsRng.fill_bytes(&mut nonce);
    let derived = derive(password, &salt, SCRYPT_LOG_N, SCRYPT_R, SCRYPT_P)?;
    let cipher = XSalsa20Poly1305::new(&(*derived).into());
    let ciphertext = cipher
        .encrypt(&nonce.into(), der.as_bytes())
        .map_err(|_| KeyError::PrivateKey("sealing the new key failed".into()))?;
    let sealed = Sealed {
        kdf: Kdf {
            name: "scrypt".into(),
            params: KdfParams {
                n: 1u64 << SCRYPT_LOG_N,
                r: SCRYPT_R,
                p: SCRYPT_P,
            },
            salt: BASE64.encode(salt),
        },
        cipher: Cipher {
            name: "nacl/secretbox".into(),
            nonce: BASE64.encode(nonce),
        },
        ciphertext: BASE64.encode(ciphertext),
    };
    let body = serde_json::to_vec(&sealed).map_err(|e| KeyError::PrivateKey(e.to_string()))?;
    let private_pem = Zeroizing::new(
        pem::encode_string(PRIVATE_KEY_LABEL, LineEnding::LF, &body)
            .map_err(|e| KeyError::PrivateKey(e.to_string()))?,
    );
    let public_pem = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError::PublicKey(e.to_string()))?;
    let key_id = TrustedKey::from_key(*key.verifying_key()).id;
    Ok(KeyPair {
        private_pem,
        public_pem,
        key_id,
    })
}

fn derive(
    password: &[u8],
    salt: &[u8],
    log_n: u8,
    r: u32,
    p: u32,
) -> Result<Zeroizing<[u8; 32]>, KeyError> {
    let params = scrypt::Params::new(log_n, r, p, 32)
        .map_err(|e| KeyError::PrivateKey(format!("scrypt parameters: {e}")))?;
    let mut out = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(password, salt, &params, out.as_mut_slice())
        .map_err(|e| KeyError::PrivateKey(format!("scrypt: {e}")))?;
    Ok(out)
}

fn decode(text: &str, what: &str) -> Result<Vec<u8>, KeyError> {
    BASE64
        .decode(text)
        .map_err(|e| KeyError::PrivateKey(format!("its {what} is not base64: {e}")))
}

/// The JSON inside cosign's encrypted private key PEM.
#[derive(Serialize, Deserialize)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Serialize, Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Serialize, Deserialize)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_opens_with_its_password_only() {
        let pair = keygen(b"s3cret").unwrap();
        assert!(pair
            .private_pem
            .starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
        let opened = SignatureKey::from_encrypted_pem(&pair.private_pem, b"s3cret").unwrap();
        assert_eq!(opened.public().id(), pair.key_id);
        assert_eq!(
            TrustedKey::from_pem(&pair.public_pem).unwrap().id(),
            pair.key_id
        );
        assert!(matches!(
            SignatureKey::from_encrypted_pem(&pair.private_pem, b"wrong"),
            Err(KeyError::WrongPassword)
        ));
    }

    #[test]
    fn a_public_key_is_not_a_private_key() {
        let pair = keygen(b"").unwrap();
        let err = SignatureKey::from_encrypted_pem(&pair.public_pem, b"").unwrap_err();
        assert!(err.to_string().contains("PUBLIC KEY"), "{err}");
    }
}
