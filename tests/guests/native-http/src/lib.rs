//! The hand-written twin of `tests/fixtures/bench-http.yaml`: one tool that
//! fetches `{base_url}/items/{id}` with the binding's bearer token and returns the JSON.
//! The declarative bench compares a packed manifest's call against this one.

use connector_sdk::http::{self, Request};
use connector_sdk::{CallContext, Connector, Manifest, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// The binding configuration.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The API's base URL.
    base_url: String,
    /// The API token.
    #[schemars(extend("writeOnly" = true))]
    token: String,
}

/// Arguments of `get_item`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetItem {
    /// The item's id.
    id: String,
}

fn get_item(ctx: &CallContext, args: GetItem) -> Result<Value, ToolError> {
    let config: Config = ctx.binding.config_as().map_err(ToolError::failed)?;
    // The same escaping the interpreter applies to a path value.
    let id: String = args
        .id
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let response = http::request(
        Request::get(format!("{}/items/{id}", config.base_url))
            .header("Authorization", format!("Bearer {}", config.token)),
    )
    .map_err(ToolError::failed)?
    .error_for_status()
    .map_err(ToolError::failed)?;
    response.json().map_err(ToolError::failed)
}

struct NativeHttp;

impl Connector for NativeHttp {
    fn manifest() -> Manifest {
        Manifest::new("native-http")
            .namespace("native_http")
            .description("Fetches items over HTTP (hand-written).")
            .config::<Config>()
            .allowed_host("127.0.0.1")
            .tool(Tool::new("get_item", "Fetches one item.", get_item).read_only())
    }
}

connector_sdk::export!(NativeHttp);
