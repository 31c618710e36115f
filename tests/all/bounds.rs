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
async fn until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> Option<(Duration, Vec<u8>)> {
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
        // Every test here speaks from one address (127.0.0.1).
        max_connections_per_peer: Some(6),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed() {
    // Timed against the server's own timeouts (0.4 s, 1.5 s): alone, so no flood or
    // build of another test stretches them.
    let _alone = integration_tests::harness::machine_load().await;
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
    // Timed against the server's own timeouts (0.4 s, 1.5 s): alone, so no flood or
    // build of another test stretches them.
    let _alone = integration_tests::harness::machine_load().await;
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

/// A body dripped a byte at a time, each within the stall timeout, still ends `408`
/// once it has averaged too little for too long: it cannot hold its connection forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripped_body_is_answered_408() {
    // Timed against the server's own timeouts (0.4 s, 1.5 s): alone, so no flood or
    // build of another test stretches them.
    let _alone = integration_tests::harness::machine_load().await;
    let h = TestHost::start_with(|c| c.server = tight()).await;
    let addr = addr_of(&h.url);
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    stream
        .write_all(
            format!(
                "PUT /api/v1/units/eng HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let started = Instant::now();
    let (reader, mut writer) = stream.into_split();
    let drip = tokio::spawn(async move {
        // A byte every 200 ms: each within the 400 ms stall timeout.
        for _ in 0..1000 {
            if writer.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut reader = reader;
    let closed = until_closed(&mut reader, Duration::from_secs(5)).await;
    drip.abort();
    let (_, answer) = closed.expect("a dripped body still holds its connection after 5 s");
    let (status, body) = parse_response(&answer);
    assert_eq!(status, 408, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "after {:?}",
        started.elapsed()
    );
}

/// A request answered before its body was read (`401`) keeps its connection: the rest
/// of the body, still arriving past the header timeout, is read and dropped, and the
/// next request on the same connection is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_answered_before_it_was_read_keeps_the_connection() {
    let h = TestHost::start_with(|c| c.server = tight()).await;
    let addr = addr_of(&h.url);
    let mut stream = TcpStream::connect(&addr).await.expect("connect");
    const CHUNK: usize = 30_000;
    const CHUNKS: usize = 10;
    stream
        .write_all(
            format!(
                "PUT /api/v1/units/eng HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                CHUNK * CHUNKS
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let mut head = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head))
        .await
        .expect("answered before the body")
        .expect("read");
    let (status, body) = parse_response(&head[..n]);
    assert_eq!(status, 401, "{body}");
    // The body goes on arriving for a second: past the header timeout (400 ms), each
    // part within it.
    for _ in 0..CHUNKS {
        stream.write_all(&[b' '; CHUNK]).await.expect("body part");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stream
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("the connection is still open for a next request");
    let (_, bytes) = until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("the next request is answered");
    assert_eq!(
        parse_response(&bytes).0,
        200,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
}

/// Requests the HTTP parser refuses before any handler runs (a malformed header, too
/// many headers, a request line that is not HTTP) are answered in the contract's JSON
/// error shape too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparseable_requests_get_json_errors() {
    let h = TestHost::start().await;
    let addr = addr_of(&h.url);
    let many_headers: String = (0..200).map(|i| format!("x-h{i}: v\r\n")).collect();
    for (what, request, status) in [
        (
            "a malformed header",
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nno colon here\r\n\r\n"),
            400,
        ),
        (
            "too many headers",
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n{many_headers}\r\n"),
            431,
        ),
        ("not HTTP", "HELLO THERE\r\n\r\n".to_string(), 400),
        (
            "a head far past 64 KiB",
            format!(
                "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nx-big: {}\r\n\r\n",
                "a".repeat(300_000)
            ),
            431,
        ),
    ] {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let (_, bytes) = until_closed(&mut stream, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{what}: not answered"));
        let (got, body) = parse_response(&bytes);
        assert_eq!(got, status, "{what}: {}", String::from_utf8_lossy(&bytes));
        assert_eq!(body["error"]["code"], "invalid_request", "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }
    // The connection-level answers do not disturb ordinary ones.
    assert_eq!(healthz(&addr).await.0, 200);

    // Errors the router answers by itself are JSON too: a method a route does not take,
    // a path that is not UTF-8 (without a token: 401 first where a token is needed).
    let client = reqwest::Client::new();
    for (method, path, token, status, code) in [
        (
            reqwest::Method::PATCH,
            "/api/v1/connectors",
            None,
            405,
            "method_not_allowed",
        ),
        (
            reqwest::Method::GET,
            "/api/v1/agents/%FF/tools",
            None,
            401,
            "unauthenticated",
        ),
        (
            reqwest::Method::GET,
            "/api/v1/agents/%FF/tools",
            Some(OPERATOR_TOKEN),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/webhooks/%FF",
            None,
            400,
            "invalid_request",
        ),
    ] {
        let mut request = client.request(method.clone(), format!("{}{path}", h.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.expect("send");
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
    }
}

/// At the cap an idle connection is closed to make room; when every connection is busy
/// (here, each reading a request body that stopped arriving), a new one is answered
/// `503` at once, except `GET /healthz`, and the server answers again once they end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_close_idle_ones_or_are_answered_503() {
    let h = TestHost::start_with(|c| {
        c.server = ServerLimits {
            header_timeout: Duration::from_millis(1500),
            ..tight()
        }
    })
    .await;
    let addr = addr_of(&h.url);
    // How long `/healthz` takes on this machine now, nothing else open: what "at once"
    // is measured against below.
    let started = Instant::now();
    assert_eq!(healthz(&addr).await.0, 200);
    let quiet = started.elapsed();
    let at_once = quiet * 3 + Duration::from_millis(250);
    let mut idle = Vec::new();
    for _ in 0..tight().max_connections {
        idle.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(healthz(&addr).await.0, 200, "an idle connection made room");
    // Closed to make room, not by the 1.5 s header timeout: the bound is half of it.
    let (closed, _) = until_closed(&mut idle[0], Duration::from_secs(3))
        .await
        .expect("the least recently active idle connection was closed");
    assert!(
        closed < Duration::from_millis(750),
        "closed after {closed:?}"
    );
    drop(idle);

    let mut busy = Vec::new();
    for _ in 0..tight().max_connections {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream
            .write_all(
                format!(
                    "PUT /api/v1/units/eng HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
                )
                .as_bytes(),
            )
            .await
            .expect("write");
        busy.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = send_on_fresh_connection(&h, "/api/v1/connectors").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "host_busy", "{body}");
    assert!(
        started.elapsed() < at_once,
        "503 after {:?} ({quiet:?} when nothing was open)",
        started.elapsed()
    );
    let started = Instant::now();
    assert_eq!(healthz(&addr).await, (200, json!({"status": "ok"})));
    assert!(
        started.elapsed() < at_once,
        "/healthz after {:?} ({quiet:?} when nothing was open)",
        started.elapsed()
    );
    // Once the stalled bodies are answered `408`, the server serves again.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        send_on_fresh_connection(&h, "/api/v1/connectors").await.0,
        200
    );
    drop(busy);
}

/// `GET path` with the operator token on a connection of its own: status and JSON body.
async fn send_on_fresh_connection(h: &TestHost, path: &str) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    integration_tests::harness::send(
        &client,
        reqwest::Method::GET,
        &h.at(path),
        Some(OPERATOR_TOKEN),
        None,
    )
    .await
}

/// A client that stops reading what it is sent is dropped once its socket has accepted
/// nothing for the header timeout, even while its response is still being produced (a
/// live inbox stream), so such clients cannot hold connections (and the cap) forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_are_dropped() {
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let h = TestHost::start_with(|c| {
        c.server = ServerLimits {
            idle_timeout: Duration::from_secs(30),
            ..tight()
        };
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(integration_tests::guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    let addr = addr_of(&h.url);

    // The unit's live inbox, on a socket with a tiny receive window, never read.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("small receive buffer");
    let mut stream = socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect");
    stream
        .write_all(
            format!(
                "GET /api/v1/units/u1/messages/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR_TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Far more messages than the socket buffers hold.
    let client = reqwest::Client::new();
    let pad = "x".repeat(30_000);
    for i in 0..400 {
        let body = json!({"messages": [{"route": "r1", "kind": "k", "threadKey": "t", "payload": {"pad": pad}}]});
        let bytes = serde_json::to_vec(&body).expect("JSON");
        let id = format!("msg_{i}");
        let (status, answer) = integration_tests::harness::send_standard_webhook(
            &client,
            &h.url,
            "hostile",
            &id,
            &bytes,
            SECRET,
            integration_tests::harness::now_unix(),
        )
        .await
        .expect("delivered");
        assert!(status < 300, "{status} {answer}");
    }
    // Past the header timeout (400 ms) since the socket filled: the stream was dropped,
    // so reading it now ends (instead of resuming an endless stream).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ended = until_closed(&mut stream, Duration::from_secs(5)).await;
    let (_, bytes) = ended.expect("a stream its client stopped reading is still open");
    let events = String::from_utf8_lossy(&bytes).matches("\nid: ").count();
    assert!(
        events < 400,
        "all {events} messages were streamed: the connection was not dropped"
    );
}

/// The attack as reported: the open-files limit at 300 and 320 idle connections made
/// `/healthz` time out. Now the cap leaves descriptors free (and one address may hold
/// all of it here), and past it idle connections are closed to make room, so `/healthz`
/// is answered at once, while the idle connections are held and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_exhaust_the_open_files_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start_with_open_files(
        dir.path(),
        &[
            ("CONNECTOR_HOST_HEADER_TIMEOUT_MS", "2000"),
            ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "4096"),
        ],
        300,
    )
    .await;
    let addr = server.addr.to_string();
    // `/healthz` with nothing else open, for comparison.
    let started = Instant::now();
    assert_eq!(healthz(&addr).await.0, 200);
    let quiet = started.elapsed();
    let mut idle = Vec::new();
    for _ in 0..320 {
        if let Ok(s) = TcpStream::connect(&addr).await {
            idle.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Answered at once, not once the idle connections time out (2 s).
    let started = Instant::now();
    let (status, body) = healthz(&addr).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < quiet * 3 + Duration::from_millis(250),
        "/healthz after {:?} ({quiet:?} with nothing open)",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(healthz(&addr).await.0, 200);
    drop(idle);
}

/// The attack as reported: six 60 MiB uploads without a token to `POST /connectors`
/// raised the server's resident memory from 86 to 441 MiB, and webhooks buffered up to
/// their limit before checking anything. Now every one is answered before its body is
/// read, and what still arrives is read and dropped, never kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_uploads_do_not_grow_the_servers_memory() {
    let _alone = integration_tests::harness::machine_load().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(dir.path(), &[]).await;
    let addr = server.addr.to_string();
    let pid = server.child.id();
    let before = rss_mib(pid);
    const MIB: usize = 1024 * 1024;
    let heads = [
        "POST /api/v1/connectors HTTP/1.1\r\nContent-Type: application/wasm\r\nContent-Length: 62914560".to_string(),
        // The bundled `github` takes webhooks but has no secret configured here.
        "POST /api/v1/webhooks/github HTTP/1.1\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: d1\r\nX-Hub-Signature-256: sha256=0000000000000000000000000000000000000000000000000000000000000000\r\nContent-Length: 20971520".to_string(),
    ];
    let sampler = PeakRss::start(pid);
    let uploads: Vec<_> = (0..6)
        .map(|i| {
            let head = heads[i % 2].clone();
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(&addr).await.expect("connect");
                stream
                    .write_all(format!("{head}\r\nHost: {addr}\r\n\r\n").as_bytes())
                    .await
                    .expect("head");
                let declared: usize = head
                    .rsplit("Content-Length: ")
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("length");
                // All but the last byte, then stall: the server may stop reading at
                // any point (its answer came first).
                let chunk = vec![b'x'; MIB];
                let mut sent = 0;
                while sent + MIB < declared {
                    if stream.write_all(&chunk).await.is_err() {
                        break;
                    }
                    sent += MIB;
                }
                let mut answer = vec![0u8; 1024];
                let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or(0);
                String::from_utf8_lossy(&answer[..n]).into_owned()
            })
        })
        .collect();
    for upload in uploads {
        let answer = upload.await.expect("upload");
        assert!(
            answer.starts_with("HTTP/1.1 401"),
            "an upload without a token or a verifiable signature: {answer:?}"
        );
    }
    let peak = sampler.stop().await;
    eprintln!("uploads: resident {before} MiB before, peak {peak} MiB");
    assert!(
        peak < before + 64,
        "resident memory rose from {before} to {peak} MiB during 6 unauthenticated uploads of 20-60 MiB"
    );
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
/// fast (p99 under 50 ms, or 5x its p99 just before the flood on a busier machine), and the flood's queued calls end at the call deadline, since
/// the wait for a slot counts toward it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_agent_leaves_another_agents_calls_fast() {
    let _alone = integration_tests::harness::machine_load().await;
    let h = Hostile::start(
        &[
            ("CONNECTOR_HOST_CALL_TIMEOUT_MS", "3000"),
            // The flood's 300 connections come from one address, as the calm agent's
            // do: the share measured here is the agent's, not the address's.
            ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "4096"),
        ],
        &["flood", "calm"],
    )
    .await;
    // Warm up the echo path, then take its baseline on this machine, as loaded now.
    for _ in 0..5 {
        let (s, b) = h.call("calm", "acme.echo").await;
        assert_eq!(s, 200, "{b}");
    }
    let mut baseline = Vec::new();
    for _ in 0..40 {
        let started = Instant::now();
        let (s, b) = h.call("calm", "acme.echo").await;
        baseline.push(started.elapsed());
        assert_eq!(s, 200, "{b}");
    }
    let baseline_p99 = percentile(&mut baseline, 0.99);

    let flood_started = Instant::now();
    // Each flood call's own time, from its send to its answer: what the deadline bounds.
    let slowest = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let flood: Vec<_> = (0..300)
        .map(|_| {
            let call = h.call("flood", "hostile.spin");
            let slowest = slowest.clone();
            tokio::spawn(async move {
                let sent = Instant::now();
                let answer = call.await;
                let took = sent.elapsed();
                let mut slowest = slowest.lock().unwrap_or_else(|p| p.into_inner());
                *slowest = (*slowest).max(took);
                answer
            })
        })
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
    let slowest = *slowest.lock().unwrap_or_else(|p| p.into_inner());
    let samples = latencies.len();
    let p99 = percentile(&mut latencies, 0.99);
    let p50 = percentile(&mut latencies, 0.50);
    eprintln!("echo during the flood: {samples} calls, p50 {p50:?}, p99 {p99:?} (before it: p99 {baseline_p99:?}); flood {outcomes:?} in {flood_took:?}, the slowest call {slowest:?}");
    assert!(samples >= 20, "only {samples} echo calls in 2.4 s");
    // Under 50 ms, or (on a machine busy with more than this test) within 5x what the
    // same calls took just before the flood.
    let bound = Duration::from_millis(50).max(baseline_p99 * 5);
    assert!(
        p99 < bound,
        "echo p99 {p99:?} (p50 {p50:?}) during the flood, {baseline_p99:?} before it"
    );
    // Every flood call ends by its deadline (3 s from its start, waiting included).
    assert_eq!(
        outcomes.get("504 connector_timeout"),
        Some(&300),
        "{outcomes:?}"
    );
    // Measured per call, from its own send: the 300 calls' sends are spread over the
    // time the client takes to open their connections, which on a loaded machine is
    // not the host's to answer for.
    assert!(
        slowest < Duration::from_millis(4500),
        "a flood call took {slowest:?} (the whole flood {flood_took:?})"
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

/// The peak resident memory of a process, sampled every 10 ms until stopped.
struct PeakRss {
    sampling: Arc<std::sync::atomic::AtomicBool>,
    sampler: tokio::task::JoinHandle<u64>,
}

impl PeakRss {
    fn start(pid: u32) -> PeakRss {
        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let on = sampling.clone();
        let sampler = tokio::spawn(async move {
            let mut peak = 0;
            while on.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_mib(pid));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        });
        PeakRss { sampling, sampler }
    }

    async fn stop(self) -> u64 {
        self.sampling
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.sampler.await.expect("sampler")
    }
}

/// Twenty guests allocating without end, each under its own 64 MiB limit, stay within
/// `limits.guest_memory_total_mib` together (past it they wait, then fail), and within
/// their agent's share of it, so another agent's calls go on; the server's resident
/// memory grows by about the budget, not by 20 × 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_guests_together_stay_within_the_memory_budget() {
    let _alone = integration_tests::harness::machine_load().await;
    let h = Hostile::start(
        &[
            ("CONNECTOR_HOST_CALL_TIMEOUT_MS", "2000"),
            ("CONNECTOR_HOST_GUEST_MEMORY_TOTAL_MIB", "192"),
        ],
        &["hog", "calm"],
    )
    .await;
    assert_eq!(h.call("hog", "acme.echo").await.0, 200);

    let pid = h.server.child.id();
    let before = rss_mib(pid);
    let sampler = PeakRss::start(pid);
    let hogs: Vec<_> = (0..20)
        .map(|_| tokio::spawn(h.call("hog", "hostile.hog")))
        .collect();
    // Meanwhile another agent's calls find memory at once: one agent's guests hold at
    // most a quarter of the budget (or one guest's limit, if more).
    let calm = async {
        let mut slow = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let (s, b) = h.call("calm", "acme.echo").await;
            assert_eq!(s, 200, "another agent's call during the hogs: {b}");
            slow.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        slow
    };
    let (outcomes, mut calm) = tokio::join!(outcomes(hogs), calm);
    let peak = sampler.stop().await;
    let calm_max = percentile(&mut calm, 1.0);
    assert!(
        calm_max < Duration::from_millis(500),
        "another agent's echo took up to {calm_max:?} while one agent's guests hogged memory"
    );
    eprintln!("hogs: {outcomes:?}; resident {before} MiB before, peak {peak} MiB");
    // A hog ends at its own 64 MiB limit (`connector_trapped`) only if it got that much.
    // One held back by its agent's share of memory (a quarter of the budget, here one
    // guest's 64 MiB) or by a slot of its agent is the agent's own overload
    // (`connector_timeout`); one held back by the whole budget is `host_busy`. None
    // succeeds, and not every one got its 64 MiB.
    let busy = outcomes.get("503 host_busy").copied().unwrap_or(0);
    let own_limit = outcomes.get("502 connector_trapped").copied().unwrap_or(0);
    let queued = outcomes.get("504 connector_timeout").copied().unwrap_or(0);
    assert!(
        busy + queued > 0 && busy + own_limit + queued == 20,
        "{outcomes:?}"
    );
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
