//! Effective-tool resolver: an agent at the bottom of a 32-deep unit chain, 200 bindings
//! spread over the chain, 5,000 connector tools. "Cold" drops the cache first (as every
//! write does); "cached" is the unchanged case.
//!
//! `cargo bench -p connector-host --bench resolver`

use std::collections::BTreeMap;
use std::sync::Arc;

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
                description: format!("Tool {t} of {ns}"),
                input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                annotations: ToolAnnotations::default(),
                output_schema: None,
            })
            .collect();
        let info = Connector {
            slug: format!("c{i:03}"),
            tool_namespace: ns.clone(),
            display_name: ns.clone(),
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
    let platform: Arc<[Arc<ToolInfo>]> = Arc::from(Vec::new());
    let catalog = ToolCatalog {
        connectors: &connectors,
        platform: &platform,
    };
    let resolver = EffectiveToolResolver::default();
    let subject = Subject::Agent("agent".into());
    let tools = resolver
        .resolve(&directory, &catalog, None, &subject)
        .expect("agent exists");
    assert_eq!(tools.len(), BINDINGS * TOOLS_PER_CONNECTOR);

    let mut g = c.benchmark_group("resolver_32deep_200bindings_5000tools");
    g.bench_function("cold_after_write", |b| {
        b.iter(|| {
            resolver.invalidate();
            resolver.resolve(&directory, &catalog, None, &subject)
        })
    });
    g.bench_function("cached_unchanged", |b| {
        b.iter(|| resolver.resolve(&directory, &catalog, None, &subject))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
