//! A client or an agent cannot starve anyone (CONTRACT §2 `server.*` and `limits.*`, §3):
//! slow and idle connections are closed, connections past the cap are answered `503`,
//! a stalled body gets `408`, and one agent's flood of guest calls leaves another
//! agent's calls fast.

use std::time::{Duration, Instant};

use connector_host::config::ServerLimits;
use integration_tests::harness::{ServerProcess, TestHost, OPERATOR_TOKEN};
use serde_json::Value;
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
