//! MCP `tools/call` over Streamable HTTP, in a `2025-11-25` session and statelessly at
//! `2026-07-28`, versus the plain HTTP tool-call path, side by side in one run (target: MCP
//! `tools/call` ≤ 1.1× `POST /agents/{id}/tool-calls`, for both revisions).
//!
//! Command (from the workspace root):
//!
//! ```text
//! cargo bench -p connector-host --bench mcp_load
//! ```
//!
//! Knobs (environment): `MCP_LOAD_CONNS` (concurrent connections = MCP sessions, default
//! 32), `MCP_LOAD_SECS` (time limit per timed run, default 3), `MCP_LOAD_REQS` (request
//! limit per timed run, default 20000), `MCP_LOAD_ROUNDS` (alternating rounds, default 3).
//!
//! One host (bundled `acme` bound to a unit, one agent with an agent token) serves both
//! paths on its own multi-thread runtime; the closed-loop load generator (HTTP/1.1
//! keep-alive, 127.0.0.1, one thread) runs on a separate runtime in the same process.
//! Each round runs, in this order: HTTP, MCP session and MCP stateless sequentially (1
//! connection; the session one in 1 session), then the same three with N connections (one
//! session each); the rounds alternate so drift on a shared machine hits every path alike.
//! A stateless request carries what a 2026-07-28 client sends: `_meta` with the revision,
//! client info and capabilities, and the `MCP-Protocol-Version`, `Mcp-Method` and
//! `Mcp-Name` headers. A request counts only with the expected answer (HTTP
//! `200 {"result": {"message":"hi"}}`, MCP `200` with `"isError":false`). The ratio is
//! MCP / HTTP: of the p50 latency for the sequential runs, and of the cost per call (HTTP
//! calls/s over MCP calls/s) for the concurrent ones.
//!
//! Name mapping: the same two MCP paths run again on `/mcp/agents/a1?toolNames=flat`
//! (calling `acme__echo`, mapped back to `acme.echo` among the agent's effective tools),
//! and their ratio to the canonical endpoint is printed (flat / canonical: what the
//! mapping costs, expected within noise).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use connector_host::config::HostConfig;
use connector_host::Host;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::Full;
use loadgen::{contains, env_num, Attempt, Limits, MakeRequest as Make, Run};
use serde_json::{json, Value};

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPERATOR_TOKEN: &str = "bench-operator-token";
const HTTP_BODY: &str = r#"{"tool":"acme.echo","arguments":{"message":"hi"}}"#;
const MCP_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"hi"}}}"#;
const STATELESS_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme.echo","arguments":{"message":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp_load","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
const VERSION: &str = "2025-11-25";
const STATELESS_VERSION: &str = "2026-07-28";
const FLAT_MCP_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme__echo","arguments":{"message":"hi"}}}"#;
const FLAT_STATELESS_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"acme__echo","arguments":{"message":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp_load","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
/// The target ratio MCP / HTTP.
const TARGET: f64 = 1.1;

fn check_http(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::OK && body == br#"{"result":{"message":"hi"}}"#
}

fn check_mcp(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::OK
        && contains(body, br#""isError":false"#)
        && contains(body, br#""structuredContent":{"message":"hi"}"#)
}

fn print(label: &str, r: &Run) {
    r.print(&format!("{label:<28}"), "calls");
}

fn main() -> anyhow::Result<()> {
    let conns = env_num("MCP_LOAD_CONNS", 32)? as usize;
    let max_requests = env_num("MCP_LOAD_REQS", 20_000)?;
    let max_time = Duration::from_secs(env_num("MCP_LOAD_SECS", 3)?);
    let rounds = env_num("MCP_LOAD_ROUNDS", 3)?;
    if conns == 0 || max_requests == 0 || rounds == 0 {
        bail!("MCP_LOAD_CONNS, MCP_LOAD_REQS and MCP_LOAD_ROUNDS must be > 0");
    }
    let server = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server")
        .build()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("load")
        .build()?;

    // ----- the host ------------------------------------------------------------------------
    let dir = tempfile::tempdir()?;
    let (addr, agent_token) = server.block_on(async {
        let config = HostConfig {
            data_dir: dir.path().to_path_buf(),
            operator_token: Some(OPERATOR_TOKEN.into()),
            bundled: connector_bundled::components(),
            ..HostConfig::default()
        };
        let (host, _) = Host::open(config).await?;
        host.put_unit("u1", None, None).await?;
        host.put_agent("a1", &["u1".to_string()], None).await?;
        host.bind("u1", "acme", json!({})).await?;
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
    let bearer = HeaderValue::from_str(&format!("Bearer {agent_token}"))?;

    // ----- MCP sessions (one per connection), on the canonical and the flat endpoint ------
    let open_sessions =
        |path: &'static str| client.block_on(open_sessions(addr, path, &agent_token, conns));
    let sessions = Arc::new(open_sessions("/mcp/agents/a1")?);
    let flat_sessions = Arc::new(open_sessions("/mcp/agents/a1?toolNames=flat")?);
    run_all(
        &client,
        addr,
        bearer,
        sessions,
        flat_sessions,
        (conns, max_requests, max_time, rounds),
    )
}

/// `conns` sessions opened on `path`.
async fn open_sessions(
    addr: std::net::SocketAddr,
    path: &str,
    agent_token: &str,
    conns: usize,
) -> anyhow::Result<Vec<HeaderValue>> {
    {
        let http = reqwest::Client::new();
        let mut out = Vec::with_capacity(conns);
        for _ in 0..conns {
            let r = http
                .post(format!("http://{addr}{path}"))
                .bearer_auth(agent_token)
                .json(
                    &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": VERSION, "capabilities": {},
                    "clientInfo": {"name": "mcp_load", "version": "0"}}}),
                )
                .send()
                .await?;
            let session =
                r.headers().get("mcp-session-id").cloned().ok_or_else(|| {
                    anyhow!("initialize answered {} without a session", r.status())
                })?;
            let body: Value = r.json().await?;
            if body["result"]["protocolVersion"] != VERSION {
                bail!("initialize answered {body}");
            }
            http.post(format!("http://{addr}{path}"))
                .bearer_auth(agent_token)
                .header("mcp-session-id", session.clone())
                .header("mcp-protocol-version", VERSION)
                .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .send()
                .await?;
            out.push(session);
        }
        anyhow::Ok(out)
    }
}

/// A session request maker: `body` to `path`, each connection in its own session.
fn session_maker(
    bearer: &HeaderValue,
    sessions: &Arc<Vec<HeaderValue>>,
    path: &'static str,
    body: &'static str,
) -> Make {
    let bearer = bearer.clone();
    let sessions = sessions.clone();
    Arc::new(move |a: Attempt| {
        let conn = a.conn;
        Request::post(path)
            .header(http::header::HOST, "127.0.0.1")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::AUTHORIZATION, bearer.clone())
            .header("mcp-session-id", sessions[conn % sessions.len()].clone())
            .header("mcp-protocol-version", VERSION)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap_or_default()
    })
}

/// A stateless request maker: `body` (calling `name`) to `path`.
fn stateless_maker(
    bearer: &HeaderValue,
    path: &'static str,
    name: &'static str,
    body: &'static str,
) -> Make {
    let bearer = bearer.clone();
    Arc::new(move |_| {
        Request::post(path)
            .header(http::header::HOST, "127.0.0.1")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::AUTHORIZATION, bearer.clone())
            .header("mcp-protocol-version", STATELESS_VERSION)
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap_or_default()
    })
}

fn run_all(
    client: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    bearer: HeaderValue,
    sessions: Arc<Vec<HeaderValue>>,
    flat_sessions: Arc<Vec<HeaderValue>>,
    (conns, max_requests, max_time, rounds): (usize, u64, Duration, u64),
) -> anyhow::Result<()> {
    let http_make: Make = {
        let bearer = bearer.clone();
        Arc::new(move |_| {
            Request::post("/api/v1/agents/a1/tool-calls")
                .header(http::header::HOST, "127.0.0.1")
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::AUTHORIZATION, bearer.clone())
                .body(Full::new(Bytes::from_static(HTTP_BODY.as_bytes())))
                .unwrap_or_default()
        })
    };
    let mcp_make = session_maker(&bearer, &sessions, "/mcp/agents/a1", MCP_BODY);
    let stateless_make = stateless_maker(&bearer, "/mcp/agents/a1", "acme.echo", STATELESS_BODY);
    let flat_mcp_make = session_maker(
        &bearer,
        &flat_sessions,
        "/mcp/agents/a1?toolNames=flat",
        FLAT_MCP_BODY,
    );
    let flat_stateless_make = stateless_maker(
        &bearer,
        "/mcp/agents/a1?toolNames=flat",
        "acme__echo",
        FLAT_STATELESS_BODY,
    );

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("# mcp_load: cargo bench -p connector-host --bench mcp_load");
    println!(
        "# acme.echo {{\"message\":\"hi\"}}; {rounds} alternating rounds; each run stops at {max_requests} calls or {} s; \
         concurrent = {conns} connections (MCP: one session each); load generator 1 thread; {cores} cores",
        max_time.as_secs()
    );
    let seq = Limits {
        conns: 1,
        max_requests,
        max_time,
    };
    let par = Limits {
        conns,
        max_requests,
        max_time,
    };
    // Warm-up: connections, allocator, the component's instance pool.
    let warm = Limits {
        conns,
        max_requests: 3_000,
        max_time,
    };
    let _ = client.block_on(loadgen::http(&[addr], warm, http_make.clone(), check_http));
    let _ = client.block_on(loadgen::http(&[addr], warm, mcp_make.clone(), check_mcp));
    let _ = client.block_on(loadgen::http(
        &[addr],
        warm,
        flat_mcp_make.clone(),
        check_mcp,
    ));
    let _ = client.block_on(loadgen::http(
        &[addr],
        warm,
        stateless_make.clone(),
        check_mcp,
    ));

    let runs = [
        (
            "HTTP tool-calls, sequential",
            seq,
            &http_make,
            check_http as loadgen::Check,
        ),
        ("MCP session, sequential", seq, &mcp_make, check_mcp),
        ("MCP stateless, sequential", seq, &stateless_make, check_mcp),
        ("HTTP tool-calls, concurrent", par, &http_make, check_http),
        ("MCP session, concurrent", par, &mcp_make, check_mcp),
        ("MCP stateless, concurrent", par, &stateless_make, check_mcp),
        (
            "MCP session flat, sequential",
            seq,
            &flat_mcp_make,
            check_mcp,
        ),
        (
            "MCP stateless flat, sequential",
            seq,
            &flat_stateless_make,
            check_mcp,
        ),
        (
            "MCP session flat, concurrent",
            par,
            &flat_mcp_make,
            check_mcp,
        ),
        (
            "MCP stateless flat, concurrent",
            par,
            &flat_stateless_make,
            check_mcp,
        ),
    ];
    let mut totals: [Run; 10] = Default::default();
    for round in 1..=rounds {
        println!("\nround {round}");
        for (i, (label, limits, make, check)) in runs.iter().enumerate() {
            let r = client.block_on(loadgen::http(&[addr], *limits, (*make).clone(), *check));
            print(label, &r);
            totals[i].absorb(r);
        }
    }

    println!("\nall rounds");
    for ((label, ..), run) in runs.iter().zip(&totals) {
        print(label, run);
    }
    let p50 = |r: &Run| r.percentile(0.5).as_secs_f64();
    let verdict = |r: f64| if r <= TARGET { "met" } else { "MISSED" };
    println!("\nratios MCP / HTTP (target ≤ {TARGET})");
    for (name, seq_i, par_i) in [("session", 1, 4), ("stateless", 2, 5)] {
        let seq_ratio = p50(&totals[seq_i]) / p50(&totals[0]).max(1e-12);
        let seq_p99 = totals[seq_i].percentile(0.99).as_secs_f64()
            / totals[0].percentile(0.99).as_secs_f64().max(1e-12);
        let par_ratio = totals[3].rate() / totals[par_i].rate().max(1e-9);
        let par_p50 = p50(&totals[par_i]) / p50(&totals[3]).max(1e-12);
        println!(
            "  {name:<10} sequential p50 {seq_ratio:.3} ({})   p99 {seq_p99:.3}",
            verdict(seq_ratio)
        );
        println!(
            "  {name:<10} concurrent cost per call (HTTP calls/s ÷ MCP calls/s) {par_ratio:.3} ({})   p50 {par_p50:.3}",
            verdict(par_ratio)
        );
    }
    println!("\nname mapping: flat / canonical (expected within noise)");
    for (name, canonical_seq, canonical_par, flat_seq, flat_par) in
        [("session", 1, 4, 6, 8), ("stateless", 2, 5, 7, 9)]
    {
        let seq_ratio = p50(&totals[flat_seq]) / p50(&totals[canonical_seq]).max(1e-12);
        let par_ratio = totals[canonical_par].rate() / totals[flat_par].rate().max(1e-9);
        println!(
            "  {name:<10} sequential p50 {seq_ratio:.3}   concurrent cost per call {par_ratio:.3}"
        );
    }
    let errors: u64 = totals.iter().map(|r| r.errors).sum();
    if errors > 0 {
        bail!("{errors} requests failed");
    }
    Ok(())
}
