//! MCP for the agent runtimes people wire (CONTRACT.md §5): units' inboxes as resources
//! (`spring://units/{unitId}/messages`: listed, read with `?after=`, subscribed to in
//! sessions and through `subscriptions/listen`, over HTTP, the stdio bridge and `--local`,
//! and across PostgreSQL replicas), tool names every model API accepts
//! (`?toolNames=flat`, `--tool-names flat`), and one namespace's tools by bare name
//! (`/mcp/agents/{id}/namespaces/{ns}`).

use std::time::{Duration, Instant};

use integration_tests::guests;
use integration_tests::harness::{
    host_binary, now_unix, send_standard_webhook, ServerProcess, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

use crate::mcp::{Mcp, SseReader};
use crate::mcp_local::StdioServer;
use crate::mcp_stateless::Stateless;

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const UPDATED: &str = "notifications/resources/updated";
const U1: &str = "spring://units/u1/messages";
const U2: &str = "spring://units/u2/messages";

/// The model APIs' function-name rule.
fn model_api_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Units `u1` (hostile routes `r1`, acme) and `u2` (hostile routes `r2`); agents `ada` in
/// u1 and `bob` in u2.
async fn events_host() -> TestHost {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.unit("u2", None).await;
    h.agent("ada", &["u1"]).await;
    h.agent("bob", &["u2"]).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    h.bind("u2", "hostile", json!({"routes": ["r2"]})).await;
    h.bind("u1", "acme", json!({})).await;
    h
}

/// Sends one signed delivery with a message for `route`; returns when its `202` arrived.
async fn deliver(base: &str, id: &str, route: &str) -> Instant {
    let body = json!({"messages": [{"route": route, "kind": "issue.opened", "threadKey": id, "payload": {"delivery": id}}]});
    let (status, answer) = send_standard_webhook(
        &reqwest::Client::new(),
        base,
        "hostile",
        id,
        body.to_string().as_bytes(),
        SECRET,
        now_unix(),
    )
    .await
    .unwrap_or_else(|| panic!("delivery {id} got no answer"));
    let at = Instant::now();
    assert_eq!(status, 202, "{answer}");
    at
}

/// The next notification `method` on `stream` within `wait` (other events skipped).
async fn next_notification(stream: &mut SseReader, method: &str, wait: Duration) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let event = stream.next(left).await?;
        if event["method"] == method {
            return Some(event);
        }
    }
}

/// A read's page: (messages, next).
fn page(read: &Value) -> (Vec<Value>, String) {
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "application/json", "{read}");
    let text = contents["text"].as_str().expect("text contents");
    let page: Value = serde_json::from_str(text).expect("a JSON page");
    (
        page["messages"].as_array().expect("messages").clone(),
        page["next"].as_str().expect("next").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_hears_of_its_units_messages_and_reads_each_once() {
    let h = events_host().await;
    let (ada_token, bob_token) = (h.agent_token("ada").await, h.agent_token("bob").await);
    let ada = Mcp::open(&h.url, "ada", &ada_token, "2025-11-25").await;
    let bob = Mcp::open(&h.url, "bob", &bob_token, "2025-11-25").await;

    let list = ada.rpc("resources/list", json!({})).await;
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(uris, [U1], "{list}");
    assert_eq!(
        list["result"]["resources"][0]["mimeType"],
        "application/json"
    );
    // Another unit's inbox: neither readable nor subscribable.
    for method in ["resources/read", "resources/subscribe"] {
        let refused = ada.rpc(method, json!({"uri": U2})).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        assert_eq!(refused["error"]["data"]["uri"], U2, "{refused}");
    }
    let unknown = ada
        .rpc("resources/read", json!({"uri": "test://static-text"}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    assert!(ada
        .rpc("resources/subscribe", json!({"uri": U1}))
        .await
        .get("result")
        .is_some());
    assert!(bob
        .rpc("resources/subscribe", json!({"uri": U2}))
        .await
        .get("result")
        .is_some());
    let mut ada_stream = ada.stream().await;
    let mut bob_stream = bob.stream().await;

    let sent = deliver(&h.url, "ev-1", "r1").await;
    let note = next_notification(&mut ada_stream, UPDATED, Duration::from_secs(5))
        .await
        .expect("ada hears of u1's message");
    let latency = sent.elapsed();
    println!("webhook 202 -> resources/updated: {latency:?}");
    assert_eq!(note["params"]["uri"], U1, "{note}");
    assert!(
        next_notification(&mut bob_stream, UPDATED, Duration::from_millis(500))
            .await
            .is_none(),
        "bob is not in u1 and heard of its message"
    );

    // Read everything, then from `next`: nothing twice.
    let (messages, next) = page(&ada.rpc("resources/read", json!({"uri": U1})).await);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["deliveryId"], "ev-1");
    assert_eq!(messages[0]["unitId"], "u1");
    let again = ada
        .rpc(
            "resources/read",
            json!({"uri": format!("{U1}?after={next}")}),
        )
        .await;
    assert!(page(&again).0.is_empty(), "{again}");

    deliver(&h.url, "ev-2", "r1").await;
    next_notification(&mut ada_stream, UPDATED, Duration::from_secs(5))
        .await
        .expect("the second message is announced too");
    let (messages, next2) = page(
        &ada.rpc(
            "resources/read",
            json!({"uri": format!("{U1}?after={next}")}),
        )
        .await,
    );
    let ids: Vec<&Value> = messages.iter().map(|m| &m["deliveryId"]).collect();
    assert_eq!(ids, [&json!("ev-2")]);
    assert_ne!(next, next2);

    // Unsubscribed: no more.
    assert!(ada
        .rpc("resources/unsubscribe", json!({"uri": U1}))
        .await
        .get("result")
        .is_some());
    deliver(&h.url, "ev-3", "r1").await;
    assert!(
        next_notification(&mut ada_stream, UPDATED, Duration::from_millis(500))
            .await
            .is_none(),
        "a notification after unsubscribing"
    );
    // Bob's unit got its own message through its own subscription.
    deliver(&h.url, "ev-4", "r2").await;
    let note = next_notification(&mut bob_stream, UPDATED, Duration::from_secs(5))
        .await
        .expect("bob hears of u2's message");
    assert_eq!(note["params"]["uri"], U2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_listen_carries_resource_updates_at_2026_07_28() {
    let h = events_host().await;
    let token = h.agent_token("ada").await;
    let ada = Stateless::new(&h.url, "ada", &token);
    let discover = ada.rpc("server/discover", json!({})).await;
    assert_eq!(
        discover["result"]["capabilities"]["resources"],
        json!({"subscribe": true, "listChanged": true}),
        "{discover}"
    );
    let list = ada.rpc("resources/list", json!({})).await;
    assert_eq!(list["result"]["resources"][0]["uri"], U1, "{list}");
    assert_eq!(list["result"]["cacheScope"], "private");

    // Another unit's inbox refuses the whole listen.
    let refused = ada
        .rpc(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": [U1, U2]}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let (mut stream, id) = ada
        .listen(json!({"toolsListChanged": true, "resourceSubscriptions": [U1]}))
        .await;
    let ack = stream
        .next(Duration::from_secs(5))
        .await
        .expect("acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([U1]),
        "{ack}"
    );
    deliver(&h.url, "st-1", "r2").await; // bob's unit: nothing for ada
    let sent = deliver(&h.url, "st-2", "r1").await;
    let note = next_notification(&mut stream, UPDATED, Duration::from_secs(5))
        .await
        .expect("resources/updated on the listen stream");
    println!(
        "webhook 202 -> resources/updated (listen): {:?}",
        sent.elapsed()
    );
    assert_eq!(note["params"]["uri"], U1, "{note}");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    let read = ada.rpc("resources/read", json!({"uri": U1})).await;
    assert_eq!(read["result"]["resultType"], "complete", "{read}");
    let (messages, _) = page(&read);
    let ids: Vec<&Value> = messages.iter().map(|m| &m["deliveryId"]).collect();
    assert_eq!(ids, [&json!("st-2")]);
}

/// The agent's unit list changing is `notifications/resources/list_changed`, on a listen
/// stream that asked for it and on a session's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_a_unit_changes_the_resource_list() {
    let h = events_host().await;
    let token = h.agent_token("ada").await;
    let stateless = Stateless::new(&h.url, "ada", &token);
    let (mut stream, _) = stateless
        .listen(json!({"resourcesListChanged": true}))
        .await;
    let ack = stream.next(Duration::from_secs(5)).await.expect("ack");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true})
    );
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let mut session_stream = session.stream().await;
    h.agent("ada", &["u1", "u2"]).await;
    for (what, s) in [("listen", &mut stream), ("session", &mut session_stream)] {
        next_notification(
            s,
            "notifications/resources/list_changed",
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|| panic!("{what}: no resources/list_changed"));
    }
    let list = stateless.rpc("resources/list", json!({})).await;
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(uris, [U1, U2]);
    // Now u2's inbox is ada's to read.
    let read = stateless.rpc("resources/read", json!({"uri": U2})).await;
    assert!(read.get("result").is_some(), "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flat_names_reach_the_same_tools_and_collisions_are_left_out() {
    let h = crate::mcp::setup().await;
    let token = h.agent_token("ada").await;
    // Two image tools whose flat names collide.
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/ada/image-tools",
            Some(
                json!({"digest": format!("sha256:{}", "a".repeat(64)), "tools": [
                    {"name": "img.a__b", "description": "one", "inputSchema": {"type": "object"}},
                    {"name": "img.a.b", "description": "two", "inputSchema": {"type": "object"}},
                    {"name": "img.solo", "description": "three", "inputSchema": {"type": "object"}},
                ]}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let flat = format!("{}/mcp/agents/ada?toolNames=flat", h.url);

    for session in [true, false] {
        let (names, call, refused) = if session {
            let m = Mcp::open_at(&flat, &token, "2025-11-25").await;
            (
                m.tool_names().await,
                m.call("acme__echo", json!({"message": "flat"})).await,
                m.call("hostile__counter", json!({})).await,
            )
        } else {
            let m = Stateless::at(&flat, &token);
            let call = m
                .rpc(
                    "tools/call",
                    json!({"name": "acme__echo", "arguments": {"message": "flat"}}),
                )
                .await;
            let refused = m
                .rpc(
                    "tools/call",
                    json!({"name": "hostile__counter", "arguments": {}}),
                )
                .await;
            (m.tool_names().await, call, refused)
        };
        assert!(names.iter().all(|n| model_api_name(n)), "{names:?}");
        assert!(names.contains(&"acme__echo".to_string()), "{names:?}");
        assert!(names.contains(&"sv__tools__list".to_string()), "{names:?}");
        assert!(names.contains(&"img__solo".to_string()), "{names:?}");
        assert!(
            !names.iter().any(|n| n == "img__a__b"),
            "a colliding name is listed: {names:?}"
        );
        assert_eq!(
            call["result"]["structuredContent"]["message"], "flat",
            "{call}"
        );
        // Errors speak of the name the client used.
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("hostile__counter") && !message.contains("hostile.counter"),
            "{refused}"
        );
        let expected = if session { -32002 } else { -32602 };
        assert_eq!(refused["error"]["code"], expected, "{refused}");
        assert_eq!(refused["error"]["data"]["code"], "tool_not_granted");
    }
    // A colliding name reaches neither tool.
    let m = Mcp::open_at(&flat, &token, "2025-11-25").await;
    let ambiguous = m.call("img__a__b", json!({})).await;
    assert_eq!(ambiguous["error"]["code"], -32602, "{ambiguous}");

    // A session belongs to the endpoint that opened it.
    let r = h
        .client
        .post(format!("{}/mcp/agents/ada", h.url))
        .bearer_auth(&token)
        .header("mcp-session-id", m_session_id(&flat, &token).await)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 404);
    // An unknown style is refused.
    let r = h
        .client
        .post(format!("{}/mcp/agents/ada?toolNames=dots", h.url))
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
}

/// A fresh session id on `endpoint`.
async fn m_session_id(endpoint: &str, token: &str) -> String {
    let r = reqwest::Client::new()
        .post(endpoint)
        .bearer_auth(token)
        .json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "tests", "version": "0"}}}),
        )
        .send()
        .await
        .expect("initialize");
    r.headers()["mcp-session-id"]
        .to_str()
        .expect("session id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_endpoint_serves_bare_names_of_that_namespace_only() {
    let h = crate::mcp::setup().await;
    let token = h.agent_token("ada").await;
    let acme = format!("{}/mcp/agents/ada/namespaces/acme", h.url);
    let m = Mcp::open_at(&acme, &token, "2025-11-25").await;
    let names = m.tool_names().await;
    let canonical = Mcp::open(&h.url, "ada", &token, "2025-11-25")
        .await
        .tool_names()
        .await;
    let expected: Vec<String> = canonical
        .iter()
        .filter_map(|n| n.strip_prefix("acme.").map(str::to_string))
        .collect();
    assert_eq!(names, expected);
    assert!(names.contains(&"echo".to_string()));
    let call = m.call("echo", json!({"message": "bare"})).await;
    assert_eq!(
        call["result"]["structuredContent"]["message"], "bare",
        "{call}"
    );
    // Other namespaces are out of reach by any name.
    for name in ["sv.tools.list", "tools.list", "hostile.counter"] {
        let r = m.call(name, json!({})).await;
        assert!(r.get("error").is_some(), "{name}: {r}");
    }
    let stateless = Stateless::at(&acme, &token);
    let call = stateless
        .rpc(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "bare"}}),
        )
        .await;
    assert_eq!(call["result"]["structuredContent"]["message"], "bare");
    // A namespace the agent has no tool of: 404.
    let r = h
        .client
        .post(format!("{}/mcp/agents/ada/namespaces/hostile", h.url))
        .bearer_auth(&token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 404);
    // Bare and flat together.
    let both = Stateless::at(&format!("{acme}?toolNames=flat"), &token);
    assert_eq!(both.tool_names().await, expected);
    // Authentication first: another agent's token is 403 there too.
    let hal = h.agent_token("hal").await;
    let r = h
        .client
        .post(&acme)
        .bearer_auth(&hal)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403);
}

/// `serve` with the hostile webhook secret, `hostile` bound to `team` (route `r1`) beside
/// acme, agent `ada` in team; ada's token.
async fn events_server(dir: &std::path::Path) -> (ServerProcess, String) {
    let server =
        ServerProcess::start(dir, &[("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET)]).await;
    let token = crate::mcp::prepare(&server).await;
    let r = reqwest::Client::new()
        .put(format!(
            "{}/api/v1/units/team/connectors/hostile",
            server.url
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"config": {"routes": ["r1"]}}))
        .send()
        .await
        .expect("bind");
    assert!(r.status().is_success(), "{}", r.status());
    (server, token)
}

/// Both stdio modes with `--tool-names flat`: flat names, and a webhook routed to the
/// agent's unit reaches the stdio client (session subscription and `subscriptions/listen`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stdio_modes_take_flat_names_and_carry_resource_updates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, token) = events_server(dir.path()).await;
    let team = "spring://units/team/messages";
    for (mode, local) in [("bridge", false), ("local", true)] {
        let mut command = tokio::process::Command::new(host_binary());
        command.args(["mcp", "--agent", "ada", "--tool-names", "flat"]);
        if local {
            command.arg("--data-dir").arg(dir.path());
        } else {
            command.args(["--url", &server.url, "--token", &token]);
        }
        let mut stdio = StdioServer::spawn(command);
        stdio.initialize("2025-11-25").await;
        let names = stdio.tool_names().await;
        assert!(
            names.contains(&"acme__echo".to_string()) && names.iter().all(|n| model_api_name(n)),
            "{mode}: {names:?}"
        );
        let call = stdio
            .rpc(
                "tools/call",
                json!({"name": "acme__echo", "arguments": {"message": mode}}),
            )
            .await;
        assert_eq!(
            call["result"]["structuredContent"]["message"], mode,
            "{call}"
        );
        let sub = stdio.rpc("resources/subscribe", json!({"uri": team})).await;
        assert!(sub.get("result").is_some(), "{mode}: {sub}");
        // The bridge opens its GET stream after `initialize`: let it connect.
        tokio::time::sleep(Duration::from_millis(300)).await;
        deliver(&server.url, &format!("{mode}-1"), "r1").await;
        let note = wait_for_line(&mut stdio, UPDATED, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{mode}: no resources/updated"));
        assert_eq!(note["params"]["uri"], team, "{mode}: {note}");

        // 2026-07-28 over the same process: listen with the inbox.
        let listen = json!({"jsonrpc": "2.0", "id": 900, "method": "subscriptions/listen", "params": {
        "notifications": {"resourceSubscriptions": [team]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }}});
        stdio.send(&listen).await;
        wait_for_line(
            &mut stdio,
            "notifications/subscriptions/acknowledged",
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|| panic!("{mode}: listen not acknowledged"));
        deliver(&server.url, &format!("{mode}-2"), "r1").await;
        let mut heard_on_listen = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !heard_on_listen && Instant::now() < deadline {
            let Some(note) = wait_for_line(&mut stdio, UPDATED, Duration::from_secs(5)).await
            else {
                break;
            };
            heard_on_listen =
                note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 900;
        }
        assert!(heard_on_listen, "{mode}: nothing on the listen stream");
        let read = stdio.rpc("resources/read", json!({"uri": team})).await;
        let (messages, _) = page(&read);
        // The bridge leg's two messages, then the local leg's two more.
        let expected = if local { 4 } else { 2 };
        assert_eq!(messages.len(), expected, "{mode}: {read}");
        stdio
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 900}}))
            .await;
        stdio.finish().await;
    }
}

/// The next stdout line whose `method` is `method`, within `wait`.
async fn wait_for_line(stdio: &mut StdioServer, method: &str, wait: Duration) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let line = stdio.line(left).await?;
        if line["method"] == method {
            return Some(line);
        }
    }
}

/// Two replicas on one PostgreSQL database: a message routed by one reaches a client
/// subscribed on the other within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_sent_to_one_replica_reaches_a_client_of_another_within_a_second() {
    let Some(pg) = integration_tests::postgres::require_postgres() else {
        return;
    };
    // A latency bound (the store's 250 ms poll and the round trips): measured alone, so
    // no flood or build of another test stretches it.
    let _alone = integration_tests::harness::machine_load().await;
    let url = pg.fresh_database("mcp_events").expect("database");
    let (servers, _dirs) = crate::replicas::replicas(2, &url, &[]).await;
    let client = reqwest::Client::new();
    crate::replicas::setup_units(&client, &servers[0].url).await;
    let r = client
        .put(format!("{}/api/v1/agents/ada", servers[0].url))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"units": ["u1"]}))
        .send()
        .await
        .expect("agent");
    assert!(r.status().is_success());
    let token: Value = client
        .post(format!("{}/api/v1/agents/ada/tokens", servers[0].url))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({}))
        .send()
        .await
        .expect("token")
        .json()
        .await
        .expect("token JSON");
    let token = token["token"].as_str().expect("token").to_string();
    let on_b = Stateless::new(&servers[1].url, "ada", &token);
    let (mut stream, _) = on_b.listen(json!({"resourceSubscriptions": [U1]})).await;
    stream.next(Duration::from_secs(5)).await.expect("ack");
    let mut worst = Duration::ZERO;
    for i in 0..5 {
        let sent = deliver(&servers[0].url, &format!("pg-{i}"), "r").await;
        next_notification(&mut stream, UPDATED, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("delivery {i}: nothing on the other replica"));
        worst = worst.max(sent.elapsed());
    }
    println!("across replicas, worst of 5: {worst:?}");
    assert!(worst < Duration::from_secs(1), "{worst:?}");
}

/// The frameworks' venv interpreter (`target/frameworks-venv`, which `.ci/run` fills from
/// `tests/mcp/frameworks-requirements.txt`); `Err` says how to make it.
fn python_with_frameworks() -> Result<std::path::PathBuf, String> {
    let venv = crate::mcp::workspace_root().join("target/frameworks-venv");
    let python = venv.join("bin/python");
    let ready = std::process::Command::new(&python)
        .args([
            "-c",
            "import agents.mcp, langchain_mcp_adapters.client, pydantic_ai.mcp",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ready {
        return Ok(python);
    }
    Err(format!(
        "the agent frameworks are not installed in {0}; run .ci/run, or:\n  python3 -m venv {0}\n  \
         {0}/bin/pip install -r tests/mcp/frameworks-requirements.txt",
        venv.display()
    ))
}

/// openai-agents, langchain-mcp-adapters and pydantic-ai wired to `?toolNames=flat` as the
/// README shows (`tests/mcp/frameworks_check.py`): every name each would hand a model
/// matches `^[a-zA-Z0-9_-]{1,64}$`, and `acme__echo` runs through each one's tool wrapper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_frameworks_hand_models_only_names_their_apis_accept() {
    let found = tokio::task::spawn_blocking(python_with_frameworks)
        .await
        .expect("join");
    let Some(python) = integration_tests::harness::required("the agent frameworks", found) else {
        return;
    };
    let h = crate::mcp::setup().await;
    let token = h.agent_token("ada").await;
    let run = tokio::process::Command::new(python)
        .arg(crate::mcp::workspace_root().join("tests/mcp/frameworks_check.py"))
        .args(["--url", &h.url, "--agent", "ada", "--token", &token])
        .env("PYTHONUNBUFFERED", "1")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("frameworks_check.py finished within 3 minutes")
        .expect("run frameworks_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all frameworks wired"),
        "frameworks_check.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// Runs an events check script (`tests/mcp/events_check.*`) with `command` against agent
/// `ada` of [`events_host`] (unit u1, route r1; bob's unit u2 is the foreign one).
async fn run_events_check(mut command: tokio::process::Command, script: &str) {
    let h = events_host().await;
    let token = h.agent_token("ada").await;
    let run = command
        .arg(crate::mcp::workspace_root().join("tests/mcp").join(script))
        .args(["--url", &h.url, "--agent", "ada", "--token", &token])
        .args([
            "--connector",
            "hostile",
            "--secret",
            SECRET,
            "--route",
            "r1",
        ])
        .args(["--unit", "u1", "--foreign-unit", "u2"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within 3 minutes"))
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{script} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// The official Python SDK (`mcp` 2.x): a webhook reaches a subscribed client in a
/// session and at 2026-07-28, and `?after=` reads each message once across reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_hears_of_webhooks_and_reads_each_once() {
    let found = tokio::task::spawn_blocking(crate::mcp::python_with_mcp)
        .await
        .expect("join");
    let Some(python) = integration_tests::harness::required("the MCP Python SDK", found) else {
        return;
    };
    let mut command = tokio::process::Command::new(python);
    command.env("PYTHONUNBUFFERED", "1");
    run_events_check(command, "events_check.py").await;
}

/// The official TypeScript SDK (`@modelcontextprotocol/client`): the same, with
/// `subscribeResource` in a session and `listen` at 2026-07-28.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_hears_of_webhooks_and_reads_each_once() {
    let Some((node, modules)) = integration_tests::harness::required(
        "Node and the MCP TypeScript SDK",
        crate::mcp_stateless::node_with_sdk(),
    ) else {
        return;
    };
    let mut command = tokio::process::Command::new(node);
    command.env("NODE_PATH", modules);
    run_events_check(command, "events_check.mjs").await;
}
