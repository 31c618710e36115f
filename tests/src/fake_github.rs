//! A fake GitHub for tests: the one endpoint the host uses,
//! `POST /app/installations/{id}/access_tokens`, served on 127.0.0.1.
//!
//! It checks the App JWT the way GitHub does: RS256 signature against the App's public
//! key, `iss` = the App id, `iat` not in its future (60 s of leeway), `exp` in its future
//! and at most 10 minutes ahead, `exp − iat` ≤ 10 minutes; and answers with GitHub's own
//! messages. Its clock can run ahead or behind ([`FakeGithub::set_skew`]), and it sends
//! that clock in its `Date` header, as GitHub does.
//!
//! Installations must be [`FakeGithub::register`]ed; any other id gets `404 Not Found`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rand::distr::{Alphanumeric, SampleString};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// GitHub's message for a JWT whose `iat` is in its future.
pub const IAT_MESSAGE: &str =
    "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
/// GitHub's message for a JWT whose `exp` is more than 10 minutes ahead.
pub const EXP_TOO_FAR_MESSAGE: &str = "'Expiration time' claim ('exp') is too far in the future";
/// GitHub's message for a JWT whose `exp` is past.
pub const EXP_PAST_MESSAGE: &str = "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
/// GitHub's message for a JWT it cannot verify.
pub const UNDECODABLE_MESSAGE: &str = "A JSON web token could not be decoded";
/// GitHub's message for a suspended installation.
pub const SUSPENDED_MESSAGE: &str = "This installation has been suspended";

/// What the fake saw of one request.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub installation_id: u64,
    pub accept: Option<String>,
    pub api_version: Option<String>,
    pub user_agent: Option<String>,
    /// The JWT claims (`Null` when the JWT did not verify).
    pub claims: Value,
    /// The status the fake answered.
    pub status: u16,
}

#[derive(Debug)]
struct Knobs {
    skew_secs: i64,
    delay: Duration,
    installation_delays: HashMap<u64, Duration>,
    token_ttl: Duration,
    registered: HashSet<u64>,
    suspended: HashSet<u64>,
    always_reject_clock: bool,
}

struct Shared {
    decoding: DecodingKey,
    app_id: String,
    knobs: Mutex<Knobs>,
    exchanges: AtomicU64,
    requests: Mutex<Vec<RecordedRequest>>,
    issued: Mutex<Vec<String>>,
}

/// A running fake GitHub. Stops when dropped.
pub struct FakeGithub {
    url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeGithub {
    /// Starts a fake for the App `app_id` whose JWTs verify with `public_key_pem`.
    pub async fn start(public_key_pem: &str, app_id: &str) -> FakeGithub {
        let decoding =
            DecodingKey::from_rsa_pem(public_key_pem.as_bytes()).expect("an RSA public key PEM");
        let shared = Arc::new(Shared {
            decoding,
            app_id: app_id.to_string(),
            knobs: Mutex::new(Knobs {
                skew_secs: 0,
                delay: Duration::ZERO,
                installation_delays: HashMap::new(),
                token_ttl: Duration::from_secs(3600),
                registered: HashSet::new(),
                suspended: HashSet::new(),
                always_reject_clock: false,
            }),
            exchanges: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            issued: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .route("/app/installations/{id}/access_tokens", post(access_tokens))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeGithub {
            url: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// The base URL (`github_app.api_url`).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Requests received on the token endpoint, answered or not.
    pub fn exchanges(&self) -> u64 {
        self.shared.exchanges.load(Ordering::SeqCst)
    }

    /// What the fake saw, in order of answer.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Every token handed out.
    pub fn issued_tokens(&self) -> Vec<String> {
        self.shared.issued.lock().unwrap().clone()
    }

    /// Makes `installation_id` exist (and not suspended).
    pub fn register(&self, installation_id: u64) {
        let mut knobs = self.shared.knobs.lock().unwrap();
        knobs.registered.insert(installation_id);
        knobs.suspended.remove(&installation_id);
    }

    /// Suspends `installation_id` (it is registered too): `403`.
    pub fn suspend(&self, installation_id: u64) {
        let mut knobs = self.shared.knobs.lock().unwrap();
        knobs.registered.insert(installation_id);
        knobs.suspended.insert(installation_id);
    }

    /// The fake's clock runs `secs` ahead of the real one (behind when negative).
    pub fn set_skew(&self, secs: i64) {
        self.shared.knobs.lock().unwrap().skew_secs = secs;
    }

    /// Every answer waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.knobs.lock().unwrap().delay = delay;
    }

    /// Answers for `installation_id` wait this long first (instead of the global delay).
    pub fn set_installation_delay(&self, installation_id: u64, delay: Duration) {
        self.shared
            .knobs
            .lock()
            .unwrap()
            .installation_delays
            .insert(installation_id, delay);
    }

    /// Tokens expire `ttl` after they are minted (by the fake's clock). Default 1 h.
    pub fn set_token_ttl(&self, ttl: Duration) {
        self.shared.knobs.lock().unwrap().token_ttl = ttl;
    }

    /// Rejects every JWT with GitHub's `iat` message, whatever its timestamps.
    pub fn always_reject_clock(&self, on: bool) {
        self.shared.knobs.lock().unwrap().always_reject_clock = on;
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(at: OffsetDateTime) -> String {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    at.to_offset(time::UtcOffset::UTC)
        .format(format)
        .expect("formats")
}

fn answer(status: StatusCode, body: Value, now: OffsetDateTime) -> Response {
    let mut response = (status, Json(body)).into_response();
    response.headers_mut().insert(
        header::DATE,
        HeaderValue::from_str(&http_date(now)).expect("header value"),
    );
    response
}

fn error_body(message: &str, status: StatusCode) -> Value {
    json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": status.as_u16().to_string(),
    })
}

async fn access_tokens(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    shared.exchanges.fetch_add(1, Ordering::SeqCst);
    let installation_id = id.parse::<u64>().ok();
    let delay = {
        let knobs = shared.knobs.lock().unwrap();
        installation_id
            .and_then(|id| knobs.installation_delays.get(&id).copied())
            .unwrap_or(knobs.delay)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut record = RecordedRequest {
        installation_id: installation_id.unwrap_or(0),
        accept: text(header::ACCEPT),
        api_version: text(header::HeaderName::from_static("x-github-api-version")),
        user_agent: text(header::USER_AGENT),
        claims: Value::Null,
        status: 0,
    };
    let (status, body, now) = decide(&shared, installation_id, &headers, &mut record);
    record.status = status.as_u16();
    shared.requests.lock().unwrap().push(record);
    answer(status, body, now)
}

/// The answer to one request: (status, body, the fake's clock).
fn decide(
    shared: &Shared,
    installation_id: Option<u64>,
    headers: &HeaderMap,
    record: &mut RecordedRequest,
) -> (StatusCode, Value, OffsetDateTime) {
    let knobs = shared.knobs.lock().unwrap();
    let now = OffsetDateTime::now_utc() + time::Duration::seconds(knobs.skew_secs);
    let unauthorized = |message: &str| {
        (
            StatusCode::UNAUTHORIZED,
            error_body(message, StatusCode::UNAUTHORIZED),
            now,
        )
    };
    if record.user_agent.as_deref().unwrap_or("").is_empty() {
        let status = StatusCode::FORBIDDEN;
        return (
            status,
            error_body(
                "Request forbidden by administrative rules. Please make sure your request has a User-Agent header",
                status,
            ),
            now,
        );
    }
    let Some(jwt) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return unauthorized(UNDECODABLE_MESSAGE);
    };
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims = HashSet::new();
    validation.leeway = 0;
    let claims = match jsonwebtoken::decode::<Value>(jwt, &shared.decoding, &validation) {
        Ok(data) if data.header.alg == Algorithm::RS256 => data.claims,
        _ => return unauthorized(UNDECODABLE_MESSAGE),
    };
    record.claims = claims.clone();
    let iss = match &claims["iss"] {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    if iss != shared.app_id {
        return unauthorized("Integration not found");
    }
    let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return unauthorized(IAT_MESSAGE);
    };
    let t = now.unix_timestamp();
    if knobs.always_reject_clock || iat > t + 60 {
        return unauthorized(IAT_MESSAGE);
    }
    if exp <= t {
        return unauthorized(EXP_PAST_MESSAGE);
    }
    if exp > t + 600 || exp - iat > 600 {
        return unauthorized(EXP_TOO_FAR_MESSAGE);
    }
    let Some(installation_id) = installation_id.filter(|id| knobs.registered.contains(id)) else {
        return (
            StatusCode::NOT_FOUND,
            error_body("Not Found", StatusCode::NOT_FOUND),
            now,
        );
    };
    if knobs.suspended.contains(&installation_id) {
        return (
            StatusCode::FORBIDDEN,
            error_body(SUSPENDED_MESSAGE, StatusCode::FORBIDDEN),
            now,
        );
    }
    let token = format!("ghs_{}", Alphanumeric.sample_string(&mut rand::rng(), 36));
    shared.issued.lock().unwrap().push(token.clone());
    let expires_at = (now + knobs.token_ttl)
        .replace_nanosecond(0)
        .expect("valid");
    (
        StatusCode::CREATED,
        json!({
            "token": token,
            "expires_at": expires_at.format(&Rfc3339).expect("formats"),
            "permissions": {
                "contents": "read",
                "issues": "write",
                "metadata": "read",
                "pull_requests": "write",
            },
            "repository_selection": "all",
        }),
        now,
    )
}
