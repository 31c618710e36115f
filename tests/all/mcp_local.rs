//! `connector-host mcp --local` (or `--data-dir`): the stdio MCP server that answers from
//! the host's data in its own process, beside a `connector-host serve` process on the same
//! data directory. It must answer exactly as the HTTP endpoint does, see what `serve`
//! writes by its next message, refuse an agent that does not exist, and leave the
//! database alone.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use integration_tests::harness::{host_binary, ServerProcess, OPERATOR_TOKEN};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::mcp::{prepare, Mcp};
use crate::mcp_stateless::Stateless;

const LIST_CHANGED: &str = "notifications/tools/list_changed";
const STATELESS: &str = "2026-07-28";

/// A `connector-host mcp` process on stdin/stdout.
pub(crate) struct StdioServer {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl StdioServer {
    /// `connector-host mcp --agent <agent> --data-dir <dir>`, with no URL or token around.
    fn local(data_dir: &Path, agent: &str) -> StdioServer {
        let mut command = tokio::process::Command::new(host_binary());
        command
            .args(["mcp", "--agent", agent, "--data-dir"])
            .arg(data_dir);
        Self::spawn(command)
    }

    pub(crate) fn spawn(mut command: tokio::process::Command) -> StdioServer {
        let mut child = command
            .env("RUST_LOG", "warn")
            .env_remove("CONNECTOR_HOST_URL")
            .env_remove("CONNECTOR_HOST_OPERATOR_TOKEN")
            .env_remove("CONNECTOR_HOST_AGENT_TOKEN")
            .env_remove("CONNECTOR_HOST_DATA_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn connector-host mcp");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        StdioServer {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    pub(crate) async fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    pub(crate) async fn line(&mut self, wait: Duration) -> Option<Value> {
        match tokio::time::timeout(wait, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => Some(serde_json::from_str(&line).expect("stdout is JSON lines")),
            _ => None,
        }
    }

    /// Sends a request and returns its answer, skipping notifications in between.
    pub(crate) async fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self
                .line(Duration::from_secs(20))
                .await
                .unwrap_or_else(|| panic!("no answer to {method}"));
            if line["id"] == id {
                return line;
            }
            assert!(
                line.get("id").is_none(),
                "an answer to another request: {line}"
            );
        }
    }

    /// Calls `acme.echo` and checks that it answered without a tool error.
    async fn echo(&mut self) -> Value {
        let call = self
            .rpc(
                "tools/call",
                json!({"name": "acme.echo", "arguments": {"message": "hi"}}),
            )
            .await;
        assert_eq!(call["result"]["isError"], false, "{call}");
        call
    }

    /// A request at the stateless revision (no session; the revision in `_meta`).
    pub(crate) async fn stateless(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        self.rpc(method, params).await
    }

    pub(crate) async fn initialize(&mut self, version: &str) -> Value {
        let init = self
            .rpc(
                "initialize",
                json!({"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "tests", "version": "0"}}),
            )
            .await;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }

    pub(crate) async fn tool_names(&mut self) -> Vec<String> {
        let list = self.rpc("tools/list", json!({})).await;
        names(&list)
    }

    /// Closes stdin and waits for the process to exit 0.
    pub(crate) async fn finish(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("the process exits at end of input")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
}

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The answer without its id: what must be the same over both transports.
fn outcome(answer: &Value) -> Value {
    match answer.get("result") {
        Some(result) => json!({"result": result}),
        None => json!({"error": answer["error"]}),
    }
}

/// `initialize` over HTTP, as a raw answer.
async fn http_initialize(url: &str, agent: &str, token: &str, version: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{url}/mcp/agents/{agent}"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "tests", "version": "0"}}}),
        )
        .send()
        .await
        .expect("POST initialize")
        .json()
        .await
        .expect("JSON answer")
}

async fn operator(server: &ServerProcess, method: Method, path: &str, body: Option<Value>) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(OPERATOR_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("operator request");
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
}

/// The same messages over the local stdio server and the HTTP endpoint of the `serve`
/// process on the same data get the same answers, at every revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_like_the_http_endpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;

    // `initialize` at each session revision, and one it does not know.
    for version in ["2025-03-26", "2025-06-18", "2025-11-25", "2024-11-05"] {
        let mut local = StdioServer::local(dir.path(), "ada");
        let init = local.initialize(version).await;
        let http = http_initialize(&server.url, "ada", &token, version).await;
        assert_eq!(outcome(&init), outcome(&http), "initialize at {version}");
        local.finish().await;
    }

    let mut local = StdioServer::local(dir.path(), "ada");
    local.initialize("2025-11-25").await;
    let http = Mcp::open(&server.url, "ada", &token, "2025-11-25").await;
    let requests = [
        ("ping", json!({})),
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "hi"}}),
        ),
        // Installed but not bound for ada: -32002.
        (
            "tools/call",
            json!({"name": "hostile.counter", "arguments": {}}),
        ),
        // No such tool: -32602.
        (
            "tools/call",
            json!({"name": "nope.nothing", "arguments": {}}),
        ),
        // Arguments against the schema: a result naming each violation (2025-11-25).
        (
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": 5}}),
        ),
        ("tools/call", json!({"arguments": {}})),
        ("tools/list", json!({"cursor": "elsewhere"})),
        ("resources/list", json!({})),
    ];
    for (method, params) in &requests {
        let over_stdio = local.rpc(method, params.clone()).await;
        let over_http = http.rpc(method, params.clone()).await;
        assert_eq!(
            outcome(&over_stdio),
            outcome(&over_http),
            "{method} {params}"
        );
    }
    let list = local.rpc("tools/list", json!({})).await;
    assert!(
        names(&list).contains(&"acme.echo".to_string()),
        "the comparison compared something: {list}"
    );

    // The stateless revision, answered without a session.
    let stateless = Stateless::new(&server.url, "ada", &token);
    for (method, params) in [
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "stateless"}}),
        ),
        (
            "tools/call",
            json!({"name": "hostile.counter", "arguments": {}}),
        ),
    ] {
        let over_stdio = local.stateless(method, params.clone()).await;
        let over_http = stateless.rpc(method, params.clone()).await;
        assert_eq!(
            outcome(&over_stdio),
            outcome(&over_http),
            "{STATELESS} {method} {params}"
        );
    }
    local.finish().await;
}

/// A grant or binding made through `serve` is seen by the very next message of the local
/// process, and pushed to an open session as `notifications/tools/list_changed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_the_writes_of_a_running_serve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    prepare(&server).await;
    let mut local = StdioServer::local(dir.path(), "ada");
    local.initialize("2025-06-18").await;
    let names = local.tool_names().await;
    assert!(names.contains(&"acme.echo".to_string()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("hostile.")),
        "{names:?}"
    );

    // Pushed without a message of the client's.
    let bind = "/api/v1/units/team/connectors/hostile";
    operator(&server, Method::PUT, bind, Some(json!({"config": {}}))).await;
    let note = local
        .line(Duration::from_secs(5))
        .await
        .expect("list_changed on stdout");
    assert_eq!(note["method"], LIST_CHANGED, "{note}");
    operator(&server, Method::DELETE, bind, None).await;

    // Read-your-writes: every answer right after a write reflects it, no waiting.
    for round in 0..3 {
        operator(&server, Method::PUT, bind, Some(json!({"config": {}}))).await;
        let names = local.tool_names().await;
        assert!(
            names.contains(&"hostile.counter".to_string()),
            "round {round}: bound, yet {names:?}"
        );
        let call = local
            .rpc(
                "tools/call",
                json!({"name": "hostile.counter", "arguments": {}}),
            )
            .await;
        assert_eq!(call["result"]["isError"], false, "round {round}: {call}");

        operator(&server, Method::DELETE, bind, None).await;
        let names = local.tool_names().await;
        assert!(
            !names.iter().any(|n| n.starts_with("hostile.")),
            "round {round}: unbound, yet {names:?}"
        );
        let call = local
            .rpc(
                "tools/call",
                json!({"name": "hostile.counter", "arguments": {}}),
            )
            .await;
        assert_eq!(call["error"]["code"], -32002, "round {round}: {call}");
    }

    // An explicit grant to the agent, and its revocation.
    operator(&server, Method::PUT, "/api/v1/units/lab", Some(json!({}))).await;
    operator(
        &server,
        Method::PUT,
        "/api/v1/units/lab/connectors/hostile",
        Some(json!({"config": {}})),
    )
    .await;
    operator(
        &server,
        Method::POST,
        "/api/v1/agents/ada/grants",
        Some(json!({"tool": "hostile.counter"})),
    )
    .await;
    let call = local
        .rpc(
            "tools/call",
            json!({"name": "hostile.counter", "arguments": {}}),
        )
        .await;
    assert_eq!(call["result"]["isError"], false, "granted: {call}");
    operator(
        &server,
        Method::DELETE,
        "/api/v1/agents/ada/grants/hostile.counter",
        None,
    )
    .await;
    let call = local
        .rpc(
            "tools/call",
            json!({"name": "hostile.counter", "arguments": {}}),
        )
        .await;
    assert_eq!(call["error"]["code"], -32002, "revoked: {call}");

    // Revoking the agent's tokens does not cut off the operator's local process.
    operator(
        &server,
        Method::POST,
        "/api/v1/agents/ada/tokens/revoke",
        None,
    )
    .await;
    let call = local
        .rpc(
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "still"}}),
        )
        .await;
    assert_eq!(
        call["result"]["structuredContent"],
        json!({"message": "still"}),
        "{call}"
    );

    // The agent deleted: its tools are gone, and the answer says why.
    operator(&server, Method::DELETE, "/api/v1/agents/ada", None).await;
    let list = local.rpc("tools/list", json!({})).await;
    let message = list["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("agent `ada` no longer exists"),
        "after the agent was deleted: {list}"
    );
    local.finish().await;
}

/// The agent must exist, the database must be there, and the id must be one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_agent_or_a_missing_database_is_refused() {
    let run = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(host_binary())
            .args(&args)
            .env("RUST_LOG", "warn")
            .env_remove("CONNECTOR_HOST_OPERATOR_TOKEN")
            .env_remove("CONNECTOR_HOST_DATA_DIR")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .expect("connector-host mcp exits")
            .expect("run connector-host mcp");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    prepare(&server).await;
    let data = dir.path().display().to_string();

    let (code, stdout, stderr) = run(vec![
        "mcp".into(),
        "--agent".into(),
        "nobody".into(),
        "--data-dir".into(),
        data.clone(),
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.is_empty(), "stdout carries only JSON-RPC: {stdout}");
    assert!(
        stderr.contains("no agent `nobody`") && stderr.contains("agents put nobody"),
        "{stderr}"
    );

    let empty = tempfile::tempdir().expect("temp dir");
    let (code, _, stderr) = run(vec![
        "mcp".into(),
        "--agent".into(),
        "ada".into(),
        "--local".into(),
        "--data-dir".into(),
        empty.path().display().to_string(),
    ])
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no host database at"), "{stderr}");
    assert!(
        std::fs::read_dir(empty.path())
            .expect("dir")
            .next()
            .is_none(),
        "a refused start left files behind"
    );

    let (code, _, stderr) = run(vec![
        "mcp".into(),
        "--agent".into(),
        "../ada".into(),
        "--data-dir".into(),
        data,
    ])
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("agent id `../ada` is invalid"), "{stderr}");
}

/// Starting and serving leaves the database as it was: no write at start (no bundled
/// installs, no delivery claims), no operator-token file, and `serve` sees no change made
/// by another process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_process_leaves_the_database_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    prepare(&server).await;
    let url = format!("sqlite://{}", dir.path().join("host.db").display());
    let store = tokio::task::spawn_blocking(move || connector_store::open_store(&url))
        .await
        .expect("opening finished")
        .expect("open the database");
    let before = store.changes_since(0).await.expect("state version").version;

    let mut local = StdioServer::local(dir.path(), "ada");
    local.initialize("2025-11-25").await;
    local.echo().await;
    local.finish().await;

    let after = store.changes_since(0).await.expect("state version").version;
    assert_eq!(before, after, "the local process changed the stored state");
    assert!(
        !dir.path().join("operator-token").exists(),
        "the local process wrote an operator token beside a server configured with one"
    );
}

/// Each call the local process answers has its audit record committed by then, in the
/// one chain `serve` appends to beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_local_call_is_answered_after_its_record_is_in_the_chain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    prepare(&server).await;
    let records = |query: &'static str| {
        let url = format!("{}/api/v1/audit{query}", server.url);
        async move {
            let answer: Value = reqwest::Client::new()
                .get(url)
                .bearer_auth(OPERATOR_TOKEN)
                .send()
                .await
                .expect("GET /audit")
                .json()
                .await
                .expect("JSON answer");
            answer
        }
    };
    let calls = |page: &Value| page["records"].as_array().map_or(0, Vec::len);
    let query = "?action=tool.call&actorKind=agent&actorId=ada";
    let before = calls(&records(query).await);

    let mut local = StdioServer::local(dir.path(), "ada");
    local.initialize("2025-11-25").await;
    for round in 1..=3 {
        local.echo().await;
        // Read through `serve` the moment the answer is out: the record is there.
        let page = records(query).await;
        assert_eq!(calls(&page), before + round, "round {round}: {page}");
        let last = &page["records"][before + round - 1];
        assert_eq!(last["target"], "tool:acme.echo", "{last}");
        assert_eq!(last["outcome"], "ok", "{last}");
        // `serve` appends to the same chain between the local process's records.
        let unit = format!("/api/v1/units/round-{round}");
        operator(&server, Method::PUT, &unit, Some(json!({}))).await;
    }
    local.finish().await;
    let verdict = records("/verify").await;
    assert_eq!(verdict["ok"], true, "{verdict}");
}

/// The bridge keeps working with `--url` (and is still the default without --local).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_still_answers_with_a_url() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    let token = prepare(&server).await;
    let mut command = tokio::process::Command::new(host_binary());
    command.args([
        "mcp",
        "--agent",
        "ada",
        "--url",
        &server.url,
        "--token",
        &token,
    ]);
    let mut bridge = StdioServer::spawn(command);
    let mut local = StdioServer::local(dir.path(), "ada");
    bridge.initialize("2025-06-18").await;
    local.initialize("2025-06-18").await;
    for (method, params) in [
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "bridged"}}),
        ),
    ] {
        let bridged = bridge.rpc(method, params.clone()).await;
        let answered_here = local.rpc(method, params.clone()).await;
        assert!(bridged.get("result").is_some(), "{bridged}");
        assert_eq!(outcome(&bridged), outcome(&answered_here), "{method}");
    }
    bridge.finish().await;
    local.finish().await;
}

/// The official MCP Python SDK drives the local stdio server (`client_check.py` with
/// `--stdio-data-dir`): every check of the bridge's stdio leg, list changes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdk_drives_the_local_stdio_server() {
    let found = tokio::task::spawn_blocking(crate::mcp::python_with_mcp)
        .await
        .expect("join");
    let Some(python) = integration_tests::harness::required("the MCP Python SDK", found) else {
        return;
    };
    let (h, token) = crate::mcp::setup_with_rich().await;
    let mut python = tokio::process::Command::new(python);
    python.env("PYTHONUNBUFFERED", "1");
    let data_dir = h.data_dir.path().display().to_string();
    crate::mcp::run_sdk_check_with(
        python,
        "client_check.py",
        &h,
        &token,
        &["--stdio-data-dir", &data_dir],
    )
    .await;
}
