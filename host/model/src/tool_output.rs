//! What a tool call produced, in the one shape the HTTP API and MCP both show.
//!
//! A connector built against `spring:connector@0.2.0` returns structured JSON, content
//! blocks (text, image, audio, resource link, embedded resource), or both; a 0.1.0
//! connector and every platform tool return JSON only. Binary data is held base64-encoded,
//! in MCP's content-block shape, so the HTTP tool-call API (`{"result", "content"}`) and
//! MCP's `tools/call` result serialise the same values.

use serde::Serialize;
use serde_json::Value;

/// A successful tool call's output.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The structured result: a 0.1.0 connector's or a platform tool's JSON, a 0.2.0
    /// connector's `structured` value. `None` when the tool returned content only.
    pub structured: Option<Value>,
    /// Content blocks, in the connector's order. Empty: `structured` is the whole result.
    pub content: Vec<ContentBlock>,
}

/// One MCP content block. Serialises as MCP does (`{"type": "image", "data": <base64>,
/// "mimeType": ...}`), which is also the HTTP API's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ContentBlock {
    /// Text for the model.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Its bytes, base64.
        data: String,
        /// Its media type.
        mime_type: String,
    },
    /// A sound.
    Audio {
        /// Its bytes, base64.
        data: String,
        /// Its media type.
        mime_type: String,
    },
    /// A link to a resource the client may fetch.
    ResourceLink {
        /// Where the resource is.
        uri: String,
        /// Its name.
        name: String,
        /// A title for people.
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// What it is.
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its media type.
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its size in bytes.
        #[serde(skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
    /// A resource embedded in the result.
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
}

/// The `resource` of an embedded-resource block: `{uri, mimeType?, text | blob}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedResource {
    /// The resource's URI.
    pub uri: String,
    /// Its media type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its text or base64 data.
    #[serde(flatten)]
    pub contents: ResourceContents,
}

/// Text or base64 binary contents of an embedded resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceContents {
    /// UTF-8 text.
    Text(String),
    /// Base64 data.
    Blob(String),
}

impl ToolOutput {
    /// An output that is JSON only.
    pub fn json(value: Value) -> Self {
        ToolOutput {
            structured: Some(value),
            content: Vec::new(),
        }
    }
}

/// The HTTP API's answer to a tool call: `{"result": <structured JSON or null>}`, with
/// `"content": [ContentBlock]` when the connector returned content blocks.
impl Serialize for ToolOutput {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("result", &self.structured)?;
        if !self.content.is_empty() {
            map.serialize_entry("content", &self.content)?;
        }
        map.end()
    }
}
