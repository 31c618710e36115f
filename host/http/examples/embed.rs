//! A platform embedding the host as a library: it opens a `Host`, registers one of its own
//! platform tools (`sv.*`), nests the host's HTTP API under its own router, and drives
//! units, agents, bindings and tool calls through the Rust API.
//!
//! `cargo run -p connector-http --example embed` (add `-- --serve` to keep serving).

use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use connector_core::config::HostConfig;
use connector_core::host::{async_trait, HandlerError, PlatformToolHandler};
use connector_core::Host;
use connector_model::connector::{ToolAnnotations, ToolInfo};
use connector_model::records::Subject;
use serde_json::{json, Value};

/// The platform's own tool: `sv.platform.whoami`.
struct WhoAmI;

#[async_trait]
impl PlatformToolHandler for WhoAmI {
    async fn call(&self, agent: &str, _arguments: Value) -> Result<Value, HandlerError> {
        Ok(json!({ "agent": agent, "platform": "example" }))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let config = HostConfig {
        data_dir: data.path().to_path_buf(),
        operator_token: Some("example-operator-token".into()),
        // The connectors the `connector-host` binary ships (`acme`, ...); a platform may
        // ship its own or none.
        bundled: connector_bundled::components(),
        ..HostConfig::default()
    };
    let (host, _) = Host::open(config).await?;

    host.register_platform_tool(
        ToolInfo {
            name: "sv.platform.whoami".into(),
            description: "Tells the calling agent who it is.".into(),
            input_schema: json!({"type": "object", "additionalProperties": false}),
            annotations: ToolAnnotations {
                read_only_hint: true,
                ..ToolAnnotations::default()
            },
            output_schema: None,
        },
        Arc::new(WhoAmI),
    )?;

    // Units, an agent, a binding: the agent now has acme.* through its unit.
    host.put_unit("engineering", None, Some("Engineering"))
        .await?;
    host.put_agent("ada", &["engineering".to_string()], Some("Ada"))
        .await?;
    host.bind("engineering", "acme", json!({"greeting": "hello"}))
        .await?;

    let tools = host.effective_tools(&Subject::Agent("ada".into()))?;
    for tool in tools.iter() {
        println!("{:<24} {}", tool.name(), tool.group.provenance);
    }
    let echoed = host
        .call_tool("ada", "acme.echo", json!({"message": "from the platform"}))
        .await?;
    // The structured result (JSON); `content` holds any content blocks (images, ...).
    println!("acme.echo -> {}", serde_json::to_string(&echoed)?);
    let me = host
        .call_tool("ada", "sv.platform.whoami", json!({}))
        .await?;
    println!("sv.platform.whoami -> {}", serde_json::to_string(&me)?);
    let context = host.runtime_context("ada").await?;
    println!("runtime context env: {:?}", context.env);

    // The platform's own routes with the host's API nested under /connector-host.
    let app = Router::new()
        .route("/", get(|| async { "the platform" }))
        .nest_service(
            "/connector-host",
            connector_http::server::router(host.clone()),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!(
        "serving the platform on http://{}/ (host API under /connector-host/api/v1)",
        listener.local_addr()?
    );
    if std::env::args().any(|a| a == "--serve") {
        axum::serve(listener, app).await?;
    }
    Ok(())
}
