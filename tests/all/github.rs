//! The GitHub connector end to end against a fake GitHub that checks the App JWT:
//! signed deliveries into unit inboxes (routing, fan-out, filters), and the runtime
//! context with host-minted installation tokens (and the personal-access-token route).
//!
//! Each check runs twice: on the bundled connector (the current world) and on the same
//! connector as built against `spring:connector@0.1.0` (a kept fixture), rotated in.

use std::path::PathBuf;

use connector_host::config::{ConnectorSettings, GithubAppSettings};
use connector_host::webhooks::verify::github_signature;
use integration_tests::fake_github::FakeGithub;
use integration_tests::harness::{send_github_webhook, upload_component, TestHost};
use reqwest::Method;
use serde_json::{json, Value};

const APP_ID: &str = "1012345";
const INSTALLATION: u64 = 48213907;
const SECRET: &str = "It's a Secret to Everybody";
const PAT: &str = "ghp_0123456789abcdefPATVALUE";

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../connectors/github/fixtures")
        .join(format!("{name}.json"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn key(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/github")
        .join(name)
}

/// The bundled `github` as built against the first world.
/// The kept build of `github` in world `version` (`0.1.0` or `0.2.0`).
fn old_world_component(version: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("fixtures/spring-connector-{version}/github.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Which `github` component a test runs on.
#[derive(Clone, Copy, Debug)]
enum World {
    /// The bundled one.
    Current,
    /// The 0.1.0 fixture, rotated in before anything is bound.
    First,
    /// The 0.2.0 fixture (exports `bind` and `accept` under their old names), likewise.
    Second,
}

async fn setup() -> (TestHost, FakeGithub) {
    setup_in(World::Current).await
}

async fn setup_in(world: World) -> (TestHost, FakeGithub) {
    // Only the bundled build mints installation tokens by default; an operator's own
    // build of `github` (as the 0.1.0 one is) needs `github_app = true`.
    let own_build = !matches!(world, World::Current);
    let public = std::fs::read_to_string(key("app-public.pem")).unwrap();
    let fake = FakeGithub::start(&public, APP_ID).await;
    fake.register(INSTALLATION);
    let api_url = fake.url();
    let h = TestHost::start_with(move |c| {
        c.github_app = Some(GithubAppSettings {
            app_id: APP_ID.into(),
            private_key_path: key("app-key-pkcs1.pem"),
            api_url,
        });
        let mut settings = ConnectorSettings {
            webhook_secrets: vec![SECRET.into()],
            github_app: own_build.then_some(true),
            ..ConnectorSettings::default()
        };
        settings.secrets.insert("ci-bot".into(), PAT.into());
        c.connectors.insert("github".into(), settings);
    })
    .await;
    let expected = match world {
        World::Current => "spring:connector@0.3.0".to_string(),
        World::First | World::Second => {
            let version = if matches!(world, World::First) {
                "0.1.0"
            } else {
                "0.2.0"
            };
            let old = old_world_component(version);
            let (s, b) = upload_component(&h.client, &h.url, old, "").await;
            assert_eq!(s, 200, "rotating github to its {version} build: {b}");
            format!("spring:connector@{version}")
        }
    };
    let (s, b) = h.op(Method::GET, "/api/v1/connectors/github", None).await;
    assert_eq!(
        (s, b["world"].as_str()),
        (200, Some(expected.as_str())),
        "{b}"
    );
    for u in ["web", "docs", "other", "pat"] {
        h.unit(u, None).await;
    }
    h.bind("web", "github", json!({"repo": "octo-org/hello-world", "installationId": INSTALLATION, "reviewer": "hubot"})).await;
    h.bind("docs", "github", json!({"repo": "Octo-Org/Hello-World", "installationId": INSTALLATION, "excludeLabels": ["area/*"]})).await;
    h.bind("other", "github", json!({"repo": "octo-org/another-repo"}))
        .await;
    h.bind(
        "pat",
        "github",
        json!({"repo": "octo-org/pat-repo", "patSecret": "ci-bot"}),
    )
    .await;
    h.agent("dev", &["web"]).await;
    h.agent("writer", &["pat"]).await;
    (h, fake)
}

async fn deliver(h: &TestHost, event: &str, id: &str, body: &[u8]) -> (u16, Value) {
    send_github_webhook(&h.client, &h.url, "github", event, id, body, SECRET).await
}

fn sorted(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

async fn inbox(h: &TestHost, unit: &str) -> Vec<Value> {
    let (_, b) = h
        .op(Method::GET, &format!("/api/v1/units/{unit}/messages"), None)
        .await;
    b["messages"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_reach_the_matching_units_with_kind_and_thread() {
    deliveries_in(World::Current).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_world_github_routes_deliveries_the_same() {
    deliveries_in(World::First).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_world_github_routes_deliveries_the_same() {
    deliveries_in(World::Second).await;
}

async fn deliveries_in(world: World) {
    let (h, _fake) = setup_in(world).await;

    // Repository matched case-insensitively; the label filter drops it for `docs` only.
    let (s, b) = deliver(&h, "issues", "g-1", &fixture("issues.opened")).await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(sorted(&b["routedTo"]), ["web"]);
    let m = inbox(&h, "web").await;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["kind"], "issues.opened");
    assert_eq!(m[0]["threadKey"], "github:octo-org/hello-world#1347");
    assert_eq!(m[0]["connector"], "github");
    assert!(m[0]["payload"]["title"].is_string(), "{}", m[0]["payload"]);
    assert!(inbox(&h, "docs").await.is_empty());
    assert!(
        inbox(&h, "other").await.is_empty(),
        "an event of another repository reaches nobody there"
    );

    // Push has no labels: both bindings of the repository get their own copy.
    let (_, b) = deliver(&h, "push", "g-2", &fixture("push")).await;
    assert_eq!(sorted(&b["routedTo"]), ["docs", "web"]);
    let pushed = inbox(&h, "docs").await;
    assert_eq!(pushed[0]["kind"], "push");
    assert_eq!(pushed[0]["threadKey"], Value::Null);

    // The 25 KiB pull request and the installation event (routed by installation id).
    let (_, b) = deliver(&h, "pull_request", "g-3", &fixture("pull_request.opened")).await;
    assert_eq!(
        sorted(&b["routedTo"]),
        ["web"],
        "area/* excludes the PR from docs"
    );
    let (_, b) = deliver(&h, "installation", "g-4", &fixture("installation.created")).await;
    assert_eq!(sorted(&b["routedTo"]), ["docs", "web"]);
    let last = inbox(&h, "web").await;
    assert_eq!(last.last().unwrap()["kind"], "installation.created");

    // ping is answered and ignored; a redelivery is a duplicate; a bad signature is refused.
    let (s, b) = deliver(&h, "ping", "g-5", &fixture("ping")).await;
    assert_eq!((s, b["status"].as_str()), (202, Some("ignored")));
    let (_, b) = deliver(&h, "issues", "g-1", &fixture("issues.opened")).await;
    assert_eq!(b["status"], "duplicate");
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/github"))
        .header("x-github-event", "issues")
        .header("x-github-delivery", "g-6")
        .header(
            "x-hub-signature-256",
            github_signature("wrong", &fixture("issues.opened")),
        )
        .body(fixture("issues.opened"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/github"))
        .header("x-hub-signature-256", github_signature(SECRET, b"{}"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "missing delivery and event headers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_context_has_the_contract_env_and_file_and_one_exchange() {
    runtime_context_in(World::Current).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_world_github_gets_the_same_context_through_the_host_imports() {
    runtime_context_in(World::First).await;
}

async fn runtime_context_in(world: World) {
    let (h, fake) = setup_in(world).await;
    let token = h.agent_token("dev").await;

    // 100 concurrent requests for one installation: exactly one exchange.
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let client = h.client.clone();
        let url = h.at("/api/v1/agents/dev/runtime-context");
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let r = client.get(url).bearer_auth(token).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(
        fake.exchanges(),
        1,
        "one exchange for 100 concurrent requests: {:?}",
        answers.first()
    );
    let (s, ctx) = &answers[0];
    assert_eq!(*s, 200, "{ctx}");
    let env = &ctx["env"];
    assert_eq!(env["SPRING_CONNECTOR_GITHUB_OWNER"], "octo-org");
    assert_eq!(env["SPRING_CONNECTOR_GITHUB_REPO"], "hello-world");
    assert_eq!(
        env["SPRING_CONNECTOR_GITHUB_INSTALLATION_ID"],
        INSTALLATION.to_string()
    );
    assert_eq!(env["SPRING_CONNECTOR_GITHUB_REVIEWER"], "hubot");
    let minted = env["SPRING_CONNECTOR_GITHUB_TOKEN"].as_str().unwrap();
    assert!(minted.starts_with("ghs_"), "{minted}");
    assert_eq!(env["GITHUB_TOKEN"], minted);
    assert!(time::OffsetDateTime::parse(
        env["SPRING_CONNECTOR_GITHUB_TOKEN_EXPIRES_AT"]
            .as_str()
            .unwrap(),
        &time::format_description::well_known::Rfc3339
    )
    .is_ok());
    for (name, _) in env.as_object().unwrap() {
        assert!(
            name.starts_with("SPRING_CONNECTOR_GITHUB_") || name == "GITHUB_TOKEN",
            "{name}"
        );
    }
    let files = ctx["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["path"], ".spring/connectors/github/binding.json");
    let content = files[0]["content"].as_str().unwrap();
    assert!(
        !content.contains(minted),
        "the context file never contains the token"
    );
    let binding: Value = serde_json::from_str(content).unwrap();
    assert_eq!(binding["owner"], "octo-org");
    assert_eq!(binding["repo"], "hello-world");
    assert_eq!(binding["installationId"], INSTALLATION);
    assert_eq!(binding["reviewer"], "hubot");
    assert_eq!(binding["ownerUnitId"], "web");
    assert!(binding["tokenExpiresAt"].is_string());
    assert!(answers
        .iter()
        .all(|(s, c)| *s == 200 && c["env"]["GITHUB_TOKEN"] == minted));

    // The personal-access-token route: the operator's named secret, no installation.
    let (s, ctx) = h
        .op(Method::GET, "/api/v1/agents/writer/runtime-context", None)
        .await;
    assert_eq!(s, 200, "{ctx}");
    assert_eq!(ctx["env"]["SPRING_CONNECTOR_GITHUB_TOKEN"], PAT);
    assert_eq!(ctx["env"]["GITHUB_TOKEN"], PAT);
    assert!(ctx["env"]
        .get("SPRING_CONNECTOR_GITHUB_INSTALLATION_ID")
        .is_none());
    assert!(!ctx["files"][0]["content"].as_str().unwrap().contains(PAT));
    assert_eq!(fake.exchanges(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bindings_are_refused_and_suspension_is_reported() {
    let (h, fake) = setup().await;
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/other/connectors/github",
            Some(json!({"config": {"repo": "not a repo"}})),
        )
        .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (422, Some("invalid_config")),
        "{b}"
    );
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/other/connectors/github",
            Some(json!({"config": {"repo": "a/b", "installationId": 1, "patSecret": "ci-bot"}})),
        )
        .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (422, Some("invalid_config")),
        "{b}"
    );
    let (s, _) = h
        .op(
            Method::PUT,
            "/api/v1/units/other/connectors/github",
            Some(json!({"config": {}})),
        )
        .await;
    assert_eq!(s, 422, "repo is required");

    fake.suspend(INSTALLATION);
    let (s, b) = h
        .op(Method::GET, "/api/v1/agents/dev/runtime-context", None)
        .await;
    assert_eq!(s, 502, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("suspended"),
        "{b}"
    );
}

/// CONTRACT §9: every installation token a guest is handed and every secret it reads
/// leaves one record, its actor the agent the call ran for; a refused one its refusal;
/// never the token's or the secret's value. (A token the binding does not name is
/// recorded as `forbidden`: `containment::`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installation_tokens_and_secret_reads_are_recorded_without_their_values() {
    let (h, fake) = setup().await;
    h.unit("stranger", None).await;
    h.bind(
        "stranger",
        "github",
        json!({"repo": "octo-org/stranger", "installationId": INSTALLATION + 1}),
    )
    .await;
    h.agent("outsider", &["stranger"]).await;
    for agent in ["dev", "writer", "outsider"] {
        // Whatever GitHub answers, the credential was asked for first.
        let (s, b) = h
            .call_tool(agent, "github.get_issue", json!({"number": 1}))
            .await;
        assert!(s == 200 || s == 502, "{agent}: {s} {b}");
    }
    let (s, page) = h
        .op(Method::GET, "/api/v1/audit?target=connector:github", None)
        .await;
    assert_eq!(s, 200, "{page}");
    let records = page["records"].as_array().expect("records").clone();
    let uses: Vec<(String, String, String, Value)> = records
        .iter()
        .filter(|r| r["action"] != "connector.install")
        .map(|r| {
            (
                r["action"].as_str().unwrap_or_default().to_string(),
                r["actor"]["id"].as_str().unwrap_or_default().to_string(),
                r["outcome"].as_str().unwrap_or_default().to_string(),
                r["details"].clone(),
            )
        })
        .collect();
    assert!(
        uses.contains(&(
            "installation_token.mint".into(),
            "dev".into(),
            "ok".into(),
            json!({"installationId": INSTALLATION})
        )),
        "{uses:#?}"
    );
    assert!(
        uses.contains(&(
            "secret.read".into(),
            "writer".into(),
            "ok".into(),
            json!({"name": "ci-bot"})
        )),
        "{uses:#?}"
    );
    assert!(
        uses.contains(&(
            "installation_token.mint".into(),
            "outsider".into(),
            "tool_failed".into(),
            json!({"installationId": INSTALLATION + 1})
        )),
        "a token GitHub would not mint (no such installation) is recorded as refused: {uses:#?}"
    );
    for r in records
        .iter()
        .filter(|r| r["action"] != "connector.install")
    {
        assert_eq!(r["actor"]["kind"], "agent", "{r}");
    }
    let (_, everything) = h.op(Method::GET, "/api/v1/audit?limit=1000", None).await;
    let text = everything.to_string();
    assert!(
        !text.contains(PAT),
        "the secret's value is in the audit log"
    );
    let minted = fake.issued_tokens();
    assert!(!minted.is_empty(), "the fake minted no token");
    for token in minted {
        assert!(!text.contains(&token), "a minted token is in the audit log");
    }
}

/// A credential reaches a guest only once its use is recorded (CONTRACT §9): when the
/// audit log cannot take the record, the guest gets neither the token nor the secret, and
/// the call says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_whose_use_cannot_be_recorded_is_not_handed_over() {
    let (h, fake) = setup().await;
    let refused_with = |b: &Value| {
        b["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // Recorded: the guest gets its credentials (whatever GitHub then answers).
    for agent in ["dev", "writer"] {
        let (_, b) = h
            .call_tool(agent, "github.get_issue", json!({"number": 1}))
            .await;
        let m = refused_with(&b);
        assert!(
            !m.contains("could not record") && !m.contains("not configured on this host"),
            "{agent}: {b}"
        );
    }
    h.inject(Some(
        connector_store_testing::faults::Fault::CredentialRecord,
    ));
    let (s_token, token) = h
        .call_tool("dev", "github.get_issue", json!({"number": 1}))
        .await;
    let (s_secret, secret) = h
        .call_tool("writer", "github.get_issue", json!({"number": 1}))
        .await;
    h.inject(None);
    assert_eq!(s_token, 502, "{token}");
    assert!(
        refused_with(&token).contains("could not record this use of a credential"),
        "{token}"
    );
    assert_eq!(s_secret, 502, "{secret}");
    assert!(
        refused_with(&secret).contains("`ci-bot` named by patSecret is not configured"),
        "{secret}"
    );
    for t in fake.issued_tokens() {
        assert!(!token.to_string().contains(&t), "{token}");
    }
}
