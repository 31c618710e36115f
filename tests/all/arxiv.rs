//! The arXiv connector end to end.
//!
//! The bundled component declares `export.arxiv.org` as its only outbound host, and the
//! host's effective list is declared ∩ operator list: an operator may narrow it, never
//! widen it. So a fake arXiv on 127.0.0.1 is unreachable through the Host API, by design,
//! and the tests split in two:
//!
//! - the connector's HTTP and Atom handling run through the real runtime against the fake
//!   served over real HTTP, with a [`Sandbox`] whose policy is built directly
//!   (`OutboundPolicy::new(&["127.0.0.1"], None, true)`), standing in for a host that
//!   allows the fake;
//! - over the Host API, a binding whose `baseUrl` points at the fake is refused by the
//!   outbound policy (with and without an operator list naming 127.0.0.1), and the schema
//!   bounds `max_results` before any guest code runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use connector_host::config::ConnectorSettings;
use connector_runtime::{
    wit, ConnectorRuntime, GuestLimits, LoadedComponent, OutboundPolicy, RuntimeOptions, Sandbox,
};
use integration_tests::fake_arxiv::FakeArxiv;
use integration_tests::harness::TestHost;
use reqwest::Method;
use serde_json::{json, Value};

fn runtime() -> Arc<ConnectorRuntime> {
    Arc::new(
        ConnectorRuntime::new(RuntimeOptions {
            limits: GuestLimits {
                call_timeout: Duration::from_secs(20),
                memory_bytes: 64 * 1024 * 1024,
                max_output_bytes: 1024 * 1024,
                max_concurrent_instances: 16,
                ..GuestLimits::default()
            },
            cache_dir: None,
            installation_tokens: None,
            credential_log: None,
            ..RuntimeOptions::default()
        })
        .expect("runtime"),
    )
}

/// The sandbox of a host whose policy lets the connector reach the fake on 127.0.0.1.
fn sandbox_allowing_the_fake() -> Sandbox {
    Sandbox {
        connector: Arc::from("arxiv"),
        outbound: Arc::new(OutboundPolicy::new(&["127.0.0.1".into()], None, true)),
        installations: Arc::from(Vec::new()),
        secrets: Arc::new(BTreeMap::new()),
        caller: connector_runtime::Caller::Host,
        memory_bytes: None,
    }
}

struct Setup {
    rt: Arc<ConnectorRuntime>,
    arxiv: LoadedComponent,
    fake: FakeArxiv,
    sandbox: Sandbox,
}

async fn setup() -> Setup {
    let rt = runtime();
    let bytes = connector_bundled::component("arxiv").expect("arxiv is bundled");
    let arxiv = rt.load(bytes).expect("arxiv loads");
    Setup {
        rt,
        arxiv,
        fake: FakeArxiv::start().await,
        sandbox: sandbox_allowing_the_fake(),
    }
}

impl Setup {
    async fn call(&self, tool: &str, args: Value) -> Result<Value, wit::ToolError> {
        let ctx = wit::CallContext {
            binding: wit::Binding {
                unit: "research".into(),
                config: json!({"baseUrl": self.fake.url()}).to_string(),
            },
            agent: Some("reader".into()),
            call_id: "call-1".into(),
        };
        self.rt
            .call_tool(&self.arxiv, &self.sandbox, ctx, tool, &args.to_string())
            .await
            .expect("the guest runs to completion")
            .map(|out| {
                serde_json::from_str(out.structured.as_deref().unwrap_or_default())
                    .expect("JSON result")
            })
    }

    fn last_request(&self) -> std::collections::HashMap<String, String> {
        self.fake.requests().pop().expect("the fake saw a request")
    }
}

fn failed(r: Result<Value, wit::ToolError>) -> String {
    match r {
        Err(wit::ToolError::Failed(m)) => m,
        other => panic!("expected a tool failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_declares_only_export_arxiv_org() {
    let rt = runtime();
    let bytes = connector_bundled::component("arxiv").expect("arxiv is bundled");
    let arxiv = rt.load(bytes).unwrap();
    let m = rt.describe(&arxiv).await.unwrap();
    assert_eq!(m.slug, "arxiv");
    assert_eq!(m.allowed_hosts, ["export.arxiv.org"]);
    let names: Vec<&str> = m.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["arxiv.search", "arxiv.fetch_abstract"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_returns_compact_results_and_passes_the_parameters() {
    let s = setup().await;

    let out = s
        .call(
            "arxiv.search",
            json!({"query": "all:electron AND ti:proton"}),
        )
        .await
        .unwrap();
    let q = s.last_request();
    assert_eq!(q["search_query"], "all:electron AND ti:proton");
    assert_eq!(q["start"], "0");
    assert_eq!(q["max_results"], "10");
    assert_eq!(q["sortBy"], "relevance");
    assert_eq!(q["sortOrder"], "descending");
    assert!(!q.contains_key("id_list"));

    assert_eq!(out["total"], 1742);
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["2101.00001v2", "1501.00123v1", "hep-th/9901001v1"]);
    let first = &results[0];
    assert_eq!(
        first["title"],
        "Proton Radius Extraction from Elastic Electron Scattering & the Low-$Q^2$ Regime"
    );
    assert_eq!(
        first["authors"],
        json!(["Ana M. Ferreira", "Jürgen Weiß", "Li Wei"])
    );
    assert!(first["summary"].as_str().unwrap().starts_with(
        "We revisit the extraction of the proton charge radius from elastic electron-proton"
    ));
    assert_eq!(first["published"], "2021-01-01T00:00:21Z");
    assert_eq!(first["updated"], "2021-03-02T17:45:12Z");
    assert_eq!(first["primaryCategory"], "nucl-th");
    assert_eq!(first["categories"], json!(["nucl-th", "hep-ph", "nucl-ex"]));
    assert_eq!(first["pdfUrl"], "http://arxiv.org/pdf/2101.00001v2");
    assert_eq!(first["absUrl"], "http://arxiv.org/abs/2101.00001v2");
    assert_eq!(
        results[2]["pdfUrl"],
        "http://arxiv.org/pdf/hep-th/9901001v1"
    );

    // Sort orders and result counts reach arXiv as its own parameter values.
    for (sort, api) in [
        ("submitted", "submittedDate"),
        ("updated", "lastUpdatedDate"),
        ("relevance", "relevance"),
    ] {
        s.call(
            "arxiv.search",
            json!({"query": "cat:hep-th", "sort": sort, "max_results": 50}),
        )
        .await
        .unwrap();
        let q = s.last_request();
        assert_eq!(
            (q["sortBy"].as_str(), q["max_results"].as_str()),
            (api, "50")
        );
    }

    // The guest checks the bounds too (the Host API's schema check comes first there).
    let before = s.fake.requests().len();
    for bad in [
        json!({"query": "x", "max_results": 51}),
        json!({"query": "x", "max_results": 0}),
        json!({"query": "   "}),
        json!({"query": "x", "sort": "newest"}),
    ] {
        match s.call("arxiv.search", bad.clone()).await {
            Err(wit::ToolError::InvalidArguments(_)) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(
        s.fake.requests().len(),
        before,
        "no request for bad arguments"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_abstract_by_new_and_old_style_ids() {
    let s = setup().await;

    for (id, sent) in [
        ("2101.00001", "2101.00001"),
        ("2101.00001v2", "2101.00001v2"),
        ("arXiv:2101.00001", "2101.00001"),
    ] {
        let paper = s
            .call("arxiv.fetch_abstract", json!({ "id": id }))
            .await
            .unwrap();
        assert_eq!(s.last_request()["id_list"], sent);
        assert_eq!(paper["id"], "2101.00001v2");
        let summary = paper["summary"].as_str().unwrap();
        assert!(summary.chars().count() > 2_000, "the full abstract");
        assert!(summary.ends_with("remains to be understood."));
        assert!(!summary.contains('\n'));
        assert!(paper.get("summaryTruncated").is_none());
        assert_eq!(paper["primaryCategory"], "nucl-th");
    }

    for id in ["hep-th/9901001", "hep-th/9901001v1"] {
        let paper = s
            .call("arxiv.fetch_abstract", json!({ "id": id }))
            .await
            .unwrap();
        assert_eq!(s.last_request()["id_list"], id);
        assert_eq!(paper["id"], "hep-th/9901001v1");
        assert_eq!(
            paper["title"],
            "Electron and Proton Form Factors from a Holographic Model"
        );
        assert_eq!(paper["authors"], json!(["M. Okamoto", "P. Lindqvist"]));
        assert_eq!(paper["absUrl"], "http://arxiv.org/abs/hep-th/9901001v1");
    }

    // Malformed ids never reach arXiv and explain both forms.
    let before = s.fake.requests().len();
    for bad in ["2101.1", "hep-th-9901001", "doi:10.1000/xyz"] {
        match s.call("arxiv.fetch_abstract", json!({ "id": bad })).await {
            Err(wit::ToolError::InvalidArguments(m)) => {
                assert!(
                    m.contains("2101.00001") && m.contains("hep-th/9901001"),
                    "{m}"
                );
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert_eq!(s.fake.requests().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_and_outages_are_actionable_failures() {
    let s = setup().await;

    let m = failed(
        s.call("arxiv.fetch_abstract", json!({"id": "2101.99999"}))
            .await,
    );
    assert_eq!(s.last_request()["id_list"], "2101.99999");
    assert_eq!(
        m,
        "no arXiv paper with id `2101.99999`; check the id (new style 2101.00001, old style \
         hep-th/9901001)"
    );

    s.fake.fail_with(Some(503));
    let m = failed(s.call("arxiv.search", json!({"query": "electron"})).await);
    assert!(
        m.contains("HTTP 503") && m.contains("try again later"),
        "{m}"
    );
    let m = failed(
        s.call("arxiv.fetch_abstract", json!({"id": "2101.00001"}))
            .await,
    );
    assert!(m.contains("HTTP 503"), "{m}");

    s.fake.fail_with(None);
    s.call("arxiv.search", json!({"query": "electron"}))
        .await
        .expect("works again once arXiv is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbound_policy_refuses_a_base_url_outside_the_declared_hosts() {
    let fake = FakeArxiv::start().await;
    // Default policy (declared hosts only), then an operator list naming 127.0.0.1 with
    // private networks allowed: still refused, since the operator may narrow, not widen.
    for operator in [
        None,
        Some(vec![
            "127.0.0.1".to_string(),
            "export.arxiv.org".to_string(),
        ]),
    ] {
        let widen = operator.is_some();
        let h = TestHost::start_with(move |c| {
            if let Some(hosts) = operator {
                c.connectors.insert(
                    "arxiv".into(),
                    ConnectorSettings {
                        allowed_hosts: Some(hosts),
                        allow_private_networks: true,
                        ..ConnectorSettings::default()
                    },
                );
            }
        })
        .await;
        h.unit("research", None).await;
        h.agent("reader", &["research"]).await;
        h.bind("research", "arxiv", json!({"baseUrl": fake.url()}))
            .await;
        let token = h.agent_token("reader").await;
        let call = |tool: &'static str, args: Value| {
            let token = token.clone();
            let h = &h;
            async move {
                h.as_token(
                    &token,
                    Method::POST,
                    "/api/v1/agents/reader/tool-calls",
                    Some(json!({"tool": tool, "arguments": args})),
                )
                .await
            }
        };

        let (s, b) = call("arxiv.fetch_abstract", json!({"id": "2101.00001"})).await;
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (502, Some("tool_failed")),
            "{b}"
        );
        let m = b["error"]["message"].as_str().unwrap();
        assert!(m.contains("denied"), "widen={widen}: {m}");
        assert!(m.contains("export.arxiv.org"), "{m}");

        // The schema bounds max_results before any guest code runs.
        let (s, b) = call("arxiv.search", json!({"query": "x", "max_results": 51})).await;
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (422, Some("invalid_arguments")),
            "{b}"
        );
        assert_eq!(
            b["error"]["details"]["violations"][0]["pointer"],
            "/max_results"
        );
    }
    assert!(fake.requests().is_empty(), "the fake was never reached");
}
