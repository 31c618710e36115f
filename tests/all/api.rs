//! The operator API over real HTTP: every route and error code of CONTRACT.md §3
//! (connectors, units and agents, bindings, effective tools, tool calls, health).

use connector_store::StateStore as _;
use std::time::Duration;

use integration_tests::guests;
use integration_tests::harness::{
    error_code as code, tool_names, upload_component, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

fn find<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {tools}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics() {
    let h = TestHost::start().await;
    let r = h.client.get(h.at("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let m = h.metrics().await;
    assert!(m.contains("connector_host_tool_calls_total"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_and_agent_scoping() {
    let h = TestHost::start().await;
    h.unit("team", None).await;
    h.agent("alice", &["team"]).await;
    h.agent("bob", &["team"]).await;
    let alice = h.agent_token("alice").await;
    let bob = h.agent_token("bob").await;

    let (s, b) = integration_tests::harness::send(
        &h.client,
        Method::GET,
        &h.at("/api/v1/connectors"),
        None,
        None,
    )
    .await;
    assert_eq!((s, code(&b)), (401, "unauthenticated"));
    let (s, b) = h
        .as_token("wrong", Method::GET, "/api/v1/connectors", None)
        .await;
    assert_eq!((s, code(&b)), (401, "unauthenticated"));
    // An agent token is not an operator token.
    let (s, _) = h
        .as_token(&alice, Method::GET, "/api/v1/connectors", None)
        .await;
    assert_eq!(s, 401);
    // Agent routes: own token yes, another agent's no.
    let (s, b) = h
        .as_token(&alice, Method::GET, "/api/v1/agents/alice", None)
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = h
        .as_token(&bob, Method::GET, "/api/v1/agents/alice", None)
        .await;
    assert_eq!((s, code(&b)), (403, "forbidden"));
    let (s, b) = h
        .as_token(
            &bob,
            Method::POST,
            "/api/v1/agents/alice/tool-calls",
            Some(json!({"tool": "sv.tools.list", "arguments": {}})),
        )
        .await;
    assert_eq!((s, code(&b)), (403, "forbidden"));
    let (s, _) = h
        .as_token(&alice, Method::GET, "/api/v1/agents/alice/tools", None)
        .await;
    assert_eq!(s, 200);
    // Tokens of an unknown agent cannot be issued.
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/nobody/tokens",
            Some(json!({})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/alice/tokens",
            Some(json!({"ttlSeconds": 0})),
        )
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connectors_install_get_list_delete() {
    let h = TestHost::start().await;
    let (s, b) = h.op(Method::GET, "/api/v1/connectors", None).await;
    assert_eq!(s, 200);
    let slugs: Vec<&str> = b["connectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["slug"].as_str().unwrap())
        .collect();
    assert!(slugs.contains(&"acme"), "{b}");

    let (s, acme) = h.op(Method::GET, "/api/v1/connectors/acme", None).await;
    assert_eq!(s, 200);
    assert_eq!(acme["toolNamespace"], "acme");
    assert!(acme["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(tool_names(&acme["tools"]), ["acme.echo", "acme.timestamp"]);
    assert_eq!(acme["tools"][0]["annotations"]["readOnlyHint"], true);
    assert!(acme["configSchema"].is_object());
    assert_eq!(acme["webhook"], Value::Null);

    let (s, b) = h.op(Method::GET, "/api/v1/connectors/nope", None).await;
    assert_eq!((s, code(&b)), (404, "not_found"));

    // Install: new slug 201, same bytes again 200, and the list stays sorted.
    let hostile = h.install(guests::HOSTILE).await;
    assert_eq!(hostile["slug"], "hostile");
    let bytes = std::fs::read(guests::HOSTILE).unwrap();
    let again = h
        .client
        .post(h.at("/api/v1/connectors"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    let (_, b) = h.op(Method::GET, "/api/v1/connectors", None).await;
    let slugs: Vec<String> = b["connectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["slug"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = slugs.clone();
    sorted.sort();
    assert_eq!(slugs, sorted);

    // Invalid components: 422 naming the rule; wrong content type 415.
    let bad = h
        .client
        .post(h.at("/api/v1/connectors"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/wasm")
        .body(std::fs::read(guests::BAD_MANIFEST_OUTSIDE_NAMESPACE).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    let bad: Value = bad.json().await.unwrap();
    assert_eq!(code(&bad), "invalid_component");
    assert_eq!(bad["error"]["details"]["rule"], "tool_outside_namespace");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("other.echo"),
        "{bad}"
    );
    let junk = h
        .client
        .post(h.at("/api/v1/connectors"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/wasm")
        .body("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(junk.status(), 422);
    let wrong_type = h
        .client
        .post(h.at("/api/v1/connectors"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), 415);

    // Delete: refused while bound, forced unbinds everywhere.
    h.unit("u", None).await;
    h.bind("u", "hostile", json!({})).await;
    let (s, b) = h
        .op(Method::DELETE, "/api/v1/connectors/hostile", None)
        .await;
    assert_eq!((s, code(&b)), (409, "connector_in_use"));
    let (s, _) = h
        .op(
            Method::DELETE,
            "/api/v1/connectors/hostile?force=true",
            None,
        )
        .await;
    assert_eq!(s, 204);
    let (_, u) = h.op(Method::GET, "/api/v1/units/u", None).await;
    assert_eq!(u["bindings"], json!([]));
    assert!(!tool_names(&u["effectiveTools"])
        .iter()
        .any(|n| n.starts_with("hostile.")));
    let (s, _) = h
        .op(Method::DELETE, "/api/v1/connectors/hostile", None)
        .await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_agents_and_their_errors() {
    let h = TestHost::start().await;
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org",
            Some(json!({"parent": null, "displayName": "Org"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["displayName"], "Org");
    let (s, _) = h
        .op(
            Method::PUT,
            "/api/v1/units/org",
            Some(json!({"displayName": "The Org"})),
        )
        .await;
    assert_eq!(s, 200);
    h.unit("team", Some("org")).await;
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/x",
            Some(json!({"parent": "missing"})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org",
            Some(json!({"parent": "team"})),
        )
        .await;
    assert_eq!((s, code(&b)), (422, "cycle"));
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org",
            Some(json!({"parent": "org"})),
        )
        .await;
    assert_eq!((s, code(&b)), (422, "cycle"));
    let (s, b) = h
        .op(Method::PUT, "/api/v1/units/bad%20id", Some(json!({})))
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));
    let (s, b) = h
        .op(Method::PUT, "/api/v1/units/-leading-dash", Some(json!({})))
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));
    let (s, b) = h.op(Method::DELETE, "/api/v1/units/org", None).await;
    assert_eq!((s, code(&b)), (409, "has_children"));

    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/a1",
            Some(json!({"units": ["team", "org"], "displayName": "A"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["units"], json!(["team", "org"]));
    let (s, _) = h
        .op(
            Method::PUT,
            "/api/v1/agents/a1",
            Some(json!({"units": ["team"]})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/a2",
            Some(json!({"units": ["ghost"]})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (s, b) = h
        .op(Method::PUT, "/api/v1/agents/a2", Some(json!({"units": []})))
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));
    let (s, b) = h.op(Method::GET, "/api/v1/agents/a1", None).await;
    assert_eq!(s, 200);
    assert_eq!(b["id"], "a1");
    let (s, _) = h.op(Method::DELETE, "/api/v1/agents/a1", None).await;
    assert_eq!(s, 204);
    let (s, _) = h.op(Method::GET, "/api/v1/agents/a1", None).await;
    assert_eq!(s, 404);

    let (s, _) = h.op(Method::DELETE, "/api/v1/units/team", None).await;
    assert_eq!(s, 204);
    let (s, _) = h.op(Method::DELETE, "/api/v1/units/org", None).await;
    assert_eq!(s, 204);
    let (s, _) = h.op(Method::GET, "/api/v1/units/org", None).await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests() {
    let h = TestHost::start().await;
    h.unit("u", None).await;
    let raw = |method: Method, path: &str, ct: &str, body: Vec<u8>| {
        h.client
            .request(method, h.at(path))
            .bearer_auth(OPERATOR_TOKEN)
            .header("content-type", ct.to_string())
            .body(body)
            .send()
    };
    let r = raw(
        Method::PUT,
        "/api/v1/units/v",
        "application/json",
        b"{not json".to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(code(&r.json().await.unwrap()), "invalid_request");
    let r = raw(Method::PUT, "/api/v1/units/v", "text/plain", b"{}".to_vec())
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let r = raw(
        Method::PUT,
        "/api/v1/units/v",
        "application/json",
        br#"{"parent": null, "colour": "red"}"#.to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{body}"
    );
    // A 10 MB config.
    let big = format!(
        r#"{{"config": {{"greeting": "{}"}}}}"#,
        "x".repeat(10 * 1024 * 1024)
    );
    let r = raw(
        Method::PUT,
        "/api/v1/units/u/connectors/acme",
        "application/json",
        big.into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(code(&r.json().await.unwrap()), "payload_too_large");
    let (s, b) = h.op(Method::GET, "/api/v1/nothing-here", None).await;
    assert_eq!((s, code(&b)), (404, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_unbind_and_the_effective_tool_set() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("org", None).await;
    h.unit("team", Some("org")).await;
    h.unit("other", None).await;
    h.agent("a1", &["team", "other"]).await;

    // Bind acme at the top: 201, then a config change: 200.
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org/connectors/acme",
            Some(json!({"config": {}})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["unitId"], "org");
    assert_eq!(b["connector"], "acme");
    assert_eq!(b["grants"][0]["tool"], "acme.*");
    assert_eq!(b["grants"][0]["provenance"], "connector:acme");
    assert_eq!(b["grants"][0]["namespace"], "acme");
    assert!(time::OffsetDateTime::parse(
        b["boundAt"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339
    )
    .is_ok());
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org/connectors/acme",
            Some(json!({"config": {"greeting": "hi"}})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(b["config"], json!({"greeting": "hi"}));
    assert_eq!(
        b["grants"].as_array().unwrap().len(),
        1,
        "re-binding must not duplicate the grant"
    );

    // Errors.
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/ghost/connectors/acme",
            Some(json!({"config": {}})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org/connectors/ghost",
            Some(json!({"config": {}})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/org/connectors/acme",
            Some(json!({"config": {"greeting": 5}})),
        )
        .await;
    assert_eq!((s, code(&b)), (422, "invalid_config"));
    assert_eq!(
        b["error"]["details"]["violations"][0]["pointer"], "/greeting",
        "{b}"
    );

    // A second connector on a lower unit; several connectors per unit are fine.
    h.bind("team", "hostile", json!({})).await;
    h.bind("team", "acme", json!({})).await;
    let (_, b) = h
        .op(Method::GET, "/api/v1/units/team/connectors", None)
        .await;
    assert_eq!(b["bindings"].as_array().unwrap().len(), 2);

    // Unit view: own bindings null, ancestors named.
    let (_, t) = h.op(Method::GET, "/api/v1/units/team/tools", None).await;
    let tools = &t["tools"];
    assert_eq!(find(tools, "acme.echo")["inheritedFromUnit"], Value::Null);
    assert_eq!(
        find(tools, "hostile.spin")["provenance"],
        "connector:hostile"
    );
    assert_eq!(find(tools, "sv.tools.list")["provenance"], "platform");
    let (_, t) = h.op(Method::GET, "/api/v1/units/org/tools", None).await;
    assert!(
        !tool_names(&t["tools"])
            .iter()
            .any(|n| n.starts_with("hostile.")),
        "{t}"
    );

    // Agent view: inherited from the closest unit of the primary chain; sorted.
    let (_, t) = h.op(Method::GET, "/api/v1/agents/a1/tools", None).await;
    let tools = &t["tools"];
    let names = tool_names(tools);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(find(tools, "acme.echo")["inheritedFromUnit"], "team");
    assert_eq!(find(tools, "hostile.counter")["inheritedFromUnit"], "team");
    assert_eq!(find(tools, "acme.echo")["namespace"], "acme");
    assert!(find(tools, "acme.echo")["inputSchema"].is_object());
    assert_eq!(names.iter().filter(|n| *n == "acme.echo").count(), 1);

    // Unbind exactly one binding: hostile tools go, acme (still bound on team and org) stays.
    let (s, _) = h
        .op(
            Method::DELETE,
            "/api/v1/units/team/connectors/hostile",
            None,
        )
        .await;
    assert_eq!(s, 204);
    let (s, b) = h
        .op(
            Method::DELETE,
            "/api/v1/units/team/connectors/hostile",
            None,
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    let (_, t) = h.op(Method::GET, "/api/v1/agents/a1/tools", None).await;
    assert!(!tool_names(&t["tools"])
        .iter()
        .any(|n| n.starts_with("hostile.")));
    h.op(Method::DELETE, "/api/v1/units/team/connectors/acme", None)
        .await;
    let (_, t) = h.op(Method::GET, "/api/v1/agents/a1/tools", None).await;
    assert_eq!(find(&t["tools"], "acme.echo")["inheritedFromUnit"], "org");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precedence_explicit_connector_platform_image() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    h.bind("u", "acme", json!({})).await;

    // Explicit grant of one tool of an unbound connector, and of a namespace.
    let (s, g) = h
        .op(
            Method::POST,
            "/api/v1/agents/a/grants",
            Some(json!({"tool": "hostile.counter"})),
        )
        .await;
    assert_eq!(s, 201, "{g}");
    assert_eq!(g["provenance"], "explicit");
    let (s, _) = h
        .op(
            Method::POST,
            "/api/v1/agents/a/grants",
            Some(json!({"tool": "acme.echo"})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/a/grants",
            Some(json!({"tool": "Not A Tool"})),
        )
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/ghost/grants",
            Some(json!({"tool": "acme.echo"})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));

    // Image tools: one new, one colliding with a connector tool.
    let (s, b) = h
        .op(Method::PUT, "/api/v1/agents/a/image-tools", Some(json!({"digest": "sha256:abc", "tools": [
            {"name": "img.build", "description": "Build", "inputSchema": {"type": "object"}},
            {"name": "acme.timestamp", "description": "shadow", "inputSchema": {"type": "object"}}
        ]})))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/a/image-tools",
            Some(json!({"digest": "sha256:abc", "tools": [{"name": "Bad Name"}]})),
        )
        .await;
    assert_eq!((s, code(&b)), (400, "invalid_request"));

    let (_, t) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    let tools = &t["tools"];
    assert_eq!(find(tools, "hostile.counter")["provenance"], "explicit");
    assert_eq!(
        find(tools, "hostile.counter")["inheritedFromUnit"],
        Value::Null
    );
    assert!(
        !tool_names(tools).contains(&"hostile.spin".to_string()),
        "only the granted tool"
    );
    assert_eq!(find(tools, "acme.echo")["provenance"], "explicit");
    assert_eq!(
        find(tools, "acme.timestamp")["provenance"],
        "connector:acme"
    );
    assert_eq!(
        find(tools, "acme.timestamp")["description"],
        find(tools, "acme.timestamp")["description"]
    );
    assert_ne!(find(tools, "acme.timestamp")["description"], "shadow");
    assert_eq!(find(tools, "img.build")["provenance"], "image:sha256:abc");
    assert_eq!(find(tools, "sv.tools.describe")["provenance"], "platform");
    let names = tool_names(tools);
    assert_eq!(
        names.len(),
        names.iter().collect::<std::collections::HashSet<_>>().len(),
        "each tool once"
    );

    // Explicit grants are not inherited by the unit, and can be revoked.
    let (_, ut) = h.op(Method::GET, "/api/v1/units/u/tools", None).await;
    assert!(!tool_names(&ut["tools"]).contains(&"hostile.counter".to_string()));
    let (s, _) = h
        .op(
            Method::DELETE,
            "/api/v1/agents/a/grants/hostile.counter",
            None,
        )
        .await;
    assert_eq!(s, 204);
    let (s, b) = h
        .op(
            Method::DELETE,
            "/api/v1/agents/a/grants/hostile.counter",
            None,
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
    // Namespace grants on a unit.
    let (s, _) = h
        .op(
            Method::POST,
            "/api/v1/units/u/grants",
            Some(json!({"namespace": "hostile"})),
        )
        .await;
    assert_eq!(s, 201);
    let (_, ut) = h.op(Method::GET, "/api/v1/units/u/tools", None).await;
    assert_eq!(find(&ut["tools"], "hostile.spin")["provenance"], "explicit");
    let (s, _) = h
        .op(Method::DELETE, "/api/v1/units/u/grants/hostile", None)
        .await;
    assert_eq!(s, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_and_their_errors() {
    let h = TestHost::start_with(|c| c.limits.call_timeout = Duration::from_millis(500)).await;
    h.install(guests::HOSTILE).await;
    h.unit("u", None).await;
    h.unit("child", Some("u")).await;
    h.agent("a", &["child"]).await;
    h.bind("u", "acme", json!({"greeting": "hey"})).await;
    h.bind("child", "hostile", json!({"routes": ["r1"]})).await;
    let token = h.agent_token("a").await;
    let call = |tool: &str, args: Value| {
        let token = token.clone();
        let tool = tool.to_string();
        let h = &h;
        async move {
            h.as_token(
                &token,
                Method::POST,
                "/api/v1/agents/a/tool-calls",
                Some(json!({"tool": tool, "arguments": args})),
            )
            .await
        }
    };

    let (s, b) = call("acme.echo", json!({"message": "hello"})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"], json!({"message": "hello"}));
    let (s, b) = call("sv.tools.list", json!({})).await;
    assert_eq!(s, 200);
    assert!(tool_names(&b["result"]["tools"]).contains(&"acme.echo".to_string()));
    let (s, b) = call("sv.tools.describe", json!({"name": "acme.echo"})).await;
    assert_eq!(
        (s, b["result"]["provenance"].as_str()),
        (200, Some("connector:acme"))
    );

    // Schema violations are caught before any guest code runs.
    let (s, b) = call("acme.echo", json!({"message": 5})).await;
    assert_eq!((s, code(&b)), (422, "invalid_arguments"));
    assert_eq!(
        b["error"]["details"]["violations"][0]["pointer"],
        "/message"
    );
    let (s, b) = call("acme.echo", json!({})).await;
    assert_eq!((s, code(&b)), (422, "invalid_arguments"));

    // Not granted, unknown.
    h.unit("elsewhere", None).await;
    let (s, b) = call("acme.timestamp", json!({})).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = call("nothing.here", json!({})).await;
    assert_eq!((s, code(&b)), (404, "unknown_tool"));
    h.op(Method::DELETE, "/api/v1/units/u/connectors/acme", None)
        .await;
    let (s, b) = call("acme.echo", json!({"message": "x"})).await;
    assert_eq!((s, code(&b)), (403, "tool_not_granted"));

    // Guest faults map to the contract's codes.
    let (s, b) = call("hostile.spin", json!({})).await;
    assert_eq!((s, code(&b)), (504, "connector_timeout"));
    let (s, b) = call("hostile.panic", json!({"message": "kaboom"})).await;
    assert_eq!((s, code(&b)), (502, "connector_trapped"));
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deliberate panic: kaboom"),
        "{b}"
    );
    let (s, b) = call("hostile.fetch", json!({"url": "http://example.com/"})).await;
    assert_eq!((s, code(&b)), (502, "tool_failed"));
    // The binding that granted the tool is the one whose routes the guest sees: the
    // token guard refuses an installation the binding does not name.
    let (s, b) = call("hostile.token", json!({"installation_id": 99})).await;
    assert_eq!((s, code(&b)), (502, "tool_failed"));
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not named by this binding"),
        "{b}"
    );
    // The host still serves after all of that.
    let (s, _) = call("hostile.counter", json!({})).await;
    assert_eq!(s, 200);
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/ghost/tool-calls",
            Some(json!({"tool": "acme.echo", "arguments": {}})),
        )
        .await;
    assert_eq!((s, code(&b)), (404, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_binding_and_grant_leaves_neither() {
    use connector_store_testing::faults::Fault;
    let h = TestHost::start().await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    h.inject(Some(Fault::AfterBindingWrite));
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/u/connectors/acme",
            Some(json!({"config": {}})),
        )
        .await;
    assert!(s >= 500, "{s} {b}");
    let (_, b) = h.op(Method::GET, "/api/v1/units/u/connectors", None).await;
    assert_eq!(b["bindings"], json!([]));
    let (_, t) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    assert!(!tool_names(&t["tools"])
        .iter()
        .any(|n| n.starts_with("acme.")));
    let snapshot = h.database().load().await.unwrap();
    assert!(
        snapshot.bindings.is_empty() && snapshot.grants.is_empty(),
        "{snapshot:?}"
    );
    // And the same for the unbind side.
    h.inject(None);
    h.bind("u", "acme", json!({})).await;
    h.inject(Some(Fault::AfterBindingDelete));
    let (s, _) = h
        .op(Method::DELETE, "/api/v1/units/u/connectors/acme", None)
        .await;
    assert!(s >= 500);
    let snapshot = h.database().load().await.unwrap();
    assert_eq!((snapshot.bindings.len(), snapshot.grants.len()), (1, 1));
    let (_, t) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    assert!(tool_names(&t["tools"]).contains(&"acme.echo".to_string()));
}

async fn install_bytes(h: &TestHost, path: &str, query: &str) -> (u16, Value) {
    upload_component(&h.client, &h.url, std::fs::read(path).unwrap(), query).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_bindings_and_refuses_to_break_them_unless_forced() {
    let h = TestHost::start().await;
    let v1 = h.install(guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.unit("u2", None).await;
    h.agent("a1", &["u1"]).await;
    h.agent("a2", &["u2"]).await;
    h.bind("u1", "hostile", json!({})).await;
    h.bind("u2", "hostile", json!({"region": "eu"})).await;

    // v2 requires `region`: u1's binding would break.
    let (s, b) = install_bytes(&h, guests::HOSTILE_V2, "").await;
    assert_eq!((s, code(&b)), (409, "rotation_breaks_bindings"), "{b}");
    assert_eq!(b["error"]["details"]["bindings"][0]["unitId"], "u1");
    let (_, now) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(
        now["digest"], v1["digest"],
        "a refused rotation changes nothing"
    );

    // Forced: the breaking binding is unbound (its grants revoked), the other one kept.
    let (s, v2) = install_bytes(&h, guests::HOSTILE_V2, "?force=true").await;
    assert_eq!(s, 200, "{v2}");
    assert_eq!(v2["version"], "2.0.0");
    assert_ne!(v2["digest"], v1["digest"]);
    let (_, b1) = h.op(Method::GET, "/api/v1/units/u1/connectors", None).await;
    assert_eq!(b1["bindings"], json!([]));
    let (_, b2) = h.op(Method::GET, "/api/v1/units/u2/connectors", None).await;
    assert_eq!(b2["bindings"][0]["config"], json!({"region": "eu"}));
    let (_, t1) = h.op(Method::GET, "/api/v1/agents/a1/tools", None).await;
    assert!(!tool_names(&t1["tools"])
        .iter()
        .any(|n| n.starts_with("hostile.")));
    let (_, t2) = h.op(Method::GET, "/api/v1/agents/a2/tools", None).await;
    assert_eq!(
        find(&t2["tools"], "hostile.counter")["provenance"],
        "connector:hostile"
    );
    // The stored state agrees with what the API shows.
    let snapshot = h.database().load().await.unwrap();
    assert_eq!(snapshot.bindings.len(), 1);
    assert_eq!(snapshot.grants.len(), 1);

    // Rotating back (v1 accepts any config) keeps the remaining binding.
    let (s, _) = install_bytes(&h, guests::HOSTILE, "").await;
    assert_eq!(s, 200);
    let (_, b2) = h.op(Method::GET, "/api/v1/units/u2/connectors", None).await;
    assert_eq!(b2["bindings"].as_array().unwrap().len(), 1);
}

/// A grant racing the deletion of its unit never leaves a grant behind for a unit that is
/// gone, in memory or in the database: the subject is checked under the write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_racing_the_deletion_of_its_unit_leaves_no_orphan() {
    use connector_model::records::Subject;
    let h = TestHost::start().await;
    for round in 0..40 {
        let unit = format!("racing-{round}");
        h.unit(&unit, None).await;
        let subject = Subject::Unit(unit.clone());
        // Both orders: the deletion first (it holds the write lock while the grant is
        // checked) and the grant first.
        let (deleted, granted) = if round % 2 == 0 {
            tokio::join!(
                h.host.delete_unit(&unit),
                h.host.grant(subject.clone(), "acme.echo")
            )
        } else {
            let (granted, deleted) = tokio::join!(
                h.host.grant(subject.clone(), "acme.echo"),
                h.host.delete_unit(&unit)
            );
            (deleted, granted)
        };
        deleted.expect("the unit is deleted");
        if let Err(e) = granted {
            assert_eq!(e.code.as_str(), "not_found", "{e}");
        }
        let (s, _) = h
            .op(Method::GET, &format!("/api/v1/units/{unit}"), None)
            .await;
        assert_eq!(s, 404);
    }
    let stored = h.database().load().await.expect("load");
    let orphans: Vec<_> = stored
        .grants
        .iter()
        .filter(|g| match &g.subject {
            Subject::Unit(u) => !stored.units.iter().any(|x| &x.id == u),
            Subject::Agent(a) => !stored.agents.iter().any(|x| &x.id == a),
        })
        .collect();
    assert!(orphans.is_empty(), "orphaned grants: {orphans:?}");
}

/// Deleting a unit takes it out of its agents' unit lists, in memory and in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_unit_takes_it_out_of_its_agents() {
    let h = TestHost::start().await;
    h.unit("a", None).await;
    h.unit("b", None).await;
    h.agent("ada", &["a", "b"]).await;
    let (s, _) = h.op(Method::DELETE, "/api/v1/units/a", None).await;
    assert_eq!(s, 204);
    let (_, agent) = h.op(Method::GET, "/api/v1/agents/ada", None).await;
    assert_eq!(agent["units"], json!(["b"]));
    let stored = h.database().load().await.expect("load");
    let ada = stored.agents.iter().find(|a| a.id == "ada").expect("ada");
    assert_eq!(ada.units, ["b"]);
}

/// A platform tool the embedder registers whose handler fails.
struct FailingPlatformTool;

#[connector_host::host::async_trait]
impl connector_host::host::PlatformToolHandler for FailingPlatformTool {
    async fn call(
        &self,
        agent: &str,
        _arguments: Value,
    ) -> Result<Value, connector_host::host::HandlerError> {
        let cause = std::io::Error::other("the platform's queue is closed");
        Err(
            connector_host::host::HandlerError::new(format!("no ticket for {agent} today"))
                .with_source(cause),
        )
    }
}

/// A failing platform tool is the call's `tool_failed`: the agent reads the handler's
/// message, over HTTP and through the Rust API, and the embedder's own failure stays
/// underneath the host's error, never in the answer.
#[tokio::test]
async fn a_failing_platform_tool_tells_its_message_and_keeps_its_cause() {
    let h = TestHost::start().await;
    h.host
        .register_platform_tool(
            connector_model::connector::ToolInfo {
                name: "sv.platform.ticket".into(),
                description: "Opens a ticket.".into(),
                input_schema: json!({"type": "object"}),
                annotations: Default::default(),
                output_schema: None,
            },
            std::sync::Arc::new(FailingPlatformTool),
        )
        .unwrap();
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    let token = h.agent_token("a").await;
    let (s, b) = h
        .as_token(
            &token,
            Method::POST,
            "/api/v1/agents/a/tool-calls",
            Some(json!({"tool": "sv.platform.ticket", "arguments": {}})),
        )
        .await;
    assert_eq!((s, code(&b)), (502, "tool_failed"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no ticket for a today"),
        "{b}"
    );
    assert!(!b.to_string().contains("queue is closed"), "{b}");

    let err = h
        .host
        .call_tool("a", "sv.platform.ticket", json!({}))
        .await
        .expect_err("the handler fails");
    assert_eq!(err.code, connector_model::error::ErrorCode::ToolFailed);
    let cause = std::error::Error::source(&err).expect("the handler's failure is kept");
    let cause = std::error::Error::source(cause).expect("and its own cause");
    assert_eq!(cause.to_string(), "the platform's queue is closed");
}
