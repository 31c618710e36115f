//! Fair share at the edge (CONTRACT §12, §2 `server.max_connections_per_peer`), against
//! the real `connector-host` binary: idle keep-alive sockets, from one remote address or
//! from many, never lock other clients out (one address holds at most its share; at the
//! total cap the least recently active idle connection makes room; `/healthz` is answered
//! whenever the process runs), and senders trickling webhook bodies that will never
//! verify cannot make signed deliveries from elsewhere fail.
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, so a client socket bound to
//! 127.0.0.2, 127.0.0.3, ... before connecting is another remote address to the server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

const GITHUB_SECRET: &str = "It's a Secret to Everybody";
const MIB: usize = 1024 * 1024;

/// One upload to the bundled `github` connector with a well-formed signature that will
/// never verify, declaring the largest body the host takes (25 MiB): 20 MiB of it (less
/// 512 bytes) at once, so five of them hold the whole reading budget (4 × 25 MiB), then
/// a byte every 500 ms, until the server answers or `stop` is set. Returns the server's
/// status (0: none).
async fn trickled_upload(
    from: Ipv4Addr,
    server: SocketAddr,
    id: usize,
    holding: &AtomicUsize,
    stop: &AtomicBool,
) -> u16 {
    let Ok(stream) = connect_from(from, server).await else {
        return 0;
    };
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST /api/v1/webhooks/github HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: attack-{id}\r\nX-Hub-Signature-256: sha256={}\r\nContent-Length: {}\r\n\r\n",
        "0".repeat(64),
        25 * MIB
    );
    let send = async {
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; MIB];
        for _ in 0..19 {
            writer.write_all(&chunk).await?;
        }
        writer.write_all(&chunk[..MIB - 512]).await?;
        holding.fetch_add(1, Ordering::SeqCst);
        let trickled = async {
            while !stop.load(Ordering::Relaxed) {
                writer.write_all(b" ").await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            std::io::Result::Ok(())
        };
        let result = trickled.await;
        holding.fetch_sub(1, Ordering::SeqCst);
        result
    };
    let mut answer = vec![0u8; 4096];
    let status = tokio::select! {
        _ = send => {
            // Stopped (or the server stopped reading): whatever it answered.
            tokio::time::timeout(Duration::from_millis(200), reader.read(&mut answer)).await
        }
        read = reader.read(&mut answer) => Ok(read),
    };
    match status {
        Ok(Ok(n)) if n > 0 => String::from_utf8_lossy(&answer[..n])
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// Five senders from `sources` (taken in turn) each trickle a 25 MiB body with a wrong
/// signature, re-sending whenever they are cut off, while signed deliveries from the
/// probe address go on for 8 s: returns each delivery's status and what the uploads
/// were answered (status → count).
async fn signed_deliveries_during_trickled_uploads(
    sources: &[Ipv4Addr],
) -> (Vec<u16>, std::collections::BTreeMap<u16, usize>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        dir.path(),
        &[("CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)],
    )
    .await;
    let holding = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..5)
        .map(|i| {
            let from = sources[i % sources.len()];
            let (holding, stop, addr) = (holding.clone(), stop.clone(), server.addr);
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    answers
                        .push(trickled_upload(from, addr, i * 10_000 + n, &holding, &stop).await);
                }
                answers
            })
        })
        .collect();
    // The attack is in place once all five hold 20 MiB each (100 MiB: four times the
    // largest body).
    let deadline = Instant::now() + Duration::from_secs(20);
    while holding.load(Ordering::SeqCst) < 5 {
        assert!(
            Instant::now() < deadline,
            "the five uploads did not all get 20 MiB in"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../connectors/github/fixtures/push.json"),
    )
    .expect("push fixture");
    let client = reqwest::Client::builder()
        .local_address(IpAddr::V4(PROBE))
        .build()
        .expect("client");
    let mut statuses = Vec::new();
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(8) {
        i += 1;
        let (status, _) = integration_tests::harness::send_github_webhook(
            &client,
            &server.url,
            "github",
            "push",
            &format!("signed-{i}"),
            &body,
            GITHUB_SECRET,
        )
        .await;
        statuses.push(status);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut uploads = std::collections::BTreeMap::new();
    for sender in senders {
        for status in sender.await.expect("sender") {
            *uploads.entry(status).or_insert(0) += 1;
        }
    }
    (statuses, uploads)
}

/// Asserts every signed delivery was accepted.
fn assert_all_accepted(
    statuses: &[u16],
    uploads: &std::collections::BTreeMap<u16, usize>,
    attack: &str,
) {
    let mut counts = std::collections::BTreeMap::new();
    for s in statuses {
        *counts.entry(*s).or_insert(0) += 1;
    }
    eprintln!("{attack}: signed deliveries {counts:?}; the uploads were answered {uploads:?}");
    assert!(
        statuses.len() >= 10,
        "only {} deliveries sent",
        statuses.len()
    );
    assert!(
        statuses.iter().all(|s| *s == 202),
        "{attack}: signed deliveries from another address were answered {counts:?} (status: count)"
    );
}

/// Five uploads from one address, each trickling a 25 MiB body whose signature will not
/// verify, held the whole webhook reading budget: every signed delivery got `503`. Now
/// that address holds at most its share, and signed deliveries from another address
/// are all accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_uploads_from_one_address_leave_signed_deliveries_accepted() {
    let _alone = machine_load().await;
    let (statuses, uploads) = signed_deliveries_during_trickled_uploads(&[loopback(2)]).await;
    assert_all_accepted(&statuses, &uploads, "five uploads from one address");
}

/// The same from five addresses, one upload each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_uploads_from_five_addresses_leave_signed_deliveries_accepted() {
    let _alone = machine_load().await;
    let sources: Vec<_> = (2..=6).map(loopback).collect();
    let (statuses, uploads) = signed_deliveries_during_trickled_uploads(&sources).await;
    assert_all_accepted(&statuses, &uploads, "five uploads from five addresses");
}
