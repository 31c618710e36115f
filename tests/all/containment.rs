//! A hostile connector gets nothing the operator did not grant it (CONTRACT §1, §2, §6).

use std::path::PathBuf;

use connector_host::config::{ConnectorSettings, GithubAppSettings};
use integration_tests::fake_github::FakeGithub;
use integration_tests::guests;
use integration_tests::harness::{error_code, TestHost};
use reqwest::Method;
use serde_json::{json, Value};

const APP_ID: &str = "1012345";
/// What the look-alike's `bind` names without the operator ever writing it.
const FOREIGN_INSTALLATION: u64 = 4242;
const OWN_INSTALLATION: u64 = 48213907;

fn key(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/github")
        .join(name)
}

/// A host with a GitHub App (a fake GitHub that knows both installations), the
/// look-alike `git-hub` installed, and operator settings under the slug `git_hub`
/// (another slug, spelt the same in the environment) that must never reach it.
async fn setup() -> (TestHost, FakeGithub) {
    let public = std::fs::read_to_string(key("app-public.pem")).expect("public key");
    let fake = FakeGithub::start(&public, APP_ID).await;
    fake.register(FOREIGN_INSTALLATION);
    fake.register(OWN_INSTALLATION);
    let api_url = fake.url();
    let h = TestHost::start_with(move |c| {
        c.github_app = Some(GithubAppSettings {
            app_id: APP_ID.into(),
            private_key_path: key("app-key-pkcs1.pem"),
            api_url,
        });
        let mut other = ConnectorSettings {
            allow_private_networks: true,
            github_app: Some(true),
            ..ConnectorSettings::default()
        };
        other.secrets.insert("pat".into(), "ghp_not_yours".into());
        c.connectors.insert("git_hub".into(), other);
    })
    .await;
    h.install(guests::HOSTILE_LOOKALIKE).await;
    h.unit("u", None).await;
    h.agent("ada", &["u"]).await;
    (h, fake)
}

async fn call(h: &TestHost, tool: &str, arguments: Value) -> (u16, Value) {
    h.op(
        Method::POST,
        "/api/v1/agents/ada/tool-calls",
        Some(json!({"tool": tool, "arguments": arguments})),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_cannot_mint_a_token_for_an_installation_its_bind_names() {
    let (h, fake) = setup().await;
    h.bind("u", "git-hub", json!({"note": "names no installation"}))
        .await;
    let (s, b) = call(
        &h,
        "git_hub.token",
        json!({"installation_id": FOREIGN_INSTALLATION}),
    )
    .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert_eq!(fake.exchanges(), 0, "the host asked GitHub for a token");
    assert!(fake.issued_tokens().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_of_a_look_alike_slug_never_apply() {
    let (h, fake) = setup().await;
    // `git_hub` allows private networks, names a secret and may mint tokens: none of
    // it is `git-hub`'s.
    h.bind(
        "u",
        "git-hub",
        json!({"installationId": OWN_INSTALLATION, "secret": "pat"}),
    )
    .await;
    let (s, b) = call(&h, "git_hub.fetch", json!({"url": format!("{}/", h.url)})).await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    let (s, b) = call(
        &h,
        "git_hub.token",
        json!({"installation_id": OWN_INSTALLATION}),
    )
    .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert_eq!(fake.exchanges(), 0);

    // The same settings under the exact slug do apply.
    let exact = TestHost::start_with(|c| {
        c.connectors.insert(
            "git-hub".into(),
            ConnectorSettings {
                allow_private_networks: true,
                ..ConnectorSettings::default()
            },
        );
    })
    .await;
    exact.install(guests::HOSTILE_LOOKALIKE).await;
    exact.unit("u", None).await;
    exact.agent("ada", &["u"]).await;
    exact.bind("u", "git-hub", json!({})).await;
    let (s, b) = call(
        &exact,
        "git_hub.fetch",
        json!({"url": format!("{}/healthz", exact.url)}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_github_mints_only_its_bindings_installation() {
    let public = std::fs::read_to_string(key("app-public.pem")).expect("public key");
    let fake = FakeGithub::start(&public, APP_ID).await;
    fake.register(OWN_INSTALLATION);
    fake.register(FOREIGN_INSTALLATION);
    let api_url = fake.url();
    let h = TestHost::start_with(move |c| {
        c.github_app = Some(GithubAppSettings {
            app_id: APP_ID.into(),
            private_key_path: key("app-key-pkcs1.pem"),
            api_url,
        });
    })
    .await;
    h.unit("u", None).await;
    h.agent("ada", &["u"]).await;
    h.bind(
        "u",
        "github",
        json!({"repo": "octo-org/hello-world", "installationId": OWN_INSTALLATION}),
    )
    .await;
    // The runtime context mints the binding's own installation token.
    let (s, b) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(fake.exchanges(), 1);
    let minted: Vec<u64> = fake.requests().iter().map(|r| r.installation_id).collect();
    assert_eq!(minted, [OWN_INSTALLATION]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slugs_that_share_a_spelling_or_a_context_prefix_conflict() {
    let h = TestHost::start().await;
    // `github-installation`'s context prefix SPRING_CONNECTOR_GITHUB_INSTALLATION_
    // extends the bundled `github`'s.
    let bytes = std::fs::read(guests::HOSTILE_PREFIX_LOOKALIKE).expect("component");
    let (s, b) = integration_tests::harness::upload_component(&h.client, &h.url, bytes, "").await;
    assert_eq!((s, error_code(&b)), (409, "slug_conflict"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`github`"),
        "{b}"
    );
    assert_eq!(b["error"]["details"]["conflictsWith"], "github", "{b}");
    let (s, _) = h
        .op(Method::GET, "/api/v1/connectors/github-installation", None)
        .await;
    assert_eq!(s, 404);
    // `git-hub` is installable beside `github` ...
    h.install(guests::HOSTILE_LOOKALIKE).await;
    // ... and nothing spelt GIT_HUB or extending its prefix can join it.
    let (s, b) = h.op(Method::GET, "/api/v1/connectors/git-hub", None).await;
    assert_eq!(s, 200, "{b}");
}
