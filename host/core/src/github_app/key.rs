//! Reading the App's PEM private key, once, at start-up.
//!
//! Accepted: the PKCS#1 file GitHub generates (`BEGIN RSA PRIVATE KEY`), its PKCS#8 form
//! (`BEGIN PRIVATE KEY`), and either one whose line breaks arrive as literal `\n`
//! escapes (a key pasted through an environment variable or a `.env` file), optionally
//! wrapped in quotes. Every error names the file and what is wrong with it, never its
//! content.

use std::path::Path;

use jsonwebtoken::EncodingKey;

use super::GithubAppError;

/// Reads and parses the key at `path`. The caller proves it by signing a JWT.
pub(super) fn load(path: &Path) -> Result<EncodingKey, GithubAppError> {
    let bytes = std::fs::read(path).map_err(|err| GithubAppError::KeyFile {
        path: path.to_path_buf(),
        reason: io_reason(&err),
    })?;
    parse(&bytes).map_err(|reason| GithubAppError::InvalidKey {
        path: path.to_path_buf(),
        reason,
    })
}

/// What is wrong with the App's private key, worded for an operator (never key material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyProblem {
    /// Not UTF-8.
    #[error("the file is not text (a PEM key is ASCII)")]
    NotText,
    /// Nothing but whitespace.
    #[error("the file is empty")]
    Empty,
    /// No `-----BEGIN …-----` line.
    #[error("no PEM block found (the file should start with `-----BEGIN RSA PRIVATE KEY-----`)")]
    NoPemBlock,
    /// `ENCRYPTED PRIVATE KEY`.
    #[error(
        "the key is encrypted with a passphrase; store it unencrypted \
         (`openssl pkcs8 -topk8 -nocrypt -in <encrypted> -out <plain>`) and \
         protect the file instead"
    )]
    Encrypted,
    /// A public key.
    #[error("it is a public key; the App's private key is needed")]
    PublicKey,
    /// A certificate.
    #[error("it is a certificate, not a private key")]
    Certificate,
    /// A private key of another algorithm (the PEM label).
    #[error("it is an `{0}`; GitHub Apps sign with RSA keys")]
    NotRsa(String),
    /// Some other PEM block (its label).
    #[error("it holds a `{0}` block, not a private key")]
    OtherBlock(String),
    /// No `-----END …-----` line for the block (its label).
    #[error("the `{0}` block has no `-----END {0}-----` line (truncated?)")]
    Truncated(String),
    /// The block's content is not an RSA private key (its label).
    #[error(
        "the `{0}` block does not decode as an RSA private key (damaged or truncated \
         base64, or a key of another type)"
    )]
    Undecodable(String),
    /// The parsed key does not sign.
    #[error("it cannot sign an RS256 JWT ({0})")]
    CannotSign(jsonwebtoken::errors::Error),
}

/// Parses PEM text.
pub(super) fn parse(bytes: &[u8]) -> Result<EncodingKey, KeyProblem> {
    let text = std::str::from_utf8(bytes).map_err(|_| KeyProblem::NotText)?;
    let text = normalize(text);
    if text.is_empty() {
        return Err(KeyProblem::Empty);
    }
    let label = pem_label(&text).ok_or(KeyProblem::NoPemBlock)?;
    match label {
        "RSA PRIVATE KEY" | "PRIVATE KEY" => {}
        "ENCRYPTED PRIVATE KEY" => return Err(KeyProblem::Encrypted),
        "PUBLIC KEY" | "RSA PUBLIC KEY" => return Err(KeyProblem::PublicKey),
        "CERTIFICATE" => return Err(KeyProblem::Certificate),
        "EC PRIVATE KEY" | "OPENSSH PRIVATE KEY" | "DSA PRIVATE KEY" => {
            return Err(KeyProblem::NotRsa(label.to_string()))
        }
        other => return Err(KeyProblem::OtherBlock(other.to_string())),
    }
    if !text.contains(&format!("-----END {label}-----")) {
        return Err(KeyProblem::Truncated(label.to_string()));
    }
    EncodingKey::from_rsa_pem(text.as_bytes())
        .map_err(|_| KeyProblem::Undecodable(label.to_string()))
}

/// Undoes the ways a key gets mangled on its way through environment variables and
/// `.env` files: surrounding whitespace and quotes, literal `\n` (and `\r\n`) escapes,
/// Windows line ends.
fn normalize(text: &str) -> String {
    let mut text = text.trim();
    for quote in ['"', '\''] {
        if text.len() >= 2 && text.starts_with(quote) && text.ends_with(quote) {
            text = text[1..text.len() - 1].trim();
        }
    }
    let mut text = text.to_string();
    if text.contains("\\n") {
        text = text.replace("\\r\\n", "\n").replace("\\n", "\n");
    }
    text.replace("\r\n", "\n").trim().to_string()
}

/// The label of the first `-----BEGIN <label>-----` line.
fn pem_label(text: &str) -> Option<&str> {
    let start = text.find("-----BEGIN ")? + "-----BEGIN ".len();
    let rest = &text[start..];
    let end = rest.find("-----")?;
    let label = rest[..end].trim();
    (!label.is_empty() && !label.contains('\n')).then_some(label)
}

fn io_reason(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (the host's user must be able to read it)".into()
        }
        std::io::ErrorKind::IsADirectory => "it is a directory, not a file".into(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_escaped_and_quoted_keys() {
        assert_eq!(
            normalize("\"-----BEGIN X-----\\nAAA\\n-----END X-----\\n\"\n"),
            "-----BEGIN X-----\nAAA\n-----END X-----"
        );
        assert_eq!(
            normalize("-----BEGIN X-----\r\nAAA\r\n-----END X-----\r\n"),
            "-----BEGIN X-----\nAAA\n-----END X-----"
        );
        assert_eq!(
            normalize("'-----BEGIN X-----\\r\\nAAA\\r\\n-----END X-----'"),
            "-----BEGIN X-----\nAAA\n-----END X-----"
        );
    }

    #[test]
    fn labels() {
        assert_eq!(
            pem_label("junk\n-----BEGIN RSA PRIVATE KEY-----\nx"),
            Some("RSA PRIVATE KEY")
        );
        assert_eq!(pem_label("nothing"), None);
    }

    #[test]
    fn reasons_never_echo_the_content() {
        for (text, expected) in [
            ("", "empty"),
            ("hello world", "no PEM block"),
            (
                "-----BEGIN PUBLIC KEY-----\nQUJD\n-----END PUBLIC KEY-----\n",
                "public key",
            ),
            (
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\nQUJD\n-----END ENCRYPTED PRIVATE KEY-----\n",
                "encrypted",
            ),
            (
                "-----BEGIN EC PRIVATE KEY-----\nQUJD\n-----END EC PRIVATE KEY-----\n",
                "RSA",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUA==\n-----END RSA PRIVATE KEY-----\n",
                "does not decode",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUA==\n",
                "truncated",
            ),
        ] {
            let reason = match parse(text.as_bytes()) {
                Ok(_) => panic!("{text:?} parsed"),
                Err(reason) => reason.to_string(),
            };
            assert!(reason.contains(expected), "{text:?}: {reason}");
            assert!(!reason.contains("QUJD"), "{reason}");
        }
    }
}
