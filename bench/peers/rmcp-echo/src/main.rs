//! `acme.echo` served by the official Rust MCP SDK (`rmcp`), as a user would write it:
//! `StreamableHttpService` in stateless mode with JSON answers, on axum, no sandbox, no
//! authentication. It is the native floor `bench/table.py` compares this host's MCP
//! endpoint with (same tool name, arguments and structured result).
//!
//! ```text
//! rmcp-echo --listen 127.0.0.1:8790     # serves POST /mcp
//! ```

use std::net::SocketAddr;

use anyhow::Context;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};
use serde::{Deserialize, Serialize};

/// Arguments of `acme.echo` (the bundled connector's schema).
#[derive(Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// Text to echo back.
    message: String,
}

/// What `acme.echo` answers: its arguments.
#[derive(Serialize, schemars::JsonSchema)]
struct Echoed {
    /// The text it was given.
    message: String,
}

#[derive(Clone)]
struct Echo {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Echo {
    #[tool(name = "acme.echo", description = "Echo the arguments back unchanged.")]
    fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> Json<Echoed> {
        Json(Echoed {
            message: args.message,
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

fn listen_address() -> anyhow::Result<SocketAddr> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (Some("--listen"), Some(addr)) => addr
            .parse()
            .with_context(|| format!("--listen {addr}: expected an address like 127.0.0.1:8790")),
        _ => anyhow::bail!("usage: rmcp-echo --listen 127.0.0.1:PORT"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = listen_address()?;
    let echo = Echo {
        tool_router: Echo::tool_router(),
    };
    let service: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(echo.clone()),
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("rmcp-echo: rmcp 3.11 stateless Streamable HTTP on http://{addr}/mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving")
}
