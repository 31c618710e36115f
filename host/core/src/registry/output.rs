//! A guest's tool output checked and converted into the host's [`ToolOutput`]: JSON
//! parses, media types and URIs are well formed, no URI a client could be made to run or
//! read local files with, and binary data base64-encoded once, into MCP's content-block
//! shape.

use base64::Engine as _;
use connector_model::tool_output::{ContentBlock, EmbeddedResource, ResourceContents, ToolOutput};

use connector_runtime::wit;

/// What is wrong with a guest's tool output: the connector's mistake, told to the caller
/// (never host internals). Its [`connector_remote_answer::error_chain`] is the sentence.
#[derive(Debug, thiserror::Error)]
pub enum MalformedOutput {
    /// The structured result does not parse.
    #[error("its structured result is not JSON")]
    NotJson(#[source] serde_json::Error),
    /// One content block is malformed.
    #[error("content block {index}")]
    Block {
        /// Its place in the content, from 0.
        index: usize,
        /// What is wrong with it.
        #[source]
        reason: MalformedBlock,
    },
}

/// What is wrong with one content block of a guest's tool output.
#[derive(Debug, thiserror::Error)]
pub enum MalformedBlock {
    /// A resource link without a name.
    #[error("a resource link needs a name")]
    UnnamedLink,
    /// A media type that is not `type/subtype`.
    #[error("media type {0:?} is not of the form type/subtype")]
    MediaType(String),
    /// A URI of a scheme clients must not be handed ([`REFUSED_SCHEMES`]).
    #[error(
        "{uri:?} is a `{scheme}:` URI, which clients must not be handed (javascript, vbscript, \
         data and file URIs could run script or read local files); use an https: URI or \
         a scheme of the connector's own instead"
    )]
    RefusedScheme {
        /// The URI, cut to a quotable length.
        uri: String,
        /// Its scheme as a browser reads it.
        scheme: String,
    },
    /// Not a scheme, a colon and no whitespace.
    #[error("{0:?} is not an absolute URI (a scheme, then `:`)")]
    NotAbsolute(String),
}

/// Checks and converts what a guest returned.
pub fn from_guest(output: wit::ToolOutput) -> Result<ToolOutput, MalformedOutput> {
    let structured = match output.structured {
        None => None,
        Some(text) => Some(serde_json::from_str(&text).map_err(MalformedOutput::NotJson)?),
    };
    let content = output
        .content
        .into_iter()
        .enumerate()
        .map(|(index, block)| {
            block_from_guest(block).map_err(|reason| MalformedOutput::Block { index, reason })
        })
        .collect::<Result<_, _>>()?;
    Ok(ToolOutput {
        structured,
        content,
    })
}

/// Most characters of a guest's value quoted in an error.
const QUOTED_CHARS: usize = 200;

/// A guest's value cut to [`QUOTED_CHARS`], for an error.
fn quoted(text: &str) -> String {
    connector_model::ids::truncate(text, QUOTED_CHARS)
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn block_from_guest(block: wit::ContentBlock) -> Result<ContentBlock, MalformedBlock> {
    Ok(match block {
        wit::ContentBlock::Text(text) => ContentBlock::Text { text },
        wit::ContentBlock::Image(m) => ContentBlock::Image {
            mime_type: media_type(m.mime_type)?,
            data: base64(&m.data),
        },
        wit::ContentBlock::Audio(m) => ContentBlock::Audio {
            mime_type: media_type(m.mime_type)?,
            data: base64(&m.data),
        },
        wit::ContentBlock::ResourceLink(l) => {
            if l.name.is_empty() {
                return Err(MalformedBlock::UnnamedLink);
            }
            ContentBlock::ResourceLink {
                uri: uri(l.uri)?,
                name: l.name,
                title: l.title,
                description: l.description,
                mime_type: l.mime_type.map(media_type).transpose()?,
                size: l.size,
            }
        }
        wit::ContentBlock::Resource(r) => ContentBlock::Resource {
            resource: EmbeddedResource {
                uri: uri(r.uri)?,
                mime_type: r.mime_type.map(media_type).transpose()?,
                contents: match r.contents {
                    wit::ResourceContents::Text(t) => ResourceContents::Text(t),
                    wit::ResourceContents::Blob(b) => ResourceContents::Blob(base64(&b)),
                },
            },
        },
    })
}

/// `type/subtype` (RFC 6838 restricted names), parameters allowed after `;`.
fn media_type(text: String) -> Result<String, MalformedBlock> {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.len() <= 127
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let essence = text.split(';').next().unwrap_or_default();
    match essence.split_once('/') {
        Some((t, s)) if is_name(t) && is_name(s) && !text.chars().any(char::is_control) => Ok(text),
        _ => Err(MalformedBlock::MediaType(quoted(&text))),
    }
}

/// Schemes a client must never be handed in a resource link or embedded resource: a
/// `javascript:` or `vbscript:` URI runs script where a client renders it as a link,
/// `data:` carries a whole document (a page with script) under the client's origin, and
/// `file:` reads the machine the client runs on.
const REFUSED_SCHEMES: [&str; 4] = ["javascript", "vbscript", "data", "file"];

/// The scheme of `text` as a browser reads it: leading and trailing C0 controls and
/// spaces trimmed, tabs and newlines anywhere removed (WHATWG URL parsing), lower case.
fn scheme_as_browsers_read(text: &str) -> Option<String> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let (scheme, _) = trimmed.split_once(':')?;
    Some(
        scheme
            .chars()
            .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
            .collect::<String>()
            .to_ascii_lowercase(),
    )
}

/// An absolute URI: a scheme (`[A-Za-z][A-Za-z0-9+.-]*`), a colon, and no whitespace or
/// control characters; never one of [`REFUSED_SCHEMES`] (CONTRACT §5).
fn uri(text: String) -> Result<String, MalformedBlock> {
    if let Some(scheme) =
        scheme_as_browsers_read(&text).filter(|scheme| REFUSED_SCHEMES.contains(&scheme.as_str()))
    {
        return Err(MalformedBlock::RefusedScheme {
            uri: quoted(&text),
            scheme,
        });
    }
    let scheme_ok = text.split_once(':').is_some_and(|(scheme, _)| {
        let mut b = scheme.bytes();
        b.next().is_some_and(|c| c.is_ascii_alphabetic())
            && b.all(|c| c.is_ascii_alphanumeric() || b"+.-".contains(&c))
    });
    if scheme_ok && !text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Ok(text)
    } else {
        Err(MalformedBlock::NotAbsolute(quoted(&text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guest(structured: Option<&str>, content: Vec<wit::ContentBlock>) -> wit::ToolOutput {
        wit::ToolOutput {
            structured: structured.map(str::to_string),
            content,
        }
    }

    #[test]
    fn blocks_serialise_as_mcp_content() {
        let out = from_guest(guest(
            Some(r#"{"n":1}"#),
            vec![
                wit::ContentBlock::Text("hi".into()),
                wit::ContentBlock::Image(wit::Media {
                    data: vec![1, 2, 3],
                    mime_type: "image/png".into(),
                }),
                wit::ContentBlock::Audio(wit::Media {
                    data: vec![0xff],
                    mime_type: "audio/wav".into(),
                }),
                wit::ContentBlock::ResourceLink(wit::ResourceLink {
                    uri: "https://example.com/a".into(),
                    name: "a".into(),
                    title: None,
                    description: Some("the a".into()),
                    mime_type: Some("text/plain; charset=utf-8".into()),
                    size: Some(9),
                }),
                wit::ContentBlock::Resource(wit::EmbeddedResource {
                    uri: "test://r".into(),
                    mime_type: None,
                    contents: wit::ResourceContents::Blob(vec![0, 1]),
                }),
            ],
        ))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!({
                "result": {"n": 1},
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "data": "AQID", "mimeType": "image/png"},
                    {"type": "audio", "data": "/w==", "mimeType": "audio/wav"},
                    {"type": "resource_link", "uri": "https://example.com/a", "name": "a", "description": "the a", "mimeType": "text/plain; charset=utf-8", "size": 9},
                    {"type": "resource", "resource": {"uri": "test://r", "blob": "AAE="}},
                ]
            })
        );
    }

    #[test]
    fn json_only_output_keeps_the_old_answer() {
        let out = from_guest(guest(Some("[1,2]"), vec![])).unwrap();
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!({"result": [1, 2]})
        );
        let none = from_guest(guest(None, vec![wit::ContentBlock::Text("x".into())])).unwrap();
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            json!({"result": null, "content": [{"type": "text", "text": "x"}]})
        );
    }

    #[test]
    fn malformed_output_is_refused_with_the_reason() {
        let bad = |content: wit::ContentBlock| {
            let refused = from_guest(guest(
                None,
                vec![wit::ContentBlock::Text("ok".into()), content],
            ))
            .unwrap_err();
            connector_remote_answer::error_chain(&refused)
        };
        let media = |t: &str| wit::Media {
            data: vec![],
            mime_type: t.into(),
        };
        assert!(
            bad(wit::ContentBlock::Image(media("png"))).starts_with("content block 1: media type")
        );
        assert!(bad(wit::ContentBlock::Audio(media("audio/"))).contains("type/subtype"));
        let link = |uri: &str, name: &str| {
            wit::ContentBlock::ResourceLink(wit::ResourceLink {
                uri: uri.into(),
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
                size: None,
            })
        };
        assert!(bad(link("relative/path", "x")).contains("not an absolute URI"));
        assert!(bad(link("https://a b", "x")).contains("not an absolute URI"));
        assert!(bad(link("https://a", "")).contains("needs a name"));
        for refused in [
            "javascript:alert(1)",
            "JAVASCRIPT:alert(1)",
            "vbScript:msgbox(1)",
            "data:text/html,<script>alert(1)</script>",
            "file:///etc/passwd",
            " \u{1}java\tscript:alert(1)",
            "jav\nascript:alert(1)",
        ] {
            let reason = bad(link(refused, "x"));
            assert!(
                reason.starts_with("content block 1: ") && reason.contains("must not be handed"),
                "{refused:?}: {reason}"
            );
            let embedded = bad(wit::ContentBlock::Resource(wit::EmbeddedResource {
                uri: refused.into(),
                mime_type: None,
                contents: wit::ResourceContents::Text("x".into()),
            }));
            assert!(
                embedded.contains("must not be handed"),
                "{refused:?}: {embedded}"
            );
        }
        for allowed in [
            "https://a/javascript:x",
            "javascripts:x",
            "urn:data:x",
            "files:x",
        ] {
            assert!(
                from_guest(guest(None, vec![link(allowed, "x")])).is_ok(),
                "{allowed}"
            );
        }
        let not_json = from_guest(guest(Some("{nope"), vec![])).unwrap_err();
        assert!(connector_remote_answer::error_chain(&not_json)
            .starts_with("its structured result is not JSON: key must be a string"));
    }
}
