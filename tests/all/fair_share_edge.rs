//! Fair share at the edge (CONTRACT §12, §2 `server.max_connections_per_peer`), against
//! the real `connector-host` binary: idle keep-alive sockets, from one remote address or
//! from many, never lock other clients out (one address holds at most its share; at the
//! total cap the least recently active idle connection makes room; `/healthz` is answered
//! whenever the process runs).
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, so a client socket bound to
//! 127.0.0.2, 127.0.0.3, ... before connecting is another remote address to the server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::harness::{machine_load, ServerProcess, OPERATOR_TOKEN};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The probes' address: every flood below comes from other addresses.
const PROBE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// 127.0.0.`n`.
fn loopback(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A connection to `server` from source address `from`.
async fn connect_from(from: Ipv4Addr, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
    socket.connect(server).await
}

/// Reads one HTTP/1.1 response (head and `content-length` body) from `stream`, leaving
/// the connection open: its status and body. `None`: closed, reset or silent for 5 s.
async fn read_response(stream: &mut TcpStream) -> Option<(u16, Vec<u8>)> {
    let read = async {
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buf[..n]);
            let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return Some((status, seen[end + 4..end + 4 + length].to_vec()));
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
}

/// Sends `GET path` (keep-alive) on `stream` and reads the answer; `None` when the
/// connection is gone.
async fn get_on(
    stream: &mut TcpStream,
    server: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, Vec<u8>)> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {server}\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    read_response(stream).await
}

/// `GET path` from the probe address on a fresh connection: status (0: no answer), the
/// body, and how long the answer took from connecting.
async fn probe(server: SocketAddr, path: &str, token: Option<&str>) -> (u16, Value, Duration) {
    let started = Instant::now();
    let answer = match connect_from(PROBE, server).await {
        Ok(mut stream) => get_on(&mut stream, server, path, token).await,
        Err(_) => None,
    };
    let took = started.elapsed();
    match answer {
        Some((status, body)) => (
            status,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
            took,
        ),
        None => (0, Value::Null, took),
    }
}

/// `/healthz` and an operator call from the probe address are each answered `200` within
/// a second; returns what each took.
async fn assert_others_are_answered(server: SocketAddr, during: &str) -> Vec<Duration> {
    let mut took = Vec::new();
    for (path, token) in [
        ("/healthz", None),
        ("/api/v1/connectors", Some(OPERATOR_TOKEN)),
    ] {
        let (status, body, after) = probe(server, path, token).await;
        assert!(
            status == 200 && after <= Duration::from_secs(1),
            "{during}: GET {path} from another address got {status} after {after:?}: {body}"
        );
        took.push(after);
    }
    took
}

/// Opens `count` connections from `from`, each sending one cheap request (`/healthz`,
/// keep-alive) and keeping the connection idle after its answer: the attack as reported.
/// Returns the connections and how many requests were answered `200`.
async fn idle_keep_alive(
    from: Ipv4Addr,
    server: SocketAddr,
    count: usize,
) -> (Vec<TcpStream>, usize) {
    let mut held = Vec::new();
    let mut answered = 0;
    for _ in 0..count {
        let Ok(mut stream) = connect_from(from, server).await else {
            continue;
        };
        if let Some((200, _)) = get_on(&mut stream, server, "/healthz", None).await {
            answered += 1;
        }
        held.push(stream);
    }
    (held, answered)
}

/// How many of `held` still answer a request: connections the server kept.
async fn still_served(held: &mut [TcpStream], server: SocketAddr) -> usize {
    let mut served = 0;
    for stream in held {
        if let Some((200, _)) = get_on(stream, server, "/healthz", None).await {
            served += 1;
        }
    }
    served
}

/// One client opening `max_connections` keep-alive sockets and sending a cheap request
/// on each held every connection the host serves: everyone else, `/healthz` included,
/// got `503`. Now it holds at most its address's share (`max_connections_per_peer`): its
/// own least recently active idle connection makes room for its next one, and other
/// addresses are answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_its_share_of_connections_hurts_only_itself() {
    let _alone = machine_load().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        dir.path(),
        &[
            ("CONNECTOR_HOST_MAX_CONNECTIONS", "32"),
            ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "4"),
        ],
    )
    .await;
    let (mut flood, answered) = idle_keep_alive(loopback(2), server.addr, 32).await;
    let took = assert_others_are_answered(server.addr, "one address holding 32 sockets").await;
    eprintln!("probes during a one-address flood answered after {took:?}");
    // Every one of its requests was answered; only its last four connections are kept.
    assert_eq!(answered, 32, "requests of the flooding address answered");
    let kept = still_served(&mut flood, server.addr).await;
    assert_eq!(
        kept, 4,
        "connections of the flooding address the server kept (its share is 4)"
    );
}

/// Idle keep-alive sockets from ten addresses, each holding its share, fill the total
/// cap; a client from another address still gets `/healthz` and an operator call
/// answered within a second, again and again: each new connection closes the least
/// recently active idle one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_flood_from_many_addresses_cannot_lock_others_out() {
    let _alone = machine_load().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        dir.path(),
        &[
            ("CONNECTOR_HOST_MAX_CONNECTIONS", "32"),
            ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "4"),
        ],
    )
    .await;
    let mut flood = Vec::new();
    let mut answered = 0;
    for n in 2..=11 {
        let (held, ok) = idle_keep_alive(loopback(n), server.addr, 4).await;
        flood.extend(held);
        answered += ok;
    }
    let mut took = Vec::new();
    for round in 0..5 {
        took.extend(
            assert_others_are_answered(server.addr, &format!("round {round} of the flood")).await,
        );
        // The flood goes on: every address refreshes its share.
        for n in 2..=11 {
            let (held, _) = idle_keep_alive(loopback(n), server.addr, 4).await;
            flood.extend(held);
        }
    }
    eprintln!("probes during a ten-address flood answered after {took:?}");
    // At the cap, each new connection was served (an idle one closed to make room).
    assert_eq!(
        answered, 40,
        "each flooding connection's request is answered"
    );
    let kept = still_served(&mut flood, server.addr).await;
    assert!(
        kept <= 32,
        "{kept} flooding connections kept with a cap of 32"
    );
}

/// A request body trickled to a webhook (its signature well-formed, never valid): its
/// connection stays busy while the body is being read.
async fn busy_connection(from: Ipv4Addr, server: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, server).await.expect("connect");
    let head = format!(
        "POST /api/v1/webhooks/github HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: busy\r\nX-Hub-Signature-256: sha256={}\r\nContent-Length: 100000\r\n\r\n{{",
        "0".repeat(64)
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
}

/// When every connection is busy (bodies being read), none can be closed to make room:
/// another address's API call is refused `503 host_busy`, and so is a next connection
/// of an address at its share, but `GET /healthz` is still answered `200` within a
/// second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_answered_when_every_connection_is_busy() {
    let _alone = machine_load().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        dir.path(),
        &[
            ("CONNECTOR_HOST_MAX_CONNECTIONS", "8"),
            ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "4"),
            ("CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET", "a-secret"),
        ],
    )
    .await;
    let mut busy = Vec::new();
    for n in [2, 3] {
        for _ in 0..4 {
            busy.push(busy_connection(loopback(n), server.addr).await);
        }
    }
    let trickle = {
        let stop = Arc::new(AtomicBool::new(false));
        let on = stop.clone();
        let task = tokio::spawn(async move {
            // A byte a second: well within the stall bound.
            while !on.load(Ordering::Relaxed) {
                for stream in &mut busy {
                    let _ = stream.write_all(b" ").await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            busy
        });
        (stop, task)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut ninth = connect_from(loopback(2), server.addr)
        .await
        .expect("connect");
    let answer = get_on(
        &mut ninth,
        server.addr,
        "/api/v1/connectors",
        Some(OPERATOR_TOKEN),
    )
    .await
    .expect("a connection past its address's share is answered");
    let text = String::from_utf8_lossy(&answer.1).into_owned();
    assert_eq!(answer.0, 503, "{text}");
    assert!(text.contains("host_busy"), "{text}");

    let (status, body, after) =
        probe(server.addr, "/api/v1/connectors", Some(OPERATOR_TOKEN)).await;
    assert_eq!(
        status, 503,
        "an API call with every connection busy: {body}"
    );
    assert_eq!(body["error"]["code"], "host_busy", "{body}");
    let (status, body, after_health) = probe(server.addr, "/healthz", None).await;
    assert!(
        status == 200 && body["status"] == "ok" && after_health <= Duration::from_secs(1),
        "/healthz with every connection busy got {status} after {after_health:?}: {body}"
    );
    eprintln!("with every connection busy: the API refused after {after:?}, /healthz answered after {after_health:?}");

    // Once the bodies are gone, the API is served again.
    trickle.0.store(true, Ordering::Relaxed);
    drop(trickle.1.await.expect("trickle"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body, _) = probe(server.addr, "/api/v1/connectors", Some(OPERATOR_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
}
