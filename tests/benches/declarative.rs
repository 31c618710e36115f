//! A packed declarative connector against a hand-written one doing the same request.
//!
//! Both fetch `{base_url}/items/{id}` from a local HTTP server with a bearer token and
//! return its JSON: `tests/fixtures/bench-http.yaml` packed with `connector-host pack`'s
//! library function, and the Rust guest `tests/guests/native-http`. Each call goes
//! through `Host::call_tool` (grants, schema check, a fresh sandbox, outbound policy), so
//! the ratio is the overhead a connector author pays for not writing Rust.
//!
//! `cargo bench -p integration-tests --bench declarative`
//! Targets: p50 ratio ≤ 1.3×; packed component ≤ 2 MiB.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use connector_host::config::{ConnectorSettings, HostConfig};
use connector_host::pack::{pack_file, PackOptions};
use connector_host::Host;
use serde_json::{json, Value};

const TOKEN: &str = "bench-token";
const ROUNDS: usize = 8;
const CALLS_PER_ROUND: usize = 500;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() - 1) * 99 / 100]
}

async fn item(
    Path(id): Path<String>,
    headers: HeaderMap,
    counter: Arc<AtomicU64>,
) -> Result<Json<Value>, StatusCode> {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(&format!("Bearer {TOKEN}")) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    counter.fetch_add(1, Ordering::Relaxed);
    Ok(Json(
        json!({"id": id, "name": "an item", "tags": ["a", "b"]}),
    ))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let served = Arc::new(AtomicU64::new(0));
        let counter = served.clone();
        let app = Router::new().route("/items/{id}", get(move |p, h| item(p, h, counter.clone())));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });

        let packed = pack_file(
            &root.join("fixtures/bench-http.yaml"),
            &PackOptions {
                allow_hosts: vec!["127.0.0.1".into()],
                ..PackOptions::default()
            },
        )
        .expect("the bench manifest packs");
        let size = packed.component.len();
        let native = std::fs::read(integration_tests::guests::NATIVE_HTTP).expect("native guest");

        let data = tempfile::tempdir().expect("tmp");
        let mut config = HostConfig {
            data_dir: data.path().to_path_buf(),
            operator_token: Some("bench".into()),
            bundled: connector_bundled::components(),
            ..HostConfig::default()
        };
        for slug in ["bench-http", "native-http"] {
            config.connectors.insert(
                slug.into(),
                ConnectorSettings {
                    allow_private_networks: true,
                    ..ConnectorSettings::default()
                },
            );
        }
        let (host, _) = Host::open(config).await.expect("host");
        host.install_connector(&packed.component, false)
            .await
            .expect("install packed");
        host.install_connector(&native, false)
            .await
            .expect("install native");
        host.put_unit("u", None, None).await.expect("unit");
        host.put_agent("a", &["u".to_string()], None)
            .await
            .expect("agent");
        let binding = json!({"base_url": base, "token": TOKEN});
        host.bind("u", "bench-http", binding.clone())
            .await
            .expect("bind packed");
        host.bind("u", "native-http", binding)
            .await
            .expect("bind native");

        let call = |tool: &'static str| {
            let host = &host;
            async move {
                let out = host
                    .call_tool("a", tool, json!({"id": "item-42"}))
                    .await
                    .unwrap_or_else(|e| panic!("{tool}: {e}"));
                let value = out.structured;
                assert_eq!(
                    value.as_ref().and_then(|v| v["id"].as_str()),
                    Some("item-42"),
                    "{tool}: {value:?}"
                );
            }
        };
        for _ in 0..200 {
            call("bench.get_item").await;
            call("native_http.get_item").await;
        }
        // Interleaved rounds, so drift on the machine hits both alike.
        let (mut packed_samples, mut native_samples) = (Vec::new(), Vec::new());
        let mut ratios = Vec::new();
        for _ in 0..ROUNDS {
            let (mut p, mut n) = (Vec::new(), Vec::new());
            for _ in 0..CALLS_PER_ROUND {
                let t = Instant::now();
                call("bench.get_item").await;
                p.push(t.elapsed());
                let t = Instant::now();
                call("native_http.get_item").await;
                n.push(t.elapsed());
            }
            ratios.push(p50(p.clone()).as_secs_f64() / p50(n.clone()).as_secs_f64());
            packed_samples.extend(p);
            native_samples.extend(n);
        }
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios[ratios.len() / 2];
        let (pp50, pp99) = (p50(packed_samples.clone()), p99(packed_samples));
        let (np50, np99) = (p50(native_samples.clone()), p99(native_samples));
        println!("packed stateless_http call:  p50 {pp50:?} p99 {pp99:?}");
        println!("hand-written Rust call:      p50 {np50:?} p99 {np99:?}");
        println!(
            "overhead (median of {ROUNDS} rounds' p50 ratios): {ratio:.2}x (target <= 1.3x: {})",
            if ratio <= 1.3 { "met" } else { "MISSED" }
        );
        println!(
            "packed component: {size} bytes = {:.2} MiB (target <= 2 MiB: {})",
            size as f64 / 1048576.0,
            if size <= 2 * 1024 * 1024 {
                "met"
            } else {
                "MISSED"
            }
        );
        println!(
            "@result declarative_packed p50_us={} p99_us={}",
            pp50.as_micros(),
            pp99.as_micros()
        );
        println!(
            "@result declarative_native p50_us={} p99_us={}",
            np50.as_micros(),
            np99.as_micros()
        );
        println!("@result declarative_ratio ratio={ratio:.3} size_bytes={size}");
        assert!(served.load(Ordering::Relaxed) > 0);
    });
}
