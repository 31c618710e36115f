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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::webhooks::verify::standard_signature;
use integration_tests::guests;
use integration_tests::harness::{ServerProcess, OPERATOR_TOKEN};
use integration_tests::postgres::PgCluster;
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

struct Measured {
    ok: u64,
    failed: u64,
    secs: f64,
    p50: Duration,
    p99: Duration,
}

async fn measure(setup: &Setup, load: Load, conns: usize, secs: u64, run: &str) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for c in 0..conns {
        let base = setup.servers[c % setup.servers.len()].url.clone();
        let token = setup.token.clone();
        let stop = stop.clone();
        let failed = failed.clone();
        let counter = counter.clone();
        let run = run.to_string();
        tasks.push(tokio::spawn(async move {
            // One client per task: its own keep-alive connection to its replica.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .build()
                .unwrap_or_default();
            let body = json!({
                "messages": [{"route": "r", "kind": "bench", "threadKey": null, "payload": {"pad": "x".repeat(7 * 1024)}}]
            });
            let bytes = serde_json::to_vec(&body).unwrap_or_default();
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let ok = match load {
                    Load::ToolCalls => client
                        .post(format!("{base}/api/v1/agents/ada/tool-calls"))
                        .bearer_auth(&token)
                        .json(&json!({"tool": "acme.echo", "arguments": {"message": "hi"}}))
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 200),
                    Load::Webhooks => {
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        let id = format!("{run}-{n}");
                        let ts = time::OffsetDateTime::now_utc().unix_timestamp();
                        let sig = standard_signature(SECRET, &id, ts, &bytes);
                        match client
                            .post(format!("{base}/api/v1/webhooks/hostile"))
                            .header("content-type", "application/json")
                            .header("webhook-id", &id)
                            .header("webhook-timestamp", ts.to_string())
                            .header("webhook-signature", sig)
                            .body(bytes.clone())
                            .send()
                            .await
                        {
                            Ok(r) if r.status() == 202 => r
                                .json::<Value>()
                                .await
                                .is_ok_and(|b| b["status"] == "accepted"),
                            _ => false,
                        }
                    }
                };
                if ok {
                    latencies.push(t0.elapsed());
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pick = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Measured {
        ok: all.len() as u64,
        failed: failed.load(Ordering::Relaxed),
        secs: elapsed,
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

fn report(config: &str, what: &str, m: &Measured) {
    println!(
        "{config:<28} {what:<22} {:>9.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({} ok, {} failed)",
        m.ok as f64 / m.secs,
        m.p50.as_secs_f64() * 1e3,
        m.p99.as_secs_f64() * 1e3,
        m.ok,
        m.failed
    );
}

fn main() -> anyhow::Result<()> {
    let secs = env_num("REPLICAS_BENCH_SECS", 5);
    let conns = env_num("REPLICAS_BENCH_CONNS", 32) as usize;
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
