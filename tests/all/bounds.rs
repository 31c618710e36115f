//! A client or an agent cannot starve anyone (CONTRACT §2 `server.*` and `limits.*`, §3):
//! slow and idle connections are closed, connections past the cap are answered `503`,
//! a stalled body gets `408`, and one agent's flood of guest calls leaves another
//! agent's calls fast.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::config::ServerLimits;
use integration_tests::harness::{ServerProcess, TestHost, OPERATOR_TOKEN};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Reads until the server closes the connection (or `limit` passes): how long that took
/// and what was read. `None`: still open after `limit`.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<(Duration, Vec<u8>)> {
    let started = Instant::now();
    let mut seen = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok()?;
    Some((started.elapsed(), seen))
}

/// The status and JSON body of one complete HTTP/1.1 response in `bytes`.
fn parse_response(bytes: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(bytes);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// `GET /healthz` on a fresh connection (closing it after): status and JSON body.
async fn healthz(addr: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("write");
    let (_, bytes) = until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("the server answers /healthz within 5 s");
    parse_response(&bytes)
}

fn tight() -> ServerLimits {
    ServerLimits {
        header_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(1500),
        max_connections: 6,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed() {
    let h = TestHost::start_with(|c| c.server = tight()).await;
    let addr = addr_of(&h.url);

    // A socket that never sends a byte.
    let mut silent = TcpStream::connect(&addr).await.expect("connect");
    // A request line and half its headers.
    let mut half_head = TcpStream::connect(&addr).await.expect("connect");
    half_head
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .await
        .expect("write");
    for (what, stream) in [
        ("silent", &mut silent),
        ("half-sent header", &mut half_head),
    ] {
        let (after, _) = until_closed(stream, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("a {what} connection is still open after 5 s"));
        assert!(
            after < Duration::from_secs(2),
            "{what}: closed after {after:?}"
        );
    }

    // A keep-alive connection: answered, then closed once idle for idle_timeout (not at
    // the header timeout).
    let mut keep = TcpStream::connect(&addr).await.expect("connect");
    keep.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let (after, bytes) = until_closed(&mut keep, Duration::from_secs(6))
        .await
        .expect("an idle keep-alive connection is closed within 6 s");
    assert_eq!(parse_response(&bytes).0, 200);
    assert!(
        after >= Duration::from_millis(1200) && after < Duration::from_secs(4),
        "idle keep-alive connection closed after {after:?} (idle timeout 1.5 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408() {
    let h = TestHost::start_with(|c| c.server = tight()).await;
    let addr = addr_of(&h.url);
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(
            format!(
                "PUT /api/v1/units/eng HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"parent\":"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let (after, bytes) = until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("a stalled body is answered within 5 s");
    let (status, body) = parse_response(&bytes);
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "answered after {after:?}"
    );
    // Nothing was written.
    let (s, _) = h.op(reqwest::Method::GET, "/api/v1/units/eng", None).await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_answered_503() {
    let h = TestHost::start_with(|c| {
        c.server = ServerLimits {
            header_timeout: Duration::from_millis(1500),
            ..tight()
        }
    })
    .await;
    let addr = addr_of(&h.url);
    let mut held = Vec::new();
    for _ in 0..tight().max_connections {
        held.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = healthz(&addr).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "host_busy", "{body}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // Once the held connections time out, the server answers again.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(healthz(&addr).await.0, 200);
    drop(held);
}

/// The attack as reported: the open-files limit at 300 and 320 idle connections made
/// `/healthz` time out. Now the cap leaves descriptors free, so `/healthz` is answered at
/// once (`503` while the idle connections are held), and `200` once they time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_exhaust_the_open_files_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start_with_open_files(
        dir.path(),
        &[("CONNECTOR_HOST_HEADER_TIMEOUT_MS", "2000")],
        300,
    )
    .await;
    let addr = server.addr.to_string();
    let mut idle = Vec::new();
    for _ in 0..320 {
        if let Ok(s) = TcpStream::connect(&addr).await {
            idle.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let (status, body) = healthz(&addr).await;
    assert!(
        status == 503 && body["error"]["code"] == "host_busy",
        "{status} {body}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(healthz(&addr).await.0, 200);
    drop(idle);
}

/// p-th percentile of `samples` (sorted in place).
fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[i]
}

/// A `connector-host serve` process with `env`, the hostile test connector and `acme`
/// bound to unit `eng`, and agents `agents` in it.
struct Hostile {
    server: ServerProcess,
    client: reqwest::Client,
    tokens: std::collections::HashMap<&'static str, String>,
    _dir: tempfile::TempDir,
}

impl Hostile {
    async fn start(env: &[(&str, &str)], agents: &[&'static str]) -> Hostile {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = ServerProcess::start(dir.path(), env).await;
        let client = reqwest::Client::new();
        let bytes = std::fs::read(integration_tests::guests::HOSTILE).expect("hostile component");
        let (s, b) =
            integration_tests::harness::upload_component(&client, &server.url, bytes, "").await;
        assert_eq!(s, 201, "{b}");
        let mut h = Hostile {
            server,
            client,
            tokens: Default::default(),
            _dir: dir,
        };
        let put = reqwest::Method::PUT;
        h.op(put.clone(), "/api/v1/units/eng", json!({})).await;
        for slug in ["hostile", "acme"] {
            let path = format!("/api/v1/units/eng/connectors/{slug}");
            h.op(put.clone(), &path, json!({"config": {}})).await;
        }
        for agent in agents {
            let path = format!("/api/v1/agents/{agent}");
            h.op(put.clone(), &path, json!({"units": ["eng"]})).await;
            let path = format!("/api/v1/agents/{agent}/tokens");
            let b = h.op(reqwest::Method::POST, &path, json!({})).await;
            let token = b["token"].as_str().expect("token").to_string();
            h.tokens.insert(agent, token);
        }
        h
    }

    /// An operator request that must succeed (`201`); its body.
    async fn op(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.server.url);
        let (s, b) = integration_tests::harness::send(
            &self.client,
            method,
            &url,
            Some(OPERATOR_TOKEN),
            Some(body),
        )
        .await;
        assert_eq!(s, 201, "{path}: {b}");
        b
    }

    /// `agent` calls `tool` (`acme.echo` with a message, anything else with `{}`).
    fn call(&self, agent: &'static str, tool: &'static str) -> impl Future<Output = (u16, Value)> {
        let client = self.client.clone();
        let url = format!("{}/api/v1/agents/{agent}/tool-calls", self.server.url);
        let token = self.tokens[agent].clone();
        let arguments = if tool == "acme.echo" {
            json!({"message": "hi"})
        } else {
            json!({})
        };
        async move {
            integration_tests::harness::send(
                &client,
                reqwest::Method::POST,
                &url,
                Some(&token),
                Some(json!({"tool": tool, "arguments": arguments})),
            )
            .await
        }
    }
}

/// Counts `(status, error code)` of finished calls.
async fn outcomes(calls: Vec<tokio::task::JoinHandle<(u16, Value)>>) -> BTreeMap<String, usize> {
    let mut outcomes = BTreeMap::new();
    for call in calls {
        let (s, b) = call.await.expect("call task");
        let code = b["error"]["code"].as_str().unwrap_or("").to_string();
        *outcomes.entry(format!("{s} {code}")).or_insert(0) += 1;
    }
    outcomes
}

/// One agent floods the host with 300 looping calls; another agent's `acme.echo` stays
/// fast (p99 under 50 ms), and the flood's queued calls end at the call deadline, since
/// the wait for a slot counts toward it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_agent_leaves_another_agents_calls_fast() {
    let h = Hostile::start(
        &[("CONNECTOR_HOST_CALL_TIMEOUT_MS", "3000")],
        &["flood", "calm"],
    )
    .await;
    // Warm up the echo path.
    for _ in 0..5 {
        let (s, b) = h.call("calm", "acme.echo").await;
        assert_eq!(s, 200, "{b}");
    }

    let flood_started = Instant::now();
    let flood: Vec<_> = (0..300)
        .map(|_| tokio::spawn(h.call("flood", "hostile.spin")))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut latencies = Vec::new();
    while flood_started.elapsed() < Duration::from_millis(2700) {
        let started = Instant::now();
        let (s, b) = h.call("calm", "acme.echo").await;
        latencies.push(started.elapsed());
        assert_eq!(s, 200, "{b}");
    }
    let outcomes = outcomes(flood).await;
    let flood_took = flood_started.elapsed();
    let samples = latencies.len();
    let p99 = percentile(&mut latencies, 0.99);
    let p50 = percentile(&mut latencies, 0.50);
    eprintln!("echo during the flood: {samples} calls, p50 {p50:?}, p99 {p99:?}; flood {outcomes:?} in {flood_took:?}");
    assert!(samples >= 20, "only {samples} echo calls in 2.4 s");
    assert!(
        p99 < Duration::from_millis(50),
        "echo p99 {p99:?} (p50 {p50:?})"
    );
    // Every flood call ends by its deadline (3 s from its start, waiting included).
    assert_eq!(
        outcomes.get("504 connector_timeout"),
        Some(&300),
        "{outcomes:?}"
    );
    assert!(
        flood_took < Duration::from_millis(4500),
        "the flood took {flood_took:?}"
    );
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Twenty guests allocating without end, each under its own 64 MiB limit, stay within
/// `limits.guest_memory_total_mib` together: past it they wait, then fail `503
/// host_busy`; the server's resident memory grows by about the budget, not by 20 × 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_guests_together_stay_within_the_memory_budget() {
    let h = Hostile::start(
        &[
            ("CONNECTOR_HOST_CALL_TIMEOUT_MS", "2000"),
            ("CONNECTOR_HOST_GUEST_MEMORY_TOTAL_MIB", "192"),
        ],
        &["hog"],
    )
    .await;
    assert_eq!(h.call("hog", "acme.echo").await.0, 200);

    let pid = h.server.child.id();
    let before = rss_mib(pid);
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_mib(pid));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let hogs: Vec<_> = (0..20)
        .map(|_| tokio::spawn(h.call("hog", "hostile.hog")))
        .collect();
    let outcomes = outcomes(hogs).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.await.expect("sampler");
    eprintln!("hogs: {outcomes:?}; resident {before} MiB before, peak {peak} MiB");
    // A hog ends at its own 64 MiB limit (`connector_trapped`) only if it got that much;
    // one the budget held back is `host_busy`, never a trap or a timeout.
    let busy = outcomes.get("503 host_busy").copied().unwrap_or(0);
    let own_limit = outcomes.get("502 connector_trapped").copied().unwrap_or(0);
    assert!(busy > 0 && busy + own_limit == 20, "{outcomes:?}");
    assert!(
        own_limit <= 3,
        "at most 3 hogs fit 64 MiB in 192 MiB: {outcomes:?}"
    );
    assert!(
        peak < before + 192 + 64,
        "resident memory rose from {before} to {peak} MiB with a 192 MiB budget"
    );
    // Memory is returned: the host serves calls again.
    let (s, b) = h.call("hog", "acme.echo").await;
    assert_eq!(s, 200, "{b}");
}
