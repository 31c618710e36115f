//! Durable webhook ingest and HTTP tool calls through real `connector-host serve`
//! processes: one replica on SQLite, one replica on PostgreSQL, three replicas on one
//! PostgreSQL — side by side in one run, on this machine.
//!
//! Run: `cargo build --release -p connector-host && cargo bench -p integration-tests
//! --bench replicas`. Knobs: `REPLICAS_BENCH_SECS` (per measurement, default 5),
//! `REPLICAS_BENCH_CONNS` (concurrent clients, default 32).
//!
//! The load comes from this process over keep-alive connections, each pinned to one
//! replica (round robin over the replicas, like a load balancer with sticky
//! connections). Client and servers share the machine's two cores, so absolute figures
//! are lower than a separate load generator would measure; the comparison between the
//! configurations is what this is for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use loadgen::{contains, Attempt, Check, Limits, MakeRequest, Run};

use connector_host::webhooks::verify::standard_signature;
use integration_tests::guests;
use integration_tests::harness::{ServerProcess, OPERATOR_TOKEN};
use integration_tests::postgres::PgCluster;
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

struct Setup {
    servers: Vec<ServerProcess>,
    _dirs: Vec<tempfile::TempDir>,
    token: String,
}

async fn start(n: usize, database_url: Option<&str>) -> anyhow::Result<Setup> {
    let mut dirs = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir()?;
        let connectors = dir.path().join("connectors");
        std::fs::create_dir_all(&connectors)?;
        std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm"))?;
        let connectors = connectors.to_string_lossy().into_owned();
        let mut env = vec![
            ("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET),
            ("CONNECTOR_HOST_CONNECTORS_DIR", connectors.as_str()),
        ];
        if let Some(url) = database_url {
            env.push(("CONNECTOR_HOST_DATABASE_URL", url));
        }
        servers.push(ServerProcess::start(dir.path(), &env).await);
        dirs.push(dir);
    }
    let client = reqwest::Client::new();
    let base = servers[0].url.clone();
    let op = |method: reqwest::Method, path: &str, body: Value| {
        client
            .request(method, format!("{base}/api/v1{path}"))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&body)
            .send()
    };
    op(reqwest::Method::PUT, "/units/team", json!({}))
        .await?
        .error_for_status()?;
    op(
        reqwest::Method::PUT,
        "/agents/ada",
        json!({"units": ["team"]}),
    )
    .await?
    .error_for_status()?;
    op(
        reqwest::Method::PUT,
        "/units/team/connectors/acme",
        json!({"config": {}}),
    )
    .await?
    .error_for_status()?;
    op(
        reqwest::Method::PUT,
        "/units/team/connectors/hostile",
        json!({"config": {"routes": ["r"]}}),
    )
    .await?
    .error_for_status()?;
    let t: Value = op(reqwest::Method::POST, "/agents/ada/tokens", json!({}))
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = t["token"].as_str().unwrap_or_default().to_string();
    Ok(Setup {
        servers,
        _dirs: dirs,
        token,
    })
}

#[derive(Clone, Copy)]
enum Load {
    ToolCalls,
    Webhooks,
}

async fn measure(setup: &Setup, load: Load, conns: usize, secs: u64, run: &str) -> Run {
    let targets: Vec<SocketAddr> = setup
        .servers
        .iter()
        .filter_map(|s| s.url.trim_start_matches("http://").parse().ok())
        .collect();
    let token = setup.token.clone();
    let run = run.to_string();
    let body = json!({
        "messages": [{"route": "r", "kind": "bench", "threadKey": null, "payload": {"pad": "x".repeat(7 * 1024)}}]
    });
    let hook = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let call = Bytes::from_static(br#"{"tool":"acme.echo","arguments":{"message":"hi"}}"#);
    let make: MakeRequest = Arc::new(move |a: Attempt| {
        let request = Request::post(match load {
            Load::ToolCalls => "/api/v1/agents/ada/tool-calls",
            Load::Webhooks => "/api/v1/webhooks/hostile",
        })
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
        let request = match load {
            Load::ToolCalls => request
                .header("authorization", format!("Bearer {token}"))
                .body(Full::new(call.clone())),
            Load::Webhooks => {
                let id = format!("{run}-{}", a.n);
                let ts = time::OffsetDateTime::now_utc().unix_timestamp();
                let sig = standard_signature(SECRET, &id, ts, &hook);
                request
                    .header("webhook-id", id)
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", sig)
                    .body(Full::new(hook.clone()))
            }
        };
        request.unwrap_or_default()
    });
    let check: Check = match load {
        Load::ToolCalls => |status, _| status == StatusCode::OK,
        Load::Webhooks => |status, body| {
            status == StatusCode::ACCEPTED && contains(body, br#""status":"accepted""#)
        },
    };
    let limits = Limits {
        conns,
        max_requests: u64::MAX,
        max_time: Duration::from_secs(secs),
    };
    loadgen::http(&targets, limits, make, check).await
}

fn report(config: &str, what: &str, m: &Run) {
    m.print(&format!("{config:<28} {what:<22}"), "req");
    let key = |s: &str| {
        s.to_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("_")
    };
    m.emit(&format!("replicas.{}.{}", key(config), key(what)));
}

fn main() -> anyhow::Result<()> {
    let secs = loadgen::env_num("REPLICAS_BENCH_SECS", 5)?;
    let conns = loadgen::env_num("REPLICAS_BENCH_CONNS", 32)? as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let pg = PgCluster::start()?;
        println!(
            "replicas bench: {conns} connections, {secs} s per measurement, 7 KiB webhook bodies, 1 binding"
        );
        let configs: Vec<(&str, usize, Option<String>)> = vec![
            ("SQLite, 1 replica", 1, None),
            ("PostgreSQL, 1 replica", 1, Some(pg.create_database("bench_one")?)),
            ("PostgreSQL, 3 replicas", 3, Some(pg.create_database("bench_three")?)),
        ];
        for (i, (name, n, url)) in configs.iter().enumerate() {
            let setup = start(*n, url.as_deref()).await?;
            // Warm-up: compile caches, pools, connections.
            measure(&setup, Load::ToolCalls, conns, 1, &format!("w{i}")).await;
            let m = measure(&setup, Load::ToolCalls, conns, secs, &format!("t{i}")).await;
            report(name, "HTTP tool calls", &m);
            let m = measure(&setup, Load::Webhooks, conns, secs, &format!("h{i}")).await;
            report(name, "durable webhooks", &m);
        }
        anyhow::Ok(())
    })
}
