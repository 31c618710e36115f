//! State survives a restart of the real `connector-host serve` process (even a SIGKILL).

use integration_tests::guests;
use integration_tests::harness::{send, upload_component, ServerProcess, OPERATOR_TOKEN};
use serde_json::{json, Value};

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    send(client, method, &url, Some(token), body).await
}

/// Flips one byte of connector `slug`'s stored component (`stored`, as installed) in the
/// host's SQLite file under `data`, and empties the compiled-component cache so that the
/// next start has to read the damaged copy.
fn damage_stored_component(data: &std::path::Path, slug: &str, stored: &[u8]) {
    let mut damaged = stored.to_vec();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0xff;
    let conn = rusqlite::Connection::open(data.join("host.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE connectors SET component = ?1 WHERE slug = ?2",
            rusqlite::params![damaged, slug],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    std::fs::remove_dir_all(data.join("compiled")).unwrap();
    std::fs::create_dir(data.join("compiled")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_agents_bindings_grants_and_tokens_survive_a_kill_and_restart() {
    let data = tempfile::tempdir().unwrap();
    // A compiled-component cache of its own: the test reads what the server kept there.
    std::fs::create_dir(data.path().join("compiled")).unwrap();
    let client = reqwest::Client::new();
    let mut server = ServerProcess::start(data.path(), &[]).await;
    let u = |p: &str, s: &ServerProcess| format!("{}/api/v1{p}", s.url);
    use reqwest::Method as M;

    // An operator-installed component, units, an agent, a binding, an explicit grant.
    let (s, b) = upload_component(
        &client,
        &server.url,
        std::fs::read(guests::HOSTILE).unwrap(),
        "",
    )
    .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(
        call(
            &client,
            M::PUT,
            u("/units/org", &server),
            OPERATOR_TOKEN,
            Some(json!({}))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(
            &client,
            M::PUT,
            u("/units/team", &server),
            OPERATOR_TOKEN,
            Some(json!({"parent": "org"}))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(
            &client,
            M::PUT,
            u("/agents/ada", &server),
            OPERATOR_TOKEN,
            Some(json!({"units": ["team"]}))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(
            &client,
            M::PUT,
            u("/units/org/connectors/acme", &server),
            OPERATOR_TOKEN,
            Some(json!({"config": {"greeting": "hi"}}))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        call(
            &client,
            M::POST,
            u("/agents/ada/grants", &server),
            OPERATOR_TOKEN,
            Some(json!({"tool": "hostile.counter"}))
        )
        .await
        .0,
        201
    );
    let (_, token) = call(
        &client,
        M::POST,
        u("/agents/ada/tokens", &server),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    let token = token["token"].as_str().unwrap().to_string();
    let (_, before) = call(
        &client,
        M::GET,
        u("/agents/ada/tools", &server),
        &token,
        None,
    )
    .await;

    server.kill9();
    let server = ServerProcess::start(data.path(), &[]).await;

    let (s, after) = call(
        &client,
        M::GET,
        u("/agents/ada/tools", &server),
        &token,
        None,
    )
    .await;
    assert_eq!(
        s, 200,
        "the agent token still works after a restart: {after}"
    );
    assert_eq!(after, before);
    let (_, unit) = call(
        &client,
        M::GET,
        u("/units/team", &server),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(unit["parent"], "org");
    let (_, bindings) = call(
        &client,
        M::GET,
        u("/units/org/connectors", &server),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(bindings["bindings"][0]["config"], json!({"greeting": "hi"}));
    let (s, r) = call(
        &client,
        M::POST,
        u("/agents/ada/tool-calls", &server),
        &token,
        Some(json!({"tool": "acme.echo", "arguments": {"message": "after restart"}})),
    )
    .await;
    assert_eq!(
        (s, r["result"]["message"].as_str()),
        (200, Some("after restart"))
    );
    let (s, r) = call(
        &client,
        M::POST,
        u("/agents/ada/tool-calls", &server),
        &token,
        Some(json!({"tool": "hostile.counter", "arguments": {}})),
    )
    .await;
    assert_eq!(
        (s, r["result"].clone()),
        (200, json!(1)),
        "the installed component and the explicit grant survived"
    );
    // The compiled-component cache was used on the second start.
    let cached = std::fs::read_dir(data.path().join("compiled"))
        .unwrap()
        .count();
    assert!(cached >= 2, "compiled components are cached on disk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_even_with_an_open_message_stream() {
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = ServerProcess::start(data.path(), &[]).await;
    let (s, _) = call(
        &client,
        reqwest::Method::PUT,
        format!("{}/api/v1/units/u", server.url),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201);
    let stream = client
        .get(format!("{}/api/v1/units/u/messages/stream", server.url))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let pid = server.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            assert!(exit.success(), "{exit:?}");
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the server did not stop after SIGTERM"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(stream);
}

/// A start adopts the stored bundled connectors without hashing them when their compiled
/// code is cached. A stored copy damaged since is found when the cache misses: its digest
/// fails, and the start writes the binary's copy again instead of running or keeping it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_stored_bundled_connector_is_rewritten_when_the_cache_misses() {
    let data = tempfile::tempdir().unwrap();
    // A compiled-component cache of its own, which the test empties to make it miss.
    std::fs::create_dir(data.path().join("compiled")).unwrap();
    let acme = connector_bundled::component("acme").expect("acme is bundled");
    let stored_acme = |db: &std::path::Path| -> Vec<u8> {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.query_row(
            "SELECT component FROM connectors WHERE slug = 'acme'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let db = data.path().join("host.db");
    let mut server = ServerProcess::start(data.path(), &[]).await;
    server.kill9();
    assert_eq!(stored_acme(&db), acme);

    damage_stored_component(data.path(), "acme", acme);

    let mut server = ServerProcess::start(data.path(), &[]).await;
    let client = reqwest::Client::new();
    let (status, body) = call(
        &client,
        reqwest::Method::GET,
        format!("{}/api/v1/connectors", server.url),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("acme.echo"), "{body}");
    server.kill9();
    assert_eq!(stored_acme(&db), acme, "the damaged copy was not rewritten");
}

/// A start serves the stored connectors from their stored descriptions and loads their
/// code in the background (the bundled ones excepted: see the test above). A stored
/// component damaged since therefore keeps its connector's tools listed; each call says
/// the component could not be loaded, the log says it once, and the other connectors
/// answer as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_component_damaged_since_keeps_its_tools_and_its_calls_say_why_they_fail() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir(data.path().join("compiled")).unwrap();
    let client = reqwest::Client::new();
    let mut server = ServerProcess::start(data.path(), &[]).await;
    let hostile = std::fs::read(guests::HOSTILE).expect("component");
    let (s, b) = upload_component(&client, &server.url, hostile.clone(), "").await;
    assert!(s == 201 || s == 200, "{s} {b}");
    let u = |p: &str, s: &ServerProcess| format!("{}/api/v1{p}", s.url);
    use reqwest::Method as M;
    for (path, body) in [
        ("/units/team", json!({})),
        ("/agents/ada", json!({"units": ["team"]})),
        ("/units/team/connectors/hostile", json!({"config": {}})),
        ("/units/team/connectors/acme", json!({"config": {}})),
    ] {
        let (s, b) = call(
            &client,
            M::PUT,
            u(path, &server),
            OPERATOR_TOKEN,
            Some(body),
        )
        .await;
        assert!(s == 201 || s == 200, "PUT {path}: {s} {b}");
    }
    server.kill9();

    damage_stored_component(data.path(), "hostile", &hostile);

    let log_path = data.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut server = ServerProcess::start_logging_to(data.path(), &[], log).await;
    let (s, b) = call(
        &client,
        M::GET,
        u("/agents/ada/tools", &server),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert!(b.to_string().contains("hostile.counter"), "{b}");
    for _ in 0..2 {
        let (s, b) = call(
            &client,
            M::POST,
            u("/agents/ada/tool-calls", &server),
            OPERATOR_TOKEN,
            Some(json!({"tool": "hostile.counter"})),
        )
        .await;
        assert!(s >= 500, "{s} {b}");
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("cannot be loaded on this host")
                && message.contains("do not match the digest")
                && message.contains("install the component again"),
            "{b}"
        );
    }
    let (s, b) = call(
        &client,
        M::POST,
        u("/agents/ada/tool-calls", &server),
        OPERATOR_TOKEN,
        Some(json!({"tool": "acme.echo", "arguments": {"message": "still here"}})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    server.kill9();
    let log = std::fs::read_to_string(&log_path).expect("log");
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("does not load on this host"))
        .collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(errors[0].contains("hostile"), "{}", errors[0]);
}
