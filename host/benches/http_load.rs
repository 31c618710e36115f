//! HTTP load benchmarks of the host, all in one run so the ratios are measured side by side.
//!
//! Command (from the workspace root):
//!
//! ```text
//! cargo build -p integration-tests --tests        # builds target/guests/components/hostile.wasm
//! cargo bench -p connector-host --bench http_load
//! ```
//!
//! Knobs (environment): `HTTP_LOAD_CONNS` (keep-alive connections, default 32),
//! `HTTP_LOAD_SECS` (time limit per timed run, default 5), `HTTP_LOAD_REQS` (request limit
//! per timed run, default 50000), `HTTP_LOAD_CLIENT_THREADS` (load generator threads,
//! default 1), `HTTP_LOAD_BINDINGS` (bindings of the large routing case, default 10000),
//! `HOSTILE_WASM` (path of the `hostile` test component, default
//! `target/guests/components/hostile.wasm` under the workspace root),
//! `HTTP_LOAD_STOP_AFTER=2` (end after scenario 2, to profile the tool-call path alone:
//! `perf record --call-graph dwarf -- target/release/deps/http_load-* --bench`).
//! `HTTP_LOAD_TABLE=1` (scenarios 1, 2 and 4 only, without their diagnostics: the rows
//! `bench/table.py` reads). `OTEL_EXPORTER_OTLP_ENDPOINT` (and the other `OTEL_*`
//! variables): export the host's spans as `serve` does, to measure export's cost. Every
//! headline figure is also printed as one `@result` line
//! (`@result <key> rate=… p50_us=… p99_us=… errors=…`) for scripts.
//!
//! The load generator is closed-loop: each of N connections (HTTP/1.1 keep-alive,
//! 127.0.0.1 only) sends one request, reads the whole answer, then sends the next. A run
//! stops at the request limit or the time limit, whichever comes first. Servers run on
//! their own multi-thread tokio runtime (one worker per core); the load generator runs on a
//! separate runtime in the same process, so both share the machine's cores, as `oha` on
//! the same machine would. Any status or body other than the expected one is an error: it
//! is counted, and the first few distinct ones are printed.
//!
//! Scenarios:
//! 1. a plain axum JSON echo handler (the floor);
//! 2. `POST /api/v1/agents/{id}/tool-calls` of `acme.echo` with an agent token
//!    (2b, diagnostic: the same `Host::call_tool` in-process, no HTTP);
//! 3. bind + unbind of `acme` on one unit through the Rust API, sequentially;
//! 4. durable signed Standard Webhooks deliveries of ~8 KiB to `hostile` (one binding);
//!    4b: a plain axum handler that only verifies the same signature;
//!    4c, diagnostic: deliveries whose message matches no binding (no `accept`, no message
//!    written); 4d, diagnostic: re-sent delivery ids (`duplicate`: verify, route, then the
//!    de-duplicating write finds the id);
//! 5. the webhook scenario with 10 versus 10,000 bindings of `hostile`, each with its own
//!    routing key, deliveries routed to one key; alternating rounds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use connector_host::config::{ConnectorSettings, HostConfig};
use connector_host::webhooks::verify::{self as signature, standard_signature};
use connector_host::Host;
use connector_model::connector::WebhookSchemeName;
use connector_runtime::{ConnectorRuntime, LoadedComponent, RuntimeOptions};
use connector_store::sqlite::SqliteStore;
use connector_store::DeliveryQueue as _;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::Full;
use loadgen::{contains, env_num, loadavg, ms, Attempt, Limits, MakeRequest, Run};
use serde_json::{json, Value};

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPERATOR_TOKEN: &str = "bench-operator-token";
const TOOL_CALL_BODY: &str = r#"{"tool":"acme.echo","arguments":{"message":"hi"}}"#;

// ---------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------

fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn hostile_wasm() -> anyhow::Result<Vec<u8>> {
    let path = match std::env::var_os("HOSTILE_WASM") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join("target/guests/components/hostile.wasm"),
    };
    std::fs::read(&path).map_err(|e| {
        anyhow!(
            "cannot read the `hostile` test component at {} ({e}).\n\
             Build it with `cargo build -p integration-tests --tests`, or point HOSTILE_WASM \
             at it.",
            path.display()
        )
    })
}

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

struct Row {
    name: String,
    unit: &'static str,
    rate: f64,
    p50: Duration,
    p99: Duration,
    errors: u64,
    note: String,
}

impl Row {
    fn new(name: &str, unit: &'static str, r: &Run, note: String) -> Row {
        Row {
            name: name.to_string(),
            unit,
            rate: r.rate(),
            p50: r.percentile(0.50),
            p99: r.percentile(0.99),
            errors: r.errors,
            note,
        }
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

// ---------------------------------------------------------------------------------------
// The load generator
// ---------------------------------------------------------------------------------------

fn check_echo(status: StatusCode, body: &[u8]) -> bool {
    // `serde_json::Value` sorts keys, so the echo is not byte-identical.
    status == StatusCode::OK
        && body.len() == TOOL_CALL_BODY.len()
        && contains(body, br#""message":"hi""#)
}

fn check_tool_call(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::OK && contains(body, br#""result""#) && contains(body, b"hi")
}

fn check_accepted(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::ACCEPTED && contains(body, br#""status":"accepted""#)
}

fn check_duplicate(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::ACCEPTED && contains(body, br#""status":"duplicate""#)
}

fn post_json(path: &str) -> http::request::Builder {
    Request::post(path)
        .header(http::header::HOST, "127.0.0.1")
        .header(http::header::CONTENT_TYPE, "application/json")
}

// ---------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------

async fn serve(router: Router) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(addr)
}

fn echo_router() -> Router {
    Router::new().route("/echo", post(|Json(v): Json<Value>| async move { Json(v) }))
}

fn verify_only_router(secrets: Arc<Vec<String>>) -> Router {
    Router::new().route(
        "/hook",
        post(move |headers: http::HeaderMap, body: Bytes| {
            let secrets = secrets.clone();
            async move {
                let now = time::OffsetDateTime::now_utc().unix_timestamp();
                match signature::verify(WebhookSchemeName::StandardWebhooks, &secrets, &headers, &body, now) {
                    Ok(d) => (
                        StatusCode::ACCEPTED,
                        Json(json!({"delivery": d.delivery_id, "status": "accepted", "routedTo": []})),
                    ),
                    Err(e) => (
                        StatusCode::UNAUTHORIZED,
                        Json(json!({"error": {"code": "invalid_signature", "message": e.to_string()}})),
                    ),
                }
            }
        }),
    )
}

/// A host on a fresh temporary data directory, served on an ephemeral port.
struct BenchHost {
    host: Host,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

/// What the diagnostic rows drive directly, beside a host and never through it: the
/// host's SQLite file through a connection of its own, and a runtime of the same
/// settings with the `hostile` component loaded in it.
struct Beside {
    store: SqliteStore,
    runtime: ConnectorRuntime,
    hostile: LoadedComponent,
}

impl Beside {
    fn open(bench: &BenchHost) -> anyhow::Result<Arc<Beside>> {
        let db = bench.dir.path().join("host.db");
        let store = SqliteStore::open(&db).with_context(|| db.display().to_string())?;
        let runtime = ConnectorRuntime::new(RuntimeOptions::default())?;
        let hostile = runtime
            .load(&hostile_wasm()?)
            .context("the hostile component")?;
        Ok(Arc::new(Beside {
            store,
            runtime,
            hostile,
        }))
    }
}

async fn open_host(webhook_secret: Option<&str>) -> anyhow::Result<BenchHost> {
    let dir = tempfile::tempdir()?;
    let mut config = HostConfig {
        data_dir: dir.path().to_path_buf(),
        operator_token: Some(OPERATOR_TOKEN.into()),
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    };
    if let Some(secret) = webhook_secret {
        config.connectors.insert(
            "hostile".into(),
            ConnectorSettings {
                webhook_secrets: vec![secret.to_string()],
                ..ConnectorSettings::default()
            },
        );
    }
    let (host, _) = Host::open(config).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(connector_host::server::serve_on(
        listener,
        host.clone(),
        std::future::pending(),
    ));
    Ok(BenchHost { host, addr, dir })
}

// ---------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------

/// A webhook body of about `pad` bytes of payload whose one message goes to `route`.
fn webhook_body(route: &str, pad: usize) -> Bytes {
    let body = json!({"messages": [{
        "route": route,
        "kind": "bench.event",
        "threadKey": "t1",
        "payload": {"pad": "x".repeat(pad)},
    }]});
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// Pre-signed deliveries: one unique id (and its signature) per request.
struct Signed {
    path: String,
    body: Bytes,
    timestamp: HeaderValue,
    /// (webhook-id, webhook-signature)
    headers: Vec<(HeaderValue, HeaderValue)>,
}

fn presign(secret: &str, path: &str, prefix: &str, body: Bytes, n: u64) -> anyhow::Result<Signed> {
    let ts = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut headers = Vec::with_capacity(n as usize);
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        let sig = standard_signature(secret, &id, ts, &body);
        headers.push((HeaderValue::from_str(&id)?, HeaderValue::from_str(&sig)?));
    }
    Ok(Signed {
        path: path.to_string(),
        body,
        timestamp: HeaderValue::from_str(&ts.to_string())?,
        headers,
    })
}

fn webhook_requests(signed: Arc<Signed>) -> MakeRequest {
    Arc::new(move |a: Attempt| {
        let (id, sig) = &signed.headers[(a.n as usize) % signed.headers.len()];
        post_json(&signed.path)
            .header("webhook-id", id.clone())
            .header("webhook-timestamp", signed.timestamp.clone())
            .header("webhook-signature", sig.clone())
            .body(Full::new(signed.body.clone()))
            .unwrap_or_default()
    })
}

/// Pre-signs `limits.max_requests` deliveries and runs them (timestamps stay fresh: the
/// run is far shorter than the ±300 s window).
fn webhook_run(
    client: &tokio::runtime::Runtime,
    (addr, path): (SocketAddr, &str),
    limits: Limits,
    secret: &str,
    prefix: &str,
    body: Bytes,
    check: loadgen::Check,
) -> anyhow::Result<(Run, Arc<Signed>)> {
    let signed = Arc::new(presign(secret, path, prefix, body, limits.max_requests)?);
    let r = client.block_on(loadgen::http(
        &[addr],
        limits,
        webhook_requests(signed.clone()),
        check,
    ));
    Ok((r, signed))
}

async fn call_tool_inprocess(host: &Host, limits: Limits) -> Run {
    let h = host.clone();
    loadgen::in_process(limits, move |_| {
        let h = h.clone();
        async move {
            h.call_tool("a1", "acme.echo", json!({"message": "hi"}))
                .await?;
            Ok(())
        }
    })
    .await
}

fn delivery_record(
    id: &str,
    body: &Bytes,
    headers: Vec<(String, String)>,
) -> connector_model::records::DeliveryRecord {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    connector_model::records::DeliveryRecord {
        connector: "hostile".into(),
        delivery_id: id.to_string(),
        event: None,
        headers,
        body: body.to_vec(),
        received_unix: now,
        received_at: connector_model::ids::now_rfc3339(),
        status: connector_model::records::DeliveryStatus::Pending,
        attempts: 0,
        error: None,
        routed_to: Vec::new(),
        claimed_by: None,
        claim_until: 0,
    }
}

/// A claim that holds for the whole run.
fn bench_claim() -> connector_model::records::Claim {
    connector_model::records::Claim {
        owner: "bench".into(),
        until_unix: i64::MAX / 2,
    }
}

fn message_record(
    id: &str,
    kind: &str,
    payload: &Value,
    received_at: &str,
) -> connector_model::records::MessageRecord {
    connector_model::records::MessageRecord {
        seq: 0,
        id: format!("msg_{id}"),
        unit_id: "w0".into(),
        connector: "hostile".into(),
        kind: kind.to_string(),
        delivery_id: id.to_string(),
        thread_key: Some("t1".into()),
        payload: payload.clone(),
        received_at: received_at.to_string(),
    }
}

/// Only the store's two transactions of a delivery stored before it is routed (the path
/// of one that outlasts the inline window), concurrently (no HTTP, no guest).
async fn store_only(beside: &Arc<Beside>, body: &Bytes, prefix: &str, limits: Limits) -> Run {
    let payload: Value =
        serde_json::from_slice::<Value>(body).unwrap_or_default()["messages"][0]["payload"].clone();
    let (h, body, prefix) = (beside.clone(), body.clone(), prefix.to_string());
    loadgen::in_process(limits, move |a: Attempt| {
        let (h, body, payload) = (h.clone(), body.clone(), payload.clone());
        let id = format!("{prefix}-{}", a.n);
        async move {
            let record = delivery_record(&id, &body, Vec::new());
            let fresh = h
                .store
                .insert_delivery(&record, 7 * 24 * 3600, &bench_claim(), None)
                .await?;
            if !fresh {
                bail!("duplicate");
            }
            let m = message_record(&id, "bench.event", &payload, &record.received_at);
            h.store
                .complete_delivery("hostile", &id, &[m], &["w0".to_string()], None)
                .await?;
            Ok(())
        }
    })
    .await
}

/// Only the guest's translate-webhook + accept of a delivery, concurrently (no store).
async fn guest_only(
    host: &Host,
    beside: &Arc<Beside>,
    body: &Bytes,
    limits: Limits,
) -> anyhow::Result<Run> {
    use connector_runtime::wit;
    let binding = host
        .all_bindings()
        .into_iter()
        .find(|b| b.unit_id == "w0" && b.connector == "hostile")
        .ok_or_else(|| anyhow!("hostile is not bound to w0"))?;
    let sandbox = Arc::new(host.sandbox("hostile", None));
    let bound = Arc::new(host.sandbox("hostile", Some(&binding)));
    let (h, body) = (beside.clone(), body.clone());
    Ok(loadgen::in_process(limits, move |_| {
        let (h, body) = (h.clone(), body.to_vec());
        let (sandbox, bound) = (sandbox.clone(), bound.clone());
        async move {
            let messages = h
                .runtime
                .translate_webhook(
                    &h.hostile,
                    &sandbox,
                    wit::Webhook {
                        headers: vec![("content-type".to_string(), "application/json".to_string())],
                        body,
                    },
                )
                .await?
                .map_err(|refused| anyhow!("translate refused: {refused}"))?;
            for m in messages {
                let binding = wit::Binding {
                    unit: "w0".into(),
                    config: r#"{"routes":["r1"]}"#.into(),
                };
                if !h.runtime.accept(&h.hostile, &bound, binding, m).await? {
                    bail!("not accepted");
                }
            }
            Ok(())
        }
    })
    .await)
}

/// p50 of each step a delivery goes through, run in-process one after the other:
/// the guest's `translate-webhook` and `accept`, and the store's two transactions.
async fn webhook_steps(
    host: &Host,
    beside: &Beside,
    body: &Bytes,
    n: usize,
) -> anyhow::Result<Vec<(&'static str, Duration)>> {
    use connector_runtime::wit;

    let sandbox = host.sandbox("hostile", None);
    let binding = host
        .all_bindings()
        .into_iter()
        .find(|b| b.unit_id == "w0" && b.connector == "hostile")
        .ok_or_else(|| anyhow!("hostile is not bound to w0"))?;
    let bound = host.sandbox("hostile", Some(&binding));
    let p50 = |mut v: Vec<u64>| {
        v.sort_unstable();
        Duration::from_nanos(v[v.len() / 2])
    };
    let (mut translate, mut accept, mut insert, mut complete, mut verify) =
        (vec![], vec![], vec![], vec![], vec![]);
    let secret = host
        .config()
        .connector("hostile")
        .webhook_secrets
        .first()
        .cloned()
        .unwrap_or_default();
    let payload: Value = serde_json::from_slice::<Value>(body)?["messages"][0]["payload"].clone();
    for i in 0..n {
        let id = format!("steps-{i}");
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let sig = standard_signature(&secret, &id, now, body);
        let headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("webhook-id".to_string(), id.clone()),
            ("webhook-timestamp".to_string(), now.to_string()),
            ("webhook-signature".to_string(), sig),
        ];

        let t = Instant::now();
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        signature::verify(
            WebhookSchemeName::StandardWebhooks,
            std::slice::from_ref(&secret),
            pairs.as_slice(),
            body,
            now,
        )
        .context("verify")?;
        verify.push(t.elapsed().as_nanos() as u64);

        let record = delivery_record(&id, body, headers.clone());
        let t = Instant::now();
        beside
            .store
            .insert_delivery(&record, 7 * 24 * 3600, &bench_claim(), None)
            .await?;
        insert.push(t.elapsed().as_nanos() as u64);

        let t = Instant::now();
        let messages = beside
            .runtime
            .translate_webhook(
                &beside.hostile,
                &sandbox,
                wit::Webhook {
                    headers,
                    body: body.to_vec(),
                },
            )
            .await
            .context("translate")?
            .map_err(|e| anyhow!("translate refused: {e}"))?;
        translate.push(t.elapsed().as_nanos() as u64);
        let message = messages
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("translate returned no message"))?;

        let t = Instant::now();
        let accepted = beside
            .runtime
            .accept(
                &beside.hostile,
                &bound,
                wit::Binding {
                    unit: "w0".into(),
                    config: r#"{"routes":["r1"]}"#.into(),
                },
                message.clone(),
            )
            .await
            .context("accept")?;
        accept.push(t.elapsed().as_nanos() as u64);
        if !accepted {
            bail!("accept said no");
        }

        let stored = message_record(&id, &message.kind, &payload, &record.received_at);
        let t = Instant::now();
        beside
            .store
            .complete_delivery("hostile", &id, &[stored], &["w0".to_string()], None)
            .await?;
        complete.push(t.elapsed().as_nanos() as u64);
    }
    Ok(vec![
        ("verify_standard (HMAC-SHA256 over the body)", p50(verify)),
        (
            "store.insert_delivery (SQLite txn, 8 KiB body)",
            p50(insert),
        ),
        ("guest translate-webhook (fresh instance)", p50(translate)),
        ("guest accept (fresh instance)", p50(accept)),
        ("store.complete_delivery (SQLite txn, 1 msg)", p50(complete)),
    ])
}

// ---------------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------------

fn main() -> anyhow::Result<()> {
    let limits = Limits {
        conns: env_num("HTTP_LOAD_CONNS", 32)? as usize,
        max_requests: env_num("HTTP_LOAD_REQS", 50_000)?,
        max_time: Duration::from_secs(env_num("HTTP_LOAD_SECS", 5)?),
    };
    let client_threads = env_num("HTTP_LOAD_CLIENT_THREADS", 1)? as usize;
    let large = env_num("HTTP_LOAD_BINDINGS", 10_000)? as usize;
    if limits.conns == 0 || limits.max_requests == 0 || large < 10 {
        bail!("HTTP_LOAD_CONNS and HTTP_LOAD_REQS must be > 0, HTTP_LOAD_BINDINGS >= 10");
    }
    let hostile = hostile_wasm()?;
    // With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the host's spans are exported as
    // `connector-host serve` exports them (to measure what export costs).
    let _exporting = connector_trace::export::Exporting::from_env()?;

    let server = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("server")
        .build()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads.max(1))
        .enable_all()
        .thread_name("load")
        .build()?;

    println!("# http_load: cargo bench -p connector-host --bench http_load");
    println!(
        "# {} connections, each run stops at {} requests or {} s; load generator: {} thread(s); \
         server runtime: {} worker thread(s); {} cores",
        limits.conns,
        limits.max_requests,
        limits.max_time.as_secs(),
        client_threads.max(1),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!("# load average at start: {}", loadavg());
    let mut rows: Vec<Row> = Vec::new();

    // ----- 1. plain axum echo --------------------------------------------------------
    println!("\n[1] plain axum JSON echo handler (floor)");
    let echo_addr = server.block_on(serve(echo_router()))?;
    let echo_req: MakeRequest = Arc::new(|_| {
        let body = Bytes::from_static(TOOL_CALL_BODY.as_bytes());
        post_json("/echo").body(Full::new(body)).unwrap_or_default()
    });
    // Warm-up (connections, allocator), not reported.
    let _ = client.block_on(loadgen::http(
        &[echo_addr],
        Limits {
            max_requests: 2_000,
            ..limits
        },
        echo_req.clone(),
        check_echo,
    ));
    let echo = client.block_on(loadgen::http(&[echo_addr], limits, echo_req, check_echo));
    echo.print("echo", "req");
    rows.push(Row::new("1  plain axum echo", "req", &echo, "floor".into()));
    echo.emit("http.echo");

    // ----- 2. tool calls --------------------------------------------------------------
    println!("\n[2] POST /api/v1/agents/a1/tool-calls acme.echo");
    let tools = server.block_on(open_host(None))?;
    let token = server.block_on(async {
        tools.host.put_unit("u1", None, None).await?;
        tools.host.put_agent("a1", &["u1"], None).await?;
        tools.host.bind("u1", "acme", json!({})).await?;
        let t = tools.host.issue_agent_token("a1", Some(24 * 3600)).await?;
        anyhow::Ok(t.token)
    })?;
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))?;
    let tool_req: MakeRequest = Arc::new(move |_| {
        let body = Bytes::from_static(TOOL_CALL_BODY.as_bytes());
        post_json("/api/v1/agents/a1/tool-calls")
            .header(http::header::AUTHORIZATION, bearer.clone())
            .body(Full::new(body))
            .unwrap_or_default()
    });
    let _ = client.block_on(loadgen::http(
        &[tools.addr],
        Limits {
            max_requests: 2_000,
            ..limits
        },
        tool_req.clone(),
        check_tool_call,
    ));
    let commits_before = tools.host.commit_counts();
    // A profiler attached from here on sees the timed calls alone (setup compiles
    // components): `perf record -p PID` once this line is printed.
    println!("  timed run starts (pid {})", std::process::id());
    let cpu_before = loadgen::thread_cpu();
    let calls = client.block_on(loadgen::http(
        &[tools.addr],
        limits,
        tool_req.clone(),
        check_tool_call,
    ));
    let cpu_after = loadgen::thread_cpu();
    calls.print("tool calls", "req");
    println!(
        "  CPU per call, µs by thread: {}",
        loadgen::cpu_per(&cpu_before, &cpu_after, calls.ok + calls.errors)
    );
    let commits = tools.host.commit_counts();
    let n = commits.commits - commits_before.commits;
    println!(
        "  store: {n} commits for {} tool-call audit records ({:.1} per commit)",
        calls.ok,
        calls.ok as f64 / n.max(1) as f64
    );
    let call_ratio = calls.rate() / echo.rate().max(1e-9);
    let p99 = calls.percentile(0.99);
    let met = calls.rate() >= 10_000.0
        && p99 <= Duration::from_millis(5)
        && call_ratio >= 0.5
        && calls.errors == 0;
    println!(
        "  ratio to (1): {call_ratio:.2}x; targets >= 10,000/s, p99 <= 5 ms, >= 0.5x: {}",
        verdict(met)
    );
    rows.push(Row::new(
        "2  HTTP tool-calls acme.echo",
        "req",
        &calls,
        format!(
            "{call_ratio:.2}x of (1); target >=10k/s, p99<=5ms, >=0.5x: {}",
            verdict(met)
        ),
    ));

    calls.emit("http.tool_calls");
    if std::env::var("HTTP_LOAD_STOP_AFTER").as_deref() == Ok("2") {
        return Ok(());
    }
    let table_only = std::env::var("HTTP_LOAD_TABLE").as_deref() == Ok("1");

    if !table_only {
        println!("\n[2b] diagnostic: Host::call_tool in-process, same concurrency, no HTTP");
        let inproc = server.block_on(call_tool_inprocess(&tools.host, limits));
        inproc.print("in-process call_tool", "call");
        rows.push(Row::new(
            "2b call_tool in-process (diag)",
            "call",
            &inproc,
            format!(
                "HTTP path is {:.2}x of this",
                calls.rate() / inproc.rate().max(1e-9)
            ),
        ));

        println!("\n[2c] diagnostic: Host::call_tool in-process, one task (no concurrency)");
        let one = Limits { conns: 1, ..limits };
        let inproc1 = server.block_on(call_tool_inprocess(&tools.host, one));
        inproc1.print("in-process call_tool, 1 task", "call");
        rows.push(Row::new(
            "2c call_tool in-process, 1 task (diag)",
            "call",
            &inproc1,
            format!(
                "{} conc. tasks give {:.2}x of this",
                limits.conns,
                inproc.rate() / inproc1.rate().max(1e-9)
            ),
        ));

        println!("\n[2e] diagnostic: agent token verification (Host::agent_of_token), sequential");
        let auth = {
            let mut v = Vec::with_capacity(10_000);
            for _ in 0..10_000 {
                let t = Instant::now();
                let agent = tools.host.agent_of_token(&token);
                v.push(t.elapsed().as_nanos() as u64);
                if agent.as_deref() != Some("a1") {
                    bail!("the agent token does not verify");
                }
            }
            v.sort_unstable();
            Duration::from_nanos(v[v.len() / 2])
        };
        println!("  agent_of_token p50 {}", ms(auth));

        let few = Limits {
            conns: 8.min(limits.conns),
            ..limits
        };
        println!(
            "\n[2d] diagnostic: HTTP tool calls with {} connections instead of {}",
            few.conns, limits.conns
        );
        let calls_few =
            client.block_on(loadgen::http(&[tools.addr], few, tool_req, check_tool_call));
        calls_few.print("tool calls", "req");
        rows.push(Row::new(
            &format!("2d HTTP tool-calls, {} conns (diag)", few.conns),
            "req",
            &calls_few,
            "p99 vs concurrency".into(),
        ));

        // ----- 3. bind + unbind -----------------------------------------------------------
        println!("\n[3] bind + unbind of acme on one unit, Rust API, sequential");
        let (pairs, binds, unbinds) = server.block_on(async {
            tools.host.put_unit("bu", None, None).await?;
            // Warm-up.
            for _ in 0..50 {
                tools.host.bind("bu", "acme", json!({})).await?;
                tools.host.unbind("bu", "acme").await?;
            }
            let mut pairs = Run::default();
            let mut binds = Run::default();
            let mut unbinds = Run::default();
            let started = Instant::now();
            let deadline = started + limits.max_time;
            let mut n = 0u64;
            while n < limits.max_requests && Instant::now() < deadline {
                n += 1;
                let t0 = Instant::now();
                let bound = tools.host.bind("bu", "acme", json!({})).await;
                let t1 = Instant::now();
                let unbound = tools.host.unbind("bu", "acme").await;
                let t2 = Instant::now();
                match (bound, unbound) {
                    (Ok(_), Ok(())) => {
                        pairs.ok += 1;
                        pairs.latencies.push((t2 - t0).as_nanos() as u64);
                        binds.latencies.push((t1 - t0).as_nanos() as u64);
                        unbinds.latencies.push((t2 - t1).as_nanos() as u64);
                    }
                    (b, u) => {
                        pairs.errors += 1;
                        if pairs.error_samples.len() < 5 {
                            pairs.error_samples.push(format!(
                                "bind: {:?}, unbind: {:?}",
                                b.err(),
                                u.err()
                            ));
                        }
                    }
                }
            }
            pairs.elapsed = started.elapsed();
            binds.ok = pairs.ok;
            unbinds.ok = pairs.ok;
            binds.elapsed = pairs.elapsed;
            unbinds.elapsed = pairs.elapsed;
            anyhow::Ok((pairs, binds, unbinds))
        })?;
        pairs.print("bind+unbind", "pair");
        println!(
            "  of which bind p50 {} p99 {}, unbind p50 {} p99 {}",
            ms(binds.percentile(0.5)),
            ms(binds.percentile(0.99)),
            ms(unbinds.percentile(0.5)),
            ms(unbinds.percentile(0.99))
        );
        let met = pairs.rate() >= 2_000.0 && pairs.errors == 0;
        println!("  target >= 2,000 pairs/s: {}", verdict(met));
        rows.push(Row::new(
            "3  bind+unbind (Rust API, seq.)",
            "pair",
            &pairs,
            format!(
                "bind p50 {}, unbind p50 {}; target >=2,000/s: {}",
                ms(binds.percentile(0.5)),
                ms(unbinds.percentile(0.5)),
                verdict(met)
            ),
        ));
        drop(tools);
    }

    // ----- 4. durable signed webhooks ---------------------------------------------------
    let secret = {
        use base64::Engine as _;
        let key: [u8; 32] = rand::random();
        format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        )
    };
    let body_r1 = webhook_body("r1", 8 * 1024 - 100);
    println!(
        "\n[4] POST /api/v1/webhooks/hostile, {} byte bodies, unique webhook-id, 1 binding",
        body_r1.len()
    );
    let hooks = server.block_on(async {
        let h = open_host(Some(&secret)).await?;
        h.host.install_connector(&hostile, false).await?;
        h.host.put_unit("w0", None, None).await?;
        h.host
            .bind("w0", "hostile", json!({"routes": ["r1"]}))
            .await?;
        anyhow::Ok(h)
    })?;
    let beside = Beside::open(&hooks)?;
    let hook_path = "/api/v1/webhooks/hostile";
    let warm = Limits {
        max_requests: 500,
        ..limits
    };
    let _ = webhook_run(
        &client,
        (hooks.addr, hook_path),
        warm,
        &secret,
        "warm",
        body_r1.clone(),
        check_accepted,
    )?;
    let (durable, signed_durable) = webhook_run(
        &client,
        (hooks.addr, hook_path),
        limits,
        &secret,
        "d",
        body_r1.clone(),
        check_accepted,
    )?;
    durable.print("durable webhooks", "req");
    durable.emit("webhooks.sqlite");
    let met = durable.rate() >= 8_000.0
        && durable.percentile(0.99) <= Duration::from_millis(20)
        && durable.errors == 0;
    println!("  targets >= 8,000/s, p99 <= 20 ms: {}", verdict(met));
    rows.push(Row::new(
        "4  durable signed webhooks",
        "req",
        &durable,
        format!("target >=8,000/s, p99<=20ms: {}", verdict(met)),
    ));

    if !table_only {
        println!("\n[4b] plain axum handler: verify_standard only, 202");
        let verify_addr =
            server.block_on(serve(verify_only_router(Arc::new(vec![secret.clone()]))))?;
        let (verify_only, _) = webhook_run(
            &client,
            (verify_addr, "/hook"),
            limits,
            &secret,
            "v",
            body_r1.clone(),
            check_accepted,
        )?;
        verify_only.print("verify only", "req");
        let hook_ratio = durable.rate() / verify_only.rate().max(1e-9);
        println!("  durable (4) / verify-only: {hook_ratio:.3}x");
        rows.push(Row::new(
            "4b verify-only axum handler",
            "req",
            &verify_only,
            format!("HMAC-only floor; (4) is {hook_ratio:.3}x of it"),
        ));

        println!("\n[4c] diagnostic: same deliveries routed to a key no binding has (no accept, no messages)");
        let body_none = webhook_body("nobody", 8 * 1024 - 100);
        let (unrouted, _) = webhook_run(
            &client,
            (hooks.addr, hook_path),
            limits,
            &secret,
            "n",
            body_none,
            check_accepted,
        )?;
        unrouted.print("unrouted", "req");
        rows.push(Row::new(
            "4c webhooks, no matching binding (diag)",
            "req",
            &unrouted,
            "verify+store+translate, no accept/messages".into(),
        ));

        println!(
            "\n[4d] diagnostic: re-sent delivery ids of (4) -> duplicate (verify, route, dedup in the write)"
        );
        let dup_limits = Limits {
            max_requests: limits.max_requests.min(durable.ok + durable.errors).max(1),
            ..limits
        };
        let duplicates = client.block_on(loadgen::http(
            &[hooks.addr],
            dup_limits,
            webhook_requests(signed_durable),
            check_duplicate,
        ));
        duplicates.print("duplicates", "req");
        rows.push(Row::new(
            "4d webhooks, duplicate ids (diag)",
            "req",
            &duplicates,
            "verify + dedup lookup, no guest".into(),
        ));

        println!("\n[4e] diagnostic: one delivery's steps in-process, sequential (8 KiB body)");
        let steps = server.block_on(webhook_steps(&hooks.host, &beside, &body_r1, 1_000))?;
        for (name, d) in &steps {
            println!("  {name:<48} p50 {}", ms(*d));
        }
        let steps_sum: Duration = steps.iter().map(|(_, d)| *d).sum();
        println!(
            "  sum of p50s {} -> at most {:.0} deliveries/s per core for these steps alone",
            ms(steps_sum),
            1.0 / steps_sum.as_secs_f64().max(1e-9)
        );

        println!(
            "\n[4g] diagnostic: store only, the queued path (insert_delivery + complete_delivery, 8 KiB), {} tasks",
            limits.conns
        );
        let store_run = server.block_on(store_only(&beside, &body_r1, "so", limits));
        store_run.print("store only", "delivery");
        rows.push(Row::new(
            "4g store txns only, in-process (diag)",
            "dlv",
            &store_run,
            "SQLite ceiling: 2 txns/delivery".into(),
        ));

        println!("\n[4g1] diagnostic: store only, one task (no concurrency)");
        let store_run1 = server.block_on(store_only(
            &beside,
            &body_r1,
            "so1",
            Limits { conns: 1, ..limits },
        ));
        store_run1.print("store only, 1 task", "delivery");
        rows.push(Row::new(
            "4g1 store txns only, 1 task (diag)",
            "dlv",
            &store_run1,
            format!(
                "{} tasks give {:.2}x of this",
                limits.conns,
                store_run.rate() / store_run1.rate().max(1e-9)
            ),
        ));

        println!(
            "\n[4h] diagnostic: guest only (translate-webhook + accept, 8 KiB), {} tasks",
            limits.conns
        );
        let guest_run = server.block_on(guest_only(&hooks.host, &beside, &body_r1, limits))?;
        guest_run.print("guest only", "delivery");
        rows.push(Row::new(
            "4h guest calls only, in-process (diag)",
            "dlv",
            &guest_run,
            "wasm ceiling: 2 fresh instances/delivery".into(),
        ));

        println!("\n[4f] diagnostic: durable webhooks with a small (~200 byte) body, 1 binding");
        let body_small = webhook_body("r1", 100);
        let (small_body, _) = webhook_run(
            &client,
            (hooks.addr, hook_path),
            limits,
            &secret,
            "s",
            body_small,
            check_accepted,
        )?;
        small_body.print("small bodies", "req");
        rows.push(Row::new(
            "4f webhooks, ~200 B body (diag)",
            "req",
            &small_body,
            format!(
                "{:.2}x of (4)",
                small_body.rate() / durable.rate().max(1e-9)
            ),
        ));
    }
    drop(hooks);

    // ----- 5. routing flatness ----------------------------------------------------------
    if !table_only {
        println!(
        "\n[5] routing: 10 vs {large} bindings of hostile (one routing key each), deliveries to k0"
    );
        let body_k0 = webhook_body("k0", 8 * 1024 - 100);
        let mut flat = Vec::new();
        for n in [10usize, large] {
            let started = Instant::now();
            let h = server.block_on(async {
                let h = open_host(Some(&secret)).await?;
                h.host.install_connector(&hostile, false).await?;
                for i in 0..n {
                    let unit = format!("u{i}");
                    h.host.put_unit(&unit, None, None).await?;
                    h.host
                        .bind(&unit, "hostile", json!({"routes": [format!("k{i}")]}))
                        .await?;
                    if (i + 1) % 1000 == 0 {
                        println!(
                            "  {n}-binding host: {} units + bindings, {:.1} s",
                            i + 1,
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
                anyhow::Ok(h)
            })?;
            let took = started.elapsed();
            println!(
            "  {n}-binding host ready: {n} units + bindings in {:.2} s ({:.0}/s, incl. opening the host and installing hostile)",
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64()
        );
            let _ = webhook_run(
                &client,
                (h.addr, hook_path),
                warm,
                &secret,
                &format!("warm{n}"),
                body_k0.clone(),
                check_accepted,
            )?;
            flat.push((n, h));
        }
        let round_limits = Limits {
            max_time: limits.max_time.mul_f64(0.6).max(Duration::from_secs(1)),
            ..limits
        };
        let mut results: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for round in 0..2 {
            for (k, (n, h)) in flat.iter().enumerate() {
                let (r, _) = webhook_run(
                    &client,
                    (h.addr, hook_path),
                    round_limits,
                    &secret,
                    &format!("f{round}"),
                    body_k0.clone(),
                    check_accepted,
                )?;
                r.print(&format!("round {round}, {n} bindings"), "req");
                results[k].push(r);
            }
        }
        let [small_runs, big_runs] = results;
        let combine = |runs: Vec<Run>| {
            runs.into_iter().fold(Run::default(), |mut all, r| {
                all.absorb(r);
                all
            })
        };
        let small = combine(small_runs);
        let big = combine(big_runs);
        let flat_ratio = small.rate() / big.rate().max(1e-9);
        let p50_ratio =
            big.percentile(0.5).as_secs_f64() / small.percentile(0.5).as_secs_f64().max(1e-12);
        let met = flat_ratio <= 1.2 && small.errors == 0 && big.errors == 0;
        println!(
        "  throughput 10 / {large}: {flat_ratio:.3}; p50 {large} / 10: {p50_ratio:.3}; target <= 1.2: {}",
        verdict(met)
    );
        rows.push(Row::new(
            "5a webhooks, 10 bindings",
            "req",
            &small,
            "2 rounds combined".into(),
        ));
        rows.push(Row::new(
            &format!("5b webhooks, {large} bindings"),
            "req",
            &big,
            format!(
                "10/{large} rate ratio {flat_ratio:.3}, p50 ratio {p50_ratio:.3}; target <=1.2: {}",
                verdict(met)
            ),
        ));
        drop(flat);
    }

    // ----- table ----------------------------------------------------------------------
    println!("\n# summary (cargo bench -p connector-host --bench http_load)");
    println!(
        "| {:<40} | {:>12} | {:>10} | {:>10} | {:>6} | note",
        "scenario", "rate", "p50", "p99", "errors"
    );
    println!(
        "|{:-<42}|{:-<14}|{:-<12}|{:-<12}|{:-<8}|------",
        "", "", "", "", ""
    );
    for r in &rows {
        println!(
            "| {:<40} | {:>12} | {:>10} | {:>10} | {:>6} | {}",
            r.name,
            format!("{:.0} {}/s", r.rate, r.unit),
            ms(r.p50),
            ms(r.p99),
            r.errors,
            r.note
        );
    }
    println!(
        "# load average at end: {} (the machine is shared: other builds skew absolute figures)",
        loadavg()
    );
    drop(server);
    drop(client);
    Ok(())
}
