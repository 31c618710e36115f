//! The host's GitHub App: it holds the App's private key and mints installation access
//! tokens for connectors (CONTRACT.md §4).
//!
//! Why it lives in the host and not in a connector:
//!
//! - **The key never enters a guest.** A guest asks `github-installation-token` for the
//!   installation its binding names and receives only the short-lived installation token
//!   (an hour at most, scoped to that installation). The App key, which could mint tokens
//!   for every installation of the App, stays in this process; neither it nor a JWT nor a
//!   token appears in an error, a log line or a `Debug` output.
//! - **The key is checked at start-up.** [`GithubApp::new`] reads and parses the PEM file
//!   (PKCS#1 as GitHub hands it out, PKCS#8, or either with its line breaks escaped as
//!   `\n` after a trip through an environment variable) and signs a throwaway JWT, so a
//!   wrong path or a damaged key stops `serve` with a message naming the file, instead of
//!   failing the first tool call hours later. (A well-formed key of *another* App can only
//!   be told apart by GitHub: its 401 is reported as such.)
//! - **Tokens are cached per installation** and handed out until 5 minutes before their
//!   `expires_at`, so a token given to a guest or an agent is always good for a few more
//!   minutes; a token closer to its end (or past it) is never handed out from the cache.
//!   GitHub rate-limits token creation, and an exchange costs a round trip: most calls are
//!   served from the cache.
//! - **Single flight.** At most one exchange per installation is in flight: every caller
//!   that arrives meanwhile waits for that same exchange and gets its result (a token, or
//!   the same error). The exchange runs in its own task, so a caller that gives up (a guest
//!   call hitting its deadline) neither cancels it nor wastes it. Installations do not wait
//!   for each other.
//! - **Clock skew.** GitHub checks the JWT's `iat` (not in its future) and `exp` (at most
//!   10 minutes ahead) against its own clock. When it rejects them, the offset between
//!   its `Date` header and our clock is remembered and the exchange is retried once with
//!   corrected timestamps; later JWTs, and the freshness of cached tokens, use the offset.
//!   A second rejection is an error (never a loop) that tells the operator to fix the
//!   clock.

mod error;
mod key;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub use error::GithubAppError;
pub use key::KeyProblem;

use crate::config::GithubAppSettings;
use connector_model::error::HandlerError;
use connector_runtime::{wit, InstallationTokens};

/// A cached token is handed out until this long before its `expires_at`.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// The JWT's `iat` is this far in the past (GitHub's advice against clock drift).
pub const JWT_BACKDATE: Duration = Duration::from_secs(60);
/// The JWT's `exp` is this far in the future (GitHub allows at most 10 minutes).
pub const JWT_LIFETIME: Duration = Duration::from_secs(9 * 60);
/// Bound of one exchange with GitHub (connecting, sending, reading the answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The REST API version the host speaks.
pub const GITHUB_API_VERSION: &str = "2022-11-28";
/// The `User-Agent` of the host's requests (GitHub refuses requests without one).
pub const USER_AGENT: &str = "connector-host";
/// The most of an answer to a token exchange that is read: GitHub's are about 1 KiB;
/// a server at `api_url` streaming without end is cut off here.
pub const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// An installation access token.
#[derive(Clone, PartialEq, Eq)]
pub struct InstallationToken {
    /// The bearer token (`ghs_…`).
    pub token: String,
    /// When GitHub stops accepting it (as GitHub said).
    pub expires_at: OffsetDateTime,
}

impl fmt::Debug for InstallationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstallationToken")
            .field("token", &"***")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The JWT `iss`: a number for a numeric App id, a string for a Client ID (`Iv1.…`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Issuer {
    Id(u64),
    ClientId(String),
}

#[derive(Serialize)]
struct Claims<'a> {
    iat: i64,
    exp: i64,
    iss: &'a Issuer,
}

/// Mints and caches installation tokens of one GitHub App. Cheap to clone (shared state).
#[derive(Clone)]
pub struct GithubApp {
    inner: Arc<Inner>,
}

struct Inner {
    app_id: String,
    iss: Issuer,
    key: EncodingKey,
    key_path: PathBuf,
    api_url: String,
    http: reqwest::Client,
    timeout: Duration,
    /// GitHub's clock minus ours, in seconds (0 until GitHub rejected a JWT's timestamps).
    clock_offset: AtomicI64,
    exchanges: AtomicU64,
    slots: Mutex<HashMap<u64, Slot>>,
    next_flight: AtomicU64,
}

type Flight = Shared<BoxFuture<'static, Result<InstallationToken, GithubAppError>>>;

/// The state of one installation: its cached token and the exchange in flight.
#[derive(Default)]
struct Slot {
    cached: Option<InstallationToken>,
    inflight: Option<(u64, Flight)>,
}

impl GithubApp {
    /// Reads and checks the App key (it signs a throwaway JWT) and prepares the HTTP
    /// client. Fails with an operator-readable error naming the key file.
    pub fn new(settings: &GithubAppSettings) -> Result<GithubApp, GithubAppError> {
        Self::with_timeout(settings, REQUEST_TIMEOUT)
    }

    /// [`GithubApp::new`] with another bound on each exchange than [`REQUEST_TIMEOUT`].
    pub fn with_timeout(
        settings: &GithubAppSettings,
        timeout: Duration,
    ) -> Result<GithubApp, GithubAppError> {
        let app_id = settings.app_id.trim().to_string();
        if app_id.is_empty() {
            return Err(GithubAppError::InvalidSetting {
                setting: "app_id",
                reason: "it is empty; give the App id (a number) or its Client ID".into(),
            });
        }
        let iss = match app_id.parse::<u64>() {
            Ok(id) => Issuer::Id(id),
            Err(_) => Issuer::ClientId(app_id.clone()),
        };
        let api_url = settings.api_url.trim().trim_end_matches('/').to_string();
        match reqwest::Url::parse(&api_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => {
                return Err(GithubAppError::InvalidSetting {
                    setting: "api_url",
                    reason: format!(
                        "`{api_url}` is not an http(s) URL such as https://api.github.com"
                    ),
                })
            }
        }
        let key_path = settings.private_key_path.clone();
        let key = key::load(&key_path)?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| GithubAppError::InvalidSetting {
                setting: "api_url",
                reason: format!(
                    "cannot build an HTTP client: {}",
                    connector_remote_answer::error_chain(&err)
                ),
            })?;
        let inner = Inner {
            app_id,
            iss,
            key,
            key_path,
            api_url,
            http,
            timeout,
            clock_offset: AtomicI64::new(0),
            exchanges: AtomicU64::new(0),
            slots: Mutex::new(HashMap::new()),
            next_flight: AtomicU64::new(0),
        };
        // Prove the key signs (the PEM parse alone does not check the RSA numbers).
        inner.jwt().map_err(|reason| GithubAppError::InvalidKey {
            path: inner.key_path.clone(),
            reason,
        })?;
        Ok(GithubApp {
            inner: Arc::new(inner),
        })
    }

    /// The App id or Client ID (the JWT `iss`).
    pub fn app_id(&self) -> &str {
        &self.inner.app_id
    }

    /// The key file the App was loaded from.
    pub fn private_key_path(&self) -> &Path {
        &self.inner.key_path
    }

    /// The GitHub REST base URL.
    pub fn api_url(&self) -> &str {
        &self.inner.api_url
    }

    /// How many HTTP exchanges with GitHub were made (retries included).
    pub fn exchanges(&self) -> u64 {
        self.inner.exchanges.load(Ordering::Relaxed)
    }

    /// GitHub's clock minus ours, in seconds, as learnt from a rejected JWT (else 0).
    pub fn clock_offset_secs(&self) -> i64 {
        self.inner.clock_offset.load(Ordering::Relaxed)
    }

    /// A token for `installation_id`: the cached one while it has more than
    /// [`REFRESH_MARGIN`] left, else a fresh one (one exchange per installation in
    /// flight; concurrent callers share its result).
    pub async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<InstallationToken, GithubAppError> {
        let flight = {
            let mut slots = self.inner.slots.lock();
            let slot = slots.entry(installation_id).or_default();
            if let Some(cached) = &slot.cached {
                if self.inner.is_fresh(cached) {
                    return Ok(cached.clone());
                }
                slot.cached = None;
            }
            match &slot.inflight {
                Some((_, flight)) => flight.clone(),
                None => {
                    let id = self.inner.next_flight.fetch_add(1, Ordering::Relaxed);
                    let flight = self.start_exchange(installation_id, id);
                    slot.inflight = Some((id, flight.clone()));
                    flight
                }
            }
        };
        flight.await
    }

    /// Spawns the exchange for `installation_id`; the task files its result in the slot.
    /// Called with the slots locked, so the task cannot clear the slot before it is set.
    fn start_exchange(&self, installation_id: u64, flight_id: u64) -> Flight {
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let result = std::panic::AssertUnwindSafe(inner.exchange(installation_id))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(GithubAppError::Internal {
                        installation_id,
                        reason: "the exchange panicked".into(),
                    })
                });
            inner.finish(installation_id, flight_id, &result);
            result
        });
        let inner = self.inner.clone();
        async move {
            match task.await {
                Ok(result) => result,
                Err(err) => {
                    let result = Err(GithubAppError::Internal {
                        installation_id,
                        reason: format!("the exchange task did not finish ({err})"),
                    });
                    inner.finish(installation_id, flight_id, &result);
                    result
                }
            }
        }
        .boxed()
        .shared()
    }
}

impl Inner {
    /// Our clock corrected by the offset learnt from GitHub.
    fn github_now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
            + time::Duration::seconds(self.clock_offset.load(Ordering::Relaxed))
    }

    /// Whether a token has more than [`REFRESH_MARGIN`] left by GitHub's clock.
    fn is_fresh(&self, token: &InstallationToken) -> bool {
        token.expires_at - self.github_now() > REFRESH_MARGIN
    }

    /// Ends flight `flight_id`: clears it and caches a token worth caching.
    fn finish(
        &self,
        installation_id: u64,
        flight_id: u64,
        result: &Result<InstallationToken, GithubAppError>,
    ) {
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(&installation_id) else {
            return;
        };
        if !matches!(&slot.inflight, Some((id, _)) if *id == flight_id) {
            return;
        }
        slot.inflight = None;
        if let Ok(token) = result {
            if self.is_fresh(token) {
                slot.cached = Some(token.clone());
            }
        }
    }

    /// A JWT for the App, its timestamps corrected by the known clock offset. The error is
    /// a reason without key material.
    fn jwt(&self) -> Result<String, KeyProblem> {
        let now = self.github_now().unix_timestamp();
        let claims = Claims {
            iat: now - JWT_BACKDATE.as_secs() as i64,
            exp: now + JWT_LIFETIME.as_secs() as i64,
            iss: &self.iss,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key)
            .map_err(KeyProblem::CannotSign)
    }

    /// One exchange: `POST /app/installations/{id}/access_tokens`, retried once when
    /// GitHub rejects the JWT's timestamps.
    async fn exchange(&self, installation_id: u64) -> Result<InstallationToken, GithubAppError> {
        let url = format!(
            "{}/app/installations/{installation_id}/access_tokens",
            self.api_url
        );
        let mut corrected = false;
        loop {
            let jwt = self.jwt().map_err(|reason| GithubAppError::InvalidKey {
                path: self.key_path.clone(),
                reason,
            })?;
            self.exchanges.fetch_add(1, Ordering::Relaxed);
            let response = self
                .http
                .post(&url)
                .bearer_auth(jwt)
                .header(reqwest::header::ACCEPT, "application/vnd.github+json")
                .header("X-GitHub-Api-Version", GITHUB_API_VERSION)
                .send()
                .await
                .map_err(|err| self.transport_error(installation_id, &err))?;
            let status = response.status();
            let server_date = response
                .headers()
                .get(reqwest::header::DATE)
                .and_then(|value| value.to_str().ok())
                .and_then(parse_http_date);
            let received_at = OffsetDateTime::now_utc();
            let body = connector_remote_answer::read_at_most(response, MAX_ANSWER_BYTES)
                .await
                .map_err(|err| self.answer_error(installation_id, err))?;

            if status.is_success() {
                return self.parse_token(installation_id, &body);
            }
            let message = github_message(&body);
            match status.as_u16() {
                401 if is_clock_message(&message) => {
                    let Some(date) = server_date else {
                        return Err(GithubAppError::ClockSkew {
                            message,
                            detail: "and sent no usable `Date` header to correct them by".into(),
                        });
                    };
                    let offset = (date - received_at).whole_seconds();
                    if corrected {
                        return Err(GithubAppError::ClockSkew {
                            message,
                            detail: format!(
                                "also after one retry corrected for GitHub's clock (offset \
                                 {offset} s from its `Date` header)"
                            ),
                        });
                    }
                    corrected = true;
                    let previous = self.clock_offset.swap(offset, Ordering::Relaxed);
                    tracing::warn!(
                        installation_id,
                        clock_offset_secs = offset,
                        previous_offset_secs = previous,
                        github_message = %message,
                        "GitHub rejected the App JWT's timestamps; correcting by the offset of its Date header and retrying once (check this machine's clock)"
                    );
                }
                401 => {
                    return Err(GithubAppError::JwtRejected {
                        message,
                        app_id: self.app_id.clone(),
                        key_path: self.key_path.clone(),
                    })
                }
                403 if message.to_ascii_lowercase().contains("suspended") => {
                    return Err(GithubAppError::Suspended {
                        installation_id,
                        message,
                    })
                }
                404 => return Err(GithubAppError::UnknownInstallation { installation_id }),
                code => {
                    return Err(GithubAppError::Status {
                        installation_id,
                        status: code,
                        message,
                    })
                }
            }
        }
    }

    /// `{"token", "expires_at"}` out of a success body. Errors never quote the body: it
    /// may hold the token.
    fn parse_token(
        &self,
        installation_id: u64,
        body: &[u8],
    ) -> Result<InstallationToken, GithubAppError> {
        let invalid = |reason: &str| GithubAppError::InvalidResponse {
            installation_id,
            reason: reason.to_string(),
        };
        let value: Value =
            serde_json::from_slice(body).map_err(|_| invalid("the body is not JSON"))?;
        let token = value
            .get("token")
            .and_then(Value::as_str)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| invalid("no string `token`"))?;
        let expires_at = value
            .get("expires_at")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("no string `expires_at`"))?;
        let expires_at = OffsetDateTime::parse(expires_at, &Rfc3339)
            .map_err(|_| invalid("`expires_at` is not an RFC 3339 time"))?;
        if expires_at <= self.github_now() {
            return Err(GithubAppError::ExpiredToken {
                installation_id,
                expires_at: format_rfc3339(expires_at),
            });
        }
        Ok(InstallationToken {
            token: token.to_string(),
            expires_at,
        })
    }

    fn answer_error(
        &self,
        installation_id: u64,
        err: connector_remote_answer::AnswerError,
    ) -> GithubAppError {
        use connector_remote_answer::AnswerError;
        match err {
            AnswerError::TooLarge { limit } => GithubAppError::InvalidResponse {
                installation_id,
                reason: format!(
                    "it is larger than {}, far more than a token",
                    connector_remote_answer::size(limit)
                ),
            },
            err if err.is_timeout() => GithubAppError::Timeout {
                installation_id,
                api_url: self.api_url.clone(),
                after: self.timeout,
            },
            AnswerError::Failed { reason, .. } => GithubAppError::Transport {
                installation_id,
                api_url: self.api_url.clone(),
                reason,
            },
        }
    }

    fn transport_error(&self, installation_id: u64, err: &reqwest::Error) -> GithubAppError {
        if err.is_timeout() {
            GithubAppError::Timeout {
                installation_id,
                api_url: self.api_url.clone(),
                after: self.timeout,
            }
        } else {
            GithubAppError::Transport {
                installation_id,
                api_url: self.api_url.clone(),
                reason: connector_remote_answer::error_chain(err),
            }
        }
    }
}

/// Whether GitHub's 401 message is about the JWT's `iat`/`exp` (GitHub says, e.g.,
/// "'Issued at' claim ('iat') must be an Integer representing the time that the assertion
/// was issued", "'Expiration time' claim ('exp') is too far in the future", "'Expiration
/// time' claim ('exp') must be a numeric value representing the future time at which the
/// assertion expires").
fn is_clock_message(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "'iat'",
        "('exp')",
        "'exp'",
        "issued at",
        "expiration time",
        "expired",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

/// GitHub's `message` field, or a short, printable prefix of a non-JSON body.
fn github_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        if let Some(message) = value.get("message").and_then(Value::as_str) {
            return message.chars().take(500).collect();
        }
    }
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .filter(|c| !c.is_control() || *c == ' ')
        .take(200)
        .collect();
    if text.trim().is_empty() {
        "(no message)".into()
    } else {
        text
    }
}

/// An HTTP `Date` (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(value: &str) -> Option<OffsetDateTime> {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(value.trim(), format)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

fn format_rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

impl fmt::Debug for GithubApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cached, inflight) = {
            let slots = self.inner.slots.lock();
            (
                slots.values().filter(|s| s.cached.is_some()).count(),
                slots.values().filter(|s| s.inflight.is_some()).count(),
            )
        };
        f.debug_struct("GithubApp")
            .field("app_id", &self.inner.app_id)
            .field("private_key_path", &self.inner.key_path)
            .field("private_key", &"***")
            .field("api_url", &self.inner.api_url)
            .field("clock_offset_secs", &self.clock_offset_secs())
            .field("cached_tokens", &cached)
            .field("exchanges_in_flight", &inflight)
            .field("exchanges", &self.exchanges())
            .finish()
    }
}

#[async_trait::async_trait]
impl InstallationTokens for GithubApp {
    async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<wit::AccessToken, HandlerError> {
        let token = GithubApp::installation_token(self, installation_id)
            .await
            .map_err(HandlerError::from_source)?;
        Ok(wit::AccessToken {
            token: token.token,
            expires_at: format_rfc3339(token.expires_at),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_PKCS1: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/github/app-key-pkcs1.pem"
    );

    fn settings(key: &str, api_url: &str) -> GithubAppSettings {
        GithubAppSettings {
            app_id: "12345".into(),
            private_key_path: PathBuf::from(key),
            api_url: api_url.into(),
        }
    }

    #[test]
    fn clock_messages() {
        for message in [
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
            "'Expiration time' claim ('exp') is too far in the future",
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        ] {
            assert!(is_clock_message(message), "{message}");
        }
        for message in [
            "A JSON web token could not be decoded",
            "Integration not found",
            "Bad credentials",
        ] {
            assert!(!is_clock_message(message), "{message}");
        }
    }

    #[test]
    fn http_dates() {
        let date = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("parses");
        assert_eq!(date.unix_timestamp(), 784_111_777);
        assert!(parse_http_date("yesterday").is_none());
    }

    #[test]
    fn github_messages() {
        assert_eq!(
            github_message(br#"{"message":"Not Found","documentation_url":"x"}"#),
            "Not Found"
        );
        assert_eq!(github_message(b"  "), "(no message)");
        assert_eq!(github_message(b"oops\n"), "oops");
    }

    #[test]
    fn issuer_is_a_number_for_numeric_ids() {
        let claims = |iss: &Issuer| {
            serde_json::to_value(Claims {
                iat: 1,
                exp: 2,
                iss,
            })
            .expect("serializes")["iss"]
                .clone()
        };
        assert_eq!(claims(&Issuer::Id(42)), serde_json::json!(42));
        assert_eq!(
            claims(&Issuer::ClientId("Iv1.abc".into())),
            serde_json::json!("Iv1.abc")
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let mut s = settings(KEY_PKCS1, "https://api.github.com");
        s.app_id = "  ".into();
        let err = GithubApp::new(&s).expect_err("empty id");
        assert!(err.to_string().contains("github_app.app_id"), "{err}");
        let err = GithubApp::new(&settings(KEY_PKCS1, "api.github.com")).expect_err("no scheme");
        assert!(err.to_string().contains("github_app.api_url"), "{err}");
    }

    #[tokio::test]
    async fn debug_and_errors_never_show_key_or_token() {
        let key_text = std::fs::read_to_string(KEY_PKCS1).expect("fixture");
        let key_lines: Vec<&str> = key_text
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        let app = GithubApp::new(&settings(KEY_PKCS1, "http://127.0.0.1:9")).expect("loads");
        let jwt = app.inner.jwt().expect("signs");

        // A token in the cache must not show either.
        let token = InstallationToken {
            token: "ghs_supersecrettoken0123456789".into(),
            expires_at: OffsetDateTime::now_utc() + time::Duration::hours(1),
        };
        app.inner.slots.lock().entry(7).or_default().cached = Some(token.clone());
        assert_eq!(
            app.installation_token(7).await.expect("cached").token,
            token.token
        );

        let mut outputs = vec![
            format!("{app:?}"),
            format!("{app:#?}"),
            format!("{token:?}"),
            format!("{token:#?}"),
        ];
        let errors = vec![
            GithubAppError::InvalidKey {
                path: KEY_PKCS1.into(),
                reason: match key::parse(
                    b"-----BEGIN RSA PRIVATE KEY-----\nQUJD\n-----END RSA PRIVATE KEY-----",
                ) {
                    Ok(_) => panic!("a damaged key parsed"),
                    Err(reason) => reason,
                },
            },
            GithubAppError::JwtRejected {
                message: "A JSON web token could not be decoded".into(),
                app_id: "12345".into(),
                key_path: KEY_PKCS1.into(),
            },
            GithubAppError::InvalidResponse {
                installation_id: 7,
                reason: "no string `expires_at`".into(),
            },
        ];
        for err in &errors {
            outputs.push(err.to_string());
            outputs.push(format!("{err:?}"));
        }
        // A transport error from a real (refused) exchange.
        let err = app
            .installation_token(8)
            .await
            .expect_err("nothing listens");
        assert!(matches!(err, GithubAppError::Transport { .. }), "{err:?}");
        outputs.push(err.to_string());
        outputs.push(format!("{err:?}"));

        for output in outputs {
            assert!(!output.contains(&token.token), "token leaked: {output}");
            assert!(!output.contains(&jwt), "JWT leaked: {output}");
            for line in &key_lines {
                assert!(!output.contains(line), "key leaked: {output}");
            }
        }
    }

    #[tokio::test]
    async fn an_endless_answer_is_cut_off_at_1_mib() {
        let (url, sent) = connector_remote_answer::endless::start("application/json");
        let app = GithubApp::new(&settings(KEY_PKCS1, &url)).expect("loads");
        let err = app.installation_token(7).await.expect_err("no token");
        assert!(
            matches!(err, GithubAppError::InvalidResponse { .. })
                && err.to_string().contains("larger than 1 MiB"),
            "{err}"
        );
        let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            sent < 64 * 1024 * 1024,
            "{sent} bytes sent before the read stopped"
        );
    }

    #[tokio::test]
    async fn expired_cache_entries_are_not_handed_out() {
        let app = GithubApp::new(&settings(KEY_PKCS1, "http://127.0.0.1:9")).expect("loads");
        app.inner.slots.lock().entry(7).or_default().cached = Some(InstallationToken {
            token: "ghs_nearly_expired".into(),
            expires_at: OffsetDateTime::now_utc() + time::Duration::minutes(4),
        });
        // Nothing listens on port 9: the only way to succeed would be the stale token.
        let err = app.installation_token(7).await.expect_err("not handed out");
        assert!(matches!(err, GithubAppError::Transport { .. }), "{err:?}");
        assert_eq!(app.exchanges(), 1);
    }
}
