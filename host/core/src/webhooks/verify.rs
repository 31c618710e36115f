//! Webhook signature schemes, checked over the raw body bytes before any guest code runs.
//!
//! Both schemes are HMAC-SHA256. The body is never decoded or re-serialised before it is
//! hashed (a re-serialised body would not match, and must not), each configured secret
//! is tried in turn so secrets can be rotated without dropping deliveries, and every
//! comparison is constant-time. With no secret configured nothing verifies: fail closed.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use connector_model::connector::WebhookSchemeName;

type HmacSha256 = Hmac<Sha256>;

/// Accepted clock difference of a Standard Webhooks timestamp.
pub const TIMESTAMP_TOLERANCE_SECS: i64 = 300;

/// A verified delivery's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedDelivery {
    /// The delivery id (`X-GitHub-Delivery` / `webhook-id`).
    pub delivery_id: String,
    /// The event name (`X-GitHub-Event`), when the scheme has one.
    pub event: Option<String>,
}

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// No secret is configured for the connector (fail closed).
    NoSecret,
    /// The signature header is missing.
    MissingSignature,
    /// The signature header is not in the scheme's form.
    MalformedSignature,
    /// No configured secret produces the signature.
    WrongSignature,
    /// The Standard Webhooks timestamp is outside the tolerance.
    StaleTimestamp,
    /// A header the scheme requires (delivery id, event, timestamp) is missing.
    MissingHeader(&'static str),
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyError::NoSecret => f.write_str("no webhook secret is configured for this connector; deliveries are refused until one is"),
            VerifyError::MissingSignature => f.write_str("the signature header is missing"),
            VerifyError::MalformedSignature => f.write_str("the signature header is malformed"),
            VerifyError::WrongSignature => f.write_str("the signature does not match any configured secret"),
            VerifyError::StaleTimestamp => write!(f, "webhook-timestamp is more than {TIMESTAMP_TOLERANCE_SECS} s away from the host's clock"),
            VerifyError::MissingHeader(h) => write!(f, "the `{h}` header is missing"),
        }
    }
}

impl std::error::Error for VerifyError {}

impl VerifyError {
    /// Whether this is an authentication failure (`401`) rather than a bad request (`400`).
    pub fn is_authentication(&self) -> bool {
        !matches!(self, VerifyError::MissingHeader(_))
    }
}

/// Header lookup by lower-case name.
pub trait Headers {
    /// The value of header `name` (lower case), if present and text.
    fn get(&self, name: &str) -> Option<&str>;
}

impl Headers for http::HeaderMap {
    fn get(&self, name: &str) -> Option<&str> {
        http::HeaderMap::get(self, name).and_then(|v| v.to_str().ok())
    }
}

impl Headers for [(&str, &str)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// What a delivery's headers present, checked before its body is read: everything but
/// the signature's match, which needs the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// `X-Hub-Signature-256`'s HMAC.
    Github {
        /// The HMAC-SHA256 the sender presents.
        signature: Vec<u8>,
    },
    /// Standard Webhooks: the id, the timestamp as sent, and every `v1` signature.
    Standard {
        /// `webhook-id`.
        id: String,
        /// `webhook-timestamp`, as sent.
        timestamp: String,
        /// Every `v1` signature of `webhook-signature`.
        signatures: Vec<Vec<u8>>,
    },
}

/// Checks what can be checked before the body is read — a secret is configured, the
/// signature header is present and in the scheme's form, a Standard Webhooks id and a
/// fresh timestamp — in the order [`verify`] reports them, so a delivery that cannot
/// verify is refused without buffering its body.
pub fn precheck(
    scheme: WebhookSchemeName,
    secrets: &[String],
    headers: &(impl Headers + ?Sized),
    now_unix: i64,
) -> Result<Presented, VerifyError> {
    if secrets.is_empty() {
        return Err(VerifyError::NoSecret);
    }
    match scheme {
        WebhookSchemeName::GithubHmacSha256 => {
            let header = headers
                .get("x-hub-signature-256")
                .ok_or(VerifyError::MissingSignature)?;
            let hex_sig = header
                .strip_prefix("sha256=")
                .ok_or(VerifyError::MalformedSignature)?;
            if !connector_model::ids::is_sha256_hex(hex_sig) {
                return Err(VerifyError::MalformedSignature);
            }
            let signature = hex::decode(hex_sig).map_err(|_| VerifyError::MalformedSignature)?;
            Ok(Presented::Github { signature })
        }
        WebhookSchemeName::StandardWebhooks => {
            let id = headers
                .get("webhook-id")
                .filter(|s| !s.is_empty())
                .ok_or(VerifyError::MissingHeader("webhook-id"))?;
            let timestamp = headers
                .get("webhook-timestamp")
                .ok_or(VerifyError::MissingHeader("webhook-timestamp"))?;
            let sent = headers
                .get("webhook-signature")
                .ok_or(VerifyError::MissingSignature)?;
            let ts: i64 = timestamp
                .trim()
                .parse()
                .map_err(|_| VerifyError::MalformedSignature)?;
            if (now_unix - ts).abs() > TIMESTAMP_TOLERANCE_SECS {
                return Err(VerifyError::StaleTimestamp);
            }
            let b64 = base64::engine::general_purpose::STANDARD;
            let signatures: Vec<Vec<u8>> = sent
                .split(' ')
                .filter_map(|s| s.strip_prefix("v1,"))
                .filter_map(|s| b64.decode(s).ok())
                .filter(|s| s.len() == 32)
                .collect();
            if signatures.is_empty() {
                return Err(VerifyError::MalformedSignature);
            }
            Ok(Presented::Standard {
                id: id.to_string(),
                timestamp: timestamp.trim().to_string(),
                signatures,
            })
        }
    }
}

/// Verifies a delivery under `scheme` with the connector's `secrets` (newest first).
pub fn verify(
    scheme: WebhookSchemeName,
    secrets: &[String],
    headers: &(impl Headers + ?Sized),
    body: &[u8],
    now_unix: i64,
) -> Result<VerifiedDelivery, VerifyError> {
    match precheck(scheme, secrets, headers, now_unix)? {
        Presented::Github { signature } => {
            let mut matched = false;
            for secret in secrets {
                let expected = hmac(secret.as_bytes(), &[body]);
                matched |= bool::from(expected.ct_eq(signature.as_slice()));
            }
            if !matched {
                return Err(VerifyError::WrongSignature);
            }
            let delivery_id = headers
                .get("x-github-delivery")
                .filter(|s| !s.is_empty())
                .ok_or(VerifyError::MissingHeader("X-GitHub-Delivery"))?;
            let event = headers
                .get("x-github-event")
                .filter(|s| !s.is_empty())
                .ok_or(VerifyError::MissingHeader("X-GitHub-Event"))?;
            Ok(VerifiedDelivery {
                delivery_id: delivery_id.to_string(),
                event: Some(event.to_string()),
            })
        }
        Presented::Standard {
            id,
            timestamp,
            signatures,
        } => {
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut matched = false;
            for secret in secrets {
                let raw = secret.strip_prefix("whsec_").unwrap_or(secret);
                let Ok(key) = b64.decode(raw) else {
                    continue;
                };
                let expected = hmac(
                    &key,
                    &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
                );
                for p in &signatures {
                    matched |= bool::from(expected.ct_eq(p.as_slice()));
                }
            }
            if !matched {
                return Err(VerifyError::WrongSignature);
            }
            Ok(VerifiedDelivery {
                delivery_id: id,
                event: None,
            })
        }
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for HMAC.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// Signs `body` as GitHub does (for tests, fakes and benchmarks).
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac(secret.as_bytes(), &[body])))
}

/// Signs a Standard Webhooks delivery (for tests, fakes and benchmarks).
pub fn standard_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .unwrap_or_default();
    format!(
        "v1,{}",
        b64.encode(hmac(
            &key,
            &[
                id.as_bytes(),
                b".",
                timestamp.to_string().as_bytes(),
                b".",
                body
            ]
        ))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify_github(
        secrets: &[String],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<VerifiedDelivery, VerifyError> {
        verify(
            WebhookSchemeName::GithubHmacSha256,
            secrets,
            headers,
            body,
            0,
        )
    }

    fn verify_standard(
        secrets: &[String],
        headers: &[(&str, &str)],
        body: &[u8],
        now_unix: i64,
    ) -> Result<VerifiedDelivery, VerifyError> {
        verify(
            WebhookSchemeName::StandardWebhooks,
            secrets,
            headers,
            body,
            now_unix,
        )
    }

    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn gh_headers(sig: &str) -> Vec<(&str, &str)> {
        vec![
            ("X-Hub-Signature-256", sig),
            ("X-GitHub-Delivery", "d-1"),
            ("X-GitHub-Event", "issues"),
        ]
    }

    #[test]
    fn github_documented_vector() {
        let h = gh_headers(GH_SIG);
        let v = verify_github(&[GH_SECRET.into()], h.as_slice(), b"Hello, World!").unwrap();
        assert_eq!(v.delivery_id, "d-1");
        assert_eq!(v.event.as_deref(), Some("issues"));
        assert_eq!(github_signature(GH_SECRET, b"Hello, World!"), GH_SIG);
    }

    #[test]
    fn github_bad_signatures() {
        let secrets = [GH_SECRET.to_string()];
        let body = b"Hello, World!";
        let missing: Vec<(&str, &str)> = vec![("X-GitHub-Delivery", "d"), ("X-GitHub-Event", "e")];
        assert_eq!(
            verify_github(&secrets, missing.as_slice(), body),
            Err(VerifyError::MissingSignature)
        );
        for bad in [
            "sha256=zz",
            "sha256=",
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha1=0123456789abcdef0123456789abcdef01234567",
            "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17",
        ] {
            assert_eq!(
                verify_github(&secrets, gh_headers(bad).as_slice(), body),
                Err(VerifyError::MalformedSignature),
                "{bad}"
            );
        }
        let truncated = &GH_SIG[..GH_SIG.len() - 2];
        assert_eq!(
            verify_github(&secrets, gh_headers(truncated).as_slice(), body),
            Err(VerifyError::MalformedSignature)
        );
        let wrong = "sha256=0000000000000000000000000000000000000000000000000000000000000000";
        assert_eq!(
            verify_github(&secrets, gh_headers(wrong).as_slice(), body),
            Err(VerifyError::WrongSignature)
        );
        // A re-serialised body no longer matches.
        assert_eq!(
            verify_github(&secrets, gh_headers(GH_SIG).as_slice(), b"Hello,  World!"),
            Err(VerifyError::WrongSignature)
        );
        // No secret: fail closed, even with a "valid" signature.
        assert_eq!(
            verify_github(&[], gh_headers(GH_SIG).as_slice(), body),
            Err(VerifyError::NoSecret)
        );
    }

    #[test]
    fn github_secret_rotation() {
        let h = gh_headers(GH_SIG);
        let body = b"Hello, World!";
        assert!(
            verify_github(&["new secret".into(), GH_SECRET.into()], h.as_slice(), body).is_ok()
        );
        // Rotated out.
        assert_eq!(
            verify_github(&["new secret".into()], h.as_slice(), body),
            Err(VerifyError::WrongSignature)
        );
    }

    const SW_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const SW_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const SW_TS: i64 = 1649367553;
    const SW_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const SW_SIG: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn sw_headers<'a>(ts: &'a str, sig: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("webhook-id", SW_ID),
            ("webhook-timestamp", ts),
            ("webhook-signature", sig),
        ]
    }

    #[test]
    fn standard_webhooks_reference_vector() {
        let ts = SW_TS.to_string();
        let v = verify_standard(
            &[SW_SECRET.into()],
            sw_headers(&ts, SW_SIG).as_slice(),
            SW_BODY,
            SW_TS,
        )
        .unwrap();
        assert_eq!(v.delivery_id, SW_ID);
        assert_eq!(standard_signature(SW_SECRET, SW_ID, SW_TS, SW_BODY), SW_SIG);
        // Several signatures: any one valid passes.
        let many = format!("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= {SW_SIG}");
        assert!(verify_standard(
            &[SW_SECRET.into()],
            sw_headers(&ts, &many).as_slice(),
            SW_BODY,
            SW_TS
        )
        .is_ok());
    }

    #[test]
    fn standard_webhooks_timestamps_and_signatures() {
        let secrets = [SW_SECRET.to_string()];
        let ts = SW_TS.to_string();
        assert_eq!(
            verify_standard(
                &secrets,
                sw_headers(&ts, SW_SIG).as_slice(),
                SW_BODY,
                SW_TS + 301
            ),
            Err(VerifyError::StaleTimestamp)
        );
        assert_eq!(
            verify_standard(
                &secrets,
                sw_headers(&ts, SW_SIG).as_slice(),
                SW_BODY,
                SW_TS - 301
            ),
            Err(VerifyError::StaleTimestamp)
        );
        assert!(verify_standard(
            &secrets,
            sw_headers(&ts, SW_SIG).as_slice(),
            SW_BODY,
            SW_TS + 300
        )
        .is_ok());
        assert_eq!(
            verify_standard(
                &secrets,
                sw_headers(&ts, "v2,abc").as_slice(),
                SW_BODY,
                SW_TS
            ),
            Err(VerifyError::MalformedSignature)
        );
        assert_eq!(
            verify_standard(
                &secrets,
                sw_headers(&ts, "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").as_slice(),
                SW_BODY,
                SW_TS
            ),
            Err(VerifyError::WrongSignature)
        );
        assert_eq!(
            verify_standard(&[], sw_headers(&ts, SW_SIG).as_slice(), SW_BODY, SW_TS),
            Err(VerifyError::NoSecret)
        );
        let no_id: Vec<(&str, &str)> =
            vec![("webhook-timestamp", "1"), ("webhook-signature", SW_SIG)];
        assert_eq!(
            verify_standard(&secrets, no_id.as_slice(), SW_BODY, SW_TS),
            Err(VerifyError::MissingHeader("webhook-id"))
        );
    }
}
