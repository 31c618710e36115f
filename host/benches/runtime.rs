//! Sandbox benchmarks (issue: foundation):
//! (a) a native Rust echo (parse + serialise the same JSON) as the floor,
//! (b) `acme.echo` in a fresh store + instance per call (the whole cycle),
//! (c) loading a component from the on-disk cache (its digest known, as at a start, and
//!     hashing its bytes first) versus compiling it.
//!
//! `cargo bench -p connector-host --bench runtime`. Besides criterion's report, a plain
//! loop prints p50/p99 of (a) and (b) measured side by side in one run, then (b)'s CPU time
//! per call. docs/profile-fresh-sandbox.md says where (b)'s time goes and which wasmtime
//! settings were tried.

use std::time::{Duration, Instant};

use connector_runtime::{wit, ConnectorRuntime, GuestLimits, RuntimeOptions, Sandbox};
use criterion::{criterion_group, criterion_main, Criterion};

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn acme() -> &'static [u8] {
    connector_bundled::component("acme").expect("acme is bundled")
}

fn ctx() -> wit::CallContext {
    wit::CallContext {
        binding: wit::Binding {
            unit: "u".into(),
            config: "{}".into(),
        },
        agent: Some("a".into()),
        call_id: "c".into(),
    }
}

const ARGS: &str = r#"{"message":"hello"}"#;

fn native_echo(args: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(args).expect("json");
    serde_json::to_string(&v).expect("json")
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    (p(0.50), p(0.99))
}

/// Calls timed by CPU time after the side-by-side loop.
const CPU_TIMED_CALLS: u32 = 20_000;

/// The CPU time this thread has run (Linux: `/proc/thread-self/schedstat`, nanoseconds);
/// `None` where the kernel does not say.
fn thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let runtime = ConnectorRuntime::new(RuntimeOptions::default()).expect("runtime");
    let component = runtime.load(acme()).expect("acme loads");
    let sandbox = Sandbox::isolated("acme");

    // Side-by-side percentiles.
    let mut native = Vec::with_capacity(20_000);
    let mut fresh = Vec::with_capacity(20_000);
    rt.block_on(async {
        for _ in 0..2_000 {
            let _ = runtime
                .call_tool(&component, &sandbox, ctx(), "acme.echo", ARGS)
                .await;
        }
        for _ in 0..20_000 {
            let t = Instant::now();
            std::hint::black_box(native_echo(std::hint::black_box(ARGS)));
            native.push(t.elapsed());
            let t = Instant::now();
            let out = runtime
                .call_tool(&component, &sandbox, ctx(), "acme.echo", ARGS)
                .await;
            fresh.push(t.elapsed());
            assert!(matches!(out, Ok(Ok(_))));
        }
    });
    // The same calls timed by this thread's CPU time: on a machine shared with other work,
    // wall time includes waiting for a core, CPU time does not.
    let cpu_per_call = rt.block_on(async {
        let before = thread_cpu_time()?;
        for _ in 0..CPU_TIMED_CALLS {
            let out = runtime
                .call_tool(&component, &sandbox, ctx(), "acme.echo", ARGS)
                .await;
            assert!(matches!(out, Ok(Ok(_))));
        }
        Some((thread_cpu_time()? - before) / CPU_TIMED_CALLS)
    });
    let (n50, n99) = percentiles(native);
    let (f50, f99) = percentiles(fresh);
    println!("native echo: p50 {n50:?} p99 {n99:?}");
    println!(
        "acme.echo fresh instance per call: p50 {f50:?} p99 {f99:?} (ratio p50 {:.0}x)",
        f50.as_secs_f64() / n50.as_secs_f64()
    );

    match cpu_per_call {
        Some(cpu) => println!(
            "acme.echo fresh instance per call: CPU {cpu:?} (this thread, {CPU_TIMED_CALLS} calls)"
        ),
        None => println!(
            "acme.echo fresh instance per call: CPU not measured (no /proc/thread-self/schedstat)"
        ),
    }

    let mut g = c.benchmark_group("echo");
    g.bench_function("native_echo", |b| {
        b.iter(|| native_echo(std::hint::black_box(ARGS)))
    });
    g.bench_function("acme_echo_fresh_instance", |b| {
        b.to_async(&rt).iter(|| async {
            let out = runtime
                .call_tool(&component, &sandbox, ctx(), "acme.echo", ARGS)
                .await;
            assert!(matches!(out, Ok(Ok(_))));
        })
    });
    g.finish();

    let dir = tempfile::tempdir().expect("tempdir");
    let cached = ConnectorRuntime::new(RuntimeOptions {
        limits: GuestLimits::default(),
        cache_dir: Some(dir.path().to_path_buf()),
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    cached.load(acme()).expect("warm the cache");
    assert_eq!(
        cached.load(acme()).expect("load").source(),
        connector_runtime::LoadSource::Cache
    );
    let mut g = c.benchmark_group("load");
    g.sample_size(20);
    // What a start does for a bundled or stored connector: its digest is known (from the
    // build, or recorded when it was stored), so the bytes are not hashed again.
    let digest = cached.load(acme()).expect("load").digest().to_owned();
    g.bench_function("from_disk_cache", |b| {
        b.iter(|| cached.load_known(acme(), &digest).expect("load"))
    });
    // Bytes of unknown digest (an upload of a component compiled before): hashed first.
    g.bench_function("from_disk_cache_hashing_the_bytes", |b| {
        b.iter(|| cached.load(acme()).expect("load"))
    });
    g.bench_function("compile", |b| {
        b.iter(|| runtime.compile_uncached(acme()).expect("compile"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
