//! Several real `connector-host serve` replicas on one PostgreSQL database: what one
//! replica writes, the others see on their next request; a webhook delivery sent to
//! several replicas lands once; a replica killed mid-burst loses nothing; a database
//! restarted under load is answered with `503` and recovered from; replicas starting
//! together migrate once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use integration_tests::guests;
use integration_tests::harness::{
    now_unix, send_standard_webhook, try_send, upload_component, with_custom_section,
    ServerProcess, OPERATOR_TOKEN,
};
use integration_tests::postgres::{require_own_postgres, require_postgres};
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// `n` replicas on `database_url`, each with its own data directory, the hostile test
/// connector in its connectors directory and the webhook secret configured.
pub(crate) async fn replicas(
    n: usize,
    database_url: &str,
    extra: &[(&str, &str)],
) -> (Vec<ServerProcess>, Vec<tempfile::TempDir>) {
    let mut dirs = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let connectors = dir.path().join("connectors");
        std::fs::create_dir_all(&connectors).unwrap();
        std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm")).unwrap();
        dirs.push(dir);
    }
    let starts = dirs.iter().map(|dir| {
        let connectors = dir.path().join("connectors");
        let mut env: Vec<(String, String)> = vec![
            ("CONNECTOR_HOST_DATABASE_URL".into(), database_url.into()),
            (
                "CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET".into(),
                SECRET.into(),
            ),
            (
                "CONNECTOR_HOST_CONNECTORS_DIR".into(),
                connectors.to_str().unwrap().into(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let path = dir.path().to_path_buf();
        async move {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            ServerProcess::start(&path, &env).await
        }
    });
    // All at once: they race for the migration and the bundled connectors' rows.
    let servers = futures::future::join_all(starts).await;
    (servers, dirs)
}

async fn call(
    client: &reqwest::Client,
    method: Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    try_send(client, method, &url, Some(token), body).await
}

async fn op(client: &reqwest::Client, method: Method, url: String, body: Option<Value>) -> u16 {
    call(client, method, url, OPERATOR_TOKEN, body).await.0
}

/// Sends one Standard Webhooks delivery; `None` when the connection failed.
async fn deliver(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    body: &Value,
) -> Option<(u16, Value)> {
    let bytes = serde_json::to_vec(body).ok()?;
    send_standard_webhook(client, base, "hostile", id, &bytes, SECRET, now_unix()).await
}

fn event(sleep_ms: u64) -> Value {
    json!({
        "messages": [{"route": "r", "kind": "replica.test", "threadKey": null, "payload": {"n": 1}}],
        "sleep_ms": sleep_ms,
    })
}

/// Every delivery id in `unit`'s inbox, with how many messages carry it.
async fn inbox_counts(client: &reqwest::Client, base: &str, unit: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let mut cursor = String::new();
    loop {
        let (s, b) = call(
            client,
            Method::GET,
            format!("{base}/api/v1/units/{unit}/messages?limit=500&after={cursor}"),
            OPERATOR_TOKEN,
            None,
        )
        .await;
        assert_eq!(s, 200, "inbox of {unit}: {b}");
        let messages = b["messages"].as_array().cloned().unwrap_or_default();
        for m in &messages {
            *counts
                .entry(m["deliveryId"].as_str().unwrap_or_default().to_string())
                .or_insert(0) += 1;
        }
        if messages.is_empty() {
            return counts;
        }
        cursor = b["next"].as_str().unwrap_or_default().to_string();
    }
}

/// Sets up units `u1`, `u2` bound to hostile (route `r`) and acme, and agent `ada` in `u1`.
pub(crate) async fn setup_units(client: &reqwest::Client, base: &str) {
    for u in ["u1", "u2"] {
        assert_eq!(
            op(
                client,
                Method::PUT,
                format!("{base}/api/v1/units/{u}"),
                Some(json!({}))
            )
            .await,
            201
        );
        assert_eq!(
            op(
                client,
                Method::PUT,
                format!("{base}/api/v1/units/{u}/connectors/hostile"),
                Some(json!({"config": {"routes": ["r"]}})),
            )
            .await,
            201
        );
    }
}

/// Agent `ada` calls `acme.echo` on replica `base`.
async fn echo_on(client: &reqwest::Client, base: &str, token: &str) -> (u16, Value) {
    call(
        client,
        Method::POST,
        format!("{base}/api/v1/agents/ada/tool-calls"),
        token,
        Some(json!({"tool": "acme.echo", "arguments": {"message": "hi"}})),
    )
    .await
}

fn tool_names(body: &Value) -> BTreeSet<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["id"].as_str().or(t["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_replica_writes_the_next_request_on_any_other_sees() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_see").unwrap();
    let (servers, _dirs) = replicas(3, &url, &[]).await;
    let (a, b, c) = (&servers[0].url, &servers[1].url, &servers[2].url);
    let client = reqwest::Client::new();

    // A unit and an agent made on A; the agent's token issued by B works on C.
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{a}/api/v1/units/team"),
            Some(json!({}))
        )
        .await,
        201
    );
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{b}/api/v1/agents/ada"),
            Some(json!({"units": ["team"]}))
        )
        .await,
        201
    );
    let (s, t) = call(
        &client,
        Method::POST,
        format!("{b}/api/v1/agents/ada/tokens"),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201, "{t}");
    let token = t["token"].as_str().unwrap().to_string();
    let (s, body) = echo_on(&client, c, &token).await;
    assert_eq!(s, 403, "not bound yet, so not granted: {body}");

    // Bind on B; the very next request on C and on A sees the grant.
    for round in 0..5 {
        assert_eq!(
            op(
                &client,
                Method::PUT,
                format!("{b}/api/v1/units/team/connectors/acme"),
                Some(json!({"config": {}})),
            )
            .await,
            201,
            "round {round}"
        );
        for base in [c, a] {
            let (s, body) = echo_on(&client, base, &token).await;
            assert_eq!(
                s, 200,
                "round {round}: call on {base} right after a bind on B: {body}"
            );
        }
        // Unbind on C; the very next request on A and B no longer has the tool.
        assert_eq!(
            op(
                &client,
                Method::DELETE,
                format!("{c}/api/v1/units/team/connectors/acme"),
                None
            )
            .await,
            204,
            "round {round}"
        );
        for base in [a, b] {
            let (s, body) = echo_on(&client, base, &token).await;
            assert_eq!(
                s, 403,
                "round {round}: call on {base} right after an unbind on C: {body}"
            );
        }
    }

    // An explicit grant through A shows in B's effective tool set.
    let (s, body) = call(
        &client,
        Method::POST,
        format!("{a}/api/v1/agents/ada/grants"),
        OPERATOR_TOKEN,
        Some(json!({"tool": "acme.echo"})),
    )
    .await;
    assert!(s == 201 || s == 200, "{s} {body}");
    let (s, tools) = call(
        &client,
        Method::GET,
        format!("{b}/api/v1/agents/ada/tools"),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(s, 200, "{tools}");
    assert!(
        tool_names(&tools).contains("acme.echo"),
        "B does not see A's explicit grant: {tools}"
    );

    // A rotation on C (a new digest of hostile) is what A reports next.
    let rotated = with_custom_section(&std::fs::read(guests::HOSTILE).unwrap(), "v2");
    let (s, on_c) = upload_component(&client, c, rotated, "").await;
    assert!(s == 200 || s == 201, "rotation: {s} {on_c}");
    let (s, on_a) = call(
        &client,
        Method::GET,
        format!("{a}/api/v1/connectors/hostile"),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(s, 200, "{on_a}");
    assert_eq!(
        on_a["digest"], on_c["digest"],
        "A still serves the old version"
    );

    // An agent deleted on B is gone on C.
    assert_eq!(
        op(
            &client,
            Method::DELETE,
            format!("{b}/api/v1/agents/ada"),
            None
        )
        .await,
        204
    );
    let (s, _) = call(
        &client,
        Method::GET,
        format!("{c}/api/v1/agents/ada"),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(s, 404, "C still has the agent B deleted");

    // A unit deleted on A is gone on B, with its bindings.
    assert_eq!(
        op(
            &client,
            Method::DELETE,
            format!("{a}/api/v1/units/team"),
            None
        )
        .await,
        204
    );
    let (s, _) = call(
        &client,
        Method::GET,
        format!("{b}/api/v1/units/team"),
        OPERATOR_TOKEN,
        None,
    )
    .await;
    assert_eq!(s, 404, "B still has the unit A deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_sent_to_every_replica_at_once_is_accepted_by_exactly_one() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_dedup").unwrap();
    let (servers, _dirs) = replicas(3, &url, &[]).await;
    let client = reqwest::Client::new();
    setup_units(&client, &servers[0].url).await;
    // A live inbox stream on replica 2 sees what every replica routes.
    let stream = client
        .get(format!(
            "{}/api/v1/units/u1/messages/stream",
            servers[2].url
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let streamed = tokio::spawn(async move {
        use futures::StreamExt;
        let mut body = stream.bytes_stream();
        let mut text = String::new();
        let mut ids: Vec<String> = Vec::new();
        while ids.len() < 20 {
            let Ok(Some(Ok(chunk))) =
                tokio::time::timeout(Duration::from_secs(30), body.next()).await
            else {
                break;
            };
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) {
                    let m: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                    ids.push(m["deliveryId"].as_str().unwrap_or_default().to_string());
                }
            }
        }
        ids
    });

    for i in 0..20 {
        let id = format!("same-{i}");
        let sends = servers.iter().map(|s| {
            let client = client.clone();
            let base = s.url.clone();
            let id = id.clone();
            async move { deliver(&client, &base, &id, &event(0)).await }
        });
        let answers = futures::future::join_all(sends).await;
        let mut taken = 0;
        let mut duplicates = 0;
        for answer in &answers {
            match answer {
                Some((202, b)) if b["status"] == "duplicate" => duplicates += 1,
                Some((202, b)) if b["status"] == "accepted" || b["status"] == "queued" => {
                    taken += 1
                }
                other => panic!("{id}: unexpected answer {other:?}"),
            }
        }
        assert_eq!((taken, duplicates), (1, 2), "{id}: {answers:?}");
    }
    // Each delivery is in each bound unit exactly once, whichever replica is asked.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut complete = true;
        for (unit, server) in [("u1", &servers[1]), ("u2", &servers[2])] {
            let counts = inbox_counts(&client, &server.url, unit).await;
            assert!(
                counts.values().all(|&n| n == 1),
                "{unit} got a delivery twice: {counts:?}"
            );
            complete &= counts.len() == 20;
        }
        if complete {
            break;
        }
        assert!(Instant::now() < deadline, "deliveries did not all land");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ids = streamed.await.unwrap();
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), distinct.len()),
        (20, 20),
        "the stream on replica 2 missed or repeated messages: {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_during_a_burst_leaves_its_deliveries_to_the_others() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_kill").unwrap();
    // A 5 s call timeout makes the delivery lease 11 s (and leaves the 2.5 s slow
    // translations a wide margin on a loaded machine).
    let (mut servers, _dirs) =
        replicas(3, &url, &[("CONNECTOR_HOST_CALL_TIMEOUT_MS", "5000")]).await;
    let client = reqwest::Client::new();
    setup_units(&client, &servers[0].url).await;

    // A burst over all three replicas; every third delivery to replica 0 is slow (its
    // translation outlasts the 2 s inline window, so it is answered `queued` and still
    // being worked on when replica 0 is killed).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..60 {
        let client = client.clone();
        let base = servers[i % 3].url.clone();
        let tx = tx.clone();
        let slow = i % 3 == 0 && (i / 3) % 3 == 0;
        tokio::spawn(async move {
            let id = format!("burst-{i}");
            let answer = deliver(&client, &base, &id, &event(if slow { 2500 } else { 0 })).await;
            let _ = tx.send((id, i % 3, answer));
        });
    }
    drop(tx);
    let mut answers = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Ok(Some(answer)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        let queued_on_0 =
            answer.1 == 0 && matches!(&answer.2, Some((202, b)) if b["status"] == "queued");
        answers.push(answer);
        if queued_on_0 {
            break;
        }
    }
    servers[0].kill9();
    while let Some(answer) = rx.recv().await {
        answers.push(answer);
    }
    let mut acknowledged = BTreeSet::new();
    let mut queued_on_killed = 0;
    for (id, replica, answer) in &answers {
        if let Some((202, b)) = answer {
            assert!(
                matches!(b["status"].as_str(), Some("accepted" | "queued")),
                "{id}: {b}"
            );
            if *replica == 0 && b["status"] == "queued" {
                queued_on_killed += 1;
            }
            acknowledged.insert(id.clone());
        }
    }
    assert!(
        queued_on_killed > 0,
        "no delivery was acknowledged-but-unfinished on the killed replica"
    );

    // The survivors finish the killed replica's deliveries once its claims lapse.
    let survivors = &servers[1..];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = true;
        for (unit, server) in [("u1", &survivors[0]), ("u2", &survivors[1])] {
            let counts = inbox_counts(&client, &server.url, unit).await;
            assert!(
                counts.values().all(|&n| n == 1),
                "{unit} got a delivery twice: {counts:?}"
            );
            all &= acknowledged.iter().all(|id| counts.contains_key(id));
        }
        if all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged deliveries of the killed replica were never finished"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Redelivering every acknowledged delivery changes nothing.
    for id in &acknowledged {
        let answer = deliver(&client, &survivors[0].url, id, &event(0)).await;
        assert!(
            matches!(&answer, Some((202, b)) if b["status"] == "duplicate"),
            "{id}: {answer:?}"
        );
    }
    for unit in ["u1", "u2"] {
        let counts = inbox_counts(&client, &survivors[1].url, unit).await;
        assert!(counts.values().all(|&n| n == 1), "{unit}: {counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_under_load_gets_503s_then_recovers_losing_nothing() {
    let Some(mut pg) = require_own_postgres() else {
        return;
    };
    let url = pg.create_database("restart_under_load").unwrap();
    let (servers, _dirs) = replicas(2, &url, &[]).await;
    let client = reqwest::Client::new();
    setup_units(&client, &servers[0].url).await;
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{}/api/v1/units/u1/connectors/acme", servers[0].url),
            Some(json!({"config": {}}))
        )
        .await,
        201
    );
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{}/api/v1/agents/ada", servers[0].url),
            Some(json!({"units": ["u1"]}))
        )
        .await,
        201
    );
    let (_, t) = call(
        &client,
        Method::POST,
        format!("{}/api/v1/agents/ada/tokens", servers[1].url),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    let token = t["token"].as_str().unwrap().to_string();

    // Load: deliveries and tool calls over both replicas until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let client = client.clone();
        let base = servers[w % 2].url.clone();
        let stop = stop.clone();
        let token = token.clone();
        workers.push(tokio::spawn(async move {
            let mut seen: Vec<(String, u16, String)> = Vec::new();
            let mut calls: BTreeMap<u16, usize> = BTreeMap::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = format!("load-{w}-{i}");
                i += 1;
                let started = Instant::now();
                let answer = deliver(&client, &base, &id, &event(0)).await;
                assert!(
                    started.elapsed() < Duration::from_secs(12),
                    "a webhook took {:?}: requests must fail fast while the database is down",
                    started.elapsed()
                );
                let (status, body) = answer.unwrap_or((0, Value::Null));
                seen.push((id, status, body["status"].as_str().unwrap_or("").into()));
                let (s, _) = call(
                    &client,
                    Method::POST,
                    format!("{base}/api/v1/agents/ada/tool-calls"),
                    &token,
                    Some(json!({"tool": "acme.echo", "arguments": {"message": "x"}})),
                )
                .await;
                *calls.entry(s).or_insert(0) += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (seen, calls)
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.stop().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.start_again().unwrap();
    // Recovery by itself: within a bounded time every replica answers again.
    let deadline = Instant::now() + Duration::from_secs(30);
    for server in &servers {
        loop {
            let (s, _) = call(
                &client,
                Method::GET,
                format!("{}/api/v1/units/u1", server.url),
                OPERATOR_TOKEN,
                None,
            )
            .await;
            if s == 200 {
                break;
            }
            assert_eq!(s, 503, "while recovering, only 503 is acceptable");
            assert!(Instant::now() < deadline, "{} did not recover", server.url);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut acknowledged = BTreeSet::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut call_statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for w in workers {
        let (seen, calls) = w.await.unwrap();
        for (id, status, outcome) in seen {
            *statuses.entry(status).or_insert(0) += 1;
            if status == 202 {
                assert!(
                    outcome == "accepted" || outcome == "queued",
                    "{id}: {outcome}"
                );
                acknowledged.insert(id);
            }
        }
        for (s, n) in calls {
            *call_statuses.entry(s).or_insert(0) += n;
        }
    }
    // Clean failures only: 202 or 503 for webhooks, 200 or 503 for tool calls.
    assert!(
        statuses.keys().all(|s| *s == 202 || *s == 503),
        "webhook answers: {statuses:?}"
    );
    assert!(
        call_statuses.keys().all(|s| *s == 200 || *s == 503),
        "tool-call answers: {call_statuses:?}"
    );
    assert!(
        statuses.get(&503).copied().unwrap_or(0) > 0,
        "the outage was not noticed: {statuses:?}"
    );
    assert!(statuses.get(&202).copied().unwrap_or(0) > 0);
    // Nothing acknowledged is lost, nothing lands twice.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = true;
        for unit in ["u1", "u2"] {
            let counts = inbox_counts(&client, &servers[1].url, unit).await;
            assert!(counts.values().all(|&n| n == 1), "{unit}: {counts:?}");
            all &= acknowledged.iter().all(|id| counts.contains_key(id));
        }
        if all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged deliveries were lost across the database restart"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_apply_each_migration_once() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_migrate").unwrap();
    let (servers, _dirs) = replicas(3, &url, &[]).await;
    assert_eq!(servers.len(), 3);
    let db = url.rsplit('/').next().unwrap();
    let rows = pg
        .psql(
            db,
            "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version",
        )
        .unwrap();
    let lines: Vec<&str> = rows
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(!lines.is_empty(), "no migration recorded: {rows:?}");
    for line in &lines {
        assert!(
            line.ends_with("|1"),
            "a migration was recorded more than once: {rows}"
        );
    }
    // And every replica serves.
    let client = reqwest::Client::new();
    for s in &servers {
        let (status, body) = call(
            &client,
            Method::GET,
            format!("{}/api/v1/connectors", s.url),
            OPERATOR_TOKEN,
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installation_token_exchanges_are_bounded_by_one_per_replica() {
    use connector_host::config::{ConnectorSettings, GithubAppSettings};
    use integration_tests::fake_github::FakeGithub;
    use integration_tests::harness::TestHost;

    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_github").unwrap();
    let keys = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/github");
    let public = std::fs::read_to_string(keys.join("app-public.pem")).unwrap();
    let fake = FakeGithub::start(&public, "1012345").await;
    fake.register(48213907);
    let mut hosts = Vec::new();
    for _ in 0..3 {
        let (url, api_url, key) = (url.clone(), fake.url(), keys.join("app-key-pkcs1.pem"));
        hosts.push(
            TestHost::start_with(move |c| {
                c.database_url = Some(url);
                c.github_app = Some(GithubAppSettings {
                    app_id: "1012345".into(),
                    private_key_path: key,
                    api_url,
                });
                c.connectors
                    .insert("github".into(), ConnectorSettings::default());
            })
            .await,
        );
    }
    hosts[0].unit("web", None).await;
    hosts[1]
        .bind(
            "web",
            "github",
            json!({"repo": "octo-org/hello-world", "installationId": 48213907}),
        )
        .await;
    hosts[2].agent("dev", &["web"]).await;
    let token = hosts[0].agent_token("dev").await;

    let mut tasks = Vec::new();
    for i in 0..90 {
        let client = hosts[i % 3].client.clone();
        let url = hosts[i % 3].at("/api/v1/agents/dev/runtime-context");
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            let r = client.get(url).bearer_auth(token).send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }));
    }
    for t in tasks {
        let (s, body) = t.await.unwrap();
        assert_eq!(s, 200, "{body}");
        assert!(body["env"]["GITHUB_TOKEN"]
            .as_str()
            .is_some_and(|t| !t.is_empty()));
    }
    let exchanges = fake.exchanges();
    assert!(
        (1..=3).contains(&exchanges),
        "90 requests over 3 replicas made {exchanges} exchanges (at most one per replica)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_operator_token_is_shared_by_digest_only() {
    use connector_host::config::HostConfig;
    use connector_host::Host;

    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_operator").unwrap();
    let open = |dir: &std::path::Path| {
        Host::open(HostConfig {
            data_dir: dir.to_path_buf(),
            database_url: Some(url.clone()),
            operator_token: None,
            bundled: connector_bundled::components(),
            ..HostConfig::default()
        })
    };
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (first, report) = open(first_dir.path()).await.unwrap();
    let token = report
        .generated_operator_token
        .expect("the first replica generates and prints the token");
    let (second, report) = open(second_dir.path()).await.unwrap();
    assert_eq!(
        report.generated_operator_token, None,
        "the second replica prints nothing"
    );
    assert!(first.is_operator_token(&token));
    assert!(
        second.is_operator_token(&token),
        "replicas disagree on the token"
    );
    assert!(!second.is_operator_token("something-else"));
    // The database holds a digest, never the token itself.
    let db = url.rsplit('/').next().unwrap();
    let stored = pg
        .psql(db, "SELECT string_agg(value, ',') FROM host_secrets")
        .unwrap();
    assert!(!stored.contains(&token), "the token itself is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_on_two_replicas_never_leave_bindings_of_a_removed_connector() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_race").unwrap();
    let (servers, _dirs) = replicas(2, &url, &[]).await;
    let (a, b) = (servers[0].url.clone(), servers[1].url.clone());
    let client = reqwest::Client::new();
    let units: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    for u in &units {
        assert_eq!(
            op(
                &client,
                Method::PUT,
                format!("{a}/api/v1/units/{u}"),
                Some(json!({}))
            )
            .await,
            201
        );
    }
    let component = std::fs::read(guests::HOSTILE).unwrap();
    let db = url.rsplit('/').next().unwrap().to_string();
    let mut conflicts = 0;
    for round in 0..6 {
        // A binds hostile to every unit while B removes hostile (unbinding what it sees).
        let binds = units.iter().map(|u| {
            let client = client.clone();
            let url = format!("{a}/api/v1/units/{u}/connectors/hostile");
            async move {
                call(
                    &client,
                    Method::PUT,
                    url,
                    OPERATOR_TOKEN,
                    Some(json!({"config": {"routes": ["r"]}})),
                )
                .await
            }
        });
        let remove = async {
            tokio::time::sleep(Duration::from_millis(5 * round)).await;
            call(
                &client,
                Method::DELETE,
                format!("{b}/api/v1/connectors/hostile?force=true"),
                OPERATOR_TOKEN,
                None,
            )
            .await
        };
        let (bound, removed) = tokio::join!(futures::future::join_all(binds), remove);
        for (s, body) in bound.iter().chain(std::iter::once(&removed)) {
            match s {
                200 | 201 | 204 => {}
                // The connector was already gone when A checked.
                404 => {}
                409 if body["error"]["code"] == "state_changed" => conflicts += 1,
                other => panic!("round {round}: unexpected answer {other} {body}"),
            }
        }
        // Whatever interleaving happened, no binding or grant outlives its connector.
        let orphans = pg
            .psql(
                &db,
                "SELECT (SELECT count(*) FROM bindings b WHERE NOT EXISTS \
                 (SELECT 1 FROM connectors c WHERE c.slug = b.connector)) + \
                 (SELECT count(*) FROM grants g WHERE g.provenance LIKE 'connector:%' AND NOT EXISTS \
                 (SELECT 1 FROM connectors c WHERE 'connector:' || c.slug = g.provenance))",
            )
            .unwrap();
        assert_eq!(
            orphans.trim(),
            "0",
            "round {round}: orphaned bindings or grants"
        );
        // And both replicas agree with the database.
        for base in [&a, &b] {
            let (s, body) = call(
                &client,
                Method::GET,
                format!("{base}/api/v1/units/r0/connectors"),
                OPERATOR_TOKEN,
                None,
            )
            .await;
            assert_eq!(s, 200, "{body}");
            let bound_here = body["bindings"]
                .as_array()
                .is_some_and(|b| b.iter().any(|b| b["connector"] == "hostile"));
            let in_db = pg
                .psql(
                    &db,
                    "SELECT count(*) FROM bindings WHERE unit_id = 'r0' AND connector = 'hostile'",
                )
                .unwrap();
            assert_eq!(
                bound_here,
                in_db.trim() == "1",
                "round {round}: {base} disagrees"
            );
        }
        // Put hostile back for the next round.
        let (s, body) = upload_component(&client, &b, component.clone(), "").await;
        assert!(s == 200 || s == 201, "reinstall: {s} {body}");
    }
    eprintln!("{conflicts} writes were refused as racing another replica's");
}

/// Sends `signal` to the PostgreSQL server of `pg` and every process it started.
fn signal_postgres(pg: &integration_tests::postgres::PgCluster, signal: &str) {
    let pid_file = std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim().to_string();
    let children = std::process::Command::new("pkill")
        .args([signal, "-P", &pid])
        .status()
        .unwrap();
    assert!(children.success(), "pkill {signal} -P {pid}");
    let server = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap();
    assert!(server.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stops_answering_gets_503s_not_hung_requests() {
    let Some(pg) = require_own_postgres() else {
        return;
    };
    let url = pg.create_database("frozen").unwrap();
    let (servers, _dirs) = replicas(1, &url, &[]).await;
    let base = servers[0].url.clone();
    let client = reqwest::Client::new();
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{base}/api/v1/units/u1"),
            Some(json!({}))
        )
        .await,
        201
    );

    // Frozen, not down: connections stay open and nothing answers.
    signal_postgres(&pg, "-STOP");
    let requests = (0..6).map(|i| {
        let client = client.clone();
        let url = if i % 2 == 0 {
            format!("{base}/api/v1/units/u1")
        } else {
            format!("{base}/api/v1/units/u{i}")
        };
        async move {
            let started = Instant::now();
            let (s, body) = call(&client, Method::GET, url, OPERATOR_TOKEN, None).await;
            (s, body, started.elapsed())
        }
    });
    let answers = futures::future::join_all(requests).await;
    signal_postgres(&pg, "-CONT");
    for (s, body, took) in &answers {
        assert_eq!(*s, 503, "{body}");
        assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
        assert!(
            *took < Duration::from_secs(12),
            "a request waited {took:?} on a database that does not answer"
        );
    }
    // Thawed: the replica answers again by itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, _) = call(
            &client,
            Method::GET,
            format!("{base}/api/v1/units/u1"),
            OPERATOR_TOKEN,
            None,
        )
        .await;
        if s == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no recovery after the database thawed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_replica_stops_working_on_the_others() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_revoke").unwrap();
    let (servers, _dirs) = replicas(2, &url, &[]).await;
    let (a, b) = (&servers[0].url, &servers[1].url);
    let client = reqwest::Client::new();
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{a}/api/v1/units/team"),
            Some(json!({}))
        )
        .await,
        201
    );
    assert_eq!(
        op(
            &client,
            Method::PUT,
            format!("{a}/api/v1/agents/ada"),
            Some(json!({"units": ["team"]}))
        )
        .await,
        201
    );
    let (s, issued) = call(
        &client,
        Method::POST,
        format!("{b}/api/v1/agents/ada/tokens"),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201, "{issued}");
    let token = issued["token"].as_str().unwrap_or_default().to_string();
    for base in [a, b] {
        let (s, body) = call(
            &client,
            Method::GET,
            format!("{base}/api/v1/agents/ada/tools"),
            &token,
            None,
        )
        .await;
        assert_eq!(s, 200, "{base}: {body}");
    }
    assert_eq!(
        op(
            &client,
            Method::POST,
            format!("{a}/api/v1/agents/ada/tokens/revoke"),
            None
        )
        .await,
        204
    );
    for base in [a, b] {
        let (s, body) = call(
            &client,
            Method::GET,
            format!("{base}/api/v1/agents/ada/tools"),
            &token,
            None,
        )
        .await;
        assert_eq!(s, 401, "{base}: {body}");
    }
}

/// MCP 2026-07-28 keeps no session: one client's requests may land on any replica, and a
/// `subscriptions/listen` stream on one replica hears of a bind made through another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_mcp_client_is_served_by_any_replica() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_mcp").unwrap();
    let (servers, _dirs) = replicas(2, &url, &[]).await;
    let (a, b) = (&servers[0].url, &servers[1].url);
    let client = reqwest::Client::new();
    for (path, body) in [
        ("units/team", json!({})),
        ("agents/ada", json!({"units": ["team"]})),
        ("units/team/connectors/acme", json!({"config": {}})),
    ] {
        let status = op(
            &client,
            Method::PUT,
            format!("{a}/api/v1/{path}"),
            Some(body),
        )
        .await;
        assert_eq!(status, 201, "{path}");
    }
    let (s, issued) = call(
        &client,
        Method::POST,
        format!("{b}/api/v1/agents/ada/tokens"),
        OPERATOR_TOKEN,
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201, "{issued}");
    let token = issued["token"].as_str().unwrap_or_default().to_string();
    let on = |base: &str| crate::mcp_stateless::Stateless::new(base, "ada", &token);
    let (mut stream, _) = on(b).listen(json!({"toolsListChanged": true})).await;
    assert!(
        stream.next(Duration::from_secs(5)).await.is_some(),
        "acknowledged"
    );

    // One client, its requests alternating between the replicas.
    for i in 0..6 {
        let base = if i % 2 == 0 { a } else { b };
        let replica = on(base);
        assert!(replica
            .tool_names()
            .await
            .contains(&"acme.echo".to_string()));
        let r = replica
            .rpc(
                "tools/call",
                json!({"name": "acme.echo", "arguments": {"message": format!("m{i}")}}),
            )
            .await;
        assert_eq!(
            r["result"]["structuredContent"]["message"],
            format!("m{i}"),
            "{r}"
        );
    }

    // A bind through A: B's next request sees it, and B's listen stream is told.
    let started = Instant::now();
    let status = op(
        &client,
        Method::PUT,
        format!("{a}/api/v1/units/team/connectors/hostile"),
        Some(json!({"config": {}})),
    )
    .await;
    assert_eq!(status, 201);
    assert!(on(b)
        .tool_names()
        .await
        .contains(&"hostile.counter".to_string()));
    let note = stream
        .next(Duration::from_secs(5))
        .await
        .expect("list_changed on the other replica");
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    eprintln!(
        "list_changed on replica B {:?} after the bind on A",
        started.elapsed()
    );
}

/// Everything a replica serves about `units` and `agents`, as JSON (errors as their
/// codes), for comparing two replicas' memories.
fn served(host: &connector_host::Host, units: &[&str], agents: &[&str]) -> Value {
    use connector_model::records::Subject;
    let json = |v: Result<Value, connector_host::HostError>| match v {
        Ok(v) => v,
        Err(e) => json!({"error": format!("{:?}", e.code)}),
    };
    macro_rules! to {
        ($v:expr) => {
            serde_json::to_value($v).unwrap()
        };
    }
    let agent = |a: &str| Subject::Agent(a.to_string());
    json!({
        "units": to!(host.list_units()),
        "agents": to!(host.list_agents()),
        "bindings": to!(host.all_bindings()),
        "unit_views": units.iter().map(|u| json(host.unit(*u).map(|v| to!(v)))).collect::<Vec<_>>(),
        "agent_views": agents.iter().map(|a| json(host.agent(*a).map(|v| to!(v)))).collect::<Vec<_>>(),
        "grants": agents.iter().map(|a| to!(host.explicit_grants(&agent(a)))).collect::<Vec<_>>(),
        "tools": agents.iter().map(|a| json(host.effective_tools(&agent(a))
            .map(|t| to!(t.iter().map(|t| t.name().to_string()).collect::<Vec<_>>())))).collect::<Vec<_>>(),
    })
}

/// Makes every kind of directory write on `writer` and checks that the next request on
/// `follower` serves exactly what `writer` does, caught up from the change log without a
/// reload; then that a replica loading everything afresh (`fresh`) serves the same.
async fn every_kind_of_write_is_caught_up<F>(
    writer: &connector_host::Host,
    follower: &connector_host::Host,
    fresh: F,
) where
    F: std::future::Future<Output = connector_host::Host>,
{
    use connector_model::records::Subject;
    let (units, agents) = (["root", "team", "other"], ["ada", "bob"]);
    // Start-up installs (the bundled connectors) are connector changes: reloaded.
    follower.refresh().await.unwrap();
    let before = follower.catch_ups();
    let ada = || Subject::Agent("ada".into());
    let steps: Vec<(&str, futures::future::BoxFuture<'_, ()>)> = vec![
        (
            "put root",
            Box::pin(async {
                writer
                    .put_unit("root", None, Some("Root"))
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "put team",
            Box::pin(async {
                writer
                    .put_unit("team", Some("root"), None)
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "put other",
            Box::pin(async {
                writer
                    .put_unit("other", Some("root"), None)
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "put ada",
            Box::pin(async {
                writer
                    .put_agent("ada", &["team", "other"], Some("Ada"))
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "put bob",
            Box::pin(async {
                writer
                    .put_agent("bob", &["team"], None)
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "bind acme on root",
            Box::pin(async {
                writer
                    .bind("root", "acme", json!({}))
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "grant",
            Box::pin(async { writer.grant(ada(), "github.*").await.map(drop).unwrap() }),
        ),
        (
            "image tools",
            Box::pin(async {
                writer.put_image_tools("ada", "sha256:01", json!([{"name": "img.run", "description": "runs", "inputSchema": {"type": "object"}}]))
                .await.map(drop).unwrap()
            }),
        ),
        (
            "revoke",
            Box::pin(async { writer.revoke(ada(), "github.*").await.unwrap() }),
        ),
        (
            "move team",
            Box::pin(async {
                writer
                    .put_unit("team", Some("other"), Some("Team"))
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "unbind",
            Box::pin(async { writer.unbind("root", "acme").await.unwrap() }),
        ),
        (
            "bind acme on team",
            Box::pin(async {
                writer
                    .bind("team", "acme", json!({}))
                    .await
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "revoke bob's tokens",
            Box::pin(async { writer.revoke_agent_tokens("bob").await.unwrap() }),
        ),
        (
            "delete ada",
            Box::pin(async { writer.delete_agent("ada").await.unwrap() }),
        ),
        (
            "delete team, bob's unit",
            Box::pin(async { writer.delete_unit("team").await.unwrap() }),
        ),
    ];
    for (step, write) in steps {
        write.await;
        // The next request on the follower.
        follower.refresh().await.unwrap();
        assert_eq!(
            served(follower, &units, &agents),
            served(writer, &units, &agents),
            "after `{step}` on the writer, the follower serves something else"
        );
    }
    let after = follower.catch_ups();
    assert_eq!(
        after.reloaded, before.reloaded,
        "the follower reloaded everything instead of applying the change log"
    );
    assert!(after.applied > before.applied, "{after:?}");
    let fresh = fresh.await;
    assert_eq!(
        served(&fresh, &units, &agents),
        served(follower, &units, &agents),
        "a replica that loaded everything serves something else than one that caught up"
    );
}

async fn open_pg_replica(url: &str) -> (connector_host::Host, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = integration_tests::harness::test_config(dir.path());
    config.database_url = Some(url.to_string());
    let (host, _) = connector_host::Host::open(config).await.unwrap();
    (host, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_write_on_one_replica_is_applied_on_another_without_a_reload() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_catch_up").unwrap();
    let (a, _a) = open_pg_replica(&url).await;
    let (b, _b) = open_pg_replica(&url).await;
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = async {
        let mut config = integration_tests::harness::test_config(fresh_dir.path());
        config.database_url = Some(url.clone());
        connector_host::Host::open(config).await.unwrap().0
    };
    every_kind_of_write_is_caught_up(&a, &b, fresh).await;

    // And the other way round: a write through the follower reaches the writer.
    b.put_unit("from-b", None, None).await.unwrap();
    a.refresh().await.unwrap();
    assert!(a.unit("from-b").is_ok(), "A does not see B's write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_server_beside_serve_applies_each_kind_of_write_without_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let config = integration_tests::harness::test_config(dir.path());
    let (serve, _) = connector_host::Host::open(config.clone()).await.unwrap();
    let tools = connector_host::Host::open_tool_server(config.clone())
        .await
        .unwrap();
    let fresh = async {
        connector_host::Host::open_tool_server(config)
            .await
            .unwrap()
    };
    every_kind_of_write_is_caught_up(&serve, &tools, fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_a_pruned_change_log_reloads_and_sees_every_write() {
    use connector_store::{ReplicaCoordination, StateStore};
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_pruned").unwrap();
    let (a, _a) = open_pg_replica(&url).await;
    let (b, _b) = open_pg_replica(&url).await;
    let store = connector_store_postgres::PostgresStore::connect(&url)
        .await
        .unwrap();
    // B checks on its own every 200 ms: a round where it read the log before the prune
    // proves nothing, and is made again.
    let mut pruned_past_b = None;
    for round in 0..10 {
        b.refresh().await.unwrap();
        let before = b.catch_ups();
        let (kept, pruned) = (format!("kept{round}"), format!("pruned{round}"));
        a.put_unit(&kept, None, None).await.unwrap();
        a.put_unit(&pruned, None, None).await.unwrap();
        a.put_agent("ada", std::slice::from_ref(&pruned), None)
            .await
            .unwrap();
        // Everything written so far leaves the log.
        let version = store.load().await.unwrap().version;
        assert!(store.prune_changes(version).await.unwrap() >= 3);
        b.refresh().await.unwrap();
        assert!(b.unit(&kept).is_ok() && b.unit(&pruned).is_ok());
        assert_eq!(b.agent("ada").unwrap().units, [pruned]);
        let after = b.catch_ups();
        if after.applied == before.applied {
            assert_eq!(
                after.reloaded,
                before.reloaded + 1,
                "{before:?} -> {after:?}"
            );
            pruned_past_b = Some(after);
            break;
        }
    }
    let after = pruned_past_b.expect("in 10 rounds, B never found the log pruned past it");
    // From there on the log serves B again.
    a.delete_agent("ada").await.unwrap();
    b.refresh().await.unwrap();
    assert!(b.agent("ada").is_err());
    assert_eq!(b.catch_ups().reloaded, after.reloaded);
    assert_eq!(b.catch_ups().applied, after.applied + 1);
}

/// `write` on `host`, again after a refresh while another replica's write raced it (`409
/// state_changed`: nothing was written).
async fn write_retrying<T, F, Fut>(host: &connector_host::Host, write: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = connector_model::error::HostResult<T>>,
{
    for _ in 0..50 {
        match write().await {
            Ok(out) => return out,
            Err(e) if e.code == connector_model::error::ErrorCode::StateChanged => {
                host.refresh().await.unwrap();
            }
            Err(e) => panic!("the write failed: {e}"),
        }
    }
    panic!("the write kept racing another replica's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_on_two_replicas_are_each_read_on_the_other() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("replicas_batched").unwrap();
    let (a, _a) = open_pg_replica(&url).await;
    let (b, _b) = open_pg_replica(&url).await;
    write_retrying(&a, || a.put_unit("root", None, None)).await;
    b.refresh().await.unwrap();
    // Writes in flight on both replicas at once (they commit in batches); after each, the
    // next read on the other replica has it.
    let writes = (0..64).map(|i| {
        let (a, b) = (&a, &b);
        async move {
            let (writer, reader) = if i % 2 == 0 { (a, b) } else { (b, a) };
            let id = format!("w{i}");
            if i % 4 < 2 {
                write_retrying(writer, || writer.put_unit(&id, Some("root"), None)).await;
                reader.refresh().await.unwrap();
                assert!(
                    reader.unit(&id).is_ok(),
                    "unit {id} is not read on the other replica"
                );
            } else {
                write_retrying(writer, || writer.put_agent(&id, &["root"], None)).await;
                reader.refresh().await.unwrap();
                assert!(
                    reader.agent(&id).is_ok(),
                    "agent {id} is not read on the other replica"
                );
            }
        }
    });
    futures::future::join_all(writes).await;
    // Both serve what the database holds.
    let (fresh, _fresh) = open_pg_replica(&url).await;
    a.refresh().await.unwrap();
    b.refresh().await.unwrap();
    let ids = |h: &connector_host::Host| {
        let units: BTreeSet<String> = h.list_units().into_iter().map(|u| u.id).collect();
        let agents: BTreeSet<String> = h.list_agents().into_iter().map(|a| a.id).collect();
        (units, agents)
    };
    let stored = ids(&fresh);
    assert_eq!(stored.0.len(), 33, "{stored:?}");
    assert_eq!(stored.1.len(), 32, "{stored:?}");
    assert_eq!(ids(&a), stored);
    assert_eq!(ids(&b), stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_commit_fails_fails_every_write_in_it_and_leaves_memory_as_stored() {
    let Some(pg) = require_postgres() else { return };
    let db = "replicas_commit_fails";
    let url = pg.fresh_database(db).unwrap();
    let db = url.rsplit('/').next().unwrap().to_string();
    let (a, _a) = open_pg_replica(&url).await;
    // A rule the database checks at commit: a transaction holding unit `poison` fails
    // there, after every statement of it succeeded.
    pg.psql(
        &db,
        "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
         BEGIN
             IF NEW.id = 'poison' THEN RAISE EXCEPTION 'poisoned batch'; END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql;
         CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON units
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )
    .unwrap();
    // Another session holds the state version's lock: the first write waits in its
    // commit, and the writes after it form one batch behind it.
    let mut holder = pg.psql_session(&db).unwrap();
    holder
        .write("BEGIN; SELECT 'locked' FROM state_version FOR UPDATE;")
        .unwrap();
    holder.wait_for("locked").unwrap();
    let first = tokio::spawn({
        let a = a.clone();
        async move { a.put_unit("first", None, None).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let batch: Vec<_> = ["b1", "b2", "poison", "b3"]
        .into_iter()
        .map(|id| {
            let a = a.clone();
            tokio::spawn(async move { a.put_unit(id, None, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.write("COMMIT;").unwrap();
    holder.finish().unwrap();

    assert!(
        first.await.unwrap().is_ok(),
        "the write alone in its batch commits"
    );
    for (write, id) in batch.into_iter().zip(["b1", "b2", "poison", "b3"]) {
        let answer = write.await.unwrap();
        assert!(
            answer.is_err(),
            "{id} was answered {answer:?} though its batch failed"
        );
    }
    let stored: BTreeSet<String> = open_pg_replica(&url)
        .await
        .0
        .list_units()
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(stored, BTreeSet::from(["first".to_string()]));
    let served: BTreeSet<String> = a.list_units().into_iter().map(|u| u.id).collect();
    assert_eq!(served, stored, "memory holds what the database does not");
    // Writing goes on.
    a.put_unit("after", None, None).await.unwrap();
    assert!(a.unit("after").is_ok());
}
