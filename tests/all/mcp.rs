//! MCP (CONTRACT.md §5) over real HTTP: the Streamable HTTP endpoint `/mcp/agents/{id}`
//! against an in-process host, every bad input as its own test, the stdio bridge
//! (`connector-host mcp`) against a `connector-host serve` process, and the official MCP
//! Python SDK (PyPI `mcp`) driving both (`tests/mcp/client_check.py`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::guests;
use integration_tests::harness::{
    host_binary, upload_component, ServerProcess, TestHost, OPERATOR_TOKEN,
};
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const V_2025_03_26: &str = "2025-03-26";
const V_2025_06_18: &str = "2025-06-18";
const V_2025_11_25: &str = "2025-11-25";

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A host with unit `team` (acme bound), agent `ada` in it, and `hostile` installed but
/// not bound there; unit `lab` with `hostile` bound and agent `hal`.
pub(crate) async fn setup() -> TestHost {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "acme", json!({})).await;
    h.unit("lab", None).await;
    h.agent("hal", &["lab"]).await;
    h.bind("lab", "hostile", json!({})).await;
    h
}

/// [`setup`] with the `rich` test connector bound on `team` too (what the official-SDK
/// check scripts expect), and a token of `ada`.
pub(crate) async fn setup_with_rich() -> (TestHost, String) {
    let h = setup().await;
    h.install(guests::RICH).await;
    h.bind("team", "rich", json!({})).await;
    let token = h.agent_token("ada").await;
    (h, token)
}

struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

/// One MCP client session over plain HTTP.
pub(crate) struct Mcp {
    client: reqwest::Client,
    endpoint: String,
    token: String,
    session: Option<String>,
    version: String,
    next_id: AtomicU64,
}

impl Mcp {
    fn new(base: &str, agent: &str, token: &str) -> Mcp {
        Mcp {
            client: reqwest::Client::new(),
            endpoint: format!("{base}/mcp/agents/{agent}"),
            token: token.to_string(),
            session: None,
            version: String::new(),
            next_id: AtomicU64::new(1),
        }
    }

    /// A session opened with `initialize` at `version` (and `notifications/initialized`).
    pub(crate) async fn open(base: &str, agent: &str, token: &str, version: &str) -> Mcp {
        Self::open_at(&format!("{base}/mcp/agents/{agent}"), token, version).await
    }

    /// [`Mcp::open`] on the endpoint URL `endpoint` (a namespace endpoint, a query).
    pub(crate) async fn open_at(endpoint: &str, token: &str, version: &str) -> Mcp {
        let mut m = Mcp::new("", "", token);
        m.endpoint = endpoint.to_string();
        let r = m
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "tests", "version": "0"}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        m.session = Some(
            r.headers["mcp-session-id"]
                .to_str()
                .expect("ascii session id")
                .to_string(),
        );
        m.version = r.body["result"]["protocolVersion"]
            .as_str()
            .expect("protocolVersion")
            .to_string();
        let r = m
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(r.status, 202);
        m
    }

    fn request(&self, method: Method) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(method, &self.endpoint)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        if !self.version.is_empty() {
            req = req.header("mcp-protocol-version", &self.version);
        }
        req
    }

    async fn send(req: reqwest::RequestBuilder) -> Reply {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn post(&self, body: Value) -> Reply {
        Self::send(self.request(Method::POST).json(&body)).await
    }

    async fn post_raw(&self, body: impl Into<reqwest::Body>) -> Reply {
        Self::send(
            self.request(Method::POST)
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    /// A request; asserts HTTP 200 and returns the JSON-RPC answer.
    pub(crate) async fn rpc(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let r = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        assert_eq!(r.status, 200, "{method}: {}", r.body);
        assert_eq!(r.body["id"], id, "{}", r.body);
        assert_eq!(r.body["jsonrpc"], "2.0");
        r.body
    }

    pub(crate) async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    pub(crate) async fn tool_names(&self) -> Vec<String> {
        self.rpc("tools/list", json!({})).await["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Opens the GET stream.
    pub(crate) async fn stream(&self) -> SseReader {
        let resp = self
            .request(Method::GET)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        SseReader::new(resp)
    }
}

fn error_code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {body}"))
}

/// Reads `data:` payloads of an SSE response.
pub(crate) struct SseReader {
    resp: reqwest::Response,
    buffer: String,
}

impl SseReader {
    pub(crate) fn new(resp: reqwest::Response) -> SseReader {
        SseReader {
            resp,
            buffer: String::new(),
        }
    }

    /// The next event's JSON, or `None` at the end of the stream or after `wait`.
    /// Whether the stream ends (its response body is over) within `wait`, reading past
    /// any events; `false` when it is still open then.
    pub(crate) async fn ends_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(_))) => continue,
                Ok(_) => return true,
                Err(_) => return false,
            }
        }
    }

    pub(crate) async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(serde_json::from_str(&data.join("\n")).expect("event JSON"));
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(chunk))) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
                Ok(_) | Err(_) => return None,
            }
        }
    }
}

const LIST_CHANGED: &str = "notifications/tools/list_changed";

// ---------------------------------------------------------------------------------------
// Lifecycle and methods
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_the_newest_shared_revision() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    for (asked, answered) in [
        (V_2025_03_26, V_2025_03_26),
        (V_2025_06_18, V_2025_06_18),
        (V_2025_11_25, V_2025_11_25),
        ("2024-11-05", V_2025_11_25),
        ("2099-01-01", V_2025_11_25),
    ] {
        let m = Mcp::new(&h.url, "ada", &token);
        let r = m
            .post(
                json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": asked, "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.headers["content-type"], "application/json");
        let session = r.headers["mcp-session-id"].to_str().unwrap();
        assert!(
            session.len() >= 16 && session.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "{session}"
        );
        let result = &r.body["result"];
        assert_eq!(r.body["id"], "init");
        assert_eq!(result["protocolVersion"], answered, "asked {asked}");
        assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(result["serverInfo"]["name"], "connector-host");
    }
    // Missing protocolVersion: invalid params.
    let m = Mcp::new(&h.url, "ada", &token);
    let r = m
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (200, -32602));
    // A second initialize inside a session is refused.
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": V_2025_06_18, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600), "{}", r.body);
    // An agent that does not exist (the operator token passes any id).
    let ghost = Mcp::new(&h.url, "ghost", OPERATOR_TOKEN);
    let r = ghost
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": V_2025_06_18}}))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_and_tools_list() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_11_25).await;
    assert_eq!(s.rpc("ping", json!({})).await["result"], json!({}));
    let list = s.rpc("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "acme.echo",
            "acme.timestamp",
            "sv.tools.describe",
            "sv.tools.list"
        ]
    );
    // Exactly what the REST API says the agent's effective tools are.
    let (_, rest) = h.op(Method::GET, "/api/v1/agents/ada/tools", None).await;
    for (mcp, rest) in tools.iter().zip(rest["tools"].as_array().unwrap()) {
        assert_eq!(mcp["name"], rest["name"]);
        assert_eq!(mcp["description"], rest["description"]);
        assert_eq!(mcp["inputSchema"], rest["inputSchema"]);
        assert_eq!(mcp["annotations"], rest["annotations"]);
    }
    let echo = &tools[0];
    assert_eq!(echo["inputSchema"]["type"], "object");
    assert_eq!(
        echo["annotations"],
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false})
    );
    // We hand out no cursors.
    let r = s.rpc("tools/list", json!({"cursor": "x"})).await;
    assert_eq!(error_code(&r), -32602);
    // Image-tier tools are effective tools too: listed (they run in the agent's container).
    let (st, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/ada/image-tools",
            Some(json!({"digest": "sha256:abc", "tools": [{"name": "img.run", "description": "d", "inputSchema": {"type": "object"}}]})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert!(s.tool_names().await.contains(&"img.run".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_answers_text_and_structured_content() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = s.call("acme.echo", json!({"message": "hi"})).await;
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": "{\"message\":\"hi\"}"}],
               "structuredContent": {"message": "hi"}, "isError": false})
    );
    // A result that is not an object is wrapped.
    let hal = h.agent_token("hal").await;
    let s = Mcp::open(&h.url, "hal", &hal, V_2025_06_18).await;
    let r = s.call("hostile.counter", json!({})).await;
    assert_eq!(r["result"]["structuredContent"], json!({"result": 1}));
    assert_eq!(r["result"]["content"][0]["text"], "1");
    // `arguments` may be omitted for a tool without parameters.
    let r = s
        .rpc("tools/call", json!({"name": "hostile.counter"}))
        .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // The same counters as the HTTP path.
    let m = h.metrics().await;
    assert!(m.contains("outcome=\"ok\"} 3"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_of_an_unbound_connector_is_32002() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = s.call("hostile.counter", json!({})).await;
    assert_eq!(error_code(&r), -32002, "{r}");
    assert_eq!(r["error"]["data"]["code"], "tool_not_granted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_32602() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = s.call("nope.nothing", json!({})).await;
    assert_eq!(error_code(&r), -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "unknown_tool");
    // No name at all.
    let r = s.rpc("tools/call", json!({"arguments": {}})).await;
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = s.rpc("tools/call", json!({"name": 5})).await;
    assert_eq!(error_code(&r), -32602, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_32602_with_pointers() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = s.call("acme.echo", json!({"message": 5})).await;
    assert_eq!(error_code(&r), -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "invalid_arguments");
    let pointers: Vec<&str> = r["error"]["data"]["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["/message"], "{r}");
    // Arguments that are not an object.
    let r = s.call("acme.echo", json!(["hi"])).await;
    assert_eq!(error_code(&r), -32602, "{r}");
}

/// SEP-1303: from 2025-11-25 on, invalid arguments are a tool result the model can read
/// (`isError`, each violation named), not a protocol error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_2025_11_25_invalid_arguments_are_a_result_naming_each_violation() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_11_25).await;
    let r = s
        .call("acme.echo", json!({"message": 5, "extra": true}))
        .await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("invalid_arguments"), "{text}");
    assert!(text.contains("/message: "), "{text}");
    // The unknown tool and the tool not granted stay protocol errors.
    let r = s.call("nope.nothing", json!({})).await;
    assert_eq!(error_code(&r), -32602, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connectors_own_failure_is_a_result_with_is_error() {
    let h = TestHost::start_with(|c| c.limits.call_timeout = Duration::from_millis(500)).await;
    h.install(guests::HOSTILE).await;
    h.unit("lab", None).await;
    h.agent("hal", &["lab"]).await;
    h.bind("lab", "hostile", json!({})).await;
    let token = h.agent_token("hal").await;
    let s = Mcp::open(&h.url, "hal", &token, V_2025_06_18).await;
    for (tool, args, code) in [
        (
            "hostile.panic",
            json!({"message": "boom"}),
            "connector_trapped",
        ),
        ("hostile.trap", json!({}), "connector_trapped"),
        ("hostile.fetch", json!({"url": "not a url"}), "tool_failed"),
        ("hostile.spin", json!({}), "connector_timeout"),
    ] {
        let r = s.call(tool, args).await;
        let result = &r["result"];
        assert_eq!(result["isError"], true, "{tool}: {r}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with(code), "{tool}: {text}");
        assert_eq!(result["content"][0]["type"], "text");
    }
    // The host is fine afterwards.
    let r = s.call("hostile.counter", json!({})).await;
    assert_eq!(r["result"]["isError"], false);
}

// ---------------------------------------------------------------------------------------
// Bad input, one case per test
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_a_parse_error() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    for body in [
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ",
        "not json",
        "",
    ] {
        let r = s.post_raw(body).await;
        assert_eq!(r.status, 400, "{body:?}");
        assert_eq!(error_code(&r.body), -32700, "{body:?}: {}", r.body);
        assert_eq!(r.body["id"], Value::Null);
    }
    // Also without a session: the body is read before anything else.
    let fresh = Mcp::new(&h.url, "ada", &token);
    let r = fresh.post_raw("{oops").await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32700));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_json_rpc_is_an_invalid_request() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    for (body, id) in [
        (json!({"id": 1, "method": "ping"}), json!(1)),
        (
            json!({"jsonrpc": "1.0", "id": 2, "method": "ping"}),
            json!(2),
        ),
        (
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
            Value::Null,
        ),
        (json!({"jsonrpc": "2.0", "id": 3, "method": 42}), json!(3)),
        (json!({"jsonrpc": "2.0", "id": 4}), json!(4)),
        (json!("ping"), Value::Null),
        (json!(17), Value::Null),
    ] {
        let r = s.post(body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(error_code(&r.body), -32600, "{body}: {}", r.body);
        assert_eq!(r.body["id"], id, "{body}");
    }
    // Params that are not an object.
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": [1]}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (200, -32602));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_method_is_32601() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    for method in [
        "prompts/list",
        "prompts/get",
        "tools/delete",
        "sampling/createMessage",
    ] {
        let r = s.rpc(method, json!({})).await;
        assert_eq!(error_code(&r), -32601, "{method}: {r}");
    }
    // Unknown notifications need no answer.
    let r = s
        .post(json!({"jsonrpc": "2.0", "method": "notifications/whatever"}))
        .await;
    assert_eq!(r.status, 202);
    // Client responses are accepted too.
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": "srv-1", "result": {}}))
        .await;
    assert_eq!(r.status, 202);
    // Without a session, an unknown method is still just unknown (`server/discover`
    // probes of newer clients fall back to initialize).
    let fresh = Mcp::new(&h.url, "ada", &token);
    let r = fresh
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (200, -32601));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_refused_after_2025_03_26() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    for version in [V_2025_06_18, V_2025_11_25] {
        let s = Mcp::open(&h.url, "ada", &token, version).await;
        let r = s
            .post(json!([
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            ]))
            .await;
        assert_eq!(r.status, 400, "{version}: {}", r.body);
        assert_eq!(error_code(&r.body), -32600, "{}", r.body);
    }
    // Without a session, a batch cannot even be placed.
    let fresh = Mcp::new(&h.url, "ada", &token);
    let r = fresh
        .post(json!([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": V_2025_03_26}}]))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_answered_at_2025_03_26() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_03_26).await;
    assert_eq!(s.version, V_2025_03_26);
    let r = s
        .post(json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "acme.echo", "arguments": {"message": "b"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "nope"},
            {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": V_2025_03_26}},
            {"id": 5}
        ]))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let answers = r.body.as_array().expect("array");
    assert_eq!(answers.len(), 5, "{}", r.body);
    let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(by_id(json!(1))["result"], json!({}));
    assert_eq!(
        by_id(json!(2))["result"]["structuredContent"],
        json!({"message": "b"})
    );
    assert_eq!(error_code(by_id(json!(3))), -32601);
    assert_eq!(error_code(by_id(json!(4))), -32600);
    assert_eq!(error_code(by_id(json!(5))), -32600);
    // Only notifications: 202.
    let r = s
        .post(json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]))
        .await;
    assert_eq!(r.status, 202);
    // Empty: invalid.
    let r = s.post(json!([])).await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600));
    // Too many calls for one request: refused whole, none run.
    let calls: Vec<Value> = (0..65)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "acme.echo", "arguments": {"message": "x"}}}))
        .collect();
    let before = h.metrics().await;
    let r = s.post(Value::Array(calls.clone())).await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600), "{}", r.body);
    assert_eq!(h.metrics().await, before, "no call ran");
    let r = s.post(Value::Array(calls[..64].to_vec())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.as_array().map(Vec::len), Some(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_session_id_is_400() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let mut s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    s.session = None;
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600), "{}", r.body);
    assert_eq!(r.body["id"], 1);
    let r = s
        .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(r.status, 400);
    let r = Mcp::send(s.request(Method::GET)).await;
    assert_eq!(r.status, 400);
    let r = Mcp::send(s.request(Method::DELETE)).await;
    assert_eq!(r.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_ended_session_id_is_404() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let mut s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let real = s.session.clone();
    s.session = Some("no-such-session".into());
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (404, -32001), "{}", r.body);
    assert_eq!(Mcp::send(s.request(Method::GET)).await.status, 404);
    // Another agent's session, even with the operator token.
    let hal = h.agent_token("hal").await;
    let mut other = Mcp::open(&h.url, "hal", &hal, V_2025_06_18).await;
    other.token = OPERATOR_TOKEN.into();
    other.endpoint = format!("{}/mcp/agents/ada", h.url);
    let r = other
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(r.status, 404);
    // Ended with DELETE: 204, then 404.
    s.session = real;
    assert_eq!(Mcp::send(s.request(Method::DELETE)).await.status, 204);
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(Mcp::send(s.request(Method::DELETE)).await.status, 404);
    // Sent with initialize: the id is unknown, so 404 too.
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": V_2025_06_18}}))
        .await;
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_version_header_is_checked() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let mut s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    s.version = "1999-01-01".into();
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!((r.status, error_code(&r.body)), (400, -32600), "{}", r.body);
    // Supported, though not what this session negotiated: accepted (CONTRACT §5).
    s.version = V_2025_11_25.into();
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Absent: the negotiated revision.
    s.version = String::new();
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_is_413() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let big = "x".repeat(5 * 1024 * 1024);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "acme.echo", "arguments": {"message": big}}});
    let r = s.post(body.clone()).await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(error_code(&r.body), -32600);
    // Streamed without a Content-Length: the limit still holds.
    let bytes = serde_json::to_vec(&body).unwrap();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(256 * 1024).map(|c| Ok(c.to_vec())).collect();
    let r = s
        .post_raw(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .await;
    assert_eq!(r.status, 413, "{}", r.body);
    // Just under the limit is fine.
    let ok = s
        .call("acme.echo", json!({"message": "y".repeat(3 * 1024 * 1024)}))
        .await;
    assert_eq!(ok["result"]["isError"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_is_415() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let r = Mcp::send(
        s.request(Method::POST)
            .header("content-type", "text/plain")
            .body(r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#),
    )
    .await;
    assert_eq!(r.status, 415);
    assert_eq!(error_code(&r.body), -32600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_401_and_403() {
    let h = setup().await;
    let ada = h.agent_token("ada").await;
    let hal = h.agent_token("hal").await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": V_2025_06_18}});
    let endpoint = h.at("/mcp/agents/ada");
    // No token.
    for method in [Method::POST, Method::GET, Method::DELETE] {
        let r = Mcp::send(h.client.request(method.clone(), &endpoint).json(&init)).await;
        assert_eq!(r.status, 401, "{method}");
        let challenge = r.headers["www-authenticate"].to_str().expect("ascii");
        assert!(
            challenge.starts_with("Bearer resource_metadata="),
            "{challenge}"
        );
        assert_eq!(error_code(&r.body), -32000);
        assert_eq!(r.body["error"]["data"]["code"], "unauthenticated");
    }
    // A token that is not one.
    let r = Mcp::new(&h.url, "ada", "garbage").post(init.clone()).await;
    assert_eq!(r.status, 401);
    // Another agent's token.
    let r = Mcp::new(&h.url, "ada", &hal).post(init.clone()).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.body["error"]["data"]["code"], "forbidden");
    // A session does not outlive authentication: ada's session with hal's token.
    let mut s = Mcp::open(&h.url, "ada", &ada, V_2025_06_18).await;
    s.token = hal.clone();
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    assert_eq!(r.status, 403);
    // The operator token is accepted for any agent.
    let op = Mcp::open(&h.url, "ada", OPERATOR_TOKEN, V_2025_06_18).await;
    assert_eq!(
        op.call("acme.echo", json!({"message": "op"})).await["result"]["isError"],
        false
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_of_another_site_is_403() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let r = Mcp::send(
        s.request(Method::POST)
            .header("origin", "https://evil.example")
            .json(&ping),
    )
    .await;
    assert_eq!(r.status, 403);
    // A page of this host itself is fine.
    let r = Mcp::send(s.request(Method::POST).header("origin", &h.url).json(&ping)).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

// ---------------------------------------------------------------------------------------
// Concurrency and hostile clients
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_while_the_binding_is_removed_succeed_or_get_32002() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Arc::new(Mcp::open(&h.url, "ada", &token, V_2025_06_18).await);
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut ok, mut refused, mut other) = (0u32, 0u32, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let r = s.call("acme.echo", json!({"message": "race"})).await;
                    if r["result"]["isError"] == false
                        && r["result"]["structuredContent"] == json!({"message": "race"})
                    {
                        ok += 1;
                    } else if r["error"]["code"] == -32002 {
                        refused += 1;
                    } else if other.len() < 5 {
                        other.push(r);
                    }
                }
                (ok, refused, other)
            })
        })
        .collect();
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let (st, b) = h
            .op(Method::DELETE, "/api/v1/units/team/connectors/acme", None)
            .await;
        assert_eq!(st, 204, "{b}");
        tokio::time::sleep(Duration::from_millis(15)).await;
        h.bind("team", "acme", json!({})).await;
    }
    let (st, _) = h
        .op(Method::DELETE, "/api/v1/units/team/connectors/acme", None)
        .await;
    assert_eq!(st, 204);
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut refused) = (0, 0);
    for c in callers {
        let (o, r, other) = c.await.unwrap();
        assert!(
            other.is_empty(),
            "answers that are neither success nor -32002: {other:?}"
        );
        ok += o;
        refused += r;
    }
    assert!(ok > 0 && refused > 0, "ok {ok}, refused {refused}");
    // Unbound for good: refused.
    assert_eq!(
        error_code(&s.call("acme.echo", json!({"message": "x"})).await),
        -32002
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_call_leaves_the_host_serving() {
    let h = setup().await;
    let token = h.agent_token("hal").await;
    let s = Mcp::open(&h.url, "hal", &token, V_2025_06_18).await;
    // What a ping and a call take on this machine now.
    let started = Instant::now();
    assert_eq!(s.rpc("ping", json!({})).await["result"], json!({}));
    let r = s.call("hostile.counter", json!({})).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    let before = started.elapsed();
    // Several slow calls, each abandoned after 200 ms (the request future is dropped,
    // which closes its connection).
    for _ in 0..4 {
        let slow = s.call("hostile.sleep", json!({"ms": 2000}));
        assert!(
            tokio::time::timeout(Duration::from_millis(200), slow)
                .await
                .is_err(),
            "the slow call finished early"
        );
    }
    let started = Instant::now();
    assert_eq!(s.rpc("ping", json!({})).await["result"], json!({}));
    let r = s.call("hostile.counter", json!({})).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    // Held behind the abandoned 2 s calls, it would wait most of their time.
    assert!(
        started.elapsed() < before * 3 + Duration::from_millis(500),
        "the host answered only after {:?} ({before:?} before the abandoned calls)",
        started.elapsed()
    );
    // Other agents are served too.
    let ada = h.agent_token("ada").await;
    let other = Mcp::open(&h.url, "ada", &ada, V_2025_06_18).await;
    assert_eq!(
        other
            .call("acme.echo", json!({"message": "still here"}))
            .await["result"]["isError"],
        false
    );
    // A slow call that is allowed to finish still answers.
    let r = s.call("hostile.sleep", json!({"ms": 50})).await;
    assert_eq!(r["result"]["structuredContent"], json!({"slept_ms": 50}));
}

// ---------------------------------------------------------------------------------------
// Live surface
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_reaches_the_get_stream() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_11_25).await;
    let mut stream = s.stream().await;
    // Nothing happens: nothing is sent.
    assert!(stream.next(Duration::from_millis(600)).await.is_none());

    // Bind: announced as it is written, timed against the bind itself (a loaded machine
    // slows both): the event comes at most as long after the bind returned as the bind
    // took, and a second.
    let started = Instant::now();
    h.bind("team", "hostile", json!({})).await;
    let bind_took = started.elapsed();
    let event = stream
        .next(Duration::from_secs(5))
        .await
        .expect("list_changed after bind");
    assert_eq!(event, json!({"jsonrpc": "2.0", "method": LIST_CHANGED}));
    let latency = started.elapsed();
    assert!(
        latency < bind_took * 2 + Duration::from_secs(1),
        "{latency:?} (the bind took {bind_took:?})"
    );
    assert!(s
        .tool_names()
        .await
        .contains(&"hostile.counter".to_string()));

    // Unbind.
    let (st, _) = h
        .op(
            Method::DELETE,
            "/api/v1/units/team/connectors/hostile",
            None,
        )
        .await;
    assert_eq!(st, 204);
    assert!(
        stream.next(Duration::from_secs(5)).await.is_some(),
        "after unbind"
    );
    assert!(!s
        .tool_names()
        .await
        .contains(&"hostile.counter".to_string()));

    // An explicit grant of one tool.
    let (st, b) = h
        .op(
            Method::POST,
            "/api/v1/agents/ada/grants",
            Some(json!({"tool": "hostile.counter"})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    assert!(
        stream.next(Duration::from_secs(5)).await.is_some(),
        "after a grant"
    );
    assert!(s
        .tool_names()
        .await
        .contains(&"hostile.counter".to_string()));

    // A write that does not change ada's tools (another unit): no notification.
    h.bind("lab", "acme", json!({})).await;
    assert!(stream.next(Duration::from_millis(800)).await.is_none());

    // Re-installing the same component changes nothing: nothing is announced.
    h.install(guests::HOSTILE).await;
    assert!(stream.next(Duration::from_millis(800)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_without_an_open_stream_is_delivered_when_one_opens() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    h.bind("team", "hostile", json!({})).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut stream = s.stream().await;
    let event = stream
        .next(Duration::from_secs(2))
        .await
        .expect("pending list_changed");
    assert_eq!(event["method"], LIST_CHANGED);
    // A second stream replaces the first (which ends).
    let mut second = s.stream().await;
    assert!(stream.next(Duration::from_secs(2)).await.is_none());
    let (st, _) = h
        .op(
            Method::DELETE,
            "/api/v1/units/team/connectors/hostile",
            None,
        )
        .await;
    assert_eq!(st, 204);
    assert!(second.next(Duration::from_secs(5)).await.is_some());
    // DELETE ends the session and its stream.
    assert_eq!(Mcp::send(s.request(Method::DELETE)).await.status, 204);
    assert!(second.next(Duration::from_secs(2)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_agent_ends_its_sessions() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let mut stream = s.stream().await;
    let (st, _) = h.op(Method::DELETE, "/api/v1/agents/ada", None).await;
    assert_eq!(st, 204);
    assert!(stream.next(Duration::from_secs(3)).await.is_none());
    // The deleted agent's token is no longer good at all (CONTRACT §3: deleting an agent
    // revokes its tokens), so the session is never looked up.
    let r = s
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_eq!(r.status, 401);
}

/// A stream opened with an agent token ends once that token is revoked (CONTRACT §3:
/// revoked tokens stop working at once); one opened with the operator token goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_agents_tokens_ends_the_streams_they_opened() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let s = Mcp::open(&h.url, "ada", &token, V_2025_06_18).await;
    let mut stream = s.stream().await;
    let operator = Mcp::open(&h.url, "ada", OPERATOR_TOKEN, V_2025_06_18).await;
    let mut operator_stream = operator.stream().await;
    let (st, b) = h
        .op(Method::POST, "/api/v1/agents/ada/tokens/revoke", None)
        .await;
    assert_eq!(st, 204, "{b}");
    // Ended, or still open when the wait is over: it must end well within the wait (the
    // bound is half of it).
    let wait = Duration::from_secs(10);
    let started = std::time::Instant::now();
    assert!(stream.next(wait).await.is_none());
    assert!(
        started.elapsed() < wait / 2,
        "the stream went on for {:?} after its token was revoked",
        started.elapsed()
    );
    // The operator's stream still carries list_changed.
    h.bind("team", "hostile", json!({})).await;
    let event = operator_stream
        .next(Duration::from_secs(3))
        .await
        .expect("the operator's stream goes on");
    assert_eq!(event["method"], LIST_CHANGED);
}

// ---------------------------------------------------------------------------------------
// The stdio bridge
// ---------------------------------------------------------------------------------------

pub(crate) struct Bridge {
    pub(crate) child: tokio::process::Child,
    pub(crate) stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Bridge {
    pub(crate) fn start(url: &str, agent: &str, token: &str) -> Bridge {
        let mut child = tokio::process::Command::new(host_binary())
            .args(["mcp", "--agent", agent, "--url", url, "--token", token])
            .env("RUST_LOG", "warn")
            .env_remove("CONNECTOR_HOST_OPERATOR_TOKEN")
            .env_remove("CONNECTOR_HOST_AGENT_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn connector-host mcp");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Bridge {
            child,
            stdin,
            stdout,
        }
    }

    pub(crate) async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub(crate) async fn line(&mut self, wait: Duration) -> Option<Value> {
        match tokio::time::timeout(wait, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => Some(serde_json::from_str(&line).expect("stdout is JSON lines")),
            _ => None,
        }
    }

    /// Sends a request and returns its answer (skipping notifications in between).
    pub(crate) async fn rpc(&mut self, id: u64, method: &str, params: Value) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&msg.to_string()).await;
        loop {
            let line = self
                .line(Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("no answer to {method}"));
            if line["id"] == id {
                return line;
            }
        }
    }
}

async fn op(
    client: &reqwest::Client,
    server: &ServerProcess,
    m: Method,
    path: &str,
    body: Value,
) -> Value {
    let r = client
        .request(m, format!("{}{path}", server.url))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json::<Value>().await.unwrap_or(Value::Null)
}

/// Unit `team` with acme bound, agent `ada` in it, `hostile` installed; ada's token.
pub(crate) async fn prepare(server: &ServerProcess) -> String {
    let client = reqwest::Client::new();
    op(
        &client,
        server,
        Method::PUT,
        "/api/v1/units/team",
        json!({}),
    )
    .await;
    op(
        &client,
        server,
        Method::PUT,
        "/api/v1/agents/ada",
        json!({"units": ["team"]}),
    )
    .await;
    op(
        &client,
        server,
        Method::PUT,
        "/api/v1/units/team/connectors/acme",
        json!({"config": {}}),
    )
    .await;
    let (s, b) = upload_component(
        &client,
        &server.url,
        std::fs::read(guests::HOSTILE).unwrap(),
        "",
    )
    .await;
    assert!(s == 200 || s == 201, "install hostile: {s} {b}");
    let t = op(
        &client,
        server,
        Method::POST,
        "/api/v1/agents/ada/tokens",
        json!({}),
    )
    .await;
    t["token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_against_a_server_process() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;
    let mut b = Bridge::start(&server.url, "ada", &token);

    // A line that is not JSON: answered locally.
    b.send("{not json").await;
    let line = b.line(Duration::from_secs(10)).await.expect("parse error");
    assert_eq!(error_code(&line), -32700);

    let init = b
        .rpc(1, "initialize", json!({"protocolVersion": V_2025_06_18, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], V_2025_06_18, "{init}");
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let list = b.rpc(2, "tools/list", json!({})).await;
    assert!(list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "acme.echo"));
    let echo = b
        .rpc(
            3,
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "via stdio"}}),
        )
        .await;
    assert_eq!(
        echo["result"]["structuredContent"],
        json!({"message": "via stdio"})
    );
    let unknown = b.rpc(4, "prompts/list", json!({})).await;
    assert_eq!(error_code(&unknown), -32601);

    // The server's notifications reach stdout.
    let r = reqwest::Client::new()
        .put(format!(
            "{}/api/v1/units/team/connectors/hostile",
            server.url
        ))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"config": {}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let note = b
        .line(Duration::from_secs(5))
        .await
        .expect("list_changed on stdout");
    assert_eq!(note["method"], LIST_CHANGED);

    // Concurrent requests all get answers (order may differ).
    for id in 10..20 {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "acme.echo", "arguments": {"message": id.to_string()}}});
        b.send(&msg.to_string()).await;
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 10 {
        let line = b.line(Duration::from_secs(10)).await.expect("answers");
        if let Some(id) = line["id"].as_u64() {
            assert_eq!(
                line["result"]["structuredContent"]["message"],
                id.to_string()
            );
            seen.insert(id);
        }
    }

    // End of input: the bridge ends the session and exits 0.
    drop(b.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(10), b.child.wait())
        .await
        .expect("the bridge exits at end of input")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_survives_a_host_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;
    let mut b = Bridge::start(&server.url, "ada", &token);
    b.rpc(1, "initialize", json!({"protocolVersion": V_2025_11_25, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let echo = b
        .rpc(
            2,
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "before"}}),
        )
        .await;
    assert_eq!(echo["result"]["isError"], false);

    // Restart the host on the same address: sessions live in memory, so the old one is
    // gone (404); the bridge re-initializes and the client never notices.
    let addr = server.addr;
    server.kill9();
    let mut restarted = std::process::Command::new(host_binary())
        .args(["serve", "--listen", &addr.to_string(), "--data-dir"])
        .arg(dir.path())
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("restart");
    let deadline = Instant::now() + Duration::from_secs(60);
    let client = reqwest::Client::new();
    loop {
        if let Ok(r) = client.get(format!("http://{addr}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the host did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let echo = b
        .rpc(
            3,
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "after"}}),
        )
        .await;
    assert_eq!(
        echo["result"]["structuredContent"],
        json!({"message": "after"}),
        "{echo}"
    );
    let _ = restarted.kill();
    let _ = restarted.wait();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_shuts_down_on_sigterm_with_a_stream_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;
    let s = Mcp::open(&server.url, "ada", &token, V_2025_06_18).await;
    let mut stream = s.stream().await;
    // A 2026-07-28 subscription too: it ends with its final result.
    let c = crate::mcp_stateless::Stateless::new(&server.url, "ada", &token);
    let (mut listen, sid) = c.listen(json!({"toolsListChanged": true})).await;
    assert!(
        listen.next(Duration::from_secs(5)).await.is_some(),
        "acknowledged"
    );
    let pid = server.child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(sent.success());
    // The stream ends, and so does the process (a graceful shutdown waits for responses
    // in flight; an open stream must not hold it forever).
    assert!(stream.next(Duration::from_secs(5)).await.is_none());
    let end = listen
        .next(Duration::from_secs(5))
        .await
        .expect("the final result");
    assert_eq!(end["id"], sid, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], sid,
        "{end}"
    );
    assert!(
        listen.ends_within(Duration::from_secs(5)).await,
        "listen outlived the server"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve still runs 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// The official MCP Python SDK
// ---------------------------------------------------------------------------------------

pub(crate) fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn has_mcp(python: &std::path::Path) -> bool {
    std::process::Command::new(python)
        .args(["-c", "import mcp.client.session, mcp.client.stdio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The venv interpreter with the MCP SDK (`target/mcp-venv`, which `.ci/run` creates),
/// creating it when missing; `Err` says why it cannot be had.
pub(crate) fn python_with_mcp() -> Result<PathBuf, String> {
    let venv = workspace_root().join("target/mcp-venv");
    let python = venv.join("bin/python");
    if python.exists() && has_mcp(&python) {
        return Ok(python);
    }
    let created = (python.exists()
        || std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success()))
        && std::process::Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "mcp"])
            .status()
            .is_ok_and(|s| s.success())
        && has_mcp(&python);
    if created {
        return Ok(python);
    }
    Err(format!(
        "the MCP Python SDK is not available: could not create {} with `python3 -m venv` and \
         `pip install mcp` (no python3, or no network). Create it by hand:\n  python3 -m venv {0}\n  \
         {0}/bin/pip install mcp",
        venv.display()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_drives_http_and_stdio() {
    let found = tokio::task::spawn_blocking(python_with_mcp).await.unwrap();
    let Some(python) = integration_tests::harness::required("the MCP Python SDK", found) else {
        return;
    };
    let (h, token) = setup_with_rich().await;
    let mut python = tokio::process::Command::new(python);
    python.env("PYTHONUNBUFFERED", "1");
    run_sdk_check(python, "client_check.py", &h, &token).await;
}

/// Runs `tests/mcp/<script>` with `command` (its interpreter) against agent `ada` of `h`
/// (unit `team`, the stdio leg through this build's binary) and asserts that it printed
/// "all checks passed"; its output is shown either way.
pub(crate) async fn run_sdk_check(
    command: tokio::process::Command,
    script: &str,
    h: &TestHost,
    token: &str,
) {
    run_sdk_check_with(command, script, h, token, &[]).await;
}

/// [`run_sdk_check`] with more arguments for the script.
pub(crate) async fn run_sdk_check_with(
    mut command: tokio::process::Command,
    script: &str,
    h: &TestHost,
    token: &str,
    extra: &[&str],
) {
    let run = command
        .arg(workspace_root().join("tests/mcp").join(script))
        .args(["--url", &h.url, "--agent", "ada", "--token", token])
        .args(["--operator-token", OPERATOR_TOKEN, "--unit", "team"])
        .arg("--binary")
        .arg(host_binary())
        .args(extra)
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

/// A `401` points to RFC 9728 metadata of the agent's endpoint, served without a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_points_to_the_endpoints_protected_resource_metadata() {
    let h = setup().await;
    let r = reqwest::Client::new()
        .post(h.at("/mcp/agents/ada"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"]
        .to_str()
        .expect("ascii")
        .to_string();
    let url = challenge
        .strip_prefix("Bearer resource_metadata=\"")
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no resource_metadata in {challenge}"));
    assert_eq!(
        url,
        h.at("/.well-known/oauth-protected-resource/mcp/agents/ada")
    );
    let r = reqwest::get(url).await.expect("metadata");
    assert_eq!(r.status(), 200);
    let metadata: Value = r.json().await.expect("JSON");
    assert_eq!(metadata["resource"], h.at("/mcp/agents/ada"), "{metadata}");
    assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    // Behind a TLS-terminating proxy the URLs say https.
    let r = reqwest::Client::new()
        .get(url)
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .expect("metadata");
    let metadata: Value = r.json().await.expect("JSON");
    let resource = metadata["resource"].as_str().expect("resource");
    assert!(resource.starts_with("https://"), "{resource}");
}

/// Browser clients of an allowed origin get CORS answers (preflight without a token);
/// other origins get none and are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_origins_the_operator_allows_get_cors() {
    let h = TestHost::start_with(|c| c.cors_origins = vec!["http://localhost:6274".into()]).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    let token = h.agent_token("ada").await;
    let client = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        client
            .request(Method::OPTIONS, h.at("/mcp/agents/ada"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type, mcp-protocol-version",
            )
            .send()
    };
    let r = preflight("http://localhost:6274").await.expect("preflight");
    assert!(r.status().is_success(), "{}", r.status());
    let h_ = r.headers();
    assert_eq!(h_["access-control-allow-origin"], "http://localhost:6274");
    let allowed = h_["access-control-allow-headers"].to_str().expect("ascii");
    assert!(allowed.contains("authorization") && allowed.contains("mcp-protocol-version"));
    assert!(h_["access-control-allow-methods"]
        .to_str()
        .expect("ascii")
        .contains("POST"));

    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "browser", "version": "0"}}});
    let post = |origin: &'static str| {
        client
            .post(h.at("/mcp/agents/ada"))
            .bearer_auth(&token)
            .header("origin", origin)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    let r = post("http://localhost:6274").await.expect("post");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://localhost:6274"
    );
    assert!(r.headers()["access-control-expose-headers"]
        .to_str()
        .expect("ascii")
        .contains("mcp-session-id"));

    // Another origin: no CORS answer, and refused.
    let r = preflight("https://evil.example").await.expect("preflight");
    assert!(!r.headers().contains_key("access-control-allow-origin"));
    let r = post("https://evil.example").await.expect("post");
    assert_eq!(r.status(), 403);
    assert!(!r.headers().contains_key("access-control-allow-origin"));
}
