//! Who may call the API: the operator (one bearer token) and agents (short-lived JWTs,
//! each good for one agent only).
//!
//! The operator token is compared in constant time over SHA-256 digests, so neither its
//! content nor its length leaks through timing. Agent tokens are HS256 JWTs signed with a
//! key the host generates on first start and keeps next to its database (mode 0600); they
//! name exactly one agent, so a token can never reach another agent's tools.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::HostConfig;
use connector_model::error::{HostError, HostResult};
use connector_store::Store;

const AUDIENCE: &str = "connector-host/agent";

/// Who a request authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The operator (its token, or a console session).
    Operator,
    /// An agent, by id (its agent token).
    Agent(String),
}

/// The operator's bearer token.
pub struct OperatorToken {
    digest: [u8; 32],
}

impl OperatorToken {
    /// Keeps only the token's digest.
    pub fn new(token: &str) -> Self {
        Self {
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// From the hex SHA-256 of the token (how replicas share it without sharing the
    /// token itself); `None` if `hex` is not 64 hex digits.
    pub fn from_hex_digest(hex_digest: &str) -> Option<Self> {
        let bytes = hex::decode(hex_digest.trim()).ok()?;
        Some(Self {
            digest: bytes.try_into().ok()?,
        })
    }

    /// The hex SHA-256 of the token.
    pub fn hex_digest(&self) -> String {
        hex::encode(self.digest)
    }

    /// Constant-time check of a presented token.
    pub fn matches(&self, presented: &str) -> bool {
        self.matches_digest(&token_digest(presented))
    }

    /// Constant-time check of a presented token by its [`token_digest`].
    fn matches_digest(&self, presented: &[u8; 32]) -> bool {
        self.digest.ct_eq(presented).into()
    }
}

/// The SHA-256 of a presented bearer token: what the operator token is compared by, and
/// what agent tokens checked before are remembered by, so one digest serves both.
fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A random URL-safe secret of `bytes` random bytes.
pub fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&buf)
}

/// Reads a secret file, or creates it with a fresh secret (mode 0600). Returns the
/// secret and whether it was created now.
pub fn read_or_create_secret(path: &Path) -> std::io::Result<(String, bool)> {
    if let Ok(existing) = fs::read_to_string(path) {
        let existing = existing.trim().to_string();
        if !existing.is_empty() {
            return Ok((existing, false));
        }
    }
    let secret = random_secret(32);
    write_secret(path, &secret)?;
    Ok((secret, true))
}

/// Writes `secret` to `path` (mode 0600, replacing the file).
pub fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(secret.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

#[derive(Debug, Serialize, Deserialize)]
struct AgentClaims {
    sub: String,
    aud: String,
    iat: i64,
    exp: i64,
    /// The agent's token epoch when the token was minted (absent in tokens minted before
    /// revocation existed: they match an agent whose epoch is empty).
    #[serde(default)]
    ep: String,
}

/// Issues and checks agent tokens.
pub struct AgentTokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// Tokens whose signature was checked before, by the SHA-256 of the token (never the
    /// token itself): an agent sends the same token with every call, and checking a JWT
    /// (base64, two JSON documents, an HMAC) is about 4 µs of each request. A hit still
    /// checks the expiry; revocation (the epoch) is the caller's check either way.
    verified: parking_lot::RwLock<HashMap<[u8; 32], Verified>>,
}

/// What a checked token says.
#[derive(Clone)]
struct Verified {
    agent: String,
    epoch: String,
    expires_unix: i64,
}

/// Most tokens remembered as checked; past it the memory starts over.
const VERIFIED_CAPACITY: usize = 4096;

/// Why an agent token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Malformed, badly signed or expired.
    Invalid,
}

impl AgentTokens {
    /// Tokens signed and checked with `key` (shared by the replicas).
    pub fn new(key: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        validation.leeway = 0;
        Self {
            encoding: EncodingKey::from_secret(key),
            decoding: DecodingKey::from_secret(key),
            validation,
            verified: parking_lot::RwLock::new(HashMap::new()),
        }
    }

    /// A token for `agent` at token epoch `epoch`, valid for `ttl_seconds`; returns it
    /// with its expiry (unix s).
    pub fn issue(
        &self,
        agent: &str,
        epoch: &str,
        ttl_seconds: u64,
    ) -> Result<(String, i64), jsonwebtoken::errors::Error> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let exp = now + ttl_seconds as i64;
        let claims = AgentClaims {
            sub: agent.to_string(),
            aud: AUDIENCE.to_string(),
            iat: now,
            exp,
            ep: epoch.to_string(),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map(|t| (t, exp))
    }

    /// The agent a token was issued for, and the token epoch it carries.
    pub fn verify(&self, token: &str) -> Result<(String, String), TokenError> {
        self.verify_digested(token, token_digest(token))
    }

    /// [`Self::verify`] of a token whose [`token_digest`] is `key`.
    fn verify_digested(&self, token: &str, key: [u8; 32]) -> Result<(String, String), TokenError> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if let Some(v) = self.verified.read().get(&key) {
            // The same rule as the full check (leeway 0): valid up to and including `exp`.
            return if v.expires_unix >= now {
                Ok((v.agent.clone(), v.epoch.clone()))
            } else {
                Err(TokenError::Invalid)
            };
        }
        let claims = jsonwebtoken::decode::<AgentClaims>(token, &self.decoding, &self.validation)
            .map_err(|_| TokenError::Invalid)?
            .claims;
        let mut verified = self.verified.write();
        if verified.len() >= VERIFIED_CAPACITY {
            verified.clear();
        }
        verified.insert(
            key,
            Verified {
                agent: claims.sub.clone(),
                epoch: claims.ep.clone(),
                expires_unix: claims.exp,
            },
        );
        Ok((claims.sub, claims.ep))
    }
}

/// An issued agent token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedToken {
    /// The bearer token (shown once).
    pub token: String,
    /// When it stops working (RFC 3339).
    pub expires_at: String,
}

/// What a presented token names, before the agent's token epoch is checked.
pub(crate) enum Presented {
    /// The operator token.
    Operator,
    /// A valid agent token of `agent`, minted at token epoch `epoch`.
    Agent { agent: String, epoch: String },
}

/// The credentials a host accepts: its operator token and the agent tokens it signs.
pub(crate) struct Credentials {
    operator: OperatorToken,
    agent_tokens: AgentTokens,
}

impl Credentials {
    /// The credentials of a host on `config` and `store`, and the operator token if it
    /// was generated now (to print once). On a shared store every replica agrees on the
    /// same operator token and agent-token key through the database.
    pub(crate) async fn open(
        config: &HostConfig,
        store: &dyn Store,
    ) -> anyhow::Result<(Self, Option<String>)> {
        let (operator, generated) = operator_token(config, store).await?;
        let key_path = config.data_dir.join("agent-token-key");
        let (mut agent_key, _) = read_or_create_secret(&key_path)
            .with_context(|| format!("cannot read or create {}", key_path.display()))?;
        if store.is_shared() {
            // Every replica must accept the agent tokens any replica issued.
            agent_key = store
                .shared_secret("agent-token-key", &agent_key)
                .await
                .context("cannot read the shared agent-token key")?;
        }
        let credentials = Self {
            operator,
            agent_tokens: AgentTokens::new(agent_key.as_bytes()),
        };
        Ok((credentials, generated))
    }

    /// Whether `token` is the operator token (constant time).
    pub(crate) fn is_operator(&self, token: &str) -> bool {
        self.operator.matches(token)
    }

    /// Who `token` names: the operator, or an agent with the token epoch its token
    /// carries (the caller checks the epoch is still the agent's); `None` for neither.
    /// The token is digested once for both checks.
    pub(crate) fn presented(&self, token: &str) -> Option<Presented> {
        let digest = token_digest(token);
        if self.operator.matches_digest(&digest) {
            return Some(Presented::Operator);
        }
        let (agent, epoch) = self.agent_tokens.verify_digested(token, digest).ok()?;
        Some(Presented::Agent { agent, epoch })
    }

    /// The agent an agent token was issued for, and its token epoch; the caller checks
    /// the epoch is still the agent's.
    pub(crate) fn agent_of(&self, token: &str) -> Option<(String, String)> {
        self.agent_tokens.verify(token).ok()
    }

    /// A token for `agent` (default one hour, at most 30 days). The caller checks that
    /// the agent exists.
    pub(crate) fn issue(
        &self,
        agent: &str,
        epoch: &str,
        ttl_seconds: Option<u64>,
    ) -> HostResult<IssuedToken> {
        let ttl = ttl_seconds.unwrap_or(3600);
        if ttl == 0 || ttl > 30 * 24 * 3600 {
            return Err(HostError::invalid_request(
                "ttlSeconds must be between 1 and 2592000 (30 days)",
            ));
        }
        let (token, exp) = self.agent_tokens.issue(agent, epoch, ttl).map_err(|e| {
            HostError::internal(format!("could not sign an agent token: {e}")).with_source(e)
        })?;
        let expires_at = time::OffsetDateTime::from_unix_timestamp(exp)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        Ok(IssuedToken { token, expires_at })
    }
}

/// The operator token in force and, if it was generated now, its value (printed once).
///
/// Configured: that token. Otherwise, on a store only this process uses, the token in
/// `<data_dir>/operator-token` (created on first start). On a shared store the replicas
/// agree on one token through the database, which holds only its SHA-256: the first
/// replica to start generates and prints it, the others accept the same token.
async fn operator_token(
    config: &HostConfig,
    store: &dyn Store,
) -> anyhow::Result<(OperatorToken, Option<String>)> {
    if let Some(t) = config.operator_token.as_deref().filter(|t| !t.is_empty()) {
        return Ok((OperatorToken::new(t), None));
    }
    let path = config.data_dir.join("operator-token");
    if !store.is_shared() {
        let (token, created) = read_or_create_secret(&path)
            .with_context(|| format!("cannot read or create {}", path.display()))?;
        return Ok((OperatorToken::new(&token), created.then_some(token)));
    }
    let existing = std::fs::read_to_string(&path)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let (candidate, generated) = match existing {
        Some(t) => (t, false),
        None => (random_secret(32), true),
    };
    let mine = OperatorToken::new(&candidate);
    let shared = store
        .shared_secret("operator-token-sha256", &mine.hex_digest())
        .await
        .context("cannot read the shared operator token")?;
    if shared == mine.hex_digest() {
        if generated {
            write_secret(&path, &candidate)
                .with_context(|| format!("cannot write {}", path.display()))?;
            return Ok((mine, Some(candidate)));
        }
        return Ok((mine, None));
    }
    if !generated {
        tracing::warn!(
            path = %path.display(),
            "this replica's operator-token file does not match the token the replicas share; use the token the first replica printed, or set operator_token on every replica"
        );
    }
    let token = OperatorToken::from_hex_digest(&shared)
        .ok_or_else(|| anyhow::anyhow!("the shared operator token in the database is malformed"))?;
    Ok((token, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_token_matches_only_itself() {
        let t = OperatorToken::new("s3cret");
        assert!(t.matches("s3cret"));
        assert!(!t.matches("s3cre"));
        assert!(!t.matches(""));
    }

    #[test]
    fn agent_tokens_name_one_agent_and_expire() {
        let tokens = AgentTokens::new(b"0123456789abcdef0123456789abcdef");
        let (t, _) = tokens.issue("agent-1", "e1", 60).unwrap();
        assert_eq!(
            tokens.verify(&t).unwrap(),
            ("agent-1".to_string(), "e1".to_string())
        );
        let other = AgentTokens::new(b"another key another key another k");
        assert!(other.verify(&t).is_err());
        assert!(tokens.verify("not.a.jwt").is_err());
        let (expired, _) = tokens.issue("agent-1", "e1", 0).unwrap();
        // Checked once while still valid (it is remembered), then past its expiry.
        let _ = tokens.verify(&expired);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert!(tokens.verify(&expired).is_err());
    }

    #[test]
    fn remembered_tokens_still_expire_and_bad_ones_are_never_remembered() {
        let tokens = AgentTokens::new(b"0123456789abcdef0123456789abcdef");
        let (t, _) = tokens.issue("agent-1", "e1", 60).unwrap();
        assert!(tokens.verify(&t).is_ok());
        assert_eq!(tokens.verified.read().len(), 1);
        // A remembered token past its expiry is refused without a new check.
        for v in tokens.verified.write().values_mut() {
            v.expires_unix = time::OffsetDateTime::now_utc().unix_timestamp() - 1;
        }
        assert_eq!(tokens.verify(&t), Err(TokenError::Invalid));
        // A token with a wrong signature (its last character changed) is refused every
        // time and never remembered.
        let mut forged = t.clone();
        let last = if forged.ends_with('A') { "B" } else { "A" };
        forged.pop();
        forged.push_str(last);
        for _ in 0..2 {
            assert_eq!(tokens.verify(&forged), Err(TokenError::Invalid));
        }
        assert_eq!(tokens.verified.read().len(), 1);
        // The memory is bounded.
        for i in 0..VERIFIED_CAPACITY + 10 {
            let (t, _) = tokens.issue(&format!("a{i}"), "e", 60).unwrap();
            assert!(tokens.verify(&t).is_ok());
        }
        assert!(tokens.verified.read().len() <= VERIFIED_CAPACITY);
    }

    #[test]
    fn a_presented_token_is_the_operator_an_agent_or_nobody() {
        let credentials = Credentials {
            operator: OperatorToken::new("operator-s3cret"),
            agent_tokens: AgentTokens::new(b"0123456789abcdef0123456789abcdef"),
        };
        let agent = |p: Option<Presented>| match p {
            Some(Presented::Agent { agent, epoch }) => Some((agent, epoch)),
            _ => None,
        };
        assert!(matches!(
            credentials.presented("operator-s3cret"),
            Some(Presented::Operator)
        ));
        let issued = credentials.issue("agent-1", "e1", Some(60)).unwrap();
        // Twice: checked in full, then remembered by the same digest.
        for _ in 0..2 {
            assert_eq!(
                agent(credentials.presented(&issued.token)),
                Some(("agent-1".to_string(), "e1".to_string()))
            );
        }
        // The operator token is not remembered as an agent's, nor an agent token taken
        // for the operator's.
        assert!(credentials.is_operator("operator-s3cret"));
        assert!(!credentials.is_operator(&issued.token));
        assert!(credentials.agent_of("operator-s3cret").is_none());
        for nobody in ["operator-s3cre", "", "not.a.jwt"] {
            assert!(credentials.presented(nobody).is_none(), "{nobody}");
        }
        let other = AgentTokens::new(b"another key another key another k");
        let (foreign, _) = other.issue("agent-1", "e1", 60).unwrap();
        assert!(credentials.presented(&foreign).is_none());
    }

    #[test]
    fn secrets_are_created_once_with_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/operator-token");
        let (a, created) = read_or_create_secret(&path).unwrap();
        assert!(created);
        let (b, created) = read_or_create_secret(&path).unwrap();
        assert!(!created);
        assert_eq!(a, b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }
}
