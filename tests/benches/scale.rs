//! Issue 37's scale targets, on a platform-sized directory written through the Rust API
//! (`integration_tests::large_directory`: 100,000 units 8 deep, 1,000,000 agents, 10,000
//! bindings, 500 connectors), each figure with its target:
//!
//! - SQLite: the directory is generated through one host (write rates per kind). Then a
//!   fresh process (this binary again, `--serve-directory`) opens it: cold start (open:
//!   load, connectors from the compiled cache, resolver; then a deep agent's tools),
//!   resident memory, a deep agent's effective tools unchanged (cached) and after a write
//!   (the write drops every cached answer), a bind on the root above every unit and how
//!   soon the next read has its tools. That process then serves HTTP: this one opens
//!   5,000 MCP `subscriptions/listen` streams (50 on each of 100 agents) and measures the
//!   server's memory per stream, then binds on the root and times the `list_changed`
//!   fan-out until every stream has it.
//! - PostgreSQL, 3 replicas (hosts in this process, one database): the same directory
//!   written through replica A (its write rate against SQLite's), replicas B and C open it,
//!   then one write at a time on A (agents, bindings, units, grants) and the next read on B
//!   and C: how long catching up takes and that it sees the write (read-after-write).
//!
//! `cargo build --release -p connector-host && cargo bench -p integration-tests --bench
//! scale` (PostgreSQL's server binaries as `.ci/run` installs them). Knobs:
//! `SCALE_UNITS`, `SCALE_AGENTS`, `SCALE_BINDINGS`, `SCALE_CONNECTORS` (the shape),
//! `SCALE_WRITERS` (writes in flight while generating, default 64), `SCALE_STREAMS`
//! (default 5,000), `SCALE_POSTGRES_AGENTS` (agents of the PostgreSQL part, default the
//! shape's), `SCALE_SKIP_POSTGRES=1`, `SCALE_DATA_DIR` (the SQLite directory is kept
//! there; when it already holds one, of the same shape, it is opened without generating
//! it again: generating a million agents takes minutes). Lines `@result <key> <field>=<value> ...` are
//! for `bench/table.py`.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use connector_host::config::HostConfig;
use connector_host::Host;
use connector_model::records::Subject;
use integration_tests::large_directory::{self as gen, Shape};
use serde_json::json;

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPERATOR_TOKEN: &str = "scale-bench-operator-token";
/// Agents whose streams are opened, and streams per agent (under the per-agent cap).
const STREAM_AGENTS: usize = 100;

fn config(data_dir: &std::path::Path, database_url: Option<&str>) -> HostConfig {
    let mut config = HostConfig {
        data_dir: data_dir.to_path_buf(),
        database_url: database_url.map(str::to_string),
        operator_token: Some(OPERATOR_TOKEN.into()),
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    };
    config.server.max_connections = 16_384;
    config.server.max_connections_per_peer = Some(16_384);
    config
}

/// Median and max of `samples`.
fn p50_max(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A value of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: u32, key: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no {key} in /proc/{pid}/status"))
}

/// A deep agent (its tools walk all 8 levels) with bindings on its chain.
fn deep_agent(shape: &Shape) -> String {
    gen::agent_id(shape.agents / 2)
}

/// The child: opens the directory in `data_dir`, measures, then serves HTTP until its
/// standard input closes.
fn serve_directory(data_dir: &str) -> anyhow::Result<()> {
    let shape = Shape::from_env()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let agent = Subject::Agent(deep_agent(&shape));
        let started = Instant::now();
        let (host, _) = Host::open(config(std::path::Path::new(data_dir), None)).await?;
        let opened = started.elapsed();
        let tools = host.effective_tools(&agent)?;
        let cold = started.elapsed();
        println!(
            "@result scale.cold_start secs={:.3} open_secs={:.3} tools={}",
            cold.as_secs_f64(),
            opened.as_secs_f64(),
            tools.len()
        );
        let me = std::process::id();
        // Of the resident memory, what is the process's own (anonymous) and what is
        // mapped from files (mostly compiled code mapped from the cache: clean pages of
        // the page cache, shared with other processes mapping them and dropped by the
        // kernel under pressure).
        println!(
            "@result scale.memory rss_mib={:.0} peak_mib={:.0} anon_mib={:.0} file_mib={:.0}",
            proc_kib(me, "VmRSS")? as f64 / 1024.0,
            proc_kib(me, "VmHWM")? as f64 / 1024.0,
            proc_kib(me, "RssAnon")? as f64 / 1024.0,
            proc_kib(me, "RssFile")? as f64 / 1024.0
        );

        // Unchanged: the cached answer.
        let mut unchanged = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            let t = Instant::now();
            std::hint::black_box(host.effective_tools(&agent)?);
            unchanged.push(t.elapsed());
        }
        let (p50, max) = p50_max(&mut unchanged);
        println!(
            "@result scale.tools_unchanged p50_us={:.3} max_us={:.1}",
            us(p50),
            us(max)
        );

        // After a write: every cached answer is dropped; the next read resolves again.
        let (mut after, mut writes) = (Vec::new(), Vec::new());
        for k in 0..200 {
            let t = Instant::now();
            host.put_unit(&format!("probe{}", k % 10), Some("u0"), None)
                .await?;
            writes.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(host.effective_tools(&agent)?);
            after.push(t.elapsed());
        }
        let (p50, max) = p50_max(&mut after);
        let (write_p50, _) = p50_max(&mut writes);
        println!(
            "@result scale.tools_after_write p50_us={:.1} max_us={:.1} write_p50_us={:.0}",
            us(p50),
            us(max),
            us(write_p50)
        );

        // A bind on the root, above every unit: until the next read has its tools.
        let mut visible = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            host.bind("u0", "acme", json!({})).await?;
            let tools = host.effective_tools(&agent)?;
            visible.push(t.elapsed());
            if tools.get("acme.echo").is_none() {
                bail!("a bind on the root is not in a deep agent's tools");
            }
            host.unbind("u0", "acme").await?;
        }
        let (p50, max) = p50_max(&mut visible);
        println!(
            "@result scale.bind_root_visible p50_ms={:.2} max_ms={:.2}",
            p50.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("@listening {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let stop = async {
            // Until the parent closes our standard input.
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
            })
            .await;
        };
        connector_host::server::serve_on(listener, host, stop).await;
        anyhow::Ok(())
    })
}

/// Opens `n` `subscriptions/listen` streams on the server at `addr`, then measures its
/// memory per stream and the `tools/list_changed` fan-out of one bind on the root.
async fn streams(child: &Child, addr: &str, shape: &Shape, n: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let base = format!("http://{addr}");
    let per_agent = n.div_ceil(STREAM_AGENTS);
    let mut tokens = Vec::new();
    for a in 0..STREAM_AGENTS.min(n) {
        let agent = gen::agent_id(shape.agents - 1 - a);
        let t: serde_json::Value = http
            .post(format!("{base}/api/v1/agents/{agent}/tokens"))
            .bearer_auth(OPERATOR_TOKEN)
            .json(&json!({}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let token = t["token"]
            .as_str()
            .ok_or_else(|| anyhow!("no token in {t}"))?
            .to_string();
        tokens.push((agent, token));
    }
    // The start's loads ahead of first use map 500 connectors' compiled code in the
    // background: the baseline is taken once the server's memory has been steady for a
    // second, so that their pages are not counted as the streams'.
    let steady_from = Instant::now();
    let mut last = (proc_kib(child.id(), "VmRSS")?, Instant::now());
    while last.1.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = proc_kib(child.id(), "VmRSS")?;
        if now.abs_diff(last.0) > 1024 {
            last = (now, Instant::now());
        }
        if steady_from.elapsed() > Duration::from_secs(60) {
            bail!("the server's memory was still moving after 60 s");
        }
    }
    println!(
        "  server memory steady after {:.1} s",
        steady_from.elapsed().as_secs_f64()
    );
    let rss_before = proc_kib(child.id(), "VmRSS")?;
    let anon_before = proc_kib(child.id(), "RssAnon")?;
    let (arrived_tx, mut arrived) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let (ack_tx, mut acks) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut opened = 0;
    for i in 0..n {
        let (agent, token) = &tokens[i / per_agent];
        let response = http
            .post(format!("{base}/mcp/agents/{agent}"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                "params": {"notifications": {"toolsListChanged": true}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "scale", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {}}}}),
            )
            .send()
            .await
            .with_context(|| format!("opening stream {i}"))?;
        if !response.status().is_success() {
            bail!(
                "stream {i}: subscriptions/listen answered {}",
                response.status()
            );
        }
        let (arrived_tx, ack_tx) = (arrived_tx.clone(), ack_tx.clone());
        tokio::spawn(async move {
            let mut response = response;
            let mut seen = String::new();
            let mut acknowledged = false;
            while let Ok(Some(chunk)) = response.chunk().await {
                let at = Instant::now();
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if !acknowledged && seen.contains("notifications/subscriptions/acknowledged") {
                    acknowledged = true;
                    let _ = ack_tx.send(());
                }
                if seen.contains("notifications/tools/list_changed") {
                    let _ = arrived_tx.send(at);
                    seen.clear();
                }
                if seen.len() > 1 << 16 {
                    seen.clear();
                }
            }
        });
        opened += 1;
    }
    drop((arrived_tx, ack_tx));
    for _ in 0..opened {
        tokio::time::timeout(Duration::from_secs(60), acks.recv())
            .await
            .context("waiting for every stream's acknowledgement")?
            .ok_or_else(|| anyhow!("a stream ended before its acknowledgement"))?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = proc_kib(child.id(), "VmRSS")?;
    let anon_after = proc_kib(child.id(), "RssAnon")?;
    let per_stream = (rss_after.saturating_sub(rss_before)) as f64 / opened as f64;
    // Of that, the process's own memory (anonymous); the rest is pages mapped from files.
    let anon_per_stream = (anon_after.saturating_sub(anon_before)) as f64 / opened as f64;
    println!(
        "@result scale.listen_streams streams={opened} kib_per_stream={per_stream:.1} anon_kib_per_stream={anon_per_stream:.1} rss_before_mib={:.0} rss_after_mib={:.0}",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    // One bind on the root changes every stream's tools.
    let started = Instant::now();
    http.put(format!("{base}/api/v1/units/u0/connectors/acme"))
        .bearer_auth(OPERATOR_TOKEN)
        .json(&json!({"config": {}}))
        .send()
        .await?
        .error_for_status()?;
    let answered = started.elapsed();
    let mut last = started;
    for got in 0..opened {
        let at = tokio::time::timeout(Duration::from_secs(60), arrived.recv())
            .await
            .with_context(|| format!("{got} of {opened} streams had list_changed after 60 s"))?
            .ok_or_else(|| anyhow!("streams ended: {got} of {opened} had list_changed"))?;
        last = last.max(at);
    }
    println!(
        "@result scale.listen_fanout streams={opened} all_ms={:.1} bind_answered_ms={:.1}",
        (last - started).as_secs_f64() * 1e3,
        answered.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Copies the compiled-component cache of `from` (a data directory) into `to`, so that
/// installing the same connectors there loads them instead of compiling them again.
fn copy_compiled(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    let (from, to) = (from.join("compiled"), to.join("compiled"));
    std::fs::create_dir_all(&to)?;
    for entry in std::fs::read_dir(&from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// The SQLite part; returns SQLite's agent write rate and its data directory.
fn sqlite_part(shape: &Shape, writers: usize, n_streams: usize) -> anyhow::Result<(f64, DataDir)> {
    let dir = DataDir::from_env()?;
    let agent_rate = if dir.generated() {
        println!(
            "scale bench: opening the directory generated before in {}",
            dir.path().display()
        );
        0.0
    } else {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let rate = rt.block_on(async {
            let (host, _) = Host::open(config(dir.path(), None)).await?;
            let phases = gen::generate(&host, shape, writers).await?;
            for p in &phases {
                println!(
                    "@result scale.sqlite_writes.{} count={} secs={:.1} rate={:.1}",
                    p.what,
                    p.count,
                    p.took.as_secs_f64(),
                    p.rate()
                );
            }
            let agents = phases
                .iter()
                .find(|p| p.what == "agents")
                .map(|p| p.rate())
                .unwrap_or(0.0);
            anyhow::Ok(agents)
        })?;
        rt.shutdown_timeout(Duration::from_secs(10));
        dir.mark_generated()?;
        rate
    };
    // A fresh process opens it: cold start, memory, resolver, binds, then streams.
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--serve-directory")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the directory's server process")?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut addr = None;
    for line in lines.by_ref() {
        let line = line?;
        if let Some(a) = line.strip_prefix("@listening ") {
            addr = Some(a.to_string());
            break;
        }
        println!("{line}");
    }
    let addr = addr.ok_or_else(|| anyhow!("the server process ended before listening"))?;
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            println!("{line}");
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let measured = rt.block_on(streams(&child, &addr, shape, n_streams));
    // The streams close with this runtime; then the server is told to stop (it lets open
    // requests finish first), and stopped if it does not.
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            eprintln!("the directory's server process did not stop; killing it");
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    measured?;
    Ok((agent_rate, dir))
}

async fn postgres_part(
    shape: &Shape,
    writers: usize,
    sqlite_agent_rate: f64,
    compiled: &std::path::Path,
) -> anyhow::Result<()> {
    let pg = integration_tests::postgres::PgCluster::start()?;
    let url = pg.create_database("scale")?;
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    for dir in &dirs {
        // The same components were compiled for SQLite: installs load them.
        copy_compiled(compiled, dir.path())?;
    }
    let (a, _) = Host::open(config(dirs[0].path(), Some(&url))).await?;
    let shape = &Shape {
        agents: loadgen::env_num("SCALE_POSTGRES_AGENTS", shape.agents as u64)? as usize,
        ..*shape
    };
    let phases = gen::generate(&a, shape, writers).await?;
    for p in &phases {
        println!(
            "@result scale.postgres_writes.{} count={} secs={:.1} rate={:.1}",
            p.what,
            p.count,
            p.took.as_secs_f64(),
            p.rate()
        );
    }
    let pg_rate = phases
        .iter()
        .find(|p| p.what == "agents")
        .map(|p| p.rate())
        .unwrap_or(0.0);
    if sqlite_agent_rate > 0.0 {
        println!(
            "@result scale.postgres_vs_sqlite_writes ratio={:.3} postgres={pg_rate:.0} sqlite={sqlite_agent_rate:.0}",
            pg_rate / sqlite_agent_rate
        );
    } else {
        println!("scale bench: the SQLite directory was not generated in this run: no write ratio");
    }
    let started = Instant::now();
    let (b, _) = Host::open(config(dirs[1].path(), Some(&url))).await?;
    println!(
        "@result scale.postgres_cold_start secs={:.3}",
        started.elapsed().as_secs_f64()
    );
    let (c, _) = Host::open(config(dirs[2].path(), Some(&url))).await?;
    b.refresh().await?;
    c.refresh().await?;
    let before = (b.catch_ups(), c.catch_ups());
    let agent = Subject::Agent(deep_agent(shape));
    let mut catch_up = Vec::new();
    let rounds = 100;
    for k in 0..rounds {
        // One foreign write of each kind in turn, then the next read on B and C.
        let id = format!("late{k}");
        let expect: Box<dyn Fn(&Host) -> bool> = match k % 4 {
            0 => {
                a.put_agent(&id, &[gen::unit_id(shape.units - 1)], None)
                    .await?;
                Box::new(move |h: &Host| h.agent(&id).is_ok())
            }
            1 => {
                a.bind("u0", "acme", json!({})).await?;
                Box::new(|h: &Host| {
                    h.effective_tools(&Subject::Agent(deep_agent(shape)))
                        .is_ok_and(|t| t.get("acme.echo").is_some())
                })
            }
            2 => {
                a.unbind("u0", "acme").await?;
                Box::new(|h: &Host| {
                    h.effective_tools(&Subject::Agent(deep_agent(shape)))
                        .is_ok_and(|t| t.get("acme.echo").is_none())
                })
            }
            _ => {
                a.put_unit(&id, Some("u1"), None).await?;
                Box::new(move |h: &Host| h.unit(&id).is_ok())
            }
        };
        for replica in [&b, &c] {
            let t = Instant::now();
            replica.refresh().await?;
            let tools = replica.effective_tools(&agent)?;
            catch_up.push(t.elapsed());
            std::hint::black_box(tools);
            if !expect(replica) {
                bail!("round {k}: a replica's next read did not see the write on A");
            }
        }
    }
    let after = (b.catch_ups(), c.catch_ups());
    let reloads = after.0.reloaded - before.0.reloaded + after.1.reloaded - before.1.reloaded;
    let (p50, max) = p50_max(&mut catch_up);
    println!(
        "@result scale.postgres_catch_up p50_ms={:.2} max_ms={:.2} rounds={rounds} reloads={reloads} read_after_write=1 agents={} units={}",
        p50.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        shape.agents,
        shape.units
    );
    let me = std::process::id();
    println!(
        "@result scale.postgres_memory rss_mib_3_replicas={:.0}",
        proc_kib(me, "VmRSS")? as f64 / 1024.0
    );
    Ok(())
}

/// Where the SQLite part's directory lives: a temporary folder, or `SCALE_DATA_DIR`
/// (kept, and reused when a run finished generating it).
enum DataDir {
    Temporary(tempfile::TempDir),
    Kept(std::path::PathBuf),
}

impl DataDir {
    /// The file that says generation finished (a run stopped halfway is generated again).
    const GENERATED: &'static str = "scale-generated";

    fn from_env() -> anyhow::Result<DataDir> {
        match std::env::var_os("SCALE_DATA_DIR") {
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                std::fs::create_dir_all(&path)
                    .with_context(|| format!("creating SCALE_DATA_DIR {}", path.display()))?;
                Ok(DataDir::Kept(path))
            }
            None => Ok(DataDir::Temporary(tempfile::tempdir()?)),
        }
    }

    fn path(&self) -> &std::path::Path {
        match self {
            DataDir::Temporary(dir) => dir.path(),
            DataDir::Kept(path) => path,
        }
    }

    fn generated(&self) -> bool {
        matches!(self, DataDir::Kept(path) if path.join(Self::GENERATED).exists())
    }

    fn mark_generated(&self) -> anyhow::Result<()> {
        if let DataDir::Kept(path) = self {
            std::fs::write(
                path.join(Self::GENERATED),
                format!("{:?}\n", Shape::from_env()?),
            )?;
        }
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--serve-directory") {
        let dir = args
            .get(at + 1)
            .ok_or_else(|| anyhow!("--serve-directory needs a directory"))?;
        return serve_directory(dir);
    }
    let shape = Shape::from_env()?;
    let writers = loadgen::env_num("SCALE_WRITERS", 64)? as usize;
    let n_streams = loadgen::env_num("SCALE_STREAMS", 5_000)? as usize;
    println!(
        "scale bench: {shape:?}, {writers} writes in flight; load {}",
        loadgen::loadavg()
    );
    let (sqlite_rate, sqlite_dir) = sqlite_part(&shape, writers, n_streams)?;
    if std::env::var("SCALE_SKIP_POSTGRES").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(postgres_part(
        &shape,
        writers,
        sqlite_rate,
        sqlite_dir.path(),
    ))?;
    Ok(())
}
