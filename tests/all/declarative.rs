//! Declarative connectors end to end (CONTRACT §8): manifests packed by the real
//! `connector-host pack`, installed into a real `connector-host serve` process (configured
//! with a TOML file), bound, called, and fed webhooks. What they call are real HTTP
//! servers on 127.0.0.1 that enforce their protocol: a fake GitHub REST API and a fake
//! GitHub App token endpoint (`integration_tests::fake_api`, `fake_github`), a Notes API
//! implementing an OpenAPI document, an MCP server on the official Python SDK, and an API
//! and MCP server that echo their credential back encoded (`fake_echo`).
//!
//! - the two reference examples (`connectors/examples/`): `github-file` (settings, a
//!   secret token that never comes back) and `github-pr` (binding parameters, host-minted
//!   installation tokens, signed webhooks routed by CEL filters);
//! - the `openapi` and `mcp` backends;
//! - manifests `pack` must refuse, with a position and a field path;
//! - rotating a packed connector under a binding;
//! - a secret setting an API (and an MCP server) gives back encoded: base64 at every
//!   alignment, `Basic` credentials, hex, percent-encoding; never in any answer.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use connector_host::webhooks::verify::github_signature;
use integration_tests::fake_api::{
    base64_encode, FakeGithubRest, FakeNotes, FakeStatus, Recorded, TokenCheck,
};
use integration_tests::fake_echo::{self, percent_every_byte, FakeEcho};
use integration_tests::fake_github::FakeGithub;
use integration_tests::harness::{
    error_code, free_port, host_binary, machine_load, required, send_github_webhook, tool_names,
    ServerProcess, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

/// The largest packed component we accept (the interpreter plus a plan).
const MAX_PACKED_BYTES: u64 = 2 * 1024 * 1024;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

pub(crate) fn example(name: &str) -> PathBuf {
    workspace().join("connectors/examples").join(name)
}

fn fixture(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/declarative").join(name)
}

fn github_key(name: &str) -> PathBuf {
    workspace().join("tests/fixtures/github").join(name)
}

// ---------------------------------------------------------------------------------------
// pack
// ---------------------------------------------------------------------------------------

/// What one `connector-host pack` run did.
struct PackRun {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `connector-host pack MANIFEST -o OUT EXTRA...`.
async fn run_pack(manifest: &Path, out: &Path, extra: &[&str]) -> PackRun {
    let run = tokio::process::Command::new(host_binary())
        .arg("pack")
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .args(extra)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("pack {} did not finish in 2 minutes", manifest.display()))
        .unwrap_or_else(|e| panic!("cannot run connector-host pack: {e}"));
    PackRun {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Packs `manifest` into `dir`, asserting success and the size bound; the component bytes.
pub(crate) async fn pack(manifest: &Path, dir: &Path, extra: &[&str]) -> Vec<u8> {
    let name = manifest.file_stem().unwrap().to_string_lossy().into_owned();
    let out = dir.join(format!("{name}.wasm"));
    let run = run_pack(manifest, &out, extra).await;
    assert!(
        run.ok,
        "pack {} failed:\nstdout: {}\nstderr: {}",
        manifest.display(),
        run.stdout,
        run.stderr
    );
    let size = std::fs::metadata(&out)
        .unwrap_or_else(|e| panic!("pack wrote no {}: {e}", out.display()))
        .len();
    assert!(
        size <= MAX_PACKED_BYTES,
        "{} packs into {size} bytes, more than {MAX_PACKED_BYTES}",
        manifest.display()
    );
    std::fs::read(&out).expect("packed component")
}

// ---------------------------------------------------------------------------------------
// A `connector-host serve` process with a TOML configuration
// ---------------------------------------------------------------------------------------

/// A real `connector-host serve --config FILE` ([`ServerProcess`]), spoken to over HTTP.
/// Every response body it sends is kept (as text), so a test can check that a secret
/// never came back.
struct Served {
    url: String,
    client: reqwest::Client,
    seen: Mutex<Vec<String>>,
    _server: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Starts the server with `toml` as its configuration file; waits for `/healthz`.
    async fn start(toml: &str) -> Served {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = ServerProcess::start_with_config(dir.path(), &[], toml).await;
        Served {
            url: server.url.clone(),
            client: reqwest::Client::new(),
            seen: Mutex::new(Vec::new()),
            _server: server,
            _dir: dir,
        }
    }

    /// A request with `token` (the operator's when `None`); (status, body text).
    async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, String) {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token.unwrap_or(OPERATOR_TOKEN));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        self.seen.lock().unwrap().push(text.clone());
        (status, text)
    }

    /// An operator request; (status, JSON body or `Null`).
    async fn op(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let (s, text) = self.raw(method, path, None, body).await;
        (s, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `GET path`, asserting 200.
    async fn get(&self, path: &str) -> Value {
        let (s, b) = self.op(Method::GET, path, None).await;
        assert_eq!(s, 200, "GET {path}: {b}");
        b
    }

    /// Installs (or rotates) a component; (status, Connector).
    async fn upload(&self, bytes: Vec<u8>) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}/api/v1/connectors", self.url))
            .bearer_auth(OPERATOR_TOKEN)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
            .await
            .expect("upload");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        self.seen.lock().unwrap().push(text.clone());
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Installs a new connector, asserting `201`.
    async fn install(&self, bytes: Vec<u8>) -> Value {
        let (s, b) = self.upload(bytes).await;
        assert_eq!(s, 201, "install: {b}");
        b
    }

    async fn unit(&self, id: &str) {
        let (s, b) = self
            .op(
                Method::PUT,
                &format!("/api/v1/units/{id}"),
                Some(json!({"parent": null})),
            )
            .await;
        assert!(s == 201 || s == 200, "PUT unit {id}: {s} {b}");
    }

    async fn agent(&self, id: &str, units: &[&str]) {
        let (s, b) = self
            .op(
                Method::PUT,
                &format!("/api/v1/agents/{id}"),
                Some(json!({"units": units})),
            )
            .await;
        assert!(s == 201 || s == 200, "PUT agent {id}: {s} {b}");
    }

    async fn bind(&self, unit: &str, slug: &str, config: Value) -> Value {
        let (s, b) = self
            .op(
                Method::PUT,
                &format!("/api/v1/units/{unit}/connectors/{slug}"),
                Some(json!({"config": config})),
            )
            .await;
        assert!(s == 201 || s == 200, "bind {slug} to {unit}: {s} {b}");
        b
    }

    async fn call(&self, agent: &str, tool: &str, arguments: Value) -> (u16, Value) {
        self.op(
            Method::POST,
            &format!("/api/v1/agents/{agent}/tool-calls"),
            Some(json!({"tool": tool, "arguments": arguments})),
        )
        .await
    }

    /// A call that must succeed; its `{"result", "content"}` body.
    async fn call_ok(&self, agent: &str, tool: &str, arguments: Value) -> Value {
        let (s, b) = self.call(agent, tool, arguments.clone()).await;
        assert_eq!(s, 200, "{tool} {arguments}: {b}");
        b
    }

    async fn agent_token(&self, agent: &str) -> String {
        let (s, b) = self
            .op(
                Method::POST,
                &format!("/api/v1/agents/{agent}/tokens"),
                Some(json!({})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        b["token"].as_str().expect("token").to_string()
    }

    async fn inbox(&self, unit: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/units/{unit}/messages")).await["messages"]
            .as_array()
            .expect("messages")
            .clone()
    }

    /// Asserts that no response body this server sent so far contains `secret`.
    fn assert_never_sent(&self, secret: &str, what: &str) {
        let seen = self.seen.lock().unwrap();
        assert!(seen.len() > 5, "only {} responses were checked", seen.len());
        for body in seen.iter() {
            assert!(
                !body.contains(secret),
                "{what} came back in a response: {body}"
            );
        }
    }
}

/// The text content blocks of a tool-call answer, concatenated.
fn text_of(answer: &Value) -> String {
    answer["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

/// The tool named `name` in a JSON array of tools.
fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools}"))
}

/// The property names of a JSON Schema object, sorted.
fn properties(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The `required` list of a schema, sorted.
fn required_of(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["required"]
        .as_array()
        .map(|r| r.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The one request a fake got since `before` requests, asserting there is exactly one.
fn only_new(all: Vec<Recorded>, before: usize) -> Recorded {
    let new = &all[before..];
    assert_eq!(new.len(), 1, "expected one request, got {new:#?}");
    new[0].clone()
}

// ---------------------------------------------------------------------------------------
// github-file
// ---------------------------------------------------------------------------------------

const PAT: &str = "ghp_DeclarativeFileToken0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_file_example_reads_and_writes_through_the_contents_api() {
    let dir = tempfile::tempdir().unwrap();
    let component = pack(
        &example("github-file.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;

    let token_ok: TokenCheck = Arc::new(|t: &str| t == PAT);
    let gh = FakeGithubRest::start(token_ok).await;
    gh.add_repo("octo-org", "docs-site");
    gh.put_file("octo-org", "docs-site", "main", "README.md", b"# Docs\n");
    gh.put_file(
        "octo-org",
        "docs-site",
        "main",
        "guides/getting started.md",
        b"Start here.\n",
    );

    let host = Served::start(
        r#"
[connectors.gh-file]
allow_private_networks = true
"#,
    )
    .await;
    let connector = host.install(component).await;
    assert_eq!(connector["slug"], "gh-file", "{connector}");
    assert_eq!(connector["toolNamespace"], "engineering");
    assert_eq!(connector["displayName"], "gh-file");
    assert_eq!(
        connector["description"],
        "Reads and writes files in a GitHub repository."
    );
    assert_eq!(connector["webhook"], Value::Null);
    let hosts = &connector["allowedHosts"];
    assert!(
        hosts.as_array().unwrap().contains(&json!("api.github.com"))
            && hosts.as_array().unwrap().contains(&json!("127.0.0.1")),
        "the default API host and --allow-host: {hosts}"
    );
    assert_eq!(
        tool_names(&connector["tools"]),
        ["engineering.read_file", "engineering.write_file"]
    );

    // Settings are binding config; the token is write-only; the API URL has a default.
    let schema = &connector["configSchema"];
    assert_eq!(
        properties(schema),
        [
            "github.api_url",
            "github.owner",
            "github.repo",
            "github.token"
        ],
        "{schema}"
    );
    assert_eq!(schema["properties"]["github.token"]["writeOnly"], true);
    assert_eq!(
        schema["properties"]["github.api_url"]["default"],
        "https://api.github.com"
    );
    assert_eq!(
        required_of(schema),
        ["github.owner", "github.repo", "github.token"]
    );

    // Tools: root parameters merged into each, the action's own added.
    let read = tool(&connector["tools"], "engineering.read_file");
    assert_eq!(properties(&read["inputSchema"]), ["branch", "path"]);
    assert_eq!(required_of(&read["inputSchema"]), ["path"]);
    assert_eq!(
        read["inputSchema"]["properties"]["branch"]["default"],
        "main"
    );
    assert_eq!(read["annotations"]["readOnlyHint"], true, "{read}");
    assert_eq!(read["annotations"]["idempotentHint"], true);
    assert_eq!(read["annotations"]["openWorldHint"], true);
    let write = tool(&connector["tools"], "engineering.write_file");
    assert_eq!(
        properties(&write["inputSchema"]),
        ["branch", "content", "path"]
    );
    assert_eq!(required_of(&write["inputSchema"]), ["content", "path"]);
    assert_eq!(write["annotations"]["readOnlyHint"], false, "{write}");
    assert_eq!(write["annotations"]["idempotentHint"], true, "PUT");
    assert_eq!(write["annotations"]["destructiveHint"], false);

    host.unit("docs").await;
    host.agent("ada", &["docs"]).await;
    let binding = host
        .bind(
            "docs",
            "gh-file",
            json!({
                "github.token": PAT,
                "github.owner": "octo-org",
                "github.repo": "docs-site",
                "github.api_url": gh.url(),
            }),
        )
        .await;
    assert_eq!(binding["config"]["github.token"], "***", "{binding}");
    assert_eq!(binding["config"]["github.owner"], "octo-org");

    // read_file: GET …/contents/{path} with the token and the raw media type.
    let before = gh.requests().len();
    let answer = host
        .call_ok("ada", "engineering.read_file", json!({"path": "README.md"}))
        .await;
    assert_eq!(text_of(&answer), "# Docs\n", "{answer}");
    let r = only_new(gh.requests(), before);
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/repos/octo-org/docs-site/contents/README.md");
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {PAT}")));
    assert_eq!(r.header("accept"), Some("application/vnd.github.v3.raw"));

    // A path with a folder and a space: `/` kept, the space percent-encoded.
    let before = gh.requests().len();
    let answer = host
        .call_ok(
            "ada",
            "engineering.read_file",
            json!({"path": "guides/getting started.md"}),
        )
        .await;
    assert_eq!(text_of(&answer), "Start here.\n", "{answer}");
    let r = only_new(gh.requests(), before);
    assert_eq!(
        r.path,
        "/repos/octo-org/docs-site/contents/guides/getting%20started.md"
    );

    // `..` in a path never reaches the API.
    let before = gh.requests().len();
    let (s, b) = host
        .call(
            "ada",
            "engineering.read_file",
            json!({"path": "../../orgs/octo-org"}),
        )
        .await;
    assert_eq!((s, error_code(&b)), (422, "invalid_arguments"), "{b}");
    assert_eq!(gh.requests().len(), before, "{:#?}", gh.requests());

    // write_file: PUT with message, content and the default branch.
    let content = base64_encode(b"Hello from an agent.\n");
    let before = gh.requests().len();
    let answer = host
        .call_ok(
            "ada",
            "engineering.write_file",
            json!({"path": "notes/new file.md", "content": content}),
        )
        .await;
    assert_eq!(
        answer["result"]["content"]["path"], "notes/new file.md",
        "{answer}"
    );
    assert_eq!(
        answer["result"]["commit"]["message"],
        "Update notes/new file.md"
    );
    let r = only_new(gh.requests(), before);
    assert_eq!(r.method, "PUT");
    assert_eq!(
        r.path,
        "/repos/octo-org/docs-site/contents/notes/new%20file.md"
    );
    assert_eq!(r.header("authorization"), Some(&*format!("Bearer {PAT}")));
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "a JSON body is labelled as JSON: {:?}",
        r.headers
    );
    assert_eq!(
        r.json(),
        json!({"message": "Update notes/new file.md", "content": content, "branch": "main"})
    );
    assert_eq!(
        gh.file("octo-org", "docs-site", "main", "notes/new file.md")
            .as_deref(),
        Some(&b"Hello from an agent.\n"[..])
    );

    // Another branch, then the file read back.
    let before = gh.requests().len();
    host.call_ok(
        "ada",
        "engineering.write_file",
        json!({"path": "CHANGELOG.md", "content": base64_encode(b"v2\n"), "branch": "dev"}),
    )
    .await;
    assert_eq!(only_new(gh.requests(), before).json()["branch"], "dev");
    assert_eq!(
        gh.file("octo-org", "docs-site", "dev", "CHANGELOG.md")
            .as_deref(),
        Some(&b"v2\n"[..])
    );
    let answer = host
        .call_ok(
            "ada",
            "engineering.read_file",
            json!({"path": "notes/new file.md"}),
        )
        .await;
    assert_eq!(text_of(&answer), "Hello from an agent.\n");
    // read_file reads the branch it is given (`?ref=`).
    let before = gh.requests().len();
    let answer = host
        .call_ok(
            "ada",
            "engineering.read_file",
            json!({"path": "CHANGELOG.md", "branch": "dev"}),
        )
        .await;
    assert_eq!(text_of(&answer), "v2\n", "{answer}");
    assert_eq!(
        only_new(gh.requests(), before).query.as_deref(),
        Some("ref=dev")
    );

    // GitHub's refusals pass through as tool failures with the status and its message.
    let (s, b) = host
        .call(
            "ada",
            "engineering.write_file",
            json!({"path": "README.md", "content": base64_encode(b"x")}),
        )
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    let message = b["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("422") && message.contains("sha"),
        "{message}"
    );
    let (s, b) = host
        .call("ada", "engineering.read_file", json!({"path": "nope.md"}))
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("404"),
        "{b}"
    );

    // An API that echoes the Authorization header back: the token is masked in results
    // and in errors.
    gh.echo_authorization(true);
    let answer = host
        .call_ok(
            "ada",
            "engineering.write_file",
            json!({"path": "echo.md", "content": base64_encode(b"e")}),
        )
        .await;
    assert_eq!(
        answer["result"]["request_authorization"], "Bearer ***",
        "{answer}"
    );
    let (s, b) = host
        .call(
            "ada",
            "engineering.read_file",
            json!({"path": "missing.md"}),
        )
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer ***"),
        "the echo is in the error, masked: {b}"
    );
    gh.echo_authorization(false);

    // A token GitHub refuses is `unauthorized`.
    host.unit("stale").await;
    host.agent("bob", &["stale"]).await;
    host.bind(
        "stale",
        "gh-file",
        json!({"github.token": "ghp_revoked", "github.owner": "octo-org",
               "github.repo": "docs-site", "github.api_url": gh.url()}),
    )
    .await;
    let (s, b) = host
        .call("bob", "engineering.read_file", json!({"path": "README.md"}))
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert_eq!(b["error"]["details"]["reason"], "unauthorized", "{b}");

    // Every view of the connector and the binding, then: the token never came back.
    host.get("/api/v1/connectors").await;
    host.get("/api/v1/connectors/gh-file").await;
    host.get("/api/v1/units/docs").await;
    host.get("/api/v1/units/docs/connectors").await;
    host.get("/api/v1/units/docs/tools").await;
    host.get("/api/v1/agents/ada/tools").await;
    let (s, _) = host
        .op(
            Method::POST,
            "/api/v1/agents/ada/tool-calls",
            Some(json!({"tool": "sv.tools.list", "arguments": {}})),
        )
        .await;
    assert_eq!(s, 200);
    host.assert_never_sent(PAT, "the GitHub token");
}

// ---------------------------------------------------------------------------------------
// github-pr
// ---------------------------------------------------------------------------------------

const APP_ID: &str = "1012345";
const WEB_INSTALLATION: u64 = 48213907;
const API_INSTALLATION: u64 = 51002;
const WEBHOOK_SECRET: &str = "It's a Secret to Everybody";

/// github-pr packed and a host for it: a fake GitHub App (installations registered) that
/// mints tokens, a fake GitHub REST API that accepts only those tokens, and a served host
/// with the App configured. `github_app` is the operator's switch for `gh-pr`.
struct PrSetup {
    app: Arc<FakeGithub>,
    gh: FakeGithubRest,
    host: Served,
    _dir: tempfile::TempDir,
}

async fn github_pr_setup(installations: &[u64], github_app: bool) -> PrSetup {
    let dir = tempfile::tempdir().unwrap();
    let component = pack(
        &example("github-pr.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    let public = std::fs::read_to_string(github_key("app-public.pem")).unwrap();
    let app = Arc::new(FakeGithub::start(&public, APP_ID).await);
    for id in installations {
        app.register(*id);
    }
    let minted = app.clone();
    let token_ok: TokenCheck =
        Arc::new(move |t: &str| minted.issued_tokens().iter().any(|i| i == t));
    let gh = FakeGithubRest::start(token_ok).await;
    let host = Served::start(&format!(
        r#"
[github_app]
app_id = "{APP_ID}"
private_key_path = "{key}"
api_url = "{api}"

[connectors.gh-pr]
allow_private_networks = true
github_app = {github_app}
webhook_secrets = ["{WEBHOOK_SECRET}"]
"#,
        key = github_key("app-key-pkcs1.pem").display(),
        api = app.url(),
    ))
    .await;
    let installed = host.install(component).await;
    assert_eq!(installed["slug"], "gh-pr", "{installed}");
    PrSetup {
        app,
        gh,
        host,
        _dir: dir,
    }
}

fn issue_comment(owner: &str, repo: &str, action: &str, on_pr: bool, body: &str) -> Vec<u8> {
    let mut issue = json!({
        "number": 42,
        "title": "Add a changelog",
        "state": "open",
        "user": {"login": "mona"},
    });
    if on_pr {
        issue["pull_request"] = json!({
            "url": format!("https://api.github.com/repos/{owner}/{repo}/pulls/42"),
            "html_url": format!("https://github.com/{owner}/{repo}/pull/42"),
        });
    }
    serde_json::to_vec(&json!({
        "action": action,
        "issue": issue,
        "comment": {"id": 1001, "body": body, "user": {"login": "octocat"}},
        "repository": {
            "name": repo,
            "full_name": format!("{owner}/{repo}"),
            "owner": {"login": owner},
        },
        "sender": {"login": "octocat"},
        "installation": {"id": WEB_INSTALLATION},
    }))
    .unwrap()
}

fn review(owner: &str, repo: &str, state: &str, body: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "submitted",
        "review": {"id": 77, "body": body, "state": state, "user": {"login": "hubot"}},
        "pull_request": {"number": 7, "title": "Faster builds", "user": {"login": "mona"}},
        "repository": {
            "name": repo,
            "full_name": format!("{owner}/{repo}"),
            "owner": {"login": owner},
        },
        "sender": {"login": "hubot"},
    }))
    .unwrap()
}

fn routed(answer: &Value) -> Vec<String> {
    let mut units: Vec<String> = answer["routedTo"]
        .as_array()
        .unwrap_or_else(|| panic!("no routedTo in {answer}"))
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    units.sort();
    units
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_pr_example_uses_installation_tokens_and_routes_signed_webhooks() {
    let PrSetup {
        app,
        gh,
        host,
        _dir,
    } = github_pr_setup(&[WEB_INSTALLATION, API_INSTALLATION], true).await;
    gh.add_repo("octo-org", "hello-world");
    gh.add_repo("octo-org", "api-server");
    gh.add_pull("octo-org", "hello-world", "Fix the README", "dev");
    let connector = host.get("/api/v1/connectors/gh-pr").await;
    assert_eq!(connector["toolNamespace"], "tools", "{connector}");
    assert_eq!(
        connector["webhook"],
        json!({"scheme": "github-hmac-sha256"})
    );
    assert_eq!(
        tool_names(&connector["tools"]),
        ["tools.create_pr", "tools.list_prs"]
    );

    // owner/repo (require_binding) and the installation are binding config …
    let schema = &connector["configSchema"];
    assert_eq!(
        properties(schema),
        ["api_url", "installationId", "owner", "repo"],
        "the webhook secret is the operator's, not binding config: {schema}"
    );
    assert_eq!(
        required_of(schema),
        ["installationId", "owner", "repo"],
        "{schema}"
    );
    assert_eq!(
        schema["properties"]["installationId"]["x-github-installation"],
        true
    );
    assert_eq!(schema["properties"]["installationId"]["type"], "integer");
    assert!(
        schema["properties"]["owner"]
            .get("require_binding")
            .is_none(),
        "{schema}"
    );
    // … and in no tool's input.
    let create = tool(&connector["tools"], "tools.create_pr");
    assert_eq!(
        properties(&create["inputSchema"]),
        ["base", "body", "head", "title"]
    );
    assert_eq!(
        required_of(&create["inputSchema"]),
        ["base", "body", "head", "title"]
    );
    let list = tool(&connector["tools"], "tools.list_prs");
    assert_eq!(properties(&list["inputSchema"]), Vec::<String>::new());
    assert_eq!(list["annotations"]["readOnlyHint"], true, "{list}");

    for unit in ["web", "api", "elsewhere"] {
        host.unit(unit).await;
    }
    host.agent("dev", &["web"]).await;
    host.agent("ops", &["api"]).await;
    host.bind(
        "web",
        "gh-pr",
        json!({"owner": "octo-org", "repo": "hello-world",
               "installationId": WEB_INSTALLATION, "api_url": gh.url()}),
    )
    .await;
    host.bind(
        "api",
        "gh-pr",
        json!({"owner": "octo-org", "repo": "api-server",
               "installationId": API_INSTALLATION, "api_url": gh.url()}),
    )
    .await;
    host.bind(
        "elsewhere",
        "gh-pr",
        json!({"owner": "someone", "repo": "else",
               "installationId": WEB_INSTALLATION, "api_url": gh.url()}),
    )
    .await;
    let (s, b) = host
        .op(
            Method::PUT,
            "/api/v1/units/elsewhere/connectors/gh-pr",
            Some(json!({"config": {"owner": "someone", "installationId": WEB_INSTALLATION}})),
        )
        .await;
    assert_eq!(
        (s, error_code(&b)),
        (422, "invalid_config"),
        "repo is required: {b}"
    );

    // The effective tools over HTTP and over MCP: no binding parameter in sight.
    for t in host.get("/api/v1/agents/dev/tools").await["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["namespace"] == "tools")
    {
        let names = properties(&t["inputSchema"]);
        for hidden in ["owner", "repo", "installationId", "api_url"] {
            assert!(!names.contains(&hidden.to_string()), "{t}");
        }
    }
    let token = host.agent_token("dev").await;
    let mcp = crate::mcp::Mcp::open(&host.url, "dev", &token, "2025-06-18").await;
    let listed = mcp.rpc("tools/list", json!({})).await;
    let listed = &listed["result"]["tools"];
    for name in ["tools.create_pr", "tools.list_prs"] {
        let t = tool(listed, name);
        let names = properties(&t["inputSchema"]);
        for hidden in ["owner", "repo", "installationId", "api_url"] {
            assert!(!names.contains(&hidden.to_string()), "MCP {name}: {t}");
        }
    }

    // list_prs with a token the host minted for the binding's installation.
    let before = gh.requests().len();
    let answer = host.call_ok("dev", "tools.list_prs", json!({})).await;
    let prs = answer["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(prs.len(), 1, "{answer}");
    assert_eq!(prs[0]["title"], "Fix the README");
    let r = only_new(gh.requests(), before);
    assert_eq!(r.method, "GET");
    assert_eq!(r.path, "/repos/octo-org/hello-world/pulls");
    let sent = r.header("authorization").unwrap().to_string();
    let web_token = sent.strip_prefix("Bearer ").expect("a bearer token");
    assert!(web_token.starts_with("ghs_"), "{sent}");
    assert_eq!(app.exchanges(), 1);
    assert_eq!(app.requests()[0].installation_id, WEB_INSTALLATION);

    // create_pr from the other unit: its own repository and installation.
    let before = gh.requests().len();
    let answer = host
        .call_ok(
            "ops",
            "tools.create_pr",
            json!({"title": "Add health checks", "body": "Adds /healthz.",
                   "head": "dev", "base": "main"}),
        )
        .await;
    assert_eq!(answer["result"]["title"], "Add health checks", "{answer}");
    assert!(answer["result"]["number"].is_u64(), "{answer}");
    let r = only_new(gh.requests(), before);
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/repos/octo-org/api-server/pulls");
    assert_eq!(
        r.json(),
        json!({"title": "Add health checks", "body": "Adds /healthz.", "head": "dev", "base": "main"})
    );
    let api_token = r.header("authorization").unwrap().to_string();
    assert_ne!(api_token, sent, "each installation has its own token");
    assert_eq!(app.exchanges(), 2);
    assert_eq!(app.requests()[1].installation_id, API_INSTALLATION);

    // The token is cached by the host; GitHub's validation errors pass through.
    let before = gh.requests().len();
    host.call_ok("dev", "tools.list_prs", json!({})).await;
    assert_eq!(
        only_new(gh.requests(), before).header("authorization"),
        Some(&*sent)
    );
    assert_eq!(app.exchanges(), 2, "served from the host's cache");
    let (s, b) = host
        .call(
            "dev",
            "tools.create_pr",
            json!({"title": "t", "body": "b", "head": "no-such-branch", "base": "main"}),
        )
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Validation Failed"),
        "{b}"
    );
    // owner/repo come from the binding: an argument cannot redirect the call.
    let (s, b) = host
        .call(
            "dev",
            "tools.list_prs",
            json!({"owner": "octo-org", "repo": "api-server"}),
        )
        .await;
    assert_eq!((s, error_code(&b)), (422, "invalid_arguments"), "{b}");

    // A minted token echoed back by the API is masked.
    gh.echo_authorization(true);
    let answer = host.call_ok("dev", "tools.list_prs", json!({})).await;
    let echoed = answer["result"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| p["request_authorization"].as_str())
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(echoed, "Bearer ***", "{answer}");
    gh.echo_authorization(false);

    // Webhooks: signed deliveries reach exactly the units whose owner/repo match.
    let send = |event: &'static str, id: &'static str, body: Vec<u8>| {
        let client = host.client.clone();
        let url = host.url.clone();
        async move {
            send_github_webhook(&client, &url, "gh-pr", event, id, &body, WEBHOOK_SECRET).await
        }
    };
    let (s, b) = send(
        "issue_comment",
        "d-1",
        issue_comment(
            "octo-org",
            "hello-world",
            "created",
            true,
            "Looks good to me",
        ),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(routed(&b), ["web"], "{b}");

    let (s, b) = send(
        "pull_request_review",
        "d-2",
        review("octo-org", "api-server", "approved", "Ship it"),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(routed(&b), ["api"], "{b}");

    // An event of a repository nobody bound reaches nobody.
    let (s, b) = send(
        "issue_comment",
        "d-3",
        issue_comment("octo-org", "unbound", "created", true, "Anyone?"),
    )
    .await;
    assert_eq!((s, routed(&b)), (202, vec![]), "{b}");
    // A comment on a plain issue (no pull_request) is filtered out; so is an edit.
    let (s, b) = send(
        "issue_comment",
        "d-4",
        issue_comment("octo-org", "hello-world", "created", false, "Just an issue"),
    )
    .await;
    assert_eq!((s, routed(&b)), (202, vec![]), "{b}");
    let (s, b) = send(
        "issue_comment",
        "d-5",
        issue_comment("octo-org", "hello-world", "edited", true, "Edited"),
    )
    .await;
    assert_eq!((s, routed(&b)), (202, vec![]), "{b}");

    // Unsigned and wrongly signed deliveries are refused before anything is routed.
    let body = issue_comment("octo-org", "hello-world", "created", true, "forged");
    let (s, b) = send_github_webhook(
        &host.client,
        &host.url,
        "gh-pr",
        "issue_comment",
        "d-6",
        &body,
        "not the secret",
    )
    .await;
    assert_eq!((s, error_code(&b)), (401, "invalid_signature"), "{b}");
    let r = host
        .client
        .post(format!("{}/api/v1/webhooks/gh-pr", host.url))
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "d-7")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "unsigned");
    let r = host
        .client
        .post(format!("{}/api/v1/webhooks/gh-pr", host.url))
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", "d-8")
        .header(
            "x-hub-signature-256",
            github_signature(WEBHOOK_SECRET, b"{\"other\": \"body\"}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a signature of another body");

    // The inboxes: one rendered message each, nothing else anywhere.
    let web = host.inbox("web").await;
    assert_eq!(web.len(), 1, "{web:#?}");
    assert_eq!(web[0]["kind"], "comment");
    assert_eq!(web[0]["connector"], "gh-pr");
    assert_eq!(web[0]["deliveryId"], "d-1");
    assert_eq!(
        web[0]["payload"]["text"], "octocat commented on PR #42: Looks good to me",
        "{}",
        web[0]
    );
    let api = host.inbox("api").await;
    assert_eq!(api.len(), 1, "{api:#?}");
    assert_eq!(api[0]["kind"], "review");
    assert_eq!(
        api[0]["payload"]["text"], "hubot submitted a approved review on PR #7: Ship it",
        "{}",
        api[0]
    );
    assert!(host.inbox("elsewhere").await.is_empty());

    // No minted token came back in anything the host answered.
    for t in app.issued_tokens() {
        host.assert_never_sent(&t, "an installation token");
    }
}

// ---------------------------------------------------------------------------------------
// openapi backend
// ---------------------------------------------------------------------------------------

const NOTES_TOKEN: &str = "notes-api-token-5b1e0c";

/// Every `$ref` left anywhere in `v`.
fn has_ref(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("$ref") || m.values().any(has_ref),
        Value::Array(a) => a.iter().any(has_ref),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_operations_become_tools_that_call_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let component = pack(
        &fixture("notes.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    let notes = FakeNotes::start(NOTES_TOKEN).await;
    notes.add("Groceries", "milk, eggs", &["home"]);
    notes.add("Standup", "ship the packer", &["work"]);
    notes.add("Retro", "fewer meetings", &["work", "team"]);

    let host = Served::start(
        r#"
[connectors.notes]
allow_private_networks = true
"#,
    )
    .await;
    let connector = host.install(component).await;
    let tools = &connector["tools"];
    assert_eq!(
        tool_names(tools),
        ["notes.get_note", "notes.list_notes", "notes.create_note"]
    );
    assert!(!has_ref(tools), "every $ref resolved: {tools}");

    // Path parameter: a required argument of the operation's type; the summary describes.
    let get = tool(tools, "notes.get_note");
    assert_eq!(properties(&get["inputSchema"]), ["noteId"], "{get}");
    assert_eq!(required_of(&get["inputSchema"]), ["noteId"]);
    assert_eq!(
        get["inputSchema"]["properties"]["noteId"]["type"],
        "integer"
    );
    assert!(
        get["description"]
            .as_str()
            .unwrap()
            .contains("Reads one note"),
        "{get}"
    );
    assert_eq!(get["annotations"]["readOnlyHint"], true);
    // Query parameters (one through components/parameters): optional arguments.
    let list = tool(tools, "notes.list_notes");
    assert_eq!(properties(&list["inputSchema"]), ["limit", "tag"], "{list}");
    assert_eq!(required_of(&list["inputSchema"]), Vec::<String>::new());
    assert_eq!(list["inputSchema"]["properties"]["limit"]["maximum"], 100);
    assert_eq!(
        list["description"], "Lists the notes, newest first, optionally only those with a tag.",
        "the action's own description wins"
    );
    // The JSON request body: a `body` argument with the resolved component schema.
    let create = tool(tools, "notes.create_note");
    assert_eq!(properties(&create["inputSchema"]), ["body"], "{create}");
    assert_eq!(required_of(&create["inputSchema"]), ["body"]);
    let body_schema = &create["inputSchema"]["properties"]["body"];
    assert_eq!(
        properties(body_schema),
        ["tags", "text", "title"],
        "{body_schema}"
    );
    assert_eq!(required_of(body_schema), ["title"]);
    assert_eq!(
        body_schema["properties"]["tags"]["items"]["pattern"],
        "^[a-z]+$"
    );
    assert_eq!(create["annotations"]["readOnlyHint"], false);
    assert_eq!(create["annotations"]["idempotentHint"], false);

    host.unit("team").await;
    host.agent("ada", &["team"]).await;
    let binding = host
        .bind(
            "team",
            "notes",
            json!({"notes_url": notes.url(), "notes_token": NOTES_TOKEN}),
        )
        .await;
    assert_eq!(binding["config"]["notes_token"], "***", "{binding}");

    // Path parameter.
    let before = notes.requests().len();
    let answer = host
        .call_ok("ada", "notes.get_note", json!({"noteId": 2}))
        .await;
    assert_eq!(answer["result"]["title"], "Standup", "{answer}");
    let r = only_new(notes.requests(), before);
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/v1/notes/2"));
    assert_eq!(r.query, None);
    assert_eq!(
        r.header("authorization"),
        Some(&*format!("Bearer {NOTES_TOKEN}")),
        "the top-level openapi headers apply"
    );

    // Query parameters: present ones sent, encoded; absent ones left out.
    let before = notes.requests().len();
    let answer = host
        .call_ok(
            "ada",
            "notes.list_notes",
            json!({"tag": "work", "limit": 1}),
        )
        .await;
    let found = answer["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(found.len(), 1, "{answer}");
    assert_eq!(found[0]["title"], "Retro");
    let r = only_new(notes.requests(), before);
    assert_eq!(r.path, "/v1/notes");
    let mut pairs = r.query_pairs();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            ("limit".to_string(), "1".to_string()),
            ("tag".to_string(), "work".to_string())
        ]
    );
    let before = notes.requests().len();
    let answer = host.call_ok("ada", "notes.list_notes", json!({})).await;
    assert_eq!(
        answer["result"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
    assert_eq!(
        only_new(notes.requests(), before).query_pairs(),
        Vec::<(String, String)>::new()
    );
    let before = notes.requests().len();
    host.call_ok("ada", "notes.list_notes", json!({"tag": "a b&c=d"}))
        .await;
    assert_eq!(
        only_new(notes.requests(), before).query_pairs(),
        [("tag".to_string(), "a b&c=d".to_string())],
        "a query value is encoded as one component"
    );

    // JSON body through $ref'd schemas, and an action-level header with an agent value.
    let before = notes.requests().len();
    let new_note = json!({"title": "Release", "text": "tag v1", "tags": ["work"]});
    let answer = host
        .call_ok("ada", "notes.create_note", json!({"body": new_note}))
        .await;
    assert_eq!(answer["result"]["id"], 4, "{answer}");
    let r = only_new(notes.requests(), before);
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/notes"));
    assert_eq!(r.json(), new_note);
    assert_eq!(r.header("x-request-source"), Some("agent ada"));
    assert_eq!(
        r.header("authorization"),
        Some(&*format!("Bearer {NOTES_TOKEN}"))
    );
    let answer = host
        .call_ok("ada", "notes.get_note", json!({"noteId": 4}))
        .await;
    assert_eq!(answer["result"]["text"], "tag v1");

    // Arguments the operation's schema refuses never reach the API; the API's own
    // refusals come back as failures.
    let before = notes.requests().len();
    for (tool_id, args) in [
        ("notes.get_note", json!({"noteId": "two"})),
        ("notes.get_note", json!({})),
        ("notes.create_note", json!({"body": {"text": "no title"}})),
        ("notes.list_notes", json!({"limit": 0})),
    ] {
        let (s, b) = host.call("ada", tool_id, args.clone()).await;
        assert_eq!(
            (s, error_code(&b)),
            (422, "invalid_arguments"),
            "{tool_id} {args}: {b}"
        );
    }
    assert_eq!(notes.requests().len(), before);
    let (s, b) = host
        .call("ada", "notes.get_note", json!({"noteId": 99}))
        .await;
    assert_eq!((s, error_code(&b)), (502, "tool_failed"), "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("404"),
        "{b}"
    );
    host.assert_never_sent(NOTES_TOKEN, "the Notes token");
}

// ---------------------------------------------------------------------------------------
// mcp backend
// ---------------------------------------------------------------------------------------

const MCP_TOKEN: &str = "mcp-server-token-9d41";

/// The Python SDK server of `tests/fixtures/declarative/mcp_server.py`, killed on drop.
struct PyServer {
    child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl PyServer {
    async fn start(python: &Path, dir: &Path) -> PyServer {
        let port = free_port();
        let log = dir.join("headers.jsonl");
        let err = dir.join("server.err");
        let mut child = tokio::process::Command::new(python)
            .arg(fixture("mcp_server.py"))
            .arg(port.to_string())
            .arg(&log)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("server.err"))
            .kill_on_drop(true)
            .spawn()
            .expect("start the Python MCP server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the Python MCP server exited ({status}): {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the Python MCP server did not listen"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        PyServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            log,
        }
    }

    /// The headers of each tool call the server got, in order: (tool, headers).
    fn calls(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("a JSON line");
                (
                    v["tool"].as_str().unwrap().to_string(),
                    v["headers"].clone(),
                )
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_backend_discovers_the_python_servers_tools_and_calls_them() {
    let found = tokio::task::spawn_blocking(crate::mcp::python_with_mcp)
        .await
        .unwrap();
    let Some(python) = required("the MCP Python SDK", found) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = PyServer::start(&python, dir.path()).await;

    // The URL is a setting without a default: pack needs to be told where the server is.
    let out = dir.path().join("no-url.wasm");
    let run = run_pack(&fixture("py-mcp.yaml"), &out, &[]).await;
    assert!(!run.ok, "packed without --mcp-url: {}", run.stdout);
    assert!(run.stderr.contains("--mcp-url"), "{}", run.stderr);
    assert!(!out.exists());

    let component = pack(
        &fixture("py-mcp.yaml"),
        dir.path(),
        &["--mcp-url", &server.url],
    )
    .await;
    assert!(
        server.calls().is_empty(),
        "discovery lists tools and calls none"
    );

    let host = Served::start(
        r#"
[connectors.py-mcp]
allow_private_networks = true
"#,
    )
    .await;
    let connector = host.install(component).await;
    let tools = &connector["tools"];
    assert_eq!(
        tool_names(tools),
        [
            "pymcp.py_echo_headers",
            "pymcp.py_add",
            "pymcp.py_shout_text",
            "pymcp.loud"
        ],
        "all the server's tools under the action's name, and one tool under its own"
    );
    assert!(
        connector["allowedHosts"]
            .as_array()
            .unwrap()
            .contains(&json!("127.0.0.1")),
        "the --mcp-url host: {connector}"
    );
    let add = tool(tools, "pymcp.py_add");
    assert_eq!(add["description"], "Adds two integers.");
    assert_eq!(properties(&add["inputSchema"]), ["a", "b"]);
    assert_eq!(required_of(&add["inputSchema"]), ["a", "b"]);
    assert_eq!(add["inputSchema"]["properties"]["a"]["type"], "integer");
    assert_eq!(add["annotations"]["readOnlyHint"], true, "{add}");
    assert_eq!(add["annotations"]["idempotentHint"], true, "{add}");
    assert_eq!(add["annotations"]["destructiveHint"], false, "{add}");
    let loud = tool(tools, "pymcp.loud");
    assert_eq!(properties(&loud["inputSchema"]), ["text"], "{loud}");
    assert_eq!(
        tool(tools, "pymcp.py_echo_headers")["annotations"]["readOnlyHint"],
        false
    );

    host.unit("lab").await;
    host.agent("ada", &["lab"]).await;
    host.bind(
        "lab",
        "py-mcp",
        json!({"mcp_url": server.url, "mcp_token": MCP_TOKEN}),
    )
    .await;
    let names = tool_names(&host.get("/api/v1/agents/ada/tools").await["tools"]);
    for id in ["pymcp.py_add", "pymcp.loud", "pymcp.py_shout_text"] {
        assert!(names.contains(&id.to_string()), "{id} in {names:?}");
    }

    let answer = host
        .call_ok("ada", "pymcp.py_add", json!({"a": 2, "b": 40}))
        .await;
    assert!(
        text_of(&answer).contains("42") || answer["result"].to_string().contains("42"),
        "{answer}"
    );
    let answer = host
        .call_ok("ada", "pymcp.loud", json!({"text": "ship it"}))
        .await;
    assert!(
        text_of(&answer).contains("SHIP IT!") || answer["result"].to_string().contains("SHIP IT!"),
        "{answer}"
    );

    // Header templates reach the server; the secret it echoes back is masked.
    let answer = host
        .call_ok("ada", "pymcp.py_echo_headers", json!({"note": "hi"}))
        .await;
    let shown = format!("{}{}", text_of(&answer), answer["result"]);
    assert!(shown.contains("Bearer ***"), "{answer}");
    assert!(shown.contains("ada"), "{answer}");
    let calls = server.calls();
    assert_eq!(
        calls.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        ["add", "Shout-Text", "echo_headers"]
    );
    for (tool_name, headers) in &calls {
        assert_eq!(
            headers["authorization"],
            format!("Bearer {MCP_TOKEN}"),
            "{tool_name}: {headers}"
        );
        assert_eq!(headers["x-agent"], "ada", "{tool_name}: {headers}");
    }

    // MCP clients of the host see the same tools.
    let token = host.agent_token("ada").await;
    let mcp = crate::mcp::Mcp::open(&host.url, "ada", &token, "2025-06-18").await;
    let listed = mcp.rpc("tools/list", json!({})).await;
    let listed = tool_names(&listed["result"]["tools"]);
    assert!(
        listed.contains(&"pymcp.py_echo_headers".to_string()),
        "{listed:?}"
    );
    let result = mcp.call("pymcp.py_add", json!({"a": 20, "b": 22})).await;
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert!(result["result"].to_string().contains("42"), "{result}");

    host.assert_never_sent(MCP_TOKEN, "the MCP server token");
}

// ---------------------------------------------------------------------------------------
// Manifests pack refuses
// ---------------------------------------------------------------------------------------

/// A manifest `pack` must refuse: its text, the lines an error may point at (1-based), a
/// field path the error must name, and a word it must mention.
struct Bad {
    name: &'static str,
    text: &'static str,
    lines: &'static [usize],
    path: &'static str,
    mentions: &'static str,
}

const BAD: &[Bad] = &[
    Bad {
        name: "unknown-key",
        text: r#"kind: "commonagents.info/v1beta2/tool"
namespace: "acme"
name: "acme-bad"
description: "An action with a key the format does not have."
actions:
  - name: ping
    description: "Pings."
    retries: 3
    execute:
      stateless_http:
        method: GET
        url: "https://example.com/ping"
"#,
        lines: &[8],
        path: "actions[0].retries",
        mentions: "retries",
    },
    Bad {
        name: "two-backends",
        text: r#"kind: "commonagents.info/v1beta2/tool"
namespace: "acme"
name: "acme-bad"
description: "An action with two backends."
actions:
  - name: ping
    description: "Pings."
    execute:
      stateless_http:
        method: GET
        url: "https://example.com/ping"
      mcp:
        url: "https://example.com/mcp"
"#,
        lines: &[8, 9, 12],
        path: "actions[0].execute",
        mentions: "mcp",
    },
    Bad {
        name: "parameter-clash",
        text: r#"kind: "commonagents.info/v1beta2/tool"
namespace: "acme"
name: "acme-bad"
description: "An action parameter named like a root parameter."
parameters:
  properties:
    path:
      type: string
actions:
  - name: ping
    description: "Pings."
    parameters:
      properties:
        path:
          type: integer
    execute:
      stateless_http:
        method: GET
        url: "https://example.com/{parameters.path}"
"#,
        lines: &[7, 12, 13, 14],
        path: "actions[0].parameters",
        mentions: "path",
    },
    Bad {
        name: "unknown-root",
        text: r#"kind: "commonagents.info/v1beta2/tool"
namespace: "acme"
name: "acme-bad"
description: "A template with a root this host does not have."
actions:
  - name: ping
    description: "Pings."
    execute:
      stateless_http:
        method: GET
        url: "https://example.com/ping"
        headers:
          X-Session: "{session.id}"
"#,
        lines: &[13],
        path: "actions[0].execute.stateless_http.headers",
        mentions: "session",
    },
    Bad {
        name: "cel-syntax",
        text: r#"kind: "commonagents.info/v1beta2/tool"
namespace: "acme"
name: "acme-bad"
description: "An event filter that is not CEL."
settings:
  properties:
    base:
      type: string
      default: "https://example.com"
actions:
  - name: ping
    description: "Pings."
    execute:
      stateless_http:
        method: GET
        url: "{settings.base}/ping"
events:
  - name: pinged
    message: "pinged: {event.payload.id}"
    receive:
      webhook:
        secret: "{settings.webhook_secret}"
        filter: "event.payload.action == 'created' &&"
"#,
        lines: &[23],
        path: "events[0].receive.webhook.filter",
        mentions: "filter",
    },
];

/// `actions[0].execute` also spelt `actions.0.execute` and `/actions/0/execute`.
fn path_spellings(path: &str) -> Vec<String> {
    let dotted = path.replace('[', ".").replace(']', "");
    let pointer = format!("/{}", dotted.replace('.', "/"));
    vec![path.to_string(), dotted, pointer]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifests_are_refused_with_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for bad in BAD {
        let manifest = dir.path().join(format!("{}.yaml", bad.name));
        std::fs::write(&manifest, bad.text).unwrap();
        let out = dir.path().join(format!("{}.wasm", bad.name));
        let run = run_pack(&manifest, &out, &["--allow-host", "127.0.0.1"]).await;
        let file = manifest.display().to_string();
        let positioned = bad
            .lines
            .iter()
            .any(|line| run.stderr.contains(&format!("{file}:{line}:")));
        let named = path_spellings(bad.path)
            .iter()
            .any(|p| run.stderr.contains(p.as_str()));
        let problems: Vec<&str> = [
            (run.ok, "pack succeeded"),
            (out.exists(), "an output file was written"),
            (!positioned, "no `file:line:` at an expected line"),
            (!named, "the field path is not named"),
            (
                !run.stderr.contains(bad.mentions),
                "the culprit is not named",
            ),
        ]
        .into_iter()
        .filter_map(|(bad, why)| bad.then_some(why))
        .collect();
        if !problems.is_empty() {
            failures.push(format!(
                "{} (lines {:?}, path {}): {}\nstderr: {}",
                bad.name,
                bad.lines,
                bad.path,
                problems.join("; "),
                run.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // Each is a mistake in an otherwise good manifest: the same text with the mistake
    // taken out packs (so the refusals above are about the mistake).
    let good = BAD[0].text.replace("    retries: 3\n", "");
    let manifest = dir.path().join("good.yaml");
    std::fs::write(&manifest, good).unwrap();
    pack(&manifest, dir.path(), &[]).await;
}

// ---------------------------------------------------------------------------------------
// Rotation
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_of_a_manifest_rotates_in_under_its_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = pack(
        &fixture("rotate-v1.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    let v2 = pack(
        &fixture("rotate-v2.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    let status = FakeStatus::start().await;
    let host = Served::start(
        r#"
[connectors.rotor]
allow_private_networks = true
"#,
    )
    .await;

    let first = host.install(v1).await;
    assert_eq!(tool_names(&first["tools"]), ["rotor.status"]);
    host.unit("ops").await;
    host.agent("ada", &["ops"]).await;
    host.bind("ops", "rotor", json!({"base_url": status.url()}))
        .await;
    let answer = host.call_ok("ada", "rotor.status", json!({})).await;
    assert_eq!(answer["result"]["status"], "ok", "{answer}");

    let (s, second) = host.upload(v2).await;
    assert_eq!(s, 200, "a rotation: {second}");
    assert_ne!(first["digest"], second["digest"]);
    assert_ne!(
        first["version"], second["version"],
        "the default version follows the manifest"
    );
    assert_eq!(
        tool_names(&second["tools"]),
        ["rotor.status", "rotor.restart"]
    );
    assert_eq!(
        tool(&second["tools"], "rotor.status")["description"],
        "Reads the service status (now with uptime)."
    );

    // The binding survived, with its config and grant; the new tool is the unit's.
    let bindings = host.get("/api/v1/units/ops/connectors").await;
    let binding = &bindings["bindings"][0];
    assert_eq!(binding["connector"], "rotor", "{bindings}");
    assert_eq!(binding["config"]["base_url"], status.url());
    assert_eq!(binding["grants"][0]["tool"], "rotor.*", "{binding}");
    let tools = host.get("/api/v1/agents/ada/tools").await;
    let restart = tool(&tools["tools"], "rotor.restart");
    assert_eq!(restart["provenance"], "connector:rotor");
    assert_eq!(
        tool(&tools["tools"], "rotor.status")["description"],
        "Reads the service status (now with uptime)."
    );
    let answer = host
        .call_ok("ada", "rotor.restart", json!({"reason": "upgrade"}))
        .await;
    assert_eq!(
        answer["result"],
        json!({"restarting": {"reason": "upgrade"}}),
        "{answer}"
    );
    let last = status.requests().pop().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("POST", "/restart")
    );
    assert_eq!(last.json(), json!({"reason": "upgrade"}));
    let connector = host.get("/api/v1/connectors/rotor").await;
    assert_eq!(connector["digest"], second["digest"]);
}

/// A version that needs a setting the existing binding does not have is refused as a
/// rotation that breaks that binding, and the old version keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_that_breaks_a_binding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = pack(
        &fixture("rotate-v1.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1"],
    )
    .await;
    let v3 = std::fs::read_to_string(fixture("rotate-v1.yaml"))
        .unwrap()
        .replace(
            "      description: \"Where the status service lives.\"",
            "      description: \"Where the status service lives.\"\n    region:\n      type: string",
        )
        .replace("/status\"", "/status?region={settings.region}\"");
    let v3_path = dir.path().join("rotate-v3.yaml");
    std::fs::write(&v3_path, v3).unwrap();
    let v3 = pack(&v3_path, dir.path(), &["--allow-host", "127.0.0.1"]).await;
    let status = FakeStatus::start().await;
    let host = Served::start("[connectors.rotor]\nallow_private_networks = true\n").await;
    let first = host.install(v1).await;
    host.unit("ops").await;
    host.agent("ada", &["ops"]).await;
    host.bind("ops", "rotor", json!({"base_url": status.url()}))
        .await;

    let (s, refused) = host.upload(v3).await;
    assert_eq!(s, 409, "{refused}");
    assert_eq!(
        error_code(&refused),
        "rotation_breaks_bindings",
        "{refused}"
    );
    assert!(
        refused.to_string().contains("ops"),
        "names the binding: {refused}"
    );
    let now = host.get("/api/v1/connectors/rotor").await;
    assert_eq!(now["digest"], first["digest"], "{now}");
    let answer = host.call_ok("ada", "rotor.status", json!({})).await;
    assert_eq!(answer["result"]["status"], "ok", "{answer}");
}

/// `auth.github()` goes through the host's guard like any connector's token request:
/// without `connectors.<slug>.github_app = true` the call fails and GitHub is never
/// asked for a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_github_is_refused_without_the_operators_github_app_grant() {
    let PrSetup {
        app,
        gh,
        host,
        _dir,
    } = github_pr_setup(&[WEB_INSTALLATION], false).await;
    gh.add_repo("octo-org", "hello-world");
    host.unit("web").await;
    host.agent("dev", &["web"]).await;
    host.bind(
        "web",
        "gh-pr",
        json!({"owner": "octo-org", "repo": "hello-world",
               "installationId": WEB_INSTALLATION, "api_url": gh.url()}),
    )
    .await;
    let before = gh.requests().len();
    let (s, b) = host.call("dev", "tools.list_prs", json!({})).await;
    assert_ne!(s, 200, "{b}");
    assert!(
        b.to_string().contains("connectors.gh-pr.github_app = true"),
        "the failure says why and what the operator can do: {b}"
    );
    assert_eq!(app.exchanges(), 0, "no token was asked of GitHub");
    assert_eq!(
        gh.requests().len(),
        before,
        "no request went out without a token"
    );
}

// ---------------------------------------------------------------------------------------
// Secrets an API gives back encoded
// ---------------------------------------------------------------------------------------

/// The echo API's key: `/` and `+` differ between base64 alphabets and change under
/// percent-encoding.
const ECHO_KEY: &str = "sk_live-Echo/Key+42~redact";

/// Strings through which `secret` could be read back: as is, percent-encoded, hex in
/// either case, and, for standard and URL-safe base64 at each of the three alignments
/// the secret can have inside longer encoded data (a `Basic` credential, a whole document),
/// the characters that the secret alone decides, which any such encoding contains.
fn encoded_forms(secret: &str) -> Vec<(String, String)> {
    let s = secret.as_bytes();
    let escaped = secret.replace('/', "%2F").replace('+', "%2B");
    let mut forms = vec![
        ("as is".to_string(), secret.to_string()),
        ("percent-encoded".into(), escaped.clone()),
        (
            "percent-encoded, lower case".into(),
            escaped.replace("%2F", "%2f").replace("%2B", "%2b"),
        ),
        ("every byte percent-encoded".into(), percent_every_byte(s)),
        ("hex".into(), fake_echo::hex(s)),
        ("upper-case hex".into(), fake_echo::hex(s).to_uppercase()),
    ];
    for before in 0..3 {
        let mut data = vec![0u8; before];
        data.extend_from_slice(s);
        let encoded = base64_encode(&data);
        let core = &encoded[(8 * before).div_ceil(6)..8 * (before + s.len()) / 6];
        forms.push((format!("base64 at alignment {before}"), core.to_string()));
        forms.push((
            format!("URL-safe base64 at alignment {before}"),
            core.replace('+', "-").replace('/', "_"),
        ));
    }
    forms
}

/// Asserts that `body` (an answer the host sent) shows `secret` in none of
/// [`encoded_forms`], line breaks inside encoded text ignored.
fn assert_hides(body: &str, secret: &str, what: &str) {
    let joined = body
        .replace("\\r", "")
        .replace("\\n", "")
        .replace(['\r', '\n'], "");
    for (form, text) in encoded_forms(secret) {
        assert!(
            !joined.contains(&text),
            "the key came back {form} ({text}) in {what}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_an_api_gives_back_encoded_never_reaches_the_agent() {
    let echo = FakeEcho::start().await;
    let dir = tempfile::tempdir().unwrap();
    let component = pack(
        &fixture("echo.yaml"),
        dir.path(),
        &["--allow-host", "127.0.0.1", "--mcp-url", &echo.mcp_url()],
    )
    .await;
    let host = Served::start(
        r#"
[connectors.echo]
allow_private_networks = true
"#,
    )
    .await;
    let connector = host.install(component).await;
    assert_eq!(
        tool_names(&connector["tools"]),
        [
            "echo.reflect",
            "echo.reflect_text",
            "echo.refuse",
            "echo.big",
            "echo.remote_reflect",
            "echo.remote_refuse"
        ]
    );
    host.unit("team").await;
    host.agent("ada", &["team"]).await;
    let binding = host
        .bind(
            "team",
            "echo",
            json!({"api_url": echo.url(), "api_key": ECHO_KEY, "mcp_url": echo.mcp_url()}),
        )
        .await;
    assert_eq!(binding["config"]["api_key"], "***", "{binding}");

    // Through the HTTP tool-call API (results, a text block, errors; from the API and
    // from a remote MCP server: every kind of content block), and through MCP.
    let reflect = host.call_ok("ada", "echo.reflect", json!({})).await;
    let reflect_text = host.call_ok("ada", "echo.reflect_text", json!({})).await;
    let (refuse_status, refuse) = host.call("ada", "echo.refuse", json!({})).await;
    let remote = host.call_ok("ada", "echo.remote_reflect", json!({})).await;
    let (remote_refuse_status, remote_refuse) =
        host.call("ada", "echo.remote_refuse", json!({})).await;
    let token = host.agent_token("ada").await;
    let mcp = crate::mcp::Mcp::open(&host.url, "ada", &token, "2025-06-18").await;
    let mut mcp_answers = Vec::new();
    for tool_id in [
        "echo.reflect",
        "echo.reflect_text",
        "echo.refuse",
        "echo.remote_reflect",
        "echo.remote_refuse",
    ] {
        mcp_answers.push((tool_id, mcp.call(tool_id, json!({})).await));
    }

    // Nothing the host answered shows the key, in any form.
    for (tool_id, answer) in &mcp_answers {
        assert_hides(
            &answer.to_string(),
            ECHO_KEY,
            &format!("the MCP answer of {tool_id}"),
        );
    }
    for body in host.seen.lock().unwrap().iter() {
        assert_hides(body, ECHO_KEY, "an HTTP answer");
    }

    // What is not the key stays.
    let result = &reflect["result"];
    assert_eq!(
        result["note"], "the request as this API saw it",
        "{reflect}"
    );
    for field in [
        "authorization",
        "basic",
        "basic_as_user",
        "key_hex",
        "key_hex_upper",
        "headers_b64",
        "authorization_b64url",
        "request_b64_wrapped",
        "query",
    ] {
        assert!(
            result[field].as_str().is_some_and(|v| v.contains("***")),
            "{field} is masked: {reflect}"
        );
    }
    assert!(
        result["basic"].as_str().unwrap().starts_with("Basic YXBpO"),
        "the credential's `api:` stays: {reflect}"
    );
    let text = text_of(&reflect_text);
    assert!(
        text.contains("note: the request as this API saw it"),
        "{reflect_text}"
    );
    assert!(text.contains("basic: Basic YXBpO"), "{reflect_text}");
    assert_eq!(
        (refuse_status, error_code(&refuse)),
        (502, "tool_failed"),
        "{refuse}"
    );
    let message = refuse["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("invalid credentials: Basic YXBpO"),
        "{refuse}"
    );
    assert!(message.contains("***"), "{refuse}");
    assert_eq!(remote["result"]["note"], "kept", "{remote}");
    let kinds: Vec<&str> = remote["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|b| b["type"].as_str()).collect())
        .unwrap_or_default();
    for kind in ["text", "resource_link", "resource", "image"] {
        assert!(
            kinds.contains(&kind),
            "a {kind} block came through: {remote}"
        );
    }
    assert_eq!(
        (remote_refuse_status, error_code(&remote_refuse)),
        (502, "tool_failed"),
        "{remote_refuse}"
    );
    assert!(
        remote_refuse.to_string().contains("refused: Basic YXBpO"),
        "{remote_refuse}"
    );
    for ((tool_id, answer), fails) in mcp_answers.iter().zip([false, false, true, false, true]) {
        assert_eq!(answer["result"]["isError"], fails, "{tool_id}: {answer}");
    }
    assert!(
        mcp_answers[3].1.to_string().contains("\"image\""),
        "{}",
        mcp_answers[3].1
    );

    // A key too short to tell apart from other text is refused when bound.
    host.unit("short").await;
    let (s, b) = host
        .op(
            Method::PUT,
            "/api/v1/units/short/connectors/echo",
            Some(json!({"config": {"api_url": echo.url(), "api_key": "k1", "mcp_url": echo.mcp_url()}})),
        )
        .await;
    assert_eq!(s, 422, "{b}");
    assert!(b.to_string().contains("at least 4 bytes"), "{b}");

    // A multi-MiB answer: redaction time grows with its size, not faster. The same calls
    // on a binding without a key (nothing to redact) are the baseline.
    let _machine = machine_load().await;
    host.unit("plain").await;
    host.agent("bob", &["plain"]).await;
    host.bind(
        "plain",
        "echo",
        json!({"api_url": echo.url(), "api_key": "", "mcp_url": echo.mcp_url()}),
    )
    .await;
    const KIB: u64 = 1024;
    let timed = |agent: &'static str, size: u64| {
        let host = &host;
        async move {
            let start = Instant::now();
            let answer = host.call_ok(agent, "echo.big", json!({"size": size})).await;
            (start.elapsed(), text_of(&answer))
        }
    };
    // The fastest of three rounds, each timing all four calls in turn, so that a load
    // from elsewhere does not fall on one of them only.
    let [mut small, mut large, mut plain_small, mut plain_large] = [Duration::MAX; 4];
    let mut text = String::new();
    for _ in 0..3 {
        plain_small = plain_small.min(timed("bob", 384 * KIB).await.0);
        small = small.min(timed("ada", 384 * KIB).await.0);
        plain_large = plain_large.min(timed("bob", 3 * 1024 * KIB).await.0);
        let (took, answer) = timed("ada", 3 * 1024 * KIB).await;
        large = large.min(took);
        text = answer;
    }
    assert!(
        text.len() > 3_000_000 && text.contains("***"),
        "{}",
        text.len()
    );
    assert_hides(&text, ECHO_KEY, "the 3 MiB answer");
    let figures = format!(
        "384 KiB: {small:?} redacted, {plain_small:?} without a secret; \
         3 MiB: {large:?} redacted, {plain_large:?} without a secret"
    );
    eprintln!("{figures}");
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    // 8 times the answer: linear work is about 8 times the time, quadratic 64 times.
    assert!(ratio < 24.0, "{ratio:.1}x for 8x the size: {figures}");
}

/// Binding a declarative GitHub connector to an installation on a host without a GitHub
/// App says what to configure, and suggests `patSecret` only for the connector whose
/// schema has it (the bundled `github`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installation_without_an_app_suggests_only_what_the_schema_has() {
    let dir = tempfile::tempdir().unwrap();
    let component = pack(&example("github-pr.yaml"), dir.path(), &[]).await;
    let host = Served::start("").await;
    host.install(component).await;
    host.unit("web").await;
    for (slug, config, suggests_pat) in [
        (
            "gh-pr",
            json!({"owner": "octo-org", "repo": "hello-world", "installationId": WEB_INSTALLATION}),
            false,
        ),
        (
            "github",
            json!({"repo": "octo-org/hello-world", "installationId": WEB_INSTALLATION}),
            true,
        ),
    ] {
        let (s, b) = host
            .op(
                Method::PUT,
                &format!("/api/v1/units/web/connectors/{slug}"),
                Some(json!({"config": config})),
            )
            .await;
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (422, Some("github_app_not_configured")),
            "{slug}: {b}"
        );
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("github_app.app_id"), "{slug}: {message}");
        assert_eq!(
            message.contains("patSecret"),
            suggests_pat,
            "{slug}: {message}"
        );
    }
}
