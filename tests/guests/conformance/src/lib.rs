//! Test guest with the tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls by bare name, for its tool scenarios. It is
//! served through the per-namespace endpoint (`/mcp/agents/{id}/namespaces/conformance`),
//! where `conformance.test_simple_text` is `test_simple_text`
//! (`tests/all/mcp_stateless.rs::official_conformance_suite`).
//!
//! Tools (namespace `conformance`), each with the content the suite expects:
//! - `test_simple_text`: one text block.
//! - `test_image_content`: one PNG image (a 1×1 red pixel).
//! - `test_audio_content`: one `audio/wav` block.
//! - `test_embedded_resource`: a text resource `test://embedded-resource`.
//! - `test_multiple_content_types`: text, image and an embedded resource.
//! - `test_error_handling`: fails, so the call is a result with `isError: true`.
//! - `json_schema_2020_12_tool`: the suite's JSON Schema 2020-12 input schema, kept as is
//!   (`$schema`, `$defs` with an `$anchor`, `allOf`/`anyOf`, `if`/`then`/`else`,
//!   `additionalProperties: false`).
//! - `test_header_echo` `{region}`: `region` is mirrored in the `Mcp-Param-Region` header
//!   (`x-mcp-header`), for the suite's custom-header checks; echoes it.
//! - `test_trigger_tool_change`: changes the calling agent's tool list. A connector has no
//!   say over grants, so it asks the operator's side: it POSTs `{"agent": id}` to the
//!   binding's `triggerUrl` (a test server that changes the agent's tools through the
//!   operator API) and waits for its answer.
//!
//! Progress notifications (`test_tool_with_progress`) are not here: the WIT gives a guest
//! no way to report progress during a call.

use connector_sdk::serde_json::{json, Value};
use connector_sdk::{CallContext, Connector, Manifest, NoArgs, Tool, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;

/// A 1×1 red PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0x18, 0xdd, 0x8d, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A minimal WAV header (no samples).
const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x44\xac\x00\x00\x88\x58\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00";

type Output = Result<ToolOutput, ToolError>;

/// The binding's config.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Config {
    /// Where `test_trigger_tool_change` asks for the change.
    #[serde(default)]
    trigger_url: Option<String>,
}

fn simple_text(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().text("This is a simple text response for testing."))
}

fn image(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().image(PNG, "image/png"))
}

fn audio(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().audio(WAV, "audio/wav"))
}

fn embedded_resource(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().resource_text(
        "test://embedded-resource",
        "text/plain",
        "This is an embedded resource content.",
    ))
}

fn multiple(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new()
        .text("Multiple content types test:")
        .image(PNG, "image/png")
        .resource_text(
            "test://mixed-content-resource",
            "application/json",
            r#"{"test":"data","value":123}"#,
        ))
}

fn error_handling(_: &CallContext, _: NoArgs) -> Output {
    Err(ToolError::failed(
        "This tool intentionally returns an error for testing",
    ))
}

/// The suite's JSON Schema 2020-12 input schema.
fn schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

/// `{region}`, mirrored in `Mcp-Param-Region`.
fn header_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        "required": ["region"]
    })
}

fn trigger_tool_change(ctx: &CallContext, _: NoArgs) -> Output {
    let config: Config = ctx.binding.config_as().map_err(ToolError::failed)?;
    let url = config
        .trigger_url
        .ok_or_else(|| ToolError::failed("this binding has no `triggerUrl` to ask"))?;
    let body = json!({ "agent": ctx.agent });
    let response = connector_sdk::http::Request::post(url)
        .json(&body)
        .map_err(ToolError::failed)?
        .send()
        .map_err(ToolError::failed)?;
    if response.status != 200 {
        return Err(ToolError::failed(format!(
            "the trigger answered {}: {}",
            response.status,
            response.text()
        )));
    }
    Ok(ToolOutput::new().text("Tool list change triggered"))
}

struct Conformance;

impl Connector for Conformance {
    fn manifest() -> Manifest {
        Manifest::new("conformance")
            .display_name("MCP conformance tools")
            .description("The tools the MCP conformance suite calls, for tests.")
            .version("0.1.0")
            .config::<Config>()
            .allowed_host("127.0.0.1")
            .tool(Tool::new("test_simple_text", "Returns simple text", simple_text).read_only())
            .tool(Tool::new("test_image_content", "Returns a PNG image", image).read_only())
            .tool(Tool::new("test_audio_content", "Returns a WAV sound", audio).read_only())
            .tool(
                Tool::new(
                    "test_embedded_resource",
                    "Returns an embedded text resource",
                    embedded_resource,
                )
                .read_only(),
            )
            .tool(
                Tool::new(
                    "test_multiple_content_types",
                    "Returns text, an image and a resource",
                    multiple,
                )
                .read_only(),
            )
            .tool(Tool::new(
                "test_error_handling",
                "Always fails",
                error_handling,
            ))
            .tool(Tool::raw(
                "json_schema_2020_12_tool",
                "Tool with JSON Schema 2020-12 features",
                schema_2020_12,
                |_, _| Ok(r#"{"result":"ok"}"#.to_string()),
            ))
            .tool(Tool::raw(
                "test_header_echo",
                "Echoes `region`, which travels in the Mcp-Param-Region header too",
                header_schema,
                |_, raw| Ok(raw.to_string()),
            ))
            .tool(Tool::new(
                "test_trigger_tool_change",
                "Changes the calling agent's tool list",
                trigger_tool_change,
            ))
    }
}

connector_sdk::export!(Conformance);
