//! The console's Tools view, rendered server-side for an agent with 5,000 effective
//! tools: 200 connectors of 25 tools each, bound along a 32-deep unit chain above the
//! agent (so every group carries an "inherited from" badge), plus the platform tools.
//! The budget is 50 ms per page.
//!
//! `cargo bench -p connector-host --bench console`

use std::sync::Arc;
use std::time::{Duration, Instant};

use connector_host::console::pages;
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

const BUDGET: Duration = Duration::from_millis(50);

fn bench(c: &mut Criterion) {
    let chain::Chain {
        connectors,
        directory,
        runtime: _runtime,
    } = chain::chain(
        |ns, t| ToolInfo {
            name: format!("{ns}.tool_{t:02}"),
            description: format!("Tool {t} of {ns}: does one thing <well> & says so"),
            input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            annotations: ToolAnnotations {
                read_only_hint: t % 2 == 0,
                idempotent_hint: t % 3 == 0,
                ..ToolAnnotations::default()
            },
            output_schema: None,
        },
        |_, i| format!("Connector {i}"),
    );
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
