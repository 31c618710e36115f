//! `GET /agents/{id}/runtime-context`: env vars and files from every bound connector,
//! with the host enforcing prefixes, folders and collisions.

use integration_tests::guests;
use integration_tests::harness::{error_code as code, TestHost};
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_collects_every_bound_connector_closest_binding_first() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("org", None).await;
    h.unit("team", Some("org")).await;
    h.agent("a", &["team"]).await;
    h.agent("b", &["team"]).await;
    h.bind("org", "acme", json!({"greeting": "hello from org"}))
        .await;
    h.bind(
        "org",
        "hostile",
        json!({"env": {"SPRING_CONNECTOR_HOSTILE_LEVEL": "org"}}),
    )
    .await;
    h.bind(
        "team",
        "hostile",
        json!({"env": {"SPRING_CONNECTOR_HOSTILE_LEVEL": "team"}, "files": {".spring/connectors/hostile/notes/a.txt": "hi"}}),
    )
    .await;

    let token = h.agent_token("a").await;
    let (s, b) = h
        .as_token(
            &token,
            Method::GET,
            "/api/v1/agents/a/runtime-context",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["env"]["SPRING_CONNECTOR_ACME_GREETING"], "hello from org");
    assert_eq!(
        b["env"]["SPRING_CONNECTOR_HOSTILE_LEVEL"], "team",
        "the closest binding wins"
    );
    assert_eq!(
        b["files"],
        json!([{"path": ".spring/connectors/hostile/notes/a.txt", "content": "hi"}])
    );

    let other = h.agent_token("b").await;
    let (s, b) = h
        .as_token(
            &other,
            Method::GET,
            "/api/v1/agents/a/runtime-context",
            None,
        )
        .await;
    assert_eq!((s, code(&b)), (403, "forbidden"));
    let (s, _) = h
        .op(Method::GET, "/api/v1/agents/ghost/runtime-context", None)
        .await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_prefix_or_folder_fail_the_request() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    for (config, needle) in [
        (json!({"env": {"PATH": "/evil"}}), "PATH"),
        (
            json!({"env": {"SPRING_CONNECTOR_ACME_GREETING": "spoofed"}}),
            "SPRING_CONNECTOR_ACME_GREETING",
        ),
        (json!({"env": {"GITHUB_TOKEN": "stolen"}}), "GITHUB_TOKEN"),
        (
            json!({"files": {".spring/connectors/acme/x": "spoofed"}}),
            ".spring/connectors/acme/x",
        ),
        (json!({"files": {"/etc/passwd": "root"}}), "/etc/passwd"),
    ] {
        h.bind("u", "hostile", config.clone()).await;
        let (s, b) = h
            .op(Method::GET, "/api/v1/agents/a/runtime-context", None)
            .await;
        assert_eq!((s, code(&b)), (500, "context_conflict"), "{config}: {b}");
        let message = b["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("hostile") && message.contains(needle),
            "{message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installation_binding_needs_a_github_app() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/u/connectors/github",
            Some(json!({"config": {"repo": "octo-org/hello-world", "installationId": 42}})),
        )
        .await;
    assert_eq!((s, code(&b)), (422, "github_app_not_configured"), "{b}");
    // What a guest's `bind` returns names no installation: only the operator's config does.
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/u/connectors/hostile",
            Some(json!({"config": {"routes": ["installation:42"]}})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_entries_are_invalid() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    for (config, needle) in [
        (
            json!({"env": {"SPRING_CONNECTOR_HOSTILE_X": "ok\nLD_PRELOAD=/tmp/evil.so"}}),
            "SPRING_CONNECTOR_HOSTILE_X",
        ),
        (
            json!({"files": {".spring/connectors/hostile/../acme/x": "sneaky"}}),
            "../acme/x",
        ),
        (
            json!({"files": {".spring/connectors/hostile/a": "file", ".spring/connectors/hostile/a/b": "inside"}}),
            ".spring/connectors/hostile/a/b",
        ),
    ] {
        h.bind("u", "hostile", config.clone()).await;
        let (s, b) = h
            .op(Method::GET, "/api/v1/agents/a/runtime-context", None)
            .await;
        assert_eq!((s, code(&b)), (500, "context_invalid"), "{config}: {b}");
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("hostile") && message.contains(needle),
            "{message}"
        );
    }
}
