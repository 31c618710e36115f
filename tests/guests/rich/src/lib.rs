//! Test guest for rich tool results (`spring:connector@0.2.0`). The content mirrors the
//! official MCP conformance suite's tool scenarios, so SDK clients can check the same
//! things against it.
//!
//! Tools (namespace `rich`):
//! - `text` `{}`: one text block, `This is a simple text response for testing.`
//! - `image` `{}`: one PNG image ([`PNG`], a 1×1 red pixel).
//! - `audio` `{}`: one `audio/wav` block ([`WAV`]).
//! - `embedded_resource` `{}`: a text resource `test://embedded-resource`.
//! - `resource_link` `{}`: a link to `https://example.com/report.pdf`.
//! - `mixed` `{}`: text, image and an embedded blob resource, in that order.
//! - `weather` `{city}`: structured `{city, celsius}` with a declared output schema, and
//!   a text block.
//! - `broken_output` `{}`: declares the weather output schema but returns `{"celsius":
//!   "warm"}`: the host must fail the call.
//! - `missing_output` `{}`: declares the output schema and returns content only.
//! - `bad_media` `{}`: an image whose media type is `png` (not type/subtype).
//! - `big_image` `{bytes}`: an image of `bytes` zero bytes (output limits).
//! - `many_blocks` `{count}`: `count` empty text blocks (a flood that costs no data).
//! - `fail` `{message}`: fails with `message` as its own error text (control characters
//!   and all).
//! - `link_to` `{uri}`: a resource link to `uri`, whatever it is.
//! - `embed_at` `{uri}`: an embedded text resource at `uri`, whatever it is.

use connector_sdk::serde_json::json;
use connector_sdk::{
    CallContext, Connector, Manifest, NoArgs, ResourceLink, Tool, ToolError, ToolOutput,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A 1×1 red PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0x18, 0xdd, 0x8d, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A minimal WAV header (no samples).
pub const WAV: &[u8] = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x44\xac\x00\x00\x88\x58\x01\x00\x02\x00\x10\x00data\x00\x00\x00\x00";

/// `{city}`.
#[derive(Deserialize, JsonSchema)]
struct CityArgs {
    city: String,
}

/// The weather tools' structured result.
#[derive(Serialize, JsonSchema)]
struct Weather {
    city: String,
    celsius: f64,
}

/// `{bytes}`.
#[derive(Deserialize, JsonSchema)]
struct SizeArgs {
    bytes: u32,
}

type Output = Result<ToolOutput, ToolError>;

fn text(_: &CallContext, _: NoArgs) -> Output {
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

fn resource_link(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().resource_link(
        ResourceLink::new("https://example.com/report.pdf", "report")
            .title("Quarterly report")
            .description("The report as a PDF")
            .mime_type("application/pdf")
            .size(1024),
    ))
}

fn mixed(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new()
        .text("Multiple content types test:")
        .image(PNG, "image/png")
        .resource_blob(
            "test://mixed-content-resource",
            "application/octet-stream",
            vec![0u8, 1, 2, 255],
        ))
}

fn weather(_: &CallContext, args: CityArgs) -> Output {
    let w = Weather {
        city: args.city,
        celsius: 21.5,
    };
    ToolOutput::new()
        .text(format!("{}: 21.5 °C", w.city))
        .structured(&w)
}

fn broken_output(_: &CallContext, _: NoArgs) -> Output {
    ToolOutput::new().structured(&json!({"celsius": "warm"}))
}

fn missing_output(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().text("no structured result"))
}

fn bad_media(_: &CallContext, _: NoArgs) -> Output {
    Ok(ToolOutput::new().image(PNG, "png"))
}

/// `{count}`.
#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    count: u32,
}

fn many_blocks(_: &CallContext, args: CountArgs) -> Output {
    Ok((0..args.count).fold(ToolOutput::new(), |out, _| out.text("")))
}

/// `{message}`.
#[derive(Deserialize, JsonSchema)]
struct MessageArgs {
    message: String,
}

fn fail(_: &CallContext, args: MessageArgs) -> Output {
    Err(ToolError::failed(args.message))
}

/// `{uri}`.
#[derive(Deserialize, JsonSchema)]
struct UriArgs {
    uri: String,
}

fn link_to(_: &CallContext, args: UriArgs) -> Output {
    Ok(ToolOutput::new().resource_link(ResourceLink::new(args.uri, "linked")))
}

fn embed_at(_: &CallContext, args: UriArgs) -> Output {
    Ok(ToolOutput::new().resource_text(args.uri, "text/plain", "embedded"))
}

fn big_image(_: &CallContext, args: SizeArgs) -> Output {
    Ok(ToolOutput::new().image(vec![0u8; args.bytes as usize], "image/png"))
}

struct Rich;

impl Connector for Rich {
    fn manifest() -> Manifest {
        Manifest::new("rich")
            .display_name("Rich results")
            .description("Returns content blocks and structured output, for tests.")
            .version("0.2.0")
            .tool(Tool::new("text", "One text block", text).read_only())
            .tool(Tool::new("image", "One PNG image", image).read_only())
            .tool(Tool::new("audio", "One WAV sound", audio).read_only())
            .tool(
                Tool::new(
                    "embedded_resource",
                    "An embedded text resource",
                    embedded_resource,
                )
                .read_only(),
            )
            .tool(Tool::new("resource_link", "A link to a PDF", resource_link).read_only())
            .tool(Tool::new("mixed", "Text, an image and a blob resource", mixed).read_only())
            .tool(
                Tool::new("weather", "The weather in a city", weather)
                    .read_only()
                    .output::<Weather>(),
            )
            .tool(
                Tool::new(
                    "broken_output",
                    "Breaks its own output schema",
                    broken_output,
                )
                .output::<Weather>(),
            )
            .tool(
                Tool::new(
                    "missing_output",
                    "Declares an output schema, returns content only",
                    missing_output,
                )
                .output::<Weather>(),
            )
            .tool(Tool::new(
                "bad_media",
                "An image with a malformed media type",
                bad_media,
            ))
            .tool(Tool::new(
                "big_image",
                "An image of `bytes` bytes",
                big_image,
            ))
            .tool(Tool::new(
                "many_blocks",
                "`count` empty text blocks",
                many_blocks,
            ))
            .tool(Tool::new("fail", "Fails with `message`", fail))
            .tool(Tool::new("link_to", "A resource link to `uri`", link_to).read_only())
            .tool(Tool::new("embed_at", "A text resource at `uri`", embed_at).read_only())
    }
}

connector_sdk::export!(Rich);
