//! What a connector costs in each language, in one run: `acme` in Rust (bundled), in
//! TypeScript (connectors/acme-js) and in Python (connectors/acme-py).
//!
//! Per language: the component's size; its install compile time (a runtime without a
//! cache, as an install of new bytes); the p50 and p99 of `acme.echo` with a fresh sandbox
//! per call through `Host::call_tool` (and the process CPU time and minor page faults per
//! call, which load from other work does not inflate) and over HTTP
//! (`POST /api/v1/agents/a/tool-calls`);
//! and, when the `connector-host` binary of the same profile exists, the wall time of a
//! local `connector-host call FILE echo` run twice on an empty compiled-component cache
//! (the second run reads the cache).
//!
//! `cargo bench -p integration-tests --bench languages`
//! Targets: TypeScript and Python call p50 <= 1 ms in-process; a second local call <= 1 s.
//!
//! `LANGUAGES_LOOP=LANG:SECONDS[:COMPONENT]` (`rust`, `typescript` or `python`) measures
//! only that language's in-process calls (of acme's build in COMPONENT when given), for
//! SECONDS after the install, with the compiled code read from the tests' shared cache: a
//! profiler attached once it prints `looping` (for example `perf record -g -p PID`) sees
//! the call path alone, not the compiles.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use connector_host::config::HostConfig;
use connector_host::Host;
use connector_runtime::{ConnectorRuntime, RuntimeOptions};
use integration_tests::harness::share_compiled_cache;
use integration_tests::languages::{component, Lang};
use serde_json::json;

const WARMUP: usize = 50;
const CALLS: usize = 1000;

fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    samples.sort();
    samples[(samples.len() - 1) * p / 100]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let mut builds: Vec<(&str, Vec<u8>, Option<PathBuf>)> = vec![(
        "rust",
        connector_bundled::component("acme")
            .expect("acme is bundled")
            .to_vec(),
        None,
    )];
    for (lang, source) in [
        (Lang::TypeScript, "connectors/acme-js/src/index.ts"),
        (Lang::Python, "connectors/acme-py/app.py"),
    ] {
        match component(lang, source) {
            Some(path) => builds.push((
                lang.name(),
                std::fs::read(&path).expect("built component"),
                Some(path),
            )),
            None => println!("{}: toolchain missing, not measured", lang.name()),
        }
    }
    let looping = std::env::var("LANGUAGES_LOOP").ok().map(|spec| {
        let mut parts = spec.splitn(3, ':');
        let lang = parts.next().unwrap_or_default().to_string();
        let seconds: u64 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .expect("LANGUAGES_LOOP=LANG:SECONDS[:COMPONENT]");
        let file = parts
            .next()
            .map(|f| std::fs::read(f).expect("LANGUAGES_LOOP: the component"));
        (lang, Duration::from_secs(seconds), file)
    });
    for (name, bytes, path) in builds {
        match &looping {
            Some((lang, _, _)) if lang != name => {}
            Some((_, length, file)) => {
                let bytes = file.clone().unwrap_or(bytes);
                rt.block_on(call_loop(name, bytes, *length))
            }
            None => rt.block_on(measure(name, bytes, path)),
        }
    }
}

/// A host with `acme` bound for agent `a` to unit `u`, in `bytes`' language (the bundled
/// Rust build when `name` is `rust`), its `acme.echo` called [`WARMUP`] times; with the
/// data in `data` and the compiled code from (or for) the tests' shared cache (the install
/// compile is measured on its own).
async fn acme_host(name: &str, bytes: &[u8], data: &std::path::Path) -> Host {
    share_compiled_cache(data);
    let (host, _) = Host::open(HostConfig {
        data_dir: data.to_path_buf(),
        operator_token: Some("bench".into()),
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    })
    .await
    .expect("host");
    if name != "rust" {
        // Rotates the bundled acme to this language's build (the same manifest).
        host.install_connector(bytes, false).await.expect("install");
    }
    host.put_unit("u", None, None).await.expect("unit");
    host.put_agent("a", &["u".to_string()], None)
        .await
        .expect("agent");
    host.bind("u", "acme", json!({})).await.expect("bind");
    for _ in 0..WARMUP {
        host.call_tool("a", "acme.echo", json!({"message": "hello"}))
            .await
            .expect("call");
    }
    host
}

/// `LANGUAGES_LOOP`: calls `acme.echo` for `length` after the install, then prints the
/// p50, the CPU and the minor page faults per call.
async fn call_loop(name: &str, bytes: Vec<u8>, length: Duration) {
    let data = tempfile::tempdir().expect("tmp");
    let host = acme_host(name, &bytes, data.path()).await;
    let args = json!({"message": "hello"});
    println!(
        "{name}: looping for {length:?} (pid {})",
        std::process::id()
    );
    // Time for a profiler to attach.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut samples = Vec::new();
    let before = process_counters();
    let started = Instant::now();
    while started.elapsed() < length {
        let t = Instant::now();
        host.call_tool("a", "acme.echo", args.clone())
            .await
            .expect("call");
        samples.push(t.elapsed());
    }
    let calls = samples.len();
    let per_call = per_call(before, process_counters(), calls);
    println!(
        "{name}: {calls} calls, p50 {:?}; {per_call}",
        percentile(&mut samples, 50)
    );
}

async fn measure(name: &str, bytes: Vec<u8>, path: Option<PathBuf>) {
    let size = bytes.len();
    let uncached = ConnectorRuntime::new(RuntimeOptions::default()).expect("runtime");
    let started = Instant::now();
    uncached.load(&bytes).expect("the component loads");
    let compile = started.elapsed();
    drop(uncached);

    let data = tempfile::tempdir().expect("tmp");
    let host = acme_host(name, &bytes, data.path()).await;
    let args = json!({"message": "hello"});
    let mut in_process = Vec::with_capacity(CALLS);
    let before = process_counters();
    for _ in 0..CALLS {
        let t = Instant::now();
        let out = host
            .call_tool("a", "acme.echo", args.clone())
            .await
            .expect("call");
        in_process.push(t.elapsed());
        assert_eq!(out.structured.as_ref(), Some(&args));
    }
    let per_call = per_call(before, process_counters(), CALLS);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/api/v1/agents/a/tool-calls",
        listener.local_addr().expect("addr")
    );
    let served = host.clone();
    let server = tokio::spawn(async move {
        connector_host::server::serve_on(listener, served, std::future::pending()).await;
    });
    let client = reqwest::Client::new();
    let body = json!({"tool": "acme.echo", "arguments": args});
    let mut over_http = Vec::with_capacity(CALLS);
    for i in 0..WARMUP + CALLS {
        let t = Instant::now();
        let r = client
            .post(&url)
            .bearer_auth("bench")
            .json(&body)
            .send()
            .await
            .expect("POST tool-calls");
        assert_eq!(r.status(), 200);
        r.bytes().await.expect("answer");
        if i >= WARMUP {
            over_http.push(t.elapsed());
        }
    }
    server.abort();

    let local = path.as_deref().and_then(local_calls);
    let (p50, p99) = (
        percentile(&mut in_process, 50),
        percentile(&mut in_process, 99),
    );
    let (h50, h99) = (
        percentile(&mut over_http, 50),
        percentile(&mut over_http, 99),
    );
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "{name}: component {:.1} MiB; install compile {:.2} s; Host::call_tool p50 {p50:?} p99 {p99:?}{}; {per_call}; HTTP p50 {h50:?} p99 {h99:?}",
        size as f64 / 1048576.0,
        compile.as_secs_f64(),
        if name == "rust" {
            String::new()
        } else {
            format!(" (target <= 1 ms: {})", met(p50 <= Duration::from_millis(1)))
        },
    );
    if let Some((first, second)) = local {
        println!(
            "{name}: local `connector-host call` first {:.2} s, second {:.2} s (target <= 1 s: {})",
            first.as_secs_f64(),
            second.as_secs_f64(),
            met(second <= Duration::from_secs(1))
        );
    }
    println!(
        "@result languages_{name} size_bytes={size} compile_ms={} call_p50_us={} call_p99_us={} call_cpu_us={} call_minor_faults={} http_p50_us={} http_p99_us={}",
        compile.as_millis(),
        p50.as_micros(),
        p99.as_micros(),
        per_call.cpu.map_or(-1, |d| d.as_micros() as i64),
        per_call.minor_faults.map_or(-1, |f| f as i64),
        h50.as_micros(),
        h99.as_micros()
    );
}

/// Two local calls of `acme.echo` in `path` on a fresh compiled-component cache: their
/// wall times, or `None` when this profile has no `connector-host` binary.
fn local_calls(path: &std::path::Path) -> Option<(Duration, Duration)> {
    let exe = std::env::current_exe().ok()?;
    let binary = exe.parent()?.parent()?.join("connector-host");
    if !binary.is_file() {
        println!(
            "{} is missing: build it (cargo build -p connector-host with this profile) to time local calls",
            binary.display()
        );
        return None;
    }
    let cache = tempfile::tempdir().ok()?;
    let run = || {
        let t = Instant::now();
        let out = std::process::Command::new(&binary)
            .args(["call"])
            .arg(path)
            .args(["echo", r#"{"message": "hi"}"#])
            .env("CONNECTOR_HOST_CACHE_DIR", cache.path())
            .output()
            .expect("connector-host call");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        t.elapsed()
    };
    let first = run();
    Some((first, run()))
}

/// What this process has used so far: its CPU time (user and system, every thread) and
/// its minor page faults, from `/proc/self/stat` (CPU in clock ticks of 10 ms: over a
/// thousand calls, a fine enough measure). Unlike wall time, neither grows with what else
/// the machine runs.
#[derive(Clone, Copy)]
struct Counters {
    cpu: Duration,
    minor_faults: u64,
}

fn process_counters() -> Option<Counters> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    // minflt, utime and stime are the 10th, 14th and 15th fields.
    Some(Counters {
        cpu: Duration::from_millis((field(14)? + field(15)?) * 10),
        minor_faults: field(10)?,
    })
}

/// CPU and minor page faults per call over `calls` calls between two readings.
struct PerCall {
    cpu: Option<Duration>,
    minor_faults: Option<u64>,
}

fn per_call(before: Option<Counters>, after: Option<Counters>, calls: usize) -> PerCall {
    let both = before.zip(after);
    PerCall {
        cpu: both.map(|(b, a)| a.cpu.saturating_sub(b.cpu) / calls.max(1) as u32),
        minor_faults: both
            .map(|(b, a)| a.minor_faults.saturating_sub(b.minor_faults) / calls.max(1) as u64),
    }
}

impl std::fmt::Display for PerCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cpu {
            Some(cpu) => write!(f, "CPU per call {cpu:?}")?,
            None => write!(f, "CPU per call unknown")?,
        }
        match self.minor_faults {
            Some(faults) => write!(f, ", {faults} minor page faults per call"),
            None => Ok(()),
        }
    }
}
