//! The host's GitHub App against a fake GitHub over real HTTP: minting, caching, single
//! flight, refresh near expiry, clock-skew correction (once, never a loop), key formats and
//! key errors at start-up, GitHub's error answers, slow answers, and no secret in any
//! error or `Debug` output.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::config::GithubAppSettings;
use connector_host::github_app::{GithubApp, GithubAppError, InstallationToken};
use connector_runtime::InstallationTokens;
use integration_tests::fake_github::FakeGithub;
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

const APP_ID: &str = "12345";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/github")
        .join(name)
}

fn read_fixture(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).expect("fixture")
}

async fn fake() -> FakeGithub {
    FakeGithub::start(&read_fixture("app-public.pem"), APP_ID).await
}

fn settings(fake: &FakeGithub, key: &Path) -> GithubAppSettings {
    GithubAppSettings {
        app_id: APP_ID.into(),
        private_key_path: key.to_path_buf(),
        api_url: fake.url(),
    }
}

fn app(fake: &FakeGithub) -> GithubApp {
    GithubApp::new(&settings(fake, &fixture("app-key-pkcs1.pem"))).expect("the App loads")
}

fn minutes_left(token: &InstallationToken) -> f64 {
    (token.expires_at - OffsetDateTime::now_utc()).as_seconds_f64() / 60.0
}

#[tokio::test]
async fn token_is_minted_with_githubs_headers_and_cached() {
    let fake = fake().await;
    fake.register(7);
    let app = app(&fake);
    assert_eq!(app.exchanges(), 0, "loading the key talks to nobody");

    let token = app.installation_token(7).await.expect("token");
    assert!(token.token.starts_with("ghs_"), "{token:?}");
    let left = minutes_left(&token);
    assert!((59.0..=60.5).contains(&left), "{left} minutes left");
    assert_eq!((app.exchanges(), fake.exchanges()), (1, 1));

    let again = app.installation_token(7).await.expect("cached token");
    assert_eq!(again, token);
    assert_eq!(
        (app.exchanges(), fake.exchanges()),
        (1, 1),
        "served from the cache"
    );

    let request = &fake.requests()[0];
    assert_eq!(request.status, 201);
    assert_eq!(request.installation_id, 7);
    assert_eq!(
        request.accept.as_deref(),
        Some("application/vnd.github+json")
    );
    assert_eq!(request.api_version.as_deref(), Some("2022-11-28"));
    assert_eq!(request.user_agent.as_deref(), Some("connector-host"));
    assert_eq!(
        request.claims["iss"],
        json!(12345),
        "numeric App id → JSON number"
    );
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let iat = request.claims["iat"].as_i64().expect("iat");
    let exp = request.claims["exp"].as_i64().expect("exp");
    assert!((now - 65..=now - 55).contains(&iat), "iat {iat}, now {now}");
    assert_eq!(exp - iat, 600, "iat = now − 60 s, exp = now + 9 min");
}

#[tokio::test]
async fn client_id_is_sent_as_a_string_issuer() {
    let fake = FakeGithub::start(&read_fixture("app-public.pem"), "Iv1.abc123").await;
    fake.register(7);
    let mut s = settings(&fake, &fixture("app-key-pkcs8.pem"));
    s.app_id = "Iv1.abc123".into();
    let app = GithubApp::new(&s).expect("loads");
    app.installation_token(7).await.expect("token");
    assert_eq!(fake.requests()[0].claims["iss"], json!("Iv1.abc123"));
}

#[tokio::test]
async fn installations_have_their_own_tokens() {
    let fake = fake().await;
    fake.register(1);
    fake.register(2);
    let app = app(&fake);
    let one = app.installation_token(1).await.expect("1");
    let two = app.installation_token(2).await.expect("2");
    assert_ne!(one.token, two.token);
    assert_eq!(app.installation_token(1).await.expect("1 again"), one);
    assert_eq!(app.installation_token(2).await.expect("2 again"), two);
    assert_eq!(fake.exchanges(), 2);
}

#[tokio::test]
async fn hundred_concurrent_callers_share_one_exchange() {
    let fake = fake().await;
    fake.register(7);
    fake.set_delay(Duration::from_millis(300));
    let app = app(&fake);
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.installation_token(7).await })
        })
        .collect();
    let mut tokens = Vec::new();
    for call in calls {
        tokens.push(call.await.expect("joins").expect("token"));
    }
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "all got the same token"
    );
    assert_eq!(fake.exchanges(), 1);
    assert_eq!(app.exchanges(), 1);
}

#[tokio::test]
async fn concurrent_callers_share_a_failure_too_and_it_is_not_cached() {
    let fake = fake().await;
    fake.set_delay(Duration::from_millis(200));
    let app = app(&fake);
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.installation_token(9).await })
        })
        .collect();
    for call in calls {
        let err = call
            .await
            .expect("joins")
            .expect_err("unknown installation");
        assert!(matches!(
            err,
            GithubAppError::UnknownInstallation { installation_id: 9 }
        ));
    }
    assert_eq!(fake.exchanges(), 1, "one exchange answered all 50 callers");

    // A failure is not remembered: once the App is installed, the next call works.
    fake.register(9);
    app.installation_token(9).await.expect("now installed");
    assert_eq!(fake.exchanges(), 2);
}

#[tokio::test]
async fn a_caller_giving_up_does_not_cancel_the_exchange() {
    let fake = fake().await;
    fake.register(7);
    fake.set_delay(Duration::from_millis(300));
    let app = app(&fake);
    let gave_up = tokio::time::timeout(Duration::from_millis(50), app.installation_token(7)).await;
    assert!(gave_up.is_err(), "timed out");
    // The exchange went on: its token lands in the cache.
    tokio::time::sleep(Duration::from_millis(600)).await;
    app.installation_token(7).await.expect("token");
    assert_eq!(fake.exchanges(), 1);
}

#[tokio::test]
async fn tokens_near_expiry_are_refreshed_and_expired_ones_never_handed_out() {
    let fake = fake().await;
    fake.register(7);
    let app = app(&fake);

    // 4 minutes left is inside the 5-minute margin: usable now, never cached.
    fake.set_token_ttl(Duration::from_secs(4 * 60));
    let mut seen = Vec::new();
    for round in 1..=3 {
        let token = app.installation_token(7).await.expect("token");
        assert!(token.expires_at > OffsetDateTime::now_utc(), "not expired");
        assert_eq!(fake.exchanges(), round, "each call exchanges");
        assert!(!seen.contains(&token.token), "a fresh token each time");
        seen.push(token.token);
    }

    // 6 minutes left is outside the margin: cached.
    fake.set_token_ttl(Duration::from_secs(6 * 60));
    let token = app.installation_token(7).await.expect("token");
    assert_eq!(app.installation_token(7).await.expect("cached"), token);
    assert_eq!(fake.exchanges(), 4);

    // A token that is already expired when it arrives is an error, not a token.
    let other = self::fake().await;
    other.register(8);
    other.set_token_ttl(Duration::ZERO);
    let app = self::app(&other);
    for round in 1..=2 {
        let err = app.installation_token(8).await.expect_err("expired");
        assert!(
            matches!(err, GithubAppError::ExpiredToken { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("expired"), "{err}");
        assert_eq!(other.exchanges(), round);
    }
}

async fn skew_is_corrected_once(skew_secs: i64) {
    let fake = fake().await;
    fake.register(1);
    fake.register(2);
    fake.set_skew(skew_secs);
    let app = app(&fake);

    let token = app.installation_token(1).await.expect("corrected");
    assert_eq!(fake.exchanges(), 2, "one rejection, one retry");
    assert_eq!(
        fake.requests().iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![401, 201]
    );
    let offset = app.clock_offset_secs();
    assert!(
        (offset - skew_secs).abs() <= 2,
        "offset {offset} learnt for a skew of {skew_secs}"
    );
    // The token's lifetime is judged by GitHub's clock: an hour from the fake's now.
    let left = (token.expires_at
        - (OffsetDateTime::now_utc() + time::Duration::seconds(skew_secs)))
    .as_seconds_f64();
    assert!((3500.0..=3601.0).contains(&left), "{left} s left");

    // Later JWTs use the offset: no second rejection.
    app.installation_token(2)
        .await
        .expect("second installation");
    assert_eq!(fake.exchanges(), 3);
    assert_eq!(
        app.installation_token(1).await.expect("cached"),
        token,
        "cached by GitHub's clock"
    );
    assert_eq!(fake.exchanges(), 3);
}

#[tokio::test]
async fn fake_clock_ahead_is_corrected_with_one_retry() {
    skew_is_corrected_once(15 * 60).await;
}

#[tokio::test]
async fn fake_clock_behind_is_corrected_with_one_retry() {
    skew_is_corrected_once(-15 * 60).await;
}

#[tokio::test]
async fn skew_correction_is_never_looped() {
    let fake = fake().await;
    fake.register(7);
    fake.set_skew(600);
    fake.always_reject_clock(true);
    let app = app(&fake);
    let err = app
        .installation_token(7)
        .await
        .expect_err("always rejected");
    assert!(matches!(err, GithubAppError::ClockSkew { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("clock"), "{message}");
    assert!(
        message.contains("('iat')"),
        "GitHub's message passes: {message}"
    );
    assert_eq!(
        fake.exchanges(),
        2,
        "the first attempt and one retry, no more"
    );

    // Each later call is bounded the same way.
    app.installation_token(7).await.expect_err("still rejected");
    assert_eq!(fake.exchanges(), 4);
}

#[tokio::test]
async fn a_key_of_another_app_is_reported_from_githubs_401() {
    let fake = fake().await;
    fake.register(7);
    let key = fixture("other-key-pkcs1.pem");
    let app = GithubApp::new(&settings(&fake, &key)).expect("a well-formed key loads");
    let err = app.installation_token(7).await.expect_err("wrong key");
    assert!(matches!(err, GithubAppError::JwtRejected { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("401"), "{message}");
    assert!(message.contains("could not be decoded"), "{message}");
    assert!(message.contains(&key.display().to_string()), "{message}");
    assert!(message.contains("github_app.app_id"), "{message}");
    assert_eq!(fake.exchanges(), 1, "no retry for a bad signature");
}

#[tokio::test]
async fn a_wrong_app_id_is_reported() {
    let fake = fake().await;
    fake.register(7);
    let mut s = settings(&fake, &fixture("app-key-pkcs1.pem"));
    s.app_id = "999".into();
    let app = GithubApp::new(&s).expect("loads");
    let err = app.installation_token(7).await.expect_err("wrong id");
    assert!(matches!(err, GithubAppError::JwtRejected { .. }), "{err:?}");
    assert!(err.to_string().contains("(999)"), "{err}");
}

#[tokio::test]
async fn key_problems_fail_at_start_up_naming_the_file() {
    let fake = fake().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let real_key = read_fixture("app-key-pkcs1.pem");
    let key_body: Vec<&str> = real_key
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let truncated: String = real_key.lines().take(10).collect::<Vec<_>>().join("\n")
        + "\n-----END RSA PRIVATE KEY-----\n";
    let mut corrupted = real_key.clone().into_bytes();
    corrupted[200] = b'*';
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("missing.pem", None, "no such file"),
        ("empty.pem", Some(Vec::new()), "empty"),
        (
            "garbage.pem",
            Some(b"not a key at all".to_vec()),
            "no PEM block",
        ),
        (
            "public.pem",
            Some(read_fixture("app-public.pem").into_bytes()),
            "public key",
        ),
        (
            "truncated.pem",
            Some(truncated.into_bytes()),
            "does not decode",
        ),
        ("corrupted.pem", Some(corrupted), "does not decode"),
        (
            "no-end.pem",
            Some(
                real_key
                    .replace("-----END RSA PRIVATE KEY-----", "")
                    .into_bytes(),
            ),
            "END",
        ),
        ("binary.pem", Some(vec![0xff, 0xfe, 0x00, 0x81]), "not text"),
    ];
    for (name, content, expected) in cases {
        let path = dir.path().join(name);
        if let Some(content) = content {
            std::fs::write(&path, content).expect("write");
        }
        let err = GithubApp::new(&settings(&fake, &path)).expect_err(name);
        let message = err.to_string();
        assert!(
            matches!(
                err,
                GithubAppError::KeyFile { .. } | GithubAppError::InvalidKey { .. }
            ),
            "{name}: {err:?}"
        );
        assert!(
            message.contains(&path.display().to_string()),
            "{name}: {message}"
        );
        assert!(message.contains(expected), "{name}: {message}");
        for line in &key_body {
            assert!(!message.contains(line), "{name}: key content in {message}");
            assert!(
                !format!("{err:?}").contains(line),
                "{name}: key content in Debug"
            );
        }
    }
    // A directory is not a key file either.
    let err = GithubApp::new(&settings(&fake, dir.path())).expect_err("directory");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    assert_eq!(fake.exchanges(), 0);
}

#[tokio::test]
async fn pkcs1_pkcs8_and_escaped_keys_all_work() {
    let fake = fake().await;
    fake.register(7);
    let dir = tempfile::tempdir().expect("temp dir");
    let pkcs1 = read_fixture("app-key-pkcs1.pem");
    let pkcs8 = read_fixture("app-key-pkcs8.pem");
    let variants = [
        ("escaped-pkcs1.pem", pkcs1.trim_end().replace('\n', "\\n")),
        ("escaped-pkcs8.pem", pkcs8.replace('\n', "\\n")),
        (
            "quoted-escaped.pem",
            format!("\"{}\"\n", pkcs1.trim_end().replace('\n', "\\n")),
        ),
        ("crlf.pem", pkcs8.replace('\n', "\r\n")),
    ];
    let mut paths = vec![fixture("app-key-pkcs1.pem"), fixture("app-key-pkcs8.pem")];
    for (name, content) in variants {
        let path = dir.path().join(name);
        std::fs::write(&path, content).expect("write");
        paths.push(path);
    }
    for (round, path) in paths.iter().enumerate() {
        let app = GithubApp::new(&settings(&fake, path))
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let token = app.installation_token(7).await.expect("token");
        assert!(token.token.starts_with("ghs_"));
        assert_eq!(fake.exchanges(), round as u64 + 1);
    }
}

#[tokio::test]
async fn suspended_installation_is_reported() {
    let fake = fake().await;
    fake.suspend(31);
    let app = app(&fake);
    let err = app.installation_token(31).await.expect_err("suspended");
    assert!(
        matches!(
            err,
            GithubAppError::Suspended {
                installation_id: 31,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("suspended"), "{message}");
    assert!(message.contains("installation 31"), "{message}");
}

#[tokio::test]
async fn unknown_installation_is_reported() {
    let fake = fake().await;
    let app = app(&fake);
    let err = app.installation_token(404_404).await.expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "installation 404404 does not exist or the App is not installed there (GitHub answered 404)"
    );
}

#[tokio::test]
async fn a_slow_installation_does_not_block_others() {
    let fake = fake().await;
    fake.register(1);
    fake.register(2);
    let slow_delay = Duration::from_secs(4);
    fake.set_installation_delay(1, slow_delay);
    let app = app(&fake);
    let slow = {
        let app = app.clone();
        tokio::spawn(async move { app.installation_token(1).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    app.installation_token(2).await.expect("fast installation");
    // Held behind the slow one it would wait out its delay; the bound is half of it.
    assert!(
        started.elapsed() < slow_delay / 2,
        "waited {:?} behind the slow installation",
        started.elapsed()
    );
    assert!(!slow.is_finished(), "the slow one is still in flight");
    slow.await.expect("joins").expect("slow token");
}

#[tokio::test]
async fn timeouts_and_unreachable_github_are_clear_errors() {
    let fake = fake().await;
    fake.register(7);
    let delay = Duration::from_secs(6);
    fake.set_delay(delay);
    let app = GithubApp::with_timeout(
        &settings(&fake, &fixture("app-key-pkcs1.pem")),
        Duration::from_millis(300),
    )
    .expect("loads");
    let started = Instant::now();
    let err = app.installation_token(7).await.expect_err("too slow");
    // Timed out at 0.3 s, not after GitHub's 6 s: the bound is half of those.
    assert!(
        started.elapsed() < delay / 2,
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(matches!(err, GithubAppError::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("did not answer within 0.3 s"),
        "{err}"
    );

    // Nothing listens on a port we just closed.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let app = GithubApp::new(&GithubAppSettings {
        app_id: APP_ID.into(),
        private_key_path: fixture("app-key-pkcs1.pem"),
        api_url: format!("http://127.0.0.1:{port}"),
    })
    .expect("loads");
    let err = app.installation_token(7).await.expect_err("unreachable");
    assert!(matches!(err, GithubAppError::Transport { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot reach GitHub"), "{err}");
}

#[tokio::test]
async fn the_runtime_trait_maps_tokens_and_errors() {
    let fake = fake().await;
    fake.register(7);
    let app = Arc::new(app(&fake));
    let tokens: Arc<dyn InstallationTokens> = app.clone();
    let access = tokens.installation_token(7).await.expect("token");
    assert!(access.token.starts_with("ghs_"));
    let expires_at = OffsetDateTime::parse(&access.expires_at, &Rfc3339).expect("RFC 3339");
    assert!(expires_at > OffsetDateTime::now_utc() + time::Duration::minutes(55));
    let err = tokens.installation_token(8).await.expect_err("unknown");
    assert!(
        err.message().contains("installation 8 does not exist"),
        "{err}"
    );
    // The App's own error stays underneath, typed.
    let source = std::error::Error::source(&err).expect("the App's error is kept");
    assert!(
        source.downcast_ref::<GithubAppError>().is_some(),
        "{source:?}"
    );
}

#[tokio::test]
async fn no_error_or_debug_output_shows_a_token_or_the_key() {
    let fake = fake().await;
    fake.register(7);
    fake.suspend(8);
    let key_text = read_fixture("app-key-pkcs1.pem") + &read_fixture("app-key-pkcs8.pem");
    let key_lines: Vec<&str> = key_text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let app = app(&fake);
    let token = app.installation_token(7).await.expect("token");
    let mut outputs = vec![
        format!("{app:?}"),
        format!("{app:#?}"),
        format!("{token:?}"),
    ];
    for id in [8, 9] {
        let err = app.installation_token(id).await.expect_err("fails");
        outputs.push(err.to_string());
        outputs.push(format!("{err:?}"));
    }
    let tokens: &dyn InstallationTokens = &app;
    let err = tokens.installation_token(9).await.expect_err("unknown");
    outputs.push(err.to_string());
    outputs.push(format!("{err:?}"));
    let wrong = GithubApp::new(&settings(&fake, &fixture("other-key-pkcs1.pem"))).expect("loads");
    let err = wrong.installation_token(7).await.expect_err("wrong key");
    outputs.push(err.to_string());
    outputs.push(format!("{err:?} {wrong:?}"));

    for output in &outputs {
        for issued in fake.issued_tokens() {
            assert!(!output.contains(&issued), "token in {output}");
        }
        for line in &key_lines {
            assert!(!output.contains(line), "key in {output}");
        }
        assert!(!output.contains("eyJ"), "a JWT in {output}");
    }
    assert!(outputs[0].contains("***"), "{}", outputs[0]);
}
