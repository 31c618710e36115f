//! One tool call: fill the request, send it through the host's policed outbound HTTP,
//! turn the response into an [`Answer`].
//!
//! An answer may still hold secret values an API echoed back: the caller makes the tool's
//! output of it with [`crate::redact::Redactor::answer`], which takes them out.

use connector_mcp_protocol::client::{self, BodyKind, ClientSession, Failure};
use connector_mcp_protocol::revision;
use connector_sdk::http::{self, HttpError, Request, Response};
use connector_sdk::{Content, ResourceContents, ResourceLink, ToolError};
use declarative_plan::{Backend, HttpRequest, McpCall, Root};
use serde_json::{json, Map, Value};

use crate::render::{RenderError, Scope};

/// Sent when the manifest sets no `User-Agent` (GitHub, among others, refuses requests
/// without one).
const USER_AGENT: &str = concat!("connector-host-declarative/", env!("CARGO_PKG_VERSION"));

/// Adds header `name: value` unless the manifest already set `name` (any case).
fn default_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
        headers.push((name.into(), value.into()));
    }
}

fn render_error(tool: &str, e: RenderError) -> ToolError {
    match e {
        RenderError::Missing(name, Root::Argument) => ToolError::InvalidArguments(format!(
            "`{}` needs a value for `{name}`: pass it as an argument",
            tool
        )),
        RenderError::Missing(name, Root::Agent) => ToolError::Failed(format!(
            "`{}` needs `{name}`, which only a call on behalf of an agent has",
            tool
        )),
        RenderError::Missing(name, _) => ToolError::Failed(format!(
            "`{}` needs `{name}`, which the binding's config does not set: the operator sets it \
             (rebind with the value)",
            tool
        )),
        RenderError::Invalid(why) => ToolError::InvalidArguments(why),
        RenderError::Token(why) => {
            ToolError::Unauthorized(format!("no GitHub installation token: {why}"))
        }
    }
}

fn transport_error(what: &str, e: HttpError) -> ToolError {
    match e {
        HttpError::Denied(why) => ToolError::Failed(format!(
            "{what}: the host refused the request ({why}); the operator's allowed hosts decide"
        )),
        other => ToolError::Failed(format!("{what}: {other}")),
    }
}

/// Runs tool `tool` (its id), which does `backend`, with `scope`.
pub fn run(tool: &str, backend: &Backend, scope: &Scope) -> Result<Answer, ToolError> {
    match backend {
        Backend::Http(request) => run_http(tool, request, scope),
        Backend::Mcp(call) => run_mcp(tool, call, scope),
    }
}

fn run_http(tool: &str, spec: &HttpRequest, scope: &Scope) -> Result<Answer, ToolError> {
    let url = scope
        .render_url(&spec.url, &spec.query)
        .map_err(|e| render_error(tool, e))?;
    let mut request = Request::new(spec.method.clone(), url);
    request.headers = scope
        .render_headers(&spec.headers)
        .map_err(|e| render_error(tool, e))?;
    default_header(&mut request.headers, "user-agent", USER_AGENT);
    if let Some(body) = &spec.body {
        let body = scope.render_body(body).map_err(|e| render_error(tool, e))?;
        if let Some(body) = body {
            default_header(&mut request.headers, "content-type", "application/json");
            request.body = serde_json::to_vec(&body)
                .map_err(|e| ToolError::Failed(format!("could not encode the body: {e}")))?;
        }
    }
    let response = http::request(request).map_err(|e| transport_error(tool, e))?;
    http_output(response)
}

/// What a call got back, with any secret an API echoed still in it: the caller makes the
/// tool's output of it with [`Redactor::answer`](crate::redact::Redactor::answer). The
/// structured result stays a [`Value`] until then, so it is parsed once and serialized
/// once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The structured result.
    pub structured: Option<Value>,
    /// The content blocks.
    pub content: Vec<Content>,
}

impl Answer {
    fn structured(value: Value) -> Self {
        Answer {
            structured: Some(value),
            content: Vec::new(),
        }
    }
}

/// A tool result from an HTTP response.
pub fn http_output(response: Response) -> Result<Answer, ToolError> {
    if !response.is_success() {
        // Cut after redaction, by `Redactor::error`.
        let message = format!("HTTP {}: {}", response.status, response.text());
        return Err(if matches!(response.status, 401 | 403) {
            ToolError::Unauthorized(message)
        } else {
            ToolError::Failed(message)
        });
    }
    let is_json = response.header("content-type").is_some_and(|t| {
        let t = t
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        t == "application/json" || t.ends_with("+json")
    });
    if is_json {
        if let Ok(value) = serde_json::from_slice::<Value>(&response.body) {
            return Ok(Answer::structured(value));
        }
    }
    if response.body.is_empty() {
        return Ok(Answer::structured(json!({ "status": response.status })));
    }
    Ok(Answer {
        structured: None,
        content: vec![Content::Text(response.text().into_owned())],
    })
}

/// A Streamable HTTP session with a remote MCP server, for one call.
struct McpSession {
    url: String,
    headers: Vec<(String, String)>,
    mcp: ClientSession,
}

impl McpSession {
    fn post(&mut self, message: &Value) -> Result<Response, ToolError> {
        let mut request = Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", client::ACCEPT);
        request.headers.extend(self.headers.iter().cloned());
        for (name, value) in self.mcp.headers() {
            request = request.header(name, value);
        }
        let request = request
            .json(message)
            .map_err(|e| ToolError::Failed(format!("could not encode an MCP request: {e}")))?;
        http::request(request).map_err(|e| transport_error("the MCP server", e))
    }

    /// Sends a request and returns its JSON-RPC result.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, ToolError> {
        let (id, message) = self.mcp.request(method, params);
        self.exchange(method, id, &message)
    }

    /// Sends request `id` (`message`) and returns its JSON-RPC result.
    fn exchange(&mut self, method: &str, id: u64, message: &Value) -> Result<Value, ToolError> {
        let response = self.post(message)?;
        if !response.is_success() {
            let message = format!(
                "the MCP server answered `{method}` with HTTP {}: {}",
                response.status,
                response.text()
            );
            return Err(if matches!(response.status, 401 | 403) {
                ToolError::Unauthorized(message)
            } else {
                ToolError::Failed(message)
            });
        }
        self.mcp
            .adopt_session_id(response.header(revision::SESSION_HEADER));
        let kind = BodyKind::of(response.header("content-type").unwrap_or(""));
        // Anything but an event stream is read as JSON (servers that omit the type).
        let kind = if kind == BodyKind::EventStream {
            kind
        } else {
            BodyKind::Json
        };
        let answer = client::response_in(kind, &response.body, id).ok_or_else(|| {
            ToolError::Failed(format!(
                "the MCP server sent no answer to `{method}` (request {id})"
            ))
        })?;
        client::outcome(answer).map_err(|failure| match failure {
            Failure::Error { message, .. } => ToolError::Failed(format!(
                "the MCP server refused `{method}`: {}",
                if message.is_empty() {
                    "no message"
                } else {
                    &message
                }
            )),
            Failure::Malformed => {
                ToolError::Failed(format!("the MCP answer to `{method}` has no result"))
            }
        })
    }

    fn close(&mut self) {
        if !self.mcp.has_session_id() {
            return;
        }
        let mut request = Request::delete(self.url.clone());
        for (name, value) in self.mcp.headers() {
            request = request.header(name, value);
        }
        self.mcp.end();
        request.headers.extend(self.headers.iter().cloned());
        // The session ends with this call either way; a server that keeps it is not our
        // failure to report.
        let _ = http::request(request);
    }
}

fn run_mcp(tool: &str, call: &McpCall, scope: &Scope) -> Result<Answer, ToolError> {
    let url = scope.render(&call.url).map_err(|e| render_error(tool, e))?;
    let mut headers = scope
        .render_headers(&call.headers)
        .map_err(|e| render_error(tool, e))?;
    default_header(&mut headers, "user-agent", USER_AGENT);
    let mut arguments = Map::new();
    for (key, value) in scope.arguments {
        let forwarded = call
            .forward
            .as_ref()
            .is_none_or(|names| names.contains(key));
        if forwarded {
            arguments.insert(key.clone(), value.clone());
        }
    }
    let mut session = McpSession {
        url,
        headers,
        mcp: ClientSession::new(),
    };
    let result = (|| {
        let (id, message) = session
            .mcp
            .initialize("connector-host-declarative", env!("CARGO_PKG_VERSION"));
        let init = session.exchange("initialize", id, &message)?;
        session.mcp.adopt_initialize(&init);
        let initialized =
            session.post(&ClientSession::notification("notifications/initialized"))?;
        if !initialized.is_success() {
            return Err(ToolError::Failed(format!(
                "the MCP server refused `notifications/initialized` with HTTP {}",
                initialized.status
            )));
        }
        session.request(
            "tools/call",
            json!({"name": call.tool, "arguments": arguments}),
        )
    })();
    session.close();
    mcp_output(result?)
}

/// A tool result from an MCP `CallToolResult`.
pub fn mcp_output(result: Value) -> Result<Answer, ToolError> {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text: Vec<&str> = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        return Err(ToolError::Failed(if text.is_empty() {
            "the MCP tool failed without saying why".to_owned()
        } else {
            text.join("\n")
        }));
    }
    Ok(Answer {
        structured: result.get("structuredContent").cloned(),
        content: blocks.iter().filter_map(mcp_block).collect(),
    })
}

fn mcp_block(block: &Value) -> Option<Content> {
    let s = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
    let bytes = |key: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(block.get(key)?.as_str()?)
            .ok()
    };
    Some(match block.get("type")?.as_str()? {
        "text" => Content::Text(s("text")?),
        "image" => Content::Image {
            data: bytes("data")?,
            mime_type: s("mimeType")?,
        },
        "audio" => Content::Audio {
            data: bytes("data")?,
            mime_type: s("mimeType")?,
        },
        "resource_link" => {
            let mut link = ResourceLink::new(s("uri")?, s("name")?);
            link.title = s("title");
            link.description = s("description");
            link.mime_type = s("mimeType");
            link.size = block.get("size").and_then(Value::as_u64);
            Content::ResourceLink(link)
        }
        "resource" => {
            let resource = block.get("resource")?;
            let r = |key: &str| resource.get(key).and_then(Value::as_str).map(str::to_owned);
            let contents = match (r("text"), r("blob")) {
                (Some(text), _) => ResourceContents::Text(text),
                (None, Some(blob)) => {
                    use base64::Engine as _;
                    ResourceContents::Blob(
                        base64::engine::general_purpose::STANDARD
                            .decode(blob)
                            .ok()?,
                    )
                }
                (None, None) => return None,
            };
            Content::Resource {
                uri: r("uri")?,
                mime_type: r("mimeType"),
                contents,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::{Redactor, ERROR_EXCERPT_BYTES};

    fn response(status: u16, content_type: &str, body: &str) -> Response {
        Response {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn responses_become_results_or_errors() {
        let out = http_output(response(
            200,
            "application/json; charset=utf-8",
            "{\"a\":1}",
        ))
        .unwrap();
        assert_eq!(out.structured, Some(json!({"a": 1})));
        let out = http_output(response(200, "text/plain", "hello")).unwrap();
        assert_eq!(out.content, [Content::Text("hello".into())]);
        assert_eq!(out.structured, None);
        let out = http_output(response(204, "text/plain", "")).unwrap();
        assert_eq!(out.structured, Some(json!({"status": 204})));
        assert_eq!(
            http_output(response(404, "text/plain", "no such file")).unwrap_err(),
            ToolError::Failed("HTTP 404: no such file".into())
        );
        assert!(matches!(
            http_output(response(401, "text/plain", "bad token")),
            Err(ToolError::Unauthorized(_))
        ));
        let long = "x".repeat(5000);
        let Err(e) = http_output(response(500, "text/plain", &long)) else {
            panic!("a 500 is a failure");
        };
        let ToolError::Failed(m) = Redactor::default().error(e) else {
            panic!("stays a failure");
        };
        assert!(m.len() < ERROR_EXCERPT_BYTES + 32, "{}", m.len());
    }

    #[test]
    fn mcp_results_map_to_tool_results() {
        let out = mcp_output(json!({
            "content": [{"type": "text", "text": "3"}, {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
            "structuredContent": {"sum": 3}
        }))
        .unwrap();
        assert_eq!(out.structured, Some(json!({"sum": 3})));
        assert_eq!(out.content.len(), 2);
        assert_eq!(
            mcp_output(json!({"content": [{"type": "text", "text": "boom"}], "isError": true})),
            Err(ToolError::Failed("boom".into()))
        );
    }
}
