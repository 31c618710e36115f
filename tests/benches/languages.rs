//! What a connector costs in each language, in one run: `acme` in Rust (bundled), in
//! TypeScript (connectors/acme-js) and in Python (connectors/acme-py).
//!
//! Per language: the component's size; its install compile time (a runtime without a
//! cache, as an install of new bytes); the p50 and p99 of `acme.echo` with a fresh sandbox
//! per call through `Host::call_tool` and over HTTP (`POST /api/v1/agents/a/tool-calls`);
//! and, when the `connector-host` binary of the same profile exists, the wall time of a
//! local `connector-host call FILE echo` run twice on an empty compiled-component cache
//! (the second run reads the cache).
//!
//! `cargo bench -p integration-tests --bench languages`
//! Targets: TypeScript and Python call p50 <= 1 ms in-process; a second local call <= 1 s.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use connector_host::config::HostConfig;
use connector_host::Host;
use connector_runtime::{ConnectorRuntime, GuestLimits, RuntimeOptions};
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
    for (name, bytes, path) in builds {
        rt.block_on(measure(name, bytes, path));
    }
}

async fn measure(name: &str, bytes: Vec<u8>, path: Option<PathBuf>) {
    let size = bytes.len();
    let uncached = ConnectorRuntime::new(RuntimeOptions {
        limits: GuestLimits::default(),
        cache_dir: None,
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let started = Instant::now();
    uncached.load(&bytes).expect("the component loads");
    let compile = started.elapsed();
    drop(uncached);

    let data = tempfile::tempdir().expect("tmp");
    let (host, _) = Host::open(HostConfig {
        data_dir: data.path().to_path_buf(),
        operator_token: Some("bench".into()),
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    })
    .await
    .expect("host");
    if name != "rust" {
        // Rotates the bundled acme to this language's build (the same manifest).
        host.install_connector(&bytes, false)
            .await
            .expect("install");
    }
    host.put_unit("u", None, None).await.expect("unit");
    host.put_agent("a", &["u".to_string()], None)
        .await
        .expect("agent");
    host.bind("u", "acme", json!({})).await.expect("bind");
    let args = json!({"message": "hello"});
    for _ in 0..WARMUP {
        host.call_tool("a", "acme.echo", args.clone())
            .await
            .expect("call");
    }
    let mut in_process = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let out = host
            .call_tool("a", "acme.echo", args.clone())
            .await
            .expect("call");
        in_process.push(t.elapsed());
        assert_eq!(out.structured.as_ref(), Some(&args));
    }

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
        "{name}: component {:.1} MiB; install compile {:.2} s; Host::call_tool p50 {p50:?} p99 {p99:?}{}; HTTP p50 {h50:?} p99 {h99:?}",
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
        "@result languages_{name} size_bytes={size} compile_ms={} call_p50_us={} call_p99_us={} http_p50_us={} http_p99_us={}",
        compile.as_millis(),
        p50.as_micros(),
        p99.as_micros(),
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
