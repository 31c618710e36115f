//! Effective-tool resolver: an agent at the bottom of a 32-deep unit chain, 200 bindings
//! spread over the chain, 5,000 connector tools. "Cold" drops the cache first (as every
//! write does); "cached" is the unchanged case.
//!
//! `cargo bench -p connector-host --bench resolver`

use std::sync::Arc;

use connector_host::grants::{EffectiveToolResolver, ToolCatalog};
use connector_model::connector::{ToolAnnotations, ToolInfo};
use connector_model::records::Subject;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

mod chain;
use chain::{BINDINGS, TOOLS_PER_CONNECTOR};

/// The allocator of the `connector-host` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let chain::Chain {
        connectors,
        directory,
        runtime: _runtime,
    } = chain::chain(
        |ns, t| ToolInfo {
            name: format!("{ns}.tool_{t:02}"),
            description: format!("Tool {t} of {ns}"),
            input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            annotations: ToolAnnotations::default(),
            output_schema: None,
        },
        |ns, _| ns.to_string(),
    );
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
