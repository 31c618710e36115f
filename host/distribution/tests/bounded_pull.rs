//! A pull reads every answer with a limit: a registry (or the token service it names)
//! whose manifest or token answer streams without end is refused at the limit, quickly,
//! and a token no header can carry is refused rather than sent. The registry here is a
//! hand-driven HTTP/1.1 server on 127.0.0.1 (a real registry never misbehaves this way),
//! speaking the distribution specification's bearer-token flow.

use std::time::{Duration, Instant};

use connector_distribution::{pull, DistributionError, OciReference, PullLimits, RegistryAccess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The token the fake's token service hands out, and its manifests require.
const TOKEN: &str = "fake-registry-token";
/// How much an endless answer sends at most (far beyond any limit of a pull).
const ENDLESS_BYTES: usize = 512 << 20;

/// Starts the fake registry; returns its `host:port`.
async fn fake_registry() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let realm = format!("http://{host}/token");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let realm = realm.clone();
            tokio::spawn(async move {
                let _ = answer(stream, &realm).await;
            });
        }
    });
    host
}

async fn answer(mut stream: TcpStream, realm: &str) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let target = head.split(' ').nth(1).unwrap_or("/").to_string();
    let authorized = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {TOKEN}")));
    if target == "/v2/" {
        let challenge = format!("Bearer realm=\"{realm}\",service=\"fake\"");
        return write_all(
            &mut stream,
            "401 Unauthorized",
            &[("WWW-Authenticate", &challenge)],
            b"{}",
        )
        .await;
    }
    if let Some(query) = target.strip_prefix("/token?") {
        return if query.contains("endlesstoken") {
            endless(&mut stream).await
        } else if query.contains("badtoken") {
            let body = br#"{"token": "line\r\nInjected: yes"}"#;
            write_all(
                &mut stream,
                "200 OK",
                &[("Content-Type", "application/json")],
                body,
            )
            .await
        } else {
            let body = format!(r#"{{"token": "{TOKEN}"}}"#);
            write_all(
                &mut stream,
                "200 OK",
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            )
            .await
        };
    }
    if !authorized {
        return write_all(&mut stream, "401 Unauthorized", &[], b"").await;
    }
    if target.starts_with("/v2/bigmanifest/") {
        return endless(&mut stream).await;
    }
    if target.starts_with("/v2/bigdeclared/") {
        // A Content-Length beyond the limit: refused before any byte is read.
        let header = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 1u64 << 40);
        return stream.write_all(header.as_bytes()).await;
    }
    write_all(&mut stream, "404 Not Found", &[], b"").await
}

async fn write_all(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut text = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).await?;
    stream.write_all(body).await
}

/// A 200 answer without a length whose body is spaces until the reader goes away.
async fn endless(stream: &mut TcpStream) -> std::io::Result<()> {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        )
        .await?;
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < ENDLESS_BYTES {
        stream.write_all(&chunk).await?;
        sent += chunk.len();
    }
    Ok(())
}

async fn pull_from(host: &str, kind: &str) -> (DistributionError, Duration) {
    let reference = OciReference::parse(&format!("oci://{host}/{kind}/c:1")).unwrap();
    let started = Instant::now();
    let result = pull(
        &reference,
        &RegistryAccess::default(),
        PullLimits::default(),
        &[],
    )
    .await;
    let elapsed = started.elapsed();
    match result {
        Ok(_) => panic!("a pull from the {kind} registry succeeded"),
        Err(e) => (e, elapsed),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_without_end_is_refused_at_its_limit() {
    let host = fake_registry().await;
    let (error, elapsed) = pull_from(&host, "bigmanifest").await;
    assert!(error.is_artifact(), "{error}");
    assert!(
        error.to_string().contains("manifest larger than 4 MiB"),
        "{error}"
    );
    // Refused at the limit, not after reading what the registry sends.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");

    let (error, _) = pull_from(&host, "bigdeclared").await;
    assert!(
        error.to_string().contains("manifest larger than 4 MiB"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_answer_without_end_is_refused_at_its_limit() {
    let host = fake_registry().await;
    let (error, elapsed) = pull_from(&host, "endlesstoken").await;
    assert!(
        matches!(error, DistributionError::Registry { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("token service's answer: the answer is larger than 64 KiB"),
        "{error}"
    );
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_no_header_can_carry_is_refused_not_sent() {
    let host = fake_registry().await;
    let (error, _) = pull_from(&host, "badtoken").await;
    assert!(
        matches!(error, DistributionError::Registry { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("cannot be sent in a header"),
        "{error}"
    );
    assert!(!error.to_string().contains("Injected"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_a_challenge_leads_to_is_what_later_requests_carry() {
    let host = fake_registry().await;
    // The manifest requests carry the token (else the fake answers 401); this tag
    // does not exist, which the pull reports as such.
    let (error, _) = pull_from(&host, "missing").await;
    assert!(
        matches!(error, DistributionError::Registry { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("has no manifest"), "{error}");
}
