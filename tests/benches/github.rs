//! GitHub connector figures: the runtime context of an agent whose installation token is
//! cached (a full `Host::runtime_context`, guest call included), and translating a real
//! 25 KiB `pull_request.opened` delivery (fresh instance included).
//!
//! `cargo bench -p integration-tests --bench github`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use connector_host::config::{ConnectorSettings, GithubAppSettings, HostConfig};
use connector_host::Host;
use connector_runtime::{wit, ConnectorRuntime, RuntimeOptions, Sandbox};
use integration_tests::fake_github::FakeGithub;
use serde_json::json;

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[(v.len() - 1) * 99 / 100])
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let public = std::fs::read_to_string(root.join("fixtures/github/app-public.pem")).expect("key");
        let fake = FakeGithub::start(&public, "1012345").await;
        fake.register(48213907);
        let data = tempfile::tempdir().expect("tmp");
        let mut config = HostConfig {
            data_dir: data.path().to_path_buf(),
            operator_token: Some("bench".into()),
            bundled: connector_bundled::components(),
            ..HostConfig::default()
        };
        config.github_app = Some(GithubAppSettings {
            app_id: "1012345".into(),
            private_key_path: root.join("fixtures/github/app-key-pkcs1.pem"),
            api_url: fake.url(),
        });
        config.connectors.insert("github".into(), ConnectorSettings::default());
        let (host, _) = Host::open(config).await.expect("host");
        host.put_unit("web", None, None).await.expect("unit");
        host.put_agent("dev", &["web".to_string()], None).await.expect("agent");
        host.bind("web", "github", json!({"repo": "octo-org/hello-world", "installationId": 48213907})).await.expect("bind");
        host.runtime_context("dev").await.expect("first context mints the token");

        let mut samples = Vec::new();
        for _ in 0..200 {
            host.runtime_context("dev").await.expect("context");
        }
        for _ in 0..3000 {
            let t = Instant::now();
            let ctx = host.runtime_context("dev").await.expect("context");
            samples.push(t.elapsed());
            assert!(ctx.env.contains_key("GITHUB_TOKEN"));
        }
        assert_eq!(fake.exchanges(), 1, "the token stayed cached");
        let (p50, p99) = percentiles(samples);
        println!("runtime context, cached token: p50 {p50:?} p99 {p99:?} (target p50 <= 100 us)");

        let body = std::fs::read(root.join("../connectors/github/fixtures/pull_request.opened.json")).expect("fixture");
        // The guest translates on a runtime of its own (as the host's would: same
        // engine settings, a fresh instance per delivery).
        let runtime = ConnectorRuntime::new(RuntimeOptions::default())
        .expect("runtime");
        let github = runtime
            .load(connector_bundled::component("github").expect("github is bundled"))
            .expect("github loads");
        let hook = wit::Webhook {
            headers: vec![("x-github-event".into(), "pull_request".into()), ("x-github-delivery".into(), "d".into())],
            body: body.clone(),
        };
        let mut samples = Vec::new();
        for i in 0..2200 {
            let t = Instant::now();
            let out = runtime.translate_webhook(&github, &Sandbox::isolated("github"), hook.clone()).await;
            if i >= 200 {
                samples.push(t.elapsed());
            }
            assert!(matches!(out, Ok(Ok(ref m)) if m.len() == 1));
        }
        let (p50, p99) = percentiles(samples);
        println!("translate pull_request.opened ({} bytes), fresh instance: p50 {p50:?} p99 {p99:?} (target p50 <= 300 us)", body.len());
    });
}
