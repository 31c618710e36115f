//! Hosts for tests: in-process (the library behind a real TCP listener) and as a real
//! `connector-host serve` process, both spoken to over HTTP on 127.0.0.1.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use connector_host::config::HostConfig;
use connector_host::Host;
use serde_json::Value;

/// The operator token every test host uses.
pub const OPERATOR_TOKEN: &str = "test-operator-token";

/// Held by the tests that load the whole machine (floods, memory hogs, big uploads,
/// cargo builds) or time latency under a load they make themselves, so two of them never
/// overlap: on a two-core runner one such test beside another measures the other, not
/// the host. Other tests run beside them as usual.
pub async fn machine_load() -> tokio::sync::MutexGuard<'static, ()> {
    MACHINE_LOAD.lock().await
}

/// [`machine_load`] outside async code (a plain `#[test]`, `spawn_blocking`).
pub fn machine_load_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    MACHINE_LOAD.blocking_lock()
}

static MACHINE_LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The availability policy for what a test needs from outside the workspace (a
/// PostgreSQL server, a Python venv, Node and npm packages): missing, it fails the test
/// under `CI=true` (where `.ci/run` installs it), else prints a skip notice naming the
/// running test and returns `None`.
pub fn skip_or_fail<T>(what: &str, why: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{what} is required under CI=true: {why}");
    }
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    // Straight to stderr: the test harness would swallow `eprintln!` of a passing test,
    // and this skip must be seen.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!!!! SKIPPED {test} (set CI=true to fail instead): {why}\n"
    );
    None
}

/// [`skip_or_fail`] when `found` is an `Err`.
pub fn required<T>(what: &str, found: Result<T, String>) -> Option<T> {
    found.or_else(|why| skip_or_fail(what, &why).ok_or(())).ok()
}

/// A host running in this process, served on an ephemeral port.
pub struct TestHost {
    pub host: Host,
    pub url: String,
    pub client: reqwest::Client,
    pub data_dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A test configuration in `data_dir`.
pub fn test_config(data_dir: &Path) -> HostConfig {
    HostConfig {
        data_dir: data_dir.to_path_buf(),
        operator_token: Some(OPERATOR_TOKEN.into()),
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    }
}

/// The compiled-component cache test hosts share, under `target/`. Entries are keyed by
/// the component's digest and the engine's settings and written whole before they are
/// renamed into place, so hosts in any number of test processes can share it.
pub fn shared_compiled_cache() -> PathBuf {
    crate::languages::target_dir().join("test-compiled")
}

/// Makes `<data_dir>/compiled`, where a host keeps its compiled components, a link to
/// [`shared_compiled_cache`].
pub fn share_compiled_cache(data_dir: &Path) {
    let shared = shared_compiled_cache();
    std::fs::create_dir_all(&shared)
        .unwrap_or_else(|e| panic!("creating {}: {e}", shared.display()));
    let link = data_dir.join("compiled");
    std::os::unix::fs::symlink(&shared, &link)
        .unwrap_or_else(|e| panic!("linking {} to {}: {e}", link.display(), shared.display()));
}

impl TestHost {
    /// A host with the default test configuration.
    pub async fn start() -> TestHost {
        Self::start_with(|_| {}).await
    }

    /// A host whose configuration `tweak` adjusts. Its compiled-component cache is the
    /// one every test host shares ([`share_compiled_cache`]), so the bundled connectors
    /// are compiled once per build, not once per test; a test that needs a cache of its
    /// own removes `<data_dir>/compiled` (a link) in `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut HostConfig)) -> TestHost {
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(data_dir.path());
        share_compiled_cache(data_dir.path());
        tweak(&mut config);
        let (host, _) = Host::open(config).await.expect("host opens");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = host.clone();
        let server = tokio::spawn(async move {
            connector_host::server::serve_on(listener, served, std::future::pending()).await;
        });
        TestHost {
            host,
            url: format!("http://{addr}"),
            client: reqwest::Client::new(),
            data_dir,
            server,
        }
    }

    /// Makes this host's database fail at `fault` from now on (`None`: no more), as a
    /// crash or a full disk would (see `connector_store_testing::faults`).
    pub fn inject(&self, fault: Option<connector_store_testing::faults::Fault>) {
        let db = self.data_dir.path().join("host.db");
        connector_store_testing::faults::inject_sqlite(&db, fault)
            .unwrap_or_else(|e| panic!("injecting {fault:?} into {}: {e}", db.display()));
    }

    /// What this host has committed, read through a connection of its own on the host's
    /// SQLite file (as another process would see it), never through the host.
    pub fn database(&self) -> connector_store::sqlite::SqliteStore {
        let db = self.data_dir.path().join("host.db");
        connector_store::sqlite::SqliteStore::open(&db)
            .unwrap_or_else(|e| panic!("opening {}: {e}", db.display()))
    }

    /// `url` + `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// Sends a request with the operator token; returns (status, JSON body or Null).
    pub async fn op(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        send(
            &self.client,
            method,
            &self.at(path),
            Some(OPERATOR_TOKEN),
            body,
        )
        .await
    }

    /// Sends a request with `token`.
    pub async fn as_token(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        send(&self.client, method, &self.at(path), Some(token), body).await
    }

    /// Creates a unit (with an optional parent) and asserts it worked.
    pub async fn unit(&self, id: &str, parent: Option<&str>) {
        let (s, b) = self
            .op(
                reqwest::Method::PUT,
                &format!("/api/v1/units/{id}"),
                Some(serde_json::json!({"parent": parent})),
            )
            .await;
        assert!(s == 201 || s == 200, "PUT unit {id}: {s} {b}");
    }

    /// Creates an agent in `units` and asserts it worked.
    pub async fn agent(&self, id: &str, units: &[&str]) {
        let (s, b) = self
            .op(
                reqwest::Method::PUT,
                &format!("/api/v1/agents/{id}"),
                Some(serde_json::json!({"units": units})),
            )
            .await;
        assert!(s == 201 || s == 200, "PUT agent {id}: {s} {b}");
    }

    /// Binds `slug` to `unit` with `config` and asserts it worked.
    pub async fn bind(&self, unit: &str, slug: &str, config: Value) {
        let (s, b) = self
            .op(
                reqwest::Method::PUT,
                &format!("/api/v1/units/{unit}/connectors/{slug}"),
                Some(serde_json::json!({"config": config})),
            )
            .await;
        assert!(s == 201 || s == 200, "bind {slug} to {unit}: {s} {b}");
    }

    /// Calls `tool` on behalf of `agent` with the operator token; (status, JSON body).
    pub async fn call_tool(&self, agent: &str, tool: &str, arguments: Value) -> (u16, Value) {
        self.op(
            reqwest::Method::POST,
            &format!("/api/v1/agents/{agent}/tool-calls"),
            Some(serde_json::json!({"tool": tool, "arguments": arguments})),
        )
        .await
    }

    /// An agent token.
    pub async fn agent_token(&self, agent: &str) -> String {
        let (s, b) = self
            .op(
                reqwest::Method::POST,
                &format!("/api/v1/agents/{agent}/tokens"),
                Some(serde_json::json!({})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        b["token"].as_str().expect("token").to_string()
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let r = self
            .client
            .get(self.at("/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(r.status(), 200, "GET /metrics");
        r.text().await.expect("metrics text")
    }

    /// Installs a component from a file, asserting success; returns the Connector JSON.
    pub async fn install(&self, path: &str) -> Value {
        let bytes = std::fs::read(path).expect("component file");
        let (status, body) = upload_component(&self.client, &self.url, bytes, "").await;
        assert!(
            status == 201 || status == 200,
            "install {path}: {status} {body}"
        );
        body
    }
}

/// Installs (or rotates) a component through `POST {base}/api/v1/connectors{query}` with
/// the operator token; (status, JSON body or Null).
pub async fn upload_component(
    client: &reqwest::Client,
    base: &str,
    bytes: Vec<u8>,
    query: &str,
) -> (u16, Value) {
    let r = client
        .post(format!("{base}/api/v1/connectors{query}"))
        .bearer_auth(OPERATOR_TOKEN)
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .unwrap_or_else(|e| panic!("upload to {base} failed: {e}"));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// One HTTP request; returns (status, JSON body or Null).
pub async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("request to {url} failed: {e}"));
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, json)
}

/// The `connector-host` binary built by this `cargo test` run.
pub fn host_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>/connector-host
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = profile_dir.join(format!("connector-host{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds the binary)",
        bin.display()
    );
    bin
}

/// `target/scaffold`, beside the profile directory of this test run: where the scaffold
/// and example tests build the crates they generate (their dependencies compile once for
/// all of them).
pub fn scaffold_target_dir() -> PathBuf {
    host_binary()
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .join("scaffold")
}

/// `sh -c LINE` in `dir`, as someone following the documentation runs it: this run's
/// `connector-host` first on PATH, the host at `url` with the operator token, cargo
/// offline with its build files in [`scaffold_target_dir`], and only errors logged.
pub fn example_shell(dir: &Path, url: &str, line: &str) -> Command {
    let bin_dir = host_binary().parent().expect("bin dir").to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .current_dir(dir)
        .env("PATH", path)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_BUILD_BUILD_DIR", scaffold_target_dir())
        .env("CARGO_NET_OFFLINE", "true")
        .env("RUST_LOG", "error");
    cmd
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A `connector-host serve` process.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub url: String,
    pub data_dir: PathBuf,
}

impl ServerProcess {
    /// Starts `connector-host serve` on `data_dir` with extra environment, and waits until
    /// `/healthz` answers. The server keeps its compiled components in the cache test
    /// hosts share ([`share_compiled_cache`]) unless `<data_dir>/compiled` exists already.
    pub async fn start(data_dir: &Path, env: &[(&str, &str)]) -> ServerProcess {
        Self::start_command(data_dir, env, |_| {}).await
    }

    /// Like [`Self::start`], with `toml` as its configuration file (`--config`), written
    /// to `<data_dir>/host.toml`.
    pub async fn start_with_config(
        data_dir: &Path,
        env: &[(&str, &str)],
        toml: &str,
    ) -> ServerProcess {
        let file = data_dir.join("host.toml");
        std::fs::write(&file, toml).expect("write host.toml");
        Self::start_command(data_dir, env, |cmd| {
            cmd.arg("--config").arg(&file);
        })
        .await
    }

    /// Like [`Self::start`], under an open-files limit (soft and hard) of `limit`.
    pub async fn start_with_open_files(
        data_dir: &Path,
        env: &[(&str, &str)],
        limit: u64,
    ) -> ServerProcess {
        Self::start_command(data_dir, env, |cmd| {
            use std::os::unix::process::CommandExt;
            let rlimit = rustix::process::Rlimit {
                current: Some(limit),
                maximum: Some(limit),
            };
            // SAFETY: between fork and exec only setrlimit (one system call) runs.
            unsafe {
                cmd.pre_exec(move || {
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, rlimit)
                        .map_err(std::io::Error::from)
                });
            }
        })
        .await
    }

    /// Like [`Self::start`], with the server's stderr (its log) written to `log`.
    pub async fn start_logging_to(
        data_dir: &Path,
        env: &[(&str, &str)],
        log: std::fs::File,
    ) -> ServerProcess {
        Self::start_command(data_dir, env, |cmd| {
            cmd.stderr(log);
        })
        .await
    }

    /// Like [`Self::start_with_config`], with the server's stderr (its log) written to
    /// `log`.
    pub async fn start_with_config_logging_to(
        data_dir: &Path,
        env: &[(&str, &str)],
        toml: &str,
        log: std::fs::File,
    ) -> ServerProcess {
        let file = data_dir.join("host.toml");
        std::fs::write(&file, toml).expect("write host.toml");
        Self::start_command(data_dir, env, |cmd| {
            cmd.arg("--config").arg(&file).stderr(log);
        })
        .await
    }

    async fn start_command(
        data_dir: &Path,
        env: &[(&str, &str)],
        adjust: impl FnOnce(&mut Command),
    ) -> ServerProcess {
        // The test hosts' shared compiled-component cache, unless the data directory has
        // a cache of its own (a test of the cache creates `compiled` before the start).
        if std::fs::symlink_metadata(data_dir.join("compiled")).is_err() {
            std::fs::create_dir_all(data_dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", data_dir.display()));
            share_compiled_cache(data_dir);
        }
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut cmd = Command::new(host_binary());
        cmd.arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        adjust(&mut cmd);
        let child = cmd.spawn().expect("spawn connector-host serve");
        let mut server = ServerProcess {
            child,
            addr,
            url: format!("http://{addr}"),
            data_dir: data_dir.to_path_buf(),
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("connector-host serve exited before it was ready ({status}); its stderr is above");
            }
            if let Ok(r) = client.get(format!("{}/healthz", self.url)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("connector-host serve did not become ready at {}", self.url);
    }

    /// Kills the process with SIGKILL (no chance to clean up) and waits for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The `error.code` of a contract error body (`"<no error code>"` when there is none).
pub fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// The `name` of every tool in a JSON array of tools, in order.
pub fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("expected an array of tools, got {tools}"))
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .unwrap_or_else(|| panic!("a tool without a name in {tools}"))
                .to_string()
        })
        .collect()
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Like [`send`], but a request that got no answer (refused or reset: a server that was
/// killed) is status `0` instead of a panic; waits at most 30 s.
pub async fn try_send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client.request(method, url).timeout(Duration::from_secs(30));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// Sends a Standard Webhooks delivery of `body` to `POST {base}/api/v1/webhooks/{slug}`,
/// signed with `secret` at `timestamp`; `None` when the connection failed (a killed
/// server), else (status, JSON body or Null).
pub async fn send_standard_webhook(
    client: &reqwest::Client,
    base: &str,
    slug: &str,
    id: &str,
    body: &[u8],
    secret: &str,
    timestamp: i64,
) -> Option<(u16, Value)> {
    let signature =
        connector_host::webhooks::verify::standard_signature(secret, id, timestamp, body);
    let r = client
        .post(format!("{base}/api/v1/webhooks/{slug}"))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .timeout(Duration::from_secs(30))
        .body(body.to_vec())
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    Some((status, r.json().await.unwrap_or(Value::Null)))
}

/// Sends a GitHub delivery (`X-GitHub-Event`, `X-GitHub-Delivery`, `X-Hub-Signature-256`
/// over `body` with `secret`) to `POST {base}/api/v1/webhooks/{slug}`; (status, JSON body
/// or Null).
#[allow(clippy::too_many_arguments)]
pub async fn send_github_webhook(
    client: &reqwest::Client,
    base: &str,
    slug: &str,
    event: &str,
    id: &str,
    body: &[u8],
    secret: &str,
) -> (u16, Value) {
    let r = client
        .post(format!("{base}/api/v1/webhooks/{slug}"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", id)
        .header(
            "x-hub-signature-256",
            connector_host::webhooks::verify::github_signature(secret, body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap_or_else(|e| panic!("webhook {id} to {base} failed: {e}"));
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `component` with a custom section appended: the same behaviour under another digest
/// (a "new version" to rotate to, or bytes that must be compiled again).
pub fn with_custom_section(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"test-version";
    let mut payload = Vec::new();
    leb128(name.len(), &mut payload);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    out.push(0);
    leb128(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// A command that runs until it is stopped (a server, a `--follow`, a watch loop), in a
/// process group of its own so that stopping it stops whatever it started; its stdout and
/// stderr lines as they come. Stopped (SIGKILL to the group) when dropped.
pub struct Foreground {
    child: Child,
    /// Held open while it runs: a command may read until its input ends.
    _stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Foreground {
    /// Starts `cmd` with `input` (when not empty, one line) on its stdin.
    pub fn start(mut cmd: Command, input: &str) -> Foreground {
        use std::io::{BufRead, Write};
        use std::os::unix::process::CommandExt;
        let mut child = cmd
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a foreground command");
        let mut stdin = child.stdin.take().expect("stdin");
        if !input.is_empty() {
            let _ = writeln!(stdin, "{input}");
        }
        let (send, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        for read in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err) as Box<dyn std::io::Read + Send>,
        ] {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(read).lines().map_while(Result::ok) {
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Foreground {
            child,
            _stdin: stdin,
            lines,
            seen: String::new(),
        }
    }

    /// The first line (of stdout or stderr) that contains `expect`, within `within`; else
    /// why not, with everything it printed.
    pub fn until(&mut self, expect: &str, within: Duration) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(expect) => return Ok(line),
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(format!(
                        "it ended ({status}) without a line containing {expect:?}; it printed:\n{}",
                        self.seen
                    ));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "no line containing {expect:?} within {} s; it printed:\n{}",
                        within.as_secs(),
                        self.seen
                    ))
                }
            }
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}
