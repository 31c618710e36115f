//! The audit log (CONTRACT §9), black box over HTTP: every change leaves exactly one
//! record naming who made it, refusals leave theirs, tool calls leave outcome, duration
//! and sizes but never their arguments or results, `GET /audit/verify` names the first
//! record edited or removed in the database, replicas on one PostgreSQL database append
//! to one chain, and a host killed during a burst of changes has a record of every
//! change it acknowledged.

use std::collections::BTreeSet;

use integration_tests::harness::{try_send, ServerProcess, TestHost, OPERATOR_TOKEN};
use integration_tests::postgres::require_postgres;
use reqwest::Method;
use serde_json::{json, Value};

/// Every record the host has, oldest first (paged as a client would).
async fn all_records(client: &reqwest::Client, base: &str) -> Vec<Value> {
    let mut records = Vec::new();
    let mut after = 0;
    loop {
        let (s, b) = try_send(
            client,
            Method::GET,
            &format!("{base}/api/v1/audit?after={after}&limit=7"),
            Some(OPERATOR_TOKEN),
            None,
        )
        .await;
        assert_eq!(s, 200, "GET /audit: {b}");
        records.extend(b["records"].as_array().expect("records").clone());
        match b["next"].as_i64() {
            Some(next) => after = next,
            None => return records,
        }
    }
}

async fn verify(client: &reqwest::Client, base: &str) -> Value {
    let (s, b) = try_send(
        client,
        Method::GET,
        &format!("{base}/api/v1/audit/verify"),
        Some(OPERATOR_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, 200, "GET /audit/verify: {b}");
    b
}

/// The records of `action` on `target`.
fn records_of<'r>(records: &'r [Value], action: &str, target: &str) -> Vec<&'r Value> {
    records
        .iter()
        .filter(|r| r["action"] == action && r["target"] == target)
        .collect()
}

/// The one record of `action` on `target`, asserting there is exactly one.
fn one<'r>(records: &'r [Value], action: &str, target: &str) -> &'r Value {
    let found = records_of(records, action, target);
    assert_eq!(
        found.len(),
        1,
        "exactly one `{action}` on `{target}` expected, in {records:#?}"
    );
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_leaves_one_record_naming_its_actor() {
    let h = TestHost::start().await;
    let before = all_records(&h.client, &h.url).await.len();
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "acme", json!({"greeting": "greeting-from-config"}))
        .await;
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/ada/grants",
            Some(json!({"tool": "acme.timestamp"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = h
        .op(
            Method::DELETE,
            "/api/v1/agents/ada/grants/acme.timestamp",
            None,
        )
        .await;
    assert_eq!(s, 204, "{b}");
    // A refused bind: acme takes no `nope`.
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/team/connectors/acme",
            Some(json!({"config": {"nope": 1}})),
        )
        .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (422, Some("invalid_config"))
    );
    let token = h.agent_token("ada").await;
    let secret_argument = "argument-value-that-must-not-be-recorded";
    let (s, b) = h
        .as_token(
            &token,
            Method::POST,
            "/api/v1/agents/ada/tool-calls",
            Some(json!({"tool": "acme.echo", "arguments": {"message": secret_argument}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(b.to_string().contains(secret_argument), "the echo: {b}");
    let (s, _) = h
        .as_token(
            &token,
            Method::POST,
            "/api/v1/agents/ada/tool-calls",
            Some(json!({"tool": "acme.nothing", "arguments": {}})),
        )
        .await;
    assert_eq!(s, 404);
    let (s, b) = h
        .op(Method::DELETE, "/api/v1/units/team/connectors/acme", None)
        .await;
    assert_eq!(s, 204, "{b}");

    let records = all_records(&h.client, &h.url).await;
    let operator = json!({"kind": "operator", "id": null});
    for (action, target) in [
        ("unit.put", "unit:team"),
        ("agent.put", "agent:ada"),
        ("grant.put", "grant:agent:ada/acme.timestamp"),
        ("grant.delete", "grant:agent:ada/acme.timestamp"),
        ("token.mint", "agent:ada"),
        ("binding.delete", "binding:team/acme"),
    ] {
        let r = one(&records, action, target);
        assert_eq!(
            (&r["actor"], r["outcome"].as_str()),
            (&operator, Some("ok")),
            "{r}"
        );
    }
    // The bind and its refusal: two records on the binding, in that order.
    let binds = records_of(&records, "binding.put", "binding:team/acme");
    let outcomes: Vec<&str> = binds
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "invalid_config"]);
    assert!(binds.iter().all(|r| r["actor"] == operator));

    // The agent's tool call, by the agent, with what it cost and what it ran.
    let call = one(&records, "tool.call", "tool:acme.echo");
    assert_eq!(call["actor"], json!({"kind": "agent", "id": "ada"}));
    assert_eq!(call["outcome"], "ok");
    let details = &call["details"];
    assert_eq!(details["agent"], "ada");
    assert_eq!(details["connector"], "acme");
    assert!(
        details["digest"].as_str().unwrap().starts_with("sha256:"),
        "{details}"
    );
    assert!(details["durationMs"].is_u64(), "{details}");
    assert!(details["bytesIn"].as_u64().unwrap() > secret_argument.len() as u64);
    assert!(details["bytesOut"].as_u64().unwrap() > secret_argument.len() as u64);
    assert!(details.get("arguments").is_none(), "{details}");
    let unknown = one(&records, "tool.call", "tool:acme.nothing");
    assert_eq!(unknown["outcome"], "unknown_tool");

    // Exactly the records above were added: nothing twice, nothing else.
    assert_eq!(records.len() - before, 10, "{records:#?}");
    let seqs: Vec<i64> = records.iter().map(|r| r["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=records.len() as i64).collect::<Vec<_>>());

    // Nothing secret in any record: the tokens, the argument, the result, the config.
    let text = serde_json::to_string(&records).unwrap();
    for secret in [
        OPERATOR_TOKEN,
        token.as_str(),
        secret_argument,
        "greeting-from-config",
    ] {
        assert!(!text.contains(secret), "`{secret}` is in an audit record");
    }

    // Filters.
    let (s, b) = h
        .op(
            Method::GET,
            "/api/v1/audit?actorKind=agent&actorId=ada",
            None,
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let actions: BTreeSet<&str> = b["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, BTreeSet::from(["tool.call"]));
    let (s, b) = h
        .op(
            Method::GET,
            "/api/v1/audit?target=binding:team/acme&action=binding.put",
            None,
        )
        .await;
    assert_eq!(
        (s, b["records"].as_array().map(Vec::len)),
        (200, Some(2)),
        "{b}"
    );
    let (s, b) = h
        .op(
            Method::GET,
            "/api/v1/audit?since=2999-01-01T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(
        (s, b["records"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{b}"
    );
    let (s, b) = h
        .op(Method::GET, "/api/v1/audit?since=yesterday", None)
        .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (s, _) = h.as_token(&token, Method::GET, "/api/v1/audit", None).await;
    assert_eq!(s, 401, "an agent token does not read the audit log");

    assert_eq!(
        verify(&h.client, &h.url).await,
        json!({"ok": true, "checked": records.len(), "firstBroken": null})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_keep_their_arguments_only_when_configured() {
    let h = TestHost::start_with(|c| c.audit.record_arguments = true).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "acme", json!({})).await;
    let (s, b) = h
        .call_tool("ada", "acme.echo", json!({"message": "kept"}))
        .await;
    assert_eq!(s, 200, "{b}");
    let records = all_records(&h.client, &h.url).await;
    let call = one(&records, "tool.call", "tool:acme.echo");
    assert_eq!(call["actor"], json!({"kind": "operator", "id": null}));
    assert_eq!(call["details"]["arguments"], json!({"message": "kept"}));
    // The result is never kept, whatever the setting.
    assert!(call["details"].get("result").is_none(), "{call}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_record_edited_or_removed_in_the_database() {
    let h = TestHost::start().await;
    for unit in ["a", "b", "c", "d", "e"] {
        h.unit(unit, None).await;
    }
    let n = all_records(&h.client, &h.url).await.len() as i64;
    assert!(n >= 5);
    assert_eq!(verify(&h.client, &h.url).await["ok"], true);

    let db = rusqlite::Connection::open(h.data_dir.path().join("host.db")).unwrap();
    let edited = n - 2;
    let original: String = db
        .query_row(
            "SELECT details FROM audit_log WHERE seq = ?1",
            [edited],
            |r| r.get(0),
        )
        .unwrap();
    db.execute(
        "UPDATE audit_log SET details = '{\"edited\":true}' WHERE seq = ?1",
        [edited],
    )
    .unwrap();
    assert_eq!(
        verify(&h.client, &h.url).await,
        json!({"ok": false, "checked": n, "firstBroken": edited})
    );
    // Put back exactly, it holds again.
    db.execute(
        "UPDATE audit_log SET details = ?1 WHERE seq = ?2",
        rusqlite::params![original, edited],
    )
    .unwrap();
    assert_eq!(verify(&h.client, &h.url).await["ok"], true);

    // A removed record: the one after the gap is named.
    db.execute("DELETE FROM audit_log WHERE seq = ?1", [n - 1])
        .unwrap();
    assert_eq!(
        verify(&h.client, &h.url).await,
        json!({"ok": false, "checked": n - 1, "firstBroken": n})
    );

    // The newest record removed as well: no record follows the gap, but the chain's head
    // still names it.
    db.execute("DELETE FROM audit_log WHERE seq = ?1", [n])
        .unwrap();
    assert_eq!(
        verify(&h.client, &h.url).await,
        json!({"ok": false, "checked": n - 2, "firstBroken": n - 1})
    );

    // Two records swapped (renumbered so that seq still counts up).
    db.execute_batch(&format!(
        "DELETE FROM audit_log WHERE seq >= {};
         UPDATE audit_log SET seq = -1 WHERE seq = 1;
         UPDATE audit_log SET seq = 1 WHERE seq = 2;
         UPDATE audit_log SET seq = 2 WHERE seq = -1;",
        n - 1
    ))
    .unwrap();
    assert_eq!(verify(&h.client, &h.url).await["firstBroken"], 1);
}

async fn put(client: &reqwest::Client, url: String, body: Value) -> u16 {
    try_send(client, Method::PUT, &url, Some(OPERATOR_TOKEN), Some(body))
        .await
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_replicas_append_to_one_chain() {
    let Some(pg) = require_postgres() else { return };
    let url = pg.fresh_database("audit_chain").unwrap();
    let (servers, _dirs) = crate::replicas::replicas(2, &url, &[]).await;
    let (a, b) = (servers[0].url.clone(), servers[1].url.clone());
    let client = reqwest::Client::new();
    let before = all_records(&client, &a).await.len();
    assert_eq!(
        put(&client, format!("{a}/api/v1/units/team"), json!({})).await,
        201
    );
    assert_eq!(
        put(
            &client,
            format!("{a}/api/v1/agents/ada"),
            json!({"units": ["team"]})
        )
        .await,
        201
    );
    assert_eq!(
        put(
            &client,
            format!("{a}/api/v1/units/team/connectors/acme"),
            json!({"config": {}})
        )
        .await,
        201
    );
    // Binds on A while B runs tool calls, at the same time.
    let binds = (0..10).map(|i| {
        let (client, a) = (client.clone(), a.clone());
        async move {
            let unit = format!("{a}/api/v1/units/u{i}");
            assert_eq!(put(&client, unit.clone(), json!({})).await, 201);
            put(
                &client,
                format!("{unit}/connectors/acme"),
                json!({"config": {}}),
            )
            .await
        }
    });
    let calls = (0..30).map(|i| {
        let (client, b) = (client.clone(), b.clone());
        async move {
            try_send(
                &client,
                Method::POST,
                &format!("{b}/api/v1/agents/ada/tool-calls"),
                Some(OPERATOR_TOKEN),
                Some(json!({"tool": "acme.echo", "arguments": {"message": format!("m{i}")}})),
            )
            .await
            .0
        }
    });
    let (binds, calls) = futures::future::join(
        futures::future::join_all(binds),
        futures::future::join_all(calls),
    )
    .await;
    assert!(binds.iter().all(|s| *s == 201), "{binds:?}");
    assert!(calls.iter().all(|s| *s == 200), "{calls:?}");

    let records = all_records(&client, &b).await;
    assert_eq!(records.len() - before, 3 + 20 + 30);
    assert_eq!(
        records_of(&records, "tool.call", "tool:acme.echo").len(),
        30
    );
    for base in [&a, &b] {
        assert_eq!(
            verify(&client, base).await,
            json!({"ok": true, "checked": records.len(), "firstBroken": null})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_during_a_burst_has_a_record_of_every_acknowledged_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let base = server.url.clone();
    let writes = (0..200).map(|i| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let url = format!("{base}/api/v1/units/burst-{i}");
            (i, put(&client, url, json!({})).await)
        }
    });
    let burst = tokio::spawn(futures::future::join_all(writes));
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    server.kill9();
    let answered = burst.await.unwrap();
    let acknowledged: Vec<usize> = answered
        .iter()
        .filter(|(_, s)| *s == 201)
        .map(|(i, _)| *i)
        .collect();

    let server = ServerProcess::start(dir.path(), &[]).await;
    let records = all_records(&client, &server.url).await;
    for i in &acknowledged {
        let target = format!("unit:burst-{i}");
        assert_eq!(
            records_of(&records, "unit.put", &target).len(),
            1,
            "acknowledged unit burst-{i} has no record"
        );
    }
    // And every record is of a change that was made.
    for r in records.iter().filter(|r| r["action"] == "unit.put") {
        let unit = r["target"].as_str().unwrap().trim_start_matches("unit:");
        let (s, _) = try_send(
            &client,
            Method::GET,
            &format!("{}/api/v1/units/{unit}", server.url),
            Some(OPERATOR_TOKEN),
            None,
        )
        .await;
        assert_eq!(s, 200, "a record of unit {unit}, which is not stored");
    }
    assert_eq!(verify(&client, &server.url).await["ok"], true);
    eprintln!(
        "{} of 200 changes acknowledged before the kill; {} records",
        acknowledged.len(),
        records.len()
    );
}

/// `connector-host ARGS` against the host at `url`.
fn cli(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(integration_tests::harness::host_binary())
        .args(args)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error")
        .output()
        .expect("run connector-host")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_lists_filters_and_verifies() {
    let h = TestHost::start().await;
    h.unit("eng", None).await;
    h.agent("ada", &["eng"]).await;
    let url = h.url.clone();
    let (table, json, filtered, verified) = tokio::task::spawn_blocking(move || {
        (
            cli(&url, &["audit"]),
            cli(&url, &["audit", "--json", "--limit", "1000"]),
            cli(&url, &["audit", "--target", "agent:ada", "--json"]),
            cli(&url, &["audit", "verify"]),
        )
    })
    .await
    .unwrap();
    let stdout = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let text = stdout(&table);
    assert!(text.starts_with("SEQ"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("operator") && l.contains("unit.put") && l.contains("unit:eng")),
        "{text}"
    );
    let all: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let n = all["records"].as_array().unwrap().len();
    let filtered: Value = serde_json::from_slice(&filtered.stdout).expect("JSON");
    let targets: Vec<&str> = filtered["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["agent:ada"]);
    assert_eq!(verified.status.code(), Some(0));
    assert_eq!(
        stdout(&verified),
        format!("ok: the chain holds ({n} records checked)\n")
    );

    // Edited in the database: exit 1, naming the record.
    let db = rusqlite::Connection::open(h.data_dir.path().join("host.db")).unwrap();
    db.execute(
        "UPDATE audit_log SET details = '{\"edited\":1}' WHERE seq = 2",
        [],
    )
    .unwrap();
    let url = h.url.clone();
    let broken = tokio::task::spawn_blocking(move || cli(&url, &["audit", "verify"]))
        .await
        .unwrap();
    assert_eq!(broken.status.code(), Some(1));
    let err = String::from_utf8_lossy(&broken.stderr);
    assert!(err.contains("broken at record 2"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_is_the_actor_of_its_changes_and_its_sign_in_and_out() {
    let h = TestHost::start().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(h.at("/console/sign-in"))
        .form(&[("token", OPERATOR_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 303);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = http
        .get(h.at("/console/units"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    let csrf = page[at..].split('"').next().unwrap().to_string();
    let made = http
        .post(h.at("/console/units"))
        .header("cookie", &cookie)
        .form(&[("id", "from-console"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 303);
    let out = http
        .post(h.at("/console/sign-out"))
        .header("cookie", &cookie)
        .form(&[("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);

    let records = all_records(&h.client, &h.url).await;
    let change = one(&records, "unit.put", "unit:from-console");
    assert_eq!(change["actor"]["kind"], "console");
    let session = change["actor"]["id"].as_str().expect("the session's name");
    let target = format!("console:{session}");
    for action in ["console.sign_in", "console.sign_out"] {
        assert_eq!(one(&records, action, &target)["actor"], change["actor"]);
    }
    // The session's name is not its cookie, nor the CSRF token.
    let cookie_value = cookie.split('=').nth(1).unwrap();
    let text = serde_json::to_string(&records).unwrap();
    for secret in [cookie_value, csrf.as_str(), OPERATOR_TOKEN] {
        assert!(
            !text.contains(secret),
            "a session secret is in an audit record"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_delivery_is_recorded_without_its_body_and_a_forged_one_not_at_all() {
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(integration_tests::guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    let body = serde_json::to_vec(&json!({"messages": [{"route": "r1", "kind": "issue.opened",
        "payload": {"text": "body-text-that-must-not-be-recorded"}}]}))
    .unwrap();
    let now = integration_tests::harness::now_unix();
    let send = |id: &'static str, secret: &'static str| {
        let (client, url, body) = (h.client.clone(), h.url.clone(), body.clone());
        async move {
            integration_tests::harness::send_standard_webhook(
                &client, &url, "hostile", id, &body, secret, now,
            )
            .await
            .expect("an answer")
        }
    };
    let (s, b) = send("d-1", SECRET).await;
    assert_eq!((s, b["status"].as_str()), (202, Some("accepted")), "{b}");
    let (s, _) = send("d-2", "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").await;
    assert_eq!(s, 401);
    let (s, b) = send("d-1", SECRET).await;
    assert_eq!((s, b["status"].as_str()), (202, Some("duplicate")), "{b}");
    // A delivery whose inbox write fails is kept for a retry; the retry routes it.
    h.inject(Some(connector_store_testing::faults::Fault::InboxWrite));
    let (s, b) = send("f-1", SECRET).await;
    assert_eq!((s, b["status"].as_str()), (202, Some("queued")), "{b}");
    h.inject(None);
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/webhooks/hostile/deliveries/f-1/retry",
            None,
        )
        .await;
    assert_eq!((s, b["status"].as_str()), (200, Some("accepted")), "{b}");

    let records = all_records(&h.client, &h.url).await;
    let routed = one(&records, "delivery.routed", "delivery:hostile/d-1");
    assert_eq!(routed["actor"], json!({"kind": "webhook", "id": "hostile"}));
    assert_eq!(routed["details"]["verdict"], "accepted");
    assert_eq!(routed["details"]["routedTo"], json!(["u1"]));
    let duplicate = one(&records, "delivery.duplicate", "delivery:hostile/d-1");
    assert_eq!(duplicate["details"]["verdict"], "duplicate");
    one(&records, "delivery.queued", "delivery:hostile/f-1");
    // The retry that routed it is its one record of being routed, by the operator, written
    // with its messages.
    let retried = one(&records, "delivery.retry", "delivery:hostile/f-1");
    assert_eq!(retried["actor"], json!({"kind": "operator", "id": null}));
    assert_eq!(
        (&retried["outcome"], &retried["details"]["verdict"]),
        (&json!("ok"), &json!("accepted"))
    );
    assert_eq!(retried["details"]["routedTo"], json!(["u1"]));
    assert!(records_of(&records, "delivery.routed", "delivery:hostile/f-1").is_empty());
    assert_eq!(verify(&h.client, &h.url).await["ok"], true);
    assert!(records
        .iter()
        .all(|r| !r["target"].as_str().unwrap().contains("d-2")));
    let text = serde_json::to_string(&records).unwrap();
    for secret in ["body-text-that-must-not-be-recorded", SECRET] {
        assert!(!text.contains(secret), "`{secret}` is in an audit record");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_refused_before_its_component_is_named_is_recorded() {
    let h = TestHost::start().await;
    let (s, b) = integration_tests::harness::upload_component(
        &h.client,
        &h.url,
        b"not a component".to_vec(),
        "",
    )
    .await;
    assert!((400..500).contains(&s), "{s} {b}");
    let upload_code = b["error"]["code"]
        .as_str()
        .expect("an error code")
        .to_string();
    // A registry that is not there; then a reference with a user name and password
    // written into it (which does not parse).
    let mut codes = Vec::new();
    for reference in [
        "oci://127.0.0.1:9/team/weather:1.0",
        "oci://reader:registry-password-1@127.0.0.1:9/team/weather:1.0",
    ] {
        let (s, b) = h
            .op(
                Method::POST,
                "/api/v1/connectors",
                Some(json!({"source": reference})),
            )
            .await;
        assert!(s >= 400, "{s} {b}");
        assert!(!b.to_string().contains("registry-password-1"), "{b}");
        codes.push(
            b["error"]["code"]
                .as_str()
                .expect("an error code")
                .to_string(),
        );
    }

    let records = all_records(&h.client, &h.url).await;
    let refused = records_of(&records, "connector.install", "connector:?");
    assert_eq!(refused.len(), 3, "{records:#?}");
    assert_eq!(refused[0]["outcome"], json!(upload_code));
    assert_eq!(refused[0]["details"]["source"], "upload");
    assert_eq!(refused[0]["actor"]["kind"], "operator");
    assert_eq!(
        (&refused[1]["outcome"], &refused[1]["details"]["source"]),
        (
            &json!(codes[0]),
            &json!("oci://127.0.0.1:9/team/weather:1.0")
        )
    );
    assert_eq!(
        (&refused[2]["outcome"], &refused[2]["details"]["source"]),
        (
            &json!(codes[1]),
            &json!("registry (a reference that does not parse)")
        )
    );
    let text = serde_json::to_string(&records).unwrap();
    assert!(!text.contains("registry-password-1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_keeps_the_chain_verifiable_even_while_it_is_verified() {
    // Retention of zero days: every record but the newest is past it.
    let h = TestHost::start_with(|c| c.audit.retention_days = 0).await;
    for i in 0..20 {
        h.unit(&format!("u{i}"), None).await;
    }
    let host = h.host.clone();
    let pruning = tokio::spawn(async move {
        let mut pruned = 0;
        for i in 0..150 {
            host.put_unit(&format!("p{i}"), None, None)
                .await
                .expect("a unit");
            pruned += host.prune_audit().await.expect("a prune");
        }
        pruned
    });
    // Each check reads the anchor and then the records after it; a prune in between
    // removes records from under it, which is not a broken chain.
    let mut checks = 0;
    while !pruning.is_finished() {
        let verdict = h.host.verify_audit().await.expect("a verdict");
        assert!(
            verdict.ok,
            "a chain being pruned verified as broken: {verdict:?}"
        );
        checks += 1;
    }
    let pruned = pruning.await.expect("the pruning task");
    assert!(pruned >= 150, "{pruned} records pruned");
    assert!(checks > 10, "only {checks} checks ran beside the pruning");
    let records = all_records(&h.client, &h.url).await;
    assert!(records.len() <= 3, "{records:#?}");
    assert!(records[0]["seq"].as_i64().unwrap() > 150);
    let verdict = verify(&h.client, &h.url).await;
    assert_eq!(
        (verdict["ok"].as_bool(), verdict["checked"].as_u64()),
        (Some(true), Some(records.len() as u64))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_records_at_most_32_credential_uses_and_is_refused_the_rest() {
    let h = TestHost::start().await;
    h.install(integration_tests::guests::HOSTILE).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "hostile", json!({})).await;
    let token = h.agent_token("ada").await;
    let (s, b) = h
        .as_token(
            &token,
            Method::POST,
            "/api/v1/agents/ada/tool-calls",
            Some(json!({"tool": "hostile.token", "arguments": {
                "installation_id": 1, "more": (2..=40).collect::<Vec<u64>>()}})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let answers: Vec<String> =
        serde_json::from_value(b["result"]["answers"].clone()).expect("answers");
    assert_eq!(answers.len(), 40);
    assert!(
        answers[..32]
            .iter()
            .all(|a| a.contains("not named by this binding")),
        "{answers:#?}"
    );
    assert!(
        answers[32..]
            .iter()
            .all(|a| a.contains("more than 32 different credentials")),
        "{answers:#?}"
    );
    let records = all_records(&h.client, &h.url).await;
    let minted = records_of(&records, "installation_token.mint", "connector:hostile");
    assert_eq!(minted.len(), 32);
    assert!(minted.iter().all(|r| r["outcome"] == "forbidden"));
    let ids: BTreeSet<u64> = minted
        .iter()
        .map(|r| r["details"]["installationId"].as_u64().expect("an id"))
        .collect();
    assert_eq!(ids, (1..=32).collect());
}

/// A credential whose use the audit log cannot take is refused, and the server's log says
/// so once: one warning naming the connector and the cause, not one from the audit log and
/// another from the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_record_that_fails_is_logged_once() {
    let data = tempfile::tempdir().expect("temp dir");
    let log_path = data.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut server = ServerProcess::start_logging_to(data.path(), &[], log).await;
    let client = reqwest::Client::new();
    let op = |method: Method, path: &str, body: Value| {
        let (client, url) = (client.clone(), format!("{}{path}", server.url));
        async move { try_send(&client, method, &url, Some(OPERATOR_TOKEN), Some(body)).await }
    };
    let (s, b) = integration_tests::harness::upload_component(
        &client,
        &server.url,
        std::fs::read(integration_tests::guests::HOSTILE).expect("component"),
        "",
    )
    .await;
    assert!(s == 201 || s == 200, "{s} {b}");
    for (path, body) in [
        ("/api/v1/units/team", json!({})),
        ("/api/v1/agents/ada", json!({"units": ["team"]})),
        (
            "/api/v1/units/team/connectors/hostile",
            json!({"config": {}}),
        ),
    ] {
        let (s, b) = op(Method::PUT, path, body).await;
        assert!(s == 201 || s == 200, "PUT {path}: {s} {b}");
    }
    connector_store_testing::faults::inject_sqlite(
        &data.path().join("host.db"),
        Some(connector_store_testing::faults::Fault::CredentialRecord),
    )
    .expect("inject the fault");
    let (s, b) = op(
        Method::POST,
        "/api/v1/agents/ada/tool-calls",
        json!({"tool": "hostile.token", "arguments": {"installation_id": 1}}),
    )
    .await;
    assert_eq!(s, 502, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not record this use of a credential")),
        "{b}"
    );
    server.kill9();
    let log = std::fs::read_to_string(&log_path).expect("log");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("injected fault"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("a credential was refused") && warnings[0].contains("hostile"),
        "{}",
        warnings[0]
    );
}
