//! The console's Tools view, rendered server-side for an agent with 5,000 effective
//! tools: 200 connectors of 25 tools each, bound along a 32-deep unit chain above the
//! agent (so every group carries an "inherited from" badge), plus the platform tools.
//! The budget is 50 ms per page.
//!
//! `cargo bench -p connector-host --bench console`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::console::pages;
use connector_host::grants::{Directory, EffectiveToolResolver, ToolCatalog};
use connector_host::registry::{Connector, InstalledConnector, ToolAnnotations, ToolInfo};
use connector_host::runtime::{ConnectorRuntime, GuestLimits, RuntimeOptions};
use connector_host::store::{
    AgentRecord, BindingRecord, GrantRecord, Snapshot, Subject, UnitRecord,
};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

const DEPTH: usize = 32;
const BINDINGS: usize = 200;
const TOOLS_PER_CONNECTOR: usize = 25;
const BUDGET: Duration = Duration::from_millis(50);

fn bench(c: &mut Criterion) {
    let runtime = ConnectorRuntime::new(RuntimeOptions {
        limits: GuestLimits {
            max_concurrent_instances: 4,
            ..GuestLimits::default()
        },
        cache_dir: None,
        installation_tokens: None,
    })
    .expect("runtime");
    let component = runtime
        .load(connector_host::host::bundled_component("acme").expect("acme"))
        .expect("load");

    let mut connectors = BTreeMap::new();
    for i in 0..BINDINGS {
        let ns = format!("ns{i:03}");
        let tools = (0..TOOLS_PER_CONNECTOR)
            .map(|t| ToolInfo {
                name: format!("{ns}.tool_{t:02}"),
                description: format!("Tool {t} of {ns}: does one thing <well> & says so"),
                input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                annotations: ToolAnnotations {
                    read_only_hint: t % 2 == 0,
                    idempotent_hint: t % 3 == 0,
                    ..ToolAnnotations::default()
                },
                output_schema: None,
            })
            .collect();
        let info = Connector {
            slug: format!("c{i:03}"),
            tool_namespace: ns.clone(),
            display_name: format!("Connector {i}"),
            description: String::new(),
            version: "1".into(),
            digest: "sha256:00".into(),
            world: String::new(),
            tools,
            config_schema: json!({}),
            webhook: None,
            allowed_hosts: vec![],
        };
        let installed =
            InstalledConnector::from_parts(info, component.clone(), Arc::from(&b""[..]))
                .expect("valid");
        connectors.insert(ns, Arc::new(installed));
    }

    let mut snapshot = Snapshot::default();
    for d in 0..DEPTH {
        snapshot.units.push(UnitRecord {
            id: format!("u{d:02}"),
            parent: (d > 0).then(|| format!("u{:02}", d - 1)),
            display_name: None,
            created_at: "2026-01-01T00:00:00Z".into(),
        });
    }
    for i in 0..BINDINGS {
        let unit = format!("u{:02}", i % DEPTH);
        let slug = format!("c{i:03}");
        snapshot.bindings.push(BindingRecord {
            unit_id: unit.clone(),
            connector: slug.clone(),
            config: json!({}),
            routing_keys: vec![],
            bound_at: "2026-01-01T00:00:00Z".into(),
        });
        snapshot.grants.push(GrantRecord {
            subject: Subject::Unit(unit),
            tool: format!("ns{i:03}.*"),
            namespace: format!("ns{i:03}"),
            provenance: format!("connector:{slug}"),
            created_at: "2026-01-01T00:00:00Z".into(),
        });
    }
    snapshot.agents.push(AgentRecord {
        id: "agent".into(),
        units: vec![format!("u{:02}", DEPTH - 1)],
        display_name: None,
        created_at: "2026-01-01T00:00:00Z".into(),
        token_epoch: String::new(),
    });
    let directory = Directory::from_snapshot(&snapshot);
    let platform: Arc<[Arc<ToolInfo>]> = Arc::from(
        ["sv.tools.describe", "sv.tools.list"]
            .map(|name| {
                Arc::new(ToolInfo {
                    name: name.into(),
                    description: "A platform tool".into(),
                    input_schema: json!({"type": "object"}),
                    annotations: ToolAnnotations::default(),
                    output_schema: None,
                })
            })
            .to_vec(),
    );
    let catalog = ToolCatalog {
        connectors: &connectors,
        platform: &platform,
    };
    let resolver = EffectiveToolResolver::default();
    let subject = Subject::Agent("agent".into());
    let tools = resolver
        .resolve(&directory, &catalog, None, &subject)
        .expect("agent exists");
    assert_eq!(tools.len(), BINDINGS * TOOLS_PER_CONNECTOR + 2);

    // The page has what it should, and one render fits the budget even unwarmed.
    let started = Instant::now();
    let page = pages::agent_tools("csrf-token", "agent", &tools).into_string();
    let first = started.elapsed();
    assert!(page.contains("inherited from u00") && page.contains("ns199.tool_24"));
    assert!(!page.contains("<well>"), "descriptions are escaped");
    eprintln!(
        "console tools view: {} tools, {} KiB of HTML, first render {first:?}",
        tools.len(),
        page.len() / 1024
    );

    let mut g = c.benchmark_group("console_tools_view_5000_tools");
    g.bench_function("render_agent_tools_page", |b| {
        b.iter(|| pages::agent_tools("csrf-token", "agent", &tools).into_string())
    });
    g.bench_function("resolve_cached_and_render", |b| {
        b.iter(|| {
            let tools = resolver
                .resolve(&directory, &catalog, None, &subject)
                .expect("agent exists");
            pages::agent_tools("csrf-token", "agent", &tools).into_string()
        })
    });
    g.finish();

    // The budget, checked on a plain average as well (criterion reports the details).
    let runs = 20;
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(pages::agent_tools("csrf-token", "agent", &tools).into_string());
    }
    let mean = started.elapsed() / runs;
    eprintln!("console tools view: mean of {runs} renders {mean:?} (budget {BUDGET:?})");
    assert!(
        mean <= BUDGET,
        "rendering took {mean:?}, over the {BUDGET:?} budget"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
