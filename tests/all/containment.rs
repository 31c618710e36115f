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
    h.call_tool("ada", tool, arguments).await
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
    // The refusal is in the audit log (CONTRACT §9).
    let (s, page) = h
        .op(
            reqwest::Method::GET,
            "/api/v1/audit?action=installation_token.mint",
            None,
        )
        .await;
    assert_eq!(s, 200, "{page}");
    let records = page["records"].as_array().expect("records");
    assert_eq!(records.len(), 1, "{page}");
    assert_eq!(records[0]["outcome"], "forbidden", "{page}");
    assert_eq!(records[0]["target"], "connector:git-hub", "{page}");
    assert_eq!(
        records[0]["details"]["installationId"], FOREIGN_INSTALLATION,
        "{page}"
    );
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

/// Sends `head` (request line and headers) and no body; the status line the server
/// answers within `wait`, if any.
async fn status_without_body(url: &str, head: &str, wait: std::time::Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("{head}\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(wait, read).await.ok()??;
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.lines().next().map(str::to_string)
}

/// A host with `hostile` installed, taking its webhooks (a secret configured) of at most
/// `max_webhook_bytes`.
async fn hostile_webhooks(max_webhook_bytes: usize) -> TestHost {
    let h = TestHost::start_with(|c| {
        c.max_webhook_bytes = max_webhook_bytes;
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec!["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_buffered_before_the_caller_and_the_size_are_known() {
    let h = hostile_webhooks(64 * 1024).await;
    let token = integration_tests::harness::OPERATOR_TOKEN;
    for (head, expected) in [
        // No token: 401 at once, whatever the body would be.
        (
            "POST /api/v1/connectors HTTP/1.1\r\nContent-Type: application/wasm\r\nContent-Length: 62914560".to_string(),
            "401",
        ),
        (
            "PUT /api/v1/units/x HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1000000".to_string(),
            "401",
        ),
        // A slug that takes no webhooks: 404 before the body.
        (
            "POST /api/v1/webhooks/nope HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 20000000".to_string(),
            "404",
        ),
        (
            "POST /api/v1/webhooks/acme HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 20000000".to_string(),
            "404",
        ),
        // A declared length past the limit: 413 before the body.
        (
            "POST /api/v1/webhooks/hostile HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 20000000".to_string(),
            "413",
        ),
        (
            format!("POST /api/v1/connectors HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/wasm\r\nContent-Length: 73400320"),
            "413",
        ),
        // Headers that cannot verify: 401 before the body. The bundled `github` has no
        // secret configured here; `hostile` gets no signature, or a stale timestamp.
        (
            "POST /api/v1/webhooks/github HTTP/1.1\r\nContent-Type: application/json\r\nX-Hub-Signature-256: sha256=0000000000000000000000000000000000000000000000000000000000000000\r\nContent-Length: 60000".to_string(),
            "401",
        ),
        (
            "POST /api/v1/webhooks/hostile HTTP/1.1\r\nContent-Type: application/json\r\nwebhook-id: msg_1\r\nwebhook-timestamp: 1000\r\nContent-Length: 60000".to_string(),
            "401",
        ),
        (
            "POST /api/v1/webhooks/hostile HTTP/1.1\r\nContent-Type: application/json\r\nwebhook-id: msg_1\r\nwebhook-timestamp: 1000\r\nwebhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\nContent-Length: 60000".to_string(),
            "401",
        ),
    ] {
        // A 401 or 404 comes at once; a 413 after the (bounded) drain of a body that
        // never arrives, never after waiting for the declared megabytes.
        let wait = std::time::Duration::from_secs(if expected == "413" { 8 } else { 2 });
        let status = status_without_body(&h.url, &head, wait).await;
        assert!(
            status.as_deref().is_some_and(|s| s.split(' ').nth(1) == Some(expected)),
            "{head}: {status:?}, expected {expected}"
        );
    }
    // A component past 64 MiB gets the contract's JSON error, not plain text.
    let r = h
        .client
        .post(h.at("/api/v1/connectors"))
        .bearer_auth(token)
        .header("content-type", "application/wasm")
        .body(vec![0u8; 65 * 1024 * 1024])
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.expect("a JSON error");
    assert_eq!(error_code(&body), "payload_too_large", "{body}");
}

/// Webhook bodies being read hold host memory before they can be verified, so the host
/// holds at most four times `max_webhook_bytes` (at least 64 MiB) of them at once: past
/// that, a delivery is answered `503 host_busy` as its body arrives, and served again
/// once the others are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_bodies_read_at_once_are_bounded() {
    use tokio::io::AsyncWriteExt as _;
    let h = hostile_webhooks(1024 * 1024).await;
    let addr = h.url.trim_start_matches("http://").to_string();
    let head = |id: usize| {
        format!(
            "POST /api/v1/webhooks/hostile HTTP/1.1\r\nContent-Type: application/json\r\nwebhook-id: msg_{id}\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\nContent-Length: 1048576",
            integration_tests::harness::now_unix()
        )
    };
    // 64 uploads of 1 MiB, each stalled on its last byte: 64 MiB being read. (A declared
    // length alone costs nothing: only bytes that arrived are counted.)
    let mut held = Vec::new();
    for id in 0..64 {
        let mut stream = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        stream
            .write_all(format!("{}\r\nHost: {addr}\r\n\r\n", head(id)).as_bytes())
            .await
            .expect("write");
        stream
            .write_all(&vec![b' '; 1024 * 1024 - 1])
            .await
            .expect("body");
        held.push(stream);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // A 65th gets 503 as its body arrives.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream
        .write_all(format!("{}\r\nHost: {addr}\r\n\r\n", head(64)).as_bytes())
        .await
        .expect("write");
    let _ = stream.write_all(&vec![b' '; 64 * 1024]).await;
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::io::AsyncReadExt::read(&mut stream, &mut answer),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or(0);
    let status = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(
        status.starts_with("HTTP/1.1 503") && status.contains("host_busy"),
        "a 65th upload: {status:?}"
    );
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Room again: this one is admitted and its (wrong) signature checked once it arrives.
    let body = vec![b' '; 1024];
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/hostile"))
        .header("content-type", "application/json")
        .header("webhook-id", "msg_65")
        .header(
            "webhook-timestamp",
            integration_tests::harness::now_unix().to_string(),
        )
        .header(
            "webhook-signature",
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
}

/// `GET path` with `Host: host_header`; the status code.
async fn status_for_host(url: &str, path: &str, host_header: &str) -> u16 {
    let r = reqwest::Client::new()
        .get(format!("{url}{path}"))
        .header("host", host_header)
        .send()
        .await
        .expect("send");
    r.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowed_host_names_are_answered() {
    let h = TestHost::start().await;
    let port = h.url.rsplit(':').next().unwrap_or_default().to_string();
    for local in ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]"] {
        let host = format!("{local}:{port}");
        assert_eq!(
            status_for_host(&h.url, "/healthz", &host).await,
            200,
            "{host}"
        );
    }
    for (path, evil) in [
        ("/healthz", "evil.example.com"),
        ("/api/v1/connectors", "evil.example.com:80"),
        ("/mcp/agents/ada", "rebind.attacker.test"),
    ] {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", h.url))
            .header("host", evil)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 403, "{path} for {evil}");
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(error_code(&body), "forbidden", "{body}");
    }
    let open = TestHost::start_with(|c| {
        c.allowed_host_names = Some(vec!["connectors.example.com".into()]);
    })
    .await;
    assert_eq!(
        status_for_host(&open.url, "/healthz", "connectors.example.com").await,
        200
    );
    assert_eq!(
        status_for_host(&open.url, "/healthz", "127.0.0.1").await,
        403
    );
    let any = TestHost::start_with(|c| c.allowed_host_names = Some(vec!["*".into()])).await;
    assert_eq!(
        status_for_host(&any.url, "/healthz", "whatever.test").await,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_and_orphaned_agent_tokens_stop_working() {
    let h = TestHost::start().await;
    h.unit("u", None).await;
    h.agent("ada", &["u"]).await;
    let tools = |token: String| {
        let h = &h;
        async move {
            h.as_token(&token, Method::GET, "/api/v1/agents/ada/tools", None)
                .await
                .0
        }
    };
    let first = h.agent_token("ada").await;
    let second = h.agent_token("ada").await;
    assert_eq!(tools(first.clone()).await, 200);
    let (s, b) = h
        .op(Method::POST, "/api/v1/agents/ada/tokens/revoke", None)
        .await;
    assert_eq!(s, 204, "{b}");
    assert_eq!(tools(first.clone()).await, 401);
    assert_eq!(tools(second).await, 401);
    let fresh = h.agent_token("ada").await;
    assert_eq!(tools(fresh.clone()).await, 200);
    // Updating the agent keeps its tokens; deleting and re-creating it does not.
    h.agent("ada", &["u"]).await;
    assert_eq!(tools(fresh.clone()).await, 200);
    let (s, _) = h.op(Method::DELETE, "/api/v1/agents/ada", None).await;
    assert_eq!(s, 204);
    h.agent("ada", &["u"]).await;
    assert_eq!(tools(fresh).await, 401);
    let (s, b) = h
        .op(Method::POST, "/api/v1/agents/ghost/tokens/revoke", None)
        .await;
    assert_eq!((s, error_code(&b)), (404, "not_found"), "{b}");
}

/// Without a token, every route answers `401` (the contract's JSON error) whatever the
/// body: not JSON, the wrong content type, or larger than any limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_every_route_is_401_whatever_the_body() {
    let h = TestHost::start().await;
    let routes = [
        ("POST", "/api/v1/webhooks/acme/deliveries/d1/retry"),
        ("GET", "/api/v1/webhooks/acme/deliveries/d1"),
        ("GET", "/api/v1/units/eng/messages"),
        ("GET", "/api/v1/units/eng/messages/stream"),
        ("GET", "/api/v1/connectors"),
        ("POST", "/api/v1/connectors"),
        ("GET", "/api/v1/connectors/acme"),
        ("DELETE", "/api/v1/connectors/acme"),
        ("PUT", "/api/v1/units/eng"),
        ("GET", "/api/v1/units/eng"),
        ("DELETE", "/api/v1/units/eng"),
        ("GET", "/api/v1/units/eng/connectors"),
        ("PUT", "/api/v1/units/eng/connectors/acme"),
        ("DELETE", "/api/v1/units/eng/connectors/acme"),
        ("GET", "/api/v1/units/eng/tools"),
        ("POST", "/api/v1/units/eng/grants"),
        ("DELETE", "/api/v1/units/eng/grants/acme.echo"),
        ("PUT", "/api/v1/agents/a1"),
        ("GET", "/api/v1/agents/a1"),
        ("DELETE", "/api/v1/agents/a1"),
        ("POST", "/api/v1/agents/a1/tokens"),
        ("POST", "/api/v1/agents/a1/tokens/revoke"),
        ("GET", "/api/v1/agents/a1/tools"),
        ("POST", "/api/v1/agents/a1/grants"),
        ("DELETE", "/api/v1/agents/a1/grants/acme.echo"),
        ("PUT", "/api/v1/agents/a1/image-tools"),
        ("POST", "/api/v1/agents/a1/image-tools/introspect"),
        ("POST", "/api/v1/agents/a1/tool-calls"),
        ("GET", "/api/v1/agents/a1/runtime-context"),
        ("POST", "/mcp/agents/a1"),
        ("GET", "/mcp/agents/a1"),
        ("DELETE", "/mcp/agents/a1"),
    ];
    let bodies: [(&str, Vec<u8>); 3] = [
        ("application/json", b"{not json".to_vec()),
        ("text/plain", b"hello".to_vec()),
        ("application/json", vec![b' '; 3 * 1024 * 1024]),
    ];
    for (method, path) in routes {
        for (content_type, body) in &bodies {
            let r = h
                .client
                .request(
                    Method::from_bytes(method.as_bytes()).expect("method"),
                    h.at(path),
                )
                .header("content-type", *content_type)
                .body(body.clone())
                .send()
                .await
                .expect("send");
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            // MCP answers with a JSON-RPC error object (§5), the API with the §3 body.
            let code = if path.starts_with("/mcp") {
                if body["error"]["message"].is_string() {
                    "unauthenticated"
                } else {
                    "<no JSON-RPC error>"
                }
            } else {
                error_code(&body)
            };
            assert_eq!(
                (status, code),
                (401, "unauthenticated"),
                "{method} {path} with a {content_type} body of {} bytes",
                body.to_string().len()
            );
        }
    }
}
