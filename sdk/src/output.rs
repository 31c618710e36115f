//! What a tool returns: structured JSON, content blocks (text, images, audio, resource
//! links, embedded resources), or both.
//!
//! Most tools return a serializable value, which becomes the structured result and the
//! text a client shows. A tool that produces a screenshot, a sound or a document returns
//! a [`ToolOutput`] built from [`Content`] blocks instead; the host encodes binary data
//! for clients (MCP content blocks, the HTTP API's `content`).

use serde::Serialize;
use serde_json::Value;

use crate::ToolError;

/// A tool's successful result.
///
/// ```
/// use connector_sdk::{ResourceLink, ToolOutput};
///
/// let png: &[u8] = b"\x89PNG\r\n\x1a\n";
/// let output = ToolOutput::new()
///     .text("The front page, as rendered:")
///     .image(png, "image/png")
///     .resource_link(ResourceLink::new("https://example.com/", "front page").mime_type("text/html"));
/// assert_eq!(output.content().len(), 3);
/// assert_eq!(output.structured_value(), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// JSON text of the structured result.
    pub(crate) structured: Option<String>,
    pub(crate) content: Vec<Content>,
}

/// One block of a tool's content, as MCP shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Text for the model.
    Text(String),
    /// An image: raw bytes and their media type (`image/png`).
    Image {
        /// The bytes.
        data: Vec<u8>,
        /// The media type.
        mime_type: String,
    },
    /// A sound: raw bytes and their media type (`audio/wav`).
    Audio {
        /// The bytes.
        data: Vec<u8>,
        /// The media type.
        mime_type: String,
    },
    /// A link to a resource the client may fetch.
    ResourceLink(ResourceLink),
    /// A resource carried in the result.
    Resource {
        /// Its absolute URI.
        uri: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// Its contents.
        contents: ResourceContents,
    },
}

/// The contents of an embedded resource.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceContents {
    /// UTF-8 text.
    Text(String),
    /// Binary data.
    Blob(Vec<u8>),
}

/// A link to a resource: its URI and name, and optionally a title, a description, a media
/// type and a size.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceLink {
    /// The absolute URI (with a scheme).
    pub uri: String,
    /// A short programmatic name.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What the resource is.
    pub description: Option<String>,
    /// Its media type.
    pub mime_type: Option<String>,
    /// Its size in bytes.
    pub size: Option<u64>,
}

impl ResourceLink {
    /// A link to `uri` called `name`.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        ResourceLink {
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            size: None,
        }
    }

    /// Sets the title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the media type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets the size in bytes.
    pub fn size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }
}

impl ToolOutput {
    /// An empty output: no structured result, no content.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the structured result to `value` serialized as JSON. A tool that declares an
    /// output schema must set one, valid against it.
    pub fn structured<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Self, ToolError> {
        self.structured = Some(serde_json::to_string(value).map_err(|e| {
            ToolError::Failed(format!("the tool's result is not serializable: {e}"))
        })?);
        Ok(self)
    }

    /// Appends any content block.
    pub fn push(mut self, block: Content) -> Self {
        self.content.push(block);
        self
    }

    /// Appends a text block.
    pub fn text(self, text: impl Into<String>) -> Self {
        self.push(Content::Text(text.into()))
    }

    /// Appends an image.
    pub fn image(self, data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        self.push(Content::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        })
    }

    /// Appends a sound.
    pub fn audio(self, data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        self.push(Content::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        })
    }

    /// Appends a link to a resource.
    pub fn resource_link(self, link: ResourceLink) -> Self {
        self.push(Content::ResourceLink(link))
    }

    /// Appends an embedded text resource.
    pub fn resource_text(
        self,
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        self.push(Content::Resource {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            contents: ResourceContents::Text(text.into()),
        })
    }

    /// Appends an embedded binary resource.
    pub fn resource_blob(
        self,
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        data: impl Into<Vec<u8>>,
    ) -> Self {
        self.push(Content::Resource {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            contents: ResourceContents::Blob(data.into()),
        })
    }

    /// The structured result, parsed (for tests).
    pub fn structured_value(&self) -> Option<Value> {
        self.structured
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
    }

    /// The structured result's JSON text.
    pub fn structured_text(&self) -> Option<&str> {
        self.structured.as_deref()
    }

    /// The content blocks, in order.
    pub fn content(&self) -> &[Content] {
        &self.content
    }
}

/// What a typed tool handler may return: any serializable value (the structured result,
/// shown to clients as its JSON text) or a [`ToolOutput`].
pub trait IntoToolOutput {
    /// The output, or why it cannot be produced.
    fn into_tool_output(self) -> Result<ToolOutput, ToolError>;
}

impl<T: Serialize> IntoToolOutput for T {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        ToolOutput::new().structured(&self)
    }
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> Result<ToolOutput, ToolError> {
        Ok(self)
    }
}
