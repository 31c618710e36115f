//! Event latency over MCP (CONTRACT.md §5, target p99 ≤ 100 ms on one replica): from a
//! signed GitHub webhook's `202` to `notifications/resources/updated` for the unit's inbox
//! reaching an MCP client, over 1,000 deliveries, on both kinds of subscription at once: a
//! 2026-07-28 `subscriptions/listen` stream and a 2025-11-25 session's GET stream after
//! `resources/subscribe`.
//!
//! Command (from the workspace root):
//!
//! ```text
//! cargo bench -p connector-host --bench mcp_events
//! ```
//!
//! Knob: `MCP_EVENTS_N` (deliveries, default 1000).
//!
//! One host (bundled `github` bound to unit `u1` for `octo/hello`, agent `a1` in `u1`) on
//! its own multi-thread runtime; the client (webhook sender and both streams' readers) on a
//! one-thread runtime in the same process, over 127.0.0.1. Deliveries go one at a time
//! (each a new `X-GitHub-Delivery`, an `issues.opened` of about 400 bytes): send, read the
//! `202`, then wait for the next notification on each stream. A stream's reader stamps an
//! event when its bytes arrive, so a notification that overtakes the `202` (the message is
//! committed and announced before the answer is written) counts as 0 ms and is counted
//! apart; the time from sending the webhook to the notification is printed beside it.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use connector_host::config::{ConnectorSettings, HostConfig};
use connector_host::webhooks::verify::github_signature;
use connector_host::Host;
use serde_json::json;

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPERATOR_TOKEN: &str = "bench-operator-token";
const SECRET: &str = "bench-github-webhook-secret";
const URI: &str = "spring://units/u1/messages";
const UPDATED: &str = "notifications/resources/updated";
/// The target p99, webhook `202` → notification.
const TARGET: Duration = Duration::from_millis(100);

/// Reads an SSE response and sends the arrival time of each `resources/updated` event.
fn stamp_updates(response: reqwest::Response) -> tokio::sync::mpsc::UnboundedReceiver<Instant> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut response = response;
        let mut buffer = String::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let at = Instant::now();
            buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                if event.contains(UPDATED) && tx.send(at).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// p50, p99 and max of `samples` (sorted here).
fn summary(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i]
    };
    (at(0.5), at(0.99), samples[samples.len() - 1])
}

fn main() -> anyhow::Result<()> {
    let n = std::env::var("MCP_EVENTS_N")
        .ok()
        .map(|v| v.parse::<usize>())
        .transpose()
        .context("MCP_EVENTS_N")?
        .unwrap_or(1000);
    if n == 0 {
        bail!("MCP_EVENTS_N must be > 0");
    }
    let server = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server")
        .build()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("client")
        .build()?;

    let dir = tempfile::tempdir()?;
    let (addr, token) = server.block_on(async {
        let mut config = HostConfig {
            data_dir: dir.path().to_path_buf(),
            operator_token: Some(OPERATOR_TOKEN.into()),
            ..HostConfig::default()
        };
        config.connectors.insert(
            "github".into(),
            ConnectorSettings {
                webhook_secrets: vec![SECRET.into()],
                ..ConnectorSettings::default()
            },
        );
        let (host, _) = Host::open(config).await?;
        host.put_unit("u1", None, None).await?;
        host.put_agent("a1", &["u1".to_string()], None).await?;
        host.bind("u1", "github", json!({"repo": "octo/hello"}))
            .await?;
        let token = host.issue_agent_token("a1", None).await?.token;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(connector_host::server::serve_on(
            listener,
            host.clone(),
            std::future::pending(),
        ));
        anyhow::Ok((addr, token))
    })?;

    let endpoint = format!("http://{addr}/mcp/agents/a1");
    let (listen_202, listen_sent, session_202, session_sent, overtook) =
        client.block_on(async {
            let http = reqwest::Client::new();
            // 2026-07-28: subscriptions/listen with the inbox.
            let listen = http
                .post(&endpoint)
                .bearer_auth(&token)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "subscriptions/listen")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                    "params": {"notifications": {"resourceSubscriptions": [URI]}, "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientInfo": {"name": "mcp_events", "version": "0"},
                        "io.modelcontextprotocol/clientCapabilities": {}}}}))
                .send()
                .await?;
            if !listen.status().is_success() {
                bail!("subscriptions/listen answered {}", listen.status());
            }
            let mut listen = stamp_updates(listen);
            // 2025-11-25: a session, resources/subscribe, its GET stream.
            let init = http
                .post(&endpoint)
                .bearer_auth(&token)
                .json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "mcp_events", "version": "0"}}}))
                .send()
                .await?;
            let session = init
                .headers()
                .get("mcp-session-id")
                .cloned()
                .ok_or_else(|| anyhow!("initialize answered {} without a session", init.status()))?;
            let subscribed = http
                .post(&endpoint)
                .bearer_auth(&token)
                .header("mcp-session-id", session.clone())
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                    "params": {"uri": URI}}))
                .send()
                .await?
                .text()
                .await?;
            if !subscribed.contains("\"result\"") {
                bail!("resources/subscribe answered {subscribed}");
            }
            let stream = http
                .get(&endpoint)
                .bearer_auth(&token)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", session)
                .send()
                .await?;
            let mut session_events = stamp_updates(stream);
            // Let both streams settle (the listen acknowledgement, the GET stream's open).
            tokio::time::sleep(Duration::from_millis(300)).await;

            let mut listen_202 = Vec::with_capacity(n);
            let mut listen_sent = Vec::with_capacity(n);
            let mut session_202 = Vec::with_capacity(n);
            let mut session_sent = Vec::with_capacity(n);
            let mut overtook = 0usize;
            for i in 0..n {
                let body = json!({
                    "action": "opened",
                    "issue": {"number": i + 1, "title": format!("Issue {i}"), "state": "open",
                        "user": {"login": "octocat"}, "labels": [], "body": "x".repeat(200),
                        "html_url": format!("https://github.com/octo/hello/issues/{}", i + 1)},
                    "repository": {"full_name": "octo/hello"},
                    "sender": {"login": "octocat"},
                })
                .to_string();
                let sent = Instant::now();
                let answer = http
                    .post(format!("http://{addr}/api/v1/webhooks/github"))
                    .header("content-type", "application/json")
                    .header("x-github-event", "issues")
                    .header("x-github-delivery", format!("bench-{i}"))
                    .header(
                        "x-hub-signature-256",
                        github_signature(SECRET, body.as_bytes()),
                    )
                    .body(body)
                    .send()
                    .await?;
                let status = answer.status();
                let text = answer.text().await?;
                let accepted = Instant::now();
                if status.as_u16() != 202 || !text.contains("\"u1\"") {
                    bail!("delivery {i}: {status} {text}");
                }
                for (events, to_202, to_sent) in [
                    (&mut listen, &mut listen_202, &mut listen_sent),
                    (&mut session_events, &mut session_202, &mut session_sent),
                ] {
                    let at = tokio::time::timeout(Duration::from_secs(5), events.recv())
                        .await
                        .map_err(|_| anyhow!("delivery {i}: no notification within 5 s"))?
                        .ok_or_else(|| anyhow!("delivery {i}: the stream ended"))?;
                    if at < accepted {
                        overtook += 1;
                    }
                    to_202.push(at.saturating_duration_since(accepted));
                    to_sent.push(at.duration_since(sent));
                }
            }
            anyhow::Ok((listen_202, listen_sent, session_202, session_sent, overtook))
        })?;

    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    println!("# mcp_events: cargo bench -p connector-host --bench mcp_events");
    println!(
        "# {n} signed GitHub issues.opened deliveries, one at a time; one replica (SQLite); {cores} cores"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut worst_p99 = Duration::ZERO;
    for (label, mut to_202, mut to_sent) in [
        ("subscriptions/listen (2026-07-28)", listen_202, listen_sent),
        ("session GET stream (2025-11-25)", session_202, session_sent),
    ] {
        let (p50, p99, max) = summary(&mut to_202);
        let (s50, s99, _) = summary(&mut to_sent);
        worst_p99 = worst_p99.max(p99);
        println!(
            "{label:<36} 202 -> notification p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms   (send -> notification p50 {:.3} ms  p99 {:.3} ms)",
            ms(p50),
            ms(p99),
            ms(max),
            ms(s50),
            ms(s99)
        );
    }
    println!(
        "notifications that arrived before the 202 was read (counted as 0 ms): {overtook} of {}",
        2 * n
    );
    let verdict = if worst_p99 <= TARGET { "met" } else { "MISSED" };
    println!("target p99 <= {} ms: {verdict}", TARGET.as_millis());
    Ok(())
}
